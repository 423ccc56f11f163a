"""Columns out of record files, without a Python object per record.

``read_examples`` frames, CRC-checks and parses each batch in one call
into Rust. Writing columns is ``recordkit.writing``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Literal, Mapping, Sequence


from recordkit import _native
from recordkit._sources import Source, open_input
from recordkit.features import FeatureSpec
from recordkit.parsing import assemble_outputs, request_columns, plan_example, Requests, check_batch_size
from recordkit.discovery import check_format, expand_sources, reader_compression, record_format
from recordkit.records import warn_skipped

__all__ = ["read_examples", "example_column_batches", "scanned_batches", "scanner_batches", "per_file_limit"]


def read_examples(
    paths: Source | Sequence[Source],
    features: Mapping[str, FeatureSpec],
    batch_size: int = 1024,
    *,
    compression: str | None = "auto",
    verify: bool = True,
    format: Literal["auto", "tfrecord", "ofrecord"] = "auto",
) -> Iterator[dict[str, Any]]:
    """Yields parsed batches of Examples (or OFRecords) straight from files.

    Each batch is read, CRC-checked and parsed in Rust, with the GIL released;
    with more than one thread (``recordkit.set_num_threads``), threads read
    and parse the next batches, a whole batch each, while the caller takes this
    one (as many as hold about 16 MiB of records; larger batches are each split
    between the threads instead).
    Outputs are those of ``parse_example``. Batches do not span files, so
    the last batch of each file may be smaller.

    Args:
        paths: Anything ``recordkit.list_files`` takes (a path or URL,
            a glob, a folder, ``name@N``, a list of them), or open file objects.
        features: The parse spec, as for ``parse_example``.
        batch_size: Records per batch. With large values (images of 100 KB
            and more), batches under about 30 MB of values read 2-3x faster:
            malloc keeps that much freed memory for the next batch, and gives
            more back to the system, to be faulted in again (see the README).
        compression: As for ``TFRecordReader``.
        verify: Check payload CRCs.
        format: ``"auto"`` (OneFlow's ``part-N`` files are OFRecord, whose
            feature maps are parsed with the same spec; the rest TFRecord),
            ``"tfrecord"`` or ``"ofrecord"``.

    Raises:
        DataLossError: On damage (after yielding the batches before it).
        ParseError: When a record does not fit the spec; ``.index`` is the
            record's index in its file.
        TypeError, ValueError, FileNotFoundError: At the call, before any
            batch is asked for: a spec, batch size or compression that cannot
            be read with, or a source that names no file.
    """
    batch_size = check_batch_size(batch_size)
    reader_compression(compression)
    check_format(format)
    requests = Requests()
    plan_example(features, requests)
    sources = expand_sources(paths)

    def batches() -> Iterator[dict[str, Any]]:
        for count, columns in example_column_batches(sources, requests.as_list(), batch_size,
                                                     compression=compression, verify=verify, format=format):
            yield assemble_outputs(features, request_columns(requests, columns), count, single=False)

    return batches()


def per_file_limit(limit: int, files: int) -> int:
    """How many records each of ``files`` files gives to a sample of ``limit``, so that it sees every file's start."""
    return max(1, -(-limit // files))


def example_column_batches(
    paths: Sequence[Source],
    requests: list[tuple[str, str]],
    batch_size: int,
    *,
    compression: str | None = "auto",
    verify: bool = True,
    limit: int | None = None,
    flat_bytes: bool = False,
    format: str = "auto",
    max_bytes: int | None = None,
) -> Iterator[tuple[int, list[Any]]]:
    """``(records, [(values, counts, uniform)] per request)`` batches of Examples (of
    OFRecords in files of that format: ``format`` as for ``scanned_batches``), framed, checked and parsed in Rust, the next
    batch on other threads while the caller takes this one (counts are -1 where a record
    lacks the feature; where every record holds the same count, they are that one number
    repeated, broadcast read-only past a few records). Batches do not span files. With ``limit``, at most that many
    records, taken from every file in turn (``per_file_limit``). With ``flat_bytes``,
    byte strings come as ``(offsets, data)`` arrays instead of object arrays. With
    ``max_bytes``, a batch ends early once its records hold that many bytes."""
    def batches(scanner: Any, want: int | None, file_format: str) -> Any:
        return _native.ExampleBatches(scanner, requests, batch_size=batch_size, max_bytes=max_bytes, limit=want,
                                      flat_bytes=flat_bytes,
                                      schema="oneflow" if file_format == "ofrecord" else "tensorflow")

    for _, count, columns in scanned_batches(paths, batches, format=format, compression=compression,
                                             verify=verify, limit=limit):
        yield count, columns


def scanned_batches(
    paths: Sequence[Source],
    batches: Callable[[Any, int | None, str], Iterable[tuple[int, Any]]],
    *,
    format: str = "auto",
    compression: str | None = "auto",
    verify: bool = True,
    limit: int | None = None,
    on_error: str = "raise",
) -> Iterator[tuple[str, int, Any]]:
    """``(file name, records, parsed)`` for each batch of ``batches(scanner, at_most, format)``,
    an iterable over a ``RecordScanner`` of each file in turn (``at_most`` is None for
    every record; an iterable with ``close`` is closed after). ``format`` is the file's:
    with ``"auto"``, as ``recordkit.discovery.record_format`` decides for every
    reader (OneFlow's ``part-N`` files are OFRecord). Batches do not span
    files. With ``limit``, at most that many records, taken from every file in turn
    (``per_file_limit``). With ``on_error="skip"``, damaged stretches are
    skipped, each with a ``DataLossWarning`` once its file is done (or left)."""
    taken = 0
    for path in paths:
        want = None if limit is None else min(per_file_limit(limit, len(paths)), limit - taken)
        if want is not None and want <= 0:
            return
        opened = open_input(path)
        try:
            file_format = record_format(opened.name) if format == "auto" else format
            scanner = _native.RecordScanner(
                opened.handle, name=opened.name, format=file_format, compression=reader_compression(compression),
                verify=verify, skip_damaged=on_error == "skip",
            )
            parsed_batches = batches(scanner, want, file_format)
            try:
                for count, parsed in parsed_batches:
                    taken += count
                    yield opened.name, count, parsed
            finally:
                try:
                    if on_error == "skip":  # also when the caller stopped early: what was skipped is told
                        # A scanner taken over by a parser hands its skips to the parser.
                        warn_skipped(opened.name, getattr(parsed_batches, "take_skipped", scanner.take_skipped)())
                finally:
                    getattr(parsed_batches, "close", lambda: None)()
                    scanner.close()
        finally:
            opened.close()


def scanner_batches(scanner: Any, want: int | None, file_format: str, batch_size: int) -> Iterator[tuple[int, list[bytes]]]:
    """``(records, [bytes, ...])`` batches of up to ``batch_size`` raw records from
    ``scanner`` (of a ``file_format`` file), at most ``want`` in all (every record with None)."""
    read = 0
    while want is None or read < want:
        batch = scanner.next_batch(batch_size if want is None else min(batch_size, want - read), 16 << 20)
        if not batch:
            return
        read += len(batch)
        yield len(batch), batch
