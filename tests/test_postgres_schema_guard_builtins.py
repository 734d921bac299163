"""The schema guard refuses built-in code with an effect, and types of the database's own,
in the expressions the store's writes evaluate (decision 0167).

Decision 0157 refused a default, check constraint or index that calls a function written in
the database. A built-in function with an effect was let through, and so was a type of the
database's own that such an expression names (a domain, whose check runs on every value
cast to it): `set_config` in a column's default turned `synchronous_commit` off for the
store's own session (its commits no longer waited for the disk), `pg_try_advisory_lock`
left a session lock held by the store's connection, a check constraint or a domain's check
reached from an index expression set a setting of the store's session on every write. Each
is refused at open and by every write transaction's guard, before it runs: the store's
session is as the store set it.

A default that calls only functions without an effect (`upper`, `now`) is not agentrt's
shape either, so the transaction's guard reads it in full: it is let through, and the
writes go on.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import psycopg
import pytest

import agentrt
from agentrt import Decision
from agentrt._errors import UnsafeSchemaError
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids
from support.postgres import postgres_schema

SPY = "agentrt_spy.seen"

# What is planted (`{side}`: a schema of the test's own), how the refusal names it.
PLANTS = {
    "a default calling set_config": (
        "ALTER TABLE steps ALTER COLUMN policy_json "
        "SET DEFAULT set_config('synchronous_commit', 'off', false)",
        "a volatile function called by 'default value for column policy_json of table steps'",
    ),
    "a default taking an advisory lock": (
        "ALTER TABLE steps ALTER COLUMN policy_json "
        "SET DEFAULT CASE WHEN pg_try_advisory_lock(4242) THEN '' ELSE '' END",
        "a volatile function called by 'default value for column policy_json of table steps'",
    ),
    "a check constraint calling set_config": (
        f"ALTER TABLE events ADD CONSTRAINT spy CHECK (set_config('{SPY}', hash, false) <> '') "
        "NOT VALID",
        "a volatile function called by 'constraint spy on table events'",
    ),
    "a default cast to a domain": (
        "ALTER TABLE steps ALTER COLUMN policy_json SET DEFAULT ''::{side}.spy",
        "a type of its own used by 'default value for column policy_json of table steps'",
    ),
    "a check constraint cast to a domain": (
        "ALTER TABLE events ADD CONSTRAINT spy CHECK ((hash::{side}.spy) <> '') NOT VALID",
        "a type of its own used by 'constraint spy on table events'",
    ),
    "an index expression cast to a domain": (
        "CREATE INDEX spy ON runs ((goal::{side}.spy))",
        "a type of its own used by 'index spy'",
    ),
    "a partial index cast to a domain": (
        "CREATE INDEX spy ON runs (goal) WHERE (goal::{side}.spy) <> ''",
        "a type of its own used by 'index spy'",
    ),
    # No default: the domain's check runs on the NULL each insert of a run leaves there.
    "a column of a domain added": (
        "ALTER TABLE runs ADD COLUMN spy {side}.spy",
        "a column of its own type 'runs.spy'",
    ),
}


@pytest.fixture
def url() -> Iterator[str]:
    with ExitStack() as stack:
        yield postgres_schema(stack, "the schema guard's built-ins")


def start(store: Any, new_id: Ids | None = None) -> None:
    agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.fail("stopped")]),
        policy=agentrt.default_policy(),
        tools=[],
        now=FakeClock(),
        new_id=new_id or Ids("b"),
    ).start_sync("a goal")


def session(store: Any, admin: psycopg.Connection[Any]) -> tuple[Any, ...]:
    """What the store's own session holds that a planted expression could change."""
    conn = store._pg
    sync = conn.execute("SHOW synchronous_commit").fetchone()
    seen = conn.execute(f"SELECT current_setting('{SPY}', true)").fetchone()
    locks = admin.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s",
        (conn.info.backend_pid,),
    ).fetchone()
    return (sync[0], seen[0], locks[0])


UNTOUCHED = ("on", None, 0)


@pytest.mark.parametrize("opened_before", [False, True], ids=["at-open", "planted-later"])
@pytest.mark.parametrize("kind", list(PLANTS))
def test_an_effect_planted_in_a_tables_expressions_is_refused_before_it_runs(
    url: str, kind: str, opened_before: bool
) -> None:
    agentrt.open_store(url).close()
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    side = f"pgs_side_{uuid.uuid4().hex[:10]}"
    plant, named = PLANTS[kind]
    store = agentrt.open_store(url) if opened_before else None
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {side}")
        try:
            admin.execute(
                f"CREATE DOMAIN {side}.spy AS text "
                f"CHECK (set_config('{SPY}', 'cast ' || coalesce(VALUE, 'null'), false) "
                "IS NOT NULL)"
            )
            admin.execute(f"SET search_path TO {schema}")
            admin.execute(plant.format(side=side))
            refused: UnsafeSchemaError | None = None
            try:
                if store is None:
                    store = agentrt.open_store(url)
                start(store)
            except UnsafeSchemaError as e:
                refused = e
            if store is not None and opened_before:
                # What the planted code did to the store's session, had it run.
                assert session(store, admin) == UNTOUCHED
            assert refused is not None, "the store wrote through the planted expression"
            assert str(refused).startswith(f"the database holds {named}; "), refused
            assert "volatile functions in a table's defaults" in str(refused)
        finally:
            if store is not None:
                store.close()
            admin.execute(f"DROP SCHEMA {side} CASCADE")


HARMLESS = {
    "an immutable function": "upper('x')",
    "a stable function": "to_char(now(), 'YYYY')",
}


@pytest.mark.parametrize("kind", list(HARMLESS))
def test_a_default_of_a_shape_agentrt_does_not_make_without_an_effect_lets_writes_go_on(
    url: str, kind: str
) -> None:
    """The transaction's guard finds an expression it does not know, and its full reading
    (`check_schema`, in the transaction begun again) finds nothing to refuse: the writes go
    on, in the same transaction as they would have; run after run, past the count at which
    psycopg prepares a statement (its first PREPARE, pipelined behind the failing guard,
    never reached the server: psycopg's cache must not name it after the rollback)."""
    agentrt.open_store(url).close()
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    store = agentrt.open_store(url)
    try:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f"SET search_path TO {schema}")
            admin.execute(f"ALTER TABLE steps ALTER COLUMN reason_key SET DEFAULT {HARMLESS[kind]}")
            ids = Ids("b")
            for _ in range(8):
                start(store, ids)
            assert session(store, admin) == UNTOUCHED
            runs = admin.execute("SELECT status FROM runs").fetchall()
            assert runs == [("FAILED",)] * 8
    finally:
        store.close()


def test_writes_go_on_once_the_planted_default_is_removed(url: str) -> None:
    agentrt.open_store(url).close()
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    store = agentrt.open_store(url)
    try:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f"SET search_path TO {schema}")
            plant, _ = PLANTS["a default calling set_config"]
            admin.execute(plant)
            with pytest.raises(UnsafeSchemaError):
                start(store)
            admin.execute("ALTER TABLE steps ALTER COLUMN policy_json SET DEFAULT ''")
            start(store)
            assert session(store, admin) == UNTOUCHED
            assert admin.execute("SELECT status FROM runs").fetchall() == [("FAILED",)]
    finally:
        store.close()


def test_an_operator_alone_in_the_stores_schema_is_refused(url: str) -> None:
    """An operator made in the store's schema over a function kept elsewhere: the schema
    holds no function of its own, and is refused for the operator."""
    agentrt.open_store(url).close()
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    side = f"pgs_side_{uuid.uuid4().hex[:10]}"
    store = agentrt.open_store(url)
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {side}")
        try:
            admin.execute(
                f"CREATE FUNCTION {side}.eq(a text, b varchar) RETURNS boolean LANGUAGE sql "
                "AS $$ SELECT true $$"
            )
            admin.execute(
                f"CREATE OPERATOR {schema}.= (LEFTARG = text, RIGHTARG = varchar, "
                f"FUNCTION = {side}.eq)"
            )
            with pytest.raises(UnsafeSchemaError) as refused:
                start(store)
            expected = "the database holds operator '=(text,character varying)'; "
            assert str(refused.value).startswith(expected), refused.value
        finally:
            store.close()
            admin.execute(f"DROP SCHEMA {side} CASCADE")
