"""Converting between record files and tables: TFRecord, OFRecord, CSV, Parquet,
JSON lines, NumPy ``.npz`` and folders of images.

Everything streams in chunks of rows, so memory does not grow with the input
(except for ``.npz`` output, which NumPy writes in one go). Outputs appear
under their names only when complete.

>>> rk.convert("table.parquet", "out/train.tfrecord", shards=4)  # doctest: +SKIP
['out/train-00000-of-00004.tfrecord', ...]
"""

from __future__ import annotations

import json
import os
from typing import Iterator, Sequence


from recordkit._sources import (AtomicTarget, PathLike, check_targets)
from recordkit.writing import write_behind
from recordkit.discovery import suffix_compression
from recordkit.options import writer_options

from recordkit.conversion_sinks import (NpzSink, RecordSink, Sink, TableSink)
from recordkit.conversion_sources import (CHUNK_BYTES, COMPRESSION_SUFFIXES, FORMATS, FORMAT_SUFFIXES, Chunk,
                                          ConversionProgress, ImageFolderSource, ParquetSource, RecordSource,
                                          detect_format, open_source, parse_size, record_batches)

__all__ = ["convert", "detect_format", "parse_size", "FORMATS"]


# --- the conversion ------------------------------------------------------------------------


def _label_map_path(destination: str) -> str:
    """``out/train.tfrecord`` -> ``out/train.labels.json``."""
    base = destination.rstrip("/\\")
    for suffix in (*COMPRESSION_SUFFIXES, *FORMAT_SUFFIXES):
        if base.lower().endswith(suffix):
            base = base[: -len(suffix)]
    return base + ".labels.json"


def convert(
    source: PathLike | Sequence[PathLike],
    destination: PathLike,
    *,
    shards: int | None = None,
    shard_size: int | str | None = None,
    output_compression: str | None = None,
    source_compression: str | None = "auto",
    features: Sequence[str] | None = None,
    source_format: str | None = None,
    destination_format: str | None = None,
    progress: bool | None = None,
    fsync: bool = False,
    compression_level: int | None = None,
) -> list[str]:
    """Converts ``source`` into ``destination`` and returns the paths written.

    Formats come from the suffixes (``.tfrecord[.gz]``, ``.parquet``,
    ``.csv``, ``.jsonl``, ``.npz``), or for inputs from the layout (a
    ``part-NNNNN`` folder is OFRecord, a folder of class subfolders is an
    image folder), or from ``source_format`` / ``destination_format``.

    Args:
        shards: Write this many TFRecord files, named as ``shard_names``
            names them (``out/train-00000-of-00003.tfrecord`` ...), holding
            consecutive rows; or this many OFRecord parts.
        shard_size: Start a new shard after this many bytes (``"100MB"``).
            Without ``shards`` or ``shard_size``, outputs past ~100 MB are
            sharded by that rule and smaller ones stay one file.
        output_compression: ``"gzip"``, ``"zlib"`` or ``"none"`` for TFRecord
            output; None (default) follows the destination's suffix (``.gz``, ``.zz``).
        source_compression: Of TFRecord sources, as for ``TFRecordReader``:
            ``"auto"`` (default: from the content), ``"none"``, ``"gzip"``, ``"zlib"``.
        features: Keep only these features (columns), in this order.
        progress: Report progress on stderr (default: when it is a terminal).
        fsync: Flush every output file (and a shard set's manifest) and its
            folder to the disk before returning.
        compression_level: For gzip and zlib output: 0 (stored, fastest) to
            9 (smallest); default 6.

    An image folder (``root/<class>/<image>``) becomes the TensorFlow
    tutorial's features: ``image_raw`` (the encoded bytes), ``height``,
    ``width`` and ``depth`` read from the image header, and ``label`` (the
    class's index in sorted order); the label map is written beside the
    output as ``<name>.labels.json``. Every output appears only when complete.
    """
    if shards is not None and shard_size is not None:
        raise ValueError("give shards or shard_size, not both")
    if shards is not None and shards < 1:
        raise ValueError(f"shards must be at least 1, not {shards}")
    size = parse_size(shard_size) if isinstance(shard_size, str) else shard_size
    first = source if isinstance(source, (str, os.PathLike)) else list(source)[0]
    in_format = source_format or detect_format(os.fspath(first))
    destination = os.fspath(destination)
    out_format = destination_format or detect_format(destination, output=True)
    for fmt in (in_format, out_format):
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    if out_format == "images":
        raise ValueError("writing image folders is not supported; images go into records, not out of them")
    if out_format != "ofrecord":  # an OFRecord output is a folder of parts
        check_targets([destination])
    compression = output_compression
    if (shards or size or compression) and out_format not in ("tfrecord", "ofrecord"):
        raise ValueError(f"shards, shard sizes and output compression apply to TFRecord and OFRecord output, not {out_format}")
    if compression is None and out_format == "tfrecord":
        compression = suffix_compression(destination)
    elif compression == "none":
        compression = None
    writer_options(compression, compression_level=compression_level)  # checked before any work
    reader_compression = source_compression if in_format == "tfrecord" else None
    copy_records = in_format == out_format and in_format in ("tfrecord", "ofrecord") and features is None
    src = open_source(source, in_format, reader_compression, copy_records)
    src.select(features)
    report = ConversionProgress(src.rows, f"{in_format} -> {out_format}", progress)
    sink: Sink
    if out_format in ("tfrecord", "ofrecord"):
        sink = RecordSink(destination, out_format, src.rows, compression, shards, size, fsync, compression_level)
    elif out_format == "npz":
        sink = NpzSink(destination, src.columns, fsync)
    else:
        sink = TableSink(destination, out_format, src.columns, fsync)
    try:
        if copy_records:  # the same record format: records are copied as they are (resharded, recompressed)
            assert isinstance(sink, RecordSink) and isinstance(src, RecordSource)
            for batch in record_batches(src.records(), 1024, CHUNK_BYTES):
                sink.write_records(batch)
                report.advance(len(batch))
        else:
            def chunks() -> Iterator[Chunk]:
                done = 0
                for rows, columns in src.chunks():
                    yield rows, sink.prepared(done, columns) if isinstance(sink, RecordSink) else columns
                    done += rows
                    report.advance(rows)

            if isinstance(sink, RecordSink) and isinstance(src, ParquetSource):
                # Each chunk is encoded and written (the GIL released) while pyarrow reads the next.
                write_behind(sink.write, chunks())
            else:
                # Sources read in Python (CSV, JSON lines) hold the GIL the writer's
                # helper needs now and then, and pyarrow's writers take it in turns with
                # the reading: measured 10-30% slower behind them.
                for rows, columns in chunks():
                    sink.write(rows, columns)
        written = sink.commit()
    except BaseException:
        sink.abort()
        raise
    finally:
        report.finish()
    if isinstance(src, ImageFolderSource):
        label_map = _label_map_path(destination)
        target = AtomicTarget(label_map, fsync=fsync)
        with open(target.handle, "w", encoding="utf-8") as f:
            json.dump({name: label for label, name in enumerate(src.classes)}, f, indent=2)
        target.commit()
        written.append(label_map)
    return written
