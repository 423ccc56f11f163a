"""Differential tests: recordkit's parsers against TensorFlow's on random specs and
records (skipped when tensorflow-cpu is absent).

Every spec kind (FixedLen with shapes and defaults, VarLen, Sparse, Ragged with
each partition kind, FixedLenSequence) over records whose features are missing,
kindless, or of any kind and length; records also encoded by hand in the ways
protobuf and TensorFlow's fast parser both accept (unpacked lists, packed lists
with padded varints, value before key, unknown top-level fields, features split
over two maps, duplicate keys); and SequenceExamples. Outputs are compared value
by value, shape by shape and dtype by dtype, errors by whether both refuse.
The same records in a file read by ``rk.read_table`` give parse_example's rows.

Not generated, because there recordkit follows protobuf by design (docs/guarantees.md, "Where recordkit differs"):
a duplicate key whose last entry is a Feature with no kind (TensorFlow skips
such entries and uses an earlier one; protobuf's last entry wins).
"""

from __future__ import annotations

import os
import struct
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import recordkit as rk
from conftest import table_rows

tf = pytest.importorskip("tensorflow")

VALUE_KEYS = ["a", "b", "c"]
DTYPES = ["int64", "float32", "string"]
TF_DTYPE = {"int64": tf.int64, "float32": tf.float32, "string": tf.string}


def feature_value(kind, values):
    if kind == "none":
        return rk.train.Feature()
    if kind == "int64":
        return rk.train.Feature(int64_list=rk.train.Int64List(value=values))
    if kind == "float32":
        return rk.train.Feature(float_list=rk.train.FloatList(value=[float(v) for v in values]))
    return rk.train.Feature(bytes_list=rk.train.BytesList(value=[b"v%d" % v for v in values]))


feature_st = st.tuples(st.sampled_from(["none", "int64", "float32", "string"]),
                       st.lists(st.integers(0, 3), max_size=4))
record_st = st.fixed_dictionaries({}, optional={
    "a": feature_st, "b": feature_st, "c": feature_st,
    "i": st.tuples(st.just("int64"), st.lists(st.integers(0, 3), max_size=3)),
    "j": st.tuples(st.just("int64"), st.lists(st.integers(0, 3), max_size=3)),
})


def default_for(dtype, n):
    return {"int64": [7] * n, "float32": [0.5] * n, "string": [b"d"] * n}[dtype]


PARTITIONS = ["uniform1", "uniform2", "lengths", "splits", "rowids", "starts", "limits"]
PARTITION_CLASS = {"lengths": "RowLengths", "splits": "RowSplits", "rowids": "ValueRowIds", "starts": "RowStarts", "limits": "RowLimits"}


def partitions(names: tuple, module) -> tuple:
    """The partitions named, outermost first; the first keyed one reads key "i", the second "j"."""
    keys = iter(["i", "j"])
    return tuple(module.RaggedFeature.UniformRowLength(int(name[-1])) if name.startswith("uniform")
                 else getattr(module.RaggedFeature, PARTITION_CLASS[name])(next(keys)) for name in names)


spec_st = st.one_of(
    st.tuples(st.just("fixed"), st.sampled_from(DTYPES), st.sampled_from([(), (1,), (2,), (2, 1)]), st.booleans()),
    st.tuples(st.just("varlen"), st.sampled_from(DTYPES)),
    st.tuples(st.just("ragged"), st.sampled_from(DTYPES), st.lists(st.sampled_from(PARTITIONS), max_size=2).map(tuple),
              st.sampled_from(["int32", "int64"])),
    st.tuples(st.just("flseq"), st.sampled_from(DTYPES), st.sampled_from([(), (2,), (2, 1)]), st.booleans()),
    st.tuples(st.just("sparse"), st.sampled_from(DTYPES), st.booleans(), st.sampled_from([("i",), ("i", "j")])),
)
specs_st = st.dictionaries(st.sampled_from(VALUE_KEYS), spec_st, min_size=1, max_size=3)


def build(key, spec):
    kind = spec[0]
    if kind == "fixed":
        _, dt, shape, has_default = spec
        n = int(np.prod(shape)) if shape else 1
        d = None
        if has_default:
            d = default_for(dt, n)
            d = np.array(d, dtype=object if dt == "string" else dt).reshape(shape).tolist() if shape else d[0]
        return rk.FixedLenFeature(list(shape), dt, default_value=d), tf.io.FixedLenFeature(list(shape), TF_DTYPE[dt], default_value=d)
    if kind == "varlen":
        return rk.VarLenFeature(spec[1]), tf.io.VarLenFeature(TF_DTYPE[spec[1]])
    if kind == "ragged":
        _, dt, part, splits = spec
        rp, tp = partitions(part, rk), partitions(part, tf.io)
        return (rk.RaggedFeature(dt, partitions=rp, row_splits_dtype=splits),
                tf.io.RaggedFeature(TF_DTYPE[dt], partitions=tp, row_splits_dtype=getattr(tf, splits)))
    if kind == "flseq":
        _, dt, shape, has_default = spec
        d = default_for(dt, 1)[0] if has_default else None
        return (rk.FixedLenSequenceFeature(list(shape), dt, allow_missing=True, default_value=d),
                tf.io.FixedLenSequenceFeature(list(shape), TF_DTYPE[dt], allow_missing=True, default_value=d))
    _, dt, already_sorted, index_keys = spec
    index_key, size = (index_keys[0], 5) if len(index_keys) == 1 else (list(index_keys), [5, 4])
    return (rk.SparseFeature(index_key, key, dt, size, already_sorted=already_sorted),
            tf.io.SparseFeature(index_key, key, TF_DTYPE[dt], size, already_sorted=already_sorted))


def valid(x):
    if not isinstance(x, tf.RaggedTensor):
        return True
    inner = x.flat_values.shape[0]
    for splits in reversed([s.numpy() for s in x.nested_row_splits]):
        if len(splits) == 0 or splits[0] != 0 or (np.diff(splits) < 0).any() or splits[-1] != inner:
            return False
        inner = len(splits) - 1
    return True


def canon_tf(x):
    if isinstance(x, tf.SparseTensor):
        return ("sparse", x.indices.numpy().tolist(), canon_vals(x.values.numpy()), x.dense_shape.numpy().tolist())
    if isinstance(x, tf.RaggedTensor):
        return ("ragged", list(x.flat_values.shape), canon_vals(x.flat_values.numpy()), [s.numpy().tolist() for s in x.nested_row_splits],
                [str(s.dtype.name) for s in x.nested_row_splits])
    v = np.asarray(x.numpy(), dtype=object if x.dtype == tf.string else None)
    return ("dense", list(v.shape), canon_vals(v), dtype_name(v))


def dtype_name(v):
    return "object" if v.dtype == object else str(v.dtype)


def canon_vals(v):
    v = np.asarray(v)
    return v.reshape(-1).tolist()


def canon_rk(x):
    if isinstance(x, rk.SparseArray):
        return ("sparse", np.asarray(x.indices).tolist(), canon_vals(x.values), np.asarray(x.dense_shape).tolist())
    if isinstance(x, rk.RaggedArray):
        return ("ragged", list(np.asarray(x.flat_values).shape), canon_vals(x.flat_values), [np.asarray(s).tolist() for s in x.nested_row_splits],
                [str(np.asarray(s).dtype) for s in x.nested_row_splits])
    v = np.asarray(x)
    return ("dense", list(v.shape), canon_vals(v), dtype_name(v))


def run_tf(fn):
    try:
        return "ok", fn()
    except (tf.errors.InvalidArgumentError,) as e:
        return "InvalidArgument", e.message
    except ValueError as e:
        return "ValueError", str(e)
    except TypeError as e:
        return "TypeError", str(e)


def run_rk(fn):
    try:
        return "ok", fn()
    except rk.ParseError as e:
        return "InvalidArgument", str(e)
    except ValueError as e:
        return "ValueError", str(e)
    except TypeError as e:
        return "TypeError", str(e)


def compare(tf_fn, rk_fn, context) -> None:
    """Same outputs, or both refuse (a ParseError is also a ValueError, as TensorFlow's
    Python-side shape checks raise). recordkit may refuse where TensorFlow returns
    an inconsistent RaggedTensor (it does not validate partitions), or a
    SparseFeature whose records have more indices than values and others fewer."""
    ts, tv = run_tf(tf_fn)
    rs, rv = run_rk(rk_fn)
    if ts == "ValueError" and rs == "InvalidArgument":
        return
    if ts == "ok" and rs == "InvalidArgument" and not all(valid(v) for v in tv.values()):
        return
    if ts == "ok" and rs == "InvalidArgument" and "SparseFeature needs as many indices" in rv:
        return  # TensorFlow checks only the batch's totals and pairs values across records
    if ts == "ok" and rs == "InvalidArgument" and " values do not split into rows of " in rv:
        return  # UniformRowLength over a batch: TensorFlow reshapes the batch's values, pairing records
    if ts == "ok" and rs == "InvalidArgument" and " must be sorted" in rv:
        return  # unsorted ValueRowIds: TensorFlow (validate=False) builds rows from them anyway
    if ts == "ok" and rs == "InvalidArgument" and " row ids for " in rv:
        return  # ValueRowIds: TensorFlow checks only the batch's total and pairs row ids across records
    if ts == "ok" and rs == "InvalidArgument" and "values and partitions are not aligned" in rv:
        return  # a partition feature list with other step counts: TensorFlow checks only with validate=True
    assert rs == ts, (context, tv if ts != "ok" else None, rv if rs != "ok" else None)
    if ts == "ok":
        assert {k: canon_rk(v) for k, v in rv.items()} == {k: canon_tf(v) for k, v in tv.items()}, context


def compare_examples(records: list[bytes], specs: dict) -> None:
    """`compare` for parse_example on the batch and parse_single_example on its first record."""
    pairs = {k: build(k, s) for k, s in specs.items()}
    rk_spec = {k: p[0] for k, p in pairs.items()}
    tf_spec = {k: p[1] for k, p in pairs.items()}
    compare(lambda: tf.io.parse_example(tf.constant(records, dtype=tf.string), tf_spec),
            lambda: rk.parse_example(records, rk_spec), (records, specs))
    if records:
        compare(lambda: tf.io.parse_single_example(tf.constant(records[0]), tf_spec),
                lambda: rk.parse_single_example(records[0], rk_spec), (records[:1], specs))
    compare_table(records, rk_spec)


def compare_table(records: list[bytes], rk_spec: dict) -> None:
    """rk.read_table over a file of ``records`` gives parse_example's rows (so,
    where they agree, TensorFlow's), and fails where parse_example fails."""
    if not records or any(isinstance(spec, rk.FixedLenSequenceFeature) for spec in rk_spec.values()):
        return  # read_table reads FixedLenSequenceFeature only in a SequenceExample's feature lists
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "records.tfrecord")
        with rk.TFRecordWriter(path) as writer:
            writer.write_many(records)
        try:
            parsed = rk.parse_example(records, rk_spec)
        except Exception as error:
            with pytest.raises(type(error)):
                rk.read_table(path, rk_spec)
            return
        table = rk.read_table(path, rk_spec)
        for name, spec in rk_spec.items():
            assert table.column(name).to_pylist() == table_rows(spec, parsed[name], len(records)), (name, rk_spec)


@settings(max_examples=150, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(st.lists(record_st, max_size=4), specs_st)
def test_parse_example_matches_tensorflow(rows, specs) -> None:
    records = [rk.train.Example(features=rk.train.Features(feature={k: feature_value(*v) for k, v in row.items()})).SerializeToString()
               for row in rows]
    compare_examples(records, specs)


def varint(n: int, pad: int = 0) -> bytes:
    """A varint, `pad` bytes longer than it needs to be (protobuf allows that)."""
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    if pad:
        out.append(n | 0x80)
        out += b"\x80" * (pad - 1)
        n = 0
    out.append(n)
    return bytes(out)


def tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def ld(field: int, payload: bytes, pad: int = 0) -> bytes:
    return tag(field, 2) + varint(len(payload), pad) + payload


def encode_list(kind: str, values: list, packed: bool, pad: int) -> bytes:
    if kind == "int64":
        return ld(1, b"".join(varint(v, pad) for v in values)) if packed else b"".join(tag(1, 0) + varint(v, pad) for v in values)
    if kind == "float32":
        floats = [struct.pack("<f", v / 2) for v in values]
        return ld(1, b"".join(floats)) if packed else b"".join(tag(1, 5) + f for f in floats)
    return b"".join(ld(1, b"v%d" % v) for v in values)


def encode_feature(kind: str, values: list, packed: bool, pad: int) -> bytes:
    if kind == "none":
        return b""
    return ld({"string": 1, "float32": 2, "int64": 3}[kind], encode_list(kind, values, packed, pad))


layout_st = st.fixed_dictionaries({
    "packed": st.booleans(), "pad": st.sampled_from([0, 0, 1, 3]), "value_first": st.booleans(),
    "unknown_fields": st.booleans(), "two_maps": st.booleans(), "duplicates": st.booleans(), "negative": st.booleans(),
})


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(record_st, layout_st), max_size=4), specs_st, st.randoms(use_true_random=False))
def test_hand_made_wire_encodings_match_tensorflow(rows, specs, rnd) -> None:
    records = []
    for row, layout in rows:
        overwritten, entries = [], []
        for key, (kind, values) in row.items():
            if layout["negative"] and kind == "int64" and key != "i":
                values = [-v - 1 for v in values]
            key_field = ld(1, key.encode())
            # TensorFlow 2.21 overruns its heap on an unpacked FloatList longer than
            # a FixedLenFeature's size (a crash, not an error), so those stay packed.
            spec = specs.get(key)
            overrun = kind == "float32" and spec and spec[0] == "fixed" and len(values) > int(np.prod(spec[2]))
            value_field = ld(2, encode_feature(kind, values, layout["packed"] or overrun, layout["pad"]))
            entries.append(ld(1, value_field + key_field if layout["value_first"] else key_field + value_field))
            if layout["duplicates"] and kind != "none" and rnd.random() < 0.5:
                overwritten.append(ld(1, key_field + ld(2, encode_feature("string", [9], True, 0))))
        rnd.shuffle(entries)
        entries = overwritten + entries  # an earlier entry of a key is overwritten by the last
        if layout["two_maps"] and len(entries) > 1:
            cut = len(entries) // 2
            record = ld(1, b"".join(entries[:cut])) + ld(1, b"".join(entries[cut:]))
        else:
            record = ld(1, b"".join(entries)) if entries or rnd.random() < 0.5 else b""
        if layout["unknown_fields"]:
            record = tag(5, 0) + varint(300) + record + ld(7, b"junk") + tag(9, 1) + bytes(8) + tag(10, 5) + bytes(4)
        records.append(record)
    compare_examples(records, specs)


step_st = st.tuples(st.sampled_from(["none", "int64", "float32", "string"]), st.lists(st.integers(0, 3), max_size=3))
flist_st = st.one_of(
    st.lists(step_st, max_size=3),
    st.tuples(st.sampled_from(["int64", "float32", "string"]), st.lists(st.lists(st.integers(0, 3), min_size=2, max_size=2), max_size=3)).map(
        lambda t: [(t[0], v) for v in t[1]]),
)
seq_record_st = st.tuples(
    st.fixed_dictionaries({}, optional={"a": feature_st, "b": feature_st}),
    st.fixed_dictionaries({}, optional={"x": flist_st, "y": flist_st, "z": flist_st,
                                        "i": st.lists(st.tuples(st.just("int64"), st.lists(st.integers(0, 3), max_size=3)), max_size=3),
                                        "j": st.lists(st.tuples(st.just("int64"), st.lists(st.integers(0, 3), max_size=3)), max_size=3)}),
)
ctx_spec_st = st.dictionaries(st.sampled_from(["a", "b"]), st.one_of(
    st.tuples(st.just("fixed"), st.sampled_from(DTYPES), st.sampled_from([(), (1,), (2,)]), st.booleans()),
    st.tuples(st.just("varlen"), st.sampled_from(DTYPES)),
    st.tuples(st.just("ragged"), st.sampled_from(DTYPES), st.just(()), st.sampled_from(["int32", "int64"])),
), max_size=2)
seq_spec_st = st.dictionaries(st.sampled_from(["x", "y", "z"]), st.one_of(
    st.tuples(st.just("flseq"), st.sampled_from(DTYPES), st.sampled_from([(), (2,)]), st.booleans()),
    st.tuples(st.just("varlen"), st.sampled_from(DTYPES)),
    st.tuples(st.just("ragged"), st.sampled_from(DTYPES), st.lists(st.sampled_from(PARTITIONS), max_size=2).map(tuple),
              st.sampled_from(["int32", "int64"])),
), max_size=3)


def build_seq(key, spec):
    if spec[0] == "flseq":
        _, dt, shape, allow_missing = spec
        return (rk.FixedLenSequenceFeature(list(shape), dt, allow_missing=allow_missing),
                tf.io.FixedLenSequenceFeature(list(shape), TF_DTYPE[dt], allow_missing=allow_missing))
    return build(key, spec)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(seq_record_st, max_size=3), ctx_spec_st, seq_spec_st)
def test_parse_sequence_example_matches_tensorflow(rows, ctx_specs, seq_specs) -> None:
    if not ctx_specs and not seq_specs:
        return
    records = []
    for ctx, lists in rows:
        msg = rk.train.SequenceExample(
            context=rk.train.Features(feature={k: feature_value(*v) for k, v in ctx.items()}),
            feature_lists=rk.train.FeatureLists(feature_list={
                k: rk.train.FeatureList(feature=[feature_value(*s) for s in steps]) for k, steps in lists.items()}))
        records.append(msg.SerializeToString())
    cp = {k: build(k, s) for k, s in ctx_specs.items()}
    sp = {k: build_seq(k, s) for k, s in seq_specs.items()}
    rk_c, tf_c = {k: p[0] for k, p in cp.items()}, {k: p[1] for k, p in cp.items()}
    rk_s, tf_s = {k: p[0] for k, p in sp.items()}, {k: p[1] for k, p in sp.items()}

    def tf_batch():
        c, s, l = tf.io.parse_sequence_example(tf.constant(records, dtype=tf.string), context_features=tf_c, sequence_features=tf_s)
        return {**{"c:" + k: v for k, v in c.items()}, **{"s:" + k: v for k, v in s.items()}, **{"l:" + k: v for k, v in l.items()}}

    def rk_batch():
        c, s, l = rk.parse_sequence_example(records, context_features=rk_c, sequence_features=rk_s)
        return {**{"c:" + k: v for k, v in c.items()}, **{"s:" + k: v for k, v in s.items()}, **{"l:" + k: v for k, v in l.items()}}

    compare(tf_batch, rk_batch, (rows, ctx_specs, seq_specs))
    if records:
        def tf_single():
            c, s = tf.io.parse_single_sequence_example(tf.constant(records[0]), context_features=tf_c, sequence_features=tf_s)
            return {**{"c:" + k: v for k, v in c.items()}, **{"s:" + k: v for k, v in s.items()}}

        def rk_single():
            c, s = rk.parse_single_sequence_example(records[0], context_features=rk_c, sequence_features=rk_s)
            return {**{"c:" + k: v for k, v in c.items()}, **{"s:" + k: v for k, v in s.items()}}
        compare(tf_single, rk_single, (rows[:1], ctx_specs, seq_specs))


