"""``tf.io.parse_example`` and friends, with TensorFlow's semantics, into NumPy.

Rust decodes a whole batch in one call (GIL released) into, per requested
feature, a flat value buffer and each record's value count. This module turns
those into TensorFlow's outputs with a handful of array operations per
feature, never a Python loop over records.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from recordkit import _native
from recordkit.arrays import RaggedArray, SparseArray
from recordkit.errors import ParseError
from recordkit.features import (
    NUMPY_DTYPES,
    FeatureSpec,
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    RowLengths,
    RowLimits,
    RowSplits,
    RowStarts,
    SparseFeature,
    UniformRowLength,
    ValueRowIds,
    VarLenFeature,
)

__all__ = [
    "parse_example",
    "parse_single_example",
    "parse_sequence_example",
    "parse_single_sequence_example",
    "MAX_ROWS_FROM_ROW_IDS",
]

_TF_TYPE = {"int64": "int64", "float32": "float", "string": "string"}
# (values, per-record counts with -1 for missing, the count all records share or -2)
Column = tuple[np.ndarray, np.ndarray, int]


# ValueRowIds make a row for every id up to the largest, most of them empty, so
# one small record can ask for any number; more rows than this in a batch are
# refused (TensorFlow fails on ids past 2**31 too). Raise it to trust larger ids.
MAX_ROWS_FROM_ROW_IDS = 1 << 24


def _shape_text(shape: Sequence[Any]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _records(serialized: Any, what: str) -> list:
    if isinstance(serialized, (bytes, bytearray, memoryview, str)):
        raise TypeError(f"{what} takes a batch (a list of serialized records); use the single-record function for one")
    if isinstance(serialized, np.ndarray):
        return serialized.reshape(-1).tolist()
    if type(serialized) is list:
        return serialized  # the parser holds a reference to each record it reads: no copy needed
    return list(serialized)


def _single(serialized: Any, what: str) -> list:
    if isinstance(serialized, np.ndarray) and serialized.shape == ():
        serialized = serialized.item()
    if not isinstance(serialized, (bytes, bytearray, memoryview)):
        raise TypeError(f"{what} takes one serialized record (bytes), not {type(serialized).__name__}")
    return [serialized]


class Requests:
    """The unique (key, dtype) pairs the Rust parser is asked for."""

    def __init__(self) -> None:
        self.dtypes: dict[str, str] = {}

    def add(self, key: str, dtype: str) -> None:
        if not isinstance(key, str):
            raise TypeError(f"feature keys must be str, not {type(key).__name__}")
        known = self.dtypes.setdefault(key, dtype)
        if known != dtype:
            raise ValueError(f"Conflicting type {known} vs {dtype} for feature {key}.")

    def as_list(self) -> list[tuple[str, str]]:
        return list(self.dtypes.items())


def _check_key_roles(features: Mapping[str, FeatureSpec]) -> None:
    """TensorFlow's checks on the roles a spec gives its keys (``_ParseOpParams``):
    a key is dense (FixedLen, FixedLenSequence), sparse (VarLen, SparseFeature's
    index and value keys) or ragged (RaggedFeature's value and partition keys),
    never two of these, and one role's uses of a key must agree on its types."""
    dense: dict[str, str] = {}
    sparse: dict[str, str] = {}
    ragged: dict[str, tuple[str, str]] = {}

    def add_sparse(key: str, dtype: str) -> None:
        known = sparse.setdefault(key, dtype)
        if known != dtype:
            raise ValueError(f"Conflicting type {known} vs {dtype} for feature {key}.")

    def add_ragged(key: str, dtype: str, splits: str) -> None:
        known_dtype, known_splits = ragged.setdefault(key, (dtype, splits))
        if known_dtype != dtype:
            raise ValueError(f"Conflicting type {known_dtype} vs {dtype} for feature {key}.")
        if known_splits != splits:
            raise ValueError(f"Conflicting partition type {known_splits} vs {splits} for feature {key}.")

    for name in sorted(features):  # TensorFlow adds keys in this order
        spec = features[name]
        if isinstance(spec, (FixedLenFeature, FixedLenSequenceFeature)):
            dense[name] = spec.dtype
        elif isinstance(spec, VarLenFeature):
            add_sparse(name, spec.dtype)
        elif isinstance(spec, SparseFeature):
            for key in spec._index_keys:  # type: ignore[attr-defined]
                add_sparse(key, "int64")
            add_sparse(spec.value_key, spec.dtype)
        elif isinstance(spec, RaggedFeature):
            splits = str(np.dtype(spec.row_splits_dtype))
            add_ragged(spec.value_key or name, spec.dtype, splits)
            for part in spec.partitions:
                if not isinstance(part, UniformRowLength):
                    add_ragged(part.key, "int64", splits)
    roles = (("Dense", dense), ("sparse", sparse), ("ragged", ragged))
    for (first, keys_a), (second, keys_b) in ((roles[0], roles[1]), (roles[0], roles[2]), (roles[2], roles[1])):
        common = keys_a.keys() & keys_b.keys()
        if common:
            raise ValueError(
                f"{first.capitalize()} and {second} keys must not intersect; {first.lower()}_keys: {list(keys_a)}, "
                f"{second}_keys: {list(keys_b)}, intersection: {sorted(common)}"
            )


def check_specs(features: Any, argument: str = "features") -> None:
    """Refuses a spec that is not a mapping of feature names to specs, naming the argument."""
    if not isinstance(features, Mapping):
        raise TypeError(f"{argument} must be a mapping of feature name to spec, e.g. "
                        f"{{'label': rk.FixedLenFeature([], 'int64')}}, not {type(features).__name__}")


def check_batch_size(batch_size: Any) -> int:
    """``batch_size`` as an int; refuses what is not a positive integer (a float would
    fail only once reading starts)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
        raise TypeError(f"batch_size must be an integer, not {type(batch_size).__name__} {batch_size!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    return int(batch_size)


def plan_example(features: Mapping[str, FeatureSpec], requests: Requests) -> None:
    check_specs(features)
    if not features:
        raise ValueError("features cannot be empty")
    _check_key_roles(features)
    for name, spec in features.items():
        if isinstance(spec, (FixedLenFeature, VarLenFeature)):
            requests.add(name, spec.dtype)
        elif isinstance(spec, FixedLenSequenceFeature):
            if not spec.allow_missing:
                raise ValueError("Unsupported: FixedLenSequenceFeature requires allow_missing to be True.")
            requests.add(name, spec.dtype)
        elif isinstance(spec, SparseFeature):
            for key in spec._index_keys:  # type: ignore[attr-defined]
                requests.add(key, "int64")
            requests.add(spec.value_key, spec.dtype)
        elif isinstance(spec, RaggedFeature):
            requests.add(spec.value_key or name, spec.dtype)
            for part in spec.partitions:
                if not isinstance(part, UniformRowLength):
                    requests.add(part.key, "int64")
        else:
            raise TypeError(f"unsupported feature spec for {name!r}: {spec!r}")


def request_columns(requests: Requests, columns: list) -> dict[str, Column]:
    return dict(zip(requests.dtypes, columns))


def wrong_count_error(name: str, dtype: str, shape: Sequence[int], counts: np.ndarray, bad: np.ndarray,
                      first_record: int = 0) -> ParseError:
    """TensorFlow's error for the first record whose fixed-length feature has too many or few values."""
    i = int(np.argmax(bad))
    return ParseError(
        f"Key: {name}, Index: {first_record + i}. Number of {_TF_TYPE[dtype]} values != expected. "
        f"Values size: {counts[i]} but output shape: {_shape_text(shape)}",
        key=name, index=first_record + i,
    )


def required_error(name: str, dtype: str, missing: np.ndarray, first_record: int = 0) -> ParseError:
    """TensorFlow's error for the first record lacking a fixed-length feature that has no default."""
    i = first_record + int(np.argmax(missing))
    return ParseError(
        f"Index: {i}. Feature: {name} (data type: {_TF_TYPE[dtype]}) is required but could not be found.",
        key=name, index=i,
    )


def missing_feature_list_error(name: str, missing: np.ndarray, first_record: int = 0) -> ParseError:
    """TensorFlow's error for the first record (of a batch starting at ``first_record``) lacking a required feature list."""
    i = first_record + int(np.argmax(missing))
    return ParseError(f"Index: {i}. Feature list '{name}' is required but could not be found.", key=name, index=i)


def step_count_error(name: str, shape: Sequence[int], step_counts: np.ndarray, bad: np.ndarray,
                     step_owner: np.ndarray, first_record: int = 0) -> ParseError:
    """TensorFlow's error for the first step (of ``bad`` ones) not holding ``shape``'s count of values."""
    s = int(np.argmax(bad))
    i = first_record + int(step_owner[s])
    return ParseError(
        f"Feature list: {name}, Index: {i}. Number of values != expected. "
        f"values size: {int(step_counts[s])} but output shape: {_shape_text(shape)}",
        key=name, index=i,
    )


def _fixed(name: str, spec: FixedLenFeature, column: Column, batch: int, single: bool) -> np.ndarray:
    values, counts, uniform = column
    if uniform == 1 and batch and not spec.shape and not single and len(values) == batch:
        return values  # a scalar in every record, the most common case, as it came
    size = math.prod(spec.shape)
    lead = () if single else (batch,)
    if batch and size and uniform == size:
        return values.reshape(lead + spec.shape)
    present = counts >= 0
    bad = present & (counts != size)
    if bad.any():
        raise wrong_count_error(name, spec.dtype, spec.shape, counts, bad)
    missing = ~present
    # As in TensorFlow, a feature of shape [0] can have no usable default: always required.
    default = spec._default if size else None  # type: ignore[attr-defined]
    if missing.any() and default is None:
        raise required_error(name, spec.dtype, missing)
    out = np.empty((batch, size), dtype=NUMPY_DTYPES[spec.dtype])
    out[present] = values.reshape(int(present.sum()), size)
    if missing.any():
        out[missing] = default
    return out.reshape(lead + spec.shape)


def _varlen(column: Column, batch: int, single: bool) -> SparseArray:
    values, counts, _ = column
    n = np.maximum(counts, 0)
    total = int(n.sum())
    if single:
        return SparseArray(np.arange(total, dtype=np.int64).reshape(-1, 1), values, np.array([total], dtype=np.int64))
    rows = np.repeat(np.arange(batch, dtype=np.int64), n)
    cols = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
    width = int(n.max()) if batch else 0
    return SparseArray(np.stack([rows, cols], axis=1), values, np.array([batch, width], dtype=np.int64))


def sparse_output(name: str, spec: SparseFeature, columns: dict[str, Column], batch: int, single: bool) -> SparseArray:
    values, value_counts, _ = columns[spec.value_key]
    value_counts = np.maximum(value_counts, 0)
    index_values = []
    for key in spec._index_keys:  # type: ignore[attr-defined]
        idx, idx_counts, _ = columns[key]
        mismatch = np.maximum(idx_counts, 0) != value_counts
        if mismatch.any():
            i = int(np.argmax(mismatch))
            raise ParseError(
                f"Key: {name}, Index: {i}. SparseFeature needs as many indices ({key}: "
                f"{max(int(idx_counts[i]), 0)}) as values ({spec.value_key}: {int(value_counts[i])})",
                key=name, index=i,
            )
        index_values.append(idx)
    rows = np.repeat(np.arange(batch, dtype=np.int64), value_counts)
    keys = [rows] + index_values
    if not spec.already_sorted and len(values) > 1:
        order = np.lexsort(tuple(reversed(keys)))
        keys = [k[order] for k in keys]
        values = values[order]
    sizes = list(spec._sizes)  # type: ignore[attr-defined]
    if single:
        return SparseArray(np.stack(keys[1:], axis=1).astype(np.int64), values, np.array(sizes, dtype=np.int64))
    return SparseArray(np.stack(keys, axis=1).astype(np.int64), values, np.array([batch] + sizes, dtype=np.int64))


def _segment_sums(lengths: np.ndarray, owners: np.ndarray, batch: int) -> np.ndarray:
    return np.bincount(owners, weights=lengths, minlength=batch).astype(np.int64)


def _insert_zero_splits(
    pv: np.ndarray, pc: np.ndarray, starts: np.ndarray, nonempty: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Row splits values and counts with a lone 0 for every record that has none."""
    if nonempty.all():
        return pv, pc
    return np.insert(pv, starts[~nonempty], 0), np.where(nonempty, pc, 1)


def _partition_lengths(
    name: str, part: Any, columns: dict[str, Column], nvals: np.ndarray, batch: int, single: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(row lengths over the batch, rows per record) for one partition."""
    if isinstance(part, UniformRowLength):
        length = int(part.length)
        if length <= 0 or (nvals % length).any():
            i = int(np.argmax(nvals % max(length, 1))) if length > 0 else 0
            raise ParseError(f"Key: {name}, Index: {i}. {int(nvals[i])} values do not split into rows of {length}", key=name, index=i)
        nrows = nvals // length
        return np.full(int(nrows.sum()), length, dtype=np.int64), nrows
    pv, pc, _ = columns[part.key]
    pc = np.maximum(pc, 0)
    starts = np.cumsum(pc) - pc
    if isinstance(part, RowLengths):
        return pv, pc
    if isinstance(part, ValueRowIds):
        if (pv < 0).any():
            i = int(np.repeat(np.arange(batch), pc)[np.argmax(pv < 0)])
            raise ParseError(f"Key: {name}, Index: {i}. row ids {part.key} must not be negative", key=name, index=i)
        nrows = np.zeros(batch, dtype=np.int64)
        has = pc > 0
        if has.any():
            nrows[has] = np.maximum.reduceat(pv, starts[has]) + 1
        if int(nrows.sum()) > MAX_ROWS_FROM_ROW_IDS:  # rows between ids are empty: a few bytes can ask for billions
            i = int(np.argmax(np.cumsum(nrows) > MAX_ROWS_FROM_ROW_IDS))
            raise ParseError(f"Key: {name}, Index: {i}. row ids {part.key} ask for {int(nrows.sum())} rows, beyond "
                             f"recordkit.parsing.MAX_ROWS_FROM_ROW_IDS={MAX_ROWS_FROM_ROW_IDS}", key=name, index=i)
        row_offsets = np.cumsum(nrows) - nrows
        global_ids = pv + np.repeat(row_offsets, pc)
        owner = np.repeat(np.arange(batch), pc)
        if len(pv) and ((np.diff(pv) < 0) & (owner[1:] == owner[:-1])).any():
            raise ParseError(f"Key: {name}. value_rowids of {part.key} must be sorted", key=name)
        bad = pc != nvals
        if bad.any():
            i = int(np.argmax(bad))
            raise ParseError(f"Key: {name}, Index: {i}. {part.key} has {int(pc[i])} row ids for {int(nvals[i])} values", key=name, index=i)
        return np.bincount(global_ids, minlength=int(nrows.sum())).astype(np.int64), nrows
    ends = starts + pc - 1
    nonempty = pc > 0
    if isinstance(part, RowSplits):
        # Empty splits are read as [0], no rows, as TensorFlow's batch parser does;
        # they do not fit a record with values.
        bad = ~nonempty & (nvals > 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise ParseError(f"Key: {name}, Index: {i}. row splits {part.key} are empty", key=name, index=i)
        pv, pc = _insert_zero_splits(pv, pc, starts, nonempty)
        starts = np.cumsum(pc) - pc
        if single and pv[0] != 0:
            raise ParseError(f"Key: {name}, Index: 0. row splits {part.key} must start at 0", key=name, index=0)
        # TensorFlow's batch parser ignores each record's first split (any value
        # reads as 0); a copy, as another feature may share the column.
        pv = pv.copy()
        pv[starts] = 0
        keep = np.ones(len(pv), dtype=bool)
        keep[starts] = False
        return (pv - np.concatenate([[0], pv[:-1]]))[keep], pc - 1
    if isinstance(part, RowStarts):
        nxt = np.empty_like(pv)
        nxt[:-1] = pv[1:]
        nxt[ends[nonempty]] = nvals[nonempty]
        return nxt - pv, pc
    if isinstance(part, RowLimits):
        prev = np.empty_like(pv)
        prev[1:] = pv[:-1]
        prev[starts[nonempty]] = 0
        return pv - prev, pc
    raise TypeError(f"unsupported partition {part!r}")


def ragged_output(name: str, spec: RaggedFeature, columns: dict[str, Column], batch: int, single: bool) -> Any:
    values, counts, _ = columns[spec.value_key or name]
    nvals = np.maximum(counts, 0)
    partitions = list(spec.partitions)
    # As in TensorFlow, trailing uniform partitions are dense inner dimensions
    # of the values, not ragged levels.
    inner: tuple[int, ...] = ()
    while partitions and isinstance(partitions[-1], UniformRowLength):
        uniform = partitions.pop()
        _, nvals = _partition_lengths(name, uniform, columns, nvals, batch, single)
        inner = (int(uniform.length),) + inner
    if inner:
        values = values.reshape((-1,) + inner)
    if single:
        for part in partitions[1:]:
            if isinstance(part, RowSplits) and columns[part.key][1][0] <= 0:
                # TensorFlow gives -1 rows here and refuses ("Dimension -1 must be >= 0").
                raise ParseError(f"Key: {name}. row splits {part.key} are empty", key=name, index=0)
    levels = []  # innermost first
    for part in reversed(partitions):
        lengths, nrows = _partition_lengths(name, part, columns, nvals, batch, single)
        owners = np.repeat(np.arange(batch), nrows)
        if (lengths < 0).any():
            i = int(owners[np.argmax(lengths < 0)])
            raise ParseError(f"Key: {name}, Index: {i}. partition {type(part).__name__} gives a negative row length",
                             key=name, index=i)
        sums = _segment_sums(lengths, owners, batch)
        bad = sums != nvals
        if bad.any():
            i = int(np.argmax(bad))
            raise ParseError(
                f"Key: {name}, Index: {i}. partition {type(part).__name__} covers {int(sums[i])} values "
                f"but there are {int(nvals[i])}", key=name, index=i,
            )
        levels.append(lengths)
        nvals = nrows
    if not single:
        levels.append(nvals)
    if not levels:
        return values
    dtype = np.dtype(spec.row_splits_dtype)
    splits = [np.concatenate([[0], np.cumsum(lengths)]).astype(dtype) for lengths in reversed(levels)]
    if single and isinstance(partitions[0], RowSplits) and columns[partitions[0].key][1][0] <= 0:
        # TensorFlow's single-example parser passes missing outer splits on as
        # they are: empty, not [0] (its batch parser gives [0]).
        splits[0] = splits[0][:0]
    return RaggedArray.from_nested_row_splits(values, splits)


def _padded(values: np.ndarray, counts: np.ndarray, stride: int, shape: tuple, batch: int, pad: Any, dtype: str) -> np.ndarray:
    """Rows of `stride` values per record, padded with `pad` to the longest record."""
    n = np.maximum(counts, 0)
    rows = n // stride if stride else np.zeros(batch, dtype=np.int64)
    longest = int(rows.max()) if batch else 0
    out = np.full((batch, longest * stride), pad, dtype=NUMPY_DTYPES[dtype])
    if len(values):
        record = np.repeat(np.arange(batch, dtype=np.int64), n)
        offset = np.arange(len(values), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
        out[record, offset] = values
    return out.reshape((batch, longest) + shape)


def _pad_value(spec: FixedLenSequenceFeature) -> Any:
    if spec.default_value is None:
        return b"" if spec.dtype == "string" else 0
    pad = np.asarray(spec.default_value).reshape(()).item()  # one value, checked when the spec was made
    return pad.encode() if isinstance(pad, str) else pad


def _sequence_rows(name: str, spec: FixedLenSequenceFeature, column: Column, batch: int, single: bool) -> np.ndarray:
    values, counts, _ = column
    stride = math.prod(spec.shape)
    n = np.maximum(counts, 0)
    if stride and (n % stride).any():
        i = int(np.argmax(n % stride))
        raise ParseError(
            f"Key: {name}, Index: {i}. Number of {_TF_TYPE[spec.dtype]} values is not a multiple of stride length. "
            f"Saw {int(n[i])} values but output shape is: [?,{','.join(map(str, spec.shape))}]",
            key=name, index=i,
        )
    if single:
        return values.reshape((-1,) + spec.shape) if stride else np.zeros((0,) + spec.shape, NUMPY_DTYPES[spec.dtype])
    return _padded(values, counts, stride, spec.shape, batch, _pad_value(spec), spec.dtype)


def assemble_outputs(features: Mapping[str, FeatureSpec], columns: dict[str, Column], batch: int, single: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, spec in features.items():
        if isinstance(spec, FixedLenFeature):
            out[name] = _fixed(name, spec, columns[name], batch, single)
        elif isinstance(spec, VarLenFeature):
            out[name] = _varlen(columns[name], batch, single)
        elif isinstance(spec, SparseFeature):
            out[name] = sparse_output(name, spec, columns, batch, single)
        elif isinstance(spec, RaggedFeature):
            out[name] = ragged_output(name, spec, columns, batch, single)
        elif isinstance(spec, FixedLenSequenceFeature):
            out[name] = _sequence_rows(name, spec, columns[name], batch, single)
    return out


def parse_example(serialized: Iterable[bytes], features: Mapping[str, FeatureSpec], example_names: Any = None,
                  name: str | None = None) -> dict[str, Any]:
    """Parses a batch of serialized ``tf.train.Example`` records (``tf.io.parse_example``).

    Args:
        serialized: A list (or 1-D object array) of serialized Examples.
        features: ``{name: spec}`` with ``FixedLenFeature``, ``VarLenFeature``,
            ``SparseFeature``, ``RaggedFeature`` or
            ``FixedLenSequenceFeature`` (``allow_missing=True``) specs.
        example_names: Accepted for TensorFlow compatibility; errors give the
            record's index instead.
        name: TensorFlow's op name: accepted, and not used.

    Returns:
        ``{name: output}``: dense NumPy arrays of shape ``[batch] + shape``
        (strings as ``object`` arrays of ``bytes``), ``SparseArray`` for
        VarLen and Sparse features, ``RaggedArray`` for Ragged ones.

    Raises:
        ParseError: Where TensorFlow raises: a required feature missing, a
            count or type mismatch, a malformed record. ``.key`` and
            ``.index`` say which.
    """
    return batch_parser(features)(serialized)


def batch_parser(features: Mapping[str, FeatureSpec]) -> Callable[[Iterable[bytes]], dict[str, Any]]:
    """``parse_example`` for ``features``, checked and planned once for every batch
    it parses (a Dataset's batches: planning took 17 us of each batch of 1024)."""
    requests = Requests()
    plan_example(features, requests)
    wanted = requests.as_list()

    def parse(serialized: Iterable[bytes]) -> dict[str, Any]:
        records = _records(serialized, "parse_example")
        columns = request_columns(requests, _native.parse_example_columns(records, wanted))
        return assemble_outputs(features, columns, len(records), single=False)

    return parse


def parse_single_example(serialized: bytes, features: Mapping[str, FeatureSpec], example_names: Any = None,
                         name: str | None = None) -> dict[str, Any]:
    """Parses one serialized ``tf.train.Example`` (``tf.io.parse_single_example``).

    As ``parse_example`` without the batch dimension: dense outputs have
    shape ``shape``, VarLen indices are ``[N, 1]``.
    """
    records = _single(serialized, "parse_single_example")
    requests = Requests()
    plan_example(features, requests)
    columns = request_columns(requests, _native.parse_example_columns(records, requests.as_list()))
    return assemble_outputs(features, columns, 1, single=True)


def plan_sequence(
    context: Mapping[str, FeatureSpec], sequence: Mapping[str, FeatureSpec]
) -> tuple[Requests, Requests]:
    check_specs(context, "context_features")
    check_specs(sequence, "sequence_features")
    if not context and not sequence:
        raise ValueError("context_features and sequence_features cannot both be empty")
    context_requests, list_requests = Requests(), Requests()
    for name, spec in context.items():
        if isinstance(spec, (SparseFeature, FixedLenSequenceFeature)):
            raise TypeError(f"context feature {name!r}: {type(spec).__name__} is not supported in the context")
    if context:
        plan_example(context, context_requests)
    _check_key_roles(sequence)
    for name, spec in sequence.items():
        if isinstance(spec, FixedLenSequenceFeature):
            if spec.default_value is not None:
                raise ValueError(f"Value feature_list.dense_defaults[{name}] must be None")
            list_requests.add(name, spec.dtype)
        elif isinstance(spec, VarLenFeature):
            list_requests.add(name, spec.dtype)
        elif isinstance(spec, RaggedFeature):
            list_requests.add(spec.value_key or name, spec.dtype)
            for part in spec.partitions:
                if not isinstance(part, UniformRowLength):
                    list_requests.add(part.key, "int64")  # partitions are feature lists of their own
        else:
            raise TypeError(f"unsupported sequence feature spec for {name!r}: {spec!r}")
    return context_requests, list_requests


def _assemble_sequence(
    sequence: Mapping[str, FeatureSpec], columns: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], batch: int, single: bool
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    out: dict[str, Any] = {}
    lengths: dict[str, np.ndarray] = {}
    for name, spec in sequence.items():
        key = spec.value_key or name if isinstance(spec, RaggedFeature) else name
        values, step_counts, steps = columns[key]
        missing = steps < 0
        if isinstance(spec, FixedLenSequenceFeature) and not spec.allow_missing and missing.any():
            raise missing_feature_list_error(name, missing)
        steps = np.maximum(steps, 0)
        step_owner = np.repeat(np.arange(batch, dtype=np.int64), steps)
        if isinstance(spec, FixedLenSequenceFeature):
            stride = math.prod(spec.shape)
            bad = step_counts != stride
            if bad.any():
                raise step_count_error(name, spec.shape, step_counts, bad, step_owner)
            if single:
                out[name] = values.reshape((int(steps[0]),) + spec.shape)
            else:
                out[name] = _padded(values, steps * stride, stride, spec.shape, batch, _pad_value(spec), spec.dtype)
                lengths[name] = steps.astype(np.int64)
        elif isinstance(spec, VarLenFeature):
            total_steps = len(step_counts)
            step_in_record = np.arange(total_steps, dtype=np.int64) - np.repeat(np.cumsum(steps) - steps, steps)
            value_step = np.repeat(np.arange(total_steps, dtype=np.int64), step_counts)
            value_in_step = np.arange(len(values), dtype=np.int64) - np.repeat(np.cumsum(step_counts) - step_counts, step_counts)
            max_steps = int(steps.max()) if batch else 0
            max_values = int(step_counts.max()) if total_steps else 0
            if single:
                indices = np.stack([step_in_record[value_step], value_in_step], axis=1)
                out[name] = SparseArray(indices, values, np.array([max_steps, max_values], dtype=np.int64))
            else:
                indices = np.stack([step_owner[value_step], step_in_record[value_step], value_in_step], axis=1)
                out[name] = SparseArray(indices, values, np.array([batch, max_steps, max_values], dtype=np.int64))
        else:
            by_step = ragged_by_step(name, spec, columns, steps, step_owner)
            if single:
                out[name] = by_step
            else:
                outer = np.concatenate([[0], np.cumsum(steps)]).astype(np.dtype(spec.row_splits_dtype))
                out[name] = RaggedArray(by_step, outer)
    return out, lengths


def ragged_by_step(name: str, spec: RaggedFeature, columns: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
                    steps: np.ndarray, step_owner: np.ndarray) -> Any:
    """A ragged feature list with its partitions, as TensorFlow builds it: each step
    is partitioned as one record of a batch would be (so, as in TensorFlow's batch
    parser, each step's first row split reads as 0), giving ``[steps, ...]``.

    Every partition must be a feature list with as many steps as the values' in
    each record; TensorFlow checks this only with ``validate=True``, recordkit always.
    """
    step_columns: dict[str, Column] = {}
    for key in [spec.value_key or name] + [p.key for p in spec.partitions if not isinstance(p, UniformRowLength)]:
        values, step_counts, key_steps = columns[key]
        misaligned = np.maximum(key_steps, 0) != steps
        if misaligned.any():
            i = int(np.argmax(misaligned))
            raise ParseError(
                f"Feature list: {name}, Index: {i}. values and partitions are not aligned: "
                f"{spec.value_key or name} has {int(steps[i])} steps, {key} has {max(int(key_steps[i]), 0)}",
                key=name, index=i,
            )
        step_columns[key] = (values, step_counts, None)
    try:
        return ragged_output(name, spec, step_columns, len(step_owner), single=False)
    except ParseError as error:
        if error.index is None:
            raise
        record = int(step_owner[error.index])
        step = error.index - int(np.searchsorted(step_owner, record))
        raise ParseError(error.message.replace(f"Index: {error.index}.", f"Index: {record}, step {step}.", 1),
                         key=name, index=record) from None


def parse_sequence_example(
    serialized: Iterable[bytes],
    context_features: Mapping[str, FeatureSpec] | None = None,
    sequence_features: Mapping[str, FeatureSpec] | None = None,
    example_names: Any = None,
    name: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, np.ndarray]]:
    """Parses a batch of serialized ``tf.train.SequenceExample`` records (``tf.io.parse_sequence_example``).

    Returns:
        ``(context, feature_lists, lengths)``: context outputs as
        ``parse_example`` gives them; feature-list outputs (a
        ``FixedLenSequenceFeature`` gives ``[batch, max_steps] + shape``
        padded with 0 or ``b""``, a ``VarLenFeature`` a 3-D
        ``SparseArray``, a ``RaggedFeature`` a ``RaggedArray``
        of ragged rank 2); and the number of steps of each dense feature list.
    """
    records = _records(serialized, "parse_sequence_example")
    return _parse_sequence(records, context_features or {}, sequence_features or {}, single=False)


def parse_single_sequence_example(
    serialized: bytes,
    context_features: Mapping[str, FeatureSpec] | None = None,
    sequence_features: Mapping[str, FeatureSpec] | None = None,
    example_name: Any = None,
    name: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parses one serialized ``tf.train.SequenceExample``: ``(context, feature_lists)``."""
    records = _single(serialized, "parse_single_sequence_example")
    context, lists, _ = _parse_sequence(records, context_features or {}, sequence_features or {}, single=True)
    return context, lists


def _parse_sequence(
    records: list, context: Mapping[str, FeatureSpec], sequence: Mapping[str, FeatureSpec], single: bool
) -> tuple[dict[str, Any], dict[str, Any], dict[str, np.ndarray]]:
    context_requests, list_requests = plan_sequence(context, sequence)
    context_columns, list_columns = _native.parse_sequence_columns(records, context_requests.as_list(), list_requests.as_list())
    batch = len(records)
    if not batch:
        required = [(name, math.prod(spec.shape)) for name, spec in context.items()
                    if isinstance(spec, FixedLenFeature) and spec.default_value is None and math.prod(spec.shape)]
        if required:
            # TensorFlow's words: in an empty batch a required context feature is
            # missing from every record.
            name, size = required[0]
            raise ParseError(f"Inconsistent max number of elements for feature {name}: expected {size}, but found 0", key=name)
    context_out = assemble_outputs(context, request_columns(context_requests, context_columns), batch, single) if context else {}
    lists_out, lengths = _assemble_sequence(sequence, dict(zip(list_requests.dtypes, list_columns)), batch, single)
    return context_out, lists_out, lengths
