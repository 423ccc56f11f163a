"""TensorFlow's own tests of its record API (tensorflow/python/lib/io/tf_record_test.py),
adapted to recordkit's names: TFRecordOptions, TFRecordWriter, tf_record_iterator,
tf_record_random_reader. Where TensorFlow reads a file while its writer is open, the
writer writes in place (``atomic=False``): recordkit's writers rename on close by default.
The one table entry left out of testCompressionOptions is noted there."""

from __future__ import annotations

import gzip
import os
import random
import string
import zlib
from pathlib import Path

import pytest

import recordkit as rk

_TEXT = b"""Gaily bedight,
    A gallant knight,
    In sunshine and in shadow,
    Had journeyed long,
    Singing a song,
    In search of Eldorado.

    But he grew old
    This knight so bold
    And o'er his heart a shadow
    Fell as he found
    No spot of ground
    That looked like Eldorado.
    """
NONE, ZLIB, GZIP = rk.TFRecordCompressionType.NONE, rk.TFRecordCompressionType.ZLIB, rk.TFRecordCompressionType.GZIP


def record(f: int, r: int) -> bytes:
    return b"Record %d of file %d" % (r, f)


def write(folder: Path, records: list[bytes], name: str = "tfrecord", options: object = None) -> str:
    path = str(folder / name)
    with rk.TFRecordWriter(path, options=options) as writer:
        for r in records:
            writer.write(r)
    return path


def create_files(folder: Path, options: object = None, prefix: str = "") -> list[str]:
    return [write(folder, [record(i, j) for j in range(7)], f"{prefix}tfrecord.{i}.txt", options) for i in range(2)]


def test_write_read_zlib_files(tmp_path: Path) -> None:
    files = create_files(tmp_path, rk.TFRecordOptions(NONE), prefix="uncompressed")
    zlib_files = []
    for i, name in enumerate(files):
        zlib_files.append(str(tmp_path / f"tfrecord_{i}.z"))
        Path(zlib_files[-1]).write_bytes(zlib.compress(Path(name).read_bytes()))
    compressed = create_files(tmp_path, rk.TFRecordOptions(ZLIB), prefix="compressed")
    for mine, theirs, plain in zip(compressed, zlib_files, files):
        assert zlib.decompress(Path(mine).read_bytes()) == Path(plain).read_bytes()
        assert list(rk.tf_record_iterator(theirs, rk.TFRecordOptions(ZLIB))) == list(rk.tf_record_iterator(plain))


def test_write_read_gzip_files(tmp_path: Path) -> None:
    files = create_files(tmp_path, rk.TFRecordOptions(NONE), prefix="uncompressed")
    compressed = create_files(tmp_path, rk.TFRecordOptions(GZIP), prefix="compressed")
    for mine, plain in zip(compressed, files):
        assert gzip.decompress(Path(mine).read_bytes()) == Path(plain).read_bytes()


def test_no_compression_type() -> None:
    assert rk.TFRecordOptions.get_compression_type_string(rk.TFRecordOptions()) == ""
    assert rk.TFRecordOptions.get_compression_type_string(rk.TFRecordOptions("")) == ""
    with pytest.raises(ValueError):
        rk.TFRecordOptions(5)
    with pytest.raises(ValueError):
        rk.TFRecordOptions("BZ2")


def test_zlib_compression_type() -> None:
    assert rk.TFRecordOptions.get_compression_type_string(rk.TFRecordOptions("ZLIB")) == "ZLIB"
    assert rk.TFRecordOptions.get_compression_type_string(rk.TFRecordOptions(ZLIB)) == "ZLIB"
    assert rk.TFRecordOptions.get_compression_type_string(rk.TFRecordOptions(rk.TFRecordOptions(ZLIB))) == "ZLIB"


def _size_delta(folder: Path, records: list[bytes], options_a: rk.TFRecordOptions, options_b: rk.TFRecordOptions) -> int:
    a = write(folder, records, "tfrecord_a", options_a)
    assert list(rk.tf_record_iterator(a, options=options_a)) == records
    b = write(folder, records, "tfrecord_b", options_b)
    assert list(rk.tf_record_iterator(b, options=options_b)) == records
    return os.path.getsize(a) - os.path.getsize(b)


def test_compression_options(tmp_path: Path) -> None:
    rnd = random.Random(123)
    random_record = "".join(rnd.choice(string.digits) for _ in range(10000)).encode()
    repeated = _TEXT
    for _ in range(10000):
        start = rnd.randint(0, len(_TEXT))
        repeated += _TEXT[start : start + rnd.randint(10, 200)]
    records = [random_record, repeated, random_record]
    # TensorFlow's table. Left out: Z_FILTERED (as small as the default strategy here)
    # and Z_FULL_FLUSH (TensorFlow's "a few less bytes"): recordkit compresses in
    # independent blocks, each already ending in a full flush point.
    tests = [
        ("compression_level", 0, -1),
        ("compression_level", 2, -1),  # lower compression is worse
        ("compression_level", 6, 0),  # the default level
        ("compression_level", 9, 1),
        ("flush_mode", zlib.Z_NO_FLUSH, 0),
        ("input_buffer_size", 4096, 0),  # time, not size
        ("output_buffer_size", 4096, 0),
        ("window_bits", 8, -1),  # a smaller window is worse
        ("compression_strategy", zlib.Z_HUFFMAN_ONLY, -1),
    ]
    options_a = rk.TFRecordOptions(ZLIB)
    for prop, value, sign in tests:
        delta = _size_delta(tmp_path, records, options_a, rk.TFRecordOptions(compression_type=ZLIB, **{prop: value}))
        assert (delta == 0) if sign == 0 else (delta // sign > 0), (prop, value, delta)


def test_zlib_flush_record(tmp_path: Path) -> None:
    path = write(tmp_path, [b"small record"], "small_record")
    data = Path(path).read_bytes()
    compressor = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS)
    output = b""
    for byte in data:  # more blocks and trailing blocks should not break reads
        output += compressor.compress(bytes([byte])) + compressor.flush(zlib.Z_FULL_FLUSH)
    output += compressor.flush(zlib.Z_FULL_FLUSH) + compressor.flush(zlib.Z_FULL_FLUSH) + compressor.flush(zlib.Z_FINISH)
    Path(path).write_bytes(output)
    assert list(rk.tf_record_iterator(path, options=rk.TFRecordOptions(ZLIB))) == [b"small record"]


@pytest.mark.parametrize("original", [[b"foo", b"bar"], [_TEXT * 10240]])
def test_zlib_and_gzip_read_what_zlib_and_gzip_wrote(tmp_path: Path, original: list[bytes]) -> None:
    path = write(tmp_path, original)
    (tmp_path / "z").write_bytes(zlib.compress(Path(path).read_bytes()))
    (tmp_path / "gz").write_bytes(gzip.compress(Path(path).read_bytes()))
    assert list(rk.tf_record_iterator(str(tmp_path / "z"), options=rk.TFRecordOptions(ZLIB))) == original
    assert list(rk.tf_record_iterator(str(tmp_path / "gz"), options=rk.TFRecordOptions(GZIP))) == original


def test_iterator(tmp_path: Path) -> None:
    records = [record(0, i) for i in range(7)]
    options = rk.TFRecordOptions(ZLIB)
    reader = rk.tf_record_iterator(write(tmp_path, records, "compressed_records", options), options)
    for expected in records:
        assert next(reader) == expected
    with pytest.raises(StopIteration):
        next(reader)


@pytest.mark.parametrize("kind, decompress", [(ZLIB, zlib.decompress), (GZIP, gzip.decompress)])
@pytest.mark.parametrize("original", [[b"foo", b"bar"], [_TEXT * 10240]])
def test_what_recordkit_compressed_decompresses_with_zlib_and_gzip(tmp_path: Path, kind: object, decompress: object,
                                                                  original: list[bytes]) -> None:
    path = write(tmp_path, original, "written", rk.TFRecordOptions(kind))
    (tmp_path / "plain").write_bytes(decompress(Path(path).read_bytes()))  # type: ignore[operator]
    assert list(rk.tf_record_iterator(str(tmp_path / "plain"))) == original


def test_bad_file(tmp_path: Path) -> None:
    path = write(tmp_path, [b"123"], "bad_file")
    (tmp_path / "bad_file_truncated").write_bytes(Path(path).read_bytes()[:14])
    with pytest.raises(rk.DataLossError):
        for _ in rk.tf_record_iterator(str(tmp_path / "bad_file_truncated")):
            pass


def test_read_growing_file_preserves_read_offset(tmp_path: Path) -> None:
    path = str(tmp_path / "file.tfrecord")
    with rk.TFRecordWriter(path, atomic=False) as writer:
        writer.write(b"one")
        writer.write(b"two")
        writer.flush()
        iterator = rk.tf_record_iterator(path)
        assert next(iterator) == b"one"
        assert next(iterator) == b"two"
        for _ in range(2):  # at the end, StopIteration repeatedly
            with pytest.raises(StopIteration):
                next(iterator)
        writer.write(b"three")  # a record appended since: read from where the iterator stood
        writer.flush()
        assert next(iterator) == b"three"
        with pytest.raises(StopIteration):
            next(iterator)


def test_read_truncated_file_preserves_read_offset(tmp_path: Path) -> None:
    record_bytes = Path(write(tmp_path, [b"truncated"], "temp_file")).read_bytes()
    path = write(tmp_path, [b"good"], "truncated_file")
    with open(path, "ab", buffering=0) as f:
        f.write(record_bytes[:-1])  # the last byte left out
        iterator = rk.tf_record_iterator(path)
        assert next(iterator) == b"good"
        for _ in range(2):  # the cut record raises, again and again
            with pytest.raises(rk.DataLossError):
                next(iterator)
        f.write(record_bytes[-1:])  # completed: read from where the iterator stood
        assert next(iterator) == b"truncated"
        with pytest.raises(StopIteration):
            next(iterator)


def test_random_reader_reading_works(tmp_path: Path) -> None:
    records = [record(0, i) for i in range(7)]
    reader = rk.tf_record_random_reader(write(tmp_path, records, "uncompressed_records"))
    offset, offsets = 0, [0]
    for expected in records:
        got, offset = reader.read(offset)
        assert got == expected
        offsets.append(offset)
    with pytest.raises(IndexError, match=r"Out of range.*offset"):
        reader.read(offset)
    for i in range(6, 0, -1):  # backwards
        got, offset = reader.read(offsets[i])
        assert (got, offset) == (records[i], offsets[i + 1])


def test_random_reader_throws_error_for_invalid_offset(tmp_path: Path) -> None:
    reader = rk.tf_record_random_reader(write(tmp_path, [record(0, i) for i in range(7)], "uncompressed_records"))
    with pytest.raises(rk.DataLossError, match="corrupted record"):
        reader.read(1)


def test_closing_random_reader_causes_errors_for_further_reading(tmp_path: Path) -> None:
    reader = rk.tf_record_random_reader(write(tmp_path, [record(0, i) for i in range(7)], "uncompressed_records"))
    reader.close()
    with pytest.raises(rk.FailedPreconditionError, match="closed"):
        reader.read(0)


@pytest.mark.parametrize("kind", [NONE, GZIP, ZLIB])
class TestWriterCloseAndFlush:
    def writer(self, folder: Path, kind: object) -> tuple[str, rk.TFRecordOptions, rk.TFRecordWriter]:
        path, options = str(folder / "tf_record_writer_test.txt"), rk.TFRecordOptions(kind)
        return path, options, rk.TFRecordWriter(path, options)

    def test_write_and_leave_open(self, tmp_path: Path, kind: object) -> None:
        _, _, writer = self.writer(tmp_path, kind)
        for r in range(20):
            writer.write(b"Record %d" % r)
        with pytest.warns(RuntimeWarning, match="never closed"):
            del writer  # no crash; and nothing kept that might be incomplete

    def test_write_and_read(self, tmp_path: Path, kind: object) -> None:
        path, options, writer = self.writer(tmp_path, kind)
        records = [b"Record %d" % r for r in range(20)]
        for r in records:
            writer.write(r)
        writer.close()
        assert list(rk.tf_record_iterator(path, options)) == records

    def test_double_close(self, tmp_path: Path, kind: object) -> None:
        _, _, writer = self.writer(tmp_path, kind)
        writer.write(b"Record 0")
        writer.close()
        writer.close()

    def test_flush_and_write_after_close_are_errors(self, tmp_path: Path, kind: object) -> None:
        _, _, writer = self.writer(tmp_path, kind)
        writer.write(b"Record 0")
        writer.close()
        with pytest.raises(rk.FailedPreconditionError):
            writer.flush()
        with pytest.raises(rk.FailedPreconditionError):
            writer.write(b"Record 1")


@pytest.mark.parametrize("kind", [NONE, ZLIB, GZIP])
def test_every_flush_makes_every_record_so_far_readable(tmp_path: Path, kind: object) -> None:
    """TensorFlow's TestZlibSyncFlush (record_reader_writer_test.cc), for every compression."""
    path = str(tmp_path / "flushed")
    options = rk.TFRecordOptions(kind, flush_mode=zlib.Z_SYNC_FLUSH)
    records = [b"x" * n for n in (0, 1, 10, 1000, 100_000)]
    with rk.TFRecordWriter(path, options, atomic=False) as writer:
        size = os.path.getsize(path)
        for i, r in enumerate(records):
            writer.write(r)
            writer.flush()
            assert os.path.getsize(path) > size
            size = os.path.getsize(path)
            assert list(rk.tf_record_iterator(path, options)) == records[: i + 1]
            if kind != NONE:  # the default reader refuses the unfinished stream, and says so
                with pytest.raises(rk.DataLossError, match="unfinished.*tf_record_iterator.*follow=True"):
                    list(rk.TFRecordReader(path))
    assert list(rk.TFRecordReader(path)) == records
