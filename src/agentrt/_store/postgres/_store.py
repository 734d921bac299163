"""The PostgreSQL store: opening a schema, transactions, snapshots, renewals, reads.

One `PostgresStore` holds one connection (autocommit; the store begins and ends
each transaction itself), serialized by a re-entrant lock as the SQLite store's
is. Write transactions are READ COMMITTED: every guarded write is one
conditional statement (PostgreSQL re-reads a row another transaction changed
before it applies the condition), `lock_run` and the chain head are row locks
held to commit. Snapshots are REPEATABLE READ READ ONLY. Commits are durable as
the server is configured (`synchronous_commit`, `fsync`: on by default).

The named reads are the SQLite store's, on this connection; those written in
SQLite's own dialect (JSON functions, GLOB, a cast to BLOB, `sqlite_master`)
are rewritten here.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql as pg_sql

from ..._canonical import from_text
from ..._chain import verify_chain
from ..._clock import format_time
from ..._errors import (
    SchemaVersionError,
    StoreBusyError,
    StoreDamagedError,
    StoreError,
    commit_unknown,
)
from ..._fork import left_to_the_parent
from ..._records import ApprovalStatus, FileCheck, RunStatus, VerifyReport
from .._base import Renewer
from .._own_connection import OwnConnection
from .._records import Grouped, RunCandidate, RunCursor, WaitingRow
from ..sqlite._chain_rows import SqliteChainReader
from ..sqlite._codecs import waiting_from_row
from ..sqlite._migrations import chain_partitions as chain_partitions_of
from ..sqlite._reads import _CANDIDATE_COLUMNS, _candidate
from ..sqlite._store import CLOSED, SqliteStore
from ..sqlite._writes import SqliteTx
from ._connection import (
    _DAMAGED,
    ESCAPED,
    LOCK_TIMEOUT_MS,
    PROXY_TABLES,
    TABLES,
    Target,
    UnencodableText,
    connect,
    end_read,
    one_line,
    parse_target,
    read_text,
    rollback_quietly,
    store_error,
    translate,
)
from ._migrations import (
    ASK_SCHEMA,
    PROXY_MIGRATIONS,
    begin_checked,
    check_exact,
    check_schema,
    check_writer,
    lock_statement,
    no_schema,
    statements,
    tables_at,
    upgrade,
)
from ._tx import PostgresTx, server_now

_T = TypeVar("_T")


def open_store(
    url: str, *, chain_partitions: int | None = None, asked: bool = False
) -> PostgresStore:
    """Open the store's schema at `url` for writing, creating or migrating it as needed.

    `chain_partitions` is N for a schema created now (default 16, decision 0093); one
    that exists keeps its own, and another N given for it is refused. The store's
    `found_version` is the schema version the migration found (0: created now).
    `asked` (`agentrt migrate`, decision 0201): a schema that holds tables but no agentrt
    record is refused, nothing changed."""
    target = parse_target(url)
    conn = connect(target)
    try:
        check_usable(conn, target, may_create=True)
        check_grants(conn, target, read_only=False)
        found = upgrade(
            conn,
            target.schema,
            chain_partitions=chain_partitions,
            where=target.shown,
            foreign=not asked,
        )
        partitions = chain_partitions_of(conn, where=target.shown)
        tables = tables_at()
    except psycopg.Error as e:
        conn.close()
        raise store_error(e, f"cannot open {target.shown}", target=target) from e
    except BaseException:
        conn.close()
        raise
    store = PostgresStore(conn, target, read_only=False, partitions=partitions, tables=tables)
    store.found_version = found
    return store


def open_existing(url: str, read_only: bool = False) -> PostgresStore:
    """Open an existing agentrt schema at `url`: never creates, never migrates."""
    target = parse_target(url)
    conn = connect(target)
    try:
        check_usable(conn, target, may_create=False)
        check_grants(conn, target, read_only=read_only)
        check_schema(conn)
        check_exact(conn)
        if read_only:
            conn.execute("SET default_transaction_read_only = on")
        else:
            check_writer(conn)
        partitions = chain_partitions_of(conn, strict=not read_only, where=target.shown)
        tables = tables_at()
    except psycopg.Error as e:
        conn.close()
        raise store_error(e, f"cannot open {target.shown}", target=target) from e
    except BaseException:
        conn.close()
        raise
    return PostgresStore(conn, target, read_only=read_only, partitions=partitions, tables=tables)


def check_usable(conn: psycopg.Connection[Any], target: Target, *, may_create: bool) -> None:
    """Refuse a schema that exists but that the role may not use (no USAGE on it): the
    server then leaves it off the search path, and the schema would read as holding no
    store (sending the operator to create one) or as no schema at all. Unless the open
    `may_create` it, refuse a schema that is not there, by name (a misspelled `schema=`
    would otherwise read as a record to create)."""
    row = conn.execute(
        "SELECT current_user::text, pg_catalog.has_schema_privilege(oid, 'USAGE') "
        "FROM pg_namespace WHERE nspname = %s",
        (target.schema,),
    ).fetchone()
    if row is None and not may_create:
        raise SchemaVersionError(f"{no_schema(target.schema)} ({ASK_SCHEMA})")
    if row is not None and not row[1]:
        raise StoreError(
            f"cannot open {target.shown}: the role {row[0]} may not use schema {target.schema} "
            "(it has no USAGE privilege on it); grant it, or name a schema of its own"
        )


_NEEDED = {False: ("SELECT", "INSERT", "UPDATE"), True: ("SELECT",)}


def check_grants(
    conn: psycopg.Connection[Any],
    target: Target,
    *,
    read_only: bool,
    tables: tuple[str, ...] | None = None,
) -> None:
    """Refuse a role missing a privilege the store needs on one of its tables that exist
    (`SELECT`, `INSERT`, `UPDATE` to write; `SELECT` to read), naming each and the `GRANT`
    that gives them: else the open passes and the first write fails, mid-run. `tables`:
    the store's (`tables_at()`) unless given (the proxy's, once it uses them)."""
    needed = _NEEDED[read_only]
    rows = conn.execute(
        "SELECT p.privilege, c.relname::text FROM pg_catalog.pg_class AS c "
        "JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace "
        "CROSS JOIN unnest(%s::text[]) WITH ORDINALITY AS p (privilege, k) "
        "WHERE n.nspname = %s AND c.relname = ANY(%s::text[]) AND c.relkind IN ('r', 'p') "
        "AND NOT pg_catalog.has_table_privilege(c.oid, p.privilege) "
        'ORDER BY p.k, c.relname COLLATE "C"',
        (list(needed), target.schema, list(tables_at() if tables is None else tables)),
    ).fetchall()
    if not rows:
        return
    role = conn.execute(
        "SELECT current_user::text, pg_catalog.quote_ident(current_user)"
    ).fetchone()
    name, quoted = (str(role[0]), str(role[1])) if role is not None else ("?", "?")
    missing: dict[str, list[str]] = {}
    for privilege, table in rows:
        missing.setdefault(str(privilege), []).append(str(table))
    lacks = " and ".join(f"{p} on {', '.join(t)}" for p, t in missing.items())
    grant = ", ".join(needed)
    who = "a reader needs SELECT" if read_only else "a writer needs SELECT, INSERT and UPDATE"
    raise StoreError(
        f"cannot open {target.shown}: the role {name} lacks {lacks}; {who} on every table of "
        f"the schema (as the owner: GRANT {grant} ON ALL TABLES IN SCHEMA {target.schema} TO "
        f"{quoted})"
    )


def drop_schema(url: str) -> bool:
    """Drop the schema `url` names (`?schema=`), with everything in it; False when there
    was none. For a record made to be thrown away (the crash test kit's cases)."""
    target = parse_target(url)
    try:
        with connect(target) as conn:
            found = conn.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (target.schema,)
            ).fetchone()
            conn.execute(
                pg_sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    pg_sql.Identifier(target.schema)
                )
            )
    except psycopg.Error as e:
        raise store_error(e, f"cannot drop {target.shown}", target=target) from e
    return found is not None


class PostgresChainReader(SqliteChainReader):
    """`ChainReader` over one connection, inside the caller's read snapshot: SQLite's
    statements, translated, and the server's damage said as such."""

    def __init__(self, conn: psycopg.Connection[Any], partitions: int) -> None:
        self._pg = conn
        self._partitions = partitions

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        try:
            return list(self._pg.execute(translate(sql), params).fetchall())
        except psycopg.Error as e:
            if isinstance(e, _DAMAGED):
                raise StoreDamagedError(
                    f"PostgreSQL cannot read the events from here: {one_line(str(e))}"
                ) from e
            raise store_error(e, "reading the events failed") from e


class PostgresRenewer(OwnConnection["psycopg.Connection[Any]"]):
    """Renews on a connection of its own, opened lazily on the heartbeat's thread; the new
    expiry is the server's clock plus the ttl."""

    def __init__(self, target: Target, lock: str) -> None:
        super().__init__()
        self._target = target
        self._lock_tables = lock  # the store's tables, locked before the check (`LOCK`)

    def _renew(self, run_id: str, owner: str, ttl: timedelta) -> bool:
        if self._conn is None:
            self._conn = connect(self._target)
        conn = self._conn
        try:
            try:
                begin_checked(conn, "BEGIN ISOLATION LEVEL READ COMMITTED", self._lock_tables)
                expires = server_now(conn) + ttl
                cur = conn.execute(
                    "UPDATE ONLY runs SET lease_expires_at = %s WHERE id = %s AND lease_owner = %s",
                    (format_time(expires), run_id, owner),
                )
                conn.execute("COMMIT")
            except BaseException:
                rollback_quietly(conn)
                raise
        except psycopg.Error as e:
            self.close()
            raise store_error(
                e, f"renewing the lease on run {run_id} failed", target=self._target
            ) from e
        return cur.rowcount == 1

    def _holds(self, run_id: str, owner: str, epoch: int) -> bool:
        if self._conn is None:
            self._conn = connect(self._target)
        try:  # one statement on an autocommit connection: no transaction kept open
            row = self._conn.execute(
                "SELECT 1 FROM ONLY runs WHERE id = %s AND lease_owner = %s AND lease_epoch = %s",
                (run_id, owner, epoch),
            ).fetchone()
        except psycopg.Error as e:
            self.close()
            raise store_error(
                e, f"reading the lease on run {run_id} failed", target=self._target
            ) from e
        return row is not None

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            self._conn = None


# Held by the transaction that migrates the proxy's tables (`migrate_proxy`), until it ends.
_PROXY_MIGRATION_LOCK = (
    "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext("
    "'agentrt.proxy.' || pg_catalog.current_schema()::text))"
)


class PostgresStore(SqliteStore):
    """The runtime's record in one PostgreSQL schema. Use `open_store`/`open_existing`."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        target: Target,
        *,
        read_only: bool,
        partitions: int = 1,
        tables: tuple[str, ...] = TABLES,
    ) -> None:
        self.path = target.shown
        self.partitions = partitions  # N, the chain's partitions: fixed for the record
        self.read_only = read_only
        self.in_memory = False
        self._target = target
        self._pg = conn
        self._uri = None
        self._lock = threading.RLock()
        self._tx: PostgresTx | None = None
        self._closed = False
        self._closed_why = CLOSED
        self._parent: int | None = None  # set in a forked child (`_leave`)
        self._safe_schema = None
        # The tables each write transaction locks before its guard: the store's (those of
        # the schema version it opened), and the proxy's once this store has migrated them
        # (`migrate_proxy`), the only way it comes to write them.
        self._tables = tables
        self._lock_tables = lock_statement(tables)
        # The two cursors every transaction on the connection uses (`PostgresTx`), made
        # again with a new connection.
        self._cursors: tuple[psycopg.Connection[Any], psycopg.Cursor[Any], psycopg.Cursor[Any]]
        self._cursors = (conn, conn.cursor(), conn.cursor())
        left_to_the_parent(self)  # a forked child leaves it to this process (decision 0127)

    def __enter__(self) -> PostgresStore:
        return self

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "read-write"
        return f"PostgresStore({self.path!r}, {mode})"

    def _connection(self) -> psycopg.Connection[Any]:
        """The store's connection, opened again if the server dropped it (a restart)."""
        if self._pg.closed or self._pg.broken:
            self._pg = connect(self._target)
            if self.read_only:
                self._pg.execute("SET default_transaction_read_only = on")
        return self._pg

    def _cursors_of(
        self, conn: psycopg.Connection[Any]
    ) -> tuple[psycopg.Cursor[Any], psycopg.Cursor[Any]]:
        """The transactions' two cursors on `conn`: the statements', and the one whose
        results nobody reads. A transaction reads each result before its next statement,
        and no result outlives its transaction, so every transaction can share them."""
        if self._cursors[0] is not conn:
            self._cursors = (conn, conn.cursor(), conn.cursor())
        return self._cursors[1], self._cursors[2]

    @contextlib.contextmanager
    def transaction(self, *, first: str | None = None) -> Iterator[PostgresTx]:
        """`BEGIN` (READ COMMITTED) ... `COMMIT`; any exception rolls it all back.

        `first`: a statement sent after `BEGIN` in the tables' lock's place (and before the
        guard); the transaction then locks the tables itself (`migrate_proxy`)."""
        if self.read_only:
            raise StoreError("the store was opened read-only")
        with self._lock:
            self._check_open()
            if self._tx is not None:
                raise StoreError("a transaction is already open on this store; they do not nest")
            conn = self._connection()
            # Begun with its first statement, the schema checked between (`PostgresTx`).
            tx = PostgresTx(
                conn,
                self.partitions,
                begin="BEGIN ISOLATION LEVEL READ COMMITTED",
                target=self._target,
                cursors=self._cursors_of(conn),
                lock=self._lock_tables if first is None else first,
            )
            self._tx = tx
            try:
                try:
                    yield tx
                    self._check_open()  # a block forked in ends here in the child
                except psycopg.Error as e:
                    self._rollback_on(conn)
                    raise store_error(
                        e,
                        "the transaction failed, nothing was written",
                        retryable=False,
                        target=self._target,
                    ) from e
                except BaseException:
                    self._rollback_on(conn)
                    raise
                try:
                    tx.commit()  # the appended events written, and COMMIT, in one round trip
                except (psycopg.Error, StoreError) as e:
                    if tx.commit_sent and (conn.closed or conn.broken):
                        # Lost with COMMIT sent (with the events, in one pipeline): the
                        # server may have committed before the connection went, so it is
                        # never "nothing was written". Nothing to roll back on it; the next
                        # use opens a new one, which reads what the server holds.
                        raise self._commit_lost(e) from e
                    self._rollback_on(conn)
                    if isinstance(e, StoreError):
                        raise
                    raise store_error(
                        e,
                        "commit failed, nothing was written",
                        retryable=False,
                        target=self._target,
                    ) from e
                except BaseException:
                    self._rollback_on(conn)
                    raise
            finally:
                tx._close()
                self._tx = None

    def _commit_lost(self, error: Exception) -> StoreError:
        """The error of a commit whose connection was lost once `COMMIT` was sent: whether
        the server committed is unknown (decision 0163)."""
        said = self._target.redact(one_line(str(error)))
        return commit_unknown(
            f"commit failed: the connection to the server was lost during COMMIT ({said}), "
            "so whether the transaction was committed is unknown (the server may have "
            "committed it); read the record again, on a new connection"
        )

    def transactions(self, works: Sequence[Callable[[SqliteTx], Any]]) -> list[Grouped]:
        """Each work in a transaction of its own, in order (`Store.transactions`): the server
        flushes concurrent commits together itself, and this store has one connection. Every
        failure, a busy or failed commit included, is that work's own outcome, since the
        works before it are already committed."""
        outcomes: list[Grouped] = []
        for index, work in enumerate(works):
            try:
                with self.transaction() as tx:
                    value = work(tx)
            except Exception as e:
                outcomes.append(Grouped(error=e))
            except BaseException as e:
                # The works before it are committed and keep their outcomes; this one
                # was rolled back, and those after it never ran.
                outcomes.append(Grouped(error=e))
                not_run = StoreError(
                    "the group stopped before this transaction ran; nothing of it was written"
                )
                outcomes.extend(Grouped(error=not_run) for _ in works[index + 1 :])
                return outcomes
            else:
                outcomes.append(Grouped(value))
        return outcomes

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[PostgresTx]:
        """`BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY` ... one snapshot, no writes."""
        with self._lock:
            self._check_open()
            if self._tx is not None:
                raise StoreError("a transaction is already open on this store; they do not nest")
            conn = self._connection()
            try:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            except psycopg.Error as e:
                self._rollback_on(conn)
                raise store_error(e, "cannot begin a read", target=self._target) from e
            view = PostgresTx(conn, self.partitions, cursors=self._cursors_of(conn))
            self._tx = view
            try:
                yield view
            except psycopg.Error as e:
                raise store_error(e, "a read of the store failed", target=self._target) from e
            finally:
                view._close()
                self._tx = None
                if self._parent is None:  # a forked child's would end the parent's
                    end_read(conn)

    def renewer(self, wall: Callable[[], datetime]) -> Renewer:
        """The heartbeat's renewals, on a connection of their own, by the server's clock."""
        self._check_open()
        return PostgresRenewer(self._target, self._lock_tables)

    def lease_now(self, wall: Callable[[], datetime]) -> datetime:
        """The server's clock (`clock_timestamp()`); `wall` is not used."""
        with self._lock:
            self._check_open()
            try:
                return server_now(self._connection())
            except psycopg.Error as e:
                raise store_error(e, "reading the server's clock failed") from e

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                with contextlib.suppress(psycopg.Error):
                    self._pg.close()

    def _connections(self) -> tuple[object, ...]:
        # Never closed in a forked child: the socket is the parent's session (decision 0127).
        return (self._pg, self._cursors)

    def _rollback_on(self, conn: psycopg.Connection[Any]) -> None:
        """Roll back `conn`'s transaction, unless the store is the parent's (a forked child
        would end the parent's transaction: the session is one)."""
        if self._parent is None:
            rollback_quietly(conn)

    # --- reads ----------------------------------------------------------------------------------

    def _own_view(self) -> None:
        """A read on the store's own connection inside its open transaction (this thread's)
        sees what the transaction wrote: its statements sent with the next one (decision
        0108) and its events (decision 0100) are sent first."""
        if self._tx is not None:
            self._tx.send_later()
            self._tx.write_events()

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """A read of your own on the store's connection (`?` placeholders)."""
        return self._read(sql, params, keys=False)

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return self._read(sql, params, keys=True)

    def _read(self, sql: str, params: Sequence[Any], *, keys: bool) -> list[Any]:
        """`SqliteStore._read` on the server: a text parameter UTF-8 cannot hold is a key no
        row holds in the store's own reads (`keys`), else a `StoreError`; nothing is sent."""
        with self._lock:
            self._check_open()
            self._own_view()
            try:
                return list(self._connection().execute(translate(sql), params).fetchall())
            except UnencodableText as e:
                if keys:
                    return []
                raise StoreError(f"a read of the store failed: {e}") from e
            except psycopg.Error as e:
                if self._tx is None:
                    rollback_quietly(self._pg)
                raise store_error(e, "a read of the store failed", target=self._target) from e

    def _read_snapshot(self, work: Callable[[psycopg.Connection[Any]], _T]) -> _T:  # type: ignore[override]
        """`work` on a connection of its own, in one REPEATABLE READ READ ONLY snapshot."""
        self._check_open()
        conn = connect(self._target)
        try:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                return work(conn)
            finally:
                rollback_quietly(conn)
        except psycopg.Error as e:
            raise store_error(e, "a read of the store failed", target=self._target) from e
        finally:
            conn.close()

    def check_file(self, *, full: bool = False, max_problems: int = 100) -> FileCheck:
        """The server keeps and checks its own files (checksums, WAL): a client checks
        nothing, which `check == "server"` says (`agentrt verify` prints it as such)."""
        self._check_open()
        return FileCheck(ok=True, check="server", problems=())

    def verify_events(
        self,
        from_seq: int | None = None,
        to_seq: int | None = None,
        *,
        head: tuple[int, str] | Sequence[tuple[int, str]] | None = None,
    ) -> VerifyReport:
        """Check the event chain in one snapshot on a connection of its own; see `_chain`."""
        return self._read_snapshot(
            lambda conn: verify_chain(
                PostgresChainReader(conn, self.partitions), from_seq, to_seq, head=head
            )
        )

    def unfinished_runs(self, after: RunCursor | None, limit: int) -> list[RunCandidate]:
        cols = ", ".join(f"pg_catalog.convert_to({c}, 'UTF8')" for c in _CANDIDATE_COLUMNS)
        rows = self._query(
            f"SELECT rowid, lease_epoch, {cols} FROM runs "
            "WHERE status IN (?, ?) AND rowid > ? ORDER BY rowid LIMIT ?",
            (
                str(RunStatus.RUNNING),
                str(RunStatus.WAITING_FOR_APPROVAL),
                0 if after is None else after.position,
                limit,
            ),
        )
        return [_candidate(tuple(_candidate_value(v) for v in r)) for r in rows]

    def started_tool_names(self, run_id: str) -> list[str | None]:
        """The names of the tools the run was started with; None for one that will not read."""
        created = self._query(
            "SELECT payload_json FROM events WHERE run_id = ? AND type = 'run.created' "
            "ORDER BY seq LIMIT 1",
            (run_id,),
        )
        if not created:
            return []
        try:
            tools = from_text(created[0][0]).get("tools")
        except Exception:  # a stored payload may be anything
            return [None]
        if not isinstance(tools, list):
            return []
        hashes = sorted({t for t in tools if isinstance(t, str)})
        if not hashes:
            return []
        marks = ", ".join("?" for _ in hashes)
        rows = self._query(
            f"SELECT spec_json FROM tool_specs WHERE hash IN ({marks}) ORDER BY hash", hashes
        )
        names: list[str | None] = []
        for (text,) in rows:
            try:
                name = from_text(text).get("name")
            except Exception:  # a stored spec may be anything
                name = None
            names.append(name if isinstance(name, str) else None)
        return names

    def _waiting(self, rows: list[Any], cap: int, *, with_goal: bool) -> list[WaitingRow]:
        out = []
        for r in rows:
            values = dict(zip(r.keys(), r, strict=True))
            tool: str | None = None
            try:
                spec = from_text(values.pop("request_json")).get("spec", {})
                found = spec.get("name") if isinstance(spec, dict) else None
                tool = found if isinstance(found, str) else None
            except Exception:  # a stored request may be anything
                tool = None
            values["tool"] = None if tool is None else tool[:cap]
            values["n_tool"] = None if tool is None else len(tool)
            out.append(waiting_from_row(_Dict(values), with_goal=with_goal))  # type: ignore[arg-type]
        return out

    @staticmethod
    def _waiting_columns(cap: int) -> str:
        return (
            f"substr(id, 1, {cap}) AS id, length(id) AS n_id, run_id, "
            f"substr(kind, 1, {cap}) AS kind, length(kind) AS n_kind, "
            f"substr(hash, 1, {cap}) AS hash, length(hash) AS n_hash, "
            "substr(created_at, 1, 64) AS created_at, substr(expires_at, 1, 64) AS expires_at, "
            "request_json"
        )

    def pending_approvals_of(self, run_ids: Sequence[str], cap: int) -> list[WaitingRow]:
        if not run_ids:
            return []
        marks = ", ".join("?" for _ in run_ids)
        rows = self._query(
            f"SELECT {self._waiting_columns(cap)} "
            f"FROM approvals WHERE status = ? AND run_id IN ({marks}) ORDER BY rowid",
            [str(ApprovalStatus.PENDING), *run_ids],
        )
        return self._waiting(rows, cap, with_goal=False)

    def newest_pending_approvals(self, limit: int, cap: int, goal_cap: int) -> list[WaitingRow]:
        cols = (
            self._waiting_columns(cap)
            .replace("substr(", "substr(a.")
            .replace("length(", "length(a.")
            .replace(" run_id,", " a.run_id,")
            .replace("request_json", "a.request_json")
        )
        rows = self._query(
            f"SELECT {cols}, substr(r.goal, 1, {goal_cap}) AS goal, length(r.goal) AS n_goal "
            "FROM runs AS r JOIN approvals AS a ON a.run_id = r.id "
            "WHERE r.status = ? AND a.status = ? ORDER BY a.rowid DESC LIMIT ?",
            [str(RunStatus.WAITING_FOR_APPROVAL), str(ApprovalStatus.PENDING), limit],
        )
        return self._waiting(rows, cap, with_goal=True)

    def run_ids_starting(self, prefix: str, limit: int) -> list[str]:
        rows = self._query(
            "SELECT id FROM runs WHERE starts_with(id, ?) ORDER BY id LIMIT ?", (prefix, limit)
        )
        return [str(r[0]) for r in rows]

    # --- the proxy's rows -------------------------------------------------------------------

    def migrate_proxy(self, now: datetime) -> int:
        known = PROXY_MIGRATIONS[-1][0]
        # The migration's advisory lock is taken before the tables' lock, which comes next,
        # then the schema is checked again under it. The other way round, two stores
        # migrating at once were a deadlock: one holding the lock and creating an index on
        # `approvals` (`SHARE`), which waits for the other's `ROW EXCLUSIVE` of it, the other
        # holding that and waiting for the lock.
        with self.transaction(first=_PROXY_MIGRATION_LOCK) as tx:
            tx.execute(self._lock_tables)
            check_schema(self._pg)  # the transaction's connection
            exists = tx.execute("SELECT pg_catalog.to_regclass('proxy_migrations')").fetchone()
            current = 0
            if exists is not None and exists[0] is not None:
                row = tx.execute("SELECT max(version) FROM proxy_migrations").fetchone()
                current = int(row[0]) if row is not None and row[0] is not None else 0
            if current > known:
                raise SchemaVersionError(
                    f"the database's proxy tables were written by a newer agentrt (proxy schema "
                    f"version {current}; this one knows up to {known}): upgrade agentrt to use it"
                )
            for version, script in PROXY_MIGRATIONS:
                if version <= current:
                    continue
                for sql in statements(script):
                    try:
                        tx.execute(sql)
                    except StoreError as e:
                        if not isinstance(e.__cause__, pg_errors.InsufficientPrivilege):
                            raise
                        raise self._may_not_make_proxy(current, e.__cause__) from e
                tx.execute(
                    "INSERT INTO proxy_migrations (version, applied_at) VALUES (?, ?)",
                    (version, format_time(now)),
                )
            # The proxy's writes need its tables as a Driver's need the store's (decision
            # 0192): refused here, not at its first call. On the transaction's connection.
            check_grants(self._pg, self._target, read_only=False, tables=PROXY_TABLES)
        self._lock_tables = lock_statement(self._tables + PROXY_TABLES)
        self.proxy_found_version = current
        return known

    def _may_not_make_proxy(self, current: int, error: psycopg.Error) -> StoreError:
        """A role that may not create (or alter) the proxy's tables is told who does, and
        how (decision 0201), as the store's own tables are (`upgrade`)."""
        unmade = (
            "the MCP proxy's tables are not made yet"
            if current == 0
            else f"the MCP proxy's tables are at version {current} and this agentrt needs "
            f"{PROXY_MIGRATIONS[-1][0]}"
        )
        made = (
            ("create them", "creates them") if current == 0 else ("migrate them", "migrates them")
        )
        return StoreError(
            f"cannot open {self._target.shown}: {unmade}, and this role may not {made[0]} "
            f"({self._target.redact(one_line(str(error)))}): the schema's owner {made[1]} "
            "first (agentrt --db URL migrate --proxy)"
        )

    def _lock_claim(self, tx: SqliteTx, key: str, *, capped: bool) -> None:
        """The key (and, when capped, the proxy's count) held by an advisory lock until
        commit: READ COMMITTED alone would let two claims both see the same latest row.
        The cap's lock first (one order for every claim), then always the key's, so a
        capped and an uncapped claim of one key still exclude each other."""
        if capped:
            tx.execute(
                "SELECT pg_catalog.pg_advisory_xact_lock("
                "pg_catalog.hashtext(pg_catalog.current_schema()::text || ?::text))",
                ("agentrt.proxy.cap",),
            )
        tx.execute(
            "SELECT pg_catalog.pg_advisory_xact_lock("
            "pg_catalog.hashtext(pg_catalog.current_schema()::text || ?::text))",
            (f"agentrt.proxy.key.{key}",),
        )


def _candidate_value(value: Any) -> Any:
    """A column of `unfinished_runs` as `_candidate` reads it: bytes, a text stored escaped
    (`stored_text`: one holding a NUL) read back first."""
    if not isinstance(value, bytes | memoryview):
        return value
    data = bytes(value)
    if data.startswith(ESCAPED.encode()):
        try:
            return read_text(data.decode("utf-8")).encode("utf-8")
        except UnicodeDecodeError:
            return data
    return data


class _Dict(dict[str, Any]):
    """A row built in Python, read by name as the codecs read one."""


__all__ = [
    "LOCK_TIMEOUT_MS",
    "PostgresStore",
    "StoreBusyError",
    "open_existing",
    "open_store",
]
