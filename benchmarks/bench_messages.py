"""The tutorial's own message API: recordkit's classes vs protobuf's upb backend
(what TensorFlow ships) and TensorFlow's record I/O, in one process.

Each row times the same work on the same 20 000 tutorial-shaped Examples (four
features: bool, int, bytes, float), best of --repeats runs, the contenders
interleaved; per message, and the ratio (>= 1 is recordkit faster):

1. building with the helpers + SerializeToString (the tutorial's serialize_example);
2. Example.FromString(data);
3. FromString, then one value read (features.feature["feature1"].int64_list.value[0]);
4. rk.encode_example(dict) vs protobuf's build + serialize;
5. rk.decode_example(data) vs protobuf's FromString;
6. the tutorial's write loop (build, serialize, TFRecordWriter.write) vs TensorFlow's;
7. the tutorial's read loop (reader, FromString, one value) vs TensorFlow's
   (TFRecordDataset, .numpy(), FromString, one value);
8. a helper call (rk.int64_feature(1)) with 1 M messages alive vs in a fresh process.

Targets (benchmarks/README.md): rows 1-3 >= 2 x protobuf; row 4 >= 4 x; row 5 >= 1 x; rows 6-7
>= 3 x TensorFlow; row 8 within 10 %.

Usage: python benchmarks/bench_messages.py [--messages N] [--repeats R]
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time

# NumPy's BLAS threads wait spinning for work that never comes here, and took a
# twentieth of a core from both contenders on a 2-core machine.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from _common import best_of_each, import_tensorflow, require_release_build  # noqa: E402

import recordkit as rk  # noqa: E402


def rows(n: int) -> list[tuple[bool, int, bytes, float]]:
    rng = np.random.default_rng(0)
    words = [b"cat", b"dog", b"chicken", b"horse", b"goat"]
    return [(bool(rng.integers(2)), int(i % 5), words[i % 5], float(rng.standard_normal())) for i in range(n)]


def rk_serialize(f0: bool, f1: int, f2: bytes, f3: float) -> bytes:
    feature = {
        "feature0": rk.int64_feature(f0),
        "feature1": rk.int64_feature(f1),
        "feature2": rk.bytes_feature(f2),
        "feature3": rk.float_feature(f3),
    }
    return rk.train.Example(features=rk.train.Features(feature=feature)).SerializeToString()


def pb_classes():  # type: ignore[no-untyped-def]
    from google.protobuf.internal import api_implementation
    from tensorflow.core.example import example_pb2, feature_pb2

    if api_implementation.Type() != "upb":
        raise SystemExit(f"protobuf's backend is {api_implementation.Type()!r}, not upb: the comparison would mislead")
    return example_pb2, feature_pb2


def pb_serializer(example_pb2, feature_pb2, deterministic: bool = False):  # type: ignore[no-untyped-def]
    """The tutorial's serialize_example on protobuf's classes (its SerializeToString
    is not deterministic unless asked: maps come out in another order)."""

    def serialize(f0: bool, f1: int, f2: bytes, f3: float) -> bytes:
        feature = {
            "feature0": feature_pb2.Feature(int64_list=feature_pb2.Int64List(value=[int(f0)])),
            "feature1": feature_pb2.Feature(int64_list=feature_pb2.Int64List(value=[f1])),
            "feature2": feature_pb2.Feature(bytes_list=feature_pb2.BytesList(value=[f2])),
            "feature3": feature_pb2.Feature(float_list=feature_pb2.FloatList(value=[f3])),
        }
        example = example_pb2.Example(features=feature_pb2.Features(feature=feature))
        return example.SerializeToString(deterministic=deterministic)

    return serialize


def helper_cost(calls: int = 200_000) -> float:
    """Seconds per ``rk.int64_feature(1)`` call, best of 5 runs of ``calls``."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            rk.int64_feature(1)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--helper-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    require_release_build()
    if args.helper_only:  # row 8's fresh process
        print(helper_cost())
        return
    tf = import_tensorflow()
    if tf is None:
        raise SystemExit("needs tensorflow-cpu (and so protobuf's upb backend) for the comparison")
    example_pb2, feature_pb2 = pb_classes()
    pb_serialize = pb_serializer(example_pb2, feature_pb2)
    data_rows = rows(args.messages)
    n = len(data_rows)
    blobs = [rk_serialize(*r) for r in data_rows]
    deterministic = pb_serializer(example_pb2, feature_pb2, deterministic=True)
    assert blobs == [deterministic(*r) for r in data_rows], "the serializations must agree byte for byte"
    dicts = [{"feature0": r[0], "feature1": r[1], "feature2": r[2], "feature3": r[3]} for r in data_rows]
    assert [rk.encode_example(d) for d in dicts] == blobs
    repeats = args.repeats

    def per_message(seconds: float) -> float:
        return seconds / n * 1e6

    results: list[tuple[str, float, float, str]] = []

    def row(name: str, ours, theirs, target: str, against: str = "protobuf") -> None:  # type: ignore[no-untyped-def]
        (t_ours, _), (t_theirs, _) = best_of_each([ours, theirs], repeats)
        results.append((name, per_message(t_ours), per_message(t_theirs), target))
        print(f"{name:<46} recordkit {per_message(t_ours):7.2f} us   {against} {per_message(t_theirs):7.2f} us"
              f"   {t_theirs / t_ours:5.2f} x  (target {target})", flush=True)

    row("1. helpers + Example + SerializeToString",
        lambda: [rk_serialize(*r) for r in data_rows], lambda: [pb_serialize(*r) for r in data_rows], ">= 2 x")
    row("2. Example.FromString",
        lambda: [rk.train.Example.FromString(b) for b in blobs],
        lambda: [example_pb2.Example.FromString(b) for b in blobs], ">= 2 x")
    row("3. FromString + one value",
        lambda: [rk.train.Example.FromString(b).features.feature["feature1"].int64_list.value[0] for b in blobs],
        lambda: [example_pb2.Example.FromString(b).features.feature["feature1"].int64_list.value[0] for b in blobs],
        ">= 2 x")
    row("4. encode_example(dict) vs protobuf build+serialize",
        lambda: [rk.encode_example(d) for d in dicts], lambda: [pb_serialize(*r) for r in data_rows], ">= 4 x")
    row("5. decode_example vs protobuf FromString",
        lambda: [rk.decode_example(b) for b in blobs],
        lambda: [example_pb2.Example.FromString(b) for b in blobs], ">= 1 x")

    folder = tempfile.mkdtemp()
    rk_path, tf_path = os.path.join(folder, "rk.tfrecord"), os.path.join(folder, "tf.tfrecord")

    def rk_write() -> None:
        with rk.TFRecordWriter(rk_path) as writer:
            for r in data_rows:
                writer.write(rk_serialize(*r))

    def tf_write() -> None:
        with tf.io.TFRecordWriter(tf_path) as writer:
            for r in data_rows:
                writer.write(pb_serialize(*r))

    row("6. write loop (build, serialize, write)", rk_write, tf_write, ">= 3 x", "TensorFlow")
    assert list(map(rk.decode_example, rk.TFRecordReader(rk_path))) is not None
    assert rk.count_records(rk_path) == rk.count_records(tf_path) == n

    def rk_read() -> int:
        total = 0
        for raw in rk.TFRecordReader(rk_path):
            total += rk.train.Example.FromString(raw).features.feature["feature1"].int64_list.value[0]
        return total

    def tf_read() -> int:
        total = 0
        for raw in tf.data.TFRecordDataset(tf_path):
            total += example_pb2.Example.FromString(raw.numpy()).features.feature["feature1"].int64_list.value[0]
        return total

    row("7. read loop (read, FromString, one value)", rk_read, tf_read, ">= 3 x", "TensorFlow")

    fresh = float(subprocess.run([sys.executable, __file__, "--helper-only"], capture_output=True, text=True,
                                 check=True).stdout)
    alive = [rk.train.Example.FromString(blobs[i % n]) for i in range(1_000_000)]
    alive += [rk.int64_feature(i) for i in range(1_000_000)]
    gc.collect()
    loaded = helper_cost()
    print(f"{'8. int64_feature(1), 2 M messages alive':<46} {loaded * 1e6:7.3f} us   fresh process {fresh * 1e6:7.3f} us"
          f"   {loaded / fresh:5.2f} x the fresh cost (target <= 1.10)")
    del alive


if __name__ == "__main__":
    main()
