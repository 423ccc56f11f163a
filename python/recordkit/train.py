"""``tf.train``'s messages without TensorFlow or protobuf: ``Example``, ``Feature`` and the rest.

They behave like the protobuf classes the TensorFlow tutorial uses::

    example = recordkit.train.Example(features=recordkit.train.Features(feature={
        "label": recordkit.train.Feature(int64_list=recordkit.train.Int64List(value=[1]))}))
    data = example.SerializeToString()        # protobuf's deterministic bytes
    recordkit.train.Example.FromString(data) == example
    print(example)                             # protobuf text format, keys ascending
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from recordkit import _native
from recordkit.errors import ParseError
from recordkit._messages import (
    FeatureMap,
    ListMessage,
    Message,
    MessageMap,
    OneofFeature,
    RepeatedMessages,
    _add_kind_properties,
    coerce_bytes,
    coerce_float32,
    coerce_int,
    feature_map_entries,
    indent,
    len_field,
    map_text,
    read_varint,
    text_bytes,
    text_float32,
    wire_key_order,
)

__all__ = [
    "BytesList",
    "FloatList",
    "Int64List",
    "Feature",
    "Features",
    "Example",
    "FeatureList",
    "FeatureLists",
    "SequenceExample",
]


class BytesList(ListMessage):
    """``tf.train.BytesList``: ``value`` is a list of ``bytes`` (``str`` is stored as UTF-8)."""

    __slots__ = ()
    _KIND = "bytes_list"
    _COERCE = staticmethod(coerce_bytes)
    _DTYPE = None
    _FORMAT = staticmethod(text_bytes)


class FloatList(ListMessage):
    """``tf.train.FloatList``: ``value`` is a list of floats, stored as float32."""

    __slots__ = ()
    _KIND = "float_list"
    _COERCE = staticmethod(coerce_float32)
    _DTYPE = "float32"
    _FORMAT = staticmethod(text_float32)


class Int64List(ListMessage):
    """``tf.train.Int64List``: ``value`` is a list of int64 (``bool`` counts as 0/1)."""

    __slots__ = ()
    _KIND = "int64_list"
    _COERCE = staticmethod(coerce_int)
    _DTYPE = "int64"
    _FORMAT = staticmethod(str)


@_add_kind_properties
class Feature(OneofFeature):
    """``tf.train.Feature``: one of ``bytes_list``, ``float_list`` or ``int64_list``."""

    __slots__ = ()
    _KINDS = {"bytes_list": BytesList, "float_list": FloatList, "int64_list": Int64List}
    _SCHEMA = "tensorflow"
    bytes_list: BytesList
    float_list: FloatList
    int64_list: Int64List


class Features(FeatureMap):
    """``tf.train.Features``: ``feature`` maps names to :class:`Feature`."""

    __slots__ = ()
    _FEATURE = Feature
    _SCHEMA = "tensorflow"


def _has_top_field(data: bytes, number: int) -> bool:
    """Whether a LEN field `number` appears at the top level of `data` (data already validated)."""
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        wire = key & 7
        if key >> 3 == number:
            return True
        if wire == 0:
            _, pos = read_varint(data, pos)
        elif wire == 2:
            size, pos = read_varint(data, pos)
            pos += size
        else:
            pos += {1: 8, 5: 4}.get(wire, len(data))
    return False


class Example(Message):
    """``tf.train.Example``: one record, a :class:`Features` map."""

    __slots__ = ("_features", "_has_features")

    def __init__(self, features: Features | None = None) -> None:
        self._owner = None
        self._has_features = features is not None
        self._features = self._adopt(features if features is not None else Features())

    def _adopt(self, features: Features) -> Features:
        if not isinstance(features, Features):
            raise TypeError(f"features must be a Features message, not {type(features).__name__}")
        features._owner = self._features_changed
        return features

    def _features_changed(self, _: Any) -> None:
        self._has_features = True
        self._notify()

    @property
    def features(self) -> Features:
        """The :class:`Features`; changing them marks them as set."""
        return self._features

    @features.setter
    def features(self, value: Features) -> None:
        self._features = self._adopt(value)
        self._features_changed(value)

    def HasField(self, name: str) -> bool:
        """Whether ``features`` is set."""
        if name != "features":
            raise ValueError(f"Example has no field {name!r}")
        return self._has_features

    def Clear(self) -> None:
        """Unsets the features."""
        self._features = self._adopt(Features())
        self._has_features = False

    def _serialize(self) -> bytes:
        if not self._has_features and not self._features.feature:
            return b""
        return _native.encode_features(feature_map_entries(self._features.feature), "tensorflow", "example")

    def _parse(self, data: bytes) -> None:
        decoded = _native.decode_features(data, "tensorflow", "example")
        self._features._load(decoded)
        self._has_features = bool(decoded) or _has_top_field(data, 1)

    def _text(self) -> list[str]:
        if not self._has_features and not self._features.feature:
            return []
        return ["features {", *indent(self._features._text()), "}"]

    def to_json(self, indent: int | None = 2) -> str:
        """This message in protobuf's JSON format, as ``json_format.MessageToJson``
        writes it: list fields in lowerCamelCase (``int64List``), int64 values as
        strings, floats as numbers (``"NaN"``, ``"Infinity"``, ``"-Infinity"``
        as strings), bytes in base64. Keys ascending, as :func:`print` shows them."""
        import json

        out: dict[str, Any] = {}
        if self.HasField("features"):
            feature = {key: _feature_json(self.features.feature[key])
                       for key in sorted(self.features.feature, key=wire_key_order)}
            out["features"] = {"feature": feature} if feature else {}
        return json.dumps(out, indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Example":
        """The message that protobuf's JSON format describes (``json_format.Parse``):
        field names in lowerCamelCase or as in the proto, int64 values as strings
        or whole numbers, floats as numbers or numeric strings, bytes in base64.

        Raises:
            ParseError: For text that is not such JSON, naming where it departs:
                unknown fields, values of the wrong kind, an int64 out of range or
                a float beyond float32's.
        """
        import json

        try:
            content = json.loads(text)
        except (TypeError, ValueError) as error:
            raise ParseError(f"not JSON: {error}") from None
        example = cls()
        fields = _json_fields(content, "Example", {"features"})
        if "features" in fields:
            example.features = Features()  # present once named, even empty
            entries = _json_fields(fields["features"], "Example.features", {"feature"}).get("feature", {})
            if not isinstance(entries, dict):
                raise ParseError(f"Example.features.feature must be a JSON object, not {entries!r}")
            for key, entry in entries.items():
                where = f"Example.features.feature[{key}]"
                if not isinstance(entry, dict):
                    raise ParseError(f"{where} must be a JSON object, not {entry!r}")
                example.features.feature[key].CopyFrom(_feature_from_json(entry, where))
        return example


_JSON_KINDS = {"bytes_list": "bytesList", "float_list": "floatList", "int64_list": "int64List"}


def _feature_json(feature: Feature) -> dict[str, Any]:
    import base64

    kind = feature.WhichOneof("kind")
    if kind is None:
        return {}
    values = list(getattr(feature, kind).value)
    if kind == "int64_list":
        shown: list[Any] = [str(v) for v in values]
    elif kind == "bytes_list":
        shown = [base64.b64encode(v).decode("ascii") for v in values]
    else:
        shown = [float(text_float32(v)) if math.isfinite(v) else {float("inf"): "Infinity", float("-inf"): "-Infinity"}
                 .get(float(v), "NaN") for v in values]
    return {_JSON_KINDS[kind]: {"value": shown} if shown else {}}


def _json_fields(content: Any, where: str, names: set[str]) -> dict[str, Any]:
    """A JSON object's fields by their proto names (lowerCamelCase ones too); null fields left out."""
    if content is None:
        return {}
    if not isinstance(content, dict):
        raise ParseError(f"{where} must be a JSON object, not {content!r}")
    fields = {}
    for name, value in content.items():
        proto = next((n for n in names if name in (n, _camel(n))), None)
        if proto is None:
            raise ParseError(f'{where} has no field named "{name}" (its fields: {", ".join(sorted(names))})')
        if value is not None:
            fields[proto] = value
    return fields


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _feature_from_json(content: dict[str, Any], where: str) -> Feature:
    import base64
    import binascii

    fields = _json_fields(content, where, set(_JSON_KINDS))
    if len(fields) > 1:
        raise ParseError(f"{where} sets {' and '.join(sorted(fields))}: a Feature holds one kind")
    if not fields:
        return Feature()
    [(kind, body)] = fields.items()
    raw = _json_fields(body, f"{where}.{_JSON_KINDS[kind]}", {"value"}).get("value", [])
    if not isinstance(raw, list):
        raise ParseError(f"{where}.{_JSON_KINDS[kind]}.value must be a list, not {raw!r}")
    values: list[Any] = []
    for i, item in enumerate(raw):
        at = f"{where}.{_JSON_KINDS[kind]}.value[{i}]"
        try:
            if kind == "int64_list":
                if isinstance(item, bool) or not isinstance(item, (int, float, str)):
                    raise ValueError
                number = int(item) if not isinstance(item, float) or item.is_integer() else None
                if number is None or (isinstance(item, str) and not item.strip().lstrip("-").isdigit()):
                    raise ValueError
                values.append(number)
            elif kind == "float_list":
                if isinstance(item, bool) or not isinstance(item, (int, float, str)):
                    raise ValueError
                values.append({"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(item, None)
                              if isinstance(item, str) and item in ("NaN", "Infinity", "-Infinity") else float(item))
            else:
                if not isinstance(item, str):
                    raise ValueError
                values.append(base64.b64decode(item.replace("-", "+").replace("_", "/") + "=" * (-len(item) % 4),
                                               validate=True))
        except (ValueError, binascii.Error):
            raise ParseError(f"{at}: {item!r} is not {_JSON_VALUE_KINDS[kind]}") from None
    try:
        return Feature(**{kind: {"bytes_list": BytesList, "float_list": FloatList, "int64_list": Int64List}[kind](value=values)})
    except (TypeError, ValueError) as error:
        raise ParseError(f"{where}.{_JSON_KINDS[kind]}: {error}") from None


_JSON_VALUE_KINDS = {"int64_list": "an int64 (a whole number, or one in a string)",
                     "float_list": 'a number (or "NaN", "Infinity", "-Infinity")',
                     "bytes_list": "base64 text"}


class FeatureList(Message):
    """``tf.train.FeatureList``: ``feature`` is a list of :class:`Feature`, one per step."""

    __slots__ = ("_feature",)

    def __init__(self, feature: Iterable[Feature] = ()) -> None:
        self._owner = None
        self._feature = RepeatedMessages(Feature, self._changed, feature)

    def _changed(self) -> None:
        self._notify()

    @property
    def feature(self) -> RepeatedMessages:
        """The steps (supports ``add(...)``)."""
        return self._feature

    @feature.setter
    def feature(self, value: Iterable[Feature]) -> None:
        list.clear(self._feature)
        self._feature.extend(value)

    def Clear(self) -> None:
        """Removes every step."""
        list.clear(self._feature)

    def _serialize(self) -> bytes:
        return b"".join(len_field(1, f._serialize()) for f in self._feature)

    def _parse(self, data: bytes) -> None:
        # A FeatureList is the value of a FeatureLists entry: decode it as one.
        entry = len_field(1, b"") + len_field(2, data)
        _, lists = _native.decode_sequence(len_field(2, len_field(1, entry)))
        self._load(lists.get("", []))

    def _load(self, steps: list[tuple[str | None, Any]]) -> None:
        for kind, values in steps:
            feature = Feature()
            feature._load(kind, values)
            list.append(self._feature, self._feature._adopt(feature))

    def _text(self) -> list[str]:
        lines: list[str] = []
        for f in self._feature:
            lines += ["feature {", *indent(f._text()), "}"]
        return lines


class FeatureLists(Message):
    """``tf.train.FeatureLists``: ``feature_list`` maps names to :class:`FeatureList`."""

    __slots__ = ("_feature_list",)

    def __init__(self, feature_list: Mapping[str, FeatureList] | None = None) -> None:
        self._owner = None
        self._feature_list = MessageMap(FeatureList, self._changed, feature_list)

    def _changed(self) -> None:
        self._notify()

    @property
    def feature_list(self) -> MessageMap:
        """Name to :class:`FeatureList`; reading a missing name creates it."""
        return self._feature_list

    def Clear(self) -> None:
        """Removes every feature list."""
        dict.clear(self._feature_list)

    def _serialize(self) -> bytes:
        return b"".join(
            len_field(1, len_field(1, key.encode()) + len_field(2, self._feature_list[key]._serialize()))
            for key in sorted(self._feature_list, key=wire_key_order)
        )

    def _parse(self, data: bytes) -> None:
        _, lists = _native.decode_sequence(len_field(2, data))
        self._load(lists)

    def _load(self, lists: Mapping[str, list]) -> None:
        for key, steps in lists.items():
            feature_list = FeatureList()
            feature_list._load(steps)
            dict.__setitem__(self._feature_list, key, self._feature_list._adopt(feature_list))

    def _text(self) -> list[str]:
        return map_text("feature_list", self._feature_list, lambda fl: fl._text())


class SequenceExample(Message):
    """``tf.train.SequenceExample``: ``context`` (:class:`Features`) and ``feature_lists`` (:class:`FeatureLists`)."""

    __slots__ = ("_context", "_feature_lists", "_has")

    def __init__(self, context: Features | None = None, feature_lists: FeatureLists | None = None) -> None:
        self._owner = None
        self._has = {"context": context is not None, "feature_lists": feature_lists is not None}
        self._context = self._adopt("context", context if context is not None else Features())
        self._feature_lists = self._adopt("feature_lists", feature_lists if feature_lists is not None else FeatureLists())

    def _adopt(self, name: str, message: Message) -> Any:
        expected = Features if name == "context" else FeatureLists
        if not isinstance(message, expected):
            raise TypeError(f"{name} must be a {expected.__name__}, not {type(message).__name__}")

        def changed(_: Any, name: str = name) -> None:
            self._has[name] = True
            self._notify()

        message._owner = changed
        return message

    @property
    def context(self) -> Features:
        """The context :class:`Features`."""
        return self._context

    @context.setter
    def context(self, value: Features) -> None:
        self._context = self._adopt("context", value)
        self._has["context"] = True

    @property
    def feature_lists(self) -> FeatureLists:
        """The :class:`FeatureLists`."""
        return self._feature_lists

    @feature_lists.setter
    def feature_lists(self, value: FeatureLists) -> None:
        self._feature_lists = self._adopt("feature_lists", value)
        self._has["feature_lists"] = True

    def HasField(self, name: str) -> bool:
        """Whether ``context`` or ``feature_lists`` is set."""
        if name not in self._has:
            raise ValueError(f"SequenceExample has no field {name!r}")
        return self._has[name]

    def Clear(self) -> None:
        """Unsets both fields."""
        self._context = self._adopt("context", Features())
        self._feature_lists = self._adopt("feature_lists", FeatureLists())
        self._has = {"context": False, "feature_lists": False}

    def _serialize(self) -> bytes:
        out = b""
        if self._has["context"] or self._context.feature:
            out += len_field(1, self._context._serialize())
        if self._has["feature_lists"] or self._feature_lists.feature_list:
            out += len_field(2, self._feature_lists._serialize())
        return out

    def _parse(self, data: bytes) -> None:
        context, lists = _native.decode_sequence(data)
        self._context._load(context)
        self._feature_lists._load(lists)
        self._has = {"context": bool(context) or _has_top_field(data, 1), "feature_lists": bool(lists) or _has_top_field(data, 2)}

    def _text(self) -> list[str]:
        lines: list[str] = []
        if self._has["context"] or self._context.feature:
            lines += ["context {", *indent(self._context._text()), "}"]
        if self._has["feature_lists"] or self._feature_lists.feature_list:
            lines += ["feature_lists {", *indent(self._feature_lists._text()), "}"]
        return lines

