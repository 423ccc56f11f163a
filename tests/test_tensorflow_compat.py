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


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_tensorflow_reads_compressed_output_of_many_blocks(tmp_path: Path, compression: str, threads: int) -> None:
    # About 5 MB of records: deflated in 1 MiB blocks (on every core) joined
    # into one stream, with a flush point in the middle.
    rng = random.Random(11)
    records = [rng.randbytes(rng.randrange(0, 64)) * rng.randrange(1, 40) for _ in range(5000)]
    path = tmp_path / "blocks.tfrecord"
    rk.set_num_threads(threads)
    try:
        with rk.TFRecordWriter(path, compression=compression) as writer:
            writer.write_many(records[:2000])
            writer.flush()
            writer.write_many(records[2000:])
    finally:
        rk.set_num_threads(None)
    assert tf_read(path, compression) == (records, None)


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


# --- Examples, parsing, tensors (issue: messages and parsing) -----------------------------

import numpy as np  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_names = st.text(alphabet="abcdefgh_é", min_size=1, max_size=5)
_values = st.one_of(
    st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=4).map(lambda v: np.array(v, np.int64)),
    st.lists(st.floats(width=32, allow_nan=False), max_size=4).map(lambda v: np.array(v, np.float32)),
    st.lists(st.binary(max_size=6), max_size=4).map(lambda v: np.array(v, dtype=object) if v else np.array([], object)),
)


def _tf_feature(value: np.ndarray):
    if value.dtype == np.int64:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=value.tolist()))
    if value.dtype == np.float32:
        return tf.train.Feature(float_list=tf.train.FloatList(value=value.tolist()))
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(value)))


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(_names, _values, max_size=5))
def test_examples_match_protobuf_deterministic_bytes(features: dict) -> None:
    proto = tf.train.Example(features=tf.train.Features(feature={k: _tf_feature(v) for k, v in features.items()}))
    expected = proto.SerializeToString(deterministic=True)
    assert rk.encode_example(features) == expected
    assert rk.train.Example.FromString(expected).SerializeToString() == expected


@settings(max_examples=25, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.lists(st.integers(-5, 5), max_size=3), max_size=3), max_size=6))
def test_parse_example_matches_tensorflow(rows: list) -> None:
    records = [rk.encode_example({k: np.array(v, np.int64) for k, v in row.items()}) for row in rows]
    specs = {
        "a": (rk.VarLenFeature("int64"), tf.io.VarLenFeature(tf.int64)),
        "b": (rk.RaggedFeature("int64", row_splits_dtype="int64"), tf.io.RaggedFeature(tf.int64, row_splits_dtype=tf.int64)),
        "c": (rk.FixedLenFeature([1], "int64", default_value=[9]), tf.io.FixedLenFeature([1], tf.int64, default_value=[9])),
    }
    try:
        want = tf.io.parse_example(tf.constant(records, dtype=tf.string), {k: v[1] for k, v in specs.items()})
    except tf.errors.InvalidArgumentError:
        with pytest.raises(rk.ParseError):
            rk.parse_example(records, {k: v[0] for k, v in specs.items()})
        return
    got = rk.parse_example(records, {k: v[0] for k, v in specs.items()})
    assert got["a"].indices.tolist() == want["a"].indices.numpy().tolist()
    assert got["a"].values.tolist() == want["a"].values.numpy().tolist()
    assert got["a"].dense_shape.tolist() == want["a"].dense_shape.numpy().tolist()
    assert got["b"].row_splits.tolist() == want["b"].row_splits.numpy().tolist()
    assert got["b"].values.tolist() == want["b"].flat_values.numpy().tolist()
    assert got["c"].tolist() == want["c"].numpy().tolist()


def test_tensorflow_reads_write_examples(tmp_path: Path) -> None:
    columns = {"label": np.arange(50), "vec": np.random.rand(50, 3).astype(np.float32),
               "name": [f"n{i}".encode() for i in range(50)], "tokens": [list(range(i % 4)) for i in range(50)]}
    paths = rk.write_examples(tmp_path / "w.tfrecord.gz", columns, compression="gzip", shards=2)
    spec = {"label": tf.io.FixedLenFeature([], tf.int64), "vec": tf.io.FixedLenFeature([3], tf.float32),
            "name": tf.io.FixedLenFeature([], tf.string), "tokens": tf.io.VarLenFeature(tf.int64)}
    ds = tf.data.TFRecordDataset([str(p) for p in paths], compression_type="GZIP").batch(100).map(
        lambda b: tf.io.parse_example(b, spec))
    batch = next(iter(ds))
    assert batch["label"].numpy().tolist() == list(range(50))
    assert np.array_equal(batch["vec"].numpy(), columns["vec"])
    assert batch["name"].numpy().tolist() == columns["name"]
    assert tf.sparse.to_dense(batch["tokens"]).numpy().tolist() == rk.parse_example(
        [r for p in paths for r in rk.TFRecordReader(p)], {"tokens": rk.VarLenFeature("int64")})["tokens"].to_dense().tolist()


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                                   "uint16", "uint32", "uint64", "bool", "complex64", "complex128", "string"])
def test_serialize_tensor_matches_tensorflow(dtype: str) -> None:
    rng = np.random.default_rng(3)
    if dtype == "string":
        array = np.array([[b"a", b""], [b"\xff\x00", b"xyz"]], dtype=object)
    elif dtype == "bool":
        array = rng.random((2, 3)) > 0.5
    elif dtype.startswith("complex"):
        array = (rng.random((2, 2)) + 1j * rng.random((2, 2))).astype(dtype)
    else:
        array = (rng.random((3, 2)) * 100).astype(dtype)
    tf_bytes = tf.io.serialize_tensor(tf.constant(array)).numpy()
    assert rk.serialize_tensor(array) == tf_bytes
    back = rk.parse_tensor(tf_bytes, dtype)
    assert back.tolist() == array.tolist()
    scalar = np.array(array.reshape(-1)[0], dtype=array.dtype)
    assert rk.serialize_tensor(scalar) == tf.io.serialize_tensor(tf.constant(scalar)).numpy()


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_damaged_compressed_streams_keep_more_than_tensorflow(tmp_path: Path, compression: str) -> None:
    """TensorFlow drops the rest of its 256 KiB decode buffer when inflate fails;
    recordkit delivers every record whose CRC checks, then reports the damage."""
    rng = random.Random(11)
    records = [bytes([i % 251]) * rng.randrange(10, 300) + rng.randbytes(50) for i in range(2000)]
    clean_path = tmp_path / "clean"
    with rk.TFRecordWriter(clean_path, compression=compression) as writer:
        writer.write_many(records)
    clean = clean_path.read_bytes()
    damaged = tmp_path / "damaged"
    for _ in range(15):
        data = bytearray(clean)
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        damaged.write_bytes(bytes(data))
        want, tf_error = tf_read(damaged, compression)
        got: list[bytes] = []
        with pytest.raises(rk.DataLossError):
            got.extend(rk.TFRecordReader(damaged, compression=compression))
        assert tf_error is not None
        assert got == records[: len(got)], "every record delivered is intact"
        assert got[: len(want)] == want, "TensorFlow's records are a prefix of recordkit's"


def test_tensorflow_reads_what_convert_writes(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({"id": pa.array(range(50), pa.int64()), "name": [f"n{i}" for i in range(50)],
                      "tokens": [[i] * (i % 4) for i in range(50)]})
    pq.write_table(table, tmp_path / "t.parquet")
    shards = rk.convert(tmp_path / "t.parquet", tmp_path / "out" / "t.tfrecord.gz", shards=3, output_compression="gzip")
    spec = {"id": tf.io.FixedLenFeature([], tf.int64), "name": tf.io.FixedLenFeature([], tf.string),
            "tokens": tf.io.VarLenFeature(tf.int64)}
    ds = tf.data.TFRecordDataset(shards, compression_type="GZIP").batch(100).map(lambda b: tf.io.parse_example(b, spec))
    [batch] = list(ds)
    assert batch["id"].numpy().tolist() == list(range(50))
    assert batch["name"].numpy().tolist()[:2] == [b"n0", b"n1"]
    assert tf.sparse.to_dense(batch["tokens"]).numpy()[3].tolist() == [3, 3, 3]


def test_read_table_ragged_feature_lists_match_tensorflow(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from test_tables import RAGGED_LISTS, _ragged_sequence_records

    records = _ragged_sequence_records(23)
    with rk.TFRecordWriter(tmp_path / "ragged.tfrecord") as writer:
        writer.write_many(records)
    table = rk.read_table(tmp_path / "ragged.tfrecord", sequence_features=RAGGED_LISTS)
    partition_types = {rk.RaggedFeature.RowSplits: tf.io.RaggedFeature.RowSplits,
                       rk.RaggedFeature.ValueRowIds: tf.io.RaggedFeature.ValueRowIds}

    def tf_partition(part):  # type: ignore[no-untyped-def]
        if isinstance(part, rk.RaggedFeature.UniformRowLength):
            return tf.io.RaggedFeature.UniformRowLength(part.length)
        return partition_types[type(part)](part.key)

    spec = {name: tf.io.RaggedFeature(tf.as_dtype(s.dtype), value_key=s.value_key,
                                      partitions=[tf_partition(p) for p in s.partitions])
            for name, s in RAGGED_LISTS.items()}
    _, expected, _ = tf.io.parse_sequence_example(tf.constant(records), sequence_features=spec)
    for name in RAGGED_LISTS:
        assert table.column(name).to_pylist() == expected[name].to_list(), name


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_tensorflow_reads_every_compression_level_and_a_flushed_stream_still_open(tmp_path: Path, compression: str) -> None:
    records = [bytes(random.Random(i).choices(b"abcdefgh", k=5000)) for i in range(20)]
    sizes = []
    for level in (0, 9):
        path = tmp_path / f"l{level}"
        with rk.TFRecordWriter(path, rk.TFRecordOptions(compression, compression_level=level)) as writer:
            for r in records:
                writer.write(r)
        assert tf_read(path, compression.lower()) == (records, None)
        sizes.append(path.stat().st_size)
    assert sizes[0] > 2 * sizes[1]
    path = tmp_path / "open"
    with rk.TFRecordWriter(path, compression.lower(), atomic=False) as writer:
        for i, r in enumerate(records[:3]):
            writer.write(r)
            writer.flush()
            got = [x.numpy() for x in tf.data.TFRecordDataset(str(path), compression_type=compression)]
            assert got == records[: i + 1]
            assert [bytes(x) for x in tf.compat.v1.io.tf_record_iterator(str(path), compression)] == records[: i + 1]


_RAW_TYPES = [("bool", tf.bool), ("int8", tf.int8), ("int16", tf.int16), ("int32", tf.int32), ("int64", tf.int64),
              ("uint8", tf.uint8), ("uint16", tf.uint16), ("float16", tf.float16), ("float32", tf.float32),
              ("float64", tf.float64), ("complex64", tf.complex64), ("complex128", tf.complex128)]


@pytest.mark.parametrize("name, tf_type", _RAW_TYPES)
@pytest.mark.parametrize("little_endian", [True, False])
def test_decode_raw_matches_tensorflow(name: str, tf_type: object, little_endian: bool) -> None:
    rng = random.Random(name)
    size = tf_type.size  # type: ignore[attr-defined]
    shape_cases = [
        (rng.randbytes(size * 3), None),
        ([[rng.randbytes(size * 2) for _ in range(3)] for _ in range(2)], None),
        ([rng.randbytes(rng.randrange(0, size * 4)) for _ in range(5)], size * 2),
        ([], None),
    ]
    for value, fixed in shape_cases:
        if fixed is not None and name in ("bool", "float16", "complex64", "complex128"):
            continue  # TensorFlow's DecodePaddedRaw has no CPU kernel for these
        ours = rk.decode_raw(value, name, little_endian=little_endian, fixed_length=fixed)
        if fixed is None:
            theirs = tf.io.decode_raw(tf.constant(value, tf.string), tf_type, little_endian=little_endian).numpy()
        else:
            theirs = tf.io.decode_raw(tf.constant(value, tf.string), tf_type, little_endian=little_endian,
                                      fixed_length=fixed).numpy()
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (value, fixed)
        if name == "bool":  # TensorFlow keeps each byte as it was (0x4b as a True); NumPy's True is 1
            assert (ours == theirs).all()
        else:
            assert ours.tobytes() == theirs.tobytes()  # bit for bit: NaNs included


def test_decode_raw_refuses_what_tensorflow_refuses() -> None:
    for args in ([b"abcd", b"abc"], "uint8", None), ([b"abc"], "int32", None), ([b"abc"], "int32", 5), ([b"a"], "int8", 0):
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.io.decode_raw(args[0], args[1], fixed_length=args[2]) if args[2] is not None else tf.io.decode_raw(
                args[0], args[1])
        with pytest.raises(ValueError):
            rk.decode_raw(args[0], args[1], fixed_length=args[2])


def test_decode_json_example_matches_tensorflow() -> None:
    from google.protobuf import json_format
    from tensorflow.core.example import example_pb2, feature_pb2

    examples = [
        example_pb2.Example(),
        example_pb2.Example(features=feature_pb2.Features()),
    ]
    full = example_pb2.Example()
    full.features.feature["b"].float_list.value.extend([0.1, float("nan"), float("-inf"), 3e38])
    full.features.feature["a"].int64_list.value.extend([1, -5, 2**63 - 1])
    full.features.feature["c"].bytes_list.value.extend([b"abc", b"\xff\x00", b""])
    full.features.feature["d"].SetInParent()
    full.features.feature["e"].int64_list.SetInParent()
    examples.append(full)
    texts = [json_format.MessageToJson(e) for e in examples]
    theirs = tf.io.decode_json_example(texts).numpy()
    ours = rk.decode_json_example(texts)
    assert ours.shape == (3,)
    for mine, tf_bytes, text in zip(ours, theirs, texts):
        assert example_pb2.Example.FromString(mine) == example_pb2.Example.FromString(tf_bytes)
        assert rk.train.Example.FromString(mine).to_json() == rk.train.Example.from_json(text).to_json()
        assert json_format.Parse(rk.train.Example.FromString(mine).to_json(), example_pb2.Example()) == \
            example_pb2.Example.FromString(tf_bytes)
    with pytest.raises(rk.ParseError, match="Index: 1"):
        rk.decode_json_example(["{}", '{"features": {"feature": {"a": {"int64List": {"value": ["x"]}}}}}'])
