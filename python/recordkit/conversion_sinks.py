"""Where a conversion writes to: record files (one, or a shard set committed
as a whole), Parquet, CSV, JSON lines and ``.npz`` (see ``recordkit.conversion``).
"""

from __future__ import annotations

import base64
import csv
import json
import math
import os
import re
from typing import Any

import numpy as np

from recordkit._sources import (AtomicTarget, fsync_path, make_folders, remove_empty_folders, remove_files_of_dead_processes, replace_file,
                                require)
from recordkit._shardsets import remove_files, replaced_files, shard_names, write_manifest
from recordkit.column_values import Column, ColumnValueError, narrow_to_float32
from recordkit.writing import write_slice
from recordkit.records import (
    OFRecordWriter,
    TFRecordWriter,
)
from recordkit.tables import numpy_to_arrow, spread_over_rows

from recordkit.conversion_sources import ColumnInfo, byte_strings, column_rows

__all__ = ["Sink", "RecordSink", "TableSink", "NpzSink"]

SHARD_BYTES = 100_000_000  # the TensorFlow tutorial's "~100 MB per shard"
# Records written before the bytes a record takes in the output are measured
# (after compression), to decide how many shards an output gets.
PROBE_BYTES = 16 << 20

# --- sinks ---------------------------------------------------------------------------------


class Sink:
    def write(self, rows: int, columns: dict[str, Column]) -> None:
        raise NotImplementedError

    def commit(self) -> list[str]:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError


_STAGED = re.compile(r"^\.recordkit-convert-(?P<pid>\d+)-[0-9a-f]{8}-\d{5}$")


class RecordSink(Sink):
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
        count = max(1, int(expected // SHARD_BYTES))
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
        if not self.probed and self.writer.bytes_written >= min(PROBE_BYTES, self.shard_size or PROBE_BYTES):
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
        size = self.rotate_at if self.probed else min(self.shard_size or PROBE_BYTES, PROBE_BYTES)
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
        their warnings): done on the caller's thread, ahead of ``write``, which may
        run on a helper thread. Errors name rows counted from the first, ``rows_before``
        rows before these."""
        if self.format != "tfrecord":
            return columns
        try:
            return {name: _as_tensorflow(name, column, self.warned) for name, column in columns.items()}
        except ColumnValueError as error:
            raise error.shifted(rows_before) from None

    def write(self, rows: int, columns: dict[str, Column]) -> None:
        """Writes ``rows`` rows of ``prepared`` columns, opening shards as they fill."""
        start = 0
        while start < rows:
            self._before_row()
            if self.shards:
                limit = self.bounds[0] if self.bounds else self.rows
                stop = min(rows, start + max(1, limit - self.written))
            else:
                stop = min(rows, start + self._rows_that_fit())
            write_slice(self.writer, columns, start, stop, self.schema, self.written - start)
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


def _values_for_output(kind: str, values: list[Any], info: ColumnInfo) -> list[Any]:
    if kind == "float_list":
        # The shortest decimal that reads back as the same float32.
        return [float(str(np.float32(v))) if math.isfinite(v) else v for v in values]
    if info.kind == "bytes":
        return [v.decode("utf-8") if isinstance(v, bytes) else v for v in values] if info.text else [_utf8(v) for v in values]
    return values


def _utf8(value: bytes | str) -> bytes:
    """Byte strings arrive as bytes, or as str (from text columns), which records store as UTF-8."""
    return value.encode("utf-8") if isinstance(value, str) else value


class TableSink(Sink):
    """CSV, JSON lines or Parquet, written through a temporary file."""

    def __init__(self, destination: str, fmt: str, columns: dict[str, ColumnInfo], fsync: bool) -> None:
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

    def _arrow_type(self, info: ColumnInfo) -> Any:
        pa = self.pa
        base = {"int64": pa.int64(), "int32": pa.int32(), "float": pa.float32(), "double": pa.float64(),
                "bytes": pa.string() if info.text else pa.binary()}[info.kind]
        return base if info.scalar else pa.list_(base)

    def write(self, rows: int, columns: dict[str, Column]) -> None:
        if self.format == "parquet":
            self._write_arrow(rows, columns)
            return
        cells = {name: column_rows(columns[name], rows) for name in self.columns}
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
            value_type = self._arrow_type(ColumnInfo(info.kind, True, info.text))
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

    def _arrow_from_offsets(self, name: str, info: ColumnInfo, values: tuple[np.ndarray, np.ndarray], value_type: Any,
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


class NpzSink(Sink):
    """``.npz``: columns of one value per row as arrays, others as ``name.values`` + ``name.row_splits``."""

    def __init__(self, destination: str, columns: dict[str, ColumnInfo], fsync: bool) -> None:
        self.destination, self.columns, self.fsync = destination, columns, fsync
        self.parts: dict[str, list[Column]] = {name: [] for name in columns}

    def write(self, rows: int, columns: dict[str, Column]) -> None:
        for name in self.columns:
            self.parts[name].append(byte_strings(columns[name]))

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


