//! How many threads the hot loops use, and copies spread over them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The count `set` chose; 0 while none was set.
static CHOSEN: AtomicUsize = AtomicUsize::new(0);

/// `RECORDKIT_NUM_THREADS` as the process started, if a positive whole number.
fn from_environment() -> Option<usize> {
    static FROM_ENV: OnceLock<Option<usize>> = OnceLock::new();
    *FROM_ENV.get_or_init(|| {
        std::env::var("RECORDKIT_NUM_THREADS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
    })
}

/// The cores the process may run on, as first asked. Asked once: on Linux
/// the standard library reads the affinity mask and cgroup files each time
/// (measured: 250 batches of 150 KB records took 0.18 s instead of 0.14 s).
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The threads a loop over records may use: the count `set` chose, else
/// `RECORDKIT_NUM_THREADS`, else every core the process may run on. With 1,
/// every loop runs on the calling thread.
pub fn available() -> usize {
    match CHOSEN.load(Ordering::Relaxed) {
        0 => from_environment().unwrap_or_else(cores),
        n => n,
    }
}

/// Writes encoding on their own threads, behind their callers, right now.
static ENCODING_BEHIND: AtomicUsize = AtomicUsize::new(0);

/// A write encoding behind its caller (on [`available`] threads), counted
/// from its start until this is dropped.
pub struct EncodingBehind(());

impl EncodingBehind {
    pub fn start() -> Self {
        ENCODING_BEHIND.fetch_add(1, Ordering::Relaxed);
        EncodingBehind(())
    }
}

impl Drop for EncodingBehind {
    fn drop(&mut self) {
        ENCODING_BEHIND.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The threads a loop may use while writes encode behind: an equal share of
/// [`available`] with each of them, at least one. Reading the next rows of a
/// write while its last rows encode on every core only takes cores from the
/// encoding (measured on 2 cores: rows with lists read on two threads took
/// longer, not shorter, beside a write behind).
pub fn beside_writes() -> usize {
    (available() / (1 + ENCODING_BEHIND.load(Ordering::Relaxed))).max(1)
}

/// Sets the thread count (`None`: back to the default).
pub fn set(count: Option<usize>) {
    CHOSEN.store(count.unwrap_or(0), Ordering::Relaxed);
}

/// Whether the user chose a count (`set` or the environment).
pub fn chosen() -> bool {
    CHOSEN.load(Ordering::Relaxed) != 0 || from_environment().is_some()
}

/// `f(i, &items[i])` for every item, on `threads` threads (the caller's
/// among them) that take items in turn, so that one slow item holds up one
/// thread, not a fixed share; the results in the items' order. A panic in any
/// thread is raised again here.
pub fn map_in_turn<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(usize, &T) -> R + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else { break done };
            done.push((i, f(i, item)));
        }
    };
    let mut done = crate::pool::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mut done = work();
        for helper in helpers {
            done.extend(
                helper
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            );
        }
        done
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, result)| result).collect()
}

/// Bytes per thread below which a pass over them (a copy, CRC checks) is not
/// worth splitting: starting and joining a thread took 45 us here (where
/// the pool has none parked, it still starts one), a pass over 1 MiB
/// 100-200 us. (From 4 MiB, a batch of 16 records of 150 KB ran
/// on one thread; from 1 MiB it reads 10-15% faster on two.)
pub const BYTES_PER_THREAD: usize = 1 << 20;

/// `items` cut into runs of consecutive items holding about equal bytes
/// (`bytes` of each item), about `threads` of them, each with the index of its
/// first item: a pass over the runs, one per thread, takes about equal time.
pub fn runs_by_bytes<T>(
    items: &[T],
    threads: usize,
    bytes: impl Fn(&T) -> usize,
) -> Vec<(usize, &[T])> {
    let share = items
        .iter()
        .map(&bytes)
        .sum::<usize>()
        .div_ceil(threads.max(1));
    let mut runs = Vec::new();
    let (mut first, mut held) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        held += bytes(item);
        if held >= share || i + 1 == items.len() {
            runs.push((first, &items[first..=i]));
            (first, held) = (i + 1, 0);
        }
    }
    runs
}

/// Copies `values` end to end into `data`, which is exactly their total
/// length; large copies run on several threads, each over a run of whole
/// values, so that the page faults of fresh memory are taken side by side too.
pub fn copy_end_to_end(values: &[&[u8]], data: &mut [u8]) {
    let threads = available().min(data.len() / BYTES_PER_THREAD);
    if threads <= 1 {
        copy_serial(values, data);
        return;
    }
    let mut runs = runs_by_bytes(values, threads, |v| v.len());
    let (_, last) = runs.pop().expect("a copy of some bytes has a run");
    crate::pool::scope(|scope| {
        let mut rest = data;
        for (_, run) in runs {
            let len = run.iter().map(|v| v.len()).sum();
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(len);
            scope.spawn(move || copy_serial(run, head));
            rest = tail;
        }
        copy_serial(last, rest);
    });
}

/// Huge pages cut the page faults of a fresh buffer 512-fold.
const HUGE_PAGE: usize = 2 << 20;

/// `len` zeroed bytes to be filled at once: a large buffer is fresh memory from
/// the OS (no zeroing pass), asked on Linux to be backed by huge pages.
pub fn zeroed(len: usize) -> Vec<u8> {
    let data = vec![0u8; len];
    #[cfg(target_os = "linux")]
    if len >= 4 * HUGE_PAGE {
        let start = (data.as_ptr() as usize).next_multiple_of(HUGE_PAGE);
        let end = (data.as_ptr() as usize + len) / HUGE_PAGE * HUGE_PAGE;
        // SAFETY: [start, end) lies inside `data`'s allocation, which lives
        // until after the call, and is page aligned as madvise requires;
        // MADV_HUGEPAGE only changes how the kernel backs the pages, never
        // their contents. A failure (no THP support) is harmless and ignored.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
    data
}

fn copy_serial(values: &[&[u8]], data: &mut [u8]) {
    let mut at = 0;
    for value in values {
        copy_short(&mut data[at..at + value.len()], value);
        at += value.len();
    }
    debug_assert_eq!(at, data.len(), "the values fill the buffer exactly");
}

/// Copies `src` into `dst`, of the same length, in at most two moves of a
/// fixed size (overlapping) where it is 16 bytes or shorter, rather than
/// by a call to `memcpy`, which costs more than such a copy: a string column
/// is mostly short values (1 M of the tutorial's words flattened in 5.3 ms
/// instead of 7.0, perf samples of `read_table` on one thread).
#[inline(always)]
pub fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n > 16 {
        dst.copy_from_slice(src);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&src[n - 4..]);
    } else if n > 0 {
        dst[0] = src[0];
        dst[n / 2] = src[n / 2];
        dst[n - 1] = src[n - 1];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_by_bytes_cover_every_item_in_order() {
        for (sizes, threads) in [
            (vec![5usize, 0, 0, 7, 1, 9, 0], 3),
            (vec![0, 0, 0], 2),
            (vec![10; 8], 4),
            (vec![100, 1, 1, 1], 2),
            (vec![3], 5),
        ] {
            let runs = runs_by_bytes(&sizes, threads, |&n| n);
            let joined: Vec<usize> = runs
                .iter()
                .flat_map(|(_, run)| run.iter().copied())
                .collect();
            assert_eq!(joined, sizes);
            let starts: Vec<usize> = runs
                .iter()
                .scan(0, |at, (_, run)| {
                    let start = *at;
                    *at += run.len();
                    Some(start)
                })
                .collect();
            assert_eq!(runs.iter().map(|(at, _)| *at).collect::<Vec<_>>(), starts);
            assert!(runs.iter().all(|(_, run)| !run.is_empty()));
            assert!(runs.len() <= threads + 1, "{sizes:?}: {} runs", runs.len());
        }
        assert_eq!(runs_by_bytes(&[10usize; 8], 4, |&n| n).len(), 4);
        assert!(runs_by_bytes(&[] as &[usize], 3, |&n| n).is_empty());
    }

    #[test]
    fn copies_equal_a_concatenation_whatever_the_split() {
        for sizes in [
            vec![],
            vec![0],
            vec![5 << 20, 1, 0, 3 << 20, 7],
            vec![1 << 20; 40],
            (0..40).chain((0..40).rev()).collect(),
        ] {
            let values: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| (0..n).map(|j| (i * 31 + j) as u8).collect())
                .collect();
            let slices: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
            let mut data = vec![0u8; sizes.iter().sum()];
            copy_end_to_end(&slices, &mut data);
            assert_eq!(data, slices.concat());
        }
    }
}
