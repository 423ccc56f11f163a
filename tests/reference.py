"""A small pure-Python reference: TFRecord/OFRecord framing and protobuf wire decoding.

Deliberately simple and independent of recordkit's Rust code, so tests can use
it as an oracle.
"""

from __future__ import annotations

import struct

_POLY = 0x82F63B78
_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame_tfrecord(records: list[bytes]) -> bytes:
    out = bytearray()
    for record in records:
        length = struct.pack("<Q", len(record))
        out += length + struct.pack("<I", masked_crc32c(length))
        out += record + struct.pack("<I", masked_crc32c(record))
    return bytes(out)


def frame_ofrecord(records: list[bytes]) -> bytes:
    return b"".join(struct.pack("<q", len(r)) + r for r in records)


def record_offsets(records: list[bytes]) -> list[int]:
    """Start offset of each TFRecord frame (and the end offset last)."""
    offsets = [0]
    for record in records:
        offsets.append(offsets[-1] + 16 + len(record))
    return offsets


# --- protobuf wire format -------------------------------------------------


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


def fields(data: bytes) -> list[tuple[int, int, object]]:
    """(field number, wire type, value) for each field; LEN values are bytes, a
    group's value is its fields."""
    return _fields(data, 0, None)[0]


def _fields(data: bytes, pos: int, group: int | None) -> tuple[list[tuple[int, int, object]], int]:
    out: list[tuple[int, int, object]] = []
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire == 4:
            if number != group:
                raise ValueError("an end-group tag that ends no open group")
            return out, pos
        if wire == 3:
            value, pos = _fields(data, pos, number)
        elif wire == 0:
            value, pos = read_varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = read_varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(data):
            raise ValueError("truncated")
        out.append((number, wire, value))
    if group is not None:
        raise ValueError("a group with no end")
    return out, pos


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _signed32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _scalars(payload: bytes, kind: str) -> list:
    """Decodes a packed-or-unpacked repeated scalar list message (field 1)."""
    values: list = []
    fixed = {"float_list": ("<f", 4), "double_list": ("<d", 8)}
    for number, wire, value in fields(payload):
        if number != 1:
            continue
        if kind == "bytes_list":
            values.append(value)
        elif kind in fixed:
            fmt, size = fixed[kind]
            values.extend(v for (v,) in struct.iter_unpack(fmt, value[: len(value) // size * size]))
        else:
            convert = _signed32 if kind == "int32_list" else _signed64
            if wire == 2:
                pos = 0
                while pos < len(value):
                    v, pos = read_varint(value, pos)
                    values.append(convert(v))
            else:
                values.append(convert(value))
    return values


OFRECORD_KINDS = {1: "bytes_list", 2: "float_list", 3: "double_list", 4: "int32_list", 5: "int64_list"}
EXAMPLE_KINDS = {1: "bytes_list", 2: "float_list", 3: "int64_list"}


def decode_feature_map(data: bytes, kinds: dict[int, str]) -> dict[str, tuple[str, list]]:
    """Decodes a ``map<string, Feature>`` message (an OFRecord, or TF's Features)."""
    out: dict[str, tuple[str, list]] = {}
    for number, _, entry in fields(data):
        if number != 1:
            continue
        key, feature = b"", b""
        for n, _, v in fields(entry):
            if n == 1:
                key = v
            elif n == 2:
                feature = v
        kind, values = None, []
        for n, _, v in fields(feature):
            if n in kinds:
                kind, values = kinds[n], _scalars(v, kinds[n])
        out[key.decode()] = (kind, values)
    return out


def decode_example(data: bytes) -> dict[str, tuple[str, list]]:
    """An Example's features, protobuf-style: every `features` field merged, last key wins."""
    out: dict[str, tuple[str, list]] = {}
    for number, _, value in fields(data):
        if number == 1:
            out.update(decode_feature_map(value, EXAMPLE_KINDS))
    return out


def _put_varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _len(number: int, payload: bytes) -> bytes:
    return _put_varint(number << 3 | 2) + _put_varint(len(payload)) + payload


def encode_example(features: dict[str, tuple[str, list]]) -> bytes:
    """protobuf's deterministic serialization of an Example (keys sorted, scalars packed).

    Key order is the upb backend's (protobuf's default): byte-wise, except that
    a key sorts before its own prefixes ("ab" before "a").
    """
    entries = b""
    for key in sorted(features, key=lambda k: [*k.encode(), 256]):
        kind, values = features[key]
        if kind == "bytes_list":
            body = b"".join(_len(1, v) for v in values)
            tag = 1
        elif kind == "float_list":
            body = _len(1, struct.pack(f"<{len(values)}f", *values)) if values else b""
            tag = 2
        else:
            body = _len(1, b"".join(_put_varint(v) for v in values)) if values else b""
            tag = 3
        entries += _len(1, _len(1, key.encode()) + _len(2, _len(tag, body)))
    return _len(1, entries)
