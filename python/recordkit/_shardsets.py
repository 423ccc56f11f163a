"""Sets of files written as one output: ``name-NNNNN-of-NNNNN`` shards and OneFlow ``part-NNNNN`` folders.

A set replaces every earlier set of the same name, whatever its size: writing
``train`` in 2 shards after 3 must not leave ``train-00002-of-00003`` behind
for a glob or a folder listing to read twice. New files are renamed into place
first, and only then are the stale ones removed, so a reader never finds the
name with no complete set at all.
"""

from __future__ import annotations

import os
import re

__all__ = ["SHARD_NAME", "ONEFLOW_PART", "RECORD_SUFFIXES", "shard_names", "split_suffix", "replaced_files", "remove_files"]

SHARD_NAME = re.compile(r"^(?P<prefix>.*)-(?P<index>\d{5,})-of-(?P<total>\d{5,})(?P<suffix>.*)$")
ONEFLOW_PART = re.compile(r"^part-\d+$")
RECORD_SUFFIXES = (".tfrecords", ".tfrecord", ".tfr", ".gz", ".gzip", ".zz", ".zlib")


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
    stale: set[str] = set()
    keep = {os.path.abspath(p) for p in finals}
    for final in finals:
        folder, name = os.path.split(os.path.abspath(final))
        shard = SHARD_NAME.match(name)
        if not (shard or ONEFLOW_PART.match(name)) or not os.path.isdir(folder):
            continue
        for entry in os.listdir(folder):
            other = SHARD_NAME.match(entry)
            same_set = (
                other is not None and shard is not None
                and (other["prefix"], other["suffix"]) == (shard["prefix"], shard["suffix"])
            ) or (shard is None and ONEFLOW_PART.match(entry) is not None)
            path = os.path.join(folder, entry)
            if same_set and path not in keep and os.path.isfile(path):
                stale.add(path)
    return sorted(stale)


def remove_files(paths: list[str]) -> None:
    """Removes the stale files of a replaced set, once the new set is in place."""
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass  # removed by someone else meanwhile: the outcome is the same
