"""One PostgreSQL transaction: statements, the chain's head under a row lock, the run's lock.

`PostgresTx` is the SQLite backend's named transitions (`SqliteTx`: each a
compare-and-set in one statement, and its audit events) run on a PostgreSQL
connection: the statements are the same text, translated (`_connection.translate`),
and what differs is here (decision 0080):

- **The chain's heads** (decision 0093): a transaction holds a partition's row of
  `chain_head` (`SELECT ... FOR UPDATE`) from before its first event there until
  commit, so each partition's events are numbered and chained in commit order with
  no gap and no fork, and writers of runs in other partitions do not wait; the row
  keeps the highest seq issued in it and that event's hash. Lock order: the run
  (`lock_run`), then heads; no runtime path appends events of two runs in one
  transaction (one that did would take its heads in the order it appends, and
  PostgreSQL would end a deadlock, were two to cross, by failing one).
- **`lock_run`** is `SELECT ... FOR UPDATE` on the run's row, joined with its
  partition's head row when the transaction holds that head not yet (decision 0108):
  one statement locking the run, then the head; the transaction's first event there
  reads the head from it.
- **`lease_now`** is the server's `clock_timestamp()`: every host judges a lease
  by one clock.

Round trips (decisions 0100, 0108): the events are written with the transaction's
`COMMIT`, in one statement (`write_events`) pipelined with it (`commit`); a
`lock_run` of a run whose row this transaction already holds reads the server's
clock in the same statement, and a `lease_now` asked right after it (no statement
between) is that reading, taken while the lock was held. `BEGIN`, the lock of the
store's tables and the schema's guard go with the first statement (the guard inside it,
when that is a run's lock), and a statement whose result nobody reads (`_SENT_LATER`)
with the next one.

The tables' lock (`LOCK`, `ROW EXCLUSIVE`: what a write takes anyway, so writers never
wait for each other on it) comes before the guard: DDL that could put code in the way of
the transaction's statements (a trigger, rule, policy, default, check or index) waits
for the transaction to end, and what committed before the lock, the guard sees. Lock
order: the tables (`TABLES`' order, in the one statement), then the run, then heads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

import psycopg

from ..._chain import partition_of
from ..._clock import as_stored
from ..._errors import StoreError
from ..._records import Run
from .._records import GuardedRun, LeaseState
from ..sqlite._codecs import lease_from, run_from_row
from ..sqlite._tx import _TOUCHES_CHAIN, EventRow
from ..sqlite._values import INSERT_SQL
from ..sqlite._writes import SqliteTx
from ._connection import Target, rollback_quietly, store_error, translate
from ._migrations import GUARD, LOCK, begin_checked, is_refusal, is_unlockable

# Rows of events in one INSERT: well under the protocol's 65,535 parameters (7 a row).
_ROWS_PER_INSERT = 1000

_LOCK_RUN = "SELECT *, clock_timestamp() AS agentrt_clock FROM runs WHERE id = ? FOR UPDATE"

# The run's lock and its partition's head's in one statement (decision 0108): `FOR UPDATE`
# locks the joined rows in the order their tables are named, so the run first, then the
# head, the order every transaction takes them in.
_LOCK_RUN_AND_HEAD = (
    "SELECT r.*, clock_timestamp() AS agentrt_clock, "
    "h.seq AS agentrt_head_seq, h.hash AS agentrt_head_hash "
    "FROM runs AS r, ONLY chain_head AS h WHERE r.id = ? AND h.part = ? FOR UPDATE"
)


def _guarded(lock: str) -> str:
    """`lock` with the schema's guard as its first condition: a value that depends on no
    row, which the server works out once, before it reads or locks any row (a one-time
    filter over the scans), and which fails as `GUARD` does when the schema holds what it
    refuses (decision 0108)."""
    return lock.replace(" WHERE ", f" WHERE ({GUARD}) IS NULL AND ", 1)


PREPARE_GUARD: bool | None = True
"""Whether a statement carrying the schema's guard (`GUARD`, or a run's lock with it) is
prepared on the session from its first use (decision 0217): its plan is the costly part (a
dozen catalogs' lookups), so each later transaction of the connection only executes it,
where psycopg's default (None) plans it afresh until its fifth use. `benchmarks/pg_open_cpu.py`
sets None to measure the difference."""


# A transaction's first statement that is a run's lock carries the guard itself: `BEGIN`
# and the one statement, where `BEGIN`, the guard and the statement were sent.
_GUARDED_FIRST = {
    translate(lock): translate(_guarded(lock)) for lock in (_LOCK_RUN, _LOCK_RUN_AND_HEAD)
}


@functools.lru_cache(maxsize=64)
def _events_sql(rows: int, heads: int) -> str:
    """One statement inserting `rows` events and, when `heads`, moving that many heads."""
    values = ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * rows)
    insert = (
        f"INSERT INTO events (seq, run_id, step_id, at, type, payload_json, hash) VALUES {values}"
    )
    if not heads:
        return insert
    moved = ", ".join(["(?::integer, ?::bigint, ?::text)"] * heads)
    return (
        f"WITH appended AS ({insert}) "
        "UPDATE chain_head AS h SET seq = v.seq, hash = v.hash "
        f"FROM (VALUES {moved}) AS v (part, seq, hash) WHERE h.part = v.part"
    )


# Statements whose result no caller reads, and which nothing decides on before the
# transaction's next statement: each is sent with that statement, in one round trip
# (decision 0108). The text is the named write's own; one whose text changes is sent at
# once again, as any other.
_SENT_LATER = frozenset(
    {
        # `claim_step`'s new step, inserted once the claim held (its events follow it).
        "INSERT INTO steps (id, run_id, idx, status, started_at) VALUES (?, ?, ?, ?, ?)",
        # A stored value's part (`TxCore.stored`): inserted unless there already.
        INSERT_SQL,
    }
)


class _SentLater:
    """What `execute` returns for a statement sent with the transaction's next one (or
    its `COMMIT`): it has no result yet, and no caller reads one."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        raise StoreError(
            f"the result of a statement sent with the transaction's next one has no {name!r}"
        )


_LATER = _SentLater()


@functools.lru_cache(maxsize=1024)
def _statement(sql: str) -> tuple[str, bool, bool, bool]:
    """What `execute` needs of a statement's text, worked out once per text: the text as
    psycopg takes it (`translate`), whether it touches the events or the chain's heads
    (the appended events are written first), whether it is a SELECT, whether it is sent
    with the next statement (`_SENT_LATER`)."""
    return (
        translate(sql),
        _TOUCHES_CHAIN.search(sql) is not None,
        sql.lstrip()[:6].upper() == "SELECT",
        sql in _SENT_LATER,
    )


_SERVER_NOW = "SELECT clock_timestamp()"


def server_now(conn: psycopg.Connection[Any]) -> datetime:
    """The server's clock (`clock_timestamp()`), as a stored time (UTC, microseconds)."""
    return _read_clock(conn.execute(_SERVER_NOW))


def _read_clock(cursor: Any) -> datetime:
    row = cursor.fetchone()
    if row is None or not isinstance(row[0], datetime):
        raise StoreError("the server did not say what time it is")
    return as_stored(row[0])


class PostgresTx(SqliteTx):
    """One transaction of the PostgreSQL store: every named compare-and-set write and read.

    Handed out by `PostgresStore.transaction()` (READ COMMITTED) and `snapshot()`
    (REPEATABLE READ READ ONLY); valid only inside its block.
    """

    # Whether a run's lock takes its partition's head with it (decision 0108); off only
    # for a record whose heads are not yet rows by partition (a previous release's).
    lock_head_with_run = True

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        partitions: int = 1,
        begin: str | None = None,
        target: Target | None = None,
        cursors: tuple[psycopg.Cursor[Any], psycopg.Cursor[Any]] | None = None,
        lock: str = LOCK,
    ) -> None:
        super().__init__(cast(Any, conn), partitions)
        self._pg = conn
        # The store's tables locked right after `BEGIN`, before the guard (`LOCK`): no DDL
        # on them can run between the guard and the transaction's end (decision 0172).
        self._lock_tables = lock
        # The `BEGIN ...` not sent yet: it goes with the schema's guard and the first
        # statement, in one round trip (`_send`); None once sent (or for a view
        # its store began).
        self._begin = begin
        self._target = target  # what a failure to begin is said with, its password hidden
        # Whether a statement that changes something has run: until one has, a lock
        # wait past the timeout (the first `lock_run`, typically) is `StoreBusyError`,
        # which the outcome writes retry; after, a retry would run the work twice.
        self._wrote = False
        # The runs whose rows this transaction has locked (`lock_run`).
        self._locked: set[str] = set()
        # Per partition, its head row `(seq, hash)` locked with a run's lock and not read by
        # an append yet (`lock_run`, `_read_head`).
        self._locked_heads: dict[int, tuple[Any, Any]] = {}
        # The statements sent with the next one (`_SENT_LATER`), in order, and their values.
        self._later: list[tuple[str, Sequence[Any] | Mapping[str, Any]]] = []
        # The server's clock read by the last statement, a `lock_run` of a row already
        # held; None once any other statement ran.
        self._clock: datetime | None = None
        # The one cursor of the transaction's statements: a statement's result is read
        # before the next is sent, so each does not need a cursor of its own; and one for
        # those whose result nobody reads (`BEGIN`, the schema's guard, `COMMIT`: a
        # failure of theirs is raised all the same). The store's, kept with its
        # connection (`cursors`), else made with the first statement.
        self._cursor: psycopg.Cursor[Any] | None = None
        self._unread: psycopg.Cursor[Any] | None = None
        # Set once `commit` sends its COMMIT: a connection lost after it may have committed.
        self.commit_sent = False
        if cursors is not None:
            self._cursor, self._unread = cursors

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Any:
        """Run `sql` (`?` / `:name` placeholders); its cursor, whose result is valid until
        the transaction's next statement (every caller reads it before sending another)."""
        self._check_open()
        text, touches_chain, reads, later = _statement(sql)
        if touches_chain and self._unwritten:
            self.write_events()
        self._clock = None
        if later:
            self._later.append((text, params))
            self._wrote = True  # a failure from here on may follow a write
            return _LATER
        try:
            if self._begin is not None or self._later:
                cursor = self._send(text, params)
            else:
                cursor = self._statements().execute(text, params)
        except psycopg.Error as e:
            raise store_error(
                e, "a statement of the transaction failed", retryable=not self._wrote
            ) from e
        if not reads:
            self._wrote = True
        return cursor

    def _statements(self) -> psycopg.Cursor[Any]:
        if self._cursor is None:
            self._cursor = self._pg.cursor()
        return self._cursor

    def _unread_results(self) -> psycopg.Cursor[Any]:
        if self._unread is None:
            self._unread = self._pg.cursor()
        return self._unread

    def _send(self, sql: str | None, params: Sequence[Any] | Mapping[str, Any]) -> Any:
        """What is pending, then `sql` (if any), pipelined: one round trip. Pending: the
        `BEGIN`, the store's tables' lock (`LOCK`) and the schema's guard, if the
        transaction has sent nothing yet (a run's lock carries the guard itself:
        `_GUARDED_FIRST`), then the statements sent later
        (`_SENT_LATER`). The guard fails when the schema holds a
        trigger, rule, view or policy it refuses, and the server then skips what follows
        it, so the rest runs only in a transaction whose schema was found safe first, as
        when each was sent alone; a statement sent later that fails stops what follows it
        the same way. Refused: `check_schema`, in a transaction begun again, says what it
        found. Returns `sql`'s cursor (None without one)."""
        begin, self._begin = self._begin, None
        later, self._later = self._later, []
        try:
            with self._pg.pipeline():
                unread = self._unread_results()
                guarded = None if begin is None or later else _GUARDED_FIRST.get(sql or "")
                if begin is not None:
                    unread.execute(begin)
                    unread.execute(self._lock_tables)
                    if guarded is None:
                        unread.execute(GUARD, prepare=PREPARE_GUARD)
                for text, values in later:
                    unread.execute(text, values)
                cursor = None
                if sql is not None:
                    sent = sql if guarded is None else guarded
                    prepare = None if guarded is None else PREPARE_GUARD
                    cursor = self._statements().execute(sent, params, prepare=prepare)
        except psycopg.Error as e:
            if begin is None:
                raise
            if self._pg.closed or self._pg.broken:  # lost before anything ran: say so
                raise store_error(
                    e, "cannot begin a write transaction, nothing was written", target=self._target
                ) from e
            if not (is_refusal(e) or is_unlockable(e)):
                raise
            rollback_quietly(self._pg)
            # UnsafeSchemaError, naming what was found (or the lock's failure again).
            begin_checked(self._pg, begin, self._lock_tables)
            for text, values in later:  # removed meanwhile: begun and checked
                self._pg.execute(text, values)
            return None if sql is None else self._pg.execute(sql, params)
        return cursor

    def send_later(self) -> None:
        """Send the statements sent with the next one now (a read on the store's
        connection outside the transaction's own statements must see them)."""
        if self._later:
            self._check_open()
            try:
                self._send(None, ())
            except psycopg.Error as e:
                raise store_error(
                    e, "a statement of the transaction failed", retryable=False
                ) from e

    def begun(self) -> None:
        """Send the pending `BEGIN` and the schema's check now (a transaction that ran no
        statement, before its `COMMIT`)."""
        begin, self._begin = self._begin, None
        if begin is not None:
            begin_checked(self._pg, begin, self._lock_tables)

    def _read_head(self, part: int) -> Any:
        """The partition's head row, locked (`FOR UPDATE`) until the transaction ends: the
        one a run's lock took with it, else locked now."""
        locked = self._locked_heads.pop(part, None)
        if locked is not None:
            return locked
        return self.execute(
            "SELECT seq, hash FROM chain_head WHERE part = ? FOR UPDATE", (part,)
        ).fetchone()

    def _write_events(self, rows: list[EventRow], heads: list[tuple[int, int, str]]) -> None:
        """The events' rows and the heads' moves in one statement (more than
        `_ROWS_PER_INSERT` events: the rest before it, in order, in statements of their own)."""
        while len(rows) > _ROWS_PER_INSERT:
            chunk, rows = rows[:_ROWS_PER_INSERT], rows[_ROWS_PER_INSERT:]
            self.execute(_events_sql(len(chunk), 0), [v for row in chunk for v in row])
        params: list[Any] = [v for row in rows for v in row]
        for head in heads:
            params.extend(head)
        self.execute(_events_sql(len(rows), len(heads)), params)

    def commit(self) -> None:
        """Write the appended events and `COMMIT`, sent together (psycopg's pipeline mode:
        one round trip). If the write fails the server skips the `COMMIT`, and the
        transaction is left failed for the caller's `ROLLBACK`."""
        self.begun()
        later, self._later = self._later, []
        self.commit_sent = True  # from here a lost connection leaves the outcome unknown
        if not self._unwritten and not later:
            self._unread_results().execute("COMMIT")
            return
        with self._pg.pipeline():
            unread = self._unread_results()
            for text, values in later:
                unread.execute(text, values)
            self.write_events()
            unread.execute("COMMIT")

    def settle_model_call(self, run_id: str, *args: Any, **kwargs: Any) -> Run | None:
        """`SqliteTx.settle_model_call`, the run's row locked first (`lock_run`).

        The settlement writes the attempt's row, then the run's totals. Taking the run
        first keeps the lock order (the run, then what else the transaction writes, as a
        takeover that settles a dispatched attempt does), and a run held by another
        transaction past the lock timeout is refused busy before anything is written,
        so the outcome's writer waits it out and retries (decision 0012) as on SQLite,
        instead of failing after a write it cannot retry.

        A run this transaction has locked already (a commit's kept writes, after
        `hold_lease`) is not locked again: that statement would wait for no one, and its
        clock reading (`lock_run`) is one the settlement never asks for.
        """
        if run_id not in self._locked:
            self.lock_run(run_id)
        return super().settle_model_call(run_id, *args, **kwargs)

    def lock_lease(self, run_id: str) -> LeaseState | None:
        """`lock_run`'s lease: the row locked, and the head with it, exactly as it does."""
        guarded = self.lock_run(run_id)
        return None if guarded is None else guarded.lease

    def lock_run(self, run_id: str) -> GuardedRun | None:
        """The run and its lease, its row locked (`FOR UPDATE`) until the transaction ends.

        The same statement reads the server's clock; when the row was already this
        transaction's (so the statement waited for no one), that reading is what a
        `lease_now` asked next returns."""
        held = run_id in self._locked
        part = partition_of(run_id, self.partitions)
        row = None
        if self.lock_head_with_run and part not in self._heads and part not in self._locked_heads:
            # Its partition's head too, which the run's events will be chained to
            # (decision 0108); a run without a head row is locked alone, below.
            row = self.execute(_LOCK_RUN_AND_HEAD, (run_id, part)).fetchone()
            if row is not None:
                self._locked_heads[part] = (row["agentrt_head_seq"], row["agentrt_head_hash"])
        if row is None:
            row = self.execute(_LOCK_RUN, (run_id,)).fetchone()
        if row is None:
            return None
        self._locked.add(run_id)
        if held and isinstance(row["agentrt_clock"], datetime):
            self._clock = as_stored(row["agentrt_clock"])
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
        if self._clock is not None:  # read with the lock just taken again, nothing since
            now, self._clock = self._clock, None
            return now
        try:
            if self._begin is not None or self._later:  # with what is pending, one round trip
                return _read_clock(self._send(_SERVER_NOW, ()))
            return server_now(self._pg)
        except psycopg.Error as e:
            raise store_error(e, "reading the server's clock failed", retryable=False) from e
