//! The schema survey: which features a batch of records holds, of which kinds,
//! how many values each, and whether their byte strings are text. Schema
//! inference, `convert` and `feature_stats` run it over every record of a
//! file, so it is a hot loop: records laid out as protobuf writes them, with
//! the same keys in the same order as the record before, take a path that
//! allocates nothing and looks up no key.

use std::collections::HashMap;

use crate::example::{
    check_feature_entry, dedup, for_each_canonical_entry, for_each_entry, for_each_example_entry,
    Entry, Feature, Kind, Schema,
};
use crate::wire::{Malformed, Reader};

/// What schema inference needs of one feature over a batch of records.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureFacts {
    /// Bit `2 << kind` for every kind seen (`Kind` order); bit 0 for a Feature that sets none.
    pub kinds: u32,
    /// Records holding the feature.
    pub present: u64,
    pub min_values: u64,
    pub max_values: u64,
    /// Every byte string seen is valid UTF-8.
    pub text: bool,
    /// The first record (index in the batch) holding values.
    pub first_with_values: Option<usize>,
}

impl FeatureFacts {
    fn new() -> Self {
        FeatureFacts {
            kinds: 0,
            present: 0,
            min_values: u64::MAX,
            max_values: 0,
            text: true,
            first_with_values: None,
        }
    }
}

/// A batch surveyed.
#[derive(Debug, Default)]
pub struct Survey {
    /// Each feature's key and facts, in order of first appearance.
    pub features: Vec<(Vec<u8>, FeatureFacts)>,
    /// Indices of records that are not such messages.
    pub undecodable: Vec<usize>,
    /// Whether any record is a SequenceExample (a top-level field 2; its
    /// context is surveyed as an Example's features).
    pub sequences: bool,
}

/// Records with more entries than this are looked up by key, not by position.
const POSITIONS: usize = 256;

/// Surveys `records`: Examples (`example`) or bare feature maps (OFRecords).
pub fn survey<'a>(
    records: impl IntoIterator<Item = &'a [u8]>,
    schema: Schema,
    example: bool,
) -> Survey {
    let mut out = Survey::default();
    let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
    // The slots of the last record surveyed by key, position by position: its
    // keys, deduplicated, so no slot appears twice. A record whose keys match
    // them position by position has no repeated key and needs no lookup.
    let mut by_position: Vec<usize> = Vec::new();
    let mut entries: Vec<Entry<'a>> = Vec::new();
    let mut features: Vec<(&'a [u8], usize, Feature<'a>)> = Vec::new();
    let mut strings: Vec<&'a [u8]> = Vec::new();
    for (i, record) in records.into_iter().enumerate() {
        entries.clear();
        let canonical = example && for_each_canonical_entry(record, &mut |e| entries.push(e));
        if !canonical {
            entries.clear();
            // A record laid out canonically is one `features` field: never a sequence.
            if example && !out.sequences {
                let mut r = Reader::new(record);
                while let Ok(Some((n, _))) = r.field() {
                    out.sequences |= n == 2;
                }
            }
            let walked = if example {
                for_each_example_entry(record, &mut |e| entries.push(e))
            } else {
                for_each_entry(record, &mut |e| entries.push(e))
            };
            if walked.is_err() {
                out.undecodable.push(i);
                continue;
            }
        }
        let same_keys = entries.len() == by_position.len()
            && entries
                .iter()
                .zip(&by_position)
                .all(|(e, &slot)| out.features[slot].0 == e.key);
        if !same_keys {
            // A malformed entry that a later one replaces is still malformed: the record is undecodable.
            match dedup(std::mem::take(&mut entries), |e| {
                check_feature_entry(e, schema)
            }) {
                Ok(kept) => entries = kept,
                Err(_) => {
                    out.undecodable.push(i);
                    continue;
                }
            }
        }
        features.clear();
        let decoded: Result<(), Malformed> = entries.iter().try_for_each(|entry| {
            let feature = entry.feature(schema)?;
            features.push((entry.key, feature.count()?, feature));
            Ok(())
        });
        if decoded.is_err() {
            out.undecodable.push(i);
            continue;
        }
        if !same_keys {
            by_position.clear();
            for &(key, ..) in &features {
                // Looked up by slice: a key is copied only the first time it is seen.
                let slot = match index.get(key) {
                    Some(&slot) => slot,
                    None => {
                        out.features.push((key.to_vec(), FeatureFacts::new()));
                        index.insert(key.to_vec(), out.features.len() - 1);
                        out.features.len() - 1
                    }
                };
                by_position.push(slot);
            }
        }
        for (&slot, (_, count, feature)) in by_position.iter().zip(&features) {
            let facts = &mut out.features[slot].1;
            facts.kinds |= feature.kind.map_or(1, |k| 2 << (k as u32));
            facts.present += 1;
            facts.min_values = facts.min_values.min(*count as u64);
            facts.max_values = facts.max_values.max(*count as u64);
            if *count > 0 && facts.first_with_values.is_none() {
                facts.first_with_values = Some(i);
            }
            if facts.text && feature.kind == Some(Kind::Bytes) {
                strings.clear();
                if feature.bytes(&mut strings).is_ok() {
                    facts.text = strings.iter().all(|b| std::str::from_utf8(b).is_ok());
                }
            }
        }
        if by_position.len() > POSITIONS {
            // Matching so many keys by position costs what looking them up does.
            by_position.clear();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columns::tests::example;
    use crate::encode::Values;

    fn facts<'s>(survey: &'s Survey, key: &[u8]) -> &'s FeatureFacts {
        &survey.features.iter().find(|(k, _)| k == key).unwrap().1
    }

    #[test]
    fn gathers_kinds_counts_and_text() {
        let records = [
            example(&[
                (b"a", Some(Values::Int64(&[1, 2]))),
                (b"s", Some(Values::Bytes(&[b"cat"]))),
            ]),
            example(&[
                (b"a", Some(Values::Int64(&[3]))),
                (b"s", Some(Values::Bytes(&[b"\xff"]))),
            ]),
            example(&[
                (b"s", Some(Values::Bytes(&[]))),
                (b"f", Some(Values::Float(&[0.5]))),
            ]),
            b"\x0a\x05junk!".to_vec(),
        ];
        let survey = survey(records.iter().map(Vec::as_slice), Schema::TensorFlow, true);
        assert_eq!(survey.undecodable, vec![3]);
        assert!(!survey.sequences);
        let keys: Vec<&[u8]> = survey.features.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!(keys, [b"a".as_slice(), b"s", b"f"]);
        let a = facts(&survey, b"a");
        assert_eq!(
            (a.kinds, a.present, a.min_values, a.max_values),
            (2 << Kind::Int64 as u32, 2, 1, 2)
        );
        assert_eq!(a.first_with_values, Some(0));
        let s = facts(&survey, b"s");
        assert_eq!(
            (s.present, s.min_values, s.max_values, s.text),
            (3, 0, 1, false)
        );
        assert_eq!(facts(&survey, b"f").first_with_values, Some(2));
    }

    #[test]
    fn a_repeated_key_counts_once_and_the_last_wins() {
        let once = example(&[
            (b"a", Some(Values::Int64(&[1]))),
            (b"b", Some(Values::Int64(&[1]))),
        ]);
        // The same layout again, then with `a` repeated in the last position:
        // the last `a` (three values) wins, and `a` is present once.
        let mut repeated = once.clone();
        let extra = example(&[(b"a", Some(Values::Int64(&[7, 8, 9])))]);
        repeated.extend_from_slice(&extra);
        let records = [once.clone(), repeated, once];
        let survey = survey(records.iter().map(Vec::as_slice), Schema::TensorFlow, true);
        let a = facts(&survey, b"a");
        assert_eq!((a.present, a.min_values, a.max_values), (3, 1, 3));
        assert_eq!(facts(&survey, b"b").present, 3);
    }

    #[test]
    fn keys_matched_by_position_are_never_taken_twice() {
        // After [x, y, z, w] then [w], a record [w, y, z, w] must not pass as
        // four distinct keys matched by position.
        let one = |k: &'static [u8]| (k, Some(Values::Int64(&[1])));
        let records = [
            example(&[one(b"x"), one(b"y"), one(b"z"), one(b"w")]),
            example(&[one(b"w")]),
            example(&[one(b"w"), one(b"y"), one(b"z"), one(b"w")]),
        ];
        let survey = survey(records.iter().map(Vec::as_slice), Schema::TensorFlow, true);
        assert_eq!(facts(&survey, b"w").present, 3);
        assert_eq!(facts(&survey, b"x").present, 1);
    }

    #[test]
    fn a_bad_feature_makes_the_record_undecodable_and_adds_no_key() {
        // Entry `k` whose Feature is a truncated Int64List.
        let bad = [
            0x0a, 0x0b, 0x0a, 0x09, 0x0a, 0x01, b'k', 0x12, 0x04, 0x1a, 0x02, 0x0a, 0x05,
        ];
        let good = example(&[(b"a", Some(Values::Int64(&[1])))]);
        let records = [good.clone(), bad.to_vec(), good];
        let survey = survey(records.iter().map(Vec::as_slice), Schema::TensorFlow, true);
        assert_eq!(survey.undecodable, vec![1]);
        assert_eq!(survey.features.len(), 1);
        assert_eq!(facts(&survey, b"a").present, 2);
    }

    #[test]
    fn tells_sequence_examples() {
        let context = example(&[(b"a", Some(Values::Int64(&[1])))]);
        let mut sequence = context.clone();
        sequence.extend_from_slice(&[0x12, 0x00]); // an empty feature_lists field
        let survey = survey([context.as_slice(), &sequence], Schema::TensorFlow, true);
        assert!(survey.sequences);
        assert_eq!(facts(&survey, b"a").present, 2);
    }
}
