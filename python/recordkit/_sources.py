"""Turning what a user calls a path into something the Rust core can read or write.

Local paths go to Rust as strings (Rust opens and maps them). Open binary
file objects are read through their ``read`` method. Any other ``scheme://``
URL goes through fsspec, an optional dependency imported only then.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Union

PathLike = Union[str, "os.PathLike[str]"]
Source = Union[PathLike, IO[bytes]]

__all__ = ["Source", "Opened", "open_input", "AtomicTarget", "open_output", "check_targets", "display_name", "require",
           "remove_files_of_dead_processes", "fsync_path", "replace_file", "make_folders", "remove_empty_folders"]


def _is_file_object(obj: Any) -> bool:
    return hasattr(obj, "read") or hasattr(obj, "write")


def display_name(source: Any) -> str:
    """How a source is named in messages."""
    if _is_file_object(source):
        name = getattr(source, "name", None)
        return name if isinstance(name, str) else repr(source)
    return os.fsdecode(os.fspath(source))


def split_url(path: str) -> tuple[str | None, str]:
    """``("s3", url)`` for a URL, ``(None, local_path)`` for a local path."""
    if "://" in path:
        scheme, rest = path.split("://", 1)
        if scheme == "file":
            return None, rest
        return scheme, path
    return None, path


def require(module: str, extra: str, purpose: str) -> Any:
    """Imports an optional dependency, or fails with one line saying what to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{purpose} needs {module.split('.')[0]}: pip install 'recordkit[{extra}]'") from None


def import_fsspec() -> Any:
    return require("fsspec", "fsspec", "reading or writing URLs")


@dataclass
class Opened:
    """A readable source: what to pass to Rust, its name, and how to release it."""

    handle: Any
    name: str
    close: Callable[[], None] = field(default=lambda: None)
    reopenable: bool = True


def open_input(source: Source) -> Opened:
    """Prepares ``source`` (path, URL or binary file object) for reading."""
    if _is_file_object(source):
        return Opened(source, display_name(source), reopenable=False)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(
            f"expected a path, a URL or a binary file object, not {type(source).__name__}"
        )
    scheme, path = split_url(os.fsdecode(os.fspath(source)))
    if scheme is None:
        return Opened(path, path)
    handle = import_fsspec().open(path, "rb").open()
    return Opened(handle, path, handle.close)


def _temp_suffix() -> str:
    return f".tmp-{os.getpid()}-{os.urandom(4).hex()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def remove_files_of_dead_processes(directory: str, name: re.Pattern[str]) -> None:
    """Removes the files in ``directory`` whose whole name ``name`` matches and whose
    ``pid`` group names a process that is gone: what killed writers left behind."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return
    for entry in entries:
        match = name.match(entry)
        if match and int(match["pid"]) != os.getpid() and not _pid_alive(int(match["pid"])):
            try:
                os.unlink(os.path.join(directory, entry))
            except OSError:
                pass  # another writer removed it first, or it is not ours to remove


def fsync_path(path: str, directory: bool = False) -> None:
    """Flushes a file (or a folder's entries) to the disk."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_targets(targets: Any) -> None:
    """Refuses, before any work, local output paths that cannot be written: a path
    that is a folder, or one whose nearest existing folder this process may not
    write in. Errors name the path asked for, not a temporary file beside it."""
    import errno

    for target in targets:
        if _is_file_object(target) or not isinstance(target, (str, os.PathLike)):
            continue
        path = os.fsdecode(os.fspath(target))
        if split_url(path)[0] is not None:
            continue
        local = split_url(path)[1]
        if os.path.isdir(local):
            raise IsADirectoryError(errno.EISDIR, "is a folder, not a file to write: name a file inside it", path)
        folder = os.path.dirname(os.path.abspath(local))
        while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
            if os.path.exists(folder):
                raise NotADirectoryError(errno.ENOTDIR, f"cannot make a folder where the file {folder} is", path)
            folder = os.path.dirname(folder)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, f"cannot write in the folder {folder}", path)


class AtomicTarget:
    """A file that appears under its final name only when ``commit`` runs.

    Writes go to a temporary name beside the target (``.name.tmp-<pid>-<random>``);
    ``commit`` renames it into place, ``discard`` deletes it. Temporary
    files that killed writers left for the same name are removed when the next
    writer starts. With ``fsync``, ``commit`` flushes the file, renames it,
    then flushes the folder, so that the committed file survives a power cut.
    File objects are written directly: their owner decides what becomes of them.
    """

    def __init__(self, target: Source, *, fsync: bool = False, atomic: bool = True) -> None:
        self.name = display_name(target)
        self._fsync = fsync
        self._fs: Any = None
        self._file: Any = None
        self._temp: str | None = None
        self._final: str | None = None
        self._in_place: str | None = None
        self._made: list[str] = []  # folders made for the file, deepest first
        if _is_file_object(target):
            self.handle: Any = target
            return
        if not isinstance(target, (str, os.PathLike)):
            raise TypeError(
                f"expected a path, a URL or a binary file object, not {type(target).__name__}"
            )
        check_targets([target])
        scheme, path = split_url(self.name)
        suffix = _temp_suffix()
        if scheme is None and not atomic:
            self._made = make_folders(os.path.dirname(os.path.abspath(path)))
            self._in_place = path  # nothing to rename; an abort leaves what was written
            self.handle = path
        elif scheme is None:
            directory, base = os.path.split(os.path.abspath(path))
            self._made = make_folders(directory)  # every writer creates a missing parent folder
            remove_files_of_dead_processes(directory, re.compile(rf"^\.{re.escape(base)}\.tmp-(?P<pid>\d+)-[0-9a-f]{{8}}$"))
            self._final = path
            self._temp = os.path.join(directory, f".{base}{suffix}")
            self.handle = self._temp
        else:
            fs, fs_path = import_fsspec().core.url_to_fs(path)
            fs.makedirs(fs._parent(fs_path), exist_ok=True)
            self._fs = fs
            self._final = fs_path
            self._temp = fs_path + suffix
            self._file = fs.open(self._temp, "wb")
            self.handle = self._file

    @property
    def temp_path(self) -> str | None:
        """The local file being written (temporary, or the target itself when written in place), if there is one."""
        return self._in_place or (self._temp if self._fs is None else None)

    def commit(self) -> None:
        """Moves the finished file under its final name."""
        if self._in_place is not None and self._fsync:
            fsync_path(self._in_place)
        if self._temp is None or self._final is None:
            return
        if self._fs is None:
            if self._fsync:
                fsync_path(self._temp)
            try:
                replace_file(self._temp, self._final)
            except OSError as error:  # named by the target, not by the temporary file
                raise type(error)(error.errno, f"cannot put the finished file in place: {error.strerror}",
                                  self._final) from None
            if self._fsync:
                fsync_path(os.path.dirname(os.path.abspath(self._final)), directory=True)
        else:
            self._file.close()
            self._fs.mv(self._temp, self._final)
        self._temp = None

    def discard(self) -> None:
        """Deletes the unfinished file; nothing appears under the final name."""
        if self._temp is None:
            return
        temp, self._temp = self._temp, None
        try:
            if self._fs is None:
                os.unlink(temp)
            else:
                self._file.close()
                self._fs.rm(temp)
        except OSError:
            pass  # already gone, or the filesystem refuses: nothing more to do
        self.remove_folders_made()

    def remove_folders_made(self) -> None:
        """Removes the folders made for the file, deepest first, as long as they
        are empty: a write that fails leaves no folder behind, and a folder that
        holds anything else (another writer's file) stays."""
        if self._temp is None:
            remove_empty_folders(self._made)


def make_folders(directory: str) -> list[str]:
    """Creates ``directory`` and its missing parents; returns those it created, deepest first."""
    missing = []
    folder = directory
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        missing.append(folder)
        folder = os.path.dirname(folder)
    os.makedirs(directory, exist_ok=True)
    return missing


def remove_empty_folders(made: list[str]) -> None:
    """Removes the folders of ``make_folders``' list, deepest first, while
    each is empty, taking each removed one off the list; the first that holds
    anything (another writer's file) stays, with those above it."""
    while made:
        try:
            os.rmdir(made[0])
        except OSError:
            return
        del made[0]


# Replaced files from this size on are let go on a thread of their own (see replace_file).
_LET_GO_IN_BACKGROUND_FROM = 8 << 20


def replace_file(source: str, target: str) -> threading.Thread | None:
    """``os.replace(source, target)``, where a large file it replaces is let go on another thread.

    The kernel frees a replaced file's cached pages when the last reference to it goes, and
    first waits for those still being written out: 130-175 ms for a 100 MB file written a
    moment before (ext4), that the caller would wait for in the rename. A reference held
    across the rename (``O_PATH``: no read permission needed, never blocks) moves that wait
    to a thread that only closes it. Returns that thread, or None where none was started
    (small files, files with other links, symlinks, systems without ``O_PATH``)."""
    held = _hold_for_replacement(target)
    try:
        os.replace(source, target)
    except BaseException:
        if held is not None:
            os.close(held)
        raise
    if held is None:
        return None
    closer = threading.Thread(target=os.close, args=(held,), name="recordkit-let-go", daemon=True)
    closer.start()
    return closer


def _hold_for_replacement(path: str) -> int | None:
    """A reference to ``path`` if the rename over it would be the last of a large regular file."""
    o_path = getattr(os, "O_PATH", None)
    if o_path is None:
        return None
    try:
        fd = os.open(path, o_path | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None  # no such file (the usual case), or none we may reach
    try:
        info = os.fstat(fd)
    except OSError:
        info = None
    if info is not None and stat.S_ISREG(info.st_mode) and info.st_nlink == 1 \
            and info.st_size >= _LET_GO_IN_BACKGROUND_FROM:
        return fd
    os.close(fd)
    return None


def open_output(target: Source, *, fsync: bool = False, atomic: bool = True) -> AtomicTarget:
    """Prepares ``target`` (path, URL or binary file object) for writing; a local path
    written in place with ``atomic=False``."""
    return AtomicTarget(target, fsync=fsync, atomic=atomic)
