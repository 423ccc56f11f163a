//! `RecordScanner` and `RecordWriter`: the record layer as Python classes.
//! The Python package wraps them (`recordkit/records.py`); users never see
//! these names.

use std::fs::File;
use std::io::{BufWriter, Cursor, Read, Seek, Write};
use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use numpy::{IntoPyArray, PyReadonlyArray1};

use crate::columns::parse_sequence_examples;
use crate::compression::{Compression, DeflateOptions, Encoder, Inflater};
use crate::encode::{map_key_order, ColumnValues, EntryLayout, RowPlan};
use crate::error::{Error, Result};
use crate::example::Schema;
use crate::framing::{header_len, write_ofrecord, write_tfrecord, Format, Scanner, Skipped, Span};
use crate::py::codec::{
    columns_out, requests, sequence_columns_out, BorrowedValues, ColumnSource, Flat, PyColumn,
};
use crate::py::files::{Payload, PyFileReader, PyFileWriter};
use crate::py::shared::lock_shared;
use crate::reserve::ReservedFile;
use crate::window::{MappedWindow, Stream, StreamWindow, Window};
use crate::write_pipeline::{
    chunk_rows, spare_from_process, spare_to_process, write_rows, Caller, WriteBehind,
};

/// Bytes read to guess the compression: one TFRecord header.
const PEEK: usize = 12;

fn suffix_hint(name: &str) -> Option<Compression> {
    let lower = name.to_ascii_lowercase();
    if lower.ends_with(".gz") || lower.ends_with(".gzip") {
        Some(Compression::Gzip)
    } else if lower.ends_with(".zz") || lower.ends_with(".zlib") {
        Some(Compression::Zlib)
    } else {
        None
    }
}

fn read_prefix<R: Read>(r: &mut R) -> std::io::Result<Vec<u8>> {
    let mut prefix = Vec::with_capacity(PEEK);
    r.by_ref().take(PEEK as u64).read_to_end(&mut prefix)?;
    Ok(prefix)
}

fn stream_window<R: Read + Send + Sync + 'static>(
    r: R,
    compression: Compression,
) -> Box<dyn Window> {
    let stream = match compression {
        Compression::None => Stream::Raw(r),
        kind => Stream::Compressed(Box::new(Inflater::new(r, kind))),
    };
    Box::new(StreamWindow::new(stream))
}

/// Opens a local file: memory-mapped when uncompressed and mappable.
fn open_path(
    path: &str,
    requested: Option<Compression>,
    format: Format,
) -> Result<(Box<dyn Window>, Compression)> {
    let io = |source| Error::Io {
        path: path.to_string(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let compression = match requested {
        Some(c) => c,
        None => {
            let prefix = read_prefix(&mut file).map_err(io)?;
            file.rewind().map_err(io)?;
            Compression::detect(&prefix, suffix_hint(path), format == Format::TfRecord)
        }
    };
    let is_file = file.metadata().map_err(io)?.is_file();
    if compression == Compression::None && is_file {
        if let Ok(win) = file.try_clone().and_then(MappedWindow::new) {
            return Ok((Box::new(win), compression));
        }
    }
    if compression != Compression::None && is_file {
        // Read again from the start to read ahead of a huge record's claim
        // (see `Window::read_ahead`), so a compressed bomb costs no memory.
        // The same open file, not the path: a file renamed over it is not it.
        let reopen = move || -> std::io::Result<Stream<File>> {
            let mut again = file.try_clone()?;
            again.rewind()?;
            Ok(Stream::Compressed(Box::new(Inflater::new(
                again,
                compression,
            ))))
        };
        return Ok((
            Box::new(StreamWindow::rereadable(Box::new(reopen)).map_err(io)?),
            compression,
        ));
    }
    Ok((stream_window(file, compression), compression))
}

/// Wraps a Python file object, reading a prefix to guess the compression.
fn open_pyfile(
    obj: Py<PyAny>,
    name: &str,
    requested: Option<Compression>,
    format: Format,
) -> Result<(Box<dyn Window>, Compression)> {
    let mut reader = PyFileReader::new(obj);
    let (prefix, compression) = match requested {
        Some(c) => (Vec::new(), c),
        None => {
            let prefix = read_prefix(&mut reader).map_err(|source| Error::Io {
                path: name.to_string(),
                source,
            })?;
            let c = Compression::detect(&prefix, suffix_hint(name), format == Format::TfRecord);
            (prefix, c)
        }
    };
    Ok((
        stream_window(Cursor::new(prefix).chain(reader), compression),
        compression,
    ))
}

/// A skipped damaged region as Python sees it:
/// `(offset, bytes_skipped, kind, detail, record_index)`.
pub type SkippedRegion = (u64, u64, &'static str, String, u64);

/// Skipped regions as Python sees them.
pub fn skipped_regions(skipped: Vec<Skipped>) -> Vec<SkippedRegion> {
    skipped
        .into_iter()
        .map(|s| (s.offset, s.bytes, s.kind.name(), s.detail, s.record_index))
        .collect()
}

impl PyRecordScanner {
    /// Takes the scanner out, leaving this object closed: whether its source
    /// is a Python file object comes with it.
    pub fn take(&self, py: Python<'_>) -> PyResult<(Scanner, bool)> {
        let scanner = lock_shared(py, &self.state).scanner.take();
        let scanner = scanner.ok_or_else(|| Error::Closed("the reader is closed".into()))?;
        Ok((scanner, self.python_source))
    }

    /// Frames the next batch with the GIL released, then hands the scanner
    /// and the batch's spans to `out` (the span buffer is reused across calls).
    fn framed<T>(
        &self,
        py: Python<'_>,
        max_records: usize,
        max_bytes: usize,
        out: impl FnOnce(&mut Scanner, &[Span]) -> PyResult<T>,
    ) -> PyResult<T> {
        let mut state = lock_shared(py, &self.state);
        let state = &mut *state;
        let mut spans = std::mem::take(&mut state.spans);
        let scanner = state.scanner()?;
        py.detach(|| scanner.next_batch(max_records.max(1), max_bytes, &mut spans))?;
        let result = out(scanner, &spans)?;
        state.spans = spans;
        Ok(result)
    }

    /// Frames the next batch, then `parse(payloads, index of the first in the
    /// file)`: `(records framed, what parse made)`. Whatever parse made is
    /// handed out only if the file did not shrink meanwhile.
    fn parsed_batch<T>(
        &self,
        py: Python<'_>,
        max_records: usize,
        parse: impl FnOnce(&[&[u8]], usize) -> PyResult<T>,
    ) -> PyResult<(usize, T)> {
        self.framed(py, max_records, usize::MAX, |scanner, spans| {
            let records: Vec<&[u8]> = spans.iter().map(|&s| scanner.payload(s)).collect();
            let first = (scanner.records() - spans.len() as u64) as usize;
            let made = parse(&records, first)?;
            scanner.check_source()?;
            Ok((spans.len(), made))
        })
    }
}

/// Frames records from a file, in batches, with the GIL released. Threads may
/// share one: calls take turns (a mutex), instead of failing with "Already
/// borrowed" as a plain pyclass would while another call has the GIL released.
#[pyclass(module = "recordkit._native", name = "RecordScanner", frozen)]
pub struct PyRecordScanner {
    state: Mutex<ScanState>,
    compression: Compression,
    /// Read through a Python file object, which needs the GIL.
    python_source: bool,
}

struct ScanState {
    scanner: Option<Scanner>,
    spans: Vec<Span>,
}

impl ScanState {
    fn scanner(&mut self) -> PyResult<&mut Scanner> {
        self.scanner
            .as_mut()
            .ok_or_else(|| Error::Closed("the reader is closed".into()).into())
    }
}

#[pymethods]
impl PyRecordScanner {
    /// `source` is a local path (str) or an object with `read(n)`.
    /// With `unfinished_ends`, a compressed stream that stops at a record
    /// boundary without its end marker (a writer's flush point) ends the scan.
    #[new]
    #[pyo3(signature = (source, *, name, format = "tfrecord", compression = "auto", verify = true, skip_damaged = false, unfinished_ends = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        name: String,
        format: &str,
        compression: &str,
        verify: bool,
        skip_damaged: bool,
        unfinished_ends: bool,
    ) -> PyResult<Self> {
        crate::py::errors::guard(|| {
            let format = Format::parse(format)?;
            let requested = Compression::parse(compression)?;
            let python_source = !source.is_instance_of::<PyString>();
            let (win, compression) = if !python_source {
                let path: String = source.extract()?;
                py.detach(|| open_path(&path, requested, format))?
            } else {
                let obj = source.clone().unbind();
                py.detach(|| open_pyfile(obj, &name, requested, format))?
            };
            let mut scanner = Scanner::new(win, format, verify, skip_damaged, name)?;
            if unfinished_ends {
                scanner.end_at_flush_points();
            }
            crate::py::memory::adapt_malloc_to_large_records();
            Ok(PyRecordScanner {
                state: Mutex::new(ScanState {
                    scanner: Some(scanner),
                    spans: Vec::new(),
                }),
                compression,
                python_source,
            })
        })
    }

    /// The next records as a list of bytes; an empty list at the end.
    #[pyo3(signature = (max_records = 1024, max_bytes = 16 << 20))]
    fn next_batch<'py>(
        &self,
        py: Python<'py>,
        max_records: usize,
        max_bytes: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        crate::py::errors::guard(|| {
            self.framed(py, max_records, max_bytes, |scanner, spans| {
                let list = PyList::new(
                    py,
                    spans
                        .iter()
                        .map(|&span| PyBytes::new(py, scanner.payload(span))),
                )?;
                // Copied out: if the file shrank meanwhile, the copies are not to be trusted.
                scanner.check_source()?;
                Ok(list)
            })
        })
    }

    /// Frames up to `max_records` records and parses them as SequenceExamples:
    /// `(records framed, context columns, feature-list columns)`, as
    /// `parse_sequence_columns` gives them (byte strings flattened with `flat_bytes`).
    #[allow(clippy::type_complexity)]
    #[pyo3(signature = (max_records, context, lists, flat_bytes = false))]
    fn next_sequence_batch(
        &self,
        py: Python<'_>,
        max_records: usize,
        context: Vec<(String, String)>,
        lists: Vec<(String, String)>,
        flat_bytes: bool,
    ) -> PyResult<(
        usize,
        (Vec<PyColumn>, Vec<(Py<PyAny>, Py<PyAny>, Py<PyAny>)>),
    )> {
        crate::py::errors::guard(|| {
            let (context, lists) = (requests(context)?, requests(lists)?);
            self.parsed_batch(py, max_records, |records, first| {
                let (c, l) = py
                    .detach(|| parse_sequence_examples(records, &context, &lists))
                    .map_err(|failure| Error::Parse(failure.shifted(first)))?;
                Ok((
                    columns_out(py, c, flat_bytes, &[]),
                    sequence_columns_out(py, l, flat_bytes),
                ))
            })
        })
    }

    /// Frames up to `max_records` records (or `max_bytes` of payload) without
    /// copying payloads: `(frame offsets, frame sizes)`, whole frames as index
    /// files give them. The byte budget bounds how much of a mapped file is
    /// resident: pages passed over are dropped between calls.
    #[pyo3(signature = (max_records, max_bytes = 16 << 20))]
    fn next_frames<'py>(
        &self,
        py: Python<'py>,
        max_records: usize,
        max_bytes: usize,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        crate::py::errors::guard(|| {
            self.framed(py, max_records, max_bytes, |scanner, spans| {
                let (offsets, sizes): (Vec<u64>, Vec<u64>) =
                    spans.iter().map(|&s| scanner.frame_of(s)).unzip();
                Ok((
                    offsets.into_pyarray(py).into_any(),
                    sizes.into_pyarray(py).into_any(),
                ))
            })
        })
    }

    /// Continues from the frame at stream offset `offset`, the file's record
    /// number `record_index` (forward only).
    fn seek(&self, py: Python<'_>, offset: u64, record_index: u64) -> PyResult<()> {
        crate::py::errors::guard(|| {
            Ok(lock_shared(py, &self.state)
                .scanner()?
                .seek(offset, record_index)?)
        })
    }

    /// Counts the remaining records, skipping payloads.
    fn count(&self, py: Python<'_>) -> PyResult<u64> {
        crate::py::errors::guard(|| {
            let mut state = lock_shared(py, &self.state);
            let scanner = state.scanner()?;
            Ok(py.detach(|| scanner.count())?)
        })
    }

    /// Damaged regions skipped since the last call.
    fn take_skipped(&self, py: Python<'_>) -> PyResult<Vec<SkippedRegion>> {
        crate::py::errors::guard(|| {
            Ok(skipped_regions(
                lock_shared(py, &self.state).scanner()?.take_skipped(),
            ))
        })
    }

    /// Records read so far.
    #[getter]
    fn records(&self, py: Python<'_>) -> PyResult<u64> {
        crate::py::errors::guard(|| Ok(lock_shared(py, &self.state).scanner()?.records()))
    }

    /// Offset of the next record in the (uncompressed) stream.
    #[getter]
    fn position(&self, py: Python<'_>) -> PyResult<u64> {
        crate::py::errors::guard(|| Ok(lock_shared(py, &self.state).scanner()?.position()))
    }

    /// The compression in use: "none", "gzip" or "zlib".
    #[getter]
    fn compression(&self) -> &'static str {
        match self.compression {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Zlib => "zlib",
        }
    }

    /// Releases the file (and its mapping).
    fn close(&self, py: Python<'_>) {
        lock_shared(py, &self.state).scanner = None;
    }
}

type Sink = Encoder<BufWriter<Box<dyn Write + Send + Sync>>>;

/// Frames and writes records, in bulk, with the GIL released.
#[pyclass(module = "recordkit._native", name = "RecordWriter")]
pub struct PyRecordWriter {
    sink: Option<Sink>,
    /// Why an earlier write failed. The file then ends in part of a record
    /// (or in the middle of a compressed stream): no later write may follow
    /// it, and `close` must fail, so that the file is not kept.
    failure: Option<String>,
    format: Format,
    name: String,
    records: u64,
    /// Framed bytes written, before compression.
    bytes: u64,
    /// Encoding buffers kept from one `write_columns` call to the next: a
    /// new one would be zeroed again (a write of many slices zeroed tens of MB).
    spare: Vec<Vec<u8>>,
    /// Rows being written on a thread of their own, which holds the sink.
    behind: Option<RowsBehind>,
    /// Whether the sink is written without the GIL (a file, not a Python object).
    gil_free: bool,
    /// This writer's caller, as the threads writing behind it see it.
    caller: std::sync::Arc<Caller>,
}

impl Drop for PyRecordWriter {
    fn drop(&mut self) {
        // The thread writing behind reads memory that its `owners` keep alive.
        if let Some(behind) = self.behind.take() {
            let _ = behind.work.wait();
        }
    }
}

/// The rows of one `write_columns` call, ready to be encoded without the GIL.
struct ColumnRows {
    rows: usize,
    schema: Schema,
    format: Format,
    sources: Vec<ColumnSource>,
    layouts: Vec<EntryLayout>,
}

impl ColumnRows {
    /// Encodes the rows on every core and writes them to `sink` in order;
    /// returns the bytes written.
    /// `caller`: the thread that called the write, where it goes on beside it.
    fn write(
        &self,
        sink: &mut Sink,
        spare: &mut Vec<Vec<u8>>,
        name: &str,
        caller: Option<&Caller>,
    ) -> Result<u64> {
        let (rows, format) = (self.rows, self.format);
        let flats: Vec<Flat<'_>> = self.sources.iter().map(|c| c.values.flat()).collect();
        let columns: Vec<ColumnValues<'_>> = self
            .sources
            .iter()
            .zip(&flats)
            .map(|(c, flat)| ColumnValues {
                values: flat.all(),
                splits: c.splits,
                present: c.present,
            })
            .collect();
        let layouts: Vec<&EntryLayout> = self.layouts.iter().collect();
        let plan = RowPlan::new(&layouts, &columns, self.schema == Schema::TensorFlow);
        let mut written = 0u64;
        let mut write = |buffer: &[u8]| {
            written += buffer.len() as u64;
            sink.write_all(buffer).map_err(|source| Error::Io {
                path: name.to_string(),
                source,
            })
        };
        let value_bytes = flats.iter().map(Flat::byte_len).sum();
        let per_chunk = chunk_rows(value_bytes, flats.len(), rows);
        write_rows(&plan, rows, per_chunk, format, &mut write, spare, caller)?;
        Ok(written)
    }
}

/// A `write_columns` call's rows, encoded and written behind the caller.
struct RowsBehind {
    work: WriteBehind<WrittenBehind>,
    /// The Python objects whose memory the thread reads, released once it ends.
    owners: Vec<Py<PyAny>>,
    rows: usize,
}

/// What the work that wrote rows behind hands back.
struct WrittenBehind {
    sink: Sink,
    spare: Vec<Vec<u8>>,
    result: Result<u64>,
}

/// Records gathered from an iterable before one trip into Rust.
const WRITE_BATCH_RECORDS: usize = 4096;
const WRITE_BATCH_BYTES: usize = 16 << 20;
const WRITE_BUFFER: usize = 1 << 20;

/// The writer's open sink, or why it has none.
fn open_sink<'a>(
    sink: &'a mut Option<Sink>,
    failure: &Option<String>,
    name: &str,
) -> Result<&'a mut Sink> {
    match (sink, failure) {
        (_, Some(failure)) => Err(Error::Closed(format!(
            "the writer for '{name}' stopped at an earlier error ({failure}); what it wrote is \
             incomplete and is not kept"
        ))),
        (Some(sink), None) => Ok(sink),
        (None, None) => Err(Error::Closed(format!("the writer for '{name}' is closed"))),
    }
}

impl PyRecordWriter {
    /// Waits for the rows written behind, if any, and takes the sink back;
    /// their failure becomes the writer's.
    fn settle_behind(&mut self, py: Python<'_>) -> Result<()> {
        let Some(RowsBehind { work, owners, rows }) = self.behind.take() else {
            return Ok(());
        };
        let joined = py.detach(|| work.wait());
        drop(owners);
        let WrittenBehind {
            sink,
            spare,
            result,
        } = joined.unwrap_or_else(|panic| {
            self.failure = Some("an internal error stopped a write".into());
            std::panic::resume_unwind(panic)
        });
        self.sink = Some(sink);
        self.spare = spare;
        let written = self.unless_failed(result)?;
        self.records += rows as u64;
        self.bytes += written;
        Ok(())
    }

    /// `result`, keeping its error (if any) as the reason the writer can no
    /// longer be used.
    fn unless_failed<T>(&mut self, result: Result<T>) -> Result<T> {
        if let Err(error) = &result {
            self.failure = Some(error.to_string());
            self.sink = None;
        }
        result
    }

    fn write_payloads(&mut self, py: Python<'_>, payloads: &[Payload]) -> PyResult<()> {
        self.settle_behind(py)?;
        let format = self.format;
        if format == Format::OfRecord && payloads.iter().any(|p| p.is_empty()) {
            return Err(Error::InvalidArgument(
                "an OFRecord record cannot be empty: OneFlow's reader refuses length 0".into(),
            )
            .into());
        }
        let name = &self.name;
        let sink = open_sink(&mut self.sink, &self.failure, name)?;
        let written = py.detach(|| {
            payloads
                .iter()
                .try_for_each(|p| match format {
                    Format::TfRecord => write_tfrecord(sink, p),
                    Format::OfRecord => write_ofrecord(sink, p),
                })
                .map_err(|source| Error::Io {
                    path: name.clone(),
                    source,
                })
        });
        self.unless_failed(written)?;
        self.records += payloads.len() as u64;
        self.bytes += payloads
            .iter()
            .map(|p| (p.len() + header_len(format)) as u64 + format.footer_len())
            .sum::<u64>();
        Ok(())
    }
}

#[pymethods]
impl PyRecordWriter {
    /// `sink` is a local path (str, created or truncated) or an object with `write(b)`.
    /// The deflate parameters (zlib's) apply to gzip and zlib compression.
    #[new]
    #[pyo3(signature = (sink, *, name, format = "tfrecord", compression = "none", compression_level = -1, window_bits = 15, mem_level = 8, strategy = 0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        sink: &Bound<'_, PyAny>,
        name: String,
        format: &str,
        compression: &str,
        compression_level: i32,
        window_bits: u8,
        mem_level: u8,
        strategy: u8,
    ) -> PyResult<Self> {
        crate::py::errors::guard(|| {
            let format = Format::parse(format)?;
            let options = DeflateOptions {
                level: compression_level,
                window_bits,
                mem_level,
                strategy,
            }
            .checked()?;
            let compression = Compression::parse(compression)?.ok_or_else(|| {
                Error::InvalidArgument(
                    "a writer needs a compression: None, \"gzip\" or \"zlib\" (not \"auto\")"
                        .into(),
                )
            })?;
            let gil_free = sink.is_instance_of::<PyString>();
            let out: Box<dyn Write + Send + Sync> = if gil_free {
                let path: String = sink.extract()?;
                // An error names the file asked for (`name`), not the temporary file written.
                let file = py
                    .detach(|| File::create(&path))
                    .map_err(|source| Error::Io {
                        path: name.clone(),
                        source,
                    })?;
                Box::new(ReservedFile::new(file))
            } else {
                Box::new(PyFileWriter::new(sink.clone().unbind()))
            };
            let sink = Encoder::with_options(
                BufWriter::with_capacity(WRITE_BUFFER, out),
                compression,
                options,
            );
            Ok(PyRecordWriter {
                sink: Some(sink),
                failure: None,
                format,
                name,
                records: 0,
                bytes: 0,
                spare: spare_from_process(),
                behind: None,
                gil_free,
                caller: Default::default(),
            })
        })
    }

    /// Writes one record (bytes-like, str, or a recordkit message).
    fn write(&mut self, py: Python<'_>, record: &Bound<'_, PyAny>) -> PyResult<()> {
        crate::py::errors::guard(|| {
            let payload = crate::py::messages::record_payload(record)?;
            self.write_payloads(py, std::slice::from_ref(&payload))
        })
    }

    /// Writes every record of an iterable; returns how many.
    fn write_many(&mut self, py: Python<'_>, records: &Bound<'_, PyAny>) -> PyResult<u64> {
        crate::py::errors::guard(|| {
            let before = self.records;
            let mut batch = Vec::with_capacity(WRITE_BATCH_RECORDS);
            let mut bytes = 0;
            for item in records.try_iter()? {
                let payload = crate::py::messages::record_payload(&item?)?;
                bytes += payload.len();
                batch.push(payload);
                if batch.len() >= WRITE_BATCH_RECORDS || bytes >= WRITE_BATCH_BYTES {
                    self.write_payloads(py, &batch)?;
                    batch.clear();
                    bytes = 0;
                }
            }
            self.write_payloads(py, &batch)?;
            Ok(self.records - before)
        })
    }

    /// Encodes `rows` Examples (or OFRecords, with `schema="oneflow"`) from
    /// columns and writes them: `columns` is `[(name, kind, values, splits,
    /// present or None)]`, row `r` of a column holding `values[splits[r]:splits[r+1]]`.
    ///
    /// With `behind`, the rows are encoded and written on a thread of their
    /// own and the call returns once the columns are read: the caller reads
    /// the next rows meanwhile, holding the GIL, which that thread never needs
    /// (a Python helper thread waited for it up to the interpreter's 5 ms
    /// switch interval at each slice). The next call (or `settle`, `close`)
    /// waits for them and raises their failure, if any.
    #[pyo3(signature = (rows, columns, schema = "tensorflow", behind = false))]
    fn write_columns(
        &mut self,
        py: Python<'_>,
        rows: usize,
        columns: &Bound<'_, PyAny>,
        schema: &str,
        behind: bool,
    ) -> PyResult<u64> {
        crate::py::errors::guard(|| {
            let schema = match schema {
                "tensorflow" => Schema::TensorFlow,
                "oneflow" => Schema::OneFlow,
                _ => {
                    return Err(Error::InvalidArgument(format!("unknown schema {schema:?}")).into())
                }
            };
            // The items (immutable tuples) own every array the sources lend.
            let mut owners: Vec<Py<PyAny>> = Vec::new();
            let mut sources = Vec::new();
            for item in columns.try_iter()? {
                let item = item?;
                let (key, kind, values, splits, present): (
                    String,
                    String,
                    Bound<'_, PyAny>,
                    PyReadonlyArray1<'_, i64>,
                    Option<PyReadonlyArray1<'_, bool>>,
                ) = item.extract()?;
                let values = BorrowedValues::extract(&kind, &values).map_err(|e| {
                    // (value index, problem) -> (column, value index, problem): the caller names the row.
                    match e
                        .value(py)
                        .getattr("args")
                        .and_then(|a| a.extract::<(usize, String)>())
                    {
                        Ok((index, problem)) if e.is_instance_of::<PyValueError>(py) => {
                            PyValueError::new_err((key.clone(), index, problem))
                        }
                        _ => e,
                    }
                })?;
                // SAFETY: `owners` holds the item until the source is dropped:
                // below, or after the thread writing behind is joined (`settle`,
                // and `Drop`). As for any C extension that releases the GIL over
                // an array, no other thread is assumed to resize or write the
                // arrays meanwhile; recordkit's own caller runs no code that does.
                sources.push(unsafe { ColumnSource::lend(key, values, splits, present)? });
                owners.push(item.unbind());
            }
            sources.sort_by(|a, b| map_key_order(&a.key, &b.key));
            let mut layouts = Vec::with_capacity(sources.len());
            // The columns of a slice of 1-D arrays share one splits array: scanned once.
            let mut rising: Vec<&[i64]> = Vec::new();
            for source in &sources {
                layouts.push(
                    EntryLayout::new(&source.key, Some(source.values.kind()), schema)
                        .map_err(|m| Error::InvalidArgument(m.0.to_string()))?,
                );
                let known = rising.iter().any(|s| std::ptr::eq(*s, source.splits));
                source.check(rows, known)?;
                if !known {
                    rising.push(source.splits);
                }
            }
            let format = self.format;
            // A row every column leaves out would be an empty OFRecord, which
            // OneFlow's reader refuses: refused here, before anything is written.
            // Only where every column has rows without the feature can one be.
            let masks: Option<Vec<&[bool]>> = sources.iter().map(|c| c.present).collect();
            if let (Format::OfRecord, Some(masks)) = (format, masks) {
                let empty = py.detach(|| (0..rows).find(|&row| masks.iter().all(|p| !p[row])));
                if let Some(row) = empty {
                    // (row, problem): the caller names the row in the whole input.
                    return Err(PyValueError::new_err((
                        row,
                        "no column has a value, and an OFRecord cannot be empty (OneFlow's \
                         reader refuses length 0): give the row a value or leave it out",
                    )));
                }
            }
            self.settle_behind(py)?;
            let rows_written = ColumnRows {
                rows,
                schema,
                format,
                sources,
                layouts,
            };
            if !(behind && self.gil_free && crate::threads::available() > 1) {
                let name = &self.name;
                let sink = open_sink(&mut self.sink, &self.failure, name)?;
                let spare = &mut self.spare;
                let written = py.detach(|| rows_written.write(sink, spare, name, None));
                drop(rows_written); // before `owners`, whose memory it lends
                let written = self.unless_failed(written)?;
                self.records += rows as u64;
                self.bytes += written;
                return Ok(rows as u64);
            }
            open_sink(&mut self.sink, &self.failure, &self.name)?;
            let mut sink = self.sink.take().expect("open_sink found it");
            let mut spare = std::mem::take(&mut self.spare);
            let name = self.name.clone();
            let work = WriteBehind::start(&self.caller, move |caller| {
                let result = rows_written.write(&mut sink, &mut spare, &name, Some(caller));
                WrittenBehind {
                    sink,
                    spare,
                    result,
                }
            });
            match work {
                Ok(work) => {
                    self.behind = Some(RowsBehind { work, owners, rows });
                    Ok(rows as u64)
                }
                Err(source) => {
                    // The sink went with the thread that never started.
                    self.failure = Some(format!("no thread could be started to write: {source}"));
                    Err(Error::Io {
                        path: self.name.clone(),
                        source,
                    }
                    .into())
                }
            }
        })
    }

    /// Waits for rows written behind (see `write_columns`), raising their failure.
    fn settle(&mut self, py: Python<'_>) -> PyResult<()> {
        crate::py::errors::guard(|| Ok(self.settle_behind(py)?))
    }

    /// Pushes buffered records to the file (for compressed files, a flush point).
    fn flush(&mut self, py: Python<'_>) -> PyResult<()> {
        crate::py::errors::guard(|| {
            self.settle_behind(py)?;
            let name = &self.name;
            let sink = open_sink(&mut self.sink, &self.failure, name)?;
            let flushed = py.detach(|| sink.flush()).map_err(|source| Error::Io {
                path: name.clone(),
                source,
            });
            self.unless_failed(flushed)?;
            Ok(())
        })
    }

    /// Ends the compressed stream and flushes everything. Idempotent, but
    /// after a failed write it fails every time: the file is incomplete.
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        crate::py::errors::guard(|| {
            self.settle_behind(py)?;
            spare_to_process(std::mem::take(&mut self.spare));
            if self.failure.is_some() {
                open_sink(&mut self.sink, &self.failure, &self.name)?;
            }
            if let Some(sink) = self.sink.take() {
                let name = &self.name;
                let finished = py
                    .detach(|| sink.finish().and_then(|mut w| w.flush()))
                    .map_err(|source| Error::Io {
                        path: name.clone(),
                        source,
                    });
                self.unless_failed(finished)?;
            }
            Ok(())
        })
    }

    /// Records written so far (once those written behind are done).
    #[getter]
    fn records(&mut self, py: Python<'_>) -> PyResult<u64> {
        self.settle(py)?;
        Ok(self.records)
    }

    /// Framed bytes written so far, before compression.
    #[getter]
    fn bytes(&mut self, py: Python<'_>) -> PyResult<u64> {
        self.settle(py)?;
        Ok(self.bytes)
    }

    /// Whether `close` has run.
    #[getter]
    fn closed(&self) -> bool {
        self.sink.is_none() && self.behind.is_none()
    }
}
