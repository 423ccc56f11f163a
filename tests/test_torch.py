"""recordkit._torch: how batches travel from DataLoader workers to the main process."""

from __future__ import annotations

import pickle
import sys
import pickletools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import recordkit as rk
from recordkit import _native

torch = pytest.importorskip("torch")
from recordkit._torch import PackedBytes, TorchBatch, _sendable  # noqa: E402

few_values = st.lists(st.binary(max_size=3), min_size=1, max_size=3, unique=True)


@given(st.one_of(st.lists(st.binary(max_size=40), max_size=300),
                 few_values.flatmap(lambda pool: st.lists(st.sampled_from(pool), max_size=300))))
def test_packed_bytes_come_back_as_they_were(values: list[bytes]) -> None:
    offsets, data, codes = _native._pack_bytes(values)
    assert _native._unpack_bytes(offsets, data, codes) == values
    # Where values repeat (at most half of them distinct), each distinct object or
    # value once: repeats of one object are found by address, others by content.
    if codes is not None:
        assert len(set(values)) <= len(offsets) - 1 <= len({id(v) for v in values}) <= len(values) // 2
        assert offsets[-1] == len(data)
    else:
        assert data == b"".join(values) and len(offsets) == len(values) + 1


def test_repeats_are_sent_once_whether_one_object_or_equal_ones() -> None:
    words = [b"cat", b"dog", b"emu"]
    same = [words[i % 3] for i in range(300)]
    equal = [bytes(bytearray(words[i % 3])) for i in range(300)]
    for values in (same, equal):
        offsets, data, codes = _native._pack_bytes(values)
        assert codes is not None and len(offsets) == 4 and len(data) == 9
        back = _native._unpack_bytes(offsets, data, codes)
        assert back == values and back[0] is back[3]


def test_packed_bytes_refuse_anything_but_bytes() -> None:
    class Sub(bytes):
        pass

    for odd in ("text", bytearray(b"x"), Sub(b"x"), None):
        with pytest.raises(TypeError, match="packs bytes only"):
            _native._pack_bytes([b"a", odd])


@pytest.mark.parametrize("offsets, data, codes", [
    ([1, 2], b"ab", None),            # not from 0
    ([0, 2, 1, 3], b"abc", None),     # falls
    ([0, 2], b"abc", None),           # short of the end
    ([0, 5], b"abc", None),           # past it
    ([], b"", None),                  # no offsets at all
    ([0, 1, 2], b"ab", [0, 2]),       # a code past the values
])
def test_damaged_packed_bytes_are_refused(offsets: list[int], data: bytes, codes: list[int] | None) -> None:
    codes_array = None if codes is None else np.array(codes, np.uint32)
    with pytest.raises(ValueError, match="packed byte strings are damaged"):
        _native._unpack_bytes(np.array(offsets, np.int64), data, codes_array)


def test_a_batch_pickles_its_strings_packed_and_comes_back_equal() -> None:
    distinct = [bytes([i % 256, i // 256]) * 3 for i in range(1000)]
    repeated = [b"cat", b"dog"] * 500
    batch = TorchBatch({"id": torch.arange(1000), "text": distinct, "label": repeated,
                        "names": ["a", "b"], "empty": [], "mixed": [b"x", "y"]})
    assert isinstance(_sendable(distinct), PackedBytes) and _sendable(distinct).codes is None
    assert isinstance(_sendable(repeated), PackedBytes) and len(_sendable(repeated).offsets) == 3
    assert _sendable(["a", "b"]) == ["a", "b"] and _sendable([b"x", "y"]) == [b"x", "y"]
    sent = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
    # One buffer for each list of strings, not an object per value.
    pickled_bytes = [op for op, _, _ in pickletools.genops(sent) if "BYTES" in op.name]
    assert len(pickled_bytes) < 20
    back = pickle.loads(sent)
    assert isinstance(back, TorchBatch) and back.keys() == batch.keys()
    assert torch.equal(back["id"], batch["id"])
    for key in ("text", "label", "names", "empty", "mixed"):
        assert back[key] == batch[key]
    # Repeats share one object, as they did when they were read.
    assert back["label"][0] is back["label"][2]


def test_indexed_batches_through_workers_are_torch_batches(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader

    names = [f"name{i % 7}".encode() if i % 2 else f"unique-{i}".encode() for i in range(200)]
    rk.write_examples(tmp_path / "a.tfrecord", {"i": np.arange(200), "name": names})
    rk.build_index(tmp_path / "a.tfrecord")
    spec = {"i": rk.FixedLenFeature([], "int64"), "name": rk.FixedLenFeature([], "string")}
    ds = rk.IndexedDataset(tmp_path / "a.tfrecord", spec)
    seen: dict[int, bytes] = {}
    for batch in DataLoader(ds, batch_size=16, shuffle=True, num_workers=2):
        assert isinstance(batch, TorchBatch) and batch["i"].dtype == torch.int64
        seen.update(zip(batch["i"].tolist(), batch["name"]))
    assert seen == dict(enumerate(names))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe sizes are Linux's")
def test_the_workers_pipe_holds_a_group_of_batches(tmp_path: Path) -> None:
    import fcntl

    from recordkit._torch import _PIPE_BYTES, _widen_result_pipe

    rk.write_examples(tmp_path / "a.tfrecord", {"i": np.arange(5000)})
    loader = rk.Dataset(tmp_path / "a.tfrecord", {"i": rk.FixedLenFeature([], "int64")}).batch(64).loader(num_workers=2)
    seen = [int(i) for batch in loader for i in batch["i"]]
    assert sorted(seen) == list(range(5000))
    reader = loader.dataloader._iterator._worker_result_queue._reader
    most = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    assert fcntl.fcntl(reader.fileno(), 1032) == (_PIPE_BYTES if most >= _PIPE_BYTES else 65536)  # F_GETPIPE_SZ
    _widen_result_pipe(object())  # no queue to widen: nothing happens
