//! Python file objects as Rust readers and writers, and record payloads
//! borrowed from Python objects.

use std::io::{self, Read, Write};
use std::ops::Deref;

use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyBytes, PyString};

/// Reads from a Python object's `read(n)` method, taking the GIL per call.
pub struct PyFileReader {
    obj: Py<PyAny>,
}

impl PyFileReader {
    pub fn new(obj: Py<PyAny>) -> Self {
        PyFileReader { obj }
    }
}

impl Read for PyFileReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Python::attach(|py| -> PyResult<usize> {
            let data: PyBackedBytes = self
                .obj
                .call_method1(py, "read", (buf.len(),))?
                .extract(py)?;
            let n = data.len().min(buf.len());
            buf[..n].copy_from_slice(&data[..n]);
            Ok(n)
        })
        .map_err(io::Error::other)
    }
}

/// Writes to a Python object's `write(b)` method, taking the GIL per call.
pub struct PyFileWriter {
    obj: Py<PyAny>,
}

impl PyFileWriter {
    pub fn new(obj: Py<PyAny>) -> Self {
        PyFileWriter { obj }
    }
}

impl Write for PyFileWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Python::attach(|py| -> PyResult<usize> {
            self.obj
                .call_method1(py, "write", (PyBytes::new(py, buf),))?;
            Ok(buf.len())
        })
        .map_err(io::Error::other)
    }

    fn flush(&mut self) -> io::Result<()> {
        Python::attach(|py| -> PyResult<()> {
            if self.obj.bind(py).hasattr("flush")? {
                self.obj.call_method0(py, "flush")?;
            }
            Ok(())
        })
        .map_err(io::Error::other)
    }
}

/// One record's bytes, readable without the GIL: `bytes` are borrowed,
/// `str` is its UTF-8 (as TensorFlow writes it), other buffers are copied
/// into a `bytes` first, a message is encoded (see [`Payload::record`]).
pub enum Payload {
    Bytes(PyBackedBytes),
    Str(PyBackedStr),
    Encoded(Vec<u8>),
}

impl Deref for Payload {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Payload::Bytes(b) => b,
            Payload::Str(s) => s.as_bytes(),
            Payload::Encoded(v) => v,
        }
    }
}

impl Payload {
    /// A serialized message to decode: bytes-like only. A `str` is refused,
    /// since its UTF-8 encoding is never what a user meant to parse.
    pub fn serialized(obj: &Bound<'_, PyAny>) -> PyResult<Payload> {
        if obj.is_instance_of::<PyString>() {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "a serialized record is bytes, not str: pass the bytes a file or SerializeToString() gave",
            ));
        }
        Payload::extract(obj)
    }

    /// A record to write: bytes-like, or `str` (written as UTF-8).
    pub fn extract(obj: &Bound<'_, PyAny>) -> PyResult<Payload> {
        if obj.is_instance_of::<PyString>() {
            return Ok(Payload::Str(obj.extract()?));
        }
        if let Ok(b) = obj.extract::<PyBackedBytes>() {
            return Ok(Payload::Bytes(b));
        }
        // Other bytes-like objects (memoryview, NumPy uint8 arrays, array.array("B")),
        // copied into a `bytes` through `memoryview`, which checks the item size:
        // a rare path, so it borrows nothing.
        let refused = || -> PyResult<Payload> {
            let hint = match obj.hasattr("SerializeToString")? {
                true => " (write its SerializeToString(); recordkit's Example, SequenceExample and OFRecord are taken as they are)",
                false => "",
            };
            Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "a record must be bytes, a bytes-like object or str, not {}{hint}",
                obj.get_type().name()?
            )))
        };
        let py = obj.py();
        let Ok(view) = py.import("builtins")?.getattr("memoryview")?.call1((obj,)) else {
            return refused();
        };
        if view.getattr("itemsize")?.extract::<usize>()? != 1 {
            return refused();
        }
        Ok(Payload::Bytes(view.call_method0("tobytes")?.extract()?))
    }
}
