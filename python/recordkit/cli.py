"""The ``recordkit`` command (also ``python -m recordkit``).

Subcommands so far: ``count`` and ``verify``. Errors are one line on stderr
and a non-zero exit status; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import warnings
from typing import Sequence

from recordkit import __version__
from recordkit.errors import DataLossError, DataLossWarning
from recordkit.records import OFRecordReader, TFRecordReader, count_records

__all__ = ["main"]


def _expand(patterns: Sequence[str]) -> list[str]:
    """Expands globs the shell left alone (quoted, or on Windows)."""
    paths: list[str] = []
    for pattern in patterns:
        if any(c in pattern for c in "*?[") and "://" not in pattern:
            matches = sorted(glob.glob(pattern))
            if not matches:
                raise FileNotFoundError(2, "no file matches", pattern)
            paths.extend(matches)
        else:
            paths.append(pattern)
    return paths


def _format_of(path: str, forced: str | None) -> str:
    if forced:
        return forced
    return "ofrecord" if os.path.basename(path).startswith("part-") else "tfrecord"


def _count(args: argparse.Namespace) -> int:
    paths = _expand(args.paths)
    total = 0
    for path in paths:
        n = count_records(path, args.compression, format=_format_of(path, args.format))
        total += n
        print(f"{n}\t{path}" if len(paths) > 1 else n)
    if len(paths) > 1:
        print(f"{total}\ttotal")
    return 0


def _verify(args: argparse.Namespace) -> int:
    damaged = 0
    for path in _expand(args.paths):
        fmt = _format_of(path, args.format)
        problems: list[str] = []
        if fmt == "tfrecord":
            reader = TFRecordReader(path, args.compression, on_error="skip")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DataLossWarning)
                for _ in reader:
                    pass
            problems = [
                f"{path}: offset {r.offset}: {r.detail} ({r.bytes_skipped} bytes skipped)"
                for r in reader.stats.damaged_regions
            ]
            records = reader.stats.records
        else:
            records = 0
            try:
                for _ in OFRecordReader(path, args.compression):
                    records += 1
            except DataLossError as error:
                problems = [f"{path}: offset {error.offset}: {error.message}"]
        if problems:
            damaged += 1
            for line in problems:
                print(line)
        else:
            print(f"{path}: OK, {records} records")
    return 1 if damaged else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recordkit",
        description="Inspect and check TFRecord and OFRecord files, without TensorFlow.",
    )
    parser.add_argument("--version", action="version", version=f"recordkit {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help: str, example: str):
        sub = commands.add_parser(
            name, help=help, description=help, epilog=f"example:\n  {example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.add_argument("paths", nargs="+", metavar="PATH", help="files, globs or URLs")
        sub.add_argument("--compression", default="auto", help='"auto" (default), "none", "gzip" or "zlib"')
        sub.add_argument("--format", choices=["tfrecord", "ofrecord"],
                         help="default: ofrecord for part-NNNNN files, tfrecord otherwise")
        return sub

    add("count", "Count the records in each file (framing only: fast).",
        "recordkit count data/train-*.tfrecord").set_defaults(run=_count)
    add("verify", "Check every record's CRCs and framing; exit 1 if anything is damaged, "
        "with one line per problem giving the file and byte offset.",
        "recordkit verify data/*.tfrecord.gz").set_defaults(run=_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as error:  # one clear line, unless asked for the traceback
        if args.debug:
            raise
        print(f"recordkit {args.command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
