//! Reading records by byte offset (for indexed, random access).

use std::fs::File;
use std::os::unix::fs::FileExt;

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::crc::masked_crc32c;
use crate::error::{DamageKind, DataLoss, Error, Result};
use crate::framing::is_tfrecord_header;

/// An open record file read by offset, the GIL released during reads.
#[pyclass(module = "recordkit._native", name = "FrameReader")]
pub struct PyFrameReader {
    file: File,
    path: String,
}

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

/// Reads and checks the TFRecord frame of `size` bytes at `offset`; returns its payload.
/// An index is untrusted: a frame must lie inside the file (`file_len`) before
/// anything is allocated for it.
fn read_frame(
    file: &File,
    path: &str,
    file_len: u64,
    offset: u64,
    size: u64,
    index: u64,
    verify: bool,
) -> Result<Vec<u8>> {
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
    let mut frame = vec![0u8; size as usize];
    file.read_exact_at(&mut frame, offset).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => loss(path, offset, index, DamageKind::TruncatedRecord, format!("truncated record at {offset}: the file ends before the {size} bytes the index gives")),
        _ => Error::Io { path: path.to_string(), source: e },
    })?;
    if !is_tfrecord_header(&frame) {
        return Err(loss(path, offset, index, DamageKind::CorruptLength, format!("corrupted record at {offset}: the length field fails its CRC (is the index for this file?)")));
    }
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
    frame.truncate(end);
    frame.drain(..12);
    Ok(frame)
}

#[pymethods]
impl PyFrameReader {
    #[new]
    fn new(py: Python<'_>, path: String) -> PyResult<Self> {
        crate::py::errors::guard(|| {
            let file = py
                .detach(|| File::open(&path))
                .map_err(|source| Error::Io {
                    path: path.clone(),
                    source,
                })?;
            crate::py::memory::adapt_malloc_to_large_records();
            Ok(PyFrameReader { file, path })
        })
    }

    /// The payload of the TFRecord frame at `offset`, and the offset of the
    /// frame after it: `IndexError` at the file's end, `DataLossError` where
    /// no intact frame starts (as TensorFlow's `tf_record_random_reader`).
    #[pyo3(signature = (offset, verify = true))]
    fn read_at<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        verify: bool,
    ) -> PyResult<(Bound<'py, PyBytes>, u64)> {
        crate::py::errors::guard(|| {
            let (file, path) = (&self.file, self.path.as_str());
            let (payload, next) = py.detach(|| -> Result<(Vec<u8>, u64)> {
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
                            file.read_at(&mut header[n..], offset + n as u64).map(|m| n + m)
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
                Ok((read_frame(file, path, file_len, offset, size, 0, verify)?, offset + size))
            })?;
            Ok((PyBytes::new(py, &payload), next))
        })
    }

    /// The payloads of the TFRecord frames at `offsets` with `sizes` (whole
    /// frames, as index files give them); `indices` name them in errors.
    #[pyo3(signature = (offsets, sizes, indices, verify = true))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        offsets: PyReadonlyArray1<'py, u64>,
        sizes: PyReadonlyArray1<'py, u64>,
        indices: PyReadonlyArray1<'py, u64>,
        verify: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        crate::py::errors::guard(|| {
            let (offsets, sizes, indices) =
                (offsets.as_slice()?, sizes.as_slice()?, indices.as_slice()?);
            if offsets.len() != sizes.len() || offsets.len() != indices.len() {
                return Err(Error::InvalidArgument(
                    "offsets, sizes and indices must have the same length".into(),
                )
                .into());
            }
            let (file, path) = (&self.file, self.path.as_str());
            let payloads = py.detach(|| {
                let file_len = file
                    .metadata()
                    .map_err(|source| Error::Io {
                        path: path.to_string(),
                        source,
                    })?
                    .len();
                offsets
                    .iter()
                    .zip(sizes)
                    .zip(indices)
                    .map(|((&o, &s), &i)| read_frame(file, path, file_len, o, s, i, verify))
                    .collect::<Result<Vec<_>>>()
            })?;
            PyList::new(py, payloads.iter().map(|p| PyBytes::new(py, p)))
        })
    }
}
