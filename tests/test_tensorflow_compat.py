"""Cross-checks with TensorFlow itself (skipped when tensorflow-cpu is absent).

TensorFlow reads what recordkit writes; recordkit reads what TensorFlow
writes; uncompressed files are byte-identical; on damage both stop at the same
record and report the same offset.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

import recordkit as rk

tf = pytest.importorskip("tensorflow")

RECORDS = [b"", b"x", b"tfrecord" * 100, bytes(range(256)) * 600, "unicode é".encode()]
TF_COMPRESSION = {None: "", "gzip": "GZIP", "zlib": "ZLIB"}


def tf_read(path: Path, compression: str | None) -> tuple[list[bytes], str | None]:
    out: list[bytes] = []
    try:
        for record in tf.data.TFRecordDataset(str(path), compression_type=TF_COMPRESSION[compression]):
            out.append(record.numpy())
    except tf.errors.DataLossError as error:
        return out, error.message
    return out, None


def tf_write(path: Path, records: list[bytes], compression: str | None) -> None:
    with tf.io.TFRecordWriter(str(path), options=TF_COMPRESSION[compression]) as writer:
        for record in records:
            writer.write(record)


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_tensorflow_reads_what_recordkit_writes(tmp_path: Path, compression: str | None) -> None:
    path = tmp_path / "rk.tfrecord"
    with rk.TFRecordWriter(path, compression=compression) as writer:
        writer.write_many(RECORDS)
    assert tf_read(path, compression) == (RECORDS, None)


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_recordkit_reads_what_tensorflow_writes(tmp_path: Path, compression: str | None) -> None:
    path = tmp_path / "tf.tfrecord"
    tf_write(path, RECORDS, compression)
    assert list(rk.TFRecordReader(path)) == RECORDS
    assert list(rk.TFRecordReader(path, compression=compression)) == RECORDS


def test_uncompressed_files_are_byte_identical(tmp_path: Path) -> None:
    tf_write(tmp_path / "tf", RECORDS, None)
    with rk.TFRecordWriter(tmp_path / "rk") as writer:
        writer.write_many(RECORDS)
    assert (tmp_path / "rk").read_bytes() == (tmp_path / "tf").read_bytes()


def test_damage_matches_tensorflow(tmp_path: Path) -> None:
    rng = random.Random(7)
    records = [rng.randbytes(rng.randrange(0, 200)) for _ in range(40)]
    tf_write(tmp_path / "clean", records, None)
    clean = (tmp_path / "clean").read_bytes()
    damaged = tmp_path / "damaged"
    for trial in range(60):
        data = bytearray(clean)
        if trial % 3 == 0:
            data = data[: rng.randrange(1, len(data))]
        else:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        damaged.write_bytes(bytes(data))
        want, tf_error = tf_read(damaged, None)
        got: list[bytes] = []
        error = None
        try:
            got.extend(rk.TFRecordReader(damaged))
        except rk.DataLossError as e:
            error = e
        assert got == want
        if tf_error is None:
            # TensorFlow is silent only about a partial header at the end.
            assert error is None or error.kind == "partial_header"
        else:
            assert error is not None
            assert error.offset == int(re.search(r"record at (\d+)", tf_error).group(1))
