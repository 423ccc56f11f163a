//! Short byte strings that repeat in a column (class names, labels,
//! enum-like values: the common case for short strings), found with the GIL
//! released, so that Python makes one `bytes` object per distinct value and
//! hands out references to it, rather than look each value up itself.

/// The bytes read as one move where a short value is read whatever its
/// length (see [`wide_from`]); the longest value that is shared.
pub const WIDE: usize = 16;
const SHARED_UP_TO: usize = WIDE;

/// The `WIDE` bytes of `within` from the start of `value` (a slice of it),
/// where `within` holds that many: a short value read as them, the bytes
/// past it masked off or overwritten, costs one move whatever its length,
/// where a branch on the length mispredicts on values of mixed lengths.
#[inline(always)]
pub fn wide_from<'a>(value: &[u8], within: &'a [u8]) -> Option<&'a [u8; WIDE]> {
    let from = (value.as_ptr() as usize).wrapping_sub(within.as_ptr() as usize);
    let wide = within.get(from..from.wrapping_add(WIDE))?;
    Some(wide.try_into().expect("WIDE bytes"))
}

/// A value of up to 16 bytes, told apart from every other by its length
/// and its bytes, zero-filled to 16.
#[derive(Clone, Copy, PartialEq, Eq)]
struct ShortKey {
    len: usize,
    bytes: u128,
}

/// For each length up to 16, the bits of a 16-byte word that a value of that length fills.
const KEPT: [u128; SHARED_UP_TO + 1] = {
    let mut kept = [u128::MAX; SHARED_UP_TO + 1];
    let mut len = 0;
    while len < SHARED_UP_TO {
        kept[len] = (1u128 << (8 * len)) - 1;
        len += 1;
    }
    kept
};

impl ShortKey {
    /// None for values longer than [`SHARED_UP_TO`]. `value` is a slice of
    /// `within`, read from it as one word where it can be (see [`wide_from`]).
    #[inline(always)]
    fn of(value: &[u8], within: &[u8]) -> Option<ShortKey> {
        let len = value.len();
        if len > SHARED_UP_TO {
            return None;
        }
        let word = match wide_from(value, within) {
            Some(wide) => u128::from_le_bytes(*wide),
            None => {
                let mut word = [0; SHARED_UP_TO];
                word[..len].copy_from_slice(value);
                u128::from_le_bytes(word)
            }
        };
        Some(ShortKey {
            len,
            bytes: word & KEPT[len],
        })
    }

    /// A well-mixed hash, of which the table takes the top `TABLE_BITS`.
    #[inline(always)]
    fn slot(&self) -> usize {
        let (low, high) = (self.bytes as u64, (self.bytes >> 64) as u64);
        let mixed =
            (low ^ high.rotate_left(29) ^ self.len as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (mixed >> (64 - TABLE_BITS)) as usize
    }
}

/// A column's byte strings as its distinct values and, for each value, the
/// index of its distinct one. Only values of up to [`SHARED_UP_TO`] bytes are
/// shared: each longer one is a distinct value of its own.
#[derive(Debug, PartialEq)]
pub struct Interned {
    /// The index, among the values, of each distinct value's first occurrence.
    pub firsts: Vec<u32>,
    /// Each value's index in `firsts`.
    pub codes: Vec<u32>,
}

/// Distinct values at most, and the slots of the table that finds them
/// (half full at most, so that a probe seldom goes past its first slot; 32
/// KB, in a core's L1 and L2 caches).
const MOST_DISTINCT: usize = 4096;
const TABLE_BITS: u32 = 13;
const EMPTY: u32 = u32::MAX;

/// The values' distinct ones, where at most half of them (and no more than
/// `MOST_DISTINCT`) are distinct: None where sharing would save too little
/// to pay for itself (names of files, say, each different), found once the
/// distinct values pass that bound, not after reading them all.
pub fn intern(values: &[&[u8]], within: &[u8]) -> Option<Interned> {
    let most = (values.len() / 2).min(MOST_DISTINCT);
    if most == 0 || values.len() >= EMPTY as usize {
        return None;
    }
    let mut table = vec![EMPTY; 1 << TABLE_BITS];
    // The key of each distinct value, where it is short (a placeholder else,
    // which no table slot names).
    let mut keys: Vec<ShortKey> = Vec::with_capacity(most + 1);
    let mut firsts: Vec<u32> = Vec::with_capacity(most + 1);
    let mut codes: Vec<u32> = Vec::with_capacity(values.len());
    let placeholder = ShortKey {
        len: usize::MAX,
        bytes: 0,
    };
    for (index, value) in values.iter().enumerate() {
        let code = match ShortKey::of(value, within) {
            Some(key) => {
                let mut slot = key.slot();
                loop {
                    match table[slot] {
                        EMPTY => {
                            table[slot] = firsts.len() as u32;
                            break None;
                        }
                        seen if keys[seen as usize] == key => break Some(seen),
                        _ => slot = (slot + 1) & ((1 << TABLE_BITS) - 1),
                    }
                }
                .unwrap_or_else(|| {
                    keys.push(key);
                    firsts.push(index as u32);
                    firsts.len() as u32 - 1
                })
            }
            None => {
                keys.push(placeholder);
                firsts.push(index as u32);
                firsts.len() as u32 - 1
            }
        };
        if firsts.len() > most {
            return None;
        }
        codes.push(code);
    }
    Some(Interned { firsts, codes })
}

/// As [`intern`], for values told apart by a key each (an object's
/// address, where values that repeat are one object): the first value of
/// each distinct key, and each value's code. None where more than half the
/// values (or [`MOST_DISTINCT`]) are distinct.
pub fn intern_keys(keys: &[usize]) -> Option<Interned> {
    let most = (keys.len() / 2).min(MOST_DISTINCT);
    if most == 0 || keys.len() >= EMPTY as usize {
        return None;
    }
    let mut table = vec![EMPTY; 1 << TABLE_BITS];
    let mut firsts: Vec<u32> = Vec::with_capacity(most + 1);
    let mut codes: Vec<u32> = Vec::with_capacity(keys.len());
    for (index, &key) in keys.iter().enumerate() {
        let mixed = (key as u64 ^ (key as u64 >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut slot = (mixed >> (64 - TABLE_BITS)) as usize;
        let code = loop {
            match table[slot] {
                EMPTY => {
                    table[slot] = firsts.len() as u32;
                    firsts.push(index as u32);
                    break firsts.len() as u32 - 1;
                }
                seen if keys[firsts[seen as usize] as usize] == key => break seen,
                _ => slot = (slot + 1) & ((1 << TABLE_BITS) - 1),
            }
        };
        if firsts.len() > most {
            return None;
        }
        codes.push(code);
    }
    Some(Interned { firsts, codes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The values `interned` stands for.
    fn values_of<'a>(values: &[&'a [u8]], interned: &Interned) -> Vec<&'a [u8]> {
        let codes = interned.codes.iter();
        codes
            .map(|&c| values[interned.firsts[c as usize] as usize])
            .collect()
    }

    /// `values` in one buffer, and where each is in it.
    fn end_to_end(values: &[Vec<u8>]) -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
        let within = values.concat();
        let mut at = 0;
        let ranges = values.iter().map(|v| {
            at += v.len();
            at - v.len()..at
        });
        let ranges = ranges.collect();
        (within, ranges)
    }

    /// Distinct entries `values` need: one per distinct short value, one per long value.
    fn entries(values: &[&[u8]]) -> usize {
        let short: HashSet<&[u8]> = values
            .iter()
            .copied()
            .filter(|v| v.len() <= SHARED_UP_TO)
            .collect();
        short.len() + values.iter().filter(|v| v.len() > SHARED_UP_TO).count()
    }

    /// Every value comes back; equal short values share one distinct value,
    /// no longer one is shared; None exactly where more than half would be
    /// distinct. Columns of every mix of lengths 0-20 over a 3-letter
    /// alphabet (so that values repeat), from a fixed xorshift.
    #[test]
    fn keys_that_repeat_share_a_code() {
        let keys = [7usize, 9, 7, 7, 9, 7, 7, 9];
        let Interned { firsts, codes } = intern_keys(&keys).unwrap();
        assert_eq!(firsts, [0, 1]);
        assert_eq!(codes, [0, 1, 0, 0, 1, 0, 0, 1]);
        for (i, &c) in codes.iter().enumerate() {
            assert_eq!(keys[firsts[c as usize] as usize], keys[i]);
        }
        assert_eq!(intern_keys(&[1, 2, 3, 1]), None); // three distinct of four
        assert_eq!(intern_keys(&[]), None);
        let many: Vec<usize> = (0..20_000).map(|i| i % 5000).collect();
        assert_eq!(intern_keys(&many), None); // more distinct than MOST_DISTINCT
    }

    #[test]
    fn interned_values_come_back() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |below: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        };
        for _ in 0..2000 {
            let (count, longest) = (next(300) as usize, 1 + next(21));
            let owned: Vec<Vec<u8>> = (0..count)
                .map(|_| (0..next(longest)).map(|_| next(3) as u8).collect())
                .collect();
            // End to end, as in a record: values near the end are keyed
            // apart from those with 16 bytes after them.
            let (within, values) = end_to_end(&owned);
            let values: Vec<&[u8]> = values.iter().map(|r| &within[r.clone()]).collect();
            let needed = entries(&values);
            match intern(&values, &within) {
                Some(interned) => {
                    assert_eq!(values_of(&values, &interned), values);
                    assert_eq!(interned.firsts.len(), needed);
                    assert!(needed <= values.len() / 2);
                }
                None => assert!(needed > values.len() / 2 || values.len() < 2),
            }
        }
    }

    #[test]
    fn values_that_differ_only_inside_are_told_apart() {
        // Every byte of a short value counts, read as one word or, near the
        // end of the buffer, byte by byte.
        let values: Vec<Vec<u8>> = (0..=SHARED_UP_TO)
            .flat_map(|len| (0..len).map(move |at| (len, at)))
            .flat_map(|(len, at)| {
                let mut changed = vec![b'a'; len];
                changed[at] = b'b';
                [vec![b'a'; len], changed]
            })
            .collect();
        let thrice: Vec<Vec<u8>> = [&values[..], &values, &values].concat();
        let (within, ranges) = end_to_end(&thrice);
        let thrice: Vec<&[u8]> = ranges.iter().map(|r| &within[r.clone()]).collect();
        let once = &thrice[..values.len()];
        let interned = intern(&thrice, &within).expect("a third of the values distinct");
        assert_eq!(values_of(&thrice, &interned), thrice);
        assert_eq!(interned.firsts.len(), entries(once));
    }

    #[test]
    fn mostly_distinct_values_are_not_interned() {
        let names: Vec<Vec<u8>> = (0..1000).map(|i| format!("{i:08}").into_bytes()).collect();
        let (within, ranges) = end_to_end(&names);
        let values: Vec<&[u8]> = ranges.iter().map(|r| &within[r.clone()]).collect();
        assert!(intern(&values, &within).is_none());
    }
}
