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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Literal, Mapping, Sequence

import numpy as np

from recordkit.columnar import example_column_batches
from recordkit.errors import ParseError
from recordkit.features import (
    FeatureSpec,
    FixedLenFeature,
    RaggedFeature,
    SparseFeature,
    UniformRowLength,
    VarLenFeature,
)
from recordkit.parsing import _plan_example, _ragged, _Requests, _sparse, required_error, wrong_count_error

if TYPE_CHECKING:
    import pyarrow as pa

    from recordkit._sources import PathLike

__all__ = ["read_table", "read_batches"]

Strings = Literal["binary", "utf8"]


@dataclass(frozen=True)
class _Column:
    """How one output column is made from its parsed values.

    ``shape`` is () for a scalar, the dense shape for a fixed-length column,
    and None for a list. ``nullable`` columns make a missing feature null
    (an inferred schema); otherwise TensorFlow's rules hold: a fixed-length
    feature takes its default or is an error, a list is empty.
    """

    name: str
    dtype: str  # "int64", "float32" or "string"
    shape: tuple[int, ...] | None
    default: Any = None
    nullable: bool = False
    inferred_from: int = 0  # records the schema was inferred from (0: a spec was given)
    spec: FeatureSpec | None = None  # a RaggedFeature or SparseFeature, built from several parsed keys

    @property
    def value_key(self) -> str:
        """The parsed key holding this column's values."""
        return getattr(self.spec, "value_key", None) or self.name


def _plan(features: Mapping[str, FeatureSpec], columns: Sequence[str] | None) -> list[_Column]:
    wanted = list(features) if columns is None else list(columns)
    unknown = [name for name in wanted if name not in features]
    if unknown:
        raise ValueError(f"columns {unknown} are not in the spec; it has {sorted(features)}")
    plan = []
    for name in wanted:
        spec = features[name]
        if isinstance(spec, FixedLenFeature):
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
    return plan


def _infer_plan(source: Any, columns: Sequence[str] | None, compression: str | None, sample: int) -> list[_Column]:
    """One column per feature seen in the first ``sample`` records: a scalar where every
    record holding it holds one value, else a list; a missing feature is null."""
    from recordkit.schema import infer_schema

    schema = infer_schema(source, limit=sample, compression=compression, format="tfrecord")
    if schema.container != "example":
        raise ValueError(f"read_table infers schemas of tf.train.Example files; these hold {schema.container}s")
    dtypes = {"int64": "int64", "float": "float32", "bytes": "string"}
    plan = []
    for name, info in sorted(schema.features.items()):
        if columns is not None and name not in columns:
            continue
        if info.kind == "mixed":
            raise ParseError(
                f"feature {name!r} holds different kinds in different records of the first {schema.records}: "
                "pass features= to say which to read", key=name,
            )
        if info.kind not in dtypes:
            continue  # never set in the sample: no type to give it
        shape = () if info.min_values == info.max_values == 1 else None
        plan.append(_Column(name, dtypes[info.kind], shape, nullable=True, inferred_from=schema.records))
    if columns is not None:
        missing = [name for name in columns if name not in {c.name for c in plan}]
        if missing:
            raise ValueError(f"columns {missing} were not seen in the first {schema.records} records")
    return plan


def _arrow_type(column: _Column, strings: Strings) -> "pa.DataType":
    import pyarrow as pa

    value = {"int64": pa.int64(), "float32": pa.float32()}.get(column.dtype) or (
        pa.large_string() if strings == "utf8" else pa.large_binary()
    )
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
        return value
    if column.shape is None:
        return pa.large_list(value)
    for size in reversed(column.shape):
        value = pa.list_(value, size)
    return value


def _flat_values(column: _Column, values: Any, strings: Strings, first_record: int, counts: np.ndarray) -> "pa.Array":
    """The parsed values of a batch as one Arrow array, without copying numbers."""
    import pyarrow as pa

    if column.dtype != "string":
        return pa.array(values)
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
    return ParseError(
        f"Key: {column.name}, Index: {first_record + i}. The record holds {counts[i]} values, where the schema "
        f"inferred from the first {column.inferred_from} records has one per record: pass features= "
        f"(e.g. {{{column.name!r}: rk.VarLenFeature({column.dtype!r})}}) to read it",
        key=column.name, index=first_record + i,
    )


def _fixed_array(column: _Column, flat: "pa.Array", counts: np.ndarray, uniform: int, first_record: int) -> "pa.Array":
    import pyarrow as pa
    import pyarrow.compute as pc

    assert column.shape is not None
    size = math.prod(column.shape)
    batch = len(counts)
    present = counts >= 0
    if not (batch and size and uniform == size):
        bad = present & (counts != size)
        if bad.any():
            raise _count_error(column, counts, bad, first_record)
        missing = ~present
        if missing.any() and not column.nullable:
            if column.default is None:
                raise required_error(column.name, column.dtype, missing, first_record)
            # Missing records take the default: the values, then the default's
            # values once, taken row by row in Arrow.
            default = np.asarray(column.default).reshape(-1)
            if default.size == 1 and size > 1:
                default = np.repeat(default, size)
            if column.dtype == "string":
                extra = pa.array([bytes(v) for v in default], flat.type)
            else:
                extra = pa.array(default.astype(flat.type.to_pandas_dtype()))
            rows = np.where(present, np.cumsum(present) - 1, -1)
            starts = np.where(present, rows * size, len(flat))
            indices = (starts[:, None] + np.arange(size)).reshape(-1)
            flat = pc.take(pa.concat_arrays([flat, extra]), pa.array(indices))
            present = np.ones(batch, bool)
    elif batch and size:
        present = np.ones(batch, bool)
    out = flat
    for width in reversed(column.shape[1:]):
        out = pa.FixedSizeListArray.from_arrays(out, width)
    if column.shape:
        out = pa.FixedSizeListArray.from_arrays(out, column.shape[0])
    if column.nullable and not present.all():
        # A scalar per present record: spread them over the batch, nulls between.
        indices = np.where(present, np.cumsum(present) - 1, 0)
        out = pc.take(out, pa.array(indices, mask=~present))
    return out


def _list_array(column: _Column, flat: "pa.Array", counts: np.ndarray) -> "pa.Array":
    import pyarrow as pa

    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(np.maximum(counts, 0), out=offsets[1:])
    mask = pa.array(counts < 0) if column.nullable and (counts < 0).any() else None
    return pa.LargeListArray.from_arrays(pa.array(offsets), flat, mask=mask)


def _record_batch(plan: list[_Column], schema: "pa.Schema", columns: dict[str, Any], first_record: int,
                  strings: Strings) -> "pa.RecordBatch":
    import pyarrow as pa

    arrays = []
    for column in plan:
        values, counts, uniform = columns[column.value_key]
        flat = _flat_values(column, values, strings, first_record, counts)
        if column.spec is not None:
            arrays.append(_structured_array(column, flat, columns, len(counts), first_record, schema.field(column.name).type))
        elif column.shape is None:
            arrays.append(_list_array(column, flat, counts))
        else:
            arrays.append(_fixed_array(column, flat, counts, uniform, first_record))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


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
            sparse = _sparse(column.name, spec, stand_in, batch, single=False)
            rows = np.bincount(sparse.indices[:, 0], minlength=batch) if batch else np.zeros(0, np.int64)
            offsets = pa.array(np.concatenate([[0], np.cumsum(rows)]).astype(np.int64))
            coords = sparse.indices[:, 1:]
            index = pa.array(coords[:, 0]) if coords.shape[1] == 1 else pa.FixedSizeListArray.from_arrays(
                pa.array(coords.reshape(-1)), coords.shape[1])
            values = pc.take(flat, pa.array(sparse.values))
            return pa.StructArray.from_arrays(
                [pa.LargeListArray.from_arrays(offsets, index), pa.LargeListArray.from_arrays(offsets, values)],
                fields=list(arrow_type))
        ragged = _ragged(column.name, spec, stand_in, batch, single=False)  # type: ignore[arg-type]
    except ParseError as e:
        index = None if e.index is None else e.index + first_record
        raise ParseError(str(e).replace(f"Index: {e.index}.", f"Index: {index}.", 1), key=e.key, index=index) from None
    splits = []
    while not isinstance(ragged, np.ndarray):
        splits.append(ragged.row_splits)
        ragged = ragged.values
    out = pc.take(flat, pa.array(ragged.reshape(-1)))
    for width in reversed(ragged.shape[1:]):
        out = pa.FixedSizeListArray.from_arrays(out, int(width))
    for row_splits in reversed(splits):
        out = pa.LargeListArray.from_arrays(pa.array(row_splits.astype(np.int64)), out)
    return out


def read_batches(
    source: "PathLike | Sequence[PathLike]",
    features: Mapping[str, FeatureSpec] | None = None,
    *,
    batch_size: int = 65536,
    columns: Sequence[str] | None = None,
    compression: str | None = "auto",
    verify: bool = True,
    strings: Strings = "binary",
    infer_from: int = 1000,
) -> "pa.RecordBatchReader":
    """Streams ``tf.train.Example`` records as Arrow record batches of up to ``batch_size`` rows.

    Memory is bounded by the batch, whatever the files' size. Batches do not
    span files. Types: ``int64``, ``float32`` and ``large_binary`` (or
    ``large_string`` with ``strings="utf8"``, where invalid UTF-8 is a
    ``ParseError`` naming the feature and the record); a
    ``FixedLenFeature([])`` is a scalar column, ``FixedLenFeature([k, ...])``
    nested fixed-size lists, ``VarLenFeature`` a ``large_list``,
    ``RaggedFeature`` a ``large_list`` nested once per partition, and
    ``SparseFeature`` a struct of per-row ``indices`` and ``values`` lists
    (the README's table has every case). With a spec,
    TensorFlow's rules hold: a missing fixed-length feature takes its default
    or is an error, a missing VarLen feature is an empty list.

    Without ``features``, the schema is inferred from the first ``infer_from``
    records and kept for the whole stream: a feature holding exactly one
    value wherever present is a scalar column, any other a list, and a
    missing feature is null. A later record that does not fit is a
    ``ParseError`` naming the feature and the record, and saying which spec to
    pass; the type never changes from one batch to the next.

    Args:
        source: Anything :func:`recordkit.list_files` takes.
        features: A spec of ``FixedLenFeature``, ``VarLenFeature``,
            ``RaggedFeature`` and ``SparseFeature`` (as for :func:`parse_example`).
        columns: The columns to read (default: every feature of the spec).
        compression, verify: As for :class:`recordkit.TFRecordReader`.
    """
    import pyarrow as pa

    from recordkit.dataset import list_files

    if strings not in ("binary", "utf8"):
        raise ValueError(f'strings must be "binary" or "utf8", not {strings!r}')
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    files = list_files(source)
    plan = _infer_plan(files, columns, compression, infer_from) if features is None else _plan(features, columns)
    schema = pa.schema([pa.field(c.name, _arrow_type(c, strings), nullable=c.nullable) for c in plan])
    planned = _Requests()
    if features is None:
        for c in plan:
            planned.add(c.name, c.dtype)
    else:
        _plan_example({c.name: features[c.name] for c in plan}, planned)
    requests = planned.as_list()

    def batches() -> Iterator[pa.RecordBatch]:
        first_record = 0
        previous_file = None
        for count, parsed, path in _parsed(files, requests, batch_size, compression, verify):
            if path != previous_file:
                first_record, previous_file = 0, path
            try:
                yield _record_batch(plan, schema, dict(zip(planned.dtypes, parsed)), first_record, strings)
            except ParseError as e:
                raise ParseError(f"{path}: {e}", key=e.key, index=e.index) from None
            first_record += count

    return pa.RecordBatchReader.from_batches(schema, batches())


def _parsed(files: list[str], requests: list[tuple[str, str]], batch_size: int, compression: str | None,
            verify: bool) -> Iterator[tuple[int, list[Any], str]]:
    for path in files:
        for count, parsed in example_column_batches([path], requests, batch_size, compression=compression,
                                                     verify=verify, flat_bytes=True):
            yield count, parsed, path


def read_table(
    source: "PathLike | Sequence[PathLike]",
    features: Mapping[str, FeatureSpec] | None = None,
    *,
    columns: Sequence[str] | None = None,
    compression: str | None = "auto",
    verify: bool = True,
    strings: Strings = "binary",
    infer_from: int = 1000,
) -> "pa.Table":
    """Reads ``tf.train.Example`` records into one ``pyarrow.Table``: :func:`read_batches`, gathered.

    ``read_table(...).to_pandas()``, ``polars.from_arrow(read_table(...))``.
    """
    return read_batches(source, features, columns=columns, compression=compression, verify=verify,
                        strings=strings, infer_from=infer_from).read_all()
