//! Reading a file's Examples (or OFRecords) a batch at a time, ahead of the
//! caller: one file's records framed, checked and parsed into columns. With
//! more than one thread allowed, threads frame and parse the next batches, a
//! whole batch each, while the caller (Python, in `py::batches`) takes this
//! one, so that the work only the caller's thread can do (making `bytes`
//! objects, NumPy and Arrow assembly) overlaps the parsing instead of adding
//! to it; the caller's thread makes batches too while it waits for the next.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use crate::columns::{
    columns_in_mapping, owned_columns, parse_examples_on, parse_examples_parallel, Column, Footers,
    OwnedColumn, ParseFailure, Request, Strings,
};
use crate::error::{Error, Result};
use crate::example::Schema;
use crate::framing::{Scanner, Skipped, Span};
use crate::parallel_framing::{Claim, FrameIndex, Frames};
use crate::pool::Panic;
use crate::window::{Mapping, RELEASE_STEP};

/// One parsed batch, owning its values; `records` is 0 at the end of the
/// file (or of the limit), where `skipped` holds the damage found last.
pub struct Batch {
    pub records: usize,
    columns: Vec<OwnedColumn>,
    skipped: Vec<Skipped>,
    /// Where its records end in a mapped file (0 for a stream's batch).
    end: u64,
    /// Damage found after its records, to be reported once they are taken.
    then: Option<Error>,
}

/// A batch as the caller gets it: `payload` is the bytes of its records,
/// `columns` what the caller made of the parsed values.
pub struct HandedBatch<C> {
    pub records: usize,
    pub payload: usize,
    pub columns: C,
    pub skipped: Vec<Skipped>,
    /// Damage found after its records, to be reported once they are taken.
    pub then: Option<Error>,
}

/// What a thread reading ahead hands over: a batch, an error, or the panic of a bug.
pub type Outcome = std::result::Result<Result<Batch>, Panic>;

/// A batch framed but not parsed yet: its spans, the file's index of its
/// first record, and the damage skipped on the way to it.
pub struct Framed {
    spans: Vec<Span>,
    first: u64,
    skipped: Vec<Skipped>,
    /// The records copied out of a stream's window (the spans then point
    /// here), so that the next batch can be framed, and decompressed, while
    /// this one is parsed.
    copied: Option<Vec<u8>>,
    /// What follows each record's payload where it is parsed.
    footers: Footers,
}

impl Framed {
    /// The payload bytes of its records.
    pub fn payload(&self) -> usize {
        self.spans.iter().map(|s| s.len).sum()
    }

    /// It holds all the records (or bytes) that `size` lets a batch hold:
    /// more may follow it.
    fn is_full(&self, size: BatchSize) -> bool {
        self.spans.len() >= size.records || self.payload() >= size.bytes
    }

    /// Its record `k`: the span, and the index in the file.
    fn record(&self, k: usize) -> (Span, u64) {
        (self.spans[k], self.first + k as u64)
    }

    /// Ends the batch before its record `k`, where the parser found damage
    /// (see `parse_until_damage`), and returns that record, for
    /// `Scanner::corrupt_payload` to report once the records before it are taken.
    fn cut_before(&mut self, k: usize) -> (Span, u64) {
        let damaged = self.record(k);
        self.spans.truncate(k);
        damaged
    }
}

/// The most payload bytes of a stream's batch copied out to be parsed while
/// the next is framed: a larger batch is parsed in place, one step at a time,
/// rather than held twice.
const COPIED_BATCH_BYTES: usize = 64 << 20;

/// How much a batch holds: `records`, or fewer once their payloads reach
/// `bytes` (at least one record either way).
#[derive(Clone, Copy)]
pub struct BatchSize {
    pub records: usize,
    pub bytes: usize,
}

/// Frames the next batch: `size` records (or bytes), or what is `left` of a limit.
/// With `copy`, the records of a stream (not a mapped file, whose records stay
/// where they are) are copied out of the scanner's window, where the batch is
/// one to frame the next behind (`FRAME_AHEAD_RECORDS`) and `COPIED_BATCH_BYTES` at most.
fn frame(
    scanner: &mut Scanner,
    left: &mut Option<u64>,
    size: BatchSize,
    mut spans: Vec<Span>,
    copy: bool,
) -> Result<Framed> {
    let want = left.map_or(size.records as u64, |left| left.min(size.records as u64)) as usize;
    if want > 0 {
        scanner.next_batch(want, size.bytes, &mut spans)?;
    } else {
        spans.clear();
    }
    if let Some(left) = left {
        *left -= spans.len() as u64;
    }
    let bytes: usize = spans.iter().map(|s| s.len).sum();
    let worth_it = spans.len() >= FRAME_AHEAD_RECORDS && bytes <= COPIED_BATCH_BYTES;
    let copied = (copy && worth_it && scanner.mapping().is_none()).then(|| {
        let mut data = Vec::with_capacity(bytes);
        for span in &mut spans {
            let at = data.len() as u64;
            data.extend_from_slice(scanner.payload(*span));
            span.pos = at;
        }
        data
    });
    let footers = match scanner.crcs_left_to_parser() {
        true => Footers::Crc,
        false => Footers::None,
    };
    Ok(Framed {
        first: scanner.records() - spans.len() as u64,
        spans,
        skipped: scanner.take_skipped(),
        copied,
        footers,
    })
}

/// The records of `spans` in `held` (a mapped file, or a batch copied out),
/// each with its `footers`.
fn records_in<'a>(held: &'a [u8], spans: &[Span], footers: Footers) -> Vec<&'a [u8]> {
    spans
        .iter()
        .map(|s| &held[s.pos as usize..s.pos as usize + s.len + footers.bytes()])
        .collect()
}

/// A batch's columns, and the index of the damaged record they end before
/// (see `parse_until_damage`); or why the parse failed.
type Parsed = std::result::Result<(Vec<OwnedColumn>, Option<usize>), ParseFailure>;

/// Parses `records` with `parse`. Where the first record that fails is one
/// the parser found damaged (`ParseFailure::Corrupt`), the records before it
/// are parsed again, to be handed out before the damage is reported, as
/// framing reports damage after every intact record before it; its index
/// comes back with them.
fn parse_until_damage<'r, 'a, T>(
    records: &'r [&'a [u8]],
    parse: impl Fn(&'r [&'a [u8]]) -> std::result::Result<T, ParseFailure>,
) -> std::result::Result<(T, Option<usize>), ParseFailure> {
    match parse(records) {
        Err(ParseFailure::Corrupt { index }) if index > 0 => {
            Ok((parse(&records[..index])?, Some(index)))
        }
        parsed => parsed.map(|columns| (columns, None)),
    }
}

/// The error of a parse of `framed` that failed: damage, as the scanner
/// reports it, or the record that could not be parsed, by its index in the file.
fn parse_error(scanner: &mut Scanner, framed: &Framed, failure: ParseFailure) -> Error {
    match failure {
        ParseFailure::Corrupt { index } => {
            let (span, at) = framed.record(index);
            scanner.corrupt_payload(span, at)
        }
        failure => Error::Parse(failure.shifted(framed.first as usize)),
    }
}

/// Records in a stream's batch from which it is copied out of the scanner's
/// window, so that another thread can frame the next batch while this one is
/// parsed: framing costs per record (a header, a CRC, a jump), so a batch of
/// fewer, larger records has little framing to overlap, and copying it out
/// would cost more than that.
const FRAME_AHEAD_RECORDS: usize = 1024;

/// The scanner and what to parse; makes each batch on the caller's thread,
/// until threads that read ahead take it over (`ReadAhead::start`).
pub struct Reader {
    scanner: Scanner,
    requests: Vec<Request>,
    schema: Schema,
    size: BatchSize,
    /// Records still to frame, where the caller set a limit.
    left: Option<u64>,
    /// Span storage of the last batch, for the next.
    spare: Vec<Span>,
}

impl Reader {
    pub fn new(
        scanner: Scanner,
        requests: Vec<Request>,
        schema: Schema,
        size: BatchSize,
        left: Option<u64>,
    ) -> Self {
        Reader {
            scanner,
            requests,
            schema,
            size,
            left,
            spare: Vec::new(),
        }
    }

    /// The next batch framed, its records left where they are.
    pub fn frame(&mut self) -> Result<Framed> {
        let spare = std::mem::take(&mut self.spare);
        frame(&mut self.scanner, &mut self.left, self.size, spare, false)
    }

    /// Whether its records come from a mapped file.
    pub fn is_mapped(&self) -> bool {
        self.scanner.mapping().is_some()
    }

    /// Whether `framed` holds all the records a batch may: more may follow it.
    pub fn is_full(&self, framed: &Framed) -> bool {
        framed.is_full(self.size)
    }

    /// The batch `framed`, made on the caller's thread: `unlocked` runs the
    /// parse it is given (with Python's lock released, say), and `convert`
    /// makes the caller's columns of the values, which are slices of the
    /// stretch of the file it also gets; with `flat`, byte strings are
    /// parsed for Arrow's layout.
    pub fn make_here<C>(
        &mut self,
        mut framed: Framed,
        flat: bool,
        unlocked: impl FnOnce(&mut (dyn FnMut() + Send)),
        convert: impl FnOnce(Vec<Column<'_>>, &[u8]) -> C,
    ) -> Result<HandedBatch<C>> {
        let scanner = &self.scanner;
        let footers = framed.footers;
        let with_footers = |s: Span| Span {
            len: s.len + footers.bytes(),
            ..s
        };
        let records: Vec<&[u8]> = framed
            .spans
            .iter()
            .map(|&s| scanner.payload(with_footers(s)))
            .collect();
        let (requests, schema) = (&self.requests, self.schema);
        let strings = match flat {
            true => Strings::flat_for(&records),
            false => Strings::Slices,
        };
        let parse =
            |records| parse_examples_parallel(records, footers, requests, schema, strings, |c| c);
        let mut parsed = None;
        unlocked(&mut || parsed = Some(parse_until_damage(&records, parse)));
        let (columns, damaged_at) = match parsed.expect("`unlocked` runs the parse") {
            Ok(parsed) => parsed,
            Err(failure) => {
                // Damage in zeros that replaced a truncated file's pages is the truncation.
                self.scanner.check_source()?;
                return Err(parse_error(&mut self.scanner, &framed, failure));
            }
        };
        let damaged = damaged_at.map(|k| framed.cut_before(k));
        // The batch's stretch of the file or window, which its values are slices of.
        let within = match (framed.spans.first(), framed.spans.last()) {
            (Some(first), Some(last)) => {
                let len = (last.pos - first.pos) as usize + last.len;
                scanner.payload(Span {
                    pos: first.pos,
                    len,
                })
            }
            _ => &[],
        };
        let columns = convert(columns, within);
        // Parsed from a mapping: if the file shrank meanwhile, nothing of it is to be trusted.
        self.scanner.check_source()?;
        let then = damaged.map(|(span, at)| self.scanner.corrupt_payload(span, at));
        let handed = HandedBatch {
            records: framed.spans.len(),
            payload: framed.payload(),
            columns,
            skipped: framed.skipped,
            then,
        };
        self.spare = framed.spans;
        Ok(handed)
    }
}

/// What the threads that read ahead share: what to parse, the file where
/// it is mapped, the scanner, which frames one batch at a time, and the
/// batches made and not yet taken by Python.
struct ReadAheadShared {
    requests: Vec<Request>,
    schema: Schema,
    /// Where the records of a mapped file are parsed from.
    mapping: Option<Arc<Mapping>>,
    /// What follows the payloads of the batches claimed from a frame index:
    /// their CRCs, where they are checked.
    index_footers: Footers,
    /// The threads each batch is parsed on (1 where every thread takes a
    /// batch of its own).
    split: usize,
    /// Byte strings stay in the mapping, for Python to copy into its `bytes`
    /// objects (see `ReadAhead::start`).
    in_mapping: bool,
    framing: Mutex<FramingState>,
    room: Mutex<BatchesInFlight>,
    /// Signalled when Python takes a batch, so that another may be framed,
    /// or when the reading is finished.
    roomier: Condvar,
    made: Mutex<MadeBatches>,
    /// Signalled when a batch is made, or when a thread reading ahead ends.
    landed: Condvar,
}

/// The scanner and what is left to frame.
struct FramingState {
    scanner: Scanner,
    left: Option<u64>,
    size: BatchSize,
    /// The index of the batch framed next.
    next: u64,
    /// A batch framed before the threads started, to be parsed first.
    first: Option<Framed>,
    /// The frame boundaries of a mapped file, verified ahead on every thread:
    /// where there is one, each batch's thread frames its own records, and the
    /// scanner takes over only where the index stops.
    index: Option<FrameIndex>,
    /// The end or an error was reached (or Python stopped taking batches):
    /// no thread frames another batch.
    finished: bool,
}

/// How many batches may be framed before Python takes them: each one made
/// ahead holds its values and its records' pages.
struct BatchesInFlight {
    /// Batches a thread was let frame, and batches Python took.
    claimed: u64,
    taken: u64,
    most: u64,
    finished: bool,
}

/// The batches made, by index, until Python takes them (in order).
struct MadeBatches {
    outcomes: BTreeMap<u64, Outcome>,
    /// Threads reading ahead that have not ended.
    alive: usize,
}

fn unpoisoned<T>(lock: &Mutex<T>) -> MutexGuard<'_, T> {
    // A thread that panicked while framing hands its panic to Python (as
    // the outcome of its batch); the others need the locks only to learn
    // that they are finished.
    lock.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ReadAheadShared {
    fn framing(&self) -> MutexGuard<'_, FramingState> {
        unpoisoned(&self.framing)
    }

    /// Stops every thread at its next batch.
    fn finish(&self) {
        self.framing().finished = true;
        unpoisoned(&self.room).finished = true;
        self.roomier.notify_all();
    }

    /// Lets the caller frame a batch, if there is room for one more made
    /// ahead; with `wait`, once there is. False once the reading is finished.
    fn claim(&self, wait: bool) -> bool {
        let mut room = unpoisoned(&self.room);
        while wait && !room.finished && room.claimed - room.taken >= room.most {
            room = self
                .roomier
                .wait(room)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let claimed = !room.finished && room.claimed - room.taken < room.most;
        room.claimed += u64::from(claimed);
        claimed
    }

    /// Python took a batch: one more may be framed.
    fn took(&self) {
        unpoisoned(&self.room).taken += 1;
        self.roomier.notify_one();
    }

    /// Checks that the mapped file (if the records are read from one) did
    /// not shrink: if it did, nothing read from it since is to be trusted,
    /// and the scan ends. Checked on the mapping, not through the scanner, so
    /// as not to wait for the framing lock, which the thread framing the next
    /// batch holds.
    fn check_mapping(&self) -> Result<()> {
        match self.mapping.as_deref().and_then(Mapping::shrunk) {
            Some(at) => Err(self.framing().scanner.shrunk_at(at)),
            None => Ok(()),
        }
    }

    /// Frames the next batch and parses it (after letting the next be
    /// framed, where its records stay put), and keeps it for Python; the
    /// end, an error or a panic finishes the reading. False where it was
    /// already finished.
    fn make_next(&self) -> bool {
        let mut framing = self.framing();
        if framing.finished {
            return false;
        }
        let index = framing.next;
        framing.next += 1;
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| self.make(framing)));
        if !matches!(&outcome, Ok(Ok(batch)) if batch.records > 0 && batch.then.is_none()) {
            self.finish();
        }
        unpoisoned(&self.made).outcomes.insert(index, outcome);
        self.landed.notify_all();
        true
    }

    /// The threads a batch is parsed on: its share of them, or every one
    /// where it is the last full batch of a mapped file (or of the limit),
    /// which the threads that take a batch each would otherwise leave to one
    /// of them while the others, with nothing left to make, wait (two threads
    /// reading 1 M of the tutorial's records: the other idled 1.7 ms of the 28
    /// at the end, 0.7 ms with the batch shared). `stretch` is where its records
    /// lie in a mapped file (None where they were copied out of a stream).
    fn split_of(&self, left: Option<u64>, stretch: Option<(u64, u64)>) -> usize {
        let last = match (&self.mapping, stretch, left) {
            (_, _, Some(0)) => true,
            (Some(mapping), Some((start, end)), _) => mapping.len() as u64 - end < end - start,
            _ => false,
        };
        match last {
            true => crate::threads::available().max(self.split),
            false => self.split,
        }
    }

    /// The batch just claimed in `framing`, framed there (or, where the file's
    /// frames are indexed, found there and framed after the lock is let go),
    /// then parsed.
    fn make(&self, mut framing: MutexGuard<'_, FramingState>) -> Result<Batch> {
        let FramingState {
            scanner,
            left,
            size,
            first,
            index,
            ..
        } = &mut *framing;
        let want = left.map_or(size.records as u64, |left| left.min(size.records as u64));
        let claim = match (first.is_none() && want > 0, index.as_mut(), &self.mapping) {
            (true, Some(frames), Some(mapping)) => {
                Some(frames.claim(mapping, want as usize, size.bytes))
            }
            _ => None,
        };
        let claimed = match claim {
            Some(Claim::Frames(frames)) => {
                if let Some(left) = left {
                    *left -= frames.records as u64;
                }
                Some(frames)
            }
            Some(Claim::Serial { pos, record }) => {
                *index = None;
                scanner.seek(pos as u64, record)?;
                None
            }
            None => None,
        };
        if let Some(frames) = claimed {
            let (start, end) = frames.stretch();
            let split = self.split_of(framing.left, Some((start as u64, end as u64)));
            drop(framing);
            return self.make_claimed(frames, split);
        }
        let FramingState {
            scanner,
            left,
            size,
            first,
            ..
        } = &mut *framing;
        let framed = match first.take() {
            Some(first) => Ok(first),
            None => {
                // Room for a batch's spans up front: grown by doubling, under
                // the lock, they made the median batch of 64 Ki records hold
                // it 0.45-0.46 ms against 0.44, and the slowest tenth 0.59-0.65
                // against 0.48-0.49.
                let spans = Vec::with_capacity(size.records.min(1 << 16));
                frame(scanner, left, *size, spans, true)
            }
        };
        let framed = match framed {
            Ok(framed) if !framed.spans.is_empty() => framed,
            ended => {
                framing.finished = true;
                return ended.map(|framed| Batch {
                    records: 0,
                    columns: Vec::new(),
                    skipped: framed.skipped,
                    end: 0,
                    then: None,
                });
            }
        };
        let held: Option<&[u8]> = match (&framed.copied, &self.mapping) {
            (Some(copied), _) => Some(copied),
            (None, Some(mapping)) => Some(mapping),
            (None, None) => None,
        };
        let columns = match held {
            Some(held) => {
                let stretch = match (&framed.copied, framed.spans.first(), framed.spans.last()) {
                    (None, Some(first), Some(last)) => {
                        Some((first.pos, last.pos + last.len as u64))
                    }
                    _ => None,
                };
                let split = self.split_of(framing.left, stretch);
                drop(framing);
                let in_mapping = self.in_mapping && framed.copied.is_none();
                self.parse_held(&framed, held, in_mapping, split)?
            }
            None => {
                // In the scanner's window, where the next batch would be framed
                // over it: parsed first, on every thread (its CRCs were checked
                // while framing: only a mapped file's are left to the parser).
                let scanner = &framing.scanner;
                let records: Vec<&[u8]> =
                    framed.spans.iter().map(|&s| scanner.payload(s)).collect();
                let flat = Strings::flat_for(&records);
                let (requests, schema, none) = (&self.requests, self.schema, Footers::None);
                let parsed =
                    parse_examples_parallel(&records, none, requests, schema, flat, owned_columns);
                drop(framing);
                parsed.map(|columns| (columns, None))
            }
        };
        self.finish_batch(framed, columns, None)
    }

    /// The batch of `frames`, claimed from a mapped file's index: its spans
    /// made here, off the framing lock, its large payloads' CRCs checked where
    /// CRCs are (the parser checks the short ones), then parsed on `split` threads.
    fn make_claimed(&self, frames: Frames, split: usize) -> Result<Batch> {
        let all: &[u8] = self
            .mapping
            .as_deref()
            .expect("an index is of a mapped file");
        let mut spans = Vec::new();
        frames.spans(&mut spans);
        let mut framed = Framed {
            spans,
            first: frames.first,
            skipped: Vec::new(),
            copied: None,
            footers: self.index_footers,
        };
        // A large payload that fails its CRC ends the batch before it, as a
        // damaged record the parser finds does (unless the file shrank: zeros
        // in place of its pages are the truncation, not damage).
        let corrupt = match framed.footers {
            Footers::Crc => crate::framing::first_corrupt(all, &framed.spans),
            Footers::None => None,
        };
        if corrupt.is_some() {
            self.check_mapping()?;
        }
        let pending = match corrupt {
            Some(0) => {
                let (span, at) = framed.record(0);
                return Err(self.framing().scanner.corrupt_payload(span, at));
            }
            Some(k) => {
                let (span, at) = framed.cut_before(k);
                Some(self.framing().scanner.corrupt_payload(span, at))
            }
            None => None,
        };
        let columns = self.parse_held(&framed, all, self.in_mapping, split)?;
        self.finish_batch(framed, columns, pending)
    }

    /// Parses `framed`, whose records are in `held`, on `split` threads; with
    /// `in_mapping`, byte strings are left where they are in the mapped file.
    fn parse_held(
        &self,
        framed: &Framed,
        held: &[u8],
        in_mapping: bool,
        split: usize,
    ) -> Result<Parsed> {
        let (requests, schema, footers) = (&self.requests, self.schema, framed.footers);
        let records = records_in(held, &framed.spans, footers);
        let columns = if in_mapping {
            let in_mapping = |columns| columns_in_mapping(columns, held);
            let slices = Strings::Slices;
            parse_until_damage(&records, |records| {
                parse_examples_on(
                    split, records, footers, requests, schema, slices, in_mapping,
                )
            })
        } else {
            let flat = Strings::flat_for(&records);
            parse_until_damage(&records, |records| {
                parse_examples_on(
                    split,
                    records,
                    footers,
                    requests,
                    schema,
                    flat,
                    owned_columns,
                )
            })
        };
        self.check_mapping()?;
        Ok(columns)
    }

    /// The batch of `framed` and its parsed `columns`, or the error they end
    /// in; `pending` is damage found after its records, to be reported after
    /// them where the parse found none among them.
    fn finish_batch(
        &self,
        mut framed: Framed,
        columns: Parsed,
        pending: Option<Error>,
    ) -> Result<Batch> {
        // The lock is released: errors may take it to end the scan.
        let (columns, damaged_at) = match columns {
            Ok(parsed) => parsed,
            Err(failure) => return Err(parse_error(&mut self.framing().scanner, &framed, failure)),
        };
        let damaged = damaged_at.map(|k| framed.cut_before(k));
        let then = match damaged {
            Some((span, at)) => Some(self.framing().scanner.corrupt_payload(span, at)),
            None => pending,
        };
        let end = match (&framed.copied, framed.spans.last()) {
            (None, Some(last)) if self.mapping.is_some() => last.pos + last.len as u64,
            _ => 0,
        };
        Ok(Batch {
            records: framed.spans.len(),
            columns,
            skipped: framed.skipped,
            end,
            then,
        })
    }
}

/// Makes batches while there is room for them, until the reading is finished.
fn make_ahead(shared: &ReadAheadShared) {
    /// Tells Python that this thread ended, however it ends.
    struct Ends<'a>(&'a ReadAheadShared);
    impl Drop for Ends<'_> {
        fn drop(&mut self) {
            unpoisoned(&self.0.made).alive -= 1;
            self.0.landed.notify_all();
        }
    }
    let _ends = Ends(shared);
    while shared.claim(true) && shared.make_next() {}
}

/// Payload bytes of the batches made ahead, beyond which threads split each
/// batch between them instead of taking one each: every batch made ahead
/// holds its values and its records' pages (measured, streaming 10 MB
/// batches: peak RSS grew 78 MB on one thread, 97 MB with one batch made
/// ahead, 177 MB with two and 246 MB with four).
const AHEAD_BYTES: usize = 16 << 20;

/// The most threads reading ahead for which short payloads' CRCs are still
/// checked as each batch is framed, under the framing lock; with more, they
/// are left to the threads that parse them (`Scanner::leave_crcs_to_parser`).
///
/// Framing is serial, so the CRCs off the lock shorten the stage that
/// bounds many threads (a batch of 64 Ki tutorial records held the lock
/// 1.0 ms with them, 0.47 ms without). But a walk over the headers alone
/// is a chain of dependent loads that the parse then follows with a
/// second pass over the same bytes: on two threads it cost 13-15 % more CPU
/// per record than framing and checking in one pass (1 M tutorial records:
/// 103 ms of CPU against 90, the same as one thread), and there the lock
/// is not the bound, since the other thread parses a batch in more time
/// than this one frames and checks the next (2 threads against 1:
/// `read_examples(batch_size=8192)` 1.65 x with the CRCs left to the parser,
/// 1.84 x with them checked while framing; `read_table` 1.67 x and 1.89 x).
///
/// With more threads, a mapped file's frames are not framed under the lock
/// at all: they are verified ahead on every thread (`FrameIndex`), and each
/// batch's thread takes its records' spans from there. The index walks the
/// headers apart from the parse as the lock's framing did, and costs about
/// as much CPU: on this 2-core VM, at 3, 4, 6 and 16 threads, 1 M tutorial
/// records took 94-113 ms of CPU with it and 92-113 ms framed under the
/// lock (batches of 1024: 14.8-16.7 M records/s against 14.5-15.2; of 8192:
/// 18.0-18.6 against 17.6-18.7); 150 KB records at 4 threads, 6.5-6.6 GB/s
/// against 6.2-6.4. Where the cut-over lies between 2 and 16 threads is not
/// measured.
const CRCS_WHILE_FRAMING_UP_TO: usize = 2;

/// Whether batches read ahead by `threads` threads leave short payloads'
/// CRCs to the threads that parse them (see `CRCS_WHILE_FRAMING_UP_TO`).
pub fn leaves_crcs_to_parser(threads: usize) -> bool {
    threads > CRCS_WHILE_FRAMING_UP_TO
}

/// Threads that frame and parse the next batches while Python takes this
/// one. Each makes a whole batch (where batches are small enough, see
/// `AHEAD_BYTES`: else each batch is split between several); they frame
/// one after another, and Python takes the batches in the order framed.
///
/// Python's thread is one of the threads it may use: while it waits for its
/// next batch, it makes a later one (where there is room for it), rather
/// than sleep while another thread takes its core. With a reading thread per
/// core and Python's woken for each batch, two-thread reads of the tutorial's
/// records kept 1.65 cores busy; with Python's thread one of the two, 1.82.
pub struct ReadAhead {
    /// The index of the batch Python takes next.
    next: u64,
    /// Where the pages of a mapped file were dropped up to.
    released: u64,
    threads: Vec<crate::pool::JoinHandle<()>>,
    shared: Arc<ReadAheadShared>,
}

impl ReadAhead {
    /// Takes `reader` over, on every thread recordkit may use, for batches
    /// of about `payload` bytes, starting with `first` where the caller
    /// framed one (of a mapped file) and left it to be parsed. With
    /// `in_mapping` (a mapped file only), the
    /// threads leave byte strings where they are, for Python to copy once,
    /// straight into its `bytes` objects: a copy into one buffer on the way
    /// costs more than the overlap gains for large values, and for small ones
    /// it was a tenth of the threads' work (the tutorial's records, two
    /// threads: 94 ms of CPU per 1 M records against 99 ms with the copy).
    pub fn start(
        reader: Box<Reader>,
        payload: usize,
        in_mapping: bool,
        first: Option<Framed>,
    ) -> Self {
        let cores = crate::threads::available().max(1);
        // Batches made at once, Python's own included.
        let makers = (AHEAD_BYTES / payload.max(1)).clamp(1, cores);
        // With one, a thread makes the next batch (on every core) while
        // Python takes this one: room for one batch ahead, which that thread
        // claims as soon as Python takes a batch. With more, Python's thread
        // is one of them, and one batch more may wait for Python, so that a
        // thread that finished its batch while Python makes one goes on to
        // the next (batches made ahead then hold at most 1.5 x `AHEAD_BYTES`).
        let (threads, most) = match makers {
            1 => (1, 1),
            _ => (makers - 1, makers as u64 + 1),
        };
        let Reader {
            mut scanner,
            requests,
            schema,
            size,
            left,
            ..
        } = *reader;
        // A mapped file's pages are dropped behind the batches Python took
        // (see `ReadAhead::handed`), not behind those framed, which are still read.
        let first_pos = first.as_ref().and_then(|f| f.spans.first()).map(|s| s.pos);
        let released = first_pos.unwrap_or_else(|| scanner.position());
        scanner.keep_from(released);
        let mapping = scanner.mapping();
        let index = match (&mapping, scanner.indexable_from()) {
            (Some(all), Some((pos, record))) if leaves_crcs_to_parser(cores) => {
                FrameIndex::new(all, pos, record, cores, left)
            }
            _ => None,
        };
        let index_footers = match scanner.crcs_left_to_parser() {
            true => Footers::Crc,
            false => Footers::None, // not checked (`verify=False`)
        };
        let shared = Arc::new(ReadAheadShared {
            requests,
            schema,
            mapping,
            index_footers,
            split: cores / makers,
            in_mapping,
            framing: Mutex::new(FramingState {
                scanner,
                left,
                size,
                next: 0,
                first,
                index,
                finished: false,
            }),
            room: Mutex::new(BatchesInFlight {
                claimed: 0,
                taken: 0,
                most,
                finished: false,
            }),
            roomier: Condvar::new(),
            made: Mutex::new(MadeBatches {
                outcomes: BTreeMap::new(),
                alive: threads,
            }),
            landed: Condvar::new(),
        });
        let threads = (0..threads)
            .map(|_| {
                let shared = Arc::clone(&shared);
                crate::pool::spawn(move || make_ahead(&shared)).expect("a thread to read ahead")
            })
            .collect();
        ReadAhead {
            next: 0,
            released,
            threads,
            shared,
        }
    }

    /// A batch made ahead, handed over: `convert` makes the caller's columns
    /// of its values and, where its byte strings were left in the mapping,
    /// copies them out of it; since the thread that parsed them checked the
    /// file, it is checked again after that copy.
    pub fn hand<C>(
        &mut self,
        batch: Batch,
        convert: impl FnOnce(Vec<OwnedColumn>, Option<&[u8]>) -> C,
    ) -> Result<HandedBatch<C>> {
        let mapping = self
            .shared
            .mapping
            .as_deref()
            .filter(|_| self.shared.in_mapping);
        let (end, then) = (batch.end, batch.then);
        let columns = convert(batch.columns, mapping.map(|m| &**m));
        if mapping.is_some() {
            self.shared.check_mapping()?;
        }
        self.handed(end);
        Ok(HandedBatch {
            records: batch.records,
            payload: 0, // not needed: reading ahead is decided
            columns,
            skipped: batch.skipped,
            then,
        })
    }

    /// Python is done with the records up to `end` of a mapped file: their
    /// pages are dropped, in steps (as the scanner drops them when no thread
    /// reads ahead). Dropped behind the batches framed instead, they were
    /// still being parsed and copied from, and faulted in again: two threads
    /// took 500 more page faults per 1 M tutorial records than one.
    fn handed(&mut self, end: u64) {
        if let Some(mapping) = &self.shared.mapping {
            if end >= self.released + RELEASE_STEP {
                mapping.release(self.released, end);
                self.released = end;
            }
        }
    }

    /// The next batch: made by a thread reading ahead, or, while none is
    /// ready, by this thread (which then takes the one it waited for).
    pub fn next_batch(&mut self) -> Outcome {
        let index = self.next;
        self.next += 1;
        let shared = &*self.shared;
        let mut made = unpoisoned(&shared.made);
        loop {
            if let Some(outcome) = made.outcomes.remove(&index) {
                drop(made);
                shared.took();
                return outcome;
            }
            if shared.claim(false) {
                drop(made);
                shared.make_next();
                made = unpoisoned(&shared.made);
            } else if made.alive == 0 {
                // Batches before the end are all made: only a bug ends a
                // thread before the batch it framed is.
                return Err(Box::new("a reading thread ended without a word") as Panic);
            } else {
                made = shared
                    .landed
                    .wait(made)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
    }

    /// Waits until `batches` batches are made ahead and not yet taken, or
    /// no more will be (the end, an error, or every thread ended): for a
    /// test that needs the threads to have read ahead, an event to wait for
    /// rather than a time.
    pub fn wait_made(&self, batches: usize) {
        let shared = &*self.shared;
        let mut made = unpoisoned(&shared.made);
        while made.outcomes.len() < batches && made.alive > 0 && !unpoisoned(&shared.room).finished
        {
            made = shared
                .landed
                .wait(made)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Stops the threads, once each has finished the batch it is on.
    pub fn close(mut self) {
        self.shared.finish();
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
    }
}

impl Drop for ReadAhead {
    /// Left without `close` (at an error, or with its reader), the threads
    /// still stop, rather than wait for room that Python will never make.
    fn drop(&mut self) {
        self.shared.finish();
    }
}

#[cfg(test)]
mod timing {
    use super::*;
    use crate::framing::{write_tfrecord, Format};
    use crate::window::MappedWindow;

    /// The batch reader alone, as `read_examples` drives it without Python:
    /// 1 M tutorial records from a mapped file, 1 and 2 threads alternating,
    /// every wall time printed with the process's CPU time (the machine's
    /// noise shows in their spread; CPU time that grows with the thread
    /// count for the same records is work the threads add).
    /// `cargo test --release read_ahead::timing -- --ignored --nocapture`
    #[cfg(unix)]
    #[test]
    #[ignore]
    fn reader_by_thread_count() {
        let (records, requests) = crate::columns::timing::tutorial_records_of(1_000_000);
        let path =
            std::env::temp_dir().join(format!("recordkit-timing-{}.tfrecord", std::process::id()));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        records
            .iter()
            .for_each(|r| write_tfrecord(&mut out, r).unwrap());
        drop(out);
        crate::py::memory::adapt_malloc_to_large_records();
        let cpu = || crate::columns::timing::cpu_seconds(libc::CLOCK_PROCESS_CPUTIME_ID);
        let size = BatchSize {
            records: 65536,
            bytes: usize::MAX,
        };
        let mut times: [Vec<(u32, u32)>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..12 {
            for threads in [1, 2] {
                crate::threads::set(Some(threads));
                let (start, cpu_start) = (std::time::Instant::now(), cpu());
                let win = MappedWindow::new(std::fs::File::open(&path).unwrap()).unwrap();
                let scanner =
                    Scanner::new(Box::new(win), Format::TfRecord, true, false, String::new())
                        .unwrap();
                let mut reader =
                    Reader::new(scanner, requests.clone(), Schema::TensorFlow, size, None);
                // As `__next__` makes them: every batch on the caller's thread with
                // one thread; with more, the first framed there and every batch
                // parsed by whichever thread takes it.
                let mut read = 0;
                if threads == 1 {
                    loop {
                        let framed = reader.frame().unwrap();
                        let scanner = &reader.scanner;
                        let records: Vec<&[u8]> =
                            framed.spans.iter().map(|&s| scanner.payload(s)).collect();
                        let columns = parse_examples_parallel(
                            &records,
                            Footers::None,
                            &reader.requests,
                            reader.schema,
                            Strings::flat_for(&records),
                            owned_columns,
                        );
                        read += records.len();
                        std::hint::black_box(columns.unwrap());
                        if records.is_empty() {
                            break;
                        }
                    }
                } else {
                    let first = reader.frame().unwrap();
                    let payload = first.payload();
                    let mut ahead = ReadAhead::start(Box::new(reader), payload, false, Some(first));
                    loop {
                        let batch = ahead.next_batch().unwrap().unwrap();
                        if batch.records == 0 {
                            break;
                        }
                        read += batch.records;
                        ahead.handed(batch.end);
                        std::hint::black_box(batch);
                    }
                    ahead.close();
                }
                assert_eq!(read, records.len());
                times[threads - 1].push((
                    start.elapsed().as_millis() as u32,
                    ((cpu() - cpu_start) * 1e3) as u32,
                ));
            }
        }
        crate::threads::set(None);
        std::fs::remove_file(&path).unwrap();
        for (i, mut t) in times.into_iter().enumerate() {
            t.sort_unstable();
            let shown: Vec<String> = t.iter().map(|(w, c)| format!("{w}/{c}")).collect();
            println!(
                "{} thread(s), ms wall/CPU, sorted: {}",
                i + 1,
                shown.join(" ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columns::{Buffer, DType, OwnedValues};
    use crate::encode::{put_example, Values};
    use crate::framing::{write_tfrecord, Format};
    use crate::window::MappedWindow;

    /// A reader of `count` Examples whose feature `id` is their index, in
    /// batches of `batch`, with the stored CRC of record `damaged` changed
    /// (the file is removed at once: its mapping stays); and the offset of
    /// each record's frame.
    #[cfg(unix)]
    fn reader_of_ids(count: i64, batch: usize, damaged: Option<i64>) -> (Reader, Vec<u64>) {
        let path = std::env::temp_dir().join(format!(
            "recordkit-batches-{}-{count}-{batch}-{damaged:?}.tfrecord",
            std::process::id()
        ));
        let (mut bytes, mut offsets) = (Vec::new(), Vec::new());
        for i in 0..count {
            let mut record = Vec::new();
            put_example(&mut record, &[(b"id", Some(Values::Int64(&[i])))]).unwrap();
            offsets.push(bytes.len() as u64);
            write_tfrecord(&mut bytes, &record).unwrap();
            if damaged == Some(i) {
                *bytes.last_mut().unwrap() ^= 1; // the footer: the payload's CRC
            }
        }
        std::fs::write(&path, bytes).unwrap();
        let win = MappedWindow::new(std::fs::File::open(&path).unwrap()).unwrap();
        std::fs::remove_file(&path).unwrap();
        let mut scanner =
            Scanner::new(Box::new(win), Format::TfRecord, true, false, String::new()).unwrap();
        // As `ExampleBatches` has it where threads may read ahead.
        scanner.leave_crcs_to_parser();
        let size = BatchSize {
            records: batch,
            bytes: usize::MAX,
        };
        let requests = vec![Request {
            key: b"id".to_vec(),
            dtype: DType::Int64,
        }];
        let reader = Reader::new(scanner, requests, Schema::TensorFlow, size, None);
        (reader, offsets)
    }

    /// Threads reading ahead in batches of 7 records, from the first batch
    /// framed here (as `__next__` starts them on a mapped file) or not.
    fn ahead_of(reader: Reader, first_framed_here: bool) -> ReadAhead {
        let mut reader = Box::new(reader);
        let first = first_framed_here.then(|| reader.frame().unwrap());
        ReadAhead::start(reader, 70, false, first)
    }

    /// How many records `ahead` hands over, checked to be the ids from 0
    /// on in order, until the end or an error (returned), as `__next__` hands
    /// them: damage found after a batch's records comes after them.
    fn ids_until_end(ahead: &mut ReadAhead) -> (i64, Option<Error>) {
        let mut read = 0;
        loop {
            let batch = match ahead.next_batch().unwrap() {
                Ok(batch) if batch.records > 0 => batch,
                Ok(_) => return (read, None),
                Err(error) => return (read, Some(error)),
            };
            let OwnedValues::Numbers(Buffer::Int64(ids)) = &batch.columns[0].values else {
                panic!("id is int64");
            };
            assert_eq!(
                ids,
                &(read..read + batch.records as i64).collect::<Vec<_>>()
            );
            read += batch.records as i64;
            if let Some(damage) = batch.then {
                return (read, Some(damage));
            }
        }
    }

    #[cfg(unix)]
    #[test]
    fn threads_reading_ahead_stop_when_left_without_close() {
        // Small batches: room for every thread to read ahead, and more
        // batches than that, so that they wait for Python to take one.
        let (reader, _) = reader_of_ids(5000, 10, None);
        let mut ahead = ReadAhead::start(Box::new(reader), 100, false, None);
        assert_eq!(ahead.next_batch().unwrap().unwrap().records, 10);
        let shared = Arc::downgrade(&ahead.shared);
        drop(ahead);
        let start = std::time::Instant::now();
        while shared.strong_count() > 0 {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "threads reading ahead still wait for Python"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[cfg(unix)]
    #[test]
    fn batches_come_in_order_whoever_makes_them() {
        // Which thread makes which batch changes from run to run.
        for run in 0..10 {
            let (reader, _) = reader_of_ids(20_000, 7, None);
            let mut ahead = ahead_of(reader, run % 2 == 0);
            let (read, error) = ids_until_end(&mut ahead);
            assert_eq!((read, error.map(|e| e.to_string())), (20_000, None));
            ahead.close();
        }
    }

    #[cfg(unix)]
    #[test]
    fn damage_found_ahead_comes_after_every_record_before_it() {
        // Whichever thread frames the damaged batch, Python's or another,
        // and in the first batch, framed before the threads start.
        for damaged in [12_345, 12_341, 7, 19_999, 3] {
            for run in 0..6 {
                let (reader, offsets) = reader_of_ids(20_000, 7, Some(damaged));
                let mut ahead = ahead_of(reader, run % 2 == 0);
                let (read, error) = ids_until_end(&mut ahead);
                assert_eq!(read, damaged);
                let Some(Error::DataLoss(loss)) = error else {
                    panic!("record {damaged}: {error:?} instead of data loss");
                };
                assert_eq!(loss.record_index, damaged as u64);
                // TensorFlow's offset for a payload CRC: the payload's, after the 12-byte header.
                assert_eq!(loss.offset, offsets[damaged as usize] + 12);
                ahead.close();
            }
        }
    }
}
