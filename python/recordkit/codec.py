"""The dict codec and the tutorial's helpers: Python values in, serialized messages out, and back.

Values are Python scalars, bytes and str (UTF-8), flat lists of them, and 1-D
NumPy arrays (or tensors with ``.numpy()``). What kind of list a value becomes
follows from its type:

- ``bytes``/``str`` -> ``bytes_list``; ``bool``/ints -> ``int64_list`` (bools as 0/1);
  floats -> ``float_list`` (float32, as TensorFlow stores them);
- for OFRecord, the NumPy dtype decides among all five kinds: ``int32``,
  ``int64``, ``float32``, ``float64`` (Python floats) and bytes.

A value that cannot be stored (a dict, a set, a nested list, a 2-D array)
raises ``TypeError`` naming the feature.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from recordkit import _native, ofrecord, train
from recordkit.errors import ParseError

__all__ = [
    "int64_feature",
    "float_feature",
    "bytes_feature",
    "double_feature",
    "int32_feature",
    "encode_example",
    "decode_example",
    "decode_json_example",
    "encode_sequence_example",
    "decode_sequence_example",
    "encode_ofrecord",
    "decode_ofrecord",
    "buffer_bytes",
    "check_float32_range",
]

_INT64 = np.iinfo(np.int64)


def _unwrap(value: Any) -> Any:
    """Tensors (TensorFlow's, torch's, JAX's) as NumPy: anything with ``.numpy()``."""
    numpy = getattr(value, "numpy", None)
    if callable(numpy) and not isinstance(value, np.ndarray):
        return numpy()
    return value


_SCALARS = (bytes, str, np.bytes_, np.str_, bool, int, float, np.generic)


def buffer_bytes(value: Any, what: str, default: Any = None) -> Any:
    """The bytes of ``value`` when it is a byte buffer (``bytearray``, a 1-D
    ``memoryview`` of single bytes, or any such object with the buffer protocol);
    ``default`` for an object without the buffer protocol. A buffer of wider items
    or more dimensions is a ``TypeError`` that starts with ``what``."""
    if isinstance(value, (str, np.ndarray)):
        return default
    try:
        view = memoryview(value)
    except TypeError:
        return default
    with view:
        if view.ndim == 1 and view.itemsize == 1:
            return view.tobytes()
        raise TypeError(f"{what}: a buffer of {view.ndim}-D items of {view.itemsize} bytes ({view.format!r}) "
                        f"({type(value).__name__}); pass np.asarray(...) for numbers, or .tobytes() for bytes")


def _flat(value: Any, what: str) -> list | np.ndarray:
    """A scalar, a flat sequence or a 0-/1-D array, as a flat list or array.

    Anything else (a dict, a set, a nested list, a 2-D array) is a
    ``TypeError`` naming ``what``: a feature holds one flat list, and
    flattening a nested value silently would lose its shape.
    """
    value = _unwrap(value)
    if isinstance(value, np.ndarray):
        if value.ndim > 1:
            raise TypeError(f"{what}: a {value.ndim}-D array of shape {value.shape}; a feature holds one flat "
                            "list: pass array.reshape(-1), or rk.serialize_tensor(array) to keep the shape")
        return value.reshape(-1)
    if isinstance(value, _SCALARS):
        return [value]
    as_bytes = buffer_bytes(value, what)
    if as_bytes is not None:
        return [as_bytes]
    if isinstance(value, (Mapping, set, frozenset)) or not isinstance(value, Iterable):
        raise TypeError(f"{what}: cannot store {_shown(value)} ({type(value).__name__}); "
                        "a feature holds a scalar, a flat list or a 1-D array")
    items = [item if isinstance(item, _SCALARS) else buffer_bytes(item, what, item) for item in value]
    for item in items:
        if not isinstance(item, _SCALARS):
            raise TypeError(f"{what}: cannot store {_shown(value)}: it holds {_shown(item)} "
                            f"({type(item).__name__}), and a feature holds one flat list of numbers or strings")
    return items


def _shown(value: Any) -> str:
    """``repr(value)``, cut short for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_bytes(v: Any) -> bool:
    return isinstance(v, (bytes, str, np.bytes_, np.str_, bytearray))


def _is_int(v: Any) -> bool:
    return isinstance(v, (bool, int, np.bool_, np.integer))


def _is_float(v: Any) -> bool:
    return isinstance(v, (float, np.floating))


def _as_bytes(values: Iterable[Any], what: str) -> list[bytes]:
    try:
        return [str.encode(v) if isinstance(v, str) else bytes(v) for v in values]
    except UnicodeEncodeError as error:
        raise ValueError(f"{what}: {error.object!r} has no UTF-8 form (it holds a lone surrogate, as a name "
                         'decoded with errors="surrogateescape" does): encode it to bytes yourself') from None


def _int64_array(values: Any, helper: str) -> np.ndarray:
    if isinstance(values, np.ndarray):
        if values.dtype.kind == "b":
            return values.astype(np.int64)
        if values.dtype.kind in "iu":
            if values.dtype == np.uint64 and values.size and values.max() > _INT64.max:
                raise ValueError(f"Value out of range: {values.max()} does not fit an int64 ({helper})")
            return values.astype(np.int64)
        raise TypeError(f"{helper} takes integers, not an array of {values.dtype}; use {_helper_for(values)}")
    for v in values:
        if not _is_int(v):
            raise TypeError(f"{helper} takes integers, not {v!r} ({type(v).__name__}); use {_helper_for(v)}")
        if not _INT64.min <= int(v) <= _INT64.max:
            raise ValueError(f"Value out of range: {v} does not fit an int64 ({helper})")
    return np.array([int(v) for v in values], dtype=np.int64)


def _float_array(values: Any, helper: str, dtype: Any = np.float32) -> np.ndarray:
    if isinstance(values, np.ndarray):
        if values.dtype.kind not in "biuf":
            raise TypeError(f"{helper} takes numbers, not an array of {values.dtype}; use {_helper_for(values)}")
        wide = values
    else:
        for v in values:
            if not (_is_int(v) or _is_float(v)):
                raise TypeError(f"{helper} takes numbers, not {v!r} ({type(v).__name__}); use {_helper_for(v)}")
        wide = np.array([float(v) for v in values], dtype=np.float64)
    with np.errstate(over="ignore"):
        narrowed = wide.astype(dtype)
    return check_float32_range(wide, narrowed, helper) if dtype == np.float32 else narrowed


def check_float32_range(wide: np.ndarray, narrowed: np.ndarray, what: str) -> np.ndarray:
    """``narrowed`` (``wide`` as float32), unless a finite value became inf: then a
    ``ValueError`` that starts with ``what``. A float32 list never holds a silent inf."""
    overflow = np.isinf(narrowed)
    if overflow.any() and (overflow := overflow & np.isfinite(wide)).any():
        value = wide[int(np.argmax(overflow))]
        raise ValueError(f"{what}: {float(value)!r} is beyond float32's range (about ±3.4e38), and "
                         "tf.train.Example stores floats as float32")
    return narrowed


def _bytes_list(values: Any, helper: str) -> list[bytes]:
    if isinstance(values, np.ndarray) and values.dtype.kind not in "OSU":
        raise TypeError(f"{helper} takes bytes or str, not an array of {values.dtype}; use {_helper_for(values)}")
    for v in values:
        if not _is_bytes(v):
            raise TypeError(f"{helper} takes bytes or str, not {v!r} ({type(v).__name__}); use {_helper_for(v)}")
    return _as_bytes(values, helper)


def _helper_for(value: Any) -> str:
    dtype = value.dtype if isinstance(value, np.ndarray) else None
    if (dtype is not None and dtype.kind == "f") or _is_float(value):
        return "float_feature"
    if (dtype is not None and dtype.kind in "biu") or _is_int(value):
        return "int64_feature"
    if (dtype is not None and dtype.kind in "OSU") or _is_bytes(value):
        return "bytes_feature"
    return "a helper that matches the value"


# Plain values (ints, floats, bytes, str, lists of them, 1-D arrays) take one call
# into Rust; anything else is checked and converted here, and named when it is wrong.

def int64_feature(value: Any) -> train.Feature:
    """A ``Feature`` with an ``int64_list``: ints, bools (as 0/1), or a list/array of them."""
    return _native._feature_of_plain("int64", value) or train.Feature(
        int64_list=train.Int64List(value=_int64_array(_flat(value, "int64_feature"), "int64_feature")))


def float_feature(value: Any) -> train.Feature:
    """A ``Feature`` with a ``float_list`` (float32): numbers, or a list/array of them."""
    return _native._feature_of_plain("float", value) or train.Feature(
        float_list=train.FloatList(value=_float_array(_flat(value, "float_feature"), "float_feature")))


def bytes_feature(value: Any) -> train.Feature:
    """A ``Feature`` with a ``bytes_list``: bytes, str (as UTF-8), or a list of them."""
    return _native._feature_of_plain("bytes", value) or train.Feature(
        bytes_list=train.BytesList(value=_bytes_list(_flat(value, "bytes_feature"), "bytes_feature")))


def double_feature(value: Any) -> ofrecord.Feature:
    """An OFRecord ``Feature`` with a ``double_list`` (float64)."""
    return ofrecord.Feature(double_list=ofrecord.DoubleList(value=_float_array(_flat(value, "double_feature"), "double_feature", np.float64)))


def int32_feature(value: Any) -> ofrecord.Feature:
    """An OFRecord ``Feature`` with an ``int32_list``."""
    array = _int64_array(_flat(value, "int32_feature"), "int32_feature")
    if array.size and (array.min() < -(1 << 31) or array.max() >= 1 << 31):
        raise ValueError(f"Value out of range: {array[(array < -(1 << 31)) | (array >= 1 << 31)][0]} does not fit an int32")
    return ofrecord.Feature(int32_list=ofrecord.Int32List(value=array.astype(np.int32)))


def _feature_entry(key: str, feature: Any) -> tuple[str, str | None, Any]:
    """``(key, kind, values)`` for the encoder from a Feature message (of either schema)."""
    kind = feature.WhichOneof("kind")
    return key, kind, getattr(feature, kind).values_array() if kind is not None else []


def _tf_entry(key: str, value: Any) -> tuple[str, str | None, Any]:
    """``(key, kind, values)`` for ``encode_features`` from a Python value."""
    if isinstance(value, train.Feature):
        return _feature_entry(key, value)
    flat = _flat(value, f"feature {key!r}")
    if isinstance(flat, np.ndarray):
        kind = flat.dtype.kind
        if kind in "OSU":
            return key, "bytes_list", _bytes_list(flat, f"feature {key!r}")
        if kind in "biu":
            return key, "int64_list", _int64_array(flat, f"feature {key!r}")
        if kind == "f":
            return key, "float_list", _float_array(flat, f"feature {key!r}")
        raise TypeError(f"feature {key!r}: cannot store an array of {flat.dtype}")
    if not flat:
        raise ValueError(
            f"feature {key!r}: an empty list has no kind; pass a typed empty array "
            "(np.array([], np.int64), np.array([], np.float32), np.array([], object)) or a Feature"
        )
    if all(_is_bytes(v) for v in flat):
        return key, "bytes_list", _as_bytes(flat, f"feature {key!r}")
    if all(_is_int(v) for v in flat):
        return key, "int64_list", _int64_array(flat, f"feature {key!r}")
    if all(_is_int(v) or _is_float(v) for v in flat):
        return key, "float_list", _float_array(flat, f"feature {key!r}")
    raise TypeError(f"feature {key!r}: cannot mix {sorted({type(v).__name__ for v in flat})} in one list")


def _entries(mapping: Mapping[str, Any], entry: Any) -> list:
    out = []
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise TypeError(f"feature names are str, not {type(key).__name__} ({key!r})")
        if value is not None:
            out.append(entry(key, value))
    return out


def encode_example(mapping: Mapping[str, Any]) -> bytes:
    """A serialized ``tf.train.Example`` from ``{name: value}`` (None values are left out).

    ```python
    >>> decode_example(encode_example({"label": 1, "score": [0.5, 0.7], "name": "cat"}))["name"]
    [b'cat']
    ```
    """
    return _native._encode_plain_example(mapping) or _native.encode_features(
        _entries(mapping, _tf_entry), "tensorflow", "example")


def decode_json_example(json_examples: Any, name: str | None = None) -> Any:
    """Examples in protobuf's JSON format as serialized Examples: ``tf.io.decode_json_example``.

    Args:
        json_examples: One JSON text (``str`` or ``bytes``), or an array or
            nested list of them.
        name: TensorFlow's op name: accepted, and not used.

    Returns:
        The serialized Example (``bytes``) for one text; for an array, an
        object array of ``bytes`` of the same shape.

    Raises:
        ParseError: For a text that is not an Example in JSON (``.index`` is
            its position in the flattened input).
    """
    if isinstance(json_examples, (str, bytes)):
        return train.Example.from_json(json_examples).SerializeToString()
    texts = np.asarray(json_examples, dtype=object)
    out = np.empty(texts.shape, dtype=object)
    for i, text in enumerate(texts.reshape(-1)):
        try:
            out.reshape(-1)[i] = train.Example.from_json(text).SerializeToString()
        except ParseError as error:
            raise ParseError(f"Index: {i}. {error}", index=i) from None
    return out


# One call into Rust: the dict, its arrays and lists are made as the bytes are read.
decode_example = _native.decode_example


def encode_sequence_example(context: Mapping[str, Any] | None, feature_lists: Mapping[str, Sequence[Any]] | None) -> bytes:
    """A serialized ``tf.train.SequenceExample``.

    Args:
        context: ``{name: value}`` as for ``encode_example``.
        feature_lists: ``{name: steps}``, each step a value; all steps of a
            list get the same kind (``[[1, 2], [3]]`` is two int64 steps).
    """
    lists = []
    for key, steps in (feature_lists or {}).items():
        steps = list(_unwrap(steps)) if not isinstance(steps, np.ndarray) else list(steps)
        encoded = []
        kinds = set()
        for step in steps:
            flat = _flat(step, f"feature list {key!r}")
            if isinstance(flat, list) and not flat:
                encoded.append(None)  # kind decided by the other steps
                continue
            _, kind, values = _tf_entry(key, flat)
            kinds.add(kind)
            encoded.append((kind, values))
        if "float_list" in kinds and "int64_list" in kinds:
            kinds.discard("int64_list")
            encoded = [("float_list", np.asarray(e[1], np.float32)) if e and e[0] == "int64_list" else e for e in encoded]
        if len(kinds) > 1:
            raise TypeError(f"feature list {key!r}: steps of different kinds {sorted(kinds)}")
        if None in encoded and not kinds:
            raise ValueError(f"feature list {key!r}: empty steps have no kind; pass typed empty arrays")
        kind = kinds.pop() if kinds else None
        empty = [] if kind == "bytes_list" else np.array([], dtype=np.int64 if kind == "int64_list" else np.float32)
        lists.append((key, [e if e is not None else (kind, empty) for e in encoded]))
    return _native.encode_sequence(_entries(context or {}, _tf_entry), lists)


def decode_sequence_example(data: bytes) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """``(context, feature_lists)`` from a serialized SequenceExample; each feature list is a list of steps."""
    context, lists = _native.decode_sequence(data)
    return (
        {k: v if kind is not None else None for k, (kind, v) in context.items()},
        {k: [v if kind is not None else None for kind, v in steps] for k, steps in lists.items()},
    )


_OF_KINDS = {"i4": "int32_list", "i8": "int64_list", "f4": "float_list", "f8": "double_list"}
_OF_DTYPES = {"int32_list": np.int32, "int64_list": np.int64, "float_list": np.float32, "double_list": np.float64}


def _of_entry(key: str, value: Any) -> tuple[str, str | None, Any]:
    if isinstance(value, ofrecord.Feature):
        return _feature_entry(key, value)
    flat = _flat(value, f"feature {key!r}")
    if isinstance(flat, list):
        if flat and all(_is_bytes(v) for v in flat):
            return key, "bytes_list", _as_bytes(flat, f"feature {key!r}")
        if not flat:
            raise ValueError(f"feature {key!r}: an empty list has no kind; pass a typed empty array")
        flat = np.asarray(flat)
    if flat.dtype.kind in "OSU":
        return key, "bytes_list", _bytes_list(flat, f"feature {key!r}")
    if flat.dtype.kind == "b":
        flat = flat.astype(np.int64)
    code = f"{flat.dtype.kind}{flat.dtype.itemsize}".replace("u", "i")
    if code in ("i1", "i2"):
        code = "i4"  # small integers widen to int32
    kind = _OF_KINDS.get(code)
    if kind is None:
        raise TypeError(f"feature {key!r}: OFRecord stores int32, int64, float32, float64 and bytes, not {flat.dtype}")
    return key, kind, flat.astype(_OF_DTYPES[kind])


def encode_ofrecord(mapping: Mapping[str, Any]) -> bytes:
    """A serialized OneFlow ``OFRecord`` from ``{name: value}``; the NumPy dtype picks the list kind."""
    return _native.encode_features(_entries(mapping, _of_entry), "oneflow", "map")


def decode_ofrecord(data: bytes) -> dict[str, Any]:
    """``{name: values}`` from a serialized OFRecord: arrays of ``int32``, ``int64``,
    ``float32``, ``float64``, or lists of ``bytes``."""
    return _native._decode_feature_dict(data, "oneflow", "map")
