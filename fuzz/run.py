"""Runs the fuzz targets of ``harnesses.py`` for a time budget and saves every finding.

    python fuzz/run.py --seconds 60                 # all targets, the budget shared
    python fuzz/run.py --targets wire --seed 7      # one target, a chosen seed

Engines: ``atheris`` (coverage-guided libFuzzer, where ``pip install atheris``
works) or ``mutate``, a seeded mutation loop that needs nothing (the default
when atheris is missing, and what CI runs). The mutation loop sends inputs to a
child process that runs under a memory limit (``--memory-mb``) and a time
limit per input (``--timeout``); a child that dies (a signal, an abort, memory)
or hangs is restarted, and the input it was running is saved. An exception
the harness does not expect, or a broken invariant, is a finding too. Inputs
that reach a new outcome (an error class and message seen for the first time)
join the corpus, a cheap stand-in for coverage.

Findings go to ``fuzz/crashes/<target>/`` as ``<kind>-<sha1>.bin`` with a
``.txt`` saying what happened. The exit status is 1 when anything was found.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAX_INPUT = 256 << 10
INTERESTING = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
               1 << 31, 1 << 32, 1 << 40, 1 << 62, (1 << 63) - 1, (1 << 64) - 1]


# --- the child: runs inputs under limits ---------------------------------------------------------


def _limit_memory(megabytes: int) -> None:
    try:
        import resource
    except ImportError:  # not Unix: no limit
        return
    limit = megabytes << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def child(target_name: str, memory_mb: int) -> None:
    """Reads length-prefixed inputs on stdin; answers each with one line on stdout:
    ``ok <outcome>`` or ``finding <description>``."""
    sys.path.insert(0, str(HERE))
    import warnings

    from harnesses import OUTCOMES, TARGETS

    warnings.simplefilter("ignore")
    target = TARGETS[target_name]
    _limit_memory(memory_mb)
    stdin, stdout = sys.stdin.buffer, sys.stdout
    while True:
        header = stdin.read(4)
        if len(header) < 4:
            return
        data = stdin.read(struct.unpack("<I", header)[0])
        OUTCOMES.clear()
        try:
            target(data)
            answer = "ok " + "|".join(OUTCOMES)
        except BaseException as e:  # noqa: BLE001 - any other exception is what we look for
            where = traceback.extract_tb(e.__traceback__)[-1]
            answer = f"finding {type(e).__name__}: {str(e)[:200]} (at {Path(where.filename).name}:{where.lineno})"
        stdout.write(answer.replace("\n", " ") + "\n")
        stdout.flush()


# --- mutation ----------------------------------------------------------------------------------


def mutate(rng: random.Random, corpus: list[bytes]) -> bytes:
    data = bytearray(rng.choice(corpus))
    for _ in range(rng.choice([1, 1, 1, 2, 3, 8])):
        op = rng.randrange(9)
        at = rng.randrange(len(data) + 1)
        if op == 0 and data:  # flip a bit
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1 and data:  # an interesting byte
            data[rng.randrange(len(data))] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, 0x0B, 0x0C, 0x12, 0x1A])
        elif op == 2:  # an interesting number, little-endian or as a varint
            value = rng.choice(INTERESTING)
            if rng.random() < 0.5:
                blob = struct.pack("<Q", value)[: rng.choice([1, 2, 4, 8])]
            else:
                blob = bytearray()
                while True:
                    blob.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
                    value >>= 7
                    if not value:
                        break
            data[at : at + len(blob)] = blob
        elif op == 3:  # insert random bytes
            data[at:at] = rng.randbytes(rng.randrange(1, 16))
        elif op == 4 and data:  # delete a range
            end = min(len(data), at + rng.randrange(1, 64))
            del data[at:end]
        elif op == 5 and data:  # duplicate a range somewhere
            start = rng.randrange(len(data))
            chunk = data[start : start + rng.randrange(1, 64)]
            data[at:at] = chunk
        elif op == 6 and data:  # repeat a short chunk many times (deep nesting, long runs)
            start = rng.randrange(len(data))
            chunk = data[start : start + rng.randrange(1, 4)]
            data[at:at] = chunk * rng.choice([10, 100, 1000, 20000])
        elif op == 7:  # splice with another corpus entry
            other = rng.choice(corpus)
            cut = rng.randrange(len(other) + 1)
            data = data[:at] + other[cut:]
        elif op == 8:  # truncate
            del data[at:]
    return bytes(data[:MAX_INPUT])


# --- the parent ----------------------------------------------------------------------------------


class Child:
    def __init__(self, target: str, memory_mb: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--child", target, "--memory-mb", str(memory_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )

    def run(self, data: bytes, timeout: float) -> tuple[str, str]:
        """``(kind, detail)``: ``("ok", outcome)``, ``("finding", ...)``, ``("crash", ...)`` or ``("hang", ...)``."""
        try:
            self.process.stdin.write(struct.pack("<I", len(data)) + data)  # type: ignore[union-attr]
            self.process.stdin.flush()  # type: ignore[union-attr]
        except BrokenPipeError:
            return self._died()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            self.process.kill()
            self.process.wait()
            return "hang", f"no answer within {timeout} s"
        line = self.process.stdout.readline().decode(errors="replace").rstrip("\n")  # type: ignore[union-attr]
        if not line:
            return self._died()
        kind, _, detail = line.partition(" ")
        return kind, detail

    def _died(self) -> tuple[str, str]:
        code = self.process.wait()
        stderr = self.process.stderr.read().decode(errors="replace")[-1500:]  # type: ignore[union-attr]
        how = f"killed by signal {-code}" if code < 0 else f"exited with {code}"
        return "crash", f"the child {how}: {stderr.strip()}"

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()  # type: ignore[union-attr]
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()


def load_corpus(target: str) -> list[bytes]:
    corpus = [p.read_bytes() for p in sorted((HERE / "seeds" / target).glob("*"))]
    return corpus or [b""]


def save_finding(crashes: Path, target: str, kind: str, detail: str, data: bytes) -> Path:
    folder = crashes / target
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{kind}-{hashlib.sha1(data).hexdigest()[:12]}.bin"
    path.write_bytes(data)
    path.with_suffix(".txt").write_text(f"{kind}: {detail}\nreplay: python fuzz/run.py --replay {path}\n")
    return path


def fuzz_mutate(target: str, seconds: float, seed: int, memory_mb: int, timeout: float, crashes: Path) -> dict:
    rng = random.Random(seed ^ zlib.crc32(target.encode()))
    corpus = load_corpus(target)
    outcomes: set[str] = set()
    found: dict[str, Path] = {}
    stats = {"target": target, "inputs": 0, "findings": 0, "corpus": len(corpus), "outcomes": 0}
    worker = Child(target, memory_mb)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            data = mutate(rng, corpus)
            kind, detail = worker.run(data, timeout)
            stats["inputs"] += 1
            if kind == "ok":
                if detail not in outcomes:
                    outcomes.add(detail)
                    if len(corpus) < 2000:
                        corpus.append(data)
                continue
            stats["findings"] += 1
            if kind in ("crash", "hang"):
                worker = Child(target, memory_mb)
            # One saved input per kind of finding (numbers aside), the shortest found.
            signature = kind + re.sub(r"[0-9]+", "#", detail)[:120]
            known = found.get(signature)
            if known is None or len(data) < len(known.read_bytes()):
                if known is not None:
                    known.unlink()
                    known.with_suffix(".txt").unlink()
                found[signature] = save_finding(crashes, target, kind, detail, data)
                if known is None:
                    print(f"  {target}: {kind}: {detail[:300]}\n    saved as {found[signature]}", flush=True)
    finally:
        worker.close()
    stats["corpus"], stats["outcomes"] = len(corpus), len(outcomes)
    stats["distinct"] = len(found)
    return stats


def fuzz_atheris(target: str, seconds: float, seed: int, memory_mb: int, timeout: float, crashes: Path) -> dict:
    """libFuzzer through atheris, in a child; its corpus starts from a copy of the seeds."""
    (crashes / target).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as corpus:
        for path in (HERE / "seeds" / target).glob("*"):
            shutil.copy(path, corpus)
        args = [sys.executable, __file__, "--atheris-child", target, corpus,
                f"-max_total_time={max(1, int(seconds))}", f"-rss_limit_mb={memory_mb}",
                f"-timeout={max(1, int(timeout))}", f"-seed={seed & 0x7FFFFFFF}",
                f"-artifact_prefix={crashes / target}/", "-print_final_stats=1"]
        out = subprocess.run(args, capture_output=True, text=True)
        runs = [line for line in out.stderr.splitlines() if "stat::number_of_executed_units" in line]
        inputs = int(runs[-1].split(":")[-1]) if runs else 0
        found = out.returncode != 0
        if found:
            print(out.stderr[-3000:], flush=True)
        return {"target": target, "inputs": inputs, "findings": int(found), "corpus": len(os.listdir(corpus)), "outcomes": "-"}


def atheris_child(target_name: str, libfuzzer_args: list[str]) -> None:
    import atheris

    sys.path.insert(0, str(HERE))
    with atheris.instrument_imports():
        import recordkit  # noqa: F401  - its Python layer gets coverage
        from harnesses import TARGETS
    import warnings

    warnings.simplefilter("ignore")
    atheris.Setup([sys.argv[0], *libfuzzer_args], TARGETS[target_name])
    atheris.Fuzz()


def replay(path: Path, memory_mb: int) -> int:
    """Runs one saved input in this process, under the memory limit, with its
    target taken from its folder; an exception escapes as it would in the child."""
    sys.path.insert(0, str(HERE))
    from harnesses import TARGETS

    _limit_memory(memory_mb)
    TARGETS[path.parent.name](path.read_bytes())
    print(f"{path}: no finding")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60, help="the whole budget, shared by the targets")
    parser.add_argument("--targets", default="", help="comma-separated target names (default: all)")
    parser.add_argument("--seed", type=int, default=None, help="the mutation seed (default: drawn, and printed)")
    parser.add_argument("--engine", choices=["auto", "mutate", "atheris"], default="auto")
    parser.add_argument("--memory-mb", type=int, default=2048, help="address-space limit of the child")
    parser.add_argument("--timeout", type=float, default=20, help="seconds one input may take")
    parser.add_argument("--crashes", type=Path, default=HERE / "crashes")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--atheris-child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.add_argument("--replay", type=Path, help="run one saved input and show what happens")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.memory_mb)
        return 0
    if args.atheris_child:
        atheris_child(args.atheris_child[0], args.atheris_child[1:])
        return 0
    if args.replay:
        return replay(args.replay, args.memory_mb)

    sys.path.insert(0, str(HERE))
    from harnesses import TARGETS

    targets = [t for t in args.targets.split(",") if t] or list(TARGETS)
    unknown = set(targets) - set(TARGETS)
    if unknown:
        parser.error(f"unknown target(s) {sorted(unknown)}; the targets are {list(TARGETS)}")
    engine = args.engine
    if engine == "auto":
        try:
            import atheris  # noqa: F401
            engine = "atheris"
        except ImportError:
            engine = "mutate"
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"fuzzing {', '.join(targets)} for {args.seconds:g} s with {engine}, seed {seed}", flush=True)
    run = fuzz_atheris if engine == "atheris" else fuzz_mutate
    started = time.monotonic()
    results = [run(t, args.seconds / len(targets), seed, args.memory_mb, args.timeout, args.crashes) for t in targets]
    elapsed = time.monotonic() - started
    print(f"{'target':<14}{'inputs':>9}{'per s':>8}{'outcomes':>10}{'corpus':>8}{'findings':>10}{'distinct':>10}")
    for r in results:
        rate = r["inputs"] / (elapsed / len(targets))
        print(f"{r['target']:<14}{r['inputs']:>9}{rate:>8.0f}{r['outcomes']:>10}{r['corpus']:>8}"
              f"{r['findings']:>10}{r.get('distinct', '-'):>10}")
    found = sum(r["findings"] for r in results)
    print(f"{sum(r['inputs'] for r in results)} inputs in {elapsed:.0f} s, {found} finding(s)"
          + (f": see {args.crashes}" if found else ""))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
