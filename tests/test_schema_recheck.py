"""A trigger or view added while a store is open never fires on one of its writes.

The schema is checked at open, and again at the start of every write transaction
(the store's own and the heartbeat's) whose `PRAGMA schema_version` differs from
the one last found safe. The changes are made by a real second connection, as
another process with write access would.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import agentrt
from agentrt import Decision, SideEffect
from agentrt._clock import format_time
from agentrt._errors import UnreadableSchemaError, UnsafeSchemaError
from agentrt._records import StepInput
from agentrt._store import Store, open_store
from conftest import FakeClock, Ids, RecordingTool

TRIGGER = (
    "CREATE TRIGGER spy AFTER {event} ON {table} BEGIN "
    "INSERT INTO fired (what) VALUES ('{table}'); END"
)


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "agentrt.db"
    open_store(path).close()
    conn = _raw(path)
    try:
        conn.execute("CREATE TABLE fired (what TEXT)")  # a consumer's own table: allowed
    finally:
        conn.close()
    return path


def _fired(path: Path) -> int:
    conn = _raw(path)
    try:
        return int(conn.execute("SELECT count(*) FROM fired").fetchone()[0])
    finally:
        conn.close()


def _add(path: Path, sql: str) -> None:
    conn = _raw(path)
    try:
        conn.execute(sql)
    finally:
        conn.close()


def _insert_run(store: Store, run_id: str) -> None:
    with store.transaction() as tx:
        tx.execute("INSERT INTO runs (id, goal, status) VALUES (?, 'g', 'RUNNING')", (run_id,))


def test_a_trigger_added_while_the_store_is_open_is_refused_before_the_next_write(
    db: Path,
) -> None:
    with open_store(db) as store:
        _insert_run(store, "r1")
        _add(db, TRIGGER.format(event="INSERT", table="runs"))
        with pytest.raises(UnsafeSchemaError) as caught:
            _insert_run(store, "r2")
        assert str(caught.value) == (
            "the database holds trigger 'spy'; agentrt refuses a schema with triggers or views"
        )
        assert [r.id for r in store.list_runs()] == ["r1"]
        # Every later write is refused too, while the trigger is there.
        with pytest.raises(UnsafeSchemaError), store.transaction() as tx:
            tx.execute("UPDATE runs SET goal = 'changed'")
        assert store.get_run("r1").goal == "g"
    assert _fired(db) == 0


def test_a_view_added_while_the_store_is_open_is_refused_before_the_next_write(db: Path) -> None:
    with open_store(db) as store:
        _insert_run(store, "r1")
        _add(db, "CREATE VIEW everything AS SELECT * FROM runs")
        with pytest.raises(UnsafeSchemaError, match="view 'everything'"):
            _insert_run(store, "r2")
        assert [r.id for r in store.list_runs()] == ["r1"]


def test_a_safe_schema_change_while_open_is_checked_and_writes_go_on(db: Path) -> None:
    with open_store(db) as store:
        _insert_run(store, "r1")
        _add(db, "CREATE TABLE notes (body TEXT)")
        _add(db, "CREATE INDEX notes_body ON notes (body)")
        _insert_run(store, "r2")
        _add(db, "DROP INDEX notes_body")
        _insert_run(store, "r3")
        assert [r.id for r in store.list_runs()] == ["r3", "r2", "r1"]


def test_a_trigger_removed_again_lets_writes_go_on(db: Path) -> None:
    with open_store(db) as store:
        _add(db, TRIGGER.format(event="INSERT", table="runs"))
        with pytest.raises(UnsafeSchemaError):
            _insert_run(store, "r1")
        _add(db, "DROP TRIGGER spy")
        _insert_run(store, "r1")
    assert _fired(db) == 0


def test_a_trigger_added_while_the_agent_decides_stops_the_run_before_its_tool_starts(
    db: Path,
) -> None:
    send = RecordingTool("send", SideEffect.REMOTE_MUTATION)

    def agent(step: StepInput) -> Decision:
        # Another process plants a trigger that would approve or rewrite records.
        _add(db, TRIGGER.format(event="UPDATE", table="steps"))
        return Decision.tool_call("send", {"x": 1})

    driver = agentrt.Driver(
        store=open_store(db),
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[send],
        now=FakeClock(),
        new_id=Ids("a"),
    )
    try:
        with pytest.raises(UnsafeSchemaError):
            driver.start_sync("send something")
    finally:
        driver.store.close()
    assert send.calls == []
    assert _fired(db) == 0
    conn = _raw(db)
    try:
        types = [r[0] for r in conn.execute("SELECT type FROM events ORDER BY seq")]
    finally:
        conn.close()
    assert "step.tool_started" not in types
    assert "step.decided" not in types


def test_the_heartbeat_renewal_refuses_a_trigger_added_since_its_last_renewal(db: Path) -> None:
    with open_store(db) as store:
        with store.transaction() as tx:
            tx.execute(
                "INSERT INTO runs (id, goal, status, lease_owner, lease_expires_at) "
                "VALUES ('r1', 'g', 'RUNNING', 'me', '2026-11-30T09:00:00.000000Z')"
            )
        renewer = store.renewer(lambda: datetime(2026, 11, 30, 9, 0, tzinfo=UTC))
        try:
            assert renewer.renew("r1", "me", timedelta(seconds=30))
            _add(db, TRIGGER.format(event="UPDATE", table="runs"))
            with pytest.raises(UnsafeSchemaError):
                renewer.renew("r1", "me", timedelta(seconds=60))
        finally:
            renewer.close()
        assert format_time(store.lease("r1").expires_at) == "2026-11-30T09:00:30.000000Z"
    assert _fired(db) == 0


def test_a_trigger_planted_between_the_open_check_and_the_migration_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentrt._store.sqlite import _store as store_module

    path = tmp_path / "new.db"
    real_enable_wal = store_module._enable_wal

    def plant_then_enable(conn: sqlite3.Connection) -> None:  # another process, in the window
        _add(path, "CREATE TABLE fired (what TEXT)")
        _add(path, TRIGGER.format(event="INSERT", table="fired"))
        real_enable_wal(conn)

    monkeypatch.setattr(store_module, "_enable_wal", plant_then_enable)
    with pytest.raises(UnsafeSchemaError, match="trigger 'spy'"):
        open_store(path)
    conn = _raw(path)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()
    assert tables == {"fired"}  # nothing was migrated


def test_a_schema_damaged_while_the_store_is_open_is_refused_at_the_next_write(db: Path) -> None:
    with open_store(db) as store:
        _insert_run(store, "r1")
        conn = _raw(db)
        try:
            conn.execute("PRAGMA writable_schema = ON")
            conn.execute(
                "UPDATE sqlite_master SET name = CAST(X'ff' || CAST(name AS BLOB) AS TEXT) "
                "WHERE name = 'fired'"
            )
            # An edit of sqlite_master moves no version by itself: bump it, so that
            # connections load the damaged schema (else they keep the one they had).
            version = conn.execute("PRAGMA schema_version").fetchone()[0]
            conn.execute(f"PRAGMA schema_version = {version + 1}")
            conn.execute("PRAGMA writable_schema = OFF")
        finally:
            conn.close()
        with pytest.raises(UnreadableSchemaError) as caught:
            _insert_run(store, "r2")
        assert str(caught.value) == (
            "SQLite cannot load the database schema (malformed database schema (\\xfffired)): "
            "the database schema is damaged, and agentrt refuses a schema it cannot read"
        )
