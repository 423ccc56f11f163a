"""PyTorch adapters. Imported only by ``Dataset.to_torch()``, so torch stays optional."""

from __future__ import annotations

import sys
from typing import Any, Iterator, NamedTuple, Protocol

import numpy as np

from recordkit import _native

try:
    import torch
    from torch.utils.data import IterableDataset
except ImportError:
    raise ImportError("Dataset.to_torch() needs PyTorch: pip install 'recordkit[torch]' (or torch itself)") from None



class Dataset(Protocol):
    """What the adapters need of a ``recordkit.Dataset`` (named here, not
    imported, so that this module does not import the one that imports it)."""

    def __iter__(self) -> Iterator[Any]: ...
    def set_epoch(self, epoch: int) -> None: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...

__all__ = [
    "TorchIterable", "TorchBatch", "BatchGroup", "PackedBytes", "Loader", "to_tensors", "keep", "collate_rows_of_one_batch",
]


def to_tensors(item: Any) -> Any:
    """Numeric NumPy arrays become tensors (sharing memory), string arrays lists of ``bytes``;
    dicts (as ``TorchBatch``), lists and tuples are converted inside; anything else is left as it is."""
    if isinstance(item, np.ndarray):
        if item.dtype.kind in "OSU":
            return item.tolist()
        return torch.from_numpy(item if item.flags.writeable else item.copy())
    if isinstance(item, dict):
        return TorchBatch({key: to_tensors(value) for key, value in item.items()})
    if isinstance(item, (list, tuple)) and item and isinstance(item[0], (np.ndarray, dict)):
        return type(item)(to_tensors(value) for value in item)
    return item


class PackedBytes(NamedTuple):
    """A list of ``bytes`` as it travels between processes: one buffer and
    offsets into it (value ``i`` is ``data[offsets[i]:offsets[i + 1]]``), or,
    where values repeat, each distinct value once and ``codes`` naming one per
    value."""

    offsets: np.ndarray
    data: bytes
    codes: np.ndarray | None


def _sendable(value: Any) -> Any:
    """A batch's value as it is pickled: tensors as NumPy arrays, lists of ``bytes`` packed."""
    if isinstance(value, torch.Tensor) and value.device.type == "cpu":
        return value.detach().numpy()
    if type(value) is list and value and type(value[0]) is bytes:
        try:
            return PackedBytes(*_native._pack_bytes(value))
        except TypeError:  # not bytes throughout: pickled as it is
            return value
    return value


def _received(value: Any) -> Any:
    """A value as ``_sendable`` sent it, as it was in the batch."""
    if isinstance(value, PackedBytes):
        return _native._unpack_bytes(value.offsets, value.data, value.codes)
    if isinstance(value, np.ndarray):
        return to_tensors(value)
    return value


class TorchBatch(dict):  # type: ignore[type-arg]
    """A dict of tensors (and lists of ``bytes``) that travels from a DataLoader worker by value.

    PyTorch moves each tensor a worker yields into its own shared-memory
    segment, which costs about a millisecond per tensor: more than reading
    and parsing a batch of 1024 small records. A batch's tensors are a few
    kilobytes, so they are pickled as NumPy arrays instead and become
    tensors again in the receiving process. A list of ``bytes`` travels as
    one buffer and its offsets (``PackedBytes``) rather than as an object
    pickled per value: under half the cost on each side for distinct
    values (1024 of 20 bytes: 13 ns a value packed against 33 pickled, 15
    unpacked against 31 unpickled), and repeats sent once.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, ({key: _sendable(value) for key, value in self.items()},)


def _rebuild(sent: dict[str, Any]) -> TorchBatch:
    return TorchBatch({key: _received(value) for key, value in sent.items()})


def keep(batch: Any) -> Any:
    """The DataLoader ``collate_fn`` for batches recordkit made: changes nothing
    (PyTorch's default would walk every string of a batch one by one)."""
    return batch


class BatchGroup(list):  # type: ignore[type-arg]
    """Several batches sent from a DataLoader worker as one message (see ``Loader``)."""


_GROUP_BYTES = 1 << 20


def _nbytes(item: Any) -> int:
    """About the bytes ``item`` holds: a list's from three of its values (summed
    over all, the strings of a batch took 45 ns each, a third of what a worker
    spent per record; the size only decides when a group of batches is sent)."""
    if isinstance(item, dict):
        return sum(_nbytes(value) for value in item.values())
    if isinstance(item, torch.Tensor):
        return item.element_size() * item.nelement()
    if isinstance(item, list):
        if not item:
            return 0
        sample = (item[0], item[len(item) // 2], item[-1])
        return len(item) * sum(len(v) if isinstance(v, bytes) else 8 for v in sample) // 3
    return 8


class TorchIterable(IterableDataset):  # type: ignore[misc]
    """A recordkit ``recordkit.Dataset`` as a PyTorch ``IterableDataset``.

    Each DataLoader worker reads its own share of the records (found from
    ``torch.utils.data.get_worker_info()``), so no ``worker_init_fn`` is needed
    and no record is read twice. Batching is recordkit's: pass
    ``batch_size=None`` to the DataLoader.

    With ``group_batches > 1``, items are yielded as ``BatchGroup`` lists
    of up to that many batches (and about a megabyte): a DataLoader spends
    close to half a millisecond moving each item from a worker, as long as
    parsing a batch of 1024 small records takes. ``Loader`` unpacks them.
    """

    def __init__(self, dataset: "Dataset", group_batches: int = 1) -> None:
        self.dataset = dataset
        self.group_batches = group_batches

    def __iter__(self) -> Iterator[Any]:
        items = map(to_tensors, self.dataset)
        if self.group_batches <= 1:
            yield from items
            return
        group, size = BatchGroup(), 0
        for item in items:
            group.append(item)
            size += _nbytes(item)
            if len(group) >= self.group_batches or size >= _GROUP_BYTES:
                yield group
                group, size = BatchGroup(), 0
        if group:
            yield group

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the next iteration reads (call it each epoch when workers are not persistent)."""
        self.dataset.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """The dataset's position (``recordkit.Dataset.state_dict``), as of the last item
        yielded: torchdata's ``StatefulDataLoader`` takes it in each worker."""
        return self.dataset.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes the dataset from ``state_dict`` (``recordkit.Dataset.load_state_dict``)."""
        self.dataset.load_state_dict(state)

    def __repr__(self) -> str:
        return f"TorchIterable({self.dataset!r})"


_PIPE_BYTES = 1 << 20
_F_SETPIPE_SZ = 1031  # Linux's fcntl command (fcntl.F_SETPIPE_SZ from Python 3.10, on Linux only)


def _widen_result_pipe(batches: Any) -> None:
    """Lets the pipe that brings the workers' batches hold a whole group of them
    (1 MB, from Linux's 64 KB): a group of 16 batches then goes in one write and
    comes out in one read, instead of eight turns of the writing worker and the
    reading process, each a wake-up (two workers on 2 cores: 5.2 -> 6.2 M
    records/s). It reaches into the DataLoader's iterator, which names its
    queue ``_worker_result_queue``: where that is missing (another PyTorch) or
    the system refuses, the pipe stays as it is."""
    queue = getattr(batches, "_worker_result_queue", None)
    reader = getattr(queue, "_reader", None)
    if reader is None or not sys.platform.startswith("linux"):
        return
    try:
        import fcntl

        fcntl.fcntl(reader.fileno(), _F_SETPIPE_SZ, _PIPE_BYTES)
    except (OSError, ValueError, AttributeError):
        pass  # over /proc/sys/fs/pipe-max-size, or not a pipe: as it was


class Loader:
    """Iterates a ``DataLoader`` over a ``TorchIterable``, one batch at a time,
    unpacking the groups its workers send. ``.dataloader`` is the DataLoader."""

    def __init__(self, dataloader: Any) -> None:
        self.dataloader = dataloader

    def __iter__(self) -> Iterator[Any]:
        batches = iter(self.dataloader)
        _widen_result_pipe(batches)
        for item in batches:
            if isinstance(item, BatchGroup):
                yield from item
            else:
                yield item

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the next iteration reads (for workers that are not persistent)."""
        self.dataloader.dataset.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """The ``StatefulDataLoader``'s state (``Dataset.loader(stateful=True)``)."""
        return self._stateful().state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes a ``StatefulDataLoader`` mid-epoch from ``state_dict``."""
        self._stateful().load_state_dict(state)

    def _stateful(self) -> Any:
        if not hasattr(self.dataloader, "load_state_dict"):
            raise TypeError("this loader cannot save its position: build it with Dataset.loader(stateful=True)")
        return self.dataloader

    def __repr__(self) -> str:
        return f"Loader({self.dataloader.dataset!r}, num_workers={self.dataloader.num_workers})"


def _column_tensor(values: np.ndarray) -> Any:
    """A column as the default collate makes it of its rows: a tensor of its
    dtype (a list of ``bytes`` for strings)."""
    if values.dtype == object:
        return list(values)
    # as_tensor shares a writable array's memory; a read-only one (a broadcast default) is copied.
    return torch.as_tensor(values) if values.flags.writeable else torch.tensor(values)


def collate_rows_of_one_batch(row_type: type) -> None:
    """Registers with PyTorch's default collate (``default_collate_fn_map``, its
    documented extension point) how rows of ``row_type`` (``IndexedDataset``'s
    rows, each a view of one parsed batch) are collated: the batch's columns,
    taken whole, instead of one value at a time. The result holds what the default
    collate makes of rows of NumPy values, in a ``TorchBatch``, so that it travels
    from a DataLoader worker by value (with two workers: 0.1 M records/s as a
    plain dict, whose tensors each took a shared-memory segment, 0.5-0.6 M/s so)."""
    from torch.utils.data._utils.collate import default_collate_fn_map

    def collate(batch: list[Any], *, collate_fn_map: Any = None) -> dict[str, Any]:
        columns = batch[0].columns
        if any(row.columns is not columns for row in batch):  # rows of several batches: one by one
            return TorchBatch(torch.utils.data.default_collate([dict(row) for row in batch]))
        rows = np.fromiter((row.row for row in batch), np.int64, len(batch))
        whole = len(rows) == len(next(iter(columns.values()))) and bool((rows == np.arange(len(rows))).all())
        return TorchBatch({name: _column_tensor(values if whole else values[rows]) for name, values in columns.items()})

    default_collate_fn_map.setdefault(row_type, collate)
