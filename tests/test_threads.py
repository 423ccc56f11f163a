"""recordkit.threads: the thread count changes how fast, never what comes out."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

import recordkit as rk
from conftest import fresh_seed

COUNTS = (1, 2, 7)


@pytest.fixture(autouse=True)
def default_threads() -> Iterator[None]:
    yield
    rk.set_num_threads(None)


# Short labels that repeat, as class names do (each batch's equal ones become one
# bytes object), beside longer ones, which are never shared.
LABELS = [b"", b"cat", b"horse", b"chicken", b"sixteen-letters!", b"seventeen letters", b"a" * 40]


def label(i: int) -> bytes:
    return LABELS[i * 2654435761 % 97 % len(LABELS)]


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """100 000 Examples, enough for 7 threads of 4096 records and more per batch."""
    rng = np.random.default_rng(fresh_seed())
    n = 100_000
    path = tmp_path_factory.mktemp("threads") / "many.tfrecord"
    lengths = rng.integers(0, 5, n)
    rk.write_examples(path, {
        "id": np.arange(n),
        "name": np.array([b"n%x" % v for v in rng.integers(0, 1 << 40, n)], dtype=object),
        "score": rng.random(n).astype(np.float32),
        "tags": [rng.integers(-9, 9, k).tolist() for k in lengths],
        "label": np.array([label(i) for i in range(n)], dtype=object),
    })
    return path


def test_set_and_get(tmp_path: Path) -> None:
    rk.set_num_threads(3)
    assert rk.get_num_threads() == 3
    rk.set_num_threads(None)
    assert rk.get_num_threads() >= 1
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="positive whole number"):
            rk.set_num_threads(bad)  # type: ignore[arg-type]


def test_the_environment_sets_the_default() -> None:
    code = "import recordkit as rk; print(rk.get_num_threads())"
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, RECORDKIT_NUM_THREADS="5"),
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "5"


def test_results_are_identical_for_every_thread_count(many: Path, tmp_path: Path) -> None:
    spec = {"id": rk.FixedLenFeature([], "int64"), "name": rk.FixedLenFeature([], "string"),
            "score": rk.FixedLenFeature([], "float32"), "tags": rk.VarLenFeature("int64"),
            "label": rk.FixedLenFeature([], "string")}
    records = list(rk.TFRecordReader(many))
    outputs = []
    for count in COUNTS:
        rk.set_num_threads(count)
        table = rk.read_table(many, spec)
        parsed = rk.parse_example(records, spec)
        columns = next(iter(rk.read_examples(many, spec, batch_size=100_000)))
        # Batches after the first are read ahead: parsed in runs on every core, joined on this thread.
        batches = list(rk.read_examples(many, spec, batch_size=30_000))
        ahead = {key: np.concatenate([b[key] for b in batches]) for key in ("id", "name", "score", "label")}
        written = tmp_path / f"written-{count}.tfrecord"
        rk.write_examples(written, table)
        outputs.append((table, parsed, columns, written.read_bytes(), ahead))
    first = outputs[0]
    assert first[0].column("id").to_pylist() == list(range(len(records)))  # in order
    assert first[2]["label"].tolist() == [label(i) for i in range(len(records))]
    for key in ("id", "name", "score", "label"):
        np.testing.assert_array_equal(first[4][key], first[2][key])
    for table, parsed, columns, written, ahead in outputs[1:]:
        assert table.equals(first[0])
        for key in ("id", "name", "score", "label"):
            np.testing.assert_array_equal(parsed[key], first[1][key])
            np.testing.assert_array_equal(columns[key], first[2][key])
            np.testing.assert_array_equal(ahead[key], first[2][key])
        np.testing.assert_array_equal(parsed["tags"].values, first[1]["tags"].values)
        assert written == first[3] == many.read_bytes()


def test_large_values_copied_into_bytes_on_every_core_are_the_values(tmp_path: Path) -> None:
    # Values of 64 KiB and more are copied into their bytes objects by several threads
    # once a batch holds 1 MiB of them per thread; the small ones between stay as they were.
    # Each read gets values of its own: a bytes object is made uninitialized, and one
    # freed by an earlier read of the same values would hide a value left unfilled.
    rng = np.random.default_rng(fresh_seed())
    spec = {"image": rk.FixedLenFeature([], "string"), "label": rk.FixedLenFeature([], "int64")}
    for count in COUNTS:
        rk.set_num_threads(count)
        for batch_size in (7, 60):
            sizes = [int(n) for n in rng.choice([0, 3, 65535, 65536, 150_000, 400_000], 60)]
            values = [rng.bytes(n) for n in sizes]
            path = tmp_path / f"large-{count}-{batch_size}.tfrecord"
            rk.write_examples(path, {"image": np.array(values, dtype=object), "label": np.arange(len(values))})
            got = [v for batch in rk.read_examples(path, spec, batch_size=batch_size) for v in batch["image"]]
            assert got == values, (count, batch_size)
            assert [hash(v) for v in got] == [hash(v) for v in values]
            assert list(rk.parse_example(list(rk.TFRecordReader(path)), spec)["image"]) == values, count


def test_an_error_in_a_worker_thread_names_the_record(tmp_path: Path) -> None:
    path = tmp_path / "bad.tfrecord"
    good = rk.encode_example({"x": 1})
    with rk.TFRecordWriter(path) as writer:
        for i in range(60_000):
            writer.write(b"\x0a\x05\xff\xff\xff\xff\xff" if i == 51_234 else good)  # a length beyond the message
    for count in COUNTS:
        rk.set_num_threads(count)
        with pytest.raises(rk.ParseError) as error:
            rk.read_table(path, {"x": rk.FixedLenFeature([], "int64")})
        assert error.value.index == 51_234, count
        with pytest.raises(rk.ParseError) as error:
            rk.parse_example(list(rk.TFRecordReader(path)), {"x": rk.FixedLenFeature([], "int64")})
        assert "51234" in str(error.value), count
        # In batch 10 of 5000 records, made ahead by one of the threads that take batches in turn:
        # every batch before it first, then the error.
        taken = []
        with pytest.raises(rk.ParseError) as error:
            for batch in rk.read_examples(path, {"x": rk.FixedLenFeature([], "int64")}, batch_size=5000):
                taken.append(len(batch["x"]))
        assert taken == [5000] * 10 and error.value.index == 51_234, count
        # In the last full batch (45 000 to 54 000), which every thread parses a share of.
        taken = []
        with pytest.raises(rk.ParseError) as error:
            for batch in rk.read_examples(path, {"x": rk.FixedLenFeature([], "int64")}, batch_size=9000):
                taken.append(len(batch["x"]))
        assert taken == [9000] * 5 and error.value.index == 51_234, count
        # In the first batch, parsed before any thread starts reading ahead: no batch, then the error.
        with pytest.raises(rk.ParseError) as error:
            next(rk.read_examples(path, {"x": rk.FixedLenFeature([], "int64")}, batch_size=52_000))
        assert error.value.index == 51_234, count


def test_one_thread_per_dataloader_worker_unless_chosen(many: Path) -> None:
    pytest.importorskip("torch")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: the default is one thread anyway, so this could not fail")
    # In fresh interpreters: forking this one (as DataLoader workers do) after
    # other tests started threads is what the fork warning is about.
    code = (
        "import torch, recordkit as rk\n"
        f"ds = rk.Dataset({str(many)!r}).take(1).map(lambda r: rk.get_num_threads())\n"
        "print(list(torch.utils.data.DataLoader(ds.to_torch(), batch_size=None, num_workers=1)))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RECORDKIT_NUM_THREADS"}
    default = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    chosen = subprocess.run([sys.executable, "-c", code], env=dict(env, RECORDKIT_NUM_THREADS="3"),
                            capture_output=True, text=True, check=True)
    assert default.stdout.strip() in ("[1]", "[tensor(1)]")
    assert chosen.stdout.strip() in ("[3]", "[tensor(3)]")


SPEC = {"id": rk.FixedLenFeature([], "int64"), "name": rk.FixedLenFeature([], "string"),
        "tags": rk.VarLenFeature("int64"), "label": rk.FixedLenFeature([], "string")}


def _batches(source: object, count: int, batch_size: int) -> list[dict[str, np.ndarray]]:
    rk.set_num_threads(count)
    return list(rk.read_examples(source, SPEC, batch_size=batch_size))


@pytest.mark.parametrize("source", ["mapped", "gzip", "file object"])
def test_reading_ahead_gives_the_same_batches(many: Path, tmp_path: Path, source: str) -> None:
    # Batches of 1500 and 5000 records: with more than one thread a worker parses the
    # next batch (and, for a mapped file, frames the one after) while this one is taken;
    # a Python file object is read on the caller's thread, and must agree all the same.
    if source == "gzip":
        path = tmp_path / "many.tfrecord.gz"
        with rk.TFRecordWriter(path, compression="gzip") as writer:
            writer.write_many(rk.TFRecordReader(many))
    else:
        path = many
    for batch_size in (1500, 5000):
        runs = []
        for count in COUNTS:
            if source == "file object":
                with open(path, "rb") as handle:
                    runs.append(_batches(handle, count, batch_size))
            else:
                runs.append(_batches(path, count, batch_size))
        assert [len(b["id"]) for b in runs[0]] == [batch_size] * (100_000 // batch_size) + (
            [100_000 % batch_size] if 100_000 % batch_size else [])
        assert np.concatenate([b["id"] for b in runs[0]]).tolist() == list(range(100_000))
        for run in runs:
            assert np.concatenate([b["label"] for b in run]).tolist() == [label(i) for i in range(100_000)]
            # Equal short labels of a batch are one object; longer ones each their own.
            for batch in run:
                for value in LABELS:
                    objects = {id(v) for v in batch["label"] if v == value}
                    assert len(objects) == (1 if len(value) <= 16 else batch["label"].tolist().count(value))
        for run in runs[1:]:
            assert len(run) == len(runs[0])
            for batch, first in zip(run, runs[0]):
                for key in ("id", "name", "label"):
                    np.testing.assert_array_equal(batch[key], first[key])
                np.testing.assert_array_equal(batch["tags"].values, first["tags"].values)
                np.testing.assert_array_equal(batch["tags"].indices, first["tags"].indices)


@pytest.mark.parametrize(("compressed", "batch_size", "damaged"), [
    (False, 2000, 23_456), (True, 2000, 23_456),
    # Threads reading a mapped file ahead check its records' CRCs as they parse them:
    # the damaged record first in the file, first in its batch, last in the file, and in
    # the last full batch, whose runs are parsed on every thread.
    (False, 2000, 0), (False, 2000, 24_000), (False, 2000, 99_999), (False, 9000, 95_000),
    # A batch larger than the file: made on Python's thread, its records' CRCs checked
    # as they are parsed on every thread all the same.
    (False, 200_000, 0), (False, 200_000, 23_456)])
def test_damage_ahead_is_raised_after_every_record_before_it(
        many: Path, tmp_path: Path, compressed: bool, batch_size: int, damaged: int) -> None:
    # Compressed: a valid gzip stream of the damaged records, whose batches are copied out
    # of the decompressed window to be parsed while the next is inflated and framed.
    from conftest import damage_record

    path = tmp_path / "damaged.tfrecord"
    path.write_bytes(many.read_bytes())
    offset = damage_record(path, damaged)
    if compressed:
        path = tmp_path / "damaged.tfrecord.gz"
        path.write_bytes(gzip.compress((tmp_path / "damaged.tfrecord").read_bytes(), compresslevel=1))
    for count in COUNTS:
        rk.set_num_threads(count)
        ids: list[int] = []
        with pytest.raises(rk.DataLossError) as error:
            for batch in rk.read_examples(path, SPEC, batch_size=batch_size):
                ids.extend(batch["id"].tolist())
        assert ids == list(range(damaged)), count  # every intact record first, none after
        assert error.value.offset == offset and error.value.kind == "corrupt_data"
        assert f"(record {damaged} of " in str(error.value)
        # read_table's ranges read the damaged file from a record in its middle too.
        with pytest.raises(rk.DataLossError, match=f"record {damaged} "):
            rk.read_table(path, SPEC)


def _threads() -> int:
    """recordkit's own worker threads (the Rust pool names them): other tests' threads
    (a DataLoader's, a thread letting a replaced file go) come and go as they please."""
    count = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                count += f.read().startswith("recordkit-work")
        except FileNotFoundError:
            pass  # ended meanwhile
    return count


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc")
def test_a_batch_reader_left_early_stops_its_worker(many: Path) -> None:
    """Its worker goes back to the pool of parked threads, which the next
    reader takes again: a worker left running would make each reader start more."""
    rk.set_num_threads(2)

    def left_early() -> None:
        batches = rk.read_examples(many, SPEC, batch_size=1000)
        next(batches)
        batches.close()  # what a `break` out of a for loop does
        reader = rk.read_batches(many, SPEC, batch_size=1000)
        reader.read_next_batch()
        reader.close()
        del reader  # pyarrow's close() keeps the batch generator until the reader goes

    left_early()  # the pool's threads, started once
    before = _threads()
    for _ in range(5):
        left_early()
    assert _threads() <= before


_TRUNCATE_AHEAD = """
import sys
import numpy as np
import recordkit as rk
rk.set_num_threads(2)
path, cut = sys.argv[1], int(sys.argv[2])
ids = []
try:
    for i, batch in enumerate(rk.read_examples(path, {"id": rk.FixedLenFeature([], "int64")}, batch_size=4096)):
        if i == 0:
            with open(path, "r+b") as f:
                f.truncate(cut)
        ids.extend(batch["id"].tolist())
except rk.DataLossError as e:
    assert ids == list(range(len(ids))), "a record delivered was wrong: zeros from the lost pages?"
    print("DataLossError", e.kind, len(ids))
else:
    print("no error", len(ids))
"""


def test_a_file_truncated_while_read_ahead_is_data_loss(tmp_path: Path) -> None:
    path = tmp_path / "shrinking.tfrecord"
    n = 400_000
    rk.write_examples(path, {"id": np.arange(n), "pad": np.full(n, b"x" * 40, dtype=object)})
    out = subprocess.run([sys.executable, "-c", _TRUNCATE_AHEAD, str(path), str(path.stat().st_size // 3)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    kind, read = out.stdout.split()[1:]
    assert out.stdout.startswith("DataLossError"), out.stdout
    assert kind in ("truncated_while_reading", "truncated_record") and int(read) < n


def _large_records(path: Path, n: int, size: int) -> list[bytes]:
    """``n`` Examples of an ``id`` and an ``image`` of ``size`` bytes that only record ``id`` holds."""
    images = [i.to_bytes(4, "little") * (size // 4) for i in range(n)]
    rk.write_examples(path, {"id": np.arange(n), "image": np.array(images, dtype=object)})
    return images


LARGE_SPEC = {"id": rk.FixedLenFeature([], "int64"), "image": rk.FixedLenFeature([], "string")}


def test_damage_in_large_records_read_ahead_is_raised_after_every_record_before_it(tmp_path: Path) -> None:
    # Records of 20 KB: their payload CRCs are checked after framing, on every core, by the
    # threads that read ahead; their images stay in the mapped file until Python copies them.
    from conftest import damage_record

    path = tmp_path / "large.tfrecord"
    images = _large_records(path, 200, 20_000)
    offset = damage_record(path, 77)
    for count in COUNTS:
        rk.set_num_threads(count)
        got: list[bytes] = []
        with pytest.raises(rk.DataLossError) as error:
            for batch in rk.read_examples(path, LARGE_SPEC, batch_size=16):
                assert batch["id"].tolist() == list(range(len(got), len(got) + len(batch["id"])))
                got.extend(batch["image"])
        assert got == images[:77], count
        assert error.value.offset == offset and error.value.kind == "corrupt_data"


_TRUNCATE_READ_AHEAD = """
import sys
import recordkit as rk
rk.set_num_threads(2)
path, cut, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
scanner = rk._native.RecordScanner(path, name=path)
batches = rk._native.ExampleBatches(scanner, [("id", "int64"), ("image", "string")], batch_size=16)
read = 0
try:
    for i, (count, ((ids, _, _), (images, _, _))) in enumerate(batches):
        if i == 0:
            batches._wait_read_ahead(2)  # the threads reading ahead have framed, checked and parsed batches 1 and 2
            with open(path, "r+b") as f:
                f.truncate(cut)
        for k, image in zip(ids.tolist(), images):
            assert k == read and image == k.to_bytes(4, "little") * (size // 4), f"record {k} is wrong"
            read += 1
except rk.DataLossError as e:
    print("DataLossError", e.kind, read)
else:
    print("no error", read)
finally:
    batches.close()
    scanner.close()
"""


@pytest.mark.parametrize("size", [20_000, 64])
def test_values_of_a_file_truncated_after_they_were_read_ahead_are_data_loss(tmp_path: Path, size: int) -> None:
    # The file shrinks after the threads reading ahead parsed batch 1 (records 16-31) and
    # checked the file, before Python copies its images out of the mapping (where the
    # threads leave byte strings of every size): the copy reads the lost bytes as zeros,
    # so the file is checked again after it, and none is delivered.
    path = tmp_path / "shrinking.tfrecord"
    _large_records(path, 200, size)
    cut = path.stat().st_size * 20 // 200  # in record 20
    out = subprocess.run([sys.executable, "-c", _TRUNCATE_READ_AHEAD, str(path), str(cut), str(size)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[:2] == ["DataLossError", "truncated_while_reading"], out.stdout
    assert int(out.stdout.split()[2]) == 16, out.stdout  # batch 0, and nothing of batch 1


_FORKED = """
import os, signal, sys
import numpy as np
import recordkit as rk
rk.set_num_threads(2)
path, spec = sys.argv[1], {"id": rk.FixedLenFeature([], "int64")}
rk.write_examples(path, {"id": np.arange(200_000)})
assert sum(len(b["id"]) for b in rk.read_examples(path, spec, batch_size=65536)) == 200_000  # threads now parked
pid = os.fork()
if pid == 0:  # a DataLoader worker, say: only the forking thread lives on
    signal.alarm(50)  # a child that hangs ends, rather than outlive the test
    ids = np.concatenate([b["id"] for b in rk.read_examples(path, spec, batch_size=65536)])
    rk.write_examples(path + ".child", {"id": ids})
    os._exit(0 if ids.tolist() == list(range(200_000)) else 1)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_runs_on_threads_of_its_own(tmp_path: Path) -> None:
    """The parent's parked threads do not exist in a child made by fork: the
    child's work must not wait for them."""
    done = subprocess.run([sys.executable, "-c", _FORKED, str(tmp_path / "t.tfrecord")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"]
    assert rk.count_records(tmp_path / "t.tfrecord.child") == 200_000


FRAMING_THREADS = (1, 2, 3, 7, 16)


def _records_of_every_size(seed: int, total: int) -> list[bytes]:
    """Records of 0 bytes to 4 MB, mostly small, about `total` bytes in all."""
    rng = np.random.default_rng(seed)
    records: list[bytes] = []
    size = 0
    while size < total:
        kind = rng.integers(0, 10)
        n = int(rng.integers(1 << 20, 4 << 20)) if kind == 0 else int(rng.integers(0, 3000)) if kind < 9 else 0
        records.append(rng.bytes(n))
        size += n + 16
    return records


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_framing_on_every_thread_counts_every_record_once(tmp_path: Path, compression: str | None) -> None:
    # Large enough that each of 16 threads gets a range of its own (a file of a few MB stays serial).
    records = _records_of_every_size(fresh_seed(), 24 << 20)
    path = tmp_path / ("r.tfrecord.gz" if compression else "r.tfrecord")
    with rk.TFRecordWriter(path, compression=compression) as writer:
        writer.write_many(records)
    for count in FRAMING_THREADS:
        rk.set_num_threads(count)
        assert rk.count_records(path) == len(records), count


def _frame_starts(path: Path) -> list[int]:
    data = path.read_bytes()
    starts, at = [], 0
    while at < len(data):
        starts.append(at)
        at += 12 + int.from_bytes(data[at : at + 8], "little") + 4
    return starts


def test_framing_on_every_thread_reports_damage_as_one_thread_does(tmp_path: Path) -> None:
    records = _records_of_every_size(fresh_seed(), 24 << 20)
    path = tmp_path / "intact.tfrecord"
    with rk.TFRecordWriter(path) as writer:
        writer.write_many(records)
    data = path.read_bytes()
    starts = _frame_starts(path)
    # The frame at or after each range boundary of 2, 3, 7 and 16 threads, and the last one.
    boundaries = {len(data) // t * k for t in (2, 3, 7, 16) for k in range(1, t)}
    damaged_frames = sorted({next((i for i, s in enumerate(starts) if s >= b), len(starts) - 1) for b in boundaries})
    damaged_frames.append(len(starts) - 1)
    for frame in damaged_frames[::3]:
        for how in ("length", "cut"):
            broken = bytearray(data)
            if how == "length":
                broken[starts[frame] + 3] ^= 0x10  # its length no longer matches its CRC
            else:
                broken = broken[: starts[frame] + 5]  # the file ends inside this frame's header
            bad = tmp_path / f"bad-{frame}-{how}.tfrecord"
            bad.write_bytes(bytes(broken))
            outcomes = set()
            for count in FRAMING_THREADS:
                rk.set_num_threads(count)
                with pytest.raises(rk.DataLossError) as error:
                    rk.count_records(bad)
                outcomes.add((error.value.offset, error.value.record_index, error.value.kind, str(error.value)))
            assert len(outcomes) == 1, (frame, how, outcomes)
            assert next(iter(outcomes))[1] == frame


INDEXED_SPEC = {"id": rk.FixedLenFeature([], "int64", default_value=-1), "blob": rk.VarLenFeature("string")}


@pytest.fixture(scope="module")
def every_size(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int], list[int]]:
    """About 24 MB of Examples, most of them small, some empty (no features: 0 bytes),
    one in 2 000 of 1 to 4 MB: its path, each record's id (-1 for the empty ones) and
    blob length."""
    rng = np.random.default_rng(fresh_seed())
    path = tmp_path_factory.mktemp("indexed") / "every-size.tfrecord"
    ids, lengths = [], []
    size = 0
    with rk.TFRecordWriter(path) as writer:
        while size < 24 << 20:
            kind = rng.integers(0, 2000)
            n = int(rng.integers(1 << 20, 4 << 20)) if kind == 0 else int(rng.integers(0, 400))
            if 0 < kind < 100:
                writer.write(b"")
                ids.append(-1)
                lengths.append(0)
            else:
                i = len(ids)
                writer.write(rk.encode_example({"id": i, "blob": rng.bytes(n)}))
                ids.append(i)
                lengths.append(n)
            size += n + 40
    return path, ids, lengths


def _read_indexed(path: Path, count: int, batch_size: int) -> tuple[list[int], list[int], list[int], BaseException | None]:
    """Every batch's size, the ids and the blobs' lengths read (the empty records have
    none), and the error the read ended in."""
    rk.set_num_threads(count)
    sizes: list[int] = []
    ids: list[int] = []
    lengths: list[int] = []
    try:
        for batch in rk.read_examples(path, INDEXED_SPEC, batch_size=batch_size):
            sizes.append(len(batch["id"]))
            ids.extend(batch["id"].tolist())
            lengths.extend(len(value) for value in batch["blob"].values)
    except rk.DataLossError as error:
        return sizes, ids, lengths, error
    return sizes, ids, lengths, None


@pytest.mark.parametrize("batch_size", [1, 1000, 8192, 1_000_000])
def test_every_thread_count_reads_every_record_once_in_order(
        every_size: tuple[Path, list[int], list[int]], batch_size: int) -> None:
    # Above two threads a mapped file's frame boundaries are verified ahead on every
    # thread, and each batch's thread frames its own records.
    path, ids, lengths = every_size
    counts = FRAMING_THREADS if batch_size > 1 else (1, 7)
    for count in counts:
        sizes, got_ids, got_lengths, error = _read_indexed(path, count, batch_size)
        assert error is None
        assert got_ids == ids, count
        assert got_lengths == [n for i, n in zip(ids, lengths) if i >= 0], count
        assert sizes == [min(batch_size, len(ids) - k) for k in range(0, len(ids), batch_size)], count
        # Unchecked payloads: the frames are verified ahead all the same.
        if batch_size > 1 and count in (1, 7):
            unchecked = rk.read_examples(path, INDEXED_SPEC, batch_size=batch_size, verify=False)
            assert [i for batch in unchecked for i in batch["id"].tolist()] == ids, count
    tables = []
    for count in FRAMING_THREADS:
        rk.set_num_threads(count)
        tables.append(rk.read_table(path, INDEXED_SPEC))
    assert tables[0].column("id").to_pylist() == ids
    assert [sum(map(len, row)) for row in tables[0].column("blob").to_pylist()] == lengths
    assert all(t.equals(tables[0]) for t in tables[1:])


def test_every_thread_count_reads_every_record_of_a_gzip_file_once_in_order(
        every_size: tuple[Path, list[int], list[int]], tmp_path: Path) -> None:
    # A stream: framed as it is inflated, batches copied out to be parsed on other threads.
    path, ids, _ = every_size
    gz = tmp_path / "every-size.tfrecord.gz"
    gz.write_bytes(gzip.compress(path.read_bytes(), compresslevel=1))
    for count in FRAMING_THREADS:
        sizes, got_ids, _, error = _read_indexed(gz, count, 1000)
        assert error is None and got_ids == ids, count
        assert sizes == [min(1000, len(ids) - k) for k in range(0, len(ids), 1000)], count


def test_damage_is_reported_as_one_thread_reports_it_for_every_thread_count(
        every_size: tuple[Path, list[int], list[int]], tmp_path: Path) -> None:
    # Damage at or after each range boundary of 2, 3, 7 and 16 threads: a payload that
    # fails its CRC, a length that fails its CRC, a file that ends inside a header.
    path, ids, _ = every_size
    data = path.read_bytes()
    lengths = [int.from_bytes(data[s:s + 8], "little") for s in _frame_starts(path)]
    starts = _frame_starts(path)
    boundaries = {len(data) // t * k for t in (2, 3, 7, 16) for k in range(1, t)}
    frames = sorted({next((i for i, s in enumerate(starts) if s >= b), len(starts) - 1) for b in boundaries})
    hows = ("payload", "length", "cut")
    cases = [(frame, hows[k % 3]) for k, frame in enumerate(frames[::2] + [len(starts) - 1])]
    # A large payload's CRC is checked apart from the parse (a record of 1 MB or more).
    cases.append((max(i for i, n in enumerate(lengths) if n >= 1 << 20), "payload"))
    for frame, how in cases:
        broken = bytearray(data)
        length = int.from_bytes(data[starts[frame]:starts[frame] + 8], "little")
        if how == "payload" and length == 0:
            how = "length"
        if how == "payload":
            broken[starts[frame] + 12 + length // 2] ^= 0x01  # its payload no longer matches its CRC
        elif how == "length":
            broken[starts[frame] + 3] ^= 0x10
        else:
            broken = broken[: starts[frame] + 5]
        bad = tmp_path / f"bad-{frame}-{how}.tfrecord"
        bad.write_bytes(bytes(broken))
        outcomes = set()
        for count in FRAMING_THREADS:
            sizes, got_ids, _, error = _read_indexed(bad, count, 1000)
            assert error is not None, (frame, how, count)
            assert got_ids == ids[:frame], (frame, how, count)  # every intact record first, none after
            outcomes.add((error.offset, error.record_index, error.kind, str(error)))
        assert len(outcomes) == 1, (frame, how, outcomes)
        assert next(iter(outcomes))[1] == frame


def test_ranges_read_on_every_thread_count_give_each_record_once(every_size: tuple[Path, list[int], list[int]]) -> None:
    # A range starts mid-file and stops at a record count: the frames verified ahead of it
    # run past its end, and must not be read.
    from recordkit.tables import TableScan

    path, ids, _ = every_size
    scan = TableScan(path, INDEXED_SPEC, batch_size=500)  # several batches a range
    ranges = scan.ranges(5)
    assert len(ranges) >= 3  # cut where the count remembered an offset, every 1024 records
    for count in FRAMING_THREADS:
        rk.set_num_threads(count)
        got = [i for b in scan.batches(ranges) for i in b.column("id").to_pylist()]
        assert got == ids, count
