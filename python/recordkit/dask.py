"""Dask DataFrames from and to TFRecord (and OFRecord) files through recordkit, without TensorFlow.

>>> import recordkit.dask
>>> ddf = recordkit.dask.read_tfrecords("data/train-*.tfrecord")  # doctest: +SKIP
>>> recordkit.dask.to_tfrecords(ddf, "out/")  # doctest: +SKIP

One partition per file or record range (``dd.from_map``), parsed in Rust
through the Arrow path with one schema fixed on the client. Writes are all or
nothing, one file per partition. Needs ``pip install recordkit[dask]``.
"""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

try:
    import dask
    import dask.dataframe as dd
except ImportError:  # pragma: no cover - the message is the point
    raise ImportError("recordkit.dask needs Dask DataFrames: pip install 'recordkit[dask]'") from None

from recordkit._engines import StagedWrite
from recordkit.tables import RecordRange, Strings, TableScan

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from recordkit._sources import PathLike
    from recordkit.features import FeatureSpec

__all__ = ["read_tfrecords", "to_tfrecords"]


class _ReadPartition:
    """One partition: a record range as a pandas DataFrame (picklable)."""

    def __init__(self, scan: TableScan) -> None:
        self.scan = scan

    def __call__(self, piece: RecordRange, columns: Sequence[str] | None = None) -> "pd.DataFrame":
        import pyarrow as pa

        table = pa.Table.from_batches(list(self.scan.batches([piece])), self.scan.schema)
        if columns is not None:
            table = table.select(list(columns))
        return _to_pandas(table)


def _to_pandas(table: "pa.Table") -> "pd.DataFrame":
    """Arrow-backed pandas columns: lossless for lists and byte strings, which
    Dask would otherwise turn into ``str`` (its ``convert-string`` setting)."""
    import pandas as pd

    return table.to_pandas(types_mapper=pd.ArrowDtype)


def read_tfrecords(
    source: "PathLike | Sequence[PathLike]",
    features: Mapping[str, "FeatureSpec"] | None = None,
    *,
    sequence_features: Mapping[str, "FeatureSpec"] | None = None,
    columns: Sequence[str] | None = None,
    compression: str | None = "auto",
    format: Literal["auto", "tfrecord", "ofrecord"] = "auto",
    strings: Strings = "binary",
    infer_from: int = 1000,
    npartitions: int | None = None,
    verify: bool = True,
    on_error: Literal["raise", "skip"] = "raise",
) -> "dd.DataFrame":
    """A Dask DataFrame of the records of ``source``, one partition per file,
    or about ``npartitions`` partitions, local uncompressed files cut into
    record ranges (compressed and remote files stay whole). Arguments as for
    ``recordkit.read_table``; the schema is fixed here, the same in every
    partition. Each partition is its range's ``read_table(...)`` as a pandas
    DataFrame of Arrow-backed columns (``pd.ArrowDtype``): lists and byte
    strings stay what they are. A damaged record fails the computation with
    ``recordkit.DataLossError``, unless ``on_error="skip"`` (then files
    are read whole, and each skipped stretch warns with ``recordkit.DataLossWarning``).
    """
    scan = TableScan(source, features, sequence_features=sequence_features, columns=columns,
                     compression=compression, format=format, verify=verify, strings=strings, infer_from=infer_from,
                     on_error=on_error)
    pieces = scan.whole_files() if npartitions is None else scan.ranges(npartitions)
    if not pieces:  # only empty files
        pieces = [RecordRange(scan.files[0])]
    meta = _to_pandas(scan.schema.empty_table())
    return dd.from_map(_ReadPartition(scan), pieces, meta=meta, label="recordkit-read-tfrecords",
                       enforce_metadata=False)


def _write_partition(part: "pd.DataFrame", staged: StagedWrite, index: int) -> list[tuple[str, str, int]]:
    import pyarrow as pa

    return staged.write_task([pa.Table.from_pandas(part, preserve_index=False)], index)


def to_tfrecords(ddf: "dd.DataFrame", path: "str | os.PathLike[str]", *, compression: str | None = None,
                 scheduler: Any = None) -> list[str]:
    """Writes one TFRecord file of ``tf.train.Example`` rows per partition under
    the folder ``path``, named ``<write id>_<partition>.tfrecord``
    (``.tfrecord.gz`` with ``compression="gzip"``); an empty partition writes
    no file. Types as for
    ``recordkit.write_examples``; a null is a missing feature.

    All or nothing: partitions are written to hidden staging files, renamed
    into place once all have succeeded, removed if any fails. Returns the
    paths written, in partition order.
    """
    staged = StagedWrite(os.fspath(path), compression, f"dask-{uuid.uuid4().hex[:12]}")
    staged.start()
    tasks = [dask.delayed(_write_partition)(part, staged, i) for i, part in enumerate(ddf.to_delayed())]
    try:
        results = dask.compute(*tasks, scheduler=scheduler)
    except BaseException:
        staged.abort()
        raise
    staged.commit([entry for result in results for entry in result])
    return staged.committed
