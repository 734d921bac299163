"""A run paused on an approval, and a snapshot of every row to show a refusal changed nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import agentrt
from agentrt import (
    Decision,
    Limits,
    SideEffect,
)
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool


def paused_run(
    store: agentrt.Store,
    clock: FakeClock | None = None,
    limits: Limits | None = None,
    tool: RecordingTool | None = None,
    policy: Any = None,
    args: Any = None,
) -> tuple[agentrt.Driver, agentrt.Run, RecordingTool]:
    push = tool or RecordingTool("push", SideEffect.REMOTE_MUTATION)
    args = {"x": 1} if args is None else args
    agent = ScriptedAgent([Decision.tool_call("push", args), Decision.complete("ok")])
    driver = agentrt.Driver(
        store=store,
        agent=agent,
        policy=policy or agentrt.default_policy(),
        tools=[push],
        now=clock or FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("push it", limits=limits)
    assert run.status == "WAITING_FOR_APPROVAL"
    return driver, run, push


def snapshot(db_path: Path) -> list[tuple[Any, ...]]:
    """Every row of every agentrt table, to show that a refusal changed nothing."""
    conn = sqlite3.connect(db_path)
    try:
        rows: list[tuple[Any, ...]] = []
        for table in ("runs", "steps", "approvals", "events"):
            rows += [(table, *r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]
        return rows
    finally:
        conn.close()


PUSH_SCHEMA = {
    "type": "object",
    "properties": {
        "branch": {"type": "string"},
        "force": {"type": "boolean"},
        "retries": {"type": "integer"},
        "ratio": {"type": "number"},
        "labels": {"type": "array", "items": {"type": "string"}},
        "meta": {"type": "object"},
        "note": {"type": ["string", "null"]},
    },
    "additionalProperties": False,
}
