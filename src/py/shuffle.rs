//! The shuffle buffer for Python objects (records, parsed items).

use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::shuffle::Shuffler;

/// `tf.data`'s buffer shuffle, seeded: `push` a list of items, get back the
/// items that leave the buffer; `drain` at the end.
#[pyclass(module = "recordkit._native", name = "ShuffleBuffer")]
pub struct PyShuffleBuffer {
    shuffler: Shuffler<Py<PyAny>>,
}

#[pymethods]
impl PyShuffleBuffer {
    #[new]
    fn new(capacity: usize, seed: u64) -> Self {
        PyShuffleBuffer {
            shuffler: Shuffler::new(capacity, seed),
        }
    }

    /// Takes `items` in order; returns the items drawn out to make room.
    fn push<'py>(
        &mut self,
        py: Python<'py>,
        items: &Bound<'py, PyList>,
    ) -> PyResult<Bound<'py, PyList>> {
        crate::py::errors::guard(|| {
            let out: Vec<Py<PyAny>> = items
                .iter()
                .filter_map(|item| self.shuffler.push(item.unbind()))
                .collect();
            PyList::new(py, out)
        })
    }

    /// Everything still buffered, in random order.
    fn drain<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        crate::py::errors::guard(|| PyList::new(py, self.shuffler.drain()))
    }

    fn __len__(&self) -> usize {
        self.shuffler.len()
    }
}
