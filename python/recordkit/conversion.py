"""Converting between record files and tables: TFRecord, OFRecord, CSV, Parquet,
JSON lines, NumPy ``.npz`` and folders of images.

Everything streams in chunks of rows, so memory does not grow with the input
(except for ``.npz`` output, which NumPy writes in one go). Outputs appear
under their names only when complete.

>>> rk.convert("table.parquet", "out/train.tfrecord", shards=4)  # doctest: +SKIP
['out/train-00000-of-00004.tfrecord', ...]
"""

from __future__ import annotations

import base64
import csv
import itertools
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Literal, Sequence

import numpy as np

from recordkit import _native
from recordkit._sources import (AtomicTarget, PathLike, check_targets, fsync_path, make_folders, remove_empty_folders,
                                remove_files_of_dead_processes, replace_file, require)
from recordkit._shardsets import ONEFLOW_PART, remove_files, replaced_files, shard_names, write_manifest
from recordkit.columnar import (
    Column, ColumnValueError, _normalize, _write, _write_behind, arrow_feature_type, example_column_batches,
    narrow_to_float32,
)
from recordkit.discovery import list_files, record_format, suffix_compression
from recordkit.images import image_shape
from recordkit.options import writer_options
from recordkit.records import (
    OFRecordReader,
    OFRecordWriter,
    TFRecordReader,
    TFRecordWriter,
    count_records,
)
from recordkit.schema import infer_schema
from recordkit.tables import numpy_to_arrow, spread_over_rows

__all__ = ["convert", "detect_format", "parse_size", "FORMATS"]

Format = Literal["tfrecord", "ofrecord", "csv", "parquet", "jsonl", "npz", "images"]
FORMATS: tuple[str, ...] = ("tfrecord", "ofrecord", "csv", "parquet", "jsonl", "npz", "images")

_SUFFIXES = {
    ".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl",
    ".json": "jsonl", ".npz": "npz", ".tfrecord": "tfrecord", ".tfrecords": "tfrecord", ".tfr": "tfrecord",
}
_COMPRESSION_SUFFIXES = (".gz", ".gzip", ".zz", ".zlib")
_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
_CHUNK_ROWS = 8192
# Parquet chunks, and chunks of records parsed in Rust, hold about this many bytes
# (the records' or the Parquet file's, uncompressed), and at most this many rows:
# a Parquet output's row groups are the chunks.
_CHUNK_BYTES = 16 << 20
_CHUNK_MAX_ROWS = 65536
_SHARD_BYTES = 100_000_000  # the TensorFlow tutorial's "~100 MB per shard"
# Records written before the bytes a record takes in the output are measured
# (after compression), to decide how many shards an output gets.
_PROBE_BYTES = 16 << 20
_NATIVE_KINDS = {"int64": "int64_list", "float": "float_list", "bytes": "bytes_list",
                 "double": "double_list", "int32": "int32_list"}
_REQUEST_DTYPES = {"int64": "int64", "float": "float32", "bytes": "string", "double": "float64", "int32": "int32"}
_DTYPES = {"int64": np.int64, "float": np.float32, "double": np.float64, "int32": np.int32}


def parse_size(text: str) -> int:
    """``"100MB"`` -> 100_000_000; also ``k``/``KB``, ``GB``, ``KiB``/``MiB``/``GiB`` and plain bytes."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)(i?)b?\s*", text.lower())
    if not match:
        raise ValueError(f"not a size: {text!r} (try 100MB)")
    number, unit, binary = match.groups()
    scale = (1024 if binary else 1000) ** "_kmgt".index(unit or "_")
    size = int(float(number) * scale)
    if size < 1:
        raise ValueError(f"a shard size must be positive, not {text!r}")
    return size


def detect_format(path: str, *, output: bool = False) -> Format:
    """The format a path's suffix (or, for inputs, its content or layout) says."""
    lower = path.lower().rstrip("/\\")
    for suffix in _COMPRESSION_SUFFIXES:
        if lower.endswith(suffix):
            lower = lower[: -len(suffix)]
            break
    extension = os.path.splitext(lower)[1]
    if extension in _SUFFIXES:
        return _SUFFIXES[extension]  # type: ignore[return-value]
    if not output:
        if os.path.isdir(path):
            entries = [e for e in os.listdir(path) if not e.startswith((".", "_"))]
            if any(ONEFLOW_PART.match(e) for e in entries):
                return "ofrecord"
            folders = [e for e in entries if os.path.isdir(os.path.join(path, e))]
            if folders and (len(folders) == len(entries) or any(
                    f.lower().endswith(_IMAGE_SUFFIXES) for d in folders for f in os.listdir(os.path.join(path, d)))):
                return "images"  # class folders; a stray file beside them is refused by the image source
            images = [e for e in entries if e.lower().endswith(_IMAGE_SUFFIXES)]
            if images:
                raise ValueError(f"{path} holds images ({images[0]} ...), not records: an image folder is "
                                 "root/<class>/<image>, so put them in one subfolder per class")
            return "tfrecord"
        return record_format(path)
    raise ValueError(
        f"cannot tell the output format from {path!r}: name it .tfrecord, .parquet, .csv, .jsonl or .npz "
        "(or give the format, e.g. --to ofrecord for a part-NNNNN folder)"
    )


# --- columns -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ColumnInfo:
    """A column's kind (``int64``, ``float``, ``double``, ``int32`` or ``bytes``),
    whether each row holds one value (else a list), and whether bytes are text."""

    kind: str
    scalar: bool
    text: bool = False


Chunk = tuple[int, dict[str, Column]]  # rows, {name: (native kind, values, row splits, present)}


def _batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Lists of ``size`` items (the last may be shorter)."""
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _record_batches(records: Iterable[bytes], size: int, max_bytes: int) -> Iterator[list[bytes]]:
    """Lists of ``size`` records, or fewer that hold ``max_bytes`` (at least one a list)."""
    batch: list[bytes] = []
    held = 0
    for record in records:
        batch.append(record)
        held += len(record)
        if len(batch) == size or held >= max_bytes:
            yield batch
            batch, held = [], 0
    if batch:
        yield batch


def _column(name: str, kind: str, per_row: Sequence[Any]) -> Column:
    """A column from per-row values: arrays or lists of values, or None for a missing feature.
    A number the kind cannot hold (a CSV or JSON integer past int64) is an error naming its row."""
    present = np.fromiter((v is not None for v in per_row), dtype=bool, count=len(per_row))
    lengths = np.fromiter((0 if v is None else len(v) for v in per_row), dtype=np.int64, count=len(per_row))
    splits = np.zeros(len(per_row) + 1, dtype=np.int64)
    np.cumsum(lengths, out=splits[1:])
    if kind == "bytes":
        values: Any = [b for v in per_row if v is not None for b in v]
    else:
        dtype = _DTYPES[kind]
        try:
            parts = [np.asarray(v, dtype=dtype) for v in per_row if v is not None and len(v)]
        except OverflowError:
            row, value = next((row, x) for row, v in enumerate(per_row) if v is not None for x in v
                              if _overflows(x, dtype))
            article = "an" if np.dtype(dtype).kind == "i" else "a"
            raise ColumnValueError(name, row, f"value {value} does not fit {article} {np.dtype(dtype).name}") from None
        values = np.concatenate(parts) if parts else np.zeros(0, dtype)
    return _NATIVE_KINDS[kind], values, splits, None if present.all() else present


def _overflows(value: Any, dtype: Any) -> bool:
    try:
        np.asarray(value, dtype=dtype)
        return False
    except OverflowError:
        return True


def _byte_strings(column: Column) -> Column:
    """A column whose byte strings are in Arrow's layout (``"bytes_offsets"``: offsets
    into one buffer) with one ``bytes`` per value instead, for the sinks that need them."""
    kind, values, splits, present = column
    if kind != "bytes_offsets":
        return column
    offsets, data = values
    raw = data.tobytes()
    bounds = offsets.tolist()
    return "bytes_list", [raw[a:b] for a, b in zip(bounds[:-1], bounds[1:])], splits, present


def _rows_of(column: Column, rows: int) -> list[Any]:
    """Per-row values of a column: None when missing, else a list (bytes, or Python numbers)."""
    kind, values, splits, present = _byte_strings(column)
    if kind == "bytes_fixed":
        values = values.tolist()
    elif isinstance(values, np.ndarray):
        values = values.tolist() if values.dtype != object else list(values)
    out: list[Any] = []
    for row in range(rows):
        if present is not None and not present[row]:
            out.append(None)
        else:
            out.append(values[splits[row] : splits[row + 1]])
    return out


class _Progress:
    """A one-line progress report on stderr, only when a person is watching."""

    def __init__(self, total: int | None, label: str, enabled: bool | None) -> None:
        self.total, self.label, self.done, self.last = total, label, 0, 0.0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled

    def advance(self, rows: int) -> None:
        self.done += rows
        now = time.monotonic()
        if self.enabled and now - self.last > 0.2:
            self.last = now
            share = f" ({100 * self.done // self.total}%)" if self.total else ""
            total = f" / {self.total:,}" if self.total else ""
            sys.stderr.write(f"\r{self.label}: {self.done:,}{total} rows{share}")
            sys.stderr.flush()

    def finish(self) -> None:
        if self.enabled and self.done:
            sys.stderr.write(f"\r{self.label}: {self.done:,} rows, done.\033[K\n")


# --- sources -------------------------------------------------------------------------------


class _Source:
    rows: int
    columns: dict[str, _ColumnInfo]

    def chunks(self) -> Iterator[Chunk]:
        raise NotImplementedError

    def select(self, features: Sequence[str] | None) -> None:
        if features is None:
            return
        unknown = [name for name in features if name not in self.columns]
        if unknown:
            raise ValueError(f"no feature named {', '.join(map(repr, unknown))}; the input has {', '.join(self.columns)}")
        self.columns = {name: self.columns[name] for name in features}


class _RecordSource(_Source):
    """Records of TFRecord or OFRecord files. With ``columns``, their features are surveyed
    first (a pass over every record); without, the records are only counted, for copying."""

    def __init__(self, source: PathLike | Sequence[PathLike], fmt: str, compression: str | None, columns: bool) -> None:
        self.files = list_files(source)
        self.format = fmt
        self.compression = compression
        self.columns = {}
        if not columns:
            self.rows = sum(count_records(path, compression, format=fmt) for path in self.files)  # type: ignore[arg-type]
            return
        schema = infer_schema(self.files, limit=None, format=fmt, compression=compression)  # type: ignore[arg-type]
        if schema.undecodable:
            raise ValueError(f"{schema.undecodable_note()}: converting to a table needs every record's features")
        if schema.container == "sequence_example":
            raise ValueError("SequenceExamples have no table form: they convert only to TFRecord files (copied as they are)")
        mixed = [name for name, info in schema.features.items() if info.kind == "mixed"]
        if mixed:
            raise ValueError(f"feature {mixed[0]!r} holds different kinds in different records: it has no column type")
        self.columns = {
            name: _ColumnInfo("bytes" if info.kind == "none" else info.kind,
                              scalar=info.min_values == info.max_values == 1, text=info.text)
            for name, info in schema.features.items()
        }
        self.rows = schema.records
        # Rust parses Examples and OFRecords into columns, but reads a Feature that sets no kind as a missing one.
        self.columnar = not any(info.kindless for info in schema.features.values())

    def records(self) -> Iterator[bytes]:
        for path in self.files:
            reader = OFRecordReader(path, self.compression) if self.format == "ofrecord" else TFRecordReader(path, self.compression)
            with reader:
                yield from reader

    def chunks(self) -> Iterator[Chunk]:
        if self.columnar:
            yield from self._parsed_chunks()
            return
        schema, container = ("oneflow", "map") if self.format == "ofrecord" else ("tensorflow", "example")
        for records in _record_batches(self.records(), _CHUNK_ROWS, _CHUNK_BYTES):
            yield self._chunk([_native.decode_features(record, schema, container) for record in records])

    def _parsed_chunks(self) -> Iterator[Chunk]:
        """Chunks framed, checked and parsed into columns by Rust, one call per chunk;
        byte strings stay in Arrow's layout (``"bytes_offsets"``)."""
        requests = [(name, _REQUEST_DTYPES[info.kind]) for name, info in self.columns.items()]
        for rows, parsed in example_column_batches(self.files, requests, _CHUNK_MAX_ROWS, compression=self.compression,
                                                   flat_bytes=True, format=self.format, max_bytes=_CHUNK_BYTES):
            columns = {}
            for (name, info), (values, counts, _) in zip(self.columns.items(), parsed):
                present = counts >= 0
                splits = np.zeros(rows + 1, dtype=np.int64)
                np.cumsum(np.where(present, counts, 0), out=splits[1:])
                kind = "bytes_offsets" if info.kind == "bytes" else _NATIVE_KINDS[info.kind]
                columns[name] = (kind, values, splits, None if present.all() else present)
            yield rows, columns

    def _chunk(self, batch: list[dict[str, Any]]) -> Chunk:
        columns = {}
        for name, info in self.columns.items():
            per_row = []
            for decoded in batch:
                entry = decoded.get(name)  # (kind, values); a Feature that sets no kind holds no values
                per_row.append(None if entry is None else [] if entry[1] is None else entry[1])
            columns[name] = _column(name, info.kind, per_row)
        return len(batch), columns


def _arrow_info(field: Any) -> _ColumnInfo:
    """The column a Parquet field becomes, as ``write_examples`` would write it."""
    import pyarrow as pa

    values, listed = arrow_feature_type(field.name, field.type)
    if pa.types.is_integer(values) or pa.types.is_boolean(values) or pa.types.is_temporal(values):
        return _ColumnInfo("int64", not listed)
    if pa.types.is_floating(values):
        return _ColumnInfo("float", not listed)
    text = pa.types.is_string(values) or pa.types.is_large_string(values) or pa.types.is_string_view(values)
    return _ColumnInfo("bytes", not listed, text=text)  # byte strings, and columns of nulls only


class _ParquetSource(_Source):
    def __init__(self, path: str) -> None:
        pq = require("pyarrow.parquet", "arrow", "reading Parquet")
        self.file = pq.ParquetFile(path)
        self.rows = self.file.metadata.num_rows
        self.columns = {field.name: _arrow_info(field) for field in self.file.schema_arrow}
        self.warned: set[str] = set()  # float64 columns already warned about, once per conversion

    def _chunk_rows(self) -> int:
        """Rows a chunk: about ``_CHUNK_BYTES`` of them uncompressed, as the file's row
        groups say, so that wide rows (images) stay few a chunk and narrow ones are
        not written a few thousand at a time."""
        meta = self.file.metadata
        size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        if not self.rows or not size:
            return _CHUNK_ROWS
        return max(1, min(_CHUNK_MAX_ROWS, _CHUNK_BYTES * self.rows // size))

    def chunks(self) -> Iterator[Chunk]:
        import pyarrow as pa

        done = 0
        for batch in self.file.iter_batches(self._chunk_rows(), columns=list(self.columns)):
            try:
                rows, columns = _normalize(pa.Table.from_batches([batch]), "tensorflow", self.warned, flat_bytes=True)
            except ColumnValueError as error:
                raise error.shifted(done) from None
            done += rows
            yield rows, columns


def _number(text: str) -> int | float | None:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


_BOOLEANS = {"true": 1, "false": 0}


class _CsvSource(_Source):
    """CSV with a header row: a column is int64 when every cell is an integer (or every
    cell ``True``/``False``, any case, stored as 1/0, as booleans are everywhere), float
    (float64, narrowed to float32 in an Example) when every cell is a number, else text;
    empty cells are missing values."""

    def __init__(self, path: str) -> None:
        self.path = path
        kinds: dict[str, str] = {}
        self.rows = 0
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise ValueError(f"{path} is empty: a CSV file needs a header row")
            self.header = header
            kinds = {name: "bool" for name in header}  # "bool" until a cell says otherwise
            saw_boolean: set[str] = set()
            for row in reader:
                self.rows += 1
                for name, cell in zip(header, row):
                    if cell == "" or kinds[name] == "bytes":
                        continue
                    if cell.lower() in _BOOLEANS:
                        saw_boolean.add(name)
                        if kinds[name] != "bool":
                            kinds[name] = "bytes"  # numbers and True/False mixed: text
                        continue
                    value = _number(cell)
                    if value is None or name in saw_boolean:
                        kinds[name] = "bytes"
                    elif isinstance(value, float):
                        kinds[name] = "double"
                    elif kinds[name] == "bool":
                        kinds[name] = "int64"
        self.booleans = {name for name, kind in kinds.items() if kind == "bool"}
        self.columns = {name: _ColumnInfo("int64" if kind == "bool" else kind, scalar=True, text=kind == "bytes")
                        for name, kind in kinds.items()}

    def chunks(self) -> Iterator[Chunk]:
        with open(self.path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            next(reader)
            positions = {name: i for i, name in enumerate(self.header)}
            done = 0
            for rows in _batches(reader, _CHUNK_ROWS):
                columns = {}
                for name, info in self.columns.items():
                    i = positions[name]
                    cells = [row[i] if i < len(row) else "" for row in rows]
                    if info.kind == "bytes":
                        per_row = [None if c == "" else [c.encode("utf-8")] for c in cells]
                    elif name in self.booleans:
                        per_row = [None if c == "" else [_BOOLEANS[c.lower()]] for c in cells]
                    else:
                        convert = int if info.kind == "int64" else float
                        per_row = [None if c == "" else [convert(c)] for c in cells]
                    try:
                        columns[name] = _column(name, info.kind, per_row)
                    except ColumnValueError as error:
                        raise error.shifted(done) from None
                done += len(rows)
                yield len(rows), columns


def _json_kind(value: Any) -> str:
    if isinstance(value, bool) or isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str) or (isinstance(value, dict) and set(value) == {"base64"}):
        return "bytes"
    raise TypeError(f"a JSON value of type {type(value).__name__} has no tf.train.Feature kind: {value!r}")


def _json_bytes(value: Any) -> bytes:
    if isinstance(value, dict):
        return base64.b64decode(value["base64"])  # as `recordkit cat` writes non-UTF-8 bytes
    return value.encode("utf-8")


class _JsonLinesSource(_Source):
    """JSON lines of ``{name: value}``: numbers, strings (``{"base64": ...}`` for raw bytes),
    or lists of them; a missing key or null is a missing value."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.rows = 0
        kinds: dict[str, str] = {}
        scalar: dict[str, bool] = {}
        text: dict[str, bool] = {}
        for row in self._rows():
            self.rows += 1
            for name, value in row.items():
                if value is None:
                    continue
                values = value if isinstance(value, list) else [value]
                scalar[name] = scalar.get(name, True) and not isinstance(value, list)
                text[name] = text.get(name, True) and not any(isinstance(v, dict) for v in values)
                for v in values:
                    kind = _json_kind(v)
                    known = kinds.setdefault(name, kind)
                    if known != kind:
                        if {known, kind} == {"int64", "double"}:
                            kinds[name] = "double"
                        else:
                            raise ValueError(f"{path}: key {name!r} holds both {known} and {kind} values")
        self.columns = {name: _ColumnInfo(kind, scalar[name], text[name]) for name, kind in kinds.items()}

    def _rows(self) -> Iterator[dict[str, Any]]:
        with open(self.path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as error:
                        raise ValueError(f"{self.path}:{number}: not valid JSON ({error.msg}, column {error.colno})") from None
                    if not isinstance(row, dict):
                        raise ValueError(f"{self.path}:{number}: each line must be a JSON object")
                    yield row

    def chunks(self) -> Iterator[Chunk]:
        done = 0
        for batch in _batches(self._rows(), _CHUNK_ROWS):
            columns = {}
            for name, info in self.columns.items():
                per_row = []
                for row in batch:
                    value = row.get(name)
                    values = None if value is None else value if isinstance(value, list) else [value]
                    if values is not None and info.kind == "bytes":
                        values = [_json_bytes(v) for v in values]
                    per_row.append(values)
                try:
                    columns[name] = _column(name, info.kind, per_row)
                except ColumnValueError as error:
                    raise error.shifted(done) from None
            done += len(batch)
            yield len(batch), columns


class _NpzSource(_Source):
    """``.npz``: a 1-D array is one value per row, an N-D array a fixed-length list per row,
    and ``name.values`` with ``name.row_splits`` a variable-length list per row."""

    def __init__(self, path: str) -> None:
        self.arrays = dict(np.load(path, allow_pickle=False))
        ragged = {key[: -len(".row_splits")] for key in self.arrays if key.endswith(".row_splits")}
        self.columns = {}
        lengths = set()
        for key, array in self.arrays.items():
            if key.endswith(".row_splits"):
                lengths.add(len(array) - 1)
            elif key.endswith(".values") and key[: -len(".values")] in ragged:
                self.columns[key[: -len(".values")]] = _ColumnInfo(self._kind(array), scalar=False, text=array.dtype.kind == "U")
            else:
                lengths.add(len(array))
                self.columns[key] = _ColumnInfo(self._kind(array), scalar=array.ndim == 1, text=array.dtype.kind == "U")
        if len(lengths) > 1:
            raise ValueError(f"{path}: the arrays have different numbers of rows ({sorted(lengths)})")
        self.warned: set[str] = set()  # float64 columns already warned about
        self.rows = lengths.pop() if lengths else 0
        self.ragged = ragged

    @staticmethod
    def _kind(array: np.ndarray) -> str:
        if array.dtype.kind in "SU":
            return "bytes"
        if array.dtype.kind in "iub":
            return "int64"
        if array.dtype.kind == "f":
            return "float"
        raise TypeError(f"arrays of dtype {array.dtype} have no tf.train.Feature kind")

    def chunks(self) -> Iterator[Chunk]:
        for start in range(0, self.rows, _CHUNK_ROWS):
            stop = min(self.rows, start + _CHUNK_ROWS)
            table: dict[str, Any] = {}
            for name in self.columns:
                if name in self.ragged:
                    splits = self.arrays[name + ".row_splits"]
                    values = self.arrays[name + ".values"]
                    table[name] = [values[splits[i] : splits[i + 1]] for i in range(start, stop)]
                else:
                    array = self.arrays[name][start:stop]
                    table[name] = array.astype(object) if array.dtype.kind == "U" else array
            try:
                yield _normalize(table, "tensorflow", self.warned)
            except ColumnValueError as error:
                raise error.shifted(start) from None


class _ImageFolderSource(_Source):
    """``root/<class>/<image>``: the tutorial's image features, and the label of each class
    (classes numbered in sorted order)."""

    def __init__(self, root: str) -> None:
        self.classes = sorted(e for e in os.listdir(root) if os.path.isdir(os.path.join(root, e)) and not e.startswith("."))
        if not self.classes:
            raise ValueError(f"{root}: an image folder holds one subfolder per class, and this one has none")
        strays = sorted(e for e in os.listdir(root) if not e.startswith(".") and e not in self.classes)
        if strays:  # refused rather than skipped: nothing is left behind without a word
            raise ValueError(f"{os.path.join(root, strays[0])}: a file beside the class folders of an image folder "
                             f"(root/<class>/<image>); move or remove it ({len(strays)} such)")
        self.images = [
            (os.path.join(root, name, file), label)
            for label, name in enumerate(self.classes)
            for file in sorted(os.listdir(os.path.join(root, name)))
            if not file.startswith(".")
        ]
        others = [path for path, _ in self.images if not path.lower().endswith(_IMAGE_SUFFIXES)]
        if others:  # refused rather than skipped: nothing is left behind without a word
            raise ValueError(f"{others[0]}: only JPEG and PNG images are read (their sizes come from the header); "
                             f"{len(others)} other file(s) in the class folders")
        self.rows = len(self.images)
        self.columns = {"height": _ColumnInfo("int64", True), "width": _ColumnInfo("int64", True),
                        "depth": _ColumnInfo("int64", True), "label": _ColumnInfo("int64", True),
                        "image_raw": _ColumnInfo("bytes", True)}

    def chunks(self) -> Iterator[Chunk]:
        for start in range(0, self.rows, 256):
            table: dict[str, list[Any]] = {name: [] for name in ("height", "width", "depth", "label", "image_raw")}
            for path, label in self.images[start : start + 256]:
                with open(path, "rb") as f:
                    data = f.read()
                try:
                    height, width, depth = image_shape(data)
                except ValueError as error:
                    raise ValueError(f"{path}: {error}") from None
                for name, value in (("height", height), ("width", width), ("depth", depth), ("label", label), ("image_raw", data)):
                    table[name].append(value)
            yield _normalize({name: values if name == "image_raw" else np.array(values, np.int64)
                              for name, values in table.items()
                              if name in self.columns}, "tensorflow")


def _open_source(source: Any, fmt: str, compression: str | None, copy: bool) -> _Source:
    if fmt in ("tfrecord", "ofrecord"):
        return _RecordSource(source, fmt, compression, columns=not copy)
    [path] = list_files(source) if fmt != "images" else [os.fspath(source)]
    return {"csv": _CsvSource, "parquet": _ParquetSource, "jsonl": _JsonLinesSource,
            "npz": _NpzSource, "images": _ImageFolderSource}[fmt](path)


# --- sinks ---------------------------------------------------------------------------------


class _Sink:
    def write(self, rows: int, columns: dict[str, Column]) -> None:
        raise NotImplementedError

    def commit(self) -> list[str]:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError


_STAGED = re.compile(r"^\.recordkit-convert-(?P<pid>\d+)-[0-9a-f]{8}-\d{5}$")


class _RecordSink(_Sink):
    """TFRecord file(s), or a OneFlow ``part-NNNNN`` folder, sharded by count or size.

    Shards are written under hidden staging names and renamed together at the end.
    Sizes are the bytes written to the files, after compression: once the first
    16 MiB of records are written, the bytes they took in the file give the
    ratio. Without a count or a size, the count is decided then, from the
    output's expected size: one shard per whole 100 MB (one file below 200 MB),
    rows dealt evenly, so that shards are even and a small output is one file.
    """

    def __init__(self, destination: str, fmt: str, rows: int, compression: str | None,
                 shards: int | None, shard_size: int | None, fsync: bool, compression_level: int | None = None) -> None:
        self.destination, self.format, self.rows, self.fsync = destination, fmt, rows, fsync
        self.compression, self.compression_level = compression, compression_level
        self.shards, self.shard_size = shards, shard_size
        self.schema = "oneflow" if fmt == "ofrecord" else "tensorflow"
        self.folder = destination if fmt == "ofrecord" else os.path.dirname(os.path.abspath(destination))
        self.made = make_folders(self.folder)  # removed again, while empty, by a failed conversion
        remove_files_of_dead_processes(self.folder, _STAGED)  # what killed conversions left
        self.token = f"{os.getpid()}-{os.urandom(4).hex()}"
        self.warned: set[str] = set()  # float64 columns already warned about
        self.staged: list[str] = []
        self.writer: Any = None
        self.written = 0
        self.bounds = [rows * i // shards for i in range(1, shards)] if shards else []
        # Shards rotate at this many bytes of records before compression: the size
        # asked for until the probe measures what compression makes of them.
        self.rotate_at: float | None = shard_size
        self.probed = bool(shards)

    def _probe(self) -> None:
        """Measures the bytes records take in the file, once the first 16 MiB (or
        the shard size asked for, if smaller) are written: decides the shard count
        where none was asked for, and the rotation point for a size. An output that
        ends before has one file, or shards of the size asked for."""
        self.probed = True
        written = self.writer.bytes_written
        if self.compression and written:
            ratio = max(self.writer.tell(), 1) / written
        else:
            ratio = 1.0
        if self.shard_size:
            self.rotate_at = self.shard_size / ratio
            return
        expected = ratio * written / max(self.written, 1) * self.rows
        count = max(1, int(expected // _SHARD_BYTES))
        if count > 1:
            self.shards = count
            self.bounds = [b for b in (self.rows * i // count for i in range(1, count)) if b > self.written]

    def _staging(self, i: int) -> str:
        return os.path.join(self.folder, f".recordkit-convert-{self.token}-{i:05d}")

    def _rotate(self) -> None:
        if self.writer is not None:
            self.writer.close()
        cls = OFRecordWriter if self.format == "ofrecord" else TFRecordWriter
        path = self._staging(len(self.staged))
        self.writer = cls(path, compression=self.compression, compression_level=self.compression_level, fsync=self.fsync)
        self.staged.append(path)

    def write_records(self, records: list[bytes]) -> None:
        for record in records:
            self._before_row()
            self.writer.write(record)
            self.written += 1

    def _before_row(self) -> None:
        """Opens the next shard when the current one is full."""
        if self.writer is None:
            self._rotate()
        if not self.probed and self.writer.bytes_written >= min(_PROBE_BYTES, self.shard_size or _PROBE_BYTES):
            self._probe()
        while self.shards and self.bounds and self.written >= self.bounds[0]:
            self.bounds.pop(0)
            self._rotate()
        if self.rotate_at and self.writer.bytes_written >= self.rotate_at and self.written < self.rows:
            self._rotate()

    def _rows_that_fit(self) -> int:
        """About how many more rows the current shard takes before reaching its size
        (or, before the probe, the probe's; at least 1), and at most 4096 or a 64th of
        a shard's rows, whichever is more: rows wider than the estimate overfill a shard
        by that one write at most. Every row left where there is no size to reach."""
        size = self.rotate_at if self.probed else min(self.shard_size or _PROBE_BYTES, _PROBE_BYTES)
        if not size:
            return self.rows - self.written
        in_shard = self.writer.records_written
        if not in_shard:
            return 1  # one row first, to learn the size of a row
        written = self.writer.bytes_written
        most = max(4096, int(size) // 64 * in_shard // written)
        return max(1, min(most, -(-(int(size) - written) * in_shard // written)))

    def prepared(self, rows_before: int, columns: dict[str, Column]) -> dict[str, Column]:
        """``columns`` as an Example holds them (OFRecord's extra kinds converted, with
        their warnings): done on the caller's thread, ahead of :meth:`write`, which may
        run on a helper thread. Errors name rows counted from the first, ``rows_before``
        rows before these."""
        if self.format != "tfrecord":
            return columns
        try:
            return {name: _as_tensorflow(name, column, self.warned) for name, column in columns.items()}
        except ColumnValueError as error:
            raise error.shifted(rows_before) from None

    def write(self, rows: int, columns: dict[str, Column]) -> None:
        """Writes ``rows`` rows of :meth:`prepared` columns, opening shards as they fill."""
        start = 0
        while start < rows:
            self._before_row()
            if self.shards:
                limit = self.bounds[0] if self.bounds else self.rows
                stop = min(rows, start + max(1, limit - self.written))
            else:
                stop = min(rows, start + self._rows_that_fit())
            _write(self.writer, columns, start, stop, self.schema, self.written - start)
            self.written += stop - start
            start = stop

    def commit(self) -> list[str]:
        if self.writer is None:
            self._rotate()  # no rows: still an (empty) output
        while self.shards and len(self.staged) < self.shards:
            self._rotate()  # more shards than rows: empty shards keep the set complete
        self.writer.close()
        count = len(self.staged)
        if self.format == "ofrecord":
            finals = [os.path.join(self.folder, f"part-{i:05d}") for i in range(count)]
        elif count == 1 and not self.shards and not self.shard_size:
            finals = [self.destination]
        else:
            finals = shard_names(self.destination, count)
        whole_set = finals != [self.destination]
        stale = replaced_files(finals) if whole_set else []  # a set replaces its older sets
        if whole_set:
            write_manifest(finals, self.staged, stale, fsync=self.fsync)  # before the renames: a crash between them fails the check
        for staged, final in zip(self.staged, finals):
            replace_file(staged, final)
        if self.fsync:
            fsync_path(self.folder, directory=True)
        remove_files(stale)
        return finals

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()
        for path in self.staged:
            if os.path.exists(path):
                os.unlink(path)
        remove_empty_folders(self.made)


def _as_tensorflow(name: str, column: Column, warned: set[str]) -> Column:
    """OFRecord's extra kinds in an Example: int32 as int64; float64 as float32, with a
    warning once per column (``warned``) and an error for a value beyond float32's range."""
    kind, values, splits, present = column
    if kind == "int32_list":
        return "int64_list", values.astype(np.int64), splits, present
    if kind == "double_list":
        return "float_list", narrow_to_float32(name, values, splits, warned), splits, present
    return column


def _values_for_output(kind: str, values: list[Any], info: _ColumnInfo) -> list[Any]:
    if kind == "float_list":
        # The shortest decimal that reads back as the same float32.
        return [float(str(np.float32(v))) if math.isfinite(v) else v for v in values]
    if info.kind == "bytes":
        return [v.decode("utf-8") if isinstance(v, bytes) else v for v in values] if info.text else [_utf8(v) for v in values]
    return values


def _utf8(value: bytes | str) -> bytes:
    """Byte strings arrive as bytes, or as str (from text columns), which records store as UTF-8."""
    return value.encode("utf-8") if isinstance(value, str) else value


class _TableSink(_Sink):
    """CSV, JSON lines or Parquet, written through a temporary file."""

    def __init__(self, destination: str, fmt: str, columns: dict[str, _ColumnInfo], fsync: bool) -> None:
        self.format, self.columns = fmt, columns
        self.target = AtomicTarget(destination, fsync=fsync)
        self.destination = destination
        self.file: Any = None
        if fmt == "parquet":
            pa = require("pyarrow", "arrow", "writing Parquet")
            pq = require("pyarrow.parquet", "arrow", "writing Parquet")
            self.pa = pa
            self.arrow_schema = pa.schema([(name, self._arrow_type(info)) for name, info in columns.items()])
            self.file = pq.ParquetWriter(self.target.handle, self.arrow_schema)
        else:
            self.file = open(self.target.handle, "w", newline="", encoding="utf-8")
            if fmt == "csv":
                self.csv = csv.writer(self.file)
                self.csv.writerow(list(columns))

    def _arrow_type(self, info: _ColumnInfo) -> Any:
        pa = self.pa
        base = {"int64": pa.int64(), "int32": pa.int32(), "float": pa.float32(), "double": pa.float64(),
                "bytes": pa.string() if info.text else pa.binary()}[info.kind]
        return base if info.scalar else pa.list_(base)

    def write(self, rows: int, columns: dict[str, Column]) -> None:
        if self.format == "parquet":
            self._write_arrow(rows, columns)
            return
        cells = {name: _rows_of(columns[name], rows) for name in self.columns}
        for row in range(rows):
            values = {name: cells[name][row] for name in self.columns}
            if self.format == "csv":
                self.csv.writerow([self._cell(name, values[name], columns[name][0]) for name in self.columns])
            else:
                line = {name: self._json(name, v, columns[name][0]) for name, v in values.items() if v is not None}
                self.file.write(json.dumps(line) + "\n")

    def _cell(self, name: str, values: list[Any] | None, kind: str) -> str:
        if values is None:
            return ""
        shown = self._json(name, values, kind)
        return json.dumps(shown) if isinstance(shown, (list, dict)) else str(shown)

    def _json(self, name: str, values: list[Any], kind: str) -> Any:
        info = self.columns[name]
        out = _values_for_output(kind, values, info)
        if info.kind == "bytes" and not info.text:
            out = [{"base64": base64.b64encode(v).decode("ascii")} for v in out]
        if info.scalar:
            return out[0] if len(out) == 1 else None if not out else out
        return out

    def _write_arrow(self, rows: int, columns: dict[str, Column]) -> None:
        pa = self.pa
        arrays = []
        for name, info in self.columns.items():
            kind, values, splits, present = columns[name]
            value_type = self._arrow_type(_ColumnInfo(info.kind, True, info.text))
            mask = None if present is None else ~present
            if kind == "bytes_offsets":
                arrays.append(self._arrow_from_offsets(name, info, values, value_type, splits, mask, rows))
                continue
            if kind == "bytes_fixed":
                values = values.tolist()
            elif isinstance(values, np.ndarray) and values.dtype == object:
                values = list(values)
            if info.scalar:
                lengths = np.diff(splits)
                if (lengths > 1).any():
                    raise ValueError(f"column {name!r} holds a list in some row, after rows of one value")
                full: Any
                if isinstance(values, np.ndarray):
                    full = np.zeros(rows, dtype=values.dtype)
                    full[lengths == 1] = values
                else:
                    full = [None] * rows
                    for row, value in zip(np.flatnonzero(lengths == 1), values):
                        full[row] = value
                empty = lengths == 0
                mask = empty if mask is None else (mask | empty)
                arrays.append(numpy_to_arrow(full, value_type, mask=mask if mask.any() else None))
            else:
                flat = numpy_to_arrow(values, value_type)
                arrays.append(pa.ListArray.from_arrays(numpy_to_arrow(splits).cast(pa.int32()), flat,
                                                       mask=None if mask is None else numpy_to_arrow(mask)))
        self.file.write_table(pa.Table.from_arrays(arrays, schema=self.arrow_schema))

    def _arrow_from_offsets(self, name: str, info: _ColumnInfo, values: tuple[np.ndarray, np.ndarray], value_type: Any,
                            splits: np.ndarray, mask: np.ndarray | None, rows: int) -> Any:
        """A byte-string column from its offsets and data buffers, with no Python object per value."""
        pa = self.pa
        offsets, data = values
        flat = pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1,
                                     [None, pa.py_buffer(np.ascontiguousarray(offsets)), pa.py_buffer(data)])
        flat = flat.cast(value_type)  # to binary, or to string (checking the UTF-8 the survey saw)
        if not info.scalar:
            return pa.ListArray.from_arrays(numpy_to_arrow(splits).cast(pa.int32()), flat,
                                            mask=None if mask is None else numpy_to_arrow(mask))
        lengths = np.diff(splits)
        if (lengths > 1).any():
            raise ValueError(f"column {name!r} holds a list in some row, after rows of one value")
        have = lengths == 1
        return flat if have.all() else spread_over_rows(flat, have)

    def commit(self) -> list[str]:
        self.file.close()
        self.target.commit()
        return [self.destination]

    def abort(self) -> None:
        try:
            self.file.close()
        finally:
            self.target.discard()


class _NpzSink(_Sink):
    """``.npz``: columns of one value per row as arrays, others as ``name.values`` + ``name.row_splits``."""

    def __init__(self, destination: str, columns: dict[str, _ColumnInfo], fsync: bool) -> None:
        self.destination, self.columns, self.fsync = destination, columns, fsync
        self.parts: dict[str, list[Column]] = {name: [] for name in columns}

    def write(self, rows: int, columns: dict[str, Column]) -> None:
        for name in self.columns:
            self.parts[name].append(_byte_strings(columns[name]))

    def commit(self) -> list[str]:
        arrays: dict[str, np.ndarray] = {}
        for name, info in self.columns.items():
            values_parts, splits_parts, offset, whole = [], [np.zeros(1, np.int64)], 0, True
            for kind, values, splits, _ in self.parts[name]:
                if info.kind == "bytes":
                    strings = values.tolist() if kind == "bytes_fixed" else [_utf8(v) for v in values]
                    if any(v.endswith(b"\x00") for v in strings):
                        raise ValueError(f"column {name!r}: byte strings ending in NUL cannot be stored in "
                                         ".npz 'S' arrays (NumPy drops the NULs); convert to Parquet")
                    values_parts.append(np.array(strings, dtype="S"))
                else:
                    values_parts.append(np.asarray(values))
                splits_parts.append(splits[1:] + offset)
                offset += int(splits[-1])
                whole &= bool((np.diff(splits) == 1).all())
            values = np.concatenate(values_parts) if values_parts else np.zeros(0)
            if whole:
                arrays[name] = values
            else:
                arrays[name + ".values"] = values
                arrays[name + ".row_splits"] = np.concatenate(splits_parts)
        target = AtomicTarget(self.destination, fsync=self.fsync)
        try:
            with open(target.handle, "wb") as f:
                np.savez(f, **arrays)
            target.commit()
        except BaseException:
            target.discard()
            raise
        return [self.destination]

    def abort(self) -> None:
        self.parts.clear()


# --- the conversion ------------------------------------------------------------------------


def _label_map_path(destination: str) -> str:
    """``out/train.tfrecord`` -> ``out/train.labels.json``."""
    base = destination.rstrip("/\\")
    for suffix in (*_COMPRESSION_SUFFIXES, *_SUFFIXES):
        if base.lower().endswith(suffix):
            base = base[: -len(suffix)]
    return base + ".labels.json"


def convert(
    source: PathLike | Sequence[PathLike],
    destination: PathLike,
    *,
    shards: int | None = None,
    shard_size: int | str | None = None,
    output_compression: str | None = None,
    source_compression: str | None = "auto",
    features: Sequence[str] | None = None,
    source_format: str | None = None,
    destination_format: str | None = None,
    progress: bool | None = None,
    fsync: bool = False,
    compression_level: int | None = None,
) -> list[str]:
    """Converts ``source`` into ``destination`` and returns the paths written.

    Formats come from the suffixes (``.tfrecord[.gz]``, ``.parquet``,
    ``.csv``, ``.jsonl``, ``.npz``), or for inputs from the layout (a
    ``part-NNNNN`` folder is OFRecord, a folder of class subfolders is an
    image folder), or from ``source_format`` / ``destination_format``.

    Args:
        shards: Write this many TFRecord files, named as :func:`shard_names`
            names them (``out/train-00000-of-00003.tfrecord`` ...), holding
            consecutive rows; or this many OFRecord parts.
        shard_size: Start a new shard after this many bytes (``"100MB"``).
            Without ``shards`` or ``shard_size``, outputs past ~100 MB are
            sharded by that rule and smaller ones stay one file.
        output_compression: ``"gzip"``, ``"zlib"`` or ``"none"`` for TFRecord
            output; None (default) follows the destination's suffix (``.gz``, ``.zz``).
        source_compression: Of TFRecord sources, as for :class:`TFRecordReader`:
            ``"auto"`` (default: from the content), ``"none"``, ``"gzip"``, ``"zlib"``.
        features: Keep only these features (columns), in this order.
        progress: Report progress on stderr (default: when it is a terminal).
        fsync: Flush every output file (and a shard set's manifest) and its
            folder to the disk before returning.
        compression_level: For gzip and zlib output: 0 (stored, fastest) to
            9 (smallest); default 6.

    An image folder (``root/<class>/<image>``) becomes the TensorFlow
    tutorial's features: ``image_raw`` (the encoded bytes), ``height``,
    ``width`` and ``depth`` read from the image header, and ``label`` (the
    class's index in sorted order); the label map is written beside the
    output as ``<name>.labels.json``. Every output appears only when complete.
    """
    if shards is not None and shard_size is not None:
        raise ValueError("give shards or shard_size, not both")
    if shards is not None and shards < 1:
        raise ValueError(f"shards must be at least 1, not {shards}")
    size = parse_size(shard_size) if isinstance(shard_size, str) else shard_size
    first = source if isinstance(source, (str, os.PathLike)) else list(source)[0]
    in_format = source_format or detect_format(os.fspath(first))
    destination = os.fspath(destination)
    out_format = destination_format or detect_format(destination, output=True)
    for fmt in (in_format, out_format):
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    if out_format == "images":
        raise ValueError("writing image folders is not supported; images go into records, not out of them")
    if out_format != "ofrecord":  # an OFRecord output is a folder of parts
        check_targets([destination])
    compression = output_compression
    if (shards or size or compression) and out_format not in ("tfrecord", "ofrecord"):
        raise ValueError(f"shards, shard sizes and output compression apply to TFRecord and OFRecord output, not {out_format}")
    if compression is None and out_format == "tfrecord":
        compression = suffix_compression(destination)
    elif compression == "none":
        compression = None
    writer_options(compression, compression_level=compression_level)  # checked before any work
    reader_compression = source_compression if in_format == "tfrecord" else None
    copy_records = in_format == out_format and in_format in ("tfrecord", "ofrecord") and features is None
    src = _open_source(source, in_format, reader_compression, copy_records)
    src.select(features)
    report = _Progress(src.rows, f"{in_format} -> {out_format}", progress)
    sink: _Sink
    if out_format in ("tfrecord", "ofrecord"):
        sink = _RecordSink(destination, out_format, src.rows, compression, shards, size, fsync, compression_level)
    elif out_format == "npz":
        sink = _NpzSink(destination, src.columns, fsync)
    else:
        sink = _TableSink(destination, out_format, src.columns, fsync)
    try:
        if copy_records:  # the same record format: records are copied as they are (resharded, recompressed)
            assert isinstance(sink, _RecordSink) and isinstance(src, _RecordSource)
            for batch in _record_batches(src.records(), 1024, _CHUNK_BYTES):
                sink.write_records(batch)
                report.advance(len(batch))
        else:
            def chunks() -> Iterator[Chunk]:
                done = 0
                for rows, columns in src.chunks():
                    yield rows, sink.prepared(done, columns) if isinstance(sink, _RecordSink) else columns
                    done += rows
                    report.advance(rows)

            if isinstance(sink, _RecordSink) and isinstance(src, _ParquetSource):
                # Each chunk is encoded and written (the GIL released) while pyarrow reads the next.
                _write_behind(sink.write, chunks())
            else:
                # Sources read in Python (CSV, JSON lines) hold the GIL the writer's
                # helper needs now and then, and pyarrow's writers take it in turns with
                # the reading: measured 10-30% slower behind them.
                for rows, columns in chunks():
                    sink.write(rows, columns)
        written = sink.commit()
    except BaseException:
        sink.abort()
        raise
    finally:
        report.finish()
    if isinstance(src, _ImageFolderSource):
        label_map = _label_map_path(destination)
        target = AtomicTarget(label_map, fsync=fsync)
        with open(target.handle, "w", encoding="utf-8") as f:
            json.dump({name: label for label, name in enumerate(src.classes)}, f, indent=2)
        target.commit()
        written.append(label_map)
    return written
