"""The schema guard finds the schema's relations through `pg_depend` (decision 0112).

It was a scan of `pg_class` by namespace; it is now the relations that depend on the
schema, read through `pg_depend`'s index. These tests hold it to the scan's refusals:
every relation of the schema the scan saw and that can carry what is refused (a
trigger, rule, policy, row-level security, or being a view) is found, however it came
to be there (made after the store opened, moved in, renamed, dropped and made again,
partitioned, foreign); and the store refuses each kind on a table it made, on one made
after it opened, and where one of its tables was dropped and something else made in
its place, whichever statement the transaction sends first.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

import agentrt
from agentrt._errors import StoreError, UnsafeSchemaError
from agentrt._store.postgres import PostgresStore
from agentrt._store.postgres._migrations import OWN_RELATIONS
from support.postgres import postgres_schema, server_url, store_holding_r1, with_schema

NOW = datetime(2026, 12, 3, tzinfo=UTC)

SPY_FUNCTION = (
    "CREATE FUNCTION spy_ran() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'the spy ran'; END $$"
)


@pytest.fixture
def url() -> Iterator[str]:
    with ExitStack() as stack:
        yield postgres_schema(stack, "the schema guard's relations")


@pytest.fixture
def store(url: str) -> Iterator[PostgresStore]:
    with store_holding_r1(url, NOW) as opened:
        yield opened


def admin(url: str) -> psycopg.Connection[Any]:
    """A superuser's autocommit connection whose search path is the store's schema."""
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    conn = psycopg.connect(base, autocommit=True)
    conn.execute(f"SET search_path TO {schema}")
    return conn


def test_the_guard_finds_every_relation_of_the_schema_but_indexes_and_composite_types(
    url: str, store: PostgresStore
) -> None:
    side = f"side_{uuid.uuid4().hex[:12]}"
    wrapper = f"w_{uuid.uuid4().hex[:12]}"
    with admin(url) as conn:
        try:
            for sql in (
                "CREATE TABLE later (id bigint PRIMARY KEY, v text)",
                "CREATE UNLOGGED TABLE scratch (x int)",
                "CREATE TABLE parted (x int) PARTITION BY RANGE (x)",
                "CREATE TABLE parted_low PARTITION OF parted FOR VALUES FROM (0) TO (10)",
                "CREATE VIEW seen AS SELECT id FROM runs",
                "CREATE MATERIALIZED VIEW kept AS SELECT id FROM runs",
                "CREATE SEQUENCE counter",
                "CREATE TABLE copied AS SELECT id FROM runs",
                "CREATE TYPE pair AS (a int, b int)",
                "CREATE TABLE old_name (x int)",
                "ALTER TABLE old_name RENAME TO new_name",
                "DROP TABLE tool_specs CASCADE",
                "CREATE TABLE tool_specs (hash text PRIMARY KEY, spec_json text)",
                f"CREATE SCHEMA {side}",
                f"CREATE TABLE {side}.moved_in (x int)",
                f"ALTER TABLE {side}.moved_in SET SCHEMA {store._target.schema}",
                "CREATE TABLE moved_out (x int)",
                f"ALTER TABLE moved_out SET SCHEMA {side}",
                f"CREATE FOREIGN DATA WRAPPER {wrapper}",
                f"CREATE SERVER {wrapper}_server FOREIGN DATA WRAPPER {wrapper}",
                f"CREATE FOREIGN TABLE remote (x int) SERVER {wrapper}_server",
            ):
                conn.execute(sql)
            found = conn.execute(f"SELECT relname::text, relkind::text FROM ({OWN_RELATIONS}) o")
            guard_sees = sorted(tuple(row) for row in found.fetchall())
            in_schema = conn.execute(
                "SELECT relname::text, relkind::text FROM pg_class "
                "WHERE relnamespace = to_regnamespace(current_schema())::oid"
            ).fetchall()
        finally:
            conn.execute(f"DROP SCHEMA IF EXISTS {side} CASCADE")
            conn.execute("DROP FOREIGN TABLE IF EXISTS remote")
            conn.execute(f"DROP FOREIGN DATA WRAPPER IF EXISTS {wrapper} CASCADE")
    unseen = {tuple(row) for row in in_schema} - set(guard_sees)
    assert guard_sees == sorted(tuple(row) for row in in_schema if row[1] not in "iIc")
    # What it does not see: only indexes and the composite type, neither of which can
    # carry a trigger, rule, policy or row-level security, nor be a view.
    assert {kind for _, kind in unseen} == {"i", "c"}
    assert ("pair", "c") in unseen
    names = dict(guard_sees)
    for name, kind in (
        ("later", "r"),
        ("scratch", "r"),
        ("parted", "p"),
        ("parted_low", "r"),
        ("seen", "v"),
        ("kept", "m"),
        ("counter", "S"),
        ("copied", "r"),
        ("new_name", "r"),
        ("tool_specs", "r"),
        ("moved_in", "r"),
        ("remote", "f"),
        ("runs", "r"),
    ):
        assert names.get(name) == kind, name
    assert "moved_out" not in names and "old_name" not in names


REFUSED = {
    "a trigger on a table made after the store opened": (
        [
            SPY_FUNCTION,
            "CREATE TABLE later (x int)",
            "CREATE TRIGGER spy BEFORE INSERT ON later FOR EACH ROW EXECUTE FUNCTION spy_ran()",
        ],
        "trigger 'spy'",
    ),
    "a trigger on one of its tables dropped and made again": (
        [
            SPY_FUNCTION,
            "DROP TABLE agentrt_meta",
            "CREATE TABLE agentrt_meta (key text PRIMARY KEY, value text NOT NULL)",
            "CREATE TRIGGER spy BEFORE UPDATE ON agentrt_meta "
            "FOR EACH ROW EXECUTE FUNCTION spy_ran()",
        ],
        "trigger 'spy'",
    ),
    "a view in place of one of its tables": (
        [
            "DROP TABLE tool_specs CASCADE",
            "CREATE VIEW tool_specs AS SELECT ''::text AS hash, ''::text AS spec_json",
        ],
        "view 'tool_specs'",
    ),
    "a materialized view": (
        ["CREATE MATERIALIZED VIEW kept AS SELECT id FROM runs"],
        "view 'kept'",
    ),
    "a trigger on a table moved into the schema": (
        [
            SPY_FUNCTION,
            "CREATE TABLE public.{side} (x int)",
            "CREATE TRIGGER spy BEFORE INSERT ON public.{side} "
            "FOR EACH ROW EXECUTE FUNCTION spy_ran()",
            "ALTER TABLE public.{side} SET SCHEMA {schema}",
        ],
        "trigger 'spy'",
    ),
    "a trigger on a partitioned table": (
        [
            SPY_FUNCTION,
            "CREATE TABLE parted (x int) PARTITION BY RANGE (x)",
            "CREATE TRIGGER spy BEFORE INSERT ON parted FOR EACH ROW EXECUTE FUNCTION spy_ran()",
        ],
        "trigger 'spy'",
    ),
    "a rule on one of its tables": (
        ["CREATE RULE quiet AS ON DELETE TO events DO INSTEAD NOTHING"],
        "rule 'quiet'",
    ),
    "a rule on a table made after the store opened": (
        ["CREATE TABLE later (x int)", "CREATE RULE quiet AS ON INSERT TO later DO NOTHING"],
        "rule 'quiet'",
    ),
    "a rule on a partitioned table": (
        [
            "CREATE TABLE parted (x int) PARTITION BY RANGE (x)",
            "CREATE RULE quiet AS ON INSERT TO parted DO INSTEAD NOTHING",
        ],
        "rule 'quiet'",
    ),
    "a row-level policy, row-level security not on": (
        ["CREATE POLICY mine ON runs USING (true)"],
        "row-level policy 'mine'",
    ),
    "row-level security on, no policy": (
        ["ALTER TABLE steps ENABLE ROW LEVEL SECURITY"],
        "row-level security on 'steps'",
    ),
}


@pytest.mark.parametrize("planted", list(REFUSED), ids=list(REFUSED))
@pytest.mark.parametrize("first", ["a run's lock", "a write"])
def test_the_store_refuses_each_kind_wherever_it_came_from(
    url: str, store: PostgresStore, planted: str, first: str
) -> None:
    statements, named = REFUSED[planted]
    side = f"moved_{uuid.uuid4().hex[:12]}"
    with admin(url) as conn:
        try:
            for sql in statements:
                conn.execute(sql.format(side=side, schema=store._target.schema))
        finally:
            conn.execute(f"DROP TABLE IF EXISTS public.{side}")
        events = conn.execute("SELECT count(*) FROM events").fetchone()
    with (
        pytest.raises(UnsafeSchemaError, match=f"^the database holds {named}; agentrt refuses "),
        store.transaction() as tx,
    ):
        if first == "a run's lock":
            tx.lock_run("r1")
        tx.release_lease("r1", "me", epoch=1)
    assert store.lease("r1").owner == "me"
    with admin(url) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone() == events


def test_a_trigger_dropped_from_a_table_made_later_lets_writes_go_on(
    url: str, store: PostgresStore
) -> None:
    # PostgreSQL leaves `relhastriggers` set after the last trigger is dropped; the guard
    # reads `pg_trigger` itself, so what is gone is gone.
    with admin(url) as conn:
        conn.execute(SPY_FUNCTION)
        conn.execute("CREATE TABLE later (x int)")
        conn.execute(
            "CREATE TRIGGER spy BEFORE INSERT ON later FOR EACH ROW EXECUTE FUNCTION spy_ran()"
        )
        with pytest.raises(UnsafeSchemaError), store.transaction() as tx:
            tx.release_lease("r1", "me", epoch=1)
        conn.execute("DROP TRIGGER spy ON later")
        flag = conn.execute("SELECT relhastriggers FROM pg_class WHERE oid = 'later'::regclass")
        assert flag.fetchone() == (True,)
    with store.transaction() as tx:
        assert tx.release_lease("r1", "me", epoch=1) is True
    assert store.lease("r1").owner == ""


def test_no_store_is_made_where_relations_record_no_dependency_on_their_schema() -> None:
    # PostgreSQL records no dependency on a pinned namespace (`pg_catalog`, `pg_toast`),
    # where the guard would find no relation: no store can be made there, even by a
    # superuser. `information_schema` is not pinned: the guard finds its views.
    base = server_url("the schema guard's relations")
    for pinned in ("pg_catalog", "pg_toast"):
        with pytest.raises(StoreError, match="System catalog modifications are currently"):
            agentrt.open_store(with_schema(base, pinned))
    with pytest.raises(UnsafeSchemaError, match=r"^the database holds view '_pg_foreign_"):
        agentrt.open_store(with_schema(base, "information_schema"))
