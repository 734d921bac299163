"""The contract suite's one fixture: `backend`, a database of each kind the store layer has.

Every test of `tests/store_contract/` is written against the store interface
(`agentrt._store._base`: `Store`, `Tx`, `Renewer`) and runs once per backend
parameter. A backend gives:

- `open()`: the store on this test's database, fresh and empty at the first call
  (through `agentrt._store.open_store`, the way the package opens one);
- `reopen()` / `reader()` / `impatient()`: a second store on the same database
  (for races), a read-only one, and one whose wait for a busy database is short;
  a backend with no second store (`:memory:`) skips the test, saying why;
- `tamper(store)`: what no interface method may do, because no runtime path
  does: edit, delete or swap event rows, forget the issued seqs, put bytes
  that are not text into a column, plant a trigger.

THE BACKEND'S PART: `_SqliteTamper` and `_PostgresTamper` below are the only
places in the suite where SQL (or a driver) appears; every test file stays as it is.

The `postgres` parameter runs on the server named by `AGENTRT_TEST_POSTGRES_URL`
(e.g. `postgresql://root@127.0.0.1:5432/test`), each test in a schema of its own
(`?schema=`): a migrated schema with every table empty, from this process's pool of
them (emptied after the test, or dropped when the test changed it: tests/support/
schema_pool.py, decision 0105). Without the variable it skips, saying how to enable
it; with `CI` set it fails instead.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

import agentrt._store.sqlite._connection as sqlite_connection
from agentrt._store import Store, open_existing, open_store
from agentrt._store.sqlite import SqliteStore
from support.database import pooled_schema
from support.postgres import postgres_schema


class Tamper(Protocol):
    """Damage done to one database behind the runtime's back, as a person with write
    access to it (or a bad disk) would. Each method says how many records it changed."""

    def set_event(self, seq: int, column: str, value: str | bytes) -> int:
        """Overwrite one stored column of the event at `seq` (`bytes`: not text)."""

    def delete_events(self, first: int, last: int | None = None) -> int:
        """Delete the events from `first` to `last` (to the end when None)."""

    def swap_events(self, a: int, b: int) -> int:
        """Swap two whole events (their hashes travel with them); only the seqs stay."""

    def swap_event_content(self, a: int, b: int) -> int:
        """Swap everything two events hold but their seq and hash."""

    def forget_issued(self, seq: int) -> int:
        """Make the database's record of the highest seq ever issued in the partition `seq`
        belongs to say `seq`."""

    def write_bytes(self, table: str, key: str, column: str, data: bytes) -> int:
        """Put `data` (bytes that are not valid UTF-8) into a text column of one record:
        `table` is runs, steps, approvals, model_calls or tool_specs, `key` its id
        (a tool spec's hash)."""

    def plant_trigger(self, table: str) -> None:
        """Add a trigger that counts every update of `table` (see `fired`)."""

    def plant_view(self) -> None:
        """Add a view named `everything`."""

    def remove(self, name: str) -> None:
        """Drop the trigger (`spy`) or view (`everything`) planted."""

    def fired(self) -> int:
        """How many times a planted trigger ran (0 when none ever did)."""

    def stored_values(self) -> dict[str, tuple[int, str]]:
        """Every value stored once (decision 0084): its hash -> (length, body as held)."""

    def held(self, table: str, key: str | int, column: str) -> str:
        """A JSON column's text exactly as held (a packed one with its references): `table`
        is runs, steps or approvals (`key` an id) or events (`key` a seq)."""

    def set_stored_value(self, hash: str, body: str) -> int:
        """Overwrite the body of the stored value `hash`."""

    def delete_stored_value(self, hash: str) -> int:
        """Delete the stored value `hash`."""


class Backend:
    """One kind of database, as the contract tests see it."""

    def __init__(self, name: str, tmp_path: Path, stack: ExitStack, partitions: int = 1) -> None:
        self.name = name
        # N, the chain partitions the database is created with (decision 0093): 1 for
        # the suite (its seqs are the one chain's), others for the partitions' own tests.
        self.partitions = partitions
        self._tmp_path = tmp_path
        self._stack = stack
        self._files = itertools.count(1)
        # A backend that cannot hold bytes that are not text (PostgreSQL `text`)
        # says so here; the decode tests skip it, saying why.
        self.holds_bytes = True
        # One writer at a time for the whole database (SQLite's write lock): a second
        # transaction waits at its begin. A server's writers wait only for what they touch.
        self.one_writer = True
        self._path: Path | None = None
        self._url: str | None = None
        if name == "postgres":
            self.holds_bytes = False
            self.one_writer = False
            self._url = pooled_schema(stack, "the contract suite", partitions)

    def unmade(self) -> None:
        """Make this test's database one nothing has made yet, for a test of what opening a
        new one creates or migrates: on PostgreSQL a new schema of its own, not the pool's
        (which are migrated already)."""
        if self._url is not None:
            self._url = postgres_schema(self._stack)

    @property
    def url(self) -> str:
        """The PostgreSQL URL of this test's schema (the `postgres` parameter only)."""
        assert self._url is not None
        return self._url

    @property
    def shared(self) -> bool:
        """Whether a second store can open this database (not so for `:memory:`)."""
        return self.name != "sqlite-memory"

    def _keep(self, store: Store) -> Store:
        self._stack.callback(store.close)
        return store

    def open(self) -> Store:
        """The store on this test's database (a fresh, empty one at the first call)."""
        n = self.partitions
        if self.name == "sqlite-memory":
            return self._keep(open_store(":memory:", chain_partitions=n))
        if self._url is not None:
            return self._keep(open_store(self._url, chain_partitions=n))
        if self._path is None:
            self._path = self._tmp_path / f"contract-{next(self._files)}.db"
        return self._keep(open_store(self._path, chain_partitions=n))

    def reopen(self) -> Store:
        """A second store on the same database (another process's, for a race)."""
        self._need_shared("a second store on the same database")
        self.open()  # the database exists before it is opened again
        return self.open()

    def reader(self) -> Store:
        """A read-only store on the same database."""
        self._need_shared("a read-only store on the same database")
        self.open()
        if self._url is not None:
            return self._keep(open_existing(self._url, read_only=True))
        assert self._path is not None
        return self._keep(open_existing(self._path, read_only=True))

    def impatient(self, monkeypatch: pytest.MonkeyPatch) -> Store:
        """A second store on the same database that gives up on a busy database at once."""
        self._need_shared("a second store on the same database")
        self.open()
        with monkeypatch.context() as m:  # read when the store's connection is configured
            if self._url is not None:
                import agentrt._store.postgres._connection as postgres_connection

                m.setattr(postgres_connection, "LOCK_TIMEOUT_MS", 20)
            else:
                m.setattr(sqlite_connection, "BUSY_TIMEOUT_MS", 20)
            return self.open()

    def tamper(self, store: Store) -> Tamper:
        """Damage to `store`'s database, done behind the runtime's back."""
        if self._url is not None:
            return _PostgresTamper(self._url, self.partitions)
        assert isinstance(store, SqliteStore)
        return _SqliteTamper(store, self.partitions)

    def _need_shared(self, what: str) -> None:
        if not self.shared:
            pytest.skip(f"{self.name}: nothing else can open an in-memory database ({what})")


@pytest.fixture(params=["sqlite-file", "sqlite-memory", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with ExitStack() as stack:
        yield Backend(str(request.param), tmp_path, stack)


# --- THE BACKEND'S PART: SQLite ------------------------------------------------------------
#
# The only SQL in the suite. A file is damaged through a plain connection of its own
# (another process); an in-memory database has one connection, the store's, so it is
# damaged through that one, outside any transaction, under the store's lock.

_KEYS = {"runs": "id", "steps": "id", "approvals": "id", "model_calls": "id", "tool_specs": "hash"}
_R = TypeVar("_R")
_HELD_KEYS = {"runs": "id", "steps": "id", "approvals": "id", "events": "seq"}
_EVENT_CONTENT = ("run_id", "step_id", "at", "type", "payload_json")


class _SqliteTamper:
    def __init__(self, store: SqliteStore, partitions: int) -> None:
        self._store = store
        self._partitions = partitions

    def _in_one_transaction(self, work: Callable[[sqlite3.Connection], _R]) -> _R:
        """`work` on a connection to the database, in one transaction of its own."""
        if self._store.in_memory:
            with self._store._lock:
                return _committed(self._store._conn, work)
        conn = sqlite3.connect(self._store.path, isolation_level=None)
        try:
            return _committed(conn, work)
        finally:
            conn.close()

    def _execute(self, *statements: tuple[str, tuple[object, ...]]) -> int:
        """Run `statements` in one transaction; the rows the last one changed."""

        def work(conn: sqlite3.Connection) -> int:
            changed = 0
            for sql, params in statements:
                changed = conn.execute(sql, params).rowcount
            return changed

        return self._in_one_transaction(work)

    def set_event(self, seq: int, column: str, value: str | bytes) -> int:
        assert column in (*_EVENT_CONTENT, "hash"), column
        return self._execute(
            (f"UPDATE events SET {column} = CAST(? AS TEXT) WHERE seq = ?", (value, seq))
        )

    def delete_events(self, first: int, last: int | None = None) -> int:
        top = 2**62 if last is None else last
        return self._execute(("DELETE FROM events WHERE seq BETWEEN ? AND ?", (first, top)))

    def swap_events(self, a: int, b: int) -> int:
        return self._execute(
            ("UPDATE events SET seq = -1 WHERE seq = ?", (a,)),
            ("UPDATE events SET seq = ? WHERE seq = ?", (a, b)),
            ("UPDATE events SET seq = ? WHERE seq = -1", (b,)),
        )

    def swap_event_content(self, a: int, b: int) -> int:
        columns = ", ".join(_EVENT_CONTENT)
        assign = ", ".join(f"{c} = CAST(? AS TEXT)" for c in _EVENT_CONTENT)

        def work(conn: sqlite3.Connection) -> int:
            content = {
                int(row[0]): tuple(row[1:])
                for row in conn.execute(
                    f"SELECT seq, {columns} FROM events WHERE seq IN (?, ?)", (a, b)
                )
            }
            changed = 0
            for seq, other in ((a, b), (b, a)):
                changed += conn.execute(
                    f"UPDATE events SET {assign} WHERE seq = ?", (*content[other], seq)
                ).rowcount
            return changed

        return self._in_one_transaction(work)

    def forget_issued(self, seq: int) -> int:
        return self._execute(
            ("UPDATE chain_head SET seq = ? WHERE part = ?", (seq, seq % self._partitions))
        )

    def write_bytes(self, table: str, key: str, column: str, data: bytes) -> int:
        return self._execute(
            (
                f"UPDATE {table} SET {column} = CAST(? AS TEXT) WHERE {_KEYS[table]} = ?",
                (data, key),
            )
        )

    def plant_trigger(self, table: str) -> None:
        self._execute(
            ("CREATE TABLE IF NOT EXISTS fired (what TEXT)", ()),
            (
                f"CREATE TRIGGER spy AFTER UPDATE ON {table} BEGIN "
                f"INSERT INTO fired (what) VALUES ('{table}'); END",
                (),
            ),
        )

    def plant_view(self) -> None:
        self._execute(("CREATE VIEW everything AS SELECT * FROM runs", ()))

    def remove(self, name: str) -> None:
        kind = {"spy": "TRIGGER", "everything": "VIEW"}[name]
        self._execute((f"DROP {kind} {name}", ()))

    def fired(self) -> int:
        def work(conn: sqlite3.Connection) -> int:
            conn.execute("CREATE TABLE IF NOT EXISTS fired (what TEXT)")
            return int(conn.execute("SELECT count(*) FROM fired").fetchone()[0])

        return self._in_one_transaction(work)

    def stored_values(self) -> dict[str, tuple[int, str]]:
        def work(conn: sqlite3.Connection) -> dict[str, tuple[int, str]]:
            rows = conn.execute("SELECT hash, length, body FROM stored_values").fetchall()
            return {str(r[0]): (int(r[1]), str(r[2])) for r in rows}

        return self._in_one_transaction(work)

    def held(self, table: str, key: str | int, column: str) -> str:
        def work(conn: sqlite3.Connection) -> str:
            # Named `held`, not the column's name: the store's own connection (in memory)
            # puts a packed column's parts back for any column so named.
            sql = f"SELECT {column} AS held FROM {table} WHERE {_HELD_KEYS[table]} = ?"
            return str(conn.execute(sql, (key,)).fetchone()[0])

        return self._in_one_transaction(work)

    def set_stored_value(self, hash: str, body: str) -> int:
        return self._execute(("UPDATE stored_values SET body = ? WHERE hash = ?", (body, hash)))

    def delete_stored_value(self, hash: str) -> int:
        return self._execute(("DELETE FROM stored_values WHERE hash = ?", (hash,)))


def _committed(conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], _R]) -> _R:
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = work(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return result


# --- THE BACKEND'S PART: PostgreSQL ----------------------------------------------------------
#
# Each test gets a schema of its own on the server, emptied or dropped after it
# (`support.schema_pool`);
# the damage is done through a plain connection of its own (another process's) to that schema.


class _PostgresTamper:
    def __init__(self, url: str, partitions: int) -> None:
        from agentrt._store.postgres._connection import parse_target

        self._target = parse_target(url)
        self._partitions = partitions

    def _execute(self, *statements: tuple[str, tuple[object, ...]]) -> int:
        import psycopg

        with psycopg.connect(self._target.conninfo) as conn:  # one transaction, committed
            conn.execute(f"SET search_path TO {self._target.schema}")
            changed = 0
            for sql, params in statements:
                changed = conn.execute(sql.replace("?", "%s"), params).rowcount
            return changed

    def set_event(self, seq: int, column: str, value: str | bytes) -> int:
        assert column in (*_EVENT_CONTENT, "hash"), column
        assert isinstance(value, str), "PostgreSQL text holds no bytes (holds_bytes is False)"
        return self._execute((f"UPDATE events SET {column} = ? WHERE seq = ?", (value, seq)))

    def delete_events(self, first: int, last: int | None = None) -> int:
        top = 2**62 if last is None else last
        return self._execute(("DELETE FROM events WHERE seq BETWEEN ? AND ?", (first, top)))

    def swap_events(self, a: int, b: int) -> int:
        return self._execute(
            ("UPDATE events SET seq = -1 WHERE seq = ?", (a,)),
            ("UPDATE events SET seq = ? WHERE seq = ?", (a, b)),
            ("UPDATE events SET seq = ? WHERE seq = -1", (b,)),
        )

    def swap_event_content(self, a: int, b: int) -> int:
        assign = ", ".join(f"{c} = o.{c}" for c in _EVENT_CONTENT)
        return self._execute(
            (
                f"UPDATE events AS e SET {assign} FROM events AS o "
                "WHERE (e.seq, o.seq) IN ((?, ?), (?, ?))",
                (a, b, b, a),
            )
        )

    def forget_issued(self, seq: int) -> int:
        return self._execute(
            ("UPDATE chain_head SET seq = ? WHERE part = ?", (seq, seq % self._partitions))
        )

    def write_bytes(self, table: str, key: str, column: str, data: bytes) -> int:
        raise AssertionError("PostgreSQL text holds no bytes (holds_bytes is False)")

    def plant_trigger(self, table: str) -> None:
        self._execute(
            ("CREATE TABLE IF NOT EXISTS fired (what text)", ()),
            (
                "CREATE OR REPLACE FUNCTION spy_fn() RETURNS trigger LANGUAGE plpgsql AS "
                f"$$ BEGIN INSERT INTO fired (what) VALUES ('{table}'); RETURN NEW; END $$",
                (),
            ),
            (
                f"CREATE TRIGGER spy AFTER UPDATE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION spy_fn()",
                (),
            ),
        )

    def plant_view(self) -> None:
        self._execute(("CREATE VIEW everything AS SELECT * FROM runs", ()))

    def remove(self, name: str) -> None:
        if name == "spy":
            import psycopg

            with psycopg.connect(self._target.conninfo) as conn:
                conn.execute(f"SET search_path TO {self._target.schema}")
                row = conn.execute(
                    "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                    "WHERE t.tgname = 'spy' AND c.relnamespace = to_regnamespace(current_schema())"
                ).fetchone()
                assert row is not None
                conn.execute(f"DROP TRIGGER spy ON {row[0]}")
            return
        self._execute(("DROP VIEW everything", ()))

    def fired(self) -> int:
        import psycopg

        with psycopg.connect(self._target.conninfo) as conn:
            conn.execute(f"SET search_path TO {self._target.schema}")
            conn.execute("CREATE TABLE IF NOT EXISTS fired (what text)")
            row = conn.execute("SELECT count(*) FROM fired").fetchone()
            return int(row[0]) if row else 0

    def _fetch(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        import psycopg

        with psycopg.connect(self._target.conninfo) as conn:
            conn.execute(f"SET search_path TO {self._target.schema}")
            return [tuple(r) for r in conn.execute(sql.replace("?", "%s"), params).fetchall()]

    def stored_values(self) -> dict[str, tuple[int, str]]:
        rows = self._fetch("SELECT hash, length, body FROM stored_values")
        return {str(r[0]): (int(str(r[1])), str(r[2])) for r in rows}

    def held(self, table: str, key: str | int, column: str) -> str:
        rows = self._fetch(f"SELECT {column} FROM {table} WHERE {_HELD_KEYS[table]} = ?", (key,))
        return str(rows[0][0])

    def set_stored_value(self, hash: str, body: str) -> int:
        return self._execute(("UPDATE stored_values SET body = ? WHERE hash = ?", (body, hash)))

    def delete_stored_value(self, hash: str) -> int:
        return self._execute(("DELETE FROM stored_values WHERE hash = ?", (hash,)))


@pytest.fixture(
    params=[
        ("sqlite-file", 1),
        ("sqlite-file", 4),
        ("sqlite-memory", 1),
        ("sqlite-memory", 4),
        ("postgres", 1),
        ("postgres", 4),
    ],
    ids=lambda p: f"{p[0]}-N{p[1]}",
)
def parted(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each backend whose record is made with one chain partition, and with four
    (decision 0093): for the tests of the partitioned chain and of its event writes."""
    name, n = request.param
    with ExitStack() as stack:
        yield Backend(str(name), tmp_path, stack, partitions=n)
