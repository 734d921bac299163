"""The takeover and the interruption contract, pinned by the mutation campaign (docs/mutation.md).

Each test here kills mutants of `agentrt.resume` that the recovery tests let
live. The interruption is made in this one process: while the first driver's
tool is executing, a second driver, whose wall clock is past the first one's
lease, takes the run over. That leaves exactly what a takeover of a dead
process's run sees (a step `executing`, a lease it may take), without spawning
one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect, ToolCall, ToolResult
from agentrt.scripted import ScriptedAgent
from conftest import RecordingTool

Tamper = Callable[[sqlite3.Connection, str], None]


@dataclass
class Interrupted:
    """What the takeover left: the run as the second driver returned it, and the store."""

    run: agentrt.Run
    store: agentrt.Store
    first_calls: int


def later_wall() -> datetime:
    return datetime.now(UTC) + timedelta(hours=1)


def interrupt(
    db_path: Path,
    side_effect: SideEffect,
    tamper: Tamper | None = None,
    **other_kw: Any,
) -> Interrupted:
    """Run one `lookup` call; while it executes, tamper, then let another driver take over."""
    taken: list[agentrt.Run] = []

    def other_driver() -> agentrt.Driver:
        return agentrt.Driver(
            store=agentrt.open_store(db_path),
            # Whether a script is read by step index or by what was carried out,
            # the step after the interrupted one completes.
            agent=ScriptedAgent([Decision.complete({"after": "takeover"})] * 2),
            policy=agentrt.default_policy(),
            tools=[RecordingTool("lookup", side_effect)],
            lease_owner="taker",
            wall=later_wall,
            **other_kw,
        )

    def take_over_mid_call(call: ToolCall) -> ToolResult:
        if tamper is not None:
            conn = sqlite3.connect(db_path, isolation_level=None)
            try:
                tamper(conn, call.run_id)
            finally:
                conn.close()
        taken.append(other_driver().resume_sync(call.run_id))
        return ToolResult({"late": True})

    tool = RecordingTool("lookup", side_effect, result=take_over_mid_call)
    first = agentrt.Driver(
        store=agentrt.open_store(db_path),
        agent=ScriptedAgent([Decision.tool_call("lookup", {"x": 1}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[tool],
        lease_owner="first",
    )
    with pytest.raises(agentrt.LeaseLostError):
        first.start_sync("look it up")
    (run,) = taken
    return Interrupted(run, agentrt.open_existing(db_path), len(tool.calls))


def approval_kinds(store: agentrt.Store, run_id: str) -> list[str]:
    return [a.kind for a in store.list_approvals(run_id)]


# -- the read-only exemption follows the spec as recorded -----------------------------------------


def test_an_interrupted_read_only_call_continues_without_asking_anyone(db_path: Path) -> None:
    result = interrupt(db_path, SideEffect.READ_ONLY)
    assert result.run.status == "COMPLETED"
    assert approval_kinds(result.store, result.run.id) == []
    assert result.first_calls == 1


def test_an_interrupted_read_only_call_whose_step_names_no_recorded_spec_waits_for_a_person(
    db_path: Path,
) -> None:
    def forget_spec(conn: sqlite3.Connection, run_id: str) -> None:
        conn.execute("UPDATE steps SET spec_hash = '' WHERE run_id = ?", (run_id,))

    result = interrupt(db_path, SideEffect.READ_ONLY, forget_spec)
    assert result.run.status == "WAITING_FOR_APPROVAL"
    assert approval_kinds(result.store, result.run.id) == ["interrupted_side_effect"]


def test_an_interrupted_read_only_call_whose_recorded_spec_will_not_decode_waits_for_a_person(
    db_path: Path,
) -> None:
    def garble_spec(conn: sqlite3.Connection, run_id: str) -> None:
        conn.execute('UPDATE tool_specs SET spec_json = \'{"not": "a spec"}\'')

    result = interrupt(db_path, SideEffect.READ_ONLY, garble_spec)
    assert result.run.status == "WAITING_FOR_APPROVAL"
    assert approval_kinds(result.store, result.run.id) == ["interrupted_side_effect"]
