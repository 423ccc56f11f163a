//! CRC-32C (Castagnoli) and TensorFlow's mask over it.
//!
//! Short inputs (a TFRecord's length, a small record) take a plain loop over
//! the CRC instruction; longer ones the `crc-fast` crate, which picks at run
//! time the fastest of carry-less-multiply folding fused with the CRC
//! instruction (x86-64 and AArch64) and falls back to tables elsewhere.

/// CRC-32C's polynomial, bit-reversed (the CRC runs least significant bit first).
const POLY: u32 = 0x82f6_3b78;

/// `a * b` modulo the polynomial, for CRCs as polynomials over GF(2) (zlib's `multmodp`).
const fn multmodp(a: u32, mut b: u32) -> u32 {
    let mut m = 1u32 << 31;
    let mut p = 0;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                return p;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
}

/// `x^(2^k)` modulo the polynomial, for k = 0..32.
const X2N: [u32; 32] = {
    let mut table = [0u32; 32];
    let mut p = 1u32 << 30; // x^1
    table[0] = p;
    let mut k = 1;
    while k < 32 {
        p = multmodp(p, p);
        table[k] = p;
        k += 1;
    }
    table
};

/// The CRC-32C of `a ‖ b` is `shift(crc32c(a), b.len()) ^ crc32c(b)`: `crc`
/// moved past `len` more bytes, in O(log len) (zlib's `crc32_combine`).
/// So the CRC of any range follows from two prefix CRCs, without reading it.
pub fn shift(crc: u32, len: u64) -> u32 {
    let (mut n, mut k, mut p) = (len, 3usize, 1u32 << 31); // x^0; bytes are 2^3 bits
    while n != 0 {
        if n & 1 != 0 {
            p = multmodp(X2N[k & 31], p);
        }
        n >>= 1;
        k += 1;
    }
    multmodp(p, crc)
}

/// TensorFlow's `kMaskDelta`.
const MASK_DELTA: u32 = 0xa282_ead8;

/// Inputs shorter than this use a plain loop over the CRC instruction:
/// `crc-fast`'s folding pays off only on longer ones (on an AMD EPYC, 16-384
/// byte inputs 1.2-2.2 x faster through the loop, 512 bytes and up 1.6-3.8 x
/// slower).
const SHORT: usize = 512;

/// Standard CRC-32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() < SHORT && std::is_x86_feature_detected!("sse4.2") {
        // SAFETY: `short_sse42` only needs the SSE 4.2 instructions, and the
        // line above checked at run time that this CPU has them.
        return unsafe { short_sse42(data) };
    }
    crc_fast::crc32_iscsi(data)
}

/// The CRC-32C of `a ‖ data`, given `crc`, the CRC-32C of `a`: a CRC computed
/// piece by piece.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    // The digest's state is the CRC register before the final inversion.
    let mut digest =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    digest.update(data);
    digest.finalize() as u32
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn short_sse42(data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    let mut words = data.chunks_exact(8);
    let mut crc = u64::from(u32::MAX);
    for word in &mut words {
        crc = _mm_crc32_u64(crc, u64::from_le_bytes(word.try_into().unwrap()));
    }
    let mut crc = crc as u32;
    let mut tail = words.remainder();
    if tail.len() >= 4 {
        crc = _mm_crc32_u32(crc, u32::from_le_bytes(tail[..4].try_into().unwrap()));
        tail = &tail[4..];
    }
    for &byte in tail {
        crc = _mm_crc32_u8(crc, byte);
    }
    !crc
}

/// Standard CRC-32C of `value`'s 8 little-endian bytes (a TFRecord length):
/// one CRC instruction where the CPU has it.
#[inline]
pub fn crc32c_u64(value: u64) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("sse4.2") {
        // SAFETY: `u64_sse42` only needs the SSE 4.2 instructions, and the
        // line above checked at run time that this CPU has them.
        return unsafe { u64_sse42(value) };
    }
    crc32c(&value.to_le_bytes())
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn u64_sse42(value: u64) -> u32 {
    !(std::arch::x86_64::_mm_crc32_u64(u64::from(u32::MAX), value) as u32)
}

/// TensorFlow's mask: rotate right by 15, then add the delta (wrapping).
#[inline]
pub fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The inverse of [`mask`].
#[inline]
pub fn unmask(masked: u32) -> u32 {
    masked.wrapping_sub(MASK_DELTA).rotate_left(15)
}

/// Masked CRC-32C, as stored in TFRecord headers and footers.
#[inline]
pub fn masked_crc32c(data: &[u8]) -> u32 {
    mask(crc32c(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    /// CRC-32C bit by bit, straight from its definition: the oracle.
    fn bitwise(data: &[u8]) -> u32 {
        let mut crc = u32::MAX;
        for &byte in data {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ POLY
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    fn sample(len: usize) -> Vec<u8> {
        (0..len as u64)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    }

    #[test]
    fn u64_path_agrees_with_the_definition() {
        for value in [0u64, 1, 0x80, u64::MAX, 0x0123_4567_89ab_cdef] {
            assert_eq!(crc32c_u64(value), bitwise(&value.to_le_bytes()));
        }
    }

    #[test]
    fn every_length_and_alignment_agrees_with_the_definition() {
        // Both sides of `SHORT`, and past the folding code's blocks (up to 4 KiB
        // and over), from every alignment of a 64-byte line.
        let data = sample(9000);
        let lengths = (0..=1100).chain([2047, 2048, 2049, 4095, 4096, 4097, 8191, 8936]);
        for len in lengths {
            for offset in [0, 1, 3, 8, 13, 31, 63] {
                let part = &data[offset..offset + len];
                assert_eq!(crc32c(part), bitwise(part), "length {len}, offset {offset}");
            }
        }
    }

    #[test]
    fn append_computes_the_crc_piece_by_piece() {
        let data = sample(70_000);
        for pieces in [1, 2, 3, 7, 1000] {
            let step = data.len().div_ceil(pieces);
            let crc = data.chunks(step).fold(0, crc32c_append);
            assert_eq!(crc, crc32c(&data), "{pieces} pieces");
        }
        assert_eq!(crc32c_append(crc32c(b"1234"), b"56789"), 0xE306_9283);
        assert_eq!(crc32c_append(0, b""), 0);
    }

    #[test]
    fn mask_round_trips() {
        for crc in [0u32, 1, 0xdead_beef, u32::MAX, 0x8000_0000] {
            assert_eq!(unmask(mask(crc)), crc);
        }
    }

    #[test]
    fn matches_tensorflow_worked_bytes() {
        // From TensorFlow: b"" frames as 0000000000000000 29039807 d8ea82a2.
        assert_eq!(
            masked_crc32c(&0u64.to_le_bytes()).to_le_bytes(),
            [0x29, 0x03, 0x98, 0x07]
        );
        assert_eq!(masked_crc32c(b"").to_le_bytes(), [0xd8, 0xea, 0x82, 0xa2]);
        // b"abc" frames as 0300000000000000 b099490e 616263 6e57f121.
        assert_eq!(
            masked_crc32c(&3u64.to_le_bytes()).to_le_bytes(),
            [0xb0, 0x99, 0x49, 0x0e]
        );
        assert_eq!(
            masked_crc32c(b"abc").to_le_bytes(),
            [0x6e, 0x57, 0xf1, 0x21]
        );
    }

    #[test]
    fn shift_combines_crcs_of_concatenated_bytes() {
        let data: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for split in [0, 1, 7, 255, 256, 4096, 5000] {
            let (a, b) = data.split_at(split);
            assert_eq!(
                shift(crc32c(a), b.len() as u64) ^ crc32c(b),
                crc32c(&data),
                "split {split}"
            );
        }
    }
}
