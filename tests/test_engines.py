"""recordkit._engines and TableScan's ranges: what the engine adapters share."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import recordkit as rk
from recordkit._engines import StagedWrite, group_ranges
from recordkit.errors import RecordkitError
from recordkit.tables import RecordRange, TableScan
from conftest import uneven_shards


@pytest.mark.parametrize("pieces", [1, 2, 3, 7, 40])
def test_ranges_cover_every_record_once(tmp_path: Path, pieces: int) -> None:
    total = uneven_shards(tmp_path, sizes=(0, 1, 5000, 17000))
    rk.write_examples(tmp_path / "part-00009.tfrecord.gz", {"id": np.arange(total, total + 10)}, compression="gzip")
    scan = TableScan(tmp_path, {"id": rk.FixedLenFeature([], "int64")})
    ranges = scan.ranges(pieces)
    assert all(r.start % 1024 == 0 for r in ranges)  # cut where the count remembered an offset
    ids = np.concatenate([b.column("id").to_numpy() for b in scan.batches(ranges)])
    assert ids.tolist() == list(range(total + 10))
    for group_count in (1, 2, 5):
        groups = group_ranges(ranges, group_count)
        assert len(groups) <= group_count and [r for g in groups for r in g] == ranges


def test_a_range_past_the_end_of_a_rewritten_file_is_an_error(tmp_path: Path) -> None:
    uneven_shards(tmp_path, sizes=(3000,))
    scan = TableScan(tmp_path)
    (first, *_), path = scan.ranges(3), tmp_path / "part-00000.tfrecord"
    rk.write_examples(path, {"id": np.arange(10)})
    with pytest.raises(RecordkitError, match="before the 1024 counted"):
        list(scan.batches([RecordRange(str(path), 0, 1024)]))
    assert first.stop == 1024


def test_a_staged_write_commits_all_or_nothing(tmp_path: Path) -> None:
    staged = StagedWrite(str(tmp_path / "out"), "gzip", "w1")
    staged.start()
    table = pa.table({"x": [1, 2, 3]})
    written = staged.write_task([table], 0) + staged.write_task([table.slice(0, 0)], 1) + staged.write_task([table], 2)
    assert [os.path.basename(final) for _, final, _ in written] == ["w1_000000.tfrecord.gz", "w1_000002.tfrecord.gz"]
    staged.commit(written)
    assert sorted(os.listdir(tmp_path / "out")) == ["w1_000000.tfrecord.gz", "w1_000002.tfrecord.gz"]
    assert rk.read_table(tmp_path / "out").column("x").to_pylist() == [1, 2, 3, 1, 2, 3]

    aborted = StagedWrite(str(tmp_path / "out"), None, "w2")
    aborted.start()
    early = aborted.write_task([table], 0)
    aborted.abort()
    with pytest.raises(RecordkitError, match="aborted"):  # a task still running when the job was aborted
        aborted.write_task([table], 1)
    with pytest.raises(RecordkitError, match="aborted"):
        aborted.commit(early)
    assert sorted(os.listdir(tmp_path / "out")) == ["w1_000000.tfrecord.gz", "w1_000002.tfrecord.gz"]


def test_a_task_finishing_after_the_abort_removes_its_own_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    staged = StagedWrite(str(tmp_path), None, "late")
    staged.start()
    import recordkit.writing as writing

    write = writing.write_examples

    def abort_meanwhile(*args: object, **kwargs: object) -> list[str]:
        out = write(*args, **kwargs)  # type: ignore[arg-type]
        staged.abort()  # the driver aborts after the file landed, before the task looks
        return out

    monkeypatch.setattr(writing, "write_examples", abort_meanwhile)
    with pytest.raises(RecordkitError, match="aborted while this task ran"):
        staged.write_task([pa.table({"x": [1]})], 0)
    assert os.listdir(tmp_path) == []


def test_an_abort_waits_for_the_tasks_running_on_other_threads(tmp_path: Path) -> None:
    # Dask's threads raise the first failure while other tasks run on: the
    # abort returns once they have ended, with nothing of theirs left behind.
    import threading

    staged = StagedWrite(str(tmp_path), None, "threads")
    staged.start()
    release, aborted = threading.Event(), threading.Event()

    def tables():
        yield pa.table({"x": [1]})
        release.wait(10)
        yield pa.table({"x": [2]})

    errors: list[BaseException] = []

    def task() -> None:
        try:
            staged.write_task(tables(), 0)
        except RecordkitError as error:
            errors.append(error)

    def abort() -> None:
        staged.abort()
        aborted.set()

    runner = threading.Thread(target=task)
    runner.start()
    while not os.listdir(staged.staging) or len(os.listdir(staged.staging)) < 2:
        threading.Event().wait(0.01)  # the task's file is open beside the marker
    aborter = threading.Thread(target=abort)
    aborter.start()
    assert not aborted.wait(0.3)  # still waiting for the task
    release.set()
    runner.join(10)
    aborter.join(10)
    assert aborted.is_set() and os.listdir(tmp_path) == []
    assert len(errors) == 1 and "aborted" in str(errors[0])
