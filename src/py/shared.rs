//! An iterator over batches that threads may share: each item goes to exactly
//! one thread, and an error reaches every thread that asks after it.
//!
//! A Python generator shared between threads raises "generator already
//! executing" in one of them, and `itertools.chain` over it then ends early
//! for all the others, silently. A lock taken per item in Python costs ten
//! times the iteration itself; this one costs an uncontended mutex.

use std::sync::{Mutex, MutexGuard, TryLockError};

use pyo3::prelude::*;
use pyo3::types::PyList;

struct State {
    /// The current batch, reversed: `pop` gives the next item.
    batch: Vec<Py<PyAny>>,
    /// Returns the next batch as a list, empty at the end; `None` once ended.
    refill: Option<Py<PyAny>>,
    /// The error a refill raised, raised again for every later call.
    error: Option<PyErr>,
}

#[pyclass(module = "recordkit._native", name = "SharedIterator", frozen)]
pub struct PySharedIterator {
    state: Mutex<State>,
}

/// Takes `mutex` for an object that threads share. While another thread holds
/// it (it may be inside a call that released the GIL), waits with the GIL
/// released, so that the holder can take the GIL back and finish. A panic
/// while it was held does not lock the object forever.
pub fn lock_shared<'a, T: Send>(py: Python<'_>, mutex: &'a Mutex<T>) -> MutexGuard<'a, T> {
    loop {
        match mutex.try_lock() {
            Ok(guard) => return guard,
            Err(TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => py.detach(|| {
                drop(mutex.lock());
            }),
        }
    }
}

#[pymethods]
impl PySharedIterator {
    /// `refill()` returns the next batch (a list), or an empty list at the end.
    #[new]
    fn new(refill: Py<PyAny>) -> Self {
        PySharedIterator {
            state: Mutex::new(State {
                batch: Vec::new(),
                refill: Some(refill),
                error: None,
            }),
        }
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        crate::py::errors::guard(|| {
            let mut state = lock_shared(py, &self.state);
            loop {
                if let Some(item) = state.batch.pop() {
                    return Ok(Some(item));
                }
                if let Some(error) = &state.error {
                    return Err(error.clone_ref(py));
                }
                let Some(refill) = state.refill.as_ref().map(|r| r.clone_ref(py)) else {
                    return Ok(None);
                };
                match refill.call0(py) {
                    Ok(batch) => {
                        let batch = batch.into_bound(py).cast_into::<PyList>()?;
                        if batch.is_empty() {
                            state.refill = None;
                            return Ok(None);
                        }
                        state.batch = batch.iter().rev().map(Bound::unbind).collect();
                    }
                    Err(error) => {
                        state.refill = None;
                        state.error = Some(error.clone_ref(py));
                        return Err(error);
                    }
                }
            }
        })
    }
}
