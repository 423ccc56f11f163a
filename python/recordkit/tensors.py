"""``tf.io.serialize_tensor`` / ``tf.io.parse_tensor``: TensorFlow's TensorProto bytes.

Non-string arrays are stored as raw little-endian bytes (``tensor_content``),
string arrays as one ``string_val`` per element; the shape is always written,
even for scalars. Parsing also accepts the typed ``*_val`` fields other
writers use, with TensorFlow's rule that the last value fills the rest.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from recordkit import _native
from recordkit.wire import len_field, read_varint, varint
from recordkit.errors import ParseError

__all__ = ["serialize_tensor", "parse_tensor", "decode_raw", "MAX_FILLED_ELEMENTS"]

# DataType enum values (tensorflow/core/framework/types.proto).
_DT = {
    "float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6, "string": 7,
    "complex64": 8, "int64": 9, "bool": 10, "uint16": 17, "complex128": 18, "float16": 19,
    "uint32": 22, "uint64": 23,
}
_DT_NAMES = {v: k for k, v in _DT.items()}
_DT_NAMES.update({14: "bfloat16", 20: "resource", 21: "variant"})
# Typed value fields: field number -> (DataTypes it serves, NumPy reading).
_TYPED = {
    5: ("float32",), 6: ("float64",), 7: ("int32", "int16", "int8", "uint8", "uint16"),
    9: ("complex64",), 10: ("int64",), 11: ("bool",), 12: ("complex128",), 13: ("float16",),
    16: ("uint32",), 17: ("uint64",),
}
# The default cap on elements made by filling a shape from fewer stored values
# (TensorFlow repeats the last one): a few bytes can claim any shape.
MAX_FILLED_ELEMENTS = 1 << 24


def _dtype_name(dtype: Any) -> str:
    if dtype in (bytes, str, "string", "bytes", "str", object):
        return "string"
    name = getattr(dtype, "name", None) if not isinstance(dtype, (str, np.dtype)) else None
    try:
        name = name or np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"unsupported dtype {dtype!r}") from None
    if name in ("object",) or name.startswith(("bytes", "str")):
        return "string"
    name = {"float": "float32", "double": "float64", "half": "float16"}.get(name, name)
    if name not in _DT:
        raise TypeError(f"dtype {dtype!r} has no TensorFlow equivalent that serialize_tensor supports")
    return name


def serialize_tensor(array: Any) -> bytes:
    """TensorFlow's serialized ``TensorProto`` of ``array`` (byte-identical to ``tf.io.serialize_tensor``).

    Strings (``bytes``, ``str`` as UTF-8, object arrays of them) are stored per
    element; every other NumPy dtype TensorFlow has as raw little-endian bytes.
    """
    if isinstance(array, (bytes, str)):
        array = np.array(array.encode() if isinstance(array, str) else array, dtype=object)
    array = np.asarray(array)
    name = _dtype_name(array.dtype)
    shape = b"".join(len_field(2, b"\x08" + varint(d) if d else b"") for d in array.shape)
    out = bytearray(b"\x08" + varint(_DT[name]) + len_field(2, shape))
    if name == "string":
        for value in array.reshape(-1).tolist():
            if isinstance(value, str):
                value = value.encode()
            if not isinstance(value, (bytes, bytearray)):
                raise TypeError(f"a string tensor holds bytes or str, not {type(value).__name__}")
            out += len_field(8, bytes(value))
    elif array.size:
        out += len_field(4, np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes())
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    try:
        return read_varint(data, pos)
    except ValueError:
        raise ParseError("Could not parse `serialized` as TensorProto: bad varint") from None


def _fields(data: bytes):
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _read_varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ParseError(f"Could not parse `serialized` as TensorProto: wire type {wire}")
        if pos > len(data):
            raise ParseError("Could not parse `serialized` as TensorProto: truncated")
        yield number, wire, value


def _typed_values(name: str, chunks: list[tuple[int, bytes | int]]) -> np.ndarray:
    """Decodes the packed or unpacked values of a typed ``*_val`` field."""
    fixed = {"float32": "<f4", "float64": "<f8", "complex64": "<f4", "complex128": "<f8"}
    if name in fixed:
        raw = b"".join(v if isinstance(v, bytes) else b"" for _, v in chunks)
        values = np.frombuffer(raw, dtype=fixed[name])
        return values.view(np.dtype(name).newbyteorder("<")) if name.startswith("complex") else values
    ints: list[int] = []
    for wire, value in chunks:
        if wire == 0:
            ints.append(int(value))  # type: ignore[arg-type]
        else:
            pos = 0
            while pos < len(value):  # type: ignore[arg-type]
                v, pos = _read_varint(value, pos)  # type: ignore[arg-type]
                ints.append(v)
    if name == "float16":
        # half_val is an int32 field holding the bits; TensorFlow keeps the low 16.
        return (np.array(ints, dtype=np.uint64) & 0xFFFF).astype(np.uint16).view(np.float16)
    if name == "bool":
        return np.array(ints, dtype=bool)
    wrapped = np.array(ints, dtype=np.uint64)
    return wrapped.astype(np.dtype(name)) if name.startswith("uint") else wrapped.view(np.int64).astype(np.dtype(name))


def parse_tensor(serialized: bytes, out_type: Any, name: str | None = None, *,
                 max_elements: int = MAX_FILLED_ELEMENTS) -> np.ndarray:
    """Parses a serialized ``TensorProto`` (``tf.io.parse_tensor``) into a NumPy array.

    Args:
        serialized: The bytes ``tf.io.serialize_tensor`` (or ``serialize_tensor``) wrote.
        out_type: The expected dtype: a NumPy dtype or its name, a TensorFlow
            DType, or ``"string"``.
        name: TensorFlow's op name: accepted, and not used.
        max_elements: A tensor may store fewer values than its shape holds;
            TensorFlow then repeats the last one. A dozen bytes can so claim
            gigabytes, so filling stops at this many elements (16 Mi by
            default) with a ``ParseError`` naming the limit. Tensors
            whose values are all stored are not limited: their size is what
            the bytes hold.

    Raises:
        ParseError: On malformed bytes, a dtype that differs from the one
            stored, or a fill beyond ``max_elements``.
    """
    want = _dtype_name(out_type)
    data = bytes(serialized)
    stored = 0
    dims: list[int] = []
    content: bytes | None = None
    strings: list[bytes] = []
    typed: dict[int, list[tuple[int, Any]]] = {}
    for number, wire, value in _fields(data):
        if number == 1 and wire == 0:
            stored = int(value)
        elif number == 2 and wire == 2:
            for n, w, dim in _fields(value):
                if n == 2 and w == 2:
                    size = next((int(v) for k, ww, v in _fields(dim) if k == 1 and ww == 0), 0)
                    dims.append(size - (1 << 64) if size >= 1 << 63 else size)
        elif number == 4 and wire == 2:
            content = value
        elif number == 8 and wire == 2:
            strings.append(value)
        elif number in _TYPED:
            typed.setdefault(number, []).append((wire, value))
    stored_name = _DT_NAMES.get(stored, f"DataType {stored}")
    if stored_name != want:
        raise ParseError(f"Type mismatch between parsed tensor ({stored_name}) and dtype ({want})")
    if any(d < 0 for d in dims):
        raise ParseError(f"Could not parse `serialized` as TensorProto: unknown dimension in shape {dims}")
    count = math.prod(dims)
    shape = tuple(dims)
    if want == "string":
        values: np.ndarray = np.empty(len(strings), dtype=object)
        values[:] = strings
    elif content is not None:
        np_dtype = np.dtype(want).newbyteorder("<")
        if len(content) != count * np_dtype.itemsize:
            raise ParseError(
                f"Could not parse `serialized` as TensorProto: {len(content)} content bytes for shape {list(shape)} of {want}"
            )
        return np.frombuffer(content, dtype=np_dtype).astype(np.dtype(want)).reshape(shape)
    else:
        field = next((n for n, names in _TYPED.items() if want in names), None)
        values = _typed_values(want, typed.get(field, [])) if field else np.empty(0, np.dtype(want))
    if len(values) == count:
        return values.reshape(shape)
    if len(values) > count:
        raise ParseError(f"Could not parse `serialized` as TensorProto: {len(values)} values for shape {list(shape)}")
    if count > max_elements:
        raise ParseError(
            f"Could not parse `serialized` as TensorProto: {len(values)} stored values would be repeated to fill "
            f"shape {list(shape)} ({count} elements), beyond max_elements={max_elements}; pass a larger "
            "max_elements if the data is trusted"
        )
    filler = values[-1] if len(values) else (b"" if want == "string" else np.zeros((), np.dtype(want)))
    out = np.empty(count, dtype=values.dtype if want != "string" else object)
    out[: len(values)] = values
    out[len(values) :] = filler
    return out.reshape(shape)


# decode_raw's types: TensorFlow's (tf.io.decode_raw), and the unsigned ones it lacks.
_RAW_TYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "float32", "float64", "complex64", "complex128", "bfloat16")
# TensorFlow's names where NumPy's differ ("float" is float32 to TensorFlow, float64 to NumPy).
_TF_TYPE_NAMES = {"float": "float32", "double": "float64", "half": "float16"}


def _raw_dtype(out_type: Any) -> np.dtype:
    """The NumPy dtype of a ``decode_raw`` type: a TensorFlow DType, a NumPy dtype, or a name."""
    if isinstance(out_type, str):
        name = _TF_TYPE_NAMES.get(out_type.lower().removeprefix("tf."), out_type.lower().removeprefix("tf."))
    elif isinstance(getattr(out_type, "name", None), str) and not isinstance(out_type, np.dtype):
        name = out_type.name  # TensorFlow's DType objects
    else:
        try:
            name = np.dtype(out_type).name
        except TypeError:
            name = repr(out_type)
    if name not in _RAW_TYPES:
        raise TypeError(f"decode_raw's out_type is one of {', '.join(_RAW_TYPES)}, not {out_type!r}")
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise ImportError("bfloat16 needs ml_dtypes: pip install ml_dtypes") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def decode_raw(input_bytes: Any, out_type: Any, little_endian: bool = True, fixed_length: int | None = None,
               name: str | None = None) -> np.ndarray:
    """Byte strings read as arrays of numbers: ``tf.io.decode_raw``.

    Args:
        input_bytes: One byte string (``bytes``, ``bytearray``, ``memoryview``,
            ``str`` as UTF-8), or an array or nested list of them, of any shape:
            a string column of ``read_examples`` (an object array) goes in
            whole, copied in one call with the GIL released. A NumPy bytes array
            (dtype ``S``) is read by its cells, whole (NumPy drops trailing NULs
            from its elements, not from its cells).
        out_type: ``bool``, ``int8`` to ``int64``, ``uint8`` to ``uint64``,
            ``float16`` (``half``), ``float32`` (``float``), ``float64``
            (``double``), ``complex64``, ``complex128``, or ``bfloat16`` (with
            ml_dtypes); a name, a NumPy dtype or a TensorFlow DType.
        little_endian: Whether the bytes are little-endian (else each number,
            each part of a complex, is byte-swapped), as in TensorFlow.
        fixed_length: Cut or pad (with zeros) every string to this many bytes,
            a multiple of the type's size. Without it, every string must have
            one length, a multiple of the type's size.
        name: TensorFlow's op name: accepted, and not used.

    Returns:
        An array of shape ``input.shape + [n]``, ``n`` numbers per string.

    Raises:
        ValueError: For strings of unequal lengths (without ``fixed_length``),
            a length that is no multiple of the type's size, or a
            ``fixed_length`` that is not a positive multiple of it.
    """
    dtype = _raw_dtype(out_type)
    if fixed_length is not None:
        if isinstance(fixed_length, bool) or not isinstance(fixed_length, (int, np.integer)):
            raise TypeError(f"fixed_length must be an integer, not {type(fixed_length).__name__}")
        if fixed_length <= 0:
            raise ValueError(f"fixed_length ({fixed_length}) must be greater than zero")
        fixed_length = int(fixed_length)
    name = "bool" if dtype == np.bool_ else dtype.name
    if isinstance(input_bytes, (bytes, bytearray, memoryview, str)):
        shape: tuple[int, ...] = ()
        data, width = _native._join_raw([input_bytes], dtype.itemsize, name, fixed_length)
    elif isinstance(input_bytes, np.ndarray) and input_bytes.dtype.kind == "S":
        shape = input_bytes.shape
        cells = np.ascontiguousarray(input_bytes).view(np.uint8).reshape(input_bytes.size, input_bytes.itemsize)
        data, width = _native._join_raw(list(map(bytes, cells)), dtype.itemsize, name, fixed_length)
    else:
        values = np.asarray(input_bytes, dtype=object)
        shape = values.shape
        data, width = _native._join_raw(values.reshape(-1).tolist(), dtype.itemsize, name, fixed_length)
    count = width // dtype.itemsize
    if dtype == np.bool_:
        out = data != 0  # any byte but 0 is True, as TensorFlow reads a bool
    elif little_endian or dtype.itemsize == 1:
        out = data.view(dtype.newbyteorder("<"))
        out = out if out.dtype.isnative else out.astype(dtype)
    else:
        out = data.view(dtype.newbyteorder(">")).astype(dtype)
    return out.reshape(shape + (count,))
