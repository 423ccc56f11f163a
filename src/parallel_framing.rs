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
//!
//! `count_frames` counts a whole file so (`count_records`); a [`FrameIndex`]
//! verifies a file a segment at a time, ahead of threads reading it, and
//! hands their batches out, stopping where the serial framer is to go on.

use crate::frame::{header_crc_ok, Span, TF_HEADER};

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

/// The first position from `from` on, and before `before`, where a frame
/// starts whose end is the file's end or the start of another valid frame;
/// None if there is none. Bounded by the range it starts, so that the
/// threads whose ranges lie inside one huge record do not each scan it to
/// its end, a byte at a time.
fn first_boundary(all: &[u8], from: usize, before: usize) -> Option<usize> {
    (from..before.min(all.len().saturating_sub(TF_HEADER - 1))).find(|&at| {
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
        let start = match k {
            0 => Some(from),
            _ => first_boundary(all, cut, until),
        };
        (start, start.and_then(|start| walk(all, start, until)))
    });
    let mut total = 0u64;
    let mut expected_start = from;
    for ((start, walked), &(_, until)) in walks.into_iter().zip(&ranges) {
        match start {
            // No boundary in the range: it lies inside a record that the
            // walk of the ranges before went over.
            None if expected_start >= until => continue,
            Some(start) if start == expected_start => {
                let (frames, stop) = walked?;
                total += frames;
                expected_start = stop;
            }
            // A boundary guessed where there is none: serial decides.
            _ => return None,
        }
    }
    (expected_start == all.len()).then_some((total, expected_start))
}

/// Bytes a [`FrameIndex`] verifies per thread each time it runs out.
const SEGMENT_BYTES_PER_THREAD: usize = 4 << 20;

/// The most bytes a [`FrameIndex`] verifies at once: a run's frame starts
/// are kept as 32-bit offsets from its own start.
const SEGMENT_BYTES_MAX: usize = 1 << 30;

/// The average frame, over the file's records so far, from which a
/// [`FrameIndex`] walks each segment on one thread: a thread that starts
/// inside a record scans for the next boundary a byte at a time (about
/// half a record, 1-2 ns a byte), while one walk over large records takes a
/// cache miss or so a frame. At 64 KB either costs a few percent of reading
/// the bytes.
const SERIAL_WALK_FROM_FRAME_BYTES: usize = 64 << 10;

/// Frames verified by one thread's walk: the file's records from `first` on
/// start at `base + starts[k]`, and the last one ends at `end`. Frames are
/// contiguous, so each record's payload lies between its start and the next.
#[derive(Debug)]
struct Run {
    first: u64,
    base: usize,
    starts: Vec<u32>,
    end: usize,
}

impl Run {
    fn len(&self) -> usize {
        self.starts.len()
    }

    fn start(&self, k: usize) -> usize {
        self.base + self.starts[k] as usize
    }

    fn frame_end(&self, k: usize) -> usize {
        match self.starts.get(k + 1) {
            Some(&next) => self.base + next as usize,
            None => self.end,
        }
    }

    fn payload(&self, k: usize) -> Span {
        let pos = self.start(k) + TF_HEADER;
        Span {
            pos: pos as u64,
            len: self.frame_end(k) - TF_FOOTER - pos,
        }
    }
}

/// One thread's walk over the frames from `start` until the first boundary
/// at or past `until`: the run of frames that checked, and whether it got
/// there (false where a frame did not check before it).
fn walk_run(all: &[u8], start: usize, until: usize) -> (Run, bool) {
    let mut run = Run {
        first: 0,
        base: start,
        starts: Vec::new(),
        end: start,
    };
    while run.end < until {
        let Some(next) = frame_end(all, run.end) else {
            return (run, false);
        };
        run.starts.push((run.end - start) as u32);
        run.end = next;
    }
    (run, true)
}

/// The records of a batch, as [`FrameIndex::claim`] hands them out: the
/// file's records from `first` on, `records` of them, known intact up to
/// their payloads' CRCs (not checked here).
#[derive(Debug)]
pub struct Frames {
    pub first: u64,
    pub records: usize,
    pieces: Vec<(std::sync::Arc<Run>, std::ops::Range<usize>)>,
}

impl Frames {
    /// Their payloads, into `out` (cleared first).
    pub fn spans(&self, out: &mut Vec<Span>) {
        out.clear();
        out.reserve(self.records);
        for (run, range) in &self.pieces {
            out.extend(range.clone().map(|k| run.payload(k)));
        }
    }

    /// The offsets where their first frame starts and their last one ends.
    pub fn stretch(&self) -> (usize, usize) {
        let (first, last) = (&self.pieces[0], &self.pieces[self.pieces.len() - 1]);
        (
            first.0.start(first.1.start),
            last.0.frame_end(last.1.end - 1),
        )
    }
}

/// What [`FrameIndex::claim`] hands out.
#[derive(Debug)]
pub enum Claim {
    Frames(Frames),
    /// The frames from offset `pos` (the file's record `record`) on are not
    /// known intact, or it is the file's end: the serial framer goes on from
    /// there, and reports the damage or the end as it always does.
    Serial {
        pos: usize,
        record: u64,
    },
}

/// The frames of a mapped, uncompressed TFRecord file, verified ahead of the
/// batches on every thread (the file cut into ranges as [`count_frames`]
/// cuts it, a segment at a time) and kept as their start offsets, so that a
/// batch's records are handed out without walking their headers again.
/// Batches come out in order, each exactly the records the serial framer
/// would have put in it. At the first frame that does not check, or where
/// ranges do not stitch and a walk from the last boundary known fails, the
/// index stops, and the serial framer goes on from that boundary.
pub struct FrameIndex {
    threads: usize,
    /// Runs verified and not all handed out, in order; `taken` records of
    /// the first are handed out.
    runs: std::collections::VecDeque<std::sync::Arc<Run>>,
    taken: usize,
    /// The end of the frames verified, and the index of the record there.
    verified: (usize, u64),
    /// Nothing past `verified` will be: the file's end, or damage.
    stopped: bool,
    /// The index of the record after the last one wanted, where a limit is set.
    last: Option<u64>,
}

impl FrameIndex {
    /// An index of `all` from offset `pos` (a frame boundary, the file's
    /// record `record`) on, for `threads` threads; None where the rest of
    /// the file is too small to be worth it.
    pub fn new(
        all: &[u8],
        pos: usize,
        record: u64,
        threads: usize,
        limit: Option<u64>,
    ) -> Option<FrameIndex> {
        let index = FrameIndex {
            threads,
            runs: Default::default(),
            taken: 0,
            verified: (pos, record),
            stopped: false,
            last: limit.map(|limit| record.saturating_add(limit)),
        };
        let bytes = all.len().checked_sub(pos)?.min(index.bytes_wanted());
        (threads >= 2 && bytes >= PARALLEL_FRAMING_FROM).then_some(index)
    }

    /// About the bytes from `verified` on that the records still wanted
    /// take, where a limit is set, by the file's average frame so far (and a
    /// quarter more): a range of a file read to a record count (an engine's
    /// task) verifies little past its end.
    fn bytes_wanted(&self) -> usize {
        let (pos, records) = self.verified;
        match self.last {
            Some(last) if records > 0 => {
                let left = usize::try_from(last.saturating_sub(records)).unwrap_or(usize::MAX);
                let frame = pos / records as usize;
                left.saturating_mul(frame).saturating_mul(5) / 4 + BYTES_PER_RANGE
            }
            _ => usize::MAX,
        }
    }

    /// The next batch: `want` records (at least one), or fewer once their
    /// payloads reach `max_bytes`, as the serial framer cuts batches; fewer
    /// where the frames verified end before that.
    pub fn claim(&mut self, all: &[u8], want: usize, max_bytes: usize) -> Claim {
        let (want, max_bytes) = (want.max(1), max_bytes.max(1));
        let (mut records, mut bytes) = (0usize, 0usize);
        let mut pieces = Vec::new();
        while records < want && bytes < max_bytes {
            let Some(run) = self.runs.front() else {
                match self.stopped {
                    true => break,
                    false => {
                        self.extend(all);
                        continue;
                    }
                }
            };
            let from = self.taken;
            let mut to = from + (want - records).min(run.len() - from);
            if max_bytes != usize::MAX {
                to = from;
                while to < run.len() && records + (to - from) < want && bytes < max_bytes {
                    bytes += run.payload(to).len;
                    to += 1;
                }
            }
            records += to - from;
            pieces.push((std::sync::Arc::clone(run), from..to));
            self.taken = to;
            if to == run.len() {
                self.runs.pop_front();
                self.taken = 0;
            }
        }
        match pieces.first() {
            Some((run, range)) => Claim::Frames(Frames {
                first: run.first + range.start as u64,
                records,
                pieces,
            }),
            None => Claim::Serial {
                pos: self.verified.0,
                record: self.verified.1,
            },
        }
    }

    /// Verifies the next segment of the file on every thread.
    fn extend(&mut self, all: &[u8]) {
        let (from, records) = self.verified;
        let segment = self.threads.saturating_mul(SEGMENT_BYTES_PER_THREAD);
        let segment = segment.min(SEGMENT_BYTES_MAX).min(self.bytes_wanted());
        let until = from.saturating_add(segment).min(all.len());
        let bytes = until.saturating_sub(from);
        // The file's average frame so far (from its start: `from` and `records` count from there).
        let large = records > 0 && from / records as usize >= SERIAL_WALK_FROM_FRAME_BYTES;
        let ranges = match large {
            true => 1,
            false => self.threads.min(bytes / BYTES_PER_RANGE).max(1),
        };
        let cuts: Vec<usize> = (0..ranges).map(|k| from + bytes / ranges * k).collect();
        let range_end = |k: usize| cuts.get(k + 1).copied().unwrap_or(until);
        let walks = crate::threads::map_in_turn(&cuts, ranges, |k, &cut| {
            let start = match k {
                0 => Some(from),
                _ => first_boundary(all, cut, range_end(k)),
            };
            start.map(|start| (start, walk_run(all, start, range_end(k))))
        });
        for (k, walked) in walks.into_iter().enumerate() {
            let (at, until) = (self.verified.0, range_end(k));
            let (mut run, intact) = match walked {
                // Inside a record that the walks before went over.
                _ if at >= until => continue,
                Some((start, walked)) if start == at => walked,
                // A boundary guessed inside a payload, or none in the range:
                // the range is walked here, from the last boundary known.
                _ => walk_run(all, at, until),
            };
            run.first = self.verified.1;
            self.verified = (run.end, run.first + run.len() as u64);
            if run.len() > 0 {
                self.runs.push_back(std::sync::Arc::new(run));
            }
            if !intact {
                self.stopped = true;
                return;
            }
        }
        self.stopped = self.verified.0 == all.len();
    }
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

    /// A repeatable stream of pseudo-random numbers.
    fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    fn serial_count(all: &[u8]) -> Option<u64> {
        walk(all, 0, all.len()).and_then(|(n, end)| (end == all.len()).then_some(n))
    }

    #[test]
    fn counts_every_frame_once_for_any_thread_count() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
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

    /// A batch as (first record, records, offset of its first frame, end of its last).
    type Cut = (u64, usize, usize, usize);

    /// Every batch an index over `all` (from offset 0) hands out until it
    /// hands over to the serial framer, and where it hands over; each batch's
    /// spans are checked against a walk of its frames.
    fn claims(
        all: &[u8],
        threads: usize,
        want: usize,
        max_bytes: usize,
    ) -> (Vec<Cut>, (usize, u64)) {
        let mut index = FrameIndex::new(all, 0, 0, threads, None).expect("large enough to index");
        let (mut got, mut spans) = (Vec::new(), Vec::new());
        loop {
            match index.claim(all, want, max_bytes) {
                Claim::Serial { pos, record } => return (got, (pos, record)),
                Claim::Frames(frames) => {
                    let (start, end) = frames.stretch();
                    frames.spans(&mut spans);
                    assert_eq!(spans.len(), frames.records);
                    let mut at = start;
                    for span in &spans {
                        assert_eq!(span.pos as usize, at + TF_HEADER);
                        at = frame_end(all, at).unwrap();
                        assert_eq!(at - TF_FOOTER, span.pos as usize + span.len);
                    }
                    assert_eq!(at, end);
                    got.push((frames.first, frames.records, start, end));
                }
            }
        }
    }

    /// The batches the serial framer cuts from frames of `lengths`: the same shape.
    fn serial_batches(lengths: &[usize], want: usize, max_bytes: usize) -> Vec<Cut> {
        let (mut out, mut at, mut record) = (Vec::new(), 0usize, 0usize);
        while record < lengths.len() {
            let (first, start) = (record, at);
            let mut bytes = 0;
            while record < lengths.len() && record - first < want && bytes < max_bytes {
                bytes += lengths[record];
                at += lengths[record] + 16;
                record += 1;
            }
            out.push((first as u64, record - first, start, at));
        }
        out
    }

    #[test]
    fn an_index_hands_out_the_serial_framers_batches() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        for shape in 0..4 {
            let mut lengths = Vec::new();
            let mut size = 0;
            while size < (20 << 20) {
                let n = match shape {
                    0 => (next() % 300) as usize,
                    1 => 0,
                    2 => [0, 7, 2000, 1 << 20][(next() % 4) as usize],
                    // One record over many threads' ranges, among small ones.
                    _ if lengths.len() == 30_000 => 12 << 20,
                    _ => (next() % 200) as usize,
                };
                lengths.push(n);
                size += n + 16;
            }
            let all = file_of(&lengths);
            for threads in [2, 3, 7, 16] {
                for (want, max_bytes) in [
                    (1, usize::MAX),
                    (1000, usize::MAX),
                    (4096, 1 << 16),
                    (usize::MAX, 3 << 20),
                ] {
                    let (got, handed_over) = claims(&all, threads, want, max_bytes);
                    let case = format!("shape {shape}, {threads} threads, {want} / {max_bytes}");
                    assert_eq!(got, serial_batches(&lengths, want, max_bytes), "{case}");
                    let end = (all.len(), lengths.len() as u64);
                    assert_eq!(handed_over, end, "{case}");
                }
            }
        }
    }

    #[test]
    fn an_index_stops_at_the_first_damage_and_hands_over_there() {
        let lengths = vec![100usize; 100_000];
        let all = file_of(&lengths);
        let frame = 100 + 16;
        let len = all.len();
        let mut places: Vec<usize> = [2usize, 3, 7, 16]
            .iter()
            .flat_map(|&t| (1..t).map(move |k| len / t * k))
            .collect();
        places.extend([frame * 3 + 1, len - 1]);
        for at in places {
            let damaged_frame = at / frame;
            for how in ["length", "cut"] {
                let mut damaged = all.clone();
                match how {
                    "length" => damaged[damaged_frame * frame + 2] ^= 0x40,
                    _ => damaged.truncate(damaged_frame * frame + 5),
                }
                if damaged.len() < PARALLEL_FRAMING_FROM {
                    continue; // framed serially from the start
                }
                for threads in [2, 3, 7, 16] {
                    let (got, handed_over) = claims(&damaged, threads, 1000, usize::MAX);
                    let expected = serial_batches(&lengths[..damaged_frame], 1000, usize::MAX);
                    let case = format!("{how} at {at}, {threads} threads");
                    assert_eq!(got, expected, "{case}");
                    let there = (damaged_frame * frame, damaged_frame as u64);
                    assert_eq!(handed_over, there, "{case}");
                }
            }
        }
    }

    #[test]
    fn an_index_over_payloads_that_hold_frames_hands_out_the_right_batches() {
        let inner = file_of(&[10; 2000]);
        let mut all = Vec::new();
        for _ in 0..400 {
            write_tfrecord(&mut all, &inner).unwrap();
        }
        let lengths = vec![inner.len(); 400];
        for threads in [2, 3, 7, 16] {
            let (got, handed_over) = claims(&all, threads, 7, usize::MAX);
            assert_eq!(
                got,
                serial_batches(&lengths, 7, usize::MAX),
                "{threads} threads"
            );
            assert_eq!(handed_over, (all.len(), 400));
        }
    }

    #[test]
    fn each_thread_walks_its_own_range_of_an_intact_file() {
        let all = file_of(&vec![100; 200_000]);
        for threads in [2, 3, 7] {
            let mut index = FrameIndex::new(&all, 0, 0, threads, None).unwrap();
            index.extend(&all);
            // Stitched, not walked again from the first range's end.
            let ranges =
                threads.min(all.len().min(threads * SEGMENT_BYTES_PER_THREAD) / BYTES_PER_RANGE);
            assert_eq!(index.runs.len(), ranges, "{threads} threads");
            let walked: usize = index.runs.iter().map(|r| r.len()).sum();
            assert_eq!(index.verified.1, walked as u64);
        }
    }

    #[test]
    fn an_index_with_a_limit_verifies_little_past_it() {
        let all = file_of(&vec![100; 200_000]);
        let (first, start) = (1000u64, 1000 * 116);
        // Too few records wanted to be worth verifying ahead.
        assert!(FrameIndex::new(&all, start, first, 7, Some(10_000)).is_none());
        let wanted = 60_000u64;
        let mut index = FrameIndex::new(&all, start, first, 7, Some(wanted)).unwrap();
        let mut taken = 0u64;
        while taken < wanted {
            let want = (wanted - taken).min(1000) as usize;
            let Claim::Frames(frames) = index.claim(&all, want, usize::MAX) else {
                panic!("the index stopped before the limit");
            };
            assert_eq!(frames.first, first + taken);
            assert_eq!(frames.records, want);
            taken += want as u64;
        }
        let end = start + wanted as usize * 116;
        let slack = wanted as usize * 116 / 4 + BYTES_PER_RANGE + 116;
        assert!(
            index.verified.0 <= end + slack,
            "{} past the limit's end",
            index.verified.0 - end
        );
    }
}
