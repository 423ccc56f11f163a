"""``TFRecordOptions``: TensorFlow's options for record files, and what recordkit does with each.

A writer takes them as TensorFlow's does (``TFRecordWriter(path, options)``)
or as keywords (``compression="gzip", compression_level=9``); readers take the
compression type from them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

__all__ = ["TFRecordCompressionType", "TFRecordOptions", "WriterOptions", "writer_options"]


class TFRecordCompressionType(enum.IntEnum):
    """The compression of a record file, as TensorFlow numbers them."""

    NONE = 0
    ZLIB = 1
    GZIP = 2


# zlib's flush modes, which TensorFlow's flush_mode takes: Z_NO_FLUSH ... Z_BLOCK.
_FLUSH_MODES = range(6)
_Z_DEFLATED = 8


class TFRecordOptions:
    """Options for reading and writing record files (``tf.io.TFRecordOptions``).

    Args:
        compression_type: ``"GZIP"``, ``"ZLIB"`` or ``""``/None (none), in any
            case, a ``TFRecordCompressionType``, or another
            ``TFRecordOptions`` (its type is taken).
        flush_mode: zlib's flush mode (``zlib.Z_SYNC_FLUSH`` ...). recordkit's
            ``flush()`` always makes a flush point that a reader can read up
            to, whatever the mode (TensorFlow's does only for a sync or full
            flush): the mode is checked, and needs nothing more.
        input_buffer_size: Accepted for TensorFlow's code; recordkit sizes its
            own buffers (TensorFlow: they change the time, not the bytes).
        output_buffer_size: As ``input_buffer_size``.
        window_bits: 8 to 15: the deflate window, 2**window_bits bytes.
        compression_level: 0 (stored) to 9 (smallest); default 6.
        compression_method: zlib's method; only deflate (8) exists.
        mem_level: 1 to 9: memory for the compressor's state; default 8.
        compression_strategy: 0 default, 1 filtered, 2 Huffman only, 3 run
            lengths, 4 fixed codes (``zlib.Z_FILTERED`` ...).

    Each value is checked here: one out of zlib's range is a ``ValueError``.
    The deflate options apply to writing GZIP and ZLIB files; every setting
    writes a stream that any zlib reads.
    """

    compression_type_map = {
        TFRecordCompressionType.ZLIB: "ZLIB",
        TFRecordCompressionType.GZIP: "GZIP",
        TFRecordCompressionType.NONE: "",
    }

    def __init__(
        self,
        compression_type: Any = None,
        flush_mode: int | None = None,
        input_buffer_size: int | None = None,
        output_buffer_size: int | None = None,
        window_bits: int | None = None,
        compression_level: int | None = None,
        compression_method: int | None = None,
        mem_level: int | None = None,
        compression_strategy: int | None = None,
    ) -> None:
        self.get_compression_type_string(compression_type)
        self.compression_type = compression_type
        self.flush_mode = _checked("flush_mode", flush_mode, _FLUSH_MODES)
        self.input_buffer_size = _checked("input_buffer_size", input_buffer_size, range(1, 1 << 62))
        self.output_buffer_size = _checked("output_buffer_size", output_buffer_size, range(1, 1 << 62))
        self.window_bits = _checked("window_bits", window_bits, range(8, 16))
        self.compression_level = _checked("compression_level", compression_level, range(-1, 10))
        self.compression_method = _checked("compression_method", compression_method, range(_Z_DEFLATED, _Z_DEFLATED + 1))
        self.mem_level = _checked("mem_level", mem_level, range(1, 10))
        self.compression_strategy = _checked("compression_strategy", compression_strategy, range(5))

    @classmethod
    def get_compression_type_string(cls, options: Any) -> str:
        """``"ZLIB"``, ``"GZIP"`` or ``""`` for options, a compression type or a string.

        Raises:
            ValueError: For anything that names no compression type.
        """
        if not options:
            return ""
        if isinstance(options, TFRecordOptions):
            return cls.get_compression_type_string(options.compression_type)
        if isinstance(options, TFRecordCompressionType):
            return cls.compression_type_map[options]
        if isinstance(options, str) and options.upper() in ("ZLIB", "GZIP", "NONE"):
            return "" if options.upper() == "NONE" else options.upper()
        if isinstance(options, int) and not isinstance(options, bool) and options in cls.compression_type_map:
            return cls.compression_type_map[TFRecordCompressionType(options)]
        raise ValueError(f'Not a valid compression_type: "{options}" (expected "GZIP", "ZLIB" or "")')

    def __repr__(self) -> str:
        set_fields = {k: v for k, v in vars(self).items() if v is not None}
        return f"TFRecordOptions({', '.join(f'{k}={v!r}' for k, v in set_fields.items())})"


def _checked(name: str, value: int | None, allowed: range) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer or None, not {type(value).__name__} {value!r}")
    if value not in allowed:
        raise ValueError(f"{name} must be {allowed.start} to {allowed.stop - 1}, as zlib takes it, not {value}")
    return value


@dataclass(frozen=True)
class WriterOptions:
    """What a writer needs of the options: the compression and deflate's parameters."""

    compression: str = "none"  # "none", "gzip" or "zlib"
    compression_level: int = -1
    window_bits: int = 15
    mem_level: int = 8
    strategy: int = 0

    def native(self) -> dict[str, Any]:
        """The keywords of ``_native.RecordWriter``."""
        return {"compression": self.compression, "compression_level": self.compression_level,
                "window_bits": self.window_bits, "mem_level": self.mem_level, "strategy": self.strategy}


def writer_options(compression: Any = None, options: Any = None, compression_level: int | None = None) -> WriterOptions:
    """A writer's options from its ``compression`` (a string, None, a
    ``TFRecordCompressionType`` or ``TFRecordOptions``, as TensorFlow's
    writer takes them in that place), its ``options`` and ``compression_level``.

    Raises:
        ValueError: For an unknown compression, values out of zlib's range, or
            two arguments that say different things.
    """
    given = [o for o in (compression, options) if o is not None]
    if len(given) == 2:
        if TFRecordOptions.get_compression_type_string(compression) != TFRecordOptions.get_compression_type_string(options):
            raise ValueError(f"compression {compression!r} and options {options!r} name different compressions")
        if isinstance(compression, TFRecordOptions) and isinstance(options, TFRecordOptions):
            raise ValueError("give the TFRecordOptions once: as the second argument or as options=")
    chosen = next((o for o in given if isinstance(o, TFRecordOptions)), None)
    kind = TFRecordOptions.get_compression_type_string(given[0] if given else None).lower() or "none"
    level = compression_level if compression_level is not None else getattr(chosen, "compression_level", None)
    _checked("compression_level", level, range(-1, 10))
    if chosen is not None and compression_level is not None and chosen.compression_level not in (None, compression_level):
        raise ValueError(f"compression_level={compression_level} and options' {chosen.compression_level} differ")

    def pick(value: int | None, default: int) -> int:
        return default if value is None else value

    return WriterOptions(
        compression=kind,
        compression_level=pick(level, -1),
        window_bits=pick(getattr(chosen, "window_bits", None), 15),
        mem_level=pick(getattr(chosen, "mem_level", None), 8),
        strategy=pick(getattr(chosen, "compression_strategy", None), 0),
    )
