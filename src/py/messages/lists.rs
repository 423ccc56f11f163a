//! `BytesList`, `FloatList`, `Int64List`, `DoubleList`, `Int32List` and their
//! `value` containers.
//!
//! A list is a view onto a Feature node and a kind: the list the Feature holds,
//! where it holds that kind, else an empty one that, once changed, becomes the
//! Feature's (clearing the kind it held: a oneof keeps one member). A list made
//! on its own (`Int64List(value=[1])`) views a Feature of its own.

use std::sync::Arc;

use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyIterator, PyList, PySlice, PyTuple};

use crate::example::{Kind, Schema};
use crate::message::{lock, shared, Feature, List, Shared};
use crate::message_class;
use crate::message_text::Text;
use crate::py::messages::values::{self, list_of};
use crate::py::messages::Message;
use crate::wire::Malformed;

/// Where a list's values live: a Feature node, read as `kind`.
#[derive(Clone)]
pub struct ListView {
    pub node: Shared<Feature>,
    pub kind: Kind,
}

impl ListView {
    /// A list of its own, holding `list`.
    pub fn own(list: List) -> ListView {
        let kind = list.kind();
        let schema = if matches!(kind, Kind::Double | Kind::Int32) {
            Schema::OneFlow
        } else {
            Schema::TensorFlow
        };
        ListView {
            node: shared(Feature::holding(schema, list).expect("the schema has the kind")),
            kind,
        }
    }

    /// Runs `f` on the values (an empty list where the Feature holds another kind).
    pub fn read<R>(&self, f: impl FnOnce(&List) -> R) -> R {
        let mut node = lock(&self.node);
        match node.list() {
            Some(list) if list.kind() == self.kind => f(list),
            _ => f(&List::empty(self.kind)),
        }
    }

    /// Runs `f` on the values for changing them (the Feature now holds this kind).
    pub fn write<R>(&self, f: impl FnOnce(&mut List) -> R) -> R {
        let mut node = lock(&self.node);
        f(node.list_mut(self.kind))
    }

    pub fn values(&self) -> List {
        self.read(List::clone)
    }

    /// Replaces the values (checked first: on an error nothing changes).
    pub fn replace(&self, values: &Bound<'_, PyAny>) -> PyResult<()> {
        let list = list_of(self.kind, values)?;
        self.write(|held| *held = list);
        Ok(())
    }
}

macro_rules! list_class {
    ($class:ident, $name:literal, $module:literal, $kind:expr, $doc:literal) => {
        #[doc = $doc]
        #[pyclass(module = $module, name = $name, frozen)]
        #[derive(Clone)]
        pub struct $class {
            pub view: ListView,
        }

        impl Message for $class {
            fn to_bytes(&self) -> Vec<u8> {
                self.view.read(List::to_message)
            }

            fn parse_into(&self, data: Arc<[u8]>) -> Result<(), Malformed> {
                let list = List::decode_message(&data, $kind)?;
                self.view.write(|held| *held = list);
                Ok(())
            }

            fn from_bytes(data: Arc<[u8]>) -> Result<Self, Malformed> {
                Ok($class {
                    view: ListView::own(List::decode_message(&data, $kind)?),
                })
            }

            fn text(&self) -> String {
                let mut text = Text::default();
                self.view.read(|list| text.list(list));
                text.finish()
            }
        }

        impl $class {
            pub fn of(view: ListView) -> Self {
                $class { view }
            }
        }

        message_class!($class {
            #[new]
            #[pyo3(signature = (value = None))]
            fn new(value: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
                let list = match value {
                    Some(values) => list_of($kind, values)?,
                    None => List::empty($kind),
                };
                Ok($class { view: ListView::own(list) })
            }

            /// The values: a list-like container that checks what goes in.
            #[getter]
            fn value(&self) -> RepeatedValues {
                RepeatedValues { view: self.view.clone() }
            }

            #[setter(value)]
            fn set_value(&self, values: &Bound<'_, PyAny>) -> PyResult<()> {
                self.view.replace(values)
            }

            /// Removes every value.
            fn Clear(&self) {
                self.view.write(|held| *held = List::empty($kind));
            }

            /// Marks this list set in its Feature, as protobuf's `SetInParent`.
            fn SetInParent(&self) {
                self.view.write(|_| ());
            }

            /// The values as a NumPy array of the list's dtype (bytes: a list of bytes).
            fn values_array<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                let list = self.view.values();
                values::to_array(py, &list)
            }

            fn HasField(&self, name: &str) -> PyResult<bool> {
                Err(PyValueError::new_err(format!("{} has no singular field {name:?}", $name)))
            }
        });
    };
}

list_class!(
    BytesList,
    "BytesList",
    "recordkit.train",
    Kind::Bytes,
    "``tf.train.BytesList``: ``value`` is a list of ``bytes`` (``str`` is stored as UTF-8)."
);
list_class!(
    FloatList,
    "FloatList",
    "recordkit.train",
    Kind::Float,
    "``tf.train.FloatList``: ``value`` is a list of floats, stored as float32."
);
list_class!(
    Int64List,
    "Int64List",
    "recordkit.train",
    Kind::Int64,
    "``tf.train.Int64List``: ``value`` is a list of int64 (``bool`` counts as 0/1)."
);
list_class!(
    DoubleList,
    "DoubleList",
    "recordkit.ofrecord",
    Kind::Double,
    "OneFlow's ``DoubleList``: float64 values."
);
list_class!(
    Int32List,
    "Int32List",
    "recordkit.ofrecord",
    Kind::Int32,
    "OneFlow's ``Int32List``: int32 values."
);

/// The view of a list object of any kind, if `value` is one.
pub fn view_of(value: &Bound<'_, PyAny>) -> Option<ListView> {
    if let Ok(l) = value.cast::<BytesList>() {
        return Some(l.get().view.clone());
    }
    if let Ok(l) = value.cast::<FloatList>() {
        return Some(l.get().view.clone());
    }
    if let Ok(l) = value.cast::<Int64List>() {
        return Some(l.get().view.clone());
    }
    if let Ok(l) = value.cast::<DoubleList>() {
        return Some(l.get().view.clone());
    }
    if let Ok(l) = value.cast::<Int32List>() {
        return Some(l.get().view.clone());
    }
    None
}

/// A list's ``value``: protobuf's repeated scalar container. Indexing, slices,
/// ``len``, iteration, ``append``, ``extend``, ``insert``, ``pop``, ``remove``,
/// ``sort``, ``==`` with lists, ``np.asarray`` (the list's dtype).
#[pyclass(
    module = "recordkit.train",
    name = "RepeatedScalarContainer",
    frozen,
    sequence
)]
pub struct RepeatedValues {
    view: ListView,
}

impl RepeatedValues {
    /// Runs `f` on the values as a Python list, then stores that list back (checked).
    fn as_list<R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Bound<'_, PyList>) -> PyResult<R>,
    ) -> PyResult<R> {
        let list = self.view.read(|l| values::to_pylist(py, l))?;
        let result = f(&list)?;
        self.view.replace(&list)?;
        Ok(result)
    }

    fn position(&self, i: isize) -> PyResult<usize> {
        let len = self.view.read(List::len) as isize;
        let at = if i < 0 { i + len } else { i };
        if !(0..len).contains(&at) {
            return Err(PyIndexError::new_err("list index out of range"));
        }
        Ok(at as usize)
    }
}

#[pymethods]
impl RepeatedValues {
    fn __len__(&self) -> usize {
        self.view.read(List::len)
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        index: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if index.is_instance_of::<PySlice>() {
            let list = self.view.read(|l| values::to_pylist(py, l))?;
            return list.as_any().get_item(index);
        }
        let i: isize = index.extract()?;
        if let Ok(at) = usize::try_from(i) {
            let node = lock(&self.view.node);
            if let Some((_, value)) = node.value_in_place(self.view.kind, at) {
                let value =
                    value.ok_or_else(|| PyIndexError::new_err("list index out of range"))?;
                return values::scalar(py, value);
            }
        }
        self.view.read(|l| {
            let len = l.len() as isize;
            let at = if i < 0 { i + len } else { i };
            if !(0..len).contains(&at) {
                return Err(PyIndexError::new_err("list index out of range"));
            }
            values::item(py, l, at as usize)
        })
    }

    fn __setitem__(&self, index: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        if index.is_instance_of::<PySlice>() {
            return self.as_list(index.py(), |list| list.as_any().set_item(index, value));
        }
        let i = self.position(index.extract()?)?;
        let mut one = List::empty(self.view.kind);
        values::push(&mut one, value)?;
        self.view.write(|list| match (list, one) {
            (List::Bytes(v), List::Bytes(mut x)) => v[i] = x.remove(0),
            (List::Float(v), List::Float(x)) => v[i] = x[0],
            (List::Double(v), List::Double(x)) => v[i] = x[0],
            (List::Int32(v), List::Int32(x)) => v[i] = x[0],
            (List::Int64(v), List::Int64(x)) => v[i] = x[0],
            _ => unreachable!("one kind"),
        });
        Ok(())
    }

    fn __delitem__(&self, index: &Bound<'_, PyAny>) -> PyResult<()> {
        self.as_list(index.py(), |list| list.as_any().del_item(index))
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyIterator>> {
        self.view.read(|l| values::to_pylist(py, l))?.try_iter()
    }

    fn __contains__(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.view
            .read(|l| values::to_pylist(py, l))?
            .contains(value)
    }

    /// Appends one value.
    fn append(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut one = List::empty(self.view.kind);
        values::push(&mut one, value)?;
        self.view.write(|list| append_list(list, one));
        Ok(())
    }

    /// Appends every value of an iterable (a NumPy array's values in bulk).
    fn extend(&self, values: &Bound<'_, PyAny>) -> PyResult<()> {
        let more = list_of(self.view.kind, values)?;
        self.view.write(|list| append_list(list, more));
        Ok(())
    }

    fn __iadd__(&self, values: &Bound<'_, PyAny>) -> PyResult<()> {
        self.extend(values)
    }

    fn insert(&self, index: isize, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.as_list(value.py(), |list| {
            list.call_method1("insert", (index, value)).map(drop)
        })
    }

    #[pyo3(signature = (index = -1))]
    fn pop<'py>(&self, py: Python<'py>, index: isize) -> PyResult<Bound<'py, PyAny>> {
        self.as_list(py, |list| {
            list.call_method1("pop", (index,)).map(|v| v.unbind())
        })
        .map(|v| v.into_bound(py))
    }

    fn remove(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.as_list(value.py(), |list| {
            list.call_method1("remove", (value,)).map(drop)
        })
    }

    #[pyo3(signature = (*args, **kwargs))]
    fn sort(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<()> {
        self.as_list(py, |list| list.call_method("sort", args, kwargs).map(drop))
    }

    fn reverse(&self, py: Python<'_>) -> PyResult<()> {
        self.as_list(py, |list| list.reverse())
    }

    fn index(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<usize> {
        self.view.read(|l| values::to_pylist(py, l))?.index(value)
    }

    fn count(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<usize> {
        self.view
            .read(|l| values::to_pylist(py, l))?
            .call_method1("count", (value,))?
            .extract()
    }

    /// Appends the values of another container or list.
    #[allow(non_snake_case)]
    fn MergeFrom(&self, other: &Bound<'_, PyAny>) -> PyResult<()> {
        self.extend(other)
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let mine = self.view.read(|l| values::to_pylist(py, l))?;
        if let Ok(other) = other.cast::<RepeatedValues>() {
            let theirs = other.get().view.read(|l| values::to_pylist(py, l))?;
            return mine.eq(theirs);
        }
        if other.is_instance_of::<PyList>() || other.is_instance_of::<PyTuple>() {
            return mine.eq(PyList::new(
                py,
                other.try_iter()?.collect::<PyResult<Vec<_>>>()?,
            )?);
        }
        Ok(false)
    }

    fn __ne__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(!self.__eq__(py, other)?)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self
            .view
            .read(|l| values::to_pylist(py, l))?
            .repr()?
            .to_string())
    }

    fn __hash__(&self) -> PyResult<isize> {
        Err(PyTypeError::new_err(
            "unhashable type: a repeated field changes",
        ))
    }

    /// The values as a NumPy array of the list's dtype (`np.asarray(x.value)`).
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = copy;
        let list = self.view.values();
        let array = match &list {
            List::Bytes(_) => {
                let numpy = py.import("numpy")?;
                numpy.call_method1("array", (values::to_pylist(py, &list)?, "object"))?
            }
            _ => values::to_array(py, &list)?,
        };
        match dtype {
            Some(dtype) => array.call_method1("astype", (dtype,)),
            None => Ok(array),
        }
    }

    /// Pickles as a plain list.
    fn __reduce__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyList>,))> {
        let list = self.view.read(|l| values::to_pylist(py, l))?;
        Ok((py.get_type::<PyList>().into_any(), (list,)))
    }
}

fn append_list(list: &mut List, more: List) {
    match (list, more) {
        (List::Bytes(v), List::Bytes(x)) => v.extend(x),
        (List::Float(v), List::Float(x)) => v.extend(x),
        (List::Double(v), List::Double(x)) => v.extend(x),
        (List::Int32(v), List::Int32(x)) => v.extend(x),
        (List::Int64(v), List::Int64(x)) => v.extend(x),
        _ => unreachable!("values of the list's own kind"),
    }
}
