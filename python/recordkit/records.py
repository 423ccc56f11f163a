"""Reading and writing record files: TFRecord (TensorFlow) and OFRecord (OneFlow).

Framing, CRC checks and (de)compression run in Rust, many records per call,
with the GIL released. This module decides what to open and how to report.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shlex
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Literal, Sequence

from recordkit import _native
from recordkit._native import Example, OFRecord, SequenceExample
from recordkit._shardsets import remove_files, replaced_files, split_suffix, write_manifest
from recordkit._sources import Source, open_input, open_output
from recordkit.discovery import check_format, expand_sources, reader_compression, record_format
from recordkit.options import TFRecordOptions, writer_options
from recordkit.errors import DataLossError, DataLossWarning, FailedPreconditionError

__all__ = [
    "TFRecordReader",
    "TFRecordWriter",
    "OFRecordReader",
    "OFRecordWriter",
    "ReadStats",
    "DamagedRegion",
    "count_records",
    "write_ofrecord_parts",
    "all_or_nothing",
    "tf_record_iterator",
    "tf_record_random_reader",
    "TFRecordIterator",
    "TFRecordRandomReader",
    "refuse_compressed",
]

OnError = Literal["raise", "skip"]

#: What a writer writes as one record (see ``TFRecordWriter.write``).
Record = bytes | bytearray | memoryview | str | Example | SequenceExample | OFRecord


def plural(count: int, noun: str) -> str:
    """``"1 record"``, ``"2 records"``: counts in messages read as English."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"

# One trip into Rust frames up to this many records, stopping once this many
# payload bytes are collected. The byte budget is small on purpose: a batch's
# records are freed together, and glibc returns a freed run of more than a few
# hundred KB to the OS, so the next batch would fault fresh pages in (measured:
# 150 KB records read at 1.6 GB/s with 16 MB batches, 5.6 GB/s with 128 KB).
# Small records are bounded by the record count instead, so they lose nothing.
_BATCH_RECORDS = 1024
_BATCH_BYTES = 128 << 10


def warn_skipped(name: str, skipped: list[tuple[int, int, str, str, int]], stacklevel: int = 2) -> None:
    """One ``DataLossWarning`` per damaged stretch a scanner skipped
    (``on_error="skip"``), naming the file, the offset and the intact records before it;
    ``stacklevel`` as for ``warnings.warn``, counted from the caller."""
    for offset, nbytes, _, detail, record_index in skipped:
        warnings.warn(f"{name}: skipped {plural(nbytes, 'damaged byte')} at offset {offset} ({detail}), "
                      f"after {plural(record_index, 'intact record')}", DataLossWarning, stacklevel=stacklevel + 1)


@dataclass(frozen=True)
class DamagedRegion:
    """A stretch of a file that was skipped because it was damaged.

    Attributes:
        offset: Where the damage starts (the offset TensorFlow would report).
        bytes_skipped: Bytes passed over before the next intact record.
        kind: What was wrong, e.g. ``"corrupt_data"`` or ``"truncated_record"``.
        detail: One line describing it.
        record_index: The intact records before it: the index the damaged
            record would have had.
    """

    offset: int
    bytes_skipped: int
    kind: str
    detail: str
    record_index: int


@dataclass
class ReadStats:
    """What a reader has done so far.

    Attributes:
        records: Intact records read.
        damaged_regions: Regions skipped (only with ``on_error="skip"``).
    """

    records: int = 0
    damaged_regions: list[DamagedRegion] = field(default_factory=list)

    @property
    def bytes_skipped(self) -> int:
        """Total bytes passed over in damaged regions."""
        return sum(region.bytes_skipped for region in self.damaged_regions)


class _RecordReader:
    """Shared machinery of the TFRecord and OFRecord readers."""

    _format = "tfrecord"

    def __init__(
        self,
        path: Source,
        compression: str | None = "auto",
        *,
        verify: bool = True,
        on_error: OnError = "raise",
        follow: bool = False,
    ) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f'on_error must be "raise" or "skip", not {on_error!r}')
        self._path = path
        self._compression = reader_compression(compression)
        self._verify = bool(verify)
        self._on_error = on_error
        self.stats = ReadStats()
        self._opened = open_input(path)
        self._scanner: Any = self._open_scanner()
        self._iterated = False
        self._follow_at: tuple[int, int] | None = None  # (offset, record index) of the next record
        if follow:
            if on_error != "raise":
                self.close()
                raise ValueError(
                    'follow=True waits for a record still being written; on_error="skip" would skip it'
                )
            if not self._opened.reopenable or self.compression != "none":
                self.close()
                raise ValueError(
                    f"follow=True reads a growing uncompressed file by its path or URL; {self.name} is "
                    + ("an open file object" if not self._opened.reopenable else f"{self.compression}-compressed")
                )
            self._follow_at = (0, 0)

    def _open_scanner(self) -> Any:
        try:
            return _native.RecordScanner(
                self._opened.handle,
                name=self._opened.name,
                format=self._format,
                compression=self._compression,
                verify=self._verify,
                skip_damaged=self._on_error == "skip",
            )
        except BaseException:
            self._opened.close()
            raise

    @property
    def name(self) -> str:
        """The file's path or URL (or a file object's name)."""
        return self._opened.name

    @property
    def compression(self) -> str:
        """The compression in use, after auto-detection: ``"none"``, ``"gzip"`` or ``"zlib"``."""
        return self._scanner.compression if self._scanner is not None else self._compression

    def __iter__(self) -> Iterator[bytes]:
        """Yields every record as ``bytes``. Iterating again starts over (paths and URLs only),
        or, following a file, goes on from the first record not yet yielded."""
        if self._follow_at is not None:
            return self._follow()
        if self._iterated:
            if not self._opened.reopenable:
                raise ValueError(f"a reader over a file object can be iterated once ({self.name})")
            self.close()
            self._opened = open_input(self._path)
            self._scanner = self._open_scanner()
            self.stats = ReadStats()
        if self._scanner is None:
            raise ValueError(f"I/O operation on a closed reader ({self.name})")
        self._iterated = True
        # Threads may share the iterator: each record goes to one of them, and
        # an error to every one that asks after it (a generator would end early).
        batches = self._batches(self._scanner)
        return _native.SharedIterator(lambda: next(batches, []))

    def _follow(self) -> Iterator[bytes]:
        """The records appended since the last pass, up to the file's current clean end.

        Records are handed out one at a time and the position moves past each as
        it is handed out, so a pass stopped early (``break``) loses nothing. A
        partial record at the end is a writer still writing it: the pass ends
        there, and a later one reads it whole.
        """
        if self._scanner is None:
            raise ValueError(f"I/O operation on a closed reader ({self.name})")
        if self._iterated:
            self.close()
            self._opened = open_input(self._path)
            self._scanner = self._open_scanner()
        self._iterated = True
        scanner = self._scanner
        if scanner.compression != "none":
            raise ValueError(f"{self.name} became {scanner.compression}-compressed while followed")
        if self._follow_at != (0, 0):
            scanner.seek(*self._follow_at)
        pending: list[bytes] = []
        ended = False

        def refill() -> list[bytes]:
            nonlocal ended
            if not pending and not ended:
                try:
                    batch = scanner.next_batch(_BATCH_RECORDS, _BATCH_BYTES)
                except DataLossError as error:
                    # Everything before the damage has been handed out, so a record cut
                    # short at the end starts where this reader stands: still being written.
                    if error.kind not in ("truncated_record", "partial_header") or error.offset != self._follow_at[0]:
                        raise
                    batch = []
                ended = not batch
                pending.extend(reversed(batch))
            if not pending:
                return []
            record = pending.pop()
            offset, index = self._follow_at  # type: ignore[misc]
            self._follow_at = (offset + len(record) + 16, index + 1)
            self.stats.records += 1
            return [record]

        return _native.SharedIterator(refill)

    @property
    def position(self) -> int:
        """Following a file: the offset of the next record to read (the clean end so far)."""
        if self._follow_at is None:
            raise AttributeError("position is kept only when following a file (follow=True)")
        return self._follow_at[0]

    def _batches(self, scanner: Any) -> Iterator[list[bytes]]:
        while True:
            batch = scanner.next_batch(_BATCH_RECORDS, _BATCH_BYTES)
            if self._on_error == "skip":
                self._report_skipped(scanner.take_skipped())
            if not batch:
                return
            self.stats.records += len(batch)
            yield batch

    def _report_skipped(self, skipped: list[tuple[int, int, str, str, int]]) -> None:
        for offset, nbytes, kind, detail, record_index in skipped:
            self.stats.damaged_regions.append(DamagedRegion(offset, nbytes, kind, detail, record_index))
        warn_skipped(self.name, skipped, stacklevel=4)

    def close(self) -> None:
        """Releases the file. Safe to call twice."""
        if self._scanner is not None:
            self._scanner.close()
            self._scanner = None
        self._opened.close()

    def __enter__(self) -> "_RecordReader":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, compression={self.compression!r})"


class TFRecordReader(_RecordReader):
    """Iterates the records of a TFRecord file as ``bytes``, checking every CRC.

    Args:
        path: A local path, a ``pathlib.Path``, an fsspec URL (``s3://``,
            ``gs://``, ``memory://``; needs ``fsspec``) or an open binary file.
        compression: ``"auto"`` (default: GZIP and ZLIB are recognized from
            their first bytes and the ``.gz``/``.gzip``/``.zz``/``.zlib``
            suffixes), ``None``/``"none"``, ``"gzip"`` or ``"zlib"``; any case.
        verify: Check each payload's CRC (length CRCs are always checked).
        on_error: ``"raise"`` (default) raises ``DataLossError`` at the
            first damage, after yielding every intact record before it.
            ``"skip"`` resynchronizes at the next intact record, counts the
            damage in ``stats`` and warns with ``DataLossWarning``.
        follow: Follow a growing uncompressed file, as TensorBoard reads event
            files: a pass ends at the current clean end of the data, and the
            next pass (iterate the same reader again) yields the records
            appended since. A partial record at the end is waited for, not
            reported. ``position`` is the offset reached.

    Raises:
        DataLossError: On damage: bad CRCs, truncated records, 1-11 stray bytes
            at the end of the file, a compressed stream that ends early or
            (ZLIB) has data after its end. ``.path`` and ``.offset`` say where.

    Example:
        >>> for record in TFRecordReader("train.tfrecord"):  # doctest: +SKIP
        ...     example = recordkit.train.Example.FromString(record)
    """

    _format = "tfrecord"


class OFRecordReader(_RecordReader):
    """Iterates the records of a OneFlow OFRecord file (``part-NNNNN``) as ``bytes``.

    OFRecord frames are an ``int64`` little-endian length and the payload, with
    no checksum, so damage can be detected only in the framing: a length of
    zero or less, or longer than the rest of the file, is a
    ``DataLossError``. ``on_error="skip"`` is not available.

    Args:
        path: A local path, a URL (with fsspec) or an open binary file.
        compression: ``"auto"`` (by suffix only), ``None``, ``"gzip"`` or ``"zlib"``.
    """

    _format = "ofrecord"

    def __init__(self, path: Source, compression: str | None = "auto") -> None:
        super().__init__(path, compression, verify=True, on_error="raise")


class TFRecordIterator:
    """The records of a TFRecord file, one at a time, keeping its place as
    TensorFlow's ``tf_record_iterator`` does (see ``tf_record_iterator``)."""

    def __init__(self, path: str | os.PathLike[str], compression: str, verify: bool) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"tf_record_iterator reads a path or URL, not {type(path).__name__}: "
                            "iterate a TFRecordReader over a file object")
        self._path = os.fspath(path)
        self._compression = compression
        self._verify = verify
        self._offset = 0  # in the uncompressed stream: where the next record starts
        self._index = 0  # records handed out
        self._pending: list[bytes] = []  # read ahead, last first
        self._scanner: Any = None
        self._opened: Any = None
        open_input(self._path).close()  # a missing file fails here, as TensorFlow's does

    @property
    def offset(self) -> int:
        """Where the next record starts, in the uncompressed stream."""
        return self._offset

    def __iter__(self) -> "TFRecordIterator":
        return self

    def __next__(self) -> bytes:
        if not self._pending:
            self._refill()
        record = self._pending.pop()
        self._offset += len(record) + 16
        self._index += 1
        return record

    def _refill(self) -> None:
        """Reads the next records; at the end (or damage), lets the file go, so the
        next call opens it afresh and finds what was written since."""
        try:
            if self._scanner is None:
                self._open()
            batch = self._scanner.next_batch(_BATCH_RECORDS, _BATCH_BYTES)
        except BaseException:
            self.close()
            raise
        if not batch:
            self.close()
            raise StopIteration
        self._pending = batch[::-1]

    def _open(self) -> None:
        self._opened = open_input(self._path)
        self._scanner = _native.RecordScanner(
            self._opened.handle, name=self._opened.name, compression=self._compression,
            verify=self._verify, unfinished_ends=True,
        )
        if not self._index:
            return
        if self._scanner.compression == "none":
            self._scanner.seek(self._offset, self._index)
            return
        passed = 0  # a stream is read from its start: frames are counted, not copied
        while passed < self._index:
            offsets, _ = self._scanner.next_frames(self._index - passed)
            if not len(offsets):
                raise DataLossError(f"{self._path} holds {passed} records, fewer than the {self._index} read "
                                    "before: it was rewritten", path=self._path, kind="truncated_stream")
            passed += len(offsets)

    def close(self) -> None:
        """Lets the file go (the next ``next()`` opens it again)."""
        if self._scanner is not None:
            self._scanner.close()
            self._scanner = None
        if self._opened is not None:
            self._opened.close()
            self._opened = None


def tf_record_iterator(
    path: str | os.PathLike[str],
    options: TFRecordOptions | str | None = None,
    *,
    compression: str | None = "auto",
    verify: bool = True,
) -> TFRecordIterator:
    """The records of a TFRecord file, one at a time, as TensorFlow's
    ``tf.compat.v1.io.tf_record_iterator`` yields them, place kept.

    At the end of the file, ``next()`` raises ``StopIteration``, and a later
    ``next()`` yields the records appended since (TensorBoard reads event files
    so). A record cut short at the end (a writer still writing it) raises
    ``DataLossError``, and so does every ``next()`` until the record is
    whole; then it is yielded. A GZIP or ZLIB stream that stops at a flush
    point (a writer's ``flush()``) ends there, like TensorFlow's: every record
    so far, then ``StopIteration``; a stream cut within a record is
    ``DataLossError``. Payload CRCs are checked (``verify``).

    Args:
        path: A local path or a URL.
        options: A ``TFRecordOptions`` or a compression name, as
            TensorFlow takes them; else ``compression`` (default ``"auto"``).

    Use ``TFRecordReader`` for plain reading (faster, records in bulk);
    this iterator is for files read while they grow.
    """
    chosen = compression if options is None else (TFRecordOptions.get_compression_type_string(options).lower() or "none")
    return TFRecordIterator(path, reader_compression(chosen), bool(verify))


class TFRecordRandomReader:
    """Reads the record at a byte offset of an uncompressed TFRecord file
    (TensorFlow's ``tf_record_random_reader``): see ``tf_record_random_reader``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        refuse_compressed(self.path)
        self._reader: Any = _native.FrameReader(self.path)

    def read(self, offset: int) -> tuple[bytes, int]:
        """``(record, offset of the next record)`` for the record at ``offset``.

        Raises:
            IndexError: At or past the end of the file ("Out of range at reading offset N").
            DataLossError: Where no intact record starts ("corrupted record at N").
            FailedPreconditionError: Once closed.
        """
        if self._reader is None:
            raise FailedPreconditionError(f"Random TFRecord Reader is closed ({self.path})")
        if offset < 0:
            raise IndexError(f"Out of range at reading offset {offset}")
        return self._reader.read_at(int(offset))

    def close(self) -> None:
        """Releases the file; reading afterwards is a ``FailedPreconditionError``."""
        self._reader = None

    def __enter__(self) -> "TFRecordRandomReader":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def tf_record_random_reader(path: str | os.PathLike[str]) -> TFRecordRandomReader:
    """A reader of the record at any byte offset of an uncompressed TFRecord file,
    as TensorFlow's ``tf_record_random_reader``: ``reader.read(offset)`` gives
    ``(record, next_offset)``, CRCs checked. For reading by record number,
    ``IndexedDataset`` keeps an index."""
    return TFRecordRandomReader(path)


def refuse_compressed(path: str) -> None:
    """Refuses a compressed file where records are read by byte offset, saying how to
    make an uncompressed copy."""
    scanner = _native.RecordScanner(path, name=path)
    scanner_says = scanner.compression
    scanner.close()
    if scanner_says != "none":
        copy = _uncompressed_name(path)
        raise ValueError(
            f"{path} is {scanner_says.upper()}-compressed: a compressed stream has no record offsets to "
            "index (reaching record i means decompressing everything before it). Make an uncompressed "
            f"copy for random access: recordkit convert {shlex.quote(path)} {shlex.quote(copy)}   "
            f"(in Python: rk.convert({path!r}, {copy!r}))"
        )


def _uncompressed_name(path: str) -> str:
    """Where an uncompressed copy of ``path`` goes: its name without ``.gz``/``.zz``, kept a ``.tfrecord``."""
    base, suffix = split_suffix(os.path.basename(path))
    record_suffix = suffix.lower()
    for compressed in (".gz", ".gzip", ".zz", ".zlib"):
        if record_suffix.endswith(compressed):
            suffix, record_suffix = suffix[: -len(compressed)], record_suffix[: -len(compressed)]
    return os.path.join(os.path.dirname(path), base + (suffix or ".tfrecord"))


class _RecordWriter:
    """Shared machinery of the TFRecord and OFRecord writers."""

    _format = "tfrecord"

    def __init__(self, path: Source, compression: str | TFRecordOptions | None = None, *,
                 options: TFRecordOptions | str | None = None, compression_level: int | None = None,
                 fsync: bool = False, atomic: bool = True) -> None:
        settings = writer_options(compression, options, compression_level)
        self._target = open_output(path, fsync=fsync, atomic=atomic)
        try:
            self._native: Any = _native.RecordWriter(
                self._target.handle,
                name=self._target.name,
                format=self._format,
                **settings.native(),
            )
        except BaseException:
            self._target.discard()
            raise
        self._finished = False

    @property
    def name(self) -> str:
        """The path the file will have once closed."""
        return self._target.name

    @property
    def records_written(self) -> int:
        """Records written so far."""
        return self._native.records

    @property
    def bytes_written(self) -> int:
        """Bytes of framed records written so far, before compression."""
        return self._native.bytes

    def write(self, record: Record) -> None:
        """Writes one record: a bytes-like object, ``str`` (written as UTF-8), or a
        recordkit message (``rk.train.Example``, ``SequenceExample``,
        ``rk.ofrecord.OFRecord``), encoded straight from the message: the same
        bytes as ``write(message.SerializeToString())``, without them passing
        through Python."""
        self._native.write(record)

    def write_many(self, records: Iterable[Record]) -> int:
        """Writes every record of an iterable (as ``write`` takes them), framed
        in bulk; returns how many."""
        return self._native.write_many(records)

    def flush(self) -> None:
        """Pushes buffered records to the (temporary) file. A compressed stream gets
        a sync flush point: everything written so far can be read from the file
        (``tf_record_iterator`` reads up to the point), while the writer stays open."""
        self._native.flush()

    def tell(self) -> int:
        """The bytes in the file so far, after compression. Flushes first (a flush
        point in a compressed stream costs a little compression): call it rarely."""
        self.flush()
        temp = self._target.temp_path
        return os.path.getsize(temp) if temp is not None else int(self._target.handle.tell())

    def close(self) -> None:
        """Finishes the file and moves it under its final name. Safe to call twice."""
        if self._finished:
            return
        try:
            self._native.close()
            self._target.commit()
        except BaseException:
            self._target.discard()
            raise
        finally:
            self._finished = True

    def _finish_unnamed(self) -> str | None:
        """Finishes the file under its temporary name (for a set's commit); returns that name."""
        try:
            self._native.close()
        except BaseException:
            self.abort()
            raise
        return self._target.temp_path

    def abort(self) -> None:
        """Stops writing and deletes the unfinished file; nothing appears under its name."""
        if self._finished:
            return
        self._finished = True
        try:
            self._native.close()
        except Exception:
            pass  # the file is being thrown away; a failure to finish it does not matter
        self._target.discard()

    def __enter__(self) -> "_RecordWriter":
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        if getattr(self, "_finished", True):
            return
        # Never closed: the file may be incomplete, so it must not appear.
        records = self._native.records
        self.abort()
        warnings.warn(
            f"{type(self).__name__} for {self.name!r} was never closed; its {records} records "
            "were discarded. Use `with` or call close().",
            RuntimeWarning,
            stacklevel=2,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class TFRecordWriter(_RecordWriter):
    """Writes a TFRecord file that TensorFlow reads back unchanged.

    The file is written under a temporary name beside ``path`` and renamed when
    ``close`` succeeds (or the ``with`` block ends without an exception),
    so a file under ``path`` is always complete. An exception inside ``with``,
    or ``abort``, deletes the temporary file. An uncompressed file is
    byte-identical to ``tf.io.TFRecordWriter``'s for the same records.

    Args:
        path: A local path, a URL (with fsspec) or an open binary file (written
            directly, no renaming).
        compression: ``None`` (default), ``"gzip"`` or ``"zlib"``, any case,
            or a ``TFRecordOptions`` (as ``tf.io.TFRecordWriter(path,
            options)`` takes it). The whole file is one compressed stream, as
            TensorFlow writes it.
        options: A ``TFRecordOptions`` (or a compression name), by keyword.
        compression_level: 0 (stored, fastest) to 9 (smallest); default 6.
        fsync: On ``close``, flush the file to the disk before the rename
            and the folder after it, so that the file survives a power cut.
        atomic: True (default): write under a temporary name and rename on
            close, so that ``path`` only ever holds a complete file. False:
            write straight to ``path``, as TensorFlow's writer does, for a file
            read while it grows (an event log): what ``flush`` pushed out
            can be read, with ``tf_record_iterator`` or
            ``TFRecordReader(path, follow=True)``, while the writer is open;
            a writer that dies leaves the file cut short at its last write
            (reported as damage, never as a complete file).

    Temporary files left by writers that were killed (``kill -9``) for the
    same name are removed when the next writer of that name starts.

    Example:
        >>> with TFRecordWriter("train.tfrecord") as writer:  # doctest: +SKIP
        ...     writer.write(example.SerializeToString())
    """

    _format = "tfrecord"


class OFRecordWriter(_RecordWriter):
    """Writes a OneFlow OFRecord file: ``int64`` little-endian length, then payload.

    OneFlow's writers use native byte order (little-endian on every platform it
    runs on); recordkit always writes little-endian. Empty records are refused
    because OneFlow's reader rejects a length of zero. Atomic like
    ``TFRecordWriter``. See ``write_ofrecord_parts`` for a dataset folder.
    """

    _format = "ofrecord"


@contextlib.contextmanager
def all_or_nothing(open_writer: Callable[[Any], _RecordWriter], targets: Sequence[Any], *, whole_set: bool = False,
                   fsync: bool = False, in_turn: bool = False) -> Iterator[Any]:
    """Opens a writer for each target with ``open_writer``; closes every one if
    the block succeeds, and aborts every one if it raises (or if one cannot be
    opened), so a set of files (shards, parts) appears whole or not at all, and
    a failed set leaves neither temporary files nor folders made for it.

    The block gets the list of writers, all open at once (records dealt
    round-robin need that); with ``in_turn``, an iterator instead, which opens
    each writer as the block reaches it and first finishes the one before under
    its temporary name, so one file is open at a time whatever the count (2000
    shards open at once pass the usual limit of 1024 open files). The block
    must take every writer: a set with a file missing raises.

    With ``whole_set``, the writers are a complete shard set or OneFlow part
    folder, and every earlier shard or part of the same name (any total) is
    removed once the new files are in place, so old and new sets never mix.
    A manifest of the new files is written before the first rename (see
    ``recordkit._shardsets``); ``fsync`` flushes it as the writers' own
    ``fsync`` flushes their files and folder.
    """
    writers: list[_RecordWriter] = []

    def opened_in_turn() -> Iterator[_RecordWriter]:
        for target in targets:
            if writers:
                writers[-1]._finish_unnamed()  # its file closed before the next opens
            writers.append(open_writer(target))
            yield writers[-1]

    try:
        if in_turn:
            yield opened_in_turn()
        else:
            for target in targets:
                writers.append(open_writer(target))
            yield writers
        if len(writers) < len(targets):
            raise RuntimeError(f"{len(targets) - len(writers)} of the {len(targets)} files were never written")
        stale = replaced_files([w.name for w in writers]) if whole_set else []
        if whole_set:
            # Every file finished, then the manifest readers check, then the renames:
            # a crash between two renames leaves a set that fails its check, not a mix.
            temps = [writer._finish_unnamed() for writer in writers]
            if all(temps):
                write_manifest([w.name for w in writers], temps, stale, fsync=fsync)  # type: ignore[arg-type]
        for writer in writers:
            writer.close()
    except BaseException:
        for writer in writers:
            writer.abort()
        for writer in writers:  # a folder the first writer made held the others' files until now
            writer._target.remove_folders_made()
        raise
    remove_files(stale)


def count_records(
    path: Source | list[Source],
    compression: str | None = "auto",
    *,
    format: Literal["auto", "tfrecord", "ofrecord"] = "auto",
) -> int:
    """Counts the records in a file, or in every file a source names, without reading payloads.

    ``path`` is anything ``recordkit.list_files`` takes (a path or URL, a
    glob, a folder, ``name@N``, a list) or an open binary file; the result is
    the total. Length fields (and, for TFRecord, their CRCs) are still checked
    and truncation is still detected; payload CRCs are not. Compressed files
    are decompressed, since there is no other way through them.

    Args:
        format: ``"auto"`` (default): OneFlow ``part-NNNNN`` files are
            OFRecord, the rest TFRecord, as the ``recordkit`` command decides.

    Raises:
        DataLossError: If the framing is damaged.
    """
    check_format(format)
    total = 0
    for source in expand_sources(path):
        opened = open_input(source)
        file_format = record_format(opened.name) if format == "auto" else format
        try:
            scanner = _native.RecordScanner(
                opened.handle,
                name=opened.name,
                format=file_format,
                compression=reader_compression(compression),
                verify=False,
            )
            try:
                total += scanner.count()
            finally:
                scanner.close()
        finally:
            opened.close()
    return total


def write_ofrecord_parts(
    records: Iterable[bytes],
    directory: str | os.PathLike[str],
    num_parts: int = 1,
    *,
    suffix_length: int = 5,
    fsync: bool = False,
) -> list[str]:
    """Writes records as a OneFlow dataset folder: ``part-00000``, ``part-00001``, ...

    Records are dealt round-robin, so parts differ in size by at most one
    record. Every part is written under a temporary name and all are renamed
    together at the end; then every older ``part-`` file of the folder is
    removed, so old and new parts never mix.

    Args:
        records: Serialized OFRecord messages (bytes).
        directory: The dataset folder; created if missing.
        num_parts: How many ``part-`` files to write.
        suffix_length: Digits in the part number (OneFlow's
            ``part_name_suffix_length``; 5 gives ``part-00000``).
        fsync: Flush every part, the manifest and the folder to the disk
            before the write returns.

    Returns:
        The paths written, in part order.
    """
    if num_parts < 1:
        raise ValueError(f"num_parts must be at least 1, not {num_parts}")
    directory = os.fspath(directory)
    paths = [os.path.join(directory, f"part-{i:0{suffix_length}d}") for i in range(num_parts)]
    with all_or_nothing(lambda p: OFRecordWriter(p, fsync=fsync), paths, whole_set=True, fsync=fsync) as writers:
        for writer, record in zip(itertools.cycle(writers), records):
            writer.write(record)
    return paths
