//! `Feature` (TensorFlow's and OneFlow's), the `feature` map, `Features` and `OFRecord`.

use std::sync::Arc;

use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyIterator, PyList, PyString, PyTuple};

use crate::example::{Kind, Schema};
use crate::message::{lock, parse_ofrecord, shared, Feature, FeatureMap, Shared, Slice};
use crate::message_class;
use crate::message_text::Text;
use crate::py::messages::lists::{view_of, ListView};
use crate::py::messages::values::{list_class, list_of};
use crate::py::messages::Message;
use crate::wire::Malformed;

const TF_KINDS: [Kind; 3] = [Kind::Bytes, Kind::Float, Kind::Int64];
const OF_KINDS: [Kind; 5] = [
    Kind::Bytes,
    Kind::Float,
    Kind::Double,
    Kind::Int32,
    Kind::Int64,
];

fn kinds(schema: Schema) -> &'static [Kind] {
    match schema {
        Schema::TensorFlow => &TF_KINDS,
        Schema::OneFlow => &OF_KINDS,
    }
}

fn kind_named(schema: Schema, name: &str) -> Option<Kind> {
    kinds(schema)
        .iter()
        .copied()
        .find(|k| k.list_name() == name)
}

/// Sets a Feature's list of `kind` from `value`: a list message of that kind
/// (its values copied), or any iterable of values.
fn set_kind(node: &Shared<Feature>, kind: Kind, value: &Bound<'_, PyAny>) -> PyResult<()> {
    let list = match view_of(value) {
        Some(view) if view.kind == kind => view.values(),
        Some(view) => {
            return Err(PyTypeError::new_err(format!(
                "{} must be a {}, not {}",
                kind.list_name(),
                list_class(kind),
                list_class(view.kind)
            )))
        }
        None => list_of(kind, value)?,
    };
    lock(node).set(Some(list));
    Ok(())
}

pub fn feature_from_kwargs(
    schema: Schema,
    class: &str,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Shared<Feature>> {
    let node = shared(Feature::new(schema));
    for (name, value) in kwargs.into_iter().flat_map(|k| k.iter()) {
        let name: String = name.extract()?;
        let Some(kind) = kind_named(schema, &name) else {
            let names: Vec<&str> = kinds(schema).iter().map(|k| k.list_name()).collect();
            return Err(PyTypeError::new_err(format!(
                "{class} has no field {name:?}; it has {}",
                names.join(", ")
            )));
        };
        set_kind(&node, kind, &value)?;
    }
    Ok(node)
}

fn which_oneof(node: &Shared<Feature>, class: &str, group: &str) -> PyResult<Option<&'static str>> {
    if group != "kind" {
        return Err(PyValueError::new_err(format!(
            "{class} has no oneof {group:?}; it has 'kind'"
        )));
    }
    Ok(lock(node).kind().map(Kind::list_name))
}

fn has_field(node: &Shared<Feature>, schema: Schema, class: &str, name: &str) -> PyResult<bool> {
    let kind = lock(node).kind();
    if name == "kind" {
        return Ok(kind.is_some());
    }
    match kind_named(schema, name) {
        Some(k) => Ok(kind == Some(k)),
        None => Err(PyValueError::new_err(format!(
            "{class} has no field {name:?}"
        ))),
    }
}

fn clear_field(node: &Shared<Feature>, schema: Schema, class: &str, name: &str) -> PyResult<()> {
    let mut feature = lock(node);
    if name == "kind" || feature.kind().map(Kind::list_name) == Some(name) {
        feature.set(None);
        return Ok(());
    }
    if kind_named(schema, name).is_none() {
        return Err(PyValueError::new_err(format!(
            "{class} has no field {name:?}"
        )));
    }
    Ok(())
}

macro_rules! feature_class {
    ($class:ident, $module:literal, $schema:expr, $doc:literal, { $($kind_props:tt)* }) => {
        #[doc = $doc]
        #[pyclass(module = $module, name = "Feature", frozen)]
        pub struct $class {
            pub node: Shared<Feature>,
        }

        impl Message for $class {
            fn to_bytes(&self) -> Vec<u8> {
                lock(&self.node).to_bytes()
            }

            fn parse_into(&self, data: Arc<[u8]>) -> Result<(), Malformed> {
                let feature = Feature::parse($schema, Slice::whole(data))?;
                *lock(&self.node) = feature;
                Ok(())
            }

            fn from_bytes(data: Arc<[u8]>) -> Result<Self, Malformed> {
                Ok($class { node: shared(Feature::parse($schema, Slice::whole(data))?) })
            }

            fn text(&self) -> String {
                let mut text = Text::default();
                text.feature(&mut lock(&self.node));
                text.finish()
            }
        }

        impl $class {
            fn view(&self, kind: Kind) -> ListView {
                ListView { node: self.node.clone(), kind }
            }
        }

        message_class!($class {
            #[new]
            #[pyo3(signature = (**kinds))]
            fn new(kinds: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
                Ok($class { node: feature_from_kwargs($schema, "Feature", kinds)? })
            }

            /// The name of the list that is set (``"int64_list"`` ...), or None.
            fn WhichOneof(&self, oneof_group: &str) -> PyResult<Option<&'static str>> {
                which_oneof(&self.node, "Feature", oneof_group)
            }

            /// Whether list ``name`` (or the oneof ``"kind"``) is set.
            fn HasField(&self, name: &str) -> PyResult<bool> {
                has_field(&self.node, $schema, "Feature", name)
            }

            /// Unsets list ``name`` (or whichever is set, for ``"kind"``).
            fn ClearField(&self, name: &str) -> PyResult<()> {
                clear_field(&self.node, $schema, "Feature", name)
            }

            /// Unsets the kind.
            fn Clear(&self) {
                lock(&self.node).set(None);
            }

            $($kind_props)*
        });
    };
}

use crate::py::messages::lists::{BytesList, DoubleList, FloatList, Int32List, Int64List};

feature_class!(
    TfFeature,
    "recordkit.train",
    Schema::TensorFlow,
    "``tf.train.Feature``: one of ``bytes_list``, ``float_list`` or ``int64_list``.",
    {
        /// The BytesList, if this Feature holds one; else an empty one that, once changed, becomes the Feature's.
        #[getter]
        fn bytes_list(&self, py: Python<'_>) -> PyResult<Py<BytesList>> {
            Py::new(py, BytesList::of(self.view(Kind::Bytes)))
        }

        #[setter(bytes_list)]
        fn set_bytes_list(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
            set_kind(&self.node, Kind::Bytes, value)
        }
        /// The FloatList, if this Feature holds one; else an empty one that, once changed, becomes the Feature's.
        #[getter]
        fn float_list(&self, py: Python<'_>) -> PyResult<Py<FloatList>> {
            Py::new(py, FloatList::of(self.view(Kind::Float)))
        }

        #[setter(float_list)]
        fn set_float_list(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
            set_kind(&self.node, Kind::Float, value)
        }
        /// The Int64List, if this Feature holds one; else an empty one that, once changed, becomes the Feature's.
        #[getter]
        fn int64_list(&self, py: Python<'_>) -> PyResult<Py<Int64List>> {
            Py::new(py, Int64List::of(self.view(Kind::Int64)))
        }

        #[setter(int64_list)]
        fn set_int64_list(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
            set_kind(&self.node, Kind::Int64, value)
        }
    }
);

feature_class!(OfFeature, "recordkit.ofrecord", Schema::OneFlow,
    "OneFlow's ``Feature``: one of ``bytes_list``, ``float_list``, ``double_list``, ``int32_list``, ``int64_list``.", {
    /// The BytesList, if this Feature holds one; else an empty one that, once changed, becomes the Feature's.
    #[getter]
    fn bytes_list(&self, py: Python<'_>) -> PyResult<Py<BytesList>> {
        Py::new(py, BytesList::of(self.view(Kind::Bytes)))
    }

    #[setter(bytes_list)]
    fn set_bytes_list(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        set_kind(&self.node, Kind::Bytes, value)
    }
    /// The FloatList, if this Feature holds one; else an empty one that, once changed, becomes the Feature's.
    #[getter]
    fn float_list(&self, py: Python<'_>) -> PyResult<Py<FloatList>> {
        Py::new(py, FloatList::of(self.view(Kind::Float)))
    }

    #[setter(float_list)]
    fn set_float_list(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        set_kind(&self.node, Kind::Float, value)
    }
    /// The DoubleList, if this Feature holds one; else an empty one that, once changed, becomes the Feature's.
    #[getter]
    fn double_list(&self, py: Python<'_>) -> PyResult<Py<DoubleList>> {
        Py::new(py, DoubleList::of(self.view(Kind::Double)))
    }

    #[setter(double_list)]
    fn set_double_list(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        set_kind(&self.node, Kind::Double, value)
    }
    /// The Int32List, if this Feature holds one; else an empty one that, once changed, becomes the Feature's.
    #[getter]
    fn int32_list(&self, py: Python<'_>) -> PyResult<Py<Int32List>> {
        Py::new(py, Int32List::of(self.view(Kind::Int32)))
    }

    #[setter(int32_list)]
    fn set_int32_list(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        set_kind(&self.node, Kind::Int32, value)
    }
    /// The Int64List, if this Feature holds one; else an empty one that, once changed, becomes the Feature's.
    #[getter]
    fn int64_list(&self, py: Python<'_>) -> PyResult<Py<Int64List>> {
        Py::new(py, Int64List::of(self.view(Kind::Int64)))
    }

    #[setter(int64_list)]
    fn set_int64_list(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        set_kind(&self.node, Kind::Int64, value)
    }
});

/// The node of a Feature object of either schema, if `value` is one.
pub fn feature_node(value: &Bound<'_, PyAny>) -> Option<Shared<Feature>> {
    if let Ok(f) = value.cast::<TfFeature>() {
        return Some(f.get().node.clone());
    }
    value.cast::<OfFeature>().ok().map(|f| f.get().node.clone())
}

/// A Feature object for `node`, of its schema's class.
pub fn feature_object<'py>(py: Python<'py>, node: Shared<Feature>) -> PyResult<Bound<'py, PyAny>> {
    let schema = lock(&node).schema();
    feature_object_of(py, node, schema)
}

/// [`feature_object`] where the node's schema is known (a map's).
fn feature_object_of<'py>(
    py: Python<'py>,
    node: Shared<Feature>,
    schema: Schema,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match schema {
        Schema::TensorFlow => Bound::new(py, TfFeature { node })?.into_any(),
        Schema::OneFlow => Bound::new(py, OfFeature { node })?.into_any(),
    })
}

/// `value`'s node for a map of `schema`: the node itself (shared, as a map takes
/// a Feature), or a copy converted to the schema (TensorFlow's Features and
/// OneFlow's share their first kinds).
pub fn node_for(schema: Schema, value: &Bound<'_, PyAny>) -> PyResult<Shared<Feature>> {
    let Some(node) = feature_node(value) else {
        return Err(PyTypeError::new_err(format!(
            "map values are Feature, not {}",
            value.get_type().name()?
        )));
    };
    let converted = {
        let mut feature = lock(&node);
        if feature.schema() == schema {
            None
        } else {
            Some(feature.converted(schema).map_err(|_| {
                PyTypeError::new_err(format!(
                    "this Feature cannot hold a {}",
                    feature.kind().map_or("list", Kind::list_name)
                ))
            })?)
        }
    };
    Ok(converted.map_or(node, shared))
}

fn key_of<'a>(key: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    let text = key.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!(
            "map keys are str, not {}",
            key.get_type()
                .name()
                .map_or_else(|_| "?".to_owned(), |n| n.to_string())
        ))
    })?;
    text.to_str()
}

/// A ``map<string, Feature>`` field: reading a missing key creates its entry, as in protobuf.
#[pyclass(module = "recordkit.train", name = "MessageMap", frozen, mapping)]
pub struct MessageMap {
    pub map: Shared<FeatureMap>,
}

impl MessageMap {
    fn schema(&self) -> Schema {
        lock(&self.map).schema()
    }

    /// Sets every entry of `items` (a mapping), each checked first.
    pub fn update_from(&self, items: &Bound<'_, PyAny>) -> PyResult<()> {
        let schema = self.schema();
        let mut nodes = Vec::new();
        let pairs = match items.cast::<PyDict>() {
            Ok(d) => d.items().into_any(),
            Err(_) => items.call_method0("items")?,
        };
        for pair in pairs.try_iter()? {
            let (key, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair?.extract()?;
            nodes.push((key_of(&key)?.to_owned(), node_for(schema, &value)?));
        }
        let mut map = lock(&self.map);
        for (key, node) in nodes {
            map.insert(&key, node);
        }
        Ok(())
    }
}

#[pymethods]
impl MessageMap {
    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = key_of(key)?;
        let (node, schema) = {
            let mut map = lock(&self.map);
            (map.get_or_insert(key), map.schema())
        };
        feature_object_of(py, node, schema)
    }

    fn __setitem__(&self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = key_of(key)?;
        let node = node_for(self.schema(), value)?;
        lock(&self.map).insert(key, node);
        Ok(())
    }

    fn __delitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let name = key_of(key)?;
        match lock(&self.map).remove(name) {
            Some(_) => Ok(()),
            None => Err(PyKeyError::new_err(name.to_owned())),
        }
    }

    fn __contains__(&self, key: &Bound<'_, PyAny>) -> bool {
        key.extract::<String>()
            .is_ok_and(|k| lock(&self.map).get(&k).is_some())
    }

    fn __len__(&self) -> usize {
        lock(&self.map).len()
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyIterator>> {
        self.keys(py)?.try_iter()
    }

    /// The keys, in the order they came.
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, lock(&self.map).keys())
    }

    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let nodes = lock(&self.map).nodes();
        PyList::new(
            py,
            nodes
                .into_iter()
                .map(|(_, n)| feature_object(py, n))
                .collect::<PyResult<Vec<_>>>()?,
        )
    }

    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let entries = lock(&self.map).nodes();
        let items = entries
            .into_iter()
            .map(|(k, n)| {
                PyTuple::new(
                    py,
                    [PyString::new(py, &k).into_any(), feature_object(py, n)?],
                )
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// The entry for ``key`` if there is one (none is created), else ``default``.
    #[pyo3(signature = (key, default = None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let key = key_of(key)?;
        let found = lock(&self.map).get(key);
        match found {
            Some(node) => feature_object(py, node).map(Some),
            None => Ok(default),
        }
    }

    /// The entry for ``key``, created if missing.
    fn get_or_create<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.__getitem__(py, key)
    }

    #[pyo3(signature = (key, *default))]
    fn pop<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let name = key_of(key)?;
        let removed = lock(&self.map).remove(name);
        match (removed, default.len()) {
            (Some(node), _) => feature_object(py, node),
            (None, 0) => Err(PyKeyError::new_err(name.to_owned())),
            (None, _) => default.get_item(0),
        }
    }

    fn clear(&self) {
        lock(&self.map).clear();
    }

    #[pyo3(signature = (items = None, **more))]
    fn update(
        &self,
        items: Option<&Bound<'_, PyAny>>,
        more: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        if let Some(items) = items {
            self.update_from(items)?;
        }
        if let Some(more) = more {
            self.update_from(more.as_any())?;
        }
        Ok(())
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let mine = self.as_dict(py)?;
        let theirs = match other.cast::<MessageMap>() {
            Ok(other) => other.get().as_dict(py)?.into_any(),
            Err(_) => other.clone(),
        };
        mine.eq(theirs)
    }

    fn __ne__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(!self.__eq__(py, other)?)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.as_dict(py)?.repr()?.to_string())
    }

    fn __hash__(&self) -> PyResult<isize> {
        Err(PyTypeError::new_err("unhashable type: a map field changes"))
    }

    /// Pickles as a plain dict of Features.
    fn __reduce__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyDict>,))> {
        Ok((py.get_type::<PyDict>().into_any(), (self.as_dict(py)?,)))
    }
}

impl MessageMap {
    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for item in self.items(py)?.iter() {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
            dict.set_item(k, v)?;
        }
        Ok(dict)
    }
}

macro_rules! feature_map_class {
    ($class:ident, $name:literal, $module:literal, $schema:expr, $doc:literal) => {
        #[doc = $doc]
        #[pyclass(module = $module, name = $name, frozen)]
        pub struct $class {
            pub map: Shared<FeatureMap>,
        }

        impl Message for $class {
            fn to_bytes(&self) -> Vec<u8> {
                lock(&self.map).to_bytes()
            }

            fn parse_into(&self, data: Arc<[u8]>) -> Result<(), Malformed> {
                let mut parsed = parse_map($schema, data)?;
                parsed.mark_present();
                *lock(&self.map) = parsed;
                Ok(())
            }

            fn from_bytes(data: Arc<[u8]>) -> Result<Self, Malformed> {
                Ok($class { map: shared(parse_map($schema, data)?) })
            }

            fn text(&self) -> String {
                let mut text = Text::default();
                text.feature_map(&lock(&self.map));
                text.finish()
            }
        }

        message_class!($class {
            #[new]
            #[pyo3(signature = (feature = None))]
            fn new(feature: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
                let made = $class { map: shared(FeatureMap::new($schema)) };
                if let Some(items) = feature {
                    MessageMap { map: made.map.clone() }.update_from(items)?;
                }
                Ok(made)
            }

            /// Name to Feature; reading a missing name creates it.
            #[getter]
            fn feature(&self) -> MessageMap {
                MessageMap { map: self.map.clone() }
            }

            #[setter(feature)]
            fn set_feature(&self, items: &Bound<'_, PyAny>) -> PyResult<()> {
                let fresh = MessageMap { map: shared(FeatureMap::new($schema)) };
                fresh.update_from(items)?;
                let entries = lock(&fresh.map).nodes();
                let mut map = lock(&self.map);
                map.clear();
                for (key, node) in entries {
                    map.insert(&key, node);
                }
                Ok(())
            }

            /// Removes every feature.
            fn Clear(&self) {
                lock(&self.map).clear();
            }

            /// Marks this message set in the message that holds it, as protobuf's ``SetInParent``.
            fn SetInParent(&self) {
                lock(&self.map).mark_present();
            }

            fn HasField(&self, name: &str) -> PyResult<bool> {
                Err(PyValueError::new_err(format!("{} has no singular field {name:?}", $name)))
            }
        });
    };
}

fn parse_map(schema: Schema, data: Arc<[u8]>) -> Result<FeatureMap, Malformed> {
    match schema {
        Schema::OneFlow => parse_ofrecord(data),
        Schema::TensorFlow => FeatureMap::parse(schema, &Slice::whole(data)),
    }
}

feature_map_class!(
    Features,
    "Features",
    "recordkit.train",
    Schema::TensorFlow,
    "``tf.train.Features``: ``feature`` maps names to :class:`Feature`."
);
feature_map_class!(
    OFRecord,
    "OFRecord",
    "recordkit.ofrecord",
    Schema::OneFlow,
    "OneFlow's ``OFRecord``: ``feature`` maps names to :class:`Feature`."
);
