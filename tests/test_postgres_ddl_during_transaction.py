"""DDL on a store table while a write transaction is open waits for that transaction.

Every write transaction runs the schema guard with its first statement (decisions 0108,
0167). A table the transaction had not locked yet could be changed after its guard passed:
a trigger, a default, a check constraint or an index planted by another session between
the guard and the transaction's first write to that table ran inside that write (decision
0167, left open). A run's row lock (`SELECT ... FOR UPDATE`, a `ROW SHARE` lock of the
table) does not keep `CREATE TRIGGER` out either, so even `runs`, the table the guard's
statement locks, was open to it.

Each test holds a transaction right after its guard (the run's lock, its first statement,
has returned), plants from another session on a thread, and lets the transaction go on
only once the plant has either committed or is seen waiting for a lock on the server
(`pg_locks`), never after a sleep. The transaction's writes must not run the plant; the
plant lands once the transaction has committed, and the next write transaction refuses it.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from agentrt._errors import UnsafeSchemaError
from agentrt._store.postgres import PostgresStore
from support.postgres import held_run, postgres_schema, store_holding_r1

NOW = datetime(2026, 12, 6, tzinfo=UTC)
SPY = "agentrt_spy.seen"

# What another session plants once the transaction's guard passed (`{side}`: a schema of the
# test's own, holding the spy functions), and how the next transaction's refusal names it.
PLANTS = {
    "a trigger on events": (
        "CREATE TRIGGER spy AFTER INSERT ON events FOR EACH ROW EXECUTE FUNCTION {side}.spied()",
        "trigger 'spy'",
    ),
    # `runs` is the table the guard's own statement locks (a row lock): it does not keep
    # `CREATE TRIGGER` out.
    "a trigger on runs": (
        "CREATE TRIGGER spy BEFORE UPDATE ON runs FOR EACH ROW EXECUTE FUNCTION {side}.spied()",
        "trigger 'spy'",
    ),
    "a default on steps": (
        "ALTER TABLE steps ALTER COLUMN policy_json SET DEFAULT {side}.seen('a default')",
        "a function of its own called by 'default value for column policy_json of table steps'",
    ),
    "a check constraint on events": (
        "ALTER TABLE events ADD CONSTRAINT spy CHECK ({side}.seen(hash) <> '') NOT VALID",
        "a function of its own called by 'constraint spy on table events'",
    ),
    "an index on events": (
        "CREATE INDEX spy ON events (({side}.seen(hash)))",
        "a function of its own called by 'index spy'",
    ),
}


@pytest.fixture
def url() -> Iterator[str]:
    with ExitStack() as stack:
        yield postgres_schema(stack, "DDL during a write transaction")


@pytest.fixture
def side(url: str) -> Iterator[str]:
    """A schema of the test's own holding the spies: each sets `SPY` in the session that
    runs it (the store's, if it runs inside the store's writes)."""
    base = url.split("?", 1)[0]
    name = f"pgl_side_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {name}")
        # Immutable, so that an index may call it: it only sets a setting of the session.
        admin.execute(
            f"CREATE FUNCTION {name}.seen(what text) RETURNS text LANGUAGE plpgsql IMMUTABLE "
            f"AS $$ BEGIN PERFORM set_config('{SPY}', 'ran on ' || what, false); "
            "RETURN what; END $$"
        )
        admin.execute(
            f"CREATE FUNCTION {name}.spied() RETURNS trigger LANGUAGE plpgsql "
            f"AS $$ BEGIN PERFORM set_config('{SPY}', 'ran on ' || TG_TABLE_NAME, false); "
            "RETURN NEW; END $$"
        )
    try:
        yield name
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {name} CASCADE")


@pytest.fixture
def store(url: str) -> Iterator[PostgresStore]:
    with store_holding_r1(url, NOW) as opened:
        yield opened


class Planter:
    """`sql` run by another session on a thread (its own connection, no lock timeout)."""

    def __init__(self, url: str, sql: str) -> None:
        base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
        self.conn = psycopg.connect(base, autocommit=True)
        self.conn.execute(f"SET search_path TO {schema}")
        self.conn.execute("SET lock_timeout = 0")
        self.pid = self.conn.info.backend_pid
        self.base = base
        self.outcome: list[BaseException | None] = []
        self.thread = threading.Thread(target=self._run, args=(sql,))
        self.thread.start()

    def _run(self, sql: str) -> None:
        try:
            self.conn.execute(sql)
        except BaseException as e:  # reported by the test
            self.outcome.append(e)
        else:
            self.outcome.append(None)

    def planted_or_waiting(self) -> bool:
        """Return once the plant has committed (True) or its session waits for a lock on
        the server (False); asked of the thread and the server, never slept on."""
        with psycopg.connect(self.base, autocommit=True) as watcher:
            for _ in range(100_000):
                if not self.thread.is_alive():
                    return True
                waiting = watcher.execute(
                    "SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted", (self.pid,)
                ).fetchone()
                if waiting is not None:
                    return False
                self.thread.join(0.001)
        raise AssertionError("the plant neither committed nor waited for a lock")

    def finish(self) -> None:
        self.thread.join()
        self.conn.close()
        assert self.outcome == [None], self.outcome


def spied(store: PostgresStore) -> Any:
    row = store._pg.execute(f"SELECT current_setting('{SPY}', true)").fetchone()
    return None if row is None else row[0]


@pytest.mark.parametrize("kind", list(PLANTS))
def test_ddl_after_the_guard_waits_for_the_transaction_and_never_runs_in_its_writes(
    store: PostgresStore, url: str, side: str, kind: str
) -> None:
    plant, named = PLANTS[kind]
    planter: Planter | None = None
    try:
        with store.transaction() as tx:
            assert tx.lock_run("r1") is not None  # the guard passed with this statement
            planter = Planter(url, plant.format(side=side))
            planted = planter.planted_or_waiting()
            # A step's first writes: the run's row, a step (its policy left to the
            # column's default), its event.
            tx.claim_step("r1", 0, "me", lambda: "s1", NOW, epoch=1)
        # What the planted code did in the store's session, had it run in its writes.
        assert spied(store) in (None, ""), f"{kind} ran inside the store's write"
        assert not planted, "the plant was not kept out while the transaction was open"
        planter.finish()
        planter = None
        assert [e.type for e in store.list_events("r1")][-1] == "step.started"
        # Now it is there, the next write transaction refuses it before it runs.
        with pytest.raises(UnsafeSchemaError) as refused:
            held_run(store, "r2", NOW)
        assert str(refused.value).startswith(f"the database holds {named}"), refused.value
        assert spied(store) in (None, "")
        assert store.query("SELECT id FROM runs ORDER BY id") == [("r1",)]
    finally:
        if planter is not None:
            planter.thread.join()
            planter.conn.close()


def locks_of(url: str, pid: int) -> dict[str, set[str]]:
    """The relations of the store's schema the backend `pid` holds locks on, and the modes."""
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    held: dict[str, set[str]] = {}
    with psycopg.connect(base, autocommit=True) as watcher:
        for name, mode in watcher.execute(
            "SELECT c.relname::text, l.mode FROM pg_locks AS l JOIN pg_class AS c "
            "ON c.oid = l.relation JOIN pg_namespace AS n ON n.oid = c.relnamespace "
            "WHERE l.pid = %s AND l.granted AND n.nspname = %s AND c.relkind = 'r'",
            (pid, schema),
        ).fetchall():
            held.setdefault(name, set()).add(mode)
    return held


def tables_of(url: str) -> set[str]:
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    with psycopg.connect(base, autocommit=True) as watcher:
        rows = watcher.execute(
            "SELECT relname::text FROM pg_class WHERE relnamespace = to_regnamespace(%s) "
            "AND relkind = 'r'",
            (schema,),
        ).fetchall()
    return {r[0] for r in rows}


@pytest.mark.parametrize("proxy", [False, True], ids=["store", "with-the-proxys-tables"])
def test_every_table_of_the_schema_is_locked_once_the_first_statement_returned(
    store: PostgresStore, url: str, proxy: bool
) -> None:
    """Whatever the transaction goes on to write, from its first statement on it holds a
    lock on each of the schema's tables that DDL waits for (a run's row lock alone is a
    `ROW SHARE` lock of `runs`, which `CREATE TRIGGER` does not wait for)."""
    if proxy:
        store.migrate_proxy(NOW)
    tables = tables_of(url)
    assert {"runs", "steps", "events", "chain_head", "stored_values"} <= tables
    assert ("proxy_requests" in tables) is proxy
    pid = store._pg.info.backend_pid
    for first in ("lock_run", "lease_now"):  # the guard inside the lock, or beside it
        with store.transaction() as tx:
            if first == "lock_run":
                assert tx.lock_run("r1") is not None
            else:
                tx.lease_now(lambda: NOW)
            held = locks_of(url, pid)
        assert set(held) == tables, first
        assert all("RowExclusiveLock" in modes for modes in held.values()), (first, held)
    assert locks_of(url, pid) == {}  # none outlives its transaction


def test_a_store_table_replaced_by_a_materialized_view_is_refused_by_name(
    store: PostgresStore, url: str
) -> None:
    """`LOCK TABLE` cannot lock a materialized view: the schema is checked again, which says
    what stands in the table's place."""
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"SET search_path TO {schema}")
        admin.execute("ALTER TABLE tool_specs RENAME TO tool_specs_kept")
        admin.execute("CREATE MATERIALIZED VIEW tool_specs AS SELECT * FROM tool_specs_kept")
    with pytest.raises(UnsafeSchemaError, match=r"^the database holds view 'tool_specs'"):
        held_run(store, "r2", NOW)
    assert store.query("SELECT id FROM runs ORDER BY id") == [("r1",)]


@pytest.mark.parametrize("opened", ["before", "after"], ids=["dropped-while-open", "at-open"])
def test_a_store_table_gone_fails_every_write_transaction_before_it_writes(
    store: PostgresStore, url: str, opened: str
) -> None:
    """Every transaction locks every table of the store's schema version, whether it goes on
    to write that one or not: one gone (dropped while the store was open, or before it was
    opened) fails each, nothing written, rather than leaving a table of that name made
    later unlocked."""
    import agentrt
    from agentrt._errors import StoreError

    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"DROP TABLE {schema}.model_calls")
    writer = store
    if opened == "after":
        writer = agentrt.open_existing(url)  # type: ignore[assignment]
    try:
        with pytest.raises(StoreError, match='relation "model_calls" does not exist') as failed:
            held_run(writer, "r2", NOW)
        assert not isinstance(failed.value, UnsafeSchemaError)
        assert store.query("SELECT id FROM runs ORDER BY id") == [("r1",)]
    finally:
        if writer is not store:
            writer.close()


def test_ddl_holding_a_store_table_makes_a_write_transaction_busy_and_nothing_is_written(
    store: PostgresStore, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction that altered a store table and has not ended: the next write
    transaction waits for its lock up to the store's lock timeout, then is busy (a retry
    may run the work again: nothing of it was written)."""
    from agentrt._errors import StoreBusyError
    from agentrt._store.postgres import _connection

    monkeypatch.setattr(_connection, "LOCK_TIMEOUT_MS", 200)
    store.close()
    import agentrt

    opened = agentrt.open_store(url)  # its session's lock timeout 200 ms
    assert isinstance(opened, PostgresStore)
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    try:
        with psycopg.connect(base) as admin:  # a transaction, held open
            admin.execute(f"ALTER TABLE {schema}.approvals ADD COLUMN spare text")
            with pytest.raises(StoreBusyError, match="past the lock timeout"):
                held_run(opened, "r2", NOW)
            admin.rollback()
        held_run(opened, "r2", NOW)  # the lock gone, the same work goes through
        assert opened.query("SELECT id FROM runs ORDER BY id") == [("r1",), ("r2",)]
    finally:
        opened.close()


def waiting(base: str, condition: str, params: tuple[Any, ...]) -> None:
    """Return once some backend waits for a lock matching `condition` (asked of the server)."""
    with psycopg.connect(base, autocommit=True) as watcher:
        for _ in range(100_000):
            found = watcher.execute(
                f"SELECT 1 FROM pg_locks WHERE NOT granted AND {condition}", params
            ).fetchone()
            if found is not None:
                return
    raise AssertionError(f"no backend waited for a lock where {condition} {params}")


def test_a_migration_and_a_writer_take_the_tables_in_one_order(
    store: PostgresStore, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later release's migration altering `steps`, then `runs` (against the order every
    writer locks them in), while a writer begins: the migration takes every table first, in
    the writers' order, so the writer waits holding none, and neither is failed as a
    deadlock (the writer would otherwise hold `runs` and wait for `steps`, and the
    migration hold `steps` and wait for `runs`)."""
    import agentrt
    from agentrt._store.postgres import _migrations

    base = url.split("?", 1)[0]
    pause = 7_160_167  # an advisory lock the test holds, which the migration waits for
    later = (
        "ALTER TABLE steps ADD COLUMN spare text; "
        f"SELECT pg_advisory_xact_lock({pause}); "
        "ALTER TABLE runs ADD COLUMN spare text"
    )
    monkeypatch.setattr(_migrations, "MIGRATIONS", (*_migrations.MIGRATIONS, (6, later)))
    monkeypatch.setattr(_migrations, "SCHEMA_VERSION", 6)
    outcomes: dict[str, BaseException | None] = {}

    def migrate() -> None:
        try:
            agentrt.open_store(url).close()
        except BaseException as e:  # reported by the test
            outcomes["migration"] = e
        else:
            outcomes["migration"] = None

    def write() -> None:
        try:
            with store.transaction() as tx:
                assert tx.lock_run("r1") is not None
                tx.append_event("r1", "", NOW, "run.note", {"during": "a migration"})
        except BaseException as e:  # reported by the test
            outcomes["writer"] = e
        else:
            outcomes["writer"] = None

    with psycopg.connect(base, autocommit=True) as gate:
        gate.execute("SELECT pg_advisory_lock(%s)", (pause,))
        migration = threading.Thread(target=migrate)
        migration.start()
        # The migration has altered `steps` and waits at the pause.
        waiting(base, "locktype = 'advisory' AND objid = %s", (pause,))
        writer = threading.Thread(target=write)
        writer.start()
        waiting(base, "pid = %s AND locktype = 'relation'", (store._pg.info.backend_pid,))
        gate.execute("SELECT pg_advisory_unlock(%s)", (pause,))
        migration.join()
        writer.join()
    assert outcomes == {"migration": None, "writer": None}
    assert store.query("SELECT max(version) FROM schema_migrations") == [(6,)]
    assert [e.type for e in store.list_events("r1")][-1] == "run.note"


@pytest.mark.parametrize("when", ["before-the-transaction", "after-its-guard"])
def test_a_table_inheriting_a_store_table_takes_no_part_in_the_stores_statements(
    store: PostgresStore, url: str, side: str, when: str
) -> None:
    """A table of another schema made to inherit `runs`, holding a row for run `r1`, with a
    trigger on its updates. `CREATE TABLE ... INHERITS` waits for no lock a writer holds, so
    it may come after the guard as well as before. Every statement of the store names its
    tables `ONLY`: the child's row is neither read nor updated, and its trigger never runs."""
    base = url.split("?", 1)[0]
    child = (
        f"CREATE TABLE {side}.kid () INHERITS (runs); "
        f"INSERT INTO {side}.kid (id, status, lease_owner, lease_expires_at, lease_epoch, rowid) "
        "VALUES ('r1', 'RUNNING', 'me', '2100-01-01T00:00:00.000000Z', 1, 999); "
        f"CREATE TRIGGER spy BEFORE UPDATE ON {side}.kid "
        f"FOR EACH ROW EXECUTE FUNCTION {side}.spied()"
    )
    if when == "before-the-transaction":
        Planter(url, child).finish()
    with store.transaction() as tx:
        assert tx.lock_run("r1") is not None
        if when == "after-its-guard":
            planter = Planter(url, child)
            assert planter.planted_or_waiting(), "no lock of the store's keeps a child out"
            planter.finish()
        assert tx.release_lease("r1", "me", epoch=1) is True
    assert spied(store) in (None, ""), "the child's trigger ran inside the store's write"
    assert store.query("SELECT id, lease_owner FROM runs") == [("r1", "")]
    assert store.lease("r1").owner == ""
    with psycopg.connect(base, autocommit=True) as admin:
        assert admin.execute(f"SELECT lease_owner FROM {side}.kid").fetchall() == [("me",)]
    held_run(store, "r2", NOW)  # a child is no part of the schema's safety: writes go on


def test_two_stores_migrating_the_proxys_tables_at_once_both_succeed(
    store: PostgresStore, url: str
) -> None:
    """Two processes starting a proxy at once on a schema without its tables: each runs
    `migrate_proxy`, whose transaction waits for the proxy migration's advisory lock. The
    one that gets it creates an index on `approvals` (`SHARE`), which waits for every
    transaction holding `approvals` `ROW EXCLUSIVE`: the other migration must not hold it
    while it waits for the advisory lock, or each waits for the other and the server fails
    one as a deadlock."""
    import agentrt

    base = url.split("?", 1)[0]
    other = agentrt.open_store(url)
    assert isinstance(other, PostgresStore)
    outcomes: dict[str, BaseException | None] = {}

    def migrate(name: str, opened: PostgresStore) -> None:
        try:
            opened.migrate_proxy(NOW)
        except BaseException as e:  # reported by the test
            outcomes[name] = e
        else:
            outcomes[name] = None

    key = "pg_catalog.hashtext('agentrt.proxy.' || %s::text)::bigint"
    try:
        with psycopg.connect(base, autocommit=True) as gate:
            gate.execute(f"SELECT pg_advisory_lock({key})", (store._target.schema,))
            threads = [
                threading.Thread(target=migrate, args=(name, opened))
                for name, opened in (("first", store), ("second", other))
            ]
            for thread in threads:
                thread.start()
                # Each waits for the proxy migration's lock, in turn.
                waiting(
                    base,
                    "locktype = 'advisory' AND pid = %s",
                    (opened_pid(store if thread is threads[0] else other),),
                )
            gate.execute(f"SELECT pg_advisory_unlock({key})", (store._target.schema,))
            for thread in threads:
                thread.join()
        assert outcomes == {"first": None, "second": None}
        assert store.query("SELECT max(version) FROM proxy_migrations") == [(2,)]
        with store.transaction() as tx:  # both stores now write the proxy's tables
            tx.append_event("r1", "", NOW, "run.note", {"after": "the proxy's migration"})
        with other.transaction() as tx:
            tx.append_event("r1", "", NOW, "run.note", {"after": "the proxy's migration"})
    finally:
        other.close()


def opened_pid(store: PostgresStore) -> int:
    return int(store._pg.info.backend_pid)
