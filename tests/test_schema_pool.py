"""The PostgreSQL tests' pool of migrated schemas keeps every test's database fresh.

`support/schema_pool.py` hands a PostgreSQL test a schema another test of the same
process used before, emptied (decision 0105). These tests hold it to what a fresh
schema gives: no row of the previous test, identities and the chain's heads where a
migration leaves them, the same catalog; a schema a test changed is never handed out
again; a crash matrix's kept cases are dropped after the test all the same. Each test
uses a pool of its own (not the process's), so the order tests run in changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import psycopg
import pytest

import agentrt
from agentrt import Driver, RunStatus, SideEffect
from agentrt.lowlevel import schema_of
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool
from support import database as database_module
from support import schema_pool
from support.postgres import server_url, with_schema
from support.rows import execute, query
from support.schema_pool import SchemaPool, fingerprint, kept_rows
from support.testkit_children import forked_process_mode

_TABLES = ("runs", "steps", "approvals", "events", "model_calls", "tool_specs", "stored_values")


@pytest.fixture
def pool() -> Iterator[SchemaPool]:
    p = SchemaPool(server_url("the schema pool's tests"), reuse=True)
    yield p
    p.close()


def _exists(base: str, schema: str) -> bool:
    with psycopg.connect(base, autocommit=True) as conn:
        row = conn.execute("SELECT to_regnamespace(%s)", (schema,)).fetchone()
        return row is not None and row[0] is not None


def _one_run(url: str) -> str:
    """A run of two steps (a tool call, then completion) on the store at `url`."""
    store = agentrt.open_store(url)
    try:
        agent = ScriptedAgent(
            [
                agentrt.Decision.tool_call("lookup", {"x": 1}),
                agentrt.Decision.complete({"done": True}),
            ]
        )
        driver = Driver(
            store=store,
            agent=agent,
            policy=agentrt.default_policy(),
            tools=[RecordingTool("lookup", SideEffect.READ_ONLY)],
            now=FakeClock(),
            new_id=Ids(),
        )
        run = driver.start_sync("look it up")
        assert store.get_run(run.id).status == RunStatus.COMPLETED
        return run.id
    finally:
        store.close()


def test_schema_pool_a_row_written_by_one_test_is_gone_for_the_next(pool: SchemaPool) -> None:
    first = pool.take()
    url = pool.url(first)
    run_id = _one_run(url)
    events = query(url, "SELECT seq, type FROM events ORDER BY seq")
    execute(url, "UPDATE chain_head SET seq = 99, hash = 'x' WHERE part = 3")
    assert query(url, "SELECT count(*) FROM events")[0][0] > 0
    assert query(url, "SELECT max(rowid) FROM steps")[0][0] == 2
    assert pool.give_back(first) == "reused"

    second = pool.take()
    assert second == first and pool.stats.made == 1 and pool.stats.reused == 1
    url = pool.url(second)
    for table in _TABLES:
        assert query(url, f"SELECT count(*) FROM {table}") == [(0,)], table
    # As a migration leaves them: every head at seq 0 with no hash, identities from 1.
    assert query(url, "SELECT part, seq, hash FROM chain_head ORDER BY part") == [
        (part, 0, "") for part in range(16)
    ]
    with agentrt.open_existing(url, read_only=True) as store:
        assert store.list_runs() == [] and store.list_events(limit=10) == []
        with pytest.raises(agentrt.NotFoundError):
            store.get_run(run_id)
    # The same run again is numbered as it was on the fresh schema: its seqs, rowids from 1.
    _one_run(url)
    assert query(url, "SELECT seq, type FROM events ORDER BY seq") == events
    assert query(url, "SELECT rowid FROM steps ORDER BY rowid") == [(1,), (2,)]
    assert pool.give_back(second) == "reused"


def test_schema_pool_an_emptied_schema_is_exactly_a_fresh_migrations(pool: SchemaPool) -> None:
    schema = pool.take()
    _one_run(pool.url(schema))
    pool.give_back(schema)
    assert pool.take() == schema
    fresh = f"k_fresh_{schema[2:]}"
    agentrt.open_store(with_schema(pool.base, fresh)).close()
    try:
        with psycopg.connect(pool.base, autocommit=True) as conn:
            assert fingerprint(conn, schema) == fingerprint(conn, fresh)
            assert kept_rows(conn, schema) == kept_rows(conn, fresh)
            sequences = (
                "SELECT c.relname, s.last_value, s.is_called FROM pg_sequences AS q "
                "JOIN pg_class AS c ON c.relname = q.sequencename "
                "AND c.relnamespace = to_regnamespace(q.schemaname)::oid "
                "CROSS JOIN LATERAL (SELECT coalesce(q.last_value, q.start_value) AS last_value, "
                "q.last_value IS NOT NULL AS is_called) AS s "
                "WHERE q.schemaname = %s ORDER BY 1"
            )
            assert (
                conn.execute(sequences, (schema,)).fetchall()
                == conn.execute(sequences, (fresh,)).fetchall()
            )
    finally:
        with psycopg.connect(pool.base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {fresh} CASCADE")
    pool.give_back(schema)


_CHANGES = {
    "a trigger": [
        "CREATE FUNCTION spy_fn() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
        "CREATE TRIGGER spy AFTER UPDATE ON runs FOR EACH ROW EXECUTE FUNCTION spy_fn()",
    ],
    "a column": ["ALTER TABLE steps ADD COLUMN extra text"],
    "a column's default": ["ALTER TABLE runs ALTER COLUMN origin SET DEFAULT 'gate'"],
    "an index dropped": ["DROP INDEX runs_status"],
    "a table of its own": ["CREATE TABLE fired (what text)"],
    "a view": ["CREATE VIEW everything AS SELECT * FROM runs"],
    "a rule": ["CREATE RULE quiet AS ON DELETE TO events DO INSTEAD NOTHING"],
    "a row-level policy": [
        "ALTER TABLE runs ENABLE ROW LEVEL SECURITY",
        "CREATE POLICY mine ON runs USING (true)",
    ],
    "the foreign keys' triggers disabled": ["ALTER TABLE steps DISABLE TRIGGER ALL"],
    "a grant": ["GRANT SELECT ON runs TO PUBLIC"],
    "a newer migration": ["INSERT INTO schema_migrations (version, applied_at) VALUES (99, '')"],
    "the writer version": [
        "UPDATE agentrt_meta SET value = '9.0.0' WHERE key = 'min_writer_version'"
    ],
    "a chain partition": ["INSERT INTO chain_head (part, seq, hash) VALUES (16, 0, '')"],
}


def test_schema_pool_every_change_a_test_can_make_to_a_schema_is_seen(pool: SchemaPool) -> None:
    # Each change made and judged inside a transaction of its own, then rolled back
    # (PostgreSQL's DDL is transactional): the judgement `give_back` makes of it.
    schema = pool.take()
    pristine = pool._pristine[None]
    with psycopg.connect(pool.base, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")
        for change, statements in _CHANGES.items():
            with conn.transaction(force_rollback=True):
                for sql in statements:
                    conn.execute(sql)
                assert schema_pool._emptied(conn, schema, pristine) in (
                    "changed",
                    "meta rows changed",
                ), change
        with conn.transaction(force_rollback=True):
            assert schema_pool._emptied(conn, schema, pristine) is None  # unchanged: emptied
    assert pool.give_back(schema) == "reused"


def test_schema_pool_a_schema_a_test_changed_is_dropped_and_the_next_test_gets_a_fresh_one(
    pool: SchemaPool,
) -> None:
    changed = pool.take()
    url = pool.url(changed)
    pristine = pool.take()  # a second schema, left as it was: the pool keeps this one
    for sql in _CHANGES["a trigger"]:
        execute(url, sql)

    assert pool.give_back(changed) == "changed"
    assert not _exists(pool.base, changed)
    assert pool.give_back(pristine) == "reused"

    assert pool.take() == pristine  # the one left as it was
    fresh = pool.take()  # and then a new one, migrated now
    assert fresh not in (changed, pristine) and pool.stats.made == 3
    with agentrt.open_existing(pool.url(fresh)) as store:
        assert store.list_runs() == []
    for name in (pristine, fresh):
        assert pool.give_back(name) == "reused"


def test_schema_pool_a_schema_another_connection_still_locks_is_set_aside(
    pool: SchemaPool,
) -> None:
    schema = pool.take()
    url = pool.url(schema)
    _one_run(url)
    with psycopg.connect(pool.base) as left_open:  # a transaction a test forgot to end
        left_open.execute(f"SELECT count(*) FROM {schema}.runs").fetchone()
        assert pool.give_back(schema) == "locked"
        assert _exists(pool.base, schema)  # not dropped under its lock, not handed out
        assert pool.take() != schema
        left_open.rollback()
    pool.close()
    assert not _exists(pool.base, schema)


def test_schema_pool_a_kept_crash_matrix_is_dropped_after_the_test_and_its_base_reused(
    tmp_path: Path,
) -> None:
    from agentrt.testkit import Crash, Point, crash_matrix_sync

    base = server_url("the schema pool's tests")
    with ExitStack() as stack:
        url = database_module.make_database("postgres", tmp_path, stack, "a kept matrix")
        prefix = schema_of(url)
        with forked_process_mode():
            matrix = crash_matrix_sync(
                "support.scenarios:small",
                "process",
                directory=url,
                recovery=False,
                select=lambda c: c == (Crash(0, Point.AFTER_TOOL_STARTED, inside_tx=True),),
                keep_files=True,
            )
        matrix.assert_ok()
        assert _exists(base, f"{prefix}_clean") and _exists(base, f"{prefix}_c0000")
        _one_run(url)  # and the test wrote into its own schema too
    assert not _exists(base, f"{prefix}_clean") and not _exists(base, f"{prefix}_c0000")
    pool = database_module.schema_pool(base)
    if pool.reuse:
        assert prefix in [h.schema for h in pool._free[None]]
        assert query(url, "SELECT count(*) FROM runs") == [(0,)]
    else:
        assert not _exists(base, prefix)


def test_schema_pool_a_schema_used_often_is_remade(
    pool: SchemaPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schema_pool, "RECYCLE_AFTER", 2)
    first = pool.take()
    assert pool.give_back(first) == "reused"
    assert pool.take() == first
    assert pool.give_back(first) == "recycled"
    assert not _exists(pool.base, first)
    assert pool.take() != first


def test_schema_pool_a_pool_per_chain_partition_count(pool: SchemaPool) -> None:
    one, four = pool.take(1), pool.take(4)
    assert query(pool.url(one), "SELECT count(*) FROM chain_head") == [(1,)]
    assert query(pool.url(four), "SELECT count(*) FROM chain_head") == [(4,)]
    pool.give_back(one)
    pool.give_back(four)
    assert pool.take(4) == four and pool.take(1) == one and pool.take() not in (one, four)


def test_schema_pool_a_schema_whose_reset_failed_is_never_handed_out_and_is_dropped_at_close(
    pool: SchemaPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = pool.take()

    def broken(conn: object, name: str, pristine: object) -> None:
        raise psycopg.OperationalError("the server went away mid-reset")

    with monkeypatch.context() as m:
        m.setattr(schema_pool, "_reset", broken)
        with pytest.raises(psycopg.OperationalError):
            pool.give_back(schema)
    assert pool.take() != schema
    assert _exists(pool.base, schema)
    pool.close()
    assert not _exists(pool.base, schema)


def test_schema_pool_a_vacuum_or_analyze_running_elsewhere_is_no_test_left_open(
    pool: SchemaPool,
) -> None:
    """Another session's `VACUUM` or `ANALYZE` (another test run's, at its start: tests/
    conftest.py) locks each table of every schema in turn while it runs; the pool took that
    lock for a transaction the test left open and set the schema aside, so a test asserting
    its schema's reuse failed whenever another run began at that moment. A real `ANALYZE`,
    held inside one of the schema's tables (an index expression that waits on an advisory
    lock this test holds), is running while the pool looks."""
    import threading
    import uuid

    schema = pool.take()
    side = f"side_{uuid.uuid4().hex[:12]}"
    key = int(uuid.uuid4().int % 2**31)
    admin = psycopg.connect(pool.base, autocommit=True)
    try:
        admin.execute(f"CREATE SCHEMA {side}")
        admin.execute(
            f"CREATE FUNCTION {side}.held(x text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS "
            f"$$ BEGIN PERFORM pg_advisory_lock({key}); PERFORM pg_advisory_unlock({key}); "
            "RETURN x; END $$"
        )
        admin.execute(f"CREATE TABLE {schema}.sampled (x text)")
        admin.execute(f"INSERT INTO {schema}.sampled VALUES ('a')")
        admin.execute(f"CREATE INDEX sampled_held ON {schema}.sampled (({side}.held(x)))")
        admin.execute("SELECT pg_advisory_lock(%s)", (key,))
        analyzing = psycopg.connect(pool.base, autocommit=True)
        pid = analyzing.info.backend_pid
        done = threading.Thread(target=analyzing.execute, args=(f"ANALYZE {schema}.sampled",))
        done.start()
        try:
            # The ANALYZE holds its lock on the table and waits on this test's advisory lock.
            for _ in range(6000):
                waiting = admin.execute(
                    "SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'advisory' "
                    "AND NOT granted",
                    (pid,),
                ).fetchone()
                if waiting == (1,):
                    break
                threading.Event().wait(0.01)
            assert waiting == (1,)
            held = admin.execute(
                "SELECT l.mode FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation "
                "WHERE l.pid = %s AND c.relname = 'sampled'",
                (pid,),
            ).fetchall()
            assert ("ShareUpdateExclusiveLock",) in held
            # The schema changed (a table of the test's own): the pool says so, not "locked".
            verdict = pool._run(lambda conn: schema_pool._reset(conn, schema, pool._pristine[None]))
            assert verdict == "changed"
        finally:
            admin.execute("SELECT pg_advisory_unlock(%s)", (key,))
            done.join(timeout=60)
            analyzing.close()
    finally:
        admin.execute(f"DROP SCHEMA IF EXISTS {side} CASCADE")
        admin.close()
    assert pool.give_back(schema) == "changed"
    assert not _exists(pool.base, schema)


def test_schema_pool_an_analyze_inside_a_transaction_left_open_is_still_seen(
    pool: SchemaPool,
) -> None:
    """`ANALYZE`, unlike `VACUUM`, runs inside a transaction block: a transaction a test left
    open, holding a write to the schema, that is running an `ANALYZE` (of any table: here one
    of another schema, held on an advisory lock this test holds) was taken for a `VACUUM` or
    `ANALYZE` of its own, all its locks passed over, and the schema emptied and handed out
    again with the write still to commit into it. The pool says "locked"."""
    import threading
    import uuid

    schema = pool.take()
    side = f"side_{uuid.uuid4().hex[:12]}"
    key = int(uuid.uuid4().int % 2**31)
    admin = psycopg.connect(pool.base, autocommit=True)
    try:
        admin.execute(f"CREATE SCHEMA {side}")
        admin.execute(
            f"CREATE FUNCTION {side}.held(x text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS "
            f"$$ BEGIN PERFORM pg_advisory_lock({key}); PERFORM pg_advisory_unlock({key}); "
            "RETURN x; END $$"
        )
        admin.execute(f"CREATE TABLE {side}.sampled (x text)")
        admin.execute(f"INSERT INTO {side}.sampled VALUES ('a')")
        admin.execute(f"CREATE INDEX sampled_held ON {side}.sampled (({side}.held(x)))")
        admin.execute("SELECT pg_advisory_lock(%s)", (key,))
        left_open = psycopg.connect(pool.base)  # a transaction, as a test might leave one
        pid = left_open.info.backend_pid
        left_open.execute(
            f"INSERT INTO {schema}.tool_specs (hash, spec_json) VALUES ('left', 'open')"
        )
        done = threading.Thread(target=left_open.execute, args=(f"ANALYZE {side}.sampled",))
        done.start()
        try:
            for _ in range(6000):
                waiting = admin.execute(
                    "SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'advisory' "
                    "AND NOT granted",
                    (pid,),
                ).fetchone()
                if waiting == (1,):
                    break
                threading.Event().wait(0.01)
            assert waiting == (1,)
            running = admin.execute(
                "SELECT count(*) FROM pg_stat_progress_analyze WHERE pid = %s", (pid,)
            ).fetchone()
            assert running == (1,)
            verdict = pool._run(lambda conn: schema_pool._reset(conn, schema, pool._pristine[None]))
            assert verdict == "locked"
        finally:
            admin.execute("SELECT pg_advisory_unlock(%s)", (key,))
            done.join(timeout=60)
            left_open.rollback()
            left_open.close()
    finally:
        admin.execute(f"DROP SCHEMA IF EXISTS {side} CASCADE")
        admin.close()
    assert pool.give_back(schema) == "reused"
