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
        if crate::framing::is_tfrecord_header(prefix) {
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
                            "the {} stream ends before its end marker (after {} compressed bytes)",
                            self.kind.name(),
                            self.consumed
                        )));
                    }
                }
            }
        }
    }
}

/// A writer that compresses everything written to it into one stream.
pub enum Encoder<W: Write> {
    Plain(W),
    Gzip(flate2::write::GzEncoder<W>),
    Zlib(flate2::write::ZlibEncoder<W>),
}

impl<W: Write> Encoder<W> {
    pub fn new(inner: W, kind: Compression) -> Self {
        let level = flate2::Compression::default();
        match kind {
            Compression::None => Encoder::Plain(inner),
            Compression::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(inner, level)),
            Compression::Zlib => Encoder::Zlib(flate2::write::ZlibEncoder::new(inner, level)),
        }
    }

    /// Ends the compressed stream and returns the inner writer, flushed.
    pub fn finish(self) -> io::Result<W> {
        let mut inner = match self {
            Encoder::Plain(w) => w,
            Encoder::Gzip(e) => e.finish()?,
            Encoder::Zlib(e) => e.finish()?,
        };
        inner.flush()?;
        Ok(inner)
    }
}

impl<W: Write> Write for Encoder<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Encoder::Plain(w) => w.write(buf),
            Encoder::Gzip(e) => e.write(buf),
            Encoder::Zlib(e) => e.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Encoder::Plain(w) => w.write_all(buf),
            Encoder::Gzip(e) => e.write_all(buf),
            Encoder::Zlib(e) => e.write_all(buf),
        }
    }

    /// For compressed streams: a sync flush point, so every byte written so
    /// far can be decoded from what is on disk.
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Encoder::Plain(w) => w.flush(),
            Encoder::Gzip(e) => e.flush(),
            Encoder::Zlib(e) => e.flush(),
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
