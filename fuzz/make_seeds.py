"""Writes the seed corpus (``fuzz/seeds/<target>/``) and the regression inputs
found before the fuzzer existed (``fuzz/regressions/<target>/``).

Both folders are committed; run this again only to change them. Inputs the
fuzzer finds later are saved by ``run.py`` under ``fuzz/crashes/`` and moved to
``fuzz/regressions/`` by hand once fixed, with a name that says what they were.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np

import recordkit as rk

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from harnesses import TENSOR_DTYPES, frame  # noqa: E402
from reference import masked_crc32c  # noqa: E402  - the tests' pure-Python CRC, for headers recordkit would never write


def tensor(dtype: str, array: object) -> bytes:
    return bytes([TENSOR_DTYPES.index(dtype)]) + rk.serialize_tensor(np.asarray(array, dtype=None if dtype == "string" else dtype))


def example(**features: object) -> bytes:
    return rk.encode_example(features)


SEEDS: dict[str, dict[str, bytes]] = {
    "framing": {
        "empty": b"",
        "one-empty-record": frame([b""]),
        "three-records": frame([b"a", b"hello world", bytes(range(256))]),
        "examples": frame([example(label=i, name=f"n{i}") for i in range(4)]),
        "bad-data-crc": frame([b"abc", b"def"])[:-1] + b"\x00",
        "partial-header": frame([b"abc"]) + b"\x05\x00\x00",
    },
    # Each after 5 MB of intact records (see `harnesses.indexed_framing`).
    "indexed_framing": {
        "empty": b"",
        "examples": frame([example(x=i, s=f"n{i}") for i in range(4)]),
        "bad-data-crc": frame([example(x=1), example(x=2)])[:-1] + b"\x00",
        "bad-length-crc": frame([example(x=1)])[:9] + b"\x00" + frame([example(x=1)])[10:],
        "partial-header": frame([example(x=1)]) + b"\x05\x00\x00",
    },
    "wire": {
        "example": example(label=1, score=[0.5, 0.25], name="cat", ids=[1, 2, 3]),
        "empty-example": b"",
        "sequence": rk.encode_sequence_example({"length": 2}, {"tokens": [[1, 2], [3]], "w": [[0.5], [0.25, 1.0]]}),
        "ofrecord": rk.encode_ofrecord({"image": b"\xff\xd8", "label": np.array([3], np.int32), "x": np.array([1.5], np.float64)}),
        "nested-group": b"\x0b" * 8 + b"\x0c" * 8,
    },
    "parse_example": {
        "full": example(label=3, pair=[1.0, 2.0], tags=["a", "b"], sparse_index=[1, 7], sparse_value=[0.5, 0.25],
                        ragged=[1, 2, 3], ragged_splits=[0, 1, 3], rows=[1.0, 2.0], rows_ids=[0, 1]),
        "defaults": example(tags=np.array([], object)),
        "wrong-kinds": example(label=[1.5], pair=["x"], tags=[1, 2]),
        "many-rows": example(rows=[0.5] * 3, rows_ids=[0, 0, 5]),
    },
    "parse_tensor": {
        "float32-matrix": tensor("float32", [[1.0, 2.0], [3.0, 4.0]]),
        "int64-vector": tensor("int64", [1, -2, 3]),
        "scalar-float16": tensor("float16", 0.5),
        "strings": tensor("string", [b"a", b"bc"]),
        "bool": tensor("bool", [True, False, True]),
        "complex": tensor("complex64", [1 + 2j]),
        "empty": tensor("uint8", np.zeros((0, 3))),
    },
    "tables": {
        "example": example(label=3, pair=[1.0, 2.0], tags=["a", "b"], sparse_index=[1, 7], sparse_value=[0.5, 0.25],
                           ragged=[1, 2, 3], ragged_splits=[0, 1, 3], rows=[1.0, 2.0], rows_ids=[0, 1]),
        "sequence": rk.encode_sequence_example({"label": 1}, {"tokens": [[1, 2], [3]], "frames": [[0.5, 1.5]]}),
        "ofrecord": rk.encode_ofrecord({"d": np.array([1.5], np.float64), "i": np.array([3], np.int32),
                                        "l": np.array([1 << 40]), "f": np.array([0.5], np.float32), "s": b"x"}),
        "not-utf8": example(label=1, name=b"\xff\xfe"),
    },
    "index": {
        "valid": b"0 20\n20 46\n66 16\n82 516\n598 20\n",
        "empty": b"",
        "two-lines": b"0 20\n20 46\n",
    },
}

# Inputs that crashed or misbehaved before the fuzzer existed (issue 12's list).
REGRESSIONS: dict[str, dict[str, bytes]] = {
    "wire": {
        "stack-overflow-nested-groups": b"\x0b" * 200_000,
    },
    "parse_example": {
        "stack-overflow-nested-groups": b"\x0b" * 200_000,
        "value-row-id-2-pow-31": example(rows=[1.0], rows_ids=[2**31]),
    },
    "parse_tensor": {
        # dtype float, shape [2**28], one float_val to repeat: 2 GiB from 18 bytes.
        "shape-2-pow-28-from-18-bytes": bytes([TENSOR_DTYPES.index("float32")])
        + bytes.fromhex("0801" "1208" "1206" "088080808001" "2a04") + struct.pack("<f", 1.0),
        "float16-half-val-overflow": bytes([TENSOR_DTYPES.index("float16")]) + bytes.fromhex("081312041202080168" "80a004"),
    },
    "index": {
        "size-2-pow-40": b"0 1099511627776\n",
        "size-u64-max": b"0 18446744073709551615\n",
        "negative": b"-1\n",
        "odd-token-shifts-pairs": b"0 16 16\n46\n",
    },
    "tables": {
        # An Example read as an OFRecord: its one "feature" sets no kind, so no column was
        # inferred, and read_table returned no rows for a file holding one.
        "rows-without-columns": example(label=1),
    },
    "framing": {
        # A valid header claiming 2**62 bytes: TensorFlow 2.21 segfaulted on it.
        "length-2-pow-62": struct.pack("<Q", 1 << 62) + struct.pack("<I", masked_crc32c(struct.pack("<Q", 1 << 62)))
        + b"x" * 20,
    },
}


def write(folder: Path, inputs: dict[str, dict[str, bytes]]) -> None:
    for target, named in inputs.items():
        (folder / target).mkdir(parents=True, exist_ok=True)
        for name, data in named.items():
            (folder / target / f"{name}.bin").write_bytes(data)


if __name__ == "__main__":
    write(HERE / "seeds", SEEDS)
    write(HERE / "regressions", REGRESSIONS)
    print(f"seeds: {sum(map(len, SEEDS.values()))}, regressions: {sum(map(len, REGRESSIONS.values()))}")
