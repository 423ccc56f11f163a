//! The write pipeline: the rows of a write, cut into chunks, encoded into
//! reused buffers on every core recordkit may use, and written to the file in
//! order; or all that on a thread of its own behind the caller
//! ([`WriteBehind`]), while the caller reads the next rows.

use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use crate::encode::{RowPlan, ROW_SLACK};
use crate::error::{Error, Result};
use crate::frame::{header_len, seal_frame, Format};
use crate::pool::Panic;

/// The largest encoding buffer kept in a writer's spare buffers: one that
/// grew for a huge row goes back to the allocator.
const SPARE_BUFFER_LIMIT: usize = 4 * ENCODE_CHUNK_BYTES;

pub fn keep_spare(spare: &mut Vec<Vec<u8>>, buffer: Vec<u8>) {
    if buffer.capacity() <= SPARE_BUFFER_LIMIT {
        spare.push(buffer);
    }
}

/// Encoding buffers a closed writer left for the next one, so that a process
/// writing file after file (shards, a loop of `write_examples`) does not make
/// and zero fresh ones for each: the memset took 1.2-2.2 ms of CPU off a write
/// of 300 000 small rows (benchmarks/README.md).
static PROCESS_SPARE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// The most bytes of buffers [`PROCESS_SPARE`] keeps while no writer uses them.
const PROCESS_SPARE_BYTES: usize = 32 << 20;

/// The buffers closed writers left, for a new one.
pub fn spare_from_process() -> Vec<Vec<u8>> {
    // `try_lock`: a child forked while another thread held the lock must not
    // wait for it forever; a writer that misses the buffers only zeroes its own.
    match PROCESS_SPARE.try_lock() {
        Ok(mut kept) => std::mem::take(&mut *kept),
        Err(_) => Vec::new(),
    }
}

/// Keeps a closed writer's buffers for the next writer, up to [`PROCESS_SPARE_BYTES`].
pub fn spare_to_process(spare: Vec<Vec<u8>>) {
    if let Ok(mut kept) = PROCESS_SPARE.try_lock() {
        let mut held: usize = kept.iter().map(Vec::capacity).sum();
        for buffer in spare {
            if held + buffer.capacity() <= PROCESS_SPARE_BYTES {
                held += buffer.capacity();
                kept.push(buffer);
            }
        }
    }
}

/// The most rows encoded per chunk (~1.6 MB of small Examples): each chunk
/// costs a thread wake-up or two, which on a VM can take tens of microseconds
/// (at 2048 rows they were 12% of the time), while the buffers stay few and reused.
pub const ENCODE_CHUNK_ROWS: usize = 16384;

/// About the most bytes encoded per chunk: rows of large values (images) come
/// fewer to a chunk, so that the four buffers in flight stay small. At 4 MB,
/// rows of about 150 bytes (the 3c rows of `bench_threads.py`) came 16384 to
/// a 2.5 MB chunk and took 20-30% more CPU on two threads than in the 1.9 MB
/// chunks they get now, most of it in the kernel's copy of each chunk into
/// the page cache, made then by a thread of its own that wrote the chunks in
/// order, often on the other core than the one that encoded it
/// (benchmarks/README.md). The tutorial's 100-byte rows keep 16384 a chunk.
const ENCODE_CHUNK_BYTES: usize = 2 << 20;

/// Rows per encoding chunk for `rows` rows of `columns` columns whose values
/// take `value_bytes` in all.
pub fn chunk_rows(value_bytes: usize, columns: usize, rows: usize) -> usize {
    // Framing, and a few bytes of keys and lengths per feature.
    let per_row = value_bytes / rows.max(1) + 16 + 16 * columns;
    (ENCODE_CHUNK_BYTES / per_row).clamp(1, ENCODE_CHUNK_ROWS)
}

/// Rows `0..rows` of `plan`, encoded `per_chunk` rows a chunk on every core
/// recordkit may use, and handed to `write` in order. `spare` lends the
/// encoding buffers and gets them back. `caller`: the thread that called a
/// write behind, where it goes on beside it.
pub fn write_rows(
    plan: &RowPlan<'_>,
    rows: usize,
    per_chunk: usize,
    format: Format,
    write: &mut WriteChunk<'_>,
    spare: &mut Vec<Vec<u8>>,
    caller: Option<&Caller>,
) -> Result<()> {
    let chunks: Vec<std::ops::Range<usize>> = (0..rows)
        .step_by(per_chunk)
        .map(|start| start..rows.min(start + per_chunk))
        .collect();
    let threads = crate::threads::available().min(chunks.len());
    if threads <= 1 {
        let mut buffer = spare.pop().unwrap_or_default();
        for range in chunks {
            let used = encode_frames(plan, range, format, &mut buffer);
            write(&buffer[..used])?;
        }
        keep_spare(spare, buffer);
        return Ok(());
    }
    // Two buffers a thread, and no more than the chunks: a buffer never
    // used would be made and zeroed for nothing. They go back to the pool
    // once written, and are reused: the memory stays small and touched.
    let buffers = (2 * threads).min(chunks.len());
    let work = ChunkWork {
        plan,
        chunks: &chunks,
        format,
        next: AtomicUsize::new(0),
        empty: Mutex::new(
            (0..buffers)
                .map(|_| spare.pop().unwrap_or_default())
                .collect(),
        ),
        returned: Condvar::new(),
        stopped: AtomicBool::new(false),
        order: Mutex::new(InOrder {
            ready: (0..chunks.len()).map(|_| None).collect(),
            next: 0,
            writing: false,
            failure: None,
        }),
        caller: caller.map(|caller| (caller, threads)),
        sink: Mutex::new(write),
    };
    crate::pool::scope(|scope| {
        // Whatever ends this (a thread that could not be started), the
        // threads encoding stop waiting for buffers.
        let _stop = StopOnDrop(&work);
        for _ in 1..threads {
            scope.spawn(|| work.run());
        }
        // This thread encodes too: it is one of the write's threads.
        work.run();
    });
    let InOrder {
        ready,
        next,
        failure,
        ..
    } = work
        .order
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    let empty = work
        .empty
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    // Buffers left unwritten where the write stopped on a failure.
    for buffer in empty
        .into_iter()
        .chain(ready.into_iter().flatten().map(|(b, _)| b))
    {
        keep_spare(spare, buffer);
    }
    match failure {
        Some(Failure::Panic(panic)) => std::panic::resume_unwind(panic),
        Some(Failure::Write(error)) => Err(error),
        None if next == chunks.len() => Ok(()),
        None => unreachable!("every chunk is written unless the write failed"),
    }
}

/// Whether the thread that called a write behind is busy beside it (reading
/// the next slice of Python objects), and how many of the write's threads are
/// encoding: while the caller is busy, one fewer thread encodes than the write
/// has, so that no more threads run than there are cores. With one thread too
/// many, the scheduler took the core of a thread in the middle of a chunk for
/// milliseconds, and the chunks after it, encoded, waited to be written in
/// order while the other threads ran out of buffers (benchmarks/README.md).
/// Writing a chunk does not count (see [`ChunkWork::one_chunk`]).
#[derive(Default)]
pub struct Caller {
    state: Mutex<CallerState>,
    changed: Condvar,
}

#[derive(Default)]
struct CallerState {
    busy: bool,
    encoding: usize,
}

impl Caller {
    /// The caller is busy (true) or waits for the write (false).
    pub fn set_busy(&self, busy: bool) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .busy = busy;
        self.changed.notify_all();
    }

    /// Waits for a turn to encode, of `threads` in all; false where `done()`
    /// says there is nothing more to encode.
    fn enter(&self, threads: usize, done: impl Fn() -> bool) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if done() {
                return false;
            }
            if !state.busy || state.encoding + 1 < threads {
                state.encoding += 1;
                return true;
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn leave(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .encoding -= 1;
        self.changed.notify_all();
    }

    /// Wakes every thread waiting to encode (the write stopped).
    fn wake(&self) {
        let _state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.changed.notify_all();
    }
}

/// A thread's turn to encode beside a busy caller, given back when dropped.
struct EncodingTurn<'a>(&'a Caller);

impl Drop for EncodingTurn<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// A write's chunks, each encoded by whichever thread comes for the next,
/// and written in order by whichever thread completes the next to write:
/// no thread only writes. A thread of its own that wrote the chunks in order
/// competed with the encoding threads for the cores, and was often not
/// running when the next chunk was ready; the encoding threads, out of
/// buffers, then waited for it (a traced write of the 3c rows had one thread
/// working for 17 of its 60 ms; benchmarks/README.md).
struct ChunkWork<'a> {
    plan: &'a RowPlan<'a>,
    chunks: &'a [std::ops::Range<usize>],
    format: Format,
    /// The next chunk to encode.
    next: AtomicUsize,
    /// Buffers free to encode into. A thread takes one before it claims a
    /// chunk, so that a claimed chunk is always encoded, and the chunks
    /// before the next to write always come.
    empty: Mutex<Vec<Vec<u8>>>,
    returned: Condvar,
    /// Set once the write failed: the threads stop taking chunks.
    stopped: AtomicBool,
    order: Mutex<InOrder>,
    /// The thread that called the write, where it runs beside it, and the
    /// write's number of threads.
    caller: Option<(&'a Caller, usize)>,
    /// Writes a chunk's bytes to the file; called by one thread at a time
    /// (the one whose turn `InOrder::writing` gave it), in order.
    sink: Mutex<&'a mut WriteChunk<'a>>,
}

/// Writes a chunk's bytes to a write's file.
pub type WriteChunk<'a> = dyn FnMut(&[u8]) -> Result<()> + Send + 'a;

/// The chunks encoded and not yet written, and whose turn it is to write.
struct InOrder {
    /// Chunk k's buffer and the bytes of it used, once encoded, until written.
    ready: Vec<Option<(Vec<u8>, usize)>>,
    /// The next chunk to write.
    next: usize,
    /// Whether a thread is writing: it writes `next` and every chunk after it
    /// that is ready, so that the chunks go to the file in order.
    writing: bool,
    /// What stopped the write, the first thing that did.
    failure: Option<Failure>,
}

/// Why a write's threads stopped before every chunk was written.
enum Failure {
    Write(Error),
    /// A panic in one of the write's threads (encoding, or in the file's
    /// write), raised again by the thread that called the write.
    Panic(Panic),
}

impl ChunkWork<'_> {
    /// Encodes chunks until none is left or the write failed, and writes the
    /// chunks that are its turn to write.
    fn run(&self) {
        loop {
            if let Some((caller, threads)) = self.caller {
                let done = || {
                    self.stopped.load(Ordering::Relaxed)
                        || self.next.load(Ordering::Relaxed) >= self.chunks.len()
                };
                if !caller.enter(threads, done) {
                    return;
                }
            }
            if !self.one_chunk() {
                return;
            }
        }
    }

    /// Encodes the next chunk, and writes what is its turn to write; false
    /// once no chunk is left or the write failed. The turn to encode (see
    /// [`Caller`]) ends with the encoding: a thread writing lets another
    /// encode, so that a write slow to return (the kernel reclaiming pages,
    /// the thread losing its core) does not stop the encoding.
    fn one_chunk(&self) -> bool {
        let mut turn = self.caller.map(|(caller, _)| EncodingTurn(caller));
        let Some(mut buffer) = self.take_buffer() else {
            return false;
        };
        let k = self.next.fetch_add(1, Ordering::Relaxed);
        let Some(range) = self.chunks.get(k) else {
            self.give_back(buffer);
            return false;
        };
        // A panic, here or in the sink, stops the write: the other threads,
        // which may wait for this chunk to be written, stop too.
        let done = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let used = encode_frames(self.plan, range.clone(), self.format, &mut buffer);
            drop(turn.take());
            self.encoded(k, buffer, used)
        }));
        match done {
            Ok(written) => written,
            Err(panic) => {
                self.fail(Failure::Panic(panic));
                false
            }
        }
    }

    /// Chunk `k` is encoded: it waits for its turn, or is written now with
    /// the chunks after it that are ready, where it is the next to write and
    /// no other thread is writing.
    /// False where a write failed.
    fn encoded(&self, k: usize, buffer: Vec<u8>, used: usize) -> bool {
        let mut order = self.order.lock().unwrap_or_else(PoisonError::into_inner);
        order.ready[k] = Some((buffer, used));
        if order.writing {
            return true; // the thread writing takes it in turn: it looks under this lock
        }
        order.writing = true;
        loop {
            let next = order.next;
            let Some((buffer, used)) = order.ready.get_mut(next).and_then(Option::take) else {
                break;
            };
            drop(order);
            let result =
                (self.sink.lock().unwrap_or_else(PoisonError::into_inner))(&buffer[..used]);
            self.give_back(buffer);
            if let Err(error) = result {
                self.fail(Failure::Write(error));
                return false;
            }
            order = self.order.lock().unwrap_or_else(PoisonError::into_inner);
            order.next += 1;
        }
        order.writing = false;
        true
    }

    /// Stops the write for `failure` (the first one is kept).
    fn fail(&self, failure: Failure) {
        self.order
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .failure
            .get_or_insert(failure);
        self.stop();
    }

    /// A free buffer, once one is; None once no chunk is left or the write stopped.
    fn take_buffer(&self) -> Option<Vec<u8>> {
        let mut empty = self.empty.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if self.stopped.load(Ordering::Relaxed)
                || self.next.load(Ordering::Relaxed) >= self.chunks.len()
            {
                return None;
            }
            if let Some(buffer) = empty.pop() {
                return Some(buffer);
            }
            empty = self
                .returned
                .wait(empty)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn give_back(&self, buffer: Vec<u8>) {
        self.empty
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(buffer);
        self.returned.notify_one();
    }

    /// The threads waiting for a buffer return, and none takes another chunk.
    fn stop(&self) {
        // Under the lock, so that no thread checks `stopped` and then waits unwoken.
        let _empty = self.empty.lock().unwrap_or_else(PoisonError::into_inner);
        self.stopped.store(true, Ordering::Relaxed);
        self.returned.notify_all();
        if let Some((caller, _)) = self.caller {
            caller.wake();
        }
    }
}

/// Stops a [`ChunkWork`] when dropped: the threads waiting for a buffer return.
struct StopOnDrop<'a, 'b>(&'a ChunkWork<'b>);

impl Drop for StopOnDrop<'_, '_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Rows written on a thread of their own, behind the caller, who reads the
/// next rows meanwhile; `wait` hands back what the work returned.
pub struct WriteBehind<T> {
    thread: crate::pool::JoinHandle<T>,
    /// The caller the work runs behind, busy until it waits.
    caller: Arc<Caller>,
}

impl<T: Send + 'static> WriteBehind<T> {
    /// Runs `work` on a thread of its own, with `caller` busy from here until
    /// it waits for it ([`WriteBehind::wait`]).
    pub fn start(
        caller: &Arc<Caller>,
        work: impl FnOnce(&Caller) -> T + Send + 'static,
    ) -> io::Result<Self> {
        caller.set_busy(true);
        let encoding = crate::threads::EncodingBehind::start();
        let behind = Arc::clone(caller);
        let thread = crate::pool::spawn(move || {
            let done = work(&behind);
            drop(encoding);
            done
        });
        thread.map(|thread| WriteBehind {
            thread,
            caller: Arc::clone(caller),
        })
    }

    /// Waits for the work (the caller is no longer busy) and returns what it returned.
    pub fn wait(self) -> std::result::Result<T, Panic> {
        self.caller.set_busy(false);
        self.thread.join()
    }
}

/// Rows `range` of the columns as framed records, back to back, at the start
/// of `out`; returns their length. Bytes of `out` past it are scratch.
fn encode_frames(
    plan: &RowPlan<'_>,
    range: std::ops::Range<usize>,
    format: Format,
    out: &mut Vec<u8>,
) -> usize {
    // Rows are written in place after room for their header, then sealed;
    // the buffer only grows, so reusing it costs no clearing.
    let (header, footer) = (header_len(format), format.footer_len() as usize);
    let needed = plan.bound(range.clone()) + range.len() * (header + footer) + ROW_SLACK;
    if out.is_empty() {
        // Zeroed by `calloc`, whose fresh pages are touched only where rows
        // are written: the bound's room for the longest varints costs no
        // page fault, where `resize` would write zeros over it all.
        *out = vec![0; needed + needed / 8];
    } else if out.len() < needed {
        out.resize(needed, 0);
    }
    // Frames are sealed a group behind their encoding: a payload's CRC reads
    // back in 8-byte words what was just stored in pieces of 1 to 32 bytes,
    // and a load that overlaps stores still in flight waits for them (sealed
    // as soon as encoded, the CRC took 24% of one profiled write's samples).
    let mut frames = [(0usize, 0usize); SEAL_BEHIND];
    let (mut pos, mut map_header) = (0, 1);
    for first in range.clone().step_by(SEAL_BEHIND) {
        let group = first..range.end.min(first + SEAL_BEHIND);
        for (row, frame) in group.clone().zip(frames.iter_mut()) {
            let len =
                header + plan.put_row(&mut out[pos + header..], row, &mut map_header) + footer;
            *frame = (pos, len);
            pos += len;
        }
        for &(at, len) in &frames[..group.len()] {
            seal_frame(&mut out[at..at + len], format);
        }
    }
    pos
}

/// Rows encoded before their frames are sealed (see [`encode_frames`]).
const SEAL_BEHIND: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{ColumnValues, EntryLayout, Values};
    use crate::example::{Kind, Schema};

    /// Writes `rows` rows of one int64 column, `id`: `0, 1, ...`, to `out`.
    fn write_ids(
        rows: usize,
        out: &mut (dyn io::Write + Send),
        spare: &mut Vec<Vec<u8>>,
    ) -> Result<()> {
        let ids: Vec<i64> = (0..rows as i64).collect();
        let splits: Vec<i64> = (0..=rows as i64).collect();
        let layout = EntryLayout::new(b"id", Some(Kind::Int64), Schema::TensorFlow).unwrap();
        let columns = [ColumnValues {
            values: Values::Int64(&ids),
            splits: &splits,
            present: None,
        }];
        let plan = RowPlan::new(&[&layout], &columns, true);
        let per_chunk = chunk_rows(8 * rows, 1, rows);
        let mut write = |buffer: &[u8]| {
            out.write_all(buffer).map_err(|source| Error::Io {
                path: "test".into(),
                source,
            })
        };
        write_rows(
            &plan,
            rows,
            per_chunk,
            Format::TfRecord,
            &mut write,
            spare,
            None,
        )
    }

    #[test]
    fn a_write_keeps_every_encoding_buffer_it_took() {
        let rows = 2 * ENCODE_CHUNK_ROWS + 1; // three chunks for two threads
                                              // As a write of many chunks before leaves them: two a thread, larger than these chunks need.
        let mut spare: Vec<Vec<u8>> = (0..4).map(|_| vec![0; 4 << 20]).collect();
        let mut kept: Vec<*const u8> = spare.iter().map(|b| b.as_ptr()).collect();
        crate::threads::set(Some(2));
        let mut out = Vec::new();
        let written = write_ids(rows, &mut out, &mut spare);
        crate::threads::set(None);
        written.unwrap();
        assert!(!out.is_empty());
        let mut after: Vec<*const u8> = spare.iter().map(|b| b.as_ptr()).collect();
        kept.sort();
        after.sort();
        assert_eq!(after, kept, "the same four buffers, none lost and none new");
    }

    /// A file that takes `room` bytes, then fails as a full disk does, or panics.
    struct FullAfter {
        room: usize,
        panics: bool,
    }

    impl io::Write for FullAfter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if buf.len() > self.room {
                assert!(!self.panics, "the file broke");
                return Err(std::io::ErrorKind::StorageFull.into());
            }
            self.room -= buf.len();
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A write that fails in the middle, in whichever thread's turn it is to
    /// write, stops every thread (none waits for a chunk that will not be
    /// written) and returns the failure, or raises the panic again; on 2, 3
    /// and 7 threads.
    #[test]
    fn a_write_that_fails_stops_every_thread() {
        for panics in [false, true] {
            for threads in [2, 3, 7] {
                let (done, result) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let mut out = FullAfter {
                        room: 5 << 20,
                        panics,
                    };
                    let mut spare = Vec::new();
                    crate::threads::set(Some(threads));
                    let written = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        write_ids(40 * ENCODE_CHUNK_ROWS, &mut out, &mut spare)
                    }));
                    crate::threads::set(None);
                    let _ = done.send(match written {
                        Ok(Err(Error::Io { source, .. })) => format!("failed: {:?}", source.kind()),
                        Ok(other) => format!("{:?}", other.map(|_| ())),
                        Err(_) => "panicked".to_string(),
                    });
                });
                let outcome = result
                    .recv_timeout(std::time::Duration::from_secs(60))
                    .unwrap_or_else(|_| panic!("{threads} threads still waiting after 60 s"));
                let expected = if panics {
                    "panicked"
                } else {
                    "failed: StorageFull"
                };
                assert_eq!(outcome, expected, "{threads} threads");
            }
        }
    }

    /// While the caller is busy beside a write, one fewer thread encodes than
    /// the write has; all of them once it waits for the write, and none once
    /// nothing is left to encode.
    #[test]
    fn a_busy_caller_keeps_a_core() {
        use std::sync::mpsc::channel;
        use std::time::Duration;
        let caller = Arc::new(Caller::default());
        let nothing_left = Arc::new(AtomicBool::new(false));
        let enter = |caller: &Arc<Caller>, nothing_left: &Arc<AtomicBool>| {
            let (entered, result) = channel();
            let (caller, nothing_left) = (Arc::clone(caller), Arc::clone(nothing_left));
            std::thread::spawn(move || {
                let _ = entered.send(caller.enter(2, || nothing_left.load(Ordering::Relaxed)));
            });
            result
        };
        caller.set_busy(true);
        assert!(
            caller.enter(2, || false),
            "one of two threads encodes beside a busy caller"
        );
        let second = enter(&caller, &nothing_left);
        assert!(
            second.recv_timeout(Duration::from_millis(200)).is_err(),
            "the second waits"
        );
        caller.set_busy(false);
        assert_eq!(
            second.recv_timeout(Duration::from_secs(10)),
            Ok(true),
            "the caller waits"
        );

        caller.set_busy(true);
        let third = enter(&caller, &nothing_left);
        assert!(
            third.recv_timeout(Duration::from_millis(200)).is_err(),
            "two encode already"
        );
        caller.leave();
        assert!(
            third.recv_timeout(Duration::from_millis(200)).is_err(),
            "one still encodes"
        );
        caller.leave();
        assert_eq!(
            third.recv_timeout(Duration::from_secs(10)),
            Ok(true),
            "none encodes"
        );

        let fourth = enter(&caller, &nothing_left);
        assert!(
            fourth.recv_timeout(Duration::from_millis(200)).is_err(),
            "one encodes"
        );
        nothing_left.store(true, Ordering::Relaxed);
        caller.wake();
        assert_eq!(
            fourth.recv_timeout(Duration::from_secs(10)),
            Ok(false),
            "nothing left"
        );
    }
}
