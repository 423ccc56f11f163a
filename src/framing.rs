//! TFRecord and OFRecord framing: finding records in a byte window, checking
//! them and resynchronizing after damage. The layout of one frame is `frame`.

use std::io;

use crate::compression::StreamFault;
use crate::crc::{shift, unmask};
use crate::error::{DamageKind, DataLoss, Error, Result};
use crate::window::Window;

pub use crate::frame::{
    checked_payload, header_len, is_tfrecord_header, seal_frame, write_ofrecord, write_tfrecord,
    Format, Span,
};
use crate::frame::{header_crc_ok, DEFERRED_CRC_FROM, TF_HEADER};

/// Records claiming more than this (and more than the stream has given so
/// far) are read ahead before a stream window holds them: see `frame_at`.
const READ_AHEAD_FROM: u64 = 64 << 20;

/// While skipping damage in a stream (not a mapped file), a record claiming
/// more than this is damage, and a candidate claiming more is not taken for a
/// record: checking it would mean holding all of its claimed bytes (or
/// reading them twice), and a hostile stream can put such a claim every few
/// bytes. Mapped files have no such limit, nor has reading without skipping.
pub const STREAM_RESYNC_MAX_RECORD: u64 = 64 << 20;

/// Records, and payload bytes, that `Scanner::count` frames a step: each
/// step checks the source (a `stat` call) once, where a record a step cost
/// 0.6 s per 1 M records; the bytes bound what a stream's window holds.
const COUNT_BATCH_RECORDS: usize = 65536;
const COUNT_BATCH_BYTES: usize = 16 << 20;

/// Whether the TFRecord frame around `span` in `all` holds the CRC of its payload.
fn intact(all: &[u8], span: Span) -> bool {
    let (start, end) = (span.pos as usize, span.pos as usize + span.len);
    let stored = u32::from_le_bytes(all[end..end + 4].try_into().unwrap());
    unmask(stored) == crate::crc::crc32c(&all[start..end])
}

/// Whether the payload of `span` was framed without its CRC checked, and
/// fails it.
fn corrupt(all: &[u8], span: Span) -> bool {
    span.len >= DEFERRED_CRC_FROM && !intact(all, span)
}

/// The index of the first of `spans` whose payload fails its deferred CRC,
/// checked on every core: each thread takes a run of spans of about equal bytes.
pub(crate) fn first_corrupt(all: &[u8], spans: &[Span]) -> Option<usize> {
    // The spans checked while framing take no work here.
    let deferred_bytes = |s: &Span| if s.len >= DEFERRED_CRC_FROM { s.len } else { 0 };
    let total: usize = spans.iter().map(deferred_bytes).sum();
    if total == 0 {
        return None;
    }
    let threads = crate::threads::available().min(total / crate::threads::BYTES_PER_THREAD);
    if threads <= 1 {
        return spans.iter().position(|&s| corrupt(all, s));
    }
    let runs = crate::threads::runs_by_bytes(spans, threads, deferred_bytes);
    crate::threads::map_in_turn(&runs, threads, |_, &(at, run)| {
        run.iter().position(|&s| corrupt(all, s)).map(|k| at + k)
    })
    .into_iter()
    .flatten()
    .min()
}

/// What damage reports say of a payload that fails its CRC at `data_at`.
fn corrupt_data_detail(data_at: u64) -> String {
    format!("corrupted record at {data_at}: the data fails its CRC")
}

/// A damaged region that was skipped (only when skipping was asked for).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Where the damage starts (the offset TensorFlow would report).
    pub offset: u64,
    /// Bytes of the stream passed over before the next intact record.
    pub bytes: u64,
    pub kind: DamageKind,
    pub detail: String,
    /// Intact records before the damage: the index the damaged record would have had.
    pub record_index: u64,
}

enum Frame {
    Record(Span),
    End,
    Damage {
        kind: DamageKind,
        start: u64,
        offset: u64,
        detail: String,
    },
}

enum State {
    Active,
    /// Damage found after some records of a batch: reported by the next call.
    Failed(Box<DataLoss>),
    /// Damage found while skipping: resynchronize at the next call.
    Resync {
        start: u64,
        kind: DamageKind,
        offset: u64,
        detail: String,
    },
    Done,
}

/// Reads records from a window, batch by batch.
pub struct Scanner {
    win: Box<dyn Window>,
    format: Format,
    verify: bool,
    skip_damaged: bool,
    path: String,
    pos: u64,
    records: u64,
    state: State,
    skipped: Vec<Skipped>,
    /// Prefix CRCs of the stream while skipping damage (see [`DIRECT_CRC_MAX`]).
    crcs: Option<PrefixCrcs>,
    /// The window's bytes from here on are kept, however far framing went
    /// (see [`Scanner::keep_from`]).
    kept_from: u64,
    /// Short payloads' CRCs are left to the parser (see [`Scanner::leave_crcs_to_parser`]).
    crcs_to_parser: bool,
    /// A compressed stream that stops without its end marker, exactly at a
    /// record boundary, ends the scan (see [`Scanner::end_at_flush_points`]).
    unfinished_ends: bool,
}

/// While skipping damage, a payload longer than this has its CRC computed
/// from prefix CRCs, not by reading it: hostile bytes can follow every intact
/// record with a header claiming most of the file, and reading each claimed
/// payload made the scan quadratic. Shorter payloads cost at most this much.
const DIRECT_CRC_MAX: u64 = 16 << 10;

impl Scanner {
    /// `verify` checks payload CRCs (length CRCs are always checked: they
    /// guard every allocation). `skip_damaged` resynchronizes after damage
    /// instead of failing; it needs CRCs, so TFRecord only.
    pub fn new(
        win: Box<dyn Window>,
        format: Format,
        verify: bool,
        skip_damaged: bool,
        path: String,
    ) -> Result<Self> {
        if skip_damaged && format != Format::TfRecord {
            return Err(Error::InvalidArgument(
                "skipping damaged records needs checksums to find the next intact record; \
                 OFRecord files have none"
                    .into(),
            ));
        }
        if skip_damaged && !verify {
            return Err(Error::InvalidArgument(
                "skipping damaged records needs verify=True".into(),
            ));
        }
        Ok(Scanner {
            win,
            format,
            verify,
            skip_damaged,
            path,
            pos: 0,
            records: 0,
            state: State::Active,
            skipped: Vec::new(),
            crcs: None,
            unfinished_ends: false,
            kept_from: u64::MAX,
            crcs_to_parser: false,
        })
    }

    /// Records framed so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Stream offset of the next record.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Keeps the window's bytes from `pos` on, for a caller that reads
    /// batches framed earlier after the scanner has moved on (threads
    /// parsing them, Python copying values out of a mapping) and drops
    /// their pages itself once done with them: dropped behind the framing,
    /// as the scanner drops them so that a long read does not hold the
    /// file, they would only be faulted in again.
    pub fn keep_from(&mut self, pos: u64) {
        self.kept_from = pos;
    }

    /// Lets the window drop its bytes before `pos`, and none that are kept.
    fn release(&mut self, pos: u64) {
        self.win.release(pos.min(self.kept_from));
    }

    /// Leaves the CRCs of payloads shorter than `DEFERRED_CRC_FROM` to the
    /// parser, where the file is mapped, its CRCs are checked and damage ends
    /// the scan (`crcs_left_to_parser` says whether it does). The parser then
    /// takes each such payload with its footer and checks it
    /// (`checked_payload`) while the record is in cache for parsing. Checked
    /// here, they made framing sweep every byte of the batch, under the lock
    /// that threads reading ahead frame under one after another. A payload
    /// that fails is reported by the caller (`Scanner::corrupt_payload`),
    /// after the records before it.
    pub fn leave_crcs_to_parser(&mut self) {
        self.crcs_to_parser = self.verify
            && self.format == Format::TfRecord
            && !self.skip_damaged
            && self.win.whole().is_some();
    }

    /// Where the rest of a mapped TFRecord file may be framed from an index of
    /// its frames (`parallel_framing::FrameIndex`) rather than by this scanner:
    /// the offset and index of its next record, where its payloads' CRCs are
    /// left to the parser or not checked, damage is not skipped, and no damage
    /// or end is pending.
    pub fn indexable_from(&self) -> Option<(usize, u64)> {
        let pos = usize::try_from(self.pos).ok()?;
        let plain =
            self.format == Format::TfRecord && !self.skip_damaged && self.win.whole().is_some();
        let crcs_elsewhere = self.crcs_to_parser || !self.verify;
        (plain && crcs_elsewhere && matches!(self.state, State::Active))
            .then_some((pos, self.records))
    }

    /// Whether the batches framed now leave short payloads' CRCs to the parser.
    pub fn crcs_left_to_parser(&self) -> bool {
        self.crcs_to_parser
    }

    /// The damage of a payload that failed the CRC left to the parser: `span`,
    /// the file's record `record_index`. The error framing would have
    /// reported for it; the scan ends.
    pub fn corrupt_payload(&mut self, span: Span, record_index: u64) -> Error {
        self.state = State::Done;
        let mut loss = self.data_loss(
            DamageKind::CorruptData,
            span.pos,
            corrupt_data_detail(span.pos),
        );
        loss.record_index = record_index;
        loss.into()
    }

    /// Damaged regions skipped since the last call.
    pub fn take_skipped(&mut self) -> Vec<Skipped> {
        std::mem::take(&mut self.skipped)
    }

    /// `(offset, size)` of the whole frame (header, payload, footer) around a span.
    pub fn frame_of(&self, span: Span) -> (u64, u64) {
        let header = self.format.header_len();
        (
            span.pos - header,
            span.len as u64 + header + self.format.footer_len(),
        )
    }

    /// The whole file, where it is mapped: spans stay readable there while
    /// the scanner frames on (their pages may be dropped and faulted in again).
    pub fn mapping(&self) -> Option<std::sync::Arc<crate::window::Mapping>> {
        self.win.mapping()
    }

    /// The payload of a span from the latest batch.
    pub fn payload(&self, span: Span) -> &[u8] {
        self.win.bytes(span.pos, span.len)
    }

    /// Frames the next records into `out` (cleared first): up to `max_records`,
    /// stopping once `max_bytes` of payload are collected. An empty batch means
    /// the end. Damage after some intact records is reported by the next call,
    /// so every intact record is delivered first.
    pub fn next_batch(
        &mut self,
        max_records: usize,
        max_bytes: usize,
        out: &mut Vec<Span>,
    ) -> Result<()> {
        let result = self.next_batch_unchecked(max_records, max_bytes, out);
        // Damage found in zeros that replaced a truncated file's pages is the
        // truncation, not the damage.
        self.check_source().inspect_err(|_| out.clear())?;
        result
    }

    /// Fails, for good, when the source lost bytes while it was read (a
    /// mapped file truncated by another process): nothing read since can be
    /// trusted. Callers check again after copying a batch out of the window.
    pub fn check_source(&mut self) -> Result<()> {
        match self.win.shrunk() {
            Some(at) => Err(self.shrunk_at(at)),
            None => Ok(()),
        }
    }

    /// Ends the scan: the file shrank to `at` bytes while it was read (found
    /// here, or by a reader of its mapping).
    pub fn shrunk_at(&mut self, at: u64) -> Error {
        self.state = State::Done;
        let detail = format!(
            "the file shrank while it was read: its bytes from offset {at} on are gone \
             (another process truncated or rewrote it)"
        );
        self.data_loss(DamageKind::TruncatedWhileReading, at, detail)
            .into()
    }

    fn next_batch_unchecked(
        &mut self,
        max_records: usize,
        max_bytes: usize,
        out: &mut Vec<Span>,
    ) -> Result<()> {
        out.clear();
        match std::mem::replace(&mut self.state, State::Active) {
            State::Active => {}
            State::Done => {
                self.state = State::Done;
                return Ok(());
            }
            State::Failed(err) => {
                self.state = State::Done;
                return Err(Error::DataLoss(err));
            }
            State::Resync {
                start,
                kind,
                offset,
                detail,
            } => self.resync(start, kind, offset, detail)?,
        }
        // Prefix CRCs computed ahead of the reader are kept (the bytes they
        // cover are not read again); with none ahead, a later need starts afresh.
        if self
            .crcs
            .as_ref()
            .is_some_and(|c| c.first_kept() < self.pos)
        {
            self.crcs = None;
        }
        match &mut self.crcs {
            Some(crcs) => {
                crcs.forget_before(self.pos);
                let needed = crcs.needed_from(self.pos);
                self.release(needed);
            }
            None => self.release(self.pos),
        }
        // Large payloads of a mapped file have their CRCs checked after
        // framing, on every core (see `DEFERRED_CRC_FROM`).
        let may_defer = self.verify
            && self.format == Format::TfRecord
            && !self.skip_damaged
            && self.win.whole().is_some()
            && crate::threads::available() > 1;
        let mut bytes = 0usize;
        while out.len() < max_records && bytes < max_bytes && matches!(self.state, State::Active) {
            self.frame_mapped(may_defer, max_records, max_bytes, &mut bytes, out);
            if out.len() >= max_records || bytes >= max_bytes {
                break;
            }
            match self.frame()? {
                Frame::Record(span) => {
                    bytes += span.len;
                    out.push(span);
                }
                Frame::End => self.state = State::Done,
                Frame::Damage {
                    kind,
                    start,
                    offset,
                    detail,
                } if self.skip_damaged => {
                    if out.is_empty() {
                        self.resync(start, kind, offset, detail)?;
                    } else {
                        self.state = State::Resync {
                            start,
                            kind,
                            offset,
                            detail,
                        };
                    }
                }
                Frame::Damage {
                    kind,
                    offset,
                    detail,
                    ..
                } => self.stop_at_damage(!out.is_empty(), kind, offset, detail)?,
            }
        }
        if may_defer {
            self.check_deferred(out)?;
        }
        Ok(())
    }

    /// Ends the scan at damage: reported now when the batch holds no record
    /// (`delivering` is false), else by the next call, so that every intact
    /// record is delivered first.
    fn stop_at_damage(
        &mut self,
        delivering: bool,
        kind: DamageKind,
        offset: u64,
        detail: String,
    ) -> Result<()> {
        let err = self.data_loss(kind, offset, detail);
        if !delivering {
            self.state = State::Done;
            return Err(err.into());
        }
        self.state = State::Failed(Box::new(err));
        Ok(())
    }

    /// Checks the payload CRCs left for after framing. From the
    /// first record that fails, the batch is framed again, checking: the
    /// damage ends it as if found while framing, after the records before it.
    fn check_deferred(&mut self, out: &mut Vec<Span>) -> Result<()> {
        let all = self.win.whole().expect("deferred only for mapped files");
        let Some(bad) = first_corrupt(all, out) else {
            return Ok(());
        };
        self.records -= (out.len() - bad) as u64;
        self.pos = out[bad].pos - self.format.header_len();
        self.state = State::Active;
        out.truncate(bad);
        match self.frame()? {
            Frame::Damage {
                kind,
                offset,
                detail,
                ..
            } => self.stop_at_damage(!out.is_empty(), kind, offset, detail)?,
            // Rewritten in place since it was framed (mapped files promise
            // nothing then); what it holds now is intact.
            Frame::Record(span) => out.push(span),
            Frame::End => self.state = State::Done,
        }
        Ok(())
    }

    /// Takes a compressed stream that stops without its end marker, exactly at
    /// a record boundary, for its end: a writer's flush point, as TensorFlow's
    /// `tf_record_iterator` reads a stream still being written. Stopping
    /// within a record is still damage (`TruncatedStream`).
    pub fn end_at_flush_points(&mut self) {
        self.unfinished_ends = true;
    }

    /// Goes on from the record frame at stream offset `pos`, numbered
    /// `record_index` (a position a previous scan reported). Forward only: a
    /// stream cannot go back, and a mapping has dropped the pages behind it.
    pub fn seek(&mut self, pos: u64, record_index: u64) -> Result<()> {
        if pos < self.pos || !matches!(self.state, State::Active) {
            return Err(Error::InvalidArgument(format!(
                "cannot seek {}: to {pos} from {} (seeking goes forward, before the end)",
                self.path, self.pos
            )));
        }
        self.pos = pos;
        self.records = record_index;
        self.crcs = None;
        Ok(())
    }

    /// Counts the remaining records without checking payload CRCs.
    pub fn count(&mut self) -> Result<u64> {
        self.count_in_parallel();
        let verify = std::mem::replace(&mut self.verify, false);
        let mut spans = Vec::new();
        let result = loop {
            match self.next_batch(COUNT_BATCH_RECORDS, COUNT_BATCH_BYTES, &mut spans) {
                Ok(()) if spans.is_empty() => break Ok(self.records),
                Ok(()) => {}
                Err(e) => break Err(e),
            }
        };
        self.verify = verify;
        result
    }

    /// Frames the rest of a mapped, uncompressed TFRecord file on every
    /// thread, where it is large enough and intact (see `parallel_framing`),
    /// and moves past it; else leaves the scanner where it is, for the serial
    /// count to frame it (and report any damage as it always does).
    fn count_in_parallel(&mut self) {
        if self.format != Format::TfRecord || self.skip_damaged {
            return;
        }
        let (Some(all), Ok(from)) = (self.win.whole(), usize::try_from(self.pos)) else {
            return;
        };
        let threads = crate::threads::available();
        if let Some((frames, end)) = crate::parallel_framing::count_frames(all, from, threads) {
            self.records += frames;
            self.pos = end as u64;
        }
    }

    fn data_loss(&self, kind: DamageKind, offset: u64, detail: String) -> DataLoss {
        DataLoss {
            kind,
            path: self.path.clone(),
            offset,
            record_index: self.records,
            detail,
        }
    }

    fn io_error(&self, e: io::Error) -> Error {
        if e.kind() == io::ErrorKind::OutOfMemory {
            return Error::ResourceExhausted(format!(
                "{}: {e} at offset {}; a record this large needs more memory than this process may use",
                self.path, self.pos
            ));
        }
        Error::Io {
            path: self.path.clone(),
            source: e,
        }
    }

    /// Frames the intact records from `self.pos` on straight from the
    /// mapping, where the file is mapped whole, until `out` holds
    /// `max_records` or `bytes` reaches `max_bytes`; stops early at the first
    /// record that [`Self::frame`] must frame (it reads any source and reports
    /// any damage). For small records the general path's window calls cost as
    /// much as the rest, and this loop keeps the scan's state in registers.
    #[inline]
    fn frame_mapped(
        &mut self,
        may_defer: bool,
        max_records: usize,
        max_bytes: usize,
        bytes: &mut usize,
        out: &mut Vec<Span>,
    ) {
        let Some(all) = self.win.whole() else {
            return;
        };
        let Ok(mut start) = usize::try_from(self.pos) else {
            return;
        };
        let (format, verify, skip_damaged) = (self.format, self.verify, self.skip_damaged);
        let crcs_to_parser = self.crcs_to_parser;
        let header_len = format.header_len() as usize;
        let footer_len = format.footer_len() as usize;
        let before = out.len();
        while out.len() < max_records && *bytes < max_bytes {
            let Some(header) = start
                .checked_add(header_len)
                .and_then(|end| all.get(start..end))
            else {
                break;
            };
            let length = match format {
                Format::TfRecord if header_crc_ok(header) => {
                    u64::from_le_bytes(header[..8].try_into().unwrap())
                }
                Format::TfRecord => break,
                Format::OfRecord => {
                    match u64::try_from(i64::from_le_bytes(header[..8].try_into().unwrap())) {
                        Ok(n) if n > 0 => n,
                        _ => break,
                    }
                }
            };
            let data_start = start + header_len;
            let Some(data_end) = usize::try_from(length)
                .ok()
                .and_then(|n| data_start.checked_add(n))
            else {
                break;
            };
            let Some(frame_end) = data_end.checked_add(footer_len).filter(|&e| e <= all.len())
            else {
                break;
            };
            if skip_damaged && length > DIRECT_CRC_MAX {
                break; // checked from prefix CRCs by `frame_at`
            }
            let len = data_end - data_start;
            let deferred = match len >= DEFERRED_CRC_FROM {
                true => may_defer,
                false => crcs_to_parser,
            };
            if !deferred && verify && format == Format::TfRecord {
                let stored = u32::from_le_bytes(all[data_end..frame_end].try_into().unwrap());
                if unmask(stored) != crate::crc::crc32c(&all[data_start..data_end]) {
                    break;
                }
            }
            out.push(Span {
                pos: data_start as u64,
                len,
            });
            *bytes += len;
            start = frame_end;
        }
        self.records += (out.len() - before) as u64;
        self.pos = start as u64;
    }

    /// Frames the record at `self.pos` and advances past it.
    fn frame(&mut self) -> Result<Frame> {
        let frame = self.frame_at(self.pos, self.verify)?;
        if let Frame::Record(span) = frame {
            self.pos = span.pos + span.len as u64 + self.format.footer_len();
            self.records += 1;
        }
        Ok(frame)
    }

    fn stream_fault(&self) -> Option<(DamageKind, String)> {
        self.win.fault().map(|f| match f {
            StreamFault::Truncated(m) => (DamageKind::TruncatedStream, m),
            StreamFault::Corrupt(m) => (DamageKind::CorruptStream, m),
        })
    }

    fn frame_at(&mut self, start: u64, verify: bool) -> Result<Frame> {
        let header_len = self.format.header_len();
        let got = self
            .win
            .fill(start, header_len)
            .map_err(|e| self.io_error(e))?;
        if got < header_len {
            let fault = self.stream_fault();
            return Ok(match (got, fault) {
                (0, None) => Frame::End,
                (0, Some((DamageKind::TruncatedStream, _))) if self.unfinished_ends => Frame::End,
                (0, Some((kind, why))) => {
                    Frame::Damage { kind, start, offset: start, detail: format!("truncated record at {start}: {why}") }
                }
                (_, fault) => Frame::Damage {
                    kind: fault.as_ref().map_or(DamageKind::PartialHeader, |f| f.0),
                    start,
                    offset: start,
                    detail: match fault {
                        Some((_, why)) => format!("truncated record at {start}: {why}"),
                        None => format!(
                            "truncated record at {start}: the file ends {got} bytes into a {header_len}-byte record \
                             header (a writer stopped mid-record?)"
                        ),
                    },
                },
            });
        }
        let header = self.win.bytes(start, header_len as usize);
        let length = match self.format {
            Format::TfRecord => {
                if !header_crc_ok(header) {
                    let hint = if start == 0 {
                        " (is this even a TFRecord file?)"
                    } else {
                        ""
                    };
                    return Ok(Frame::Damage {
                        kind: DamageKind::CorruptLength,
                        start,
                        offset: start,
                        detail: format!(
                            "corrupted record at {start}: the length field fails its CRC{hint}"
                        ),
                    });
                }
                u64::from_le_bytes(header[..8].try_into().unwrap())
            }
            Format::OfRecord => {
                let length = i64::from_le_bytes(header[..8].try_into().unwrap());
                if length <= 0 {
                    return Ok(Frame::Damage {
                        kind: DamageKind::InvalidLength,
                        start,
                        offset: start,
                        detail: format!("invalid OFRecord length {length} at {start} (lengths must be positive)"),
                    });
                }
                length as u64
            }
        };
        let footer_len = self.format.footer_len();
        let total = length.checked_add(header_len + footer_len);
        let data_at = start + header_len;
        let truncated = |got: u64, fault: Option<String>| {
            let why = fault.unwrap_or_else(|| {
                let crc = match footer_len {
                    0 => String::new(),
                    n => format!(" and its {n}-byte CRC"),
                };
                format!(
                    "the header claims {length} bytes of data{crc} but only {} bytes remain",
                    got.saturating_sub(header_len)
                )
            });
            Frame::Damage {
                kind: DamageKind::TruncatedRecord,
                start,
                offset: start,
                detail: format!("truncated record at {start}: {why}"),
            }
        };
        let corrupt = Frame::Damage {
            kind: DamageKind::CorruptData,
            start,
            offset: data_at,
            detail: corrupt_data_detail(data_at),
        };
        let check_crc = verify && self.format == Format::TfRecord;
        if self.skip_damaged && self.win.whole().is_none() && length > STREAM_RESYNC_MAX_RECORD {
            // Checking it means holding it or reading it twice, and a hostile
            // stream can put such a claim after every record: while skipping,
            // a stream's records over the limit are damage, reported as such.
            return Ok(Frame::Damage {
                kind: DamageKind::TooLargeToSkip,
                start,
                offset: start,
                detail: format!(
                    "the record at {start} claims {length} bytes: while skipping damage in a compressed \
                     or streamed file, records over {} MiB are not checked (read it with on_error=\"raise\")",
                    STREAM_RESYNC_MAX_RECORD >> 20
                ),
            });
        }
        // A stream's bytes are held until a record is whole. A claim beyond
        // both READ_AHEAD_FROM and all the stream has given so far is checked
        // first by reading ahead without holding (where the source can be read
        // again), so a lying length or a record failing its CRC costs no
        // memory: a 4 MB GZIP bomb claiming 4 GB is refused in constant space.
        // Requiring the claim to exceed the offset keeps the re-read from the
        // start of the stream cheaper than the record itself.
        if total.is_some() && self.win.whole().is_none() && length > READ_AHEAD_FROM.max(start) {
            if let Some(ahead) = self
                .win
                .read_ahead(data_at, length)
                .map_err(|e| self.io_error(e))?
            {
                if ahead.available < length + footer_len {
                    let fault = ahead.fault.map(|f| match f {
                        StreamFault::Truncated(m) | StreamFault::Corrupt(m) => m,
                    });
                    return Ok(truncated(header_len + ahead.available, fault));
                }
                if check_crc && unmask(u32::from_le_bytes(ahead.tail)) != ahead.crc {
                    return Ok(corrupt);
                }
            }
        }
        let got = match total {
            Some(total) => self.win.fill(start, total).map_err(|e| self.io_error(e))?,
            None => 0,
        };
        if total != Some(got) {
            return Ok(truncated(got, self.stream_fault().map(|f| f.1)));
        }
        let span = Span {
            pos: data_at,
            len: length as usize,
        };
        if check_crc {
            let crc = if self.skip_damaged && length > DIRECT_CRC_MAX {
                let origin = self.pos;
                let crcs = self.crcs.get_or_insert_with(|| PrefixCrcs::new(origin));
                crcs.range(self.win.as_mut(), data_at, data_at + length)
                    .map_err(|e| self.io_error(e))?
            } else {
                crate::crc::crc32c(self.win.bytes(span.pos, span.len))
            };
            let footer = self.win.bytes(span.pos + length, 4);
            if unmask(u32::from_le_bytes(footer.try_into().unwrap())) != crc {
                return Ok(corrupt);
            }
        }
        Ok(Frame::Record(span))
    }

    /// Searches forward from damage at `start` for the next offset where a
    /// whole record checks (length, its CRC, payload, its CRC) and goes on
    /// from there. The skipped region is recorded.
    ///
    /// Linear in the bytes passed over, whatever the damage: a candidate's
    /// payload CRC comes from two prefix CRCs ([`PrefixCrcs`]) in O(log n),
    /// not from reading its payload, which hostile bytes (a plausible header
    /// every few bytes, each claiming most of the file) made quadratic.
    fn resync(&mut self, start: u64, kind: DamageKind, offset: u64, detail: String) -> Result<()> {
        let mut candidate = start + 1;
        let origin = self.pos;
        let mut prefix = self.crcs.take().unwrap_or_else(|| PrefixCrcs::new(origin));
        let found = self.search(&mut prefix, &mut candidate);
        self.crcs = Some(prefix);
        match found? {
            Some(at) => self.end_skip(start, at, State::Active, (offset, kind, detail)),
            None => self.end_skip(start, candidate, State::Done, (offset, kind, detail)),
        }
        Ok(())
    }

    /// The next offset from `candidate` on where a whole record checks, or
    /// None at the end (`candidate` is then the end).
    fn search(&mut self, prefix: &mut PrefixCrcs, candidate: &mut u64) -> Result<Option<u64>> {
        const SCAN: u64 = 1 << 20;
        loop {
            prefix
                .advance_to(self.win.as_mut(), *candidate)
                .map_err(|e| self.io_error(e))?;
            prefix.forget_before(*candidate);
            self.release(prefix.needed_from(*candidate));
            let got = self
                .win
                .fill(*candidate, SCAN + TF_HEADER as u64)
                .map_err(|e| self.io_error(e))?;
            if got < TF_HEADER as u64 {
                *candidate += got;
                return Ok(None);
            }
            // Each offset's header is checked once, and the search stops at the
            // first whole record: damage every few records must not cost a
            // whole scan window each time.
            let last = got as usize - TF_HEADER;
            let mut i = 0;
            while i <= last {
                let window = self.win.bytes(*candidate, got as usize);
                let Some(hit) = (i..=last).find(|&j| header_crc_ok(&window[j..j + TF_HEADER]))
                else {
                    break;
                };
                // The payload check is what `frame_at` makes, from prefix CRCs.
                if self.payload_crc_checks(prefix, *candidate + hit as u64)? {
                    return Ok(Some(*candidate + hit as u64));
                }
                i = hit + 1;
            }
            *candidate += got - TF_HEADER as u64 + 1;
        }
    }

    /// Records the region `[start, resume)` as skipped, with the damage found at
    /// its start (`offset`, `kind`, `detail`), and goes on from `resume`.
    fn end_skip(
        &mut self,
        start: u64,
        resume: u64,
        state: State,
        damage: (u64, DamageKind, String),
    ) {
        let (offset, kind, detail) = damage;
        self.skipped.push(Skipped {
            offset,
            bytes: resume - start,
            kind,
            detail,
            record_index: self.records,
        });
        self.pos = resume;
        self.state = state;
    }

    /// Whether the record whose (checked) header is at `at` is whole and its
    /// payload matches its CRC: what `frame_at(at, true)` checks, without
    /// reading the payload.
    fn payload_crc_checks(&mut self, prefix: &mut PrefixCrcs, at: u64) -> Result<bool> {
        let length = u64::from_le_bytes(self.win.bytes(at, 8).try_into().unwrap());
        let Some(total) = length.checked_add(TF_HEADER as u64 + 4) else {
            return Ok(false);
        };
        if self.win.whole().is_none() && length > STREAM_RESYNC_MAX_RECORD {
            return Ok(false);
        }
        if self.win.fill(at, total).map_err(|e| self.io_error(e))? < total {
            return Ok(false); // runs past the end: not a whole record
        }
        let (data, footer) = (at + TF_HEADER as u64, at + TF_HEADER as u64 + length);
        let win = self.win.as_mut();
        let crc = prefix
            .range(win, data, footer)
            .map_err(|e| self.io_error(e))?;
        let stored = u32::from_le_bytes(self.win.bytes(footer, 4).try_into().unwrap());
        Ok(unmask(stored) == crc)
    }
}

/// CRC-32Cs of every prefix of a stream from `origin`, kept at checkpoints
/// every [`PrefixCrcs::STEP`] bytes, so that the CRC of any range after the
/// last forgotten checkpoint costs at most two short CRCs and one `shift`.
struct PrefixCrcs {
    origin: u64,
    /// Checkpoints forgotten from the front (their bytes are behind the reader).
    forgotten: u64,
    /// `checkpoints[k]` is the CRC of `[origin, origin + (forgotten + k) * STEP)`.
    checkpoints: std::collections::VecDeque<u32>,
}

impl PrefixCrcs {
    const STEP: u64 = 4096;

    fn new(origin: u64) -> Self {
        PrefixCrcs {
            origin,
            forgotten: 0,
            checkpoints: [0].into(),
        }
    }

    /// Where the last computed checkpoint is.
    fn first_kept(&self) -> u64 {
        self.origin + (self.forgotten + self.checkpoints.len() as u64 - 1) * Self::STEP
    }

    /// The checkpoint at or before `pos`: every range asked for later starts
    /// at or after `pos`, so the bytes before this one are not needed again.
    fn checkpoint_before(&self, pos: u64) -> u64 {
        self.origin + (pos - self.origin) / Self::STEP * Self::STEP
    }

    /// Where a window may release bytes up to: nothing before it is read again.
    fn needed_from(&self, pos: u64) -> u64 {
        self.checkpoint_before(pos).min(self.first_kept())
    }

    /// Drops the checkpoints before the one at or before `pos` (ranges asked
    /// for later start at or after `pos`), so memory follows the bytes ahead
    /// of the reader, not the file's size.
    fn forget_before(&mut self, pos: u64) {
        let keep_from = (pos - self.origin) / Self::STEP;
        while self.forgotten < keep_from && self.checkpoints.len() > 1 {
            self.checkpoints.pop_front();
            self.forgotten += 1;
        }
    }

    /// Computes checkpoints up to the last one at or before `pos` (each byte
    /// is read once over the whole scan).
    fn advance_to(&mut self, win: &mut dyn Window, pos: u64) -> io::Result<()> {
        while self.first_kept() + Self::STEP <= pos {
            let from = self.first_kept();
            if win.fill(from, Self::STEP)? < Self::STEP {
                break;
            }
            let last = *self.checkpoints.back().unwrap();
            self.checkpoints.push_back(crate::crc::crc32c_append(
                last,
                win.bytes(from, Self::STEP as usize),
            ));
        }
        Ok(())
    }

    /// The CRC of `[origin, pos)`; `pos` must not be before the last forgotten checkpoint.
    fn at(&mut self, win: &mut dyn Window, pos: u64) -> io::Result<u32> {
        self.advance_to(win, pos)?;
        let k = (pos - self.origin) / Self::STEP;
        let kept = k
            .checked_sub(self.forgotten)
            .ok_or_else(|| io::Error::other("a CRC was asked for bytes already passed"))?;
        let kept = (kept as usize).min(self.checkpoints.len() - 1);
        let from = self.origin + (self.forgotten + kept as u64) * Self::STEP;
        win.fill(from, pos - from)?;
        Ok(crate::crc::crc32c_append(
            self.checkpoints[kept],
            win.bytes(from, (pos - from) as usize),
        ))
    }

    /// The CRC of `[from, to)`, from the prefix CRCs at both ends.
    fn range(&mut self, win: &mut dyn Window, from: u64, to: u64) -> io::Result<u32> {
        let head = self.at(win, from)?;
        let whole = self.at(win, to)?;
        Ok(whole ^ shift(head, to - from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crc::masked_crc32c;
    use crate::window::{Stream, StreamWindow};

    fn frames(records: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for r in records {
            write_tfrecord(&mut out, r).unwrap();
        }
        out
    }

    fn scanner(bytes: Vec<u8>, skip: bool) -> Scanner {
        let win = StreamWindow::new(Stream::Raw(std::io::Cursor::new(bytes)));
        Scanner::new(Box::new(win), Format::TfRecord, true, skip, "test".into()).unwrap()
    }

    fn read_all(s: &mut Scanner) -> (Vec<Vec<u8>>, Option<Error>) {
        let mut spans = Vec::new();
        let mut got = Vec::new();
        loop {
            match s.next_batch(2, usize::MAX, &mut spans) {
                Ok(()) if spans.is_empty() => return (got, None),
                Ok(()) => got.extend(spans.iter().map(|&sp| s.payload(sp).to_vec())),
                Err(e) => return (got, Some(e)),
            }
        }
    }

    #[test]
    fn counting_takes_records_in_steps_and_still_reports_damage() {
        let record = [7u8; 20];
        let n = COUNT_BATCH_RECORDS * 2 + 5;
        let bytes = frames(&vec![&record[..]; n]);
        assert_eq!(scanner(bytes.clone(), false).count().unwrap(), n as u64);
        // A payload CRC is not checked by a count; a damaged length is, after
        // the intact records of the same step.
        let mut damaged = bytes.clone();
        let frame_len = 12 + record.len() + 4;
        damaged[(COUNT_BATCH_RECORDS + 3) * frame_len + 14] ^= 0xff;
        assert_eq!(scanner(damaged, false).count().unwrap(), n as u64);
        let mut damaged = bytes;
        damaged[(COUNT_BATCH_RECORDS + 3) * frame_len + 2] ^= 0xff;
        let err = loss(scanner(damaged, false).count().err());
        assert_eq!(err.record_index, COUNT_BATCH_RECORDS as u64 + 3);
    }

    fn loss(e: Option<Error>) -> DataLoss {
        match e {
            Some(Error::DataLoss(d)) => *d,
            other => panic!("expected data loss, got {other:?}"),
        }
    }

    #[test]
    fn tensorflow_worked_bytes() {
        assert_eq!(frames(&[b""]), hex("00000000000000002903980 7d8ea82a2"));
        assert_eq!(
            frames(&[b"abc"]),
            hex("0300000000000000b099490e6162636e57f121")
        );
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn sealed_frames_match_written_frames() {
        for (format, data) in [
            (Format::TfRecord, &b"abc"[..]),
            (Format::TfRecord, b""),
            (Format::OfRecord, b"xyz"),
        ] {
            let mut expected = Vec::new();
            match format {
                Format::TfRecord => write_tfrecord(&mut expected, data).unwrap(),
                Format::OfRecord => write_ofrecord(&mut expected, data).unwrap(),
            }
            let mut buf = vec![0; header_len(format)];
            buf.extend_from_slice(data);
            buf.resize(buf.len() + format.footer_len() as usize, 0);
            seal_frame(&mut buf, format);
            assert_eq!(buf, expected);
        }
    }

    #[test]
    fn reads_back_records() {
        let recs: Vec<Vec<u8>> = (0..50).map(|i| vec![i as u8; i * 7]).collect();
        let refs: Vec<&[u8]> = recs.iter().map(|r| r.as_slice()).collect();
        let (got, err) = read_all(&mut scanner(frames(&refs), false));
        assert!(err.is_none());
        assert_eq!(got, recs);
    }

    #[test]
    fn damage_offsets_follow_tensorflow() {
        let good = frames(&[b"first", b"second"]);
        let second = 12 + 5 + 4;
        // Payload byte flipped: reported at the payload's start.
        let mut bytes = good.clone();
        bytes[second + 12] ^= 1;
        let (got, err) = read_all(&mut scanner(bytes, false));
        assert_eq!(got, vec![b"first".to_vec()]);
        let d = loss(err);
        assert_eq!(
            (d.kind, d.offset, d.record_index),
            (DamageKind::CorruptData, second as u64 + 12, 1)
        );
        // Length byte flipped: reported at the record's start.
        let mut bytes = good.clone();
        bytes[second] ^= 1;
        let d = loss(read_all(&mut scanner(bytes, false)).1);
        assert_eq!(
            (d.kind, d.offset),
            (DamageKind::CorruptLength, second as u64)
        );
        // Cut in the payload, and cut in the header.
        let d = loss(read_all(&mut scanner(good[..second + 14].to_vec(), false)).1);
        assert_eq!(
            (d.kind, d.offset),
            (DamageKind::TruncatedRecord, second as u64)
        );
        let d = loss(read_all(&mut scanner(good[..second + 5].to_vec(), false)).1);
        assert_eq!(
            (d.kind, d.offset),
            (DamageKind::PartialHeader, second as u64)
        );
    }

    #[test]
    fn mapped_files_checked_after_framing_fail_as_streams_do() {
        // A mapped file's payload CRCs are checked after each batch is framed (on
        // every core); a stream's while framing. Records and damage must agree.
        // Records 0 and 399 are short: checked while framing, between deferred ones;
        // batches of 300 hold 12 MB, checked on two threads where there are two.
        let records: Vec<Vec<u8>> = (0..400u32)
            .map(|i| {
                let len = if i % 399 == 0 { 300 } else { 40_000 };
                (0..len).map(|j| (i * 7 + j) as u8).collect()
            })
            .collect();
        let refs: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
        let clean = frames(&refs);
        let path = std::env::temp_dir().join(format!("recordkit-deferred-{}", std::process::id()));
        for bad in [0usize, 1, 250, 398, 399] {
            let mut bytes = clean.clone();
            let at: usize = records[..bad].iter().map(|r| r.len() + 16).sum();
            bytes[at + 12 + 100] ^= 1;
            std::fs::write(&path, &bytes).unwrap();
            let win =
                crate::window::MappedWindow::new(std::fs::File::open(&path).unwrap()).unwrap();
            let mut mapped =
                Scanner::new(Box::new(win), Format::TfRecord, true, false, "test".into()).unwrap();
            let mut batches = (Vec::new(), Vec::new());
            let mut spans = Vec::new();
            let error = loop {
                match mapped.next_batch(300, usize::MAX, &mut spans) {
                    Ok(()) if spans.is_empty() => break None,
                    Ok(()) => {
                        batches.0.push(spans.len());
                        batches
                            .1
                            .extend(spans.iter().map(|&sp| mapped.payload(sp).to_vec()));
                    }
                    Err(e) => break Some(e),
                }
            };
            let (expected, expected_error) = read_all(&mut scanner(bytes, false));
            assert_eq!(batches.1, expected, "record {bad}");
            assert_eq!(batches.0.iter().sum::<usize>(), bad);
            assert_eq!(loss(error), loss(expected_error), "record {bad}");
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn seeking_resumes_at_a_frame_with_its_number() {
        let records: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 1 + i as usize]).collect();
        let refs: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
        let bytes = frames(&refs);
        let offset_of_7: u64 = (0..7).map(|i| 16 + 1 + i as u64).sum();
        let mut s = scanner(bytes, false);
        s.seek(offset_of_7, 7).unwrap();
        let (read, err) = read_all(&mut s);
        assert!(err.is_none());
        assert_eq!(read, records[7..].to_vec());
        assert_eq!(s.records(), 10);
        assert!(s.seek(0, 0).is_err(), "seeking back must be refused");
    }

    #[test]
    fn huge_length_is_refused_without_allocating() {
        let len = (1u64 << 62).to_le_bytes();
        let mut bytes = len.to_vec();
        bytes.extend(masked_crc32c(&len).to_le_bytes());
        bytes.extend([0u8; 88]);
        let d = loss(read_all(&mut scanner(bytes, false)).1);
        assert_eq!((d.kind, d.offset), (DamageKind::TruncatedRecord, 0));
    }

    #[test]
    fn skipping_resynchronizes_after_damage() {
        let recs: Vec<Vec<u8>> = (0..10)
            .map(|i| format!("record number {i}").into_bytes())
            .collect();
        let refs: Vec<&[u8]> = recs.iter().map(|r| r.as_slice()).collect();
        let mut bytes = frames(&refs);
        let rec_len = 12 + recs[0].len() + 4;
        bytes[3 * rec_len + 14] ^= 0xff; // record 3's payload
        bytes[6 * rec_len + 2] ^= 0xff; // record 6's length
        let mut s = scanner(bytes, true);
        let (got, err) = read_all(&mut s);
        assert!(err.is_none());
        let expected: Vec<Vec<u8>> = recs
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 3 && *i != 6)
            .map(|(_, r)| r.clone())
            .collect();
        assert_eq!(got, expected);
        let skipped = s.take_skipped();
        assert_eq!(skipped.len(), 2);
        assert_eq!(skipped[0].bytes, rec_len as u64);
        assert_eq!(skipped[0].offset, 3 * rec_len as u64 + 12);
        assert_eq!(skipped[1].offset, 6 * rec_len as u64);
    }

    #[test]
    fn ofrecord_lengths_are_checked() {
        let mut bytes = Vec::new();
        write_ofrecord(&mut bytes, b"payload").unwrap();
        bytes.extend(0i64.to_le_bytes());
        let win = StreamWindow::new(Stream::Raw(std::io::Cursor::new(bytes)));
        let mut s = Scanner::new(Box::new(win), Format::OfRecord, true, false, "t".into()).unwrap();
        let (got, err) = read_all(&mut s);
        assert_eq!(got, vec![b"payload".to_vec()]);
        assert_eq!(loss(err).kind, DamageKind::InvalidLength);
    }
}

#[cfg(test)]
mod timing {
    use super::*;
    use crate::encode::Values;

    /// `cargo test --release --lib framing::timing -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn encode_and_frame_speed() {
        let values: Vec<i64> = (0..200_000).collect();
        for target in ["vec", "bufwriter-file"] {
            let start = std::time::Instant::now();
            let mut sink: Box<dyn std::io::Write> = match target {
                "vec" => Box::new(Vec::with_capacity(8 << 20)),
                _ => Box::new(std::io::BufWriter::with_capacity(
                    1 << 20,
                    std::fs::File::create("/tmp/timing.tfrecord").unwrap(),
                )),
            };
            let mut frame = Vec::new();
            let mut scratch = Vec::new();
            let layout = crate::encode::EntryLayout::new(
                b"feature1",
                Some(crate::example::Kind::Int64),
                crate::example::Schema::TensorFlow,
            )
            .unwrap();
            for v in values.chunks(1) {
                frame.clear();
                frame.resize(12, 0);
                crate::encode::put_row(
                    &mut frame,
                    &[(&layout, Some(Values::Int64(v)))],
                    true,
                    &mut scratch,
                );
                frame.resize(frame.len() + 4, 0);
                seal_frame(&mut frame, Format::TfRecord);
                sink.write_all(&frame).unwrap();
            }
            sink.flush().unwrap();
            let ns = start.elapsed().as_nanos() as f64 / values.len() as f64;
            println!("{target}: encode + frame {ns:.0} ns/record");
        }
    }
}
