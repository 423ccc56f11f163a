//! `Example`, `SequenceExample`, `FeatureLists` and `FeatureList`.

use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyIndexError, PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyIterator, PyList, PySlice, PyString, PyTuple};

use crate::example::Schema;
use crate::message::{lock, shared, Example as ExampleNode, Feature, FeatureMap, Shared};
use crate::message_class;
use crate::message_sequence::{
    FeatureList as ListNode, FeatureLists as ListsNode, SequenceExample as SequenceNode,
};
use crate::message_text::Text;
use crate::py::messages::features::{feature_from_kwargs, feature_object, Features, TfFeature};
use crate::py::messages::Message;
use crate::wire::Malformed;

/// ``tf.train.Example``: one record, a :class:`Features` map.
#[pyclass(module = "recordkit.train", name = "Example", frozen)]
pub struct Example {
    /// BorrowedValues here rather than shared: no other handle reaches an Example (one
    /// allocation fewer for every message parsed).
    pub node: Mutex<ExampleNode>,
}

impl Message for Example {
    fn to_bytes(&self) -> Vec<u8> {
        lock(&self.node).to_bytes()
    }

    fn parse_into(&self, data: Arc<[u8]>) -> Result<(), Malformed> {
        let parsed = ExampleNode::parse(data)?;
        *lock(&self.node) = parsed;
        Ok(())
    }

    fn from_bytes(data: Arc<[u8]>) -> Result<Self, Malformed> {
        Ok(Example {
            node: Mutex::new(ExampleNode::parse(data)?),
        })
    }

    fn text(&self) -> String {
        let mut text = Text::default();
        text.example(&mut lock(&self.node));
        text.finish()
    }
}

fn features_node(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Shared<FeatureMap>> {
    value
        .cast::<Features>()
        .map(|f| f.get().map.clone())
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "{field} must be a Features message, not {}",
                value
                    .get_type()
                    .name()
                    .map_or_else(|_| "?".to_owned(), |n| n.to_string())
            ))
        })
}

message_class!(Example {
    #[new]
    #[pyo3(signature = (features = None))]
    fn new(features: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let map = features.map(|f| features_node(f, "features")).transpose()?;
        Ok(Example { node: Mutex::new(ExampleNode::new(map)) })
    }

    /// The :class:`Features`; changing them marks them as set.
    #[getter]
    fn features(&self) -> Features {
        Features { map: lock(&self.node).features() }
    }

    #[setter(features)]
    fn set_features(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let map = features_node(value, "features")?;
        lock(&self.node).set_features(map);
        Ok(())
    }

    /// Whether ``features`` is set.
    fn HasField(&self, name: &str) -> PyResult<bool> {
        if name != "features" {
            return Err(PyValueError::new_err(format!("Example has no field {name:?}")));
        }
        Ok(lock(&self.node).has_features())
    }

    /// Unsets ``features``.
    fn ClearField(&self, name: &str) -> PyResult<()> {
        if name != "features" {
            return Err(PyValueError::new_err(format!("Example has no field {name:?}")));
        }
        lock(&self.node).clear();
        Ok(())
    }

    /// Unsets the features.
    fn Clear(&self) {
        lock(&self.node).clear();
    }

    /// This message in protobuf's JSON format, as ``json_format.MessageToJson``
    /// writes it: list fields in lowerCamelCase (``int64List``), int64 values as
    /// strings, floats as numbers (``"NaN"``, ``"Infinity"``, ``"-Infinity"`` as
    /// strings), bytes in base64. Keys ascending, as :func:`print` shows them.
    #[pyo3(signature = (indent = Some(2)))]
    fn to_json(&self, py: Python<'_>, indent: Option<usize>) -> PyResult<String> {
        crate::py::messages::json::example_to_json(py, &self.node, indent)
    }

    /// The message that protobuf's JSON format describes (``json_format.Parse``):
    /// field names in lowerCamelCase or as in the proto, int64 values as strings
    /// or whole numbers, floats as numbers or numeric strings, bytes in base64.
    /// Text that is not such JSON is a :class:`ParseError` naming where it departs.
    #[classmethod]
    fn from_json(_cls: &Bound<'_, pyo3::types::PyType>, py: Python<'_>, text: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Example { node: Mutex::new(crate::py::messages::json::example_from_json(py, text)?) })
    }
});

/// ``tf.train.FeatureList``: ``feature`` is a list of :class:`Feature`, one per step.
#[pyclass(module = "recordkit.train", name = "FeatureList", frozen)]
pub struct FeatureList {
    pub node: Shared<ListNode>,
}

impl Message for FeatureList {
    fn to_bytes(&self) -> Vec<u8> {
        lock(&self.node).to_bytes()
    }

    fn parse_into(&self, data: Arc<[u8]>) -> Result<(), Malformed> {
        let parsed = ListNode::parse_message(data)?;
        *lock(&self.node) = parsed;
        Ok(())
    }

    fn from_bytes(data: Arc<[u8]>) -> Result<Self, Malformed> {
        Ok(FeatureList {
            node: shared(ListNode::parse_message(data)?),
        })
    }

    fn text(&self) -> String {
        let mut text = Text::default();
        text.feature_list(&lock(&self.node));
        text.finish()
    }
}

message_class!(FeatureList {
    #[new]
    #[pyo3(signature = (feature = None))]
    fn new(feature: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let list = FeatureList { node: shared(ListNode::default()) };
        if let Some(steps) = feature {
            RepeatedFeatures { node: list.node.clone() }.extend(steps)?;
        }
        Ok(list)
    }

    /// The steps (a list with protobuf's ``add()``).
    #[getter]
    fn feature(&self) -> RepeatedFeatures {
        RepeatedFeatures { node: self.node.clone() }
    }

    #[setter(feature)]
    fn set_feature(&self, steps: &Bound<'_, PyAny>) -> PyResult<()> {
        let nodes = step_nodes(steps)?;
        lock(&self.node).steps = nodes;
        Ok(())
    }

    /// Removes every step.
    fn Clear(&self) {
        lock(&self.node).steps.clear();
    }
});

fn step_nodes(steps: &Bound<'_, PyAny>) -> PyResult<Vec<Shared<Feature>>> {
    steps
        .try_iter()?
        .map(|step| {
            let step = step?;
            match step.cast::<TfFeature>() {
                Ok(f) => Ok(f.get().node.clone()),
                Err(_) => Err(PyTypeError::new_err(format!(
                    "items are Feature, not {}",
                    step.get_type().name()?
                ))),
            }
        })
        .collect()
}

/// A FeatureList's ``feature``: protobuf's repeated composite container.
#[pyclass(
    module = "recordkit.train",
    name = "RepeatedCompositeContainer",
    frozen,
    sequence
)]
pub struct RepeatedFeatures {
    node: Shared<ListNode>,
}

#[pymethods]
impl RepeatedFeatures {
    /// Appends a new Feature built from ``fields`` and returns it.
    #[pyo3(signature = (**fields))]
    fn add<'py>(
        &self,
        py: Python<'py>,
        fields: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let made = Bound::new(
            py,
            TfFeature {
                node: feature_from_kwargs(Schema::TensorFlow, "Feature", fields)?,
            },
        )?;
        lock(&self.node).steps.push(made.get().node.clone());
        Ok(made.into_any())
    }

    /// Appends a Feature (the Feature itself, not a copy).
    fn append(&self, step: &Bound<'_, PyAny>) -> PyResult<()> {
        let nodes = step_nodes(PyTuple::new(step.py(), [step])?.as_any())?;
        lock(&self.node).steps.extend(nodes);
        Ok(())
    }

    fn extend(&self, steps: &Bound<'_, PyAny>) -> PyResult<()> {
        let nodes = step_nodes(steps)?;
        lock(&self.node).steps.extend(nodes);
        Ok(())
    }

    fn __len__(&self) -> usize {
        lock(&self.node).steps.len()
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        index: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let all = self.as_list(py)?;
        if index.is_instance_of::<PySlice>() {
            return all.as_any().get_item(index);
        }
        let i: isize = index.extract()?;
        let len = all.len() as isize;
        let at = if i < 0 { i + len } else { i };
        if !(0..len).contains(&at) {
            return Err(PyIndexError::new_err("list index out of range"));
        }
        all.get_item(at as usize)
    }

    fn __delitem__(&self, index: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = index.py();
        let all = self.as_list(py)?;
        all.as_any().del_item(index)?;
        let nodes = step_nodes(&all)?;
        lock(&self.node).steps = nodes;
        Ok(())
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyIterator>> {
        self.as_list(py)?.try_iter()
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let theirs = match other.cast::<RepeatedFeatures>() {
            Ok(other) => other.get().as_list(py)?.into_any(),
            Err(_) => other.clone(),
        };
        self.as_list(py)?.eq(theirs)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.as_list(py)?.repr()?.to_string())
    }

    fn __hash__(&self) -> PyResult<isize> {
        Err(PyTypeError::new_err(
            "unhashable type: a repeated field changes",
        ))
    }

    fn __reduce__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyList>,))> {
        Ok((py.get_type::<PyList>().into_any(), (self.as_list(py)?,)))
    }
}

impl RepeatedFeatures {
    fn as_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let nodes = lock(&self.node).steps.clone();
        PyList::new(
            py,
            nodes
                .into_iter()
                .map(|n| feature_object(py, n))
                .collect::<PyResult<Vec<_>>>()?,
        )
    }
}

/// ``tf.train.FeatureLists``: ``feature_list`` maps names to :class:`FeatureList`.
#[pyclass(module = "recordkit.train", name = "FeatureLists", frozen)]
pub struct FeatureLists {
    pub node: Shared<ListsNode>,
}

impl Message for FeatureLists {
    fn to_bytes(&self) -> Vec<u8> {
        lock(&self.node).to_bytes()
    }

    fn parse_into(&self, data: Arc<[u8]>) -> Result<(), Malformed> {
        let parsed = ListsNode::parse_message(data)?;
        *lock(&self.node) = parsed;
        Ok(())
    }

    fn from_bytes(data: Arc<[u8]>) -> Result<Self, Malformed> {
        Ok(FeatureLists {
            node: shared(ListsNode::parse_message(data)?),
        })
    }

    fn text(&self) -> String {
        let mut text = Text::default();
        text.feature_lists(&lock(&self.node));
        text.finish()
    }
}

message_class!(FeatureLists {
    #[new]
    #[pyo3(signature = (feature_list = None))]
    fn new(feature_list: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let made = FeatureLists { node: shared(ListsNode::default()) };
        if let Some(items) = feature_list {
            FeatureListMap { node: made.node.clone() }.update_from(items)?;
        }
        Ok(made)
    }

    /// Name to :class:`FeatureList`; reading a missing name creates it.
    #[getter]
    fn feature_list(&self) -> FeatureListMap {
        FeatureListMap { node: self.node.clone() }
    }

    /// Removes every feature list.
    fn Clear(&self) {
        lock(&self.node).entries.clear();
    }

    /// Marks this message set in the SequenceExample that holds it.
    fn SetInParent(&self) {
        lock(&self.node).mark_present();
    }
});

fn list_node(value: &Bound<'_, PyAny>) -> PyResult<Shared<ListNode>> {
    value
        .cast::<FeatureList>()
        .map(|l| l.get().node.clone())
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "map values are FeatureList, not {}",
                value
                    .get_type()
                    .name()
                    .map_or_else(|_| "?".to_owned(), |n| n.to_string())
            ))
        })
}

fn key_of(key: &Bound<'_, PyAny>) -> PyResult<String> {
    key.extract::<String>().map_err(|_| {
        PyTypeError::new_err(format!(
            "map keys are str, not {}",
            key.get_type()
                .name()
                .map_or_else(|_| "?".to_owned(), |n| n.to_string())
        ))
    })
}

/// ``feature_list``: a ``map<string, FeatureList>``; reading a missing key creates it.
#[pyclass(module = "recordkit.train", name = "MessageMap", frozen, mapping)]
pub struct FeatureListMap {
    node: Shared<ListsNode>,
}

impl FeatureListMap {
    fn update_from(&self, items: &Bound<'_, PyAny>) -> PyResult<()> {
        let pairs = match items.cast::<PyDict>() {
            Ok(d) => d.items().into_any(),
            Err(_) => items.call_method0("items")?,
        };
        let mut nodes = Vec::new();
        for pair in pairs.try_iter()? {
            let (key, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair?.extract()?;
            nodes.push((key_of(&key)?, list_node(&value)?));
        }
        let mut lists = lock(&self.node);
        for (key, node) in nodes {
            lists.insert(&key, node);
        }
        Ok(())
    }

    fn entries(&self) -> Vec<(String, Shared<ListNode>)> {
        lock(&self.node)
            .entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }
}

#[pymethods]
impl FeatureListMap {
    fn __getitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<FeatureList> {
        let key = key_of(key)?;
        Ok(FeatureList {
            node: lock(&self.node).get_or_insert(&key),
        })
    }

    fn __setitem__(&self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = key_of(key)?;
        let node = list_node(value)?;
        lock(&self.node).insert(&key, node);
        Ok(())
    }

    fn __delitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let name = key_of(key)?;
        match lock(&self.node).remove(&name) {
            Some(_) => Ok(()),
            None => Err(PyKeyError::new_err(name)),
        }
    }

    fn __contains__(&self, key: &Bound<'_, PyAny>) -> bool {
        key.extract::<String>()
            .is_ok_and(|k| lock(&self.node).get(&k).is_some())
    }

    fn __len__(&self) -> usize {
        lock(&self.node).entries.len()
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyIterator>> {
        self.keys(py)?.try_iter()
    }

    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.entries().into_iter().map(|(k, _)| k))
    }

    fn values(&self) -> Vec<FeatureList> {
        self.entries()
            .into_iter()
            .map(|(_, node)| FeatureList { node })
            .collect()
    }

    fn items(&self) -> Vec<(String, FeatureList)> {
        self.entries()
            .into_iter()
            .map(|(k, node)| (k, FeatureList { node }))
            .collect()
    }

    #[pyo3(signature = (key, default = None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let key = key_of(key)?;
        let found = lock(&self.node).get(&key);
        match found {
            Some(node) => Ok(Some(Bound::new(py, FeatureList { node })?.into_any())),
            None => Ok(default),
        }
    }

    fn get_or_create(&self, key: &Bound<'_, PyAny>) -> PyResult<FeatureList> {
        self.__getitem__(key)
    }

    fn clear(&self) {
        lock(&self.node).entries.clear();
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let dict = PyDict::new(py);
        for (k, node) in self.entries() {
            dict.set_item(PyString::new(py, &k), Bound::new(py, FeatureList { node })?)?;
        }
        Ok(dict.repr()?.to_string())
    }
}

/// ``tf.train.SequenceExample``: ``context`` (:class:`Features`) and ``feature_lists`` (:class:`FeatureLists`).
#[pyclass(module = "recordkit.train", name = "SequenceExample", frozen)]
pub struct SequenceExample {
    pub node: Shared<SequenceNode>,
}

impl Message for SequenceExample {
    fn to_bytes(&self) -> Vec<u8> {
        lock(&self.node).to_bytes()
    }

    fn parse_into(&self, data: Arc<[u8]>) -> Result<(), Malformed> {
        let parsed = SequenceNode::parse(data)?;
        *lock(&self.node) = parsed;
        Ok(())
    }

    fn from_bytes(data: Arc<[u8]>) -> Result<Self, Malformed> {
        Ok(SequenceExample {
            node: shared(SequenceNode::parse(data)?),
        })
    }

    fn text(&self) -> String {
        let mut text = Text::default();
        text.sequence_example(&lock(&self.node));
        text.finish()
    }
}

message_class!(SequenceExample {
    #[new]
    #[pyo3(signature = (context = None, feature_lists = None))]
    fn new(context: Option<&Bound<'_, PyAny>>, feature_lists: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let mut node = SequenceNode::default();
        if let Some(context) = context {
            node.context = features_node(context, "context")?;
            lock(&node.context).mark_present();
        }
        if let Some(lists) = feature_lists {
            node.feature_lists = lists.cast::<FeatureLists>().map(|l| l.get().node.clone()).map_err(|_| {
                PyTypeError::new_err("feature_lists must be a FeatureLists message")
            })?;
            lock(&node.feature_lists).mark_present();
        }
        Ok(SequenceExample { node: shared(node) })
    }

    /// The context :class:`Features`.
    #[getter]
    fn context(&self) -> Features {
        Features { map: lock(&self.node).context.clone() }
    }

    #[setter(context)]
    fn set_context(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let map = features_node(value, "context")?;
        lock(&map).mark_present();
        lock(&self.node).context = map;
        Ok(())
    }

    /// The :class:`FeatureLists`.
    #[getter]
    fn feature_lists(&self) -> FeatureLists {
        FeatureLists { node: lock(&self.node).feature_lists.clone() }
    }

    #[setter(feature_lists)]
    fn set_feature_lists(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let lists = value.cast::<FeatureLists>().map(|l| l.get().node.clone()).map_err(|_| {
            PyTypeError::new_err("feature_lists must be a FeatureLists message")
        })?;
        lock(&lists).mark_present();
        lock(&self.node).feature_lists = lists;
        Ok(())
    }

    /// Whether ``context`` or ``feature_lists`` is set.
    fn HasField(&self, name: &str) -> PyResult<bool> {
        let node = lock(&self.node);
        match name {
            "context" => Ok(lock(&node.context).present()),
            "feature_lists" => Ok(lock(&node.feature_lists).present()),
            _ => Err(PyValueError::new_err(format!("SequenceExample has no field {name:?}"))),
        }
    }

    /// Unsets both fields.
    fn Clear(&self) {
        *lock(&self.node) = SequenceNode::default();
    }
});
