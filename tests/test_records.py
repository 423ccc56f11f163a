"""TFRecord and OFRecord readers and writers: round trips, damage, atomic writes, sources."""

from __future__ import annotations

import errno
import gzip
import io
import itertools
import os
import pickle
import platform
import struct
import subprocess
import sys
import threading
import warnings
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recordkit as rk
from conftest import PEAK_RSS_MB
from reference import frame_ofrecord, frame_tfrecord, masked_crc32c, record_offsets

RECORDS = [b"", b"a", b"hello world", bytes(range(256)) * 40, b"\x00" * 3]
COMPRESSIONS = [None, "gzip", "zlib"]


def write(path: Path, records: list[bytes], compression: str | None = None) -> Path:
    with rk.TFRecordWriter(path, compression=compression) as writer:
        writer.write_many(records)
    return path


def read_all(source, **kwargs) -> tuple[list[bytes], rk.DataLossError | None]:
    out: list[bytes] = []
    try:
        for record in rk.TFRecordReader(source, **kwargs):
            out.append(record)
    except rk.DataLossError as error:
        return out, error
    return out, None


# --- round trips --------------------------------------------------------------


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_round_trip(tmp_path: Path, compression: str | None) -> None:
    path = write(tmp_path / "data.tfrecord", RECORDS, compression)
    assert list(rk.TFRecordReader(path)) == RECORDS
    assert list(rk.TFRecordReader(path, compression=compression)) == RECORDS
    assert rk.count_records(path) == len(RECORDS)


def test_uncompressed_bytes_match_the_format(tmp_path: Path) -> None:
    path = write(tmp_path / "data.tfrecord", RECORDS)
    assert path.read_bytes() == frame_tfrecord(RECORDS)
    # TensorFlow's worked example: b"abc".
    write(tmp_path / "abc", [b"abc"])
    assert (tmp_path / "abc").read_bytes().hex() == "0300000000000000b099490e6162636e57f121"


def test_accepts_bytes_like_and_str(tmp_path: Path) -> None:
    path = tmp_path / "mixed.tfrecord"
    with rk.TFRecordWriter(path) as writer:
        writer.write(b"bytes")
        writer.write(bytearray(b"bytearray"))
        writer.write(memoryview(b"memoryview"))
        writer.write("héllo")
        assert writer.write_many(iter([b"x", "y"])) == 2
        assert writer.records_written == 6
    assert list(rk.TFRecordReader(path)) == [b"bytes", b"bytearray", b"memoryview", "héllo".encode(), b"x", b"y"]
    with rk.TFRecordWriter(tmp_path / "bad.tfrecord") as writer, pytest.raises(TypeError, match="int"):
        writer.write(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["GZIP", "Gzip", "gzip", "ZLIB", "zlib", "NONE", "none", ""])
def test_compression_names_are_case_insensitive(tmp_path: Path, name: str) -> None:
    path = write(tmp_path / "data", RECORDS, name)
    assert list(rk.TFRecordReader(path, compression=name)) == RECORDS


def test_unknown_compression_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="snappy"):
        rk.TFRecordWriter(tmp_path / "x", compression="snappy")
    write(tmp_path / "x", [b"a"])
    with pytest.raises(ValueError, match="lz4"):
        rk.TFRecordReader(tmp_path / "x", compression="lz4")


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_auto_detects_compression_without_a_suffix(tmp_path: Path, compression: str) -> None:
    path = write(tmp_path / "no-suffix", RECORDS, compression)
    reader = rk.TFRecordReader(path)
    assert reader.compression == compression
    assert list(reader) == RECORDS


def test_auto_detection_trusts_a_valid_header_over_magic(tmp_path: Path) -> None:
    # A first record 0x8b1f bytes long starts with the GZIP magic 1f 8b.
    record = b"z" * 0x8B1F
    path = write(tmp_path / "looks-gzipped.gz", [record])
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    reader = rk.TFRecordReader(path)
    assert reader.compression == "none"
    assert list(reader) == [record]


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_empty_compressed_files(tmp_path: Path, compression: str) -> None:
    path = write(tmp_path / f"empty.{compression}", [], compression)
    assert list(rk.TFRecordReader(path)) == []


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    assert list(rk.TFRecordReader(tmp_path / "empty")) == []
    assert rk.count_records(tmp_path / "empty") == 0


def test_reading_twice_starts_over(tmp_path: Path) -> None:
    reader = rk.TFRecordReader(write(tmp_path / "d", RECORDS))
    assert list(reader) == RECORDS
    assert list(reader) == RECORDS
    assert reader.stats.records == len(RECORDS)


def test_many_records_cross_batch_boundaries(tmp_path: Path) -> None:
    records = [str(i).encode() * (i % 7) for i in range(5000)]
    for compression in COMPRESSIONS:
        path = write(tmp_path / f"many-{compression}", records, compression)
        assert list(rk.TFRecordReader(path)) == records


# --- multi-member gzip, concatenation, stricter-than-TensorFlow endings ---------


def _records_over_several_blocks() -> list[bytes]:
    """About 5 MB of records: compressed output spans several 1 MiB deflate blocks."""
    rng = __import__("random").Random(3)
    words = [b"cat", b"dog", b"chicken", b"horse", b"goat"]
    return [b" ".join(rng.choice(words) for _ in range(rng.randrange(1, 400))) for _ in range(6000)]


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_compressed_output_over_many_blocks_is_one_stream_for_every_thread_count(tmp_path, compression) -> None:
    # Deflated in 1 MiB blocks on every core and joined: the same bytes for any
    # thread count, one stream that Python's own gzip and zlib decode whole.
    records = _records_over_several_blocks()
    outputs = []
    for threads in (1, 2, 7):
        rk.set_num_threads(threads)
        try:
            path = write(tmp_path / f"{threads}.tfrecord", records, compression)
        finally:
            rk.set_num_threads(None)
        outputs.append(path.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]
    decoded = gzip.decompress(outputs[0]) if compression == "gzip" else zlib.decompress(outputs[0])
    assert decoded == frame_tfrecord(records)
    assert list(rk.TFRecordReader(tmp_path / "2.tfrecord")) == records


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_a_flushed_compressed_file_can_be_read_up_to_the_flush(tmp_path, compression) -> None:
    records = _records_over_several_blocks()
    path = tmp_path / "flushed.tfrecord"
    writer = rk.TFRecordWriter(path, compression=compression)
    writer.write_many(records[:4000])
    writer.flush()
    # While the writer is open the file is staged beside its name; read what is on disk.
    [staged] = [p for p in tmp_path.iterdir() if p.name != "flushed.tfrecord"]
    got, error = read_all(staged, compression=compression)
    assert got == records[:4000] and error is not None  # no end marker yet: reported, never silent
    writer.write_many(records[4000:])
    writer.close()
    assert list(rk.TFRecordReader(path)) == records


def test_concatenated_gzip_files_read_whole(tmp_path: Path) -> None:
    a = write(tmp_path / "a.gz", [b"one", b"two"], "gzip").read_bytes()
    b = write(tmp_path / "b.gz", [b"three"], "gzip").read_bytes()
    (tmp_path / "ab.gz").write_bytes(a + b)
    assert list(rk.TFRecordReader(tmp_path / "ab.gz")) == [b"one", b"two", b"three"]


def test_python_gzip_output_is_read(tmp_path: Path) -> None:
    (tmp_path / "py.gz").write_bytes(gzip.compress(frame_tfrecord(RECORDS), mtime=12345))
    assert list(rk.TFRecordReader(tmp_path / "py.gz")) == RECORDS


def test_data_after_zlib_stream_is_damage(tmp_path: Path) -> None:
    (tmp_path / "z.zz").write_bytes(zlib.compress(frame_tfrecord([b"a"])) + b"trailing")
    records, error = read_all(tmp_path / "z.zz")
    assert records == [b"a"]
    assert error is not None and error.kind == "corrupt_stream"


def test_concatenated_zlib_streams_are_damage_not_silence(tmp_path: Path) -> None:
    one = zlib.compress(frame_tfrecord([b"a"]))
    (tmp_path / "zz.zz").write_bytes(one + one)
    records, error = read_all(tmp_path / "zz.zz")
    assert records == [b"a"] and error is not None


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_every_cut_of_a_compressed_file_is_reported(tmp_path: Path, compression: str) -> None:
    records = [bytes([i]) * (50 + i) for i in range(30)]
    full = write(tmp_path / "full", records, compression).read_bytes()
    ends = record_offsets(records)
    cut_path = tmp_path / "cut"
    for cut in range(0, len(full), 7):
        cut_path.write_bytes(full[:cut])
        got, error = read_all(cut_path, compression=compression)
        assert got == records[: len(got)], "records read from a cut file must be intact"
        assert error is not None, f"cut at {cut} of {len(full)} went unnoticed"
        assert error.offset in ends


def test_stray_bytes_at_end_are_reported(tmp_path: Path) -> None:
    body = frame_tfrecord([b"first", b"second"])
    for stray in range(1, 12):
        (tmp_path / "s").write_bytes(body + b"\x07" * stray)
        records, error = read_all(tmp_path / "s")
        assert records == [b"first", b"second"]
        assert error is not None and error.kind == "partial_header"
        assert error.offset == len(body) and error.record_index == 2


def test_non_tfrecord_file_is_reported_at_zero(tmp_path: Path) -> None:
    (tmp_path / "text.txt").write_bytes(b"this is not a TFRecord file at all")
    records, error = read_all(tmp_path / "text.txt")
    assert records == [] and error is not None
    assert (error.offset, error.kind) == (0, "corrupt_length")
    assert "TFRecord" in str(error)


# --- damage: offsets, ordering, hostile lengths, errors --------------------------


def _damaged(tmp_path: Path) -> tuple[Path, list[bytes], list[int]]:
    records = [f"record {i}".encode() * 3 for i in range(20)]
    data = bytearray(frame_tfrecord(records))
    offsets = record_offsets(records)
    data[offsets[5] + 12 + 4] ^= 0xFF  # record 5: payload
    data[offsets[12] + 3] ^= 0x10  # record 12: length
    path = tmp_path / "damaged.tfrecord"
    path.write_bytes(bytes(data))
    return path, records, offsets


def test_intact_records_come_before_the_error(tmp_path: Path) -> None:
    path, records, offsets = _damaged(tmp_path)
    got, error = read_all(path)
    assert got == records[:5]
    assert error is not None
    assert (error.offset, error.record_index, error.kind) == (offsets[5] + 12, 5, "corrupt_data")
    assert error.path == str(path)
    assert str(path) in str(error) and str(offsets[5] + 12) in str(error)


def test_data_loss_error_is_ioerror_and_pickles(tmp_path: Path) -> None:
    path, _, _ = _damaged(tmp_path)
    _, error = read_all(path)
    assert isinstance(error, rk.RecordkitError) and isinstance(error, IOError)
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is rk.DataLossError
    assert (clone.path, clone.offset, clone.record_index, clone.kind, str(clone)) == (
        error.path, error.offset, error.record_index, error.kind, str(error))


def test_hostile_length_is_refused_at_once(tmp_path: Path) -> None:
    length = struct.pack("<Q", 1 << 62)
    path = tmp_path / "hostile"
    path.write_bytes(length + struct.pack("<I", masked_crc32c(length)) + b"\x00" * 88)
    for compression in (None, "gzip"):
        if compression:
            (tmp_path / "hostile.gz").write_bytes(gzip.compress(path.read_bytes()))
        got, error = read_all(tmp_path / ("hostile.gz" if compression else "hostile"))
        assert got == [] and error is not None
        assert (error.offset, error.kind) == (0, "truncated_record")
    with pytest.raises(rk.DataLossError):
        rk.count_records(path)
    # The bytes a record needs past its header are its data and its CRC: both named.
    (tmp_path / "short").write_bytes(frame_tfrecord([b"x" * 11])[:-2])
    with pytest.raises(rk.DataLossError, match="claims 11 bytes of data and its 4-byte CRC but only 13 bytes remain"):
        list(rk.TFRecordReader(tmp_path / "short"))


def test_verify_false_skips_payload_crcs(tmp_path: Path) -> None:
    path, records, _ = _damaged(tmp_path)
    got, error = read_all(path, verify=False)
    assert len(got) == 12 and got[5] != records[5]
    assert error is not None and error.kind == "corrupt_length"


# --- on_error="skip" -----------------------------------------------------------------


def test_skip_resynchronizes_and_reports(tmp_path: Path) -> None:
    path, records, offsets = _damaged(tmp_path)
    reader = rk.TFRecordReader(path, on_error="skip")
    with pytest.warns(rk.DataLossWarning, match="skipped") as caught:
        got = list(reader)
    assert got == [r for i, r in enumerate(records) if i not in (5, 12)]
    assert len(caught) == 2
    regions = reader.stats.damaged_regions
    assert [(r.offset, r.kind) for r in regions] == [(offsets[5] + 12, "corrupt_data"), (offsets[12], "corrupt_length")]
    assert [r.bytes_skipped for r in regions] == [offsets[6] - offsets[5], offsets[13] - offsets[12]]
    assert reader.stats.records == 18
    assert reader.stats.bytes_skipped == sum(r.bytes_skipped for r in regions)


def test_skip_handles_damage_at_the_end(tmp_path: Path) -> None:
    records = [b"one", b"two", b"three"]
    (tmp_path / "t").write_bytes(frame_tfrecord(records)[:-5])
    reader = rk.TFRecordReader(tmp_path / "t", on_error="skip")
    with pytest.warns(rk.DataLossWarning):
        assert list(reader) == records[:2]
    assert reader.stats.damaged_regions[0].kind == "truncated_record"


def test_on_error_is_validated(tmp_path: Path) -> None:
    write(tmp_path / "d", [b"a"])
    with pytest.raises(ValueError, match="on_error"):
        rk.TFRecordReader(tmp_path / "d", on_error="ignore")  # type: ignore[arg-type]


# --- atomic writing ------------------------------------------------------------------


def test_file_appears_only_when_closed(tmp_path: Path) -> None:
    path = tmp_path / "out.tfrecord"
    writer = rk.TFRecordWriter(path)
    writer.write(b"abc")
    writer.flush()
    assert not path.exists()
    writer.close()
    writer.close()  # idempotent
    assert list(rk.TFRecordReader(path)) == [b"abc"]
    assert os.listdir(tmp_path) == ["out.tfrecord"]


def test_exception_inside_with_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "out.tfrecord"
    with pytest.raises(RuntimeError):
        with rk.TFRecordWriter(path, compression="gzip") as writer:
            writer.write(b"partial")
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_exception_keeps_a_previous_file(tmp_path: Path) -> None:
    path = write(tmp_path / "out.tfrecord", [b"old"])
    with pytest.raises(RuntimeError), rk.TFRecordWriter(path) as writer:
        writer.write(b"new")
        raise RuntimeError("boom")
    assert list(rk.TFRecordReader(path)) == [b"old"]


@pytest.mark.skipif(not hasattr(os, "O_PATH") or not os.path.isdir("/proc/self/fd"), reason="Linux only")
def test_a_large_file_replaced_is_let_go_on_another_thread(tmp_path: Path) -> None:
    from recordkit._sources import replace_file

    path = tmp_path / "out.tfrecord"
    first = [os.urandom(1 << 20) for _ in range(9)]  # 9 MB: over the size from which the old file goes in the background
    write(path, first)
    staged = write(tmp_path / "staged", [b"new"])

    def held() -> list[str]:  # what this process holds in the folder (a replaced file reads "... (deleted)")
        return [target for target in (_fd_target(fd) for fd in os.listdir("/proc/self/fd"))
                if target.startswith(str(tmp_path))]

    closer = replace_file(str(staged), str(path))
    assert closer is not None
    closer.join(timeout=60)
    assert not closer.is_alive() and held() == []  # the old file's reference closed
    assert list(rk.TFRecordReader(path)) == [b"new"] and os.listdir(tmp_path) == ["out.tfrecord"]
    # Through a writer: the large file replaced, the new records in place.
    write(path, first)
    write(path, [b"again"])
    assert list(rk.TFRecordReader(path)) == [b"again"]
    # Held only where the rename drops the last link of a large regular file: not a small
    # file, one with another link, a symlink (the link is replaced, not its target), or a
    # FIFO (which opening for reading would block on).
    small, linked, link, fifo = (tmp_path / name for name in ("small", "linked", "link", "fifo"))
    write(small, [b"x"])
    write(linked, first)
    os.link(linked, tmp_path / "other-link")
    os.symlink(linked, link)
    os.mkfifo(fifo)
    for target in (small, linked, link, fifo, tmp_path / "missing"):
        staged = write(tmp_path / "staged", [b"new"])
        assert replace_file(str(staged), str(target)) is None, target.name
        assert list(rk.TFRecordReader(target)) == [b"new"]
    assert list(rk.TFRecordReader(tmp_path / "other-link")) == first
    for thread in threading.enumerate():  # the writer's own, from replacing `path` above
        if thread.name == "recordkit-let-go":
            thread.join(timeout=60)
    assert held() == []


def _fd_target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # closed since the listing
        return ""


def test_abandoned_writer_is_discarded_with_a_warning(tmp_path: Path) -> None:
    writer = rk.TFRecordWriter(tmp_path / "out.tfrecord")
    writer.write(b"x")
    with pytest.warns(RuntimeWarning, match="never closed"):
        del writer
    assert os.listdir(tmp_path) == []


def test_write_after_close_fails(tmp_path: Path) -> None:
    writer = rk.TFRecordWriter(tmp_path / "out")
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"x")


def test_every_writer_creates_a_missing_parent_folder(tmp_path: Path) -> None:
    with rk.TFRecordWriter(tmp_path / "a" / "b" / "out.tfrecord") as writer:
        writer.write(b"x")
    with rk.OFRecordWriter(tmp_path / "of" / "part-00000") as writer:
        writer.write(b"y")
    rk.write_examples(tmp_path / "c" / "one.tfrecord", {"a": [1]})
    rk.write_examples(tmp_path / "d" / "set.tfrecord", {"a": [1, 2]}, shards=2)
    rk.write_ofrecord_parts([b"z"], tmp_path / "e" / "f")
    assert list(rk.TFRecordReader(tmp_path / "a" / "b" / "out.tfrecord")) == [b"x"]
    assert list(rk.OFRecordReader(tmp_path / "of" / "part-00000")) == [b"y"]
    assert rk.count_records(tmp_path / "c" / "one.tfrecord") == 1
    assert len(rk.list_files(tmp_path / "d")) == 2
    assert rk.count_records(tmp_path / "e" / "f" / "part-00000", format="ofrecord") == 1


def test_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        rk.TFRecordReader(tmp_path / "absent.tfrecord")
    assert "absent.tfrecord" in str(info.value)


# --- sources: pathlib, file objects, URLs ------------------------------------------


class _FullDisk(io.RawIOBase):
    """A sink that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, room: int) -> None:
        self.room, self.taken = room, bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        if len(self.taken) + len(b) > self.room:
            raise OSError(28, "No space left on device")
        self.taken += b
        return len(b)


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_a_failed_write_stops_the_writer(compression: str | None) -> None:
    # After a failed write the sink ends in part of a record (or mid-stream):
    # no later write may follow it, and close must fail rather than finish it.
    sink = _FullDisk(room=3 << 20)
    writer = rk.TFRecordWriter(sink, compression=compression)
    big = bytes(range(256)) * 4096  # 1 MiB, compressible only so far
    with pytest.raises(OSError, match="No space left"):
        for _ in range(64):
            writer.write(big + os.urandom(1 << 20))
            writer.flush()
    with pytest.raises(ValueError, match="stopped at an earlier error"):
        writer.write(b"one more")
    with pytest.raises(ValueError, match="stopped at an earlier error"):
        writer.close()


_PAST_THE_SIZE_LIMIT = """
import os, resource, sys
import recordkit as rk
resource.setrlimit(resource.RLIMIT_FSIZE, (5 << 20, 5 << 20))
path = sys.argv[1]
writer = rk.TFRecordWriter(path)
record = os.urandom(1 << 20)
try:
    for _ in range(64):
        writer.write(record)
        writer.flush()
except OSError as error:
    print("raised", error.errno)
try:
    writer.close()
except ValueError as error:
    print("close refused:", "stopped at an earlier error" in str(error))
print("left", len(os.listdir(os.path.dirname(path))))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_file_that_reaches_its_size_limit_fails_the_write(tmp_path: Path) -> None:
    # Blocks are reserved 16 MiB past what is written (fallocate, keeping the
    # size): the write past the limit must still fail as it did without them,
    # and nothing be left behind. Python ignores SIGXFSZ, so the kernel's
    # EFBIG reaches the writer.
    path = tmp_path / "limited.tfrecord"
    out = subprocess.run([sys.executable, "-c", _PAST_THE_SIZE_LIMIT, str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == [f"raised {errno.EFBIG}", "close refused: True", "left 0"], out.stdout


@pytest.mark.skipif(not hasattr(os.stat_result, "st_blocks"), reason="no block counts here")
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_blocks_reserved_ahead_are_released(tmp_path: Path, compression: str | None) -> None:
    # The writer reserves disk blocks 16 MiB past what it has written; a closed
    # file keeps none past its end.
    path = tmp_path / "reserved.tfrecord"
    records = [os.urandom(1 << 20) for _ in range(20)]
    with rk.TFRecordWriter(path, compression=compression) as writer:
        writer.write_many(records)
    stat = path.stat()
    assert stat.st_blocks * 512 < stat.st_size + (1 << 20), (stat.st_blocks, stat.st_size)
    assert list(rk.TFRecordReader(path, compression=compression)) == records


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_file_objects(tmp_path: Path, compression: str | None) -> None:
    buffer = io.BytesIO()
    with rk.TFRecordWriter(buffer, compression=compression) as writer:
        writer.write_many(RECORDS)
    assert not buffer.closed
    buffer.seek(0)
    assert list(rk.TFRecordReader(buffer)) == RECORDS
    path = tmp_path / "f"
    path.write_bytes(buffer.getvalue())
    with open(path, "rb") as f:
        assert list(rk.TFRecordReader(f, compression=compression)) == RECORDS


def test_damage_in_a_file_object_names_it(tmp_path: Path) -> None:
    path, records, offsets = _damaged(tmp_path)
    with open(path, "rb") as f:
        got, error = read_all(f)
    assert got == records[:5] and error is not None
    assert error.offset == offsets[5] + 12 and error.path == str(path)


def test_exceptions_from_file_objects_propagate() -> None:
    class Broken(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def read(self, n: int = -1) -> bytes:
            raise ConnectionError("network went away")

    with pytest.raises(ConnectionError, match="went away"):
        list(rk.TFRecordReader(Broken(), compression=None))


def test_fsspec_urls(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    for compression in COMPRESSIONS:
        url = f"memory://bucket/data-{compression}.tfrecord"
        write(url, RECORDS, compression)  # type: ignore[arg-type]
        assert list(rk.TFRecordReader(url)) == RECORDS
        assert rk.count_records(url) == len(RECORDS)
    assert not [p for p in fsspec.filesystem("memory").ls("/bucket") if ".tmp-" in str(p)]
    local = write(tmp_path / "l.tfrecord", RECORDS)
    assert list(rk.TFRecordReader(f"file://{local}")) == RECORDS


def test_fsspec_writer_discards_on_error() -> None:
    fsspec = pytest.importorskip("fsspec")
    with pytest.raises(RuntimeError), rk.TFRecordWriter("memory://failed/out.tfrecord") as writer:
        writer.write(b"x")
        raise RuntimeError("boom")
    assert fsspec.filesystem("memory").find("/failed") == []


# --- OFRecord ------------------------------------------------------------------------


def test_ofrecord_round_trip(tmp_path: Path) -> None:
    records = [b"a", b"bc" * 100, b"\x00"]
    with rk.OFRecordWriter(tmp_path / "part-00000") as writer:
        writer.write_many(records)
    assert (tmp_path / "part-00000").read_bytes() == frame_ofrecord(records)
    assert list(rk.OFRecordReader(tmp_path / "part-00000")) == records
    assert rk.count_records(tmp_path / "part-00000", format="ofrecord") == 3


def test_ofrecord_refuses_empty_records(tmp_path: Path) -> None:
    with rk.OFRecordWriter(tmp_path / "p") as writer, pytest.raises(ValueError, match="empty"):
        writer.write(b"")


@pytest.mark.parametrize(
    "tail, kind",
    [
        (struct.pack("<q", 0), "invalid_length"),
        (struct.pack("<q", -5) + b"xxxxx", "invalid_length"),
        (struct.pack("<q", 1000) + b"short", "truncated_record"),
        (struct.pack("<q", 1 << 62), "truncated_record"),
        (b"\x01\x02\x03", "partial_header"),
    ],
)
def test_ofrecord_damage(tmp_path: Path, tail: bytes, kind: str) -> None:
    good = frame_ofrecord([b"intact"])
    (tmp_path / "p").write_bytes(good + tail)
    got = []
    with pytest.raises(rk.DataLossError) as info:
        for record in rk.OFRecordReader(tmp_path / "p"):
            got.append(record)
    assert got == [b"intact"]
    assert (info.value.kind, info.value.offset, info.value.record_index) == (kind, len(good), 1)


def test_write_ofrecord_parts(tmp_path: Path) -> None:
    records = [f"r{i}".encode() for i in range(10)]
    paths = rk.write_ofrecord_parts(records, tmp_path / "ds", num_parts=3)
    assert [os.path.basename(p) for p in paths] == ["part-00000", "part-00001", "part-00002"]
    parts = [list(rk.OFRecordReader(p)) for p in paths]
    assert [len(p) for p in parts] == [4, 3, 3]
    assert sorted(r for p in parts for r in p) == sorted(records)
    # A rewrite with fewer parts replaces the whole set: no stale part-00002.
    rk.write_ofrecord_parts(records[:4], tmp_path / "ds", num_parts=2)
    assert sorted(os.listdir(tmp_path / "ds")) == [".part-N.recordkit-set", "part-00000", "part-00001"]
    assert sorted(rk.Dataset(tmp_path / "ds")) == sorted(records[:4])


def test_write_ofrecord_parts_leaves_nothing_on_error(tmp_path: Path) -> None:
    def records():
        yield b"one"
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError):
        rk.write_ofrecord_parts(records(), tmp_path / "ds", num_parts=2)
    assert os.listdir(tmp_path) == []  # nor the folder made for the parts


# --- properties ----------------------------------------------------------------------

record_lists = st.lists(st.binary(max_size=300), max_size=40)


@given(records=record_lists, compression=st.sampled_from(COMPRESSIONS))
def test_property_round_trip(tmp_path_factory, records: list[bytes], compression: str | None) -> None:
    path = tmp_path_factory.mktemp("prop") / "data"
    write(path, records, compression)
    assert list(rk.TFRecordReader(path)) == records
    if compression is None:
        assert path.read_bytes() == frame_tfrecord(records)


@given(records=st.lists(st.binary(min_size=1, max_size=100), min_size=1, max_size=20), data=st.data())
def test_property_no_silent_loss_on_truncation(tmp_path_factory, records: list[bytes], data) -> None:
    full = frame_tfrecord(records)
    cut = data.draw(st.integers(0, len(full) - 1))
    path = tmp_path_factory.mktemp("cut") / "data"
    path.write_bytes(full[:cut])
    got, error = read_all(path)
    assert got == records[: len(got)]
    boundaries = record_offsets(records)
    if cut in boundaries:
        assert error is None and len(got) == boundaries.index(cut)
    else:
        assert error is not None and error.offset == boundaries[len(got)]


@given(records=st.lists(st.binary(min_size=1, max_size=60), min_size=2, max_size=15), data=st.data())
def test_property_skip_keeps_every_intact_record(tmp_path_factory, records: list[bytes], data) -> None:
    full = bytearray(frame_tfrecord(records))
    offsets = record_offsets(records)
    victim = data.draw(st.integers(0, len(records) - 1))
    position = data.draw(st.integers(offsets[victim], offsets[victim + 1] - 1))
    full[position] ^= data.draw(st.integers(1, 255))
    path = tmp_path_factory.mktemp("flip") / "data"
    path.write_bytes(bytes(full))
    # Uncompressed: a flip in the first header can make its bytes a ZLIB header
    # (an 8-byte record's 08 00 -> 08 d7), which "auto" takes for a ZLIB stream.
    reader = rk.TFRecordReader(path, compression=None, on_error="skip")
    with pytest.warns(rk.DataLossWarning):
        got = list(reader)
    assert got == records[:victim] + records[victim + 1 :]
    assert reader.stats.bytes_skipped == offsets[victim + 1] - offsets[victim]


def test_gil_is_released_while_rust_reads(tmp_path: Path) -> None:
    """Another Python thread keeps running while one batch is decompressed and checked."""
    import threading

    path = write(tmp_path / "big.gz", [bytes(96 << 20)], "gzip")
    scanner = rk._native.RecordScanner(str(path), name=str(path))
    ticks = 0
    running = True

    def spin() -> None:
        nonlocal ticks
        while running:
            ticks += 1

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        while ticks < 1000:  # the spinner runs (a count, not a time)
            pass
        before = ticks
        batch = scanner.next_batch(1, 1)
        during = ticks - before
    finally:
        running = False
        thread.join()
    assert len(batch) == 1 and len(batch[0]) == 96 << 20
    # Holding the GIL would leave the spinner a handful of switch intervals at most.
    assert during > 10_000, during


_FREED_HEAP_KEPT = """
import ctypes, sys
import recordkit as rk

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2
if sys.argv[1] == "open-a-reader":
    rk.TFRecordReader(sys.argv[2])
heap_before = mallinfo2().arena
values = [bytes(150_000) + bytes([i]) for i in range(20)]   # a batch of 150 KB records
grown = mallinfo2().arena - heap_before   # less than 3 MB where free space inside the heap took some
del values
print(grown, mallinfo2().arena - heap_before)   # the growth, and what the heap kept of it once freed
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc adaptation")
def test_opening_a_reader_lets_malloc_keep_freed_batches(tmp_path: Path) -> None:
    # A fresh process gives a freed batch of 150 KB values back to the kernel and
    # faults it in again for the next batch (2-3x slower reads); once a reader is
    # open, glibc keeps it for reuse, as it does after any program's first large free.
    path = tmp_path / "a.tfrecord"
    write(path, [b"x"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}

    def freed_heap_kept(mode: str) -> tuple[int, int]:
        out = subprocess.run([sys.executable, "-c", _FREED_HEAP_KEPT, mode, str(path)],
                             capture_output=True, text=True, check=True, env=env)
        grown, kept = map(int, out.stdout.split())
        assert grown > 1_000_000, "the batch did not grow the heap: the measurement says nothing"
        return grown, kept

    # Compared with the heap's own growth, which depends on how much free space the imports left.
    grown, kept = freed_heap_kept("no-reader")
    assert kept < 0.5 * grown, (grown, kept)
    grown, kept = freed_heap_kept("open-a-reader")
    assert kept > 0.95 * grown, (grown, kept)


def _take_in_threads(take_some: Any, threads: int = 8) -> list[bytes]:
    """Every item that ``threads`` threads get by calling ``take_some()`` (a list,
    empty at the end) until it is empty; any exception in a thread fails the test."""
    import threading

    taken: list[list[bytes]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    def take(mine: list[bytes]) -> None:
        try:
            while items := take_some():
                mine.extend(items)
        except BaseException as error:  # reported below, with the thread's own error
            errors.append(error)

    workers = [threading.Thread(target=take, args=(mine,)) for mine in taken]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors[:1]
    return [item for mine in taken for item in mine]


def test_one_reader_iterator_shared_by_threads_gives_each_record_once(tmp_path: Path) -> None:
    records = [b"r%d" % i for i in range(3000)]
    write(tmp_path / "a.tfrecord", records)
    iterator = iter(rk.TFRecordReader(tmp_path / "a.tfrecord"))
    got = _take_in_threads(lambda: list(itertools.islice(iterator, 1)))
    assert sorted(got) == sorted(records)


def _hostile_damage(size: int) -> bytes:
    """A plausible record header (its length CRC checks) every 16 bytes, each
    claiming a payload that runs almost to the end: no record is whole."""
    out = bytearray()
    while len(out) < size:
        header = struct.pack("<Q", max(size - len(out) - 100, 1))
        out += header + struct.pack("<I", masked_crc32c(header)) + bytes(4)
    return bytes(out[:size])


@pytest.mark.parametrize("source", ["mapped file", "file object", "gzip"])
def test_skipping_hostile_damage_is_linear(tmp_path: Path, source: str) -> None:
    # Each candidate's payload CRC used to be computed by reading the payload:
    # 1 MB took 1.6 s and 2 MB 6.2 s here. Now it comes from prefix CRCs.
    intact = [b"after the damage %d" % i for i in range(3)]
    data = _hostile_damage(4 << 20) + frame_tfrecord(intact)
    path = tmp_path / ("h.tfrecord.gz" if source == "gzip" else "h.tfrecord")
    path.write_bytes(gzip.compress(data, 1) if source == "gzip" else data)
    # How long it takes is for benchmarks/bench_damage.py: a quadratic scan would run for minutes.
    with pytest.warns(rk.DataLossWarning), open(path, "rb") as f:
        reader = rk.TFRecordReader(f if source == "file object" else path, on_error="skip")
        assert list(reader) == intact
    assert reader.stats.bytes_skipped == 4 << 20 and reader.stats.damaged_regions[0].record_index == 0


def _intact_then_lying(size: int) -> bytes:
    """An intact record, then a header (its CRC right) claiming most of the rest, again and again."""
    out = bytearray()
    while len(out) < size:
        out += frame_tfrecord([b"x"])
        claim = size - len(out) - 12 - 4 - 100
        if claim <= 0:
            break
        out += struct.pack("<Q", claim) + struct.pack("<I", masked_crc32c(struct.pack("<Q", claim)))
    return bytes(out)


@pytest.mark.parametrize("source", ["path", "gzip"])
def test_skipping_damage_after_every_record_is_linear(tmp_path: Path, source: str) -> None:
    # Each lying claim's payload CRC used to be computed by reading it, and each
    # resynchronization checked a whole 1 MiB window of headers before the first:
    # 1 MB took 65 s and 4 MB 434 s here. Now 4 MB takes about 1 s.
    data = _intact_then_lying(4 << 20)
    path = tmp_path / ("h.tfrecord.gz" if source == "gzip" else "h.tfrecord")
    path.write_bytes(gzip.compress(data, 1) if source == "gzip" else data)
    # How long it takes is for benchmarks/bench_damage.py.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rk.DataLossWarning)
        reader = rk.TFRecordReader(path, on_error="skip")
        kept = list(reader)
    assert set(kept) == {b"x"}  # every intact record, and nothing from a lying header
    assert len(kept) == data.count(frame_tfrecord([b"x"])) and len(kept) > 100_000
    assert sum(r.bytes_skipped for r in reader.stats.damaged_regions) == len(data) - 17 * len(kept)


def test_temporary_files_of_killed_writers_are_removed_by_the_next_writer(tmp_path: Path) -> None:
    import signal

    target = tmp_path / "a.tfrecord"
    script = ("import os, sys, recordkit as rk\n"
              "w = rk.TFRecordWriter(sys.argv[1])\n"
              "w.write_many([b'x' * 1000] * 1000); w.flush()\n"
              "print('ready', flush=True); sys.stdin.read()\n")
    with subprocess.Popen([sys.executable, "-c", script, str(target)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGKILL)
        child.wait()
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".a.tfrecord.tmp-")  # what kill -9 leaves
    (tmp_path / f".a.tfrecord.tmp-{os.getpid()}-0badc0de").write_bytes(b"")  # a live writer's: kept
    (tmp_path / ".b.tfrecord.tmp-999999999-0badc0de").write_bytes(b"")  # another name's: kept
    with rk.TFRecordWriter(target) as writer:
        writer.write(b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["a.tfrecord", f".a.tfrecord.tmp-{os.getpid()}-0badc0de", ".b.tfrecord.tmp-999999999-0badc0de"])


def test_fsync_flushes_the_file_then_the_folder(tmp_path: Path, fsynced: list[str]) -> None:
    with rk.TFRecordWriter(tmp_path / "a.tfrecord", fsync=True) as writer:
        writer.write(b"durable")
    assert len(fsynced) == 2 and ".a.tfrecord.tmp-" in fsynced[0] and fsynced[1] == str(tmp_path)
    with rk.TFRecordWriter(tmp_path / "b.tfrecord") as writer:
        writer.write(b"default")
    assert len(fsynced) == 2  # no fsync unless asked
    assert list(rk.TFRecordReader(tmp_path / "a.tfrecord")) == [b"durable"]


def _reference_skip(data: bytes) -> tuple[list[bytes], list[tuple[int, int]]]:
    """What on_error="skip" must give, by definition: records framed in turn; at
    damage, resume at the next offset where a whole record checks (its length,
    its length CRC, its payload and its payload CRC). Returns the records and
    the skipped (start, end) regions. Quadratic, and obviously so."""
    def whole_record_at(pos: int) -> int | None:
        if pos + 12 > len(data):
            return None
        header = data[pos : pos + 8]
        if struct.unpack("<I", data[pos + 8 : pos + 12])[0] != masked_crc32c(header):
            return None
        length = struct.unpack("<Q", header)[0]
        end = pos + 16 + length
        if end > len(data) or struct.unpack("<I", data[end - 4 : end])[0] != masked_crc32c(data[pos + 12 : end - 4]):
            return None
        return end

    records, skipped, pos = [], [], 0
    while pos < len(data):
        end = whole_record_at(pos)
        if end is not None:
            records.append(data[pos + 12 : end - 4])
            pos = end
            continue
        resume = next((p for p in range(pos + 1, len(data)) if whole_record_at(p) is not None), len(data))
        skipped.append((pos, resume))
        pos = resume
    return records, skipped


@settings(max_examples=200, deadline=None)
@given(records=st.lists(st.binary(max_size=40), min_size=1, max_size=8), data=st.data())
def test_property_skip_matches_the_definition_whatever_the_damage(tmp_path_factory, records: list[bytes], data) -> None:
    # Damage of every kind, including fake headers that check and claim long payloads,
    # so that the prefix-CRC search is compared with reading every candidate.
    stream = bytearray(frame_tfrecord(records))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(stream)))
        kind = data.draw(st.sampled_from(["flip", "insert", "delete", "fake header"]))
        if kind == "flip" and at < len(stream):
            stream[at] ^= data.draw(st.integers(1, 255))
        elif kind == "insert":
            stream[at:at] = data.draw(st.binary(min_size=1, max_size=20))
        elif kind == "delete":
            del stream[at : at + data.draw(st.integers(1, 20))]
        elif kind == "fake header":
            header = struct.pack("<Q", data.draw(st.integers(0, 2 * len(stream))))
            stream[at:at] = header + struct.pack("<I", masked_crc32c(header))
    expected_records, expected_regions = _reference_skip(bytes(stream))
    path = tmp_path_factory.mktemp("damage") / "data"
    path.write_bytes(bytes(stream))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rk.DataLossWarning)
        # Uncompressed, as the definition reads it: damage at the start can make
        # the first bytes a ZLIB header (08 d7 ...), which "auto" rightly takes
        # for a ZLIB stream when no record header there checks.
        reader = rk.TFRecordReader(path, compression=None, on_error="skip")
        got = list(reader)
    assert got == expected_records
    assert [(r.offset - (12 if r.kind == "corrupt_data" else 0), r.offset - (12 if r.kind == "corrupt_data" else 0) + r.bytes_skipped)
            for r in reader.stats.damaged_regions] == expected_regions


def test_one_native_scanner_shared_by_threads_takes_turns(tmp_path: Path) -> None:
    from recordkit import _native

    records = [b"r%d" % i for i in range(5000)]
    write(tmp_path / "a.tfrecord.gz", records, "gzip")  # decompression releases the GIL mid-call
    scanner = _native.RecordScanner(str(tmp_path / "a.tfrecord.gz"), name="a")
    got = _take_in_threads(lambda: scanner.next_batch(7, 1 << 20))  # "Already borrowed" before the fix
    assert sorted(got) == sorted(records)


# Issue 12, item 7: a file truncated by another process while it is read by
# path (mapped) must give a DataLossError, not SIGBUS. Run in a child so a
# signal shows as a return code instead of killing the test run.
_TRUNCATE_WHILE_READING = r"""
import os, sys
import recordkit as rk
path, cut, verify = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
reader = rk.TFRecordReader(path, verify=verify)
it = iter(reader)
first = next(it)
os.truncate(path, cut)
n = 1
try:
    for record in it:
        assert record == first, "a record changed: zeros were delivered"
        n += 1
except rk.DataLossError as e:
    print("DataLossError", e.kind, e.offset, n)
else:
    print("no error", n)
"""


@pytest.mark.parametrize("cut", [1 << 20, (1 << 20) + 1000])
@pytest.mark.parametrize("verify", [True, False])
def test_a_file_truncated_while_mapped_gives_data_loss_not_a_signal(
    tmp_path: Path, cut: int, verify: bool
) -> None:
    path = tmp_path / "big.tfrecord"
    payload = bytes(range(256)) * 400  # ~100 KB: batches leave most of the file unread
    write(path, [payload] * 200)
    out = subprocess.run(
        [sys.executable, "-c", _TRUNCATE_WHILE_READING, str(path), str(cut), "1" if verify else "0"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    kind, offset, read = out.stdout.split()[1:]
    assert out.stdout.startswith("DataLossError"), out.stdout
    assert kind == "truncated_while_reading"
    assert int(offset) <= cut
    assert int(read) < 200


_GZIP_BOMB = PEAK_RSS_MB + r"""
import sys
import recordkit as rk
path, source = sys.argv[1], sys.argv[2]
before = peak_rss_mb()
try:
    if source == "path":
        list(rk.TFRecordReader(path))
    else:
        with open(path, "rb") as f:
            list(rk.TFRecordReader(f))
except rk.RecordkitError as e:
    outcome = type(e).__name__ + ":" + str(getattr(e, "kind", ""))
else:
    outcome = "read"
print(outcome, peak_rss_mb() - before)
"""


def _gzip_bomb(path: Path, claim: int, zeros: int, data_crc: bytes = b"\0\0\0\0") -> None:
    """A GZIP file: one small record, then a header claiming `claim` bytes
    followed by `zeros` zero bytes (then `data_crc` when they are all there)."""
    header = struct.pack("<Q", claim)
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    parts = [z.compress(frame_tfrecord([b"first"]) + header + struct.pack("<I", masked_crc32c(header)))]
    chunk = bytes(1 << 20)
    for _ in range(zeros >> 20):
        parts.append(z.compress(chunk))
    if zeros >= claim:
        parts.append(z.compress(data_crc))
    parts.append(z.flush())
    path.write_bytes(b"".join(parts))


@pytest.mark.parametrize(
    ("claim", "zeros", "expected"),
    [
        (1 << 30, 384 << 20, "DataLossError:truncated_record"),  # the claim is a lie
        (384 << 20, 384 << 20, "DataLossError:corrupt_data"),  # all there, CRC wrong
    ],
)
def test_a_gzip_bomb_costs_no_memory(tmp_path: Path, claim: int, zeros: int, expected: str) -> None:
    path = tmp_path / "bomb.tfrecord.gz"
    _gzip_bomb(path, claim, zeros)
    assert path.stat().st_size < 2 << 20
    out = subprocess.run([sys.executable, "-c", _GZIP_BOMB, str(path), "path"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    outcome, grown_mb = out.stdout.split()
    assert outcome == expected
    # Without reading ahead the reader held all 384 MB it decompressed.
    assert int(grown_mb) < 100, f"peak memory grew {grown_mb} MB"


def test_a_large_gzip_record_is_read_back_after_reading_ahead(tmp_path: Path) -> None:
    big = os.urandom(1 << 16) * 1100  # 70 MB: beyond the read-ahead threshold
    records = [b"a", b"b" * 1000, big, b"c"]
    path = tmp_path / "large.tfrecord.gz"
    write(path, records, "gzip")
    assert list(rk.TFRecordReader(path)) == records
    # Skipping damage, a stream's record over 64 MiB is damage, reported, never held.
    with pytest.warns(rk.DataLossWarning, match="over 64 MiB"):
        reader = rk.TFRecordReader(path, on_error="skip")
        assert list(reader) == [b"a", b"b" * 1000, b"c"]
    assert [r.kind for r in reader.stats.damaged_regions] == ["too_large_to_skip"]
    # The same record with its CRC broken is caught by the read-ahead.
    raw = bytearray(gzip.decompress(path.read_bytes()))
    raw[12 + 1 + 4 + 12 + 1000 + 4 + 12 + 5] ^= 1
    path.write_bytes(gzip.compress(bytes(raw), 1))
    with pytest.raises(rk.DataLossError) as caught:
        list(rk.TFRecordReader(path))
    assert caught.value.kind == "corrupt_data" and caught.value.record_index == 2


def test_a_gzip_bomb_read_through_a_file_object_raises_under_a_memory_limit(tmp_path: Path) -> None:
    """A file object cannot be read twice, so its record is held as it arrives;
    past the memory limit that is an error, not an abort."""
    path = tmp_path / "bomb.tfrecord.gz"
    _gzip_bomb(path, 1 << 40, 1 << 30)
    script = (
        "import resource, sys\n"
        "import recordkit as rk\n"
        "usage = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()\n"
        "resource.setrlimit(resource.RLIMIT_AS, (usage + (512 << 20),) * 2)\n"
        "try:\n"
        "    list(rk.TFRecordReader(open(sys.argv[1], 'rb')))\n"
        "except rk.ResourceExhaustedError as e:\n"
        "    print('ResourceExhaustedError', isinstance(e, MemoryError))\n"
    )
    if not Path("/proc/self/statm").exists():
        pytest.skip("needs /proc")
    out = subprocess.run([sys.executable, "-c", script, str(path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["ResourceExhaustedError", "True"]


# --- following a growing file ---------------------------------------------------------


def test_follow_yields_what_was_appended_and_waits_for_a_partial_record(tmp_path: Path) -> None:
    path = tmp_path / "events.tfrecord"
    path.write_bytes(b"")
    reader = rk.TFRecordReader(path, follow=True)
    assert list(reader) == []
    records = [b"one", b"two", b"three" * 1000, b"four"]
    frames = frame_tfrecord(records)
    ends = list(itertools.accumulate(len(r) + 16 for r in records))
    cuts = [0, 15, 16 + 3, 2 * 16 + 6 + 5, len(frames) - 20 - 3, len(frames) - 1, len(frames)]
    seen: list[bytes] = []
    for before, after in itertools.pairwise(cuts):
        with open(path, "ab") as f:  # the writer adds bytes, cut anywhere, even mid-header
            f.write(frames[before:after])
        seen += list(reader)
        assert seen == records[: sum(end <= after for end in ends)]  # every whole record, nothing more
    assert seen == [b"one", b"two", b"three" * 1000, b"four"]
    assert reader.position == len(frames)
    assert reader.stats.records == 4


def test_follow_goes_on_from_the_first_record_not_yielded(tmp_path: Path) -> None:
    path = write(tmp_path / "f.tfrecord", [b"%d" % i for i in range(3000)])
    reader = rk.TFRecordReader(path, follow=True)
    first = list(itertools.islice(reader, 1500))  # a pass stopped early, mid-batch
    with open(path, "ab") as f:
        f.write(frame_tfrecord([b"appended"]))
    assert first + list(reader) == [b"%d" % i for i in range(3000)] + [b"appended"]


def test_follow_still_reports_real_damage(tmp_path: Path) -> None:
    data = bytearray(frame_tfrecord([b"one", b"two"]))
    data[-6] ^= 1  # the last record is whole, and its data CRC fails
    path = tmp_path / "f.tfrecord"
    path.write_bytes(bytes(data))
    reader = rk.TFRecordReader(path, follow=True)
    with pytest.raises(rk.DataLossError, match="CRC"):
        list(reader)


def test_follow_refuses_what_it_cannot_follow(tmp_path: Path) -> None:
    path = write(tmp_path / "f.tfrecord.gz", [b"x"], "gzip")
    with pytest.raises(ValueError, match="uncompressed"):
        rk.TFRecordReader(path, follow=True)
    plain = write(tmp_path / "f.tfrecord", [b"x"])
    with open(plain, "rb") as f, pytest.raises(ValueError, match="file object"):
        rk.TFRecordReader(f, follow=True)
    with pytest.raises(ValueError, match="skip"):
        rk.TFRecordReader(plain, follow=True, on_error="skip")
    with pytest.raises(AttributeError, match="follow=True"):
        rk.TFRecordReader(plain).position
    closed = rk.TFRecordReader(plain, follow=True)
    closed.close()
    with pytest.raises(ValueError, match="closed reader"):
        list(closed)
