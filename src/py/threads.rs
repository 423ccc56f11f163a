//! The thread count of the hot loops, as Python sets and reads it.

use pyo3::prelude::*;

/// Sets how many threads parsing, copying and encoding use (`None`: the default).
#[pyfunction]
#[pyo3(signature = (count))]
pub fn _set_num_threads(count: Option<usize>) {
    crate::threads::set(count);
}

/// `(threads the hot loops use, whether the user chose the count)`.
#[pyfunction]
pub fn _num_threads() -> (usize, bool) {
    (crate::threads::available(), crate::threads::chosen())
}
