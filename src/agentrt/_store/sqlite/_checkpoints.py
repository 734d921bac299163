"""The WAL's checkpoints run once the writer's turn is given back, not inside it.

SQLite checkpoints a WAL of `PAGES` pages or more inside the `COMMIT` that
crossed the mark (its auto-checkpoint): the pages are copied into the database
file and it is fsynced. agentrt's writers commit while holding their turn
(decision 0106), so every other writer to the file waited for that copy, which
no transaction needs: it was about a tenth of the time the turn was held with
eight processes on one file (decision 0120).

A store's own connection turns SQLite's auto-checkpoint off and, after each of
its write transactions has committed and its turn is given back, runs a
`PASSIVE` checkpoint itself when the WAL holds `PAGES` or more pages not yet
copied. It reads that from the WAL-index header at the start of the `-shm` file
(SQLite's documented format, https://sqlite.org/walformat.html: the header's
`mxFrame`, and `nBackfill` after its two copies), one `pread` a transaction.

Invariants:
- Durability is untouched: a checkpoint copies what is already committed and
  fsynced to the WAL; SQLite runs it beside other writers and readers.
- The WAL is checkpointed no later than SQLite's own mark would have: where the
  header cannot be read as this format at the open (no `-shm`, another version),
  the connection keeps SQLite's auto-checkpoint; a header unreadable later (its
  two copies differ mid-write, or the file is gone) counts as due.
- A checkpoint that fails, or finds another checkpoint running, changes nothing
  and is no error of the transaction, which has committed; the next one tries again.
- The `-shm` file is opened read-only, never written, and closed with the store.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import struct

PAGES = 1000
"""Pages waiting in the WAL that make a checkpoint due (SQLite's own default mark)."""

_SHM = "-shm"
_VERSION = 3007000
"""The WAL-index format this reads (`iVersion` of its header)."""
_HEADER = 48
"""Bytes of one copy of the header; two copies, then `nBackfill`."""
_HEADER_FIELDS = struct.Struct("=I4xI?xxxI")  # iVersion, iChange, isInit, mxFrame
_BACKFILL = struct.Struct("=I")


class WalCheckpoints:
    """When the WAL of one database is due a checkpoint, and running it on a connection."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def take_over(cls, path: str, conn: sqlite3.Connection) -> WalCheckpoints | None:
        """For `conn`, a writer of the WAL database at `path`: checkpoints run by this
        object, SQLite's auto-checkpoint turned off; None (and the auto-checkpoint kept)
        where the `-shm` header cannot be read as the format this knows."""
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path + _SHM, flags)
        except OSError:
            return None
        checkpoints = cls(fd)
        try:
            if checkpoints.waiting() is None:
                checkpoints.close()
                return None
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        except BaseException:
            checkpoints.close()
            raise
        return checkpoints

    def waiting(self) -> int | None:
        """Pages in the WAL not yet copied into the database; None when the header cannot
        be read as this format (a torn read of a header being written, the file gone)."""
        fd = self._fd
        if fd is None:
            return None
        try:
            data = os.pread(fd, 2 * _HEADER + _BACKFILL.size, 0)
        except OSError:
            return None
        if len(data) < 2 * _HEADER + _BACKFILL.size:
            return None
        if data[:_HEADER] != data[_HEADER : 2 * _HEADER]:  # being written: torn
            return None
        version, _, initialised, frames = _HEADER_FIELDS.unpack_from(data, 0)
        if version != _VERSION or not initialised:
            return None
        (copied,) = _BACKFILL.unpack_from(data, 2 * _HEADER)
        return max(0, int(frames) - int(copied))

    def run_if_due(self, conn: sqlite3.Connection) -> bool:
        """A `PASSIVE` checkpoint on `conn` (no transaction open on it) if `PAGES` or more
        pages wait, or the header cannot be read; whether one was run."""
        waiting = self.waiting()
        if waiting is not None and waiting < PAGES:
            return False
        # Best effort: the transaction before it has committed whatever this does.
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        return True

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
