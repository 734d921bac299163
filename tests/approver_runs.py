"""Real runs paused on real approvals, for the Approver and webhook tests."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import agentrt
from agentrt import Decision, Limits, SideEffect
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool


def push_tool() -> RecordingTool:
    return RecordingTool(
        "push",
        SideEffect.REMOTE_MUTATION,
        schema={
            "type": "object",
            "properties": {"x": {"type": "integer"}, "branch": {"type": "string"}},
            "additionalProperties": False,
        },
    )


def paused(
    store: agentrt.Store,
    clock: FakeClock,
    *,
    args: dict[str, Any] | None = None,
    limits: Limits | None = None,
    ids: str = "a",
    goal: str = "push it",
) -> tuple[agentrt.Driver, agentrt.Run, RecordingTool]:
    """A run of the default policy that waits on approval of one `push` call."""
    push = push_tool()
    agent = ScriptedAgent(
        [
            Decision.tool_call("push", args if args is not None else {"x": 1}),
            Decision.complete("ok"),
        ]
    )
    driver = agentrt.Driver(
        store=store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[push],
        now=clock,
        new_id=Ids(ids),
    )
    run = driver.start_sync(goal, limits=limits)
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


def tamper(db_path: Path, approval_id: str) -> None:
    """Change a stored request behind the runtime's back, as an attacker with the file could."""
    conn = sqlite3.connect(db_path)
    conn.execute(
        "UPDATE approvals SET request_json = replace(request_json, '\"x\":1', '\"x\":999') "
        "WHERE id = ?",
        (approval_id,),
    )
    conn.commit()
    conn.close()
