"""Making a file put in place by a rename durable: its directory's entry synced.

A file written whole beside its name and renamed over it (a cursor, a recording, a
manifest) survives a power loss only once the directory holding the new entry is synced
too. This module owns that last step; it never syncs anything but a directory.
"""

from __future__ import annotations

import os


def fsync_directory(directory: str | os.PathLike[str], *, best_effort: bool = False) -> None:
    """Sync `directory`, so that a rename into it is durable.

    Where the platform cannot open a directory (not POSIX) it does nothing. With
    `best_effort`, a directory that cannot be opened or synced (some file systems refuse)
    is left as it is; otherwise the `OSError` is raised.
    """
    if os.name != "posix":
        return
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        if best_effort:
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not best_effort:
            raise
    finally:
        os.close(fd)
