//! The one place where core errors become Python exceptions.
//!
//! The exception classes are defined in Python (`recordkit/errors.py`) so they
//! can have two parents and pickle cleanly; they are looked up once.

use pyo3::exceptions::{PyIndexError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

use crate::columns::ParseFailure;
use crate::error::{DataLoss, Error};

static DATA_LOSS_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static PARSE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static INTERNAL_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static RESOURCE_EXHAUSTED_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static FAILED_PRECONDITION_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// An exception of one of `recordkit.errors`' classes with a plain message.
fn recordkit_error(
    py: Python<'_>,
    cell: &PyOnceLock<Py<PyType>>,
    name: &str,
    message: String,
) -> PyErr {
    match cell.import(py, "recordkit.errors", name) {
        Ok(cls) => PyErr::from_type(cls.clone(), message),
        Err(e) => e,
    }
}

/// Runs the body of a function Python calls. A panic (a bug in recordkit,
/// whatever the input) becomes `recordkit.InternalError`, a `RecordkitError`:
/// PyO3 would raise `PanicException`, a `BaseException` that `except
/// Exception` does not catch, and that no caller can expect.
pub fn guard<T>(body: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            Err(Python::attach(|py| {
                recordkit_error(
                    py,
                    &INTERNAL_ERROR,
                    "InternalError",
                    format!(
                        "internal error in recordkit ({what}); this is a bug, whatever the input: \
                         please report it with the file that caused it"
                    ),
                )
            }))
        }
    }
}

/// `recordkit.ParseError(message)`: bytes or text that are not the message they should be.
pub fn parse_error(message: String) -> PyErr {
    Python::attach(|py| recordkit_error(py, &PARSE_ERROR, "ParseError", message))
}

fn parse_failure_error(py: Python<'_>, failure: &ParseFailure) -> PyResult<PyErr> {
    let cls = PARSE_ERROR.import(py, "recordkit.errors", "ParseError")?;
    let kwargs = PyDict::new(py);
    kwargs.set_item(
        "key",
        failure
            .key()
            .map(|k| String::from_utf8_lossy(k).into_owned()),
    )?;
    kwargs.set_item("index", failure.index())?;
    Ok(PyErr::from_value(
        cls.call((failure.to_string(),), Some(&kwargs))?,
    ))
}

fn data_loss_error(py: Python<'_>, loss: &DataLoss) -> PyResult<PyErr> {
    let cls = DATA_LOSS_ERROR.import(py, "recordkit.errors", "DataLossError")?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("path", &loss.path)?;
    kwargs.set_item("offset", loss.offset)?;
    kwargs.set_item("record_index", loss.record_index)?;
    kwargs.set_item("kind", loss.kind.name())?;
    Ok(PyErr::from_value(
        cls.call((loss.to_string(),), Some(&kwargs))?,
    ))
}

fn io_error(path: String, source: std::io::Error) -> PyErr {
    // A Python file object's own exception travels inside the io::Error.
    if source.get_ref().is_some_and(|inner| inner.is::<PyErr>()) {
        if let Ok(err) = source.into_inner().unwrap().downcast::<PyErr>() {
            return *err;
        }
        unreachable!("checked above");
    }
    match source.raw_os_error() {
        // OSError(errno, strerror, filename) picks the subclass
        // (FileNotFoundError, PermissionError, ...) from the errno.
        Some(code) => {
            let text = std::io::Error::from_raw_os_error(code).to_string();
            let text = text.split(" (os error").next().unwrap_or(&text).to_string();
            PyOSError::new_err((code, text, path))
        }
        None => PyOSError::new_err(format!("{path}: {source}")),
    }
}

impl From<Error> for PyErr {
    fn from(err: Error) -> PyErr {
        match err {
            Error::Io { path, source } => io_error(path, source),
            Error::DataLoss(loss) => {
                Python::attach(|py| data_loss_error(py, &loss).unwrap_or_else(|e| e))
            }
            Error::InvalidArgument(message) => PyValueError::new_err(message),
            Error::Closed(message) => Python::attach(|py| {
                recordkit_error(
                    py,
                    &FAILED_PRECONDITION_ERROR,
                    "FailedPreconditionError",
                    message,
                )
            }),
            Error::OutOfRange(message) => PyIndexError::new_err(message),
            Error::ResourceExhausted(message) => Python::attach(|py| {
                recordkit_error(
                    py,
                    &RESOURCE_EXHAUSTED_ERROR,
                    "ResourceExhaustedError",
                    message,
                )
            }),
            Error::Parse(failure) => {
                Python::attach(|py| parse_failure_error(py, &failure).unwrap_or_else(|e| e))
            }
        }
    }
}

/// Panics inside [`guard`], so tests can check what Python sees of a bug.
#[pyfunction]
pub fn _panic_for_tests() -> PyResult<()> {
    guard(|| panic!("a deliberate panic, for tests"))
}
