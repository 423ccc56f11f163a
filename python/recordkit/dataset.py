"""Streaming datasets over many record files, for training loops.

``Dataset`` reads many TFRecord or OFRecord files as one stream: split
across distributed ranks and DataLoader workers so that every record goes to
exactly one of them, shuffled from a seed, batched and parsed into NumPy
columns with one call into Rust per batch, and prefetched on a background
thread. Memory is bounded by the buffers you choose, whatever the file sizes.

>>> ds = (rk.Dataset("data/train-*.tfrecord", features=spec)  # doctest: +SKIP
...       .shuffle(10_000, seed=0).batch(1024).prefetch(2))
>>> for batch in ds:  # doctest: +SKIP
...     batch["label"]  # a NumPy array of 1024 labels
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import itertools
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping, Sequence

import numpy as np

from recordkit import _native
from recordkit._shardsets import file_fingerprint
from recordkit._sources import PathLike, import_fsspec, split_url, open_input
from recordkit.discovery import RecordFormat, check_format, list_files, reader_compression, record_format
from recordkit.errors import RecordkitError
from recordkit.features import FeatureSpec
from recordkit.index import checked_index, existing_index
from recordkit.threads import one_thread_per_worker
from recordkit.parsing import batch_parser, check_batch_size, check_specs, parse_single_example

__all__ = ["Dataset"]

# --- splitting the work --------------------------------------------------------------------

CHECKPOINT_EVERY = 1024  # records between remembered frame offsets, for seeking into a file
_BLOCK_RECORDS = 256  # records read from one file before moving to the next in the cycle
_BLOCK_BYTES = 128 << 10


@dataclass(frozen=True)
class _Survey:
    """What splitting a file by record ranges needs: its record count and where to seek."""

    records: int
    checkpoints: np.ndarray  # frame offsets of records 0, CHECKPOINT_EVERY, 2 * CHECKPOINT_EVERY ...


@dataclass(frozen=True)
class _Unit:
    """Records ``start <= i < stop`` of a file with ``i % stride == phase``."""

    path: str
    format: RecordFormat
    start: int = 0
    stop: int | None = None
    stride: int = 1
    phase: int = 0
    survey: _Survey | None = None


def survey_file(path: str, fmt: RecordFormat) -> _Survey | None:
    """Counts a local uncompressed file's records, from its index file when it has
    one (``recordkit index``), else from its headers; None for files that cannot be
    split by range."""
    if split_url(path)[0] is not None:
        return None  # remote: counting means reading the whole object
    scanner = _native.RecordScanner(path, name=path, format=fmt, verify=False)
    try:
        if scanner.compression != "none":
            return None  # reaching record i means decompressing everything before it
        index = existing_index(path) if fmt == "tfrecord" else None
        if index is not None:
            offsets, _ = checked_index(path, index)
            return _Survey(len(offsets), offsets[::CHECKPOINT_EVERY].copy())
        records, checkpoints = 0, []
        while True:
            offsets, _ = scanner.next_frames(64 * CHECKPOINT_EVERY)
            if not len(offsets):
                break
            checkpoints.append(offsets[-records % CHECKPOINT_EVERY :: CHECKPOINT_EVERY])
            records += len(offsets)
        return _Survey(records, np.concatenate(checkpoints) if checkpoints else np.zeros(0, np.uint64))
    finally:
        scanner.close()


def _work_plan(
    files: Sequence[tuple[str, RecordFormat, _Survey | None]],
    consumer: int,
    consumers: int,
    shift: int,
    even: bool = False,
) -> list[_Unit]:
    """The units one consumer reads so that each record goes to exactly one consumer.

    Files with a survey are cut into ``consumers`` near-equal record ranges;
    consumer ``k`` takes range ``(k - carry + shift) % consumers`` of each,
    where ``carry`` (the running total of remainders) hands the larger ranges
    round the consumers, so that totals differ by at most one record. Other
    files (compressed, remote) are dealt out whole, or, when there are fewer
    such files than consumers, shared by record stride. ``shift`` (the same
    for every consumer) rotates the assignment between epochs. ``even``
    (range-split files only) drops the one record a consumer may have over
    ``total // consumers``, so that every consumer gets exactly that many.
    """
    units: list[_Unit] = []
    carry = 0
    whole = [(path, fmt) for path, fmt, survey in files if survey is None]
    for path, fmt, survey in files:
        if survey is None:
            continue
        size, extra = divmod(survey.records, consumers)
        piece = (consumer - carry + shift) % consumers
        start = piece * size + min(piece, extra)
        stop = start + size + (piece < extra)
        carry = (carry + extra) % consumers
        if stop > start:
            units.append(_Unit(path, fmt, start, stop, survey=survey))
    if even:
        if whole:
            raise ValueError(
                f"even_shares needs every file split by record ranges, and {whole[0][0]} cannot be "
                "(compressed or remote files are read whole or by stride)"
            )
        total = sum(survey.records for _, _, survey in files if survey is not None)
        surplus = sum(unit.stop - unit.start for unit in units) - total // consumers  # type: ignore[operator]
        if surplus > 0:
            last = units.pop()
            if last.stop - surplus > last.start:  # type: ignore[operator]
                units.append(dataclasses.replace(last, stop=last.stop - surplus))  # type: ignore[operator]
    rotated = (consumer - shift) % consumers
    if len(whole) >= consumers:
        units += [_Unit(path, fmt) for path, fmt in whole[rotated::consumers]]
    elif whole:
        j = rotated % len(whole)
        path, fmt = whole[j]
        units.append(_Unit(path, fmt, stride=len(range(j, consumers, len(whole))), phase=rotated // len(whole)))
    return units


def _distributed() -> tuple[int, int]:
    """``(world_size, rank)`` from an initialised ``torch.distributed``, else torchrun's environment."""
    torch = sys.modules.get("torch")
    if torch is not None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_world_size(), dist.get_rank()
    world, rank = os.environ.get("WORLD_SIZE"), os.environ.get("RANK")
    if world and rank and world.isdigit() and rank.isdigit() and int(rank) < int(world):
        return int(world), int(rank)
    return 1, 0


def _worker_info() -> tuple[int, int, int | None]:
    """``(num_workers, worker_id, dataloader_seed)`` inside a PyTorch DataLoader worker, else ``(1, 0, None)``."""
    torch = sys.modules.get("torch")
    if torch is not None:
        info = torch.utils.data.get_worker_info()
        if info is not None:
            one_thread_per_worker()  # the workers already use the cores
            return info.num_workers, info.id, info.seed - info.id
    return 1, 0, None


# --- reading -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ReadOptions:
    compression: str
    verify: bool
    block_records: int = _BLOCK_RECORDS


def _unit_blocks(unit: _Unit, options: _ReadOptions) -> Iterator[list[bytes]]:
    """The unit's records, in blocks (the file is open only while this runs)."""
    opened = open_input(unit.path)
    try:
        scanner = _native.RecordScanner(
            opened.handle, name=opened.name, format=unit.format,
            compression=options.compression, verify=options.verify,
        )
        try:
            index = 0
            if unit.start and unit.survey is not None:
                checkpoint = unit.start // CHECKPOINT_EVERY
                index = checkpoint * CHECKPOINT_EVERY
                scanner.seek(int(unit.survey.checkpoints[checkpoint]), index)
            while index < unit.start:
                skipped = len(scanner.next_frames(unit.start - index)[0])
                if not skipped:
                    raise _changed(unit)
                index += skipped
            while unit.stop is None or index < unit.stop:
                want = options.block_records if unit.stop is None else min(options.block_records, unit.stop - index)
                block = scanner.next_batch(want, _BLOCK_BYTES)
                if not block:
                    if unit.stop is not None:
                        raise _changed(unit)
                    return
                if unit.stride > 1:
                    first = (unit.phase - index) % unit.stride
                    index += len(block)
                    block = block[first :: unit.stride]
                    if not block:
                        continue
                else:
                    index += len(block)
                yield block
        finally:
            scanner.close()
    finally:
        opened.close()


def _changed(unit: _Unit) -> RecordkitError:
    return RecordkitError(
        f"{unit.path} has fewer records than the {unit.survey.records if unit.survey else '?'} counted "
        "when the dataset was planned: was it rewritten while being read?"
    )


_READ_AHEAD_BLOCKS = 4


def _interleave(
    units: Iterable[_Unit], cycle_length: int, options: _ReadOptions, parallel: bool
) -> Iterator[list[bytes]]:
    """Blocks from up to ``cycle_length`` units in turn; a finished unit's place goes to the next.

    With ``parallel``, every unit in the cycle is read on its own thread, a few
    blocks ahead, so that slow reads (remote files) overlap; the order stays
    the same.
    """
    def open_unit(unit: _Unit) -> Iterator[list[bytes]]:
        blocks = _unit_blocks(unit, options)
        return _Background(blocks, _READ_AHEAD_BLOCKS, "recordkit-read") if parallel else blocks

    pending = iter(units)
    active = [open_unit(unit) for unit in itertools.islice(pending, cycle_length)]
    try:
        while active:
            i = 0
            while i < len(active):
                block = next(active[i], None)
                if block is None:
                    following = next(pending, None)
                    if following is None:
                        del active[i]
                    else:
                        active[i] = open_unit(following)
                    continue
                yield block
                i += 1
    finally:
        for iterator in active:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()


# --- the steps -----------------------------------------------------------------------------


def _rng(*keys: int) -> np.random.Generator:
    return np.random.default_rng([k & 0xFFFF_FFFF_FFFF_FFFF for k in keys])


def _seed(*keys: int) -> int:
    """A 64-bit seed drawn from ``keys``."""
    return int(_rng(*keys).integers(1 << 63))


def _shuffle(chunks: Iterator[list[Any]], buffer_size: int, seed: int) -> Iterator[list[Any]]:
    """TensorFlow's buffer shuffle: each incoming item takes the place of a
    uniformly drawn buffered one, which goes out (the loop runs in Rust)."""
    buffer = _native.ShuffleBuffer(buffer_size, seed)
    for chunk in chunks:
        out = buffer.push(chunk)
        if out:
            yield out
    rest = buffer.drain()
    if rest:
        yield rest


def _batch(chunks: Iterator[list[Any]], size: int, drop_remainder: bool, collate: Callable[[list[Any]], Any]) -> Iterator[list[Any]]:
    pending: list[Any] = []
    for chunk in chunks:
        pending.extend(chunk)
        if len(pending) >= size:
            batches = [collate(pending[i : i + size]) for i in range(0, len(pending) - size + 1, size)]
            del pending[: len(batches) * size]
            yield batches
    if pending and not drop_remainder:
        yield [collate(pending)]


def _take(chunks: Iterator[list[Any]], count: int) -> Iterator[list[Any]]:
    if count <= 0:
        return
    for chunk in chunks:
        if len(chunk) >= count:
            yield chunk[:count]
            return
        count -= len(chunk)
        yield chunk


_END = object()


class _Background:
    """An iterator run on a background thread, up to ``depth`` items ahead.

    The thread starts at once. The Rust calls it makes release the GIL, so
    reading and parsing overlap with the consumer's work (or, one per file,
    with the reading of other files). Errors surface in the consumer, in
    order. ``close`` stops the thread; the iterator it ran is closed on
    that thread.

    A consumer that finds nothing ready sleeps until ``depth`` items are (or
    the end): each wake-up of a thread on another core costs tens of
    microseconds on a VM, and waking it for every item, when the consumer is
    faster than the thread, cost more than the thread saved (1 M shuffled
    records, ``prefetch(2)``, a loop that only takes the batches: 263 ms of CPU
    against 188 without the thread; 240 waking it for every second item, 213
    for every eighth with ``prefetch(8)``). Where the consumer does work of its
    own that releases the GIL (a training step), the thread overlaps it.
    """

    def __init__(self, source: Iterator[Any], depth: int, name: str) -> None:
        self._depth = max(1, depth)
        self._ready: collections.deque[Any] = collections.deque()
        self._changed = threading.Condition(threading.Lock())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, args=(source,), name=name, daemon=True)
        self._thread.start()

    def _put(self, item: Any, last: bool = False) -> bool:
        with self._changed:
            while len(self._ready) >= self._depth and not self._stop.is_set():
                self._changed.wait(0.05)
            if self._stop.is_set():
                return False
            self._ready.append(item)
            if last or len(self._ready) >= self._depth:
                self._changed.notify_all()
            return True

    def _work(self, source: Iterator[Any]) -> None:
        try:
            for item in source:
                if not self._put(item):
                    break
            else:
                self._put(_END, last=True)
        except BaseException as error:  # noqa: BLE001 - handed to the consumer, which raises it
            self._put(error, last=True)
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> "_Background":
        return self

    def __next__(self) -> Any:
        if self._stop.is_set():
            raise StopIteration
        with self._changed:
            while not self._ready:
                if self._stop.is_set():
                    raise StopIteration
                self._changed.wait()
            full = len(self._ready) >= self._depth
            item = self._ready.popleft()
            if full:
                self._changed.notify_all()  # the thread may wait for room
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, BaseException):
            self.close()
            raise item
        return item

    def close(self) -> None:
        """Stops the thread (waiting up to a second for a read in progress to end)."""
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    def __del__(self) -> None:
        self._stop.set()


def _prefetch(chunks: Iterator[list[Any]], depth: int) -> Iterator[list[Any]]:
    """``chunks`` computed on a background thread, up to ``depth`` chunks ahead."""
    return _Background(chunks, depth, "recordkit-prefetch")


def _collate_records(items: list[Any]) -> Any:
    """Batches per-record dicts (``features`` set and a ``.map`` before ``.batch``): arrays and
    numbers of one shape and dtype are stacked, anything else becomes a list."""
    if not items or not isinstance(items[0], dict):
        return items
    batch: dict[str, Any] = {}
    for key in items[0]:
        values = [item[key] for item in items]
        if all(isinstance(v, (np.ndarray, np.generic, int, float)) for v in values):
            arrays = [np.asarray(v) for v in values]
            if len({(a.shape, a.dtype) for a in arrays}) == 1:
                batch[key] = np.stack(arrays)
                continue
        batch[key] = values
    return batch


_Stream = Callable[[tuple[int, ...]], Iterator[list[Any]]]  # epoch path -> chunks of items


def _mapped(upstream: _Stream, fn: Callable[[Any], Any]) -> _Stream:
    return lambda path: ([fn(item) for item in chunk] for chunk in upstream(path))


@dataclass(frozen=True)
class _Step:
    kind: str
    args: tuple[Any, ...]


class _Identities:
    """File identities for saved states: a local file's size and the CRC-32 of its
    first and last 4 KiB, a URL's size and the version tag its filesystem reports.
    A local file's is read again only when its size or modification time changed."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[Any, str]] = {}

    def get(self, path: str) -> str:
        if split_url(path)[0] is not None:
            known = self._known.get(path)
            if known is None:
                known = self._known[path] = (None, _url_identity(path))
            return known[1]
        info = os.stat(path)
        stamp = (info.st_size, info.st_mtime_ns)
        known = self._known.get(path)
        if known is None or known[0] != stamp:
            fingerprint = file_fingerprint(path)
            known = self._known[path] = (stamp, f"{fingerprint['size']}:{fingerprint['head']:08x}:{fingerprint['tail']:08x}")
        return known[1]


def _url_identity(url: str) -> str:
    """A URL's size and version tag (ETag, checksum or modification time) as its filesystem reports them."""
    fs, path = import_fsspec().core.url_to_fs(url)
    info = fs.info(path)
    tag = next((info[k] for k in ("ETag", "etag", "md5", "crc32c", "LastModified", "last_modified", "mtime", "created")
                if info.get(k) is not None), "")
    return f"{info.get('size')}:{tag}"


_STATE_FORMAT = "recordkit.Dataset/2"  # 2: with each file's identity


@dataclass
class _EpochProgress:
    """How far one iteration (epoch) of a dataset has gone."""

    epoch: int
    consumer: tuple[int, int]
    delivered: int = 0
    finished: bool = False


class Dataset:
    """A stream of records (or parsed batches) from many files.

    Steps chain as in ``tf.data``; each returns a new dataset::

        ds = (rk.Dataset("gs://bucket/train@64", features=spec)
              .shuffle(10_000, seed=0)     # record buffer; file order reshuffled every epoch
              .batch(1024)                 # parsed into NumPy columns, one Rust call per batch
              .map(augment)
              .prefetch(2))                # on a background thread

    Args:
        source: Paths, URLs, globs, directories, ``name@N`` shard sets or
            OneFlow ``part-NNNNN`` folders, or a list of them (see
            ``list_files``).
        features: A parse spec as for ``parse_example``. Batches are then
            dicts of columns, unbatched items per-record dicts. None yields
            raw records (``bytes``; a batch is a list of them).
        format: ``"auto"`` (OneFlow's ``part-N`` names are OFRecord, others
            TFRecord), ``"tfrecord"`` or ``"ofrecord"``.
        compression: As for ``TFRecordReader``; ``"auto"`` detects it per file.
        verify: Check every payload CRC.
        cycle_length: How many files are read at a time, in turn, so that one
            slow or huge file does not hold up the rest and a shuffle buffer
            mixes records of several files. Default: 4 when shuffling, else 1
            (files one after another, in order).
        parallel_reads: Read each file of the cycle on its own thread, a
            few blocks ahead, so that slow reads overlap (the order is the
            same). Default: for URLs (fsspec), where each read waits on the
            network.
        even_shares: Give every consumer exactly ``total // consumers``
            records per epoch (fewer than ``consumers`` records are left out,
            different ones as shares rotate), so that distributed ranks run
            the same number of steps; without it, shares differ by up to one
            record. Needs local uncompressed files.

    Splitting: every record goes to exactly one consumer per epoch, the
    consumers being ``.shard()``'s shards (or else the ranks of an
    initialised ``torch.distributed``, or torchrun's ``RANK`` and
    ``WORLD_SIZE``) times the PyTorch DataLoader workers, which are found
    without a ``worker_init_fn``. Local uncompressed files are split by record
    ranges (their headers are counted once, payloads unread), so every
    consumer gets the same number of records, give or take one, even from a
    single file. Compressed and remote files are dealt out whole, or shared by
    record stride when there are fewer of them than consumers.

    Epochs: iterating again starts the next epoch (``set_epoch`` sets it, as
    for PyTorch's ``DistributedSampler``). With a seed, an epoch's order is a
    function of the seed and the epoch number alone, and which records each
    consumer gets rotates between epochs.
    """

    def __init__(
        self,
        source: PathLike | Sequence[PathLike],
        features: Mapping[str, FeatureSpec] | None = None,
        *,
        format: Literal["auto", "tfrecord", "ofrecord"] = "auto",
        compression: str | None = "auto",
        verify: bool = True,
        cycle_length: int | None = None,
        parallel_reads: bool | None = None,
        even_shares: bool = False,
    ) -> None:
        check_format(format)
        if cycle_length is not None and cycle_length < 1:
            raise ValueError(f"cycle_length must be at least 1, not {cycle_length}")
        if features is not None:
            check_specs(features)
        self._files: list[tuple[str, RecordFormat]] = [
            (path, record_format(path) if format == "auto" else format) for path in list_files(source)
        ]
        if features is not None and any(fmt == "ofrecord" for _, fmt in self._files):
            raise ValueError(
                "features= parses tf.train.Example records, and these are OFRecord files: "
                "use features=None and .map(rk.decode_ofrecord)"
            )
        self.features = features
        self._options = _ReadOptions(reader_compression(compression), bool(verify))
        self._cycle_length = cycle_length
        self._even_shares = bool(even_shares)
        self._parallel_reads = (
            any(split_url(path)[0] is not None for path, _ in self._files) if parallel_reads is None else parallel_reads
        )
        self._steps: tuple[_Step, ...] = ()
        self._shard: tuple[int, int] | None = None
        self._epoch = 0
        self._progress: _EpochProgress | None = None  # of the latest iteration
        self._resume: tuple[int, list[int]] | None = None  # (items to pass over, consumer) for the next
        _register_with_torch()
        self._surveys: dict[str, _Survey | None] = {}  # shared by every dataset chained from this one
        self._identities = _Identities()  # likewise

    @property
    def files(self) -> list[str]:
        """The files read, in their natural order."""
        return [path for path, _ in self._files]

    # chaining

    def _then(self, kind: str, *args: Any) -> "Dataset":
        following = copy.copy(self)
        following._steps = self._steps + (_Step(kind, args),)
        return following

    def shard(self, num_shards: int, index: int) -> "Dataset":
        """This consumer's share: every record goes to exactly one of ``num_shards`` shards.

        Use it for distributed ranks (``.shard(world_size, rank)``) when they are
        not found automatically; DataLoader workers still split each shard.
        It must come before the other steps.
        """
        if not 0 <= index < num_shards:
            raise ValueError(f"shard index {index} is not in [0, {num_shards})")
        if self._steps:
            raise ValueError("call .shard() before the other steps: it decides which records are read")
        following = copy.copy(self)
        following._shard = (num_shards, index)
        return following

    def shuffle(self, buffer_size: int, seed: int | None = None) -> "Dataset":
        """Shuffles records through a buffer of ``buffer_size``, and the file order every epoch.

        Without a seed, one is drawn now. Pass a seed in distributed training,
        so that every rank agrees on how the records are dealt out each epoch
        (without one, each consumer keeps the same share every epoch).
        """
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be at least 1, not {buffer_size}")
        if any(step.kind == "shuffle" for step in self._steps):
            raise ValueError("the dataset is already shuffled; one .shuffle() sets the buffer and the seed")
        explicit = seed is not None
        seed = int(seed) if explicit else int(np.random.SeedSequence().entropy)  # type: ignore[arg-type]
        return self._then("shuffle", int(buffer_size), seed, explicit)

    def repeat(self, epochs: int | None = None) -> "Dataset":
        """Reads everything before this step ``epochs`` times (forever with None), a new epoch each time."""
        if epochs is not None and epochs < 0:
            raise ValueError(f"epochs must be at least 0, not {epochs}")
        return self._then("repeat", epochs)

    def batch(self, batch_size: int, drop_remainder: bool = False) -> "Dataset":
        """Groups items into batches; with ``features``, parsed into columns in one Rust call per batch."""
        batch_size = check_batch_size(batch_size)
        if any(step.kind == "batch" for step in self._steps):
            raise ValueError("the dataset is already batched")
        return self._then("batch", int(batch_size), bool(drop_remainder))

    def map(self, fn: Callable[[Any], Any]) -> "Dataset":
        """Applies ``fn`` to every item (every batch, after ``.batch``)."""
        if not callable(fn):
            raise TypeError(f"map needs a callable, not {type(fn).__name__}")
        return self._then("map", fn)

    def take(self, count: int) -> "Dataset":
        """At most ``count`` items (batches, after ``.batch``)."""
        return self._then("take", int(count))

    def prefetch(self, depth: int = 2) -> "Dataset":
        """Prepares up to ``depth`` batches ahead (blocks of records before ``.batch``) on a background thread.

        The thread overlaps the reading with the consumer's own work where that
        releases the GIL (a training step); a loop that only takes batches runs
        faster without it, since each hand-over between threads costs (1 M
        shuffled tutorial records, 2 cores: 5.3 M records/s without,
        4.3-4.8 M/s with ``prefetch(2)`` to ``prefetch(8)``). In a PyTorch
        DataLoader worker it does nothing: the worker process already reads
        ahead of the training loop.
        """
        if depth < 1:
            raise ValueError(f"depth must be at least 1, not {depth}")
        return self._then("prefetch", int(depth))

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the next iteration reads (later ones count on from it)."""
        self._epoch = int(epoch)
        self._resume = None

    # saving and resuming

    def state_dict(self) -> dict[str, Any]:
        """Where this consumer stands, as a small JSON-able dict: taken mid-epoch, it
        lets ``load_state_dict`` resume with exactly the items not yet delivered.

        The position is the epoch and how many items (batches, after ``.batch``)
        the latest iteration has handed out; an item counts as delivered once
        ``next()`` has returned it, whatever a ``.prefetch`` read ahead. The
        shuffle seed is saved too, so a seed drawn at random is reused. A
        PyTorch DataLoader worker's dataset saves its own share: torchdata's
        ``StatefulDataLoader`` calls this in every worker (see ``to_torch``).
        """
        progress = self._progress
        if self._resume is not None or progress is None or progress.finished:
            epoch, delivered = self._epoch, self._resume[0] if self._resume else 0
        else:
            epoch, delivered = progress.epoch, progress.delivered
        shuffle = next((step for step in self._steps if step.kind == "shuffle"), None)
        if self._resume is not None:
            consumer = self._resume[1]
        else:
            consumer = list(progress.consumer if progress is not None else self.consumer())
        return {
            "format": _STATE_FORMAT,
            "epoch": epoch,
            "delivered": delivered,
            "seed": shuffle.args[1] if shuffle else None,
            "consumer": consumer,
            "fingerprint": self._fingerprint(),
            "files": self._file_identities(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes from ``state_dict``'s result: the next iteration delivers the
        rest of the saved epoch, in the same order, then later epochs as usual.

        The dataset must be built the same way (files, steps, seed, shards),
        over files that hold what they held when the state was saved (each
        file's size and the CRC of its first and last 4 KiB are saved with it;
        a URL's size and version tag), and read by the same consumer (shard or
        rank and DataLoader worker), or a ``ValueError`` says what differs. Resuming replays the epoch up to the
        saved position without handing anything out (files are read and
        ``.map`` functions run again), so it costs about what reading that far
        did; nothing is skipped or repeated.
        """
        if isinstance(state, Mapping) and state.get("format") == "recordkit.Dataset/1":
            raise ValueError(
                "the state was saved by an older recordkit, which did not record what the files held, so "
                "resuming cannot be shown to deliver the records that were left: start the epoch again "
                "(ds.set_epoch(state['epoch'])) instead of resuming mid-epoch"
            )
        if not isinstance(state, Mapping) or state.get("format") != _STATE_FORMAT:
            raise ValueError(f"not a recordkit Dataset state (expected format {_STATE_FORMAT!r})")
        shuffle = next((i for i, step in enumerate(self._steps) if step.kind == "shuffle"), None)
        if shuffle is not None and not self._steps[shuffle].args[2]:
            # A seed drawn at random by the saved dataset: take it over.
            size, _, explicit = self._steps[shuffle].args
            steps = list(self._steps)
            steps[shuffle] = _Step("shuffle", (size, int(state["seed"]), explicit))
            self._steps = tuple(steps)
        if state["fingerprint"] != self._fingerprint():
            raise ValueError(
                "the state was saved by a dataset built differently (its files, options or steps differ): "
                "resuming it here would not deliver the records that were left"
            )
        saved_files = state.get("files")
        if not isinstance(saved_files, Mapping):
            raise ValueError("not a recordkit Dataset state: it records no files")
        for path, identity in self._file_identities().items():
            if saved_files.get(path) != identity:
                raise ValueError(
                    f"{path} has changed since the state was saved (its size or content differs): "
                    "resuming would deliver other records than the ones that were left; start the epoch again "
                    "(ds.set_epoch(state['epoch'])) instead"
                )
        self._epoch = int(state["epoch"])
        self._resume = (int(state["delivered"]), [int(c) for c in state["consumer"]])

    def _file_identities(self) -> dict[str, str]:
        """Each file's identity (``_Identities``), by path."""
        return {path: self._identities.get(path) for path, _ in self._files}

    def _fingerprint(self) -> str:
        """What decides the order of the items: files, options and steps (a map by its function's name)."""
        import hashlib  # here: only states need it

        def describe(value: Any) -> Any:
            if callable(value):
                return getattr(value, "__qualname__", type(value).__qualname__)
            return repr(value)

        steps = [
            (step.kind, [describe(arg) for arg in (step.args[:2] if step.kind == "shuffle" and not step.args[2] else step.args)])
            for step in self._steps
        ]
        facts = repr((self._files, self._options, self._cycle_length, self._even_shares, self._shard,
                      sorted((k, repr(v)) for k, v in (self.features or {}).items()), steps))
        return hashlib.sha256(facts.encode()).hexdigest()[:16]

    # iterating

    def consumer(self) -> tuple[int, int]:
        """``(index, count)`` of the consumer iterating now: shard (or rank) and DataLoader worker combined."""
        shards, shard = self._shard if self._shard is not None else _distributed()
        workers, worker, _ = _worker_info()
        return shard * workers + worker, shards * workers

    def _surveyed(self) -> list[tuple[str, RecordFormat, _Survey | None]]:
        todo = [(path, fmt) for path, fmt in self._files if path not in self._surveys]
        if todo:
            from concurrent.futures import ThreadPoolExecutor  # here: it costs 10 ms to import

            with ThreadPoolExecutor(max_workers=min(len(todo), os.cpu_count() or 1, 8)) as pool:
                for (path, _), survey in zip(todo, pool.map(lambda f: survey_file(*f), todo)):
                    self._surveys[path] = survey
        return [(path, fmt, self._surveys[path]) for path, fmt in self._files]

    def prepare(self) -> "Dataset":
        """Counts the records of the files split by range now, rather than on first iteration.

        Worth calling before handing the dataset to DataLoader workers, which
        then inherit the counts instead of each making them. Returns self.
        """
        self._surveyed()
        return self

    def __iter__(self) -> Iterator[Any]:
        epoch = self._epoch
        self._epoch += 1
        consumer, consumers = self.consumer()
        skip = 0
        if self._resume is not None:
            skip, saved_by = self._resume
            self._resume = None
            if saved_by != [consumer, consumers]:
                raise ValueError(
                    f"the state being resumed was saved by consumer {saved_by[0]} of {saved_by[1]}, and this is "
                    f"consumer {consumer} of {consumers}: each consumer (shard and DataLoader worker) resumes "
                    "from its own state"
                )
        progress = self._progress = _EpochProgress(epoch, (consumer, consumers), skip)
        shuffle = next((step for step in self._steps if step.kind == "shuffle"), None)
        seed, explicit = (shuffle.args[1], shuffle.args[2]) if shuffle else (0, False)
        local_seed = seed
        _, _, loader_seed = _worker_info()
        if not explicit and loader_seed is not None:
            local_seed = loader_seed  # fresh each DataLoader epoch, and agreed by its workers
        # One consumer reads whole files: no need to count records first.
        files = self._surveyed() if consumers > 1 or self._even_shares else [(p, f, None) for p, f in self._files]
        options = self._options
        cycle_length = self._cycle_length or (4 if shuffle else 1)
        if shuffle:
            # Blocks small enough that the buffer holds several from every file in the cycle.
            block = max(16, min(_BLOCK_RECORDS, shuffle.args[0] // (2 * cycle_length)))
            options = dataclasses.replace(options, block_records=block)

        def source(path: tuple[int, ...]) -> Iterator[list[Any]]:
            shift = int(_rng(seed, *path, 1).integers(consumers)) if explicit else 0
            units = _work_plan(files, consumer, consumers, shift, self._even_shares)
            if shuffle:
                units = [units[i] for i in _rng(local_seed, *path, 2, consumer).permutation(len(units))]
            return _interleave(units, cycle_length, options, self._parallel_reads)

        stream = source
        features = self.features
        parsed = features is None  # raw Example records are parsed by .batch, or else one by one
        for position, step in enumerate(self._steps):
            if not parsed and step.kind == "map":
                stream, parsed = _mapped(stream, lambda record: parse_single_example(record, features)), True
            stream = self._apply(step, stream, position, parsed, consumer, local_seed)
            parsed = parsed or step.kind == "batch"
        if not parsed:
            stream = _mapped(stream, lambda record: parse_single_example(record, features))
        chunks = stream((epoch,))
        try:
            for chunk in chunks:
                if skip:
                    passed = len(chunk)
                    chunk = chunk[skip:]
                    skip = max(0, skip - passed)
                for item in chunk:
                    progress.delivered += 1  # before the yield: the consumer holds it from here on
                    yield item
            if skip:
                raise RecordkitError(
                    f"the state being resumed is {skip} item(s) past the end of epoch {epoch}: "
                    "have the files changed since it was saved?"
                )
            progress.finished = True
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()  # stops a prefetch thread and closes files now, not at garbage collection

    def _apply(
        self,
        step: _Step,
        upstream: _Stream,
        position: int,
        parsed: bool,
        consumer: int,
        local_seed: int,
    ) -> _Stream:
        if step.kind == "repeat":
            (epochs,) = step.args

            def repeated(path: tuple[int, ...]) -> Iterator[list[Any]]:
                for i in itertools.count() if epochs is None else range(epochs):
                    produced = False
                    for chunk in upstream(path + (i,)):
                        produced = True
                        yield chunk
                    if not produced:
                        return  # an empty epoch: repeating it forever would hang

            return repeated
        if step.kind == "shuffle":
            buffer_size = step.args[0]
            return lambda path: _shuffle(upstream(path), buffer_size, _seed(local_seed, *path, 3, position, consumer))
        if step.kind == "batch":
            size, drop_remainder = step.args
            features = self.features
            collate: Callable[[list[Any]], Any] = _collate_records
            if not parsed and features is not None:
                # Read, shuffled and parsed on this thread: reading and shuffling on a
                # thread of their own (making `bytes` objects under the GIL while this one
                # parses without it) cost more in hand-overs, turns of the GIL and objects
                # freed on another core than they gained (1 M shuffled records, 4 shards,
                # 2 threads: 2.8 M records/s with that thread, 3.9 without).
                collate = batch_parser(features)
            return lambda path: _batch(upstream(path), size, drop_remainder, collate)
        if step.kind == "map":
            return _mapped(upstream, step.args[0])
        if step.kind == "take":
            (count,) = step.args
            return lambda path: _take(upstream(path), count)
        if step.kind == "prefetch":
            (depth,) = step.args
            if _worker_info()[2] is not None:
                # A DataLoader worker is itself a process reading ahead (its batches
                # queued, `prefetch_factor`): a thread there only adds hand-overs (two
                # workers on 2 cores: 4.4 M records/s with it, 5.0 without).
                return upstream
            return lambda path: _prefetch(upstream(path), depth)
        raise AssertionError(step.kind)

    def to_torch(self) -> Any:
        """This dataset as a ``torch.utils.data.IterableDataset``.

        Numeric arrays arrive as tensors, strings as lists of ``bytes``, sparse
        and ragged results as recordkit's arrays. DataLoader workers split the
        records between them by themselves. Batching is recordkit's, so give
        the DataLoader ``batch_size=None``, and ``collate_fn=recordkit._torch.keep``
        unless you want PyTorch to walk every string: ``loader`` does both.
        """
        from recordkit._torch import TorchIterable

        return TorchIterable(self.prepare())

    def loader(self, num_workers: int = 0, *, stateful: bool = False, **dataloader_args: Any) -> Any:
        """Batches through a PyTorch ``DataLoader`` set up for recordkit's batches.

        Workers are persistent, so every ``for batch in loader`` is a new epoch
        without calling ``set_epoch``, and send their batches several to
        a message (a DataLoader spends about as long moving one message as
        recordkit takes to read and parse 1024 small records). Other keyword
        arguments go to the DataLoader (``pin_memory=True`` ...); the
        DataLoader itself is the result's ``.dataloader``.

        ``stateful=True`` uses torchdata's ``StatefulDataLoader``: the result's
        ``state_dict()`` / ``load_state_dict()`` save and resume mid-epoch, each
        worker from its own ``state_dict``. Batches then travel one to a
        message, so that a state never falls inside a group of them.
        """
        from recordkit._torch import Loader, TorchIterable, keep

        if stateful:
            try:
                from torchdata.stateful_dataloader import StatefulDataLoader as DataLoader
            except ImportError:
                raise ImportError("loader(stateful=True) needs torchdata: pip install torchdata") from None
        else:
            from torch.utils.data import DataLoader

        dataloader_args.setdefault("persistent_workers", num_workers > 0)
        group = 16 if num_workers and not stateful else 1
        # Workers inherit the counts made here rather than each making them; in
        # this process a dataset with one consumer needs none.
        iterable = TorchIterable(self.prepare() if num_workers else self, group_batches=group)
        return Loader(DataLoader(iterable, batch_size=None, num_workers=num_workers, collate_fn=keep, **dataloader_args))

    def __len__(self) -> int:
        """A stream has no length: the message says how to hand it to PyTorch."""
        raise TypeError(
            "a recordkit Dataset is a stream of records and has no len(); for a PyTorch DataLoader use "
            "ds.loader(num_workers=...), or DataLoader(ds.to_torch(), batch_size=None) (import torch before "
            "making the dataset, and DataLoader(ds, batch_size=None) works as well)"
        )

    def __bool__(self) -> bool:
        return True  # not from __len__, which has none to give

    def __repr__(self) -> str:
        steps = "".join(f".{step.kind}({', '.join(map(repr, step.args[:2]))})" for step in self._steps)
        return f"Dataset({len(self._files)} file(s)){steps}"


def _register_with_torch() -> None:
    """Makes a ``Dataset`` a PyTorch ``IterableDataset`` (a virtual subclass), where
    torch is already imported, so that ``DataLoader(ds, batch_size=None)`` iterates it:
    its workers split the records by themselves. Importing torch here would cost seconds."""
    data = sys.modules.get("torch.utils.data")
    iterable = getattr(data, "IterableDataset", None)
    if iterable is not None and hasattr(iterable, "register") and not issubclass(Dataset, iterable):
        iterable.register(Dataset)
