//! An index file's text (`recordkit index`, DALI's `tfrecord2idx`): a line
//! `<offset> <size>` per record, read in one pass.

/// The offsets and sizes of `text`, whose lines (split at `\n`, `\r` or
/// `\r\n`) are blank or hold two whole numbers of plain decimal digits below
/// 2**64, apart by spaces or tabs. None where a line is anything else: the
/// caller's general reading then finds and names it (a sign, a third number,
/// a number too large), so that this pass only makes the common case fast.
pub fn parse_index(text: &[u8]) -> Option<(Vec<u64>, Vec<u64>)> {
    let lines = text.len() / 4 + 1;
    let (mut offsets, mut sizes) = (Vec::with_capacity(lines), Vec::with_capacity(lines));
    for line in text.split(|&b| b == b'\n' || b == b'\r') {
        let mut fields = line
            .split(|&b| matches!(b, b' ' | b'\t' | b'\x0b' | b'\x0c'))
            .filter(|f| !f.is_empty());
        match (fields.next(), fields.next(), fields.next()) {
            (None, _, _) => continue,
            (Some(offset), Some(size), None) => {
                offsets.push(number(offset)?);
                sizes.push(number(size)?);
            }
            _ => return None,
        }
    }
    Some((offsets, sizes))
}

/// A run of decimal digits as a u64; None for anything else or an overflow.
fn number(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |n, &d| {
        if !d.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_two_numbers_are_read() {
        let text = b"0 116\n116 120\r\n\n  236\t99 \r335 7\n";
        let (offsets, sizes) = parse_index(text).unwrap();
        assert_eq!(offsets, [0, 116, 236, 335]);
        assert_eq!(sizes, [116, 120, 99, 7]);
        assert_eq!(parse_index(b""), Some((vec![], vec![])));
        assert_eq!(parse_index(b" \n\t\n"), Some((vec![], vec![])));
        let top = format!("{} 1", u64::MAX);
        assert_eq!(parse_index(top.as_bytes()), Some((vec![u64::MAX], vec![1])));
    }

    #[test]
    fn anything_else_is_left_to_the_general_reading() {
        for text in [
            &b"0 116 7\n"[..],
            b"0\n",
            b"0 116\n116\n",
            b"+0 116\n",
            b"-1 116\n",
            b"0 1e3\n",
            b"0 18446744073709551616\n",
            b"0x0 116\n",
            b"0 116\x00\n",
        ] {
            assert_eq!(
                parse_index(text),
                None,
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
    }
}
