//! `decode_raw`'s copy: byte strings from Python, one NumPy buffer out.

use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::py::files::Payload;
use crate::raw::{join, width, Unequal};

/// The byte strings of `values` (a sequence of bytes-like objects) laid end to
/// end, each `fixed_length` bytes (cut or padded with zeros) or, without it,
/// at the one length they must all share: `(uint8 array, width)`. `item`
/// names the type read, `item_size` its bytes: a width that is no multiple of
/// it is a `ValueError`, as in TensorFlow. Copied with the GIL released, on
/// every thread for large columns.
#[pyfunction]
#[pyo3(signature = (values, item_size, item, fixed_length = None))]
pub fn _join_raw<'py>(
    py: Python<'py>,
    values: &Bound<'py, PyAny>,
    item_size: usize,
    item: &str,
    fixed_length: Option<usize>,
) -> PyResult<(Bound<'py, PyArray1<u8>>, usize)> {
    crate::py::errors::guard(|| {
        let held = values
            .try_iter()?
            .map(|v| Payload::extract(&v?))
            .collect::<PyResult<Vec<Payload>>>()?;
        let slices: Vec<&[u8]> = held.iter().map(|p| &**p).collect();
        let size = match width(&slices, fixed_length) {
            Ok(size) => size,
            Err(Unequal::Length { index, len, first }) => {
                return Err(PyValueError::new_err(format!(
                    "decode_raw needs input strings all of one size, but element {index} has size \
                     {len} != {first} (give fixed_length to cut or pad them)"
                )))
            }
        };
        if !size.is_multiple_of(item_size.max(1)) {
            return Err(PyValueError::new_err(match fixed_length {
                Some(fixed) => format!(
                    "fixed_length ({fixed}) must be a multiple of the size of out_type ({item_size})"
                ),
                None => format!(
                    "Input to decode_raw has length {size} that is not a multiple of {item_size}, \
                     the size of {item}"
                ),
            }));
        }
        let threads = crate::threads::available();
        let data = py.detach(|| join(&slices, size, threads));
        Ok((data.into_pyarray(py), size))
    })
}
