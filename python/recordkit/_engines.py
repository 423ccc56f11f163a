"""What the Ray, Spark and Dask adapters share: grouping record ranges into
tasks, and all-or-nothing writes of one staged file per task."""

from __future__ import annotations

import collections
import os
import threading
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

from recordkit._sources import replace_file
from recordkit.errors import RecordkitError
from recordkit.tables import RecordRange

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["group_ranges", "StagedWrite", "record_suffix"]


def group_ranges(pieces: Sequence[RecordRange], tasks: int) -> list[list[RecordRange]]:
    """Consecutive ``pieces`` in at most ``tasks`` groups of near-equal size
    (bytes where known, else records), every piece in exactly one group."""
    if len(pieces) <= tasks:
        return [[piece] for piece in pieces]
    weights = [piece.size or piece.records or 1 for piece in pieces]
    total = sum(weights)
    groups: dict[int, list[RecordRange]] = {}
    done = 0
    for piece, weight in zip(pieces, weights):
        # Each piece goes to the group its middle falls in.
        groups.setdefault(min(tasks - 1, int((done + weight / 2) * tasks / total)), []).append(piece)
        done += weight
    return list(groups.values())


def record_suffix(compression: str | None) -> str:
    """The file suffix for ``compression``, the one recordkit's readers and
    TensorFlow users' globs expect."""
    suffixes = {None: ".tfrecord", "none": ".tfrecord", "gzip": ".tfrecord.gz", "zlib": ".tfrecord.zz"}
    if compression not in suffixes:
        raise ValueError(f'compression must be None, "gzip" or "zlib", not {compression!r}')
    return suffixes[compression]


class StagedWrite:
    """An all-or-nothing write of one file per task under the folder ``path``.

    Tasks write into a hidden staging folder (``.recordkit-<write id>``, which
    no reader lists); the driver renames the files into place once every task
    has succeeded (``commit``), or removes the folder when any failed
    (``abort``). Files named ``<write id>_<task>.tfrecord`` never collide
    with older writes, which are left as they are. On a cluster, ``path`` must
    be a filesystem every node and the driver share.

    A task still running when the job is aborted (engines do not always wait
    for every task) must not leave its file behind: the staging folder holds a
    ``live`` marker, which abort removes before it removes the folder, and a
    task that finds no marker after writing removes its own file. Whichever
    comes last sees the other's work. Tasks running on threads of the process
    that aborts (Dask's threads raise the first failure while the others run
    on) are waited for, so that nothing is left when abort returns.
    """

    def __init__(self, path: str, compression: str | None, write_id: str) -> None:
        self.path, self.compression, self.write_id = path, compression, write_id
        self.suffix = record_suffix(compression)
        self.staging = os.path.join(path, f".recordkit-{write_id}")
        self.committed: list[str] = []

    @property
    def _live(self) -> str:
        return os.path.join(self.staging, "live")

    def final_name(self, task: int) -> str:
        """Where task ``task``'s file lands."""
        return os.path.join(self.path, f"{self.write_id}_{task:06d}{self.suffix}")

    def start(self) -> None:
        """Makes the folder and the staging folder, with its ``live`` marker (on the driver)."""
        os.makedirs(self.staging, exist_ok=True)
        open(self._live, "wb").close()

    def write_task(self, tables: Iterable["pa.Table"], task: int, attempt: int = 0) -> list[tuple[str, str, int]]:
        """Writes a task's rows into its staging file: ``[(staging file, final name,
        rows)]``, empty when the task had no rows (no file is written then).
        Attempts of one task (an engine's retries) stage apart."""
        running = (self.write_id, threading.get_ident())
        with _tasks_changed:
            _running_tasks[running] += 1
        try:
            return self._write_task(tables, task, attempt)
        finally:
            with _tasks_changed:
                _running_tasks[running] -= 1
                if not _running_tasks[running]:
                    del _running_tasks[running]
                _tasks_changed.notify_all()

    def _write_task(self, tables: Iterable["pa.Table"], task: int, attempt: int) -> list[tuple[str, str, int]]:
        import pyarrow as pa

        from recordkit.writing import write_examples

        tables = iter(tables)
        first = next((t for t in tables if t.num_rows), None)
        if first is None:
            return []
        if not os.path.exists(self._live):
            raise RecordkitError(f"the write to {self.path} was aborted or finished before this task started")
        schema = first.schema
        rows = 0

        def batches() -> Iterator[pa.RecordBatch]:
            nonlocal rows
            for table in _chain(first, tables):
                if table.schema != schema:
                    try:
                        table = table.select(schema.names).cast(schema)
                    except (KeyError, ValueError, pa.ArrowInvalid) as e:
                        raise ValueError(f"the blocks of one write task differ in schema: {schema} and "
                                         f"{table.schema} ({e})") from None
                rows += table.num_rows
                yield from table.to_batches()

        staging = os.path.join(self.staging, f"{task:06d}-{attempt}")
        stream = pa.RecordBatchReader.from_batches(schema, batches())
        write_examples(staging, stream, compression=None if self.compression == "none" else self.compression)
        if not os.path.exists(self._live):  # aborted meanwhile: abort may have listed the folder before this file
            _remove(staging)
            _remove_folder(self.staging, retries=0)
            raise RecordkitError(f"the write to {self.path} was aborted while this task ran")
        return [(staging, self.final_name(task), rows)]

    def commit(self, written: Sequence[tuple[str, str, int]]) -> None:
        """Renames every staging file into place; if one rename fails, the files
        already renamed are removed again and the error raised. The staging
        folder goes either way."""
        if not written and not os.path.exists(self.staging):
            return  # no rows at all, and the engine never started the write
        if not os.path.exists(self._live):
            raise RecordkitError(f"the write to {self.path} was aborted: nothing to commit")
        done: list[str] = []
        try:
            for staging, final, _ in sorted(written, key=lambda entry: entry[1]):
                replace_file(staging, final)
                done.append(final)
        except BaseException:
            for final in done:
                _remove(final)
            raise
        finally:
            self.abort()  # the marker, and any attempt's file the engine did not keep
        self.committed = done

    def abort(self) -> None:
        """Removes the staging folder and everything in it, once the tasks of
        this write running on other threads of this process have ended."""
        _remove(self._live)
        here = threading.get_ident()
        with _tasks_changed:
            _tasks_changed.wait_for(lambda: not any(write == self.write_id and thread != here
                                                    for write, thread in _running_tasks))
        _remove_folder(self.staging)


# Tasks running in this process, by (write id, thread), for abort to wait on.
_running_tasks: collections.Counter[tuple[str, int]] = collections.Counter()
_tasks_changed = threading.Condition()


def _remove_folder(folder: str, retries: int = 20) -> None:
    """Removes ``folder`` and its files; a task's file landing in it meanwhile
    makes the last step fail (not empty), so it is tried again."""
    import shutil
    import time

    for attempt in range(retries + 1):
        try:
            shutil.rmtree(folder)
            return
        except FileNotFoundError:
            return
        except OSError:
            if attempt == retries:
                return  # a task's file still arriving: that task removes it (no marker)
            time.sleep(0.05)


def _chain(first: "pa.Table", rest: Iterator["pa.Table"]) -> Iterator["pa.Table"]:
    yield first
    for table in rest:
        if table.num_rows:
            yield table


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
