"""Fuzz targets: each takes one input's bytes and either returns or raises one of
the errors recordkit documents for bad input. Anything else is a finding: another
exception, a broken invariant (an ``AssertionError``), a crash, a hang, or memory
beyond the child's limit (``run.py`` watches those).

Each target also checks what must hold when recordkit accepts an input, so the
fuzzer finds silent corruption, not only crashes: records read without error
frame back to the very bytes read, and an index can only lead to real records.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
import warnings
import gzip
from typing import Any, Callable


import recordkit as rk

__all__ = ["TARGETS", "EXPECTED", "OUTCOMES", "SPEC", "TENSOR_DTYPES", "frame"]

# What bad input may raise: recordkit's own errors, and the documented
# TypeError / ValueError for arguments (ParseError is both RecordkitError and ValueError).
EXPECTED: tuple[type[BaseException], ...] = (rk.RecordkitError, ValueError, TypeError)

# What each call of the current input did ("ok" or the error's class and the start of
# its message): the runner treats an input reaching a new combination as new ground.
OUTCOMES: list[str] = []


def attempt(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, or None when it raised an expected error; records the outcome."""
    try:
        result = call(*args)
    except EXPECTED as e:
        # Numbers (offsets, indices) left out: they would make every input look new.
        OUTCOMES.append(f"{type(e).__name__}:{re.sub(r'[0-9]+', '#', str(e))[:24]}")
        return None
    OUTCOMES.append("ok")
    return result


_SCRATCH = tempfile.mkdtemp(prefix="recordkit-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)


def frame(records: list[bytes]) -> bytes:
    """TFRecord framing, written by recordkit's own writer into memory."""
    out = io.BytesIO()
    with rk.TFRecordWriter(out) as writer:
        writer.write_many(records)
    return out.getvalue()


def _scratch(name: str, data: bytes) -> str:
    path = os.path.join(_SCRATCH, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def framing(data: bytes) -> None:
    """The framing reader over the same bytes by path (mapped), file object and GZIP,
    raising and skipping, counting, and with the compression guessed; and
    ``read_examples`` of them on one thread and on two, which must agree."""
    path = _scratch("framing.tfrecord", data)
    records = attempt(lambda: list(rk.TFRecordReader(path, compression=None)))
    if records is not None:
        # Accepted whole: the records are exactly the file, nothing changed or lost.
        assert frame(records) == data, "records read without error do not frame back to the file"
        assert list(rk.TFRecordReader(io.BytesIO(data), compression=None)) == records
        assert rk.count_records(path, compression=None) == len(records)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reader = rk.TFRecordReader(path, compression=None, on_error="skip")
        kept = list(reader)
        OUTCOMES.append(f"skipped {min(len(reader.stats.damaged_regions), 3)}")
        if records is not None:
            assert kept == records and not reader.stats.damaged_regions
        gz = _scratch("framing.tfrecord.gz", gzip.compress(data, 1))
        again = attempt(lambda: list(rk.TFRecordReader(gz, compression="gzip", on_error="skip")))
        assert again == kept, "GZIP and plain reads of the same bytes differ"
    attempt(lambda: list(rk.TFRecordReader(path)))  # bytes that look compressed are read as such
    attempt(lambda: list(rk.OFRecordReader(path)))
    # One thread checks CRCs while framing; with more, the threads that parse check them:
    # the same batches, then the same error, either way. Batches of 2 are read ahead;
    # a batch larger than the file is made on the caller's thread.
    for batch_size in (2, 1000):
        by_threads = []
        for threads in (1, 2):
            rk.set_num_threads(threads)
            try:
                by_threads.append(_examples_read(path, batch_size))
            finally:
                rk.set_num_threads(None)
        assert by_threads[0] == by_threads[1], "read_examples differs between one thread and two"


_INDEXED_PREFIX: list[bytes] = []


def _indexed_prefix() -> bytes:
    """About 5 MB of intact Examples, built once: enough that, after the first batch,
    threads reading ahead verify the rest of the file's frames on every thread."""
    if not _INDEXED_PREFIX:
        records = [rk.encode_example({"x": i, "s": bytes([i % 251]) * (i * 7919 % 3000)}) for i in range(3300)]
        _INDEXED_PREFIX.append(frame(records))
    return _INDEXED_PREFIX[0]


def indexed_framing(data: bytes) -> None:
    """``read_examples`` of the input after 5 MB of intact records, on one thread (one
    record framed after another) and on seven (the frames verified ahead on every thread,
    in ranges stitched together): the same batches, then the same error, either way."""
    path = _scratch("indexed.tfrecord", _indexed_prefix() + data)
    by_threads = []
    for threads in (1, 7):
        rk.set_num_threads(threads)
        try:
            by_threads.append(_examples_read(path, 500))
        finally:
            rk.set_num_threads(None)
    assert by_threads[0] == by_threads[1], "read_examples differs between one thread and seven"


EXAMPLES_SPEC = {"x": rk.FixedLenFeature([], "int64", default_value=-1),
                 "s": rk.FixedLenFeature([], "string", default_value=b"")}


def _examples_read(path: str, batch_size: int) -> tuple[list[dict[str, list]], str]:
    """The batches `read_examples` gives of `path` and the error it ends with, if any."""
    batches: list[dict[str, list]] = []
    ended = "the end"
    try:
        for batch in rk.read_examples(path, EXAMPLES_SPEC, batch_size=batch_size, compression=None):
            batches.append({key: column.tolist() for key, column in batch.items()})
    except EXPECTED as e:
        ended = f"{type(e).__name__}: {e}"
    OUTCOMES.append(ended.split(":")[0])
    return batches, ended


def _read_map(feature_map: Any) -> None:
    """Reads every feature of a message's map: the parts a message makes only when touched."""
    for _key, feature in feature_map.items():
        kind = feature.WhichOneof("kind")
        if kind is not None:
            values = getattr(feature, kind).value
            if len(values):
                values[0], values[-1]
            list(values)


def wire(data: bytes) -> None:
    """The message decoders, and the message classes: every part read, and a round trip."""
    for decode in (rk.decode_example, rk.decode_sequence_example, rk.decode_ofrecord):
        attempt(decode, data)
    message = attempt(rk.train.Example.FromString, data)
    if message is not None:
        _read_map(message.features.feature)
        str(message)
        again = rk.train.Example.FromString(message.SerializeToString())
        assert again == message, "an Example changed on a round trip"
    sequence = attempt(rk.train.SequenceExample.FromString, data)
    if sequence is not None:
        _read_map(sequence.context.feature)
        for steps in sequence.feature_lists.feature_list.values():
            _read_map({str(i): step for i, step in enumerate(steps.feature)})
        str(sequence)
        again = rk.train.SequenceExample.FromString(sequence.SerializeToString())
        assert again == sequence, "a SequenceExample changed on a round trip"


SPEC = {
    "label": rk.FixedLenFeature([], "int64", default_value=-1),
    "pair": rk.FixedLenFeature([2], "float32", default_value=[0.0, 0.0]),
    "tags": rk.VarLenFeature("string"),
    "sparse": rk.SparseFeature(index_key="sparse_index", value_key="sparse_value", dtype="float32", size=100),
    "ragged": rk.RaggedFeature("int64", value_key="ragged", partitions=[rk.RaggedFeature.RowSplits("ragged_splits")]),
    "rows": rk.RaggedFeature("float32", value_key="rows", partitions=[rk.RaggedFeature.ValueRowIds("rows_ids")]),
}


def parse_example(data: bytes) -> None:
    """parse_example with a spec of every kind, alone and in a batch with an intact record."""
    intact = rk.encode_example({"label": 1, "pair": [1.0, 2.0]})
    attempt(rk.parse_example, [data], SPEC)
    attempt(rk.parse_example, [intact, data, data[: len(data) // 2]], SPEC)
    attempt(rk.parse_single_example, data, SPEC)


SEQUENCE_FEATURES = {"tokens": rk.VarLenFeature("int64"),
                     "frames": rk.FixedLenSequenceFeature([2], "float32", allow_missing=True),
                     "nested": rk.RaggedFeature("int64", value_key="nv", partitions=[rk.RaggedFeature.RowSplits("ns")])}
OFRECORD_REQUESTS = [("d", "float64"), ("i", "int32"), ("l", "int64"), ("f", "float32"), ("s", "string")]


def tables(data: bytes) -> None:
    """read_table over the input as a record of a TFRecord file (an Example with a spec
    of every kind and inferred, a SequenceExample) and of an OFRecord part file, and the
    OFRecord column parser alone. What it accepts has one row per record."""
    from recordkit import _native

    attempt(_native.parse_example_columns, [data], OFRECORD_REQUESTS, True, "oneflow")
    intact = rk.encode_example({"label": 1, "pair": [1.0, 2.0]})
    # The schema survey directly, the input repeated so that it meets its own keys by position.
    attempt(_native.survey_features, [intact, data, data], "tensorflow", "example")
    attempt(_native.survey_features, [data, data], "oneflow", "map")
    path = _scratch("tables.tfrecord", frame([intact, data]))
    for table in (
        attempt(rk.read_table, path, SPEC),
        attempt(rk.read_table, path),
        attempt(lambda: rk.read_table(path, {"label": SPEC["label"]}, sequence_features=SEQUENCE_FEATURES)),
        attempt(lambda: rk.read_table(path, strings="utf8")),
    ):
        assert table is None or table.num_rows == 2, "read_table gave a row count other than the records'"
    if not data:
        return  # OneFlow's reader refuses empty records, so recordkit writes none
    part = os.path.join(_SCRATCH, "part-00000")
    with rk.OFRecordWriter(part) as writer:
        writer.write(data)
    table = attempt(rk.read_table, part)
    assert table is None or table.num_rows == 1, "read_table gave a row count other than the OFRecord's"


TENSOR_DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32", "int64",
                 "uint32", "uint64", "bool", "complex64", "complex128", "string"]


def parse_tensor(data: bytes) -> None:
    """parse_tensor: the first byte picks the dtype, the rest is the TensorProto."""
    if data:
        attempt(rk.parse_tensor, data[1:], TENSOR_DTYPES[data[0] % len(TENSOR_DTYPES)])


_INDEXED_RECORDS = [b"zero", b"one" * 10, b"", b"three" * 100, b"four"]


def index(data: bytes) -> None:
    """A hostile index file beside an intact record file: it may fail, never lead elsewhere."""
    folder = os.path.join(_SCRATCH, "index")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "data.tfrecord")
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(frame(_INDEXED_RECORDS))
    idx = _scratch("index/data.tfrecord.idx", data)
    ds = attempt(rk.IndexedDataset, path, None, idx)
    if ds is None:
        return
    items = [attempt(ds.__getitem__, i) for i in range(min(len(ds), 64))]
    attempt(ds.__getitem__, list(range(min(len(ds), 8))))
    assert all(item is None or item in _INDEXED_RECORDS for item in items), "an index led to bytes that are not a record"


TARGETS: dict[str, Callable[[bytes], None]] = {
    "framing": framing,
    "indexed_framing": indexed_framing,
    "wire": wire,
    "parse_example": parse_example,
    "parse_tensor": parse_tensor,
    "index": index,
    "tables": tables,
}

if os.environ.get("RECORDKIT_FUZZ_SELFTEST"):
    # For the runner's own test: a crash, and an unexpected exception, both easy to reach.
    def _selftest(data: bytes) -> None:
        if len(data) >= 100:
            os.abort()
        if b"\x80" in data:
            raise KeyError("planted")

    TARGETS["selftest"] = _selftest

