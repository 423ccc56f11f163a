//! `ExampleBatches`: one file's Examples (or OFRecords), framed, checked and
//! parsed a batch at a time. With more than one thread allowed, a worker
//! thread reads and parses the next batch while Python takes this one, so
//! that the work only Python's thread can do (making `bytes` objects, NumPy
//! and Arrow assembly) overlaps the parsing instead of adding to it.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use pyo3::prelude::*;

use crate::columns::{
    join_runs, owned_columns, parse_example_runs, parse_examples_parallel, OwnedColumn, Request,
};
use crate::error::{Error, Result};
use crate::example::Schema;
use crate::framing::{Scanner, Skipped, Span};
use crate::py::codec::{columns_out, owned_columns_out, requests, schema, PyColumn};
use crate::py::records::{skipped_regions, PyRecordScanner, SkippedRegion};
use crate::py::shared::lock_shared;
use crate::window::Mapping;

/// One parsed batch, owning its values; `records` is 0 at the end of the
/// file (or of the limit), where `skipped` holds the damage found last.
struct Batch {
    records: usize,
    /// The columns of each run of records the batch was parsed in, joined by
    /// the thread that takes the batch (see `PyExampleBatches::__next__`).
    runs: Vec<Vec<OwnedColumn>>,
    skipped: Vec<Skipped>,
}

/// A batch as Python gets it: `payload` is the bytes of its records.
struct Handed {
    records: usize,
    payload: usize,
    columns: Vec<PyColumn>,
    skipped: Vec<Skipped>,
}

/// Records from which a batch of `bytes` objects is made on the caller's
/// thread: a worker would copy them into one buffer first, then Python into
/// the objects, and two copies of large values cost more than the overlap gains.
const OBJECTS_INLINE_FROM: usize = 4096;

/// What a worker hands over: a batch, an error, or the panic of a bug.
type Outcome = std::thread::Result<Result<Batch>>;

/// A batch framed but not parsed yet: its spans, the file's index of its
/// first record, and the damage skipped on the way to it.
struct Framed {
    spans: Vec<Span>,
    first: u64,
    skipped: Vec<Skipped>,
    /// The records copied out of a stream's window (the spans then point
    /// here), so that the next batch can be framed, and decompressed, while
    /// this one is parsed.
    copied: Option<Vec<u8>>,
}

/// The most payload bytes of a stream's batch copied out to be parsed while
/// the next is framed: a larger batch is parsed in place, one step at a time,
/// rather than held twice.
const COPIED_BATCH_BYTES: usize = 64 << 20;

/// How much a batch holds: `records`, or fewer once their payloads reach
/// `bytes` (at least one record either way).
#[derive(Clone, Copy)]
struct BatchSize {
    records: usize,
    bytes: usize,
}

/// Frames the next batch: `size` records (or bytes), or what is `left` of a limit.
/// With `copy`, the records of a stream (not a mapped file, whose records stay
/// where they are) are copied out of the scanner's window, where the batch is
/// one to frame the next behind (`FRAME_AHEAD_RECORDS`) and `COPIED_BATCH_BYTES` at most.
fn frame(
    scanner: &mut Scanner,
    left: &mut Option<u64>,
    size: BatchSize,
    mut spans: Vec<Span>,
    copy: bool,
) -> Result<Framed> {
    let want = left.map_or(size.records as u64, |left| left.min(size.records as u64)) as usize;
    if want > 0 {
        scanner.next_batch(want, size.bytes, &mut spans)?;
    } else {
        spans.clear();
    }
    if let Some(left) = left {
        *left -= spans.len() as u64;
    }
    let bytes: usize = spans.iter().map(|s| s.len).sum();
    let worth_it = spans.len() >= FRAME_AHEAD_RECORDS && bytes <= COPIED_BATCH_BYTES;
    let copied = (copy && worth_it && scanner.mapping().is_none()).then(|| {
        let mut data = Vec::with_capacity(bytes);
        for span in &mut spans {
            let at = data.len() as u64;
            data.extend_from_slice(scanner.payload(*span));
            span.pos = at;
        }
        data
    });
    Ok(Framed {
        first: scanner.records() - spans.len() as u64,
        spans,
        skipped: scanner.take_skipped(),
        copied,
    })
}

/// The records of `spans` in `held` (a mapped file, or a batch copied out).
fn records_in<'a>(held: &'a [u8], spans: &[Span]) -> Vec<&'a [u8]> {
    spans
        .iter()
        .map(|s| &held[s.pos as usize..s.pos as usize + s.len])
        .collect()
}

/// Records in a batch from which the next batch is framed while this one is
/// parsed: framing costs per record (a header, a CRC, a jump), and a batch of
/// fewer, larger records would only keep more of the file's pages resident.
const FRAME_AHEAD_RECORDS: usize = 1024;

/// The scanner and what to parse; makes one batch per call.
struct Reader {
    scanner: Scanner,
    requests: Vec<Request>,
    schema: Schema,
    size: BatchSize,
    /// Records still to frame, where the caller set a limit.
    left: Option<u64>,
    /// The file, where it is mapped: the next batch is then framed on another
    /// thread while this one is parsed, its records read from here.
    mapping: Option<Arc<Mapping>>,
    /// The next batch, framed while the last one was parsed (or the error
    /// framing it met, reported after the batch before it).
    framed: Option<Result<Framed>>,
    /// Span storage of the last batch, for the next.
    spare: Vec<Span>,
}

impl Reader {
    fn new(
        scanner: Scanner,
        requests: Vec<Request>,
        schema: Schema,
        size: BatchSize,
        left: Option<u64>,
    ) -> Self {
        Reader {
            mapping: scanner.mapping(),
            scanner,
            requests,
            schema,
            size,
            left,
            framed: None,
            spare: Vec::new(),
        }
    }

    /// The batch framed ahead, or else the next one framed now (with `copy`,
    /// a stream's records copied out, to frame the next batch while it is parsed).
    fn take_framed(&mut self, copy: bool) -> Result<Framed> {
        self.framed.take().unwrap_or_else(|| {
            let spare = std::mem::take(&mut self.spare);
            frame(&mut self.scanner, &mut self.left, self.size, spare, copy)
        })
    }

    /// The next batch, owning its values (for the worker to hand over).
    fn next(&mut self) -> Result<Batch> {
        let ahead = crate::threads::available() > 1;
        let framed = self.take_framed(ahead)?;
        let (requests, schema) = (&self.requests, self.schema);
        // Errors name the record's index in the file, not in the batch.
        let parse = |records: &[&[u8]]| {
            parse_example_runs(records, requests, schema, owned_columns)
                .map_err(|failure| Error::Parse(failure.shifted(framed.first as usize)))
        };
        let more = !framed.spans.is_empty() && self.left != Some(0);
        // Where the records are when they are not in the scanner's window.
        let held: Option<&[u8]> = match (&framed.copied, &self.mapping) {
            (Some(copied), _) => Some(copied),
            (None, Some(mapping)) => Some(mapping),
            (None, None) => None,
        };
        let runs = match held {
            Some(held) if more && framed.spans.len() >= FRAME_AHEAD_RECORDS && ahead => {
                let (scanner, left, size) = (&mut self.scanner, &mut self.left, self.size);
                let spare = std::mem::take(&mut self.spare);
                let (runs, next) = std::thread::scope(|scope| {
                    let ahead = scope.spawn(move || frame(scanner, left, size, spare, true));
                    let runs = parse(&records_in(held, &framed.spans));
                    let next = ahead
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                    (runs, next)
                });
                self.framed = Some(next);
                runs
            }
            Some(held) => parse(&records_in(held, &framed.spans)),
            None => {
                let scanner = &self.scanner;
                let records: Vec<&[u8]> =
                    framed.spans.iter().map(|&s| scanner.payload(s)).collect();
                parse(&records)
            }
        };
        // Parsed from a mapping: if the file shrank meanwhile, nothing of it is to be trusted.
        self.scanner.check_source()?;
        let runs = runs?;
        let count = framed.spans.len();
        self.spare = framed.spans;
        Ok(Batch {
            records: count,
            runs,
            skipped: framed.skipped,
        })
    }

    fn next_caught(&mut self) -> Outcome {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.next()))
    }

    /// The next batch made on the caller's thread, straight into Python
    /// objects: byte strings become `bytes` without being flattened first.
    fn next_for_python(&mut self, py: Python<'_>, flat: bool) -> Result<Handed> {
        let framed = py.detach(|| self.take_framed(false))?;
        let records: Vec<&[u8]> = match &framed.copied {
            Some(copied) => records_in(copied, &framed.spans),
            None => framed
                .spans
                .iter()
                .map(|&s| self.scanner.payload(s))
                .collect(),
        };
        let (requests, schema) = (&self.requests, self.schema);
        let columns = py
            .detach(|| parse_examples_parallel(&records, requests, schema, |c| c))
            .map_err(|failure| Error::Parse(failure.shifted(framed.first as usize)))?;
        let columns = columns_out(py, columns, flat);
        // Copied out of the window: if the file shrank meanwhile, the copies are not to be trusted.
        self.scanner.check_source()?;
        let handed = Handed {
            records: framed.spans.len(),
            payload: framed.spans.iter().map(|s| s.len).sum(),
            columns,
            skipped: framed.skipped,
        };
        self.spare = framed.spans;
        Ok(handed)
    }
}

enum State {
    /// Each batch is made when asked for, on the caller's thread.
    Inline(Box<Reader>),
    /// A worker makes the next batch while Python takes this one.
    Ahead {
        outcomes: Receiver<Outcome>,
        worker: JoinHandle<()>,
    },
    /// The end, an error, or `close` was reached.
    Done,
}

/// Runs `reader` on its own thread, one batch ahead: the channel holds no
/// batch, so the worker waits with its finished batch until Python takes it.
/// It stops after the end or an error, or when the receiver is dropped.
fn spawn(mut reader: Box<Reader>) -> State {
    let (send, outcomes) = sync_channel(0);
    let worker = std::thread::spawn(move || loop {
        let outcome = reader.next_caught();
        let last = !matches!(&outcome, Ok(Ok(batch)) if batch.records > 0);
        if send.send(outcome).is_err() || last {
            break;
        }
    });
    State::Ahead { outcomes, worker }
}

#[pyclass(module = "recordkit._native", name = "ExampleBatches", frozen)]
pub struct PyExampleBatches {
    state: Mutex<State>,
    /// Skipped regions of the batches handed out, for `take_skipped`.
    skipped: Mutex<Vec<Skipped>>,
    flat_bytes: bool,
    /// More than one thread is allowed, and the source is not a Python file
    /// object (read with the GIL, which the worker would have to take from
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
    /// arrays. After the first batch, a worker thread reads ahead unless
    /// recordkit is limited to one thread, the source is a Python file
    /// object, or the records are large and become `bytes` objects.
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
            let (scanner, python_source) = scanner.take(py)?;
            let size = BatchSize {
                records: batch_size,
                bytes: max_bytes.unwrap_or(usize::MAX),
            };
            let reader = Box::new(Reader::new(scanner, requests, schema, size, limit));
            Ok(PyExampleBatches {
                state: Mutex::new(State::Inline(reader)),
                skipped: Mutex::new(Vec::new()),
                flat_bytes,
                may_read_ahead: !python_source && crate::threads::available() > 1,
            })
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<(usize, Vec<PyColumn>)>> {
        crate::py::errors::guard(|| {
            let mut state = lock_shared(py, &self.state);
            let made = match &mut *state {
                State::Done => return Ok(None),
                State::Inline(reader) => reader.next_for_python(py, self.flat_bytes),
                State::Ahead { outcomes, .. } => {
                    // Only a bug can end the worker without a last outcome.
                    let outcome = py.detach(move || outcomes.recv()).unwrap_or_else(|_| {
                        Err(Box::new("the reading thread ended without a word"))
                    });
                    match outcome {
                        Ok(made) => made.map(|batch| {
                            // Joined here, on a thread that would only wait for the
                            // next batch, not on the worker's way to parsing it.
                            let columns = py.detach(|| join_runs(batch.runs));
                            Handed {
                                records: batch.records,
                                payload: 0, // not needed: reading ahead is decided
                                columns: owned_columns_out(py, columns, self.flat_bytes),
                                skipped: batch.skipped,
                            }
                        }),
                        Err(panic) => {
                            *state = State::Done;
                            std::panic::resume_unwind(panic)
                        }
                    }
                }
            };
            let handed = made.inspect_err(|_| *state = State::Done)?;
            lock_shared(py, &self.skipped).extend(handed.skipped);
            if handed.records == 0 {
                *state = State::Done;
                return Ok(None);
            }
            // Decided once, on the first batch, which is made here.
            let small = handed.payload / handed.records < OBJECTS_INLINE_FROM;
            let inline = matches!(*state, State::Inline(_));
            if inline && self.may_read_ahead && (self.flat_bytes || small) {
                if let State::Inline(reader) = std::mem::replace(&mut *state, State::Done) {
                    *state = spawn(reader);
                }
            }
            Ok(Some((handed.records, handed.columns)))
        })
    }

    /// Damaged regions skipped in the batches handed out since the last call.
    fn take_skipped(&self, py: Python<'_>) -> Vec<SkippedRegion> {
        skipped_regions(std::mem::take(&mut *lock_shared(py, &self.skipped)))
    }

    /// Stops reading ahead and releases the file, once the worker has
    /// finished the batch it is on.
    fn close(&self, py: Python<'_>) {
        let state = std::mem::replace(&mut *lock_shared(py, &self.state), State::Done);
        if let State::Ahead { outcomes, worker } = state {
            drop(outcomes);
            // The worker never takes the GIL, so waiting for it with the GIL released is safe.
            let _ = py.detach(|| worker.join());
        }
    }
}

#[cfg(test)]
mod timing {
    use super::*;
    use crate::framing::{write_tfrecord, Format};
    use crate::window::MappedWindow;

    /// The batch reader alone, as `read_examples` drives it without Python:
    /// 1 M tutorial records from a mapped file, 1 and 2 threads alternating,
    /// every wall time printed with the process's CPU time (the machine's
    /// noise shows in their spread; CPU time that grows with the thread
    /// count for the same records is work the threads add).
    /// `cargo test --release py::batches::timing -- --ignored --nocapture`
    #[cfg(unix)]
    #[test]
    #[ignore]
    fn reader_by_thread_count() {
        let (records, requests) = crate::columns::timing::tutorial_records_of(1_000_000);
        let path =
            std::env::temp_dir().join(format!("recordkit-timing-{}.tfrecord", std::process::id()));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        records
            .iter()
            .for_each(|r| write_tfrecord(&mut out, r).unwrap());
        drop(out);
        crate::py::memory::adapt_malloc_to_large_records();
        let cpu = || crate::columns::timing::cpu_seconds(libc::CLOCK_PROCESS_CPUTIME_ID);
        let size = BatchSize {
            records: 65536,
            bytes: usize::MAX,
        };
        let mut times: [Vec<(u32, u32)>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..12 {
            for threads in [1, 2] {
                crate::threads::set(Some(threads));
                let (start, cpu_start) = (std::time::Instant::now(), cpu());
                let win = MappedWindow::new(std::fs::File::open(&path).unwrap()).unwrap();
                let scanner =
                    Scanner::new(Box::new(win), Format::TfRecord, true, false, String::new())
                        .unwrap();
                let mut reader =
                    Reader::new(scanner, requests.clone(), Schema::TensorFlow, size, None);
                let mut read = 0;
                loop {
                    let batch = reader.next().unwrap();
                    if batch.records == 0 {
                        break;
                    }
                    read += batch.records;
                    std::hint::black_box(batch);
                }
                assert_eq!(read, records.len());
                times[threads - 1].push((
                    start.elapsed().as_millis() as u32,
                    ((cpu() - cpu_start) * 1e3) as u32,
                ));
            }
        }
        crate::threads::set(None);
        std::fs::remove_file(&path).unwrap();
        for (i, mut t) in times.into_iter().enumerate() {
            t.sort_unstable();
            let shown: Vec<String> = t.iter().map(|(w, c)| format!("{w}/{c}")).collect();
            println!(
                "{} thread(s), ms wall/CPU, sorted: {}",
                i + 1,
                shown.join(" ")
            );
        }
    }
}
