"""Sets of files written as one output: ``name-NNNNN-of-NNNNN`` shards and OneFlow ``part-NNNNN`` folders.

A set replaces every earlier set of the same name, whatever its size: writing
``train`` in 2 shards after 3 must not leave ``train-00002-of-00003`` behind
for a glob or a folder listing to read twice. New files are renamed into place
first, and only then are the stale ones removed, so a reader never finds the
name with no complete set at all.

Renames happen one file at a time, so a writer killed between two of them
would leave old and new files side by side. The commit therefore writes a
manifest first (``.train-N-of-N.tfrecord.recordkit-set`` or
``.part-N.recordkit-set`` beside the files, hidden from listings): the new files' names, sizes and fingerprints (CRC-32 of their first
and last 4 KiB). Readers of a folder, glob or ``name@N`` check every set that
has one: a file that does not match is an error, never a silent mix. The
manifest also records the files the set replaced: those found still there (a
removal cut short) are left out, with a warning. Any other file of the name
(a set written later by another tool) is read, so that a folder holding two
sets of one name is refused, never read as one of them. Sets without a
manifest (TensorFlow's) are read as they are, checked only for completeness.
To readers, a compression suffix is not part of a set's name:
``train-00000-of-00002.tfrecord.gz`` and ``train-00001-of-00002.tfrecord`` are one set
(TensorFlow jobs write such sets); to writers it is, so that writing a compressed copy
beside a set never removes the set.
"""

from __future__ import annotations

import json
import os
import re
import warnings
import zlib
from typing import Sequence

from recordkit.errors import user_stacklevel

__all__ = ["SHARD_NAME", "ONEFLOW_PART", "RECORD_SUFFIXES", "shard_names", "split_suffix", "set_suffix",
           "replaced_files", "remove_files", "write_manifest", "checked_listing", "file_fingerprint"]

SHARD_NAME = re.compile(r"^(?P<prefix>.*)-(?P<index>\d{5,})-of-(?P<total>\d{5,})(?P<suffix>.*)$")
ONEFLOW_PART = re.compile(r"^part-\d+$")
RECORD_SUFFIXES = (".tfrecords", ".tfrecord", ".tfr", ".gz", ".gzip", ".zz", ".zlib")
_COMPRESSION_SUFFIXES = (".gz", ".gzip", ".zz", ".zlib")


def set_suffix(suffix: str) -> str:
    """A shard name's suffix as its set knows it: without compression suffixes
    (``".tfrecord.gz"`` -> ``".tfrecord"``), which differ from file to file of a
    set when files were compressed one by one."""
    while suffix.lower().endswith(_COMPRESSION_SUFFIXES):
        suffix = suffix[: suffix.rindex(".")]
    return suffix


def split_suffix(base: str) -> tuple[str, str]:
    """``"train.tfrecord.gz"`` -> ``("train", ".tfrecord.gz")``: the record suffixes, which stay last."""
    suffix = ""
    while True:
        for known in RECORD_SUFFIXES:
            if base.lower().endswith(known) and len(base) > len(known):
                base, suffix = base[: -len(known)], base[-len(known) :] + suffix
                break
        else:
            return base, suffix


def shard_names(path: str | os.PathLike[str], shards: int) -> list[str]:
    """TensorFlow-style shard names: ``out/train.tfrecord``, 3 -> ``out/train-00000-of-00003.tfrecord`` ...

    The record suffixes (``.tfrecord``, ``.gz`` ...) stay at the end.
    """
    directory, base = os.path.split(os.fspath(path))
    base, suffix = split_suffix(base)
    return [os.path.join(directory, f"{base}-{i:05d}-of-{shards:05d}{suffix}") for i in range(shards)]


def replaced_files(finals: list[str]) -> list[str]:
    """The existing local files that a set written under ``finals`` replaces.

    For shards, every ``prefix-NNNNN-of-NNNNN suffix`` file of the same prefix
    and suffix in the same folder, whatever its total; for OneFlow parts, every
    other ``part-`` file of the folder. A single plain file replaces nothing
    beyond itself (the rename does that).
    """
    folder = os.path.dirname(os.path.abspath(finals[0]))
    key = _set_key(os.path.basename(finals[0]))
    if key is None or not os.path.isdir(folder):
        return []
    keep = {os.path.basename(p) for p in finals}  # a set's files share its folder and name
    return sorted(os.path.join(folder, entry) for entry in os.listdir(folder)
                  if entry not in keep and _set_key(entry) == key and os.path.isfile(os.path.join(folder, entry)))


def remove_files(paths: list[str]) -> None:
    """Removes the stale files of a replaced set, once the new set is in place."""
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass  # removed by someone else meanwhile: the outcome is the same


_MANIFEST_SUFFIX = ".recordkit-set"
_FINGERPRINT_BYTES = 4096


SetKey = tuple[str, ...]


def _set_key(name: str) -> SetKey | None:
    """The set a shard or part file belongs to, as writers replace sets: ``(prefix,
    suffix)`` of a ``prefix-NNNNN-of-NNNNN suffix`` shard, ``("part",)`` of a
    OneFlow part. The compression suffix counts here: writing a compressed copy
    beside a set leaves the set alone (readers of the folder then refuse the pair)."""
    shard = SHARD_NAME.match(name)
    if shard:
        return shard["prefix"], shard["suffix"]
    return ("part",) if ONEFLOW_PART.match(name) else None


def _set_name(key: SetKey) -> str:
    """``train-N-of-N.tfrecord``, ``part-N``: how messages and the manifest's file name show a set."""
    return f"{key[0]}-N-of-N{key[1]}" if len(key) == 2 else "part-N"


def _manifest_path(folder: str, key: SetKey) -> str:
    return os.path.join(folder, f".{_set_name(key)}{_MANIFEST_SUFFIX}")


def file_fingerprint(path: str) -> dict[str, int]:
    """What identifies a local file's content cheaply: its size and the CRC-32 of
    its first and last 4 KiB (a rewrite that keeps all three is vanishingly rare)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(_FINGERPRINT_BYTES)
        f.seek(max(0, size - _FINGERPRINT_BYTES))
        tail = f.read(_FINGERPRINT_BYTES)
    return {"size": size, "head": zlib.crc32(head), "tail": zlib.crc32(tail)}


def write_manifest(finals: list[str], files: list[str], replaced: Sequence[str] = (), *,
                   fsync: bool = False) -> None:
    """Records, before any rename, what the set about to appear under ``finals``
    holds (``files[i]`` is the finished file that becomes ``finals[i]``) and the
    files of the set it ``replaced`` (``replaced_files``); with ``fsync``,
    flushed to the disk before it is renamed into place."""
    if any("://" in path for path in finals + files):
        return  # local sets only: a URL's files are renamed by its filesystem, and checked for completeness
    folder = os.path.dirname(os.path.abspath(finals[0]))
    key = _set_key(os.path.basename(finals[0]))
    if key is None:
        return
    entries = {os.path.basename(final): file_fingerprint(file) for final, file in zip(finals, files)}
    older = {}
    for path in replaced:
        try:
            older[os.path.basename(path)] = file_fingerprint(path)
        except FileNotFoundError:
            pass  # removed by someone else meanwhile: nothing of it can be found later
    path = _manifest_path(folder, key)
    temp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    with open(temp, "w", encoding="utf-8") as f:
        json.dump({"recordkit_set": 1, "set": list(key), "files": entries, "replaced": older}, f)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(temp, path)


def checked_listing(files: list[str], where: str, *, warn: bool = True) -> list[str]:
    """``files`` (local paths, as a listing found them) checked against the manifests
    of their sets: a mismatch raises; files that a manifest records as replaced
    (their removal cut short) are left out, with a warning naming them (unless
    ``warn`` is false: the caller raises instead)."""
    manifests: dict[tuple[str, SetKey], _Manifest | None] = {}
    kept = []
    left_out: dict[str, list[str]] = {}
    for path in files:
        folder, name = os.path.split(path)
        key = _set_key(name)
        if key is None or "://" in path:
            kept.append(path)
            continue
        if (folder, key) not in manifests:
            manifests[folder, key] = _read_manifest(_manifest_path(folder or ".", key), key)
        manifest = manifests[folder, key]
        if manifest is None:
            kept.append(path)
        elif name in manifest.files:
            if file_fingerprint(path) != manifest.files[name]:
                raise ValueError(
                    f"{where}: {path} is not the file its set's manifest ({_manifest_path(folder or '.', key)}) "
                    f"lists: a write of the set {_set_name(key)} did not finish, leaving old and new files side by side. "
                    "Write the set again (or, if a file was replaced by hand, remove the manifest)"
                )
            kept.append(path)
        elif name in manifest.replaced and file_fingerprint(path) == manifest.replaced[name]:
            # A file of the set this one replaced, whose removal was cut short.
            left_out.setdefault(_manifest_path(folder or ".", key), []).append(name)
        else:
            kept.append(path)  # another set of the name, written since: the listing's checks refuse the pair
    for manifest_path, names in left_out.items() if warn else ():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        warnings.warn(
            f"{where}: left out {len(names)} file(s) of an older set that the set in {manifest_path} replaced "
            f"({shown}): their removal was cut short; delete them", UserWarning, stacklevel=user_stacklevel())
    return kept


class _Manifest:
    """What a set's manifest records: its files, and the files of the set it replaced."""

    __slots__ = ("files", "replaced")

    def __init__(self, files: dict[str, dict[str, int]], replaced: dict[str, dict[str, int]]) -> None:
        self.files, self.replaced = files, replaced


def _read_manifest(path: str, key: SetKey) -> _Manifest | None:
    """The files a set's manifest lists; None without one, or when it belongs to
    another set whose shown name is the same (prefixes and suffixes can hold anything)."""
    try:
        with open(path, encoding="utf-8") as f:
            content = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: unreadable shard-set manifest ({error}); remove it to read the files as they are") from None
    files = content.get("files") if isinstance(content, dict) else None
    replaced = content.get("replaced", {}) if isinstance(content, dict) else None
    if not isinstance(files, dict) or not isinstance(replaced, dict):
        raise ValueError(f"{path}: not a shard-set manifest; remove it to read the files as they are")
    return _Manifest(files, replaced) if content.get("set") == list(key) else None
