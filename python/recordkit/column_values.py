"""User columns (NumPy arrays, lists of values, pyarrow arrays, pandas
series) turned into the flat form the Rust encoder takes: a kind, flat
values, row splits and a presence mask per column, with every value checked
and an error that names its column and row.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Mapping

import numpy as np

from recordkit import _native
from recordkit.codec import buffer_bytes
from recordkit.errors import user_stacklevel

__all__ = ["Column", "ColumnValueError", "normalize", "normalize_items", "column_items", "narrow_to_float32",
           "arrow_feature_type"]


Column = tuple[str, np.ndarray | list, np.ndarray, "np.ndarray | None"]  # kind, values, splits, present


# Rows of Python objects read a slice at a time: see recordkit.writing, where
# the slices are cut.
OBJECT_SLICE_ROWS = 262144

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
    if splits is None and width == 1 and rows <= OBJECT_SLICE_ROWS:
        # A slice's splits: a view of one array kept for every write, not a new
        # one, whose fresh pages each slice would fault in and fill.
        if _COUNTING is None:
            _COUNTING = np.arange(OBJECT_SLICE_ROWS + 1, dtype=np.int64)
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


# A column's Python objects not yet read (``_read_rows``).
_UNREAD = object()


def _from_array(name: str, array: np.ndarray, schema: str,
                shared: dict[tuple[int, int], np.ndarray], warned: set[str] | None,
                found: Any = _UNREAD) -> tuple[int, Column]:
    """A NumPy column; ``found``: an object array's rows as ``_read_rows`` read them, if it did."""
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


class ListRows:
    """Rows ``lo:hi`` of a list, not copied: a copy would touch every object the
    list holds (to count a reference), which costs as much as reading them."""

    __slots__ = ("rows", "lo", "hi")

    def __init__(self, rows: list, lo: int, hi: int) -> None:
        self.rows, self.lo, self.hi = rows, lo, hi

    def __len__(self) -> int:
        return self.hi - self.lo


def _from_sequence(name: str, column: list | ListRows, schema: str, shared: dict[tuple[int, int], np.ndarray],
                   warned: set[str] | None, found: Any = _UNREAD) -> tuple[int, Column]:
    """A column given as a Python list: read in Rust in one pass where its rows
    are plain scalars (or lists or tuples of them), else through NumPy.
    ``found``: its rows as ``_read_rows`` read them, if it did."""
    fast = _from_python_values(name, column, schema, shared, warned, found)
    if fast is not None:
        return fast
    if isinstance(column, ListRows):
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
    return _native._columns_from_rows([(c.rows, c.lo, c.hi) if isinstance(c, ListRows) else (c, 0, None)
                                       for c in columns])


def _from_python_values(name: str, rows: list | ListRows | np.ndarray, schema: str,
                        shared: dict[tuple[int, int], np.ndarray], warned: set[str] | None,
                        found: Any = _UNREAD) -> tuple[int, Column] | None:
    """A list or 1-D object array of rows of Python scalars (or lists or tuples
    of them, or NumPy arrays of one numeric dtype, or None) read in Rust in one
    pass, with no NumPy conversion; None for anything else. ``found``: what
    ``_read_rows`` read of it, when it was read with other columns."""
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


def normalize(columns: Any, schema: str, warned: set[str] | None = None,
               flat_bytes: bool = False) -> tuple[int, dict[str, Column]]:
    """Rows and ``{name: (kind, values, splits, present)}`` from any supported columns.

    ``warned``: the columns already warned about (float64 stored as float32),
    kept by a caller that normalizes a stream of chunks. ``flat_bytes``: Arrow
    byte strings as ``"bytes_offsets"`` columns. Streams of record batches are
    written a batch at a time (``_write_stream``), never normalized whole.
    """
    return normalize_items(column_items(columns), schema, warned, flat_bytes)


def column_items(columns: Any) -> list[tuple[str, Any]]:
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


def normalize_items(items: list[tuple[str, Any]], schema: str, warned: set[str] | None = None,
                     flat_bytes: bool = False) -> tuple[int, dict[str, Column]]:
    """``normalize`` of columns as ``column_items`` gives them."""
    warned = set() if warned is None else warned
    out: dict[str, Column] = {}
    shared_splits: dict[tuple[int, int], np.ndarray] = {}
    rows = None
    # The columns of Python objects, read in Rust at once: their rows split over every core.
    objects = [i for i, (_, column) in enumerate(items) if type(column) in (list, ListRows)
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
        else:  # a list (or rows of one) as it is, no copy: column_items made any other iterable one
            n, normalized = _from_sequence(name, column, schema, shared_splits, warned, found.get(i, _UNREAD))
        if rows is not None and n != rows:
            raise ValueError(f"column {name!r} has {n} rows but the columns before it have {rows}")
        rows = n
        out[name] = normalized
    if rows is None:
        raise ValueError("no columns to write")
    return rows, out


