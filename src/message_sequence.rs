//! `tf.train.SequenceExample` held in Rust: its context (a feature map, as
//! in [`crate::message`]) and its feature lists, one Feature per step.

use std::sync::Arc;

use crate::encode::map_key_order;
use crate::example::{dedup, for_each_entry, for_each_field_one, Schema};
use crate::message::{lock, shared, Feature, FeatureMap, Shared, Slice};
use crate::wire::{len_field_size, put_len_header, Malformed, Reader, Value};

/// A `FeatureList`: one Feature per step.
#[derive(Debug, Default)]
pub struct FeatureList {
    pub steps: Vec<Shared<Feature>>,
}

impl FeatureList {
    /// A FeatureList message (one Feature per step), checked as protobuf checks it.
    pub fn parse_message(data: Arc<[u8]>) -> Result<FeatureList, Malformed> {
        let raw = Slice::whole(data);
        FeatureList::parse(&raw, raw.bytes())
    }

    fn parse(raw: &Slice, bytes: &[u8]) -> Result<FeatureList, Malformed> {
        let mut steps = Vec::new();
        for_each_field_one(bytes, &mut |step| {
            steps.push(shared(Feature::parse(Schema::TensorFlow, raw.sub(step))?));
            Ok(())
        })?;
        Ok(FeatureList { steps })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        for step in &self.steps {
            let feature = lock(step).to_bytes();
            put_len_header(out, 1, feature.len());
            out.extend_from_slice(&feature);
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    pub fn deep_copy(&self) -> FeatureList {
        FeatureList {
            steps: self.steps.iter().map(|s| shared(lock(s).clone())).collect(),
        }
    }
}

/// `FeatureLists`: a `map<string, FeatureList>`, in the order entries came.
#[derive(Debug, Default)]
pub struct FeatureLists {
    pub entries: Vec<(Box<str>, Shared<FeatureList>)>,
    present: bool,
}

impl FeatureLists {
    /// A FeatureLists message, checked as protobuf checks it.
    pub fn parse_message(data: Arc<[u8]>) -> Result<FeatureLists, Malformed> {
        let raw = Slice::whole(data);
        FeatureLists::parse(&raw, raw.bytes())
    }

    fn parse(raw: &Slice, bytes: &[u8]) -> Result<FeatureLists, Malformed> {
        let mut found = Vec::new();
        for_each_entry(bytes, &mut |e| found.push(e))?;
        for entry in &found {
            entry.check_utf8_keys("a feature list's name is not valid UTF-8")?;
        }
        let kept = dedup(found, crate::example::check_feature_list_entry)?;
        let mut lists = FeatureLists {
            entries: Vec::new(),
            present: true,
        };
        for entry in kept {
            let key = std::str::from_utf8(entry.key).expect("checked above");
            let list = match entry.value_message() {
                Some(value) => FeatureList::parse(raw, value)?,
                None => {
                    let mut steps = Vec::new();
                    entry.for_each_step(&mut |step| {
                        steps.push(shared(Feature::parse(Schema::TensorFlow, raw.sub(step))?));
                        Ok(())
                    })?;
                    FeatureList { steps }
                }
            };
            lists.entries.push((key.into(), shared(list)));
        }
        Ok(lists)
    }

    pub fn get(&self, key: &str) -> Option<Shared<FeatureList>> {
        self.entries
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| v.clone())
    }

    pub fn get_or_insert(&mut self, key: &str) -> Shared<FeatureList> {
        if let Some(found) = self.get(key) {
            return found;
        }
        let node = shared(FeatureList::default());
        self.entries.push((key.into(), node.clone()));
        node
    }

    pub fn insert(&mut self, key: &str, node: Shared<FeatureList>) {
        match self.entries.iter_mut().find(|(k, _)| &**k == key) {
            Some(entry) => entry.1 = node,
            None => self.entries.push((key.into(), node)),
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<Shared<FeatureList>> {
        let i = self.entries.iter().position(|(k, _)| &**k == key)?;
        Some(self.entries.remove(i).1)
    }

    pub fn present(&self) -> bool {
        self.present || !self.entries.is_empty()
    }

    pub fn mark_present(&mut self) {
        self.present = true;
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut sorted: Vec<(&str, Vec<u8>)> = self
            .entries
            .iter()
            .map(|(k, v)| (&**k, lock(v).to_bytes()))
            .collect();
        sorted.sort_by(|a, b| map_key_order(a.0.as_bytes(), b.0.as_bytes()));
        for (key, list) in sorted {
            let entry_len = len_field_size(1, key.len()) + len_field_size(2, list.len());
            put_len_header(out, 1, entry_len);
            put_len_header(out, 1, key.len());
            out.extend_from_slice(key.as_bytes());
            put_len_header(out, 2, list.len());
            out.extend_from_slice(&list);
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    pub fn deep_copy(&self) -> FeatureLists {
        FeatureLists {
            entries: self
                .entries
                .iter()
                .map(|(k, v)| (k.clone(), shared(lock(v).deep_copy())))
                .collect(),
            present: self.present,
        }
    }
}

/// A `tf.train.SequenceExample`: `context` Features and `feature_lists`.
#[derive(Debug)]
pub struct SequenceExample {
    pub context: Shared<FeatureMap>,
    pub feature_lists: Shared<FeatureLists>,
}

impl Default for SequenceExample {
    fn default() -> Self {
        SequenceExample {
            context: shared(FeatureMap::new(Schema::TensorFlow)),
            feature_lists: shared(FeatureLists::default()),
        }
    }
}

impl SequenceExample {
    /// Parses a SequenceExample, every byte checked as protobuf would. Fields
    /// that repeat merge, as protobuf merges repeated sub-messages.
    pub fn parse(buf: Arc<[u8]>) -> Result<SequenceExample, Malformed> {
        let raw = Slice::whole(buf);
        let mut context = Vec::new();
        let mut lists = Vec::new();
        let (mut has_context, mut has_lists) = (false, false);
        let mut r = Reader::new(raw.bytes());
        while let Some((n, v)) = r.field()? {
            match (n, v) {
                (1, Value::Len(map)) => {
                    has_context = true;
                    for_each_entry(map, &mut |e| context.push(e))?;
                }
                (2, Value::Len(map)) => {
                    has_lists = true;
                    lists.push(map);
                }
                _ => {}
            }
        }
        let mut context = FeatureMap::from_entries(Schema::TensorFlow, &raw, context, false)?;
        context.present = has_context;
        let mut feature_lists = FeatureLists::default();
        for map in lists {
            for (key, list) in FeatureLists::parse(&raw, map)?.entries {
                feature_lists.insert(&key, list);
            }
        }
        feature_lists.present = has_lists;
        Ok(SequenceExample {
            context: shared(context),
            feature_lists: shared(feature_lists),
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let context = lock(&self.context);
        if context.present() {
            let body = context.to_bytes();
            put_len_header(out, 1, body.len());
            out.extend_from_slice(&body);
        }
        drop(context);
        let lists = lock(&self.feature_lists);
        if lists.present() {
            let body = lists.to_bytes();
            put_len_header(out, 2, body.len());
            out.extend_from_slice(&body);
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}
