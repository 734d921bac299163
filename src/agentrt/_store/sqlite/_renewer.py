"""The SQLite backend's heartbeat renewals: on a connection of the heartbeat's own.

A separate connection keeps a consumer holding the store's own connection (its
lock, a long read) from starving the heartbeat. A write transaction held open on
the file is another matter: SQLite has one writer, so the renewal waits for it
(busy timeout), and the heartbeat retries at its next tick. An in-memory store
has no file a second connection could reach, so it renews through its own
transactions. Either way the new expiry is the caller's wall clock plus the
lease's length, the same lease clock every other lease write in this backend uses.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta

from .._own_connection import OwnConnection
from ._connection import store_error
from ._writer_turns import WriterTurns
from ._writes import SqliteTx, renew_lease, renew_lease_alone


class ConnectionRenewer(OwnConnection[sqlite3.Connection]):
    """Renews on a connection of its own, opened lazily on the heartbeat's thread."""

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        wall: Callable[[], datetime],
        turns: WriterTurns,
    ) -> None:
        super().__init__()
        self._connect = connect
        self._wall = wall
        self._turns = turns  # its own turns among the file's writers (decision 0106)
        self._safe_schema: int | None = None

    def _renew(self, run_id: str, owner: str, ttl: timedelta) -> bool:
        if self._conn is None:
            self._conn = self._connect()
        conn = self._conn
        self._turns.take(conn)  # what its wait used is taken from BEGIN's busy timeout
        try:
            renewed, self._safe_schema = renew_lease_alone(
                conn, self._safe_schema, run_id, owner, self._wall() + ttl
            )
        except sqlite3.Error as e:
            self.close()
            raise store_error(e, f"renewing the lease on run {run_id} failed") from e
        finally:
            self._turns.give()
        return renewed

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
        self._turns.close()


class StoreRenewer:
    """Renews through the store's own connection: only for `:memory:` stores,
    where a second connection would open a different, empty database.

    `transaction` is the store's (`SqliteStore.transaction`): given, not imported,
    so this module and the store's do not import each other.
    """

    def __init__(
        self,
        transaction: Callable[[], AbstractContextManager[SqliteTx]],
        wall: Callable[[], datetime],
    ) -> None:
        self._transaction = transaction
        self._wall = wall

    def renew(self, run_id: str, owner: str, ttl: timedelta) -> bool:
        with self._transaction() as tx:
            return renew_lease(tx, run_id, owner, self._wall() + ttl)

    def close(self) -> None:
        pass
