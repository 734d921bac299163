"""Records of each older schema version (1 to 4), as the release of that schema left them,
for the tests that open, migrate and crash on one (tests/test_migration_attacks.py).

A record is written by this runtime with the previous release's chain (support/
previous_release.py), its large values held in their rows (no `stored_values` before
migration 4) and only the migrations of its version applied; for versions 1 and 2, whose
columns this runtime's writes need (`runs.origin`, `steps.reason_key`), the columns a later
migration adds are then taken out again, with their index. Every run is a Driver's (the
only origin before migration 2), and each holds a step with a long reason (the key
migration 3 fills), an approval waiting, a large value and a model call's row.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from .previous_release import previous_release_chain

TABLES = ("runs", "steps", "events", "approvals", "model_calls", "tool_specs")
"""The tables a record of schema 1 already has, read back row for row after a migration."""


def make_old_record(db: Path, version: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record of schema `version` (1 to 4) at `db` with a finished and a waiting run."""
    import agentrt
    from agentrt import Decision, SideEffect
    from agentrt._store import open_store
    from agentrt._store.sqlite import _migrations as migrations
    from agentrt._store.sqlite import _values
    from agentrt.scripted import ScriptedAgent
    from conftest import FakeClock, Ids, RecordingTool

    written = max(version, 3)  # this runtime writes `origin` and `reason_key`
    reason = "call é\U0001f600 " + "r" * 300  # past the key's 256 characters, not ASCII
    big = {"body": "b" * 5000}
    with monkeypatch.context() as old:
        previous_release_chain(old)
        old.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:written])
        old.setattr(migrations, "SCHEMA_VERSION", written)
        old.setattr(_values, "INLINE_LIMIT", 10**12)  # every value held in its row
        for n, decisions in enumerate(
            (
                [
                    Decision.tool_call("lookup", big, reason=reason),
                    Decision.complete({"echo": big}),
                ],
                [Decision.tool_call("send", {"to": "x"}, reason="call c2")],
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
                new_id=Ids("ab"[n]),
            )
            try:
                driver.start_sync(f"an old run {n}")
            finally:
                driver.store.close()
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        # A model call's row, as the release's model loop wrote one.
        run_id = conn.execute("SELECT id FROM runs ORDER BY id LIMIT 1").fetchone()[0]
        conn.execute(
            "INSERT INTO model_calls (id, run_id, attempt, status, model, input_tokens, "
            "completed_at) VALUES ('m1', ?, 1, 'completed', 'the-model', 12, 'x')",
            (run_id,),
        )
        if version < 3:
            conn.execute("DROP INDEX steps_run_reason")
            conn.execute("ALTER TABLE steps DROP COLUMN reason_key")
        if version < 2:
            conn.execute("ALTER TABLE runs DROP COLUMN origin")
        conn.execute("DELETE FROM schema_migrations WHERE version > ?", (version,))
        conn.execute("COMMIT")
    finally:
        conn.close()


def raw_rows(db: Path, columns_of: Path | None = None) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of `TABLES` in `db`, in rowid order, with the columns `columns_of` has
    (the older file's, so that a migrated file's added columns are left out)."""
    conn = sqlite3.connect(db)
    conn.text_factory = bytes
    try:
        shape = sqlite3.connect(columns_of or db)
        try:
            names = {t: [r[1] for r in shape.execute(f"PRAGMA table_info({t})")] for t in TABLES}
        finally:
            shape.close()
        return {
            t: conn.execute(f"SELECT {', '.join(names[t])} FROM {t} ORDER BY rowid").fetchall()
            for t in TABLES
        }
    finally:
        conn.close()


def applied_versions(db: Path) -> list[int]:
    """The versions `schema_migrations` records, in order (each once, by its key); none
    for a file without the table."""
    conn = sqlite3.connect(db)
    try:
        if not conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'schema_migrations'"
        ).fetchall():
            return []
        return [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]
    finally:
        conn.close()
