//! Encoding tf.train.Example / SequenceExample and OneFlow OFRecord
//! messages: protobuf's deterministic serialization (map keys sorted
//! byte-wise, repeated scalars packed, empty lists as empty messages), from
//! values a row at a time or from whole columns (`RowPlan`).

use std::borrow::Cow;

use crate::example::{Kind, Schema};
use crate::wire::{len_field_size, put_len_header, put_varint, varint_len, Malformed};

/// The order of map keys in protobuf's deterministic serialization, as the
/// upb backend (protobuf's default for Python, and TensorFlow's) writes it:
/// byte-wise, except that when one key is a prefix of the other the longer
/// one comes first (`"ab"` before `"a"`). Verified against protobuf 7.36.2 on
/// thousands of random key sets; the pure-Python backend differs on exactly
/// those prefix pairs.
#[inline]
pub fn map_key_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let shared = a.len().min(b.len());
    match a[..shared].cmp(&b[..shared]) {
        std::cmp::Ordering::Equal => b.len().cmp(&a.len()),
        differ => differ,
    }
}

/// Byte strings as Arrow lays them out: value `i` is
/// `data[offsets[i]..offsets[i + 1]]`. The offsets are checked when made, so
/// reading a value never goes outside `data`.
#[derive(Clone, Copy, Debug)]
pub struct OffsetBytes<'a> {
    offsets: &'a [i64],
    data: &'a [u8],
}

impl<'a> OffsetBytes<'a> {
    /// Checks that `offsets` (one more than the values) rise from 0 or more to
    /// at most `data.len()`.
    pub fn new(offsets: &'a [i64], data: &'a [u8]) -> Result<Self, String> {
        if offsets.is_empty() {
            return Err("string offsets must hold one more entry than the strings".into());
        }
        let bad = offsets.windows(2).position(|pair| pair[0] > pair[1]);
        let (first, last) = (offsets[0], offsets[offsets.len() - 1]);
        if let Some(i) = bad {
            return Err(format!(
                "string offsets {}..{} do not lie within the {} bytes of data",
                offsets[i],
                offsets[i + 1],
                data.len()
            ));
        }
        if first < 0 || last as u64 > data.len() as u64 {
            return Err(format!(
                "string offsets {first}..{last} do not lie within the {} bytes of data",
                data.len()
            ));
        }
        Ok(OffsetBytes { offsets, data })
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Value `i`, and the data from its start on (which a copy may read past its end).
    #[inline]
    pub fn get(&self, i: usize) -> (&'a [u8], &'a [u8]) {
        let (start, end) = (self.offsets[i] as usize, self.offsets[i + 1] as usize);
        (&self.data[start..end], &self.data[start..])
    }

    /// The bytes values `start..end` take.
    pub fn byte_len(&self, start: usize, end: usize) -> usize {
        (self.offsets[end] - self.offsets[start]) as usize
    }

    /// Values `start..end`.
    pub fn range(&self, start: usize, end: usize) -> Self {
        OffsetBytes {
            offsets: &self.offsets[start..=end],
            data: self.data,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        (0..self.len()).map(|i| self.get(i).0)
    }
}

/// A feature's values, for encoding.
#[derive(Clone, Copy, Debug)]
pub enum Values<'a> {
    Bytes(&'a [&'a [u8]]),
    Offsets(OffsetBytes<'a>),
    /// Byte strings stored as NumPy's fixed-width `S` dtype does: `width`-byte
    /// cells, each padded with trailing NULs (which are not part of the value).
    FixedBytes {
        data: &'a [u8],
        width: usize,
    },
    Float(&'a [f32]),
    Double(&'a [f64]),
    Int32(&'a [i32]),
    Int64(&'a [i64]),
}

impl<'a> Values<'a> {
    /// Values `start..end`.
    pub fn range(&self, start: usize, end: usize) -> Values<'a> {
        match *self {
            Values::Bytes(v) => Values::Bytes(&v[start..end]),
            Values::Offsets(v) => Values::Offsets(v.range(start, end)),
            Values::FixedBytes { data, width } => Values::FixedBytes {
                data: &data[start * width..end * width],
                width,
            },
            Values::Float(v) => Values::Float(&v[start..end]),
            Values::Double(v) => Values::Double(&v[start..end]),
            Values::Int32(v) => Values::Int32(&v[start..end]),
            Values::Int64(v) => Values::Int64(&v[start..end]),
        }
    }

    /// The most bytes these values take in a list message, beside its header.
    fn put_bound(&self) -> usize {
        // A byte string: its tag, its length's varint and its bytes.
        let strings = |count: usize, bytes: usize| count * (1 + MAX_VARINT) + bytes;
        match self {
            Values::Bytes(v) => strings(v.len(), v.iter().map(|b| b.len()).sum()),
            Values::Offsets(v) => strings(v.len(), v.byte_len(0, v.len())),
            Values::FixedBytes { data, width } => strings(data.len() / (*width).max(1), data.len()),
            Values::Float(v) => 4 * v.len(),
            Values::Double(v) => 8 * v.len(),
            // A negative int32 is sign-extended to ten bytes, as protobuf does.
            Values::Int32(v) => MAX_VARINT * v.len(),
            Values::Int64(v) => MAX_VARINT * v.len(),
        }
    }

    /// Writes a list of byte strings' contents (what [`Values::put_list`]
    /// writes for them) at `out[pos..]` and returns the position after them.
    /// `out` has [`ROW_SLACK`] bytes to spare past them: a short byte string
    /// is moved as one 16-byte block where its source allows.
    #[inline]
    fn put_strings_at(&self, out: &mut [u8], pos: usize) -> usize {
        #[inline(always)]
        fn put_string(out: &mut [u8], pos: usize, value: &[u8], readable: &[u8]) -> usize {
            out[pos] = 0x0a;
            let at = put_varint_at(out, pos + 1, value.len() as u64);
            if value.len() <= 16 && readable.len() >= 16 {
                out[at..at + 16].copy_from_slice(&readable[..16]);
            } else {
                out[at..at + value.len()].copy_from_slice(value);
            }
            at + value.len()
        }
        match *self {
            Values::Bytes(v) => v.iter().fold(pos, |at, b| put_string(out, at, b, b)),
            Values::Offsets(v) => (0..v.len()).fold(pos, |at, i| {
                let (value, readable) = v.get(i);
                put_string(out, at, value, readable)
            }),
            Values::FixedBytes { data, width } => {
                let mask = cell_mask(width);
                (0..data.len() / width.max(1)).fold(pos, |at, i| {
                    let (value, readable) = fixed_cell(data, width, mask, i);
                    put_string(out, at, value, readable)
                })
            }
            _ => unreachable!("numbers are packed"),
        }
    }

    /// Writes numbers' packed payload, `packed_len` bytes, at `out[at..]` and
    /// returns the position after it.
    #[inline]
    fn put_packed_at(&self, out: &mut [u8], at: usize, packed_len: usize) -> usize {
        let end = at + packed_len;
        match *self {
            Values::Float(v) => {
                let cells = out[at..end].chunks_exact_mut(4);
                cells
                    .zip(v)
                    .for_each(|(c, x)| c.copy_from_slice(&x.to_le_bytes()));
                end
            }
            Values::Double(v) => {
                let cells = out[at..end].chunks_exact_mut(8);
                cells
                    .zip(v)
                    .for_each(|(c, x)| c.copy_from_slice(&x.to_le_bytes()));
                end
            }
            Values::Int32(v) => v
                .iter()
                .fold(at, |at, &x| put_varint_at(out, at, i64::from(x) as u64)),
            Values::Int64(v) => put_packed_ints(out, at, v),
            Values::Bytes(_) | Values::Offsets(_) | Values::FixedBytes { .. } => {
                unreachable!("byte strings are not packed")
            }
        }
    }
}

impl Values<'_> {
    pub fn kind(&self) -> Kind {
        match self {
            Values::Bytes(_) | Values::Offsets(_) | Values::FixedBytes { .. } => Kind::Bytes,
            Values::Float(_) => Kind::Float,
            Values::Double(_) => Kind::Double,
            Values::Int32(_) => Kind::Int32,
            Values::Int64(_) => Kind::Int64,
        }
    }

    /// Bytes of the packed payload (not for bytes lists).
    fn packed_len(&self) -> usize {
        match self {
            Values::Bytes(_) | Values::Offsets(_) | Values::FixedBytes { .. } => 0,
            Values::Float(v) => 4 * v.len(),
            Values::Double(v) => 8 * v.len(),
            Values::Int32(v) => v.iter().map(|&x| varint_len(i64::from(x) as u64)).sum(),
            Values::Int64(v) => packed_ints_len(v),
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Values::Bytes(v) => v.is_empty(),
            Values::Offsets(v) => v.is_empty(),
            Values::FixedBytes { data, .. } => data.is_empty(),
            Values::Float(v) => v.is_empty(),
            Values::Double(v) => v.is_empty(),
            Values::Int32(v) => v.is_empty(),
            Values::Int64(v) => v.is_empty(),
        }
    }

    /// Size of the list message.
    pub fn list_len(&self) -> usize {
        match self {
            Values::Bytes(v) => v.iter().map(|b| len_field_size(1, b.len())).sum(),
            Values::Offsets(v) => v.iter().map(|b| len_field_size(1, b.len())).sum(),
            Values::FixedBytes { data, width } => fixed_cells(data, *width)
                .map(|b| len_field_size(1, b.len()))
                .sum(),
            _ if self.is_empty() => 0,
            _ => len_field_size(1, self.packed_len()),
        }
    }

    pub fn put_list(&self, out: &mut Vec<u8>) {
        self.put_list_sized(out, self.packed_len());
    }

    /// `put_list` with the packed payload's size already known.
    fn put_list_sized(&self, out: &mut Vec<u8>, packed_len: usize) {
        match self {
            Values::Bytes(v) => {
                for b in v.iter() {
                    put_len_header(out, 1, b.len());
                    out.extend_from_slice(b);
                }
            }
            Values::Offsets(v) => {
                for b in v.iter() {
                    put_len_header(out, 1, b.len());
                    out.extend_from_slice(b);
                }
            }
            Values::FixedBytes { data, width } => {
                for b in fixed_cells(data, *width) {
                    put_len_header(out, 1, b.len());
                    out.extend_from_slice(b);
                }
            }
            _ if self.is_empty() => {}
            _ => {
                put_len_header(out, 1, packed_len);
                match self {
                    Values::Float(v) => v
                        .iter()
                        .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                    Values::Double(v) => v
                        .iter()
                        .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                    Values::Int32(v) => {
                        v.iter().for_each(|&x| put_varint(out, i64::from(x) as u64))
                    }
                    Values::Int64(v) => v.iter().for_each(|&x| {
                        if (0..0x80).contains(&x) {
                            out.push(x as u8);
                        } else {
                            put_varint(out, x as u64);
                        }
                    }),
                    Values::Bytes(_) | Values::Offsets(_) | Values::FixedBytes { .. } => {
                        unreachable!()
                    }
                }
            }
        }
    }

    /// Size of the Feature message holding these values.
    pub fn feature_len(&self) -> usize {
        len_field_size(1, self.list_len()) // every kind's field number fits one tag byte
    }

    pub fn put_feature(&self, out: &mut Vec<u8>, schema: Schema) -> Result<(), Malformed> {
        let field = schema
            .field(self.kind())
            .ok_or(Malformed("this kind does not exist in tf.train.Feature"))?;
        put_len_header(out, field, self.list_len());
        self.put_list(out);
        Ok(())
    }
}

/// The values of fixed-width cells, trailing NULs removed.
fn fixed_cells(data: &[u8], width: usize) -> impl Iterator<Item = &[u8]> {
    data.chunks_exact(width.max(1)).map(|cell| {
        let end = cell.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        &cell[..end]
    })
}

/// The constant part of a map entry: its key field (`0a len key`) and the
/// tag of its Feature's kind. Prepared once per column when writing many rows.
#[derive(Clone, Debug)]
pub struct EntryLayout {
    key_field: Vec<u8>,
    tag: u8,
}

impl EntryLayout {
    /// The layout of entry `key` holding `kind` (None: a Feature with no kind).
    pub fn new(key: &[u8], kind: Option<Kind>, schema: Schema) -> Result<Self, Malformed> {
        let tag = match kind {
            Some(kind) => {
                let field = schema
                    .field(kind)
                    .ok_or(Malformed("this kind does not exist in tf.train.Feature"))?;
                (field << 3 | 2) as u8
            }
            None => 0,
        };
        let mut key_field = Vec::with_capacity(key.len() + 2);
        put_len_header(&mut key_field, 1, key.len());
        key_field.extend_from_slice(key);
        Ok(EntryLayout { key_field, tag })
    }
}

/// A column holding exactly one value in every row, as [`RowPlan`] encodes it.
#[derive(Clone, Copy, Debug)]
pub enum ScalarValues<'a> {
    Int64(&'a [i64]),
    Bytes(&'a [&'a [u8]]),
    Offsets(OffsetBytes<'a>),
    /// NumPy `S` cells of `width` bytes, trailing NULs not part of the value.
    FixedBytes {
        data: &'a [u8],
        width: usize,
    },
}

impl<'a> ScalarValues<'a> {
    /// The scalar view of `values` when every row holds one value of a kind
    /// the plan encodes so (floats are planned by their rows' width).
    pub fn of(values: Values<'a>) -> Option<Self> {
        match values {
            Values::Int64(v) => Some(ScalarValues::Int64(v)),
            Values::Bytes(v) => Some(ScalarValues::Bytes(v)),
            Values::Offsets(v) => Some(ScalarValues::Offsets(v)),
            Values::FixedBytes { data, width } => Some(ScalarValues::FixedBytes { data, width }),
            Values::Float(_) | Values::Double(_) | Values::Int32(_) => None,
        }
    }
}

/// The bytes of one map entry before its value, when they depend only on the
/// value's encoded length: `0a len key-field 12 len tag len 0a len`.
fn scalar_prefix(layout: &EntryLayout, value_len: usize) -> Vec<u8> {
    let list = 1 + varint_len(value_len as u64) + value_len;
    let feature = 1 + varint_len(list as u64) + list;
    let entry = layout.key_field.len() + 1 + varint_len(feature as u64) + feature;
    let mut prefix = vec![0x0a];
    put_varint(&mut prefix, entry as u64);
    prefix.extend_from_slice(&layout.key_field);
    prefix.push(0x12);
    put_varint(&mut prefix, feature as u64);
    prefix.push(layout.tag);
    put_varint(&mut prefix, list as u64);
    prefix.push(0x0a);
    put_varint(&mut prefix, value_len as u64);
    prefix
}

/// `(list, feature, entry)` message sizes of an entry holding one byte string of `len` bytes.
#[inline]
fn bytes_entry_sizes(layout: &EntryLayout, len: usize) -> (usize, usize, usize) {
    let list = len_field_size(1, len);
    let feature = 1 + varint_len(list as u64) + list;
    let entry = layout.key_field.len() + 1 + varint_len(feature as u64) + feature;
    (list, feature, entry)
}

/// Bytes that [`RowPlan::put_row`] may write past a row's end: short
/// prefixes are copied as one fixed-size block (two vector moves, not a
/// `memcpy` call), whose tail the next field then overwrites.
pub const ROW_SLACK: usize = 32;

/// Prefix bytes, stored padded to [`ROW_SLACK`] for the fixed-size copy, in
/// the plan itself (one load less a copy than behind a pointer) unless longer.
struct Prefix {
    block: [u8; ROW_SLACK],
    long: Vec<u8>,
    len: usize,
}

impl Prefix {
    fn new(bytes: Vec<u8>) -> Self {
        let len = bytes.len();
        let mut block = [0; ROW_SLACK];
        let long = if len <= ROW_SLACK {
            block[..len].copy_from_slice(&bytes);
            Vec::new()
        } else {
            bytes
        };
        Prefix { block, long, len }
    }

    /// Byte `at` of the prefix, padded with zeros to [`ROW_SLACK`] bytes.
    fn byte(&self, at: usize) -> u8 {
        if self.len <= ROW_SLACK {
            self.block[at]
        } else {
            self.long[at]
        }
    }

    /// Writes the prefix at `out[pos..]`, which has `ROW_SLACK` bytes to
    /// spare past it, and returns the position after it.
    #[inline(always)]
    fn put(&self, out: &mut [u8], pos: usize) -> usize {
        if self.len <= ROW_SLACK {
            out[pos..pos + ROW_SLACK].copy_from_slice(&self.block);
        } else {
            out[pos..pos + self.len].copy_from_slice(&self.long);
        }
        pos + self.len
    }
}

#[inline(always)]
fn put_varint_at(out: &mut [u8], mut pos: usize, mut value: u64) -> usize {
    while value >= 0x80 {
        out[pos] = (value as u8) | 0x80;
        value >>= 7;
        pos += 1;
    }
    out[pos] = value as u8;
    pos + 1
}

/// [`put_varint_at`], with the values of one and two bytes (most counts,
/// ids and tags) each stored without a loop.
#[inline(always)]
fn put_short_varint_at(out: &mut [u8], pos: usize, value: u64) -> usize {
    if value < 0x80 {
        out[pos] = value as u8;
        pos + 1
    } else if value < 0x4000 {
        out[pos..pos + 2].copy_from_slice(&[value as u8 | 0x80, (value >> 7) as u8]);
        pos + 2
    } else {
        put_varint_at(out, pos, value)
    }
}

/// Bytes of `ints` packed as varints.
#[inline(always)]
fn packed_ints_len(ints: &[i64]) -> usize {
    ints.iter().map(|&x| varint_len(x as u64)).sum()
}

/// Writes `ints` packed as varints at `out[at..]`; returns the position after them.
#[inline(always)]
fn put_packed_ints(out: &mut [u8], at: usize, ints: &[i64]) -> usize {
    ints.iter()
        .fold(at, |at, &x| put_short_varint_at(out, at, x as u64))
}

/// A column to encode: its values, and which of them each row holds.
#[derive(Clone, Copy, Debug)]
pub struct ColumnValues<'a> {
    pub values: Values<'a>,
    /// Row `r` holds values `splits[r]..splits[r + 1]`: rising, from 0 to the
    /// values' count (the caller checks).
    pub splits: &'a [i64],
    /// Rows that hold the feature at all (None: every row); a row without it
    /// has no entry.
    pub present: Option<&'a [bool]>,
}

/// The number of values every row of `splits` holds, where each holds the
/// same number (at least one): a 2-D array's width.
fn uniform_width(splits: &[i64]) -> Option<usize> {
    let width = match splits {
        [0, first, ..] if *first > 0 => *first,
        _ => return None,
    };
    let uniform = splits
        .iter()
        .enumerate()
        .all(|(i, &s)| s == i as i64 * width);
    uniform.then_some(width as usize)
}

/// [`uniform_width`] of each distinct splits array, scanned once: the columns
/// of a slice of 1-D arrays all share one (the caller's `arange`), and each
/// scan of it is a pass over 8 bytes a row.
#[derive(Default)]
struct Widths<'a>(Vec<(&'a [i64], Option<usize>)>);

impl<'a> Widths<'a> {
    /// The number of values every row of `column` holds, where each holds the
    /// same number (at least one) and every row holds the feature.
    fn of(&mut self, column: &ColumnValues<'a>) -> Option<usize> {
        let splits = column.splits;
        let known = self
            .0
            .iter()
            .find(|(s, _)| std::ptr::eq(*s, splits))
            .map(|&(_, width)| width);
        let width = known.unwrap_or_else(|| {
            let width = uniform_width(splits);
            self.0.push((splits, width));
            width
        });
        width.filter(|_| column.present.is_none())
    }
}

/// Encodes rows of columns in one pass, from bytes prepared once per column
/// and written in place, with no growth checks. Where a column holds exactly
/// one value in every row (the common tabular case), a float entry is a
/// constant prefix and 4 bytes (where every row holds the same number of
/// floats, as an embedding's do, a constant prefix and their bytes); an int64
/// entry one of ten prefixes (by the varint's length) and the varint; a short
/// byte string a prefix whose four length bytes are its length plus
/// constants. Other columns (lists, missing features) have their lengths
/// computed per row. Bytes identical to [`put_row`]'s.
pub struct RowPlan<'a> {
    columns: Vec<PlannedColumn<'a>>,
    wrap: bool,
    /// The most bytes a row takes beside its values of varying size.
    row_bound: usize,
}

/// One column's values with the bytes prepared for them.
enum PlannedColumn<'a> {
    /// Floats, the same number in every row (one, or a 2-D array's width):
    /// the entry is a constant prefix and the packed values, whose bytes
    /// ([`float_bytes`]) are copied as they are.
    Float(Prefix, Cow<'a, [u8]>, usize),
    /// Prefixes for varint lengths 1 to 10 (index 0 unused).
    Int64(Vec<Prefix>, &'a [i64]),
    Bytes(BytesPlan, &'a [&'a [u8]]),
    Offsets(BytesPlan, OffsetBytes<'a>),
    /// The cells, their width, and [`cell_mask`] of it.
    FixedBytes(BytesPlan, &'a [u8], usize, u128),
    /// Any other column: lists, missing features, OneFlow's kinds.
    List(ListPlan<'a>),
}

/// A column of lists (or of rows that may lack the feature), with the bytes
/// prepared for its entries: a packed list's (numbers) are those of a byte
/// string as long as its packed values (see [`BytesPlan::put_prefix`]); an
/// empty list's are one constant; a list of byte strings has its lengths
/// computed per row.
struct ListPlan<'a> {
    packed: BytesPlan,
    empty: Prefix,
    key: Prefix,
    column: ColumnValues<'a>,
    /// The column's values where they are int64s (tags, ids): their rows
    /// take a path of their own, without [`Values`]' match per row.
    ints: Option<&'a [i64]>,
}

impl<'a> ListPlan<'a> {
    fn new(layout: &EntryLayout, column: ColumnValues<'a>) -> Self {
        let mut empty = Vec::new();
        let no_values = column.values.range(0, 0);
        put_row(
            &mut empty,
            &[(layout, Some(no_values))],
            false,
            &mut Vec::new(),
        );
        ListPlan {
            packed: BytesPlan::new(layout),
            empty: Prefix::new(empty),
            key: Prefix::new(layout.key_field.clone()),
            column,
            ints: match column.values {
                Values::Int64(ints) => Some(ints),
                _ => None,
            },
        }
    }

    /// Writes the entry for row `row` (nothing where the row lacks the
    /// feature) at `out[pos..]` and returns the position after it.
    #[inline]
    fn put(&self, out: &mut [u8], pos: usize, row: usize) -> usize {
        let column = &self.column;
        if column.present.is_some_and(|present| !present[row]) {
            return pos;
        }
        if let Some(ints) = self.ints {
            let ints = &ints[column.splits[row] as usize..column.splits[row + 1] as usize];
            if ints.is_empty() {
                return self.empty.put(out, pos);
            }
            let packed = packed_ints_len(ints);
            let at = self.packed.put_prefix(out, pos, packed);
            return put_packed_ints(out, at, ints);
        }
        let values = column
            .values
            .range(column.splits[row] as usize, column.splits[row + 1] as usize);
        match values {
            Values::Bytes(_) | Values::Offsets(_) | Values::FixedBytes { .. } => {}
            _ if values.is_empty() => return self.empty.put(out, pos),
            _ => {
                let packed = values.packed_len();
                let at = self.packed.put_prefix(out, pos, packed);
                return values.put_packed_at(out, at, packed);
            }
        }
        let list = values.list_len();
        let feature = 1 + varint_len(list as u64) + list;
        let entry = self.key.len + 1 + varint_len(feature as u64) + feature;
        out[pos] = 0x0a;
        let mut at = put_varint_at(out, pos + 1, entry as u64);
        at = self.key.put(out, at);
        out[at] = 0x12;
        at = put_varint_at(out, at + 1, feature as u64);
        out[at] = self.packed.layout.tag;
        at = put_varint_at(out, at + 1, list as u64);
        values.put_strings_at(out, at)
    }
}

/// A bytes entry. Values shorter than `short_below` bytes make every length
/// in the prefix one byte, so the prefix for `len` is `short` (made for length
/// 0) with `len` added to the bytes at `length_at`.
struct BytesPlan {
    layout: EntryLayout,
    short: Prefix,
    short_below: usize,
    length_at: [usize; 4],
    /// The prefix for each length below `short_below`, [`ROW_SLACK`] bytes
    /// apart, where `short` fits in that many (else empty): one block copied
    /// rather than four lengths stored after it.
    prefixes: Vec<u8>,
}

impl BytesPlan {
    fn new(layout: &EntryLayout) -> Self {
        let key = layout.key_field.len();
        // entry = key + 2 + feature, feature = 2 + list, list = 2 + len:
        // all below 0x80 while len < 0x80 - 6 - key.
        let short_below = (0x80 - 6usize).saturating_sub(key);
        let short = Prefix::new(scalar_prefix(layout, 0));
        // 0a [entry] key 12 [feature] tag [list] 0a [len]
        let length_at = [1, key + 3, key + 5, key + 7];
        let mut prefixes = Vec::new();
        if short.len <= ROW_SLACK {
            for len in 0..short_below {
                let start = prefixes.len();
                prefixes.extend_from_slice(&short.block);
                for offset in length_at {
                    prefixes[start + offset] += len as u8;
                }
            }
        }
        BytesPlan {
            layout: layout.clone(),
            short,
            short_below,
            length_at,
            prefixes,
        }
    }

    /// Writes the entry for `value` at `out[pos..]` and returns the position
    /// after it; `readable` is `value` followed by whatever bytes may be read
    /// after it.
    #[inline(always)]
    fn put(&self, out: &mut [u8], pos: usize, value: &[u8], readable: &[u8]) -> usize {
        let len = value.len();
        let at = self.put_prefix(out, pos, len);
        if len <= 16 && readable.len() >= 16 {
            out[at..at + 16].copy_from_slice(&readable[..16]);
        } else {
            out[at..at + len].copy_from_slice(value);
        }
        at + len
    }

    /// Writes the entry's bytes before a value of `len` bytes at `out[pos..]`
    /// and returns the position after them. A packed list's entry has the
    /// same bytes before its packed values, `len` bytes of them.
    #[inline(always)]
    fn put_prefix(&self, out: &mut [u8], pos: usize, len: usize) -> usize {
        if len < self.short_below {
            if !self.prefixes.is_empty() {
                let at = len * ROW_SLACK;
                out[pos..pos + ROW_SLACK].copy_from_slice(&self.prefixes[at..at + ROW_SLACK]);
                return pos + self.short.len;
            }
            let end = self.short.put(out, pos);
            // Stored, not added in place: reading back a byte of the block
            // just stored stalls store forwarding (it was 10% of the time).
            for offset in self.length_at {
                out[pos + offset] = self.short.byte(offset) + len as u8;
            }
            end
        } else {
            let (list, feature, entry) = bytes_entry_sizes(&self.layout, len);
            out[pos] = 0x0a;
            let mut at = put_varint_at(out, pos + 1, entry as u64);
            let key = &self.layout.key_field;
            out[at..at + key.len()].copy_from_slice(key);
            out[at + key.len()] = 0x12;
            at = put_varint_at(out, at + key.len() + 1, feature as u64);
            out[at] = self.layout.tag;
            at = put_varint_at(out, at + 1, list as u64);
            out[at] = 0x0a;
            put_varint_at(out, at + 1, len as u64)
        }
    }
}

/// The bits of a `width`-byte cell in the 16 bytes read from its start as a
/// little-endian integer (all of them from 16 bytes on): computed once per
/// column, as a shift by a variable amount of a `u128` costs a dozen instructions.
fn cell_mask(width: usize) -> u128 {
    if width >= 16 {
        u128::MAX
    } else {
        (1u128 << (8 * width)) - 1
    }
}

/// Cell `row` of NumPy `S` data of `width`-byte cells without its trailing
/// NULs, and the readable bytes from its start (16 or more where the data
/// allows, so that short values can be moved as one fixed-size block);
/// `mask` is [`cell_mask`] of `width`.
#[inline(always)]
fn fixed_cell(data: &[u8], width: usize, mask: u128, row: usize) -> (&[u8], &[u8]) {
    let start = row * width;
    let readable = &data[start..data.len().min(start + width.max(16))];
    let len = if width <= 16 && readable.len() >= 16 {
        // The cell as a little-endian integer: its highest nonzero byte is the value's last.
        let cell = u128::from_le_bytes(readable[..16].try_into().unwrap()) & mask;
        (128 - cell.leading_zeros() as usize).div_ceil(8)
    } else {
        let cell = &readable[..width];
        cell.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)
    };
    (&readable[..len], readable)
}

/// The most bytes a varint takes.
const MAX_VARINT: usize = 10;

/// `floats` as a packed FloatList holds them: little-endian, back to back.
fn float_bytes(floats: &[f32]) -> Cow<'_, [u8]> {
    if cfg!(target_endian = "little") {
        // SAFETY: the bytes are those of `floats` (`size_of_val` of them),
        // borrowed for as long as it is: an `f32` has no padding and any
        // byte is a valid `u8`, whose alignment (1) every address meets.
        let bytes = unsafe {
            std::slice::from_raw_parts(floats.as_ptr().cast::<u8>(), size_of_val(floats))
        };
        Cow::Borrowed(bytes)
    } else {
        Cow::Owned(floats.iter().flat_map(|x| x.to_le_bytes()).collect())
    }
}

impl<'a> RowPlan<'a> {
    /// The plan for `columns` under `layouts` (both in key order); with
    /// `wrap`, rows are Examples, else bare feature maps.
    pub fn new(layouts: &[&EntryLayout], columns: &[ColumnValues<'a>], wrap: bool) -> Self {
        let mut row_bound = 1 + MAX_VARINT; // the Example's wrapper
        let mut widths = Widths::default();
        let columns = layouts
            .iter()
            .zip(columns)
            .map(|(layout, c)| {
                let width = widths.of(c);
                let scalar = (width == Some(1))
                    .then(|| ScalarValues::of(c.values))
                    .flatten();
                let floats = match c.values {
                    Values::Float(x) => width.map(|width| (x, width)),
                    _ => None,
                };
                let (column, bound) = match (floats, scalar) {
                    // A packed list's entry has the bytes of a scalar's as long as its values.
                    (Some((x, width)), _) => {
                        let prefix = Prefix::new(scalar_prefix(layout, 4 * width));
                        let bound = prefix.len + 4 * width;
                        (PlannedColumn::Float(prefix, float_bytes(x), width), bound)
                    }
                    (_, Some(ScalarValues::Int64(x))) => {
                        let prefixes: Vec<Prefix> = (0..=MAX_VARINT)
                            .map(|n| Prefix::new(scalar_prefix(layout, n)))
                            .collect();
                        let bound = prefixes[MAX_VARINT].len + MAX_VARINT;
                        (PlannedColumn::Int64(prefixes, x), bound)
                    }
                    (_, Some(ScalarValues::Bytes(x))) => (
                        PlannedColumn::Bytes(BytesPlan::new(layout), x),
                        bytes_bound(layout),
                    ),
                    (_, Some(ScalarValues::Offsets(x))) => (
                        PlannedColumn::Offsets(BytesPlan::new(layout), x),
                        bytes_bound(layout),
                    ),
                    (_, Some(ScalarValues::FixedBytes { data, width })) => (
                        PlannedColumn::FixedBytes(
                            BytesPlan::new(layout),
                            data,
                            width,
                            cell_mask(width),
                        ),
                        bytes_bound(layout) + width,
                    ),
                    // 0a [entry] key 12 [feature] tag [list] 0a [packed]: the
                    // values themselves are bounded per range of rows.
                    (None, None) => (
                        PlannedColumn::List(ListPlan::new(layout, *c)),
                        layout.key_field.len() + 4 + 4 * MAX_VARINT,
                    ),
                };
                row_bound += bound;
                column
            })
            .collect();
        RowPlan {
            columns,
            wrap,
            row_bound,
        }
    }

    /// The most bytes rows `rows` take (less than [`ROW_SLACK`] more is
    /// needed past the last row's end).
    pub fn bound(&self, rows: std::ops::Range<usize>) -> usize {
        let strings: usize = self
            .columns
            .iter()
            .map(|c| match c {
                PlannedColumn::Bytes(_, x) => x[rows.clone()].iter().map(|b| b.len()).sum(),
                PlannedColumn::Offsets(_, x) => x.byte_len(rows.start, rows.end),
                PlannedColumn::List(ListPlan { column: c, .. }) => {
                    let (start, end) = (c.splits[rows.start], c.splits[rows.end]);
                    c.values.range(start as usize, end as usize).put_bound()
                }
                _ => 0,
            })
            .sum();
        rows.len() * self.row_bound + strings
    }

    /// Writes row `row` at the start of `out`, which holds at least
    /// `bound(row..row + 1) + ROW_SLACK` bytes (those past the row may be
    /// overwritten), and returns its length. `map_header` is the guess of the
    /// bytes the length of the row's map takes (1 for a first row), which the
    /// row leaves as the next row's guess: the bytes are the same whatever the
    /// guess.
    #[inline]
    pub fn put_row(&self, out: &mut [u8], row: usize, map_header: &mut usize) -> usize {
        // The map goes after room for its length, as many bytes as the row
        // before needed, and moves only where this row needs another count.
        // Room for one byte moved every map of 128 bytes or more: in a
        // profile of writes of rows with lists (about 140 bytes), the moves
        // fell from 3.9% to 1.2% of all samples (benchmarks/README.md).
        let start = if self.wrap { 1 + *map_header } else { 0 };
        let mut pos = start;
        for column in &self.columns {
            pos = match column {
                PlannedColumn::Float(prefix, x, 1) => {
                    let at = prefix.put(out, pos);
                    out[at..at + 4].copy_from_slice(&x[4 * row..4 * row + 4]);
                    at + 4
                }
                PlannedColumn::Float(prefix, x, width) => {
                    let at = prefix.put(out, pos);
                    let len = 4 * width;
                    let start = row * len;
                    // A short row moves as one 16-byte block where the values
                    // go on that far (the next field overwrites the excess).
                    if len <= 16 && x.len() >= start + 16 {
                        out[at..at + 16].copy_from_slice(&x[start..start + 16]);
                    } else {
                        out[at..at + len].copy_from_slice(&x[start..start + len]);
                    }
                    at + len
                }
                PlannedColumn::Int64(prefixes, x) => {
                    let value = x[row] as u64;
                    let at = prefixes[varint_len(value)].put(out, pos);
                    put_varint_at(out, at, value)
                }
                PlannedColumn::Bytes(plan, x) => plan.put(out, pos, x[row], x[row]),
                PlannedColumn::Offsets(plan, x) => {
                    let (value, readable) = x.get(row);
                    plan.put(out, pos, value, readable)
                }
                PlannedColumn::FixedBytes(plan, data, width, mask) => {
                    let (value, readable) = fixed_cell(data, *width, *mask, row);
                    plan.put(out, pos, value, readable)
                }
                PlannedColumn::List(plan) => plan.put(out, pos, row),
            };
        }
        if !self.wrap {
            return pos;
        }
        let map_len = pos - start;
        let header = varint_len(map_len as u64);
        if header != *map_header {
            out.copy_within(start..pos, 1 + header);
            *map_header = header;
        }
        out[0] = 0x0a;
        put_varint_at(out, 1, map_len as u64);
        1 + header + map_len
    }
}

/// The most bytes a bytes entry takes beside its value.
fn bytes_bound(layout: &EntryLayout) -> usize {
    // 0a [entry] key 12 [feature] tag [list] 0a [len]
    layout.key_field.len() + 5 + 4 * MAX_VARINT
}

/// The sizes of one entry of a row, computed once.
#[derive(Clone, Copy, Debug, Default)]
pub struct EntrySize {
    packed: usize,
    list: usize,
    feature: usize,
    entry: usize,
}

#[inline]
fn put_varint_fast(out: &mut Vec<u8>, value: usize) {
    if value < 0x80 {
        out.push(value as u8);
    } else {
        put_varint(out, value as u64);
    }
}

impl Values<'_> {
    /// `(packed payload, list message)` sizes.
    #[inline]
    fn sizes(&self) -> (usize, usize) {
        let packed = self.packed_len();
        let list = match self {
            Values::Bytes(_) | Values::Offsets(_) | Values::FixedBytes { .. } => self.list_len(),
            _ if self.is_empty() => 0,
            _ => len_field_size(1, packed),
        };
        (packed, list)
    }
}

/// Writes one message of map entries (with `wrap`, the Example around them).
/// Entries must be in key order; `None` values write a Feature with no kind.
/// `sizes` is scratch space, reused between rows so that a row allocates nothing.
pub fn put_row(
    out: &mut Vec<u8>,
    entries: &[(&EntryLayout, Option<Values<'_>>)],
    wrap: bool,
    sizes: &mut Vec<EntrySize>,
) {
    sizes.clear();
    let mut map_len = 0;
    for (layout, values) in entries {
        let (packed, list) = values.as_ref().map_or((0, 0), Values::sizes);
        let feature = if values.is_some() {
            1 + varint_len(list as u64) + list
        } else {
            0
        };
        let entry = layout.key_field.len() + 1 + varint_len(feature as u64) + feature;
        map_len += 1 + varint_len(entry as u64) + entry;
        sizes.push(EntrySize {
            packed,
            list,
            feature,
            entry,
        });
    }
    out.reserve(map_len + 11);
    if wrap {
        out.push(0x0a);
        put_varint_fast(out, map_len);
    }
    for ((layout, values), size) in entries.iter().zip(sizes.iter()) {
        out.push(0x0a);
        put_varint_fast(out, size.entry);
        out.extend_from_slice(&layout.key_field);
        out.push(0x12);
        put_varint_fast(out, size.feature);
        if let Some(values) = values {
            out.push(layout.tag);
            put_varint_fast(out, size.list);
            values.put_list_sized(out, size.packed);
        }
    }
}

/// Writes a feature map (an OFRecord, or TensorFlow's `Features`), and with
/// `wrap` the Example around it. Entries must be in key order.
pub fn put_features(
    out: &mut Vec<u8>,
    entries: &[(&[u8], Option<Values<'_>>)],
    schema: Schema,
    wrap: bool,
) -> Result<(), Malformed> {
    let layouts = entries
        .iter()
        .map(|(key, values)| EntryLayout::new(key, values.as_ref().map(Values::kind), schema))
        .collect::<Result<Vec<_>, _>>()?;
    let row: Vec<(&EntryLayout, Option<Values<'_>>)> = layouts
        .iter()
        .zip(entries)
        .map(|(layout, (_, values))| (layout, *values))
        .collect();
    put_row(out, &row, wrap, &mut Vec::new());
    Ok(())
}

/// Writes a feature map without the Example around it.
pub fn put_feature_map(
    out: &mut Vec<u8>,
    entries: &[(&[u8], Option<Values<'_>>)],
    schema: Schema,
) -> Result<(), Malformed> {
    put_features(out, entries, schema, false)
}

/// Writes an Example (`Example { features { feature: entries } }`), entries in key order.
pub fn put_example(
    out: &mut Vec<u8>,
    entries: &[(&[u8], Option<Values<'_>>)],
) -> Result<(), Malformed> {
    put_features(out, entries, Schema::TensorFlow, true)
}

/// A feature list for encoding: its steps (`None`: a Feature with no kind).
pub type Steps<'a> = Vec<Option<Values<'a>>>;

fn feature_list_len(steps: &Steps<'_>) -> usize {
    steps
        .iter()
        .map(|s| len_field_size(1, s.as_ref().map_or(0, Values::feature_len)))
        .sum()
}

/// Writes a SequenceExample with its `context` and `feature_lists`, both sorted by key.
pub fn put_sequence_example(
    out: &mut Vec<u8>,
    context: &[(&[u8], Option<Values<'_>>)],
    lists: &[(&[u8], Steps<'_>)],
) -> Result<(), Malformed> {
    put_example(out, context)?;
    let entry_len = |key: &[u8], steps: &Steps<'_>| {
        len_field_size(1, key.len()) + len_field_size(2, feature_list_len(steps))
    };
    let lists_len: usize = lists
        .iter()
        .map(|(k, s)| len_field_size(1, entry_len(k, s)))
        .sum();
    put_len_header(out, 2, lists_len);
    for (key, steps) in lists {
        put_len_header(out, 1, entry_len(key, steps));
        put_len_header(out, 1, key.len());
        out.extend_from_slice(key);
        put_len_header(out, 2, feature_list_len(steps));
        for step in steps {
            put_len_header(out, 1, step.as_ref().map_or(0, Values::feature_len));
            if let Some(values) = step {
                values.put_feature(out, Schema::TensorFlow)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::*;

    #[test]
    fn offset_bytes_are_checked_when_made() {
        let data = b"abcdef";
        let strings = OffsetBytes::new(&[0, 2, 2, 6], data).unwrap();
        assert_eq!(
            strings.iter().collect::<Vec<_>>(),
            [&b"ab"[..], b"", b"cdef"]
        );
        assert_eq!(strings.range(1, 3).byte_len(0, 2), 4);
        let mut list = Vec::new();
        Values::Offsets(strings).put_list(&mut list);
        let mut expected = Vec::new();
        Values::Bytes(&[b"ab", b"", b"cdef"]).put_list(&mut expected);
        assert_eq!(list, expected);
        for bad in [&[][..], &[0, 7], &[-1, 2], &[0, 3, 2]] {
            assert!(OffsetBytes::new(bad, data).is_err(), "{bad:?}");
        }
    }

    /// `blobs` as Arrow lays strings out: offsets, and the data end to end.
    fn arrow_layout(blobs: &[&[u8]]) -> (Vec<i64>, Vec<u8>) {
        let offsets = std::iter::once(0)
            .chain(blobs.iter().scan(0, |end, b| {
                *end += b.len() as i64;
                Some(*end)
            }))
            .collect();
        (offsets, blobs.concat())
    }

    #[test]
    fn row_plan_writes_scalars_as_put_row_does() {
        let ints: Vec<i64> = vec![0, 1, 127, 128, -1, i64::MAX, i64::MIN, 300, 1 << 35];
        let floats: Vec<f32> = (0..ints.len()).map(|i| i as f32 * 0.25 - 1.0).collect();
        let long = [b'z'; 200]; // a two-byte length
        let blobs: Vec<&[u8]> = (0..ints.len())
            .map(|i| {
                if i == 3 {
                    &long[..]
                } else {
                    &b"abcdefgh"[..i % 8]
                }
            })
            .collect();
        // Width 130: lengths around the last one whose entry has one-byte
        // lengths (118 for key "z"). Width 7: cells read as one 16-byte word,
        // an inner NUL kept, and the last cells too near the end for that.
        let fixed_columns: [(usize, [usize; 9]); 2] = [
            (130, [0, 1, 4, 117, 118, 119, 120, 129, 130]),
            (7, [0, 1, 2, 3, 7, 6, 5, 4, 7]),
        ];
        for ((width, fixed_lens), (schema, wrap)) in fixed_columns.iter().flat_map(|f| {
            [
                (f, (Schema::TensorFlow, true)),
                (f, (Schema::OneFlow, false)),
            ]
        }) {
            let (width, fixed_lens) = (*width, fixed_lens);
            let fixed: Vec<u8> = fixed_lens
                .iter()
                .flat_map(|&len| {
                    let mut c = vec![0u8; width];
                    c[..len].fill(b'q');
                    if len >= 3 {
                        c[1] = 0;
                    }
                    c
                })
                .collect();
            // The blobs again, laid out as Arrow lays strings out.
            let (offsets, data) = arrow_layout(&blobs);
            let offset_bytes = OffsetBytes::new(&offsets, &data).unwrap();
            // The first key is too long for any bytes entry to have one-byte lengths.
            let long_key = [b'a'; 130];
            let keys: [&[u8]; 5] = [&long_key, b"bb", b"feature_with_a_long_name", b"z", b"zz"];
            let kinds = [
                Kind::Bytes,
                Kind::Float,
                Kind::Int64,
                Kind::Bytes,
                Kind::Bytes,
            ];
            let layouts: Vec<EntryLayout> = keys
                .iter()
                .zip(kinds)
                .map(|(k, kind)| EntryLayout::new(k, Some(kind), schema).unwrap())
                .collect();
            let refs: Vec<&EntryLayout> = layouts.iter().collect();
            let one_each: Vec<i64> = (0..=ints.len() as i64).collect();
            let columns = [
                Values::Bytes(&blobs),
                Values::Float(&floats),
                Values::Int64(&ints),
                Values::FixedBytes {
                    data: &fixed,
                    width,
                },
                Values::Offsets(offset_bytes),
            ]
            .map(|values| ColumnValues {
                values,
                splits: &one_each,
                present: None,
            });
            let plan = RowPlan::new(&refs, &columns, wrap);
            assert!(plan
                .columns
                .iter()
                .all(|c| !matches!(c, PlannedColumn::List(..))));
            for row in 0..ints.len() {
                let mut planned = vec![0xee; plan.bound(row..row + 1) + ROW_SLACK];
                let len = plan.put_row(&mut planned, row, &mut 1);
                planned.truncate(len);
                let values = [
                    Values::Bytes(&blobs[row..row + 1]),
                    Values::Float(&floats[row..row + 1]),
                    Values::Int64(&ints[row..row + 1]),
                    Values::FixedBytes {
                        data: &fixed[row * width..(row + 1) * width],
                        width,
                    },
                    Values::Bytes(&blobs[row..row + 1]),
                ];
                let entries: Vec<(&EntryLayout, Option<Values<'_>>)> = layouts
                    .iter()
                    .zip(values)
                    .map(|(l, v)| (l, Some(v)))
                    .collect();
                let mut generic = Vec::new();
                put_row(&mut generic, &entries, wrap, &mut Vec::new());
                assert_eq!(planned, generic, "row {row}, width {width}, wrap {wrap}");
            }
        }
    }

    #[test]
    fn row_plan_writes_lists_and_missing_features_as_put_row_does() {
        // Rows of 0 to 5 values (row 2 lacks every feature), values at the
        // edges of their encodings: negative ints take ten bytes, a 200-byte
        // string a two-byte length, strings near the data's end too close for
        // a 16-byte move.
        let splits: Vec<i64> = vec![0, 1, 4, 4, 4, 9, 11];
        let present = [true, true, false, true, true, true];
        let rows = present.len();
        let ints: Vec<i64> = vec![0, -1, 127, 128, i64::MIN, 300, 1 << 35, 5, -7, 1, 2];
        let int32s: Vec<i32> = ints.iter().map(|&x| x as i32).collect();
        let floats: Vec<f32> = (0..ints.len()).map(|i| i as f32 - 2.5).collect();
        let doubles: Vec<f64> = floats.iter().map(|&x| f64::from(x) / 3.0).collect();
        let long = [b'y'; 200];
        let blobs: Vec<&[u8]> = (0..ints.len())
            .map(|i| {
                if i == 5 {
                    &long[..]
                } else {
                    &b"abcdefghijklmnopq"[..(i * 5) % 18]
                }
            })
            .collect();
        let (offsets, data) = arrow_layout(&blobs);
        let offset_bytes = OffsetBytes::new(&offsets, &data).unwrap();
        let width = 3;
        let fixed: Vec<u8> = (0..ints.len())
            .flat_map(|i| [b'a', if i % 2 == 0 { 0 } else { b'b' }, 0])
            .collect();
        let long_key = [b'k'; 130];
        for (schema, wrap) in [(Schema::TensorFlow, true), (Schema::OneFlow, false)] {
            let mut columns: Vec<(&[u8], Values<'_>)> = vec![
                (&long_key, Values::Bytes(&blobs)),
                (b"f", Values::Float(&floats)),
                (b"i", Values::Int64(&ints)),
                (b"o", Values::Offsets(offset_bytes)),
                (
                    b"s",
                    Values::FixedBytes {
                        data: &fixed,
                        width,
                    },
                ),
            ];
            if schema == Schema::OneFlow {
                columns.extend([
                    (&b"t"[..], Values::Int32(&int32s)),
                    (b"u", Values::Double(&doubles)),
                ]);
            }
            let layouts: Vec<EntryLayout> = columns
                .iter()
                .map(|(key, v)| EntryLayout::new(key, Some(v.kind()), schema).unwrap())
                .collect();
            let refs: Vec<&EntryLayout> = layouts.iter().collect();
            let planned: Vec<ColumnValues<'_>> = columns
                .iter()
                .map(|&(_, values)| ColumnValues {
                    values,
                    splits: &splits,
                    present: Some(&present),
                })
                .collect();
            let plan = RowPlan::new(&refs, &planned, wrap);
            // Each row's map length takes two bytes but row 2's (no feature),
            // so the guess carried from row to row is wrong at rows 0, 2 and 3.
            let mut map_header = 1;
            for row in 0..rows {
                let mut out = vec![0xee; plan.bound(row..row + 1) + ROW_SLACK];
                let len = plan.put_row(&mut out, row, &mut map_header);
                out.truncate(len);
                let (start, end) = (splits[row] as usize, splits[row + 1] as usize);
                let entries: Vec<(&EntryLayout, Option<Values<'_>>)> = if present[row] {
                    layouts
                        .iter()
                        .zip(&columns)
                        .map(|(l, (_, v))| (l, Some(v.range(start, end))))
                        .collect()
                } else {
                    Vec::new()
                };
                let mut expected = Vec::new();
                put_row(&mut expected, &entries, wrap, &mut Vec::new());
                assert_eq!(out, expected, "row {row}, wrap {wrap}");
            }
            // All rows at once, in a buffer of exactly the bound: back to back.
            let mut all = vec![0xee; plan.bound(0..rows) + ROW_SLACK];
            let (mut pos, mut map_header) = (0, 1);
            for row in 0..rows {
                pos += plan.put_row(&mut all[pos..], row, &mut map_header);
            }
            assert!(pos <= plan.bound(0..rows));
        }
    }

    #[test]
    fn short_varints_are_written_as_any_varint() {
        // Each side of every length's bounds, the largest values and negative ones.
        let mut values: Vec<u64> = vec![0, 1, u64::MAX, i64::MIN as u64, -1i64 as u64];
        for bits in (7..64).step_by(7) {
            values.extend([(1u64 << bits) - 1, 1 << bits, (1 << bits) + 1]);
        }
        for value in values {
            let mut expected = Vec::new();
            put_varint(&mut expected, value);
            let mut out = [0xee; MAX_VARINT + 1];
            let end = put_short_varint_at(&mut out, 1, value);
            assert_eq!(out[1..end], expected[..], "{value}");
            assert_eq!(out[0], 0xee);
        }
    }

    #[test]
    fn row_plan_writes_rows_back_to_back_whatever_their_length_takes() {
        // Maps whose lengths take one, two and three bytes, in every order:
        // the guess each row leaves for the next (the bytes the row before
        // needed) is too small, too large and right, and every row is the
        // general encoder's.
        let sizes = [5, 200, 20_000, 0, 30_000, 100, 100, 300, 1, 40_000];
        let values: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![b'v'; n]).collect();
        let blobs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        let one_each: Vec<i64> = (0..=blobs.len() as i64).collect();
        let layout = EntryLayout::new(b"image", Some(Kind::Bytes), Schema::TensorFlow).unwrap();
        let column = ColumnValues {
            values: Values::Bytes(&blobs),
            splits: &one_each,
            present: None,
        };
        let plan = RowPlan::new(&[&layout], &[column], true);
        let rows = blobs.len();
        let mut all = vec![0xee; plan.bound(0..rows) + ROW_SLACK];
        let (mut pos, mut map_header) = (0, 1);
        for row in 0..rows {
            let len = plan.put_row(&mut all[pos..], row, &mut map_header);
            let mut expected = Vec::new();
            let entry = [(&layout, Some(Values::Bytes(&blobs[row..row + 1])))];
            put_row(&mut expected, &entry, true, &mut Vec::new());
            assert_eq!(all[pos..pos + len], expected[..], "row {row}");
            // The count this row needed is the next row's guess.
            assert_eq!(
                map_header,
                varint_len(expected.len() as u64 - 1 - map_header as u64)
            );
            pos += len;
        }
        assert!(pos <= plan.bound(0..rows));
        // A first guess larger than any row needs.
        let mut one = vec![0xee; plan.bound(0..1) + ROW_SLACK];
        let len = plan.put_row(&mut one, 0, &mut 3);
        let mut expected = Vec::new();
        let entry = [(&layout, Some(Values::Bytes(&blobs[..1])))];
        put_row(&mut expected, &entry, true, &mut Vec::new());
        assert_eq!(one[..len], expected[..]);
    }

    #[test]
    fn row_plan_writes_rows_of_equally_many_floats_as_put_row_does() {
        // A 2-D array's rows (width 3, and a width whose packed bytes take a
        // two-byte length), one float a row, and splits that only start
        // evenly: each row as the general encoder writes it.
        let floats: Vec<f32> = (0..120).map(|i| i as f32 * 0.5 - 7.0).collect();
        for (schema, wrap) in [(Schema::TensorFlow, true), (Schema::OneFlow, false)] {
            let layout = EntryLayout::new(b"embedding", Some(Kind::Float), schema).unwrap();
            for splits in [
                (0..=40).map(|i| 3 * i).collect::<Vec<i64>>(),
                vec![0, 40, 80, 120],
                (0..=120).collect(),
                vec![0, 3, 6, 10],
            ] {
                let column = ColumnValues {
                    values: Values::Float(&floats[..*splits.last().unwrap() as usize]),
                    splits: &splits,
                    present: None,
                };
                let plan = RowPlan::new(&[&layout], &[column], wrap);
                let rows = splits.len() - 1;
                let mut all = vec![0xee; plan.bound(0..rows) + ROW_SLACK];
                let (mut pos, mut map_header) = (0, 1);
                for row in 0..rows {
                    let len = plan.put_row(&mut all[pos..], row, &mut map_header);
                    let (start, end) = (splits[row] as usize, splits[row + 1] as usize);
                    let values = Values::Float(&floats[start..end]);
                    let mut expected = Vec::new();
                    put_row(
                        &mut expected,
                        &[(&layout, Some(values))],
                        wrap,
                        &mut Vec::new(),
                    );
                    assert_eq!(all[pos..pos + len], expected[..], "row {row} of {splits:?}");
                    pos += len;
                }
                assert!(pos <= plan.bound(0..rows));
            }
        }
    }
}
