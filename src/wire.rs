//! The protobuf wire format: reading fields one at a time, as protobuf does
//! (unknown fields, groups included, are skipped), and writing the pieces.

/// Bytes that are not valid protobuf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// One field's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Len(&'a [u8]),
    Fixed32(u32),
    /// A (deprecated) group, skipped whole.
    Group,
}

/// Reads fields from a message.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    #[inline]
    pub fn varint(&mut self) -> Result<u64, Malformed> {
        let (value, used) = read_varint(&self.buf[self.pos..])?;
        self.pos += used;
        Ok(value)
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if n > self.buf.len() - self.pos {
            return Err(Malformed("a field runs past the end of its message"));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// The next field as (field number, value), or `None` at the end.
    #[inline]
    pub fn field(&mut self) -> Result<Option<(u32, Value<'a>)>, Malformed> {
        if self.is_empty() {
            return Ok(None);
        }
        let key = self.key()?;
        let number = key >> 3;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => Value::Fixed64(u64::from_le_bytes(self.take(8)?.try_into().unwrap())),
            2 => {
                let len = self.varint()?;
                let len = usize::try_from(len).map_err(|_| Malformed("length too large"))?;
                Value::Len(self.take(len)?)
            }
            3 => {
                self.skip_group(number)?;
                Value::Group
            }
            5 => Value::Fixed32(u32::from_le_bytes(self.take(4)?.try_into().unwrap())),
            _ => return Err(Malformed("invalid wire type")),
        };
        Ok(Some((number as u32, value)))
    }

    /// A field's tag, its number checked (protobuf refuses 0 and numbers past 2^29 - 1).
    #[inline]
    fn key(&mut self) -> Result<u64, Malformed> {
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 || number > u64::from(u32::MAX >> 3) {
            return Err(Malformed("invalid field number"));
        }
        Ok(key)
    }

    /// Skips a group whose start tag (field `number`) was just read, with any
    /// groups nested in it. An explicit stack, not recursion: the nesting comes
    /// from untrusted bytes, and 200 KB of `0x0b` would otherwise overflow the
    /// thread's stack. Deeper than protobuf's limit of 100 is malformed.
    fn skip_group(&mut self, number: u64) -> Result<(), Malformed> {
        let mut open = [0u64; MAX_GROUP_DEPTH];
        open[0] = number;
        let mut depth = 1;
        loop {
            if self.is_empty() {
                return Err(Malformed("unterminated group"));
            }
            // As upb skips a group: a tag must fit 32 bits, but number 0 passes.
            let key = self.varint()?;
            if key > u64::from(u32::MAX) {
                return Err(Malformed("invalid field number"));
            }
            match key & 7 {
                4 if key >> 3 == open[depth - 1] => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(());
                    }
                }
                4 => return Err(Malformed("mismatched end of group")),
                0 => drop(self.varint()?),
                1 => drop(self.take(8)?),
                2 => {
                    let len = usize::try_from(self.varint()?)
                        .map_err(|_| Malformed("length too large"))?;
                    self.take(len)?;
                }
                3 => {
                    if depth == MAX_GROUP_DEPTH {
                        return Err(Malformed(
                            "groups nested more than 100 deep (protobuf's limit)",
                        ));
                    }
                    open[depth] = key >> 3;
                    depth += 1;
                }
                5 => drop(self.take(4)?),
                _ => return Err(Malformed("invalid wire type")),
            }
        }
    }
}

/// How deeply groups may nest, as protobuf's default recursion limit.
pub const MAX_GROUP_DEPTH: usize = 100;

/// Decodes a varint at the start of `buf`: (value, bytes used).
#[inline]
pub fn read_varint(buf: &[u8]) -> Result<(u64, usize), Malformed> {
    if let Some(&b) = buf.first() {
        if b < 0x80 {
            return Ok((u64::from(b), 1));
        }
    }
    let mut value = 0u64;
    for (i, &b) in buf.iter().take(10).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok((value, i + 1));
        }
    }
    Err(if buf.len() < 10 {
        Malformed("truncated varint")
    } else {
        Malformed("varint longer than 10 bytes")
    })
}

/// Counts the varints in a packed run (each ends with a byte below 0x80),
/// refusing one longer than 10 bytes as [`read_varint`] does.
pub fn count_varints(packed: &[u8]) -> Result<usize, Malformed> {
    if packed.last().is_some_and(|&b| b >= 0x80) {
        return Err(Malformed("truncated varint"));
    }
    let count = packed.iter().filter(|&&b| b < 0x80).count();
    // Ten continuation bytes in a row need ten in all: the runs are looked at only then,
    // in one branch-free pass.
    if packed.len() - count >= 10 {
        let (mut run, mut longest) = (0u32, 0u32);
        for &b in packed {
            run = (run + 1) * u32::from(b >> 7);
            longest = longest.max(run);
        }
        if longest >= 10 {
            return Err(Malformed("varint longer than 10 bytes"));
        }
    }
    Ok(count)
}

#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[inline]
pub fn varint_len(value: u64) -> usize {
    // 1 byte per 7 bits, zero still one byte: ceil(bits / 7) as protobuf
    // computes it, with a multiply and a shift instead of a division.
    let log2 = 63 - (value | 1).leading_zeros() as usize;
    (log2 * 9 + 73) / 64
}

/// Writes a LEN field's tag and length (the caller writes the payload).
#[inline]
pub fn put_len_header(out: &mut Vec<u8>, field: u32, len: usize) {
    put_varint(out, u64::from(field << 3 | 2));
    put_varint(out, len as u64);
}

/// Size of a LEN field holding `len` bytes.
#[inline]
pub fn len_field_size(field: u32, len: usize) -> usize {
    varint_len(u64::from(field << 3 | 2)) + varint_len(len as u64) + len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            u64::from(u32::MAX),
            u64::MAX,
            (-1i64) as u64,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            assert_eq!(read_varint(&out).unwrap(), (v, out.len()));
        }
        let mut minus_one = Vec::new();
        put_varint(&mut minus_one, (-1i64) as u64);
        assert_eq!(
            minus_one,
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
    }

    #[test]
    fn varint_len_matches_encoding_for_every_bit_width() {
        for bits in 0..64 {
            for v in [1u64 << bits, (1u64 << bits) - 1, (1u64 << bits) + 1] {
                let mut out = Vec::new();
                put_varint(&mut out, v);
                assert_eq!(varint_len(v), out.len(), "{v}");
            }
        }
        assert_eq!(varint_len(u64::MAX), 10);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(read_varint(&[0x80; 11]).is_err());
        assert!(read_varint(&[0x80]).is_err());
        assert!(Reader::new(&[0x0a, 0x05, 1]).field().is_err());
        assert!(Reader::new(&[0x0f]).field().is_err()); // wire type 7
    }

    #[test]
    fn counting_varints_refuses_what_reading_them_refuses() {
        let mut eleven = vec![0xff; 10];
        eleven.push(0x01);
        for packed in [
            &eleven[..],
            &[
                0x05, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01,
            ],
        ] {
            assert_eq!(
                count_varints(packed),
                Err(Malformed("varint longer than 10 bytes"))
            );
        }
        let ten = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(
            count_varints(&[&ten[..], &ten[..], &[0x05]].concat()),
            Ok(3)
        );
    }

    #[test]
    fn inside_a_group_number_zero_passes_and_a_tag_past_32_bits_does_not() {
        // As upb skips an unknown group.
        assert_eq!(
            Reader::new(&[0x0b, 0x00, 0x00, 0x0c]).field(),
            Ok(Some((1, Value::Group)))
        );
        let past = [0x0b, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x00, 0x0c];
        assert_eq!(
            Reader::new(&past).field(),
            Err(Malformed("invalid field number"))
        );
    }

    #[test]
    fn deep_groups_are_refused_without_recursion() {
        // 200 KB of start-group tags: recursion would overflow the stack.
        let mut r = Reader::new(&[0x0b; 200_000]);
        assert_eq!(
            r.field(),
            Err(Malformed(
                "groups nested more than 100 deep (protobuf's limit)"
            ))
        );
        // 100 levels, closed again, are fine.
        let mut nested = vec![0x0b; MAX_GROUP_DEPTH];
        nested.extend(vec![0x0c; MAX_GROUP_DEPTH]);
        nested.extend([0x10, 0x07]);
        let mut r = Reader::new(&nested);
        assert_eq!(r.field().unwrap(), Some((1, Value::Group)));
        assert_eq!(r.field().unwrap(), Some((2, Value::Varint(7))));
        let mut too_deep = vec![0x0b; MAX_GROUP_DEPTH + 1];
        too_deep.extend(vec![0x0c; MAX_GROUP_DEPTH + 1]);
        assert!(Reader::new(&too_deep).field().is_err());
    }

    #[test]
    fn skips_groups() {
        // field 2 group { field 1 varint 5 } then field 3 varint 7
        let msg = [0x13, 0x08, 0x05, 0x14, 0x18, 0x07];
        let mut r = Reader::new(&msg);
        assert_eq!(r.field().unwrap(), Some((2, Value::Group)));
        assert_eq!(r.field().unwrap(), Some((3, Value::Varint(7))));
        assert_eq!(r.field().unwrap(), None);
    }
}
