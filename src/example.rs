//! tf.train.Example / SequenceExample and OneFlow OFRecord messages on the wire.
//!
//! Decoding follows protobuf, not TensorFlow's fast parser, where they differ:
//! unknown fields are skipped at every level, the last entry of a repeated
//! map key wins, a Feature that sets two kinds keeps the last one (merging a
//! trailing run of the same kind, as protobuf merges repeated sub-messages),
//! and packed and unpacked runs of one list concatenate.
//!
//! Encoding is `encode`.

use std::collections::HashMap;

use crate::wire::{count_varints, read_varint, Malformed, Reader, Value};

/// What a Feature holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Bytes,
    Float,
    Double,
    Int32,
    Int64,
}

/// The three value types `tf.io.parse_*` knows, and OneFlow's two more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    Int64,
    Float32,
    Bytes,
    Float64,
    Int32,
}

impl DType {
    pub fn kind(self) -> Kind {
        match self {
            DType::Int64 => Kind::Int64,
            DType::Float32 => Kind::Float,
            DType::Bytes => Kind::Bytes,
            DType::Float64 => Kind::Double,
            DType::Int32 => Kind::Int32,
        }
    }
}

impl Kind {
    /// The list's name in the protos (`int64_list`, ...).
    pub fn list_name(self) -> &'static str {
        match self {
            Kind::Bytes => "bytes_list",
            Kind::Float => "float_list",
            Kind::Double => "double_list",
            Kind::Int32 => "int32_list",
            Kind::Int64 => "int64_list",
        }
    }
}

/// Which Feature message: TensorFlow's (3 kinds) or OneFlow's (5 kinds;
/// field 3 is `double_list` there but `int64_list` in TensorFlow).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schema {
    TensorFlow,
    OneFlow,
}

impl Schema {
    #[inline]
    pub fn kind(self, field: u32) -> Option<Kind> {
        match (self, field) {
            (_, 1) => Some(Kind::Bytes),
            (_, 2) => Some(Kind::Float),
            (Schema::TensorFlow, 3) => Some(Kind::Int64),
            (Schema::OneFlow, 3) => Some(Kind::Double),
            (Schema::OneFlow, 4) => Some(Kind::Int32),
            (Schema::OneFlow, 5) => Some(Kind::Int64),
            _ => None,
        }
    }

    pub fn field(self, kind: Kind) -> Option<u32> {
        match (self, kind) {
            (_, Kind::Bytes) => Some(1),
            (_, Kind::Float) => Some(2),
            (Schema::TensorFlow, Kind::Int64) => Some(3),
            (Schema::OneFlow, Kind::Double) => Some(3),
            (Schema::OneFlow, Kind::Int32) => Some(4),
            (Schema::OneFlow, Kind::Int64) => Some(5),
            (Schema::TensorFlow, _) => None,
        }
    }
}

// --- decoding --------------------------------------------------------------
//
// Every writer lays messages out the same way (`0a len` map entries holding
// `0a key 12 value`, one kind per Feature, one packed run per list). Each
// reader below takes that layout directly and hands the rest of a message to
// the generic field reader from the first byte that departs from it, so any
// valid protobuf encoding decodes the same, only slower.

/// Reads the LEN field with tag byte `tag` at `*pos`, if that is what is there.
#[inline(always)]
fn len_field_at<'a>(buf: &'a [u8], pos: &mut usize, tag: u8) -> Option<&'a [u8]> {
    let at = *pos;
    // Lengths under 128 (most keys, values and small entries) take one byte:
    // the tag and that byte are checked in one comparison of two bytes, and
    // the end cannot overflow (`at` is within a slice).
    let head = buf.get(at..at + 2)?;
    if u16::from_le_bytes([head[0], head[1]]) & 0x80ff == u16::from(tag) {
        let end = at + 2 + usize::from(head[1]);
        let payload = buf.get(at + 2..end)?;
        *pos = end;
        return Some(payload);
    }
    if head[0] != tag {
        return None;
    }
    let (len, used) = read_varint(&buf[at + 1..]).ok()?;
    let start = at + 1 + used;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    let payload = buf.get(start..end)?;
    *pos = end;
    Some(payload)
}

/// Calls `f` with the payload of every LEN field number 1 of `message`.
#[inline]
pub(crate) fn for_each_field_one<'a>(
    message: &'a [u8],
    f: &mut impl FnMut(&'a [u8]) -> Result<(), Malformed>,
) -> Result<(), Malformed> {
    let mut pos = 0;
    while pos < message.len() {
        match len_field_at(message, &mut pos, 0x0a) {
            Some(payload) => f(payload)?,
            None => {
                let mut r = Reader::new(&message[pos..]);
                while let Some((n, v)) = r.field()? {
                    if let (1, Value::Len(payload)) = (n, v) {
                        f(payload)?;
                    }
                }
                break;
            }
        }
    }
    Ok(())
}

/// A map entry: its key and where its value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    pub key: &'a [u8],
    /// The value message when the entry is laid out as `key, value`; None
    /// when it must be assembled from the whole entry (`raw`).
    value: Option<&'a [u8]>,
    raw: &'a [u8],
}

impl<'a> Entry<'a> {
    /// The entry when laid out as protobuf writes it: the key, then the value
    /// (or the key alone, an empty value); None for any other layout.
    #[inline(always)]
    fn canonical(raw: &'a [u8]) -> Option<Entry<'a>> {
        // The common layout first, in one step: `0a K key 12 V value`, both
        // lengths under 128 and filling the entry (4% fewer of the parse's
        // instructions than reading it field by field, tutorial records).
        if let &[0x0a, k, ..] = raw {
            let at = 2 + usize::from(k);
            if let Some(&[0x12, v]) = raw.get(at..at + 2) {
                if k < 0x80 && v < 0x80 && raw.len() == at + 2 + usize::from(v) {
                    return Some(Entry {
                        key: &raw[2..at],
                        value: Some(&raw[at + 2..]),
                        raw,
                    });
                }
            }
        }
        Entry::key_then_value(raw)
    }

    /// [`Entry::canonical`] read field by field, whatever the lengths.
    #[inline(always)]
    fn key_then_value(raw: &'a [u8]) -> Option<Entry<'a>> {
        let mut pos = 0;
        let key = len_field_at(raw, &mut pos, 0x0a)?;
        let value = if pos == raw.len() {
            &[]
        } else {
            len_field_at(raw, &mut pos, 0x12)?
        };
        (pos == raw.len()).then_some(Entry {
            key,
            value: Some(value),
            raw,
        })
    }

    fn parse(raw: &'a [u8]) -> Result<Entry<'a>, Malformed> {
        if let Some(entry) = Entry::canonical(raw) {
            return Ok(entry);
        }
        // Anything else: the last key wins, and every value field merges.
        let mut key: &[u8] = &[];
        let mut r = Reader::new(raw);
        while let Some((n, v)) = r.field()? {
            if let (1, Value::Len(k)) = (n, v) {
                key = k;
            }
        }
        Ok(Entry {
            key,
            value: None,
            raw,
        })
    }

    /// Checks every key field of the entry (protobuf checks each as it parses
    /// it, a replaced one too) is UTF-8, as a map of `string` keys requires;
    /// `what` names the failure.
    #[inline]
    pub fn check_utf8_keys(&self, what: &'static str) -> Result<(), Malformed> {
        // Laid out `key, value`: one key field, and nearly always ASCII.
        if self.value.is_some() && self.key.is_ascii() {
            return Ok(());
        }
        self.check_utf8_keys_in_full(what)
    }

    fn check_utf8_keys_in_full(&self, what: &'static str) -> Result<(), Malformed> {
        let utf8 = |key: &[u8]| key.is_ascii() || std::str::from_utf8(key).is_ok();
        if self.value.is_some() {
            return utf8(self.key).then_some(()).ok_or(Malformed(what));
        }
        let mut r = Reader::new(self.raw);
        while let Some((n, v)) = r.field()? {
            if let (1, Value::Len(key)) = (n, v) {
                if !utf8(key) {
                    return Err(Malformed(what));
                }
            }
        }
        Ok(())
    }

    /// The value message when the entry is laid out as `key, value` (None when
    /// it must be assembled from several value fields).
    pub fn value_message(&self) -> Option<&'a [u8]> {
        self.value
    }

    /// The value messages (normally exactly one). `raw` was validated by `parse`.
    fn values(&self) -> impl Iterator<Item = &'a [u8]> {
        let single = self.value;
        let mut r = Reader::new(if single.is_some() { &[] } else { self.raw });
        single.into_iter().chain(std::iter::from_fn(move || loop {
            match r.field() {
                Ok(Some((2, Value::Len(v)))) => return Some(v),
                Ok(Some(_)) => continue,
                _ => return None,
            }
        }))
    }

    /// The packed payload (for bytes: the list message) when this entry is laid
    /// out canonically as one `tag`-kind Feature holding one list; None otherwise.
    #[inline(always)]
    pub fn canonical_list(&self, tag: u8) -> Option<&'a [u8]> {
        let value = self.value?;
        // The common layout first, checked in one step: one list holding one
        // packed run (for bytes: one value) of under 128 bytes, `tag L 0a P`
        // with L = P + 2 (a length of 128 or more takes two bytes, the second
        // of them 1, not 0a). The general reader alone took 6% more of the
        // parse's instructions (callgrind, tutorial records); written out here,
        // not as a function of its own, whose build measured no faster.
        if let &[t, list, 0x0a, packed, ..] = value {
            if t == tag
                && packed < 0x80
                && list == packed + 2
                && value.len() == usize::from(packed) + 4
            {
                // A BytesList's fields are the values.
                return Some(if tag == 0x0a {
                    &value[2..]
                } else {
                    &value[4..]
                });
            }
        }
        list_in(value, tag)
    }

    /// [`check_feature_entry`], with the layout every writer uses (one list of
    /// one packed run of numbers) checked where it lies.
    #[inline]
    pub fn check_feature(&self, schema: Schema) -> Result<(), Malformed> {
        if let Some(&tag) = self.value.and_then(<[u8]>::first) {
            let kind = (tag & 7 == 2)
                .then(|| schema.kind(u32::from(tag >> 3)))
                .flatten();
            if let Some(packed) = kind
                .filter(|&k| k != Kind::Bytes)
                .and_then(|_| self.canonical_list(tag))
            {
                return match kind {
                    Some(Kind::Float) => packed_fixed(packed, 4).map(drop),
                    Some(Kind::Double) => packed_fixed(packed, 8).map(drop),
                    _ => count_varints(packed).map(drop),
                };
            }
        }
        check_feature_entry(self, schema)
    }

    /// The Feature this entry holds.
    pub fn feature(&self, schema: Schema) -> Result<Feature<'a>, Malformed> {
        match self.value {
            Some(value) => feature(value, schema),
            None => decode_feature(self.values(), schema),
        }
    }

    /// Calls `f(step)` for each Feature of the FeatureList this entry holds.
    pub fn for_each_step(
        &self,
        f: &mut impl FnMut(&'a [u8]) -> Result<(), Malformed>,
    ) -> Result<(), Malformed> {
        for list in self.values() {
            for_each_field_one(list, f)?;
        }
        Ok(())
    }
}

/// The packed payload of a Feature that is one `tag`-kind list, or for bytes
/// the list message itself; None for any other layout.
#[inline(always)]
fn list_in(feature: &[u8], tag: u8) -> Option<&[u8]> {
    let mut pos = 0;
    let list = len_field_at(feature, &mut pos, tag)?;
    if pos != feature.len() {
        return None;
    }
    if tag == 0x0a {
        return Some(list); // a BytesList: its fields are the values
    }
    if list.is_empty() {
        return Some(list);
    }
    let mut pos = 0;
    let packed = len_field_at(list, &mut pos, 0x0a)?;
    (pos == list.len()).then_some(packed)
}

/// Keeps the last entry of each key, in order of first appearance; each entry
/// a later one replaces goes to `replaced` first (to be checked: protobuf
/// parses every entry, so a malformed one is an error even when replaced).
pub fn dedup<'a>(
    entries: Vec<Entry<'a>>,
    mut replaced: impl FnMut(&Entry<'a>) -> Result<(), Malformed>,
) -> Result<Vec<Entry<'a>>, Malformed> {
    if entries.len() <= 16 {
        // A few keys: comparing them beats building a map for every record.
        let mut order: Vec<Entry<'a>> = Vec::with_capacity(entries.len());
        for entry in entries {
            match order.iter_mut().find(|e| e.key == entry.key) {
                Some(earlier) => {
                    replaced(earlier)?;
                    *earlier = entry;
                }
                None => order.push(entry),
            }
        }
        return Ok(order);
    }
    let mut order: Vec<Entry<'a>> = Vec::new();
    let mut seen: HashMap<&[u8], usize> = HashMap::new();
    for entry in entries {
        match seen.get(entry.key) {
            Some(&i) => {
                replaced(&order[i])?;
                order[i] = entry;
            }
            None => {
                seen.insert(entry.key, order.len());
                order.push(entry);
            }
        }
    }
    Ok(order)
}

/// Checks a feature map entry as protobuf parses it: its Feature and every
/// value of its lists (a truncated varint, a partial float), though no value
/// is kept. For an entry that a later entry of its key replaces.
pub fn check_feature_entry(entry: &Entry<'_>, schema: Schema) -> Result<(), Malformed> {
    entry.feature(schema)?.count().map(drop)
}

/// [`check_feature_entry`] for a `FeatureLists` entry: every step's Feature.
pub fn check_feature_list_entry(entry: &Entry<'_>) -> Result<(), Malformed> {
    entry.for_each_step(&mut |step| feature(step, Schema::TensorFlow)?.count().map(drop))
}

/// Calls `f(entry)` for each entry of a `map<string, ...>` message.
pub fn for_each_entry<'a>(map: &'a [u8], f: &mut impl FnMut(Entry<'a>)) -> Result<(), Malformed> {
    for_each_field_one(map, &mut |raw| {
        f(Entry::parse(raw)?);
        Ok(())
    })
}

/// Calls `f(entry)` for each feature of an Example laid out as protobuf
/// writes it (one `features` field spanning the record, every entry
/// [`Entry::canonical`]) and returns true; returns false where the layout differs,
/// possibly after some calls, and the caller starts over with
/// [`for_each_example_entry`], which reads every layout. One flat loop: the
/// general reader's nested callbacks cost twice the instructions.
#[inline(always)]
pub fn for_each_canonical_entry<'a>(example: &'a [u8], f: &mut impl FnMut(Entry<'a>)) -> bool {
    if example.is_empty() {
        return true;
    }
    let mut pos = 0;
    let Some(features) = len_field_at(example, &mut pos, 0x0a) else {
        return false;
    };
    if pos != example.len() {
        return false;
    }
    let mut at = 0;
    while at < features.len() {
        let Some(raw) = len_field_at(features, &mut at, 0x0a) else {
            return false;
        };
        let Some(entry) = Entry::canonical(raw) else {
            return false;
        };
        f(entry);
    }
    true
}

/// Calls `f(entry)` for each feature of an Example: the entries of every
/// `features` field, in order (protobuf merges repeated sub-messages).
pub fn for_each_example_entry<'a>(
    example: &'a [u8],
    f: &mut impl FnMut(Entry<'a>),
) -> Result<(), Malformed> {
    for_each_field_one(example, &mut |features| for_each_entry(features, f))
}

/// Calls `context(entry)` for each context feature and `lists(entry)` for
/// each feature list of a SequenceExample.
pub fn for_each_sequence_entry<'a>(
    sequence: &'a [u8],
    context: &mut impl FnMut(Entry<'a>),
    lists: &mut impl FnMut(Entry<'a>),
) -> Result<(), Malformed> {
    let mut r = Reader::new(sequence);
    while let Some((n, v)) = r.field()? {
        match (n, v) {
            (1, Value::Len(features)) => for_each_entry(features, context)?,
            (2, Value::Len(feature_lists)) => for_each_entry(feature_lists, lists)?,
            _ => {}
        }
    }
    Ok(())
}

/// The longest list [`Feature::value_in_place`] reads in place.
pub const IN_PLACE_BYTES: usize = 64;

/// One value of a list, read where it lies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar<'a> {
    Bytes(&'a [u8]),
    Float(f32),
    Double(f64),
    Int32(i32),
    Int64(i64),
}

/// A decoded Feature: its kind (None when no kind is set) and its list messages.
#[derive(Clone, Debug, PartialEq)]
pub struct Feature<'a> {
    pub kind: Option<Kind>,
    /// The list message; `more` holds the rare further ones to merge, so the
    /// common case allocates nothing.
    first: &'a [u8],
    more: Vec<&'a [u8]>,
}

/// Decodes one Feature message (for example a step of a FeatureList).
pub fn feature(message: &[u8], schema: Schema) -> Result<Feature<'_>, Malformed> {
    if let Some(&tag) = message.first() {
        if let Some(kind) = (tag & 7 == 2)
            .then(|| schema.kind(u32::from(tag >> 3)))
            .flatten()
        {
            let mut pos = 0;
            if let Some(list) = len_field_at(message, &mut pos, tag) {
                if pos == message.len() {
                    return Ok(Feature {
                        kind: Some(kind),
                        first: list,
                        more: Vec::new(),
                    });
                }
            }
        }
    }
    decode_feature(std::iter::once(message), schema)
}

/// A list message (`Int64List`, ...) read as the given kind.
pub fn list(message: &[u8], kind: Kind) -> Feature<'_> {
    Feature {
        kind: Some(kind),
        first: message,
        more: Vec::new(),
    }
}

fn decode_feature<'a>(
    chunks: impl Iterator<Item = &'a [u8]>,
    schema: Schema,
) -> Result<Feature<'a>, Malformed> {
    // The oneof keeps the last kind set; consecutive fields of that kind at the
    // end merge (their lists concatenate); earlier ones were cleared.
    let mut feature = Feature {
        kind: None,
        first: &[],
        more: Vec::new(),
    };
    for chunk in chunks {
        let mut r = Reader::new(chunk);
        while let Some((n, v)) = r.field()? {
            if let (Some(k), Value::Len(list)) = (schema.kind(n), v) {
                if feature.kind != Some(k) {
                    // The lists of the kind cleared are still checked, as protobuf
                    // parses every field before the oneof drops it.
                    feature.count()?;
                    feature.kind = Some(k);
                    feature.first = list;
                    feature.more.clear();
                } else {
                    feature.more.push(list);
                }
            }
        }
    }
    Ok(feature)
}

impl<'a> Feature<'a> {
    fn lists(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        std::iter::once(self.first).chain(self.more.iter().copied())
    }

    /// How many values the feature holds.
    pub fn count(&self) -> Result<usize, Malformed> {
        let Some(kind) = self.kind else { return Ok(0) };
        // The layout every writer uses (one packed run, or byte strings one
        // field each) read directly; any other through the general reader.
        if kind != Kind::Bytes {
            if let Some(packed) = self.single_packed() {
                return match kind {
                    Kind::Float => packed_fixed(packed, 4),
                    Kind::Double => packed_fixed(packed, 8),
                    _ => count_varints(packed),
                };
            }
        } else if self.more.is_empty() {
            let mut total = 0;
            let mut pos = 0;
            while pos < self.first.len() {
                if len_field_at(self.first, &mut pos, 0x0a).is_none() {
                    break; // another layout: the general reader decides
                }
                total += 1;
            }
            if pos == self.first.len() {
                return Ok(total);
            }
        }
        let mut total = 0;
        for list in self.lists() {
            let mut r = Reader::new(list);
            while let Some((n, v)) = r.field()? {
                if n != 1 {
                    continue;
                }
                total += match (kind, v) {
                    (Kind::Bytes, Value::Len(_)) => 1,
                    (Kind::Int64 | Kind::Int32, Value::Varint(_)) => 1,
                    (Kind::Int64 | Kind::Int32, Value::Len(p)) => count_varints(p)?,
                    (Kind::Float, Value::Fixed32(_)) | (Kind::Double, Value::Fixed64(_)) => 1,
                    (Kind::Float, Value::Len(p)) => packed_fixed(p, 4)?,
                    (Kind::Double, Value::Len(p)) => packed_fixed(p, 8)?,
                    _ => 0,
                };
            }
        }
        Ok(total)
    }

    fn each(&self, mut f: impl FnMut(Value<'a>) -> Result<(), Malformed>) -> Result<(), Malformed> {
        if self.kind.is_none() {
            return Ok(());
        }
        for list in self.lists() {
            let mut r = Reader::new(list);
            while let Some((n, v)) = r.field()? {
                if n == 1 {
                    f(v)?;
                }
            }
        }
        Ok(())
    }

    pub fn int64s(&self, out: &mut Vec<i64>) -> Result<(), Malformed> {
        self.varints(|v| out.push(v as i64))
    }

    pub fn int32s(&self, out: &mut Vec<i32>) -> Result<(), Malformed> {
        // int32 is a varint of the sign-extended value; protobuf truncates.
        self.varints(|v| out.push(v as i32))
    }

    /// The packed payload when the feature is one list holding one packed run.
    #[inline]
    fn single_packed(&self) -> Option<&'a [u8]> {
        if !self.more.is_empty() || self.kind.is_none() {
            return None;
        }
        let mut pos = 0;
        let payload = len_field_at(self.first, &mut pos, 0x0a)?;
        (pos == self.first.len()).then_some(payload)
    }

    /// `(the number of values, value i)` read where the values lie, for a short
    /// list (at most [`IN_PLACE_BYTES`] bytes) laid out as every writer lays it
    /// out: one packed run, or byte strings one field each. None for any other:
    /// decode it then, once, rather than walk a long list at every index.
    pub fn value_in_place(&self, i: usize) -> Option<(usize, Option<Scalar<'a>>)> {
        let kind = self.kind?;
        if kind == Kind::Bytes {
            if !self.more.is_empty() || self.first.len() > IN_PLACE_BYTES {
                return None;
            }
            let (mut count, mut found) = (0, None);
            for_each_field_one(self.first, &mut |b| {
                if count == i {
                    found = Some(Scalar::Bytes(b));
                }
                count += 1;
                Ok(())
            })
            .ok()?;
            return Some((count, found));
        }
        let packed = self.single_packed()?;
        if packed.len() > IN_PLACE_BYTES {
            return None;
        }
        let fixed = |width: usize| {
            let count = packed_fixed(packed, width).ok()?;
            Some((count, packed.get(i * width..(i + 1) * width)))
        };
        Some(match kind {
            Kind::Float => {
                let (count, v) = fixed(4)?;
                (
                    count,
                    v.map(|v| Scalar::Float(f32::from_le_bytes(v.try_into().expect("4 bytes")))),
                )
            }
            Kind::Double => {
                let (count, v) = fixed(8)?;
                (
                    count,
                    v.map(|v| Scalar::Double(f64::from_le_bytes(v.try_into().expect("8 bytes")))),
                )
            }
            _ => {
                let (mut count, mut found) = (0, None);
                self.varints(|v| {
                    if count == i {
                        found = Some(match kind {
                            Kind::Int32 => Scalar::Int32(v as i32),
                            _ => Scalar::Int64(v as i64),
                        });
                    }
                    count += 1;
                })
                .ok()?;
                (count, found)
            }
        })
    }

    fn varints(&self, mut push: impl FnMut(u64)) -> Result<(), Malformed> {
        if let Some(mut p) = self.single_packed() {
            while let Some(&b) = p.first() {
                if b < 0x80 {
                    push(u64::from(b));
                    p = &p[1..];
                } else {
                    let (x, used) = read_varint(p)?;
                    push(x);
                    p = &p[used..];
                }
            }
            return Ok(());
        }
        self.each(|v| {
            match v {
                Value::Varint(x) => push(x),
                Value::Len(mut p) => {
                    while !p.is_empty() {
                        let (x, used) = read_varint(p)?;
                        push(x);
                        p = &p[used..];
                    }
                }
                _ => {}
            }
            Ok(())
        })
    }

    pub fn floats(&self, out: &mut Vec<f32>) -> Result<(), Malformed> {
        if let Some(p) = self.single_packed() {
            packed_fixed(p, 4)?;
            out.extend(
                p.chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap())),
            );
            return Ok(());
        }
        self.each(|v| {
            match v {
                Value::Fixed32(x) => out.push(f32::from_bits(x)),
                Value::Len(p) => {
                    packed_fixed(p, 4)?;
                    out.extend(
                        p.chunks_exact(4)
                            .map(|c| f32::from_le_bytes(c.try_into().unwrap())),
                    );
                }
                _ => {}
            }
            Ok(())
        })
    }

    pub fn doubles(&self, out: &mut Vec<f64>) -> Result<(), Malformed> {
        self.each(|v| {
            match v {
                Value::Fixed64(x) => out.push(f64::from_bits(x)),
                Value::Len(p) => {
                    packed_fixed(p, 8)?;
                    out.extend(
                        p.chunks_exact(8)
                            .map(|c| f64::from_le_bytes(c.try_into().unwrap())),
                    );
                }
                _ => {}
            }
            Ok(())
        })
    }

    pub fn bytes(&self, out: &mut Vec<&'a [u8]>) -> Result<(), Malformed> {
        if self.more.is_empty() && self.kind.is_some() {
            return for_each_field_one(self.first, &mut |b| {
                out.push(b);
                Ok(())
            });
        }
        self.each(|v| {
            if let Value::Len(b) = v {
                out.push(b);
            }
            Ok(())
        })
    }
}

fn packed_fixed(payload: &[u8], width: usize) -> Result<usize, Malformed> {
    if !payload.len().is_multiple_of(width) {
        return Err(Malformed("packed fixed-width list with a partial value"));
    }
    Ok(payload.len() / width)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::*;

    /// A LEN field: its tag and length, then `payload`.
    fn field(tag: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        crate::wire::put_len_header(&mut out, tag, payload.len());
        out.extend_from_slice(payload);
        out
    }

    /// `Entry::canonical`, which reads the common layout in one step, agrees
    /// with reading it field by field: keys and values of lengths around the
    /// one-byte limit, an entry of a key alone or a value alone, fields in
    /// the other order, trailing and missing bytes, lengths that lie.
    #[test]
    fn canonical_entries_agree_with_reading_field_by_field() {
        let mut entries: Vec<Vec<u8>> = Vec::new();
        for k in [0, 1, 8, 125, 126, 127, 128, 200] {
            let key: Vec<u8> = (0..k).map(|i| b'a' + (i % 26) as u8).collect();
            for v in [0, 1, 4, 125, 126, 127, 128, 300] {
                let value = vec![0x0a; v];
                let entry = [field(1, &key), field(2, &value)].concat();
                entries.push(entry.clone());
                entries.push([entry.as_slice(), b"\x00"].concat());
                entries.push(entry[..entry.len() - 1].to_vec());
                entries.push([field(2, &value), field(1, &key)].concat());
                entries.push(field(2, &value));
                // Other field numbers in the key's or the value's place.
                entries.push([field(3, &key), field(2, &value)].concat());
                entries.push([field(1, &key), field(3, &value)].concat());
                for wrong in [0x7f, 1] {
                    // The key's or the value's length one less or one more than its bytes.
                    let mut lying = entry.clone();
                    lying[1] = lying[1].wrapping_add(wrong) & 0x7f;
                    entries.push(lying);
                    let mut lying = entry.clone();
                    let at = 2 + usize::from(entry[1]);
                    if at + 1 < entry.len() {
                        lying[at + 1] = lying[at + 1].wrapping_add(wrong) & 0x7f;
                    }
                    entries.push(lying);
                }
            }
            entries.push(field(1, &key));
        }
        // A key of 128 bytes, its length in two bytes (80 01). Read as a one-byte
        // length, 0x80 would put a 12 tag where the key's bytes hold one, and a
        // value after it that is not there.
        entries.push(
            [
                &[0x0a, 0x80, 0x01][..],
                &[b'k'; 127],
                &[0x12, 0x12, 17],
                &[0x0a; 17],
            ]
            .concat(),
        );
        for raw in &entries {
            assert_eq!(Entry::canonical(raw), Entry::key_then_value(raw), "{raw:?}");
        }
    }

    /// `canonical_list`, which reads the common layout in one step, agrees
    /// with the general reader alone: lengths around the one-byte limit, empty
    /// lists and values, two lists, two values, trailing bytes, truncation,
    /// lengths that lie.
    #[test]
    fn canonical_list_agrees_with_the_general_reader() {
        let mut features: Vec<Vec<u8>> = Vec::new();
        for n in (0..140).chain([200, 300]) {
            let payload: Vec<u8> = (0..n).map(|i| i as u8 & 0x7f).collect();
            for tag in [2, 3] {
                features.push(field(tag, &field(1, &payload)));
                let two_runs = [field(1, &payload), field(1, b"\x01")].concat();
                features.push(field(tag, &two_runs));
            }
            features.push(field(1, &field(1, &payload))); // one byte string
            features.push(field(3, &field(2, &payload))); // another field number inside the list
            let two_values = [field(1, &payload), field(1, b"x")].concat();
            features.push(field(1, &two_values));
            let one_list = field(3, &field(1, &payload));
            features.push([one_list.as_slice(), b"\x00"].concat());
            features.push(one_list[..one_list.len() - 1].to_vec());
            for wrong in [0x7f, 1] {
                // The list's length one less or one more than its bytes.
                let mut lying = one_list.clone();
                lying[1] = lying[1].wrapping_add(wrong) & 0x7f;
                features.push(lying);
            }
        }
        // An empty list: no packed run.
        features.push(field(3, b""));
        // Two-byte lengths whose bytes read as the common layout's: the list's
        // 2 + 10 x 128 bytes and the run's 128 + ... are not there.
        features.push([&[0x1a, 0x82, 0x0a, 0x80][..], &[1; 128]].concat());
        for feature in &features {
            let entry = Entry {
                key: b"k",
                value: Some(feature),
                raw: &[],
            };
            for tag in [0x0a, 0x12, 0x1a] {
                assert_eq!(
                    entry.canonical_list(tag),
                    list_in(feature, tag),
                    "{feature:?} as {tag:#x}"
                );
            }
        }
    }

    fn example(entries: &[(&[u8], Option<Values<'_>>)]) -> Vec<u8> {
        let mut out = Vec::new();
        put_example(&mut out, entries).unwrap();
        out
    }

    fn decode(bytes: &[u8]) -> Vec<(Vec<u8>, Option<Kind>, Vec<i64>)> {
        let mut out = Vec::new();
        for_each_example_entry(bytes, &mut |e| {
            let f = e.feature(Schema::TensorFlow).unwrap();
            let mut v = Vec::new();
            if f.kind == Some(Kind::Int64) {
                f.int64s(&mut v).unwrap();
            }
            out.push((e.key.to_vec(), f.kind, v));
        })
        .unwrap();
        out
    }

    #[test]
    fn matches_protobuf_bytes() {
        // Int64List holding -1: 0a0a ffffffffffffffffff01 (from TensorFlow's notes).
        let mut list = Vec::new();
        Values::Int64(&[-1]).put_list(&mut list);
        assert_eq!(
            list,
            [0x0a, 0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
        // Feature(float_list=[e]) = 12 06 0a 04 54f82d40.
        let mut f = Vec::new();
        Values::Float(&[std::f32::consts::E])
            .put_feature(&mut f, Schema::TensorFlow)
            .unwrap();
        assert_eq!(f, [0x12, 0x06, 0x0a, 0x04, 0x54, 0xf8, 0x2d, 0x40]);
        // Feature(int64_list=Int64List()) = 1a 00.
        let mut f = Vec::new();
        Values::Int64(&[])
            .put_feature(&mut f, Schema::TensorFlow)
            .unwrap();
        assert_eq!(f, [0x1a, 0x00]);
    }

    #[test]
    fn round_trips() {
        let bytes = example(&[(b"a", Some(Values::Int64(&[1, -2, 300]))), (b"b", None)]);
        assert_eq!(
            decode(&bytes),
            vec![
                (b"a".to_vec(), Some(Kind::Int64), vec![1, -2, 300]),
                (b"b".to_vec(), None, vec![])
            ]
        );
    }

    #[test]
    fn runs_concatenate_and_last_kind_wins() {
        // int64_list with a packed run, an unpacked value and another packed run.
        let list = [0x0a, 0x02, 0x01, 0x02, 0x08, 0x03, 0x0a, 0x01, 0x04];
        let mut feature = vec![0x1a, list.len() as u8];
        feature.extend(list);
        let f = super::feature(&feature, Schema::TensorFlow).unwrap();
        let mut v = Vec::new();
        f.int64s(&mut v).unwrap();
        assert_eq!((f.count().unwrap(), v), (4, vec![1, 2, 3, 4]));
        // bytes_list, then int64_list [7]: the int64 list wins.
        let two = [0x0a, 0x03, 0x0a, 0x01, b'x', 0x1a, 0x03, 0x0a, 0x01, 0x07];
        let f = super::feature(&two, Schema::TensorFlow).unwrap();
        assert_eq!(f.kind, Some(Kind::Int64));
        // int64 [1], bytes [x], int64 [7]: only the last run counts.
        let three = [
            0x1a, 0x03, 0x0a, 0x01, 0x01, 0x0a, 0x03, 0x0a, 0x01, b'x', 0x1a, 0x03, 0x0a, 0x01,
            0x07,
        ];
        let mut v = Vec::new();
        super::feature(&three, Schema::TensorFlow)
            .unwrap()
            .int64s(&mut v)
            .unwrap();
        assert_eq!(v, vec![7]);
    }

    #[test]
    fn last_duplicate_key_wins_and_unknown_fields_are_skipped() {
        let mut bytes = example(&[(b"k", Some(Values::Int64(&[1])))]);
        bytes.extend([0x10, 0x05]); // unknown varint field 2 at the top level
        bytes.extend(example(&[(b"k", Some(Values::Int64(&[2])))]));
        let decoded = decode(&bytes);
        assert_eq!(decoded.last().unwrap().2, vec![2]);
    }

    #[test]
    fn keys_sort_as_upb_does() {
        let mut keys: Vec<&[u8]> = vec![b"b", b"a", b"", b"ab", b"_", b"__", b"B"];
        keys.sort_by(|a, b| map_key_order(a, b));
        assert_eq!(keys, vec![&b"B"[..], b"__", b"_", b"ab", b"a", b"b", b""]);
        // As the rule reads: byte-wise, past the end of a key counting as above any byte.
        let spelled_out = |a: &[u8], b: &[u8]| {
            let end = std::iter::once(256u16);
            a.iter()
                .map(|&x| u16::from(x))
                .chain(end.clone())
                .cmp(b.iter().map(|&x| u16::from(x)).chain(end))
        };
        let alphabet: [&[u8]; 6] = [b"", b"a", b"b", b"\xff", b"\x00", b"ab"];
        for x in alphabet {
            for y in alphabet {
                for z in alphabet {
                    let (a, b) = ([x, y].concat(), [x, z].concat());
                    assert_eq!(map_key_order(&a, &b), spelled_out(&a, &b), "{a:?} {b:?}");
                }
            }
        }
    }

    #[test]
    fn packed_floats_must_be_whole() {
        let f = [0x12, 0x05, 0x0a, 0x03, 0, 0, 0];
        let feature = super::feature(&f, Schema::TensorFlow).unwrap();
        assert!(feature.floats(&mut Vec::new()).is_err());
    }
}
