//! Byte windows: the framing layer's view of a file's (decompressed) bytes.
//!
//! A window hands out slices by absolute stream offset. A memory-mapped file
//! is one window over the whole file; a stream (compressed file, pipe, Python
//! file object) keeps a buffer that grows only as data actually arrives, so a
//! length field is never trusted for an allocation.

use std::io::{self, Read};
use std::sync::Arc;

use memmap2::Mmap;

use crate::compression::{Inflater, StreamFault};
use crate::map_guard::Guarded;

/// A source of bytes addressed by absolute offset.
pub trait Window: Send + Sync {
    /// Makes bytes `[pos, pos + want)` available, reading as needed. Returns
    /// how many are available from `pos` (fewer than `want` only at the end).
    fn fill(&mut self, pos: u64, want: u64) -> io::Result<u64>;
    /// Bytes `[pos, pos + len)`, which a previous `fill` made available.
    fn bytes(&self, pos: u64, len: usize) -> &[u8];
    /// Nothing before `pos` will be asked for again.
    fn release(&mut self, pos: u64);
    /// Why the stream ended early, once it has (compressed streams only).
    fn fault(&self) -> Option<StreamFault>;
    /// Every byte of the source at once, where it is mapped whole.
    fn whole(&self) -> Option<&[u8]> {
        None
    }
    /// The mapping behind [`Window::whole`], for threads that read it while
    /// this window is used on.
    fn mapping(&self) -> Option<Arc<Mapping>> {
        None
    }
    /// Where bytes went missing from under a mapping because its file was
    /// truncated while read: what was read since cannot be trusted.
    fn shrunk(&self) -> Option<u64> {
        None
    }
    /// Reads `[pos, pos + len + 4)` without keeping it, for a source that can
    /// be read again from its start; None where it cannot (the caller then
    /// fills as usual). Bytes already held stay held, and the next `fill`
    /// goes on as if nothing had been read.
    fn read_ahead(&mut self, _pos: u64, _len: u64) -> io::Result<Option<Ahead>> {
        Ok(None)
    }
}

/// What [`Window::read_ahead`] found, without keeping it.
pub struct Ahead {
    /// How many of the `len + 4` bytes exist.
    pub available: u64,
    /// CRC-32C of the first `len` bytes (of those available).
    pub crc: u32,
    /// The 4 bytes after them: a TFRecord's data CRC.
    pub tail: [u8; 4],
    /// Why the stream ended early, if it did.
    pub fault: Option<StreamFault>,
}

/// A file's bytes, memory-mapped and guarded against truncation; shared
/// with threads that parse records while the window's owner frames more.
pub struct Mapping {
    /// Declared before `map`: fields drop in order, and the guard must be
    /// gone before the mapping is.
    guard: Guarded,
    map: Mmap,
    /// The file mapped, to learn whether it shrank.
    file: std::fs::File,
}

impl Mapping {
    /// Maps `file` (not empty: mmap refuses a zero-length file), guarded
    /// against truncation, with `advice` on how it will be read. Fails where
    /// the mapping cannot be guarded (see [`crate::map_guard`]): the caller
    /// then reads the file another way.
    pub fn open(file: std::fs::File, advice: memmap2::Advice) -> io::Result<Mapping> {
        // SAFETY: the mapping is read-only and private, and no Rust reference
        // into it outlives the `Mapping`. Another process may still rewrite the
        // file in place while it is mapped, changing bytes under a `&[u8]`:
        // the contract every mmap-based reader (ripgrep, numpy.memmap, LMDB)
        // makes, and record files are written under a temporary name and
        // renamed when complete. Truncation is handled: `map_guard` turns the
        // SIGBUS into zeros plus a flag, and `shrunk` reports it.
        let map = unsafe { Mmap::map(&file)? };
        let guard = Guarded::register(map.as_ptr(), map.len())
            .ok_or_else(|| io::Error::other("the mapping cannot be guarded"))?;
        // Advice is a hint; a kernel that ignores it changes nothing.
        let _ = map.advise(advice);
        Ok(Mapping { guard, map, file })
    }

    /// Where bytes went missing from under the mapping because its file was
    /// truncated while read: what was read since cannot be trusted.
    pub fn shrunk(&self) -> Option<u64> {
        if let Some(at) = self.guard.lost_at() {
            return Some(at);
        }
        // A truncation inside the last page reads as zeros, with no signal.
        match self.file.metadata() {
            Ok(meta) if meta.len() < self.map.len() as u64 => Some(meta.len()),
            _ => None,
        }
    }

    /// Drops the process's copy of the pages of bytes `from..to`, so that a
    /// long read does not keep the whole file in its resident set.
    pub fn release(&self, from: u64, to: u64) {
        // SAFETY: MADV_DONTNEED on a read-only private file mapping only drops
        // the process's copy of clean pages; touching them again re-reads them
        // from the file, so no byte anyone reads changes (memmap2 widens the
        // range to whole pages, which is harmless for the same reason). That
        // holds for slices other threads still read through the mapping: they
        // see the same bytes, faulted in again.
        let _ = unsafe {
            self.map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                from as usize,
                (to - from) as usize,
            )
        };
    }
}

impl std::ops::Deref for Mapping {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.map
    }
}

/// A whole file, memory-mapped, and guarded against truncation.
pub struct MappedWindow {
    map: Option<Arc<Mapping>>,
    len: u64,
    released_pages: u64,
}

/// Consumed pages are dropped from the mapping in steps of this size, so a
/// long read does not keep the whole file in the process's resident set:
/// what a streaming reader holds is its batch plus at most this much. One
/// `madvise` per step costs microseconds against the milliseconds it takes
/// to read 16 MiB.
pub const RELEASE_STEP: u64 = 16 << 20;

impl MappedWindow {
    /// Maps `file`. Zero-length files are not mapped (mmap refuses them).
    /// Fails where the mapping cannot be guarded against truncation (see
    /// [`crate::map_guard`]): the caller then reads the file as a stream.
    pub fn new(file: std::fs::File) -> io::Result<Self> {
        let len = file.metadata()?.len();
        if len == 0 {
            return Ok(MappedWindow {
                map: None,
                len: 0,
                released_pages: 0,
            });
        }
        let map = Mapping::open(file, memmap2::Advice::Sequential)?;
        Ok(MappedWindow {
            map: Some(Arc::new(map)),
            len,
            released_pages: 0,
        })
    }
}

impl Window for MappedWindow {
    fn fill(&mut self, pos: u64, want: u64) -> io::Result<u64> {
        Ok(want.min(self.len.saturating_sub(pos)))
    }

    fn bytes(&self, pos: u64, len: usize) -> &[u8] {
        match &self.map {
            Some(map) => &map[pos as usize..pos as usize + len],
            None => &[],
        }
    }

    fn release(&mut self, pos: u64) {
        let Some(map) = &self.map else { return };
        if pos.saturating_sub(self.released_pages) < RELEASE_STEP {
            return;
        }
        map.release(self.released_pages, pos);
        self.released_pages = pos;
    }

    fn fault(&self) -> Option<StreamFault> {
        None
    }

    fn whole(&self) -> Option<&[u8]> {
        self.map.as_deref().map(|m| &**m)
    }

    fn mapping(&self) -> Option<Arc<Mapping>> {
        self.map.clone()
    }

    fn shrunk(&self) -> Option<u64> {
        self.map.as_ref()?.shrunk()
    }
}

/// Anything readable as a stream, with an optional decompressor in front.
pub enum Stream<R: Read + Send + Sync> {
    Raw(R),
    Compressed(Box<Inflater<R>>),
}

impl<R: Read + Send + Sync> Read for Stream<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Raw(r) => r.read(buf),
            Stream::Compressed(r) => r.read(buf),
        }
    }
}

impl<R: Read + Send + Sync> Stream<R> {
    fn fault(&self) -> Option<StreamFault> {
        match self {
            Stream::Raw(_) => None,
            Stream::Compressed(r) => r.fault().cloned(),
        }
    }
}

/// Opens a stream again at its start.
pub type Reopen<R> = Box<dyn Fn() -> io::Result<Stream<R>> + Send + Sync>;

/// A buffered window over a stream.
pub struct StreamWindow<R: Read + Send + Sync> {
    src: Stream<R>,
    buf: Vec<u8>,
    /// Stream offset of `buf[0]`.
    base: u64,
    released: u64,
    eof: bool,
    reopen: Option<Reopen<R>>,
}

const READ_CHUNK: usize = 1 << 20;

impl<R: Read + Send + Sync> StreamWindow<R> {
    pub fn new(src: Stream<R>) -> Self {
        StreamWindow {
            src,
            buf: Vec::new(),
            base: 0,
            released: 0,
            eof: false,
            reopen: None,
        }
    }

    /// A window that can read ahead without keeping what it read, by opening
    /// the stream again (a file by its path).
    pub fn rereadable(reopen: Reopen<R>) -> io::Result<Self> {
        let mut window = StreamWindow::new(reopen()?);
        window.reopen = Some(reopen);
        Ok(window)
    }

    fn end(&self) -> u64 {
        self.base + self.buf.len() as u64
    }

    fn read_some(&mut self, into: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.src.read(into) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }
}

impl<R: Read + Send + Sync> Window for StreamWindow<R> {
    fn fill(&mut self, pos: u64, want: u64) -> io::Result<u64> {
        let target = pos.saturating_add(want);
        while self.end() < target && !self.eof {
            let dead = (self.released.clamp(self.base, self.end()) - self.base) as usize;
            if dead > 0 && dead >= self.buf.len() / 2 {
                self.buf.drain(..dead);
                self.base += dead as u64;
            }
            let old = self.buf.len();
            // A record's bytes really arrived (the length field never sizes
            // this buffer), but there may be more of them than memory: fail
            // with an error rather than abort the process.
            self.buf.try_reserve(READ_CHUNK).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    format!(
                        "no memory to grow the buffer holding a record to {} bytes",
                        old + READ_CHUNK
                    ),
                )
            })?;
            self.buf.resize(old + READ_CHUNK, 0);
            let mut buf = std::mem::take(&mut self.buf);
            let n = self.read_some(&mut buf[old..]);
            self.buf = buf;
            match n {
                Ok(n) => {
                    self.buf.truncate(old + n);
                    self.eof = n == 0;
                }
                Err(e) => {
                    self.buf.truncate(old);
                    return Err(e);
                }
            }
        }
        Ok(self.end().saturating_sub(pos).min(want))
    }

    fn bytes(&self, pos: u64, len: usize) -> &[u8] {
        let at = (pos - self.base) as usize;
        &self.buf[at..at + len]
    }

    fn release(&mut self, pos: u64) {
        self.released = self.released.max(pos);
    }

    fn fault(&self) -> Option<StreamFault> {
        self.src.fault()
    }

    fn read_ahead(&mut self, pos: u64, len: u64) -> io::Result<Option<Ahead>> {
        if self.reopen.is_none() {
            return Ok(None);
        }
        let want = len.saturating_add(4);
        let mut crc = 0u32;
        let mut tail = [0u8; 4];
        let mut have = 0u64;
        // Takes the next bytes of `[pos, pos + want)`: the CRC of the data
        // part, and the tail's bytes.
        let mut take = |bytes: &[u8], have: &mut u64| {
            let data = len.saturating_sub(*have).min(bytes.len() as u64) as usize;
            crc = crate::crc::crc32c_append(crc, &bytes[..data]);
            for (i, &b) in bytes[data..].iter().enumerate() {
                let at = (*have + (data + i) as u64 - len) as usize;
                if at < 4 {
                    tail[at] = b;
                }
            }
            *have += bytes.len() as u64;
        };
        let held = self.end().saturating_sub(pos).min(want);
        if held > 0 {
            take(self.bytes(pos, held as usize), &mut have);
        }
        let mut scratch = vec![0u8; READ_CHUNK];
        let mut consumed = 0u64;
        while have < want && !self.eof {
            let n = self.read_some(&mut scratch)?;
            if n == 0 {
                break;
            }
            consumed += n as u64;
            let n = (n as u64).min(want - have) as usize;
            take(&scratch[..n], &mut have);
        }
        let fault = self.src.fault();
        if consumed > 0 {
            // Back to where the buffer ends, from the start of the stream.
            self.src = (self.reopen.as_ref().expect("checked above"))()?;
            let mut skip = self.end();
            while skip > 0 {
                let n = (skip as usize).min(READ_CHUNK);
                let got = self.read_some(&mut scratch[..n])?;
                if got == 0 {
                    return Err(io::Error::other(
                        "the file changed while it was read: it no longer holds the bytes read before",
                    ));
                }
                skip -= got as u64;
            }
        }
        Ok(Some(Ahead {
            available: have,
            crc,
            tail,
            fault,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_window_serves_offsets_and_compacts() {
        let data: Vec<u8> = (0..5_000_000u32).map(|i| i as u8).collect();
        let mut w = StreamWindow::new(Stream::Raw(&data[..]));
        assert_eq!(w.fill(0, 10).unwrap(), 10);
        assert_eq!(w.bytes(3, 2), &[3, 4]);
        w.release(4_000_000);
        assert_eq!(w.fill(4_000_000, 10).unwrap(), 10);
        assert_eq!(w.bytes(4_000_000, 1), &[(4_000_000u32 as u8)]);
        assert!(w.buf.len() < 3 * READ_CHUNK, "released bytes were kept");
        assert_eq!(w.fill(4_999_990, 100).unwrap(), 10);
    }

    #[test]
    fn read_ahead_keeps_nothing_and_changes_nothing() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7) as u8).collect();
        let source = data.clone();
        let mut w = StreamWindow::rereadable(Box::new(move || {
            Ok(Stream::Raw(std::io::Cursor::new(source.clone())))
        }))
        .unwrap();
        assert_eq!(w.fill(0, 100).unwrap(), 100);
        let ahead = w.read_ahead(50, 2_500_000).unwrap().unwrap();
        assert_eq!(ahead.available, 2_500_004);
        assert_eq!(ahead.crc, crate::crc::crc32c(&data[50..2_500_050]));
        assert_eq!(ahead.tail, data[2_500_050..2_500_054]);
        assert!(w.buf.len() <= READ_CHUNK, "read-ahead bytes were kept");
        // Past the end: what exists is counted.
        let ahead = w.read_ahead(10, 5_000_000).unwrap().unwrap();
        assert_eq!(ahead.available, 3_000_000 - 10);
        // Reading goes on as if nothing had happened.
        assert_eq!(w.fill(0, 3_000_000).unwrap(), 3_000_000);
        assert_eq!(w.bytes(0, 3_000_000), &data[..]);
    }
}
