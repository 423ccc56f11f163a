//! GZIP and ZLIB streams, one per file as TensorFlow writes them.
//!
//! Reading is strict where TensorFlow is lenient: a stream that ends before
//! its end marker, or (ZLIB) has bytes after it, is reported, never taken as
//! a clean end of file. GZIP files with several members are read whole.

use std::io::{self, Read, Write};

use flate2::{Decompress, FlushDecompress, Status};

use crate::error::{Error, Result};

/// How a file's bytes are compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zlib,
}

impl Compression {
    /// Parses a compression name case-insensitively. `Ok(None)` means "auto".
    pub fn parse(name: &str) -> Result<Option<Compression>> {
        match name.to_ascii_lowercase().as_str() {
            "auto" => Ok(None),
            "" | "none" => Ok(Some(Compression::None)),
            "gzip" | "gz" => Ok(Some(Compression::Gzip)),
            "zlib" => Ok(Some(Compression::Zlib)),
            _ => Err(Error::InvalidArgument(format!(
                "unknown compression {name:?}: expected \"auto\", None, \"gzip\" or \"zlib\""
            ))),
        }
    }

    /// The name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "uncompressed",
            Compression::Gzip => "GZIP",
            Compression::Zlib => "ZLIB",
        }
    }

    /// Guesses the compression of a file from its first bytes (up to 12); the
    /// compression its name's suffix suggests decides only when the bytes
    /// match no format (an empty or damaged file).
    ///
    /// For TFRecord files a valid record header wins over everything: a record
    /// whose length happens to start with the GZIP magic would otherwise be
    /// misread. OFRecord headers carry no CRC, so there (`tfrecord = false`)
    /// only the suffix counts: an OFRecord length can look like any magic.
    pub fn detect(prefix: &[u8], suffix_hint: Option<Compression>, tfrecord: bool) -> Compression {
        if !tfrecord {
            return suffix_hint.unwrap_or(Compression::None);
        }
        if crate::frame::is_tfrecord_header(prefix) {
            return Compression::None;
        }
        if prefix.len() >= 3 && prefix[0] == 0x1f && prefix[1] == 0x8b && prefix[2] == 8 {
            return Compression::Gzip;
        }
        let zlib_header = prefix.len() >= 2
            && prefix[0] & 0x0f == 8
            && prefix[0] >> 4 <= 7
            && (u16::from(prefix[0]) << 8 | u16::from(prefix[1])) % 31 == 0;
        // Content wins over the name: a ZLIB stream saved as `.gz` is still ZLIB.
        if zlib_header {
            return Compression::Zlib;
        }
        suffix_hint.unwrap_or(Compression::None)
    }
}

/// Why a compressed stream stopped before a clean end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamFault {
    /// The input ended before the stream's end marker.
    Truncated(String),
    /// The input is not a valid stream, or has bytes after the end.
    Corrupt(String),
}

/// A [`Read`] over the decompressed bytes of a GZIP or ZLIB stream.
///
/// Decoding problems are not I/O errors: they are kept in [`Inflater::fault`]
/// and reading reports end of data, so the framing layer can say which record
/// they cut short.
pub struct Inflater<R: Read> {
    inner: R,
    kind: Compression,
    z: Decompress,
    input: Vec<u8>,
    start: usize,
    end: usize,
    input_done: bool,
    member_done: bool,
    consumed: u64,
    fault: Option<StreamFault>,
}

const INPUT_CHUNK: usize = 256 * 1024;

impl<R: Read> Inflater<R> {
    pub fn new(inner: R, kind: Compression) -> Self {
        assert!(
            kind != Compression::None,
            "Inflater needs a compressed stream"
        );
        Inflater {
            inner,
            kind,
            z: Self::decoder(kind),
            input: vec![0; INPUT_CHUNK],
            start: 0,
            end: 0,
            input_done: false,
            member_done: false,
            consumed: 0,
            fault: None,
        }
    }

    fn decoder(kind: Compression) -> Decompress {
        match kind {
            Compression::Gzip => Decompress::new_gzip(15),
            _ => Decompress::new(true),
        }
    }

    /// Why decoding stopped early, if it did.
    pub fn fault(&self) -> Option<&StreamFault> {
        self.fault.as_ref()
    }

    /// Makes sure some input is buffered unless the input is exhausted.
    fn refill(&mut self) -> io::Result<()> {
        if self.start == self.end && !self.input_done {
            self.start = 0;
            self.end = 0;
            loop {
                match self.inner.read(&mut self.input) {
                    Ok(0) => self.input_done = true,
                    Ok(n) => self.end = n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
                break;
            }
        }
        Ok(())
    }

    fn fail(&mut self, fault: StreamFault) -> io::Result<usize> {
        self.fault = Some(fault);
        Ok(0)
    }
}

impl<R: Read> Read for Inflater<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.fault.is_some() || out.is_empty() {
            return Ok(0);
        }
        loop {
            self.refill()?;
            if self.member_done {
                if self.start == self.end {
                    return Ok(0); // clean end: the last stream ended with the input
                }
                if self.kind == Compression::Zlib {
                    return self.fail(StreamFault::Corrupt(format!(
                        "data after the end of the ZLIB stream (at compressed byte {})",
                        self.consumed
                    )));
                }
                // Another GZIP member follows, as in concatenated .gz files.
                self.z = Self::decoder(self.kind);
                self.member_done = false;
            }
            let (in_before, out_before) = (self.z.total_in(), self.z.total_out());
            let status = self.z.decompress(
                &self.input[self.start..self.end],
                out,
                FlushDecompress::None,
            );
            let used = (self.z.total_in() - in_before) as usize;
            let produced = (self.z.total_out() - out_before) as usize;
            self.start += used;
            self.consumed += used as u64;
            match status {
                Err(e) => {
                    // Bytes decoded before the error are delivered first: the
                    // records they hold have CRCs of their own to vouch for them.
                    self.fault = Some(StreamFault::Corrupt(format!(
                        "{} stream is corrupt at compressed byte {}: {e}",
                        self.kind.name(),
                        self.consumed
                    )));
                    return Ok(produced);
                }
                Ok(Status::StreamEnd) => {
                    self.member_done = true;
                    if produced > 0 {
                        return Ok(produced);
                    }
                }
                Ok(Status::Ok) | Ok(Status::BufError) => {
                    if produced > 0 {
                        return Ok(produced);
                    }
                    if used == 0 && self.start == self.end && self.input_done {
                        return self.fail(StreamFault::Truncated(format!(
                            "the {} stream ends before its end marker (after {} compressed bytes): \
                             the file is unfinished, and may still be being written \
                             (rk.tf_record_iterator reads the records written so far; \
                             TFRecordReader(path, follow=True) follows a growing uncompressed file)",
                            self.kind.name(),
                            self.consumed
                        )));
                    }
                }
            }
        }
    }
}

/// Input bytes per deflate block. Each block is compressed on its own, on
/// any thread, and the blocks are joined into one stream, as pigz does: every
/// block but the last ends with a sync flush (byte-aligned, not final), so the
/// joined blocks are one valid deflate stream, and one header and one trailer
/// (the checksums of the blocks combined) frame it. Block boundaries depend on
/// the input and the `flush` calls alone, so the file is the same for every
/// thread count. Without the previous block's history, a block compresses a
/// little worse than one continuous stream would (0.2% on the tutorial's 1 M
/// rows; the tests allow 1%).
const BLOCK: usize = 1 << 20;

/// How a deflate stream is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Gzip,
    Zlib,
}

impl Framing {
    /// The checksum of no bytes.
    fn empty_check(self) -> u32 {
        match self {
            Framing::Gzip => 0,
            Framing::Zlib => 1,
        }
    }

    fn check(self, data: &[u8]) -> u32 {
        match self {
            Framing::Gzip => zlib_rs::crc32::crc32(0, data),
            Framing::Zlib => zlib_rs::adler32::adler32(1, data),
        }
    }

    /// The checksum of `a`'s bytes followed by `len_b` bytes whose checksum is `b`.
    fn combine(self, a: u32, b: u32, len_b: u64) -> u32 {
        match self {
            Framing::Gzip => zlib_rs::crc32::crc32_combine(a, b, len_b),
            Framing::Zlib => zlib_rs::adler32::adler32_combine(a, b, len_b),
        }
    }

    fn header(self) -> &'static [u8] {
        match self {
            // Deflate, no flags, no time, default level, unknown system: as flate2 writes it.
            Framing::Gzip => &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff],
            // 32 KB window, default level, the header's own check bits.
            Framing::Zlib => &[0x78, 0x9c],
        }
    }

    fn trailer(self, check: u32, total: u64) -> Vec<u8> {
        match self {
            Framing::Gzip => [check.to_le_bytes(), (total as u32).to_le_bytes()].concat(),
            Framing::Zlib => check.to_be_bytes().to_vec(),
        }
    }
}

/// How deflate compresses: zlib's parameters, as TensorFlow's `TFRecordOptions`
/// (and zlib's `deflateInit2`) name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeflateOptions {
    /// 0 (stored) to 9 (smallest); -1 is zlib's default, 6.
    pub level: i32,
    /// The window's size, 2^8 to 2^15 bytes.
    pub window_bits: u8,
    /// Memory for the compressor's state, 1 to 9.
    pub mem_level: u8,
    /// 0 default, 1 filtered, 2 Huffman only, 3 run lengths, 4 fixed codes.
    pub strategy: u8,
}

impl Default for DeflateOptions {
    fn default() -> Self {
        DeflateOptions {
            level: -1,
            window_bits: 15,
            mem_level: 8,
            strategy: 0,
        }
    }
}

impl DeflateOptions {
    /// The options checked: each in zlib's range, else the error names it.
    pub fn checked(self) -> Result<Self> {
        let bad = |name: &str, value: i64, range: &str| {
            Err(Error::InvalidArgument(format!(
                "{name} must be {range}, as zlib takes it, not {value}"
            )))
        };
        if !(-1..=9).contains(&self.level) {
            return bad(
                "compression_level",
                self.level.into(),
                "0 to 9 (or -1, the default)",
            );
        }
        if !(8..=15).contains(&self.window_bits) {
            return bad("window_bits", self.window_bits.into(), "8 to 15");
        }
        if !(1..=9).contains(&self.mem_level) {
            return bad("mem_level", self.mem_level.into(), "1 to 9");
        }
        if self.strategy > 4 {
            return bad("compression_strategy", self.strategy.into(), "0 to 4");
        }
        Ok(self)
    }

    fn config(self) -> zlib_rs::DeflateConfig {
        let strategy = match self.strategy {
            1 => zlib_rs::Strategy::Filtered,
            2 => zlib_rs::Strategy::HuffmanOnly,
            3 => zlib_rs::Strategy::Rle,
            4 => zlib_rs::Strategy::Fixed,
            _ => zlib_rs::Strategy::Default,
        };
        zlib_rs::DeflateConfig {
            level: self.level,
            method: zlib_rs::Method::Deflated,
            // Negative: raw deflate; the gzip or zlib framing is written around the
            // blocks. zlib takes 8 only with its own framing, and then uses 9: so here.
            window_bits: -i32::from(self.window_bits.max(9)),
            mem_level: i32::from(self.mem_level),
            strategy,
        }
    }
}

/// Compresses `block` on its own as raw deflate: sync-flushed, or with
/// `last`, the stream's final block. Returns the bytes and their checksum.
fn deflate_block(
    block: &[u8],
    last: bool,
    framing: Framing,
    options: DeflateOptions,
) -> (Vec<u8>, u32) {
    let mut deflater = zlib_rs::Deflate::new_with_config(options.config());
    let flush = if last {
        zlib_rs::DeflateFlush::Finish
    } else {
        zlib_rs::DeflateFlush::SyncFlush
    };
    // Room for the worst case (stored blocks), and a flush marker.
    let mut out = vec![0u8; zlib_rs::compress_bound(block.len()) + 64];
    loop {
        let (read, written) = (deflater.total_in() as usize, deflater.total_out() as usize);
        let status = deflater
            .compress(&block[read..], &mut out[written..], flush)
            .expect("deflate takes any input");
        let done = deflater.total_in() as usize == block.len();
        let room_left = (deflater.total_out() as usize) < out.len();
        // Done when the input is in and the flush has fully come out (room was left).
        if done && (status == zlib_rs::Status::StreamEnd || (!last && room_left)) {
            break;
        }
        if !room_left {
            out.resize(out.len() * 2, 0);
        }
    }
    out.truncate(deflater.total_out() as usize);
    (out, framing.check(block))
}

/// A deflate stream in gzip or zlib framing, compressed a block at a time,
/// the blocks of a batch on every core.
pub struct BlockDeflater<W: Write> {
    inner: W,
    framing: Framing,
    options: DeflateOptions,
    /// Input not yet compressed: less than a batch of blocks.
    pending: Vec<u8>,
    check: u32,
    total: u64,
    header_written: bool,
}

impl<W: Write> BlockDeflater<W> {
    fn new(inner: W, framing: Framing, options: DeflateOptions) -> Self {
        BlockDeflater {
            inner,
            framing,
            options,
            pending: Vec::new(),
            check: framing.empty_check(),
            total: 0,
            header_written: false,
        }
    }

    /// Input held before a batch is compressed: two blocks for each thread,
    /// so that threads taking blocks in turn even out; at most 64 MiB however
    /// many cores there are.
    fn batch() -> usize {
        2 * BLOCK * crate::threads::available().min(32)
    }

    /// Compresses the pending input's first `len` bytes (whole blocks, but
    /// for the stream's end) and writes them; with `last`, ends the stream.
    fn compress(&mut self, len: usize, last: bool) -> io::Result<()> {
        let (framing, options) = (self.framing, self.options);
        let blocks: Vec<&[u8]> = if len == 0 {
            vec![&[][..]] // only to end the stream
        } else {
            self.pending[..len].chunks(BLOCK).collect()
        };
        let count = blocks.len();
        let threads = crate::threads::available().min(count);
        let compressed = crate::threads::map_in_turn(&blocks, threads, |i, block| {
            deflate_block(block, last && i + 1 == count, framing, options)
        });
        if !self.header_written {
            self.inner.write_all(framing.header())?;
            self.header_written = true;
        }
        for (block, (bytes, check)) in blocks.iter().zip(&compressed) {
            self.inner.write_all(bytes)?;
            self.check = framing.combine(self.check, *check, block.len() as u64);
            self.total += block.len() as u64;
        }
        self.pending.drain(..len);
        if last {
            let trailer = framing.trailer(self.check, self.total);
            self.inner.write_all(&trailer)?;
        }
        Ok(())
    }

    /// Ends the stream and returns the inner writer, unflushed.
    fn finish(mut self) -> io::Result<W> {
        self.compress(self.pending.len(), true)?;
        Ok(self.inner)
    }
}

impl<W: Write> Write for BlockDeflater<W> {
    /// Takes at most what fills the batch, so memory stays one batch however large `buf` is.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let batch = Self::batch();
        let taken = buf.len().min(batch - self.pending.len().min(batch - 1));
        self.pending.extend_from_slice(&buf[..taken]);
        if self.pending.len() >= batch {
            let whole = self.pending.len() / BLOCK * BLOCK;
            self.compress(whole, false)?;
        }
        Ok(taken)
    }

    /// Compresses what is pending (sync-flushed), so that every byte written
    /// so far can be decoded from what is on disk.
    fn flush(&mut self) -> io::Result<()> {
        if !self.pending.is_empty() {
            self.compress(self.pending.len(), false)?;
        }
        self.inner.flush()
    }
}

/// A writer that compresses everything written to it into one stream.
pub enum Encoder<W: Write> {
    Plain(W),
    Deflate(BlockDeflater<W>),
}

impl<W: Write> Encoder<W> {
    pub fn new(inner: W, kind: Compression) -> Self {
        Encoder::with_options(inner, kind, DeflateOptions::default())
    }

    /// As [`Encoder::new`], compressing with `options` (ignored without compression).
    pub fn with_options(inner: W, kind: Compression, options: DeflateOptions) -> Self {
        match kind {
            Compression::None => Encoder::Plain(inner),
            Compression::Gzip => {
                Encoder::Deflate(BlockDeflater::new(inner, Framing::Gzip, options))
            }
            Compression::Zlib => {
                Encoder::Deflate(BlockDeflater::new(inner, Framing::Zlib, options))
            }
        }
    }

    /// Ends the compressed stream and returns the inner writer, flushed.
    pub fn finish(self) -> io::Result<W> {
        let mut inner = match self {
            Encoder::Plain(w) => w,
            Encoder::Deflate(d) => d.finish()?,
        };
        inner.flush()?;
        Ok(inner)
    }
}

impl<W: Write> Write for Encoder<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Encoder::Plain(w) => w.write(buf),
            Encoder::Deflate(d) => d.write(buf),
        }
    }

    /// For compressed streams: a sync flush point, so every byte written so
    /// far can be decoded from what is on disk.
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Encoder::Plain(w) => w.flush(),
            Encoder::Deflate(d) => d.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compress(kind: Compression, data: &[u8]) -> Vec<u8> {
        let mut e = Encoder::new(Vec::new(), kind);
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn inflate(kind: Compression, data: &[u8]) -> (Vec<u8>, Option<StreamFault>) {
        let mut r = Inflater::new(data, kind);
        let mut out = Vec::new();
        r.read_to_end(&mut out).unwrap();
        (out, r.fault().cloned())
    }

    #[test]
    fn round_trips() {
        let data: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for kind in [Compression::Gzip, Compression::Zlib] {
            let (out, fault) = inflate(kind, &compress(kind, &data));
            assert_eq!(fault, None);
            assert_eq!(out, data);
        }
    }

    /// 3.5 blocks of text-like bytes: compressible, but not trivially.
    fn several_blocks() -> Vec<u8> {
        let words: [&[u8]; 6] = [b"cat ", b"dog ", b"chicken ", b"horse ", b"goat ", b"\n"];
        let mut state = 12345u64;
        let mut data = Vec::new();
        while data.len() < BLOCK * 7 / 2 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            data.extend_from_slice(words[(state >> 59) as usize % words.len()]);
            data.extend_from_slice(&(state >> 40).to_le_bytes()[..2]);
        }
        data
    }

    #[test]
    fn blocks_deflated_on_threads_make_one_stream_the_same_for_every_thread_count() {
        let data = several_blocks();
        for kind in [Compression::Gzip, Compression::Zlib] {
            let outputs: Vec<Vec<u8>> = [1, 2, 3]
                .iter()
                .map(|&threads| {
                    crate::threads::set(Some(threads));
                    let out = compress(kind, &data);
                    crate::threads::set(None);
                    out
                })
                .collect();
            assert!(outputs.iter().all(|o| *o == outputs[0]), "{kind:?}");
            // Our reader, and flate2's own decoders (which check the trailer).
            let (out, fault) = inflate(kind, &outputs[0]);
            assert_eq!((out == data, fault), (true, None));
            let mut decoded = Vec::new();
            match kind {
                Compression::Gzip => flate2::read::GzDecoder::new(&outputs[0][..])
                    .read_to_end(&mut decoded)
                    .unwrap(),
                _ => flate2::read::ZlibDecoder::new(&outputs[0][..])
                    .read_to_end(&mut decoded)
                    .unwrap(),
            };
            assert!(decoded == data, "{kind:?}");
            // The cost of blocks without the history before them.
            let mut whole =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            whole.write_all(&data).unwrap();
            let whole = whole.finish().unwrap().len() as f64;
            assert!(
                (outputs[0].len() as f64) < whole * 1.01,
                "{} against {whole}",
                outputs[0].len()
            );
        }
    }

    #[test]
    fn a_flush_makes_everything_written_so_far_readable() {
        let data = several_blocks();
        for kind in [Compression::Gzip, Compression::Zlib] {
            let mut encoder = Encoder::new(Vec::new(), kind);
            let part = BLOCK + BLOCK / 2; // a block and a half: the half is pending until the flush
            encoder.write_all(&data[..part]).unwrap();
            encoder.flush().unwrap();
            let Encoder::Deflate(d) = &encoder else {
                unreachable!()
            };
            let (out, fault) = inflate(kind, &d.inner);
            assert!(out == data[..part], "{kind:?}");
            assert!(
                matches!(fault, Some(StreamFault::Truncated(_))),
                "{fault:?}"
            );
            encoder.write_all(&data[part..]).unwrap();
            let (out, fault) = inflate(kind, &encoder.finish().unwrap());
            assert_eq!((out == data, fault), (true, None));
        }
    }

    #[test]
    fn empty_streams() {
        for kind in [Compression::Gzip, Compression::Zlib] {
            let (out, fault) = inflate(kind, &compress(kind, b""));
            assert!(out.is_empty());
            assert_eq!(fault, None);
        }
    }

    #[test]
    fn truncation_is_reported_everywhere() {
        let data = vec![7u8; 5000];
        for kind in [Compression::Gzip, Compression::Zlib] {
            let full = compress(kind, &data);
            for cut in 1..full.len() {
                let (_, fault) = inflate(kind, &full[..cut]);
                assert!(
                    fault.is_some(),
                    "{kind:?} cut at {cut} of {} went unnoticed",
                    full.len()
                );
            }
        }
    }

    #[test]
    fn bytes_before_a_corruption_are_delivered() {
        let data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 97).to_le_bytes())
            .collect();
        let mut compressed = compress(Compression::Gzip, &data);
        let n = compressed.len();
        compressed[n - 5] ^= 0xff; // the CRC trailer: detected only at the very end
        let (out, fault) = inflate(Compression::Gzip, &compressed);
        assert!(matches!(fault, Some(StreamFault::Corrupt(_))));
        assert_eq!(
            out, data,
            "everything decoded before the trailer must come through"
        );
    }

    #[test]
    fn gzip_members_concatenate() {
        let mut two = compress(Compression::Gzip, b"hello ");
        two.extend(compress(Compression::Gzip, b"world"));
        assert_eq!(
            inflate(Compression::Gzip, &two),
            (b"hello world".to_vec(), None)
        );
    }

    #[test]
    fn bytes_after_zlib_stream_are_reported() {
        let mut data = compress(Compression::Zlib, b"hello");
        data.extend(b"junk");
        let (out, fault) = inflate(Compression::Zlib, &data);
        assert_eq!(out, b"hello");
        assert!(matches!(fault, Some(StreamFault::Corrupt(_))));
    }

    #[test]
    fn garbage_after_gzip_is_reported() {
        let mut data = compress(Compression::Gzip, b"hello");
        data.extend(b"junk");
        assert!(matches!(
            inflate(Compression::Gzip, &data).1,
            Some(StreamFault::Corrupt(_))
        ));
    }

    #[test]
    fn detects_from_magic_and_suffix() {
        let gz = compress(Compression::Gzip, b"x");
        let zz = compress(Compression::Zlib, b"x");
        assert_eq!(
            Compression::detect(&gz[..12], None, true),
            Compression::Gzip
        );
        assert_eq!(Compression::detect(&zz, None, true), Compression::Zlib);
        assert_eq!(
            Compression::detect(b"", Some(Compression::Gzip), true),
            Compression::Gzip
        );
        // Content wins over a suffix that names another format.
        assert_eq!(
            Compression::detect(&zz, Some(Compression::Gzip), true),
            Compression::Zlib
        );
        assert_eq!(
            Compression::detect(&gz[..12], Some(Compression::Zlib), true),
            Compression::Gzip
        );
        let mut header = 3u64.to_le_bytes().to_vec();
        header.extend(crate::crc::masked_crc32c(&header).to_le_bytes());
        assert_eq!(
            Compression::detect(&header, Some(Compression::Gzip), true),
            Compression::None
        );
    }
}
