//! Byte windows: the framing layer's view of a file's (decompressed) bytes.
//!
//! A window hands out slices by absolute stream offset. A memory-mapped file
//! is one window over the whole file; a stream (compressed file, pipe, Python
//! file object) keeps a buffer that grows only as data actually arrives, so a
//! length field is never trusted for an allocation.

use std::io::{self, Read};

use memmap2::Mmap;

use crate::compression::{Inflater, StreamFault};

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
}

/// A whole file, memory-mapped.
pub struct MappedWindow {
    map: Option<Mmap>,
    len: u64,
    released_pages: u64,
}

/// Consumed pages are dropped from the mapping in steps of this size, so a
/// long read does not keep the whole file in the process's resident set.
const RELEASE_STEP: u64 = 64 << 20;

impl MappedWindow {
    /// Maps `file`. Zero-length files are not mapped (mmap refuses them).
    pub fn new(file: &std::fs::File) -> io::Result<Self> {
        let len = file.metadata()?.len();
        if len == 0 {
            return Ok(MappedWindow {
                map: None,
                len: 0,
                released_pages: 0,
            });
        }
        // SAFETY: the mapping is read-only and private, and no Rust reference
        // into it outlives this window. What cannot be proved from here is that
        // no other process truncates or rewrites the file while it is mapped
        // (reads past a truncation raise SIGBUS): the same contract every
        // mmap-based reader (ripgrep, numpy.memmap, LMDB) makes. Record files
        // are written under a temporary name and renamed when complete, so a
        // file being read is not being written.
        let map = unsafe { Mmap::map(file)? };
        // Advice is a hint; a kernel that ignores it changes nothing.
        let _ = map.advise(memmap2::Advice::Sequential);
        Ok(MappedWindow {
            map: Some(map),
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
        let start = self.released_pages;
        // SAFETY: MADV_DONTNEED on a read-only private file mapping only drops
        // the process's copy of clean pages; touching them again re-reads them
        // from the file, so no byte anyone reads changes (memmap2 widens the
        // range to whole pages, which is harmless for the same reason). No
        // slice from `bytes` is alive: `release` takes `&mut self`.
        let _ = unsafe {
            map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                start as usize,
                (pos - start) as usize,
            )
        };
        self.released_pages = pos;
    }

    fn fault(&self) -> Option<StreamFault> {
        None
    }

    fn whole(&self) -> Option<&[u8]> {
        self.map.as_deref()
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

/// A buffered window over a stream.
pub struct StreamWindow<R: Read + Send + Sync> {
    src: Stream<R>,
    buf: Vec<u8>,
    /// Stream offset of `buf[0]`.
    base: u64,
    released: u64,
    eof: bool,
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
        }
    }

    fn end(&self) -> u64 {
        self.base + self.buf.len() as u64
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
            self.buf.resize(old + READ_CHUNK, 0);
            let n = loop {
                match self.src.read(&mut self.buf[old..]) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => break other,
                }
            };
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
}
