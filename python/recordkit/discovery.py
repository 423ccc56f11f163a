"""Which files a source names, and what they hold.

Every reader finds its files here, with one set of rules: paths and URLs,
globs, folders, ``name@N`` shard sets and OneFlow ``part-NNNNN`` folders
(``list_files``); which files a folder listing passes over; whether a
shard set is complete and whole (its manifest, see ``recordkit._shardsets``);
a file's record format (``record_format``) and the compression a reader
or writer is asked for. This module imports nothing of recordkit's above
``_sources`` and ``_shardsets``, so that everything may import it.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import warnings
from typing import Any, Literal, Sequence

from recordkit._shardsets import ONEFLOW_PART, SHARD_NAME, checked_listing, set_suffix, shard_names, split_suffix
from recordkit._sources import PathLike, Source, import_fsspec, split_url
from recordkit.errors import user_stacklevel

__all__ = [
    "RecordFormat",
    "list_files",
    "expand_sources",
    "record_format",
    "check_format",
    "is_listed_record_file",
    "reader_compression",
    "suffix_compression",
]

RecordFormat = Literal["tfrecord", "ofrecord"]


def record_format(path: str) -> RecordFormat:
    """The format a file's name implies: OneFlow's ``part-N`` files are OFRecord, the rest TFRecord.

    The one rule every reader uses for ``format="auto"``.
    """
    return "ofrecord" if ONEFLOW_PART.match(_basename(path)) else "tfrecord"


def check_format(format: str) -> str:
    """A ``format`` argument checked: ``"auto"``, ``"tfrecord"`` or ``"ofrecord"``."""
    if format not in ("auto", "tfrecord", "ofrecord"):
        raise ValueError(f'format must be "auto", "tfrecord" or "ofrecord", not {format!r}')
    return format


def reader_compression(compression: str | None) -> str:
    """A reader's ``compression`` argument checked: ``"auto"``, ``"none"``, ``"gzip"`` or ``"zlib"``."""
    if compression is None:
        return "none"
    if not isinstance(compression, str):
        raise TypeError(f"compression must be a string or None, not {type(compression).__name__}")
    if compression.lower() not in ("auto", "none", "", "gzip", "zlib"):
        raise ValueError(
            f'unknown compression {compression!r}: expected "auto", None, "gzip" or "zlib"'
        )
    return compression.lower() or "none"


def suffix_compression(path: str | os.PathLike[str]) -> str | None:
    """The compression a file name asks for: ``"gzip"`` for ``.gz``/``.gzip``, ``"zlib"`` for ``.zz``/``.zlib``."""
    name = os.fspath(path).lower()
    if name.endswith((".gz", ".gzip")):
        return "gzip"
    if name.endswith((".zz", ".zlib")):
        return "zlib"
    return None


# --- naming the files ---------------------------------------------------------------------

_GLOB_CHARS = frozenset("*?[")
_AT_SHARDS = re.compile(r"^(?P<base>.+)@(?P<count>\d+)$")

# recordkit's own files beside records, passed over without a word: index files
# (ours, DALI's, tfrecord2idx's) and the label maps `convert` writes for image folders.
_SIDE_FILE_SUFFIXES = (".idx", ".index", ".tfindex", ".labels.json")
# Names that say a file holds something other than records: passed over with a
# warning that names them. Any other file is read as records, so that a damaged
# record file is reported as damaged, never passed over.
_OTHER_FILE_SUFFIXES = (
    ".json", ".jsonl", ".md", ".rst", ".txt", ".csv", ".tsv", ".parquet", ".arrow", ".feather", ".avro",
    ".orc", ".npy", ".npz", ".pkl", ".pickle", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".py", ".ipynb",
    ".sh", ".html", ".xml", ".log", ".pbtxt", ".png", ".jpg", ".jpeg", ".gif", ".pdf", ".zip", ".tar",
)
_OTHER_FILE_NAMES = frozenset({"readme", "license", "licence", "notice", "copying", "changelog", "makefile"})


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _natural_key(path: str) -> list[Any]:
    """Sorts ``part-2`` before ``part-10``."""
    return [int(piece) if piece.isdigit() else piece for piece in re.split(r"(\d+)", path)]


def is_listed_record_file(name: str) -> bool | None:
    """What a folder or glob listing does with a file of this name: True to read
    it as records; False to pass over it without a word (hidden files and
    unfinished writes, ``_SUCCESS`` markers, recordkit's index files and label
    maps); None to pass over it with a warning naming it (``README.md``, a
    ``.json``, a ``.csv``: files whose names say they hold something else)."""
    name = _basename(name)
    lower = name.lower()
    if name.startswith((".", "_")) or lower.endswith(_SIDE_FILE_SUFFIXES):
        return False
    if lower.endswith(_OTHER_FILE_SUFFIXES) or lower in _OTHER_FILE_NAMES:
        return None
    return True


class _Files:
    """Local or fsspec file-system operations on one path or URL."""

    def __init__(self, text: str) -> None:
        scheme, _ = split_url(text)
        self.fs: Any = None
        self.path = text
        if scheme is not None:
            self.fs, self.path = import_fsspec().core.url_to_fs(text)
        elif text.startswith("file://"):
            self.path = text[len("file://") :]

    def exists(self) -> bool:
        return self.fs.exists(self.path) if self.fs else os.path.exists(self.path)

    def isdir(self) -> bool:
        return self.fs.isdir(self.path) if self.fs else os.path.isdir(self.path)

    def name(self, path: str) -> str:
        return self.fs.unstrip_protocol(path) if self.fs else path

    def glob(self) -> list[str]:
        found = self.fs.glob(self.path) if self.fs else glob.glob(self.path)
        return [self.name(p) for p in found if not (self.fs.isdir(p) if self.fs else os.path.isdir(p))]

    def listdir(self) -> list[str]:
        if self.fs:
            entries = self.fs.ls(self.path, detail=True)
            return [self.name(e["name"]) for e in entries if e.get("type") != "directory"]
        return [
            os.path.join(self.path, name)
            for name in os.listdir(self.path)
            if not os.path.isdir(os.path.join(self.path, name))
        ]


def _record_files(found: list[str], where: str) -> list[str]:
    """The record files of a listing, in natural order; files whose names say
    they are something else are passed over with one warning naming them."""
    kept, others = [], []
    for path in found:
        verdict = is_listed_record_file(path)
        if verdict:
            kept.append(path)
        elif verdict is None:
            others.append(_basename(path))
    if others:
        shown = ", ".join(sorted(others)[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        warnings.warn(
            f"{where}: passed over {len(others)} file(s) that are not record files ({shown}); "
            "name the record files (a glob such as folder/*.tfrecord, or a list) to leave them out quietly",
            UserWarning, stacklevel=user_stacklevel(),
        )
    return sorted(kept, key=_natural_key)


def _check_shard_sets(files: list[str], where: str, pattern: str | None = None) -> None:
    """Refuses a listing from which some ``-NNNNN-of-NNNNN`` shards are missing,
    that holds one shard twice, or that holds two sets of one name.

    A compression suffix is not part of a set's name: ``data-00002-of-00004.tfrecord.gz``
    belongs with ``data-00000-of-00004.tfrecord``. With a glob ``pattern``, only the
    shards the pattern itself would match count as missing (``train-0000[01]-of-00004``
    asks for two shards only).
    """
    sets: dict[tuple[str, str, str, int], dict[int, dict[int, list[str]]]] = {}
    for path in files:
        match = SHARD_NAME.match(_basename(path))
        if match:
            key = (os.path.dirname(path), match["prefix"], set_suffix(match["suffix"]), len(match["index"]))
            members = sets.setdefault(key, {}).setdefault(int(match["total"]), {})
            members.setdefault(int(match["index"]), []).append(path)
    for (folder, prefix, suffix, width), by_total in sets.items():
        if len(by_total) > 1:
            named = " and ".join(f"{prefix}-{'N' * width}-of-{t:0{width}d}{suffix}" for t in sorted(by_total))
            raise ValueError(
                f"{where}: holds more than one shard set of one name ({named}); reading both would "
                "mix or repeat records: remove the stale set, or name the one you mean"
            )
        [(total, members)] = by_total.items()
        twice = next((paths for _, paths in sorted(members.items()) if len(paths) > 1), None)
        if twice is not None:
            raise ValueError(
                f"{where}: holds shard {_basename(twice[0])} more than once ({', '.join(map(_basename, twice))}); "
                "reading both would repeat its records: remove the copy you do not mean"
            )
        missing = sorted(set(range(total)) - set(members))
        if pattern is not None:
            wanted = _basename(pattern)
            full_suffixes = {SHARD_NAME.match(_basename(paths[0]))["suffix"] for paths in members.values()}  # type: ignore[index]
            missing = [i for i in missing
                       if any(fnmatch.fnmatchcase(f"{prefix}-{i:0{width}d}-of-{total:0{width}d}{s}", wanted)
                              for s in full_suffixes)]
        if missing:
            shown = ", ".join(f"{i:0{width}d}" for i in missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise FileNotFoundError(
                f"{where}: the shard set {prefix}-{'N' * width}-of-{total:0{width}d}{suffix} is incomplete: "
                f"{len(missing)} of {total} shards are missing ({shown})"
            )


def list_files(source: PathLike | Sequence[PathLike]) -> list[str]:
    """The record files a source names, in order.

    A source is a path or URL, a glob (``data/train-*.tfrecord``), a directory,
    ``name@N`` (the N shards ``name-00000-of-0000N`` ...), or a list of any of
    these. A directory or glob passes over hidden files, ``_SUCCESS`` markers
    and recordkit's own side files (index files, ``*.labels.json``) without a
    word, and over files whose names say they hold something else
    (``README.md``, ``*.json``, ``*.csv``, ...) with a warning naming them;
    every other file is read as records.

    A directory, glob or ``@N`` set from which a ``-NNNNN-of-NNNNN`` shard is
    missing is an error, so that no data goes unread without anyone noticing
    (a glob asks only for the shards it would match); so is a directory or
    glob holding two shard sets of one name with different totals
    (``train-*-of-00003`` beside ``train-*-of-00002``), or one shard twice,
    which would repeat records. A compression suffix is not part of a set's
    name. Sets written by recordkit are checked against their manifest.

    Raises:
        FileNotFoundError: When something named does not exist, a glob or
            directory holds no record file, or a shard set is incomplete.
        ValueError: When a directory or glob holds two shard sets of one name,
            or a set does not match its manifest.
    """
    if isinstance(source, (list, tuple)):
        if not source:
            raise ValueError("no sources given: the list is empty")
        return [path for item in source for path in list_files(item)]
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"expected a path, URL, glob or a list of them, not {type(source).__name__}")
    text = os.fsdecode(os.fspath(source))
    files = _Files(text)
    if files.exists():
        if not files.isdir():
            return [text]
        found = checked_listing(_record_files(files.listdir(), text), text)
        if not found:
            raise FileNotFoundError(2, "no record files in the directory", text)
        _check_shard_sets(found, text)
        return found
    at_shards = _AT_SHARDS.match(text)
    if at_shards:
        return _at_shards(at_shards["base"], int(at_shards["count"]))
    if _GLOB_CHARS.intersection(text):
        found = checked_listing(_record_files(files.glob(), text), text)
        if not found:
            raise FileNotFoundError(2, "no record file matches", text)
        _check_shard_sets(found, text, pattern=text)
        return found
    raise FileNotFoundError(2, "No such file or directory", text)


def expand_sources(sources: Source | Sequence[Source]) -> list[Source]:
    """The files a source names, as ``list_files`` finds them (globs,
    folders, ``name@N``, lists), with open file objects kept as they are."""
    items = [sources] if isinstance(sources, (str, os.PathLike)) or hasattr(sources, "read") else list(sources)  # type: ignore[arg-type]
    if not items:
        raise ValueError("no sources given: the list is empty")
    return [item for source in items
            for item in ([source] if hasattr(source, "read") else list_files(source))]  # type: ignore[arg-type]


def _at_shards(base: str, count: int) -> list[str]:
    """``name@N``: the N shards ``name-00000-of-0000N`` (TensorFlow's spelling), or
    ``name-00000-of-0000N.tfrecord`` and the like (what ``shard_names`` writes
    for ``name.tfrecord``; ``name.tfrecord@N`` finds those too)."""
    if count < 1:
        raise ValueError(f"{base}@{count}: a shard count must be at least 1")
    spellings = [[f"{base}-{i:05d}-of-{count:05d}" for i in range(count)], shard_names(base, count)]
    if not split_suffix(_basename(base))[1]:
        spellings += [shard_names(base + suffix, count) for suffix in _SHARD_SUFFIXES]
    tried: list[str] = []
    for names in spellings:
        if names[0] in tried:
            continue
        tried.append(names[0])
        present = [_Files(name).exists() for name in names]
        if all(present):
            current = checked_listing(names, f"{base}@{count}", warn=False)
            if len(current) != len(names):
                raise FileNotFoundError(f"{base}@{count}: these files are an older set of this name, replaced by "
                                        "another (its manifest lists other files); name the current set")
            return current
        if any(present):
            missing = [name for name, there in zip(names, present) if not there]
            raise FileNotFoundError(
                f"{base}@{count}: {len(missing)} of {count} shards are missing (first: {missing[0]})"
            )
    raise FileNotFoundError(f"{base}@{count}: no shard set found; tried {', '.join(tried)}")


# The suffixes ``name@N`` tries after TensorFlow's bare spelling, most common first.
_SHARD_SUFFIXES = (".tfrecord", ".tfrecords", ".tfrecord.gz", ".tfrecord.zz", ".tfr", ".gz")
