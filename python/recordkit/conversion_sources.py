"""Where a conversion reads from: record files, Parquet, CSV, JSON lines,
``.npz`` and folders of images, each read a chunk of rows at a time as
columns (see ``recordkit.conversion``).
"""

from __future__ import annotations

import base64
import csv
import itertools
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Literal, Sequence

import numpy as np

from recordkit import _native
from recordkit._sources import (PathLike, require)
from recordkit._shardsets import ONEFLOW_PART
from recordkit.column_values import Column, ColumnValueError, arrow_feature_type, normalize
from recordkit.columnar import example_column_batches
from recordkit.discovery import list_files, record_format
from recordkit.images import image_shape
from recordkit.records import (
    OFRecordReader,
    TFRecordReader,
    count_records,
)
from recordkit.schema import infer_schema

__all__ = ["Format", "FORMATS", "Chunk", "ColumnInfo", "ConversionProgress", "CHUNK_BYTES", "COMPRESSION_SUFFIXES",
           "FORMAT_SUFFIXES", "ImageFolderSource", "ParquetSource", "RecordSource",
           "byte_strings", "column_rows", "detect_format", "open_source", "parse_size", "record_batches"]



Format = Literal["tfrecord", "ofrecord", "csv", "parquet", "jsonl", "npz", "images"]
FORMATS: tuple[str, ...] = ("tfrecord", "ofrecord", "csv", "parquet", "jsonl", "npz", "images")

FORMAT_SUFFIXES = {
    ".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl",
    ".json": "jsonl", ".npz": "npz", ".tfrecord": "tfrecord", ".tfrecords": "tfrecord", ".tfr": "tfrecord",
}
COMPRESSION_SUFFIXES = (".gz", ".gzip", ".zz", ".zlib")
_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
_CHUNK_ROWS = 8192
# Parquet chunks, and chunks of records parsed in Rust, hold about this many bytes
# (the records' or the Parquet file's, uncompressed), and at most this many rows:
# a Parquet output's row groups are the chunks.
CHUNK_BYTES = 16 << 20
_CHUNK_MAX_ROWS = 65536
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
    for suffix in COMPRESSION_SUFFIXES:
        if lower.endswith(suffix):
            lower = lower[: -len(suffix)]
            break
    extension = os.path.splitext(lower)[1]
    if extension in FORMAT_SUFFIXES:
        return FORMAT_SUFFIXES[extension]  # type: ignore[return-value]
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
class ColumnInfo:
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


def record_batches(records: Iterable[bytes], size: int, max_bytes: int) -> Iterator[list[bytes]]:
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


def byte_strings(column: Column) -> Column:
    """A column whose byte strings are in Arrow's layout (``"bytes_offsets"``: offsets
    into one buffer) with one ``bytes`` per value instead, for the sinks that need them."""
    kind, values, splits, present = column
    if kind != "bytes_offsets":
        return column
    offsets, data = values
    raw = data.tobytes()
    bounds = offsets.tolist()
    return "bytes_list", [raw[a:b] for a, b in zip(bounds[:-1], bounds[1:])], splits, present


def column_rows(column: Column, rows: int) -> list[Any]:
    """Per-row values of a column: None when missing, else a list (bytes, or Python numbers)."""
    kind, values, splits, present = byte_strings(column)
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


class ConversionProgress:
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
    columns: dict[str, ColumnInfo]

    def chunks(self) -> Iterator[Chunk]:
        raise NotImplementedError

    def select(self, features: Sequence[str] | None) -> None:
        if features is None:
            return
        unknown = [name for name in features if name not in self.columns]
        if unknown:
            raise ValueError(f"no feature named {', '.join(map(repr, unknown))}; the input has {', '.join(self.columns)}")
        self.columns = {name: self.columns[name] for name in features}


class RecordSource(_Source):
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
            name: ColumnInfo("bytes" if info.kind == "none" else info.kind,
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
        for records in record_batches(self.records(), _CHUNK_ROWS, CHUNK_BYTES):
            yield self._chunk([_native.decode_features(record, schema, container) for record in records])

    def _parsed_chunks(self) -> Iterator[Chunk]:
        """Chunks framed, checked and parsed into columns by Rust, one call per chunk;
        byte strings stay in Arrow's layout (``"bytes_offsets"``)."""
        requests = [(name, _REQUEST_DTYPES[info.kind]) for name, info in self.columns.items()]
        for rows, parsed in example_column_batches(self.files, requests, _CHUNK_MAX_ROWS, compression=self.compression,
                                                   flat_bytes=True, format=self.format, max_bytes=CHUNK_BYTES):
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


def _arrow_info(field: Any) -> ColumnInfo:
    """The column a Parquet field becomes, as ``write_examples`` would write it."""
    import pyarrow as pa

    values, listed = arrow_feature_type(field.name, field.type)
    if pa.types.is_integer(values) or pa.types.is_boolean(values) or pa.types.is_temporal(values):
        return ColumnInfo("int64", not listed)
    if pa.types.is_floating(values):
        return ColumnInfo("float", not listed)
    text = pa.types.is_string(values) or pa.types.is_large_string(values) or pa.types.is_string_view(values)
    return ColumnInfo("bytes", not listed, text=text)  # byte strings, and columns of nulls only


class ParquetSource(_Source):
    def __init__(self, path: str) -> None:
        pq = require("pyarrow.parquet", "arrow", "reading Parquet")
        self.file = pq.ParquetFile(path)
        self.rows = self.file.metadata.num_rows
        self.columns = {field.name: _arrow_info(field) for field in self.file.schema_arrow}
        self.warned: set[str] = set()  # float64 columns already warned about, once per conversion

    def _chunk_rows(self) -> int:
        """Rows a chunk: about ``CHUNK_BYTES`` of them uncompressed, as the file's row
        groups say, so that wide rows (images) stay few a chunk and narrow ones are
        not written a few thousand at a time."""
        meta = self.file.metadata
        size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        if not self.rows or not size:
            return _CHUNK_ROWS
        return max(1, min(_CHUNK_MAX_ROWS, CHUNK_BYTES * self.rows // size))

    def chunks(self) -> Iterator[Chunk]:
        import pyarrow as pa

        done = 0
        for batch in self.file.iter_batches(self._chunk_rows(), columns=list(self.columns)):
            try:
                rows, columns = normalize(pa.Table.from_batches([batch]), "tensorflow", self.warned, flat_bytes=True)
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
        self.columns = {name: ColumnInfo("int64" if kind == "bool" else kind, scalar=True, text=kind == "bytes")
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
        self.columns = {name: ColumnInfo(kind, scalar[name], text[name]) for name, kind in kinds.items()}

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
                self.columns[key[: -len(".values")]] = ColumnInfo(self._kind(array), scalar=False, text=array.dtype.kind == "U")
            else:
                lengths.add(len(array))
                self.columns[key] = ColumnInfo(self._kind(array), scalar=array.ndim == 1, text=array.dtype.kind == "U")
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
                yield normalize(table, "tensorflow", self.warned)
            except ColumnValueError as error:
                raise error.shifted(start) from None


class ImageFolderSource(_Source):
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
        self.columns = {"height": ColumnInfo("int64", True), "width": ColumnInfo("int64", True),
                        "depth": ColumnInfo("int64", True), "label": ColumnInfo("int64", True),
                        "image_raw": ColumnInfo("bytes", True)}

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
            yield normalize({name: values if name == "image_raw" else np.array(values, np.int64)
                              for name, values in table.items()
                              if name in self.columns}, "tensorflow")


def open_source(source: Any, fmt: str, compression: str | None, copy: bool) -> _Source:
    if fmt in ("tfrecord", "ofrecord"):
        return RecordSource(source, fmt, compression, columns=not copy)
    [path] = list_files(source) if fmt != "images" else [os.fspath(source)]
    return {"csv": _CsvSource, "parquet": ParquetSource, "jsonl": _JsonLinesSource,
            "npz": _NpzSource, "images": ImageFolderSource}[fmt](path)


