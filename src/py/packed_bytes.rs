//! A list of `bytes` packed into one buffer with its offsets, and back: how
//! a DataLoader worker sends a batch's byte strings to the main process
//! (`recordkit._torch`) without pickling an object per value.

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::error::Error;
use crate::interned::{intern, intern_keys, Interned};

/// A packed list: its values end to end, and where each ends.
struct Packed {
    offsets: Vec<i64>,
    data: Vec<u8>,
}

impl Packed {
    fn of<'a>(values: impl ExactSizeIterator<Item = &'a [u8]>) -> Packed {
        let mut packed = Packed {
            offsets: Vec::with_capacity(values.len() + 1),
            data: Vec::new(),
        };
        packed.offsets.push(0);
        for value in values {
            packed.data.extend_from_slice(value);
            packed.offsets.push(packed.data.len() as i64);
        }
        packed
    }

    fn values(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.offsets
            .windows(2)
            .map(|w| &self.data[w[0] as usize..w[1] as usize])
    }
}

/// What `_pack_bytes` hands Python: offsets, data and codes.
type PackedParts<'py> = (
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyBytes>,
    Option<Bound<'py, PyArray1<u32>>>,
);

/// `values` (a list of `bytes`, exactly) as `(offsets, data, codes)`. Where
/// values repeat (the common case for short strings: labels, class names),
/// `offsets` and `data` hold each distinct value once and value `i` is
/// distinct value `codes[i]`; else `codes` is None and value `i` is
/// `data[offsets[i]:offsets[i + 1]]`. Anything else in the list is a
/// `TypeError`, for the caller to send the list as it is.
#[pyfunction]
pub fn _pack_bytes<'py>(
    py: Python<'py>,
    values: &Bound<'py, PyList>,
) -> PyResult<PackedParts<'py>> {
    crate::py::errors::guard(|| {
        let mut held = Vec::with_capacity(values.len());
        for item in values.iter() {
            let Ok(bytes) = item.cast_exact::<PyBytes>() else {
                let name = item.get_type().name()?;
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "_pack_bytes packs bytes only, not {name}"
                )));
            };
            held.push(bytes.clone());
        }
        // Values that repeat are mostly one object each (the read paths share a
        // `bytes` per distinct short value): found by address first, without
        // reading a byte (pack 19 -> 8 ns a value for the tutorial's words), then,
        // failing that, by content.
        let addresses: Vec<usize> = held.iter().map(|b| b.as_ptr() as usize).collect();
        let (packed, codes) = match intern_keys(&addresses) {
            Some(Interned { firsts, codes }) => {
                let distinct = Packed::of(firsts.iter().map(|&i| held[i as usize].as_bytes()));
                (distinct, Some(codes))
            }
            None => {
                let all = Packed::of(held.iter().map(|b| b.as_bytes()));
                let slices: Vec<&[u8]> = all.values().collect();
                match intern(&slices, &all.data) {
                    Some(Interned { firsts, codes }) => {
                        let distinct = Packed::of(firsts.iter().map(|&i| slices[i as usize]));
                        (distinct, Some(codes))
                    }
                    None => (all, None),
                }
            }
        };
        let codes = codes.map(|codes| codes.into_pyarray(py));
        let data = PyBytes::new(py, &packed.data);
        Ok((packed.offsets.into_pyarray(py), data, codes))
    })
}

/// The list `_pack_bytes` packed. The parts come from another process, so
/// they are checked before a byte is read: `offsets` must start at 0, never
/// fall, and end at `len(data)`, and `codes` must name values there; else
/// a `ValueError`.
#[pyfunction]
#[pyo3(signature = (offsets, data, codes = None))]
pub fn _unpack_bytes<'py>(
    py: Python<'py>,
    offsets: PyReadonlyArray1<'py, i64>,
    data: &Bound<'py, PyBytes>,
    codes: Option<PyReadonlyArray1<'py, u32>>,
) -> PyResult<Bound<'py, PyList>> {
    crate::py::errors::guard(|| {
        let offsets = offsets.as_slice()?;
        let data = data.as_bytes();
        let fits = offsets.first() == Some(&0)
            && offsets.windows(2).all(|w| w[0] <= w[1])
            && offsets.last().and_then(|&e| usize::try_from(e).ok()) == Some(data.len());
        let damaged = |what: String| -> PyErr {
            Error::InvalidArgument(format!("packed byte strings are damaged: {what}")).into()
        };
        if !fits {
            return Err(damaged(format!(
                "{} offsets do not cut {} bytes from 0 to the end in order",
                offsets.len(),
                data.len()
            )));
        }
        let values = offsets
            .windows(2)
            .map(|w| PyBytes::new(py, &data[w[0] as usize..w[1] as usize]));
        let Some(codes) = codes else {
            return PyList::new(py, values);
        };
        let codes = codes.as_slice()?;
        let distinct: Vec<Bound<'py, PyBytes>> = values.collect();
        if let Some(&code) = codes.iter().find(|&&c| c as usize >= distinct.len()) {
            return Err(damaged(format!(
                "code {code} names none of {} values",
                distinct.len()
            )));
        }
        PyList::new(py, codes.iter().map(|&c| &distinct[c as usize]))
    })
}
