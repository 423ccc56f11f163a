"""The machinery behind ``recordkit.train`` and ``recordkit.ofrecord``: protobuf-like
message classes without protobuf.

Repeated fields coerce what goes in, as protobuf's containers do (and are more
forgiving about ``bool``, which protobuf 7 refuses). Maps create entries on
access. Reading an unset sub-message gives an empty one; changing it sets it
(and, for a oneof, clears the other members). Bytes on the wire are encoded
and decoded by the Rust core.
"""

from __future__ import annotations

import math
from typing import Any, Callable, ClassVar, Iterable

import numpy as np

from recordkit import _native

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


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


# --- coercion of values -------------------------------------------------------------


def _describe(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def coerce_int(value: Any, lo: int = _INT64_MIN, hi: int = _INT64_MAX, kind: str = "Int64List") -> int:
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        v = int(value)
        if not lo <= v <= hi:
            raise ValueError(f"Value out of range: {v} does not fit a {kind}")
        return v
    raise TypeError(f"{_describe(value)} is not an integer: a {kind} holds integers (use a float list for {value!r})")


def coerce_int32(value: Any) -> int:
    return coerce_int(value, _INT32_MIN, _INT32_MAX, "Int32List")


def coerce_float32(value: Any) -> float:
    if isinstance(value, np.float32) and value != value:
        # A float32 NaN stays a float32 scalar: through a Python float, x86 would
        # quiet a signalling NaN (0x7f800010 -> 0x7fc00010). protobuf and
        # TensorFlow keep the bits, and so must a round trip here.
        return value  # type: ignore[return-value]
    if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
        with np.errstate(over="ignore"):
            narrowed = float(np.float32(value))  # stored as float32, as protobuf does
        if math.isinf(narrowed) and math.isfinite(value):
            # protobuf stores inf here; recordkit never stores a silent inf.
            raise ValueError(f"{value!r} is beyond float32's range (about ±3.4e38), and a FloatList holds float32")
        return narrowed
    raise TypeError(f"{_describe(value)} is not a number: a FloatList holds numbers")


def coerce_float64(value: Any) -> float:
    if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
        return float(value)
    raise TypeError(f"{_describe(value)} is not a number: a DoubleList holds numbers")


def coerce_bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{_describe(value)} is not bytes: a BytesList holds bytes (str is stored as UTF-8)")


# --- text format (protobuf's, as the upb backend prints it) -------------------------

_ESCAPES = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x22: '\\"', 0x27: "\\'", 0x5C: "\\\\"}


def text_bytes(value: bytes) -> str:
    out = []
    for b in value:
        if b in _ESCAPES:
            out.append(_ESCAPES[b])
        elif b < 0x20 or b >= 0x7F:
            out.append(f"\\{b:03o}")
        else:
            out.append(chr(b))
    return '"' + "".join(out) + '"'


def _special(value: float) -> str | None:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return None


def text_float32(value: float) -> str:
    special = _special(value)
    if special:
        return special
    short = "%.6g" % value
    return short if float(np.float32(float(short))) == value else "%.9g" % value


def text_float64(value: float) -> str:
    special = _special(value)
    if special:
        return special
    short = "%.15g" % value
    return short if float(short) == value else "%.17g" % value


# --- containers ------------------------------------------------------------------------


class Repeated(list):
    """A list that coerces its items and tells its owner when it changes."""

    __slots__ = ("_coerce", "_changed")

    def __init__(self, coerce: Callable[[Any], Any], values: Iterable[Any] = (), changed: Callable[[], None] | None = None):
        super().__init__(coerce(v) for v in _iterable(values))
        self._coerce = coerce
        self._changed = changed

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed()

    def append(self, value: Any) -> None:
        super().append(self._coerce(value))
        self._notify()

    def extend(self, values: Iterable[Any]) -> None:
        super().extend(self._coerce(v) for v in _iterable(values))
        self._notify()

    def insert(self, index: Any, value: Any) -> None:
        super().insert(index, self._coerce(value))
        self._notify()

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, slice):
            super().__setitem__(index, [self._coerce(v) for v in _iterable(value)])
        else:
            super().__setitem__(index, self._coerce(value))
        self._notify()

    def __iadd__(self, values: Iterable[Any]) -> "Repeated":
        self.extend(values)
        return self

    def __reduce__(self):  # pickles as a plain list
        return (list, (list(self),))


def python_values(values: np.ndarray) -> list[Any]:
    """A 1-D array's items as Python values, except that float32 NaNs stay float32
    scalars: as a Python float, x86 would quiet a signalling NaN and change its bits."""
    if values.dtype == object:
        return list(values)
    items = values.tolist()
    if values.dtype == np.float32:
        for i in np.flatnonzero(np.isnan(values)):
            items[i] = values[i]
    return items


def _iterable(values: Any) -> Iterable[Any]:
    if isinstance(values, np.ndarray):
        return python_values(values.reshape(-1))
    if isinstance(values, (str, bytes)):
        raise TypeError(f"expected a list of values, not a single {type(values).__name__}; wrap it in a list")
    return values


class Message:
    """Common protobuf-style methods. Subclasses define ``_serialize``, ``_parse`` and ``_text``."""

    __slots__ = ("_owner",)
    _owner: Any

    def SerializeToString(self, deterministic: bool | None = None) -> bytes:
        """The message's bytes: protobuf's deterministic serialization (map keys sorted)."""
        return self._serialize()

    def ParseFromString(self, data: bytes) -> int:
        """Replaces the contents with the message in ``data``; returns ``len(data)``."""
        self.Clear()
        self._parse(bytes(data))
        self._notify()
        return len(data)

    def MergeFromString(self, data: bytes) -> int:
        """Merges the message in ``data`` into this one (protobuf's merge: parse the concatenation)."""
        return self.ParseFromString(self._serialize() + bytes(data))

    @classmethod
    def FromString(cls, data: bytes) -> Any:
        """A new message parsed from ``data``."""
        message = cls()
        message._parse(bytes(data))
        return message

    def CopyFrom(self, other: "Message") -> None:
        """Makes this message a copy of ``other``."""
        if type(other) is not type(self):
            raise TypeError(f"CopyFrom needs a {type(self).__name__}, not {type(other).__name__}")
        self.ParseFromString(other._serialize())

    def MergeFrom(self, other: "Message") -> None:
        """Merges ``other`` into this message."""
        if type(other) is not type(self):
            raise TypeError(f"MergeFrom needs a {type(self).__name__}, not {type(other).__name__}")
        self.MergeFromString(other._serialize())

    def ByteSize(self) -> int:
        """The size of the serialized message."""
        return len(self._serialize())

    def Clear(self) -> None:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    def _notify(self) -> None:
        owner = getattr(self, "_owner", None)
        if owner is not None:
            owner(self)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._serialize() == other._serialize()  # type: ignore[attr-defined]

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]  # mutable, as protobuf messages

    def __str__(self) -> str:
        lines = self._text()
        return "\n".join(lines) + "\n" if lines else ""

    def __repr__(self) -> str:
        return str(self)

    def __reduce__(self):
        return (type(self).FromString, (self._serialize(),))

    def _serialize(self) -> bytes:  # pragma: no cover
        raise NotImplementedError

    def _parse(self, data: bytes) -> None:  # pragma: no cover
        raise NotImplementedError

    def _text(self) -> list[str]:  # pragma: no cover
        raise NotImplementedError


def indent(lines: list[str], by: int = 2) -> list[str]:
    pad = " " * by
    return [pad + line for line in lines]


class ListMessage(Message):
    """``Int64List``, ``FloatList``, ``BytesList`` ... : one repeated ``value`` field."""

    __slots__ = ("_value",)
    _KIND: ClassVar[str]
    _COERCE: ClassVar[Callable[[Any], Any]]
    _DTYPE: ClassVar[Any]
    _FORMAT: ClassVar[Callable[[Any], str]]

    def __init__(self, value: Iterable[Any] = ()) -> None:
        self._owner = None
        self._value = Repeated(type(self)._COERCE, value, self._notify)

    @property
    def value(self) -> Repeated:
        """The values (a list that checks what goes in)."""
        return self._value

    @value.setter
    def value(self, values: Iterable[Any]) -> None:
        self._value[:] = values

    def Clear(self) -> None:
        """Removes every value."""
        list.clear(self._value)

    def values_array(self) -> Any:
        """The values as a NumPy array (or a list of bytes), ready for the encoder."""
        if self._DTYPE is None:
            return list(self._value)
        return np.array(self._value, dtype=self._DTYPE)

    def _serialize(self) -> bytes:
        return _native.encode_list(self._KIND, self.values_array())

    def _parse(self, data: bytes) -> None:
        values = _native.decode_list(data, self._KIND)
        list.extend(self._value, python_values(values) if isinstance(values, np.ndarray) else values)

    def _text(self) -> list[str]:
        fmt = type(self)._FORMAT
        return [f"value: {fmt(v)}" for v in self._value]


class OneofFeature(Message):
    """A Feature: a oneof ``kind`` over list messages."""

    __slots__ = ("_kind", "_list")
    _KINDS: ClassVar[dict[str, type[ListMessage]]]
    _SCHEMA: ClassVar[str]

    def __init__(self, **kinds: Any) -> None:
        self._owner = None
        self._kind: str | None = None
        self._list: ListMessage | None = None
        for name, value in kinds.items():
            if name not in self._KINDS:
                raise TypeError(f"{type(self).__name__} has no field {name!r}; it has {', '.join(self._KINDS)}")
            setattr(self, name, value)

    def WhichOneof(self, oneof_group: str) -> str | None:
        """The name of the list that is set (``"int64_list"`` ...), or None."""
        if oneof_group != "kind":
            raise ValueError(f"{type(self).__name__} has no oneof {oneof_group!r}; it has 'kind'")
        return self._kind

    def HasField(self, name: str) -> bool:
        """Whether list ``name`` (or the oneof ``"kind"``) is set."""
        if name == "kind":
            return self._kind is not None
        if name not in self._KINDS:
            raise ValueError(f"{type(self).__name__} has no field {name!r}")
        return self._kind == name

    def ClearField(self, name: str) -> None:
        """Unsets list ``name`` (or whichever is set, for ``"kind"``)."""
        if name == "kind" or name == self._kind:
            self._kind, self._list = None, None

    def Clear(self) -> None:
        """Unsets the kind."""
        self._kind, self._list = None, None

    def _get(self, name: str) -> ListMessage:
        if self._kind == name:
            assert self._list is not None
            return self._list
        # An unset member reads as an empty list; changing it sets it.
        child = self._KINDS[name]()
        child._owner = lambda changed, name=name: self._set(name, changed)
        return child

    def _set(self, name: str, value: Any) -> None:
        cls = self._KINDS[name]
        if isinstance(value, cls):
            child = value
        elif isinstance(value, ListMessage):
            raise TypeError(f"{name} must be a {cls.__name__}, not {type(value).__name__}")
        else:
            child = cls(value)  # also accept a plain list of values
        child._owner = lambda changed, name=name: self._set(name, changed)
        self._kind, self._list = name, child
        self._notify()

    @classmethod
    def converted(cls, other: "OneofFeature") -> "OneofFeature":
        """A Feature of this class holding ``other``'s list (TensorFlow's and
        OneFlow's share the kind names ``bytes_list``, ``float_list``, ``int64_list``)."""
        kind, values = other.kind_and_values
        if kind is not None and kind not in cls._KINDS:
            raise TypeError(f"{cls.__name__} cannot hold a {kind}")
        feature = cls()
        feature._load(kind, values)
        return feature

    @property
    def kind_and_values(self) -> tuple[str | None, Any]:
        """``(kind name, values for the encoder)``."""
        if self._list is None:
            return None, []
        return self._kind, self._list.values_array()

    def _serialize(self) -> bytes:
        kind, values = self.kind_and_values
        return _native.encode_feature(kind, values, self._SCHEMA)

    def _parse(self, data: bytes) -> None:
        self._load(*_native.decode_feature(data, self._SCHEMA))

    def _load(self, kind: str | None, values: Any) -> None:
        if kind is None:
            self._kind, self._list = None, None
            return
        child = self._KINDS[kind]()
        list.extend(child._value, python_values(values) if isinstance(values, np.ndarray) else values)
        child._owner = lambda changed, name=kind: self._set(name, changed)
        self._kind, self._list = kind, child

    def _text(self) -> list[str]:
        if self._list is None:
            return []
        return [f"{self._kind} {{", *indent(self._list._text()), "}"]


def _add_kind_properties(cls: type[OneofFeature]) -> type[OneofFeature]:
    for name, list_cls in cls._KINDS.items():
        def getter(self: OneofFeature, name: str = name) -> ListMessage:
            return self._get(name)

        def setter(self: OneofFeature, value: Any, name: str = name) -> None:
            self._set(name, value)

        setattr(cls, name, property(getter, setter, doc=f"The {list_cls.__name__}, if this Feature holds one."))
    return cls


class MessageMap(dict):
    """``map<string, Message>``: reading a missing key creates its entry, as in protobuf."""

    def __init__(self, factory: Callable[[], Message], changed: Callable[[], None], items: Any = None) -> None:
        super().__init__()
        self._factory = factory
        self._changed = changed
        if items:
            for key, value in dict(items).items():
                self[key] = value

    def _adopt(self, value: Message) -> Message:
        value._owner = lambda _: self._changed()
        return value

    def __missing__(self, key: str) -> Message:
        if not isinstance(key, str):
            raise TypeError(f"map keys are str, not {type(key).__name__}")
        value = self._adopt(self._factory())
        super().__setitem__(key, value)
        self._changed()
        return value

    def __setitem__(self, key: str, value: Message) -> None:
        if not isinstance(key, str):
            raise TypeError(f"map keys are str, not {type(key).__name__}")
        expected = type(self._factory())
        if not isinstance(value, expected) and isinstance(value, OneofFeature) and issubclass(expected, OneofFeature):
            value = expected.converted(value)
        if not isinstance(value, expected):
            raise TypeError(f"map values are {expected.__name__}, not {type(value).__name__}")
        super().__setitem__(key, self._adopt(value))
        self._changed()

    def get_or_create(self, key: str) -> Message:
        """The entry for ``key``, created if missing."""
        return self[key]

    def __reduce__(self):  # pickles as a plain dict
        return (dict, (dict(self),))


class RepeatedMessages(list):
    """A repeated message field: a list with protobuf's ``add()``."""

    def __init__(self, factory: Callable[..., Message], changed: Callable[[], None], items: Iterable[Message] = ()) -> None:
        super().__init__()
        self._factory = factory
        self._changed = changed
        for item in items:
            self.append(item)

    def _adopt(self, value: Message) -> Message:
        expected = type(self._factory())
        if not isinstance(value, expected):
            raise TypeError(f"items are {expected.__name__}, not {type(value).__name__}")
        value._owner = lambda _: self._changed()
        return value

    def add(self, **fields: Any) -> Message:
        """Appends a new message built from ``fields`` and returns it."""
        value = self._factory(**fields)
        self.append(value)
        return value

    def append(self, value: Message) -> None:
        super().append(self._adopt(value))
        self._changed()

    def extend(self, values: Iterable[Message]) -> None:
        for value in values:
            self.append(value)

    def __reduce__(self):
        return (list, (list(self),))


def wire_key_order(key: str) -> tuple[int, ...]:
    """Sort key for map entries on the wire: the order ``map_key_order`` in the
    Rust core gives (upb's: byte-wise, a longer key before its own prefix)."""
    return (*key.encode(), 256)


def map_text(field: str, entries: dict, value_text: Callable[[Any], list[str]]) -> list[str]:
    """Text of a map field: one block per entry, keys in ascending order."""
    lines: list[str] = []
    for key in sorted(entries, key=lambda k: k.encode()):
        lines += [f"{field} {{", f"  key: {text_bytes(key.encode())}", "  value {", *indent(value_text(entries[key]), 4), "  }", "}"]
    return lines


def feature_map_entries(features: dict) -> list[tuple[str, str | None, Any]]:
    """``[(key, kind, values)]`` for the encoder."""
    return [(key, *feature.kind_and_values) for key, feature in features.items()]


class FeatureMap(Message):
    """A ``map<string, Feature>`` message: TensorFlow's ``Features`` or OneFlow's ``OFRecord``."""

    __slots__ = ("_feature",)
    _FEATURE: ClassVar[type[OneofFeature]]
    _SCHEMA: ClassVar[str]

    def __init__(self, feature: Any = None) -> None:
        self._owner = None
        self._feature = MessageMap(self._FEATURE, self._notify, feature)

    @property
    def feature(self) -> MessageMap:
        """Name to Feature; reading a missing name creates it."""
        return self._feature

    @feature.setter
    def feature(self, value: Any) -> None:
        dict.clear(self._feature)
        for key, item in dict(value).items():
            self._feature[key] = item

    def Clear(self) -> None:
        """Removes every feature."""
        dict.clear(self._feature)

    def _serialize(self) -> bytes:
        return _native.encode_features(feature_map_entries(self._feature), self._SCHEMA, "map")

    def _parse(self, data: bytes) -> None:
        self._load(_native.decode_features(data, self._SCHEMA, "map"))

    def _load(self, decoded: Any) -> None:
        for key, (kind, values) in decoded.items():
            feature = self._FEATURE()
            feature._load(kind, values)
            dict.__setitem__(self._feature, key, self._feature._adopt(feature))

    def _text(self) -> list[str]:
        return map_text("feature", self._feature, lambda f: f._text())
