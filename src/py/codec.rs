//! The wire codec and column parser as Python functions.

use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::columns::{
    owned_columns, parse_examples_parallel, parse_sequence_examples, Buffer, Column, Counts, DType,
    FlatBytes, Footers, InMapping, KeptCounts, OwnedColumn, OwnedValues, Request, SequenceColumn,
    Strings,
};
use crate::encode::{
    map_key_order, put_example, put_feature_map, put_sequence_example, OffsetBytes, Steps, Values,
};
use crate::error::Error;
use crate::example::{
    check_feature_entry, check_feature_list_entry, dedup, feature, for_each_entry,
    for_each_example_entry, for_each_sequence_entry, Feature, Kind, Schema,
};
use crate::interned::{intern, Interned};
use crate::py::files::Payload;
use crate::survey::survey;
use crate::wire::Malformed;

pub fn schema(name: &str) -> PyResult<Schema> {
    match name {
        "tensorflow" => Ok(Schema::TensorFlow),
        "oneflow" => Ok(Schema::OneFlow),
        _ => Err(PyValueError::new_err(format!("unknown schema {name:?}"))),
    }
}

fn dtype(name: &str) -> PyResult<DType> {
    match name {
        "int64" => Ok(DType::Int64),
        "float32" => Ok(DType::Float32),
        "string" => Ok(DType::Bytes),
        "float64" => Ok(DType::Float64),
        "int32" => Ok(DType::Int32),
        _ => Err(PyValueError::new_err(format!("unknown dtype {name:?}"))),
    }
}

pub fn requests(specs: Vec<(String, String)>) -> PyResult<Vec<Request>> {
    specs
        .into_iter()
        .map(|(key, d)| {
            Ok(Request {
                key: key.into_bytes(),
                dtype: dtype(&d)?,
            })
        })
        .collect()
}

fn kind_by_name(name: &str) -> PyResult<Kind> {
    Ok(match name {
        "bytes_list" => Kind::Bytes,
        "float_list" => Kind::Float,
        "double_list" => Kind::Double,
        "int32_list" => Kind::Int32,
        "int64_list" => Kind::Int64,
        _ => {
            return Err(PyValueError::new_err(format!(
                "unknown feature kind {name:?}"
            )))
        }
    })
}

fn malformed(m: Malformed) -> PyErr {
    Error::Parse(crate::columns::ParseFailure::Malformed {
        index: 0,
        key: None,
        what: m.0,
    })
    .into()
}

/// An object array of `bytes`, one per value. Values that repeat (class
/// names, labels, enum-like strings: the common case for short strings in a
/// column) share one `bytes` object, found with the GIL released where the
/// values are many (see [`intern`], which takes `within`): an allocation and a later free cost
/// several times a reference, and `bytes` are immutable, so sharing is
/// invisible but for `is`.
fn bytes_array<'py>(py: Python<'py>, values: &[&[u8]], within: &[u8]) -> Bound<'py, PyAny> {
    let interned = match values.len() >= DETACHED_FROM {
        true => py.detach(|| intern(values, within)),
        false => intern(values, within),
    };
    match interned {
        Some(Interned { firsts, codes }) => {
            let distinct = firsts.iter().map(|&i| values[i as usize]);
            shared_bytes_array(py, distinct, &codes)
        }
        None => distinct_bytes_array(py, values),
    }
}

/// Values from which they are searched for repeats with the GIL released:
/// fewer take less time than releasing it.
const DETACHED_FROM: usize = 1024;

/// An object array of `bytes` for values found to repeat (see
/// [`crate::interned`]): one object per `distinct` value, to which each
/// value's `codes` entry points.
fn shared_bytes_array<'py, 'a>(
    py: Python<'py>,
    distinct: impl Iterator<Item = &'a [u8]>,
    codes: &[u32],
) -> Bound<'py, PyAny> {
    let distinct: Vec<Py<PyAny>> = distinct
        .map(|v| PyBytes::new(py, v).into_any().unbind())
        .collect();
    let objects: Vec<Py<PyAny>> = codes
        .iter()
        .map(|&c| distinct[c as usize].clone_ref(py))
        .collect();
    PyArray1::from_vec(py, objects).into_any()
}

/// An object array of a `bytes` object per value, for values found not to
/// repeat.
fn distinct_bytes_array<'py>(py: Python<'py>, values: &[&[u8]]) -> Bound<'py, PyAny> {
    large_bytes_array(py, values).unwrap_or_else(|| {
        let objects = values
            .iter()
            .map(|v| PyBytes::new(py, v).into_any().unbind());
        PyArray1::from_vec(py, objects.collect()).into_any()
    })
}

/// Values from this size are copied into their `bytes` objects with the GIL
/// released, on every core where there is enough of them (see
/// [`large_bytes_array`]); smaller ones are not worth an object made apart.
const FILLED_APART_FROM: usize = 64 << 10;

/// An object array of `bytes` for values among which large ones (150 KB
/// images, say) hold enough bytes to share out among threads: each large
/// object is made empty under the GIL, then the threads copy the values in
/// with the GIL released. None where one thread would do it all anyway.
fn large_bytes_array<'py>(py: Python<'py>, values: &[&[u8]]) -> Option<Bound<'py, PyAny>> {
    let large = || values.iter().filter(|v| v.len() >= FILLED_APART_FROM);
    let total: usize = large().map(|v| v.len()).sum();
    let threads = crate::threads::available().min(total / crate::threads::BYTES_PER_THREAD);
    if threads <= 1 {
        return None;
    }
    let mut fills: Vec<(usize, &[u8])> = Vec::with_capacity(large().count());
    let objects: Vec<Py<PyAny>> = values
        .iter()
        .map(|&value| {
            if value.len() < FILLED_APART_FROM {
                return PyBytes::new(py, value).into_any().unbind();
            }
            // SAFETY: a NULL source asks CPython for an uninitialized object
            // of `value.len()` bytes (the length fits: it is a slice's); a
            // NULL result (no memory) panics in `from_owned_ptr`, as
            // `PyBytes::new` does. The object is ours alone, held in
            // `objects`, and `PyBytes_AsString` of a `bytes` object is its
            // buffer, which lives as long as the object.
            unsafe {
                let raw = pyo3::ffi::PyBytes_FromStringAndSize(
                    std::ptr::null(),
                    value.len() as pyo3::ffi::Py_ssize_t,
                );
                let object = Bound::from_owned_ptr(py, raw);
                fills.push((pyo3::ffi::PyBytes_AsString(raw) as usize, value));
                object.unbind()
            }
        })
        .collect();
    let runs = crate::threads::runs_by_bytes(&fills, threads, |(_, value)| value.len());
    py.detach(|| {
        crate::threads::map_in_turn(&runs, threads, |_, &(_, run)| {
            for &(buffer, value) in run {
                // SAFETY: `buffer` is the `value.len()` bytes of a `bytes`
                // object made above for this value alone (so no two writes
                // overlap), kept alive in `objects` until after this call, and
                // not yet seen by any Python code, which could only reach it
                // once this function returns: writing it with the GIL released
                // races with nothing. CPython documents filling an object made
                // from NULL this way, before it is used.
                unsafe {
                    std::ptr::copy_nonoverlapping(value.as_ptr(), buffer as *mut u8, value.len())
                }
            }
        })
    });
    Some(PyArray1::from_vec(py, objects).into_any())
}

/// A buffer as a NumPy array; byte strings, slices of `within` (see
/// [`intern`]), as an object array of `bytes`.
fn buffer_to_py(py: Python<'_>, buffer: Buffer<'_>, within: &[u8]) -> Py<PyAny> {
    match buffer {
        Buffer::Int64(v) => v.into_pyarray(py).into_any().unbind(),
        Buffer::Float32(v) => v.into_pyarray(py).into_any().unbind(),
        Buffer::Bytes(v) => bytes_array(py, &v, within).unbind(),
        Buffer::Flat(v) => flat_objects(py, &v.finish()).unbind(),
        Buffer::Float64(v) => v.into_pyarray(py).into_any().unbind(),
        Buffer::Int32(v) => v.into_pyarray(py).into_any().unbind(),
    }
}

/// A parsed column as Python gets it: `(values, counts, uniform)`.
pub type PyColumn = (Py<PyAny>, Py<PyAny>, i64);

/// An object array of `bytes`, one per value of `flat`.
fn flat_objects<'py>(py: Python<'py>, flat: &FlatBytes) -> Bound<'py, PyAny> {
    let values = flat.offsets.windows(2);
    let values: Vec<&[u8]> = values
        .map(|w| &flat.data[w[0] as usize..w[1] as usize])
        .collect();
    bytes_array(py, &values, &flat.data)
}

/// Byte-string buffers flattened into Arrow's layout (None for numbers),
/// done with the GIL released.
fn flatten_all<'a>(
    py: Python<'_>,
    buffers: impl Iterator<Item = &'a Buffer<'a>> + Send,
) -> Vec<Option<FlatBytes>> {
    py.detach(|| {
        buffers
            .map(|b| match b {
                Buffer::Bytes(v) => Some(FlatBytes::new(v)),
                _ => None,
            })
            .collect()
    })
}

/// Byte strings as `(offsets, data)` NumPy arrays.
fn flat_out(py: Python<'_>, flat: FlatBytes) -> Py<PyAny> {
    (flat.offsets.into_pyarray(py), flat.data.into_pyarray(py))
        .into_pyobject(py)
        .expect("a tuple of two arrays")
        .into_any()
        .unbind()
}

/// A buffer for Python: numbers as NumPy arrays; byte strings as `(offsets,
/// data)` arrays when flattened, else as an object array of `bytes`.
fn values_out(py: Python<'_>, values: Buffer<'_>, flat: Option<FlatBytes>) -> Py<PyAny> {
    match flat {
        Some(flat) => flat_out(py, flat),
        None => buffer_to_py(py, values, &[]),
    }
}

/// Owned columns for Python, byte strings as `(offsets, data)` arrays when
/// `flat`, else as object arrays of `bytes`; values left in a mapped file
/// (never flat) are read from `mapping`.
pub fn owned_columns_out(
    py: Python<'_>,
    columns: Vec<OwnedColumn>,
    flat: bool,
    mapping: Option<&[u8]>,
) -> Vec<PyColumn> {
    columns
        .into_iter()
        .map(|c| {
            let uniform = uniform_count(&c.counts);
            let values = match c.values {
                OwnedValues::Numbers(numbers) => buffer_to_py(py, numbers, &[]),
                OwnedValues::Bytes(bytes) if flat => flat_out(py, bytes),
                OwnedValues::Bytes(bytes) => flat_objects(py, &bytes).unbind(),
                OwnedValues::InMapping(InMapping { spans, codes }) => {
                    let mapping = mapping.expect("values left in a mapping come with it");
                    let values = spans.iter().map(|&(at, len)| &mapping[at..at + len]);
                    match codes {
                        Some(codes) => shared_bytes_array(py, values, &codes).unbind(),
                        // Found not to repeat where parsed.
                        None => distinct_bytes_array(py, &values.collect::<Vec<_>>()).unbind(),
                    }
                }
            };
            (values, counts_to_py(py, c.counts), uniform)
        })
        .collect()
}

/// Columns for Python, with byte strings flattened (`flat`) into
/// `(offsets, data)` NumPy arrays with the GIL released, or else as object
/// arrays of `bytes` (their values slices of `within`, see [`intern`]).
pub fn columns_out(
    py: Python<'_>,
    columns: Vec<Column<'_>>,
    flat: bool,
    within: &[u8],
) -> Vec<PyColumn> {
    if !flat {
        return columns_to_py(py, columns, within);
    }
    let owned = py.detach(|| owned_columns(columns));
    owned_columns_out(py, owned, true, None)
}

/// Feature-list columns for Python: `(values, step_counts, steps)`, byte
/// strings flattened as in [`columns_out`] when `flat`.
pub fn sequence_columns_out(
    py: Python<'_>,
    columns: Vec<SequenceColumn<'_>>,
    flat: bool,
) -> Vec<(Py<PyAny>, Py<PyAny>, Py<PyAny>)> {
    let flattened = if flat {
        flatten_all(py, columns.iter().map(|c| &c.values))
    } else {
        columns.iter().map(|_| None).collect()
    };
    columns
        .into_iter()
        .zip(flattened)
        .map(|(c, flat)| {
            (
                values_out(py, c.values, flat),
                c.step_counts.into_pyarray(py).into_any().unbind(),
                c.steps.into_pyarray(py).into_any().unbind(),
            )
        })
        .collect()
}

/// The count every record has when they all have the same (and none lacks
/// the feature), else -2.
fn uniform_count(counts: &Counts) -> i64 {
    counts.same().filter(|&n| n >= 0).unwrap_or(-2)
}

/// Counts as a NumPy array: where every record holds the same count, one
/// number broadcast over the batch (read-only, as Python's readers only read
/// counts), so that no array of a number per record is written.
/// Records up to which equal counts are made as an array, not broadcast.
const SMALL_BATCH: usize = 64;

fn counts_to_py(py: Python<'_>, counts: Counts) -> Py<PyAny> {
    match counts.into_kept() {
        KeptCounts::Varied(varied) => varied.into_pyarray(py).into_any().unbind(),
        // A few records' counts are cheaper made than broadcast.
        KeptCounts::Same { count, records } if records <= SMALL_BATCH => {
            vec![count; records].into_pyarray(py).into_any().unbind()
        }
        KeptCounts::Same { count, records } => broadcast(py, count, records).into_any().unbind(),
    }
}

/// `records` counts of `count`, as `numpy.broadcast_to` makes them (a
/// read-only view, stride 0, of a one-value array), without its Python call
/// of microseconds: 4 per batch of the tutorial's records, 16 ns a record in
/// a Dataset's batches of 1024.
fn broadcast(py: Python<'_>, count: i64, records: usize) -> Bound<'_, PyArray1<i64>> {
    let one = PyArray1::from_vec(py, vec![count]);
    // SAFETY: `one` was made just above and nothing else can reach it yet, so
    // no one writes to it while it is viewed.
    let view = unsafe { one.as_array() };
    let wide = view
        .broadcast(records)
        .expect("a one-value array broadcasts");
    // SAFETY: the view reads the one value `one` owns, and `one` becomes the
    // array's base, so it lives as long as the array.
    let counts = unsafe { PyArray1::borrow_from_array(&wide, one.clone().into_any()) };
    // SAFETY: the array was made just above and is reachable from nowhere
    // else; clearing its WRITEABLE flag (numpy's PyArray_CLEARFLAGS) keeps a
    // write through it from reaching every record's count at once.
    unsafe { (*counts.as_array_ptr()).fields.flags &= !numpy::npyffi::NPY_ARRAY_WRITEABLE };
    counts
}

/// `(values, counts, uniform)` per column, `uniform` being the count every
/// record has when they all have the same (and none lacks the feature), else -2:
/// the common dense case then needs no array operation in Python. Byte
/// strings are slices of `within` (see [`intern`]).
pub fn columns_to_py(py: Python<'_>, columns: Vec<Column<'_>>, within: &[u8]) -> Vec<PyColumn> {
    columns
        .into_iter()
        .map(|c| {
            let uniform = uniform_count(&c.counts);
            (
                buffer_to_py(py, c.values, within),
                counts_to_py(py, c.counts),
                uniform,
            )
        })
        .collect()
}

fn payloads(records: &Bound<'_, PyAny>) -> PyResult<Vec<Payload>> {
    let py = records.py();
    let serialized = |i: usize, r: &Bound<'_, PyAny>| {
        Payload::serialized(r).map_err(|e| {
            pyo3::exceptions::PyTypeError::new_err(format!("record {i}: {}", e.value(py)))
        })
    };
    // A list of `bytes`, as a dataset's batches are: each taken as it is, a
    // tenth of the time of a Dataset's batch spent in the general path
    // (iterator protocol, the `str` check, `PyBackedBytes`' extraction).
    if let Ok(list) = records.cast_exact::<PyList>() {
        let mut held = Vec::with_capacity(list.len());
        for (i, r) in list.iter().enumerate() {
            held.push(match r.cast_into_exact::<PyBytes>() {
                Ok(bytes) => Payload::Bytes(bytes.into()),
                Err(e) => serialized(i, &e.into_inner())?,
            });
        }
        return Ok(held);
    }
    records
        .try_iter()?
        .enumerate()
        .map(|(i, r)| serialized(i, &r?))
        .collect()
}

/// Parses serialized Examples into columns: for each `(key, dtype)` request,
/// `(values, counts)` with counts -1 where a record lacks the feature.
#[pyfunction]
#[pyo3(signature = (records, requests, flat_bytes = false, schema = "tensorflow"))]
pub fn parse_example_columns(
    py: Python<'_>,
    records: &Bound<'_, PyAny>,
    requests: Vec<(String, String)>,
    flat_bytes: bool,
    schema: &str,
) -> PyResult<Vec<PyColumn>> {
    crate::py::errors::guard(|| {
        let payloads = payloads(records)?;
        let slices: Vec<&[u8]> = payloads.iter().map(|p| &**p).collect();
        let requests = self::requests(requests)?;
        let schema = self::schema(schema)?;
        if flat_bytes {
            let columns = py.detach(|| {
                let flat = Strings::flat_for(&slices);
                parse_examples_parallel(
                    &slices,
                    Footers::None,
                    &requests,
                    schema,
                    flat,
                    owned_columns,
                )
            });
            Ok(owned_columns_out(
                py,
                columns.map_err(Error::from)?,
                true,
                None,
            ))
        } else {
            let columns = py.detach(|| {
                parse_examples_parallel(
                    &slices,
                    Footers::None,
                    &requests,
                    schema,
                    Strings::Slices,
                    |c| c,
                )
            });
            // Each record its own `bytes` object: no buffer holds them all.
            Ok(columns_to_py(py, columns.map_err(Error::from)?, &[]))
        }
    })
}

/// Parses serialized SequenceExamples: context columns as `parse_example_columns`,
/// feature-list columns as `(values, step_counts, steps)` with steps -1 where absent.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn parse_sequence_columns(
    py: Python<'_>,
    records: &Bound<'_, PyAny>,
    context: Vec<(String, String)>,
    lists: Vec<(String, String)>,
) -> PyResult<(Vec<PyColumn>, Vec<(Py<PyAny>, Py<PyAny>, Py<PyAny>)>)> {
    crate::py::errors::guard(|| {
        let payloads = payloads(records)?;
        let slices: Vec<&[u8]> = payloads.iter().map(|p| &**p).collect();
        let (context, lists) = (requests(context)?, requests(lists)?);
        let (c, l) = py
            .detach(|| parse_sequence_examples(&slices, &context, &lists))
            .map_err(Error::from)?;
        Ok((
            columns_to_py(py, c, &[]),
            sequence_columns_out(py, l, false),
        ))
    })
}

/// `(kind name or None, values)` for one Feature: NumPy arrays for numbers, a list of bytes for bytes.
fn feature_to_py<'py>(py: Python<'py>, f: &Feature<'_>) -> PyResult<Bound<'py, PyTuple>> {
    let values: Bound<'py, PyAny> = match f.kind {
        None => PyList::empty(py).into_any(),
        Some(Kind::Bytes) => {
            let mut v = Vec::new();
            f.bytes(&mut v).map_err(malformed)?;
            PyList::new(py, v.iter().map(|b| PyBytes::new(py, b)))?.into_any()
        }
        Some(Kind::Int64) => {
            let mut v = Vec::new();
            f.int64s(&mut v).map_err(malformed)?;
            v.into_pyarray(py).into_any()
        }
        Some(Kind::Float) => {
            let mut v = Vec::new();
            f.floats(&mut v).map_err(malformed)?;
            v.into_pyarray(py).into_any()
        }
        Some(Kind::Double) => {
            let mut v = Vec::new();
            f.doubles(&mut v).map_err(malformed)?;
            v.into_pyarray(py).into_any()
        }
        Some(Kind::Int32) => {
            let mut v = Vec::new();
            f.int32s(&mut v).map_err(malformed)?;
            v.into_pyarray(py).into_any()
        }
    };
    PyTuple::new(
        py,
        [
            f.kind.map(Kind::list_name).into_pyobject(py)?.into_any(),
            values,
        ],
    )
}

fn utf8_key(key: &[u8]) -> PyResult<&str> {
    std::str::from_utf8(key).map_err(|_| {
        Error::Parse(crate::columns::ParseFailure::Malformed {
            index: 0,
            key: Some(key.to_vec()),
            what: "a feature name is not valid UTF-8",
        })
        .into()
    })
}

/// Decodes a feature map: an Example's (`container="example"`) or a bare
/// `map<string, Feature>` message such as an OFRecord (`container="map"`).
/// Returns `{name: (kind name or None, values)}`.
#[pyfunction]
#[pyo3(signature = (data, schema = "tensorflow", container = "example"))]
pub fn decode_features<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    schema: &str,
    container: &str,
) -> PyResult<Bound<'py, PyDict>> {
    crate::py::errors::guard(|| {
        let payload = Payload::serialized(data)?;
        let schema = self::schema(schema)?;
        let mut entries = Vec::new();
        match container {
            "example" => for_each_example_entry(&payload, &mut |e| entries.push(e)),
            "map" => for_each_entry(&payload, &mut |e| entries.push(e)),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "unknown container {container:?}"
                )))
            }
        }
        .map_err(malformed)?;
        let out = PyDict::new(py);
        let entries = dedup(entries, |e| check_feature_entry(e, schema)).map_err(malformed)?;
        for entry in entries {
            let f = entry.feature(schema).map_err(malformed)?;
            out.set_item(utf8_key(entry.key)?, feature_to_py(py, &f)?)?;
        }
        Ok(out)
    })
}

/// Surveys a batch of Examples (`container="example"`) or feature maps
/// (`"map"`, OFRecords) in one call ([`crate::survey`]): `([(key, kinds,
/// present, min_values, max_values, text, first_with_values)] in order of
/// first appearance, [indices of records that are not such messages], whether
/// any record is a SequenceExample)`. `kinds` has bit `2 << kind` set per kind
/// seen (`Kind` order: bytes, float, double, int32, int64), bit 0 for a Feature
/// that sets none.
#[pyfunction]
#[pyo3(signature = (records, schema = "tensorflow", container = "example"))]
#[allow(clippy::type_complexity)]
pub fn survey_features(
    py: Python<'_>,
    records: &Bound<'_, PyAny>,
    schema: &str,
    container: &str,
) -> PyResult<(
    Vec<(String, u32, u64, u64, u64, bool, Option<usize>)>,
    Vec<usize>,
    bool,
)> {
    crate::py::errors::guard(|| {
        let payloads = payloads(records)?;
        let schema = self::schema(schema)?;
        let example = match container {
            "example" => true,
            "map" => false,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "unknown container {container:?}"
                )))
            }
        };
        let survey = py.detach(|| survey(payloads.iter().map(|p| &p[..]), schema, example));
        let facts = survey
            .features
            .into_iter()
            .map(|(key, f)| {
                Ok((
                    utf8_key(&key)?.to_owned(),
                    f.kinds,
                    f.present,
                    f.min_values,
                    f.max_values,
                    f.text,
                    f.first_with_values,
                ))
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok((facts, survey.undecodable, survey.sequences))
    })
}

/// Decodes a SequenceExample: `(context, feature_lists)` where context is as
/// `decode_features` and feature_lists maps names to lists of steps.
#[pyfunction]
pub fn decode_sequence<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    crate::py::errors::guard(|| {
        let payload = Payload::serialized(data)?;
        let mut context = Vec::new();
        let mut lists = Vec::new();
        for_each_sequence_entry(&payload, &mut |e| context.push(e), &mut |e| lists.push(e))
            .map_err(malformed)?;
        let context_out = PyDict::new(py);
        let context =
            dedup(context, |e| check_feature_entry(e, Schema::TensorFlow)).map_err(malformed)?;
        for entry in context {
            let f = entry.feature(Schema::TensorFlow).map_err(malformed)?;
            context_out.set_item(utf8_key(entry.key)?, feature_to_py(py, &f)?)?;
        }
        let lists_out = PyDict::new(py);
        let lists = dedup(lists, check_feature_list_entry).map_err(malformed)?;
        for entry in lists {
            let steps = PyList::empty(py);
            let mut failure = None;
            entry
                .for_each_step(&mut |message| {
                    match feature(message, Schema::TensorFlow)
                        .map_err(malformed)
                        .and_then(|f| feature_to_py(py, &f))
                    {
                        Ok(step) => steps.append(step).map_err(|_| Malformed("append failed"))?,
                        Err(e) => failure = Some(e),
                    }
                    Ok(())
                })
                .map_err(malformed)?;
            if let Some(e) = failure {
                return Err(e);
            }
            lists_out.set_item(utf8_key(entry.key)?, steps)?;
        }
        Ok((context_out, lists_out))
    })
}

/// Decodes one Feature message: `(kind name or None, values)`.
#[pyfunction]
#[pyo3(signature = (data, schema = "tensorflow"))]
pub fn decode_feature<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    schema: &str,
) -> PyResult<Bound<'py, PyTuple>> {
    crate::py::errors::guard(|| {
        let payload = Payload::serialized(data)?;
        let f = feature(&payload, self::schema(schema)?).map_err(malformed)?;
        feature_to_py(py, &f)
    })
}

/// Decodes one list message (`Int64List`, ...) of the given kind: its values.
#[pyfunction]
pub fn decode_list<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    kind: &str,
) -> PyResult<Bound<'py, PyAny>> {
    crate::py::errors::guard(|| {
        let payload = Payload::serialized(data)?;
        let f = crate::example::list(&payload, kind_by_name(kind)?);
        f.count().map_err(malformed)?;
        feature_to_py(py, &f)?.get_item(1)
    })
}

/// Encodes one Feature message (`kind=None`: a Feature with no kind, b"").
#[pyfunction]
#[pyo3(signature = (kind, values, schema = "tensorflow"))]
pub fn encode_feature<'py>(
    py: Python<'py>,
    kind: Option<&str>,
    values: &Bound<'py, PyAny>,
    schema: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    crate::py::errors::guard(|| {
        let mut out = Vec::new();
        if let Some(kind) = kind {
            let held = BorrowedValues::extract(kind, values)?;
            held.slices()?
                .all()
                .put_feature(&mut out, self::schema(schema)?)
                .map_err(|m| PyValueError::new_err(m.0))?;
        }
        Ok(PyBytes::new(py, &out))
    })
}

/// Encodes one list message (`Int64List`, ...).
#[pyfunction]
pub fn encode_list<'py>(
    py: Python<'py>,
    kind: &str,
    values: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    crate::py::errors::guard(|| {
        let held = BorrowedValues::extract(kind, values)?;
        let mut out = Vec::new();
        held.slices()?.all().put_list(&mut out);
        Ok(PyBytes::new(py, &out))
    })
}

/// A `str` value with no UTF-8 form (a lone surrogate) as `ValueError((index, problem))`,
/// for the caller to name its column and row; any other error as it is.
fn no_utf8(py: Python<'_>, index: usize, error: PyErr) -> PyErr {
    if !error.is_instance_of::<pyo3::exceptions::PyUnicodeEncodeError>(py) {
        return error;
    }
    let shown = error
        .value(py)
        .getattr("object")
        .and_then(|o| o.repr())
        .map_or_else(|_| "a str".to_owned(), |r| r.to_string());
    PyValueError::new_err((
        index,
        format!(
            "{shown} has no UTF-8 form (it holds a lone surrogate, as a name decoded with \
             errors=\"surrogateescape\" does): encode it to bytes yourself"
        ),
    ))
}

/// Values for encoding, borrowed from Python objects (NumPy arrays of the
/// kind's dtype, or a list of bytes).
pub enum BorrowedValues<'py> {
    Bytes(Vec<Payload>),
    /// NumPy `S`-dtype strings: the raw cells and their width.
    FixedBytes(PyReadonlyArray1<'py, u8>, usize),
    /// Strings as Arrow lays them out: `n + 1` offsets into one data buffer.
    OffsetBytes(PyReadonlyArray1<'py, i64>, PyReadonlyArray1<'py, u8>),
    Float(PyReadonlyArray1<'py, f32>),
    Double(PyReadonlyArray1<'py, f64>),
    Int32(PyReadonlyArray1<'py, i32>),
    Int64(PyReadonlyArray1<'py, i64>),
}

impl<'py> BorrowedValues<'py> {
    pub fn extract(kind: &str, values: &Bound<'py, PyAny>) -> PyResult<BorrowedValues<'py>> {
        let wrong = |e: PyErr| {
            PyTypeError::new_err(format!(
                "values for a {kind} must be a contiguous array of its dtype: {e}"
            ))
        };
        if kind == "bytes_fixed" {
            let (cells, width): (PyReadonlyArray1<'py, u8>, usize) = values.extract()?;
            return Ok(BorrowedValues::FixedBytes(cells, width));
        }
        if kind == "bytes_offsets" {
            let (offsets, data) = values.extract().map_err(wrong)?;
            return Ok(BorrowedValues::OffsetBytes(offsets, data));
        }
        Ok(match kind_by_name(kind)? {
            Kind::Bytes => BorrowedValues::Bytes(
                values
                    .try_iter()?
                    .enumerate()
                    .map(|(i, v)| Payload::extract(&v?).map_err(|e| no_utf8(values.py(), i, e)))
                    .collect::<PyResult<_>>()?,
            ),
            Kind::Float => BorrowedValues::Float(values.extract().map_err(wrong)?),
            Kind::Double => BorrowedValues::Double(values.extract().map_err(wrong)?),
            Kind::Int32 => BorrowedValues::Int32(values.extract().map_err(wrong)?),
            Kind::Int64 => BorrowedValues::Int64(values.extract().map_err(wrong)?),
        })
    }

    /// Plain slices: these can cross into code that runs without the GIL.
    pub fn slices(&self) -> PyResult<Flat<'_>> {
        let not_contiguous = |_| PyValueError::new_err("values must be a contiguous array");
        Ok(match self {
            BorrowedValues::Bytes(v) => Flat::Bytes(v.iter().map(|b| &**b).collect()),
            BorrowedValues::FixedBytes(a, width) => {
                Flat::FixedBytes(a.as_slice().map_err(not_contiguous)?, *width)
            }
            BorrowedValues::OffsetBytes(offsets, data) => Flat::Offsets(
                OffsetBytes::new(
                    offsets.as_slice().map_err(not_contiguous)?,
                    data.as_slice().map_err(not_contiguous)?,
                )
                .map_err(PyValueError::new_err)?,
            ),
            BorrowedValues::Float(a) => Flat::Float(a.as_slice().map_err(not_contiguous)?),
            BorrowedValues::Double(a) => Flat::Double(a.as_slice().map_err(not_contiguous)?),
            BorrowedValues::Int32(a) => Flat::Int32(a.as_slice().map_err(not_contiguous)?),
            BorrowedValues::Int64(a) => Flat::Int64(a.as_slice().map_err(not_contiguous)?),
        })
    }
}

/// A feature's flat values as plain slices.
#[derive(Clone)]
pub enum Flat<'a> {
    Bytes(Vec<&'a [u8]>),
    Offsets(OffsetBytes<'a>),
    FixedBytes(&'a [u8], usize),
    Float(&'a [f32]),
    Double(&'a [f64]),
    Int32(&'a [i32]),
    Int64(&'a [i64]),
}

impl Flat<'_> {
    /// The kind of list these values make.
    pub fn kind(&self) -> Kind {
        match self {
            Flat::Bytes(_) | Flat::Offsets(_) | Flat::FixedBytes(..) => Kind::Bytes,
            Flat::Float(_) => Kind::Float,
            Flat::Double(_) => Kind::Double,
            Flat::Int32(_) => Kind::Int32,
            Flat::Int64(_) => Kind::Int64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Flat::Bytes(v) => v.len(),
            Flat::Offsets(v) => v.len(),
            Flat::FixedBytes(data, width) => data.len() / (*width).max(1),
            Flat::Float(v) => v.len(),
            Flat::Double(v) => v.len(),
            Flat::Int32(v) => v.len(),
            Flat::Int64(v) => v.len(),
        }
    }

    /// The bytes the values take (an upper bound for fixed-width strings).
    pub fn byte_len(&self) -> usize {
        match self {
            Flat::Bytes(v) => v.iter().map(|b| b.len()).sum(),
            Flat::Offsets(v) => v.byte_len(0, v.len()),
            Flat::FixedBytes(data, _) => data.len(),
            Flat::Float(v) => 4 * v.len(),
            Flat::Double(v) => 8 * v.len(),
            Flat::Int32(v) => 4 * v.len(),
            Flat::Int64(v) => 8 * v.len(),
        }
    }

    /// Values `start..end` for encoding.
    pub fn range(&self, start: usize, end: usize) -> Values<'_> {
        match self {
            Flat::Bytes(v) => Values::Bytes(&v[start..end]),
            Flat::Offsets(v) => Values::Offsets(v.range(start, end)),
            Flat::FixedBytes(data, width) => Values::FixedBytes {
                data: &data[start * width..end * width],
                width: *width,
            },
            Flat::Float(v) => Values::Float(&v[start..end]),
            Flat::Double(v) => Values::Double(&v[start..end]),
            Flat::Int32(v) => Values::Int32(&v[start..end]),
            Flat::Int64(v) => Values::Int64(&v[start..end]),
        }
    }

    pub fn all(&self) -> Values<'_> {
        self.range(0, self.len())
    }
}

type BorrowedEntry<'py> = (Vec<u8>, Option<BorrowedValues<'py>>);

fn held_entries<'py>(entries: &Bound<'py, PyAny>) -> PyResult<Vec<BorrowedEntry<'py>>> {
    let mut out: Vec<BorrowedEntry<'py>> = Vec::new();
    for item in entries.try_iter()? {
        let (key, kind, values): (String, Option<String>, Bound<'py, PyAny>) = item?.extract()?;
        let held = match kind {
            Some(kind) => Some(BorrowedValues::extract(&kind, &values)?),
            None => None,
        };
        out.push((key.into_bytes(), held));
    }
    out.sort_by(|a, b| map_key_order(&a.0, &b.0));
    Ok(out)
}

/// Encodes `[(name, kind name or None, values)]` as an Example
/// (`container="example"`) or a bare feature map such as an OFRecord (`"map"`).
#[pyfunction]
#[pyo3(signature = (entries, schema = "tensorflow", container = "example"))]
pub fn encode_features<'py>(
    py: Python<'py>,
    entries: &Bound<'py, PyAny>,
    schema: &str,
    container: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    crate::py::errors::guard(|| {
        let schema = self::schema(schema)?;
        let held = held_entries(entries)?;
        let flats: Vec<(&[u8], Option<Flat<'_>>)> = held
            .iter()
            .map(|(k, h)| {
                Ok((
                    k.as_slice(),
                    h.as_ref().map(BorrowedValues::slices).transpose()?,
                ))
            })
            .collect::<PyResult<_>>()?;
        let values: Vec<(&[u8], Option<Values<'_>>)> = flats
            .iter()
            .map(|(k, f)| (*k, f.as_ref().map(Flat::all)))
            .collect();
        let mut out = Vec::new();
        match container {
            "example" if schema == Schema::TensorFlow => put_example(&mut out, &values),
            "map" => put_feature_map(&mut out, &values, schema),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "cannot encode container {container:?} with this schema"
                )))
            }
        }
        .map_err(|m| PyValueError::new_err(m.0))?;
        Ok(PyBytes::new(py, &out))
    })
}

/// Encodes a SequenceExample from context entries (as `encode_features`) and
/// `[(name, [(kind name or None, values), ...])]` feature lists.
#[pyfunction]
pub fn encode_sequence<'py>(
    py: Python<'py>,
    context: &Bound<'py, PyAny>,
    lists: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    crate::py::errors::guard(|| {
        let context = held_entries(context)?;
        let mut held_lists: Vec<(Vec<u8>, Vec<Option<BorrowedValues<'py>>>)> = Vec::new();
        for item in lists.try_iter()? {
            let (key, steps): (String, Bound<'py, PyAny>) = item?.extract()?;
            let mut held = Vec::new();
            for step in steps.try_iter()? {
                let (kind, values): (Option<String>, Bound<'py, PyAny>) = step?.extract()?;
                held.push(
                    kind.map(|k| BorrowedValues::extract(&k, &values))
                        .transpose()?,
                );
            }
            held_lists.push((key.into_bytes(), held));
        }
        held_lists.sort_by(|a, b| map_key_order(&a.0, &b.0));
        let context_flats: Vec<(&[u8], Option<Flat<'_>>)> = context
            .iter()
            .map(|(k, h)| {
                Ok((
                    k.as_slice(),
                    h.as_ref().map(BorrowedValues::slices).transpose()?,
                ))
            })
            .collect::<PyResult<_>>()?;
        let context_values: Vec<(&[u8], Option<Values<'_>>)> = context_flats
            .iter()
            .map(|(k, f)| (*k, f.as_ref().map(Flat::all)))
            .collect();
        let list_flats: Vec<(&[u8], Vec<Option<Flat<'_>>>)> = held_lists
            .iter()
            .map(|(k, steps)| {
                Ok((
                    k.as_slice(),
                    steps
                        .iter()
                        .map(|h| h.as_ref().map(BorrowedValues::slices).transpose())
                        .collect::<PyResult<_>>()?,
                ))
            })
            .collect::<PyResult<_>>()?;
        let list_values: Vec<(&[u8], Steps<'_>)> = list_flats
            .iter()
            .map(|(k, steps)| {
                (
                    *k,
                    steps.iter().map(|f| f.as_ref().map(Flat::all)).collect(),
                )
            })
            .collect();
        let mut out = Vec::new();
        put_sequence_example(&mut out, &context_values, &list_values)
            .map_err(|m| PyValueError::new_err(m.0))?;
        Ok(PyBytes::new(py, &out))
    })
}

/// One column of a batch for `RecordWriter.write_columns`: row `r` holds
/// `values[splits[r]..splits[r + 1]]`, and is left out where `present[r]` is false.
///
/// Its memory is lent by Python objects (NumPy arrays), not borrowed from
/// them: the writer encodes the rows without the GIL, on a thread of its own
/// while the caller reads the next ones, and keeps the objects alive until
/// then (see [`ColumnSource::lend`]).
pub struct ColumnSource {
    pub key: Vec<u8>,
    pub values: LentValues,
    pub splits: &'static [i64],
    pub present: Option<&'static [bool]>,
}

/// A column's values: byte strings (which hold their Python objects), or
/// slices of NumPy arrays.
pub enum LentValues {
    Strings(Vec<Payload>),
    Flat(Flat<'static>),
}

impl LentValues {
    pub fn flat(&self) -> Flat<'_> {
        match self {
            LentValues::Strings(v) => Flat::Bytes(v.iter().map(|b| &**b).collect()),
            LentValues::Flat(flat) => flat.clone(),
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            LentValues::Strings(_) => Kind::Bytes,
            LentValues::Flat(flat) => flat.kind(),
        }
    }

    fn len(&self) -> usize {
        match self {
            LentValues::Strings(v) => v.len(),
            LentValues::Flat(flat) => flat.len(),
        }
    }
}

impl ColumnSource {
    /// The column's memory, lent past the lifetime of `values`, `splits` and
    /// `present` (which are dropped here, with the GIL held).
    ///
    /// # Safety
    ///
    /// Until the returned source is dropped, the caller keeps a reference to
    /// the Python objects that own the arrays' memory, and no code resizes or
    /// writes those arrays.
    pub unsafe fn lend(
        key: String,
        values: BorrowedValues<'_>,
        splits: PyReadonlyArray1<'_, i64>,
        present: Option<PyReadonlyArray1<'_, bool>>,
    ) -> PyResult<ColumnSource> {
        let not_contiguous =
            |_| PyValueError::new_err("splits and masks must be contiguous arrays");
        let splits = splits.as_slice().map_err(not_contiguous)?;
        let present = present
            .as_ref()
            .map(|p| p.as_slice())
            .transpose()
            .map_err(not_contiguous)?;
        let values = match values {
            BorrowedValues::Bytes(payloads) => LentValues::Strings(payloads),
            // SAFETY: the caller keeps the arrays alive and unchanged while
            // the source lives (this function's contract); only the lifetime changes.
            held => LentValues::Flat(unsafe {
                std::mem::transmute::<Flat<'_>, Flat<'static>>(held.slices()?)
            }),
        };
        Ok(ColumnSource {
            key: key.into_bytes(),
            values,
            // SAFETY: as for the values.
            splits: unsafe { std::slice::from_raw_parts(splits.as_ptr(), splits.len()) },
            // SAFETY: as for the values.
            present: present.map(|p| unsafe { std::slice::from_raw_parts(p.as_ptr(), p.len()) }),
        })
    }
}

impl ColumnSource {
    /// Checks the splits so that slicing by them cannot fail. `rising`: the
    /// splits are known not to fall (an array that an earlier column shares,
    /// already checked), so only their ends are checked.
    pub fn check(&self, rows: usize, rising: bool) -> PyResult<()> {
        let name = String::from_utf8_lossy(&self.key);
        let s = self.splits;
        if s.len() != rows + 1
            || s[0] != 0
            || s[rows] as usize != self.values.len()
            || (!rising && s.windows(2).any(|w| w[1] < w[0]))
        {
            return Err(PyValueError::new_err(format!(
                "column {name:?}: row splits must rise from 0 to the number of values ({}) over {rows} rows",
                self.values.len()
            )));
        }
        if self.present.is_some_and(|p| p.len() != rows) {
            return Err(PyValueError::new_err(format!(
                "column {name:?}: the presence mask must have {rows} entries"
            )));
        }
        Ok(())
    }
}
