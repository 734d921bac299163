"""One PostgreSQL transaction: statements, the chain's head under a row lock, the run's lock.

`PostgresTx` is the SQLite backend's named transitions (`SqliteTx`: each a
compare-and-set in one statement, and its audit events) run on a PostgreSQL
connection: the statements are the same text, translated (`_connection.translate`),
and what differs is here (decision 0080):

- **The chain's heads** (decision 0093): the first event a transaction appends to
  a partition locks that partition's row of `chain_head` (`SELECT ... FOR UPDATE`)
  until commit, so each partition's events are numbered and chained in commit
  order with no gap and no fork, and writers of runs in other partitions do not
  wait; the row keeps the highest seq issued in it and that event's hash. Lock
  order: the run (`lock_run`), then heads; no runtime path appends events of two
  runs in one transaction (one that did would take its heads in the order it
  appends, and PostgreSQL would end a deadlock, were two to cross, by failing one).
- **`lock_run`** is `SELECT ... FOR UPDATE` on the run's row.
- **`lease_now`** is the server's `clock_timestamp()`: every host judges a lease
  by one clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

import psycopg

from ..._clock import as_stored
from ..._errors import StoreError
from .._records import GuardedRun
from ..sqlite._codecs import lease_from, run_from_row
from ..sqlite._writes import SqliteTx
from ._connection import store_error, translate


def server_now(conn: psycopg.Connection[Any]) -> datetime:
    """The server's clock (`clock_timestamp()`), as a stored time (UTC, microseconds)."""
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    if row is None or not isinstance(row[0], datetime):
        raise StoreError("the server did not say what time it is")
    return as_stored(row[0])


class PostgresTx(SqliteTx):
    """One transaction of the PostgreSQL store: every named compare-and-set write and read.

    Handed out by `PostgresStore.transaction()` (READ COMMITTED) and `snapshot()`
    (REPEATABLE READ READ ONLY); valid only inside its block.
    """

    def __init__(self, conn: psycopg.Connection[Any], partitions: int = 1) -> None:
        super().__init__(cast(Any, conn), partitions)
        self._pg = conn
        # Whether a statement that changes something has run: until one has, a lock
        # wait past the timeout (the first `lock_run`, typically) is `StoreBusyError`,
        # which the outcome writes retry; after, a retry would run the work twice.
        self._wrote = False

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Any:
        self._check_open()
        try:
            cursor = self._pg.execute(translate(sql), params)
        except psycopg.Error as e:
            raise store_error(
                e, "a statement of the transaction failed", retryable=not self._wrote
            ) from e
        if not self._wrote and sql.lstrip()[:6].upper() != "SELECT":
            self._wrote = True
        return cursor

    def _read_head(self, part: int) -> Any:
        """The partition's head row, locked (`FOR UPDATE`) until the transaction ends."""
        return self.execute(
            "SELECT seq, hash FROM chain_head WHERE part = ? FOR UPDATE", (part,)
        ).fetchone()

    def lock_run(self, run_id: str) -> GuardedRun | None:
        """The run and its lease, its row locked (`FOR UPDATE`) until the transaction ends."""
        row = self.execute("SELECT * FROM runs WHERE id = ? FOR UPDATE", (run_id,)).fetchone()
        if row is None:
            return None
        lease = lease_from(
            run_id,
            row["status"],
            row["lease_owner"],
            row["lease_expires_at"],
            row["lease_holder"],
            row["lease_epoch"],
        )
        return GuardedRun(None, lease, lambda: run_from_row(row))

    def lease_now(self, wall: Callable[[], datetime]) -> datetime:
        """The server's clock: `wall` is not used (one clock for every host)."""
        self._check_open()
        try:
            return server_now(self._pg)
        except psycopg.Error as e:
            raise store_error(e, "reading the server's clock failed", retryable=False) from e
