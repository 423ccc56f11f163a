"""The ``recordkit`` command (also ``python -m recordkit``).

Subcommands: ``count``, ``cat`` / ``head``, ``inspect``, ``stats``, ``verify``,
``salvage``, ``index`` and ``convert``. Errors are one line on stderr and a
non-zero exit status; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import re
import sys
import warnings
from typing import Any, Iterator, Sequence

import numpy as np

from recordkit import __version__, ofrecord, train
from recordkit.wire import has_top_field, text_bytes
from recordkit.codec import decode_example, decode_ofrecord, decode_sequence_example
from recordkit.conversion import FORMATS, convert, parse_size
from recordkit.discovery import list_files, record_format, suffix_compression
from recordkit.errors import DataLossError, DataLossWarning, ParseError
from recordkit.index import build_index
from recordkit.records import OFRecordReader, TFRecordReader, TFRecordWriter, count_records, plural
from recordkit.schema import infer_schema
from recordkit.stats import check_plot_path, feature_stats, plot_stats

__all__ = ["main"]


def _expand(patterns: Sequence[str]) -> list[str]:
    """The files named: paths, globs the shell left alone, folders, ``name@N`` shard sets."""
    return list_files(list(patterns))


def _record_format(path: str, forced: str | None) -> str:
    return forced or record_format(path)


def _count(args: argparse.Namespace) -> int:
    paths = _expand(args.paths)
    total = 0
    for path in paths:
        n = count_records(path, args.compression, format=_record_format(path, args.record_format))
        total += n
        print(f"{n}\t{path}" if len(paths) > 1 else n)
    if len(paths) > 1:
        print(f"{total}\ttotal")
    return 0


def _verify(args: argparse.Namespace) -> int:
    damaged = 0
    for path in _expand(args.paths):
        fmt = _record_format(path, args.record_format)
        problems: list[str] = []
        if fmt == "tfrecord":
            reader = TFRecordReader(path, args.compression, on_error="skip")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DataLossWarning)
                for _ in reader:
                    pass
            problems = [
                f"{path}: record {r.record_index}, offset {r.offset}: {_without_offset(r.detail)} "
                f"({plural(r.bytes_skipped, 'byte')} skipped)"
                for r in reader.stats.damaged_regions
            ]
            records = reader.stats.records
        else:
            records = 0
            try:
                for _ in OFRecordReader(path, args.compression):
                    records += 1
            except DataLossError as error:
                problems = [f"{path}: record {records}, offset {error.offset}: {_without_offset(error.message)}"]
        if problems:
            damaged += 1
            for line in problems:
                print(line)
        else:
            print(f"{path}: OK, {plural(records, 'record')}")
    return 1 if damaged else 0


def _without_offset(detail: str) -> str:
    """A damage message without its own "at <offset>", which the line already gives once."""
    return re.sub(r" at \d+\b", "", detail, count=1)


def _json_value(value: Any, max_bytes: int = 0) -> Any:
    """A decoded feature as JSON: numbers as numbers (non-finite as strings),
    bytes as strings when they are UTF-8, else ``{"base64": ...}``; a byte string
    longer than ``max_bytes`` (0: no limit) as its first ``max_bytes`` bytes, cut:
    ``{"cut": <them, as above>, "bytes": <its whole length>}``."""
    if value is None:
        return None
    if isinstance(value, list):
        return [_json_bytes(v) if not max_bytes or len(v) <= max_bytes else
                {"cut": _json_bytes(_cut_utf8(v[:max_bytes])), "bytes": len(v)} for v in value]
    if value.dtype == np.float32:
        # The shortest decimal that reads back as the same float32 (1.0000001, not 1.0000001192092896).
        return [float(str(v)) if math.isfinite(v) else str(v) for v in value]
    return [v if not isinstance(v, float) or math.isfinite(v) else str(v) for v in value.tolist()]


def _cut_utf8(head: bytes) -> bytes:
    """The first bytes of a value, without a UTF-8 character cut in two at the end
    (so that text stays text); bytes that are not UTF-8 are left as they are."""
    for drop in range(4):
        try:
            head[: len(head) - drop].decode("utf-8")
            return head[: len(head) - drop]
        except UnicodeDecodeError:
            continue
    return head


def _json_bytes(value: bytes) -> Any:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}


def _is_sequence_example(record: bytes) -> bool:
    """SequenceExamples carry field 2 (feature_lists) at the top level; Examples never do."""
    return has_top_field(record, 2)


def _describe(record: bytes, fmt: str, kind: str, keep: set[str] | None, max_bytes: int = 0) -> str:
    """One record as a JSON line or in protobuf text format; byte strings longer
    than ``max_bytes`` (0: no limit) cut to that many, their length shown."""
    def pick(mapping: dict) -> dict:
        return {k: v for k, v in mapping.items() if keep is None or k in keep}

    def value(v: Any) -> Any:
        return _json_value(v, max_bytes)

    try:
        if kind == "ofrecord":
            if fmt == "text":
                return _cut_text(ofrecord.OFRecord(pick(dict(ofrecord.OFRecord.FromString(record).feature))), max_bytes)
            return json.dumps({k: value(v) for k, v in pick(decode_ofrecord(record)).items()})
        if _is_sequence_example(record):
            if fmt == "text":
                return _cut_text(train.SequenceExample.FromString(record), max_bytes)
            context, lists = decode_sequence_example(record)
            return json.dumps({
                "context": {k: value(v) for k, v in pick(context).items()},
                "feature_lists": {k: [value(s) for s in steps] for k, steps in pick(lists).items()},
            })
        if fmt == "text":
            example = train.Example.FromString(record)
            return _cut_text(train.Example(features=train.Features(pick(dict(example.features.feature)))), max_bytes)
        return json.dumps({k: value(v) for k, v in sorted(pick(decode_example(record)).items())})
    except ParseError:
        return json.dumps({"undecodable_record": {"base64": base64.b64encode(record).decode("ascii")}})


def _cut_text(message: Any, max_bytes: int) -> str:
    """A message in protobuf text format, each quoted byte string longer than
    ``max_bytes`` (0: no limit) cut to that many bytes, with its length in a comment."""
    text = str(message)
    if not max_bytes:
        return text
    lines = []
    for line in text.split("\n"):
        start = line.find('value: "')
        if start >= 0 and line.endswith('"'):
            raw = _text_unescape(line[start + 8 : -1])
            if len(raw) > max_bytes:
                line = f"{line[: start + 8]}{text_bytes(raw[:max_bytes])[1:]}  # {len(raw)} bytes, first {max_bytes} shown"
        lines.append(line)
    return "\n".join(lines)


def _text_unescape(escaped: str) -> bytes:
    """The bytes of a string as protobuf's text format escapes it (octal, \\n, \\", ...)."""
    return escaped.encode("latin-1").decode("unicode_escape").encode("latin-1")


def _records(path: str, args: argparse.Namespace) -> Iterator[bytes]:
    if _record_format(path, args.record_format) == "ofrecord":
        return iter(OFRecordReader(path, args.compression))
    return iter(TFRecordReader(path, args.compression))


# Byte strings (images) are cut to this many bytes on the screen, with their length.
_MAX_BYTES_SHOWN = 100


def _cat(args: argparse.Namespace) -> int:
    keep = set(args.features.split(",")) if args.features else None
    shown = 0
    for path in _expand(args.paths):
        kind = _record_format(path, args.record_format)
        for record in _records(path, args):
            if args.limit is not None and shown >= args.limit:
                return 0
            text = _describe(record, args.output_format, kind, keep, args.max_bytes)
            print(text if args.output_format == "json" else text.rstrip("\n") + "\n")
            shown += 1
    return 0


def _salvage(args: argparse.Namespace) -> int:
    reader = TFRecordReader(args.source, args.compression, on_error="skip")
    compression = args.output_compression or suffix_compression(args.destination) or "none"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataLossWarning)
        with TFRecordWriter(args.destination, compression=None if compression == "none" else compression) as writer:
            writer.write_many(reader)
            if not reader.stats.records and reader.stats.damaged_regions:
                writer.abort()  # nothing to keep: no output, and a failing exit
                print(f"recordkit salvage: {args.source}: no intact record in its "
                      f"{plural(reader.stats.bytes_skipped, 'byte')} (is it a TFRecord file? "
                      f"compression {reader.compression!r}); nothing written", file=sys.stderr)
                return 1
    for region in reader.stats.damaged_regions:
        print(f"{args.source}: record {region.record_index}, offset {region.offset}: skipped "
              f"{plural(region.bytes_skipped, 'byte')} ({_without_offset(region.detail)})")
    print(f"kept {plural(reader.stats.records, 'record')}; skipped {plural(reader.stats.bytes_skipped, 'byte')} in "
          f"{plural(len(reader.stats.damaged_regions), 'damaged region')} -> {args.destination}")
    return 0


def _index(args: argparse.Namespace) -> int:
    for index_path in build_index(_expand(args.paths)):
        print(index_path)
    return 0


def _format_arg(args: argparse.Namespace) -> str:
    return args.record_format or "auto"


def _inspect(args: argparse.Namespace) -> int:
    schema = infer_schema(_expand(args.paths), limit=None if args.all else args.limit,
                          format=_format_arg(args), compression=args.compression)  # type: ignore[arg-type]
    if args.json:
        print(json.dumps(schema.to_json(), indent=2))
        return 0
    scope = "all records" if schema.complete else f"the first {schema.records} records (--all reads every one)"
    print(f"{schema.container}: {len(schema.features)} features in {scope}")
    if schema.undecodable:
        print(f"{schema.undecodable_note()}; they are left out below")
    groups = [("", schema.features)]
    if schema.container == "sequence_example":
        groups = [("context ", schema.features), ("feature list ", schema.sequence_features)]
    for label, features in groups:
        if label:
            print(f"\n{label.strip()}:")
        width = max((len(name) for name in features), default=4)
        for name, info in sorted(features.items()):
            counts = f"{info.min_values}" if info.min_values == info.max_values else f"{info.min_values}-{info.max_values}"
            steps = f", {info.min_steps}-{info.max_steps} steps" if info.min_steps is not None else ""
            sample = json.dumps(info.to_json()["sample"][:1])[1:-1][:60]
            kind = f"{info.kind} (text)" if info.kind == "bytes" and info.text else info.kind
            print(f"  {name:<{width}}  {kind:<12} present {info.present}/{schema.records}, "
                  f"values {counts}{steps}  e.g. {sample}")
    print("\n# a parse spec for these records:")
    print(schema.spec_source())
    return 0


def _stats(args: argparse.Namespace) -> int:
    paths = _expand(args.paths)
    if args.plot:
        check_plot_path(args.plot)  # before any work: a wrong suffix should not cost a pass over the data
    stats = feature_stats(paths, limit=args.limit, format=_format_arg(args),  # type: ignore[arg-type]
                          compression=args.compression)
    if args.json:
        print(json.dumps(stats.to_json(), indent=2))
    else:
        print(plural(stats.records, "record"))
        for name, item in stats.items():
            per = item.values_per_record
            print(f"\n{name} ({item.kind}): present in {item.count}, missing from {item.missing}; "
                  f"values per record {per.get('min')}-{per.get('max')} (mean {per.get('mean')})")
            if item.kind == "bytes":
                print(f"  length {item.lengths.get('min')}-{item.lengths.get('max')} (mean {item.lengths.get('mean')})")
                if item.top:
                    shown = ", ".join(f"{json.dumps(_json_bytes(v))} x{n}" for v, n in item.top)
                    bound = f" (too many distinct values to count all: each count may be up to {item.top_error} low)"
                    print(f"  top{bound if item.top_error else ''}: {shown}")
            elif item.min is not None:
                quantiles = ", ".join(f"p{int(q * 100)} {v:.6g}" for q, v in item.quantiles.items())
                print(f"  min {item.min:.6g}, max {item.max:.6g}, mean {item.mean:.6g}; {quantiles}"
                      + (f"; {item.non_finite} non-finite" if item.non_finite else ""))
    if args.plot:
        print("plot: " + plot_stats(stats, args.plot, title=", ".join(paths)), file=sys.stderr if args.json else sys.stdout)
    return 0


def _convert(args: argparse.Namespace) -> int:
    if args.shards is not None and args.shard_size is not None:
        raise ValueError("give --shards or --shard-size, not both")
    sources = _expand(args.sources) if args.source_format in (None, "tfrecord", "ofrecord") and len(args.sources) > 1 else args.sources
    written = convert(
        sources if len(sources) > 1 else sources[0], args.destination,
        shards=args.shards, shard_size=parse_size(args.shard_size) if args.shard_size else None,
        output_compression=args.output_compression, source_compression=args.compression,
        features=args.features.split(",") if args.features else None,
        source_format=args.source_format, destination_format=args.destination_format, fsync=args.fsync,
        compression_level=args.compression_level,
    )
    for path in written:
        print(path)
    return 0


def _count_arg(minimum: int) -> Any:
    """An argparse type: an integer of at least ``minimum``, checked before any work."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value
    return parse


def _level_arg(text: str) -> int:
    """An argparse type: a compression level, 0 to 9."""
    level = _count_arg(0)(text)
    if level > 9:
        raise argparse.ArgumentTypeError(f"a compression level is 0 to 9, not {level}")
    return level


def _plot_arg(text: str) -> str:
    try:
        return check_plot_path(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recordkit",
        description="Inspect, check, repair and convert TFRecord and OFRecord files, without TensorFlow.",
    )
    parser.add_argument("--version", action="version", version=f"recordkit {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    # --debug is also taken after the subcommand; SUPPRESS keeps a subcommand
    # that lacks it from resetting what was given before it.
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks on errors")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return commands.add_parser(name, parents=[debug], formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)

    def add(name: str, help: str, example: str):
        sub = command(name, help=help, description=help, epilog=f"example:\n  {example}")
        sub.add_argument("paths", nargs="+", metavar="PATH", help="files, globs or URLs")
        sub.add_argument("--compression", default="auto", help='"auto" (default), "none", "gzip" or "zlib"')
        sub.add_argument("--record-format", choices=["tfrecord", "ofrecord"],
                         help="default: ofrecord for part-NNNNN files, tfrecord otherwise")
        return sub

    add("count", "Count the records in each file (framing only: fast).",
        "recordkit count data/train-*.tfrecord").set_defaults(run=_count)
    add("verify", "Check every record's CRCs and framing; exit 1 if anything is damaged, "
        "with one line per problem giving the file and byte offset.",
        "recordkit verify data/*.tfrecord.gz").set_defaults(run=_verify)
    for name, limit in (("cat", None), ("head", 10)):
        sub = add(name, "Print records as JSON lines (bytes as UTF-8 strings, else {\"base64\": ...}) or in "
                  f"protobuf text format{'; the first 10 by default' if limit else ''}.",
                  f"recordkit {name} data/train.tfrecord --limit 3 --format text --features label,image")
        sub.add_argument("--limit", "-n", type=_count_arg(0), default=limit, help="print at most this many records")
        sub.add_argument("--format", dest="output_format", choices=["json", "text"], default="json")
        sub.add_argument("--features", help="comma-separated feature names to show (default: all)")
        sub.add_argument("--max-bytes", type=_count_arg(0), default=_MAX_BYTES_SHOWN,
                         help=f"show at most this many bytes of each byte string, with its length "
                              f"(default {_MAX_BYTES_SHOWN}; 0 shows them whole)")
        sub.set_defaults(run=_cat)
    salvage = command(
        "salvage", help="Copy every intact record of a damaged TFRecord file into a new file.",
        description="Copy every intact record of a damaged TFRecord file into a new file, resynchronizing "
        "after each damaged region (where a record's length and data CRCs check again). The new file appears "
        "only when complete.",
        epilog="example:\n  recordkit salvage broken.tfrecord.gz fixed.tfrecord",
    )
    salvage.add_argument("source", metavar="SRC")
    salvage.add_argument("destination", metavar="DST")
    salvage.add_argument("--compression", default="auto", help='of SRC: "auto" (default), "none", "gzip" or "zlib"')
    salvage.add_argument("--output-compression", choices=["none", "gzip", "zlib"],
                         help="of DST (default: from its suffix, .gz or .zz, else none)")
    salvage.set_defaults(run=_salvage)
    add("index", "Write an index (\"<offset> <size>\" per record, DALI's and tfrecord2idx's format) "
        "beside each uncompressed TFRecord file.", "recordkit index data/*.tfrecord").set_defaults(run=_index)
    inspect = add("inspect", "Show the schema: every feature, its kind, how often it is present, how many values "
                  "it holds, a sample; and a parse spec ready to paste. SequenceExamples and OFRecords are recognized.",
                  "recordkit inspect data/train-*.tfrecord --json")
    inspect.add_argument("--json", action="store_true", help='print {"features": {name: {"kind": ...}}, ...}')
    inspect.add_argument("--all", action="store_true", help="read every record (default: a sample)")
    inspect.add_argument("--limit", type=_count_arg(1), default=1000, help="records in the sample (default 1000)")
    inspect.set_defaults(run=_inspect)
    stats = add("stats", "Per-feature statistics: presence, values per record, min/max/mean/quantiles of numbers, "
                "lengths and most frequent values of bytes; --plot draws histograms.",
                "recordkit stats data/train.tfrecord --plot stats.png")
    stats.add_argument("--plot", metavar="FILE", type=_plot_arg, help="write histograms to FILE.png (needs matplotlib) or FILE.html")
    stats.add_argument("--json", action="store_true", help="print the statistics as JSON")
    stats.add_argument("--limit", type=_count_arg(1), help="read only this many records (default: all)")
    stats.set_defaults(run=_stats)
    conv = command(
        "convert", help="Convert between TFRecord, OFRecord, CSV, Parquet, JSON lines, .npz and image folders.",
        description="Convert SRC to DST; formats come from the suffixes (.tfrecord[.gz], .parquet, .csv, .jsonl, .npz) "
        "or from the layout (a part-NNNNN folder is OFRecord; a folder of class subfolders holds images, which become "
        "the TensorFlow tutorial's image_raw/height/width/depth/label features, with a label map beside the output). "
        "TFRecord outputs past ~100 MB are sharded (name-00000-of-0000N); every output appears only when complete.",
        epilog="examples:\n  recordkit convert table.parquet out/train.tfrecord --shards 3\n"
        "  recordkit convert photos/ out/images.tfrecord.gz --output-compression gzip\n"
        "  recordkit convert 'data/train-*.tfrecord' train.parquet",
    )
    conv.add_argument("sources", nargs="+", metavar="SRC", help="a file, folder or glob (several record files may be given)")
    conv.add_argument("destination", metavar="DST")
    sharding = conv.add_mutually_exclusive_group()
    sharding.add_argument("--shards", type=_count_arg(1), help="write N files (TFRecord: DST-00000-of-0000N; OFRecord: N parts)")
    sharding.add_argument("--shard-size", help="start a new shard after this much, e.g. 100MB")
    conv.add_argument("--compression", default="auto",
                      help='of TFRecord SRC files, as everywhere: "auto" (default), "none", "gzip" or "zlib"')
    conv.add_argument("--output-compression", choices=["none", "gzip", "zlib"],
                      help="of a TFRecord DST (default: from its suffix, .gz or .zz, else none)")
    conv.add_argument("--compression-level", type=_level_arg, metavar="0-9",
                      help="of a gzip or zlib DST: 0 (stored, fastest) to 9 (smallest); default 6")
    conv.add_argument("--features", help="comma-separated features (columns) to keep, in this order")
    conv.add_argument("--fsync", action="store_true", help="flush the outputs and their folder to the disk before exiting")
    conv.add_argument("--from", dest="source_format", choices=FORMATS, help="the format of SRC, when its name does not say")
    conv.add_argument("--to", dest="destination_format", choices=[f for f in FORMATS if f != "images"], help="the format of DST (ofrecord: a part-NNNNN folder)")
    conv.set_defaults(run=_convert)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    # Warnings (a float64 column stored as float32 ...) as one line each, like errors.
    warnings.formatwarning = lambda message, *_, **__: f"recordkit {args.command}: warning: {message}\n"
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
