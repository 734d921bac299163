"""Runs paused on a real approval, the program restarted, a tampered approval row.

- `paused_run`: a real Driver run of the default policy whose one `push` call
  (a remote mutation) waits for a person; `approved_run`: the same, approved.
- `restarted`: the program started again on the same file with another `push`.
- `tamper`: a stored request changed behind the runtime's back, as an attacker
  with write access to the record could (either backend).
- `push_with_schema`, `PUSH_SCHEMA`: a `push` that declares `x` and `branch`,
  and a schema of every JSON type.

To show that a refusal changed nothing, compare two `support.rows.snapshot`s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import agentrt
from agentrt import Decision, Limits, SideEffect
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool

from .rows import execute


def push_with_schema() -> RecordingTool:
    """A `push` (remote mutation) that takes an integer `x` and a string `branch`."""
    return RecordingTool(
        "push",
        SideEffect.REMOTE_MUTATION,
        schema={
            "type": "object",
            "properties": {"x": {"type": "integer"}, "branch": {"type": "string"}},
            "additionalProperties": False,
        },
    )


def paused_run(
    store: agentrt.Store,
    clock: FakeClock | None = None,
    limits: Limits | None = None,
    tool: RecordingTool | None = None,
    policy: Any = None,
    args: Any = None,
) -> tuple[agentrt.Driver, agentrt.Run, RecordingTool]:
    """A run that waits on approval of one `push` call (`args`, by default `{"x": 1}`).

    The tool is `tool` or, by default, a schemaless `push`; the clock a fresh
    `FakeClock` unless given; ids come from `Ids("a")`.
    """
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


def approved_run(
    store: agentrt.Store, **kw: Any
) -> tuple[agentrt.Driver, agentrt.Run, RecordingTool, agentrt.Approval]:
    """A `paused_run` (same keywords) whose approval alice has approved, not yet resumed."""
    driver, run, push = paused_run(store, **kw)
    (approval,) = store.pending_approvals(run.id)
    driver.approve(run.id, approval.id, by="alice")
    return driver, run, push, approval


def restarted(
    store: agentrt.Store, agent: Any, tool: RecordingTool, clock: FakeClock | None = None
) -> agentrt.Driver:
    """The program started again on the same file, `tool` its push: a new Driver of the
    default policy with `clock` (by default a fresh `FakeClock`) and `Ids("b")`."""
    return agentrt.Driver(
        store=store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[tool],
        now=clock or FakeClock(),
        new_id=Ids("b"),
    )


# A schema of every JSON type, for the tests that re-check arguments on resume.
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


def tamper(database: Path | str, approval_id: str) -> None:
    """Change a stored request behind the runtime's back, as an attacker with write access
    to the record could (a SQLite file or a PostgreSQL schema: `support.rows`)."""
    execute(
        database,
        "UPDATE approvals SET request_json = replace(request_json, '\"x\":1', '\"x\":999') "
        "WHERE id = ?",
        (approval_id,),
    )


def a_person_decides(
    store: agentrt.Store, run_id: str, approval: agentrt.Approval, person: str
) -> None:
    """What a person does to a waiting `approval` from outside the program (the CLI, the
    console, the webhook): "approves" or "rejects" it by its shown hash, or "cancels" the
    run (which expires it)."""
    if person == "approves":
        agentrt.approve(store, run_id, approval.id, "alice", "ok", approval.hash)
    elif person == "rejects":
        agentrt.reject(store, run_id, approval.id, "bob", "not today", approval.hash)
    else:
        agentrt.cancel(store, run_id, "carol", "stop")


def assert_the_persons_decision_stands(
    store: agentrt.Store, run_id: str, waiting: agentrt.Approval, person: str
) -> None:
    """The run's one approval is `waiting` (its id and hash), decided as `a_person_decides`
    had `person` decide it, by one `approval.decided` event (none for a cancel, which
    expires it): whatever the program did meanwhile, the person's decision stands."""
    (approval,) = store.list_approvals(run_id, cap=None)
    assert (approval.id, approval.hash) == (waiting.id, waiting.hash)
    status, by, note = {
        "approves": ("approved", "alice", "ok"),
        "rejects": ("rejected", "bob", "not today"),
        "cancels": ("expired", "carol", approval.note),  # the cancel's own words
    }[person]
    assert (approval.status, approval.decided_by, approval.note) == (status, by, note)
    types = [e.type for e in store.list_events(run_id)]
    assert types.count("approval.decided") == (0 if person == "cancels" else 1)
