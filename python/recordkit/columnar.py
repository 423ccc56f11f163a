"""Columns in and out of record files, without a Python object per record.

:func:`read_examples` frames, CRC-checks and parses each batch in one call
into Rust; :func:`write_examples` encodes and frames every row in Rust from
NumPy (or pyarrow, or pandas) columns.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping, Sequence

import numpy as np

from recordkit import _native
from recordkit._sources import Source, check_targets, open_input
from recordkit.codec import buffer_bytes
from recordkit.errors import user_stacklevel
from recordkit.features import FeatureSpec
from recordkit.parsing import _assemble, _columns, _plan_example, _Requests, check_batch_size
from recordkit._shardsets import shard_names
from recordkit.discovery import check_format, expand_sources, reader_compression, record_format
from recordkit.options import writer_options
from recordkit.records import OFRecordWriter, TFRecordWriter, all_or_nothing, warn_skipped
from recordkit.threads import get_num_threads

__all__ = ["read_examples", "write_examples", "write_ofrecords", "shard_names", "example_column_batches",
           "scanned_batches", "scanner_batches", "per_file_limit"]


def read_examples(
    paths: Source | Sequence[Source],
    features: Mapping[str, FeatureSpec],
    batch_size: int = 1024,
    *,
    compression: str | None = "auto",
    verify: bool = True,
    format: Literal["auto", "tfrecord", "ofrecord"] = "auto",
) -> Iterator[dict[str, Any]]:
    """Yields parsed batches of Examples (or OFRecords) straight from files.

    Each batch is read, CRC-checked and parsed in Rust, with the GIL released;
    with more than one thread (:func:`recordkit.set_num_threads`), threads read
    and parse the next batches, a whole batch each, while the caller takes this
    one (as many as hold about 16 MiB of records; larger batches are each split
    between the threads instead).
    Outputs are those of :func:`parse_example`. Batches do not span files, so
    the last batch of each file may be smaller.

    Args:
        paths: Anything :func:`recordkit.list_files` takes (a path or URL,
            a glob, a folder, ``name@N``, a list of them), or open file objects.
        features: The parse spec, as for :func:`parse_example`.
        batch_size: Records per batch. With large values (images of 100 KB
            and more), batches under about 30 MB of values read 2-3x faster:
            malloc keeps that much freed memory for the next batch, and gives
            more back to the system, to be faulted in again (see the README).
        compression: As for :class:`TFRecordReader`.
        verify: Check payload CRCs.
        format: ``"auto"`` (OneFlow's ``part-N`` files are OFRecord, whose
            feature maps are parsed with the same spec; the rest TFRecord),
            ``"tfrecord"`` or ``"ofrecord"``.

    Raises:
        DataLossError: On damage (after yielding the batches before it).
        ParseError: When a record does not fit the spec; ``.index`` is the
            record's index in its file.
        TypeError, ValueError, FileNotFoundError: At the call, before any
            batch is asked for: a spec, batch size or compression that cannot
            be read with, or a source that names no file.
    """
    batch_size = check_batch_size(batch_size)
    reader_compression(compression)
    check_format(format)
    requests = _Requests()
    _plan_example(features, requests)
    sources = expand_sources(paths)

    def batches() -> Iterator[dict[str, Any]]:
        for count, columns in example_column_batches(sources, requests.as_list(), batch_size,
                                                     compression=compression, verify=verify, format=format):
            yield _assemble(features, _columns(requests, columns), count, single=False)

    return batches()


def per_file_limit(limit: int, files: int) -> int:
    """How many records each of ``files`` files gives to a sample of ``limit``, so that it sees every file's start."""
    return max(1, -(-limit // files))


def example_column_batches(
    paths: Sequence[Source],
    requests: list[tuple[str, str]],
    batch_size: int,
    *,
    compression: str | None = "auto",
    verify: bool = True,
    limit: int | None = None,
    flat_bytes: bool = False,
    format: str = "auto",
    max_bytes: int | None = None,
) -> Iterator[tuple[int, list[Any]]]:
    """``(records, [(values, counts, uniform)] per request)`` batches of Examples (of
    OFRecords in files of that format: ``format`` as for :func:`scanned_batches`), framed, checked and parsed in Rust, the next
    batch on other threads while the caller takes this one (counts are -1 where a record
    lacks the feature; where every record holds the same count, they are that one number
    broadcast, read-only). Batches do not span files. With ``limit``, at most that many
    records, taken from every file in turn (:func:`per_file_limit`). With ``flat_bytes``,
    byte strings come as ``(offsets, data)`` arrays instead of object arrays. With
    ``max_bytes``, a batch ends early once its records hold that many bytes."""
    def batches(scanner: Any, want: int | None, file_format: str) -> Any:
        return _native.ExampleBatches(scanner, requests, batch_size=batch_size, max_bytes=max_bytes, limit=want,
                                      flat_bytes=flat_bytes,
                                      schema="oneflow" if file_format == "ofrecord" else "tensorflow")

    for _, count, columns in scanned_batches(paths, batches, format=format, compression=compression,
                                             verify=verify, limit=limit):
        yield count, columns


def scanned_batches(
    paths: Sequence[Source],
    batches: Callable[[Any, int | None, str], Iterable[tuple[int, Any]]],
    *,
    format: str = "auto",
    compression: str | None = "auto",
    verify: bool = True,
    limit: int | None = None,
    on_error: str = "raise",
) -> Iterator[tuple[str, int, Any]]:
    """``(file name, records, parsed)`` for each batch of ``batches(scanner, at_most, format)``,
    an iterable over a ``RecordScanner`` of each file in turn (``at_most`` is None for
    every record; an iterable with ``close`` is closed after). ``format`` is the file's:
    with ``"auto"``, as :func:`recordkit.discovery.record_format` decides for every
    reader (OneFlow's ``part-N`` files are OFRecord). Batches do not span
    files. With ``limit``, at most that many records, taken from every file in turn
    (:func:`per_file_limit`). With ``on_error="skip"``, damaged stretches are
    skipped, each with a :class:`DataLossWarning` once its file is done (or left)."""
    taken = 0
    for path in paths:
        want = None if limit is None else min(per_file_limit(limit, len(paths)), limit - taken)
        if want is not None and want <= 0:
            return
        opened = open_input(path)
        try:
            file_format = record_format(opened.name) if format == "auto" else format
            scanner = _native.RecordScanner(
                opened.handle, name=opened.name, format=file_format, compression=reader_compression(compression),
                verify=verify, skip_damaged=on_error == "skip",
            )
            parsed_batches = batches(scanner, want, file_format)
            try:
                for count, parsed in parsed_batches:
                    taken += count
                    yield opened.name, count, parsed
            finally:
                try:
                    if on_error == "skip":  # also when the caller stopped early: what was skipped is told
                        # A scanner taken over by a parser hands its skips to the parser.
                        warn_skipped(opened.name, getattr(parsed_batches, "take_skipped", scanner.take_skipped)())
                finally:
                    getattr(parsed_batches, "close", lambda: None)()
                    scanner.close()
        finally:
            opened.close()


def scanner_batches(scanner: Any, want: int | None, file_format: str, batch_size: int) -> Iterator[tuple[int, list[bytes]]]:
    """``(records, [bytes, ...])`` batches of up to ``batch_size`` raw records from
    ``scanner`` (of a ``file_format`` file), at most ``want`` in all (every record with None)."""
    read = 0
    while want is None or read < want:
        batch = scanner.next_batch(batch_size if want is None else min(batch_size, want - read), 16 << 20)
        if not batch:
            return
        read += len(batch)
        yield len(batch), batch


# --- writing -----------------------------------------------------------------------------

Column = tuple[str, np.ndarray | list, np.ndarray, "np.ndarray | None"]  # kind, values, splits, present


_STRING_TYPES = frozenset({bytes, str, np.bytes_, np.str_, bytearray})
_NUMBERS = (int, float, np.number, np.bool_)


class ColumnValueError(ValueError):
    """A value that cannot be stored, naming its column and row (rows count from 0)."""

    def __init__(self, column: str, row: int, problem: str) -> None:
        super().__init__(f"column {column!r}, row {row}: {problem}")
        self.column, self.row, self.problem = column, row, problem

    def shifted(self, rows_before: int) -> "ColumnValueError":
        """The same error in a chunk that starts ``rows_before`` rows into the data."""
        return ColumnValueError(self.column, self.row + rows_before, self.problem)

    def __reduce__(self) -> tuple[Any, ...]:
        return ColumnValueError, (self.column, self.row, self.problem)


def _row_of(value: int, splits: np.ndarray | None) -> int:
    """The row that holds value ``value`` of a column's flat values (``splits``: the rows' offsets)."""
    return value if splits is None else int(np.searchsorted(splits, value, side="right")) - 1


def narrow_to_float32(name: str, values: np.ndarray, splits: np.ndarray | None, warned: set[str] | None) -> np.ndarray:
    """Wider floats as float32, which is all a ``tf.train.Example`` holds.

    Warns once per column (per ``warned`` set: one write or conversion). A
    finite value beyond float32's range would become inf: that is an error
    naming the column and the row (``splits`` maps values to rows).
    """
    with np.errstate(over="ignore"):
        narrowed = np.ascontiguousarray(values, dtype=np.float32)
    # Where nothing became inf (nearly always), one pass; else the finite values that did.
    overflow = np.isinf(narrowed)
    if overflow.any() and (overflow := overflow & np.isfinite(values)).any():
        i = int(np.argmax(overflow))
        raise ColumnValueError(name, _row_of(i, splits), f"{float(values[i])!r} is beyond float32's range "
                               "(about ±3.4e38), and tf.train.Example stores floats as float32")
    if len(values) and (warned is None or name not in warned):
        warnings.warn(f"column {name!r}: float64 values are stored as float32 (tf.train.Example has no float64)",
                      UserWarning, stacklevel=user_stacklevel())
        if warned is not None:
            warned.add(name)
    return narrowed


def _kind_of(values: np.ndarray, schema: str, name: str, splits: np.ndarray | None = None,
             warned: set[str] | None = None) -> tuple[str, Any]:
    """The list kind for a flat array, and the values converted to it (``splits``:
    the rows' offsets into ``values``, for naming a row in an error)."""
    kind = values.dtype.kind
    if kind == "S":
        return "bytes_fixed", values  # the raw cells go to Rust: no object per value
    if kind in "OU":
        # The Rust encoder takes bytes and str (as UTF-8) elements directly.
        objects = values if kind == "O" else values.astype(object)
        odd = set(map(type, objects)) - _STRING_TYPES
        if odd:
            # A value that no list holds, else numbers among strings.
            i = next((i for i, v in enumerate(objects) if type(v) in odd and not isinstance(v, _NUMBERS)),
                     None)
            if i is None:
                raise TypeError(_mixed_kinds(name, objects, splits))
            bad = objects[i]
            raise TypeError(f"column {name!r}, row {_row_of(i, splits)}: a tf.train.Feature holds ints, floats, "
                            f"bytes or str, not {bad!r} ({type(bad).__name__})")
        return "bytes_list", objects
    if kind == "b":
        values = values.astype(np.int64)
        kind = "i"
    if kind in "mM":
        not_a_time = np.isnat(values)
        if not_a_time.any():
            raise ColumnValueError(name, _row_of(int(np.argmax(not_a_time)), splits),
                                   "NaT, which a record cannot hold: a missing feature is None in a list of rows, "
                                   "or NaT in a pandas column")
        _warn_stored_as_counts(name, values.dtype, warned)
        values = values.view(np.int64)
        kind = "i"
    if values.dtype == np.uint64:
        # Both record formats hold int64 at most; a cast would wrap these to negative numbers.
        too_large = values >= np.uint64(1 << 63)
        if too_large.any():
            i = int(np.argmax(too_large))
            raise ColumnValueError(name, _row_of(i, splits), f"value {int(values[i])} does not fit an int64")
    if schema == "tensorflow":
        if kind in "iu":
            return "int64_list", np.ascontiguousarray(values, dtype=np.int64)
        if kind == "f":
            if values.dtype.itemsize > 4:
                return "float_list", narrow_to_float32(name, values, splits, warned)
            return "float_list", np.ascontiguousarray(values, dtype=np.float32)
    else:
        if kind in "iu":
            wide = values.dtype.itemsize > 4 or values.dtype == np.uint32
            return ("int64_list", np.ascontiguousarray(values, np.int64)) if wide else ("int32_list", np.ascontiguousarray(values, np.int32))
        if kind == "f":
            if values.dtype.itemsize > 4:
                return "double_list", np.ascontiguousarray(values, np.float64)
            return "float_list", np.ascontiguousarray(values, np.float32)
    raise TypeError(f"column {name!r}: cannot store values of dtype {values.dtype}")


def _mixed_kinds(name: str, values: np.ndarray, splits: np.ndarray | None) -> str:
    """The message for a column that mixes strings and numbers: the first row of each kind."""
    firsts: dict[str, int] = {}
    for i, value in enumerate(values):
        kind = ("strings" if isinstance(value, tuple(_STRING_TYPES)) else
                "floats" if isinstance(value, (float, np.floating)) else "ints")
        if kind not in firsts:
            firsts[kind] = _row_of(i, splits)
            if len(firsts) == 3:
                break
    shown = ", ".join(f"{kind} (first in row {row})" for kind, row in sorted(firsts.items(), key=lambda kv: kv[1]))
    return (f"column {name!r} mixes kinds of values: {shown}; a column holds one kind (a tf.train.Feature "
            "holds one list), so convert it to one first (e.g. to strings, or to numbers)")


# 0, 1, 2, ...: the splits of a slice of one value a row are a view of it (see _uniform_splits).
_COUNTING: np.ndarray | None = None


def _uniform_splits(rows: int, width: int, shared: dict[tuple[int, int], np.ndarray]) -> np.ndarray:
    """Row splits of ``width`` values per row, one read-only array per shape for all columns."""
    global _COUNTING
    splits = shared.get((rows, width))
    if splits is None and width == 1 and rows <= _OBJECT_SLICE_ROWS:
        # A slice's splits: a view of one array kept for every write, not a new
        # one, whose fresh pages each slice would fault in and fill.
        if _COUNTING is None:
            _COUNTING = np.arange(_OBJECT_SLICE_ROWS + 1, dtype=np.int64)
            _COUNTING.flags.writeable = False
        splits = shared[rows, width] = _COUNTING[: rows + 1]
    if splits is None:
        # width 0: every row an empty list (a list of empty lists becomes a (rows, 0) array)
        splits = np.arange(rows + 1, dtype=np.int64)
        if width != 1:
            splits *= width  # in place: a second array of this size is a second pass over fresh pages
        shared[rows, width] = splits
        splits.flags.writeable = False
    return splits


# A column's Python objects not yet read (:func:`_read_rows`).
_UNREAD = object()


def _from_array(name: str, array: np.ndarray, schema: str,
                shared: dict[tuple[int, int], np.ndarray], warned: set[str] | None,
                found: Any = _UNREAD) -> tuple[int, Column]:
    """A NumPy column; ``found``: an object array's rows as :func:`_read_rows` read them, if it did."""
    rows = len(array)
    width = int(np.prod(array.shape[1:], dtype=np.int64)) if array.ndim > 1 else 1
    if array.dtype == object and array.ndim == 1:
        fast = _from_python_values(name, array, schema, shared, warned, found)
        if fast is not None:
            return fast
        types = set(map(type, array))
        if not types <= _STRING_TYPES:
            return _from_unusual_rows(name, list(array), schema, shared, warned)
        return rows, ("bytes_list", array, _uniform_splits(rows, 1, shared), None)
    splits = _uniform_splits(rows, width, shared)
    kind, values = _kind_of(array.reshape(-1), schema, name, splits, warned)
    return rows, (kind, values, splits, None)


class _ListRows:
    """Rows ``lo:hi`` of a list, not copied: a copy would touch every object the
    list holds (to count a reference), which costs as much as reading them."""

    __slots__ = ("rows", "lo", "hi")

    def __init__(self, rows: list, lo: int, hi: int) -> None:
        self.rows, self.lo, self.hi = rows, lo, hi

    def __len__(self) -> int:
        return self.hi - self.lo


def _from_sequence(name: str, column: list | _ListRows, schema: str, shared: dict[tuple[int, int], np.ndarray],
                   warned: set[str] | None, found: Any = _UNREAD) -> tuple[int, Column]:
    """A column given as a Python list: read in Rust in one pass where its rows
    are plain scalars (or lists or tuples of them), else through NumPy.
    ``found``: its rows as :func:`_read_rows` read them, if it did."""
    fast = _from_python_values(name, column, schema, shared, warned, found)
    if fast is not None:
        return fast
    if isinstance(column, _ListRows):
        column = column.rows[column.lo : column.hi]
    return _from_unusual_rows(name, column, schema, shared, warned)


def _from_unusual_rows(name: str, column: list, schema: str, shared: dict[tuple[int, int], np.ndarray],
                       warned: set[str] | None) -> tuple[int, Column]:
    """Rows that the one-pass read did not take. Values of subclasses of the plain
    types (a ``str`` subclass, a ``bool``-free ``int`` subclass, ``np.float64``) and
    byte buffers (``bytearray``, ``memoryview``) are first made plain, and read in
    one pass when that is all that stood in the way; the rest goes through NumPy."""
    plain = _plain_rows(name, column)
    if plain is not None:
        column = plain
        fast = _from_python_values(name, column, schema, shared, warned)
        if fast is not None:
            return fast
    try:
        array = np.asarray(column)
    except ValueError:
        array = None  # ragged
    if array is not None and array.dtype.kind in "SU":
        array = np.array(column, dtype=object)  # the Python strings as they are: NumPy's S and U drop trailing NULs
    if array is not None and array.dtype != object:
        return _from_array(name, array, schema, shared, warned)
    if array is not None and array.ndim == 1 and set(map(type, array)) <= _STRING_TYPES:
        return len(array), ("bytes_list", array, _uniform_splits(len(array), 1, shared), None)
    return _from_lists(name, column, schema, warned)


def _plain_rows(name: str, rows: list) -> list | None:
    """``rows`` with every value of a subclass of a plain type as that type and
    every byte buffer as ``bytes`` (rows that are lists or tuples too); None
    where nothing needed it."""
    changed = False

    def plain(value: Any, row: int) -> Any:
        nonlocal changed
        kind = type(value)
        if kind in _PLAIN_TYPES or value is None or isinstance(value, (np.ndarray, np.generic)) and kind is not np.float64:
            return value
        if isinstance(value, (list, tuple)):
            return [plain(item, row) for item in value]
        made = _plain_value(name, row, value)
        changed = changed or made is not value
        return made

    out = [plain(value, row) for row, value in enumerate(rows)]
    return out if changed else None


_PLAIN_TYPES = frozenset({int, float, str, bytes, bool})


def _plain_value(name: str, row: int, value: Any) -> Any:
    """A subclass of ``str``, ``bytes``, ``int`` or ``float`` as its base type (read as
    the base type reads it, not through methods the subclass may override); a byte
    buffer (``bytearray``, a 1-D ``memoryview`` of bytes, anything with the buffer
    protocol that holds bytes) as ``bytes``. A buffer of other items is a
    ``TypeError`` naming the row: bytes or numbers, it cannot say which it means."""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    return buffer_bytes(value, f"column {name!r}, row {row}", value)


def _read_rows(columns: list[Any]) -> list[Any]:
    """The Python objects of each column (a list, rows of one, or a 1-D object
    array), read in Rust all at once, their rows split over every core: for
    each, its flat values, None for the general path, or the error it raises."""
    return _native._columns_from_rows([(c.rows, c.lo, c.hi) if isinstance(c, _ListRows) else (c, 0, None)
                                       for c in columns])


def _from_python_values(name: str, rows: list | _ListRows | np.ndarray, schema: str,
                        shared: dict[tuple[int, int], np.ndarray], warned: set[str] | None,
                        found: Any = _UNREAD) -> tuple[int, Column] | None:
    """A list or 1-D object array of rows of Python scalars (or lists or tuples
    of them, or NumPy arrays of one numeric dtype, or None) read in Rust in one
    pass, with no NumPy conversion; None for anything else. ``found``: what
    :func:`_read_rows` read of it, when it was read with other columns."""
    if found is _UNREAD:
        (found,) = _read_rows([rows])
    if isinstance(found, ValueError) and len(found.args) == 2 and isinstance(found.args[0], int):
        raise ColumnValueError(name, *found.args) from None
    if isinstance(found, BaseException):
        raise found
    if found is None:
        return None
    kind, values, splits, present = found
    if splits is None:
        splits = _uniform_splits(len(rows), 1, shared)
    if kind == "bytes":
        return len(rows), ("bytes_offsets", values, splits, present)
    if kind == "none":
        values = np.empty(0, np.float64)  # what NumPy makes of rows without values
    elif kind == "array":
        data, dtype = values  # rows that are NumPy arrays of one dtype, joined as bytes
        values = data.view(dtype)
    kind, converted = _kind_of(values, schema, name, splits, warned)
    return len(rows), (kind, converted, splits, present)


def _is_masked(value: Any) -> bool:
    """Whether ``value`` is a NumPy masked array. No value can be one before
    ``numpy.ma`` is imported, and importing it (``np.ma`` is a lazy attribute)
    took 17 ms of a process's first write."""
    ma = sys.modules.get("numpy.ma")
    return ma is not None and isinstance(value, ma.MaskedArray)


def _unmasked(name: str, array: Any, row: int | None = None) -> np.ndarray:
    """The data of a masked array that masks nothing. A masked value has no place
    in a record, and writing the value under the mask would store what the mask
    hides: an error naming the row (``row``: the one ``array`` is, in a column of rows)."""
    mask = np.ma.getmaskarray(array)
    if mask.any():
        if row is None:
            row = int(np.argmax(mask.reshape(len(mask), -1).any(axis=1))) if mask.ndim else 0
        raise ColumnValueError(name, row, "a masked value, which a record cannot hold: fill it "
                               "(array.filled(value)) or give the row as None, a missing feature")
    return array.data


def _row_array(name: str, row: int, value: Any) -> np.ndarray:
    """One row's value as NumPy makes it; lists within it of different lengths named as such."""
    try:
        return np.asarray(value)
    except ValueError:  # NumPy's word for lists within a list that differ in length
        raise ColumnValueError(name, row, "lists within the row's list differ in length, and a tf.train.Feature "
                               "holds one flat list a row: flatten the row and write the inner lengths as a column "
                               "of their own (read back with RaggedFeature)") from None


def _from_lists(name: str, rows_list: list, schema: str, warned: set[str] | None) -> tuple[int, Column]:
    """A list of per-row values (scalars, lists, arrays, or None for a missing feature)."""
    na = _pandas_na()
    present = np.array([v is not None and v is not na for v in rows_list], dtype=bool)
    if any(isinstance(v, (bytes, str, bytearray)) for v in rows_list):
        # NaN where strings are: pandas' (and pyarrow's) mark of a missing string.
        present &= [not (isinstance(v, (float, np.floating)) and v != v) for v in rows_list]
    pieces = []
    for row, (v, has) in enumerate(zip(rows_list, present)):
        if not has:
            pieces.append(np.empty(0))
        elif isinstance(v, (bytes, str, bytearray)):
            pieces.append(np.array([v], dtype=object))
        else:
            piece = _unmasked(name, v, row) if _is_masked(v) else _row_array(name, row, v)
            if piece.dtype.kind in "SU" and not isinstance(v, np.ndarray):
                piece = np.array(v, dtype=object)  # as above: keep trailing NULs
            pieces.append(piece.reshape(-1))
    lengths = np.array([len(p) for p in pieces], dtype=np.int64)
    typed = [p for p in pieces if len(p)]
    if typed:
        kinds = {p.dtype.kind for p in typed}
        if kinds & set("OSU"):
            flat = np.concatenate([p.astype(object) for p in typed])
        else:
            flat = np.concatenate(typed)
    else:
        flat = np.empty(0, dtype=np.int64)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    kind, values = _kind_of(flat, schema, name, splits, warned)
    return len(rows_list), (kind, values, splits, None if present.all() else present)


def _pandas_na() -> Any:
    """``pd.NA`` where pandas is imported (no value can be it before), else None."""
    pandas = sys.modules.get("pandas")
    return getattr(pandas, "NA", None)


def _pandas_values(series: Any) -> Any:
    """A pandas column for the writer. NumPy-backed columns as their NumPy array;
    strings stored as Python objects (``string[python]``) as the object array
    that holds them, missing values as ``pd.NA`` or None (read in Rust like any
    object array, where pyarrow would convert each string); the others (pandas'
    strings since 3.0, ``ArrowDtype``, ``Int64``, categoricals ...) as the Arrow
    array pyarrow makes of them: no Python object per value. A missing value is
    a missing feature."""
    if isinstance(series.dtype, np.dtype):
        if series.dtype.kind not in "mM":
            return series.to_numpy()
        try:  # pandas' times through Arrow, where NaT, pandas' missing time, is a null
            import pyarrow as pa
        except ImportError:
            return series.to_numpy()  # NaT is then an error naming its row
        return pa.Array.from_pandas(series)
    import pandas as pd

    if isinstance(series.dtype, pd.SparseDtype):
        return _pandas_values(series.sparse.to_dense())  # pyarrow takes no sparse column
    if isinstance(series.dtype, pd.StringDtype) and series.dtype.storage == "python":
        if series.dtype.na_value is pd.NA:
            return np.asarray(series.array)  # pandas' own array of str and pd.NA: no copy
        return series.to_numpy(dtype=object, na_value=None)  # pandas 3's "str" marks them NaN
    import pyarrow as pa

    return pa.Array.from_pandas(series)


def _warn_stored_as_counts(name: str, kind: Any, warned: set[str] | None) -> None:
    """Once per column (per ``warned``): times are written as int64 counts of their unit."""
    if warned is None or name not in warned:
        warnings.warn(f"column {name!r}: {kind} values are stored as int64 counts of their unit "
                      "(tf.train.Example has no time type)", UserWarning, stacklevel=user_stacklevel())
        if warned is not None:
            warned.add(name)


def _plain_arrow(name: str, array: Any, warned: set[str] | None) -> Any:
    """Dictionary- and run-end-encoded columns decoded; byte strings of any layout as ``large_binary``;
    dates and times as int64 counts of their unit since the epoch (with a warning: a tf.train.Feature
    has no time type)."""
    import pyarrow as pa

    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_run_end_encoded(array.type):
        import pyarrow.compute as pc

        array = pc.run_end_decode(array)
    if pa.types.is_binary_view(array.type) or pa.types.is_string_view(array.type):
        array = array.cast(pa.large_binary())  # few kernels (drop_null among them) take views yet
    if pa.types.is_fixed_size_binary(array.type):
        array = array.cast(pa.large_binary())  # hashes, UUIDs: Parquet's FIXED_LEN_BYTE_ARRAY
    if pa.types.is_temporal(array.type):
        _warn_stored_as_counts(name, array.type, warned)
        array = array.cast(pa.int64()) if array.type.bit_width == 64 else array.cast(pa.int32()).cast(pa.int64())
    return array


def _arrow_lists(name: str, array: Any, present: np.ndarray | None, shared: dict[tuple[int, int], np.ndarray],
                 warned: set[str] | None) -> tuple[Any, np.ndarray]:
    """A column of Arrow lists as its values, flat, and each row's offsets into them.

    Fixed-size lists within the lists (a 2-D value a row, as ``read_table`` gives
    ``FixedLenFeature([k, m])`` or a ``RaggedFeature`` ending in ``UniformRowLength``)
    are flattened, as a NumPy array's trailing dimensions are. Lists of varying
    length within a row's list are refused: one flat list a row would lose where
    each ends."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_fixed_size_list(kind):
        width = kind.list_size
        flat = array.flatten()  # leaves out the values of null rows, which take none here either
        if present is None:
            splits = _uniform_splits(len(array), width, shared)
        else:
            splits = np.concatenate([[0], np.cumsum(present * np.int64(width))])
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        offsets = np.asarray(array.offsets.to_numpy(), dtype=np.int64)
        flat = array.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        splits = offsets - offsets[0]
    else:
        # List views: their values in row order (a view's ranges may overlap or go back).
        lengths = pc.list_value_length(array).fill_null(0).to_numpy(zero_copy_only=False)
        flat = pc.list_flatten(array)
        splits = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    while True:
        if flat.null_count:
            raise ValueError(f"column {name!r}: its lists hold nulls, which a tf.train.Feature cannot")
        if not pa.types.is_fixed_size_list(flat.type):
            break
        splits = splits * flat.type.list_size
        flat = flat.flatten()
    flat = _plain_arrow(name, flat, warned)
    if _is_arrow_list(flat.type):
        raise _lists_within_lists(name, kind)
    return flat, splits


def _lists_within_lists(name: str, kind: Any) -> TypeError:
    return TypeError(f"column {name!r}: {kind} holds lists of varying length within a row, and a "
                     "tf.train.Feature holds one flat list a row: flatten each row (pyarrow.compute.list_flatten) "
                     "and write the inner lengths as a column of their own (read back with RaggedFeature), or "
                     "cast the inner lists to fixed-size ones")


def arrow_feature_type(name: str, kind: Any) -> tuple[Any, bool]:
    """What a column of Arrow type ``kind`` is written as: the type of its values and
    whether each row holds a list of them, as ``write_examples`` reads the column
    (encodings taken off, fixed-size lists within lists flattened; dates and times
    stay temporal types here, written as int64). Refuses the types it refuses, with
    the same message."""
    import pyarrow as pa

    def decoded(t: Any) -> Any:
        while pa.types.is_dictionary(t) or pa.types.is_run_end_encoded(t):
            t = t.value_type
        return t

    outer = values = decoded(kind)
    listed = _is_arrow_list(outer)
    if listed:
        values = outer.value_type
        while pa.types.is_fixed_size_list(values):
            values = values.value_type
        values = decoded(values)
        if _is_arrow_list(values):
            raise _lists_within_lists(name, outer)
    if not pa.types.is_temporal(values):
        _check_arrow_values(name, values)
    return values, listed


def _is_arrow_list(kind: Any) -> bool:
    import pyarrow as pa

    return any(test(kind) for test in (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list,
                                       pa.types.is_list_view, pa.types.is_large_list_view))


def _check_arrow_values(name: str, kind: Any) -> None:
    """Refuses values of a type a ``tf.train.Feature`` has no list for, naming it."""
    import pyarrow as pa

    if (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind) or pa.types.is_null(kind)
            or _is_arrow_bytes(kind)):
        return
    hint = ("write its fields as columns of their own (Table.flatten())" if pa.types.is_struct(kind) else
            "write its keys and its values as list columns of their own" if pa.types.is_map(kind) else
            "cast the column to numbers or strings first")
    raise TypeError(f"column {name!r}: Arrow {kind} values cannot be stored, as a tf.train.Feature holds "
                    f"int64, float or bytes values: {hint}")


def _is_arrow_bytes(kind: Any) -> bool:
    import pyarrow as pa

    return any(test(kind) for test in (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_string,
                                       pa.types.is_large_string, pa.types.is_binary_view, pa.types.is_string_view,
                                       pa.types.is_fixed_size_binary))


def _arrow_offsets(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, data)`` of a null-free Arrow byte-string array, as NumPy views of
    its buffers (64-bit offsets copied from 32-bit ones; view types cast once)."""
    import pyarrow as pa

    if not (pa.types.is_large_binary(values.type) or pa.types.is_binary(values.type)):
        values = values.cast(pa.large_binary())  # string and large_string: the same bytes
    _, offsets_buffer, data_buffer = values.buffers()
    width = np.int64 if pa.types.is_large_binary(values.type) else np.int32
    offsets = np.frombuffer(offsets_buffer, width)[values.offset : values.offset + len(values) + 1].astype(np.int64)
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    return offsets, data


def _from_arrow(name: str, array: Any, schema: str, shared: dict[tuple[int, int], np.ndarray], warned: set[str] | None,
                flat_bytes: bool = False) -> tuple[int, Column]:
    """One Arrow column. With ``flat_bytes``, byte strings stay in Arrow's layout
    (kind ``"bytes_offsets"``: offsets into one buffer) for the Rust encoder, with
    no Python object per value."""
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        array = array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
    array = _plain_arrow(name, array, warned)
    present = None if array.null_count == 0 else ~np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if _is_arrow_list(array.type):
        flat, splits = _arrow_lists(name, array, present, shared, warned)
    else:
        # Nulls dropped before NumPy sees them: an int column with nulls would come out as float.
        flat = array.drop_null() if array.null_count else array
        if present is not None:
            splits = np.concatenate([[0], np.cumsum(present.astype(np.int64))])
        else:
            splits = _uniform_splits(len(array), 1, shared)
    _check_arrow_values(name, flat.type)
    splits = splits.astype(np.int64, copy=False)
    if flat_bytes and _is_arrow_bytes(flat.type):
        return len(array), ("bytes_offsets", _arrow_offsets(flat), splits, present)
    values = flat.to_numpy(zero_copy_only=False)
    if values.dtype == object or pa.types.is_binary(array.type) or pa.types.is_string(array.type):
        values = np.asarray(values, dtype=object)
    kind, converted = _kind_of(np.asarray(values), schema, name, splits, warned)
    return len(array), (kind, converted, splits, present)


def _normalize(columns: Any, schema: str, warned: set[str] | None = None,
               flat_bytes: bool = False) -> tuple[int, dict[str, Column]]:
    """Rows and ``{name: (kind, values, splits, present)}`` from any supported columns.

    ``warned``: the columns already warned about (float64 stored as float32),
    kept by a caller that normalizes a stream of chunks. ``flat_bytes``: Arrow
    byte strings as ``"bytes_offsets"`` columns. Streams of record batches are
    written a batch at a time (:func:`_write_stream`), never normalized whole.
    """
    return _normalize_items(_column_items(columns), schema, warned, flat_bytes)


def _column_items(columns: Any) -> list[tuple[str, Any]]:
    """``(name, column)`` for each column of a table, DataFrame or mapping, each
    column a NumPy array, a list or a pyarrow array (a pandas column not backed by
    NumPy, as pyarrow makes it): any other iterable is read into a list once, here."""
    module = type(columns).__module__
    if module.startswith("pyarrow") and hasattr(columns, "column_names"):
        return [(name, columns.column(name)) for name in columns.column_names]
    if module.startswith("pandas"):
        return [(str(name), _pandas_values(columns[name])) for name in columns.columns]
    if not isinstance(columns, Mapping):
        raise TypeError(f"columns must be a mapping of name to column, a pyarrow Table or a pandas DataFrame, not {type(columns).__name__}")
    items = []
    for name, column in columns.items():
        if not (type(column) is list or isinstance(column, np.ndarray) or type(column).__module__.startswith("pyarrow")):
            column = list(column)
        items.append((name, column))
    return items


def _normalize_items(items: list[tuple[str, Any]], schema: str, warned: set[str] | None = None,
                     flat_bytes: bool = False) -> tuple[int, dict[str, Column]]:
    """:func:`_normalize` of columns as :func:`_column_items` gives them."""
    warned = set() if warned is None else warned
    out: dict[str, Column] = {}
    shared_splits: dict[tuple[int, int], np.ndarray] = {}
    rows = None
    # The columns of Python objects, read in Rust at once: their rows split over every core.
    objects = [i for i, (_, column) in enumerate(items) if type(column) in (list, _ListRows)
               or (type(column) is np.ndarray and column.dtype == object and column.ndim == 1)]
    found = dict(zip(objects, _read_rows([items[i][1] for i in objects]))) if objects else {}
    for i, (name, column) in enumerate(items):
        if not isinstance(name, str):
            raise TypeError(f"column names are str, not {name!r}")
        if _is_masked(column):
            column = _unmasked(name, column)
        if type(column).__module__.startswith("pyarrow"):
            n, normalized = _from_arrow(name, column, schema, shared_splits, warned, flat_bytes)
        elif isinstance(column, np.ndarray):
            n, normalized = _from_array(name, column, schema, shared_splits, warned, found.get(i, _UNREAD))
        else:  # a list (or rows of one) as it is, no copy: _column_items made any other iterable one
            n, normalized = _from_sequence(name, column, schema, shared_splits, warned, found.get(i, _UNREAD))
        if rows is not None and n != rows:
            raise ValueError(f"column {name!r} has {n} rows but the columns before it have {rows}")
        rows = n
        out[name] = normalized
    if rows is None:
        raise ValueError("no columns to write")
    return rows, out


def _write(writer: Any, columns: dict[str, Column], start: int, end: int, schema: str, rows_before: int = 0,
           behind: bool = False) -> None:
    """Encodes and writes rows ``start:end`` of normalized columns; an error names
    its row counted from the first of the input, ``rows_before`` rows before ``columns``.
    With ``behind``, the rows are written on the writer's own thread, and this
    returns once they are read (see :func:`_write_slices`)."""
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
# (:func:`_column_slices`): at most _OBJECT_SLICE_ROWS rows, and about
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
_OBJECT_SLICE_ROWS = 262144
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
    items = _column_items(columns)
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
    rows, normalized = _normalize_items(items, schema, warned, flat_bytes=True)
    with all_or_nothing(writer_factory, targets, whole_set=whole_set, fsync=fsync, in_turn=True) as writers:
        for writer, (start, end) in zip(writers, _row_ranges(rows, len(targets))):
            # Encode in slices so the temporary lists stay small for huge inputs;
            # each slice is one call into Rust, its rows encoded on every core.
            for lo in range(start, end, _WRITE_SLICE_ROWS):
                _write(writer, normalized, lo, min(end, lo + _WRITE_SLICE_ROWS), schema)


class _SlicesDiffer(Exception):
    """The slices of a column are not all of one kind (a slice of ints, then one
    of floats, which the whole column would store as floats), or one could not be
    read: the write starts over with the columns read whole."""


def _column_slices(items: list[tuple[str, Any]], schema: str, start: int, end: int, warned: set[str],
                   kinds: dict[str, str]) -> Iterator[tuple[int, dict[str, Column]]]:
    """Rows ``start:end`` of the columns, normalized a slice at a time. ``kinds``
    holds each column's kind on the wire, as the first slice with values set it
    (shared by every shard); a slice of another kind, or one that raises, is
    :class:`_SlicesDiffer`."""
    # Only values read out of Python objects are copied: NumPy and Arrow columns are sliced in place.
    copying = [name for name, column in items if _read_from_objects(column)]
    measuring = bool(copying)
    lo, size = start, min(_FIRST_SLICE_ROWS if measuring else _OBJECT_SLICE_ROWS, _OBJECT_SLICE_ROWS)
    while lo < end:
        hi = min(end, lo + size)
        part = [(name, _rows_of(column, lo, hi)) for name, column in items]
        try:
            rows, normalized = _normalize_items(part, schema, warned, flat_bytes=True)
        except Exception as error:
            raise _SlicesDiffer() from error
        # The next slice holds about _WRITE_SLICE_BYTES, at the rows' size so far.
        held = sum(_held_bytes(normalized[name]) for name in copying)
        fit = max(1, min(_OBJECT_SLICE_ROWS, _WRITE_SLICE_BYTES * rows // max(held, 1)))
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
        return _ListRows(column, lo, hi)
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
        _write(writer, normalized, 0, rows, schema, done, behind=True)
        done += rows
    writer._native.settle()


def _write_behind(write: Callable[[int, dict[str, Column]], None], slices: Iterable[tuple[int, dict[str, Column]]]) -> None:
    """``write(rows, columns)`` for each slice of normalized columns, on a helper
    thread while ``slices`` makes the next on this one: reading holds the GIL,
    encoding and writing do not, so the two overlap. For a ``write`` that sees
    each piece written before the next (``convert`` cuts shards by size, asking
    the bytes written); a writer's own slices go behind in Rust, with no GIL to
    wait for (:func:`_write_slices`). One slice is in flight at a time, so the
    records stay in order, memory stays at two slices, and ``write`` runs for one
    slice at a time (it may keep state without a lock). A failure in ``write`` is
    raised here, once the slice in flight is done. With one thread (see
    :func:`recordkit.set_num_threads`) the slices are written here, in turn."""
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
        return _normalize(table, schema, warned, flat_bytes=True)
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
        compression: None, ``"gzip"`` or ``"zlib"`` (or a :class:`TFRecordOptions`).
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

    Columns as for :func:`write_examples`; the dtype picks the list kind
    (int32, int64, float32, float64 or bytes). An OFRecord cannot be empty
    (OneFlow's reader refuses length 0), so a row that no column gives a value
    is a ``ValueError`` naming it, before anything is written. Rows are split into
    ``num_parts`` consecutive parts, committed as a set that replaces the
    folder's older parts; ``fsync`` as for :func:`write_examples`.
    """
    directory = os.fspath(directory)
    targets = [os.path.join(directory, f"part-{i:0{suffix_length}d}") for i in range(_positive(num_parts))]
    _write_all(targets, lambda t: OFRecordWriter(t, fsync=fsync), columns, "oneflow", whole_set=True, fsync=fsync)
    return targets


def _positive(n: int) -> int:
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"the number of shards must be a positive integer, not {n!r}")
    return int(n)

