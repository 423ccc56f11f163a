"""parse_tensor on hostile bytes: bounded allocation, TensorFlow's truncations, recordkit's own errors."""

from __future__ import annotations

import numpy as np
import pytest

import recordkit as rk


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def int64_tensor(dims: list[int], values: list[int]) -> bytes:
    """A TensorProto of DT_INT64 (9) with ``dims`` and packed ``int64_val`` (field 10)."""
    shape = b"".join(field(2, varint(1 << 3) + varint(d)) for d in dims)
    return varint(1 << 3) + varint(9) + field(2, shape) + field(10, b"".join(varint(v) for v in values))


def test_a_few_bytes_cannot_fill_a_huge_shape() -> None:
    # shape [2**28], one int64_val: TensorFlow would repeat it 2**28 times (2 GiB).
    claim = int64_tensor([1 << 28], [7])
    assert len(claim) < 20
    with pytest.raises(rk.ParseError, match="max_elements=16777216"):
        rk.parse_tensor(claim, "int64")


def test_fill_within_the_limit_repeats_the_last_value() -> None:
    # shape [3], int64_val [5]: TensorFlow gives [5, 5, 5].
    data = int64_tensor([3], [5])
    assert rk.parse_tensor(data, "int64").tolist() == [5, 5, 5]
    with pytest.raises(rk.ParseError, match="max_elements=2"):
        rk.parse_tensor(data, "int64", max_elements=2)


def test_float16_keeps_the_low_16_bits_as_tensorflow() -> None:
    data = bytes.fromhex("081312041202080168" "80a004")  # half_val 69632 = 0x11000
    np.testing.assert_array_equal(rk.parse_tensor(data, "float16"), np.array([0x1000], np.uint16).view(np.float16))
