"""Parse specs with TensorFlow's names, arguments and defaults (``tf.io.FixedLenFeature`` ...).

``dtype`` is ``"int64"``, ``"float32"`` or ``"string"``; NumPy dtypes,
``bytes``/``str`` and TensorFlow's dtype objects (anything whose ``.name`` is
one of those) are accepted too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence, Union

import numpy as np

__all__ = [
    "FixedLenFeature",
    "VarLenFeature",
    "SparseFeature",
    "RaggedFeature",
    "FixedLenSequenceFeature",
    "RowSplits",
    "RowLengths",
    "RowStarts",
    "RowLimits",
    "ValueRowIds",
    "UniformRowLength",
    "FeatureSpec",
    "normalize_dtype",
]

DTYPES = ("int64", "float32", "string")
NUMPY_DTYPES = {"int64": np.dtype(np.int64), "float32": np.dtype(np.float32), "string": np.dtype(object)}
# TensorFlow's names (tf.int64.name ...), NumPy's, and Python's types, for the three
# kinds a tf.train.Feature holds. float64 is read as float32 (with a warning): the
# values on the wire are float32, whatever the spec asks for.
_ALIASES = {
    "int64": "int64", "int": "int64", "long": "int64", "i8": "int64", "<i8": "int64",
    "float32": "float32", "float": "float32", "single": "float32", "f4": "float32", "<f4": "float32",
    "float64": "float64", "double": "float64", "f8": "float64", "<f8": "float64",
    "string": "string", "bytes": "string", "str": "string", "object": "string", "bytes_": "string", "str_": "string",
}
_VALID_NAMES = ("int64 (or int), float32 (or float; float64 and double are read as float32), "
                "string (or bytes, str)")


def normalize_dtype(dtype: Any) -> str:
    """``"int64"``, ``"float32"`` or ``"string"`` for any accepted spelling of a dtype:
    TensorFlow's names and DType objects, NumPy's names and dtypes, ``int``,
    ``float``, ``bytes`` and ``str``. A float64 (``"float64"``, ``"double"``,
    ``np.float64``) is read as float32, with a warning; anything else is a
    ``TypeError`` listing the valid names."""
    if dtype in (bytes, str):
        return "string"
    if dtype is int:
        return "int64"
    if dtype is float:
        return "float32"
    if isinstance(dtype, str):
        name = dtype.lower().removeprefix("tf.").removeprefix("np.").removeprefix("numpy.")
    elif isinstance(getattr(dtype, "name", None), str) and not isinstance(dtype, np.dtype):
        name = dtype.name  # TensorFlow DType objects
    else:
        try:
            np_dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"dtype must be {_VALID_NAMES}; not {dtype!r}") from None
        name = "string" if np_dtype.kind in "SUO" else np_dtype.name
    kind = _ALIASES.get(name)
    if kind is None:
        raise TypeError(f"dtype must be {_VALID_NAMES}, the kinds a tf.train.Feature holds; not {dtype!r}")
    if kind == "float64":
        import warnings

        from recordkit.errors import user_stacklevel

        warnings.warn(f"dtype {dtype!r}: a tf.train.Example holds float32 values, so the feature is read as float32",
                      UserWarning, stacklevel=user_stacklevel())
        return "float32"
    return kind


def _shape(shape: Any, what: str) -> tuple[int, ...]:
    """A spec's shape as a tuple of positive ints: ``[]`` is one value per record.

    A dimension of zero or less is refused here, when the spec is made:
    TensorFlow 2.21's parser dies with SIGFPE on a shape of ``[0]``.
    """
    if shape is None:
        raise ValueError(f"Missing shape for feature: {what} needs a shape ([] for one value per record, [k] for k)")
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"{what}: shape must be a list of dimensions, not {shape!r}") from None
    for d in dims:
        if d is None:
            raise ValueError(f"{what}: all dimensions of shape {list(dims)} need to be known; "
                             "use FixedLenSequenceFeature for a variable first dimension")
        if not isinstance(d, (int, np.integer)) or d < 1:
            raise ValueError(f"{what}: every dimension of shape {list(dims)} must be a positive integer, not {d!r}")
    return tuple(int(d) for d in dims)


def _default_array(default: Any, dtype: str, shape: tuple[int, ...], what: str) -> np.ndarray | None:
    if default is None:
        return None
    size = math.prod(shape)
    spec = f"{what}({list(shape)}, {dtype!r}, default_value={default!r})"
    if dtype == "string":
        flat = np.asarray(default, dtype=object).reshape(-1)
        if not all(isinstance(v, (bytes, str, bytearray)) for v in flat):
            raise TypeError(f"{spec}: the default of a string feature is bytes or str")
        try:
            flat = np.array([str.encode(v) if isinstance(v, str) else bytes(v) for v in flat], dtype=object)
        except UnicodeEncodeError:
            raise ValueError(f"{spec}: the default has no UTF-8 form (a lone surrogate)") from None
    else:
        raw = np.asarray(default)
        if raw.dtype.kind not in "biuf":
            raise TypeError(f"{spec}: the default of an {dtype} feature is a number, not {default!r} "
                            f"({type(default).__name__})")
        if dtype == "int64" and raw.dtype.kind == "f" and not np.all(raw == np.round(raw)):
            raise TypeError(f"{spec}: cannot convert the default to int64 without losing its fraction")
        flat = raw.astype(NUMPY_DTYPES[dtype]).reshape(-1)
    if flat.size != size:
        raise ValueError(
            f"{what}: the default has {flat.size} values but the shape {list(shape)} needs {size} "
            "(TensorFlow does not broadcast defaults)"
        )
    return flat


@dataclass(frozen=True)
class FixedLenFeature:
    """A feature with exactly ``prod(shape)`` values in every record.

    A record without the feature gets ``default_value`` (with exactly
    ``prod(shape)`` values; no broadcasting); without a default the feature is
    required. A record that has the feature with another number of values,
    an empty list included, is an error: the default is not used then.
    """

    shape: tuple[int, ...]
    dtype: str
    default_value: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _shape(self.shape, "FixedLenFeature"))
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        object.__setattr__(self, "_default", _default_array(self.default_value, self.dtype, self.shape, "FixedLenFeature"))


@dataclass(frozen=True)
class VarLenFeature:
    """Any number of values per record; parsed into a ``SparseArray``."""

    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))


@dataclass(frozen=True)
class SparseFeature:
    """A sparse array from index feature(s) and a value feature (TensorFlow's ``SparseFeature``).

    Values are sorted by index within each record unless ``already_sorted``.
    As in TensorFlow, indices are not checked against ``size``.
    """

    index_key: Union[str, Sequence[str]]
    value_key: str
    dtype: str
    size: Union[int, Sequence[int]]
    already_sorted: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        keys = [self.index_key] if isinstance(self.index_key, str) else list(self.index_key)
        sizes = [self.size] if isinstance(self.size, int) else [int(s) for s in self.size]
        if len(keys) != len(sizes):
            raise ValueError(f"SparseFeature: {len(keys)} index keys but {len(sizes)} sizes")
        object.__setattr__(self, "_index_keys", tuple(keys))
        object.__setattr__(self, "_sizes", tuple(sizes))


@dataclass(frozen=True)
class RowSplits:
    """Partition by row splits (a feature holding ``[0, ..., nvals]``)."""

    key: str


@dataclass(frozen=True)
class RowLengths:
    """Partition by row lengths."""

    key: str


@dataclass(frozen=True)
class RowStarts:
    """Partition by row start offsets."""

    key: str


@dataclass(frozen=True)
class RowLimits:
    """Partition by row end offsets."""

    key: str


@dataclass(frozen=True)
class ValueRowIds:
    """Partition by the row id of each value (sorted)."""

    key: str


@dataclass(frozen=True)
class UniformRowLength:
    """Partition into rows of a fixed length."""

    length: int


Partition = Union[RowSplits, RowLengths, RowStarts, RowLimits, ValueRowIds, UniformRowLength]


@dataclass(frozen=True)
class RaggedFeature:
    """A ragged feature (TensorFlow's ``RaggedFeature``): values and optional partitions.

    ``value_key`` defaults to the feature's own key. ``partitions`` are listed
    outermost first. Row splits are ``int32`` unless ``row_splits_dtype="int64"``.
    """

    dtype: str
    value_key: str | None = None
    partitions: tuple[Partition, ...] = field(default=())
    row_splits_dtype: str = "int32"
    validate: bool = False

    RowSplits = RowSplits
    RowLengths = RowLengths
    RowStarts = RowStarts
    RowLimits = RowLimits
    ValueRowIds = ValueRowIds
    UniformRowLength = UniformRowLength

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        object.__setattr__(self, "partitions", tuple(self.partitions))
        splits = np.dtype(getattr(self.row_splits_dtype, "name", self.row_splits_dtype)).name
        if splits not in ("int32", "int64"):
            raise ValueError(f"row_splits_dtype must be int32 or int64, not {self.row_splits_dtype!r}")
        object.__setattr__(self, "row_splits_dtype", splits)
        if self.value_key is not None and (not isinstance(self.value_key, str) or not self.value_key):
            raise ValueError("RaggedFeature.value_key must be a non-empty string")


@dataclass(frozen=True)
class FixedLenSequenceFeature:
    """A variable number of rows of ``shape`` each.

    In ``parse_example`` it needs ``allow_missing=True`` (as in TensorFlow) and
    records are padded with ``default_value`` (a scalar; 0 or ``b""`` when
    None) to the longest. In ``parse_sequence_example`` it reads a feature list,
    one row per step.
    """

    shape: tuple[int, ...]
    dtype: str
    allow_missing: bool = False
    default_value: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _shape(self.shape, "FixedLenSequenceFeature"))
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        if self.default_value is not None and np.asarray(self.default_value, dtype=object).size != 1:
            raise ValueError(
                "FixedLenSequenceFeature.default_value is the padding element and must be a single value, "
                f"not {self.default_value!r}"
            )


FeatureSpec = Union[FixedLenFeature, VarLenFeature, SparseFeature, RaggedFeature, FixedLenSequenceFeature]
