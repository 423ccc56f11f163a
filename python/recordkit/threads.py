"""How many threads recordkit's Rust core uses to frame, check, parse, copy and encode.

By default every core the process may run on, or ``RECORDKIT_NUM_THREADS``
when set (read once, at the first use). Inside a PyTorch DataLoader worker
the default is one thread per worker: the workers already use the cores.
With one thread, every loop runs on the calling thread. Results never
depend on the count: records keep their order and errors name the same
record, whatever it is.
"""

from __future__ import annotations

from recordkit import _native

__all__ = ["set_num_threads", "get_num_threads"]


def set_num_threads(count: int | None) -> None:
    """Uses ``count`` threads from now on (``None``: back to the default).

    Raises:
        ValueError: ``count`` is not a positive whole number.
    """
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ValueError(f"the thread count must be a positive whole number or None, not {count!r}")
    _native._set_num_threads(count)


def get_num_threads() -> int:
    """The number of threads the hot loops use now."""
    return _native._num_threads()[0]


def one_thread_per_worker() -> None:
    """In a DataLoader worker: one thread, unless the user chose a count."""
    if not _native._num_threads()[1]:
        _native._set_num_threads(1)
