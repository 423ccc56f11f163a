"""TFRecord files as Arrow tables and streams of record batches, for pandas,
Polars, DuckDB and Parquet.

Records are framed, checked and parsed in Rust a batch per call; byte strings
arrive as one data buffer and its offsets (Arrow's own layout), numbers as
NumPy arrays that pyarrow wraps without copying. No Python object is made per
value or per row.

>>> table = rk.read_table("train.tfrecord", {"label": rk.FixedLenFeature([], "int64")})  # doctest: +SKIP
>>> table.to_pandas()  # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Literal, Mapping, Sequence

import numpy as np

from recordkit import _native
from recordkit._sources import open_input
from recordkit.errors import DataLossWarning, ParseError, RecordkitError
from recordkit.discovery import check_format, list_files, reader_compression, record_format
from recordkit.records import warn_skipped
from recordkit.features import (
    DTYPES,
    FeatureSpec,
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    SparseFeature,
    UniformRowLength,
    VarLenFeature,
)
from recordkit.parsing import (
    plan_example,
    plan_sequence,
    ragged_output,
    ragged_by_step,
    Requests,
    sparse_output,
    check_batch_size,
    check_specs,
    missing_feature_list_error,
    required_error,
    step_count_error,
    wrong_count_error,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from recordkit._sources import PathLike

__all__ = ["read_table", "read_batches", "spread_over_rows", "numpy_to_arrow", "RecordRange", "TableScan"]

Strings = Literal["binary", "utf8"]


_ARROW_NUMBERS = ("int64", "float32", "float64", "int32")
# infer_schema's kind names -> column dtypes; OFRecord has two kinds more than an Example.
_INFERRED_DTYPES = {"int64": "int64", "float": "float32", "bytes": "string", "double": "float64", "int32": "int32"}


@dataclass(frozen=True)
class _Column:
    """How one output column is made from its parsed values.

    ``shape`` is () for a scalar, the dense shape for a fixed-length column,
    and None for a list; for a ``feature_list`` column (a SequenceExample's),
    the same of each step. ``nullable`` columns make a missing feature null
    (an inferred schema); otherwise TensorFlow's rules hold: a fixed-length
    feature takes its default or is an error, a list is empty, and a
    ``required`` feature list is an error.
    """

    name: str
    dtype: str  # "int64", "float32", "string"; OFRecord's also "float64", "int32"
    shape: tuple[int, ...] | None
    default: Any = None
    nullable: bool = False
    inferred_from: int = 0  # records the schema was inferred from (0: a spec was given)
    spec: FeatureSpec | None = None  # a RaggedFeature or SparseFeature, built from several parsed keys
    feature_list: bool = False
    required: bool = False

    @property
    def value_key(self) -> str:
        """The parsed key holding this column's values."""
        return getattr(self.spec, "value_key", None) or self.name


@dataclass
class _Plan:
    """What to read: the container, the columns in output order, and what to ask Rust for."""

    container: str  # "example", "sequence_example" or "ofrecord"
    columns: list[_Column]
    requests: Requests  # features (a SequenceExample's context)
    list_requests: Requests  # a SequenceExample's feature lists


def _table_plan(container: str, features: Mapping[str, FeatureSpec], sequence_features: Mapping[str, FeatureSpec],
          columns: Sequence[str] | None) -> _Plan:
    check_specs(features)
    check_specs(sequence_features, "sequence_features")
    both = sorted(set(features) & set(sequence_features))
    if both:
        raise ValueError(f"{both} are named both in features and in sequence_features")
    every = list(features) + list(sequence_features)
    wanted = every if columns is None else list(columns)
    unknown = [name for name in wanted if name not in every]
    if unknown:
        raise ValueError(f"columns {unknown} are not in the spec; it has {sorted(every)}")
    plan = []
    for name in wanted:
        spec = features.get(name) or sequence_features[name]
        if name in sequence_features:
            if isinstance(spec, FixedLenSequenceFeature):
                plan.append(_Column(name, spec.dtype, tuple(spec.shape), feature_list=True, required=not spec.allow_missing))
            elif isinstance(spec, VarLenFeature):
                plan.append(_Column(name, spec.dtype, None, feature_list=True))
            elif isinstance(spec, RaggedFeature):
                plan.append(_Column(name, spec.dtype, None, spec=spec, feature_list=True))
            else:
                raise TypeError(f"{name}: read_table and read_batches take FixedLenSequenceFeature, VarLenFeature and "
                                f"RaggedFeature feature lists, not {type(spec).__name__}")
        elif isinstance(spec, FixedLenFeature):
            shape = tuple(spec.shape)
            plan.append(_Column(name, spec.dtype, shape, spec._default if math.prod(shape) else None))  # type: ignore[attr-defined]
        elif isinstance(spec, VarLenFeature):
            plan.append(_Column(name, spec.dtype, None))
        elif isinstance(spec, (RaggedFeature, SparseFeature)):
            plan.append(_Column(name, spec.dtype, None, spec=spec))
        else:
            raise TypeError(
                f"{name}: read_table and read_batches take FixedLenFeature, VarLenFeature, RaggedFeature and "
                f"SparseFeature specs, not {type(spec).__name__}"
            )
    context = {c.name: features[c.name] for c in plan if not c.feature_list}
    if container == "sequence_example":
        requests, list_requests = plan_sequence(context, {c.name: sequence_features[c.name] for c in plan if c.feature_list})
    else:
        requests, list_requests = Requests(), Requests()
        plan_example(context, requests)
    return _Plan(container, plan, requests, list_requests)


def _wanted_columns(columns: Sequence[str] | None) -> list[str] | None:
    """The column names asked for, refusing a lone name (whose letters would be
    taken as names) and a name asked for twice (two columns of one name)."""
    if columns is None:
        return None
    if isinstance(columns, (str, bytes)):
        raise TypeError(f"columns must be a list of feature names, e.g. [{columns!r}], not a single name")
    wanted = list(columns)
    repeated = sorted({name for name in wanted if wanted.count(name) > 1})
    if repeated:
        raise ValueError(f"columns names {repeated} more than once")
    return wanted


def _infer_plan(files: list[str], columns: Sequence[str] | None, compression: str | None, sample: int,
                fmt: str, on_error: str) -> _Plan:
    """One column per feature seen in the first ``sample`` records: a scalar where every
    record holding it holds one value, else a list (a feature list: a list of lists);
    a missing feature is null. With ``on_error="skip"``, damage in the sample is
    skipped without a warning: the read itself meets it again and warns then."""
    import warnings

    from recordkit.schema import infer_schema

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataLossWarning)
        schema = infer_schema(files, limit=sample, compression=compression, format=fmt,  # type: ignore[arg-type]
                              on_error=on_error)  # type: ignore[arg-type]
    plan = _Plan(schema.container, [], Requests(), Requests())
    found = [(name, info, False) for name, info in sorted(schema.features.items())]
    found += [(name, info, True) for name, info in sorted(schema.sequence_features.items())]
    for name, info, feature_list in found:
        if columns is not None and name not in columns:
            continue
        if info.kind == "mixed":
            raise ParseError(
                f"feature {name!r} holds different kinds in different records of the first {schema.records}: "
                "pass features= to say which to read", key=name,
            )
        if info.kind not in _INFERRED_DTYPES:
            continue  # never set in the sample: no type to give it
        dtype = _INFERRED_DTYPES[info.kind]
        shape = () if not feature_list and info.min_values == info.max_values == 1 else None
        plan.columns.append(_Column(name, dtype, shape, nullable=True, inferred_from=schema.records,
                                    feature_list=feature_list))
        (plan.list_requests if feature_list else plan.requests).add(name, dtype)
    if columns is not None:
        seen = {c.name: c for c in plan.columns}
        missing = [name for name in columns if name not in seen]
        if missing:
            raise ValueError(f"columns {missing} were not seen in the first {schema.records} records")
        plan.columns = [seen[name] for name in columns]
    return plan


def _arrow_type(column: _Column, strings: Strings) -> "pa.DataType":
    import pyarrow as pa

    if column.dtype in _ARROW_NUMBERS:
        value = pa.from_numpy_dtype(np.dtype(column.dtype))
    else:
        value = pa.large_string() if strings == "utf8" else pa.large_binary()
    if isinstance(column.spec, SparseFeature):
        ndim = len(column.spec._sizes)  # type: ignore[attr-defined]
        index = pa.int64() if ndim == 1 else pa.list_(pa.int64(), ndim)
        return pa.struct([("indices", pa.large_list(index)), ("values", pa.large_list(value))])
    if isinstance(column.spec, RaggedFeature):
        partitions = list(column.spec.partitions)
        while partitions and isinstance(partitions[-1], UniformRowLength):
            value = pa.list_(value, int(partitions.pop().length))
        for _ in range(len(partitions) + 1):
            value = pa.large_list(value)
        return pa.large_list(value) if column.feature_list else value
    if column.shape is None:
        value = pa.large_list(value)
    else:
        for size in reversed(column.shape):
            value = pa.list_(value, size)
    return pa.large_list(value) if column.feature_list else value


def _flat_values(column: _Column, values: Any, strings: Strings, first_record: int, counts: np.ndarray) -> "pa.Array":
    """The parsed values of a batch as one Arrow array, without copying numbers."""
    import pyarrow as pa

    if column.dtype != "string":
        return numpy_to_arrow(values)
    offsets, data = values
    kind = pa.large_string() if strings == "utf8" else pa.large_binary()
    flat = pa.Array.from_buffers(kind, len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    if strings == "utf8":
        try:
            flat.validate(full=True)
        except pa.ArrowInvalid:
            raise _bad_utf8(column, offsets, data, counts, first_record) from None
    return flat


def _bad_utf8(column: _Column, offsets: np.ndarray, data: np.ndarray, counts: np.ndarray, first_record: int) -> ParseError:
    """Names the first record whose value is not UTF-8 (only once something is wrong)."""
    raw = data.tobytes()
    owners = np.repeat(np.arange(len(counts)), np.maximum(counts, 0))
    for i in range(len(offsets) - 1):
        try:
            raw[offsets[i] : offsets[i + 1]].decode("utf-8")
        except UnicodeDecodeError as e:
            record = first_record + int(owners[i])
            return ParseError(
                f"Key: {column.name}, Index: {record}. A value is not valid UTF-8 ({e.reason}); "
                'read it with strings="binary"', key=column.name, index=record,
            )
    return ParseError(f"Key: {column.name}. A value is not valid UTF-8", key=column.name)


def _count_error(column: _Column, counts: np.ndarray, bad: np.ndarray, first_record: int) -> ParseError:
    if not column.nullable:
        return wrong_count_error(column.name, column.dtype, list(column.shape or ()), counts, bad, first_record)
    i = int(np.argmax(bad))
    fix = (f"pass features= (e.g. {{{column.name!r}: rk.VarLenFeature({column.dtype!r})}}) to read it"
           if column.dtype in DTYPES else "infer the schema from more records with infer_from=")
    return ParseError(
        f"Key: {column.name}, Index: {first_record + i}. The record holds {counts[i]} values, where the schema "
        f"inferred from the first {column.inferred_from} records has one per record: {fix}",
        key=column.name, index=first_record + i,
    )


def _fixed_array(column: _Column, flat: "pa.Array", counts: np.ndarray, uniform: int, first_record: int) -> "pa.Array":
    import pyarrow as pa

    assert column.shape is not None
    size = math.prod(column.shape)
    batch = len(counts)
    present = None  # None: every record holds its values
    if not (batch and size and uniform == size):
        present = counts >= 0
        bad = present & (counts != size)
        if bad.any():
            raise _count_error(column, counts, bad, first_record)
        missing = ~present
        if missing.any() and not column.nullable:
            if column.default is None:
                raise required_error(column.name, column.dtype, missing, first_record)
            # Missing records take the default: the values, then the default's
            # values once, taken row by row in Arrow.
            import pyarrow.compute as pc  # here: its import is 30 ms of a process's first table

            default = np.asarray(column.default).reshape(-1)
            if default.size == 1 and size > 1:
                default = np.repeat(default, size)
            if column.dtype == "string":
                try:
                    extra = _bytes_to_arrow([bytes(v) for v in default], flat.type)
                except pa.ArrowInvalid:
                    raise ValueError(f"feature {column.name!r}: its default value {column.default!r} is not valid "
                                     'UTF-8, as strings="utf8" needs; read it with strings="binary"') from None
            else:
                extra = numpy_to_arrow(default.astype(flat.type.to_pandas_dtype()))
            rows = np.where(present, np.cumsum(present) - 1, -1)
            starts = np.where(present, rows * size, len(flat))
            indices = (starts[:, None] + np.arange(size)).reshape(-1)
            flat = pc.take(pa.concat_arrays([flat, extra]), numpy_to_arrow(indices))
            present = None
    out = flat
    for width in reversed(column.shape[1:]):
        out = pa.FixedSizeListArray.from_arrays(out, width)
    if column.shape:
        out = pa.FixedSizeListArray.from_arrays(out, column.shape[0])
    if column.nullable and present is not None and not present.all():
        out = spread_over_rows(out, present)
    return out


def _bytes_to_arrow(values: list[bytes], type: "pa.DataType") -> "pa.Array":
    """``pa.array(values, type)`` for a few byte strings and a binary or string
    type, from its buffers: ``pa.array`` of a list imports pandas (0.3 s), as
    ``numpy_to_arrow`` says. As there, ``pa.ArrowInvalid`` where a string
    type's value is not UTF-8."""
    import pyarrow as pa

    width = np.int64 if pa.types.is_large_binary(type) or pa.types.is_large_string(type) else np.int32
    offsets = np.zeros(len(values) + 1, dtype=width)
    np.cumsum([len(v) for v in values], out=offsets[1:])
    array = pa.Array.from_buffers(type, len(values), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(values))])
    if pa.types.is_string(type) or pa.types.is_large_string(type):
        array.validate(full=True)  # the UTF-8 check that from_buffers leaves out
    return array


def numpy_to_arrow(values: np.ndarray, type: "pa.DataType | None" = None, mask: np.ndarray | None = None) -> "pa.Array":
    """``pa.array(values, type, mask=mask)`` for a 1-D NumPy array of numbers or
    bools, without pandas: ``pa.array`` asks pandas whether an array is
    categorical, which imports pandas (0.3 s) in a process that had not, on its
    first table. Numbers share ``values``' memory where it is contiguous."""
    import pyarrow as pa

    if not (isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype.kind in ("i", "u", "f", "b")
            and values.dtype.isnative):
        return pa.array(values, type, mask=mask)
    arrow_type = pa.from_numpy_dtype(values.dtype)
    if type is not None and type != arrow_type:
        return pa.array(values, type, mask=mask)
    if values.dtype.kind == "b":
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
    else:
        data = pa.py_buffer(np.ascontiguousarray(values))
    validity = None
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != values.shape:
            return pa.array(values, type, mask=mask)  # pyarrow's own error
        validity = pa.py_buffer(np.packbits(~mask, bitorder="little")) if mask.any() else None
    return pa.Array.from_buffers(arrow_type, len(values), [validity, data])


def spread_over_rows(values: "pa.Array", present: np.ndarray) -> "pa.Array":
    """One value per ``present`` row, spread over all the rows with nulls between."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.take(values, numpy_to_arrow(np.where(present, np.cumsum(present) - 1, 0), mask=~present))


def _offsets(counts: np.ndarray) -> "pa.Array":
    """List offsets for rows of ``counts`` values (a negative count: none)."""
    import pyarrow as pa

    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(np.maximum(counts, 0), out=offsets[1:])
    return numpy_to_arrow(offsets)


def _list_array(column: _Column, flat: "pa.Array", counts: np.ndarray) -> "pa.Array":
    import pyarrow as pa

    mask = numpy_to_arrow(counts < 0) if column.nullable and (counts < 0).any() else None
    return pa.LargeListArray.from_arrays(_offsets(counts), flat, mask=mask)


def _record_batch(plan: _Plan, schema: "pa.Schema", count: int, parsed: Any, first_record: int,
                  strings: Strings) -> "pa.RecordBatch":
    import pyarrow as pa

    if not plan.columns:
        # No column to read (none asked for, or none with a kind): the rows are still there.
        return pa.RecordBatch.from_struct_array(pa.nulls(count, pa.struct([])))
    if plan.container == "sequence_example":
        context, lists = parsed
        columns = dict(zip(plan.requests.dtypes, context))
        feature_lists = dict(zip(plan.list_requests.dtypes, lists))
    else:
        columns, feature_lists = dict(zip(plan.requests.dtypes, parsed)), {}
    arrays = []
    for column in plan.columns:
        if column.feature_list and column.spec is not None:
            arrays.append(_ragged_feature_list_array(column, feature_lists, first_record, strings))
            continue
        if column.feature_list:
            arrays.append(_feature_list_array(column, feature_lists[column.name], first_record, strings))
            continue
        values, counts, uniform = columns[column.value_key]
        flat = _flat_values(column, values, strings, first_record, counts)
        if column.spec is not None:
            arrays.append(_structured_array(column, flat, columns, len(counts), first_record, schema.field(column.name).type))
        elif column.shape is None:
            arrays.append(_list_array(column, flat, counts))
        else:
            arrays.append(_fixed_array(column, flat, counts, uniform, first_record))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _feature_list_array(column: _Column, parsed: Any, first_record: int, strings: Strings) -> "pa.Array":
    """A SequenceExample's feature list: a list of steps per record, each step
    a list (VarLen, inferred) or ``shape``'s values (FixedLenSequenceFeature)."""
    import pyarrow as pa

    values, step_counts, steps = parsed
    missing = steps < 0
    if column.required and missing.any():
        raise missing_feature_list_error(column.name, missing, first_record)
    steps = np.maximum(steps, 0)
    step_owner = np.repeat(np.arange(len(steps), dtype=np.int64), steps)
    per_record = np.bincount(step_owner, weights=step_counts, minlength=len(steps)).astype(np.int64)
    inner = _flat_values(column, values, strings, first_record, per_record)
    if column.shape is None:
        inner = _list_array(column, inner, step_counts)
    else:
        bad = step_counts != math.prod(column.shape)
        if bad.any():
            raise step_count_error(column.name, column.shape, step_counts, bad, step_owner, first_record)
        for width in reversed(column.shape):
            inner = pa.FixedSizeListArray.from_arrays(inner, width)
    mask = numpy_to_arrow(missing) if column.nullable and missing.any() else None
    return pa.LargeListArray.from_arrays(_offsets(steps), inner, mask=mask)


def _ragged_feature_list_array(column: _Column, feature_lists: dict[str, Any], first_record: int,
                               strings: Strings) -> "pa.Array":
    """A RaggedFeature feature list: a list of steps per record, each step partitioned
    as one record of a batch would be. The structure (and every check) comes from
    parse_sequence_example's own code run over value positions."""
    import pyarrow as pa

    spec = column.spec
    assert isinstance(spec, RaggedFeature)
    key = column.value_key
    values, step_counts, steps = feature_lists[key]
    steps = np.maximum(steps, 0)  # a missing ragged feature list has no steps, as in TensorFlow
    step_owner = np.repeat(np.arange(len(steps), dtype=np.int64), steps)
    per_record = np.bincount(step_owner, weights=step_counts, minlength=len(steps)).astype(np.int64)
    flat = _flat_values(column, values, strings, first_record, per_record)
    stand_in = dict(feature_lists)
    stand_in[key] = (np.arange(len(flat), dtype=np.int64), step_counts, feature_lists[key][2])
    try:
        by_step = ragged_by_step(column.name, spec, stand_in, steps, step_owner)
    except ParseError as e:
        raise _in_file(e, first_record) from None
    return pa.LargeListArray.from_arrays(_offsets(steps), _ragged_values(by_step, flat))


def _structured_array(column: _Column, flat: "pa.Array", columns: dict[str, Any], batch: int, first_record: int,
                      arrow_type: "pa.DataType") -> "pa.Array":
    """A RaggedFeature or SparseFeature, its structure (and every check) from
    parse_example's own code run over value positions, its values taken from
    ``flat`` by position in Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    spec = column.spec
    key = column.value_key
    positions = np.arange(len(flat), dtype=np.int64)
    stand_in = dict(columns)
    stand_in[key] = (positions, columns[key][1], columns[key][2])
    try:
        if isinstance(spec, SparseFeature):
            sparse = sparse_output(column.name, spec, stand_in, batch, single=False)
            rows = np.bincount(sparse.indices[:, 0], minlength=batch) if batch else np.zeros(0, np.int64)
            offsets = _offsets(rows)
            coords = sparse.indices[:, 1:]
            index = numpy_to_arrow(coords[:, 0]) if coords.shape[1] == 1 else pa.FixedSizeListArray.from_arrays(
                numpy_to_arrow(coords.reshape(-1)), coords.shape[1])
            values = pc.take(flat, numpy_to_arrow(sparse.values))
            return pa.StructArray.from_arrays(
                [pa.LargeListArray.from_arrays(offsets, index), pa.LargeListArray.from_arrays(offsets, values)],
                fields=list(arrow_type))
        ragged = ragged_output(column.name, spec, stand_in, batch, single=False)  # type: ignore[arg-type]
    except ParseError as e:
        raise _in_file(e, first_record) from None
    return _ragged_values(ragged, flat)


def _in_file(error: ParseError, first_record: int) -> ParseError:
    """``error``, raised for a record of a batch, naming the record by its index in the file."""
    if error.index is None:
        return error
    index = error.index + first_record
    message = re.sub(rf"Index: {error.index}\b", f"Index: {index}", str(error), count=1)
    return ParseError(message, key=error.key, index=index)


def _named(error: ParseError, name: str, plan: _Plan) -> ParseError:
    """``error``, raised reading file ``name``, naming it; where a record holds a feature
    as another kind than the records the schema was inferred from, saying so."""
    message = f"{name}: {error}"
    inferred = next((c for c in plan.columns if c.name == error.key and c.inferred_from), None)
    if inferred is not None and "Data types don't match" in message:
        message += (f" (the schema inferred from the first {inferred.inferred_from} records reads {error.key!r} as "
                    f"{inferred.dtype}, and no one spec reads both kinds: leave it out with columns=)")
    return ParseError(message, key=error.key, index=error.index)


def _ragged_values(ragged: Any, flat: "pa.Array") -> "pa.Array":
    """A ragged array of positions into ``flat`` (a RaggedArray, its innermost values
    shaped by any uniform row lengths), as nested Arrow lists of ``flat``'s values."""
    import pyarrow as pa
    import pyarrow.compute as pc

    splits = []
    while not isinstance(ragged, np.ndarray):
        splits.append(ragged.row_splits)
        ragged = ragged.values
    out = pc.take(flat, numpy_to_arrow(ragged.reshape(-1)))
    for width in reversed(ragged.shape[1:]):
        out = pa.FixedSizeListArray.from_arrays(out, int(width))
    for row_splits in reversed(splits):
        out = pa.LargeListArray.from_arrays(numpy_to_arrow(row_splits.astype(np.int64)), out)
    return out


def read_batches(
    source: "PathLike | Sequence[PathLike]",
    features: Mapping[str, FeatureSpec] | None = None,
    *,
    sequence_features: Mapping[str, FeatureSpec] | None = None,
    batch_size: int = 65536,
    columns: Sequence[str] | None = None,
    compression: str | None = "auto",
    format: Literal["auto", "tfrecord", "ofrecord"] = "auto",
    verify: bool = True,
    strings: Strings = "binary",
    infer_from: int = 1000,
    on_error: Literal["raise", "skip"] = "raise",
) -> "pa.RecordBatchReader":
    """Streams ``tf.train.Example``, ``tf.train.SequenceExample`` or OFRecord records
    as Arrow record batches of up to ``batch_size`` rows.

    Memory is bounded by the batch, whatever the files' size. Batches do not
    span files. Types: ``int64``, ``float32`` and ``large_binary`` (or
    ``large_string`` with ``strings="utf8"``, where invalid UTF-8 is a
    ``ParseError`` naming the feature and the record), and OFRecord's
    ``float64`` and ``int32``; a ``FixedLenFeature([])`` is a scalar column,
    ``FixedLenFeature([k, ...])`` nested fixed-size lists, ``VarLenFeature``
    a ``large_list``, ``RaggedFeature`` a ``large_list`` nested once per
    partition, and ``SparseFeature`` a struct of per-row ``indices`` and
    ``values`` lists (the README's table has every case). With a spec,
    TensorFlow's rules hold: a missing fixed-length feature takes its default
    or is an error, a missing VarLen feature is an empty list.

    SequenceExamples: ``features`` is the context, one column per feature as
    above, and ``sequence_features`` the feature lists, a column each: a
    ``large_list`` of steps, each step a ``large_list`` (``VarLenFeature``),
    ``shape``'s values (``FixedLenSequenceFeature``, whose missing feature
    list is an error unless ``allow_missing``, then an empty list), or
    partitioned as one record is (``RaggedFeature``, as TensorFlow does).

    Without ``features`` and ``sequence_features``, the schema is inferred
    from the first ``infer_from`` records (the container too) and kept for the
    whole stream: a feature holding exactly one value wherever present is a
    scalar column, any other a list, a feature list a list of lists, and a
    missing feature is null. A later record that does not fit is a
    ``ParseError`` naming the feature and the record, and saying which spec to
    pass; the type never changes from one batch to the next.

    Args:
        source: Anything ``recordkit.list_files`` takes.
        features: A spec of ``FixedLenFeature``, ``VarLenFeature``,
            ``RaggedFeature`` and ``SparseFeature`` (as for
            ``parse_example``); a SequenceExample's context.
        sequence_features: A SequenceExample's feature lists
            (``FixedLenSequenceFeature``, ``VarLenFeature``); giving it reads
            the records as SequenceExamples.
        columns: The columns to read (default: every feature of the spec).
        format: ``"auto"`` (OneFlow's ``part-N`` names are OFRecord),
            ``"tfrecord"`` or ``"ofrecord"``. An OFRecord spec uses ``int64``,
            ``float32`` and ``string``; inferred columns also ``float64`` and ``int32``.
        compression: As for ``recordkit.TFRecordReader``.
        verify: As for ``recordkit.TFRecordReader``.
        on_error: As for ``recordkit.TFRecordReader``: ``"skip"`` skips
            damaged stretches, each with a ``recordkit.DataLossWarning``,
            the sample a schema is inferred from included.
    """
    scan = TableScan(source, features, sequence_features=sequence_features, batch_size=batch_size, columns=columns,
                     compression=compression, format=format, verify=verify, strings=strings, infer_from=infer_from,
                     on_error=on_error)
    return scan.reader(scan.whole_files())


@dataclass(frozen=True)
class RecordRange:
    """Records ``start <= i < stop`` of one file (``stop`` None: to its end);
    ``seek`` is the frame offset of record ``start``. Small and picklable: what
    an engine's read task carries."""

    path: str
    start: int = 0
    stop: int | None = None
    seek: int = 0
    size: int | None = None  # bytes of the file the range spans, where known

    @property
    def records(self) -> int | None:
        """How many records the range holds, where known."""
        return None if self.stop is None else self.stop - self.start


class TableScan:
    """``read_batches``'s work, planned once and read range by range.

    The plan (the spec, or the schema inferred from the first records) and the
    Arrow schema are fixed when the scan is made, so every range, read in any
    process, gives batches of the same schema. Engines (``recordkit.ray``,
    ``recordkit.spark``, ``recordkit.dask``) make one on the driver, cut the
    files into ``RecordRange`` pieces with ``ranges``, and read each
    piece in a task with ``batches``. Arguments as for ``read_batches``,
    and ``on_error``: ``"raise"`` (a damaged record is a ``DataLossError``
    naming the file and offset) or ``"skip"`` (damaged stretches are skipped as
    ``recordkit.TFRecordReader`` skips them, each with a
    ``DataLossWarning``; files are then not cut into ranges, since a
    count taken before the damage is found cannot place a cut).
    """

    def __init__(
        self,
        source: "PathLike | Sequence[PathLike]",
        features: Mapping[str, FeatureSpec] | None = None,
        *,
        sequence_features: Mapping[str, FeatureSpec] | None = None,
        batch_size: int = 65536,
        columns: Sequence[str] | None = None,
        compression: str | None = "auto",
        format: Literal["auto", "tfrecord", "ofrecord"] = "auto",
        verify: bool = True,
        strings: Strings = "binary",
        infer_from: int = 1000,
        on_error: Literal["raise", "skip"] = "raise",
    ) -> None:
        import pyarrow as pa


        if on_error not in ("raise", "skip"):
            raise ValueError(f'on_error must be "raise" or "skip", not {on_error!r}')

        if strings not in ("binary", "utf8"):
            raise ValueError(f'strings must be "binary" or "utf8", not {strings!r}')
        batch_size = check_batch_size(batch_size)
        columns = _wanted_columns(columns)
        if features is None and sequence_features is None and infer_from < 1:
            raise ValueError(f"infer_from must be at least 1, not {infer_from}: the schema is inferred from that many records")
        check_format(format)
        self.files = list_files(source)
        self.format = record_format(self.files[0]) if format == "auto" else format
        if features is None and sequence_features is None:
            plan = _infer_plan(self.files, columns, compression, infer_from, self.format, on_error)
        else:
            if self.format == "ofrecord" and sequence_features is not None:
                raise ValueError("OFRecord files hold no feature lists: sequence_features is for SequenceExamples")
            container = ("ofrecord" if self.format == "ofrecord" else "example" if sequence_features is None
                         else "sequence_example")
            plan = _table_plan(container, features or {}, sequence_features or {}, columns)
        self.plan, self.strings, self.batch_size = plan, strings, batch_size
        self.compression, self.verify, self.on_error = compression, verify, on_error
        self.schema = pa.schema([pa.field(c.name, _arrow_type(c, strings), nullable=c.nullable) for c in plan.columns])

    def whole_files(self) -> list[RecordRange]:
        """One range per file, every record of it."""
        return [RecordRange(path) for path in self.files]

    def ranges(self, pieces: int, *, min_bytes: int = 0) -> list[RecordRange]:
        """The files cut into about ``pieces`` ranges of near-equal record counts
        (each about ``min_bytes`` bytes of file or more), in file order, every record in exactly one. Local uncompressed
        files are counted from their index file (``recordkit index``) or a scan
        of their headers, and cut at records whose offset the count remembered;
        compressed and remote files are one range each (reaching record i
        means reading everything before it); empty files none."""
        from recordkit.dataset import CHECKPOINT_EVERY, survey_file

        if self.on_error == "skip":
            return [RecordRange(path, size=local_size(path)) for path in self.files]
        surveys = [(path, survey_file(path, self.format)) for path in self.files]
        total = sum(survey.records for _, survey in surveys if survey is not None)
        whole = sum(survey is None for _, survey in surveys)
        share = -(-total // max(1, pieces - whole))
        out: list[RecordRange] = []
        for path, survey in surveys:
            if survey is None:
                out.append(RecordRange(path, size=local_size(path)))
                continue
            if not survey.records:
                continue
            size = os.path.getsize(path)
            by_bytes = -(-min_bytes * survey.records // max(1, size))
            # Cuts fall on remembered offsets (every CHECKPOINT_EVERY records), so a
            # task seeks straight to its first record.
            step = -(-max(share, by_bytes, 1) // CHECKPOINT_EVERY) * CHECKPOINT_EVERY
            starts = list(range(0, survey.records, step))
            seeks = [int(survey.checkpoints[start // CHECKPOINT_EVERY]) for start in starts]
            for start, seek, end in zip(starts, seeks, seeks[1:] + [size]):
                out.append(RecordRange(path, start, min(start + step, survey.records), seek, end - seek))
        return out

    def batches(self, ranges: Sequence[RecordRange]) -> Iterator["pa.RecordBatch"]:
        """The records of ``ranges`` as record batches of ``schema``, in order;
        batches do not span ranges. A range whose file ends before its ``stop``
        (the file changed since it was counted) is a ``RecordkitError``."""
        plan, strings = self.plan, self.strings
        requests, list_requests = plan.requests.as_list(), plan.list_requests.as_list()
        message = "oneflow" if plan.container == "ofrecord" else "tensorflow"
        for piece in ranges:
            opened = open_input(piece.path)
            try:
                skip = self.on_error == "skip"
                scanner = _native.RecordScanner(opened.handle, name=opened.name, format=self.format,
                                                compression=reader_compression(self.compression), verify=self.verify,
                                                skip_damaged=skip)
                limit = None if piece.stop is None else piece.stop - piece.start
                try:
                    if piece.start:
                        scanner.seek(piece.seek, piece.start)
                    if plan.container == "sequence_example":
                        parsed_batches: Any = _SequenceBatches(scanner, requests, list_requests, self.batch_size, limit)
                    else:
                        parsed_batches = _native.ExampleBatches(scanner, requests, batch_size=self.batch_size,
                                                                limit=limit, flat_bytes=True, schema=message)
                    index = piece.start
                    try:
                        for count, parsed in parsed_batches:
                            if skip:
                                warn_skipped(opened.name, parsed_batches.take_skipped())
                            yield _record_batch(plan, self.schema, count, parsed, index, strings)
                            index += count
                        if skip:
                            warn_skipped(opened.name, parsed_batches.take_skipped())
                    except ParseError as e:
                        raise _named(e, opened.name, plan) from None
                    finally:
                        parsed_batches.close()
                    if piece.stop is not None and index < piece.stop:
                        raise RecordkitError(
                            f"{opened.name} ends at record {index}, before the {piece.stop} counted when "
                            "the read was planned: was it rewritten while being read?")
                finally:
                    scanner.close()
            finally:
                opened.close()

    def reader(self, ranges: Sequence[RecordRange]) -> "pa.RecordBatchReader":
        """``batches`` as a ``pyarrow.RecordBatchReader``."""
        import pyarrow as pa

        return pa.RecordBatchReader.from_batches(self.schema, self.batches(ranges))


class _SequenceBatches:
    """``(records, (context columns, feature-list columns))`` batches of SequenceExamples
    from ``scanner``, at most ``limit`` records in all: ``ExampleBatches``' interface."""

    def __init__(self, scanner: Any, context: list[tuple[str, str]], lists: list[tuple[str, str]],
                 batch_size: int, limit: int | None) -> None:
        self.scanner, self.context, self.lists, self.batch_size, self.left = scanner, context, lists, batch_size, limit

    def __iter__(self) -> "_SequenceBatches":
        return self

    def __next__(self) -> tuple[int, Any]:
        want = self.batch_size if self.left is None else min(self.batch_size, self.left)
        count, parsed = (0, None) if want <= 0 else self.scanner.next_sequence_batch(want, self.context, self.lists,
                                                                                     True)
        if not count:
            raise StopIteration
        if self.left is not None:
            self.left -= count
        return count, parsed

    def take_skipped(self) -> list[tuple[int, int, str, str, int]]:
        return self.scanner.take_skipped()

    def close(self) -> None:
        self.scanner.close()


def local_size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None  # remote


def read_table(
    source: "PathLike | Sequence[PathLike]",
    features: Mapping[str, FeatureSpec] | None = None,
    *,
    sequence_features: Mapping[str, FeatureSpec] | None = None,
    columns: Sequence[str] | None = None,
    compression: str | None = "auto",
    format: Literal["auto", "tfrecord", "ofrecord"] = "auto",
    verify: bool = True,
    strings: Strings = "binary",
    infer_from: int = 1000,
    on_error: Literal["raise", "skip"] = "raise",
) -> "pa.Table":
    """Reads ``tf.train.Example``, ``tf.train.SequenceExample`` or OFRecord records
    into one ``pyarrow.Table``: ``read_batches``, gathered.

    ``read_table(...).to_pandas()``, ``polars.from_arrow(read_table(...))``.
    """
    return read_batches(source, features, sequence_features=sequence_features, columns=columns,
                        compression=compression, format=format, verify=verify, strings=strings,
                        infer_from=infer_from, on_error=on_error).read_all()
