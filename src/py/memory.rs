//! How the memory of the `bytes` objects readers hand out is recycled.
//!
//! Every record a reader returns, and every value of a `string` column, is a
//! new Python `bytes` object, which CPython allocates with `malloc`. On glibc,
//! a process that has never freed a large buffer is in malloc's start-up state:
//! heap memory above 128 KB-ish that becomes free at the top of the heap is given
//! back to the kernel at once. Reading 150 KB records then returns each batch's
//! memory when the batch is dropped and takes it back, zeroed page by page, for
//! the next: measured, 60% of the time in page faults and 1.2-1.9 GB/s instead
//! of 4-4.5 GB/s.
//!
//! glibc leaves that state by itself the first time the program frees a buffer
//! that `malloc` had mapped on its own (any allocation over its threshold): the
//! thresholds rise to that buffer's size (at most 32 MiB), and up to twice it
//! of free heap is kept for reuse. Nearly every NumPy program does this early
//! (freeing any array of a few MB), and so does importing TensorFlow. A process
//! that only reads records never does, so a reader does it once, with one buffer
//! just under glibc's cap, before its first batch; and so does the writer's pass
//! over Python values, whose slices' columns are new buffers of about a megabyte
//! each (1 M tutorial rows from lists: 27 ms per pass before, 12 ms after). The effect is glibc's own
//! documented adaptation, not a setting recordkit invents: it is bounded (at
//! most 64 MiB of free heap kept), it is what the process would reach after its
//! first large array, and it does nothing when the user has set malloc's
//! thresholds (`MALLOC_TRIM_THRESHOLD_`, `MALLOC_MMAP_THRESHOLD_` or `mallopt`
//! turn the adaptation off) or on an allocator without it (musl, macOS).

use std::sync::Once;

/// Just under glibc's `DEFAULT_MMAP_THRESHOLD_MAX` (32 MiB on 64-bit): with
/// malloc's header, rounded up to a page, the chunk must not exceed it, or its
/// free would not move the thresholds at all (strace: a 33,550,336-byte map).
const LARGE_BUFFER: usize = (32 << 20) - (8 << 10);

/// Allocates and frees one large, untouched buffer, once per process. Costs one
/// `mmap` and one `munmap` (the pages are never touched).
pub fn adapt_malloc_to_large_records() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let buffer: Vec<u8> = Vec::with_capacity(LARGE_BUFFER);
        // The allocation must happen: an unused one may be optimized away.
        std::hint::black_box(&buffer);
    });
}
