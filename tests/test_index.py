"""Random access: index files (ours, DALI's, the tfrecord package's) and IndexedDataset."""

from __future__ import annotations

import importlib.util
import os
import random
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import recordkit as rk
from reference import frame_tfrecord, record_offsets


def make(path: Path, n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    records = [rk.encode_example({"i": i, "blob": rng.randbytes(rng.randrange(0, 300))}) for i in range(n)]
    path.write_bytes(frame_tfrecord(records))
    return records


def test_index_format(tmp_path: Path) -> None:
    records = make(tmp_path / "a.tfrecord", 50)
    index_path = rk.build_index(tmp_path / "a.tfrecord")
    assert index_path == str(tmp_path / "a.tfrecord.idx")
    lines = Path(index_path).read_text().splitlines()
    offsets = record_offsets(records)
    assert lines == [f"{offsets[i]} {offsets[i + 1] - offsets[i]}" for i in range(50)]
    got_offsets, got_sizes = rk.read_index(index_path)
    assert got_offsets.tolist() == offsets[:-1] and int(got_sizes.sum()) == os.path.getsize(tmp_path / "a.tfrecord")


def test_random_access_equals_sequential_reading(tmp_path: Path) -> None:
    a = make(tmp_path / "a.tfrecord", 40, seed=1)
    b = make(tmp_path / "b.tfrecord", 0, seed=2)
    c = make(tmp_path / "c.tfrecord", 25, seed=3)
    everything = a + b + c
    ds = rk.IndexedDataset([tmp_path / "a.tfrecord", tmp_path / "b.tfrecord", tmp_path / "c.tfrecord"])
    assert len(ds) == 65
    order = list(range(65))
    random.Random(7).shuffle(order)
    assert [ds[i] for i in order] == [everything[i] for i in order]
    assert ds.__getitems__(order) == [everything[i] for i in order]
    assert ds[-1] == everything[-1]
    with pytest.raises(IndexError):
        ds[65]
    # The indexes were built on first use and cached beside the files.
    assert (tmp_path / "a.tfrecord.idx").exists() and (tmp_path / "c.tfrecord.idx").exists()


def test_parsed_items_and_batches(tmp_path: Path) -> None:
    make(tmp_path / "a.tfrecord", 30)
    spec = {"i": rk.FixedLenFeature([], "int64"), "blob": rk.FixedLenFeature([], "string")}
    ds = rk.IndexedDataset(tmp_path / "a.tfrecord", spec)
    assert ds[7]["i"].item() == 7
    assert ds[[3, 1, 4]]["i"].tolist() == [3, 1, 4]
    assert ds.batch([3, 1, 4])["blob"].tolist() == ds[[3, 1, 4]]["blob"].tolist()
    items = ds.__getitems__([3, 1, 4])  # PyTorch's contract: a list of items, each as ds[i] gives it
    assert [item["i"] for item in items] == [3, 1, 4]
    assert all(item["blob"] == ds[i]["blob"] for item, i in zip(items, [3, 1, 4]))


@pytest.mark.parametrize("workers", [0, 2])
def test_pytorch_dataloader_default_collate_and_batch_sampler(tmp_path: Path, workers: int) -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    make(tmp_path / "a.tfrecord", 100)
    rk.build_index(tmp_path / "a.tfrecord")
    spec = {"i": rk.FixedLenFeature([], "int64"), "pair": rk.FixedLenFeature([2], "int64", default_value=[0, 0]),
            "blob": rk.FixedLenFeature([], "string")}
    ds = rk.IndexedDataset(tmp_path / "a.tfrecord", spec)
    # The standard pattern: default collate, batches of tensors.
    seen: list[int] = []
    for batch in DataLoader(ds, batch_size=32, shuffle=True, num_workers=workers):
        assert isinstance(batch["i"], torch.Tensor) and batch["i"].dtype == torch.int64
        assert batch["pair"].shape == (len(batch["i"]), 2)
        assert len(batch["blob"]) == len(batch["i"]) and isinstance(batch["blob"][0], bytes)
        seen += batch["i"].tolist()
    assert sorted(seen) == list(range(100))
    # One read and one parse per batch: ds[list] through a BatchSampler.
    sampler = BatchSampler(RandomSampler(ds), 32, drop_last=False)
    seen = []
    for batch in DataLoader(ds, batch_size=None, sampler=sampler, num_workers=workers):
        assert isinstance(batch["i"], torch.Tensor)
        seen += batch["i"].tolist()
    assert sorted(seen) == list(range(100))


def test_rows_collate_as_the_default_collate_makes_dict_rows(tmp_path: Path) -> None:
    """The rows ``__getitems__`` gives are collated from their batch's columns; the
    result is exactly what PyTorch's default collate makes of plain dicts of those values."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import default_collate

    with rk.TFRecordWriter(tmp_path / "a.tfrecord") as writer:
        for i in range(50):  # `pair` missing from every third record: its default, a read-only broadcast
            features = {"i": i, "score": np.float32(i) / 4, "blob": b"x%d" % i}
            if i % 3:
                features["pair"] = [i, -i]
            writer.write(rk.encode_example(features))
    rk.build_index(tmp_path / "a.tfrecord")
    spec = {"i": rk.FixedLenFeature([], "int64"), "score": rk.FixedLenFeature([], "float32"),
            "pair": rk.FixedLenFeature([2], "int64", default_value=[7, 7]), "blob": rk.FixedLenFeature([], "string")}
    ds = rk.IndexedDataset(tmp_path / "a.tfrecord", spec)
    rows = ds.__getitems__([4, 0, 3, 49, 3])
    single = ds[3]
    assert len(rows) == 5 and list(rows[2]) == list(single)
    assert all(np.array_equal(rows[2][name], single[name]) for name in spec)
    as_dicts = [dict(row) for row in rows]
    for chosen in (rows, rows[1:4], rows[::-1], rows[:1] + ds.__getitems__([9, 10])):  # whole, part, mixed batches
        got, expected = default_collate(chosen), default_collate([dict(row) for row in chosen])
        assert got.keys() == expected.keys()
        for name in expected:
            if isinstance(expected[name], torch.Tensor):
                assert got[name].dtype == expected[name].dtype and torch.equal(got[name], expected[name]), name
            else:
                assert got[name] == expected[name], name
    assert as_dicts[1]["pair"].tolist() == [7, 7] and as_dicts[0]["pair"].tolist() == [4, -4]


# Run in a child, as every truncation test: a SIGBUS that a handler installed after
# recordkit's (faulthandler, another library) takes shows as a return code there.
_TRUNCATE_UNDER_DATASET = r"""
import os, sys
import recordkit as rk
path, expected_first = sys.argv[1], bytes.fromhex(sys.argv[2])
ds = rk.IndexedDataset(path)
assert ds[0] == expected_first and len(ds[[5, 2999]]) == 2
os.truncate(path, 4096)
kinds = []
# Once the file shrank, nothing read through its mapping is trusted, what is still there included.
for read in (lambda: ds[2999], lambda: ds[[1, 2999]], lambda: ds[1]):
    try:
        read()
    except rk.DataLossError as e:
        kinds.append(e.kind)
print(" ".join(kinds))
"""


def test_a_file_truncated_under_an_indexed_dataset_is_data_loss(tmp_path: Path) -> None:
    records = make(tmp_path / "a.tfrecord", 3000)
    rk.build_index(tmp_path / "a.tfrecord")
    out = subprocess.run([sys.executable, "-c", _TRUNCATE_UNDER_DATASET, str(tmp_path / "a.tfrecord"),
                          records[0].hex()], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    kinds = out.stdout.split()
    assert len(kinds) == 3, out.stdout  # every read refused, none delivered zeros
    assert set(kinds) <= {"truncated_while_reading", "corrupt_length", "truncated_record"}, kinds


def test_a_dataset_in_use_pickles_without_its_open_files(tmp_path: Path) -> None:
    import pickle

    records = make(tmp_path / "a.tfrecord", 20)
    ds = rk.IndexedDataset(tmp_path / "a.tfrecord")
    assert ds[3] == records[3]  # its files are open now
    copy = pickle.loads(pickle.dumps(ds))  # as a DataLoader worker started by spawn gets it
    assert copy[[4, 3]] == [records[4], records[3]] and ds[19] == records[19]


def test_tfrecord_package_index_is_accepted(tmp_path: Path) -> None:
    if importlib.util.find_spec("tfrecord") is None:
        pytest.skip("the tfrecord package is not installed")
    records = make(tmp_path / "a.tfrecord", 20)
    # In its own process: its generated protos clash with TensorFlow's if both load in one.
    code = "import sys; from tfrecord.tools.tfrecord2idx import create_index; create_index(sys.argv[1], sys.argv[2])"
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "a.tfrecord"), str(tmp_path / "a.tfindex")], check=True)
    ds = rk.IndexedDataset(tmp_path / "a.tfrecord", index=tmp_path / "a.tfindex")
    assert [ds[i] for i in range(20)] == records
    rk.build_index(tmp_path / "a.tfrecord", tmp_path / "ours.idx")
    assert (tmp_path / "ours.idx").read_text().split() == (tmp_path / "a.tfindex").read_text().split()


def test_compressed_files_are_refused_clearly(tmp_path: Path) -> None:
    with rk.TFRecordWriter(tmp_path / "a.tfrecord.gz", compression="gzip") as writer:
        writer.write(b"x")
    for call in (lambda: rk.build_index(tmp_path / "a.tfrecord.gz"), lambda: rk.IndexedDataset(tmp_path / "a.tfrecord.gz")):
        with pytest.raises(ValueError, match="compressed"):
            call()


def test_the_fix_suggested_for_compressed_files_works(tmp_path: Path) -> None:
    source = tmp_path / "my data.tfrecord.gz"  # a space, to check the suggestion's quoting
    with rk.TFRecordWriter(source, compression="gzip") as writer:
        writer.write_many([b"a", b"b", b"c"])
    cli = subprocess.run([sys.executable, "-m", "recordkit", "index", str(source)], capture_output=True, text=True)
    assert cli.returncode != 0
    suggestion = re.search(r"(recordkit convert .*?)   \(in Python: (rk\.convert\(.*\))\)", cli.stderr)
    assert suggestion, cli.stderr
    command = shlex.split(suggestion[1])
    subprocess.run([sys.executable, "-m", *command], check=True, capture_output=True)
    copy = tmp_path / "my data.tfrecord"
    assert list(rk.IndexedDataset(copy)) == [b"a", b"b", b"c"]
    copy.unlink()
    eval(suggestion[2], {"rk": rk})  # the Python spelling, run as written
    assert list(rk.IndexedDataset(copy)) == [b"a", b"b", b"c"]


def test_damage_and_wrong_indexes_are_data_loss(tmp_path: Path) -> None:
    records = make(tmp_path / "a.tfrecord", 10)
    offsets = record_offsets(records)
    data = bytearray((tmp_path / "a.tfrecord").read_bytes())
    data[offsets[4] + 14] ^= 0xFF
    (tmp_path / "a.tfrecord").write_bytes(bytes(data))
    ds = rk.IndexedDataset(tmp_path / "a.tfrecord", index=rk.build_index(tmp_path / "a.tfrecord"))
    assert ds[3] == records[3]
    with pytest.raises(rk.DataLossError) as info:
        ds[4]
    assert (info.value.offset, info.value.record_index) == (offsets[4] + 12, 4)
    (tmp_path / "wrong.idx").write_text("1 50\n")
    with pytest.raises(ValueError, match=r"wrong\.idx:1: the index does not match its record file"):
        rk.IndexedDataset(tmp_path / "a.tfrecord", index=tmp_path / "wrong.idx")
    (tmp_path / "bad.idx").write_text("not an index\n")
    with pytest.raises(ValueError, match="index"):
        rk.read_index(tmp_path / "bad.idx")
    assert rk.read_index(tmp_path / "wrong.idx")[0].tolist() == [1]


def test_many_files_are_indexed_together(tmp_path: Path) -> None:
    paths = [tmp_path / f"f{i}.tfrecord" for i in range(5)]
    for i, path in enumerate(paths):
        make(path, 10 * i, seed=i)
    written = rk.build_index(paths)
    assert written == [str(p) + ".idx" for p in paths]
    assert [len(rk.read_index(w)[0]) for w in written] == [0, 10, 20, 30, 40]
    with pytest.raises(ValueError, match="one index"):
        rk.build_index(paths, tmp_path / "x.idx")


def test_indexed_dataset_takes_every_source_list_files_takes(tmp_path: Path) -> None:
    paths = rk.write_examples(tmp_path / "d" / "t.tfrecord", {"i": np.arange(9)}, shards=3)
    for source in (f"{tmp_path}/d", f"{tmp_path}/d/*.tfrecord", f"{tmp_path}/d/t@3", paths):
        ds = rk.IndexedDataset(source, {"i": rk.FixedLenFeature([], "int64")})
        assert ds[list(range(9))]["i"].tolist() == list(range(9)), source


@pytest.mark.parametrize("line", ["0 1099511627776", "0 18446744073709551615", "18446744073709551615 32", "0 17",
                                  "0 0"])
def test_an_index_beyond_the_file_is_refused_before_any_read(tmp_path: Path, line: str) -> None:
    make(tmp_path / "a.tfrecord", 3)
    (tmp_path / "a.idx").write_text(line + "\n")
    with pytest.raises(ValueError, match=r"a\.idx:1: the index does not match its record file"):
        rk.IndexedDataset(tmp_path / "a.tfrecord", index=tmp_path / "a.idx")


def test_an_index_whose_offsets_do_not_chain_is_refused_naming_the_line(tmp_path: Path) -> None:
    make(tmp_path / "a.tfrecord", 20)
    lines = Path(rk.build_index(tmp_path / "a.tfrecord")).read_text().splitlines()
    broken = {
        "a line missing": (lines[:5] + lines[6:], 6),
        "the last line missing": (lines[:-1], 19),
        "a line repeated": (lines[:8] + [lines[7]] + lines[8:], 9),
        "two lines swapped": (lines[:3] + [lines[4], lines[3]] + lines[5:], 4),
        "a blank line, then one missing": (lines[:2] + [""] + lines[2:10] + lines[11:], 12),
    }
    for what, (kept, number) in broken.items():
        (tmp_path / "a.tfrecord.idx").write_text("\n".join(kept) + "\n")
        with pytest.raises(ValueError, match=rf"a\.tfrecord\.idx:{number}: the index does not match"):
            rk.IndexedDataset(tmp_path / "a.tfrecord")
        with pytest.raises(ValueError, match=rf"a\.tfrecord\.idx:{number}: the index does not match"):
            rk.Dataset(tmp_path / "a.tfrecord").shard(2, 0).prepare()
    (tmp_path / "a.tfrecord.idx").write_text("\n".join(lines) + "\n")
    assert len(rk.IndexedDataset(tmp_path / "a.tfrecord")) == 20


@pytest.mark.parametrize("text, line", [("-1 32\n", 1), ("0 32\n1 2 3\n4 5\n", 2), ("0 32\n7\n", 2), ("0 x\n", 1),
                                        ("0 18446744073709551616\n", 1)])
def test_malformed_index_lines_are_named(tmp_path: Path, text: str, line: int) -> None:
    (tmp_path / "a.idx").write_text(text)
    with pytest.raises(ValueError, match=rf"a\.idx:{line}: not an index line"):
        rk.read_index(tmp_path / "a.idx")


@given(st.lists(st.tuples(st.integers(0, (1 << 64) - 1), st.integers(0, (1 << 64) - 1)), max_size=50),
       st.lists(st.sampled_from([" ", "\t", "  "]), min_size=3, max_size=3),
       st.sampled_from(["\n", "\r\n", "\r"]), st.booleans())
def test_index_text_reads_alike_fast_or_not(pairs: list[tuple[int, int]], spaces: list[str], newline: str,
                                            blank_lines: bool) -> None:
    """The one-pass reading of plain index lines gives what the general reading gives."""
    from recordkit import _native

    lead, middle, tail = spaces
    lines = [f"{lead}{offset}{middle}{size}{tail}" for offset, size in pairs]
    if blank_lines:
        lines = [x for line in lines for x in (line, lead)]
    text = newline.join(lines).encode()
    fast = _native._parse_index(text)
    assert fast is not None
    expected = [p[0] for p in pairs], [p[1] for p in pairs]
    assert (fast[0].tolist(), fast[1].tolist()) == expected and fast[0].dtype == fast[1].dtype == np.uint64


@pytest.mark.parametrize("text", ["+5 32\n", "0 32 \x00\n", "0 1_000\n"])
def test_index_lines_the_fast_reading_leaves_are_read_as_before(tmp_path: Path, text: str) -> None:
    from recordkit import _native

    assert _native._parse_index(text.encode()) is None
    (tmp_path / "a.idx").write_text(text)
    try:
        expected = [int(t) for t in text.split()]
    except ValueError:
        with pytest.raises(ValueError, match="not an index"):
            rk.read_index(tmp_path / "a.idx")
    else:
        offsets, sizes = rk.read_index(tmp_path / "a.idx")
        assert [int(offsets[0]), int(sizes[0])] == expected
