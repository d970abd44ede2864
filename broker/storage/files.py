"""Durable small-file operations shared by the storage modules: an atomic
JSON write and a directory fsync. Nothing here knows about logs.

A JSON file is replaced atomically: written to ``<name>.tmp``, fsync'ed,
renamed over ``<name>``; a reader sees the old contents or the new, never a
mix. The rename itself is durable only once the directory is fsync'ed.

Thread-safety: plain functions; callers serialise writes to one file.
"""
from __future__ import annotations

import json
import os

TMP_SUFFIX = ".tmp"


def fsync_directory(directory: str) -> None:
    """Make the directory's entries (files created, renamed, unlinked) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomically(path: str, data: object, sync_directory: bool) -> None:
    """Replace ``path`` with ``data`` as JSON (tmp, fsync, rename). With
    ``sync_directory`` the rename survives a crash too; without it a crash
    may leave the previous version (fine for a file that is rewritten often
    and only ever lags behind the truth)."""
    tmp = path + TMP_SUFFIX
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync_directory:
        fsync_directory(os.path.dirname(path) or ".")


def remove_file(path: str) -> bool:
    """Unlink ``path`` and its leftover tmp file; whether ``path`` existed."""
    try:
        os.unlink(path + TMP_SUFFIX)
    except FileNotFoundError:
        pass
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
