"""What is in a record file: every feature, its kind, how often it is present and
how many values it holds, inferred from the records themselves.

>>> schema = rk.infer_schema("train.tfrecord")  # doctest: +SKIP
>>> schema.to_spec()  # doctest: +SKIP
{'label': FixedLenFeature(shape=[], dtype='int64', ...), 'tokens': VarLenFeature(dtype='int64')}
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Literal, Sequence

import numpy as np

from recordkit import _native
from recordkit.wire import has_top_field
from recordkit._sources import PathLike
from recordkit.columnar import per_file_limit, scanned_batches, scanner_batches
from recordkit.discovery import RecordFormat, list_files, record_format
from recordkit.features import FeatureSpec, FixedLenFeature, FixedLenSequenceFeature, VarLenFeature

__all__ = ["FeatureInfo", "Schema", "infer_schema", "record_batches", "decode_any", "MESSAGE_NAMES"]

Container = Literal["example", "sequence_example", "ofrecord"]

_KIND_NAMES = {
    "int64_list": "int64",
    "float_list": "float",
    "bytes_list": "bytes",
    "double_list": "double",
    "int32_list": "int32",
}
MESSAGE_NAMES = {"example": "tf.train.Example", "sequence_example": "tf.train.SequenceExample", "ofrecord": "OFRecord"}
_SPEC_DTYPES = {"int64": "int64", "float": "float32", "bytes": "string"}
_SAMPLE_VALUES = 3


@dataclass
class FeatureInfo:
    """One feature as seen in the records read.

    ``kind`` is ``"int64"``, ``"float"`` or ``"bytes"`` (OFRecord also
    ``"double"`` and ``"int32"``), ``"none"`` when no record set a kind, or
    ``"mixed"`` when records disagree. ``present`` counts the records holding
    the feature; ``min_values`` / ``max_values`` the values per record among
    them (per step, for a feature list, whose step counts are ``min_steps`` /
    ``max_steps``). ``text``: every byte string seen is valid UTF-8.
    ``kindless``: some record holds the feature as a Feature with no kind.
    """

    name: str
    kind: str = "none"
    present: int = 0
    min_values: int | None = None
    max_values: int | None = None
    sample: list[Any] = field(default_factory=list)
    min_steps: int | None = None
    max_steps: int | None = None
    text: bool = True
    kindless: bool = False

    def _see_kind(self, kind: str | None) -> None:
        if kind is None:
            self.kindless = True
            return
        name = _KIND_NAMES[kind]
        if self.kind == "none":
            self.kind = name
        elif self.kind != name:
            self.kind = "mixed"

    def _see_values(self, values: Any) -> None:
        n = len(values)
        if self.text and isinstance(values, list):
            self.text = all(_is_utf8(v) for v in values)
        self._see_counts(n, n)
        if len(self.sample) < _SAMPLE_VALUES and n:
            self.sample.append(_plain(values[: _SAMPLE_VALUES]))

    def _see_counts(self, low: int, high: int) -> None:
        self.min_values = low if self.min_values is None else min(self.min_values, low)
        self.max_values = high if self.max_values is None else max(self.max_values, high)

    def _see_steps(self, steps: int) -> None:
        self.min_steps = steps if self.min_steps is None else min(self.min_steps, steps)
        self.max_steps = steps if self.max_steps is None else max(self.max_steps, steps)

    def to_json(self) -> dict[str, Any]:
        """The facts as JSON-ready values (bytes shown as text when UTF-8, else as ``"base64:..."``)."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "present": self.present,
            "min_values": self.min_values,
            "max_values": self.max_values,
            "sample": [[_json_scalar(v) for v in values] for values in self.sample],
        }
        if self.kind == "bytes":
            out["text"] = self.text
        if self.min_steps is not None:
            out["min_steps"], out["max_steps"] = self.min_steps, self.max_steps
        return out


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _plain(values: Any) -> list[Any]:
    if isinstance(values, np.ndarray) and values.dtype == np.float32:
        return [float(str(v)) for v in values]  # the shortest decimal of the float32, not of its widening
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def _json_scalar(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            import base64

            return "base64:" + base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    return value


@dataclass
class Schema:
    """The inferred schema of some record files.

    ``features`` are an Example's (or OFRecord's) features, or a
    SequenceExample's context; ``sequence_features`` its feature lists.
    ``complete`` is False when reading stopped at the limit. ``undecodable``
    counts records that are not messages of the container's type (the first
    at index ``first_undecodable`` among those read); they add no features.
    """

    container: Container
    records: int
    complete: bool
    features: dict[str, FeatureInfo]
    sequence_features: dict[str, FeatureInfo] = field(default_factory=dict)
    undecodable: int = 0
    first_undecodable: int | None = None

    def undecodable_note(self) -> str:
        """A sentence about the records that are not messages of the container's type ("" when none)."""
        if not self.undecodable:
            return ""
        were = "record is not a" if self.undecodable == 1 else "records are not"
        return (f"{self.undecodable} {were} {MESSAGE_NAMES[self.container]}"
                f"{'' if self.undecodable == 1 else ' messages'} (the first is record {self.first_undecodable})")

    def to_spec(self) -> dict[str, FeatureSpec]:
        """A parse spec for ``parse_example`` (the context's, for a SequenceExample).

        A feature present in every record read with the same number of values
        becomes a ``FixedLenFeature``; any other a ``VarLenFeature``.
        Features whose kind is unknown or mixed are left out.
        """
        spec: dict[str, FeatureSpec] = {}
        for name, info in sorted(self.features.items()):
            dtype = _SPEC_DTYPES.get(info.kind)
            if dtype is None:
                continue
            if info.present == self.records and info.min_values == info.max_values and info.max_values:
                shape = [] if info.max_values == 1 else [info.max_values]
                spec[name] = FixedLenFeature(shape, dtype)
            else:
                spec[name] = VarLenFeature(dtype)
        return spec

    def to_sequence_spec(self) -> dict[str, FeatureSpec]:
        """A ``sequence_features`` spec for ``parse_sequence_example``."""
        spec: dict[str, FeatureSpec] = {}
        for name, info in sorted(self.sequence_features.items()):
            dtype = _SPEC_DTYPES.get(info.kind)
            if dtype is None:
                continue
            if info.min_values == info.max_values and info.max_values:
                shape = [] if info.max_values == 1 else [info.max_values]
                spec[name] = FixedLenSequenceFeature(shape, dtype, allow_missing=info.present < self.records)
            else:
                spec[name] = VarLenFeature(dtype)
        return spec

    def spec_source(self) -> str:
        """Python source of the spec, ready to paste (``import recordkit as rk`` assumed)."""
        if self.container == "ofrecord":
            return "# OFRecord: decode each record with rk.decode_ofrecord(record)"

        def render(spec: dict[str, FeatureSpec]) -> str:
            lines = []
            for name, item in spec.items():
                if isinstance(item, FixedLenFeature):
                    text = f"rk.FixedLenFeature({list(item.shape)!r}, {item.dtype!r})"
                elif isinstance(item, FixedLenSequenceFeature):
                    missing = ", allow_missing=True" if item.allow_missing else ""
                    text = f"rk.FixedLenSequenceFeature({list(item.shape)!r}, {item.dtype!r}{missing})"
                else:
                    text = f"rk.VarLenFeature({item.dtype!r})"
                lines.append(f"    {name!r}: {text},")
            return "{\n" + "\n".join(lines) + "\n}" if lines else "{}"

        if self.container == "sequence_example":
            return (f"context_features = {render(self.to_spec())}\n"
                    f"sequence_features = {render(self.to_sequence_spec())}")
        return f"features = {render(self.to_spec())}"

    def to_json(self) -> dict[str, Any]:
        """``{"container", "records", "complete", "features": {name: {...}}, "sequence_features": ...}``."""
        out: dict[str, Any] = {
            "container": self.container,
            "records": self.records,
            "complete": self.complete,
            "undecodable": self.undecodable,
            "features": {name: info.to_json() for name, info in sorted(self.features.items())},
        }
        if self.container == "sequence_example":
            out["sequence_features"] = {name: info.to_json() for name, info in sorted(self.sequence_features.items())}
        return out


def record_batches(
    source: PathLike | Sequence[PathLike],
    limit: int | None,
    *,
    format: Literal["auto", "tfrecord", "ofrecord"] = "auto",
    compression: str | None = "auto",
    batch_size: int = 1024,
    on_error: Literal["raise", "skip"] = "raise",
) -> Iterator[tuple[str, RecordFormat, list[bytes]]]:
    """``(path, format, records)`` batches of up to ``limit`` records in all (every
    record with None), taken from every file in turn so that a sample sees each
    file's start; framed and checked in Rust a batch at a time. ``on_error`` as
    for ``recordkit.TFRecordReader``."""
    files = list_files(source)
    formats = [record_format(p) if format == "auto" else format for p in files]

    per_file = None if limit is None else per_file_limit(limit, len(files))
    batches = functools.partial(scanner_batches, batch_size=batch_size)
    taken = 0
    for path, fmt in zip(files, formats):
        want = None if limit is None else min(per_file, limit - taken)  # type: ignore[type-var]
        if want is not None and want <= 0:
            return
        for _, count, batch in scanned_batches([path], batches, format=fmt, compression=compression, limit=want,
                                               on_error=on_error):
            taken += count
            yield path, fmt, batch


def infer_schema(
    source: PathLike | Sequence[PathLike],
    *,
    limit: int | None = 1000,
    format: Literal["auto", "tfrecord", "ofrecord"] = "auto",
    compression: str | None = "auto",
    on_error: Literal["raise", "skip"] = "raise",
) -> Schema:
    """Infers the schema of record files from up to ``limit`` records (every record with None).

    Examples, SequenceExamples (recognized by their feature lists) and
    OFRecords (``format``, or ``part-N`` names) are told apart. ``on_error``:
    ``"raise"`` (a damaged record is a ``DataLossError``) or ``"skip"``
    (damaged stretches are skipped, each with a ``DataLossWarning``).
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f'on_error must be "raise" or "skip", not {on_error!r}')
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1 (or None, every record), not {limit}")
    files = list_files(source)
    first = record_format(files[0]) if format == "auto" else format
    batches = (batch for _, _, batch in record_batches(files, limit, format=format, compression=compression,
                                                       batch_size=_SURVEY_BATCH, on_error=on_error))
    return _infer(batches, limit, "ofrecord" if first == "ofrecord" else None)


_SURVEY_BATCH = 1024
_KIND_BITS = ((2, "bytes_list"), (4, "float_list"), (8, "double_list"), (16, "int32_list"), (32, "int64_list"))


class _Survey:
    """Schema facts gathered record by record (SequenceExamples) or a batch at a time in Rust."""

    def __init__(self, ofrecord: bool) -> None:
        self.ofrecord = ofrecord
        self.features: dict[str, FeatureInfo] = {}
        self.sequences: dict[str, FeatureInfo] = {}
        self.count = self.undecodable = 0
        self.first_undecodable: int | None = None
        self.is_sequence = False

    def _bad(self, index: int) -> None:
        self.undecodable += 1
        if self.first_undecodable is None:
            self.first_undecodable = index

    def add_batch(self, batch: list[bytes]) -> None:
        if not self.is_sequence:
            schema, container = ("oneflow", "map") if self.ofrecord else ("tensorflow", "example")
            facts, bad, sequences = _native.survey_features(batch, schema, container)
            if not sequences:
                for index in bad:
                    self._bad(self.count + index)
                for name, kinds, present, low, high, text, first in facts:
                    info = self.features.get(name) or self.features.setdefault(name, FeatureInfo(name))
                    info.present += present
                    for bit, kind in _KIND_BITS:
                        if kinds & bit:
                            info._see_kind(kind)
                    info.kindless |= bool(kinds & 1)
                    info._see_counts(low, high)
                    info.text &= text
                    if first is not None and len(info.sample) < _SAMPLE_VALUES:
                        context, _, _ = decode_any(batch[first], self.ofrecord)
                        info.sample.append(_plain(context[name][1][:_SAMPLE_VALUES]))
                self.count += len(batch)
                return
            self.is_sequence = True  # from here on, record by record
        for record in batch:
            self.add_record(record)

    def add_record(self, record: bytes) -> None:
        self.count += 1
        try:
            context, lists, sequence = decode_any(record, self.ofrecord)
        except ValueError:
            self._bad(self.count - 1)
            return
        self.is_sequence |= sequence
        for name, (kind, values) in context.items():
            info = self.features.get(name) or self.features.setdefault(name, FeatureInfo(name))
            info.present += 1
            info._see_kind(kind)
            info._see_values(values)
        for name, steps in lists.items():
            info = self.sequences.get(name) or self.sequences.setdefault(name, FeatureInfo(name))
            info.present += 1
            info._see_steps(len(steps))
            for kind, values in steps:
                info._see_kind(kind)
                info._see_values(values)


def _infer(batches: Iterable[list[bytes]], limit: int | None, container: Container | None) -> Schema:
    survey = _Survey(container == "ofrecord")
    for batch in batches:
        survey.add_batch(batch)
    complete = limit is None or survey.count < limit
    kind: Container = container or ("sequence_example" if survey.is_sequence else "example")
    return Schema(kind, survey.count, complete, survey.features, survey.sequences,
                  survey.undecodable, survey.first_undecodable)


def decode_any(record: bytes, ofrecord: bool) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """``(features, feature lists, is a SequenceExample)`` of an Example, SequenceExample
    (told by its feature lists) or OFRecord, as ``{name: (kind, values)}`` from the Rust decoder.

    Raises:
        ParseError: When the record is not such a message.
    """
    if ofrecord:
        return _native.decode_features(record, "oneflow", "map"), {}, False
    if has_top_field(record, 2):
        context, lists = _native.decode_sequence(record)
        return context, lists, True
    return _native.decode_features(record, "tensorflow", "example"), {}, False
