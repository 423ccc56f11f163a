//! Memory-mapped files that survive being truncated while they are read.
//!
//! Reading a page of a mapping that lies past the end of its (since
//! truncated) file raises SIGBUS, which kills the process. Mapped files are
//! registered here; a SIGBUS handler, installed once, maps a page of zeros
//! over a faulting page of a registered mapping and marks the mapping
//! damaged. The read goes on with zeros, and the reader, which checks
//! [`Guarded::lost_at`] after each batch and before any of it reaches the
//! caller, reports a `DataLossError` instead. Faults elsewhere go to the
//! handler that was installed before (or kill the process as before).
//!
//! A truncation that leaves the last page partly inside the file gives zeros
//! there, without a signal; the reader also compares the file's length with
//! the mapping's after each batch to catch that.
//!
//! Only Unix has SIGBUS. Windows refuses to truncate a mapped file, so
//! registration there always succeeds and does nothing.

/// One registered mapping; unregistered when dropped.
pub struct Guarded {
    #[cfg(unix)]
    slot: &'static imp::Slot,
}

impl Guarded {
    /// Registers `[start, start + len)`, or returns None when no slot is free
    /// or no handler could be installed (the caller reads the file another way).
    pub fn register(start: *const u8, len: usize) -> Option<Guarded> {
        #[cfg(unix)]
        {
            imp::register(start as usize, len).map(|slot| Guarded { slot })
        }
        #[cfg(not(unix))]
        {
            let _ = (start, len);
            Some(Guarded {})
        }
    }

    /// The offset into the mapping of the first page found missing, if any.
    pub fn lost_at(&self) -> Option<u64> {
        #[cfg(unix)]
        {
            self.slot.lost_at()
        }
        #[cfg(not(unix))]
        {
            None
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        #[cfg(unix)]
        self.slot.release();
    }
}

#[cfg(unix)]
mod imp {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Once;

    /// At most this many files are mapped at once; more are read with `read`.
    const SLOTS: usize = 512;
    /// `start` of a slot being filled in or emptied.
    const BUSY: usize = usize::MAX;
    const NOT_LOST: usize = usize::MAX;

    pub struct Slot {
        /// 0: free; BUSY: changing; else the mapping's first address.
        start: AtomicUsize,
        end: AtomicUsize,
        /// Offset of the first page replaced by zeros, or NOT_LOST.
        lost: AtomicUsize,
    }

    impl Slot {
        const fn new() -> Slot {
            Slot {
                start: AtomicUsize::new(0),
                end: AtomicUsize::new(0),
                lost: AtomicUsize::new(NOT_LOST),
            }
        }

        pub fn lost_at(&self) -> Option<u64> {
            match self.lost.load(Ordering::Acquire) {
                NOT_LOST => None,
                at => Some(at as u64),
            }
        }

        pub fn release(&self) {
            // Emptied before the mapping is unmapped (the window drops its
            // map after this guard), so an address reused by a later mapping
            // is never taken for this one.
            self.start.store(0, Ordering::Release);
        }
    }

    static TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
    static PAGE: AtomicUsize = AtomicUsize::new(4096);
    static INSTALL: Once = Once::new();
    static INSTALLED: AtomicUsize = AtomicUsize::new(0);
    /// The SIGBUS action found at installation, written once before the
    /// handler is installed and only read afterwards.
    static mut PREVIOUS: Option<libc::sigaction> = None;

    pub fn register(start: usize, len: usize) -> Option<&'static Slot> {
        if start == 0 || len == 0 {
            return None;
        }
        install();
        if INSTALLED.load(Ordering::Acquire) == 0 {
            return None;
        }
        let slot = TABLE.iter().find(|s| {
            s.start
                .compare_exchange(0, BUSY, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })?;
        slot.lost.store(NOT_LOST, Ordering::Relaxed);
        slot.end.store(start.checked_add(len)?, Ordering::Relaxed);
        slot.start.store(start, Ordering::Release);
        Some(slot)
    }

    fn install() {
        INSTALL.call_once(|| {
            // SAFETY: sysconf and sigaction are called with valid arguments;
            // `PREVIOUS` is written here, once, before the handler that reads
            // it can run (it is installed by the second sigaction call), and
            // never written again.
            unsafe {
                let page = libc::sysconf(libc::_SC_PAGESIZE);
                if page > 0 {
                    PAGE.store(page as usize, Ordering::Relaxed);
                }
                let mut previous: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) != 0 {
                    return;
                }
                PREVIOUS = Some(previous);
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_sigbus as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) == 0 {
                    INSTALLED.store(1, Ordering::Release);
                }
            }
        });
    }

    /// Async-signal-safe: atomics and two system calls only.
    extern "C" fn on_sigbus(
        signal: libc::c_int,
        info: *mut libc::siginfo_t,
        context: *mut libc::c_void,
    ) {
        // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
        let addr = unsafe { (*info).si_addr() } as usize;
        let page = PAGE.load(Ordering::Relaxed);
        for slot in TABLE.iter() {
            let start = slot.start.load(Ordering::Acquire);
            if start == 0
                || start == BUSY
                || addr < start
                || addr >= slot.end.load(Ordering::Relaxed)
            {
                continue;
            }
            let base = addr & !(page - 1);
            // SAFETY: `base` is page-aligned and the page lies inside a live
            // registered mapping (slots are emptied before unmapping), which
            // is read-only and private to this process: replacing the page
            // with zeros changes only what readers of this mapping see, and
            // they check `lost_at` before trusting anything they read.
            let zeros = unsafe {
                libc::mmap(
                    base as *mut libc::c_void,
                    page,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if zeros != libc::MAP_FAILED {
                let offset = base.max(start) - start;
                slot.lost.fetch_min(offset, Ordering::AcqRel);
                return;
            }
        }
        // SAFETY: PREVIOUS was set before this handler was installed.
        let previous = unsafe { *std::ptr::addr_of!(PREVIOUS) };
        match previous {
            Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
                if p.sa_flags & libc::SA_SIGINFO != 0 {
                    // SAFETY: an SA_SIGINFO handler has this signature.
                    let handler: extern "C" fn(
                        libc::c_int,
                        *mut libc::siginfo_t,
                        *mut libc::c_void,
                    ) = unsafe { std::mem::transmute(p.sa_sigaction) };
                    handler(signal, info, context);
                } else {
                    // SAFETY: a plain handler takes the signal number.
                    let handler: extern "C" fn(libc::c_int) =
                        unsafe { std::mem::transmute(p.sa_sigaction) };
                    handler(signal);
                }
            }
            _ => {
                // Not a mapped record file: restore the default action, so the
                // faulting instruction, run again on return, ends the process
                // as it would have without this handler.
                // SAFETY: sigaction with a zeroed (SIG_DFL) action is valid.
                unsafe {
                    let mut default: libc::sigaction = std::mem::zeroed();
                    default.sa_sigaction = libc::SIG_DFL;
                    libc::sigaction(libc::SIGBUS, &default, std::ptr::null_mut());
                }
            }
        }
    }
}
