"""Spark 4 reads and writes TFRecord (and OFRecord) through recordkit: a Python
data source, no TensorFlow and no JVM connector jar.

>>> import recordkit.spark
>>> spark.dataSource.register(recordkit.spark.TFRecordDataSource)  # doctest: +SKIP
>>> df = spark.read.format("tfrecord").load("data/train-*.tfrecord")  # doctest: +SKIP
>>> df.write.format("tfrecord").mode("overwrite").save("out/")  # doctest: +SKIP

Reading: the schema is inferred from the first records (or taken from a
recordkit spec bound with ``data_source``, or narrowed by a Spark schema
given with ``.schema(...)``), fixed on the driver; partitions are files and
record ranges of local uncompressed files; each yields Arrow record batches.
Options: ``compression``, ``format`` (``"tfrecord"``/``"ofrecord"``),
``strings`` (``"binary"``/``"utf8"``), ``partitions`` (about how many),
``infer_from``, ``on_error`` (``"raise"``, or ``"skip"`` damaged stretches).
Writing goes through the Arrow writer, one staged file per
task, renamed into place by the driver's commit (``overwrite`` then removes the
older record files) and removed by its abort. Needs ``pip install recordkit[spark]``
and Java 17 or newer.
"""

from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Mapping, Sequence

try:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        InputPartition,
        WriterCommitMessage,
    )
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
except ImportError:  # pragma: no cover - the message is the point
    raise ImportError("recordkit.spark needs PySpark 4: pip install 'recordkit[spark]'") from None

from recordkit._engines import StagedWrite, group_ranges
from recordkit.discovery import is_listed_record_file
from recordkit.tables import RecordRange, TableScan

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from recordkit.features import FeatureSpec

__all__ = ["TFRecordDataSource", "data_source", "use_drivers_python"]


@dataclass
class _Partition(InputPartition):
    """Consecutive record ranges, read by one Spark task."""

    ranges: list[RecordRange]


class TFRecordDataSource(DataSource):
    """``spark.read.format("tfrecord")`` and ``df.write.format("tfrecord")``; see the module."""

    features: Mapping[str, "FeatureSpec"] | None = None
    sequence_features: Mapping[str, "FeatureSpec"] | None = None

    _format_name = "tfrecord"

    @classmethod
    def name(cls) -> str:
        """The format name: ``tfrecord`` (or ``data_source``'s ``name``).

        ``spark.dataSource.register`` asks for it on the driver, just before it
        fixes the Python its workers run: see ``use_drivers_python``.
        """
        use_drivers_python()
        return cls._format_name

    def _scan(self) -> TableScan:
        options = self.options
        if "path" not in options:
            raise ValueError("say which files to read: spark.read.format('tfrecord').load(path)")
        return TableScan(options["path"], self.features, sequence_features=self.sequence_features,
                         compression=options.get("compression", "auto"), format=options.get("format", "auto"),
                         strings=options.get("strings", "binary"), infer_from=int(options.get("infer_from", 1000)),
                         on_error=options.get("on_error", "raise"))

    def schema(self) -> "StructType":
        """The Spark schema of the records: the spec's, or the one inferred from the first records."""
        return from_arrow_schema(self._scan().schema)

    def reader(self, schema: "StructType") -> "DataSourceReader":
        """Reads the columns of ``schema``, cast to its types."""
        return _Reader(self._scan(), schema, int(self.options.get("partitions", os.cpu_count() or 1)))

    def writer(self, schema: "StructType", overwrite: bool) -> "DataSourceArrowWriter":
        """Writes one ``tf.train.Example`` per row, one file per task, all or nothing."""
        if "path" not in self.options:
            raise ValueError("say where to write: df.write.format('tfrecord').save(path)")
        compression = self.options.get("compression")
        return _Writer(StagedWrite(self.options["path"], None if compression == "none" else compression,
                                   f"spark-{uuid.uuid4().hex[:12]}"), overwrite)


def data_source(features: Mapping[str, "FeatureSpec"] | None = None, *,
                sequence_features: Mapping[str, "FeatureSpec"] | None = None,
                name: str = "tfrecord") -> type[TFRecordDataSource]:
    """A ``TFRecordDataSource`` bound to a recordkit spec (``features``,
    ``sequence_features``, as for ``recordkit.read_table``), registered
    under ``name``: ``spark.dataSource.register(recordkit.spark.data_source(spec))``."""
    return type("TFRecordDataSource", (TFRecordDataSource,), {
        "features": features, "sequence_features": sequence_features,
        "_format_name": name, "__module__": __name__,
    })


def use_drivers_python() -> None:
    """Makes a local Spark's Python workers run this process's Python, when no one chose theirs.

    Spark starts its Python workers (and the ones that plan a Python data
    source) with ``PYSPARK_PYTHON`` or ``spark.pyspark.python``, else the first
    ``python3`` on ``PATH``: for a program run with a virtual environment's
    Python that is not on ``PATH``, a Python without recordkit, whose workers
    then fail with ``No module named 'recordkit'``. With a local master
    (``local[*]``), where the workers run on this machine, the active context
    is set to this Python. A cluster's workers run elsewhere: there, set
    ``spark.pyspark.python`` (or ``PYSPARK_PYTHON``) to a Python with recordkit.
    """
    try:
        from pyspark import SparkContext
    except ImportError:  # pragma: no cover - the module itself needs PySpark
        return
    context = SparkContext._active_spark_context
    if context is None or not str(context.master).startswith("local"):
        return
    if os.environ.get("PYSPARK_PYTHON") or context.getConf().get("spark.pyspark.python"):
        return  # chosen by the user
    context.pythonExec = sys.executable


class _Reader(DataSourceReader):
    def __init__(self, scan: TableScan, schema: "StructType", pieces: int) -> None:
        self.scan, self.pieces = scan, pieces
        self.arrow = to_arrow_schema(schema)
        missing = [name for name in self.arrow.names if name not in scan.schema.names]
        if missing:
            raise ValueError(f"columns {missing} of the given schema are not in the records' "
                             f"({', '.join(scan.schema.names)})")

    def partitions(self) -> Sequence[_Partition]:
        pieces = self.scan.ranges(self.pieces, min_bytes=1 << 18)
        return [_Partition(group) for group in group_ranges(pieces, self.pieces)] or [
            _Partition([])]

    def read(self, partition: _Partition) -> Iterator["pa.RecordBatch"]:
        for batch in self.scan.batches(partition.ranges):
            yield batch.select(self.arrow.names).cast(self.arrow)


@dataclass
class _Written(WriterCommitMessage):
    files: list[tuple[str, str, int]]


class _Writer(DataSourceArrowWriter):
    def __init__(self, staged: StagedWrite, overwrite: bool) -> None:
        self.staged, self.overwrite = staged, overwrite
        staged.start()

    def write(self, iterator: Iterator["pa.RecordBatch"]) -> _Written:
        import pyarrow as pa
        from pyspark import TaskContext

        context = TaskContext.get()
        task, attempt = (0, 0) if context is None else (context.partitionId(), context.attemptNumber())
        return _Written(self.staged.write_task((pa.Table.from_batches([b]) for b in iterator), task, attempt))

    def commit(self, messages: list[_Written | None]) -> None:
        older = _record_files(self.staged.path) if self.overwrite else []
        self.staged.commit([entry for message in messages if message is not None for entry in message.files])
        for path in older:
            os.remove(path)

    def abort(self, messages: list[_Written | None]) -> None:
        self.staged.abort()


def _record_files(folder: str) -> list[str]:
    """The files a reader of ``folder`` would read (hidden files, markers and files of other kinds aside)."""
    return [os.path.join(folder, name) for name in os.listdir(folder)
            if is_listed_record_file(name) and os.path.isfile(os.path.join(folder, name))]
