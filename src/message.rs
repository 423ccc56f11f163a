//! Messages held in Rust: `tf.train.Example`, `SequenceExample` and OneFlow's
//! `OFRecord`, with their Features and lists.
//!
//! A message is a tree of shared nodes ([`Shared`]): the Python classes are
//! handles onto them, so `example.features.feature["a"].int64_list.value`
//! reaches the node that holds the values, and changing it changes the
//! example. Nodes hold no Python object and point only down the tree, so no
//! cycle can form and Python's garbage collector has nothing to walk.
//!
//! Parsing checks every byte as protobuf would (every entry, those a later
//! duplicate key replaces too) and keeps the bytes: a Feature's values are
//! decoded when first touched, and a message never touched serializes as the
//! bytes it came from when they are already protobuf's deterministic form.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::encode::{map_key_order, put_example, put_feature_map, Values};
use crate::example::{dedup, feature, for_each_entry, Entry, Kind, Scalar, Schema};
use crate::wire::{len_field_size, put_len_header, read_varint, Malformed, Reader, Value};

/// A node of a message tree, shared by the handles that reach it.
pub type Shared<T> = Arc<Mutex<T>>;

pub fn shared<T>(value: T) -> Shared<T> {
    Arc::new(Mutex::new(value))
}

/// The node, locked. A panic while it was locked (a bug) leaves it as it was
/// then: every change here is complete before anything can panic.
pub fn lock<T>(node: &Mutex<T>) -> MutexGuard<'_, T> {
    node.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Part of the bytes a message was parsed from.
#[derive(Clone, Debug)]
pub struct Slice {
    buf: Arc<[u8]>,
    start: usize,
    end: usize,
}

impl Slice {
    pub fn whole(buf: Arc<[u8]>) -> Slice {
        let end = buf.len();
        Slice { buf, start: 0, end }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The part of these bytes that `part` (a subslice of them) is.
    pub(crate) fn sub(&self, part: &[u8]) -> Slice {
        let span = span_in(&self.buf, part);
        Slice {
            buf: self.buf.clone(),
            start: span.start as usize,
            end: span.end as usize,
        }
    }
}

// --- values ------------------------------------------------------------------

/// A list's values.
#[derive(Clone, Debug)]
pub enum List {
    Bytes(Vec<Arc<[u8]>>),
    Float(Vec<f32>),
    Double(Vec<f64>),
    Int32(Vec<i32>),
    Int64(Vec<i64>),
}

impl List {
    pub fn empty(kind: Kind) -> List {
        match kind {
            Kind::Bytes => List::Bytes(Vec::new()),
            Kind::Float => List::Float(Vec::new()),
            Kind::Double => List::Double(Vec::new()),
            Kind::Int32 => List::Int32(Vec::new()),
            Kind::Int64 => List::Int64(Vec::new()),
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            List::Bytes(_) => Kind::Bytes,
            List::Float(_) => Kind::Float,
            List::Double(_) => Kind::Double,
            List::Int32(_) => Kind::Int32,
            List::Int64(_) => Kind::Int64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            List::Bytes(v) => v.len(),
            List::Float(v) => v.len(),
            List::Double(v) => v.len(),
            List::Int32(v) => v.len(),
            List::Int64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Value `i` (in range).
    pub fn scalar(&self, i: usize) -> Scalar<'_> {
        match self {
            List::Bytes(v) => Scalar::Bytes(&v[i]),
            List::Float(v) => Scalar::Float(v[i]),
            List::Double(v) => Scalar::Double(v[i]),
            List::Int32(v) => Scalar::Int32(v[i]),
            List::Int64(v) => Scalar::Int64(v[i]),
        }
    }

    /// The values of a decoded Feature of `kind`.
    pub fn decode_feature(f: &crate::example::Feature<'_>, kind: Kind) -> Result<List, Malformed> {
        Ok(match kind {
            Kind::Bytes => {
                let mut out = Vec::new();
                f.bytes(&mut out)?;
                List::Bytes(out.into_iter().map(Arc::from).collect())
            }
            Kind::Float => {
                let mut out = Vec::new();
                f.floats(&mut out)?;
                List::Float(out)
            }
            Kind::Double => {
                let mut out = Vec::new();
                f.doubles(&mut out)?;
                List::Double(out)
            }
            Kind::Int32 => {
                let mut out = Vec::new();
                f.int32s(&mut out)?;
                List::Int32(out)
            }
            Kind::Int64 => {
                let mut out = Vec::new();
                f.int64s(&mut out)?;
                List::Int64(out)
            }
        })
    }

    /// The values of a list message (`Int64List` ...) of `kind`, checked as protobuf checks them.
    pub fn decode_message(data: &[u8], kind: Kind) -> Result<List, Malformed> {
        let f = crate::example::list(data, kind);
        f.count()?;
        List::decode_feature(&f, kind)
    }

    /// The values, borrowed for the encoder; `scratch` holds byte strings' slices.
    pub fn values<'a>(&'a self, scratch: &'a mut Vec<&'a [u8]>) -> Values<'a> {
        match self {
            List::Bytes(v) => {
                scratch.extend(v.iter().map(|b| &b[..]));
                Values::Bytes(scratch)
            }
            List::Float(v) => Values::Float(v),
            List::Double(v) => Values::Double(v),
            List::Int32(v) => Values::Int32(v),
            List::Int64(v) => Values::Int64(v),
        }
    }

    /// The list message's bytes (an `Int64List` ...).
    pub fn to_message(&self) -> Vec<u8> {
        let mut scratch = Vec::new();
        let mut out = Vec::new();
        self.values(&mut scratch).put_list(&mut out);
        out
    }
}

// --- Feature -----------------------------------------------------------------

#[derive(Clone, Debug)]
enum Body {
    /// A Feature message's bytes, checked, not yet decoded.
    Raw(Slice),
    /// The list the Feature holds; None where no kind is set.
    Parsed(Option<List>),
}

/// A `Feature`: one list of one kind, or none.
#[derive(Clone, Debug)]
pub struct Feature {
    schema: Schema,
    body: Body,
}

impl Feature {
    pub fn new(schema: Schema) -> Feature {
        Feature {
            schema,
            body: Body::Parsed(None),
        }
    }

    /// A Feature holding `list`, whose kind must exist in `schema`.
    pub fn holding(schema: Schema, list: List) -> Result<Feature, Malformed> {
        schema
            .field(list.kind())
            .ok_or(Malformed("this kind does not exist in tf.train.Feature"))?;
        Ok(Feature {
            schema,
            body: Body::Parsed(Some(list)),
        })
    }

    /// A Feature from its message's bytes, checked now, decoded when first read.
    pub fn parse(schema: Schema, raw: Slice) -> Result<Feature, Malformed> {
        check_feature(raw.bytes(), schema)?;
        Ok(Feature {
            schema,
            body: Body::Raw(raw),
        })
    }

    pub fn schema(&self) -> Schema {
        self.schema
    }

    /// The list, decoded from the bytes on the first call.
    pub fn list(&mut self) -> Option<&List> {
        self.parsed().as_ref()
    }

    fn parsed(&mut self) -> &mut Option<List> {
        if let Body::Raw(raw) = &self.body {
            let decoded = decode_feature(raw.bytes(), self.schema).expect("checked when parsed");
            self.body = Body::Parsed(decoded);
        }
        match &mut self.body {
            Body::Parsed(list) => list,
            Body::Raw(_) => unreachable!("decoded above"),
        }
    }

    /// `(the number of values, value i)` of the list of `kind`, read from the
    /// bytes while the Feature is still bytes and short; None otherwise (read
    /// [`Feature::list`] then). Reading one value of a record makes no list.
    pub fn value_in_place(&self, kind: Kind, i: usize) -> Option<(usize, Option<Scalar<'_>>)> {
        let Body::Raw(raw) = &self.body else {
            return None;
        };
        let f = crate::example::feature(raw.bytes(), self.schema).ok()?;
        if f.kind != Some(kind) {
            return None;
        }
        f.value_in_place(i)
    }

    pub fn kind(&mut self) -> Option<Kind> {
        self.list().map(List::kind)
    }

    /// The list of `kind` for changing: set to an empty one first where the
    /// Feature held none, or another kind (a oneof keeps one member).
    pub fn list_mut(&mut self, kind: Kind) -> &mut List {
        let list = self.parsed();
        if list.as_ref().map(List::kind) != Some(kind) {
            *list = Some(List::empty(kind));
        }
        list.as_mut().expect("set above")
    }

    /// Sets the list (None: no kind).
    pub fn set(&mut self, list: Option<List>) {
        self.body = Body::Parsed(list);
    }

    /// This Feature as a Feature of `schema`: the same list, where that schema has its kind.
    pub fn converted(&mut self, schema: Schema) -> Result<Feature, Malformed> {
        if schema == self.schema {
            return Ok(self.clone());
        }
        match self.list() {
            None => Ok(Feature::new(schema)),
            Some(list) => {
                let list = list.clone();
                schema
                    .field(list.kind())
                    .ok_or(Malformed("the other Feature cannot hold this kind"))?;
                Ok(Feature {
                    schema,
                    body: Body::Parsed(Some(list)),
                })
            }
        }
    }

    /// Appends the Feature message's bytes.
    pub fn encode(&mut self, out: &mut Vec<u8>) {
        if let Body::Raw(raw) = &self.body {
            if canonical_feature(raw.bytes(), self.schema) {
                out.extend_from_slice(raw.bytes());
                return;
            }
        }
        let schema = self.schema;
        if let Some(list) = self.list() {
            let mut scratch = Vec::new();
            list.values(&mut scratch)
                .put_feature(out, schema)
                .expect("a list's kind exists in its Feature's schema");
        }
    }

    pub fn to_bytes(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// Checks a Feature message as protobuf parses it: its fields and every value.
pub fn check_feature(bytes: &[u8], schema: Schema) -> Result<(), Malformed> {
    feature(bytes, schema)?.count().map(drop)
}

/// The list a checked Feature message holds.
fn decode_feature(bytes: &[u8], schema: Schema) -> Result<Option<List>, Malformed> {
    let f = feature(bytes, schema)?;
    f.kind
        .map(|kind| List::decode_feature(&f, kind))
        .transpose()
}

/// A varint written in its shortest form (as protobuf's serialization writes every one).
fn shortest_varint(buf: &[u8]) -> Option<(u64, usize)> {
    let (value, used) = read_varint(buf).ok()?;
    (used == 1 || buf[used - 1] != 0).then_some((value, used))
}

/// The LEN field of tag byte `tag` at the start of `buf`, its length in shortest form:
/// `(payload, bytes used)`.
fn shortest_len_field(buf: &[u8], tag: u8) -> Option<(&[u8], usize)> {
    if *buf.first()? != tag {
        return None;
    }
    let (len, used) = shortest_varint(&buf[1..])?;
    let end = (1 + used).checked_add(usize::try_from(len).ok()?)?;
    Some((buf.get(1 + used..end)?, end))
}

/// Whether a checked Feature message is in the form protobuf's deterministic
/// serialization writes: one list of its kind; numbers in one packed run (none
/// for an empty list) of shortest varints; byte strings one field each.
fn canonical_feature(bytes: &[u8], schema: Schema) -> bool {
    if bytes.is_empty() {
        return true;
    }
    let Some(kind) = schema
        .kind(u32::from(bytes[0] >> 3))
        .filter(|_| bytes[0] & 7 == 2)
    else {
        return false;
    };
    let Some((list, used)) = shortest_len_field(bytes, bytes[0]) else {
        return false;
    };
    if used != bytes.len() {
        return false;
    }
    if kind == Kind::Bytes {
        let mut at = 0;
        while at < list.len() {
            let Some((_, used)) = shortest_len_field(&list[at..], 0x0a) else {
                return false;
            };
            at += used;
        }
        return true;
    }
    if list.is_empty() {
        return true;
    }
    let Some((packed, used)) = shortest_len_field(list, 0x0a) else {
        return false;
    };
    if used != list.len() || packed.is_empty() {
        return false;
    }
    match kind {
        Kind::Float => packed.len() % 4 == 0,
        Kind::Double => packed.len() % 8 == 0,
        _ => {
            let mut at = 0;
            while at < packed.len() {
                match shortest_varint(&packed[at..]) {
                    // An int32 is a sign-extended int64: ten bytes when negative.
                    Some((value, used))
                        if kind == Kind::Int64 || (value as i64) as i32 as i64 == value as i64 =>
                    {
                        at += used
                    }
                    _ => return false,
                }
            }
            true
        }
    }
}

// --- feature maps: Features, OFRecord -----------------------------------------

const FEATURE_NAME_NOT_UTF8: &str = "a feature name is not valid UTF-8";

/// Entries at which a map keeps an index of its keys rather than comparing them in turn.
const INDEXED_FROM: usize = 16;

/// Where a part of a parsed map lies in the bytes it was parsed from ([`FeatureMap::buf`]).
type Span = std::ops::Range<u32>;

/// The span of `part`, a subslice of `buf`, or empty: a field that is absent
/// reads as empty bytes that lie nowhere (an entry with no key, or no value).
fn span_in(buf: &[u8], part: &[u8]) -> Span {
    if part.is_empty() {
        return 0..0;
    }
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    assert!(
        start + part.len() <= buf.len(),
        "a part of other bytes than the map's"
    );
    start as u32..(start + part.len()) as u32
}

/// A map entry's key: its own, or still bytes it was parsed from (UTF-8, checked).
#[derive(Clone, Debug)]
enum EntryKey {
    Owned(Box<str>),
    Raw(Span),
}

/// A map entry's Feature: a node, or still the bytes of its message (checked).
#[derive(Clone, Debug)]
enum EntryNode {
    Node(Shared<Feature>),
    Raw(Span),
}

#[derive(Clone, Debug)]
struct MapEntry {
    key: EntryKey,
    node: EntryNode,
}

/// A `map<string, Feature>`: TensorFlow's `Features`, or OneFlow's `OFRecord`.
/// Entries keep the order they came in (parsed, or added). A parsed map's
/// keys and Features stay the bytes they were parsed from until asked for:
/// reading one feature of a record makes one node.
#[derive(Debug)]
pub struct FeatureMap {
    schema: Schema,
    /// The bytes the entries still held as spans point into.
    buf: Option<Arc<[u8]>>,
    entries: Vec<MapEntry>,
    /// Keys to positions, once the map holds [`INDEXED_FROM`] entries and is searched.
    index: Option<HashMap<Box<str>, usize>>,
    /// Set in its parent even while empty (see [`FeatureMap::mark_present`]).
    pub(crate) present: bool,
}

impl FeatureMap {
    pub fn new(schema: Schema) -> FeatureMap {
        FeatureMap {
            schema,
            buf: None,
            entries: Vec::new(),
            index: None,
            present: false,
        }
    }

    /// A map reading entries from `buf` (see [`FeatureMap::push_raw`]).
    fn over(schema: Schema, buf: &Slice, capacity: usize) -> FeatureMap {
        let mut map = FeatureMap::new(schema);
        map.buf = Some(buf.buf.clone());
        map.entries.reserve_exact(capacity);
        map.present = true;
        map
    }

    /// The span of `part`, a subslice of this map's bytes.
    fn span(&self, part: &[u8]) -> Span {
        span_in(self.buf.as_ref().expect("a map over bytes"), part)
    }

    /// Appends an entry that is still bytes of this map's buffer: its key and value message.
    fn push_raw(&mut self, key: &[u8], value: &[u8]) {
        let (key, value) = (self.span(key), self.span(value));
        self.entries.push(MapEntry {
            key: EntryKey::Raw(key),
            node: EntryNode::Raw(value),
        });
    }

    fn key_bytes<'a>(&'a self, key: &'a EntryKey) -> &'a [u8] {
        match key {
            EntryKey::Owned(key) => key.as_bytes(),
            EntryKey::Raw(span) => &self.buf.as_ref().expect("a map over bytes")
                [span.start as usize..span.end as usize],
        }
    }

    fn key_str<'a>(&'a self, key: &'a EntryKey) -> &'a str {
        std::str::from_utf8(self.key_bytes(key)).expect("checked when parsed")
    }

    /// A Feature still in bytes, as a node of its own (sharing the bytes).
    fn raw_feature(&self, span: &Span) -> Feature {
        let buf = self.buf.clone().expect("a map over bytes");
        Feature {
            schema: self.schema,
            body: Body::Raw(Slice {
                buf,
                start: span.start as usize,
                end: span.end as usize,
            }),
        }
    }

    pub fn schema(&self) -> Schema {
        self.schema
    }

    /// Parses a map message: every entry checked (those a later entry of
    /// their key replaces too), the last entry of a key kept.
    pub fn parse(schema: Schema, bytes: &Slice) -> Result<FeatureMap, Malformed> {
        let mut raw = Vec::new();
        for_each_entry(bytes.bytes(), &mut |entry| raw.push(entry))?;
        FeatureMap::from_entries(schema, bytes, raw, false)
    }

    /// The map of `raw` entries (of `bytes`); `checked` where every byte was
    /// checked before (an Example's, when its features are first reached).
    pub(crate) fn from_entries(
        schema: Schema,
        bytes: &Slice,
        raw: Vec<Entry<'_>>,
        checked: bool,
    ) -> Result<FeatureMap, Malformed> {
        for entry in &raw {
            entry.check_utf8_keys(FEATURE_NAME_NOT_UTF8)?;
        }
        let kept = dedup(raw, |e| crate::example::check_feature_entry(e, schema))?;
        let mut map = FeatureMap::over(schema, bytes, kept.len());
        for entry in kept {
            match entry.value_message() {
                Some(value) => {
                    if !checked {
                        check_feature(value, schema)?;
                    }
                    map.push_raw(entry.key, value);
                }
                None => {
                    // Spread over several value fields: merged now, as protobuf merges them.
                    let f = entry.feature(schema)?;
                    let list = f
                        .kind
                        .map(|kind| List::decode_feature(&f, kind))
                        .transpose()?;
                    let key = map.span(entry.key);
                    map.entries.push(MapEntry {
                        key: EntryKey::Raw(key),
                        node: EntryNode::Node(shared(Feature {
                            schema,
                            body: Body::Parsed(list),
                        })),
                    });
                }
            }
        }
        Ok(map)
    }

    fn push(&mut self, key: Box<str>, node: Shared<Feature>) {
        if let Some(index) = &mut self.index {
            index.insert(key.clone(), self.entries.len());
        }
        self.entries.push(MapEntry {
            key: EntryKey::Owned(key),
            node: EntryNode::Node(node),
        });
    }

    fn position(&mut self, key: &str) -> Option<usize> {
        if self.entries.len() < INDEXED_FROM {
            return self
                .entries
                .iter()
                .position(|e| self.key_bytes(&e.key) == key.as_bytes());
        }
        if self.index.is_none() {
            self.index = Some(
                self.entries
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (self.key_str(&e.key).into(), i))
                    .collect(),
            );
        }
        self.index.as_ref()?.get(key).copied()
    }

    /// Entry `i`'s node, made from its bytes on the first call.
    fn node(&mut self, i: usize) -> Shared<Feature> {
        if let EntryNode::Raw(span) = &self.entries[i].node {
            let node = shared(self.raw_feature(span));
            self.entries[i].node = EntryNode::Node(node);
        }
        match &self.entries[i].node {
            EntryNode::Node(node) => node.clone(),
            EntryNode::Raw(_) => unreachable!("made above"),
        }
    }

    pub fn get(&mut self, key: &str) -> Option<Shared<Feature>> {
        self.position(key).map(|i| self.node(i))
    }

    /// The entry of `key`, made (a Feature with no kind) where missing, as
    /// protobuf's map does on reading.
    pub fn get_or_insert(&mut self, key: &str) -> Shared<Feature> {
        match self.position(key) {
            Some(i) => self.node(i),
            None => {
                let node = shared(Feature::new(self.schema));
                self.push(key.into(), node.clone());
                node
            }
        }
    }

    /// Sets the entry of `key` to `node` (shared, not copied).
    pub fn insert(&mut self, key: &str, node: Shared<Feature>) {
        match self.position(key) {
            Some(i) => self.entries[i].node = EntryNode::Node(node),
            None => self.push(key.into(), node),
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<Shared<Feature>> {
        let i = self.position(key)?;
        let node = self.node(i);
        self.entries.remove(i);
        self.index = None;
        Some(node)
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.index = None;
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| self.key_str(&e.key))
    }

    /// Every entry's key and node (nodes made for those still bytes).
    pub fn nodes(&mut self) -> Vec<(String, Shared<Feature>)> {
        (0..self.entries.len())
            .map(|i| (self.key_str(&self.entries[i].key).to_owned(), self.node(i)))
            .collect()
    }

    /// Calls `f` with each entry's key and Feature, in the order of `order`
    /// on keys' bytes; entries still bytes are read without a node made.
    pub fn visit_sorted(
        &self,
        order: impl Fn(&[u8], &[u8]) -> std::cmp::Ordering,
        mut f: impl FnMut(&str, &mut Feature),
    ) {
        let mut sorted: Vec<&MapEntry> = self.entries.iter().collect();
        sorted.sort_by(|a, b| order(self.key_bytes(&a.key), self.key_bytes(&b.key)));
        for entry in sorted {
            let key = self.key_str(&entry.key);
            match &entry.node {
                EntryNode::Node(node) => f(key, &mut lock(node)),
                EntryNode::Raw(span) => f(key, &mut self.raw_feature(span)),
            }
        }
    }

    /// Whether its parent holds it: set explicitly, or holding any entry.
    pub fn present(&self) -> bool {
        self.present || !self.entries.is_empty()
    }

    /// Marks it set in its parent, as protobuf does on any change to a sub-message.
    pub fn mark_present(&mut self) {
        self.present = true;
    }

    /// The map message's bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut feature = Vec::new();
        self.visit_sorted(map_key_order, |key, node| {
            feature.clear();
            node.encode(&mut feature);
            let entry_len = len_field_size(1, key.len()) + len_field_size(2, feature.len());
            put_len_header(out, 1, entry_len);
            put_len_header(out, 1, key.len());
            out.extend_from_slice(key.as_bytes());
            put_len_header(out, 2, feature.len());
            out.extend_from_slice(&feature);
        });
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// Encodes entries (key, Feature) as a feature map's bytes, keys in order:
/// the encoder every map of Features shares.
pub fn encode_features(
    out: &mut Vec<u8>,
    entries: &[(&[u8], Option<&List>)],
    schema: Schema,
    example: bool,
) {
    let mut scratch: Vec<Vec<&[u8]>> = entries.iter().map(|_| Vec::new()).collect();
    let values: Vec<(&[u8], Option<Values<'_>>)> = entries
        .iter()
        .zip(scratch.iter_mut())
        .map(|((key, list), scratch)| (*key, list.map(|l| l.values(scratch))))
        .collect();
    if example {
        put_example(out, &values).expect("kinds exist in their schema");
    } else {
        put_feature_map(out, &values, schema).expect("kinds exist in their schema");
    }
}

// --- Example -----------------------------------------------------------------

/// A `tf.train.Example`: one `Features` map, present or not.
#[derive(Debug)]
pub struct Example {
    /// The bytes it was parsed from, until its features are first reached.
    raw: Option<Slice>,
    /// How `raw` is laid out (see [`Layout`]).
    layout: Layout,
    features: Option<Shared<FeatureMap>>,
    /// Parsed with a `features` field (even an empty one).
    had_features: bool,
}

/// How a parsed Example's bytes are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// As every writer lays an Example out: one `features` field, `count`
    /// entries each `key, value`, keys ascending (so none repeats).
    Sorted { count: usize },
    /// Any other layout.
    General,
}

impl Default for Example {
    fn default() -> Self {
        Example::new(None)
    }
}

impl Example {
    pub fn new(features: Option<Shared<FeatureMap>>) -> Example {
        if let Some(map) = &features {
            lock(map).mark_present();
        }
        Example {
            raw: None,
            layout: Layout::General,
            features,
            had_features: false,
        }
    }

    /// Parses an Example, checking every byte as protobuf would; its features
    /// are read from the bytes when first reached.
    pub fn parse(buf: Arc<[u8]>) -> Result<Example, Malformed> {
        let raw = Slice::whole(buf);
        let (had_features, layout) = check_example(&raw)?;
        Ok(Example {
            raw: Some(raw),
            layout,
            features: None,
            had_features,
        })
    }

    /// The Features map (read from the bytes now, if this is the first time).
    pub fn features(&mut self) -> Shared<FeatureMap> {
        if let Some(map) = &self.features {
            return map.clone();
        }
        let map = match self.raw.take() {
            Some(raw) if matches!(self.layout, Layout::Sorted { .. }) => {
                let Layout::Sorted { count } = self.layout else {
                    unreachable!("matched above")
                };
                // Read again rather than kept from the check: the spans, kept in
                // the message, cost more in copies than a second pass costs.
                let mut map = FeatureMap::over(Schema::TensorFlow, &raw, count);
                crate::example::for_each_canonical_entry(raw.bytes(), &mut |e| {
                    map.push_raw(e.key, e.value_message().expect("laid out"))
                });
                map.present = self.had_features;
                map
            }
            Some(raw) => {
                let mut entries = Vec::new();
                crate::example::for_each_example_entry(raw.bytes(), &mut |e| entries.push(e))
                    .expect("checked when parsed");
                let mut map = FeatureMap::from_entries(Schema::TensorFlow, &raw, entries, true)
                    .expect("checked when parsed");
                map.present = self.had_features;
                map
            }
            None => FeatureMap::new(Schema::TensorFlow),
        };
        let map = shared(map);
        self.features = Some(map.clone());
        map
    }

    pub fn set_features(&mut self, map: Shared<FeatureMap>) {
        lock(&map).mark_present();
        self.raw = None;
        self.features = Some(map);
    }

    pub fn has_features(&self) -> bool {
        match &self.features {
            Some(map) => lock(map).present(),
            None => self.had_features,
        }
    }

    pub fn clear(&mut self) {
        *self = Example::default();
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        if let Some(raw) = &self.raw {
            if matches!(self.layout, Layout::Sorted { .. }) && canonical_example(raw.bytes()) {
                out.extend_from_slice(raw.bytes());
                return;
            }
            // Parsed, not yet touched, and not in deterministic form: re-encoded.
            let mut entries = Vec::new();
            crate::example::for_each_example_entry(raw.bytes(), &mut |e| entries.push(e))
                .expect("checked when parsed");
            let map = FeatureMap::from_entries(Schema::TensorFlow, raw, entries, true)
                .expect("checked when parsed");
            if self.had_features || !map.is_empty() {
                let body = map.to_bytes();
                put_len_header(out, 1, body.len());
                out.extend_from_slice(&body);
            }
            return;
        }
        if self.has_features() {
            let body = lock(self.features.as_ref().expect("present")).to_bytes();
            put_len_header(out, 1, body.len());
            out.extend_from_slice(&body);
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// Checks an Example as protobuf parses it: `(has a features field, its
/// layout)`. Every entry is checked, those a later duplicate key replaces too.
fn check_example(raw: &Slice) -> Result<(bool, Layout), Malformed> {
    if let Some(checked) = check_laid_out_example(raw)? {
        return Ok(checked);
    }
    let bytes = raw.bytes();
    let mut entries = Vec::new();
    let mut has_features = false;
    crate::example::for_each_example_entry(bytes, &mut |e| entries.push(e))?;
    for entry in &entries {
        entry.check_utf8_keys(FEATURE_NAME_NOT_UTF8)?;
    }
    let mut r = Reader::new(bytes);
    while let Some((n, v)) = r.field()? {
        has_features |= matches!((n, v), (1, Value::Len(_)));
    }
    dedup(entries, |e| {
        crate::example::check_feature_entry(e, Schema::TensorFlow)
    })?
    .iter()
    .try_for_each(|e| e.feature(Schema::TensorFlow)?.count().map(drop))?;
    Ok((has_features, Layout::General))
}

/// [`check_example`] in one pass and without allocating, for an Example laid
/// out as every writer lays it out (one `features` field, each entry `key,
/// value`); None for any other layout. Every entry is checked, whatever its
/// key (a repeated key's earlier entries too, as protobuf checks them).
fn check_laid_out_example(raw: &Slice) -> Result<Option<(bool, Layout)>, Malformed> {
    let bytes = raw.bytes();
    if bytes.is_empty() {
        return Ok(Some((false, Layout::Sorted { count: 0 })));
    }
    let mut failure: Option<Malformed> = None;
    let (mut count, mut sorted) = (0, true);
    let mut previous: &[u8] = &[];
    let laid_out = crate::example::for_each_canonical_entry(bytes, &mut |entry| {
        if failure.is_some() {
            return;
        }
        let checked = entry
            .check_utf8_keys(FEATURE_NAME_NOT_UTF8)
            .and_then(|()| entry.check_feature(Schema::TensorFlow));
        if let Err(m) = checked {
            failure = Some(m);
        }
        sorted &= count == 0 || map_key_order(previous, entry.key) == std::cmp::Ordering::Less;
        previous = entry.key;
        count += 1;
    });
    if !laid_out {
        return Ok(None);
    }
    if let Some(m) = failure {
        return Err(m);
    }
    Ok(Some((
        true,
        if sorted {
            Layout::Sorted { count }
        } else {
            Layout::General
        },
    )))
}

/// Whether a map's entries are laid out as protobuf's deterministic
/// serialization writes them: each `key, value` with shortest lengths, keys
/// strictly ascending, each Feature canonical.
fn canonical_entries(map: &[u8], schema: Schema) -> bool {
    let mut at = 0;
    let mut previous: Option<&[u8]> = None;
    while at < map.len() {
        let Some((entry, used)) = shortest_len_field(&map[at..], 0x0a) else {
            return false;
        };
        at += used;
        let Some((key, key_used)) = shortest_len_field(entry, 0x0a) else {
            return false;
        };
        let Some((value, value_used)) = shortest_len_field(&entry[key_used..], 0x12) else {
            return false;
        };
        if key_used + value_used != entry.len() || !canonical_feature(value, schema) {
            return false;
        }
        if previous.is_some_and(|p| map_key_order(p, key) != std::cmp::Ordering::Less) {
            return false;
        }
        previous = Some(key);
    }
    true
}

fn canonical_example(bytes: &[u8]) -> bool {
    if bytes.is_empty() {
        return true;
    }
    match shortest_len_field(bytes, 0x0a) {
        Some((map, used)) => used == bytes.len() && canonical_entries(map, Schema::TensorFlow),
        None => false,
    }
}

// --- OFRecord ------------------------------------------------------------------

/// Parses an OFRecord (a feature map of OneFlow's kinds at the top level).
pub fn parse_ofrecord(buf: Arc<[u8]>) -> Result<FeatureMap, Malformed> {
    let raw = Slice::whole(buf);
    let mut map = FeatureMap::parse(Schema::OneFlow, &raw)?;
    map.present = false;
    Ok(map)
}
