"""Ray Data reads and writes TFRecord (and OFRecord) through recordkit, without TensorFlow.

>>> import recordkit.ray
>>> ds = recordkit.ray.read_tfrecords("data/train-*.tfrecord")  # doctest: +SKIP
>>> recordkit.ray.write_tfrecords(ds, "out/")  # doctest: +SKIP

Every record is CRC-checked and parsed in Rust into Arrow blocks of one schema,
fixed on the driver (the spec, or the schema inferred from the first records)
and the same in every block. Read tasks split by file and by record range:
a local uncompressed file is counted from its index file or a scan of its
headers and cut into ranges, so a few large files still spread over many
tasks; compressed and remote files are read whole. Writes are all or nothing:
each task writes a hidden staging file, renamed into place when every task
has succeeded, and removed when any fails. Needs ``pip install recordkit[ray]``.
"""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Literal, Mapping, Sequence

try:
    import ray.data
    from ray.data.block import BlockMetadata
    from ray.data.datasource import ReadTask
except ImportError:  # pragma: no cover - the message is the point
    raise ImportError("recordkit.ray needs Ray Data: pip install 'recordkit[ray]'") from None

from recordkit._engines import StagedWrite, group_ranges
from recordkit.tables import RecordRange, Strings, TableScan, local_size

if TYPE_CHECKING:
    import pyarrow as pa

    from recordkit._sources import PathLike
    from recordkit.features import FeatureSpec

__all__ = ["read_tfrecords", "write_tfrecords", "TFRecordDatasource", "TFRecordDatasink"]


class TFRecordDatasource(ray.data.Datasource):
    """A ``ray.data.Datasource`` over TFRecord or OFRecord files: a ``recordkit.tables.TableScan``
    planned on the driver, read by range in the tasks; see ``read_tfrecords``."""

    def __init__(self, scan: TableScan, *, include_paths: bool = False, min_bytes_per_task: int = 32 << 20) -> None:
        self._scan, self._include_paths, self._min_bytes = scan, include_paths, min_bytes_per_task

    def get_name(self) -> str:
        """The name Ray shows for the read."""
        return "recordkit.TFRecord" if self._scan.format == "tfrecord" else "recordkit.OFRecord"

    def estimate_inmemory_data_size(self) -> int | None:
        """The files' size on disk (None where one is remote)."""
        sizes = [local_size(path) for path in self._scan.files]
        return None if None in sizes else sum(sizes)  # type: ignore[arg-type]

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        """About ``parallelism`` tasks, each reading consecutive record ranges."""
        scan, include_paths = self._scan, self._include_paths
        schema = _with_path(scan.schema) if include_paths else scan.schema
        tasks = []
        pieces = scan.ranges(max(1, parallelism), min_bytes=self._min_bytes)
        for group in group_ranges(pieces, max(1, parallelism)):
            counts = [piece.records for piece in group]
            metadata = BlockMetadata(
                num_rows=None if None in counts else sum(counts),  # type: ignore[arg-type]
                size_bytes=sum(piece.size or 0 for piece in group) or None,
                exec_stats=None, input_files=tuple(dict.fromkeys(piece.path for piece in group)),
            )
            tasks.append(ReadTask(_ReadFn(scan, group, include_paths), metadata, schema=schema,
                                  per_task_row_limit=per_task_row_limit))
        return tasks


class _ReadFn:
    """A read task's work: its ranges as Arrow tables, one per batch (picklable)."""

    def __init__(self, scan: TableScan, ranges: list[RecordRange], include_paths: bool) -> None:
        self.scan, self.ranges, self.include_paths = scan, ranges, include_paths

    def __call__(self) -> Iterator["pa.Table"]:
        import pyarrow as pa

        schema = _with_path(self.scan.schema) if self.include_paths else self.scan.schema
        empty = True
        for piece in self.ranges:
            for batch in self.scan.batches([piece]):
                table = pa.Table.from_batches([batch], self.scan.schema)
                if self.include_paths:
                    table = table.append_column("path", pa.repeat(pa.scalar(piece.path, pa.string()), len(table)))
                empty = False
                yield table
        if empty:  # an empty file: Ray would make a block without columns
            yield schema.empty_table()


def _with_path(schema: "pa.Schema") -> "pa.Schema":
    import pyarrow as pa

    return schema.append(pa.field("path", pa.string()))


def read_tfrecords(
    paths: "PathLike | Sequence[PathLike]",
    features: Mapping[str, "FeatureSpec"] | None = None,
    *,
    sequence_features: Mapping[str, "FeatureSpec"] | None = None,
    columns: Sequence[str] | None = None,
    compression: str | None = "auto",
    format: Literal["auto", "tfrecord", "ofrecord"] = "auto",
    strings: Strings = "binary",
    batch_size: int = 65536,
    infer_from: int = 1000,
    include_paths: bool = False,
    verify: bool = True,
    on_error: Literal["raise", "skip"] = "raise",
    min_bytes_per_task: int = 32 << 20,
    override_num_blocks: int | None = None,
    ray_remote_args: dict[str, Any] | None = None,
) -> "ray.data.Dataset":
    """A ``ray.data.Dataset`` of the records of ``paths``, parsed by recordkit.

    Arguments as for ``recordkit.read_batches``: a spec (``features``,
    ``sequence_features``) or the schema inferred from the first
    ``infer_from`` records, fixed here on the driver and the same in every
    block; the type table of the README holds. ``include_paths`` adds a
    ``path`` column. Local uncompressed files are cut into record ranges of
    about ``min_bytes_per_task`` bytes or more, so that there are about as many
    read tasks as Ray asks for (``override_num_blocks`` to choose) without
    tasks too small to pay for themselves; compressed and remote files are
    read whole, one task each at most.

    A damaged record fails the job with ``recordkit.DataLossError``
    naming the file and its offset, as in every recordkit reader; with
    ``on_error="skip"``, damaged stretches are skipped with a
    ``recordkit.DataLossWarning`` each (in the worker's log), and files
    are read whole.
    """
    scan = TableScan(paths, features, sequence_features=sequence_features, batch_size=batch_size, columns=columns,
                     compression=compression, format=format, verify=verify, strings=strings, infer_from=infer_from,
                     on_error=on_error)
    source = TFRecordDatasource(scan, include_paths=include_paths, min_bytes_per_task=min_bytes_per_task)
    kwargs: dict[str, Any] = {}
    if override_num_blocks is not None:
        kwargs["override_num_blocks"] = override_num_blocks
    if ray_remote_args is not None:
        kwargs["ray_remote_args"] = ray_remote_args
    return ray.data.read_datasource(source, **kwargs)


class TFRecordDatasink(ray.data.Datasink):
    """A ``ray.data.Datasink`` writing one ``tf.train.Example`` per row, all or
    nothing; see ``write_tfrecords``."""

    def __init__(self, path: "str | os.PathLike[str]", *, compression: str | None = None) -> None:
        self.staged = StagedWrite(os.fspath(path), compression, f"ray-{uuid.uuid4().hex[:12]}")

    def get_name(self) -> str:
        """The name Ray shows for the write."""
        return "recordkit.TFRecord"

    def on_write_start(self, schema: Any = None) -> None:
        """Makes the folder (on the driver)."""
        self.staged.start()

    def write(self, blocks: Iterable[Any], ctx: Any) -> list[tuple[str, str, int]]:
        """One task's blocks into its staging file: ``[(staging file, final name, rows)]``."""
        return self.staged.write_task(_tables(blocks), ctx.task_idx)

    def on_write_complete(self, write_result: Any) -> None:
        """Every task succeeded: the staging files are renamed into place."""
        self.staged.commit([entry for task in write_result.write_returns for entry in task])

    def on_write_failed(self, error: Exception) -> None:
        """A task failed: every staging file is removed."""
        self.staged.abort()


def _tables(blocks: Iterable[Any]) -> Iterator["pa.Table"]:
    import pyarrow as pa

    for block in blocks:
        yield block if isinstance(block, pa.Table) else pa.Table.from_pandas(block, preserve_index=False)


def write_tfrecords(dataset: "ray.data.Dataset", path: "str | os.PathLike[str]", *,
                    compression: str | None = None, concurrency: int | None = None) -> list[str]:
    """Writes ``dataset`` under the folder ``path`` as TFRecord files of one
    ``tf.train.Example`` per row, one file per write task, named
    ``<write id>_<task>.tfrecord`` (``.tfrecord.gz`` with ``compression="gzip"``),
    so that ``path/*.tfrecord`` finds them. Types as for
    ``recordkit.write_examples``; a null is a missing feature.

    All or nothing: tasks write hidden staging files, renamed into place once
    every task has succeeded and removed if any fails. Files already in the
    folder are left as they are. Returns the paths written.
    """
    sink = TFRecordDatasink(path, compression=compression)
    dataset.write_datasink(sink, **({} if concurrency is None else {"concurrency": concurrency}))
    return sink.staged.committed
