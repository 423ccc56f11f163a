//! Reading records by byte offset, as an index file gives them: the frames of
//! a batch of random indices checked and handed over in one pass, from files
//! mapped whole (or read with `pread` where a file cannot be mapped).
//!
//! An index is untrusted: each frame must lie inside its file, carry a length
//! whose CRC checks and match the size the index gives, before anything is
//! read from it or allocated for it.

use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::crc::masked_crc32c;
use crate::error::{DamageKind, DataLoss, Error, Result};
use crate::frame::is_tfrecord_header;
use crate::window::Mapping;

fn loss(path: &str, offset: u64, index: u64, kind: DamageKind, detail: String) -> Error {
    DataLoss {
        kind,
        path: path.to_string(),
        offset,
        record_index: index,
        detail,
    }
    .into()
}

/// The payload of `frame` (a whole TFRecord frame of `size` bytes read at
/// `offset` for record `index`), once its header and (with `verify`) its
/// CRC check.
fn checked_frame<'a>(
    frame: &'a [u8],
    path: &str,
    offset: u64,
    index: u64,
    verify: bool,
) -> Result<&'a [u8]> {
    if !is_tfrecord_header(frame) {
        return Err(loss(
            path,
            offset,
            index,
            DamageKind::CorruptLength,
            format!(
                "corrupted record at {offset}: the length field fails its CRC (is the index for this file?)"
            ),
        ));
    }
    let size = frame.len() as u64;
    let length = u64::from_le_bytes(frame[..8].try_into().unwrap());
    if length.checked_add(16) != Some(size) {
        return Err(loss(
            path,
            offset,
            index,
            DamageKind::CorruptLength,
            format!(
                "record at {offset} holds {length} bytes but the index says {}",
                size - 16
            ),
        ));
    }
    let end = frame.len() - 4;
    if verify
        && masked_crc32c(&frame[12..end]) != u32::from_le_bytes(frame[end..].try_into().unwrap())
    {
        return Err(loss(
            path,
            offset + 12,
            index,
            DamageKind::CorruptData,
            format!(
                "corrupted record at {}: the data fails its CRC",
                offset + 12
            ),
        ));
    }
    Ok(&frame[12..end])
}

/// The checks an index entry gets before its frame is read: a frame's
/// least size, and the frame inside the `file_len`-byte file.
fn check_entry(path: &str, file_len: u64, offset: u64, size: u64, index: u64) -> Result<()> {
    if size < 16 {
        return Err(loss(
            path,
            offset,
            index,
            DamageKind::CorruptLength,
            format!(
                "the index gives record {index} a size of {size} bytes, less than a frame's 16"
            ),
        ));
    }
    if offset.checked_add(size).is_none_or(|end| end > file_len) {
        return Err(loss(
            path,
            offset,
            index,
            DamageKind::TruncatedRecord,
            format!(
                "truncated record at {offset}: the index gives record {index} {size} bytes there, \
                 past the end of the {file_len}-byte file (is the index for this file?)"
            ),
        ));
    }
    Ok(())
}

/// Reads and checks the TFRecord frame of `size` bytes at `offset` of `file`
/// with `pread`; returns its payload.
fn read_frame(
    file: &File,
    path: &str,
    file_len: u64,
    offset: u64,
    size: u64,
    index: u64,
    verify: bool,
) -> Result<Vec<u8>> {
    check_entry(path, file_len, offset, size, index)?;
    let mut frame = vec![0u8; size as usize];
    file.read_exact_at(&mut frame, offset)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => loss(
                path,
                offset,
                index,
                DamageKind::TruncatedRecord,
                format!("truncated record at {offset}: the file ends before the {size} bytes the index gives"),
            ),
            _ => Error::Io {
                path: path.to_string(),
                source: e,
            },
        })?;
    let payload = checked_frame(&frame, path, offset, index, verify)?.len();
    frame.truncate(12 + payload);
    frame.drain(..12);
    Ok(frame)
}

/// The payload of the TFRecord frame at `offset` of `file` (its size taken
/// from its header), and the offset of the frame after it: `OutOfRange` at
/// the file's end, data loss where no intact frame starts (as TensorFlow's
/// `tf_record_random_reader`).
pub fn read_frame_at(file: &File, path: &str, offset: u64, verify: bool) -> Result<(Vec<u8>, u64)> {
    let io = |source| Error::Io {
        path: path.to_string(),
        source,
    };
    let file_len = file.metadata().map_err(io)?.len();
    if offset >= file_len {
        return Err(Error::OutOfRange(format!(
            "Out of range at reading offset {offset}: the file '{path}' holds {file_len} bytes"
        )));
    }
    let mut header = [0u8; 12];
    let got = file
        .read_at(&mut header, offset)
        .and_then(|n| {
            // A short read is the file's end; read the rest, if any.
            if n < header.len() {
                file.read_at(&mut header[n..], offset + n as u64)
                    .map(|m| n + m)
            } else {
                Ok(n)
            }
        })
        .map_err(io)?;
    if got < header.len() || !is_tfrecord_header(&header) {
        return Err(loss(
            path,
            offset,
            0,
            DamageKind::CorruptLength,
            format!("corrupted record at {offset}: no record frame starts there"),
        ));
    }
    let length = u64::from_le_bytes(header[..8].try_into().unwrap());
    let size = length.saturating_add(16);
    if offset.saturating_add(size) > file_len {
        return Err(loss(
            path,
            offset,
            0,
            DamageKind::TruncatedRecord,
            format!(
                "truncated record at {offset}: its header gives {length} bytes, past \
                 the end of the {file_len}-byte file"
            ),
        ));
    }
    Ok((
        read_frame(file, path, file_len, offset, size, 0, verify)?,
        offset + size,
    ))
}

/// One record file read by offset: mapped whole where it can be.
pub struct FrameFile {
    file: File,
    path: String,
    map: Option<Mapping>,
}

impl FrameFile {
    pub fn open(path: &str) -> Result<FrameFile> {
        let io = |source| Error::Io {
            path: path.to_string(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        // Empty files hold no frame; a file that cannot be mapped (and
        // guarded) is read with `pread` instead.
        let map = match len {
            0 => None,
            _ => file
                .try_clone()
                .and_then(|f| Mapping::open(f, memmap2::Advice::Random))
                .ok(),
        };
        Ok(FrameFile {
            file,
            path: path.to_string(),
            map,
        })
    }

    /// The payload of the frame of `size` bytes at `offset` (record `index`).
    pub fn payload(
        &self,
        offset: u64,
        size: u64,
        index: u64,
        verify: bool,
    ) -> Result<Cow<'_, [u8]>> {
        if let Some(map) = &self.map {
            let end = offset.checked_add(size);
            if end.is_some_and(|end| end <= map.len() as u64) {
                check_entry(&self.path, map.len() as u64, offset, size, index)?;
                let frame = &map[offset as usize..(offset + size) as usize];
                return checked_frame(frame, &self.path, offset, index, verify).map(Cow::Borrowed);
            }
        }
        // Past the mapping (the file grew since it was mapped), or not mapped.
        let file_len = self
            .file
            .metadata()
            .map_err(|source| Error::Io {
                path: self.path.clone(),
                source,
            })?
            .len();
        read_frame(
            &self.file, &self.path, file_len, offset, size, index, verify,
        )
        .map(Cow::Owned)
    }

    /// Checks that the mapped file did not shrink while it was read: bytes
    /// read from pages truncated away are zeros, not the records. The error
    /// names `index`, the first record of the batch read from this file.
    pub fn check_unchanged(&self, index: u64) -> Result<()> {
        match self.map.as_ref().and_then(Mapping::shrunk) {
            None => Ok(()),
            Some(at) => Err(DataLoss {
                kind: DamageKind::TruncatedWhileReading,
                path: self.path.clone(),
                offset: at,
                record_index: index,
                detail: format!(
                    "the file shrank while it was read: its bytes from offset {at} on are gone \
                     (another process truncated or rewrote it)"
                ),
            }
            .into()),
        }
    }
}

/// The record files of an indexed dataset.
pub struct FrameFiles {
    files: Vec<FrameFile>,
}

impl FrameFiles {
    pub fn open(paths: &[String]) -> Result<FrameFiles> {
        let files = paths
            .iter()
            .map(|p| FrameFile::open(p))
            .collect::<Result<_>>()?;
        Ok(FrameFiles { files })
    }

    /// The payloads of the frames at `offsets` with `sizes` in `files` (an
    /// index into the files each); `indices` name the records in errors.
    /// The caller checked that the four have the same length.
    pub fn payloads(
        &self,
        files: &[u32],
        offsets: &[u64],
        sizes: &[u64],
        indices: &[u64],
        verify: bool,
    ) -> Result<Vec<Cow<'_, [u8]>>> {
        let payloads = files
            .iter()
            .zip(offsets)
            .zip(sizes)
            .zip(indices)
            .map(|(((&file, &offset), &size), &index)| {
                let file = self.files.get(file as usize).ok_or_else(|| {
                    Error::InvalidArgument(format!("no file {file} among {}", self.files.len()))
                })?;
                file.payload(offset, size, index, verify)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(payloads)
    }

    /// Checks, after the payloads of a batch (`files` and `indices` as for
    /// [`Self::payloads`]) are used, that no mapped file shrank meanwhile (see
    /// [`FrameFile::check_unchanged`]).
    pub fn check_unchanged(&self, files: &[u32], indices: &[u64]) -> Result<()> {
        let mut seen = vec![false; self.files.len()];
        for (&file, &index) in files.iter().zip(indices) {
            if let Some(flag) = seen.get_mut(file as usize) {
                if !std::mem::replace(flag, true) {
                    self.files[file as usize].check_unchanged(index)?;
                }
            }
        }
        Ok(())
    }
}
