"""rk.Dataset: sources, exactly-once splitting, seeded shuffling, steps, memory."""

from __future__ import annotations

import collections
import gzip
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import recordkit as rk
from conftest import PEAK_RSS_MB
import recordkit.dataset as dataset_module

SPEC = {"id": rk.FixedLenFeature([], "int64")}
SIZES = [0, 1, 3, 500, 17, 1200]  # uneven: one empty shard, one tiny


def write_shards(folder: Path, sizes: list[int] = SIZES, compression: str | None = None) -> list[int]:
    """Shards ``train-0000i-of-0000N.tfrecord`` holding consecutive ids; returns all ids."""
    folder.mkdir(parents=True, exist_ok=True)
    start = 0
    for i, n in enumerate(sizes):
        name = folder / f"train-{i:05d}-of-{len(sizes):05d}.tfrecord{'.gz' if compression else ''}"
        rk.write_examples(name, {"id": np.arange(start, start + n)}, compression=compression)
        start += n
    return list(range(start))


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    folder = tmp_path_factory.mktemp("shards")
    return folder, write_shards(folder)


def ids(ds: rk.Dataset) -> list[int]:
    """Every id a dataset yields, batched or not."""
    out: list[int] = []
    for item in ds:
        out.extend(np.atleast_1d(item["id"]).tolist())
    return out


# --- sources --------------------------------------------------------------------------------


def test_sources_name_the_same_files(shards: tuple[Path, list[int]]) -> None:
    folder, everything = shards
    expected = [str(folder / f"train-{i:05d}-of-00006.tfrecord") for i in range(6)]
    (folder / "train-00000-of-00006.tfrecord.idx").write_text("")  # index files are not data
    (folder / "_SUCCESS").write_text("")
    (folder / ".train.tmp-1-ab").write_text("")  # an unfinished write
    assert rk.list_files(folder) == expected
    assert rk.list_files(str(folder / "train-*.tfrecord")) == expected
    assert rk.list_files(str(folder / "train.tfrecord@6")) == expected
    assert rk.list_files([expected[3], folder / "train-0000[01]-of-00006.tfrecord"]) == [expected[3], *expected[:2]]
    assert sorted(ids(rk.Dataset(folder, SPEC))) == everything


def test_tensorflow_style_at_shards(tmp_path: Path) -> None:
    for i in range(3):
        rk.write_examples(tmp_path / f"data-{i:05d}-of-00003", {"id": [i]})
    assert ids(rk.Dataset(f"{tmp_path}/data@3", SPEC)) == [0, 1, 2]


def test_missing_shards_are_an_error(tmp_path: Path) -> None:
    write_shards(tmp_path, [2, 2, 2])
    os.unlink(tmp_path / "train-00001-of-00003.tfrecord")
    with pytest.raises(FileNotFoundError, match=r"incomplete: 1 of 3 shards are missing \(00001\)"):
        rk.Dataset(tmp_path)
    with pytest.raises(FileNotFoundError, match="1 of 3 shards are missing"):
        rk.Dataset(f"{tmp_path}/train.tfrecord@3")
    with pytest.raises(FileNotFoundError, match=r"missing \(00001\)"):
        rk.Dataset(f"{tmp_path}/train-*-of-00003.tfrecord")
    assert len(rk.Dataset(f"{tmp_path}/train-0000[02]-of-00003.tfrecord").files) == 2  # asks for two shards only
    with pytest.raises(FileNotFoundError, match="no record file matches"):
        rk.Dataset(f"{tmp_path}/nothing-*.tfrecord")
    with pytest.raises(FileNotFoundError):
        rk.Dataset(tmp_path / "absent.tfrecord")


def test_oneflow_part_folders(tmp_path: Path) -> None:
    records = [rk.encode_ofrecord({"id": np.array([i], np.int64)}) for i in range(25)]
    rk.write_ofrecord_parts(records, tmp_path, 12, suffix_length=1)
    ds = rk.Dataset(tmp_path)
    assert [os.path.basename(f) for f in ds.files] == [f"part-{i}" for i in range(12)]  # part-2 before part-10
    got = [int(rk.decode_ofrecord(r)["id"][0]) for r in ds]
    assert got[:3] == [0, 12, 24] and sorted(got) == list(range(25))  # parts are dealt round-robin
    with pytest.raises(ValueError, match="OFRecord"):
        rk.Dataset(tmp_path, SPEC)


def test_fsspec_urls(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    for i, n in enumerate([3, 0, 4]):
        with fs.open(f"/ds/part-{i}.tfrecord", "wb") as f:
            with rk.TFRecordWriter(f) as w:
                for j in range(n):
                    w.write(rk.encode_example({"id": 10 * i + j}))
    assert sorted(ids(rk.Dataset("memory://ds/part-*.tfrecord", SPEC).batch(2))) == [0, 1, 2, 20, 21, 22, 23]
    assert len(rk.Dataset("memory://ds").files) == 3


# --- exactly once ---------------------------------------------------------------------------


def consumers_ids(
    source: Path, ranks: int, workers: int, monkeypatch: pytest.MonkeyPatch, steps=lambda ds: ds
) -> list[list[int]]:
    """The ids each (rank, worker) consumer reads, workers simulated as PyTorch reports them."""
    out = []
    for rank in range(ranks):
        for worker in range(max(workers, 1)):
            monkeypatch.setattr(dataset_module, "_worker_info", lambda w=worker: (max(workers, 1), w, None))
            ds = rk.Dataset(source, SPEC)
            out.append(ids(steps(ds.shard(ranks, rank) if ranks > 1 else ds)))
    return out


@pytest.mark.parametrize("compression", [None, "gzip"])
@pytest.mark.parametrize("ranks", range(1, 8))
def test_every_record_goes_to_exactly_one_consumer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ranks: int, compression: str | None
) -> None:
    everything = write_shards(tmp_path, compression=compression)
    for workers in range(4):
        for steps in (lambda ds: ds, lambda ds: ds.shuffle(64, seed=5).batch(10)):
            shares = consumers_ids(tmp_path, ranks, workers, monkeypatch, steps)
            counted = collections.Counter(i for share in shares for i in share)
            assert sorted(counted) == everything and set(counted.values()) == {1}, (ranks, workers)
            if compression is None:  # split by record ranges: equal shares, give or take one
                sizes = [len(share) for share in shares]
                assert max(sizes) - min(sizes) <= 1, sizes


def test_fewer_files_than_consumers_compressed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    everything = write_shards(tmp_path, [300, 7], compression="gzip")
    shares = consumers_ids(tmp_path, 5, 1, monkeypatch)
    assert sorted(i for share in shares for i in share) == everything
    assert all(share for share in shares[:2])  # each big-file consumer reads a stride of it


def test_shares_rotate_between_epochs_with_a_seed(shards: tuple[Path, list[int]]) -> None:
    folder, everything = shards
    epochs = []
    for epoch in range(4):
        seen = []
        for rank in range(3):
            ds = rk.Dataset(folder, SPEC).shard(3, rank).shuffle(100, seed=9)
            ds.set_epoch(epoch)
            seen.append(set(ids(ds)))
        assert sorted(i for share in seen for i in share) == everything
        epochs.append(seen[0])
    assert len({frozenset(s) for s in epochs}) > 1, "rank 0 read the same records every epoch"


def test_ranks_from_the_environment(monkeypatch: pytest.MonkeyPatch, shards: tuple[Path, list[int]]) -> None:
    folder, _ = shards
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    assert rk.Dataset(folder).consumer() == (2, 4)
    assert rk.Dataset(folder).shard(2, 1).consumer() == (1, 2)  # explicit wins


# --- shuffling and steps ---------------------------------------------------------------------


def test_seeded_shuffle_is_reproducible_and_epochs_differ(shards: tuple[Path, list[int]]) -> None:
    folder, everything = shards
    make = lambda seed: rk.Dataset(folder, SPEC).shuffle(200, seed=seed).batch(64)  # noqa: E731
    first, again = make(1), make(1)
    epoch0, epoch1 = ids(first), ids(first)
    assert epoch0 == ids(again) and epoch1 == ids(again)
    assert epoch0 != epoch1 and sorted(epoch0) == sorted(epoch1) == everything
    assert epoch0 != ids(make(2))
    assert epoch0 != everything
    # Records from different files are mixed: the first batch is not from one shard only.
    first_batch = next(iter(make(1)))["id"]
    assert (first_batch < 521).any() and (first_batch >= 521).any()
    first.set_epoch(0)
    assert ids(first) == epoch0


def test_shuffle_without_seed_still_reads_everything(shards: tuple[Path, list[int]]) -> None:
    folder, everything = shards
    assert sorted(ids(rk.Dataset(folder, SPEC).shuffle(10))) == everything


def test_batches_span_files_and_keep_their_size(shards: tuple[Path, list[int]]) -> None:
    folder, everything = shards
    sizes = [len(b["id"]) for b in rk.Dataset(folder, SPEC).batch(100)]
    assert sizes == [100] * 17 + [21]
    assert [len(b["id"]) for b in rk.Dataset(folder, SPEC).batch(100, drop_remainder=True)] == [100] * 17
    assert ids(rk.Dataset(folder, SPEC).batch(100)) == everything  # without shuffle: file order


def test_steps_compose_like_tf_data(shards: tuple[Path, list[int]]) -> None:
    folder, everything = shards
    raw = list(rk.Dataset(folder).take(3))
    assert all(isinstance(r, bytes) for r in raw) and rk.decode_example(raw[0])["id"].tolist() == [0]
    assert [len(b) for b in rk.Dataset(folder).batch(1000)] == [1000, 721]
    per_record = next(iter(rk.Dataset(folder, SPEC)))
    assert per_record["id"].shape == () and per_record["id"] == 0
    doubled = rk.Dataset(folder, SPEC).map(lambda x: {"id": x["id"] * 2}).batch(7)
    first = next(iter(doubled))
    assert first["id"].tolist() == [0, 2, 4, 6, 8, 10, 12]
    assert rk.Dataset(folder, SPEC).batch(10).map(lambda b: len(b["id"])).take(3).__iter__().__next__() == 10
    assert len(ids(rk.Dataset(folder, SPEC).repeat(3).batch(500))) == 3 * len(everything)
    assert len(ids(rk.Dataset(folder, SPEC).take(5).repeat(2))) == 10
    assert len(list(rk.Dataset(folder, SPEC).batch(50).take(4))) == 4
    assert ids(rk.Dataset(folder, SPEC).batch(64).prefetch(3)) == everything
    with pytest.raises(ValueError, match="before the other steps"):
        rk.Dataset(folder).batch(2).shard(2, 0)


def test_repeat_forever_over_nothing_ends(tmp_path: Path) -> None:
    rk.write_examples(tmp_path / "empty.tfrecord", {"id": np.zeros(0, np.int64)})
    assert list(rk.Dataset(tmp_path / "empty.tfrecord").repeat()) == []


@pytest.mark.parametrize("threads, prefetch", [(1, True), (2, True), (2, False)])
def test_damage_surfaces_through_prefetch_and_reading_ahead_after_the_intact_records(
        tmp_path: Path, threads: int, prefetch: bool) -> None:
    path = tmp_path / "d.tfrecord"
    rk.write_examples(path, {"id": np.arange(100)})
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # the last record's payload
    path.write_bytes(bytes(data))
    got: list[int] = []
    rk.set_num_threads(threads)  # with 2, records are read on a thread of their own
    try:
        with pytest.raises(rk.DataLossError) as caught:
            ds = rk.Dataset(path, SPEC).batch(10)
            for batch in ds.prefetch(2) if prefetch else ds:
                got.extend(batch["id"].tolist())
    finally:
        rk.set_num_threads(None)
    assert got == list(range(90)) and caught.value.record_index == 99


def test_abandoned_prefetch_stops_its_thread(shards: tuple[Path, list[int]]) -> None:
    import threading

    folder, _ = shards
    it = iter(rk.Dataset(folder, SPEC).batch(2).prefetch(2))
    next(it)
    it.close()  # type: ignore[attr-defined]
    assert not any(t.name == "recordkit-prefetch" for t in threading.enumerate())


@pytest.mark.parametrize("prefetch", [False, True])
def test_parsed_batches_are_the_same_at_every_thread_count(shards: tuple[Path, list[int]], prefetch: bool) -> None:
    # With more than one thread, reading and shuffling run on a thread of their own
    # while batches are parsed: the order stays the seeded one.
    folder, every = shards
    outputs = []
    try:
        for count in (1, 2, 7):
            rk.set_num_threads(count)
            ds = rk.Dataset(folder, SPEC).shuffle(300, seed=5).batch(64)
            outputs.append([b["id"].tolist() for b in (ds.prefetch(2) if prefetch else ds)])
    finally:
        rk.set_num_threads(None)
    assert outputs[0] == outputs[1] == outputs[2]
    assert sorted(i for b in outputs[0] for i in b) == every and outputs[0] != sorted(outputs[0])


def test_an_abandoned_parsed_dataset_stops_its_threads(shards: tuple[Path, list[int]]) -> None:
    import threading

    folder, _ = shards
    names = {"recordkit-read", "recordkit-prefetch"}
    rk.set_num_threads(2)
    try:
        it = iter(rk.Dataset(folder, SPEC, parallel_reads=True).shuffle(100, seed=1).batch(2).prefetch(2))
        next(it)
        assert names <= {t.name for t in threading.enumerate()}
        it.close()  # type: ignore[attr-defined]
    finally:
        rk.set_num_threads(None)
    assert not any(t.name in names and t.is_alive() for t in threading.enumerate())


def test_gzip_and_plain_shards_together(tmp_path: Path) -> None:
    rk.write_examples(tmp_path / "a.tfrecord", {"id": np.arange(0, 50)})
    with gzip.open(tmp_path / "b.tfrecord.gz", "wb") as f:
        f.write((tmp_path / "a.tfrecord").read_bytes())
    assert sorted(ids(rk.Dataset(tmp_path, SPEC).shuffle(30, seed=0).batch(8))) == sorted(list(range(50)) * 2)


# --- memory ----------------------------------------------------------------------------------


def test_memory_stays_bounded_for_a_file_much_larger_than_the_buffers(tmp_path: Path) -> None:
    path = tmp_path / "big.tfrecord"
    blob = np.frombuffer(np.random.default_rng(0).bytes(64 << 10), dtype="S65536")
    with rk.TFRecordWriter(path) as writer:  # 320 MB of 64 KB records
        for i in range(5000):
            writer.write(rk.encode_example({"id": i, "blob": blob[0]}))
    script = PEAK_RSS_MB + textwrap.dedent(
        f"""
        import recordkit as rk
        base = peak_rss_mb()
        spec = {{"id": rk.FixedLenFeature([], "int64"), "blob": rk.FixedLenFeature([], "string")}}
        n = sum(len(b["id"]) for b in rk.Dataset({str(path)!r}, spec).shuffle(100, seed=0).batch(32).prefetch(2))
        print(n, peak_rss_mb() - base)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    records, growth_mb = int(out[0]), int(out[1])
    assert records == 5000
    # buffers: 100 shuffled + 2 prefetched batches of 32 x 64 KB ~ 11 MB, plus one 64 MB window of mapped pages
    assert growth_mb < 120, f"peak RSS grew {growth_mb} MB reading a {path.stat().st_size >> 20} MB file"


# --- random access --------------------------------------------------------------------------


def test_indexed_dataset_takes_lists_of_indices(shards: tuple[Path, list[int]]) -> None:
    folder, everything = shards
    ds = rk.IndexedDataset(rk.list_files(folder), SPEC)
    assert len(ds) == len(everything)
    batch = ds[[5, 0, 1720]]
    assert batch["id"].tolist() == [5, 0, 1720]
    assert ds[np.array([3, 4])]["id"].tolist() == [3, 4]
    assert ds[518:522]["id"].tolist() == [518, 519, 520, 521]  # across a file boundary
    assert int(ds[-1]["id"]) == everything[-1]


def test_record_ranges_seek_through_checkpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 3000 records of 8 KB: ranges start past the first checkpoints (every 1024 records), and
    # counting takes several 16 MB steps, so checkpoints are collected across steps.
    path = tmp_path / "big.tfrecord"
    rk.write_examples(path, {"id": np.arange(3000), "pad": np.full(3000, b"x" * 8192, dtype="S8192")})
    shares = consumers_ids(path, 5, 2, monkeypatch)
    assert [share[0] for share in shares] == [0, 300, 600, 900, 1200, 1500, 1800, 2100, 2400, 2700]
    assert sorted(i for share in shares for i in share) == list(range(3000))


# --- PyTorch ---------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")  # 3 workers on a 2-CPU machine
def test_dataloader_workers_and_ranks_read_every_record_once(shards: tuple[Path, list[int]]) -> None:
    torch = pytest.importorskip("torch")
    folder, everything = shards
    for ranks in (1, 2, 3):
        for workers in range(4):
            seen: list[int] = []
            for rank in range(ranks):
                ds = rk.Dataset(folder, SPEC).shard(ranks, rank).shuffle(100, seed=1).batch(32)
                for batch in ds.loader(num_workers=workers):
                    assert isinstance(batch["id"], torch.Tensor) and batch["id"].dtype == torch.int64
                    seen.extend(batch["id"].tolist())
            assert sorted(seen) == everything, (ranks, workers)


def test_torch_batches_strings_and_epochs(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    rk.write_examples(tmp_path / "s.tfrecord", {"id": np.arange(40), "name": [f"n{i}".encode() for i in range(40)]})
    spec = {"id": rk.FixedLenFeature([], "int64"), "name": rk.FixedLenFeature([], "string")}
    loader = rk.Dataset(tmp_path / "s.tfrecord", spec).shuffle(40, seed=3).batch(8).loader(num_workers=2)
    batch = next(iter(loader))
    assert isinstance(batch["name"], list) and isinstance(batch["name"][0], bytes)
    assert [b"n%d" % i for i in batch["id"].tolist()] == batch["name"]
    epochs = [[i for b in loader for i in b["id"].tolist()] for _ in range(2)]
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(40)) and epochs[0] != epochs[1]
    plain = torch.utils.data.DataLoader(rk.Dataset(tmp_path / "s.tfrecord", spec).batch(8).to_torch(), batch_size=None)
    assert sum(len(b["id"]) for b in plain) == 40


def test_indexed_dataset_with_a_batch_sampler(shards: tuple[Path, list[int]]) -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    folder, everything = shards
    ds = rk.IndexedDataset(rk.list_files(folder), SPEC)
    sampler = BatchSampler(RandomSampler(ds, generator=torch.Generator().manual_seed(0)), 50, drop_last=False)
    seen = [i for batch in DataLoader(ds, batch_size=None, sampler=sampler, num_workers=2) for i in batch["id"].tolist()]
    assert sorted(seen) == everything and seen != everything


def test_parallel_reads_keep_the_order_and_the_errors(shards: tuple[Path, list[int]], tmp_path: Path) -> None:
    import threading

    folder, _ = shards
    for steps in (lambda ds: ds.batch(50), lambda ds: ds.shuffle(300, seed=2).batch(50)):
        sequential = ids(steps(rk.Dataset(folder, SPEC, cycle_length=3)))
        assert ids(steps(rk.Dataset(folder, SPEC, cycle_length=3, parallel_reads=True))) == sequential
    it = iter(rk.Dataset(folder, SPEC, cycle_length=3, parallel_reads=True).batch(2))
    next(it)
    it.close()  # type: ignore[attr-defined]
    assert not any(t.name == "recordkit-read" for t in threading.enumerate())
    path = tmp_path / "d.tfrecord"
    rk.write_examples(path, {"id": np.arange(10_000, 10_600)})
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    got: list[int] = []
    with pytest.raises(rk.DataLossError):
        for item in rk.Dataset([path, folder / "train-00003-of-00006.tfrecord"], SPEC, parallel_reads=True, cycle_length=2):
            got.append(int(item["id"]))
    assert [i for i in got if i >= 10_000] == list(range(10_000, 10_599))  # every intact record, then the error


def test_even_shares_give_every_consumer_the_same_count(shards: tuple[Path, list[int]], tmp_path: Path) -> None:
    folder, everything = shards
    for ranks in range(1, 8):
        shares = [ids(rk.Dataset(folder, SPEC, even_shares=True).shard(ranks, rank).shuffle(50, seed=1))
                  for rank in range(ranks)]
        assert {len(share) for share in shares} == {len(everything) // ranks}, ranks
        seen = [i for share in shares for i in share]
        assert len(set(seen)) == len(seen) and set(seen) <= set(everything)
    write_shards(tmp_path, [5, 5], compression="gzip")
    with pytest.raises(ValueError, match="even_shares needs every file split by record ranges"):
        list(rk.Dataset(tmp_path, SPEC, even_shares=True))


def test_index_files_spare_the_count_and_one_consumer_needs_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    everything = write_shards(tmp_path, [3000, 10])

    def no_survey(*_: object) -> None:
        raise AssertionError("one consumer reads whole files: nothing to count")

    with monkeypatch.context() as patch:
        patch.setattr(dataset_module, "survey_file", no_survey)
        assert ids(rk.Dataset(tmp_path, SPEC).batch(100)) == everything
    rk.build_index(rk.list_files(tmp_path))
    read = []
    real_checked_index = dataset_module.checked_index
    monkeypatch.setattr(dataset_module, "checked_index",
                        lambda path, index: read.append(index) or real_checked_index(path, index))
    shares = consumers_ids(tmp_path, 3, 1, monkeypatch)
    assert sorted(i for share in shares for i in share) == everything
    assert sorted({len(share) for share in shares}) == [1003, 1004]
    assert len(read) == 3 * 2, "each consumer takes both counts from the index files"


# --- saving and resuming mid-epoch --------------------------------------------------------------


def _pipelines(folder: Path) -> dict[str, rk.Dataset]:
    return {
        "plain": rk.Dataset(folder, SPEC),
        "shuffled, seed drawn": rk.Dataset(folder, SPEC).shuffle(100).batch(7).prefetch(2),
        "shuffled, seeded, repeated": rk.Dataset(folder, SPEC).shuffle(64, seed=3).repeat(2).batch(5),
        "sharded, interleaved": rk.Dataset(folder, SPEC, cycle_length=3).shard(3, 1).batch(9, drop_remainder=True),
    }


@pytest.mark.parametrize("name", ["plain", "shuffled, seed drawn", "shuffled, seeded, repeated", "sharded, interleaved"])
@pytest.mark.parametrize("stop_after", [0, 1, 13, 40])
def test_a_state_taken_mid_epoch_resumes_with_exactly_the_rest(
    shards: tuple[Path, list[int]], name: str, stop_after: int
) -> None:
    folder, _ = shards
    ds = _pipelines(folder)[name]
    ds.set_epoch(2)
    expected = [np.atleast_1d(item["id"]).tolist() for item in ds]  # epoch 2, whole
    ds.set_epoch(2)
    it = iter(ds)
    got = [np.atleast_1d(next(it)["id"]).tolist() for _ in range(min(stop_after, len(expected)))]
    state = ds.state_dict()
    it.close()
    json_state = __import__("json").loads(__import__("json").dumps(state))  # states are plain JSON
    fresh = _pipelines(folder)[name]  # a new process builds the dataset again (a new seed, if drawn)
    fresh.load_state_dict(json_state)
    rest = [np.atleast_1d(item["id"]).tolist() for item in fresh]
    assert got + rest == expected
    # After the resumed epoch, the following one is the next epoch's.
    ds.set_epoch(3)
    assert [np.atleast_1d(item["id"]).tolist() for item in fresh] == [
        np.atleast_1d(item["id"]).tolist() for item in ds
    ]


def test_a_state_from_another_dataset_or_consumer_is_refused(shards: tuple[Path, list[int]]) -> None:
    folder, _ = shards
    state = rk.Dataset(folder, SPEC).shuffle(10, seed=1).state_dict()
    with pytest.raises(ValueError, match="built differently"):
        rk.Dataset(folder, SPEC).shuffle(10, seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="not a recordkit Dataset state"):
        rk.Dataset(folder, SPEC).load_state_dict({"epoch": 0})
    state = rk.Dataset(folder, SPEC).state_dict()
    other = rk.Dataset(folder, SPEC)
    other.load_state_dict(state)
    other._shard = (2, 1)  # read by another consumer than the one that saved it
    other._fingerprint = lambda: state["fingerprint"]  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="consumer 0 of 1"):
        list(other)


def test_a_state_is_refused_once_a_file_was_rewritten_with_other_records(tmp_path: Path) -> None:
    write_shards(tmp_path, [40, 40])
    ds = rk.Dataset(tmp_path, SPEC).batch(10)
    batches = iter(ds)
    next(batches), next(batches)
    state = ds.state_dict()
    rewritten = tmp_path / "train-00001-of-00002.tfrecord"
    size = rewritten.stat().st_size
    rk.write_examples(rewritten, {"id": np.arange(80, 120)})  # the same name and size, other records
    assert rewritten.stat().st_size == size
    with pytest.raises(ValueError, match=f"{rewritten} has changed since the state was saved"):
        rk.Dataset(tmp_path, SPEC).batch(10).load_state_dict(state)
    write_shards(tmp_path, [40, 40])  # the original records again: resuming is sound
    resumed = rk.Dataset(tmp_path, SPEC).batch(10)
    resumed.load_state_dict(state)
    assert ids(resumed) == list(range(20, 80))


def test_a_state_from_an_older_recordkit_cannot_show_the_files_are_the_same(shards: tuple[Path, list[int]]) -> None:
    folder, _ = shards
    state = dict(rk.Dataset(folder, SPEC).state_dict(), format="recordkit.Dataset/1")
    del state["files"]
    with pytest.raises(ValueError, match="older recordkit.*start the epoch again"):
        rk.Dataset(folder, SPEC).load_state_dict(state)


_KILLED_CONSUMER = textwrap.dedent(
    """
    import json, os, signal, sys
    import numpy as np
    import recordkit as rk

    folder, log, kill_after = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ds = rk.Dataset(folder, {"id": rk.FixedLenFeature([], "int64")}).shuffle(50).batch(4).prefetch(3)
    if os.path.exists(log + ".state"):
        with open(log + ".state") as f:
            ds.load_state_dict(json.load(f))
    with open(log, "a") as out:
        for n, batch in enumerate(ds, 1):
            out.write(" ".join(map(str, batch["id"].tolist())) + "\\n")
            out.flush()
            # A checkpoint after every step, written atomically, as a training loop would.
            with open(log + ".state.tmp", "w") as f:
                json.dump(ds.state_dict(), f)
            os.replace(log + ".state.tmp", log + ".state")
            if n == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.parametrize("kill_after", [1, 57, 150])
def test_a_consumer_killed_mid_epoch_resumes_with_every_record_exactly_once(
    shards: tuple[Path, list[int]], tmp_path: Path, kill_after: int
) -> None:
    folder, everything = shards
    log = tmp_path / "log"
    first = subprocess.run([sys.executable, "-c", _KILLED_CONSUMER, str(folder), str(log), str(kill_after)])
    assert first.returncode == -9
    second = subprocess.run([sys.executable, "-c", _KILLED_CONSUMER, str(folder), str(log), "0"])
    assert second.returncode == 0
    lines = log.read_text().splitlines()
    assert len(lines) == -(-len(everything) // 4)  # every batch once: none lost, none twice
    delivered = [int(x) for line in lines for x in line.split()]
    assert sorted(delivered) == everything


# torchdata 0.11 calls torch.set_vital, which torch 2.15 deprecates.
@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
def test_stateful_dataloader_resumes_mid_epoch(shards: tuple[Path, list[int]]) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("torchdata.stateful_dataloader")
    folder, everything = shards
    for workers in (0, 2):
        loader = rk.Dataset(folder, SPEC).shuffle(40, seed=5).batch(8).loader(num_workers=workers, stateful=True)
        it = iter(loader)
        before = [next(it)["id"].tolist() for _ in range(30)]
        state = loader.state_dict()
        del it
        again = rk.Dataset(folder, SPEC).shuffle(40, seed=5).batch(8).loader(num_workers=workers, stateful=True)
        again.load_state_dict(state)
        after = [batch["id"].tolist() for batch in again]
        delivered = [i for batch in before + after for i in batch]
        assert sorted(delivered) == everything, f"{workers} workers"
    with pytest.raises(TypeError, match="stateful=True"):
        rk.Dataset(folder, SPEC).loader().state_dict()


def test_a_dataloader_takes_a_dataset_as_it_is_or_says_what_to_use(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    write_shards(tmp_path, [30, 20])
    ds = rk.Dataset(tmp_path, SPEC).batch(8)  # made after torch was imported: an IterableDataset
    for workers in (0, 2):
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
        assert sorted(i for batch in loader for i in batch["id"].tolist()) == list(range(50))
    with pytest.raises(TypeError, match=r"has no len\(\); for a PyTorch DataLoader use ds.loader"):
        len(ds)
    assert ds and len(list(ds)) == 7  # truth and list() never ask for the length


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_background_hands_every_item_in_order_then_the_error(depth: int) -> None:
    import itertools
    import threading

    def source(count: int, fail: bool):  # type: ignore[no-untyped-def]
        yield from range(count)
        if fail:
            raise ValueError("the source failed")

    for count in (0, 1, depth - 1, depth, 3 * depth + 1):
        assert list(dataset_module._Background(source(count, False), depth, "test-bg")) == list(range(count))
        got: list[int] = []
        with pytest.raises(ValueError, match="the source failed"):
            for item in dataset_module._Background(source(count, True), depth, "test-bg"):
                got.append(item)
        assert got == list(range(count))
    # Closed early, with the thread waiting for room: the thread ends, and its source is closed.
    closed = threading.Event()

    def endless():  # type: ignore[no-untyped-def]
        try:
            yield from itertools.count()
        finally:
            closed.set()

    background = dataset_module._Background(endless(), depth, "test-bg")
    assert next(background) == 0
    background.close()
    assert closed.wait(5) and not background._thread.is_alive()
