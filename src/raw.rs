//! Byte strings laid end to end at one width, for `decode_raw`: the values of
//! a string column become one buffer that NumPy reads as numbers.

/// Why values cannot be laid out at one width.
#[derive(Debug, PartialEq, Eq)]
pub enum Unequal {
    /// Value `index` holds `len` bytes where the first held `first`.
    Length {
        index: usize,
        len: usize,
        first: usize,
    },
}

/// The width each value takes: `fixed` where given (longer values cut, shorter
/// ones padded with zeros), else the first value's length, which every value
/// must share.
pub fn width(values: &[&[u8]], fixed: Option<usize>) -> Result<usize, Unequal> {
    if let Some(width) = fixed {
        return Ok(width);
    }
    let first = values.first().map_or(0, |v| v.len());
    match values.iter().position(|v| v.len() != first) {
        Some(index) => Err(Unequal::Length {
            index,
            len: values[index].len(),
            first,
        }),
        None => Ok(first),
    }
}

/// The values laid end to end, `width` bytes each (cut, or padded with zeros),
/// copied on up to `threads` threads in runs of about equal bytes.
pub fn join(values: &[&[u8]], width: usize, threads: usize) -> Vec<u8> {
    let mut out = vec![0u8; values.len() * width];
    if width == 0 {
        return out;
    }
    let threads = threads
        .min(out.len() / crate::threads::BYTES_PER_THREAD)
        .max(1);
    let per_thread = values.len().div_ceil(threads);
    let chunks: Vec<(&[&[u8]], &mut [u8])> = values
        .chunks(per_thread)
        .zip(out.chunks_mut(per_thread * width))
        .collect();
    let copy = |values: &[&[u8]], out: &mut [u8]| {
        for (value, cell) in values.iter().zip(out.chunks_mut(width)) {
            let n = value.len().min(width);
            cell[..n].copy_from_slice(&value[..n]);
        }
    };
    if chunks.len() == 1 {
        for (values, out) in chunks {
            copy(values, out);
        }
    } else {
        crate::pool::scope(|scope| {
            let handles: Vec<_> = chunks
                .into_iter()
                .map(|(values, out)| scope.spawn(move || copy(values, out)))
                .collect();
            for handle in handles {
                handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            }
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_cut_or_padded_to_a_fixed_width_on_any_thread_count() {
        let values: Vec<&[u8]> = vec![b"abc", b"a", b"", b"abcdef"];
        for threads in [1, 2, 3, 7] {
            assert_eq!(width(&values, Some(2)), Ok(2));
            assert_eq!(join(&values, 2, threads), b"aba\0\0\0ab");
        }
    }

    #[test]
    fn without_a_fixed_width_every_value_has_the_first_ones_length() {
        let values: Vec<&[u8]> = vec![b"ab", b"cd", b"e"];
        assert_eq!(
            width(&values, None),
            Err(Unequal::Length {
                index: 2,
                len: 1,
                first: 2
            })
        );
        assert_eq!(width(&values[..2], None), Ok(2));
        assert_eq!(join(&values[..2], 2, 4), b"abcd");
        assert_eq!(width(&[], None), Ok(0));
    }

    #[test]
    fn large_joins_split_over_threads_give_the_same_bytes() {
        let big: Vec<Vec<u8>> = (0..64u8).map(|i| vec![i; 100_000]).collect();
        let values: Vec<&[u8]> = big.iter().map(|v| &v[..]).collect();
        let one = join(&values, 100_000, 1);
        assert_eq!(join(&values, 100_000, 5), one);
        assert_eq!(one[100_000 * 63], 63);
    }
}
