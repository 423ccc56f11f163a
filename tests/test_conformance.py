"""The conformance corpus: files written by TensorFlow 2.21, and what it reads back.

One parametrized test over every case whose type recordkit handles. Where
recordkit is stricter than TensorFlow by design (the corpus README lists the
cases), the stricter behaviour is asserted.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct
from pathlib import Path

import numpy as np
import pytest

import recordkit as rk
from conftest import load_cases, table_rows
from reference import OFRECORD_KINDS, decode_feature_map

CASES = load_cases()


def _sha(record: bytes) -> str:
    return hashlib.sha256(record).hexdigest()


def _read_until_error(reader: rk.TFRecordReader) -> tuple[list[bytes], rk.DataLossError | None]:
    records: list[bytes] = []
    try:
        for record in reader:
            records.append(record)
    except rk.DataLossError as error:
        return records, error
    return records, None


def _tf_offset(message: str) -> int:
    match = re.search(r"record at (\d+)", message)
    assert match, f"no offset in TensorFlow's message {message!r}"
    return int(match.group(1))


def check_records(case: dict, files: Path) -> None:
    path = files / case["file"]
    # Both with the compression TensorFlow was told, and auto-detected.
    for compression in (case["compression"], "auto"):
        records, error = _read_until_error(rk.TFRecordReader(path, compression=compression))
        assert len(records) == case["count"]
        assert [_sha(r) for r in records] == case["sha256"]
        if "lengths" in case:
            assert [len(r) for r in records] == case["lengths"]
        expected = case.get("error")
        if expected is not None:
            assert expected["type"] == "DataLossError"
            assert error is not None, f"{case['id']}: damage went unreported"
            assert error.offset == _tf_offset(expected["message"])
            assert error.path == str(path)
            assert error.record_index == case["count"]
        elif case["id"] == "truncated-header":
            # TensorFlow stops silently; recordkit reports the partial header,
            # at the start of the record it cuts.
            assert error is not None and error.kind == "partial_header"
            assert error.offset == sum(16 + n for n in case["lengths"])
        else:
            assert error is None, f"{case['id']}: unexpected {error}"
    # Counting skips payloads, so it sees damage in the framing only.
    if error is None:
        assert rk.count_records(path, case["compression"]) == case["count"]
    elif error.kind == "corrupt_data":
        assert rk.count_records(path, case["compression"]) > case["count"]
    else:
        with pytest.raises(rk.DataLossError) as counted:
            rk.count_records(path, case["compression"])
        assert (counted.value.offset, counted.value.kind) == (error.offset, error.kind)


def _expected_value(kind: str, value: object) -> object:
    if kind == "bytes_list":
        return base64.b64decode(value["b64"])  # type: ignore[index]
    if kind == "float_list":
        return struct.unpack("<f", struct.pack("<f", _float(value)))[0]
    if kind == "double_list":
        return _float(value)
    return value


def _float(value: object) -> float:
    return float(value)  # JSON numbers, or the strings "nan", "inf", "-inf"


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def _same_nested(a: object, b: object) -> bool:
    """Equal rows, NaN equal to NaN."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same_nested, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_nested(a[k], b[k]) for k in a)
    return _same(a, b)


def check_ofrecord(case: dict, files: Path) -> None:
    path = files / case["file"]
    records = list(rk.OFRecordReader(path))
    assert len(records) == case["count"] == rk.count_records(path, format="ofrecord")
    assert [_sha(r) for r in records] == case["sha256"]
    for record, expected in zip(records, case["decoded"]):
        reference = decode_feature_map(record, OFRECORD_KINDS)
        decoded = rk.decode_ofrecord(record)
        message = rk.ofrecord.OFRecord.FromString(record)
        assert set(decoded) == set(reference) == set(message.feature) == set(expected)
        for key, spec in expected.items():
            kind, values = reference[key]
            assert kind == spec["kind"] == message.feature[key].WhichOneof("kind")
            want = [_expected_value(kind, v) for v in spec["values"]]
            ours = decoded[key].tolist() if hasattr(decoded[key], "tolist") else decoded[key]
            for got in (values, ours, list(getattr(message.feature[key], kind).value)):
                assert len(got) == len(want) and all(map(_same, got, want)), key
        # OneFlow wrote map entries unsorted; recordkit writes them sorted, the same content.
        again = message.SerializeToString()
        assert again == rk.encode_ofrecord(decoded)
        assert rk.ofrecord.OFRecord.FromString(again) == message
    # read_table: one column per feature, OneFlow's five kinds as their Arrow types.
    import pyarrow as pa

    table = rk.read_table(path, format="ofrecord")
    arrow_types = {"bytes_list": pa.large_binary(), "float_list": pa.float32(), "double_list": pa.float64(),
                   "int32_list": pa.int32(), "int64_list": pa.int64()}
    for name in table.column_names:
        (kind,) = {row[name]["kind"] for row in case["decoded"] if name in row}
        assert table.schema.field(name).type in (arrow_types[kind], pa.large_list(arrow_types[kind])), name
        for row, expected in zip(table.column(name).to_pylist(), case["decoded"]):
            if name not in expected:
                assert row is None
                continue
            want = [_expected_value(expected[name]["kind"], v) for v in expected[name]["values"]]
            got = row if isinstance(row, list) else [row]
            assert len(got) == len(want) and all(map(_same, got, want)), name


def _bytes(value: dict) -> bytes:
    return base64.b64decode(value["b64"])


def _array(spec: dict) -> np.ndarray:
    """An expected array from the corpus encoding."""
    dtype = spec["dtype"]
    if dtype == "bytes":
        return np.array([_bytes(v) for v in spec["values"]], dtype=object).reshape(spec["shape"])
    if dtype.startswith("complex"):
        values = [complex(*pair) for pair in spec["values"]]
        return np.array(values, dtype=dtype).reshape(spec["shape"])
    values = [float(v) if isinstance(v, str) else v for v in spec["values"]]
    return np.array(values, dtype=dtype).reshape(spec["shape"])


def assert_same_array(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert isinstance(actual, np.ndarray), f"{what}: {type(actual)}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if expected.dtype == object:
        assert actual.dtype == object and actual.tolist() == expected.tolist(), what
        return
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    # Bit-exact for floats (NaN payloads included): they came from float32 storage.
    assert actual.tobytes() == expected.tobytes() or np.array_equal(actual, expected, equal_nan=True), what


def assert_output(actual: object, expected: dict, what: str) -> None:
    kind = expected["kind"]
    if kind == "dense":
        assert_same_array(actual, _array(expected), what)  # type: ignore[arg-type]
    elif kind == "sparse":
        assert isinstance(actual, rk.SparseArray), what
        assert_same_array(actual.indices, _array(expected["indices"]), what + ".indices")
        assert_same_array(actual.values, _array(expected["values"]), what + ".values")
        assert_same_array(actual.dense_shape, _array(expected["dense_shape"]), what + ".dense_shape")
    elif kind == "ragged":
        assert isinstance(actual, rk.RaggedArray), what
        assert_same_array(actual.flat_values, _array(expected["flat_values"]), what + ".flat_values")
        splits = actual.nested_row_splits
        assert len(splits) == len(expected["nested_row_splits"]), what
        for got, want in zip(splits, expected["nested_row_splits"]):
            assert_same_array(got, _array(want), what + ".row_splits")
    else:
        raise AssertionError(f"unknown output kind {kind}")


def make_spec(spec: dict) -> object:
    kind, dtype = spec["kind"], spec["dtype"]
    if kind == "fixed_len":
        return rk.FixedLenFeature(spec["shape"], dtype, default_value=spec.get("default"))
    if kind == "var_len":
        return rk.VarLenFeature(dtype)
    if kind == "sparse":
        return rk.SparseFeature(spec["index_key"], spec["value_key"], dtype, spec["size"])
    if kind == "fixed_len_sequence":
        return rk.FixedLenSequenceFeature(spec["shape"], dtype, allow_missing=spec.get("allow_missing", False),
                                          default_value=spec.get("default"))
    if kind == "ragged":
        partitions = {
            "row_lengths": rk.RaggedFeature.RowLengths, "row_splits": rk.RaggedFeature.RowSplits,
            "row_starts": rk.RaggedFeature.RowStarts, "row_limits": rk.RaggedFeature.RowLimits,
            "value_rowids": rk.RaggedFeature.ValueRowIds,
        }
        parts = tuple(
            rk.RaggedFeature.UniformRowLength(p["length"]) if p["kind"] == "uniform_row_length" else partitions[p["kind"]](p["key"])
            for p in spec.get("partitions", [])
        )
        # The corpus README: ragged row splits here are int64.
        return rk.RaggedFeature(dtype, value_key=spec.get("value_key"), partitions=parts, row_splits_dtype="int64")
    raise AssertionError(f"unknown spec kind {kind}")


def _facts(message: str) -> tuple[str | None, int | None]:
    key = re.search(r"(?:Key|Feature|Feature list): '?([\w]+)", message)
    index = re.search(r"Index: (\d+)", message)
    return (key.group(1) if key else None), (int(index.group(1)) if index else None)


def check_parse(case: dict, files: Path) -> None:
    records = list(rk.TFRecordReader(files / case["file"], compression=case["compression"]))
    features = {name: make_spec(s) for name, s in case["spec"].items()}
    if case.get("error"):
        with pytest.raises(rk.ParseError) as info:
            if case["type"] == "parse_example":
                rk.parse_example(records, features)
            else:
                rk.parse_single_example(records[0], features)
        key, index = _facts(case["error"]["message"])
        # The same facts as TensorFlow's message; recordkit may add the index where TensorFlow omits it.
        assert info.value.key == key, (str(info.value), case["error"]["message"])
        assert index is None or info.value.index == index, (str(info.value), case["error"]["message"])
        return
    if case["type"] == "parse_example":
        out = rk.parse_example(records, features)
    else:
        out = rk.parse_single_example(records[0], features)
    assert set(out) == set(case["outputs"])
    for name, expected in case["outputs"].items():
        assert_output(out[name], expected, name)
    if case["type"] == "parse_example":
        check_read_table(case, files, features, records, out)


def check_read_table(case: dict, files: Path, features: dict, records: list[bytes], parsed: dict) -> None:
    """rk.read_table over the same file: each row is the row parse_example gave
    (and so TensorFlow's); where parse_example fails, the same error."""
    if any(isinstance(spec, rk.FixedLenSequenceFeature) for spec in features.values()):
        return  # read_table reads FixedLenSequenceFeature only as a feature list
    path = files / case["file"]
    if case.get("error"):
        key, index = _facts(case["error"]["message"])
        with pytest.raises(rk.ParseError) as info:
            rk.read_table(path, features, compression=case["compression"])
        assert (info.value.key, info.value.index) == (key, index), str(info.value)
        return
    table = rk.read_table(path, features, compression=case["compression"])
    assert table.num_rows == len(records)
    for name, spec in features.items():
        assert _same_nested(table.column(name).to_pylist(), table_rows(spec, parsed[name], len(records))), name


def check_sequence(case: dict, files: Path) -> None:
    records = list(rk.TFRecordReader(files / case["file"], compression=case.get("compression")))
    context = {name: make_spec(s) for name, s in case["context_spec"].items()}
    sequence = {name: make_spec(s) for name, s in case["sequence_spec"].items()}
    out_context, out_sequence, lengths = rk.parse_sequence_example(records, context, sequence)
    for name, expected in case["context"].items():
        assert_output(out_context[name], expected, "context." + name)
    for name, expected in case["sequence"].items():
        assert_output(out_sequence[name], expected, "sequence." + name)
    assert set(lengths) == set(case["lengths"])
    for name, expected in case["lengths"].items():
        assert_same_array(lengths[name], _array(expected), "lengths." + name)
    if not any(isinstance(spec, rk.RaggedFeature) for spec in sequence.values()):
        table = rk.read_table(files / case["file"], context, sequence_features=sequence,
                              compression=case.get("compression"))
        for name, spec in context.items():
            assert _same_nested(table.column(name).to_pylist(), table_rows(spec, out_context[name], len(records))), name
        for name, spec in sequence.items():
            if isinstance(spec, rk.VarLenFeature):  # whole steps per record: a sparse output drops trailing empty ones
                steps = [rk.decode_sequence_example(r)[1].get(name, []) for r in records]
                want = [[list(getattr(step, "tolist", lambda: step)()) for step in s] for s in steps]
            else:
                want = table_rows(spec, out_sequence[name], len(records), lengths[name])
            assert _same_nested(table.column(name).to_pylist(), want), name


def check_tensors(case: dict, files: Path) -> None:
    for tensor in case["tensors"]:
        dtype = tensor["dtype"]
        spec = dict(tensor, dtype="bytes" if dtype == "string" else dtype)
        expected = _array(spec)
        serialized = _bytes(tensor["serialized"])
        parsed = rk.parse_tensor(serialized, dtype)
        assert_same_array(parsed, expected, f"parse_tensor {dtype}")
        assert rk.serialize_tensor(expected) == serialized, f"serialize_tensor {dtype}"


CHECKS = {
    "tensors": check_tensors,
    "records": check_records,
    "ofrecord": check_ofrecord,
    "parse_example": check_parse,
    "parse_single_example": check_parse,
    "parse_sequence_example": check_sequence,
}


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["type"] in CHECKS], ids=lambda c: f"{c['type']}:{c['id']}"
)
def test_conformance(case: dict, conformance_dir: Path) -> None:
    CHECKS[case["type"]](case, conformance_dir)
