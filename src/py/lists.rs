//! Python lists of values turned into flat columns in one pass, for writing:
//! no NumPy conversion per column and no Python object made.

use numpy::IntoPyArray;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyList, PyString, PyTuple};

/// The values seen so far, of one kind; ints become floats when a float
/// joins them, as NumPy would promote them.
enum Values {
    /// Nothing yet; room for this many values once the kind is known.
    None(usize),
    Int(Vec<i64>),
    Float(Vec<f64>),
    Bytes {
        offsets: Vec<i64>,
        data: Vec<u8>,
    },
}

/// Why a list cannot take the fast path: the caller's general path decides.
struct Unusual;

/// Bytes of strings copied into one buffer at most: beyond, the general path,
/// which keeps references to the Python objects, writes without a second copy
/// of large values (images) in memory.
const COPY_LIMIT: usize = 64 << 20;

fn int64(item: &Bound<'_, PyAny>, row: usize) -> PyResult<i64> {
    // (row, problem): the caller names the column.
    item.extract()
        .map_err(|_| PyValueError::new_err((row, format!("value {item} does not fit an int64"))))
}

impl Values {
    fn push(&mut self, item: &Bound<'_, PyAny>, row: usize) -> PyResult<Result<(), Unusual>> {
        // Exact types first: one pointer comparison each, where a failed cast
        // would build an error object. bool before int: a bool is an int in
        // Python, and written as 0 or 1.
        if item.is_exact_instance_of::<PyInt>() {
            return Ok(self.push_int(int64(item, row)?));
        }
        if item.is_exact_instance_of::<PyFloat>() {
            return Ok(self.push_float(item.extract::<f64>()?));
        }
        if item.is_exact_instance_of::<PyBytes>() {
            return Ok(self.push_bytes(item.cast::<PyBytes>()?.as_bytes()));
        }
        if item.is_exact_instance_of::<PyString>() {
            return Ok(self.push_bytes(item.cast::<PyString>()?.to_str()?.as_bytes()));
        }
        if item.is_exact_instance_of::<PyBool>() {
            return Ok(self.push_int(i64::from(item.is_truthy()?)));
        }
        Ok(Err(Unusual)) // subclasses and everything else: the general path
    }

    fn push_int(&mut self, value: i64) -> Result<(), Unusual> {
        match self {
            Values::None(room) => {
                let mut v = Vec::with_capacity(*room);
                v.push(value);
                *self = Values::Int(v);
            }
            Values::Int(v) => v.push(value),
            Values::Float(v) => v.push(value as f64),
            Values::Bytes { .. } => return Err(Unusual),
        }
        Ok(())
    }

    fn push_float(&mut self, value: f64) -> Result<(), Unusual> {
        match self {
            Values::None(room) => {
                let mut v = Vec::with_capacity(*room);
                v.push(value);
                *self = Values::Float(v);
            }
            Values::Int(v) => {
                let mut floats: Vec<f64> = v.iter().map(|&i| i as f64).collect();
                floats.push(value);
                *self = Values::Float(floats);
            }
            Values::Float(v) => v.push(value),
            Values::Bytes { .. } => return Err(Unusual),
        }
        Ok(())
    }

    fn push_bytes(&mut self, value: &[u8]) -> Result<(), Unusual> {
        match self {
            Values::None(room) => {
                let mut offsets = Vec::with_capacity(*room + 1);
                offsets.extend([0, value.len() as i64]);
                *self = Values::Bytes {
                    offsets,
                    data: value.to_vec(),
                }
            }
            Values::Bytes { offsets, data } => {
                if data.len() + value.len() > COPY_LIMIT {
                    return Err(Unusual); // large values: the general path borrows them instead
                }
                data.extend_from_slice(value);
                offsets.push(data.len() as i64);
            }
            Values::Int(_) | Values::Float(_) => return Err(Unusual),
        }
        Ok(())
    }

    fn len(&self) -> usize {
        match self {
            Values::None(_) => 0,
            Values::Int(v) => v.len(),
            Values::Float(v) => v.len(),
            Values::Bytes { offsets, .. } => offsets.len() - 1,
        }
    }
}

/// Appends one row's values (a scalar, or a list or tuple of them), stopping
/// at the first value the fast path does not take.
fn push_row(
    values: &mut Values,
    item: &Bound<'_, PyAny>,
    row: usize,
) -> PyResult<Result<(), Unusual>> {
    if item.is_exact_instance_of::<PyList>() {
        for value in item.cast::<PyList>()?.iter() {
            if values.push(&value, row)?.is_err() {
                return Ok(Err(Unusual));
            }
        }
        Ok(Ok(()))
    } else if item.is_exact_instance_of::<PyTuple>() {
        for value in item.cast::<PyTuple>()?.iter() {
            if values.push(&value, row)?.is_err() {
                return Ok(Err(Unusual));
            }
        }
        Ok(Ok(()))
    } else {
        values.push(item, row)
    }
}

/// A column of rows as flat values: `(kind, values, splits, present)` with kind
/// `"int64"` (ints and bools), `"float64"`, `"bytes"` (values as `(offsets,
/// data)`) or `"none"` (no value in any row); `present` is None when every row
/// has the feature. A row is None (missing), a scalar, or a list or tuple of
/// scalars. None when the rows hold anything else (NumPy arrays, deeper
/// nesting, strings mixed with numbers): the caller's general path takes those.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn _column_from_list(
    py: Python<'_>,
    rows: &Bound<'_, PyList>,
) -> PyResult<Option<(&'static str, Py<PyAny>, Py<PyAny>, Option<Py<PyAny>>)>> {
    crate::py::errors::guard(|| {
        // One value per row is the common case.
        let mut values = Values::None(rows.len());
        let mut splits = Vec::with_capacity(rows.len() + 1);
        let mut present = Vec::with_capacity(rows.len());
        splits.push(0i64);
        for (row, item) in rows.iter().enumerate() {
            present.push(!item.is_none());
            if !item.is_none() && push_row(&mut values, &item, row)?.is_err() {
                return Ok(None);
            }
            splits.push(values.len() as i64);
        }
        let splits = splits.into_pyarray(py).into_any().unbind();
        let present =
            (!present.iter().all(|&p| p)).then(|| present.into_pyarray(py).into_any().unbind());
        let (kind, values) = match values {
            Values::None(_) => (
                "none",
                Vec::<i64>::new().into_pyarray(py).into_any().unbind(),
            ),
            Values::Int(v) => ("int64", v.into_pyarray(py).into_any().unbind()),
            Values::Float(v) => ("float64", v.into_pyarray(py).into_any().unbind()),
            Values::Bytes { offsets, data } => (
                "bytes",
                (offsets.into_pyarray(py), data.into_pyarray(py))
                    .into_pyobject(py)?
                    .into_any()
                    .unbind(),
            ),
        };
        Ok(Some((kind, values, splits, present)))
    })
}
