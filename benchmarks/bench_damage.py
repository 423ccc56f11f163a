"""Skipping damage takes time in proportion to the damage, not its square.

Two hostile files, each at 1, 2 and 4 MB: headers whose length CRC checks but
whose claims lie (a header every 16 bytes, each claiming most of the rest of
the file), and an intact record followed by such a header, again and again.
Read with ``on_error="skip"``; the time per MB should stay flat as the file
grows (a ratio near 1 from 1 MB to 4 MB; a quadratic scan shows 4).

    python benchmarks/bench_damage.py [--repeats N]

Where `tests/test_records.py` checks what is skipped and kept, this checks how long it takes.
"""

from __future__ import annotations

import argparse
import gzip
import struct
import tempfile
import warnings
from pathlib import Path

import recordkit as rk
from _common import best_of, require_release_build


_TABLE = []
for _n in range(256):
    for _ in range(8):
        _n = (_n >> 1) ^ 0x82F63B78 if _n & 1 else _n >> 1
    _TABLE.append(_n)


def _masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC32C, in plain Python (the hostile files are built once)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _frame(payload: bytes) -> bytes:
    length = struct.pack("<Q", len(payload))
    return length + struct.pack("<I", _masked_crc(length)) + payload + struct.pack("<I", _masked_crc(payload))


def lying_headers(size: int) -> bytes:
    """Headers with a right length CRC every 16 bytes, each claiming most of what is left."""
    out = bytearray()
    while len(out) < size:
        header = struct.pack("<Q", max(size - len(out) - 100, 1))
        out += header + struct.pack("<I", _masked_crc(header)) + bytes(4)
    return bytes(out[:size]) + b"".join(_frame(b"after the damage %d" % i) for i in range(3))


def intact_then_lying(size: int) -> bytes:
    """An intact record, then a header claiming most of the rest, again and again."""
    out = bytearray()
    while len(out) < size:
        out += _frame(b"x")
        claim = size - len(out) - 12 - 4 - 100
        if claim <= 0:
            break
        out += struct.pack("<Q", claim) + struct.pack("<I", _masked_crc(struct.pack("<Q", claim)))
    return bytes(out)


def skip_all(path: Path) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rk.DataLossWarning)
        return sum(1 for _ in rk.TFRecordReader(path, on_error="skip"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    require_release_build()
    with tempfile.TemporaryDirectory() as folder:
        print(f"{'damage':<22}{'source':<8}" + "".join(f"{mb} MB ms".rjust(10) for mb in (1, 2, 4))
              + "   ms/MB 4 MB vs 1 MB")
        for name, make in (("lying headers", lying_headers), ("intact, then lying", intact_then_lying)):
            for source in ("file", "gzip"):
                times = []
                for mb in (1, 2, 4):
                    data = make(mb << 20)
                    path = Path(folder) / f"{name.replace(' ', '_')}-{mb}.tfrecord{'.gz' if source == 'gzip' else ''}"
                    path.write_bytes(gzip.compress(data, 1) if source == "gzip" else data)
                    seconds, _ = best_of(lambda: skip_all(path), args.repeats)
                    times.append(seconds)
                ratio = (times[2] / 4) / (times[0] / 1)
                print(f"{name:<22}{source:<8}" + "".join(f"{t * 1e3:10.1f}" for t in times) + f"   {ratio:.2f} x")


if __name__ == "__main__":
    main()
