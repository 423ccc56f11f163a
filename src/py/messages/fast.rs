//! The dict codec and the tutorial's helpers on plain Python values, in one
//! call each: a Feature or a serialized Example straight from ints, floats,
//! bytes, str, lists of them and 1-D NumPy arrays. Anything else is left to
//! the Python functions (None here), which check and convert it, and name
//! what is wrong.

use std::collections::HashMap;
use std::sync::Arc;

use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::encode::map_key_order;
use crate::example::{dedup, for_each_entry, for_each_example_entry, Kind, Schema};
use crate::message::{encode_features, lock, shared, Feature, List};
use crate::py::messages::features::TfFeature;
use crate::py::messages::malformed;

/// One plain value's kind, as the dict codec decides it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Plain {
    Int,
    Float,
    Bytes,
}

fn plain(value: &Bound<'_, PyAny>) -> Option<Plain> {
    if value.is_exact_instance_of::<PyInt>() || value.is_exact_instance_of::<PyBool>() {
        Some(Plain::Int)
    } else if value.is_exact_instance_of::<PyFloat>() {
        Some(Plain::Float)
    } else if value.is_exact_instance_of::<PyBytes>() || value.is_exact_instance_of::<PyString>() {
        Some(Plain::Bytes)
    } else {
        None
    }
}

fn int_of(value: &Bound<'_, PyAny>) -> Option<i64> {
    if let Ok(b) = value.cast_exact::<PyBool>() {
        return Some(i64::from(b.is_true()));
    }
    value.extract::<i64>().ok()
}

/// A float as float32, None where a finite value would become inf (the Python
/// path names that error).
fn float_of(value: &Bound<'_, PyAny>) -> Option<f32> {
    let wide: f64 = value.extract().ok()?;
    let narrow = wide as f32;
    (narrow.is_finite() || !wide.is_finite()).then_some(narrow)
}

fn bytes_of(value: &Bound<'_, PyAny>) -> Option<Arc<[u8]>> {
    if let Ok(b) = value.cast_exact::<PyBytes>() {
        return Some(Arc::from(b.as_bytes()));
    }
    value
        .cast_exact::<PyString>()
        .ok()?
        .to_str()
        .ok()
        .map(|s| Arc::from(s.as_bytes()))
}

/// The items of an exact list or tuple.
fn items<'py>(value: &Bound<'py, PyAny>) -> Option<Vec<Bound<'py, PyAny>>> {
    if let Ok(list) = value.cast_exact::<PyList>() {
        return Some(list.iter().collect());
    }
    value
        .cast_exact::<PyTuple>()
        .ok()
        .map(|t| t.iter().collect())
}

/// A list of `kind` from plain values, None for anything the fast path does not take.
fn list_as(kind: Plain, values: &[Bound<'_, PyAny>]) -> Option<List> {
    Some(match kind {
        Plain::Int => List::Int64(
            values
                .iter()
                .map(|v| (plain(v) == Some(Plain::Int)).then(|| int_of(v)).flatten())
                .collect::<Option<_>>()?,
        ),
        Plain::Float => List::Float(
            values
                .iter()
                .map(|v| {
                    matches!(plain(v), Some(Plain::Int | Plain::Float))
                        .then(|| float_of(v))
                        .flatten()
                })
                .collect::<Option<_>>()?,
        ),
        Plain::Bytes => List::Bytes(values.iter().map(bytes_of).collect::<Option<_>>()?),
    })
}

/// A 1-D NumPy array's values as a list of `kind` (any kind, where `kind` is None).
fn array_as(value: &Bound<'_, PyAny>, kind: Option<Plain>) -> Option<List> {
    let wants = |k: Plain| kind.is_none_or(|kind| kind == k);
    if let Ok(a) = value.cast::<PyArray1<i64>>() {
        return wants(Plain::Int)
            .then(|| a.to_vec().ok().map(List::Int64))
            .flatten();
    }
    if let Ok(a) = value.cast::<PyArray1<bool>>() {
        let ints = |v: Vec<bool>| List::Int64(v.into_iter().map(i64::from).collect());
        return wants(Plain::Int)
            .then(|| a.to_vec().ok().map(ints))
            .flatten();
    }
    if let Ok(a) = value.cast::<PyArray1<f32>>() {
        return wants(Plain::Float)
            .then(|| a.to_vec().ok().map(List::Float))
            .flatten();
    }
    None
}

/// A plain value's list: a scalar, an exact list or tuple of them, or a 1-D
/// NumPy array; `kind` fixes the list's kind (the helpers), else the values decide.
fn list_of_plain(value: &Bound<'_, PyAny>, kind: Option<Plain>) -> Option<List> {
    if let Some(found) = plain(value) {
        let kind = kind.unwrap_or(found);
        return list_as(kind, std::slice::from_ref(value));
    }
    if let Some(values) = items(value) {
        let kind = match kind {
            Some(kind) => kind,
            None => {
                let kinds: Vec<Plain> = values.iter().map(plain).collect::<Option<_>>()?;
                match (
                    kinds.contains(&Plain::Bytes),
                    kinds.contains(&Plain::Float),
                    kinds.first(),
                ) {
                    (_, _, None) => return None, // empty: no kind to take
                    (true, _, _) if kinds.iter().all(|k| *k == Plain::Bytes) => Plain::Bytes,
                    (true, _, _) => return None,
                    (false, true, _) => Plain::Float,
                    (false, false, _) => Plain::Int,
                }
            }
        };
        return list_as(kind, &values);
    }
    array_as(value, kind)
}

fn helper_kind(kind: &str) -> Option<Plain> {
    match kind {
        "int64" => Some(Plain::Int),
        "float" => Some(Plain::Float),
        "bytes" => Some(Plain::Bytes),
        _ => None,
    }
}

/// The Feature a helper (`int64_feature` ...) makes of plain values, or None
/// where the Python helper must check and convert them.
#[pyfunction]
pub fn _feature_of_plain(kind: &str, value: &Bound<'_, PyAny>) -> Option<TfFeature> {
    let list = list_of_plain(value, Some(helper_kind(kind)?))?;
    let feature = Feature::holding(Schema::TensorFlow, list).ok()?;
    Some(TfFeature {
        node: shared(feature),
    })
}

/// A serialized Example of a dict of plain values (and Feature messages), or
/// None where the Python codec must check and convert them.
#[pyfunction]
pub fn _encode_plain_example<'py>(
    py: Python<'py>,
    mapping: &Bound<'py, PyAny>,
) -> Option<Bound<'py, PyBytes>> {
    let dict = mapping.cast_exact::<PyDict>().ok()?;
    let mut entries: Vec<(String, Option<List>)> = Vec::with_capacity(dict.len());
    for (key, value) in dict.iter() {
        let key = key.cast_exact::<PyString>().ok()?.to_str().ok()?.to_owned();
        if value.is_none() {
            continue;
        }
        let list = match value.cast::<TfFeature>() {
            Ok(feature) => lock(&feature.get().node).list().cloned(),
            Err(_) => Some(list_of_plain(&value, None)?),
        };
        entries.push((key, list));
    }
    entries.sort_by(|a, b| map_key_order(a.0.as_bytes(), b.0.as_bytes()));
    let borrowed: Vec<(&[u8], Option<&List>)> = entries
        .iter()
        .map(|(k, l)| (k.as_bytes(), l.as_ref()))
        .collect();
    let mut out = Vec::new();
    encode_features(&mut out, &borrowed, Schema::TensorFlow, true);
    Some(PyBytes::new(py, &out))
}

/// `{name: values}` of a feature map (an Example's, `container="example"`, or
/// an OFRecord, `"map"`): NumPy arrays of numbers, lists of bytes; None for a
/// Feature that sets no kind. Every entry checked, those a later one replaces too.
#[pyfunction]
#[pyo3(signature = (data, schema = "tensorflow", container = "example"))]
pub fn _decode_feature_dict<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    schema: &str,
    container: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let schema = match schema {
        "oneflow" => Schema::OneFlow,
        _ => Schema::TensorFlow,
    };
    decode_dict(py, data, schema, container == "example")
}

/// ``{name: values}`` from a serialized Example: ``int64`` and ``float32``
/// arrays, lists of ``bytes``; None for a feature that sets no kind.
///
/// >>> decode_example(encode_example({"label": 1, "score": [0.5, 0.7], "name": "cat"}))["name"]
/// [b'cat']
#[pyfunction]
pub fn decode_example<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    decode_dict(py, data, Schema::TensorFlow, true)
}

fn decode_dict<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    schema: Schema,
    example: bool,
) -> PyResult<Bound<'py, PyDict>> {
    crate::py::errors::guard(|| {
        let payload = crate::py::files::Payload::serialized(data)?;
        let out = PyDict::new(py);
        let mut failure: Option<PyErr> = None;
        let mut previous: Option<&[u8]> = None;
        let mut sorted = true;
        // The layout every writer uses, keys ascending (so none repeats): one
        // pass, each entry put in the dict as it is read.
        let laid_out = example
            && schema == Schema::TensorFlow
            && crate::example::for_each_canonical_entry(&payload, &mut |entry| {
                if failure.is_some() || !sorted {
                    return;
                }
                sorted = previous.is_none_or(|p| map_key_order(p, entry.key).is_lt());
                previous = Some(entry.key);
                if sorted {
                    if let Err(e) = put_entry(py, &out, &entry, schema) {
                        failure = Some(e);
                    }
                }
            });
        if let Some(e) = failure {
            return Err(e);
        }
        if laid_out && sorted {
            return Ok(out);
        }
        out.clear();
        let mut entries = Vec::new();
        match example {
            false => for_each_entry(&payload, &mut |e| entries.push(e)),
            true => for_each_example_entry(&payload, &mut |e| entries.push(e)),
        }
        .map_err(malformed)?;
        for entry in &entries {
            entry
                .check_utf8_keys("a feature name is not valid UTF-8")
                .map_err(malformed)?;
        }
        let entries = dedup(entries, |e| crate::example::check_feature_entry(e, schema))
            .map_err(malformed)?;
        for entry in entries {
            put_entry(py, &out, &entry, schema)?;
        }
        Ok(out)
    })
}

/// Feature names seen, as the `str` objects given out for them: records of a
/// file share their names, and a `str` made once (and its hash, computed once)
/// costs less than one made per record. At most [`KEYS_KEPT`] are kept.
static KEYS: std::sync::Mutex<Option<KeyObjects>> = std::sync::Mutex::new(None);
type KeyObjects = HashMap<Box<[u8]>, Py<PyString>, KeyHasher>;
const KEYS_KEPT: usize = 4096;

/// FNV-1a: feature names are short, and SipHash costs more than the lookup saves.
#[derive(Default, Clone, Copy)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }
}

impl std::hash::BuildHasher for KeyHasher {
    type Hasher = KeyHasher;

    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(0)
    }
}

/// The `str` for a feature name (UTF-8, else a ParseError), from [`KEYS`] when seen before.
fn key_object<'py>(py: Python<'py>, key: &[u8]) -> PyResult<Bound<'py, PyString>> {
    let mut keys = KEYS.lock().unwrap_or_else(|p| p.into_inner());
    let keys = keys.get_or_insert_with(|| HashMap::with_hasher(KeyHasher(0)));
    if let Some(found) = keys.get(key) {
        return Ok(found.bind(py).clone());
    }
    let text = std::str::from_utf8(key)
        .map_err(|_| malformed(crate::wire::Malformed("a feature name is not valid UTF-8")))?;
    let made = PyString::new(py, text);
    if keys.len() < KEYS_KEPT {
        keys.insert(key.into(), made.clone().unbind());
    }
    Ok(made)
}

fn put_entry<'py>(
    py: Python<'py>,
    out: &Bound<'py, PyDict>,
    entry: &crate::example::Entry<'_>,
    schema: Schema,
) -> PyResult<()> {
    let key = key_object(py, entry.key)?;
    let f = entry.feature(schema).map_err(malformed)?;
    let value = match f.kind {
        None => py.None().into_bound(py),
        Some(Kind::Bytes) => {
            let mut v = Vec::new();
            f.bytes(&mut v).map_err(malformed)?;
            PyList::new(py, v.iter().map(|b| PyBytes::new(py, b)))?.into_any()
        }
        Some(Kind::Int64) => SCRATCH_INTS.with_borrow_mut(|ints| {
            ints.clear();
            f.int64s(ints).map_err(malformed)?;
            Ok::<_, PyErr>(PyArray1::from_slice(py, ints).into_any())
        })?,
        Some(Kind::Float) => SCRATCH_FLOATS.with_borrow_mut(|floats| {
            floats.clear();
            f.floats(floats).map_err(malformed)?;
            Ok::<_, PyErr>(PyArray1::from_slice(py, floats).into_any())
        })?,
        Some(kind) => {
            let list = List::decode_feature(&f, kind).map_err(malformed)?;
            crate::py::messages::values::to_array(py, &list)?
        }
    };
    out.set_item(key, value)
}

thread_local! {
    /// Values decoded on their way into a new array: reused, not allocated per feature.
    static SCRATCH_INTS: std::cell::RefCell<Vec<i64>> = const { std::cell::RefCell::new(Vec::new()) };
    static SCRATCH_FLOATS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}
