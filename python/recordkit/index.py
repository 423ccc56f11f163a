"""Random access to TFRecord files through an index of record offsets.

The index is the text format DALI's and the ``tfrecord`` package's
``tfrecord2idx`` write: one line per record, ``"<offset> <size>"``, the size
being the whole frame (header, payload and CRCs). Their index files work here
and ours work there.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from recordkit import _native
from recordkit._sources import open_output
from recordkit.discovery import list_files
from recordkit.features import FeatureSpec, FixedLenFeature
from recordkit.parsing import Requests, assemble_outputs, plan_example, request_columns
from recordkit.records import refuse_compressed

__all__ = ["build_index", "read_index", "check_index", "checked_index", "existing_index", "IndexedDataset", "ParsedRow"]

def build_index(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    index_path: str | os.PathLike[str] | None = None,
) -> Any:
    """Writes the index of a TFRecord file and returns its path (default: ``<path>.idx``).

    Only record headers are read (and their length CRCs checked); payloads are
    skipped. The index appears only when complete. Given a list of files,
    indexes them all, in parallel, and returns the list of index paths.

    Raises:
        ValueError: For a compressed file, which cannot be indexed by offset.
        DataLossError: If the framing is damaged.
    """
    if not isinstance(path, (str, os.PathLike)):
        if index_path is not None:
            raise ValueError("index_path names one index: give it with one file, not a list")
        return _in_parallel(build_index, [os.fspath(p) for p in path])
    path = os.fspath(path)
    refuse_compressed(path)
    index_path = os.fspath(index_path) if index_path is not None else path + ".idx"
    target = open_output(index_path)
    try:
        with open(target.handle, "w") as out:
            for offsets, sizes in _frames(path):
                out.write("".join(f"{o} {s}\n" for o, s in zip(offsets.tolist(), sizes.tolist())))
        target.commit()
    except BaseException:
        target.discard()
        raise
    return index_path


def _in_parallel(fn: Any, paths: list[str]) -> list[Any]:
    """``[fn(p) for p in paths]`` on a thread pool: the Rust framing releases the GIL."""
    if len(paths) < 2:
        return [fn(p) for p in paths]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(len(paths), os.cpu_count() or 1, 8)) as pool:
        return list(pool.map(fn, paths))


def _frames(path: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(offsets, sizes)`` of the record frames of an uncompressed file, in chunks;
    headers only (length CRCs checked), payloads skipped."""
    scanner = _native.RecordScanner(path, name=path, compression="none", verify=False)
    try:
        while True:
            offsets, sizes = scanner.next_frames(65536)
            if not len(offsets):
                return
            yield offsets, sizes
    finally:
        scanner.close()


def read_index(index_path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, sizes)`` from an index file (ours, DALI's or ``tfrecord2idx``'s).

    Every non-empty line must hold exactly two whole numbers, ``<offset> <size>``,
    each in 0 .. 2**64 - 1; anything else is a ``ValueError`` naming the line (a
    stray token must not shift every later pair). Offsets and sizes are checked
    against the record file when records are read.
    """
    with open(index_path, "rb") as f:
        data = f.read()
    read = _native._parse_index(data)  # the common case, in one pass: 1 M lines in 0.03 s, not 0.4
    if read is not None:
        return read
    lines = [line for line in data.splitlines() if line.strip()]
    tokens = data.split()
    if not tokens:
        return np.empty(0, np.uint64), np.empty(0, np.uint64)
    if len(tokens) == 2 * len(lines):
        try:
            pairs = np.array(tokens, dtype=np.uint64).reshape(-1, 2)
            return np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1])
        except (ValueError, OverflowError):
            pass  # found and named below
    for number, line in enumerate(data.splitlines(), 1):
        fields = line.split()
        if fields and (len(fields) != 2 or not all(_is_u64(f) for f in fields)):
            raise ValueError(f"{os.fspath(index_path)}:{number}: not an index line: expected '<offset> <size>', "
                             f"two whole numbers, not {line[:60]!r}")
    raise ValueError(f"{os.fspath(index_path)} is not an index file: expected lines of '<offset> <size>'")


def check_index(index_path: str, offsets: np.ndarray, sizes: np.ndarray, file_size: int, record_file: str) -> None:
    """Refuses an index whose records do not tile the file: the first must start
    at 0, each next one where the one before ends, and the last end where the file
    does. An index with a line missing, doubled or out of order would otherwise
    serve other records than the file holds, or leave some out, without a word."""
    beyond = np.flatnonzero((offsets > file_size) | (sizes > file_size) | (sizes < 16))
    if len(beyond):  # checked first: past the file, offset + size could wrap round 2**64
        i = int(beyond[0])
        _broken_chain(index_path, i, f"a record of {int(sizes[i])} bytes at {int(offsets[i])}, in a file of "
                                     f"{file_size} bytes whose records take 16 bytes and more")
    ends = offsets + sizes
    if len(offsets):
        breaks = np.flatnonzero(offsets[1:] != ends[:-1])
        if offsets[0] != 0:
            _broken_chain(index_path, 0, f"the first record starts at {int(offsets[0])}, not 0")
        if len(breaks):
            i = int(breaks[0]) + 1
            _broken_chain(index_path, i, f"the record starts at {int(offsets[i])}, but the one before ends at "
                                         f"{int(ends[i - 1])}")
    last_end = int(ends[-1]) if len(offsets) else 0
    if last_end != file_size:
        _broken_chain(index_path, len(offsets) - 1 if len(offsets) else None,
                      f"the records end at {last_end}, and {record_file} at {file_size}")


def _broken_chain(index_path: str, entry: int | None, problem: str) -> None:
    """Raises the ``ValueError`` for ``check_index``, naming the line of the ``entry``-th record."""
    where = index_path
    if entry is not None:
        with open(index_path, "rb") as f:
            lines = [number for number, line in enumerate(f, 1) if line.strip()]
        where = f"{index_path}:{lines[entry]}"
    raise ValueError(f"{where}: the index does not match its record file ({problem}); a line is missing, "
                     "repeated or wrong, or the file changed: rebuild it with rk.build_index (recordkit index)")


def _is_u64(token: bytes) -> bool:
    try:
        return 0 <= int(token) < 1 << 64
    except ValueError:
        return False


def checked_index(path: str, index: str) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, sizes)`` of the local record file ``path`` from its index file, checked to tile the file."""
    offsets, sizes = read_index(index)
    check_index(index, offsets, sizes, os.path.getsize(path), path)
    return offsets, sizes


def existing_index(path: str) -> str | None:
    """An index file beside ``path`` (ours, DALI's or tfrecord2idx's) no older than the file, if any."""
    for candidate in (path + ".idx", path + ".index", os.path.splitext(path)[0] + ".tfindex"):
        if os.path.exists(candidate) and os.path.getmtime(candidate) >= os.path.getmtime(path):
            return candidate
    return None


def _index_for(path: str, index: str | None) -> tuple[np.ndarray, np.ndarray]:
    index = index or existing_index(path)
    if index is not None:
        return checked_index(path, index)
    try:
        return read_index(build_index(path))  # cached beside the file
    except PermissionError:  # a read-only folder: keep the index in memory
        parts = list(_frames(path))
        if not parts:
            return np.empty(0, np.uint64), np.empty(0, np.uint64)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


class ParsedRow(Mapping[str, Any]):
    """One item of a batch that ``IndexedDataset.__getitems__`` parsed, as
    ``ds[i]`` gives it: ``row[name]`` is the feature's value. It reads its
    values from the batch's columns when asked, so that a batch of rows costs
    no Python step per value; PyTorch's default collate takes such rows'
    columns whole."""

    __slots__ = ("columns", "row")

    def __init__(self, columns: dict[str, Any], row: int) -> None:
        self.columns, self.row = columns, row

    def __getitem__(self, name: str) -> Any:
        return self.columns[name][self.row]

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)

    def __repr__(self) -> str:
        return repr(dict(self))


_COLLATE_REGISTERED = False


def _register_collate() -> None:
    """Tells PyTorch's default collate, once, how to collate ``ParsedRow``s (see ``recordkit._torch``)."""
    global _COLLATE_REGISTERED
    from recordkit._torch import collate_rows_of_one_batch

    collate_rows_of_one_batch(ParsedRow)
    _COLLATE_REGISTERED = True


class IndexedDataset:
    """A map-style dataset over TFRecord files: ``len(ds)``, ``ds[i]``, ``ds[[i, j, ...]]``.

    Works with PyTorch's ``DataLoader(ds, batch_size=32, shuffle=True)`` and
    its default collate (``__getitems__`` is PyTorch's batched fetch), and as
    a Grain ``RandomAccessDataSource``. Records are read by offset and
    CRC-checked in Rust, a batch per call. ``ds[list_of_indices]`` (or
    ``batch``) gives a whole parsed batch in one call: with PyTorch,
    ``DataLoader(ds, batch_size=None, sampler=BatchSampler(RandomSampler(ds), 64, drop_last=False))``.

    Args:
        source: TFRecord files: anything ``recordkit.list_files`` takes (a
            path, a glob, a folder, ``name@N``, a list); records are numbered
            across the files in order. Files must be uncompressed.
        features: A parse spec: items are then parsed (``ds[i]`` gives
            ``parse_single_example``'s shapes, ``__getitems__`` a batch
            as ``parse_example``). None gives raw ``bytes``.
        index: Index file(s) matching ``source``. When None, ``<path>.idx``
            (or a fresh ``.index`` / ``.tfindex`` of DALI or tfrecord2idx) is
            used, and built on first use when missing, cached beside the
            file when the folder is writable.
        verify: Check each payload's CRC.
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        features: Mapping[str, FeatureSpec] | None = None,
        index: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
        *,
        verify: bool = True,
    ) -> None:
        paths = list_files(source if isinstance(source, (str, os.PathLike)) else [os.fspath(p) for p in source])
        indexes = [None] * len(paths) if index is None else (
            [os.fspath(index)] if isinstance(index, (str, os.PathLike)) else [os.fspath(i) for i in index])
        if len(indexes) != len(paths):
            raise ValueError(f"{len(paths)} files but {len(indexes)} index files")
        self.paths = paths
        self.features = features
        self.verify = verify
        self._starts = [0]
        all_offsets, all_sizes = [], []

        def load(item: tuple[str, str | None]) -> tuple[np.ndarray, np.ndarray]:
            path, idx = item
            if idx is None:
                refuse_compressed(path)
            return _index_for(path, idx)

        for offsets, sizes in _in_parallel(load, list(zip(paths, indexes))):
            all_offsets.append(offsets)
            all_sizes.append(sizes)
            self._starts.append(self._starts[-1] + len(offsets))
        # Every record's file, offset and size, by its number across the files: a batch's
        # entries are gathered with one NumPy indexing each, not a Python step per record.
        self._all_offsets = np.concatenate(all_offsets).astype(np.uint64) if paths else np.empty(0, np.uint64)
        self._all_sizes = np.concatenate(all_sizes).astype(np.uint64) if paths else np.empty(0, np.uint64)
        counts = np.diff(np.asarray(self._starts, dtype=np.int64))
        self._file_of = np.repeat(np.arange(len(paths), dtype=np.uint32), counts)
        # The parse plan, made once: each item and batch goes straight to the Rust parser with it.
        self._requests: Requests | None = None
        if features is not None:
            self._requests = Requests()
            plan_example(features, self._requests)
            self._request_list = self._requests.as_list()
        self._frames: Any = None

    def __len__(self) -> int:
        return self._starts[-1]

    def __getstate__(self) -> dict[str, Any]:
        # The open files stay behind: a copy (a DataLoader worker under spawn) opens its own.
        return dict(self.__dict__, _frames=None)

    def _files(self) -> Any:
        if self._frames is None:
            self._frames = _native.IndexedFrames(self.paths)
        return self._frames

    def _positions(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The records' numbers across the files, negative indices counted from the end."""
        positions = np.asarray(indices)
        if positions.dtype == object or positions.dtype == bool or positions.ndim != 1 or (
                positions.size and positions.dtype.kind not in "iu"):
            if positions.size == 0:
                return np.empty(0, np.int64)
            raise TypeError(f"indices must be a sequence of integers, not {type(indices).__name__} "
                            f"of {positions.dtype}")
        positions = positions.astype(np.int64, copy=False)
        n = len(self)
        bad = (positions < -n) | (positions >= n)
        if bad.any():
            raise IndexError(f"index {int(positions[np.argmax(bad)])} out of range for {n} records")
        return np.where(positions < 0, positions + n, positions)

    def _entries(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return (self._file_of[positions], self._all_offsets[positions], self._all_sizes[positions],
                positions.astype(np.uint64))

    def records(self, indices: Sequence[int] | np.ndarray) -> list[bytes]:
        """The raw records at ``indices``, in that order, read in one call."""
        return self._files().read(*self._entries(self._positions(indices)), self.verify)

    def _parsed(self, positions: np.ndarray, single: bool) -> dict[str, Any]:
        columns = self._files().read_columns(*self._entries(positions), self._request_list, self.verify)
        return assemble_outputs(self.features, request_columns(self._requests, columns),  # type: ignore[arg-type]
                                len(positions), single=single)

    def __getitem__(self, i: int | Sequence[int] | np.ndarray) -> Any:
        """One item, or for a list of indices one batch (as ``batch``).

        The batch form serves PyTorch's ``DataLoader(ds, batch_size=None,
        sampler=BatchSampler(RandomSampler(ds), 64, drop_last=False))``: one
        read and one parse per batch.
        """
        if isinstance(i, slice):
            return self.batch(range(*i.indices(len(self))))
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
            return self.batch(i)
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} records")
        position = int(i) % n
        entry = (self._file_of.item(position), self._all_offsets.item(position), self._all_sizes.item(position),
                 position)
        if self.features is None:
            return self._files().read_one(*entry, self.verify)
        columns = self._files().read_one_columns(*entry, self._request_list, self.verify)
        return assemble_outputs(self.features, request_columns(self._requests, columns), 1, single=True)

    def batch(self, indices: Sequence[int] | np.ndarray) -> Any:
        """One batch: the raw records, or with ``features`` one parsed batch
        (``parse_example``'s columns), read and parsed in one call."""
        positions = self._positions(indices)
        if self.features is None:
            return self._files().read(*self._entries(positions), self.verify)
        return self._parsed(positions, single=False)

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """PyTorch's batched fetch: the items at ``indices`` as a list, each as ``ds[i]`` gives it.

        The records are read in one call; when every feature is dense
        (``FixedLenFeature``) they are also parsed in one call and split into
        rows, so ``DataLoader(ds, batch_size=32, shuffle=True)`` and its
        default collate give batches of tensors.
        """
        positions = self._positions(indices)
        if self.features is None:
            return self._files().read(*self._entries(positions), self.verify)
        if not all(isinstance(spec, FixedLenFeature) for spec in self.features.values()):
            return [self._parsed(positions[k : k + 1], single=True) for k in range(len(positions))]
        columns = self._parsed(positions, single=False)
        if "torch" in sys.modules and not _COLLATE_REGISTERED:
            _register_collate()
        return [ParsedRow(columns, row) for row in range(len(positions))]

    def __repr__(self) -> str:
        return f"IndexedDataset({len(self)} records in {len(self.paths)} file(s))"
