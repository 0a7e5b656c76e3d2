"""The files of a results folder: checked before use, one run at a time, replaced atomically.

Rules that keep measured results from being lost or written where they should not be:

- ``prepare_folder``: the folder is made (or found) and proven writable before anything is
  measured; a file in its place, a file above it, or no permission is a one-line ``OutDirError``.
- ``folder_lock``: one run at a time per folder (a ``filelock`` lock file, released by the OS if
  the holder dies); a second run stops with ``FolderInUse`` before touching anything.
- ``atomic_write_text``: a file is replaced through a temp file of its own unique name in the
  same folder, then a rename; the temp file is removed if anything fails.
- ``keep_aside``: a file that cannot be read is renamed beside itself, never overwritten.
"""
from __future__ import annotations

import datetime
import os
import tempfile
from pathlib import Path

LOCK_NAME = ".cuflash-run.lock"


class OutDirError(ValueError):
    """A results folder that cannot be used: the message names the argument and its value."""


class FolderInUse(RuntimeError):
    """Another run holds the folder's lock."""


def check_folder(path, name: str = "out_dir") -> Path:
    """``path`` as a Path, or OutDirError naming ``name`` where a file is in the way (the path
    itself, or one of its parents): what can be told without making anything (a dry run)."""
    path = Path(path)
    what = f"{name}={str(path)!r}"
    if path.exists() and not path.is_dir():
        raise OutDirError(f"{what} is a file, not a folder; give a folder for the results")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutDirError(f"{what} cannot be made: {str(parent)!r} is a file, not a "
                                  f"folder")
            break
    return path


def prepare_folder(path, name: str = "out_dir") -> Path:
    """Make ``path`` (and its parents) if needed and check a file can be created in it.

    Raises OutDirError naming ``name`` and the value for a file in the way, a path under a file,
    or a folder that cannot be created or written to. Leaves nothing behind in the folder."""
    path = check_folder(path, name)
    what = f"{name}={str(path)!r}"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutDirError(f"{what} cannot be made: {exc.strerror or exc}") from None
    try:
        with tempfile.TemporaryFile(dir=path, prefix=".cuflash-probe-"):
            pass
    except OSError as exc:
        raise OutDirError(f"{what} is not writable: {exc.strerror or exc}") from None
    return path


def folder_lock(folder):
    """An acquired lock on ``folder`` (a context manager: ``with folder_lock(d): ...``).

    Raises FolderInUse at once when another process holds it."""
    from filelock import FileLock, Timeout
    path = Path(folder) / LOCK_NAME
    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise FolderInUse(f"results folder {str(folder)!r} is in use by another cuflash run "
                          f"(it holds {path.name}); wait for that run to finish, or give "
                          f"another folder with --out") from None
    return _Held(lock)


class _Held:
    """Releases an acquired FileLock on exit."""

    def __init__(self, lock):
        self.lock = lock

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.lock.release()


def atomic_write_text(path, text: str) -> Path:
    """Replace ``path`` with ``text``: written to a uniquely named temp file beside it, then
    renamed over it, so a reader sees the old or the new file, and two writers never share a
    temp file. The temp file is removed if writing fails."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def keep_aside(path) -> Path:
    """Rename ``path`` to ``<name>.unreadable-<timestamp>`` beside it (never overwriting) and
    return the new path."""
    path = Path(path)
    stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
    for i in range(1000):
        aside = path.with_name(f"{path.name}.unreadable-{stamp}" + (f"-{i}" if i else ""))
        if not aside.exists():
            path.rename(aside)
            return aside
    raise FileExistsError(f"cannot keep {path} aside: too many earlier copies")
