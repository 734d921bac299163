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
            tx.claim_step("r1", 0, "me", lambda: "s1", NOW)
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
