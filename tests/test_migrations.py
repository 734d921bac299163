"""Migrations: pinned texts, forward-only application, version refusals, the writer-version lock."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path

import pytest

import agentrt
from agentrt import Decision
from agentrt._clock import parse_time
from agentrt._errors import SchemaVersionError, StoreError
from agentrt._store import open_existing, open_store
from agentrt._store.sqlite import _migrations as migrations
from agentrt._store.sqlite._migrations import (
    MIGRATIONS,
    RUNTIME_VERSION,
    SCHEMA_VERSION,
    Migration,
    check_writer,
    parse_version,
    statements,
)
from agentrt.scripted import ScriptedAgent
from support.previous_release import previous_release_chain
from support.rows import execute

# Released migrations are never edited. A failure here means a released script
# changed: revert it and add a new migration instead.
PINNED_SHA256 = {
    1: "5dbf91bee9ca921067840a089734f3eb2e08bcc87540039e0e610a0ab0b00d80",
    2: "064eeef3e175c6e614ed4f61d5218ea46e5c1bdeaae98d746b71e67fcc4d9802",
    3: "cb953f114b140cea9b2e99898db2cdd2e63d6f3977812133dc1958bd1c71a5a3",
    4: "2a0f129a6efc63aaaf303a6ce387578f53157a4f867676c2762f8423cf9efca8",
    5: "ade4c0e31e330519752a7ddb29c9aac8ab1c5237ca09e65a36daf32338b3b559",
}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "m.db"


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def applied(path: Path) -> list[int]:
    conn = raw(path)
    try:
        return [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]
    finally:
        conn.close()


def test_released_migration_texts_are_pinned_by_sha256() -> None:
    texts = {m.version: hashlib.sha256(m.sql.encode("utf-8")).hexdigest() for m in MIGRATIONS}
    assert texts == PINNED_SHA256


def test_versions_are_contiguous_from_one() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert SCHEMA_VERSION == MIGRATIONS[-1].version == 5


def test_statements_splits_whole_statements_only() -> None:
    script = (
        "CREATE TABLE a (x TEXT DEFAULT ';');\n"
        "-- a comment; with a semicolon\n"
        "INSERT INTO a VALUES ('b;c');\n"
    )
    assert statements(script) == [
        "CREATE TABLE a (x TEXT DEFAULT ';');",
        "-- a comment; with a semicolon\nINSERT INTO a VALUES ('b;c');",
    ]
    with pytest.raises(StoreError, match="incomplete statement"):
        statements("CREATE TABLE a (x);\nCREATE TABLE b (")
    assert len(statements(MIGRATIONS[0].sql)) == 13


def test_new_database_records_its_migrations_and_writer_version(db: Path) -> None:
    open_store(db).close()
    open_store(db).close()  # reopening applies nothing twice
    conn = raw(db)
    try:
        rows = conn.execute("SELECT version, applied_at FROM schema_migrations").fetchall()
        meta = dict(conn.execute("SELECT key, value FROM agentrt_meta").fetchall())
    finally:
        conn.close()
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5]
    assert parse_time(rows[0][1]) is not None
    assert meta == {"min_writer_version": "0.2.0", "chain_partitions": "1"}


def test_a_newer_schema_is_refused_by_every_open(db: Path) -> None:
    open_store(db).close()
    conn = raw(db)
    conn.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (6, '')")
    conn.close()
    message = r"written by a newer agentrt \(schema version 6; this agentrt 0\.2\.0 knows up to 5\)"
    with pytest.raises(SchemaVersionError, match=message):
        open_store(db)
    with pytest.raises(SchemaVersionError, match=message):
        open_existing(db)
    with pytest.raises(SchemaVersionError, match=message):
        open_existing(db, read_only=True)


def test_open_existing_refuses_a_file_without_the_schema(db: Path) -> None:
    conn = raw(db)
    conn.execute("CREATE TABLE other (x)")
    conn.close()
    db.chmod(0o600)
    with pytest.raises(SchemaVersionError, match="holds no agentrt record"):
        open_existing(db)
    assert applied_tables(db) == ["other"]


def applied_tables(path: Path) -> list[str]:
    conn = raw(path)
    try:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    finally:
        conn.close()


V6 = Migration(6, "CREATE TABLE grants (id TEXT PRIMARY KEY NOT NULL) STRICT;\n")


def test_an_older_schema_is_refused_by_open_existing_and_migrated_by_open_store(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_store(db).close()
    monkeypatch.setattr(migrations, "MIGRATIONS", (*MIGRATIONS, V6))
    monkeypatch.setattr(migrations, "SCHEMA_VERSION", 6)
    with pytest.raises(SchemaVersionError, match=r"older agentrt \(schema version 5.*needs 6"):
        open_existing(db)
    open_store(db).close()
    assert applied(db) == [1, 2, 3, 4, 5, 6]
    assert "grants" in applied_tables(db)
    open_existing(db).close()


def test_a_failing_migration_changes_nothing(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    open_store(db).close()
    broken = Migration(
        6, "CREATE TABLE grants (id TEXT) STRICT;\nINSERT INTO nowhere VALUES (1);\n"
    )
    monkeypatch.setattr(migrations, "MIGRATIONS", (*MIGRATIONS, broken))
    monkeypatch.setattr(migrations, "SCHEMA_VERSION", 6)
    with pytest.raises(StoreError, match="no such table: nowhere"):
        open_store(db)
    assert applied(db) == [1, 2, 3, 4, 5]
    assert "grants" not in applied_tables(db)


def test_all_pending_migrations_apply_in_one_transaction(db: Path) -> None:
    conn = raw(db)
    try:
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        assert migrations.migrate(conn) == 5
    finally:
        conn.close()
    assert seen[0] == "BEGIN IMMEDIATE"
    assert seen[-1] == "COMMIT"
    assert seen.count("BEGIN IMMEDIATE") == 1
    assert seen.count("COMMIT") == 1


def test_min_writer_version_above_this_runtime_refuses_writers_only(db: Path) -> None:
    store = open_store(db)
    with store.transaction() as tx:
        tx.execute("INSERT INTO runs (id, status) VALUES ('r1', 'RUNNING')")
    store.close()
    conn = raw(db)
    conn.execute("UPDATE agentrt_meta SET value = '0.5.0' WHERE key = 'min_writer_version'")
    conn.close()
    message = r"may be written only by agentrt 0\.5\.0 or later \(this is 0\.2\.0\)"
    with pytest.raises(SchemaVersionError, match=message):
        open_store(db)
    with pytest.raises(SchemaVersionError, match=message):
        open_existing(db)
    reader = open_existing(db, read_only=True)
    try:
        assert reader.get_run("r1").status == "RUNNING"
    finally:
        reader.close()


def test_a_min_writer_version_above_this_runtime_locks_out_every_writer_on_either_backend(
    database: str,
) -> None:
    """The essay's older binary, from the other side: a record marked for a later runtime
    refuses this one's writers (`open_store`, `open_existing`) on a SQLite file and on a
    PostgreSQL schema alike (each backend checks it in its own migrations module); a
    reader still reads it."""
    store = open_store(database)
    run = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.complete({"ok": True})]),
        policy=agentrt.default_policy(),
    ).start_sync("written before the lock-out")
    store.close()
    assert (
        execute(
            database, "UPDATE agentrt_meta SET value = '9.0.0' WHERE key = 'min_writer_version'"
        )
        == 1
    )
    message = (
        r"may be written only by agentrt 9\.0\.0 or later "
        rf"\(this is {migrations.RUNTIME_VERSION}\): upgrade to write it"
    )
    with pytest.raises(SchemaVersionError, match=message):
        open_store(database)
    with pytest.raises(SchemaVersionError, match=message):
        open_existing(database)
    reader = open_existing(database, read_only=True)
    try:
        assert reader.get_run(run.id).status == "COMPLETED"
    finally:
        reader.close()


def test_unreadable_min_writer_version_refuses_writers(db: Path) -> None:
    open_store(db).close()
    conn = raw(db)
    conn.execute("UPDATE agentrt_meta SET value = 'next' WHERE key = 'min_writer_version'")
    conn.close()
    with pytest.raises(
        SchemaVersionError, match=r"'next', which this agentrt 0\.2\.0 cannot compare"
    ):
        open_store(db)


def test_a_migration_can_raise_the_writer_version(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_store(db).close()
    lockout = Migration(
        6, "UPDATE agentrt_meta SET value = '9.0' WHERE key = 'min_writer_version';\n"
    )
    monkeypatch.setattr(migrations, "MIGRATIONS", (*MIGRATIONS, lockout))
    monkeypatch.setattr(migrations, "SCHEMA_VERSION", 6)
    # This runtime is below the bar its own migration sets, so the migration is not kept.
    with pytest.raises(SchemaVersionError, match=r"only by agentrt 9\.0 or later"):
        open_store(db)
    assert applied(db) == [1, 2, 3, 4, 5]


def test_parse_version_and_compare() -> None:
    assert parse_version("0.1.0") == (0, 1) == parse_version("0.1")
    assert parse_version("1.10.2") > parse_version("1.9.9")
    for bad in ("", "1.x", "v1.0", "1..0", "1.0-rc1"):
        with pytest.raises(ValueError, match="not a dotted version"):
            parse_version(bad)
    conn = sqlite3.connect(":memory:")
    try:
        migrations.migrate(conn)
        check_writer(conn, runtime_version="0.2.0")
        check_writer(conn, runtime_version="0.3")
        with pytest.raises(SchemaVersionError, match=r"only by agentrt 0\.2\.0 or later"):
            check_writer(conn, runtime_version="0.1.9")
    finally:
        conn.close()
    assert RUNTIME_VERSION == "0.2.0"


def test_two_first_opens_at_once_migrate_once(db: Path) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def opener() -> None:
        try:
            barrier.wait()
            open_store(db).close()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert applied(db) == [1, 2, 3, 4, 5]


def test_a_database_of_the_previous_schema_is_upgraded_and_its_runs_become_a_drivers(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as old:  # the released schema version 1, as a 0.1.0 file has it
        old.setattr(migrations, "MIGRATIONS", MIGRATIONS[:1])
        old.setattr(migrations, "SCHEMA_VERSION", 1)
        store = open_store(db)
        with store.transaction() as tx:
            tx.execute("INSERT INTO runs (id, goal, status) VALUES ('r1', 'g', 'RUNNING')")
        store.close()
    assert applied(db) == [1]
    conn = raw(db)
    try:
        assert "origin" not in [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    finally:
        conn.close()
    with pytest.raises(SchemaVersionError, match=r"older agentrt \(schema version 1.*needs 5"):
        open_existing(db)
    store = open_store(db)
    try:
        assert store.get_run("r1").origin == "driver"
    finally:
        store.close()
    assert applied(db) == [1, 2, 3, 4, 5]
    conn = raw(db)
    try:
        assert conn.execute("SELECT id, origin FROM runs").fetchall() == [("r1", "driver")]
    finally:
        conn.close()


def _large_runs(db: Path, prefixes: str) -> list[str]:
    """A finished run and a run waiting on an approval, each carrying a 5,000-character argument
    (and the finished one's result echoing it), written by the runtime of the moment."""
    import agentrt
    from agentrt import Decision, SideEffect
    from agentrt.scripted import ScriptedAgent
    from conftest import FakeClock, Ids, RecordingTool

    big = {"body": "b" * 5000}
    ids: list[str] = []
    for n, decisions in enumerate(
        (
            [Decision.tool_call("lookup", big), Decision.complete({"echo": big})],
            [Decision.tool_call("send", big)],
        )
    ):
        driver = agentrt.Driver(
            store=open_store(db),
            agent=ScriptedAgent(decisions),
            policy=agentrt.default_policy(),
            tools=[
                RecordingTool("lookup", SideEffect.READ_ONLY, schema={"type": "object"}),
                RecordingTool("send", SideEffect.REMOTE_MUTATION, schema={"type": "object"}),
            ],
            now=FakeClock(),
            new_id=Ids(prefixes[n]),
        )
        try:
            ids.append(driver.start_sync(f"carry a large argument {n}").id)
        finally:
            driver.store.close()
    return ids


def test_a_file_of_schema_3_holding_large_values_is_migrated_and_reads_the_same_records(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentrt._store.sqlite import _values
    from store_contract.world import everything

    with monkeypatch.context() as old:  # a file of schema 3, as the previous release wrote it
        previous_release_chain(old)
        old.setattr(migrations, "MIGRATIONS", MIGRATIONS[:3])
        old.setattr(migrations, "SCHEMA_VERSION", 3)
        old.setattr(_values, "INLINE_LIMIT", 10**12)  # every value held in its row
        done, waiting = _large_runs(db, "ab")
        store = open_store(db)
        try:
            before = everything(store)
        finally:
            store.close()
    assert applied(db) == [1, 2, 3]
    assert "stored_values" not in applied_tables(db)
    conn = raw(db)
    try:
        held_before = conn.execute("SELECT id, decision_json FROM steps ORDER BY id").fetchall()
    finally:
        conn.close()
    store = open_store(db)  # migrates
    try:
        assert everything(store) == before
        assert store.verify_events().intact
        assert store.get_run(waiting).status == "WAITING_FOR_APPROVAL"
        first = store.list_steps(done, cap=None)[0]
        assert first.decision is not None and first.decision.args == {"body": "b" * 5000}
    finally:
        store.close()
    assert applied(db) == [1, 2, 3, 4, 5]
    conn = raw(db)
    try:  # nothing was rewritten: the old rows hold their values as before
        assert conn.execute("SELECT id, decision_json FROM steps ORDER BY id").fetchall() == (
            held_before
        )
        assert conn.execute("SELECT count(*) FROM stored_values").fetchone() == (0,)
    finally:
        conn.close()
    # New runs on the migrated file store the value once; the old ones still read and verify.
    _large_runs(db, "cd")
    with open_existing(db, read_only=True) as store:
        assert store.verify_events().intact
        first = store.list_steps(done, cap=None)[0]
        assert first.decision is not None and first.decision.args == {"body": "b" * 5000}
    conn = raw(db)
    try:
        lengths = [r[0] for r in conn.execute("SELECT length(body) FROM stored_values")]
    finally:
        conn.close()
    assert len([n for n in lengths if n >= 5000]) == 1
