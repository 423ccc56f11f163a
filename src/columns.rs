//! Columns: a batch of serialized Examples (or SequenceExamples) and the
//! features asked for in; per feature, one flat buffer of values and the
//! number of values each record holds out. Python turns these into
//! TensorFlow's dense, sparse and ragged outputs with a few array operations.

use std::collections::HashMap;

use crate::example::{
    check_feature_entry, check_feature_list_entry, feature, for_each_canonical_entry,
    for_each_entry, for_each_example_entry, for_each_sequence_entry, Entry, Feature, Kind, Schema,
};
use crate::wire::Malformed;

pub use crate::error::ParseFailure;
pub use crate::example::DType;

/// One feature to extract. Keys are unique within a request list.
#[derive(Clone, Debug)]
pub struct Request {
    pub key: Vec<u8>,
    pub dtype: DType,
}

/// How a parse keeps byte strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strings {
    /// As slices of the records: for Python's `bytes` objects, offsets into
    /// a mapping, or a copy into Arrow's layout after the parse.
    Slices,
    /// Copied into Arrow's layout as each record is parsed, while it is in
    /// the caches, rather than read again from the records afterwards.
    Flat,
}

/// What follows each record's payload in the slices handed to the parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Footers {
    /// Nothing: each slice is a payload.
    None,
    /// Its TFRecord footer, the masked CRC of the payload, which framing left
    /// for the parser to check while the record is in cache (see
    /// `Scanner::leave_crcs_to_parser`): a payload that fails it is a
    /// `ParseFailure::Corrupt`.
    Crc,
}

impl Footers {
    /// The bytes each slice holds after its payload.
    pub fn bytes(self) -> usize {
        match self {
            Footers::None => 0,
            Footers::Crc => 4,
        }
    }
}

/// Average payload bytes per record from which byte strings meant for
/// Arrow's layout are copied after the parse (as slices first), not during
/// it: large values are copied then on every core, into memory backed by
/// huge pages (see `FlatBytes::new`). Below it, copying during the parse
/// saves reading every value again: 1 M of the tutorial's records on one
/// thread, the `feature2` column took 7.0-7.4 ms (by difference with a read
/// that builds no values) as slices flattened afterwards, 3.3 ms copied
/// during the parse.
const FLAT_PARSE_BELOW: usize = 4096;

impl Strings {
    /// How to parse `records` whose byte strings go to Arrow's layout.
    pub fn flat_for(records: &[&[u8]]) -> Strings {
        let bytes: usize = records.iter().map(|r| r.len()).sum();
        if bytes < FLAT_PARSE_BELOW * records.len().max(1) {
            Strings::Flat
        } else {
            Strings::Slices
        }
    }
}

/// The value of a `BytesList` holding one value of under 128 bytes (a
/// scalar string feature, the common case), laid out as protobuf writes it.
/// Taken before the loop over the list's values: on one thread, 1 M of the
/// tutorial's one-word `feature2` were copied into Arrow's layout in 3.7 ms
/// through the loop and in 2.0 ms so (by difference with a read that builds
/// no values).
#[inline(always)]
fn single_short_value(list: &[u8]) -> Option<&[u8]> {
    match list {
        &[0x0a, len, ref value @ ..] if len < 0x80 && usize::from(len) == value.len() => {
            Some(value)
        }
        _ => None,
    }
}

/// Flat values of one feature over a batch.
#[derive(Debug, PartialEq)]
pub enum Buffer<'a> {
    Int64(Vec<i64>),
    Float32(Vec<f32>),
    Bytes(Vec<&'a [u8]>),
    /// Byte strings copied into Arrow's layout while parsed (`Strings::Flat`).
    Flat(FlatBuilder),
    Float64(Vec<f64>),
    Int32(Vec<i32>),
}

impl<'a> Buffer<'a> {
    /// Appends another buffer of the same type (a later run of records).
    fn extend(&mut self, more: Buffer<'a>) {
        match (self, more) {
            (Buffer::Int64(a), Buffer::Int64(b)) => a.extend(b),
            (Buffer::Float32(a), Buffer::Float32(b)) => a.extend(b),
            (Buffer::Bytes(a), Buffer::Bytes(b)) => a.extend(b),
            (Buffer::Flat(a), Buffer::Flat(b)) => a.append(b),
            (Buffer::Float64(a), Buffer::Float64(b)) => a.extend(b),
            (Buffer::Int32(a), Buffer::Int32(b)) => a.extend(b),
            _ => unreachable!("columns of one request share a type"),
        }
    }

    fn reserve(&mut self, more: usize) {
        match self {
            Buffer::Int64(v) => v.reserve(more),
            Buffer::Float32(v) => v.reserve(more),
            Buffer::Bytes(v) => v.reserve(more),
            Buffer::Flat(v) => v.0.offsets.reserve(more),
            Buffer::Float64(v) => v.reserve(more),
            Buffer::Int32(v) => v.reserve(more),
        }
    }

    /// Appends the values of `entry` where it is a canonically laid out
    /// TensorFlow Feature of this buffer's kind (see `Entry::canonical_list`),
    /// the common case, without the general decoder; returns how many, or
    /// None where the entry needs the general decoder (and for OneFlow's
    /// kinds, which have no canonical layout here). One dispatch on the
    /// buffer's type per entry: the parse's inner loop runs once per feature
    /// of every record.
    #[inline(always)]
    fn append_canonical(
        &mut self,
        entry: &Entry<'a>,
        record: &'a [u8],
    ) -> Option<Result<i64, Malformed>> {
        Some(match self {
            Buffer::Int64(v) => {
                let payload = entry.canonical_list(0x1a)?;
                grow(v, |v| {
                    let mut p = payload;
                    while let Some(&b) = p.first() {
                        if b < 0x80 {
                            v.push(i64::from(b));
                            p = &p[1..];
                        } else {
                            let (x, used) = crate::wire::read_varint(p)?;
                            v.push(x as i64);
                            p = &p[used..];
                        }
                    }
                    Ok(())
                })
                .map(|n| n as i64)
            }
            Buffer::Float32(v) => {
                let payload = entry.canonical_list(0x12)?;
                if payload.len() % 4 != 0 {
                    return Some(Err(Malformed(
                        "packed fixed-width list with a partial value",
                    )));
                }
                let values = payload.chunks_exact(4);
                v.extend(values.map(|c| f32::from_le_bytes(c.try_into().unwrap())));
                Ok((payload.len() / 4) as i64)
            }
            Buffer::Bytes(v) => {
                let payload = entry.canonical_list(0x0a)?;
                if let Some(value) = single_short_value(payload) {
                    v.push(value);
                    return Some(Ok(1));
                }
                grow(v, |v| {
                    crate::example::for_each_field_one(payload, &mut |b| {
                        v.push(b);
                        Ok(())
                    })
                })
                .map(|n| n as i64)
            }
            Buffer::Flat(v) => {
                let payload = entry.canonical_list(0x0a)?;
                if let Some(value) = single_short_value(payload) {
                    v.push(value, record);
                    return Some(Ok(1));
                }
                let before = v.len();
                crate::example::for_each_field_one(payload, &mut |b| {
                    v.push(b, record);
                    Ok(())
                })
                .map(|()| (v.len() - before) as i64)
            }
            Buffer::Float64(_) | Buffer::Int32(_) => return None,
        })
    }

    fn len(&self) -> usize {
        match self {
            Buffer::Int64(v) => v.len(),
            Buffer::Float32(v) => v.len(),
            Buffer::Bytes(v) => v.len(),
            Buffer::Flat(v) => v.len(),
            Buffer::Float64(v) => v.len(),
            Buffer::Int32(v) => v.len(),
        }
    }

    fn new(dtype: DType) -> Self {
        Buffer::with_capacity(dtype, 0, Strings::Slices)
    }

    /// Room for `n` values before the first reallocation.
    fn with_capacity(dtype: DType, n: usize, strings: Strings) -> Self {
        match dtype {
            DType::Int64 => Buffer::Int64(Vec::with_capacity(n)),
            DType::Float32 => Buffer::Float32(Vec::with_capacity(n)),
            DType::Bytes if strings == Strings::Flat => Buffer::Flat(FlatBuilder::with_capacity(n)),
            DType::Bytes => Buffer::Bytes(Vec::with_capacity(n)),
            DType::Float64 => Buffer::Float64(Vec::with_capacity(n)),
            DType::Int32 => Buffer::Int32(Vec::with_capacity(n)),
        }
    }

    /// Appends a feature's values; returns how many, or the kind it really is.
    fn append(&mut self, f: &Feature<'a>) -> Result<Result<i64, Kind>, Malformed> {
        let actual = f.kind.expect("callers handle features without a kind");
        let added = match (self, actual) {
            (Buffer::Int64(v), Kind::Int64) => grow(v, |v| f.int64s(v))?,
            (Buffer::Float32(v), Kind::Float) => grow(v, |v| f.floats(v))?,
            (Buffer::Bytes(v), Kind::Bytes) => grow(v, |v| f.bytes(v))?,
            (Buffer::Flat(v), Kind::Bytes) => {
                // Not laid out canonically: rare, so through slices.
                let mut values = Vec::new();
                f.bytes(&mut values)?;
                values.iter().for_each(|b| v.push(b, b));
                values.len()
            }
            (Buffer::Float64(v), Kind::Double) => grow(v, |v| f.doubles(v))?,
            (Buffer::Int32(v), Kind::Int32) => grow(v, |v| f.int32s(v))?,
            _ => return Ok(Err(actual)),
        };
        Ok(Ok(added as i64))
    }
}

fn grow<T>(
    v: &mut Vec<T>,
    fill: impl FnOnce(&mut Vec<T>) -> Result<(), Malformed>,
) -> Result<usize, Malformed> {
    let before = v.len();
    fill(v)?;
    Ok(v.len() - before)
}

/// Per record of a batch, how many values it holds of a feature (-1: none,
/// it lacks the feature). Kept as one number while every record holds the
/// same count, the common case of a dense feature: neither the parse nor the
/// join of runs then writes a number per record (a quarter of the bytes a
/// batch of the tutorial's records parses into, and half of what a join copies).
#[derive(Clone, Debug)]
pub struct Counts {
    records: usize,
    /// The count of every record, or `WRITTEN_OUT` where there are none yet
    /// or they differ (then `varied` holds them): one comparison per record
    /// in the common case.
    same: i64,
    /// Every record's count, once one differs from the first's.
    varied: Vec<i64>,
}

/// `Counts::same` where there is no one count: no record holds fewer than -1 values.
const WRITTEN_OUT: i64 = i64::MIN;

impl Counts {
    pub fn new() -> Self {
        Counts {
            records: 0,
            same: WRITTEN_OUT,
            varied: Vec::new(),
        }
    }

    #[inline(always)]
    pub fn push(&mut self, count: i64) {
        if count == self.same {
            self.records += 1;
        } else {
            self.push_other(count);
        }
    }

    /// The first count, or one that differs from the one before.
    #[inline(never)]
    fn push_other(&mut self, count: i64) {
        if self.records == 0 {
            self.same = count;
        } else {
            self.vary();
            self.varied.push(count);
        }
        self.records += 1;
    }

    /// Writes out the counts one per record, where they are still one number.
    fn vary(&mut self) {
        if self.same != WRITTEN_OUT {
            self.varied = vec![self.same; self.records];
            self.same = WRITTEN_OUT;
        }
    }

    pub fn len(&self) -> usize {
        self.records
    }

    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// The count every record holds, where there are records and they all hold the same.
    pub fn same(&self) -> Option<i64> {
        (self.same != WRITTEN_OUT).then_some(self.same)
    }

    /// Room for the counts of `later` runs, taken before they are appended
    /// where they will not all be one number, so that each is copied once.
    fn reserve<'b>(&mut self, later: impl Iterator<Item = &'b Counts> + Clone) {
        let pieces = std::iter::once((self.records, self.same()));
        let mut sames = (pieces.chain(later.clone().map(|c| (c.len(), c.same()))))
            .filter(|&(records, _)| records > 0)
            .map(|(_, same)| same);
        let first = sames.next().flatten();
        if first.is_none() || sames.any(|same| same != first) {
            self.vary();
            self.varied.reserve(later.map(Counts::len).sum());
        }
    }

    /// Appends the counts of `later` records.
    pub fn extend(&mut self, later: Counts) {
        match later.same() {
            None if later.records == 0 => {}
            Some(count) if self.same() == Some(count) || self.is_empty() => {
                self.same = count;
                self.records += later.records;
            }
            _ => {
                self.vary();
                match later.same() {
                    Some(count) => self.varied.resize(self.varied.len() + later.records, count),
                    None => self.varied.extend_from_slice(&later.varied),
                }
                self.records += later.records;
            }
        }
    }

    /// The count of each record.
    pub fn to_vec(&self) -> Vec<i64> {
        match self.same() {
            Some(count) => vec![count; self.records],
            None => self.varied.clone(),
        }
    }

    /// The counts as they are kept: one number, or one per record.
    pub fn into_kept(self) -> KeptCounts {
        match self.same() {
            Some(count) => KeptCounts::Same {
                count,
                records: self.records,
            },
            None => KeptCounts::Varied(self.varied),
        }
    }
}

/// [`Counts`] taken apart: the count every record holds, or each record's.
pub enum KeptCounts {
    Same { count: i64, records: usize },
    Varied(Vec<i64>),
}

impl Default for Counts {
    fn default() -> Self {
        Counts::new()
    }
}

impl From<Vec<i64>> for Counts {
    fn from(counts: Vec<i64>) -> Self {
        let mut out = Counts::new();
        counts.into_iter().for_each(|n| out.push(n));
        out
    }
}

impl PartialEq for Counts {
    fn eq(&self, other: &Counts) -> bool {
        self.records == other.records && self.to_vec() == other.to_vec()
    }
}

/// A feature of a batch: values, and per record the count (-1: missing).
#[derive(Debug, PartialEq)]
pub struct Column<'a> {
    pub values: Buffer<'a>,
    pub counts: Counts,
}

impl<'a> Column<'a> {
    /// The column owning its values, byte strings flattened into Arrow's layout.
    pub fn owned(self) -> OwnedColumn {
        let values = match self.values {
            Buffer::Bytes(v) => OwnedValues::Bytes(FlatBytes::new(&v)),
            Buffer::Flat(v) => OwnedValues::Bytes(v.finish()),
            Buffer::Int64(v) => OwnedValues::Numbers(Buffer::Int64(v)),
            Buffer::Float32(v) => OwnedValues::Numbers(Buffer::Float32(v)),
            Buffer::Float64(v) => OwnedValues::Numbers(Buffer::Float64(v)),
            Buffer::Int32(v) => OwnedValues::Numbers(Buffer::Int32(v)),
        };
        OwnedColumn {
            values,
            counts: self.counts,
        }
    }
}

/// Columns owning their values (see [`Column::owned`]).
pub fn owned_columns(columns: Vec<Column<'_>>) -> Vec<OwnedColumn> {
    columns.into_iter().map(Column::owned).collect()
}

/// Columns parsed from `mapping` (a mapped file, which outlives them), their
/// byte strings left there as `(offset, length)` pairs rather than copied,
/// and those that repeat found (see [`crate::interned`]).
pub fn columns_in_mapping(columns: Vec<Column<'_>>, mapping: &[u8]) -> Vec<OwnedColumn> {
    columns
        .into_iter()
        .map(|column| match column.values {
            Buffer::Bytes(values) => OwnedColumn {
                values: OwnedValues::InMapping(InMapping::new(&values, mapping)),
                counts: column.counts,
            },
            _ => column.owned(),
        })
        .collect()
}

/// Byte strings left in a mapped file: the `(offset, length)` of each value,
/// or, with `codes`, of each distinct value, `codes` naming each value's.
#[derive(Debug, PartialEq)]
pub struct InMapping {
    pub spans: Vec<(usize, usize)>,
    pub codes: Option<Vec<u32>>,
}

impl InMapping {
    /// `values`, slices of `mapping`.
    fn new(values: &[&[u8]], mapping: &[u8]) -> Self {
        let base = mapping.as_ptr() as usize;
        let span = |v: &[u8]| {
            let at = (v.as_ptr() as usize).wrapping_sub(base);
            debug_assert!(at <= mapping.len() - v.len(), "a value outside its mapping");
            (at, v.len())
        };
        match crate::interned::intern(values, mapping) {
            Some(interned) => InMapping {
                spans: interned
                    .firsts
                    .iter()
                    .map(|&i| span(values[i as usize]))
                    .collect(),
                codes: Some(interned.codes),
            },
            None => InMapping {
                spans: values.iter().map(|v| span(v)).collect(),
                codes: None,
            },
        }
    }

    fn len(&self) -> usize {
        self.codes.as_ref().map_or(self.spans.len(), Vec::len)
    }

    /// The span of every value, in order.
    pub fn per_value(self) -> Vec<(usize, usize)> {
        match self.codes {
            Some(codes) => codes.iter().map(|&c| self.spans[c as usize]).collect(),
            None => self.spans,
        }
    }

    /// Appends the values of `later` (a batch's later run): its codes name
    /// its own spans, which follow these.
    fn append(&mut self, later: InMapping) {
        let shift = self.spans.len();
        let fits = shift + later.spans.len() <= u32::MAX as usize;
        match (&mut self.codes, later.codes) {
            (Some(codes), Some(more)) if fits => {
                codes.extend(more.iter().map(|&c| c + shift as u32));
                self.spans.extend(later.spans);
            }
            (_, more) => {
                let this = std::mem::replace(
                    self,
                    InMapping {
                        spans: Vec::new(),
                        codes: None,
                    },
                );
                let later = InMapping {
                    spans: later.spans,
                    codes: more,
                };
                let mut spans = this.per_value();
                spans.extend(later.per_value());
                self.spans = spans;
            }
        }
    }
}

/// Byte strings as Arrow lays them out: one data buffer and `n + 1` offsets
/// into it.
#[derive(Debug, PartialEq)]
pub struct FlatBytes {
    pub offsets: Vec<i64>,
    pub data: Vec<u8>,
}

impl FlatBytes {
    pub fn new(values: &[&[u8]]) -> Self {
        let mut offsets = Vec::with_capacity(values.len() + 1);
        let mut end = 0;
        offsets.push(end);
        for v in values {
            end += v.len() as i64;
            offsets.push(end);
        }
        let mut data = crate::threads::zeroed(end as usize);
        crate::threads::copy_end_to_end(values, &mut data);
        FlatBytes { offsets, data }
    }

    /// Appends the values of `later`.
    fn append(&mut self, later: FlatBytes) {
        let shift = self.data.len() as i64;
        self.offsets
            .extend(later.offsets[1..].iter().map(|&end| end + shift));
        self.data.extend_from_slice(&later.data);
    }
}

/// Byte strings being copied into Arrow's layout as they are parsed: a
/// [`FlatBytes`] whose data is zero-filled past the values (the last
/// offset), at least `FLAT_SLACK` bytes of it, grown in steps, so that a
/// short value is copied in one move of a fixed size rather than by a call
/// to `memcpy`.
#[derive(Debug, PartialEq)]
pub struct FlatBuilder(FlatBytes);

/// Bytes a short value is copied as (see [`FlatBuilder::push`]).
const FLAT_SLACK: usize = crate::interned::WIDE;

impl FlatBuilder {
    /// Room for `n` values of a few bytes each before the first growth.
    fn with_capacity(n: usize) -> Self {
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        FlatBuilder(FlatBytes {
            offsets,
            data: vec![0; n * 8],
        })
    }

    fn len(&self) -> usize {
        self.0.offsets.len() - 1
    }

    fn end(&self) -> usize {
        *self.0.offsets.last().expect("a first offset") as usize
    }

    /// Appends `value`, a slice of `within`. A short value with
    /// `FLAT_SLACK` bytes of `within` from its start is copied as those 16
    /// bytes, whatever its length: the bytes past it are overwritten by the
    /// next value or cut off by `finish`. A branch on the length instead
    /// mispredicts on values of mixed lengths (the tutorial's words of 3 to
    /// 7 letters: 4.5 ns a value in this function, against 2.6 ns).
    #[inline(always)]
    fn push(&mut self, value: &[u8], within: &[u8]) {
        let at = self.end();
        let end = at + value.len();
        if end + FLAT_SLACK > self.0.data.len() {
            self.grow(end);
        }
        let data = &mut self.0.data;
        match crate::interned::wide_from(value, within) {
            Some(wide) if value.len() <= FLAT_SLACK => {
                data[at..at + FLAT_SLACK].copy_from_slice(wide)
            }
            _ => crate::threads::copy_short(&mut data[at..end], value),
        }
        self.0.offsets.push(end as i64);
    }

    /// Out of the parse's inner loop, which it would keep from being inlined.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, end: usize) {
        let len = (2 * self.0.data.len()).max(end + FLAT_SLACK + 4096);
        self.0.data.resize(len, 0);
    }

    /// Appends the values of `later` (a batch's later run).
    fn append(&mut self, later: FlatBuilder) {
        self.0.data.truncate(self.end());
        self.0.append(later.finish());
    }

    /// The values, without the zeros past them.
    pub fn finish(mut self) -> FlatBytes {
        self.0.data.truncate(self.end());
        self.0
    }
}

/// Values a column owns: numbers, or byte strings in Arrow's layout or
/// left in the mapped file they were parsed from.
#[derive(Debug, PartialEq)]
pub enum OwnedValues {
    /// Never `Buffer::Bytes`.
    Numbers(Buffer<'static>),
    Bytes(FlatBytes),
    /// Left in the mapping (see [`columns_in_mapping`]).
    InMapping(InMapping),
}

impl OwnedValues {
    /// Room for the values of `later` (a batch's later runs).
    fn reserve<'b>(&mut self, later: impl Iterator<Item = &'b OwnedValues>) {
        match self {
            OwnedValues::Numbers(numbers) => numbers.reserve(later.map(OwnedValues::len).sum()),
            OwnedValues::Bytes(flat) => {
                let (values, bytes) = later.fold((0, 0), |(v, b), more| match more {
                    OwnedValues::Bytes(f) => (v + f.offsets.len() - 1, b + f.data.len()),
                    OwnedValues::Numbers(_) | OwnedValues::InMapping(_) => (v, b),
                });
                flat.offsets.reserve(values);
                flat.data.reserve(bytes);
            }
            // Reserved as joined: the form of the whole depends on every run's.
            OwnedValues::InMapping(_) => {}
        }
    }

    fn append(&mut self, later: OwnedValues) {
        match (self, later) {
            (OwnedValues::Numbers(a), OwnedValues::Numbers(b)) => a.extend(b),
            (OwnedValues::Bytes(a), OwnedValues::Bytes(b)) => a.append(b),
            (OwnedValues::InMapping(a), OwnedValues::InMapping(b)) => a.append(b),
            _ => unreachable!("columns of one request share a type and a form"),
        }
    }

    fn len(&self) -> usize {
        match self {
            OwnedValues::Numbers(numbers) => numbers.len(),
            OwnedValues::Bytes(flat) => flat.offsets.len() - 1,
            OwnedValues::InMapping(in_mapping) => in_mapping.len(),
        }
    }
}

/// A column that owns its values: it outlives the records it was parsed from.
#[derive(Debug, PartialEq)]
pub struct OwnedColumn {
    pub values: OwnedValues,
    pub counts: Counts,
}

/// What parsing a run of records gives, and how the runs of a batch join.
pub trait Runs: Sized + Send {
    /// Room for the values of `later` runs, taken before they are appended,
    /// so that appending them copies each value once.
    fn reserve(&mut self, later: &[Self]);
    /// Appends what a later run of records gave.
    fn append(&mut self, later: Self);
}

impl<'a> Runs for Vec<Column<'a>> {
    fn reserve(&mut self, later: &[Self]) {
        for (i, column) in self.iter_mut().enumerate() {
            column
                .values
                .reserve(later.iter().map(|run| run[i].values.len()).sum());
            column
                .counts
                .reserve(later.iter().map(|run| &run[i].counts));
        }
    }

    fn append(&mut self, later: Self) {
        for (column, more) in self.iter_mut().zip(later) {
            column.values.extend(more.values);
            column.counts.extend(more.counts);
        }
    }
}

impl Runs for Vec<OwnedColumn> {
    fn reserve(&mut self, later: &[Self]) {
        for (i, column) in self.iter_mut().enumerate() {
            column
                .values
                .reserve(later.iter().map(|run| &run[i].values));
            column
                .counts
                .reserve(later.iter().map(|run| &run[i].counts));
        }
    }

    fn append(&mut self, later: Self) {
        for (column, more) in self.iter_mut().zip(later) {
            column.values.append(more.values);
            column.counts.extend(more.counts);
        }
    }
}

/// A feature list of a batch: values, the count of each step, and per
/// record the number of steps (-1: no such feature list).
#[derive(Debug, PartialEq)]
pub struct SequenceColumn<'a> {
    pub values: Buffer<'a>,
    pub step_counts: Vec<i64>,
    pub steps: Vec<i64>,
}

/// Records per thread below which splitting a batch costs more than it saves.
const RECORDS_PER_THREAD: usize = 4096;

/// [`parse_examples`] on every core (see [`parse_examples_on`]).
pub fn parse_examples_parallel<'a, T: Runs>(
    records: &[&'a [u8]],
    footers: Footers,
    requests: &[Request],
    schema: Schema,
    strings: Strings,
    finish: impl Fn(Vec<Column<'a>>) -> T + Sync,
) -> Result<T, ParseFailure> {
    parse_examples_on(
        crate::threads::available(),
        records,
        footers,
        requests,
        schema,
        strings,
        finish,
    )
}

/// [`parse_examples`] on up to `threads` threads: the batch is cut into runs
/// of records that the threads (the caller's among them) take in turn as each
/// finishes its last, parsed side by side and joined in order. Runs are
/// taken, not dealt out in equal shares, so that a thread the system holds
/// back (other work shares the cores) delays the batch by one run, not by its
/// share. `finish` turns each run's columns into what the caller keeps (on
/// the thread that parsed them). The result, errors included, is the same as
/// one thread's: the first failing record in the batch is the one reported.
pub fn parse_examples_on<'a, T: Runs>(
    threads: usize,
    records: &[&'a [u8]],
    footers: Footers,
    requests: &[Request],
    schema: Schema,
    strings: Strings,
    finish: impl Fn(Vec<Column<'a>>) -> T + Sync,
) -> Result<T, ParseFailure> {
    let threads = threads.min(records.len() / RECORDS_PER_THREAD);
    if threads <= 1 {
        return parse_examples(records, footers, requests, schema, strings).map(finish);
    }
    let run = RECORDS_PER_THREAD.max(records.len().div_ceil(threads * 4));
    let runs: Vec<&[&'a [u8]]> = records.chunks(run).collect();
    let parts = crate::threads::map_in_turn(&runs, threads, |_, chunk| {
        parse_examples(chunk, footers, requests, schema, strings).map(&finish)
    });
    let mut parts = parts
        .into_iter()
        .enumerate()
        .map(|(k, part)| part.map_err(|failure| failure.shifted(k * run)));
    let mut joined = parts.next().expect("a batch of records has a first run")?;
    let later = parts.collect::<Result<Vec<T>, ParseFailure>>()?;
    joined.reserve(&later);
    later.into_iter().for_each(|part| joined.append(part));
    Ok(joined)
}

/// Finds a request by key: a linear scan for a few keys, a hash map beyond.
///
/// Records of one file almost always list their keys in the same order, so
/// the key last seen at each entry position, and what it matched, is checked
/// first: one comparison per entry instead of a search.
struct Keys<'a> {
    keys: Vec<Vec<u8>>,
    map: Option<HashMap<Vec<u8>, usize>>,
    seen: Vec<(&'a [u8], Option<usize>)>,
}

impl<'a> Keys<'a> {
    fn new(requests: &[Request]) -> Self {
        let keys: Vec<Vec<u8>> = requests.iter().map(|r| r.key.clone()).collect();
        let map = (keys.len() > 12).then(|| {
            keys.iter()
                .cloned()
                .enumerate()
                .map(|(i, k)| (k, i))
                .collect()
        });
        Keys {
            keys,
            map,
            seen: Vec::new(),
        }
    }

    fn search(&self, key: &[u8]) -> Option<usize> {
        match &self.map {
            Some(map) => map.get(key).copied(),
            None => self.keys.iter().position(|k| k.as_slice() == key),
        }
    }

    /// The request for the entry at `position` (0-based within its record).
    #[inline(always)]
    fn find(&mut self, position: usize, key: &'a [u8]) -> Option<usize> {
        if let Some(&(last, found)) = self.seen.get(position) {
            if same_key(last, key) {
                return found;
            }
        }
        let found = self.search(key);
        if position < self.seen.len() {
            self.seen[position] = (key, found);
        } else if position == self.seen.len() && position < 256 {
            self.seen.push((key, found));
        }
        found
    }
}

/// Slice equality without a call into `memcmp` for keys up to 32 bytes:
/// overlapping fixed-width loads from both ends cover every length (bytes 0,
/// n/2 and n-1 are every byte of a key of 1 to 3). Short keys (`f00`) are
/// common, and a `memcmp` call per entry cost a sixth of the parse of a file
/// with 50 such features.
#[inline(always)]
fn same_key(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let wide = |s: &[u8], at: usize| u128::from_le_bytes(s[at..at + 16].try_into().unwrap());
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap());
    let half = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap());
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        8..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        17..=32 => wide(a, 0) == wide(b, 0) && wide(a, n - 16) == wide(b, n - 16),
        _ => a == b,
    }
}

fn malformed(index: usize) -> impl Fn(Malformed) -> ParseFailure {
    move |m| ParseFailure::Malformed {
        index,
        key: None,
        what: m.0,
    }
}

/// Puts `entry`, the `position`th of its record, in the slot of the request
/// for its key, if any: the last entry of a key wins, as in TensorFlow. An
/// entry it replaces goes to `replaced`, to be checked (protobuf rejects a
/// malformed entry even where a later one replaces it; TensorFlow does not).
#[inline(always)]
fn take_entry<'a>(
    keys: &mut Keys<'a>,
    slots: &mut [Option<Entry<'a>>],
    replaced: &mut Vec<(usize, Entry<'a>)>,
    position: &mut usize,
    entry: Entry<'a>,
) {
    if let Some(i) = keys.find(*position, entry.key) {
        if let Some(earlier) = slots[i].replace(entry) {
            replaced.push((i, earlier));
        }
    }
    *position += 1;
}

/// Checks the requested entries that later entries of their keys replaced.
#[cold]
fn check_replaced(
    replaced: &[(usize, Entry<'_>)],
    requests: &[Request],
    schema: Schema,
    index: usize,
    check: impl Fn(&Entry<'_>, Schema) -> Result<(), Malformed>,
) -> Result<(), ParseFailure> {
    for (i, entry) in replaced {
        check(entry, schema).map_err(|m| ParseFailure::Malformed {
            index,
            key: Some(requests[*i].key.clone()),
            what: m.0,
        })?;
    }
    Ok(())
}

/// Parses a batch of serialized Examples (`Schema::TensorFlow`) or OFRecords
/// (`Schema::OneFlow`: the record is the feature map itself), each followed
/// by its `footers`.
pub fn parse_examples<'a>(
    records: &[&'a [u8]],
    footers: Footers,
    requests: &[Request],
    schema: Schema,
    strings: Strings,
) -> Result<Vec<Column<'a>>, ParseFailure> {
    let mut keys = Keys::new(requests);
    let mut columns: Vec<Column<'a>> = requests
        .iter()
        .map(|r| Column {
            // One value per record is the common case; more grow the buffer.
            values: Buffer::with_capacity(r.dtype, records.len(), strings),
            counts: Counts::new(),
        })
        .collect();
    let mut slots: Vec<Option<Entry<'a>>> = vec![None; requests.len()];
    let mut replaced: Vec<(usize, Entry<'a>)> = Vec::new();
    for (index, &record) in records.iter().enumerate() {
        let record = match footers {
            Footers::None => record,
            Footers::Crc => {
                crate::frame::checked_payload(record).ok_or(ParseFailure::Corrupt { index })?
            }
        };
        slots.iter_mut().for_each(|s| *s = None);
        replaced.clear();
        let mut position = 0;
        // A closure per walk, each called from one place, so that each is
        // inlined: one shared by two walks stayed a call per entry (inlining
        // it saved 24 instructions a tutorial record).
        if schema == Schema::OneFlow {
            for_each_entry(record, &mut |entry| {
                take_entry(&mut keys, &mut slots, &mut replaced, &mut position, entry)
            })
            .map_err(malformed(index))?;
        } else if !for_each_canonical_entry(record, &mut |entry| {
            take_entry(&mut keys, &mut slots, &mut replaced, &mut position, entry)
        }) {
            slots.iter_mut().for_each(|s| *s = None);
            replaced.clear();
            position = 0;
            for_each_example_entry(record, &mut |entry| {
                take_entry(&mut keys, &mut slots, &mut replaced, &mut position, entry)
            })
            .map_err(malformed(index))?;
        }
        if !replaced.is_empty() {
            check_replaced(&replaced, requests, schema, index, check_feature_entry)?;
        }
        for ((slot, column), request) in slots.iter().zip(&mut columns).zip(requests) {
            // Written out here rather than shared with `parse_sequence_examples`:
            // as a helper function this loop measured 9-20% more instructions.
            let count = match slot {
                None => -1,
                Some(entry) => match (schema == Schema::TensorFlow)
                    .then(|| column.values.append_canonical(entry, record))
                    .flatten()
                {
                    Some(added) => added.map_err(|m| ParseFailure::Malformed {
                        index,
                        key: Some(request.key.clone()),
                        what: m.0,
                    })?,
                    None => {
                        let f = entry.feature(schema).map_err(malformed(index))?;
                        if f.kind.is_none() {
                            -1 // a Feature with no kind counts as missing, as in TensorFlow
                        } else {
                            column
                                .values
                                .append(&f)
                                .map_err(|m| ParseFailure::Malformed {
                                    index,
                                    key: Some(request.key.clone()),
                                    what: m.0,
                                })?
                                .map_err(|actual| ParseFailure::WrongType {
                                    index,
                                    key: request.key.clone(),
                                    expected: request.dtype,
                                    actual,
                                    step: None,
                                })?
                        }
                    }
                },
            };
            column.counts.push(count);
        }
    }
    Ok(columns)
}

/// Parses a batch of serialized SequenceExamples: context features and feature lists.
pub fn parse_sequence_examples<'a>(
    records: &[&'a [u8]],
    context: &[Request],
    lists: &[Request],
) -> Result<(Vec<Column<'a>>, Vec<SequenceColumn<'a>>), ParseFailure> {
    let mut context_keys = Keys::new(context);
    let mut list_keys = Keys::new(lists);
    let mut context_columns: Vec<Column<'a>> = context
        .iter()
        .map(|r| Column {
            values: Buffer::new(r.dtype),
            counts: Counts::new(),
        })
        .collect();
    let mut list_columns: Vec<SequenceColumn<'a>> = lists
        .iter()
        .map(|r| SequenceColumn {
            values: Buffer::new(r.dtype),
            step_counts: Vec::new(),
            steps: Vec::with_capacity(records.len()),
        })
        .collect();
    let mut context_slots: Vec<Option<Entry<'a>>> = vec![None; context.len()];
    let mut list_slots: Vec<Option<Entry<'a>>> = vec![None; lists.len()];
    let (mut context_replaced, mut lists_replaced) = (Vec::new(), Vec::new());
    for (index, record) in records.iter().enumerate() {
        context_slots.iter_mut().for_each(|s| *s = None);
        list_slots.iter_mut().for_each(|s| *s = None);
        context_replaced.clear();
        lists_replaced.clear();
        let (mut context_position, mut list_position) = (0, 0);
        for_each_sequence_entry(
            record,
            &mut |entry| {
                take_entry(
                    &mut context_keys,
                    &mut context_slots,
                    &mut context_replaced,
                    &mut context_position,
                    entry,
                )
            },
            &mut |entry| {
                take_entry(
                    &mut list_keys,
                    &mut list_slots,
                    &mut lists_replaced,
                    &mut list_position,
                    entry,
                )
            },
        )
        .map_err(malformed(index))?;
        if !context_replaced.is_empty() || !lists_replaced.is_empty() {
            check_replaced(
                &context_replaced,
                context,
                Schema::TensorFlow,
                index,
                check_feature_entry,
            )?;
            check_replaced(&lists_replaced, lists, Schema::TensorFlow, index, |e, _| {
                check_feature_list_entry(e)
            })?;
        }
        for ((slot, column), request) in context_slots.iter().zip(&mut context_columns).zip(context)
        {
            let count = match slot {
                None => -1,
                Some(entry) => {
                    let f = entry
                        .feature(Schema::TensorFlow)
                        .map_err(malformed(index))?;
                    match f.kind {
                        // Unlike its Example parser, TensorFlow's SequenceExample
                        // parser takes a context Feature with no kind as present
                        // with no values (a dense feature then fails its count).
                        None => 0,
                        Some(_) => column
                            .values
                            .append(&f)
                            .map_err(malformed(index))?
                            .map_err(|actual| ParseFailure::WrongType {
                                index,
                                key: request.key.clone(),
                                expected: request.dtype,
                                actual,
                                step: None,
                            })?,
                    }
                }
            };
            column.counts.push(count);
        }
        for ((slot, column), request) in list_slots.iter().zip(&mut list_columns).zip(lists) {
            let Some(entry) = slot else {
                column.steps.push(-1);
                continue;
            };
            let mut steps = 0i64;
            let mut failure = None;
            entry
                .for_each_step(&mut |message| {
                    let f = feature(message, Schema::TensorFlow)?;
                    let count = match f.kind {
                        None => 0,
                        Some(_) => match column.values.append(&f)? {
                            Ok(n) => n,
                            Err(actual) => {
                                failure.get_or_insert(ParseFailure::WrongType {
                                    index,
                                    key: request.key.clone(),
                                    expected: request.dtype,
                                    actual,
                                    step: Some(steps as usize),
                                });
                                0
                            }
                        },
                    };
                    column.step_counts.push(count);
                    steps += 1;
                    Ok(())
                })
                .map_err(malformed(index))?;
            if let Some(failure) = failure {
                return Err(failure);
            }
            column.steps.push(steps);
        }
    }
    Ok((context_columns, list_columns))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::encode::{put_example, Values};

    /// An Example of `entries`, serialized.
    pub(crate) fn example(entries: &[(&[u8], Option<Values<'_>>)]) -> Vec<u8> {
        let mut out = Vec::new();
        put_example(&mut out, entries).unwrap();
        out
    }

    /// Only a list that is one value with a one-byte length filling it is
    /// taken as a single value; a two-byte length whose first byte equals
    /// the bytes after it (0x85 then 133 bytes) is not.
    #[test]
    fn single_short_value_only_where_one_short_value_fills_the_list() {
        assert_eq!(single_short_value(b"\x0a\x03cat"), Some(&b"cat"[..]));
        assert_eq!(single_short_value(b"\x0a\x00"), Some(&b""[..]));
        let long = [&[0x0a, 0x7f][..], &[b'x'; 0x7f]].concat();
        assert_eq!(single_short_value(&long), Some(&long[2..]));
        let two_byte_length = [&[0x0a, 0x85, 0x01][..], &[b'x'; 132]].concat();
        assert_eq!(single_short_value(&two_byte_length), None);
        for other in [
            &b"\x0a\x02a"[..],
            b"\x0a\x01a\x0a\x01b",
            b"\x12\x01a",
            b"\x0a",
            b"",
        ] {
            assert_eq!(single_short_value(other), None, "{other:?}");
        }
    }

    /// Every split of these counts into three runs, joined as `parse_examples_on`
    /// joins them, gives the counts back; they stay one number (nothing
    /// written per record) exactly where every record holds the same count.
    #[test]
    fn counts_join_and_stay_one_number_while_all_the_same() {
        let sequences: [&[i64]; 7] = [
            &[],
            &[1, 1, 1, 1],
            &[-1, -1, -1],
            &[1, 1, 2, 1],
            &[2, 1, 1, 1],
            &[1, 1, 1, -1],
            &[0, 3, 0, 3],
        ];
        for counts in sequences {
            let all_one = counts.first().filter(|&&f| counts.iter().all(|&n| n == f));
            for a in 0..=counts.len() {
                for b in a..=counts.len() {
                    let mut runs = [&counts[..a], &counts[a..b], &counts[b..]]
                        .map(|run| Counts::from(run.to_vec()))
                        .into_iter();
                    let mut joined = runs.next().unwrap();
                    let later: Vec<Counts> = runs.collect();
                    joined.reserve(later.iter());
                    later.into_iter().for_each(|run| joined.extend(run));
                    assert_eq!(joined.to_vec(), counts, "cut at {a} and {b}");
                    assert_eq!(joined.len(), counts.len());
                    assert_eq!(
                        joined.same(),
                        all_one.copied(),
                        "{counts:?} cut at {a} and {b}"
                    );
                    assert_eq!(
                        joined.varied.is_empty(),
                        all_one.is_some() || counts.is_empty()
                    );
                }
            }
        }
    }

    fn request(key: &str, dtype: DType) -> Request {
        Request {
            key: key.as_bytes().to_vec(),
            dtype,
        }
    }

    #[test]
    fn parallel_parsing_equals_one_thread_and_reports_the_first_failure() {
        let records: Vec<Vec<u8>> = (0..20_000i64)
            .map(|i| match i % 3 {
                0 => example(&[(b"x", Some(Values::Int64(&[i, i + 1])))]),
                1 => example(&[(b"s", Some(Values::Bytes(&[b"v"])))]),
                _ => example(&[]),
            })
            .collect();
        let slices: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
        let requests = [request("x", DType::Int64), request("s", DType::Bytes)];
        assert_eq!(
            parse_examples_parallel(
                &slices,
                Footers::None,
                &requests,
                Schema::TensorFlow,
                Strings::Slices,
                |c| c
            )
            .unwrap(),
            parse_examples(
                &slices,
                Footers::None,
                &requests,
                Schema::TensorFlow,
                Strings::Slices
            )
            .unwrap()
        );
        let mut broken = slices.clone();
        let (early, late) = (b"\xff".as_slice(), b"\x0a\x05".as_slice());
        broken[17_000] = late;
        broken[12_345] = early;
        let index = |r: Result<Vec<Column<'_>>, ParseFailure>| r.unwrap_err().index();
        assert_eq!(
            index(parse_examples_parallel(
                &broken,
                Footers::None,
                &requests,
                Schema::TensorFlow,
                Strings::Slices,
                |c| c
            )),
            12_345
        );
        assert_eq!(
            index(parse_examples(
                &broken,
                Footers::None,
                &requests,
                Schema::TensorFlow,
                Strings::Slices
            )),
            12_345
        );
    }

    #[test]
    fn footers_left_to_the_parser_are_checked_and_the_first_failure_reported() {
        let records: Vec<Vec<u8>> = (0..20_000i64)
            .map(|i| example(&[(b"x", Some(Values::Int64(&[i])))]))
            .collect();
        let framed = |record: &[u8]| {
            let mut with = record.to_vec();
            with.extend_from_slice(&crate::crc::masked_crc32c(record).to_le_bytes());
            with
        };
        let mut with_footers: Vec<Vec<u8>> = records.iter().map(|r| framed(r)).collect();
        let bare: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
        let requests = [request("x", DType::Int64)];
        let parse = |records: &[&[u8]], footers, threads| {
            let (schema, slices) = (Schema::TensorFlow, Strings::Slices);
            parse_examples_on(
                threads,
                records,
                footers,
                &requests,
                schema,
                slices,
                owned_columns,
            )
        };
        let expected = parse(&bare, Footers::None, 1).unwrap();
        // A payload of 16 KiB or more was checked while framing, not here.
        let large = example(&[(b"big", Some(Values::Bytes(&[&[7u8; 16 << 10][..]])))]);
        let mut large_unchecked = large.clone();
        large_unchecked.extend_from_slice(&[0; 4]);
        // Records 12 345 and 17 000 fail their CRCs, 15 000 is malformed.
        with_footers[17_000][3] ^= 1;
        *with_footers[12_345].last_mut().unwrap() ^= 0x80;
        let mut malformed = vec![0xffu8];
        malformed.extend_from_slice(&crate::crc::masked_crc32c(&[0xff]).to_le_bytes());
        for threads in [1, 3] {
            let slices: Vec<&[u8]> = with_footers.iter().map(|r| &r[..]).collect();
            let intact = [&slices[..12_345], &[&large_unchecked[..]]].concat();
            let parsed = parse(&intact, Footers::Crc, threads).unwrap();
            assert_eq!(
                parsed[0].counts.to_vec()[..12_345],
                expected[0].counts.to_vec()[..12_345]
            );
            assert_eq!(parsed[0].counts.len(), 12_346, "{threads} threads");
            let failure = parse(&slices, Footers::Crc, threads).unwrap_err();
            assert_eq!(
                failure,
                ParseFailure::Corrupt { index: 12_345 },
                "{threads} threads"
            );
            let mut malformed_first = slices.clone();
            malformed_first[11_000] = &malformed;
            let failure = parse(&malformed_first, Footers::Crc, threads).unwrap_err();
            assert!(
                matches!(failure, ParseFailure::Malformed { index: 11_000, .. }),
                "{failure:?}"
            );
            let mut malformed_later = slices.clone();
            malformed_later[15_000] = &malformed;
            let failure = parse(&malformed_later, Footers::Crc, threads).unwrap_err();
            assert_eq!(
                failure,
                ParseFailure::Corrupt { index: 12_345 },
                "{threads} threads"
            );
            // Too short to hold a footer: damage too, never a panic.
            let failure = parse(&[&[1u8, 2][..]], Footers::Crc, threads).unwrap_err();
            assert_eq!(failure, ParseFailure::Corrupt { index: 0 });
        }
    }

    #[test]
    fn strings_copied_while_parsed_equal_slices_copied_after() {
        // Values of every length up to 40 bytes, several to a record, records
        // lacking the feature, on one thread and joined from three.
        let values: Vec<Vec<u8>> = (0..41u8).map(|n| (0..n).map(|j| j ^ n).collect()).collect();
        let records: Vec<Vec<u8>> = (0..30_000usize)
            .map(|i| {
                let some: Vec<&[u8]> = (0..i % 4).map(|k| &values[(i + k) % 41][..]).collect();
                match i % 5 {
                    0 => example(&[]),
                    _ => example(&[(b"s", Some(Values::Bytes(&some)))]),
                }
            })
            .collect();
        let slices: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
        let requests = [request("s", DType::Bytes)];
        let after = parse_examples(
            &slices,
            Footers::None,
            &requests,
            Schema::TensorFlow,
            Strings::Slices,
        );
        let expected = owned_columns(after.unwrap());
        let (none, schema, flat) = (Footers::None, Schema::TensorFlow, Strings::Flat);
        for threads in [1, 3] {
            let parse =
                |finish| parse_examples_on(threads, &slices, none, &requests, schema, flat, finish);
            assert_eq!(parse(owned_columns).unwrap(), expected, "{threads} threads");
            // Runs joined as parsed, before they are owned.
            let joined = parse_examples_on(threads, &slices, none, &requests, schema, flat, |c| c);
            assert_eq!(
                owned_columns(joined.unwrap()),
                expected,
                "{threads} threads"
            );
        }
        assert_eq!(Strings::flat_for(&slices), Strings::Flat);
        assert_eq!(Strings::flat_for(&[&[0; 5000][..]]), Strings::Slices);
    }

    #[test]
    fn values_left_in_the_mapping_are_the_values_parsed() {
        // Records end to end in one buffer, as in a mapped file; parsed on three
        // threads, so that the runs' offsets are joined as well. Values differ
        // in the records below `below` and repeat after it: all different
        // (left where they are), all repeating (found and shared: interned),
        // and the two in turn (runs of both forms, joined).
        for (below, interned) in [(30_000, false), (0, true), (12_000, false)] {
            let distinct = |i: i64| i < below;
            let records: Vec<Vec<u8>> = (0..30_000i64)
                .map(|i| {
                    let value = if distinct(i) { i } else { i % 7 }.to_le_bytes();
                    match i % 4 {
                        0 => example(&[(b"x", Some(Values::Int64(&[i])))]),
                        1 => example(&[(b"s", Some(Values::Bytes(&[b"v", b""])))]),
                        2 => example(&[(b"s", Some(Values::Bytes(&[&value, &value[..3]])))]),
                        _ => example(&[]),
                    }
                })
                .collect();
            let file: Vec<u8> = records.concat();
            let mut at = 0;
            let slices: Vec<&[u8]> = records
                .iter()
                .map(|r| {
                    at += r.len();
                    &file[at - r.len()..at]
                })
                .collect();
            let requests = [request("x", DType::Int64), request("s", DType::Bytes)];
            let expected = parse_examples(
                &slices,
                Footers::None,
                &requests,
                Schema::TensorFlow,
                Strings::Slices,
            )
            .unwrap();
            let mut left = parse_examples_on(
                3,
                &slices,
                Footers::None,
                &requests,
                Schema::TensorFlow,
                Strings::Slices,
                |c| columns_in_mapping(c, &file),
            )
            .unwrap();
            let Buffer::Bytes(values) = &expected[1].values else {
                panic!("a bytes column")
            };
            let in_mapping = std::mem::replace(
                &mut left[1].values,
                OwnedValues::Numbers(Buffer::Int64(vec![])),
            );
            let OwnedValues::InMapping(in_mapping) = in_mapping else {
                panic!("bytes left in the mapping")
            };
            assert_eq!(in_mapping.codes.is_some(), interned);
            let spans = in_mapping.per_value();
            let found: Vec<&[u8]> = spans.iter().map(|&(at, n)| &file[at..at + n]).collect();
            assert_eq!(&found, values);
            // The very bytes, not a copy of them (where none are shared).
            assert!(
                !distinct(29_999)
                    || spans
                        .iter()
                        .zip(values)
                        .all(|(&(at, _), v)| file.as_ptr().wrapping_add(at) == v.as_ptr())
            );
            assert_eq!(left[1].counts, expected[1].counts);
            assert_eq!(left[0], expected.into_iter().next().unwrap().owned());
        }
    }

    #[test]
    fn columns_with_missing_and_empty() {
        let a = example(&[
            (b"x", Some(Values::Int64(&[1, 2]))),
            (b"s", Some(Values::Bytes(&[b"hi"]))),
        ]);
        let b = example(&[(b"x", Some(Values::Int64(&[])))]);
        let c = example(&[(b"x", None)]);
        let cols = parse_examples(
            &[&a, &b, &c],
            Footers::None,
            &[request("x", DType::Int64), request("s", DType::Bytes)],
            Schema::TensorFlow,
            Strings::Slices,
        )
        .unwrap();
        assert_eq!(
            cols[0],
            Column {
                values: Buffer::Int64(vec![1, 2]),
                counts: vec![2, 0, -1].into()
            }
        );
        assert_eq!(
            cols[1],
            Column {
                values: Buffer::Bytes(vec![b"hi"]),
                counts: vec![1, -1, -1].into()
            }
        );
    }

    #[test]
    fn ofrecords_take_all_five_kinds_and_field_three_is_double() {
        let mut a = Vec::new();
        crate::encode::put_feature_map(
            &mut a,
            &[
                (b"d", Some(Values::Double(&[1.5, -2.0]))),
                (b"i", Some(Values::Int32(&[-7]))),
                (b"l", Some(Values::Int64(&[1 << 40]))),
                (b"f", Some(Values::Float(&[0.25]))),
                (b"s", Some(Values::Bytes(&[b"x", b"yz"]))),
            ],
            Schema::OneFlow,
        )
        .unwrap();
        let requests = [
            request("d", DType::Float64),
            request("i", DType::Int32),
            request("l", DType::Int64),
            request("f", DType::Float32),
            request("s", DType::Bytes),
        ];
        let cols = parse_examples(
            &[&a, &[]],
            Footers::None,
            &requests,
            Schema::OneFlow,
            Strings::Slices,
        )
        .unwrap();
        let values: Vec<&Buffer<'_>> = cols.iter().map(|c| &c.values).collect();
        assert_eq!(
            values,
            [
                &Buffer::Float64(vec![1.5, -2.0]),
                &Buffer::Int32(vec![-7]),
                &Buffer::Int64(vec![1 << 40]),
                &Buffer::Float32(vec![0.25]),
                &Buffer::Bytes(vec![b"x", b"yz"]),
            ]
        );
        assert!(cols.iter().all(|c| c.counts.to_vec()[1] == -1));
        // Field 3 is double_list in OneFlow: asking for int64 there is a type error.
        let err = parse_examples(
            &[&a],
            Footers::None,
            &[request("d", DType::Int64)],
            Schema::OneFlow,
            Strings::Slices,
        );
        assert!(matches!(
            err,
            Err(ParseFailure::WrongType {
                actual: Kind::Double,
                ..
            })
        ));
    }

    #[test]
    fn same_key_agrees_with_slice_equality() {
        let keys: Vec<Vec<u8>> = (0..40usize)
            .flat_map(|n| {
                [
                    vec![7u8; n],
                    (0..n as u8).collect(),
                    (0..n as u8).rev().collect(),
                ]
            })
            .collect();
        for a in &keys {
            for b in &keys {
                assert_eq!(same_key(a, b), a == b, "{a:?} {b:?}");
            }
            for i in 0..a.len() {
                let mut c = a.clone();
                c[i] ^= 1;
                assert!(!same_key(a, &c));
            }
        }
    }

    #[test]
    fn wrong_type_names_key_and_index() {
        let a = example(&[(b"x", Some(Values::Int64(&[1])))]);
        let b = example(&[(b"x", Some(Values::Float(&[1.0])))]);
        let err = parse_examples(
            &[&a, &b],
            Footers::None,
            &[request("x", DType::Int64)],
            Schema::TensorFlow,
            Strings::Slices,
        )
        .unwrap_err();
        assert_eq!(
            err,
            ParseFailure::WrongType {
                index: 1,
                key: b"x".to_vec(),
                expected: DType::Int64,
                actual: Kind::Float,
                step: None
            }
        );
    }

    #[test]
    fn malformed_record_is_reported_by_index() {
        let a = example(&[(b"x", Some(Values::Int64(&[1])))]);
        let err = parse_examples(
            &[&a, &[0x0a, 0x09]],
            Footers::None,
            &[request("x", DType::Int64)],
            Schema::TensorFlow,
            Strings::Slices,
        )
        .unwrap_err();
        assert!(matches!(err, ParseFailure::Malformed { index: 1, .. }));
    }
}

#[cfg(test)]
pub(crate) mod timing {
    use super::*;
    use crate::encode::{put_example, Values};

    /// 200 000 of the tutorial's Examples, and requests for their four features.
    fn tutorial_records() -> (Vec<Vec<u8>>, Vec<Request>) {
        tutorial_records_of(200_000)
    }

    /// `count` of the tutorial's Examples, and requests for their four features.
    pub(crate) fn tutorial_records_of(count: i64) -> (Vec<Vec<u8>>, Vec<Request>) {
        let names: [&[u8]; 5] = [b"cat", b"dog", b"chicken", b"horse", b"goat"];
        let records: Vec<Vec<u8>> = (0..count)
            .map(|i| {
                let mut out = Vec::new();
                let b = [names[(i % 5) as usize]];
                put_example(
                    &mut out,
                    &[
                        (b"feature0", Some(Values::Int64(&[i % 2]))),
                        (b"feature1", Some(Values::Int64(&[i % 5]))),
                        (b"feature2", Some(Values::Bytes(&b))),
                        (b"feature3", Some(Values::Float(&[0.5]))),
                    ],
                )
                .unwrap();
                out
            })
            .collect();
        let requests = ["feature0", "feature1", "feature2", "feature3"]
            .iter()
            .zip([DType::Int64, DType::Int64, DType::Bytes, DType::Float32])
            .map(|(k, d)| Request {
                key: k.as_bytes().to_vec(),
                dtype: d,
            })
            .collect();
        (records, requests)
    }

    /// Parses `slices` in batches of `size` records, keeping nothing.
    fn parse_in_batches(slices: &[&[u8]], size: usize, requests: &[Request]) {
        for batch in slices.chunks(size) {
            let (schema, strings) = (Schema::TensorFlow, Strings::Slices);
            let parsed = parse_examples(batch, Footers::None, requests, schema, strings);
            std::hint::black_box(parsed.unwrap());
        }
    }

    /// `cargo test --release columns::timing -- --ignored --nocapture --test-threads=1`
    #[test]
    #[ignore]
    fn parse_speed() {
        let (records, requests) = tutorial_records();
        let slices: Vec<&[u8]> = records.iter().map(|r| r.as_slice()).collect();
        // As the Python module does (`py::memory`): freed large buffers are kept for reuse.
        std::hint::black_box(Vec::<u8>::with_capacity((32 << 20) - (8 << 10)));
        for size in [1024usize, 1024, 8192, 65536] {
            let start = std::time::Instant::now();
            parse_in_batches(&slices, size, &requests);
            let ns = start.elapsed().as_nanos() as f64 / slices.len() as f64;
            println!("parse_examples by {size}: {ns:.0} ns/record");
        }
        for threads in [1, 2, 1, 2] {
            crate::threads::set(Some(threads));
            let start = std::time::Instant::now();
            for chunk in slices.chunks(65536) {
                std::hint::black_box(
                    parse_examples_parallel(
                        chunk,
                        Footers::None,
                        &requests,
                        Schema::TensorFlow,
                        Strings::Slices,
                        owned_columns,
                    )
                    .unwrap(),
                );
            }
            let ns = start.elapsed().as_nanos() as f64 / slices.len() as f64;
            println!("parse_examples_parallel, {threads} threads, owned: {ns:.0} ns/record");
        }
        crate::threads::set(None);
    }

    /// The parse alone, for an instruction count that this machine's noise
    /// leaves alone: `valgrind --tool=callgrind --toggle-collect='*columns::parse_examples'
    /// <test binary> columns::timing::parse_for_callgrind --ignored`. (A pattern
    /// that also matches the parse's closures, `*parse_examples*`, toggles
    /// counting off inside them.)
    #[test]
    #[ignore]
    fn parse_for_callgrind() {
        let (records, requests) = tutorial_records_of(100_000);
        let slices: Vec<&[u8]> = records.iter().map(|r| r.as_slice()).collect();
        parse_in_batches(&slices, 65536, &requests);
    }

    /// The CPU time this thread has used, in seconds.
    #[cfg(unix)]
    fn thread_cpu_seconds() -> f64 {
        cpu_seconds(libc::CLOCK_THREAD_CPUTIME_ID)
    }

    /// The CPU time `clock` (a thread's or the process's) has counted, in seconds.
    #[cfg(unix)]
    pub(crate) fn cpu_seconds(clock: libc::clockid_t) -> f64 {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a valid, writable timespec, and the callers pass
        // clock ids that every Unix we build for knows.
        unsafe { libc::clock_gettime(clock, &mut now) };
        now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9
    }

    /// Whether threads slow each other down, apart from how work is split:
    /// each thread does the same whole work, and prints its wall and CPU
    /// time. `crc`: CRC-32C of each record; `walk`: the entry walk of each
    /// Example with no output; `parse`: `parse_examples` in batches of 65 536.
    /// Equal times for 1 and N threads mean the cores scale for that loop.
    /// `cargo test --release columns::timing::same_work -- --ignored --nocapture --test-threads=1`
    #[cfg(unix)]
    #[test]
    #[ignore]
    fn same_work_on_each_thread() {
        let (records, requests) = tutorial_records();
        let slices: Vec<&[u8]> = records.iter().map(|r| r.as_slice()).collect();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        for work in ["crc", "walk", "parse"] {
            for threads in [1, 2, cores] {
                let times: Vec<(f64, f64)> = std::thread::scope(|scope| {
                    let handles: Vec<_> = (0..threads)
                        .map(|_| {
                            let (slices, requests) = (&slices, &requests);
                            scope.spawn(move || {
                                let (wall, cpu) = (std::time::Instant::now(), thread_cpu_seconds());
                                // 20 passes: long enough to outlast the VM's jitter.
                                for chunk in (0..20).flat_map(|_| slices.chunks(65536)) {
                                    match work {
                                        "crc" => {
                                            let x = chunk
                                                .iter()
                                                .fold(0, |x, r| x ^ crate::crc::crc32c(r));
                                            std::hint::black_box(x);
                                        }
                                        "walk" => {
                                            let mut n = 0usize;
                                            for r in chunk {
                                                crate::example::for_each_canonical_entry(
                                                    r,
                                                    &mut |e| n += e.key.len(),
                                                );
                                            }
                                            std::hint::black_box(n);
                                        }
                                        _ => {
                                            std::hint::black_box(
                                                parse_examples(
                                                    chunk,
                                                    Footers::None,
                                                    requests,
                                                    Schema::TensorFlow,
                                                    Strings::Slices,
                                                )
                                                .unwrap(),
                                            );
                                        }
                                    }
                                }
                                (wall.elapsed().as_secs_f64(), thread_cpu_seconds() - cpu)
                            })
                        })
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap()).collect()
                });
                let shown: Vec<String> = times
                    .iter()
                    .map(|(wall, cpu)| format!("{:.0}/{:.0}", wall * 1e3, cpu * 1e3))
                    .collect();
                println!(
                    "{work:>5}, {threads:>2} threads, ms wall/CPU each: {}",
                    shown.join(" ")
                );
            }
        }
    }
}
