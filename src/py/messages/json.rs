//! Examples in protobuf's JSON format (`json_format.MessageToJson` / `Parse`).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyList, PyString};

use crate::encode::map_key_order;
use crate::example::{Kind, Schema};
use crate::message::{lock, shared, Example, Feature, FeatureMap, List};
use crate::py::errors::parse_error;

/// lowerCamelCase names of the lists, as protobuf's JSON format writes them.
fn json_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Bytes => "bytesList",
        Kind::Float => "floatList",
        Kind::Int64 => "int64List",
        Kind::Double => "doubleList",
        Kind::Int32 => "int32List",
    }
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Standard or URL-safe base64, padding optional (as protobuf's parser takes it).
fn unbase64(text: &str) -> Option<Vec<u8>> {
    let digits: Vec<u32> = text
        .trim_end_matches('=')
        .bytes()
        .map(|c| match c {
            b'A'..=b'Z' => Some(u32::from(c - b'A')),
            b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
            b'+' | b'-' => Some(62),
            b'/' | b'_' => Some(63),
            _ => None,
        })
        .collect::<Option<_>>()?;
    if digits.len() % 4 == 1 || text.len() - text.trim_end_matches('=').len() > 2 {
        return None;
    }
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &d)| n | d << (18 - 6 * i));
        for i in 0..chunk.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

fn values_json<'py>(py: Python<'py>, list: &List) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    match list {
        List::Int64(v) => v.iter().try_for_each(|x| out.append(x.to_string()))?,
        List::Int32(v) => v.iter().try_for_each(|x| out.append(*x))?,
        List::Bytes(v) => v.iter().try_for_each(|b| out.append(base64(b)))?,
        List::Float(v) => v
            .iter()
            .try_for_each(|&x| out.append(float_json(py, f64::from(x), format!("{x}"))))?,
        List::Double(v) => v
            .iter()
            .try_for_each(|&x| out.append(float_json(py, x, format!("{x}"))))?,
    }
    Ok(out)
}

/// A float as JSON: the shortest decimal that reads back the same (as a number),
/// or protobuf's names for the non-finite ones.
fn float_json<'py>(py: Python<'py>, x: f64, shortest: String) -> Bound<'py, PyAny> {
    if x.is_nan() {
        return PyString::new(py, "NaN").into_any();
    }
    if x.is_infinite() {
        return PyString::new(py, if x > 0.0 { "Infinity" } else { "-Infinity" }).into_any();
    }
    PyFloat::new(py, shortest.parse().unwrap_or(x)).into_any()
}

pub fn example_to_json(
    py: Python<'_>,
    node: &std::sync::Mutex<Example>,
    indent: Option<usize>,
) -> PyResult<String> {
    let out = PyDict::new(py);
    let mut example = lock(node);
    if example.has_features() {
        let map = example.features();
        let map = lock(&map);
        let features = PyDict::new(py);
        let mut failure = None;
        map.visit_sorted(map_key_order, |key, feature| {
            let entry = (|| -> PyResult<()> {
                let entry = PyDict::new(py);
                if let Some(list) = feature.list() {
                    let body = PyDict::new(py);
                    if !list.is_empty() {
                        body.set_item("value", values_json(py, list)?)?;
                    }
                    entry.set_item(json_name(list.kind()), body)?;
                }
                features.set_item(key, entry)
            })();
            if let Err(e) = entry {
                failure.get_or_insert(e);
            }
        });
        if let Some(e) = failure {
            return Err(e);
        }
        let wrapper = PyDict::new(py);
        if !features.is_empty() {
            wrapper.set_item("feature", features)?;
        }
        out.set_item("features", wrapper)?;
    }
    let json = py.import("json")?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("indent", indent)?;
    json.call_method("dumps", (out,), Some(&kwargs))?.extract()
}

/// A JSON object's fields by their proto names (lowerCamelCase accepted too); null ones left out.
fn fields<'py>(
    content: &Bound<'py, PyAny>,
    at: &str,
    names: &[(&'static str, &'static str)],
) -> PyResult<Vec<(&'static str, Bound<'py, PyAny>)>> {
    if content.is_none() {
        return Ok(Vec::new());
    }
    let dict = content
        .cast::<PyDict>()
        .map_err(|_| parse_error(format!("{at} must be a JSON object, not {}", repr(content))))?;
    let mut out = Vec::new();
    for (name, value) in dict.iter() {
        let name: String = name.extract()?;
        let Some(&(proto, _)) = names.iter().find(|(p, camel)| name == *p || name == *camel) else {
            let known: Vec<&str> = names.iter().map(|(p, _)| *p).collect();
            return Err(parse_error(format!(
                "{at} has no field named \"{name}\" (its fields: {})",
                known.join(", ")
            )));
        };
        if !value.is_none() {
            out.push((proto, value));
        }
    }
    Ok(out)
}

fn repr(value: &Bound<'_, PyAny>) -> String {
    value
        .repr()
        .map_or_else(|_| "?".to_owned(), |r| r.to_string())
}

const KINDS: [(&str, &str); 3] = [
    ("bytes_list", "bytesList"),
    ("float_list", "floatList"),
    ("int64_list", "int64List"),
];

fn feature_from_json(content: &Bound<'_, PyAny>, at: &str) -> PyResult<Feature> {
    let set = fields(content, at, &KINDS)?;
    if set.len() > 1 {
        let names: Vec<&str> = set.iter().map(|(n, _)| *n).collect();
        return Err(parse_error(format!(
            "{at} sets {}: a Feature holds one kind",
            names.join(" and ")
        )));
    }
    let Some((name, body)) = set.into_iter().next() else {
        return Ok(Feature::new(Schema::TensorFlow));
    };
    let kind = match name {
        "bytes_list" => Kind::Bytes,
        "float_list" => Kind::Float,
        _ => Kind::Int64,
    };
    let at = format!("{at}.{}", json_name(kind));
    let raw = fields(&body, &at, &[("value", "value")])?
        .into_iter()
        .next()
        .map(|(_, v)| v);
    let mut list = List::empty(kind);
    if let Some(raw) = raw {
        let items = raw
            .cast::<PyList>()
            .map_err(|_| parse_error(format!("{at}.value must be a list, not {}", repr(&raw))))?;
        for (i, item) in items.iter().enumerate() {
            let here = format!("{at}.value[{i}]");
            push_json(&mut list, &item, &here)?;
        }
    }
    Ok(Feature::holding(Schema::TensorFlow, list).expect("TensorFlow's kinds"))
}

fn push_json(list: &mut List, item: &Bound<'_, PyAny>, at: &str) -> PyResult<()> {
    let wrong = |what: &str| parse_error(format!("{at}: {} is not {what}", repr(item)));
    match list {
        List::Int64(v) => {
            let number = if let Ok(text) = item.extract::<String>() {
                let trimmed = text.trim();
                let digits = trimmed.strip_prefix('-').unwrap_or(trimmed);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(wrong("an int64 (a whole number, or one in a string)"));
                }
                trimmed.parse::<i128>().ok()
            } else if item.is_instance_of::<pyo3::types::PyBool>() {
                None
            } else if let Ok(n) = item.extract::<i128>() {
                Some(n)
            } else if let Ok(x) = item.extract::<f64>() {
                (x.fract() == 0.0 && x.abs() < 1e19).then_some(x as i128)
            } else {
                None
            };
            let n = number.ok_or_else(|| wrong("an int64 (a whole number, or one in a string)"))?;
            let n = i64::try_from(n).map_err(|_| {
                parse_error(format!(
                    "{at}: Value out of range: {n} does not fit a Int64List"
                ))
            })?;
            v.push(n);
        }
        List::Float(v) => {
            let x = match item.extract::<String>() {
                Ok(text) => match text.as_str() {
                    "NaN" => f64::NAN,
                    "Infinity" => f64::INFINITY,
                    "-Infinity" => f64::NEG_INFINITY,
                    other => other
                        .trim()
                        .parse::<f64>()
                        .map_err(|_| wrong("a number (or \"NaN\", \"Infinity\", \"-Infinity\")"))?,
                },
                Err(_) if item.is_instance_of::<pyo3::types::PyBool>() => {
                    return Err(wrong("a number (or \"NaN\", \"Infinity\", \"-Infinity\")"))
                }
                Err(_) => item
                    .extract::<f64>()
                    .map_err(|_| wrong("a number (or \"NaN\", \"Infinity\", \"-Infinity\")"))?,
            };
            if x.is_finite() && (x as f32).is_infinite() {
                return Err(parse_error(format!(
                    "{at}: {x:e} is beyond float32's range (about ±3.4e38), and a FloatList holds float32"
                )));
            }
            v.push(x as f32);
        }
        List::Bytes(v) => {
            let text: String = item.extract().map_err(|_| wrong("base64 text"))?;
            v.push(Arc::from(
                unbase64(&text).ok_or_else(|| wrong("base64 text"))?,
            ));
        }
        List::Double(_) | List::Int32(_) => unreachable!("not in tf.train.Feature"),
    }
    Ok(())
}

pub fn example_from_json(py: Python<'_>, text: &Bound<'_, PyAny>) -> PyResult<Example> {
    let content = py
        .import("json")?
        .call_method1("loads", (text,))
        .map_err(|e| parse_error(format!("not JSON: {}", e.value(py))))?;
    let mut example = Example::new(None);
    for (_, features) in fields(&content, "Example", &[("features", "features")])? {
        let map = shared(FeatureMap::new(Schema::TensorFlow));
        for (_, entries) in fields(&features, "Example.features", &[("feature", "feature")])? {
            let entries = entries.cast::<PyDict>().map_err(|_| {
                parse_error(format!(
                    "Example.features.feature must be a JSON object, not {}",
                    repr(&entries)
                ))
            })?;
            for (key, entry) in entries.iter() {
                let key: String = key.extract()?;
                let at = format!("Example.features.feature[{key}]");
                if !entry.is_instance_of::<PyDict>() {
                    return Err(parse_error(format!(
                        "{at} must be a JSON object, not {}",
                        repr(&entry)
                    )));
                }
                lock(&map).insert(&key, shared(feature_from_json(&entry, &at)?));
            }
        }
        example.set_features(map);
    }
    Ok(example)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_every_length() {
        for len in 0..20 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 250) as u8).collect();
            assert_eq!(unbase64(&base64(&bytes)).as_deref(), Some(&bytes[..]));
            assert_eq!(
                unbase64(base64(&bytes).trim_end_matches('=')).as_deref(),
                Some(&bytes[..])
            );
        }
        assert_eq!(base64(b"abc"), "YWJj");
        assert_eq!(base64(b"\xff"), "/w==");
        assert_eq!(unbase64("_w"), Some(vec![0xff]));
        assert_eq!(unbase64("!!"), None);
        assert_eq!(unbase64("A"), None);
    }
}
