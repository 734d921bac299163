"""The SQLite backend's heartbeat renewals: on a connection of the heartbeat's own.

A separate connection keeps a consumer holding the store's own connection (its
lock, a long read) from starving the heartbeat. A write transaction held open on
the file is another matter: SQLite has one writer, so the renewal waits for it
(busy timeout), and the heartbeat retries at its next tick. An in-memory store
has no file a second connection could reach, so it renews through its own
transactions. Either way the new expiry is the caller's wall clock plus the
lease's length, the same lease clock every other lease write in this backend uses.

A renewal counts only while the database file and its `-wal` at the path are the files
the store opened (`FileIdentity`, decision 0155, checked before and after its COMMIT):
once either is deleted or replaced, the connection writes to a file no other process
reads. The renewer then writes nothing more (a renewal found before its COMMIT is rolled
back), closes its connection and reports the lease not held: the heartbeat stops and says
the lease is lost, and the store refuses the loop's next commit on its own check.

A filesystem turned read-only under the store (decision 0208) fails every renewal: each
says so, naming the file, and the heartbeat tries again at its next beat, as after any
failed renewal. The lease is not reported lost (nothing could record anything; the loop's
next commit says why): it expires in the record at its last renewal.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta

from ..._errors import StoreError
from .._own_connection import OwnConnection
from .._records import LeaseState
from ._connection import store_error
from ._filesafety import FileIdentity, turned_read_only
from ._writer_turns import WriterTurns
from ._writes import SqliteTx, lease_named, renew_lease, renew_lease_alone


class ConnectionRenewer(OwnConnection[sqlite3.Connection]):
    """Renews on a connection of its own, opened lazily on the heartbeat's thread."""

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        wall: Callable[[], datetime],
        turns: WriterTurns,
        files: FileIdentity,
    ) -> None:
        super().__init__()
        self._connect = connect
        self._wall = wall
        self._turns = turns  # its own turns among the file's writers (decision 0106)
        self._files = files  # the files the store opened: renewed only while at the path
        self._safe_schema: int | None = None

    def _renew(self, run_id: str, owner: str, ttl: timedelta) -> bool:
        files = self._files
        if files.moved():  # before a connection is opened: it would open another file
            self.close()
            return False
        if self._conn is None:
            self._conn = self._connect()
        conn = self._conn
        self._turns.take(conn)  # what its wait used is taken from BEGIN's busy timeout
        try:
            renewed, self._safe_schema = renew_lease_alone(
                conn,
                self._safe_schema,
                run_id,
                owner,
                self._wall() + ttl,
                may_commit=lambda: not files.moved(),
            )
        except sqlite3.Error as e:
            self.close()
            read_only = turned_read_only(files.path)
            if read_only is not None:  # decision 0208: retried at the next beat, as any
                raise StoreError(
                    f"renewing the lease on run {run_id} failed: {read_only}, so the "
                    "renewal could not be written; the lease expires at its last renewal "
                    "unless the filesystem is read-write again by then"
                ) from e
            raise store_error(e, f"renewing the lease on run {run_id} failed") from e
        finally:
            self._turns.give()
        if files.moved():  # before or after its COMMIT: not a lease any other process reads
            self.close()
            return False
        return renewed

    def _holds(self, run_id: str, owner: str, epoch: int) -> bool:
        files = self._files
        if files.moved():  # as a renewal: no lease any other process reads is held there
            self.close()
            return False
        if self._conn is None:
            self._conn = self._connect()
        try:
            return lease_named(self._conn, run_id, owner, epoch)
        except sqlite3.Error as e:
            self.close()
            raise store_error(e, f"reading the lease on run {run_id} failed") from e

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
        self._turns.close()


class StoreRenewer:
    """Renews through the store's own connection: only for `:memory:` stores,
    where a second connection would open a different, empty database.

    `transaction` and `lease` are the store's (`SqliteStore.transaction`, `lease_state`):
    given, not imported, so this module and the store's do not import each other.
    """

    def __init__(
        self,
        transaction: Callable[[], AbstractContextManager[SqliteTx]],
        wall: Callable[[], datetime],
        lease: Callable[[str], LeaseState | None],
    ) -> None:
        self._transaction = transaction
        self._wall = wall
        self._lease = lease  # the store's `lease_state`: a read on its connection

    def renew(self, run_id: str, owner: str, ttl: timedelta) -> bool:
        with self._transaction() as tx:
            return renew_lease(tx, run_id, owner, self._wall() + ttl)

    def holds(self, run_id: str, owner: str, epoch: int) -> bool:
        lease = self._lease(run_id)
        return lease is not None and lease.held_by(owner) and lease.epoch == epoch

    def close(self) -> None:
        pass
