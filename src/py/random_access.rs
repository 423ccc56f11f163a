//! Reading records by byte offset (for indexed, random access).

use std::fs::File;

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::columns::{parse_examples_parallel, Footers, Strings};
use crate::error::Error;
use crate::index_text::parse_index;
use crate::py::codec::{columns_to_py, requests, PyColumn};
use crate::random_access::{read_frame_at, FrameFiles};

/// An open record file read by offset, the GIL released during reads.
#[pyclass(module = "recordkit._native", name = "FrameReader")]
pub struct PyFrameReader {
    file: File,
    path: String,
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
            let (payload, next) = py.detach(|| read_frame_at(file, path, offset, verify))?;
            Ok((PyBytes::new(py, &payload), next))
        })
    }
}

/// The record files of an `IndexedDataset`, read by offset (mapped where
/// they can be): a batch of records read, checked and parsed in one call,
/// the GIL released.
#[pyclass(module = "recordkit._native", name = "IndexedFrames", frozen)]
pub struct PyIndexedFrames {
    files: FrameFiles,
}

/// Bytes of records from which a read lets go of the GIL. Below it, letting
/// go and taking it back costs more than the read: Grain's sixteen threads
/// each reading one record took 44 us a record, convoying on the GIL.
const UNLOCKED_FROM: u64 = 64 << 10;

/// `work` on `bytes` bytes of records, with the GIL released where they are many.
fn unlocked_from<T: Send>(py: Python<'_>, bytes: u64, work: impl FnOnce() -> T + Send) -> T {
    match bytes >= UNLOCKED_FROM {
        true => py.detach(work),
        false => work(),
    }
}

/// The four index arrays of a batch, checked to be of one length.
type Entries<'a> = (&'a [u32], &'a [u64], &'a [u64], &'a [u64]);

fn entries<'a>(
    files: &'a PyReadonlyArray1<'_, u32>,
    offsets: &'a PyReadonlyArray1<'_, u64>,
    sizes: &'a PyReadonlyArray1<'_, u64>,
    indices: &'a PyReadonlyArray1<'_, u64>,
) -> PyResult<Entries<'a>> {
    let entries = (
        files.as_slice()?,
        offsets.as_slice()?,
        sizes.as_slice()?,
        indices.as_slice()?,
    );
    let n = entries.0.len();
    if entries.1.len() != n || entries.2.len() != n || entries.3.len() != n {
        return Err(Error::InvalidArgument(
            "files, offsets, sizes and indices must have the same length".into(),
        )
        .into());
    }
    Ok(entries)
}

#[pymethods]
impl PyIndexedFrames {
    #[new]
    fn new(py: Python<'_>, paths: Vec<String>) -> PyResult<Self> {
        crate::py::errors::guard(|| {
            let files = py.detach(|| FrameFiles::open(&paths))?;
            Ok(PyIndexedFrames { files })
        })
    }

    /// The payloads of the frames at `offsets` with `sizes` in `files`;
    /// `indices` name the records in errors.
    #[pyo3(signature = (files, offsets, sizes, indices, verify = true))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        files: PyReadonlyArray1<'py, u32>,
        offsets: PyReadonlyArray1<'py, u64>,
        sizes: PyReadonlyArray1<'py, u64>,
        indices: PyReadonlyArray1<'py, u64>,
        verify: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        crate::py::errors::guard(|| {
            let (files, offsets, sizes, indices) = entries(&files, &offsets, &sizes, &indices)?;
            let frames = &self.files;
            let payloads = py.detach(|| frames.payloads(files, offsets, sizes, indices, verify))?;
            let list = PyList::new(py, payloads.iter().map(|p| PyBytes::new(py, p)))?;
            self.files.check_unchanged(files, indices)?;
            Ok(list)
        })
    }

    /// The frames' payloads parsed as Examples into columns, as
    /// `parse_example_columns` parses records: `(values, counts, uniform)`
    /// for each `(key, dtype)` request.
    #[pyo3(signature = (files, offsets, sizes, indices, requests, verify = true))]
    #[allow(clippy::too_many_arguments)]
    fn read_columns<'py>(
        &self,
        py: Python<'py>,
        files: PyReadonlyArray1<'py, u32>,
        offsets: PyReadonlyArray1<'py, u64>,
        sizes: PyReadonlyArray1<'py, u64>,
        indices: PyReadonlyArray1<'py, u64>,
        requests: Vec<(String, String)>,
        verify: bool,
    ) -> PyResult<Vec<PyColumn>> {
        crate::py::errors::guard(|| {
            let entries = entries(&files, &offsets, &sizes, &indices)?;
            self.parsed(py, entries, requests, verify)
        })
    }

    /// One record's payload, as `read` gives a batch's: for `ds[i]`, without
    /// arrays to make for one entry.
    #[pyo3(signature = (file, offset, size, index, verify = true))]
    fn read_one<'py>(
        &self,
        py: Python<'py>,
        file: u32,
        offset: u64,
        size: u64,
        index: u64,
        verify: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        crate::py::errors::guard(|| {
            let frames = &self.files;
            let payloads = unlocked_from(py, size, || {
                frames.payloads(&[file], &[offset], &[size], &[index], verify)
            })?;
            let bytes = PyBytes::new(py, &payloads[0]);
            self.files.check_unchanged(&[file], &[index])?;
            Ok(bytes)
        })
    }

    /// One record parsed, as `read_columns` parses a batch's.
    #[pyo3(signature = (file, offset, size, index, requests, verify = true))]
    #[allow(clippy::too_many_arguments)]
    fn read_one_columns(
        &self,
        py: Python<'_>,
        file: u32,
        offset: u64,
        size: u64,
        index: u64,
        requests: Vec<(String, String)>,
        verify: bool,
    ) -> PyResult<Vec<PyColumn>> {
        crate::py::errors::guard(|| {
            self.parsed(
                py,
                (&[file], &[offset], &[size], &[index]),
                requests,
                verify,
            )
        })
    }
}

impl PyIndexedFrames {
    /// The records of `entries`, read and parsed into Python's columns.
    fn parsed(
        &self,
        py: Python<'_>,
        (files, offsets, sizes, indices): Entries<'_>,
        requests: Vec<(String, String)>,
        verify: bool,
    ) -> PyResult<Vec<PyColumn>> {
        let requests = self::requests(requests)?;
        let frames = &self.files;
        let bytes = sizes.iter().sum();
        let payloads = unlocked_from(py, bytes, || {
            frames.payloads(files, offsets, sizes, indices, verify)
        })?;
        let records: Vec<&[u8]> = payloads.iter().map(|p| &**p).collect();
        let columns = unlocked_from(py, bytes, || {
            parse_examples_parallel(
                &records,
                Footers::None,
                &requests,
                crate::example::Schema::TensorFlow,
                Strings::Slices,
                |c| c,
            )
        });
        let columns = columns_to_py(py, columns.map_err(Error::from)?, &[]);
        // The values were read from the mappings: if a file shrank meanwhile, none is to be trusted.
        self.files.check_unchanged(files, indices)?;
        Ok(columns)
    }
}

/// `(offsets, sizes)` of an index file's text, read with the GIL released;
/// None where a line is not two plain numbers (see `parse_index`), for
/// Python's general reading to find and name.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn _parse_index<'py>(
    py: Python<'py>,
    text: &Bound<'py, PyBytes>,
) -> Option<(Bound<'py, PyArray1<u64>>, Bound<'py, PyArray1<u64>>)> {
    let text = text.as_bytes();
    let (offsets, sizes) = py.detach(|| parse_index(text))?;
    Some((offsets.into_pyarray(py), sizes.into_pyarray(py)))
}
