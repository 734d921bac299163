"""Each kind of thing the schema check refuses, planted alone, is refused at open (decision 0217).

A store's open checks its schema with `_ANY_UNSAFE` (whether the schema holds anything the
check refuses) and reads `_UNSAFE` (which names what it finds) only when that says yes. So a
lookup missing from the first statement would let the open through, whatever `_UNSAFE`
finds. The guard's other tests plant several things at once (a trigger and its function in
the store's schema, a domain's default that is also of a shape agentrt does not make), so a
first statement blind to one kind was still sent on to `_UNSAFE` by another: each plant here
is seen by one lookup of the first statement only (but a view, whose `_RETURN` rule the rule
lookup sees as well, and code of the database's own in a default, whose default is also of a
shape agentrt does not make).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import psycopg
import pytest

import agentrt
from agentrt._errors import UnsafeSchemaError
from agentrt._store.postgres._migrations import _ANY_UNSAFE
from support.postgres import postgres_schema

# What is planted (`{schema}`: the store's, `{side}`: another schema, holding the functions
# and the domain the plants use), and the words of the refusal that name it.
PLANTS = {
    "a trigger whose function is another schema's": (
        "CREATE TRIGGER spy BEFORE INSERT ON runs FOR EACH ROW EXECUTE FUNCTION {side}.spy_ran()",
        "trigger 'spy'",
    ),
    "a rule": ("CREATE RULE quiet AS ON DELETE TO events DO INSTEAD NOTHING", "rule 'quiet'"),
    "a view": ("CREATE VIEW seen AS SELECT id FROM runs", "view 'seen'"),
    "a row-level policy": ("CREATE POLICY mine ON runs USING (true)", "row-level policy 'mine'"),
    "row-level security": (
        "ALTER TABLE steps ENABLE ROW LEVEL SECURITY",
        "row-level security on 'steps'",
    ),
    "a default calling a volatile built-in": (
        "ALTER TABLE steps ALTER COLUMN policy_json "
        "SET DEFAULT set_config('agentrt_spy.seen', 'x', false)",
        "a volatile function called by 'default value for column policy_json of table steps'",
    ),
    "a check calling a volatile built-in": (
        "ALTER TABLE events ADD CONSTRAINT spy "
        "CHECK (set_config('agentrt_spy.seen', hash, false) <> '') NOT VALID",
        "a volatile function called by 'constraint spy on table events'",
    ),
    "an index expression cast to another schema's domain": (
        "CREATE INDEX spy ON runs ((goal::{side}.spy))",
        "a type of its own used by 'index spy'",
    ),
    "a column of another schema's domain": (
        "ALTER TABLE runs ADD COLUMN spy {side}.spy",
        "a column of its own type 'runs.spy'",
    ),
    "a function in the store's schema": (
        "CREATE FUNCTION {schema}.helper() RETURNS integer LANGUAGE sql AS 'SELECT 1'",
        "function 'helper()'",
    ),
    "an operator in the store's schema, its function another schema's": (
        "CREATE OPERATOR {schema}.=== (LEFTARG = text, RIGHTARG = text, FUNCTION = {side}.same)",
        "operator '",
    ),
    # Its support function is called by every write to the index (a btree's comparison).
    "an index of another schema's operator class": (
        "CREATE INDEX spy ON runs (goal {side}.spy_ops)",
        "a function of its own called by 'index spy'",
    ),
    # Its `ON UPDATE CASCADE` writes the other schema's table (and fires its triggers)
    # inside agentrt's updates of a run's status: an internal trigger on `runs`.
    "a foreign key from another schema's table": (
        "ALTER TABLE runs ADD CONSTRAINT spy_key UNIQUE (id, status); "
        'CREATE TABLE {side}.dep (id text COLLATE "C", status text COLLATE "C", '
        "CONSTRAINT spy_fk FOREIGN KEY (id, status) REFERENCES runs (id, status) "
        "ON UPDATE CASCADE)",
        "a foreign key to or from another schema 'spy_fk'",
    ),
    "a default calling another schema's function": (
        "ALTER TABLE steps ALTER COLUMN policy_json SET DEFAULT {side}.stamp()",
        "a function of its own called by 'default value for column policy_json of table steps'",
    ),
}

# What the refusal's closing words call each kind's family.
OWN_CODE = "functions and operators of the database's own"
FAMILY = {
    "a trigger whose function is another schema's": "triggers",
    "a rule": "rules",
    "a view": "views",
    "a row-level policy": "row-level policies",
    "row-level security": "row-level security",
    "a default calling a volatile built-in": "volatile functions",
    "a check calling a volatile built-in": "volatile functions",
    "an index expression cast to another schema's domain": OWN_CODE,
    "a column of another schema's domain": "column types",
    "a function in the store's schema": OWN_CODE,
    "an operator in the store's schema, its function another schema's": OWN_CODE,
    "an index of another schema's operator class": OWN_CODE,
    "a foreign key from another schema's table": "foreign keys to or from another schema",
    "a default calling another schema's function": OWN_CODE,
}
assert set(FAMILY) == set(PLANTS)

# The other schema's code: nothing of it is in the store's schema.
SIDE = (
    "CREATE SCHEMA {side}",
    "CREATE FUNCTION {side}.spy_ran() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'the spy ran'; END $$",
    "CREATE FUNCTION {side}.same(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE "
    "AS 'SELECT $1 = $2'",
    "CREATE FUNCTION {side}.stamp() RETURNS text LANGUAGE sql AS 'SELECT ''x'''",
    "CREATE DOMAIN {side}.spy AS text CHECK (VALUE IS NULL OR VALUE <> 'spied')",
    "CREATE FUNCTION {side}.spy_cmp(text, text) RETURNS integer LANGUAGE plpgsql IMMUTABLE "
    "AS $$ BEGIN PERFORM set_config('agentrt_spy.seen', 'x', false); "
    "RETURN bttextcmp($1, $2); END $$",
    "CREATE OPERATOR CLASS {side}.spy_ops FOR TYPE text USING btree AS OPERATOR 1 <, "
    "OPERATOR 2 <=, OPERATOR 3 =, OPERATOR 4 >=, OPERATOR 5 >, "
    "FUNCTION 1 {side}.spy_cmp(text, text)",
)


@pytest.fixture
def url() -> Iterator[str]:
    with ExitStack() as stack:
        yield postgres_schema(stack, "the schema check's kinds")


def admin(url: str) -> psycopg.Connection[Any]:
    """A superuser's autocommit connection whose search path is the store's schema."""
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    conn = psycopg.connect(base, autocommit=True)
    conn.execute(f"SET search_path TO {schema}")
    return conn


def says_anything(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute(_ANY_UNSAFE).fetchone()
    assert row is not None
    return bool(row[0])


def test_a_fresh_stores_schema_is_passed_by_the_first_statement_alone(url: str) -> None:
    agentrt.open_store(url).close()
    with admin(url) as conn:
        # Else every open would read `_UNSAFE` as well, at the cost decision 0217 took off.
        assert says_anything(conn) is False


@pytest.mark.parametrize("kind", list(PLANTS))
def test_each_kind_planted_alone_is_refused_at_open(url: str, kind: str) -> None:
    agentrt.open_store(url).close()
    schema = url.rsplit("schema=", 1)[1]
    side = f"side_{uuid.uuid4().hex[:12]}"
    planted, named = PLANTS[kind]
    with admin(url) as conn:
        try:
            for statement in SIDE:
                conn.execute(statement.format(side=side))
            conn.execute(planted.format(schema=schema, side=side))
            assert says_anything(conn) is True
            with pytest.raises(UnsafeSchemaError) as refused:
                agentrt.open_store(url)
            assert named in str(refused.value)
            # The sentence's general words name this kind too, not only triggers and views.
            assert FAMILY[kind] in str(refused.value).split("; ", 1)[1]
            with pytest.raises(UnsafeSchemaError) as refused:
                agentrt.open_existing(url)
            assert named in str(refused.value)
        finally:
            conn.execute(f"DROP SCHEMA IF EXISTS {side} CASCADE")
