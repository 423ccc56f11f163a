//! Python values in and out of a message's lists, with the checks protobuf's
//! containers make (and recordkit's: no silent inf, no int64 wrap-around).

use std::sync::Arc;

use numpy::npyffi::{get_type_object, NpyTypes};
use numpy::{
    IntoPyArray, PyArray1, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyFloat, PyInt, PyList, PyMemoryView, PyString};

use crate::example::{Kind, Scalar};
use crate::message::List;

/// The class name protobuf gives a list of `kind` (in messages).
pub fn list_class(kind: Kind) -> &'static str {
    match kind {
        Kind::Bytes => "BytesList",
        Kind::Float => "FloatList",
        Kind::Double => "DoubleList",
        Kind::Int32 => "Int32List",
        Kind::Int64 => "Int64List",
    }
}

fn describe(value: &Bound<'_, PyAny>) -> String {
    let shown = value
        .repr()
        .map_or_else(|_| "?".to_owned(), |r| r.to_string());
    let kind = value
        .get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string());
    format!("{shown} ({kind})")
}

/// Whether `value` is a NumPy scalar (`np.int64(1)`, `np.float32(0.5)`, `np.bool_(True)` ...).
fn is_numpy_scalar(value: &Bound<'_, PyAny>) -> bool {
    let py = value.py();
    // SAFETY: NumPy's API table is loaded by `get_type_object` (importing
    // NumPy if needed), and the generic scalar type it returns is a live type
    // object for as long as NumPy is loaded, which it stays.
    unsafe {
        let generic = get_type_object(py, NpyTypes::PyGenericArrType_Type);
        pyo3::ffi::PyObject_TypeCheck(value.as_ptr(), generic) != 0
    }
}

fn numpy_bool(value: &Bound<'_, PyAny>) -> Option<bool> {
    let name = value.get_type().name().ok()?;
    (is_numpy_scalar(value) && (name == "bool" || name == "bool_"))
        .then(|| value.is_truthy().unwrap_or(false))
}

/// One integer for an `Int64List` (or, within int32's range, an `Int32List`).
pub fn integer(value: &Bound<'_, PyAny>, kind: Kind) -> PyResult<i64> {
    if value.is_exact_instance_of::<PyInt>() {
        if let Ok(v) = value.extract::<i64>() {
            if kind == Kind::Int64 || i32::try_from(v).is_ok() {
                return Ok(v);
            }
        }
    }
    if value.is_instance_of::<PyBool>() {
        return Ok(i64::from(value.is_truthy()?));
    }
    if let Some(b) = numpy_bool(value) {
        return Ok(i64::from(b));
    }
    let is_int = value.is_instance_of::<PyInt>()
        || (is_numpy_scalar(value)
            && !value.is_instance_of::<PyFloat>()
            && value.hasattr("__index__")?);
    if !is_int {
        return Err(PyTypeError::new_err(format!(
            "{} is not an integer: a {} holds integers (use a float list for {})",
            describe(value),
            list_class(kind),
            value.repr()?
        )));
    }
    let wide: i128 = value.call_method0("__index__")?.extract().map_err(|_| {
        PyValueError::new_err(format!(
            "Value out of range: {} does not fit a {}",
            value
                .str()
                .map_or_else(|_| "?".to_owned(), |s| s.to_string()),
            list_class(kind)
        ))
    })?;
    let (lo, hi) = match kind {
        Kind::Int32 => (i128::from(i32::MIN), i128::from(i32::MAX)),
        _ => (i128::from(i64::MIN), i128::from(i64::MAX)),
    };
    if !(lo..=hi).contains(&wide) {
        return Err(PyValueError::new_err(format!(
            "Value out of range: {wide} does not fit a {}",
            list_class(kind)
        )));
    }
    Ok(wide as i64)
}

/// One number for a `FloatList`: stored as float32, as protobuf does; a finite
/// value beyond float32's range is refused (protobuf stores inf). A NumPy
/// float32 keeps its bits (a Python float would quiet a signalling NaN).
pub fn float32(value: &Bound<'_, PyAny>) -> PyResult<f32> {
    if let Ok(f) = value.cast_exact::<PyFloat>() {
        let wide = f.value();
        if (wide as f32).is_finite() || !wide.is_finite() {
            return Ok(wide as f32);
        }
    }
    if is_numpy_scalar(value) && value.get_type().name()? == "float32" {
        let bits: u32 = value.call_method1("view", ("<u4",))?.extract()?;
        return Ok(f32::from_bits(bits));
    }
    let wide = float64_of(value, Kind::Float)?;
    let narrow = wide as f32;
    if narrow.is_infinite() && wide.is_finite() {
        return Err(PyValueError::new_err(format!(
            "{} is beyond float32's range (about ±3.4e38), and a FloatList holds float32",
            value.repr()?
        )));
    }
    Ok(narrow)
}

/// One number for a `DoubleList`.
pub fn float64_of(value: &Bound<'_, PyAny>, kind: Kind) -> PyResult<f64> {
    let numeric = value.is_instance_of::<PyFloat>()
        || value.is_instance_of::<PyInt>()
        || (is_numpy_scalar(value)
            && !value.is_instance_of::<PyString>()
            && !value.is_instance_of::<PyBytes>());
    if !numeric {
        return Err(PyTypeError::new_err(format!(
            "{} is not a number: a {} holds numbers",
            describe(value),
            list_class(kind)
        )));
    }
    value.extract::<f64>()
}

/// One byte string for a `BytesList`: bytes, a byte buffer, or str (as UTF-8).
pub fn byte_string(value: &Bound<'_, PyAny>) -> PyResult<Arc<[u8]>> {
    if let Ok(b) = value.cast::<PyBytes>() {
        return Ok(Arc::from(b.as_bytes()));
    }
    if let Ok(s) = value.cast::<PyString>() {
        return s.to_str().map(|s| Arc::from(s.as_bytes())).map_err(|_| {
            PyValueError::new_err(format!(
                "{} has no UTF-8 form (it holds a lone surrogate): encode it to bytes yourself",
                value
                    .repr()
                    .map_or_else(|_| "?".to_owned(), |r| r.to_string())
            ))
        });
    }
    if let Ok(b) = value.cast::<PyByteArray>() {
        return Ok(Arc::from(b.to_vec()));
    }
    if value.is_instance_of::<PyMemoryView>() {
        let item: usize = value.getattr("itemsize")?.extract()?;
        let ndim: usize = value.getattr("ndim")?.extract()?;
        if item == 1 && ndim == 1 {
            let bytes = value.call_method0("tobytes")?;
            return Ok(Arc::from(bytes.cast::<PyBytes>()?.as_bytes()));
        }
    }
    Err(PyTypeError::new_err(format!(
        "{} is not bytes: a BytesList holds bytes (str is stored as UTF-8)",
        describe(value)
    )))
}

/// Appends one value to `list` (of its kind), checked.
pub fn push(list: &mut List, value: &Bound<'_, PyAny>) -> PyResult<()> {
    match list {
        List::Bytes(v) => v.push(byte_string(value)?),
        List::Float(v) => v.push(float32(value)?),
        List::Double(v) => v.push(float64_of(value, Kind::Double)?),
        List::Int32(v) => v.push(integer(value, Kind::Int32)? as i32),
        List::Int64(v) => v.push(integer(value, Kind::Int64)?),
    }
    Ok(())
}

/// A list of `kind` holding `values` (any iterable; a NumPy array's values,
/// flattened), each checked. A single `str` or `bytes` is refused: it is a
/// value, not a list of them.
pub fn list_of(kind: Kind, values: &Bound<'_, PyAny>) -> PyResult<List> {
    let mut list = List::empty(kind);
    extend(&mut list, values)?;
    Ok(list)
}

/// Appends every value of `values` to `list`; on an error, `list` is as it was.
pub fn extend(list: &mut List, values: &Bound<'_, PyAny>) -> PyResult<()> {
    if values.is_instance_of::<PyString>() || values.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(format!(
            "expected a list of values, not a single {}; wrap it in a list",
            values.get_type().name()?
        )));
    }
    if let Ok(items) = values.cast_exact::<PyList>() {
        let before = list.len();
        for item in items.iter() {
            if let Err(e) = push(list, &item) {
                truncate(list, before);
                return Err(e);
            }
        }
        return Ok(());
    }
    if let Ok(array) = values.cast::<PyUntypedArray>() {
        if let Some(()) = extend_from_array(list, array)? {
            return Ok(());
        }
        let flat = array.call_method0("ravel")?.call_method0("tolist")?;
        return extend(list, &flat);
    }
    let before = list.len();
    let result = values.try_iter().and_then(|items| {
        for item in items {
            push(list, &item?)?;
        }
        Ok(())
    });
    if result.is_err() {
        truncate(list, before);
    }
    result
}

/// Appends the values of a NumPy array whose dtype is the list's own (or bools
/// and narrower integers into an int64 list); None where the general path must
/// check them one by one.
fn extend_from_array(list: &mut List, array: &Bound<'_, PyUntypedArray>) -> PyResult<Option<()>> {
    let py = array.py();
    let dtype = array.dtype();
    let kind = dtype.kind();
    let contiguous = |ty: &str| -> PyResult<Bound<'_, PyAny>> {
        array
            .call_method1("ravel", ())?
            .call_method1("astype", (ty,))
    };
    match list {
        List::Int64(v) if matches!(kind, b'i' | b'b') || (kind == b'u' && dtype.itemsize() < 8) => {
            let values = contiguous("int64")?;
            v.extend_from_slice(values.cast::<PyArray1<i64>>()?.readonly().as_slice()?);
        }
        List::Float(v) if kind == b'f' && dtype.itemsize() == 4 => {
            let values = contiguous("float32")?;
            v.extend_from_slice(values.cast::<PyArray1<f32>>()?.readonly().as_slice()?);
        }
        List::Double(v) if matches!(kind, b'f' | b'i' | b'u' | b'b') => {
            let values = contiguous("float64")?;
            v.extend_from_slice(values.cast::<PyArray1<f64>>()?.readonly().as_slice()?);
        }
        _ => return Ok(None),
    }
    let _ = py;
    Ok(Some(()))
}

fn truncate(list: &mut List, len: usize) {
    match list {
        List::Bytes(v) => v.truncate(len),
        List::Float(v) => v.truncate(len),
        List::Double(v) => v.truncate(len),
        List::Int32(v) => v.truncate(len),
        List::Int64(v) => v.truncate(len),
    }
}

/// Value `i` as a Python object: int, float (a NumPy float32 for a NaN, whose
/// bits a Python float would not keep), or bytes.
pub fn item<'py>(py: Python<'py>, list: &List, i: usize) -> PyResult<Bound<'py, PyAny>> {
    scalar(py, list.scalar(i))
}

/// One value as Python has it (a float32 NaN as a NumPy float32, keeping its bits).
pub fn scalar<'py>(py: Python<'py>, value: Scalar<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Scalar::Bytes(v) => PyBytes::new(py, v).into_any(),
        Scalar::Float(v) if v.is_nan() => nan32(py, v)?,
        Scalar::Float(v) => PyFloat::new(py, f64::from(v)).into_any(),
        Scalar::Double(v) => PyFloat::new(py, v).into_any(),
        Scalar::Int32(v) => v.into_pyobject(py)?.into_any(),
        Scalar::Int64(v) => v.into_pyobject(py)?.into_any(),
    })
}

fn nan32(py: Python<'_>, x: f32) -> PyResult<Bound<'_, PyAny>> {
    let array = vec![x].into_pyarray(py);
    array.get_item(0)
}

/// Every value as a Python list.
pub fn to_pylist<'py>(py: Python<'py>, list: &List) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for i in 0..list.len() {
        out.append(item(py, list, i)?)?;
    }
    Ok(out)
}

/// The values as a NumPy array (of the list's dtype); a bytes list as a list of bytes.
pub fn to_array<'py>(py: Python<'py>, list: &List) -> PyResult<Bound<'py, PyAny>> {
    Ok(match list {
        List::Bytes(_) => to_pylist(py, list)?.into_any(),
        List::Float(v) => PyArray1::from_slice(py, v).into_any(),
        List::Double(v) => PyArray1::from_slice(py, v).into_any(),
        List::Int32(v) => PyArray1::from_slice(py, v).into_any(),
        List::Int64(v) => PyArray1::from_slice(py, v).into_any(),
    })
}
