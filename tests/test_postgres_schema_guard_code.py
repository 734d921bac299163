"""The schema guard refuses code of the database's own that runs inside the store's
statements (decision 0157).

Besides a trigger, rule, view or row-level policy, a function written in the database
runs inside agentrt's writes when a table's check constraint, column default, index
expression or predicate, or a column's domain calls it, and inside its reads and writes
when it is made in the store's schema and matches what a statement calls better than the
server's own (`convert_to(column, 'UTF8')` with a `convert_to(text, text)`). Each is
refused at open and by every write transaction's guard, before it runs: the spy's table
stays empty.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack

import psycopg
import pytest

import agentrt
from agentrt import Decision
from agentrt._errors import UnsafeSchemaError
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids
from support.postgres import postgres_schema


@pytest.fixture
def url() -> Iterator[str]:
    with ExitStack() as stack:
        yield postgres_schema(stack, "the schema guard's hidden code")


# What is planted, and how the refusal names it.
PLANTS = {
    "check constraint": (
        "ALTER TABLE events ADD CONSTRAINT spy CHECK ({side}.spy_bool()) NOT VALID",
        "a function of its own called by 'constraint spy on table events'",
    ),
    "column default": (
        "ALTER TABLE steps ALTER COLUMN policy_json SET DEFAULT {side}.spy_text()",
        "a function of its own called by 'default value for column policy_json of table steps'",
    ),
    "index expression": (
        "CREATE INDEX spy ON runs ({side}.spy_immutable(goal))",
        "a function of its own called by 'index spy'",
    ),
    "partial index": (
        "CREATE INDEX spy ON steps (idx) WHERE {side}.spy_immutable(status) <> ''",
        "a function of its own called by 'index spy'",
    ),
    "operator": (
        "ALTER TABLE runs ADD CONSTRAINT spy CHECK (goal === goal) NOT VALID",
        "a function of its own called by 'constraint spy on table runs'",
    ),
    "domain": (
        "ALTER TABLE runs ALTER COLUMN reason TYPE {side}.spy_domain",
        "a column of its own type 'runs.reason'",
    ),
}


@pytest.mark.parametrize("opened_before", [False, True], ids=["at-open", "planted-later"])
@pytest.mark.parametrize("kind", list(PLANTS))
def test_a_function_planted_in_a_tables_definition_is_refused_before_it_runs(
    url: str, kind: str, opened_before: bool
) -> None:
    agentrt.open_store(url).close()
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    side = f"pgs_side_{uuid.uuid4().hex[:10]}"
    plant, named = PLANTS[kind]
    store = agentrt.open_store(url) if opened_before else None
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {side}")
        try:
            conn.execute(f"CREATE TABLE {side}.spied (what text)")
            conn.execute(
                f"CREATE FUNCTION {side}.spy_text() RETURNS text LANGUAGE plpgsql VOLATILE AS "
                f"$$ BEGIN INSERT INTO {side}.spied VALUES ('ran'); RETURN ''; END $$"
            )
            conn.execute(
                f"CREATE FUNCTION {side}.spy_bool() RETURNS boolean LANGUAGE plpgsql VOLATILE "
                f"AS $$ BEGIN PERFORM {side}.spy_text(); RETURN true; END $$"
            )
            conn.execute(
                f"CREATE FUNCTION {side}.spy_immutable(t text) RETURNS text LANGUAGE plpgsql "
                f"IMMUTABLE AS $$ BEGIN PERFORM {side}.spy_text(); RETURN t; END $$"
            )
            conn.execute(
                f"CREATE FUNCTION {side}.spy_eq(a text, b text) RETURNS boolean "
                f"LANGUAGE plpgsql VOLATILE AS $$ BEGIN RETURN {side}.spy_bool(); END $$"
            )
            conn.execute(
                f"CREATE OPERATOR {side}.=== (LEFTARG = text, RIGHTARG = text, "
                f"FUNCTION = {side}.spy_eq)"
            )
            conn.execute(f"CREATE DOMAIN {side}.spy_domain AS text CHECK ({side}.spy_bool())")
            conn.execute(f"SET search_path TO {schema}, {side}")
            conn.execute(plant.format(side=side))
            conn.execute(f"TRUNCATE {side}.spied")
            with pytest.raises(UnsafeSchemaError) as refused:
                if store is None:
                    store = agentrt.open_store(url)
                driver = agentrt.Driver(
                    store=store,
                    agent=ScriptedAgent([Decision.fail("stopped")]),
                    policy=agentrt.default_policy(),
                    tools=[],
                    now=FakeClock(),
                    new_id=Ids("b"),
                )
                driver.start_sync("a goal")
            assert str(refused.value).startswith(f"the database holds {named}; "), refused.value
            assert conn.execute(f"SELECT count(*) FROM {side}.spied").fetchone() == (0,)
        finally:
            if store is not None:
                store.close()
            conn.execute(f"DROP SCHEMA {side} CASCADE")


SHADOWS = {
    # `unfinished_runs` reads `convert_to(column, 'UTF8')`: a function of the same name in
    # the store's schema taking `text` for the literal is a better match than the server's.
    "function": (
        "CREATE FUNCTION {schema}.convert_to(t text, e text) RETURNS bytea LANGUAGE sql "
        "AS $$ SELECT 'forged'::bytea $$",
        "function 'convert_to(text,text)'",
    ),
    "operator": (
        "CREATE FUNCTION {schema}.eq(a text, b varchar) RETURNS boolean LANGUAGE sql "
        "AS $$ SELECT true $$; "
        "CREATE OPERATOR {schema}.= (LEFTARG = text, RIGHTARG = varchar, FUNCTION = {schema}.eq)",
        "function 'eq(text,character varying)', operator '=(text,character varying)'",
    ),
}


@pytest.mark.parametrize("opened_before", [False, True], ids=["at-open", "planted-later"])
@pytest.mark.parametrize("kind", list(SHADOWS))
def test_a_function_or_operator_in_the_stores_schema_is_refused(
    url: str, kind: str, opened_before: bool
) -> None:
    """A function or operator made in the store's own schema may be chosen over the
    server's for what the store's statements call (a better match for their arguments):
    the schema is refused at open and in every write transaction."""
    agentrt.open_store(url).close()
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    plant, named = SHADOWS[kind]
    store = agentrt.open_store(url) if opened_before else None
    try:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(plant.format(schema=schema))
        with pytest.raises(UnsafeSchemaError) as refused:
            if store is None:
                store = agentrt.open_store(url)
            driver = agentrt.Driver(
                store=store,
                agent=ScriptedAgent([Decision.fail("stopped")]),
                policy=agentrt.default_policy(),
                tools=[],
                now=FakeClock(),
                new_id=Ids("b"),
            )
            driver.start_sync("a goal")
        expected = f"the database holds {named.format(schema=schema)}; "
        assert str(refused.value).startswith(expected), refused.value
    finally:
        if store is not None:
            store.close()
