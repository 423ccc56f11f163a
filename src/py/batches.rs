//! `ExampleBatches`: one file's Examples (or OFRecords), framed, checked and
//! parsed a batch at a time by `crate::read_ahead`, handed to Python as
//! NumPy arrays (or object arrays of `bytes`).

use std::sync::Mutex;

use pyo3::prelude::*;

use crate::error::Error;
use crate::framing::Skipped;
use crate::py::codec::{columns_out, owned_columns_out, requests, schema, PyColumn};
use crate::py::records::{skipped_regions, PyRecordScanner, SkippedRegion};
use crate::py::shared::lock_shared;
use crate::read_ahead::{self, BatchSize, ReadAhead, Reader};

/// Records from which a stream's batch of `bytes` objects is made on the
/// caller's thread rather than read ahead: threads reading ahead would copy
/// the values into one buffer, then Python into the objects, and two copies
/// of large values cost more than the overlap gains. (From a mapped file, the
/// threads leave byte strings of any size where they are, for Python to copy
/// once: see `ReadAhead::start`.)
const OBJECTS_INLINE_FROM: usize = 4096;

enum State {
    /// Each batch is made when asked for, on the caller's thread.
    Inline(Box<Reader>),
    /// Threads make the next batches while Python takes this one.
    Ahead(ReadAhead),
    /// Damage found after the records of the batch handed last: reported by
    /// the next call, as the scanner reports damage it finds.
    Damaged(Error),
    /// The end, an error, or `close` was reached.
    Done,
}

#[pyclass(module = "recordkit._native", name = "ExampleBatches", frozen)]
pub struct PyExampleBatches {
    state: Mutex<State>,
    /// Skipped regions of the batches handed out, for `take_skipped`.
    skipped: Mutex<Vec<Skipped>>,
    flat_bytes: bool,
    /// More than one thread is allowed, and the source is not a Python file
    /// object (read with the GIL, which a thread reading ahead would have to take from
    /// the thread waiting for it).
    may_read_ahead: bool,
}

#[pymethods]
impl PyExampleBatches {
    /// Takes over `scanner` (which is closed), from where it stands, and
    /// yields `(records, [(values, counts, uniform)] per request)`,
    /// `batch_size` records at a time (fewer where their payloads reach
    /// `max_bytes`, and at least one) and at most `limit` in all; byte
    /// strings as `(offsets, data)` arrays with `flat_bytes`, else as object
    /// arrays. Threads read ahead, from the first full batch of a mapped
    /// file and after the first batch of a stream, unless recordkit is
    /// limited to one thread, the source is a Python file object, or the
    /// records are large, become `bytes` objects and come from a stream.
    #[new]
    #[pyo3(signature = (scanner, requests, *, batch_size, max_bytes = None, limit = None, flat_bytes = false, schema = "tensorflow"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        scanner: &PyRecordScanner,
        requests: Vec<(String, String)>,
        batch_size: usize,
        max_bytes: Option<usize>,
        limit: Option<u64>,
        flat_bytes: bool,
        schema: &str,
    ) -> PyResult<Self> {
        crate::py::errors::guard(|| {
            if batch_size == 0 {
                return Err(Error::InvalidArgument("batch_size must be at least 1".into()).into());
            }
            let requests = self::requests(requests)?;
            let schema = self::schema(schema)?;
            let (mut scanner, python_source) = scanner.take(py)?;
            let threads = crate::threads::available();
            let may_read_ahead = !python_source && threads > 1;
            if may_read_ahead && read_ahead::leaves_crcs_to_parser(threads) {
                scanner.leave_crcs_to_parser();
            }
            let size = BatchSize {
                records: batch_size,
                bytes: max_bytes.unwrap_or(usize::MAX),
            };
            let reader = Box::new(Reader::new(scanner, requests, schema, size, limit));
            Ok(PyExampleBatches {
                state: Mutex::new(State::Inline(reader)),
                skipped: Mutex::new(Vec::new()),
                flat_bytes,
                may_read_ahead,
            })
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<(usize, Vec<PyColumn>)>> {
        crate::py::errors::guard(|| {
            let mut state = lock_shared(py, &self.state);
            if let State::Damaged(_) = &*state {
                if let State::Damaged(damage) = std::mem::replace(&mut *state, State::Done) {
                    return Err(damage.into());
                }
            }
            // The batch framed on this thread, where it is also parsed here.
            let mut framed_here = None;
            if let State::Inline(reader) = &mut *state {
                let framed = match py.detach(|| reader.frame()) {
                    Ok(framed) => framed,
                    Err(err) => {
                        *state = State::Done;
                        return Err(err.into());
                    }
                };
                // A mapped file's batches are read ahead from the first on: the
                // threads start now, and the first batch is parsed beside the
                // second rather than alone before them.
                let mapped = reader.is_mapped();
                if self.may_read_ahead && mapped && reader.is_full(&framed) {
                    if let State::Inline(reader) = std::mem::replace(&mut *state, State::Done) {
                        let (payload, in_mapping) = (framed.payload(), !self.flat_bytes);
                        let ahead = ReadAhead::start(reader, payload, in_mapping, Some(framed));
                        *state = State::Ahead(ahead);
                    }
                } else {
                    framed_here = Some(framed);
                }
            }
            let made = match &mut *state {
                State::Done | State::Damaged(_) => return Ok(None),
                State::Inline(reader) => {
                    let framed = framed_here.expect("framed above");
                    let flat = self.flat_bytes;
                    reader.make_here(
                        framed,
                        flat,
                        |parse| py.detach(parse),
                        |columns, within| columns_out(py, columns, flat, within),
                    )
                }
                State::Ahead(ahead) => match py.detach(|| ahead.next_batch()) {
                    Ok(made) => made.and_then(|batch| {
                        ahead.hand(batch, |columns, mapping| {
                            owned_columns_out(py, columns, self.flat_bytes, mapping)
                        })
                    }),
                    Err(panic) => {
                        *state = State::Done;
                        std::panic::resume_unwind(panic)
                    }
                },
            };
            let handed = made.inspect_err(|_| *state = State::Done)?;
            lock_shared(py, &self.skipped).extend(handed.skipped);
            if handed.records == 0 {
                *state = State::Done;
                return Ok(None);
            }
            if let Some(damage) = handed.then {
                // Threads reading ahead stop at their next batch (see `ReadAhead::drop`).
                *state = State::Damaged(damage);
                return Ok(Some((handed.records, handed.columns)));
            }
            // A stream's batches are read ahead after one made here shows
            // whether its values are small enough.
            if let State::Inline(reader) = &*state {
                let small = handed.payload / handed.records < OBJECTS_INLINE_FROM;
                let stream = !reader.is_mapped();
                if self.may_read_ahead && stream && (self.flat_bytes || small) {
                    if let State::Inline(reader) = std::mem::replace(&mut *state, State::Done) {
                        *state =
                            State::Ahead(ReadAhead::start(reader, handed.payload, false, None));
                    }
                }
            }
            Ok(Some((handed.records, handed.columns)))
        })
    }

    /// For tests: waits until the threads reading ahead (if they run) hold
    /// `batches` batches not yet taken, or will make no more.
    fn _wait_read_ahead(&self, py: Python<'_>, batches: usize) {
        if let State::Ahead(ahead) = &*lock_shared(py, &self.state) {
            py.detach(|| ahead.wait_made(batches));
        }
    }

    /// Damaged regions skipped in the batches handed out since the last call.
    fn take_skipped(&self, py: Python<'_>) -> Vec<SkippedRegion> {
        skipped_regions(std::mem::take(&mut *lock_shared(py, &self.skipped)))
    }

    /// Stops reading ahead and releases the file, once each thread has
    /// finished the batch it is on.
    fn close(&self, py: Python<'_>) {
        let state = std::mem::replace(&mut *lock_shared(py, &self.state), State::Done);
        if let State::Ahead(ahead) = state {
            // The threads never take the GIL, so waiting for them with the GIL released is safe.
            py.detach(|| ahead.close());
        }
    }
}
