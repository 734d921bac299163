"""The store's own statements never call a function or operator the database put in its schema.

The store's session searches `pg_catalog` first, then the store's schema. PostgreSQL picks
the built-in for a call whose argument types match it exactly (a function of the same
signature later on the path is never considered), but where the built-in needs a coercion
(an argument of type `name` where it takes `text`, a `regclass` compared with an `oid`, an
`integer` compared with an `oid`, an `integer` where it takes a `bigint`), a function or
operator of the schema that takes those types exactly is chosen instead.

The schema guard's own statement had such calls: `to_regnamespace(current_schema())` (a
`name` where the built-in takes `text`), `classid = 'pg_class'::regclass` and
`refobjid >= 16384` (an `oid` compared with a `regclass` or an `integer`). A function
`to_regnamespace(name)` in the store's schema pointed the guard at another schema, and a
trigger on `events` then ran inside every write of the store; an operator `=(oid, regclass)`
did the same. The advisory locks of `migrate` (before its check) and of the proxy's claims
(after the transaction's guard) called `pg_advisory_xact_lock` with an `integer` (the
built-in takes a `bigint`), and the claims' `current_schema() || ?` was a `name || name`.

Each bait below bumps a sequence of the test's own (`nextval` is not undone by a rollback)
and answers so that the guard would see nothing: none may run, and the store refuses each.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime

import psycopg
import pytest

import agentrt
from agentrt._errors import UnsafeSchemaError
from agentrt._store.postgres import PostgresStore
from support.postgres import held_run, postgres_schema

NOW = datetime(2026, 12, 6, tzinfo=UTC)

# A bait: the function (made in the store's schema `{schema}` when it is the bait, else in
# `{side}`), the operator made in the store's schema over it (if any), and how the refusal
# names what is in the store's schema.
BAITS = {
    "to_regnamespace(name)": (
        "CREATE FUNCTION {schema}.to_regnamespace(name) RETURNS regnamespace LANGUAGE plpgsql "
        "AS $$ BEGIN PERFORM nextval('{side}.ran'); RETURN 'pg_toast'::regnamespace; END $$",
        None,
        "function 'to_regnamespace(name)'",
    ),
    "=(oid, regclass)": (
        "CREATE FUNCTION {side}.bait(oid, regclass) RETURNS boolean LANGUAGE plpgsql "
        "AS $$ BEGIN PERFORM nextval('{side}.ran'); RETURN false; END $$",
        "CREATE OPERATOR {schema}.= (LEFTARG = oid, RIGHTARG = regclass, FUNCTION = {side}.bait)",
        "operator '=(oid,regclass)'",
    ),
    "=(oid, regtype)": (
        "CREATE FUNCTION {side}.bait(oid, regtype) RETURNS boolean LANGUAGE plpgsql "
        "AS $$ BEGIN PERFORM nextval('{side}.ran'); RETURN false; END $$",
        "CREATE OPERATOR {schema}.= (LEFTARG = oid, RIGHTARG = regtype, FUNCTION = {side}.bait)",
        "operator '=(oid,regtype)'",
    ),
    ">=(oid, integer)": (
        "CREATE FUNCTION {side}.bait(oid, integer) RETURNS boolean LANGUAGE plpgsql "
        "AS $$ BEGIN PERFORM nextval('{side}.ran'); RETURN false; END $$",
        "CREATE OPERATOR {schema}.>= (LEFTARG = oid, RIGHTARG = integer, FUNCTION = {side}.bait)",
        "operator '>=(oid,integer)'",
    ),
    "=(oid, integer)": (
        "CREATE FUNCTION {side}.bait(oid, integer) RETURNS boolean LANGUAGE plpgsql "
        "AS $$ BEGIN PERFORM nextval('{side}.ran'); RETURN false; END $$",
        "CREATE OPERATOR {schema}.= (LEFTARG = oid, RIGHTARG = integer, FUNCTION = {side}.bait)",
        "operator '=(oid,integer)'",
    ),
    "pg_advisory_xact_lock(integer)": (
        "CREATE FUNCTION {schema}.pg_advisory_xact_lock(integer) RETURNS void LANGUAGE plpgsql "
        "AS $$ BEGIN PERFORM nextval('{side}.ran'); END $$",
        None,
        "function 'pg_advisory_xact_lock(integer)'",
    ),
    "convert_to(text, text)": (
        "CREATE FUNCTION {schema}.convert_to(text, text) RETURNS bytea LANGUAGE plpgsql "
        "AS $$ BEGIN PERFORM nextval('{side}.ran'); RETURN ''::bytea; END $$",
        None,
        "function 'convert_to(text,text)'",
    ),
    "||(name, name)": (
        "CREATE FUNCTION {side}.bait(name, name) RETURNS text LANGUAGE plpgsql "
        "AS $$ BEGIN PERFORM nextval('{side}.ran'); RETURN 'x'; END $$",
        "CREATE OPERATOR {schema}.|| (LEFTARG = name, RIGHTARG = name, FUNCTION = {side}.bait)",
        "operator '||(name,name)'",
    ),
}


@pytest.fixture
def url() -> Iterator[str]:
    with ExitStack() as stack:
        yield postgres_schema(stack, "the store's statements' lookups")


@pytest.fixture
def side(url: str) -> Iterator[str]:
    """A schema of the test's own: the baits' sequence, their functions, a trigger's."""
    base = url.split("?", 1)[0]
    name = f"pgk_side_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {name}")
        admin.execute(f"CREATE SEQUENCE {name}.ran")
        admin.execute(
            f"CREATE FUNCTION {name}.spied() RETURNS trigger LANGUAGE plpgsql "
            f"AS $$ BEGIN PERFORM nextval('{name}.ran'); RETURN NEW; END $$"
        )
    try:
        yield name
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {name} CASCADE")


def plant(url: str, side: str, kind: str, *, trigger: bool) -> str:
    """The bait `kind` in the store's schema (and a trigger on `events` that bumps the same
    sequence, when `trigger`); what the refusal names."""
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    function, operator, named = BAITS[kind]
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(function.format(schema=schema, side=side))
        if operator is not None:
            admin.execute(operator.format(schema=schema, side=side))
        if trigger:
            admin.execute(
                f"CREATE TRIGGER spy AFTER INSERT ON {schema}.events "
                f"FOR EACH ROW EXECUTE FUNCTION {side}.spied()"
            )
    return named


def ran(url: str, side: str) -> bool:
    """Whether a bait or the trigger ran, in any session (the sequence was drawn from)."""
    with psycopg.connect(url.split("?", 1)[0], autocommit=True) as admin:
        row = admin.execute(f"SELECT is_called FROM {side}.ran").fetchone()
    assert row is not None
    return bool(row[0])


@pytest.mark.parametrize("kind", list(BAITS))
def test_a_bait_planted_before_a_write_transaction_is_refused_and_never_runs(
    url: str, side: str, kind: str
) -> None:
    """Planted while a store is open, with a trigger on `events`: the next write transaction
    is refused, naming the trigger and the bait, and neither ran (a bait the guard chose
    would have run, and the two that blind it would have let the trigger run too)."""
    store = agentrt.open_store(url)
    assert isinstance(store, PostgresStore)
    try:
        held_run(store, "r1", NOW)
        named = plant(url, side, kind, trigger=True)
        with pytest.raises(UnsafeSchemaError) as refused:
            held_run(store, "r2", NOW)
        assert not ran(url, side), f"{kind} ran inside the store's statements"
        assert str(refused.value).startswith(f"the database holds trigger 'spy', {named}"), (
            refused.value
        )
        assert store.query("SELECT id FROM runs ORDER BY id") == [("r1",)]
    finally:
        store.close()


@pytest.mark.parametrize("kind", list(BAITS))
def test_a_bait_in_the_schema_is_refused_at_open_before_it_runs(
    url: str, side: str, kind: str
) -> None:
    """`open_store` takes its migration's advisory lock before it checks the schema: that
    lock, too, must not be the bait's."""
    agentrt.open_store(url).close()
    named = plant(url, side, kind, trigger=False)
    for opening in (agentrt.open_store, agentrt.open_existing):
        with pytest.raises(UnsafeSchemaError) as refused:
            opening(url)
        assert not ran(url, side), f"{kind} ran while {opening.__name__} checked the schema"
        assert str(refused.value).startswith(f"the database holds {named}"), refused.value


@pytest.mark.parametrize("kind", ["pg_advisory_xact_lock(integer)", "||(name, name)"])
def test_a_bait_planted_after_the_guard_is_not_chosen_by_a_proxy_claims_lock(
    url: str, side: str, kind: str
) -> None:
    """Nothing keeps a function or an operator out of the schema while a transaction runs:
    one made after the transaction's guard passed must not be what the transaction's later
    statements choose (the proxy's claim locks its key once the guard passed)."""
    store = agentrt.open_store(url)
    assert isinstance(store, PostgresStore)
    try:
        held_run(store, "r1", NOW)
        with store.transaction() as tx:
            assert tx.lock_run("r1") is not None  # the guard passed with this statement
            named = plant(url, side, kind, trigger=False)
            store._lock_claim(tx, "a key", capped=True)
        assert not ran(url, side), f"{kind} ran inside the claim's transaction"
        with pytest.raises(UnsafeSchemaError) as refused:
            held_run(store, "r2", NOW)
        assert str(refused.value).startswith(f"the database holds {named}"), refused.value
    finally:
        store.close()


def test_recoverys_listing_does_not_call_a_function_planted_in_the_schema(
    url: str, side: str
) -> None:
    """A read runs no guard: `unfinished_runs` (recovery's listing) reads each run's text
    columns as bytes with `convert_to(column, 'UTF8')`, whose built-in takes a `name`, so a
    `convert_to(text, text)` in the store's schema was chosen (decision 0157, item 9)."""
    store = agentrt.open_store(url)
    assert isinstance(store, PostgresStore)
    try:
        held_run(store, "r1", NOW)
        plant(url, side, "convert_to(text, text)", trigger=False)
        (found,) = store.unfinished_runs(None, 10)
        assert found.run_id == "r1" and not ran(url, side)
    finally:
        store.close()
