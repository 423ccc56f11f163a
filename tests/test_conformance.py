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

import pytest

import recordkit as rk
from conftest import load_cases
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


def check_ofrecord(case: dict, files: Path) -> None:
    path = files / case["file"]
    records = list(rk.OFRecordReader(path))
    assert len(records) == case["count"] == rk.count_records(path, format="ofrecord")
    assert [_sha(r) for r in records] == case["sha256"]
    for record, expected in zip(records, case["decoded"]):
        decoded = decode_feature_map(record, OFRECORD_KINDS)
        assert set(decoded) == set(expected)
        for key, spec in expected.items():
            kind, values = decoded[key]
            assert kind == spec["kind"]
            want = [_expected_value(kind, v) for v in spec["values"]]
            assert len(values) == len(want) and all(map(_same, values, want)), key


CHECKS = {"records": check_records, "ofrecord": check_ofrecord}


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["type"] in CHECKS], ids=lambda c: f"{c['type']}:{c['id']}"
)
def test_conformance(case: dict, conformance_dir: Path) -> None:
    CHECKS[case["type"]](case, conformance_dir)
