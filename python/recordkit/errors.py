"""recordkit's exceptions: one hierarchy, each class also a built-in a user would catch.

Every exception pickles with its attributes, so it survives the trip from a
DataLoader or Ray worker to the main process.
"""

from __future__ import annotations

import os
import sys

__all__ = [
    "user_stacklevel",
    "RecordkitError",
    "DataLossError",
    "DataLossWarning",
    "ParseError",
    "FailedPreconditionError",
    "ResourceExhaustedError",
    "InternalError",
]


class RecordkitError(Exception):
    """Base class of every error recordkit raises on its own account."""


class DataLossError(RecordkitError, IOError):
    """A file is damaged: a bad CRC, a truncated record, a cut compressed stream.

    Attributes:
        path: The file the damage is in.
        offset: The byte offset TensorFlow would report (in the uncompressed
            stream): the record's start for a bad length, a bad length CRC or a
            truncated record; the payload's start for a bad data CRC.
        record_index: How many intact records come before the damage.
        kind: A short name for the damage: ``"corrupt_length"``,
            ``"corrupt_data"``, ``"truncated_record"``, ``"partial_header"``,
            ``"invalid_length"`` (OFRecord), ``"truncated_stream"``,
            ``"corrupt_stream"``, ``"truncated_while_reading"`` (another
            process truncated a mapped file) or ``"too_large_to_skip"`` (a
            stream's record over 64 MiB while skipping damage).
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        offset: int | None = None,
        record_index: int | None = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.offset = offset
        self.record_index = record_index
        self.kind = kind

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):  # type: ignore[override]
        # IOError's own reduce would rebuild from args alone and drop the fields.
        return (
            _rebuild_data_loss_error,
            (self.message, self.path, self.offset, self.record_index, self.kind),
        )


def _rebuild_data_loss_error(
    message: str, path: str | None, offset: int | None, record_index: int | None, kind: str | None
) -> DataLossError:
    return DataLossError(message, path=path, offset=offset, record_index=record_index, kind=kind)


class ParseError(RecordkitError, ValueError):
    """Records do not fit a parse spec, or are not valid messages.

    Carries the facts TensorFlow's error carries: the feature key and the
    record's index in the batch (in the file, for ``read_examples``).

    Attributes:
        key: The feature the problem is in (None when the record as a whole is bad).
        index: The record's index.
    """

    def __init__(self, message: str, *, key: str | None = None, index: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.key = key
        self.index = index

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):  # type: ignore[override]
        return (_rebuild_parse_error, (self.message, self.key, self.index))


def _rebuild_parse_error(message: str, key: str | None, index: int | None) -> ParseError:
    return ParseError(message, key=key, index=index)


class FailedPreconditionError(RecordkitError, ValueError):
    """An operation on a reader or writer that is closed, or that a failed write
    left unusable (TensorFlow's name; a ``ValueError``, as Python's I/O on a
    closed file raises)."""


class DataLossWarning(UserWarning):
    """Damaged data was skipped because the caller asked for ``on_error="skip"``."""


class ResourceExhaustedError(RecordkitError, MemoryError):
    """Memory for data a file really holds could not be had (TensorFlow's name).

    Raised instead of letting the process abort, for example when a compressed
    stream's record is larger than the memory the process may use.
    """


class InternalError(RecordkitError):
    """A bug in recordkit: an internal check failed (a Rust panic was caught).

    Never the input's fault; please report it with the input that caused it.
    """


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first caller outside recordkit."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level
