//! Python lists and object arrays of values turned into flat columns in one
//! pass, for writing: no NumPy conversion per column and no Python object made.
//!
//! This loop reads every Python object of a column while holding the GIL, so
//! it is the floor of a write from Python values. It borrows each object
//! instead of taking a reference (no count changed, twice, per value), asks its
//! exact type by pointer, and builds the row splits and the presence mask only
//! once a row needs them: a column of one value per row has neither. It reads
//! lists, tuples, bytes and floats through CPython's inline accessors, which
//! is why the extension is built for each CPython version rather than for the
//! stable ABI (where each is a function call): a fifth of the pass, 26.4 ->
//! 20.5 ms per 1 M tutorial rows (benchmarks/README.md).
//!
//! Large columns are read on several threads while the caller holds the GIL
//! ([`read_columns`]): the others read without it, plain memory reads only,
//! which the GIL held by the caller keeps safe.

use numpy::{IntoPyArray, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::py::list_column::*;

/// Rows a detached read takes at least, in each part of a column: fewer are
/// not worth handing to another thread (a new thread's start took about
/// 50 us; a parked thread's wake-up is less, but it may start one), at 3-10
/// ns a row.
const PART_ROWS: usize = 16384;

/// Rows `from..to` of a column, to be read detached into `column` (the
/// column itself for its first part, an empty [`Column::part`] of it for the
/// others); `stop`: the first row the read did not take.
struct Part {
    column: Column,
    rows: Rows,
    from: usize,
    to: usize,
    stop: usize,
}

/// Each column's rows read into flat values, on up to `threads` threads:
/// `Ok(None)` for a column the fast path does not take, its error for one it
/// rejects (and `Ok(None)`, unread, for the columns after it).
///
/// The first row of each column is read here, holding the GIL: it sets the
/// column's kind. With more than one thread and rows enough, the rows after
/// it are cut into parts of at least [`PART_ROWS`], each read on a thread of
/// its own, *detached*: plain memory reads of exact-typed objects (list and
/// tuple items, `bytes`, ASCII `str`, floats, ints of up to two digits), with
/// no reference counted, no call into Python and no error set. A part stops
/// at its first row that needs more; this thread then reads on from that
/// row, attached, and joins the parts in order (copying all but the first),
/// so the values and errors are those one pass would give.
///
/// # Safety
/// Each `Rows` is of a live list or object array that the caller keeps alive,
/// and `py` is this thread's hold on the GIL, which it keeps until this
/// returns: no other Python thread runs meanwhile, and this one runs no
/// Python code while the detached threads read, so no object they read
/// changes or is freed. The objects were made before this thread took the
/// GIL, and the parts are handed to their threads after, through the
/// pool's lock or a thread's start (either orders them: `crate::pool`), so
/// what the detached threads read is what this thread sees.
unsafe fn read_columns(
    py: Python<'_>,
    sources: &[Rows],
    threads: usize,
) -> Vec<PyResult<Option<Column>>> {
    let mut columns: Vec<PyResult<Option<Column>>> = sources
        .iter()
        .map(|&rows| {
            let mut column = Column::new(py, rows.len());
            let first = rows.len().min(1);
            let read = column.read(py, rows, 0, first);
            read.map(|found| found.map(|()| column))
        })
        .collect();
    // Each column's count of parts (0: read here, whole), and the parts.
    let mut counts = vec![0; sources.len()];
    let mut parts: Vec<std::sync::Mutex<Part>> = Vec::new();
    let later: usize = sources
        .iter()
        .map(|rows| rows.len().saturating_sub(1))
        .sum();
    if threads > 1 && later >= 2 * PART_ROWS {
        for (index, &rows) in sources.iter().enumerate() {
            let later = rows.len().saturating_sub(1);
            let Ok(Some(column)) = &columns[index] else {
                continue;
            };
            if later == 0 || column.part(0).is_none() {
                continue;
            }
            let count = (later / PART_ROWS).clamp(1, threads);
            let range = |k: usize| (1 + later * k / count, 1 + later * (k + 1) / count);
            let others: Vec<Part> = (1..count)
                .map(|k| {
                    let (from, to) = range(k);
                    let column = column.part(to - from).expect("a kind, checked above");
                    Part {
                        column,
                        rows,
                        from,
                        to,
                        stop: from,
                    }
                })
                .collect();
            let Ok(Some(whole)) = std::mem::replace(&mut columns[index], Ok(None)) else {
                unreachable!("matched above")
            };
            let (from, to) = range(0);
            parts.push(std::sync::Mutex::new(Part {
                column: whole,
                rows,
                from,
                to,
                stop: from,
            }));
            parts.extend(others.into_iter().map(std::sync::Mutex::new));
            counts[index] = count;
        }
    }
    crate::threads::map_in_turn(&parts, threads.min(parts.len()), |_, part| {
        let mut part = part.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let Part {
            column,
            rows,
            from,
            to,
            ..
        } = &mut *part;
        let rows = *rows;
        // SAFETY: as this function's contract: the GIL stays held by the
        // caller, which runs no Python code until every part is read.
        part.stop = unsafe { column.read_detached(rows, *from, *to) };
    });
    let mut parts = parts.into_iter().map(|part| {
        part.into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    });
    let mut failed = false;
    for (index, &rows) in sources.iter().enumerate() {
        let own: Vec<Part> = parts.by_ref().take(counts[index]).collect();
        if failed {
            columns[index] = Ok(None);
            continue;
        }
        let whole = std::mem::replace(&mut columns[index], Ok(None));
        columns[index] = join_parts(py, whole, rows, own);
        failed = columns[index].is_err();
    }
    columns
}

/// A column of [`read_columns`] whole: its first row (`whole`), then each of
/// its parts, read on from where each stopped, holding the GIL; the rows
/// after the last part (all of them, where there are no parts).
///
/// # Safety
/// As for [`read_columns`], whose detached threads have all ended.
unsafe fn join_parts(
    py: Python<'_>,
    whole: PyResult<Option<Column>>,
    rows: Rows,
    mut parts: Vec<Part>,
) -> PyResult<Option<Column>> {
    let (mut column, mut next) = if parts.is_empty() {
        match whole? {
            Some(column) => (column, rows.len().min(1)),
            None => return Ok(None),
        }
    } else {
        // The first part is the column itself, which read its first row.
        let first = parts.remove(0);
        let mut column = first.column;
        if column.read(py, rows, first.stop, first.to)?.is_none() {
            return Ok(None);
        }
        (column, first.to)
    };
    for part in parts {
        debug_assert_eq!(next, part.from);
        if column.append_part(part.column).is_err()
            || column.read(py, rows, part.stop, part.to)?.is_none()
        {
            return Ok(None);
        }
        next = part.to;
    }
    Ok(column.read(py, rows, next, rows.len())?.map(|()| column))
}

/// A column's values as Python objects: `(kind, values, splits, present)`,
/// as [`_columns_from_rows`] describes them.
type FoundColumn = (
    &'static str,
    Py<PyAny>,
    Option<Py<PyAny>>,
    Option<Py<PyAny>>,
);

fn found_column(py: Python<'_>, column: Column) -> PyResult<FoundColumn> {
    let splits = column
        .splits
        .map(|s| s.into_pyarray(py).into_any().unbind());
    let present = column
        .present
        .map(|p| p.into_pyarray(py).into_any().unbind());
    let (kind, values) = match column.values {
        Values::None(_) => (
            "none",
            Vec::<i64>::new().into_pyarray(py).into_any().unbind(),
        ),
        Values::Int(v) => ("int64", v.into_pyarray(py).into_any().unbind()),
        Values::Float(v) => ("float64", v.into_pyarray(py).into_any().unbind()),
        Values::Array { dtype, data, .. } => (
            "array",
            (data.into_pyarray(py), dtype)
                .into_pyobject(py)?
                .into_any()
                .unbind(),
        ),
        Values::Bytes { offsets, data } => (
            "bytes",
            (offsets.into_pyarray(py), data.into_pyarray(py))
                .into_pyobject(py)?
                .into_any()
                .unbind(),
        ),
    };
    Ok((kind, values, splits, present))
}

/// Rows `start..stop` of each of `columns` (`(rows, start, stop)`, as
/// [`_columns_from_rows`] takes them), read on every core: for each, its
/// `(kind, values, splits, present)`, None for the general path, or the error
/// it raises (a column after one that raises is None, unread).
fn columns_from_rows(
    py: Python<'_>,
    columns: &[(Bound<'_, PyAny>, usize, Option<usize>)],
) -> PyResult<Vec<PyResult<Option<FoundColumn>>>> {
    // A write reads its columns a slice at a time, and each slice's values
    // are new buffers of about a megabyte: in malloc's start-up state each
    // is mapped and zeroed afresh (measured: the kernel 40% of the pass).
    crate::py::memory::adapt_malloc_to_large_records();
    // Rows `start..stop` of `len`, clamped as a slice would be.
    let span = |len: usize, start: usize, stop: Option<usize>| {
        let stop = stop.map_or(len, |s| s.min(len));
        (start.min(stop), stop)
    };
    // The object arrays' read-only borrows, held until every row is read.
    let mut borrowed = Vec::new();
    let mut sources = Vec::new();
    let mut readable = Vec::new();
    for (rows, start, stop) in columns {
        if let Ok(list) = rows.cast::<PyList>() {
            let (start, stop) = span(list.len(), *start, *stop);
            sources.push(Rows::List {
                list: list.as_ptr(),
                start,
                len: stop - start,
            });
        } else if let Ok(array) = rows.extract::<PyReadonlyArray1<'_, Py<PyAny>>>() {
            let Ok(items) = array.as_slice() else {
                readable.push(false); // strided: the general path
                continue;
            };
            let (start, stop) = span(items.len(), *start, *stop);
            sources.push(Rows::Items {
                items: items[start..].as_ptr(),
                len: stop - start,
            });
            borrowed.push(array);
        } else {
            readable.push(false);
            continue;
        }
        readable.push(true);
    }
    let threads = crate::threads::beside_writes();
    // SAFETY: each list and array is held by `columns`, each array borrowed
    // read-only until the end, and the GIL is held (`py`) throughout.
    let mut read = unsafe { read_columns(py, &sources, threads) }.into_iter();
    let found = readable
        .into_iter()
        .map(|readable| match readable {
            false => Ok(None),
            true => match read.next().expect("a result for each column read") {
                Ok(Some(column)) => found_column(py, column).map(Some),
                Ok(None) => Ok(None),
                Err(error) => Err(error),
            },
        })
        .collect();
    drop(borrowed);
    Ok(found)
}

/// Rows `start..stop` of each of several columns, `(rows, start, stop)` each,
/// their rows read on every core: a list with, for each column, its flat
/// values or the exception it raises (the columns after one that raises are
/// None, unread). Each column's rows are read by one pass of CPython's
/// objects, split over the threads; the values, and the error a column
/// raises, are those of reading it alone.
///
/// A column's flat values are `(kind, values, splits, present)` with kind
/// `"int64"` (ints and bools), `"float64"`, `"bytes"` (values as `(offsets,
/// data)`), `"array"` (rows that are NumPy arrays of one numeric dtype: values
/// as `(bytes, dtype)`) or `"none"` (no value in any row); `splits` is None
/// when every row holds exactly one value, and `present` is None when every
/// row has the feature. `rows` is a list or a 1-D object array, of which rows
/// `start..stop` are read (a slice of a list would touch every object it
/// holds, to count a reference; `stop` None: to the end); a row is None or
/// `pd.NA` (missing; NaN too in a column of strings), a scalar, a list or
/// tuple of scalars, or a NumPy array. None instead when the rows hold
/// anything else (deeper nesting, strings mixed with numbers, arrays of
/// strings or of differing dtypes): the caller's general path takes those.
#[pyfunction]
pub fn _columns_from_rows(
    py: Python<'_>,
    columns: Vec<(Bound<'_, PyAny>, usize, Option<usize>)>,
) -> PyResult<Vec<Py<PyAny>>> {
    crate::py::errors::guard(|| {
        columns_from_rows(py, &columns)?
            .into_iter()
            .map(|found| match found {
                Ok(found) => Ok(found.into_pyobject(py)?.into_any().unbind()),
                Err(error) => Ok(error.into_value(py).into_any()),
            })
            .collect()
    })
}
