"""A freshly created record's file as bytes, and a new database file written from them.

The crash test kit plays every case of a matrix on a fresh database; creating and
migrating each from nothing cost most of a case's store opening (decision 0185).
This module owns the other way to a fresh file: `fresh_image` creates one record
the ordinary way (`open_store`, with the chain partitions asked for, in a private
folder of its own), checkpoints it into its main file, closes it and keeps its
bytes; `SqliteImage.write_new(path)` then writes those bytes to a new file at
`path` as `open_store` creates one: exclusively (never through a symlink or over
a file that is there), owner-only (0600 whatever the umask), by this process (so
owned by its user). `open_store` on that file finds an existing record of this
code's schema version and migrates nothing.

Only the main file is kept: no `-wal` or `-shm` (every commit is in the main
file after the checkpoint), so the new file's first opener makes its own, as on
a created file. The journal mode (WAL) is in the file's header. The one
difference from a record created at the new path is the time in
`schema_migrations.applied_at`: the image's migrations were applied when it was
made, and that is the time they say.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field

from ..._errors import StoreError
from . import _filesafety as filesafety
from ._migrations import RUNTIME_VERSION, SCHEMA_VERSION
from ._store import open_store

_HEADER = b"SQLite format 3\x00"
_WAL_VERSIONS = b"\x02\x02"  # header bytes 18 and 19: the write and read versions of WAL mode


@dataclass(frozen=True)
class SqliteImage:
    """The main file of a record `open_store` created and migrated, checkpointed and closed.

    `key` is everything the bytes depend on: the chain partitions it was created with
    (`None`: the default), this code's schema and runtime versions, and the SQLite
    library that wrote it. An image serves only databases that would be opened the same
    way (`fresh_image` with the same `chain_partitions`).
    """

    key: tuple[int | None, int, str, str]
    data: bytes = field(repr=False)

    @property
    def chain_partitions(self) -> int | None:
        return self.key[0]

    def write_new(self, path: str | os.PathLike[str]) -> bool:
        """Write the image to a new file at `path`, 0600 and this user's, as `open_store`
        creates one. False, with nothing made, wherever `open_store` would not create a
        file either: something is already at `path` (a file, a symlink), or its folder is
        missing, unwritable or open to others (`open_store` at `path` then meets the same
        and says so, as it would have). Written whole or not at all: a failure to write
        removes the file and raises `StoreError`."""
        target = os.path.abspath(os.fspath(path))
        try:
            filesafety.check_directory(target)
        except StoreError:
            return False
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(target, flags, filesafety.OWNER_ONLY)
        except OSError:
            return False
        try:
            try:
                if filesafety.POSIX_MODES:
                    os.fchmod(fd, filesafety.OWNER_ONLY)  # the umask may have cleared bits
                view = memoryview(self.data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        except OSError as e:
            os.unlink(target)
            raise StoreError(f"cannot write {target}: {e.strerror}") from e
        return True


def fresh_image(chain_partitions: int | None = None) -> SqliteImage:
    """Create a record with `open_store(..., chain_partitions=chain_partitions)` in a
    private temporary folder, checkpoint it into its main file, and keep that file's bytes
    (the folder is removed). `StoreError` if the main file is not a whole WAL-mode record
    after the checkpoint."""
    folder = tempfile.mkdtemp(prefix="agentrt-image-")
    try:
        path = os.path.join(folder, "fresh.db")
        store = open_store(path, chain_partitions=chain_partitions)
        try:
            with store._lock:
                # Every page into the main file, and the -wal emptied: the file alone is
                # the record (closing the last connection would do the same, but say it).
                busy, _, _ = store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy:
                raise StoreError("the fresh record could not be checkpointed into its file")
        finally:
            store.close()
        wal = path + "-wal"
        if os.path.exists(wal) and os.path.getsize(wal) > 0:
            raise StoreError("the fresh record's -wal still holds pages after its checkpoint")
        with open(path, "rb") as f:
            data = f.read()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if not data.startswith(_HEADER) or data[18:20] != _WAL_VERSIONS:
        raise StoreError("the fresh record's file is not a SQLite database in WAL mode")
    return SqliteImage(
        (chain_partitions, SCHEMA_VERSION, RUNTIME_VERSION, sqlite3.sqlite_version), data
    )


__all__ = ["SqliteImage", "fresh_image"]
