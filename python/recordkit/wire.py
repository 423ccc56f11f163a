"""Protobuf's wire format, the few pieces Python needs: varints, LEN fields, and
byte strings as its text format quotes them. Messages themselves are Rust's
(``recordkit.train``)."""

from __future__ import annotations

__all__ = ["varint", "len_field", "read_varint", "has_top_field", "text_bytes"]


def varint(value: int) -> bytes:
    """A protobuf varint (negative values as their 64-bit two's complement)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def len_field(number: int, payload: bytes) -> bytes:
    """A LEN field: tag, length, payload."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``data[pos:]`` and the position after it. Bits past the
    64th (a tenth byte above 1) are dropped, as protobuf and the Rust codec
    (``wire::read_varint``) drop them."""
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & 0xFFFF_FFFF_FFFF_FFFF, pos
        shift += 7


def has_top_field(data: bytes, number: int) -> bool:
    """Whether a LEN field ``number`` appears at the top level of a message
    (a SequenceExample holds field 2, ``feature_lists``; an Example never does).
    Bytes that do not parse hold no such field."""
    pos = 0
    try:
        while pos < len(data):
            key, pos = read_varint(data, pos)
            wire = key & 7
            if key >> 3 == number and wire == 2:
                return True
            if wire == 0:
                _, pos = read_varint(data, pos)
            elif wire == 2:
                size, pos = read_varint(data, pos)
                pos += size
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            else:
                return False
    except ValueError:
        return False
    return False


_ESCAPES = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x22: '\\"', 0x27: "\\'", 0x5C: "\\\\"}


def text_bytes(value: bytes) -> str:
    """A byte string quoted as protobuf's text format writes it."""
    out = []
    for b in value:
        if b in _ESCAPES:
            out.append(_ESCAPES[b])
        elif b < 0x20 or b >= 0x7F:
            out.append(f"\\{b:03o}")
        else:
            out.append(chr(b))
    return '"' + "".join(out) + '"'
