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


def test_decode_raw_reads_a_column_of_images_in_one_call(tmp_path) -> None:  # type: ignore[no-untyped-def]
    images = np.arange(40 * 4 * 4 * 3, dtype=np.uint8).reshape(40, 4, 4, 3)
    rk.write_examples(tmp_path / "i.tfrecord", {"image": [im.tobytes() for im in images]})
    batch = next(rk.read_examples(tmp_path / "i.tfrecord", {"image": rk.FixedLenFeature([], "string")}))
    pixels = rk.decode_raw(batch["image"], "uint8")
    assert pixels.shape == (40, 48) and (pixels.reshape(images.shape) == images).all()


@pytest.mark.parametrize("dtype", ["uint32", "uint64", "int64", "float64", "complex128", np.float16, "half", "double"])
def test_decode_raw_every_numpy_type_both_byte_orders(dtype: object) -> None:
    expected = np.dtype({"half": "float16", "double": "float64"}.get(dtype, dtype))  # type: ignore[arg-type]
    values = (np.arange(12) * 7 + 3).astype(expected).reshape(2, 2, 3)
    little = [[row.astype(expected.newbyteorder("<")).tobytes() for row in block] for block in values]
    big = [[row.astype(expected.newbyteorder(">")).tobytes() for row in block] for block in values]
    assert (rk.decode_raw(little, dtype) == values).all() and rk.decode_raw(little, dtype).dtype == expected
    assert (rk.decode_raw(big, dtype, little_endian=False) == values).all()
    assert rk.decode_raw(big, dtype, little_endian=False).dtype.isnative


def test_decode_raw_shapes_padding_and_errors() -> None:
    assert rk.decode_raw(b"\x01\x00\x02\x00", "int16").tolist() == [1, 2]
    assert rk.decode_raw(np.array([], dtype=object), "int32").shape == (0, 0)
    assert rk.decode_raw([b"abc", b"a"], "uint8", fixed_length=2).tolist() == [[97, 98], [97, 0]]
    assert rk.decode_raw(np.array([b"\x01\x00", b"\x02\x00"]), "int16").tolist() == [[1], [2]]  # S cells, whole
    assert rk.decode_raw(b"\x02\x00\x01", "bool").tolist() == [True, False, True]
    with pytest.raises(ValueError, match="element 1 has size 3 != 4"):
        rk.decode_raw([b"abcd", b"abc"], "uint8")
    with pytest.raises(ValueError, match="has length 3 that is not a multiple of 4, the size of int32"):
        rk.decode_raw(b"abc", "int32")
    with pytest.raises(ValueError, match=r"fixed_length \(5\) must be a multiple of the size of out_type \(4\)"):
        rk.decode_raw(b"abc", "int32", fixed_length=5)
    with pytest.raises(ValueError, match="greater than zero"):
        rk.decode_raw(b"abc", "int32", fixed_length=0)
    with pytest.raises(TypeError, match="decode_raw's out_type is one of"):
        rk.decode_raw(b"abc", "string")


def test_decode_raw_splits_a_large_column_over_threads_with_the_same_result() -> None:
    rng = np.random.default_rng(0)
    column = np.array([rng.bytes(4096) for _ in range(1024)], dtype=object)
    rk.set_num_threads(1)
    try:
        one = rk.decode_raw(column, "float32")
    finally:
        rk.set_num_threads(None)
    assert rk.decode_raw(column, "float32").tobytes() == one.tobytes() == b"".join(column)
