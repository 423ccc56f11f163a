//! Framing a mapped TFRecord file on every thread: the file is cut into
//! byte ranges, each thread finds the first record boundary in its range (a
//! header whose length CRC checks and whose frame ends at the file's end or
//! at another such header, as resynchronization recognises one), and walks
//! the frames from there to the end of its range. The ranges are then
//! stitched: where each thread stopped must be exactly where the next one
//! started. Only then is every record known to be framed once, in order, as
//! the serial framer frames them.
//!
//! Anything else (damage anywhere, a boundary guessed inside a payload that
//! happens to hold frames of its own, a file whose last frame does not end
//! at its end) gives no answer, and the caller frames serially from the
//! start: the serial framer then reports whatever it reports, at the same
//! offset, with the same error, as it always does. The parallel path only
//! ever answers for intact files.

use crate::frame::{header_crc_ok, TF_HEADER};

/// Bytes of a file below which framing stays serial: a thread's start and
/// its boundary search cost more than a share of so few records saves.
pub const PARALLEL_FRAMING_FROM: usize = 4 << 20;

/// Bytes per thread below which no more threads are used.
const BYTES_PER_RANGE: usize = 1 << 20;

/// The TFRecord footer: the payload's masked CRC.
const TF_FOOTER: usize = 4;

/// The end of the frame whose header is at `at` in `all`, if a whole
/// TFRecord frame with a valid length CRC starts there and fits.
#[inline(always)]
fn frame_end(all: &[u8], at: usize) -> Option<usize> {
    let header = all.get(at..at.checked_add(TF_HEADER)?)?;
    if !header_crc_ok(header) {
        return None;
    }
    let length = usize::try_from(u64::from_le_bytes(header[..8].try_into().unwrap())).ok()?;
    let end = at
        .checked_add(TF_HEADER)?
        .checked_add(length)?
        .checked_add(TF_FOOTER)?;
    (end <= all.len()).then_some(end)
}

/// The first position from `from` on where a frame starts whose end is the
/// file's end or the start of another valid frame; None if there is none.
fn first_boundary(all: &[u8], from: usize) -> Option<usize> {
    (from..all.len().saturating_sub(TF_HEADER - 1)).find(|&at| {
        frame_end(all, at).is_some_and(|end| end == all.len() || frame_end(all, end).is_some())
    })
}

/// A range's walk: the frames counted from its start, and where the walk
/// stopped (the first frame boundary at or past the range's end); None where
/// a frame did not check before that.
fn walk(all: &[u8], start: usize, until: usize) -> Option<(u64, usize)> {
    let (mut at, mut frames) = (start, 0u64);
    while at < until {
        at = frame_end(all, at)?;
        frames += 1;
    }
    Some((frames, at))
}

/// The frames of `all[from..]` (a mapped TFRecord file, `from` a frame
/// boundary), counted on up to `threads` threads: `(frames, end)`, `end`
/// being the file's end. None where the file is too small to be worth it, or
/// where the parallel walk cannot vouch for the answer (see the module's
/// docs): the caller then frames serially.
pub fn count_frames(all: &[u8], from: usize, threads: usize) -> Option<(u64, usize)> {
    let bytes = all.len().checked_sub(from)?;
    let threads = threads.min(bytes / BYTES_PER_RANGE);
    if bytes < PARALLEL_FRAMING_FROM || threads < 2 {
        return None;
    }
    let cuts: Vec<usize> = (0..=threads).map(|k| from + bytes / threads * k).collect();
    let ranges: Vec<(usize, usize)> = cuts
        .windows(2)
        .enumerate()
        .map(|(k, w)| (w[0], if k + 1 == threads { all.len() } else { w[1] }))
        .collect();
    let walks = crate::threads::map_in_turn(&ranges, threads, |k, &(cut, until)| {
        // No boundary past the cut: the range lies in the last record, whose
        // walk from the range before reaches the file's end (or the stitch fails).
        let start = match k {
            0 => from,
            _ => first_boundary(all, cut).unwrap_or(all.len()),
        };
        walk(all, start, until).map(|(frames, stop)| (start, frames, stop))
    });
    let mut total = 0u64;
    let mut expected_start = from;
    for walked in walks {
        let (start, frames, stop) = walked?;
        if start != expected_start {
            return None; // a boundary guessed where there is none: serial decides
        }
        total += frames;
        expected_start = stop;
    }
    (expected_start == all.len()).then_some((total, expected_start))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::write_tfrecord;

    /// A file of records of the given lengths, each filled with its index's low byte.
    fn file_of(lengths: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, &n) in lengths.iter().enumerate() {
            write_tfrecord(&mut out, &vec![i as u8; n]).unwrap();
        }
        out
    }

    fn serial_count(all: &[u8]) -> Option<u64> {
        walk(all, 0, all.len()).and_then(|(n, end)| (end == all.len()).then_some(n))
    }

    #[test]
    fn counts_every_frame_once_for_any_thread_count() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for shape in 0..4 {
            let lengths: Vec<usize> = (0..)
                .map(|_| match shape {
                    0 => (next() % 200) as usize,
                    1 => 0,
                    2 => (next() % (4 << 20)) as usize,
                    _ => [0, 1, 100, 70_000][(next() % 4) as usize],
                })
                .scan(0usize, |size, n| {
                    *size += n + 16;
                    (*size < (24 << 20)).then_some(n)
                })
                .collect();
            let all = file_of(&lengths);
            for threads in [1, 2, 3, 7, 16] {
                let counted = count_frames(&all, 0, threads);
                if threads > 1 {
                    assert_eq!(
                        counted,
                        Some((lengths.len() as u64, all.len())),
                        "shape {shape}, {threads} threads, {lengths:?}"
                    );
                } else {
                    assert_eq!(counted, None);
                }
            }
            assert_eq!(serial_count(&all), Some(lengths.len() as u64));
        }
    }

    #[test]
    fn a_payload_that_holds_frames_of_its_own_gives_no_answer_or_the_right_one() {
        // Records whose payloads are themselves TFRecord files: a boundary may
        // be guessed inside one, and then the stitch must refuse it.
        let inner = file_of(&[10; 2000]);
        let mut all = Vec::new();
        for _ in 0..400 {
            write_tfrecord(&mut all, &inner).unwrap();
        }
        for threads in [2, 3, 7, 16] {
            match count_frames(&all, 0, threads) {
                None => {}
                Some(counted) => assert_eq!(counted, (400, all.len()), "{threads} threads"),
            }
        }
    }

    #[test]
    fn damage_anywhere_gives_no_answer() {
        let lengths = vec![100usize; 100_000];
        let all = file_of(&lengths);
        let frame = 100 + 16;
        // At a range boundary of 2, 3 and 7 threads, and elsewhere.
        let len = all.len();
        let mut places: Vec<usize> = [2usize, 3, 7]
            .iter()
            .flat_map(|&t| (1..t).map(move |k| len / t * k))
            .collect();
        places.extend([0, 5, frame * 500 + 3, all.len() - 1]);
        for at in places {
            // A header byte of the frame around `at`: its length CRC no longer checks.
            let header = at / frame * frame;
            let mut damaged = all.clone();
            damaged[header + 2] ^= 0x40;
            for threads in [2, 3, 7, 16] {
                assert_eq!(
                    count_frames(&damaged, 0, threads),
                    None,
                    "at {at}, {threads} threads"
                );
            }
        }
        // A file cut short in its last frame.
        let cut = &all[..all.len() - 3];
        assert_eq!(count_frames(cut, 0, 4), None);
    }
}
