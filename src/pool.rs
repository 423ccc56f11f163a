//! Threads kept between uses: each job runs on a thread of its own, a parked
//! one where one is free, so that starting work on another core costs a
//! wake-up rather than a new thread.
//!
//! Why: Linux places a new thread on its parent's core, and where the parent
//! keeps that core busy (reading the next slice of a write, parsing its share
//! of a batch), the child waits there for the next load balance while the
//! other core idles. Measured on this 2-vCPU VM, the parent busy for 5 ms
//! after each start, 30 ms apart: a new thread first ran after 2.2 ms
//! (median; up to 5 ms), a parked thread woken by a condition variable after
//! 15 us. A write of 300 000 rows started 13 threads.
//!
//! Every job gets a thread at once, never a place in a queue behind others:
//! jobs wait on one another (a write's encoder lanes and the thread writing
//! their buffers), so a bounded pool could deadlock. A thread parked for
//! [`IDLE_FOR`] ends. In a child made by `fork`, which has only the forking
//! thread, the parent's pool is forgotten (leaked) and a new one made.
//!
//! [`spawn`] and [`scope`] mirror `std::thread::spawn` and
//! `std::thread::scope`; a panic in a job is caught and handed to `join`, or
//! raised again when its scope ends, as std does. As with std, what the
//! caller wrote before handing a job over is what the job sees (the job goes
//! through the pool's lock, or to a new thread's start), and what the job
//! wrote is what the caller sees after `join` or the scope's end (through
//! the handle's or the scope's lock).

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Once};
use std::time::Duration;

/// How long a thread stays parked, with no job, before it ends.
/// The payload of a panic on a pool thread, raised again by whoever joins it.
pub type Panic = Box<dyn std::any::Any + Send>;

pub const IDLE_FOR: Duration = Duration::from_secs(10);

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Pool {
    queue: Mutex<Queue>,
    ready: Condvar,
    /// Threads started, ever.
    started: AtomicUsize,
}

/// Jobs handed to parked threads, and the parked threads not yet promised
/// one: each queued job was promised to a parked thread when queued, so the
/// parked threads number `idle + jobs.len()`.
struct Queue {
    jobs: VecDeque<Job>,
    idle: usize,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code that can panic runs under these locks; a poisoned one is whole.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The process's pool: leaked, so that a reference to it is valid forever,
/// even after a `fork` has replaced it (see [`forget_pool_in_child`]).
static POOL: AtomicPtr<Pool> = AtomicPtr::new(std::ptr::null_mut());

fn pool() -> &'static Pool {
    let current = POOL.load(Ordering::Acquire);
    if !current.is_null() {
        // SAFETY: a non-null POOL came from `Box::into_raw` below and is never
        // freed, so it points to a live Pool for the rest of the process.
        return unsafe { &*current };
    }
    static AT_FORK: Once = Once::new();
    AT_FORK.call_once(|| {
        #[cfg(unix)]
        // SAFETY: registers a handler that only stores to an atomic, which is
        // async-signal-safe as a child's handler must be. A failure (no
        // memory) leaves the handler unregistered: a forked child would then
        // wait on its parent's threads, so it is not ignored.
        unsafe {
            assert_eq!(
                libc::pthread_atfork(None, None, Some(forget_pool_in_child)),
                0,
                "registering the thread pool's fork handler"
            );
        }
    });
    let fresh = Box::into_raw(Box::new(Pool::new()));
    match POOL.compare_exchange(
        std::ptr::null_mut(),
        fresh,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        // SAFETY: `fresh` was just leaked from a Box and is never freed.
        Ok(_) => unsafe { &*fresh },
        Err(other) => {
            // SAFETY: `fresh` lost the race, so no one else saw it: it is
            // still the unique owner of its Box.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: `other` won it: leaked from a Box as above, never freed.
            unsafe { &*other }
        }
    }
}

/// In a child of `fork`, the parent's parked threads do not exist (and its
/// pool's lock may be held by one of them): the next job makes a new pool.
#[cfg(unix)]
extern "C" fn forget_pool_in_child() {
    POOL.store(std::ptr::null_mut(), Ordering::Release);
}

impl Pool {
    fn new() -> Self {
        Pool {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                idle: 0,
            }),
            ready: Condvar::new(),
            started: AtomicUsize::new(0),
        }
    }

    /// Runs `job` on a parked thread, or on a new one if none is free.
    fn submit(&'static self, job: Job) -> std::io::Result<()> {
        let mut queue = lock(&self.queue);
        if queue.idle > 0 {
            queue.idle -= 1;
            queue.jobs.push_back(job);
            drop(queue);
            self.ready.notify_one();
            return Ok(());
        }
        drop(queue);
        std::thread::Builder::new()
            .name("recordkit-worker".into())
            .spawn(move || {
                job();
                self.park();
            })?;
        self.started.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// A thread's life between jobs: it takes the jobs promised to parked
    /// threads, and ends once parked for [`IDLE_FOR`] with none.
    fn park(&'static self) {
        let mut queue = lock(&self.queue);
        queue.idle += 1;
        loop {
            if let Some(job) = queue.jobs.pop_front() {
                drop(queue);
                job(); // every job catches its own panic (see `spawn`, `Scope::spawn`)
                queue = lock(&self.queue);
                queue.idle += 1;
                continue;
            }
            let (guard, waited) = self
                .ready
                .wait_timeout(queue, IDLE_FOR)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            queue = guard;
            if waited.timed_out() && queue.jobs.is_empty() {
                // No job is promised to a parked thread, so this one is counted idle.
                queue.idle -= 1;
                return;
            }
        }
    }
}

/// A job's outcome, for its handle; the scope it belongs to, if any, learns
/// of a panic no one joined.
struct Slot<T> {
    result: Mutex<Option<std::thread::Result<T>>>,
    done: Condvar,
    scope: Option<Arc<Running>>,
}

impl<T> Slot<T> {
    fn new(scope: Option<Arc<Running>>) -> Arc<Self> {
        Arc::new(Slot {
            result: Mutex::new(None),
            done: Condvar::new(),
            scope,
        })
    }

    fn set(&self, result: std::thread::Result<T>) {
        *lock(&self.result) = Some(result);
        self.done.notify_all();
    }

    fn wait(&self) -> std::thread::Result<T> {
        let mut result = lock(&self.result);
        loop {
            if let Some(result) = result.take() {
                return result;
            }
            result = self
                .done
                .wait(result)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

impl<T> Drop for Slot<T> {
    fn drop(&mut self) {
        let unjoined_panic = matches!(
            self.result.get_mut().unwrap_or_else(|p| p.into_inner()),
            Some(Err(_))
        );
        if let (true, Some(scope)) = (unjoined_panic, &self.scope) {
            scope.panicked.store(true, Ordering::Relaxed);
        }
    }
}

/// A job started by [`spawn`].
pub struct JoinHandle<T>(Arc<Slot<T>>);

impl<T> JoinHandle<T> {
    /// Waits for the job; its panic, if it panicked.
    pub fn join(self) -> std::thread::Result<T> {
        self.0.wait()
    }
}

/// Runs `f` on a thread of the pool, as `std::thread::Builder::spawn` would
/// on a new one; the error is that of starting a thread where none was free.
pub fn spawn<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<JoinHandle<T>> {
    let slot = Slot::new(None);
    let filled = Arc::clone(&slot);
    pool().submit(Box::new(move || {
        filled.set(catch_unwind(AssertUnwindSafe(f)));
    }))?;
    Ok(JoinHandle(slot))
}

/// The jobs of a [`scope`] still running, and whether one panicked unjoined.
#[derive(Default)]
struct Running {
    count: Mutex<usize>,
    ended: Condvar,
    panicked: AtomicBool,
}

impl Running {
    fn end_one(&self) {
        *lock(&self.count) -= 1;
        self.ended.notify_all();
    }

    fn wait_for_all(&self) {
        let mut count = lock(&self.count);
        while *count > 0 {
            count = self
                .ended
                .wait(count)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

/// Jobs that may borrow from the caller's stack: every one has ended when
/// [`scope`] returns (see `std::thread::Scope`).
pub struct Scope<'scope, 'env: 'scope> {
    running: Arc<Running>,
    scope: PhantomData<&'scope mut &'scope ()>,
    env: PhantomData<&'env mut &'env ()>,
}

/// A job started by [`Scope::spawn`].
pub struct ScopedJoinHandle<'scope, T> {
    slot: Arc<Slot<T>>,
    scope: PhantomData<&'scope ()>,
}

impl<T> ScopedJoinHandle<'_, T> {
    /// Waits for the job; its panic, if it panicked.
    pub fn join(self) -> std::thread::Result<T> {
        self.slot.wait()
    }
}

/// As `std::thread::scope`, on the pool's threads: runs `f`, then waits for
/// every job it spawned; a panic in `f`, or in a job no one joined, is
/// raised again once they have all ended.
pub fn scope<'env, F, T>(f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    let scope = Scope {
        running: Arc::new(Running::default()),
        scope: PhantomData,
        env: PhantomData,
    };
    let result = catch_unwind(AssertUnwindSafe(|| f(&scope)));
    scope.running.wait_for_all();
    match result {
        Err(panic) => resume_unwind(panic),
        Ok(_) if scope.running.panicked.load(Ordering::Relaxed) => {
            panic!("a scoped thread panicked")
        }
        Ok(value) => value,
    }
}

impl<'scope> Scope<'scope, '_> {
    /// As `std::thread::Scope::spawn`: panics where no thread could be started.
    pub fn spawn<F, T>(&'scope self, f: F) -> ScopedJoinHandle<'scope, T>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        let slot = Slot::new(Some(Arc::clone(&self.running)));
        let filled = Arc::clone(&slot);
        let running = Arc::clone(&self.running);
        *lock(&running.count) += 1;
        let job: Box<dyn FnOnce() + Send + 'scope> = Box::new(move || {
            filled.set(catch_unwind(AssertUnwindSafe(f)));
            // The last of this job's hold on anything of 'scope (the result,
            // if its handle is gone) goes before the scope may end.
            drop(filled);
            running.end_one();
        });
        // SAFETY: only the lifetime changes ('scope to 'static; the layout of
        // a boxed closure does not depend on it). The job borrows nothing
        // past 'scope: `scope` waits for `end_one`, the job's last use of
        // anything it captured of 'scope, before it returns, and so before
        // 'scope ends, whether `f` returns or panics; a job that never
        // starts (no thread) is dropped here, within 'scope.
        let job: Job =
            unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + 'scope>, Job>(job) };
        if let Err(error) = pool().submit(job) {
            self.running.end_one();
            panic!("failed to start a thread: {error}");
        }
        ScopedJoinHandle {
            slot,
            scope: PhantomData,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn scoped_jobs_borrow_and_all_end_before_the_scope_returns() {
        let values: Vec<usize> = (0..1000).collect();
        let sum = AtomicUsize::new(0);
        let joined: usize = scope(|s| {
            let handles: Vec<_> = values
                .chunks(100)
                .map(|chunk| s.spawn(|| chunk.iter().sum::<usize>()))
                .collect();
            for chunk in values.chunks(250) {
                let sum = &sum;
                s.spawn(move || {
                    std::thread::sleep(Duration::from_millis(5));
                    sum.fetch_add(chunk.iter().sum(), Ordering::Relaxed);
                });
            }
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(joined, 499_500);
        assert_eq!(sum.load(Ordering::Relaxed), 499_500); // the unjoined ones ended too
    }

    #[test]
    fn jobs_that_wait_on_each_other_each_get_a_thread() {
        // More jobs than cores, each waiting for the next: a bounded pool would hang.
        let count = 64;
        let channels: Vec<_> = (0..count)
            .map(|_| std::sync::mpsc::channel::<usize>())
            .collect();
        let (senders, receivers): (Vec<_>, Vec<_>) = channels.into_iter().unzip();
        scope(|s| {
            for (i, receiver) in receivers.into_iter().enumerate() {
                let next = senders.get(i + 1).cloned();
                s.spawn(move || {
                    let value = receiver.recv().unwrap();
                    if let Some(next) = next {
                        next.send(value + 1).unwrap();
                    } else {
                        assert_eq!(value, count - 1);
                    }
                });
            }
            senders[0].send(0).unwrap();
        });
    }

    #[test]
    fn a_panic_goes_to_join_or_to_the_end_of_the_scope() {
        let joined = scope(|s| s.spawn(|| panic!("joined")).join());
        assert!(joined.is_err());
        let unjoined = catch_unwind(|| {
            scope(|s| {
                s.spawn(|| panic!("not joined"));
            })
        });
        assert!(unjoined.is_err());
        let handle = spawn(|| panic!("detached")).unwrap();
        assert!(handle.join().is_err());
        // The pool still runs jobs after panics.
        assert_eq!(spawn(|| 7).unwrap().join().unwrap(), 7);
    }

    #[test]
    fn a_parked_thread_takes_the_next_job() {
        // A pool of its own, which no other test's jobs reach.
        let pool: &'static Pool = Box::leak(Box::new(Pool::new()));
        let run = || {
            let (sent, got) = std::sync::mpsc::channel();
            pool.submit(Box::new(move || {
                sent.send(std::thread::current().id()).unwrap()
            }))
            .unwrap();
            let id = got.recv().unwrap();
            // Parked again before the next job comes, as between two batches.
            while lock(&pool.queue).idle == 0 {
                std::thread::yield_now();
            }
            id
        };
        let first = run();
        assert!((0..20).all(|_| run() == first));
        assert_eq!(pool.started.load(Ordering::Relaxed), 1);
    }
}
