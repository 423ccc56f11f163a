"""Writing columns: ``write_examples`` and ``write_ofrecords`` encode
and frame every row in Rust from NumPy (or pyarrow, or pandas) columns, a
slice at a time, into one file or a shard set committed as a whole.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from recordkit import _native
from recordkit._sources import check_targets
from recordkit.column_values import (OBJECT_SLICE_ROWS, Column, ColumnValueError, ListRows, column_items, normalize,
                                     normalize_items)
from recordkit._shardsets import shard_names
from recordkit.options import writer_options
from recordkit.records import OFRecordWriter, TFRecordWriter, all_or_nothing
from recordkit.threads import get_num_threads

__all__ = ["write_examples", "write_ofrecords", "write_slice", "write_behind"]


def write_slice(writer: Any, columns: dict[str, Column], start: int, end: int, schema: str, rows_before: int = 0,
                behind: bool = False) -> None:
    """Encodes and writes rows ``start:end`` of normalized columns; an error names
    its row counted from the first of the input, ``rows_before`` rows before ``columns``.
    With ``behind``, the rows are written on the writer's own thread, and this
    returns once they are read (see ``_write_slices``)."""
    batch = []
    rebased: dict[int, np.ndarray] = {}  # columns sharing splits share their slice
    for name, (kind, values, splits, present) in columns.items():
        lo, hi = int(splits[start]), int(splits[end])
        if kind == "bytes_offsets":
            offsets, data = values
            part = (np.ascontiguousarray(offsets[lo : hi + 1]), data)
        else:
            part = values[lo:hi]
        if kind == "bytes_fixed":
            part = (np.ascontiguousarray(part).view(np.uint8).reshape(-1), part.dtype.itemsize)
        elif isinstance(part, np.ndarray) and part.dtype == object:
            part = part.tolist()  # Rust iterates a list far faster than an object array
        if id(splits) not in rebased:
            part_splits = splits[start : end + 1]
            # Whole columns go as they are: a copy is a pass over fresh pages on the caller's thread.
            rebased[id(splits)] = np.ascontiguousarray(part_splits - lo if lo else part_splits)
        batch.append((name, kind, part, rebased[id(splits)], None if present is None else np.ascontiguousarray(present[start:end])))
    try:
        writer._native.write_columns(end - start, batch, schema, behind)
    except ValueError as error:
        if len(error.args) == 2 and isinstance(error.args[0], int):  # (row, problem), from Rust
            raise ValueError(f"row {rows_before + start + error.args[0]}: {error.args[1]}") from None
        if len(error.args) == 3 and isinstance(error.args[1], int):  # (column, value index, problem)
            name, index, problem = error.args
            splits = columns[name][2]
            row = int(np.searchsorted(splits, int(splits[start]) + index, side="right")) - 1
            raise ColumnValueError(name, rows_before + row, problem) from None
        raise


def _row_ranges(rows: int, shards: int) -> list[tuple[int, int]]:
    bounds = [rows * i // shards for i in range(shards + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


# Rows of a pyarrow Table, or of a stream's batch, written at a time; and of
# columns read whole, encoded at a time (see _write_all).
_WRITE_SLICE_ROWS = 131072
# Python objects and NumPy arrays are read and written a slice at a time
# (``_column_slices``): at most OBJECT_SLICE_ROWS rows, and about
# _WRITE_SLICE_BYTES of values copied out of Python objects at the rows' size
# so far.
# - The bytes keep memory bounded whatever the values' size, and let malloc
#   reuse a slice's buffers for the next rather than map and zero them afresh:
#   8000 images of 150 KB written from a list were one slice, a copy of the
#   whole input (peak RSS +1191 MB, 0.31-2.9 s a write); now +53-80 MB,
#   0.25-0.37 s in most writes.
# - The rows' size is not known before some are read: the first
#   _FIRST_SLICE_ROWS are read to measure it, and read again as part of a
#   larger first slice where more fit.
# - Each slice's write starts and drains its encoder threads, so fewer, larger
#   slices pay that less. 1 M tutorial rows in one process, 131 072 rows
#   against 262 144 a slice (best of 9, three times): NumPy 48.4/47.4/33.9 ms
#   against 41.2/43.6/32.0 ms, lists 52.5/56.5/41.9 ms against 48.8/51.7/39.3 ms.
# - Nothing is written until the first slice is read, and one core waits: the
#   first slice of Python objects is at most _FIRST_READ_ROWS, and each one after
#   at most twice the one before. 1 M tutorial rows, each value in a list of its
#   own (best of 5, three times, alternating): 49.4-51.5 ms a write against
#   47.7-49.7 ms. Small slices at the end as well were slower (47.8-49.8 ms
#   against 44.2-48.9): each slice's write drains its encoder threads.
_WRITE_SLICE_BYTES = 16 << 20
_FIRST_SLICE_ROWS = 16
_FIRST_READ_ROWS = 32768


def _write_all(targets: list[Any], writer_factory: Any, columns: Any, schema: str, *, whole_set: bool,
               fsync: bool) -> None:
    check_targets(targets)
    stream = _arrow_stream(columns)
    if stream is not None:
        _write_stream(targets, writer_factory, stream, schema, whole_set=whole_set, fsync=fsync)
        return
    if type(columns).__module__.startswith("pyarrow") and hasattr(columns, "column_names"):
        _write_table(targets, writer_factory, columns, schema, whole_set=whole_set, fsync=fsync)
        return
    items = column_items(columns)
    warned: set[str] = set()
    lengths = {len(column) for _, column in items}
    if len(lengths) == 1:
        # Each slice is read (under the GIL) while the one before is encoded and written.
        rows, kinds = lengths.pop(), {}
        try:
            with all_or_nothing(writer_factory, targets, whole_set=whole_set, fsync=fsync, in_turn=True) as writers:
                for writer, (start, end) in zip(writers, _row_ranges(rows, len(targets))):
                    _write_slices(writer, schema, start, _column_slices(items, schema, start, end, warned, kinds))
            return
        except _SlicesDiffer:
            pass  # nothing was kept: the whole columns below, as one
    # The columns read whole, then encoded in slices: the path for columns whose
    # slices differ in kind (ints, then floats), and the one that names errors.
    rows, normalized = normalize_items(items, schema, warned, flat_bytes=True)
    with all_or_nothing(writer_factory, targets, whole_set=whole_set, fsync=fsync, in_turn=True) as writers:
        for writer, (start, end) in zip(writers, _row_ranges(rows, len(targets))):
            # Encode in slices so the temporary lists stay small for huge inputs;
            # each slice is one call into Rust, its rows encoded on every core.
            for lo in range(start, end, _WRITE_SLICE_ROWS):
                write_slice(writer, normalized, lo, min(end, lo + _WRITE_SLICE_ROWS), schema)


class _SlicesDiffer(Exception):
    """The slices of a column are not all of one kind (a slice of ints, then one
    of floats, which the whole column would store as floats), or one could not be
    read: the write starts over with the columns read whole."""


def _column_slices(items: list[tuple[str, Any]], schema: str, start: int, end: int, warned: set[str],
                   kinds: dict[str, str]) -> Iterator[tuple[int, dict[str, Column]]]:
    """Rows ``start:end`` of the columns, normalized a slice at a time. ``kinds``
    holds each column's kind on the wire, as the first slice with values set it
    (shared by every shard); a slice of another kind, or one that raises, is
    ``_SlicesDiffer``."""
    # Only values read out of Python objects are copied: NumPy and Arrow columns are sliced in place.
    copying = [name for name, column in items if _read_from_objects(column)]
    measuring = bool(copying)
    lo, size = start, min(_FIRST_SLICE_ROWS if measuring else OBJECT_SLICE_ROWS, OBJECT_SLICE_ROWS)
    while lo < end:
        hi = min(end, lo + size)
        part = [(name, _rows_of(column, lo, hi)) for name, column in items]
        try:
            rows, normalized = normalize_items(part, schema, warned, flat_bytes=True)
        except Exception as error:
            raise _SlicesDiffer() from error
        # The next slice holds about _WRITE_SLICE_BYTES, at the rows' size so far.
        held = sum(_held_bytes(normalized[name]) for name in copying)
        fit = max(1, min(OBJECT_SLICE_ROWS, _WRITE_SLICE_BYTES * rows // max(held, 1)))
        if copying:
            fit = min(fit, max(_FIRST_READ_ROWS, 2 * rows))
        if measuring and fit > size and hi < end:
            # The first rows only measured the rows' size: read them again, with more.
            size, measuring = fit, False
            continue
        measuring = False
        for name, (kind, _, _, present) in normalized.items():
            if present is not None and not present.any():
                continue  # no row has the feature: any kind will do
            wire = "bytes" if kind.startswith("bytes") else kind
            if kinds.setdefault(name, wire) != wire:
                raise _SlicesDiffer()
        lo, size = hi, fit
        yield rows, normalized


def _read_from_objects(column: Any) -> bool:
    """Whether ``column``'s values are Python objects, which a slice copies out."""
    if type(column).__module__.startswith("pyarrow"):
        return False
    return not isinstance(column, np.ndarray) or column.dtype == object


def _held_bytes(column: Column) -> int:
    """The memory a column normalized from Python objects holds (byte strings
    copied into one buffer, numbers, splits); a list of the caller's objects
    counts its pointers."""
    _, values, splits, _ = column
    parts = values if isinstance(values, tuple) else (values,)
    held = sum(part.nbytes if isinstance(part, np.ndarray) else 8 * len(part) for part in parts)
    return held + splits.nbytes


def _rows_of(column: Any, lo: int, hi: int) -> Any:
    if type(column).__module__.startswith("pyarrow"):
        return column.slice(lo, hi - lo)
    if type(column) is list:
        return ListRows(column, lo, hi)
    return column[lo:hi]


def _write_slices(writer: Any, schema: str, first_row: int, slices: Iterable[tuple[int, dict[str, Column]]]) -> None:
    """Writes each slice of normalized columns, in order: the input's rows from
    ``first_row`` on. A slice is encoded and written on the writer's own thread
    (in Rust, without the GIL) while ``slices`` reads the next on this one,
    holding the GIL. One slice is in flight at a time, so the records stay in
    order and memory stays at two slices; the failure of the one in flight is
    raised by the next write, or here (the writer's close or abort waits for it too)."""
    done = first_row
    for rows, normalized in slices:
        write_slice(writer, normalized, 0, rows, schema, done, behind=True)
        done += rows
    writer._native.settle()


def write_behind(write: Callable[[int, dict[str, Column]], None], slices: Iterable[tuple[int, dict[str, Column]]]) -> None:
    """``write(rows, columns)`` for each slice of normalized columns, on a helper
    thread while ``slices`` makes the next on this one: reading holds the GIL,
    encoding and writing do not, so the two overlap. For a ``write`` that sees
    each piece written before the next (``convert`` cuts shards by size, asking
    the bytes written); a writer's own slices go behind in Rust, with no GIL to
    wait for (``_write_slices``). One slice is in flight at a time, so the
    records stay in order, memory stays at two slices, and ``write`` runs for one
    slice at a time (it may keep state without a lock). A failure in ``write`` is
    raised here, once the slice in flight is done. With one thread (see
    ``recordkit.set_num_threads``) the slices are written here, in turn."""
    if get_num_threads() == 1:
        for rows, normalized in slices:
            write(rows, normalized)
        return
    failed: list[BaseException] = []

    def write_caught(rows: int, normalized: dict[str, Column]) -> None:
        try:
            write(rows, normalized)
        except BaseException as error:  # raised again on the caller's thread
            failed.append(error)

    pending: threading.Thread | None = None

    def finish() -> None:
        if pending is not None:
            pending.join()
        if failed:
            raise failed[0]

    try:
        for rows, normalized in slices:
            finish()
            pending = threading.Thread(target=write_caught, args=(rows, normalized), name="recordkit-writer")
            pending.start()
    finally:
        # Whatever happened, the slice in flight is done before the writer is closed or aborted.
        if pending is not None:
            pending.join()
    finish()


def _arrow_stream(columns: Any) -> Any:
    """A pyarrow ``RecordBatchReader`` over ``columns`` when they are a stream of
    record batches (a ``RecordBatchReader``, a DuckDB relation, a Polars frame,
    anything with ``__arrow_c_stream__`` but a pyarrow or pandas table); else None."""
    module = type(columns).__module__
    if module.startswith("pyarrow") and hasattr(columns, "read_next_batch"):
        return columns
    if not module.startswith(("pyarrow", "pandas")) and hasattr(columns, "__arrow_c_stream__"):
        import pyarrow as pa

        return pa.RecordBatchReader.from_stream(columns)
    return None


def _normalized_slice(table: Any, schema: str, warned: set[str], rows_before: int) -> tuple[int, dict[str, Column]]:
    """One slice of an Arrow table for the writer; errors name the row in the whole input."""
    try:
        return normalize(table, schema, warned, flat_bytes=True)
    except ColumnValueError as error:
        raise error.shifted(rows_before) from None


def _write_table(targets: list[Any], writer_factory: Any, table: Any, schema: str, *, whole_set: bool,
                 fsync: bool) -> None:
    """A pyarrow Table (or RecordBatch), a slice at a time: memory beyond the table is one slice's."""
    if not table.num_columns:
        raise ValueError("no columns to write")
    warned: set[str] = set()
    with all_or_nothing(writer_factory, targets, whole_set=whole_set, fsync=fsync, in_turn=True) as writers:
        for writer, (start, end) in zip(writers, _row_ranges(table.num_rows, len(targets))):
            _write_slices(writer, schema, start,
                          (_normalized_slice(table.slice(lo, min(end, lo + _WRITE_SLICE_ROWS) - lo), schema, warned, lo)
                           for lo in range(start, end, _WRITE_SLICE_ROWS)))


def _write_stream(targets: list[Any], writer_factory: Any, stream: Any, schema: str, *, whole_set: bool,
                  fsync: bool) -> None:
    """Record batches as they come: memory beyond one batch stays bounded. Shards
    take even runs of consecutive rows, and a stream's length is known only at its
    end, so for several targets the rows are encoded once into a hidden staging
    file beside them (named as ``convert``'s, which removes what a killed process
    left), whose records are then split among the shards."""
    import pyarrow as pa

    if not stream.schema.names:
        raise ValueError("no columns to write")
    warned: set[str] = set()

    def slices() -> Iterator[tuple[int, dict[str, Column]]]:
        done = 0
        for batch in stream:
            for lo in range(0, batch.num_rows, _WRITE_SLICE_ROWS):
                part = pa.Table.from_batches([batch.slice(lo, _WRITE_SLICE_ROWS)])
                rows, normalized = _normalized_slice(part, schema, warned, done)
                yield rows, normalized
                done += rows

    def write_batches(writer: Any) -> None:
        _write_slices(writer, schema, 0, slices())

    if len(targets) == 1:
        with all_or_nothing(writer_factory, targets[:1], whole_set=whole_set, fsync=fsync) as writers:
            write_batches(writers[0])
        return
    folder = os.path.dirname(os.path.abspath(os.fspath(targets[0])))
    staging = os.path.join(folder, f".recordkit-convert-{os.getpid()}-{os.urandom(4).hex()}-00000")
    fmt = "ofrecord" if schema == "oneflow" else "tfrecord"
    try:
        with (OFRecordWriter if fmt == "ofrecord" else TFRecordWriter)(staging) as staged:
            write_batches(staged)
        total = staged.records_written
        scanner = _native.RecordScanner(staging, name=staging, format=fmt, compression="none")
        try:
            with all_or_nothing(writer_factory, targets, whole_set=whole_set, fsync=fsync, in_turn=True) as writers:
                for writer, (start, end) in zip(writers, _row_ranges(total, len(targets))):
                    left = end - start
                    while left:
                        records = scanner.next_batch(min(left, 4096), 4 << 20)
                        if not records:
                            raise RuntimeError(f"the staging file {staging} ended {left} records early")
                        writer.write_many(records)
                        left -= len(records)
        finally:
            scanner.close()
    finally:
        if os.path.exists(staging):
            os.unlink(staging)


def write_examples(
    path: str | os.PathLike[str],
    columns: Any,
    *,
    compression: str | None = None,
    shards: int | None = None,
    fsync: bool = False,
    compression_level: int | None = None,
) -> list[str]:
    """Writes one ``tf.train.Example`` per row of ``columns`` to TFRecord file(s).

    Args:
        path: The file, or with ``shards`` the name the shards are derived from.
        columns: ``{name: column}``. A 1-D NumPy array is one value per row; a
            2-D (or higher) array is a fixed-length list per row (flattened);
            a list of lists (or of arrays) is a variable-length list per row,
            with None (or ``pd.NA``, or NaN in a column of strings, as pandas
            reads a missing string) for a row that lacks the feature. Integers
            and bools become ``int64_list``, floats ``float_list``, bytes and
            str ``bytes_list``. A masked value (``np.ma``) is a ``ValueError``
            naming its column and row. A pyarrow Table or pandas DataFrame works
            too (pandas columns not backed by NumPy, such as pandas 3's strings,
            through their Arrow form, and ``string[python]`` through the object
            array pandas holds: a missing value is a missing feature), and
            so do streams of Arrow record batches (a ``RecordBatchReader``, a
            DuckDB relation, a Polars frame, anything with
            ``__arrow_c_stream__``), written batch by batch with memory bounded
            by a batch; with ``shards``, a stream is first encoded into one
            hidden staging file beside the output (its length is known only
            at its end), then split.
        compression: None, ``"gzip"`` or ``"zlib"`` (or a ``TFRecordOptions``).
        shards: Write this many files, ``name-00000-of-0000N.tfrecord`` ...,
            holding consecutive rows (sizes differ by at most one row). The
            set replaces every older set of the name, and is committed as a
            set (see the README). One shard is written at a time, its file
            closed before the next opens: any count fits the limit on open files.
        fsync: Flush the files (and the set's manifest) and their folder to
            the disk before returning, so the write survives a power cut.
        compression_level: For gzip and zlib: 0 (stored, fastest) to 9
            (smallest); default 6.

    Returns:
        The paths written. All files appear together when every one is complete.
    """
    targets = [os.fspath(path)] if shards is None else shard_names(path, _positive(shards))
    writer_options(compression, compression_level=compression_level)  # checked before any work
    _write_all(targets, lambda t: TFRecordWriter(t, compression=compression, compression_level=compression_level,
                                                 fsync=fsync),
               columns, "tensorflow", whole_set=shards is not None, fsync=fsync)
    return targets


def write_ofrecords(directory: str | os.PathLike[str], columns: Any, *, num_parts: int = 1, suffix_length: int = 5,
                    fsync: bool = False) -> list[str]:
    """Writes one OFRecord per row of ``columns`` as a OneFlow dataset folder (``part-00000`` ...).

    Columns as for ``write_examples``; the dtype picks the list kind
    (int32, int64, float32, float64 or bytes). An OFRecord cannot be empty
    (OneFlow's reader refuses length 0), so a row that no column gives a value
    is a ``ValueError`` naming it, before anything is written. Rows are split into
    ``num_parts`` consecutive parts, committed as a set that replaces the
    folder's older parts; ``fsync`` as for ``write_examples``.
    """
    directory = os.fspath(directory)
    targets = [os.path.join(directory, f"part-{i:0{suffix_length}d}") for i in range(_positive(num_parts))]
    _write_all(targets, lambda t: OFRecordWriter(t, fsync=fsync), columns, "oneflow", whole_set=True, fsync=fsync)
    return targets


def _positive(n: int) -> int:
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"the number of shards must be a positive integer, not {n!r}")
    return int(n)

