"""A tool that says `OutcomeUnknown`: a side effect waits for a person, a read is an error.

Decision 0054: a tool that is not read-only and raises `agentrt.OutcomeUnknown`
leaves its step `interrupted` and the run waiting on an
`interrupted_side_effect` approval whose notice says what happened, in the
transaction that records the outcome, exactly as a takeover after a crash
pauses it; approving runs the same request once more on the same step,
rejecting ends the run. A read-only tool's unknown outcome is an ordinary
`tool_error` the agent may retry. The Driver and the Gate take the same path.

Every test takes `any_store` and runs on SQLite and on PostgreSQL (issue 21 item 5;
decision 0105).
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import Decision, OutcomeUnknown, SideEffect, ToolCall, ToolResult
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool
from support.gates import make_gate, open_step

LOST = "the connection to the server was lost after the call was sent"
NOTICE = (
    "This call started, and its tool could not tell whether it took effect: the connection "
    "to the server was lost after the call was sent. Approving runs it again with these "
    "arguments; rejecting ends the run."
)
REASON = "the tool could not tell whether the call took effect; outcome unknown"


class Ledger:
    """A tool body that appends one line per call, and loses its answer the first time."""

    def __init__(self, fail_times: int = 1, exc: BaseException | None = None) -> None:
        self.lines: list[Any] = []
        self.fail_times = fail_times
        self.exc = exc or OutcomeUnknown(LOST)

    def __call__(self, call: ToolCall) -> ToolResult:
        self.lines.append(call.args)
        if len(self.lines) <= self.fail_times:
            raise self.exc
        return ToolResult({"appended": len(self.lines)}, "appended")


def driver_for(store: agentrt.Store, tool: RecordingTool, decisions: list[Any]) -> agentrt.Driver:
    return agentrt.Driver(
        store=store,
        agent=ScriptedAgent(decisions),
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
    )


def events(store: agentrt.Store, run_id: str) -> list[tuple[str, Any]]:
    return [(e.type, e.payload) for e in store.list_events(run_id=run_id, limit=10_000)]


def expected_pause(store: agentrt.Store, run_id: str, tool: str, args: Any) -> list[Any]:
    """The three events of the outcome's transaction, as pinned by decision 0054."""
    (approval,) = store.list_approvals(run_id)
    spec_hash = store.list_steps(run_id)[0].spec_hash
    decision = {
        "outcome": "require_approval",
        "reason": REASON,
        "kind": "interrupted_side_effect",
        "capability": {"tool": tool, "args": args},
        "presentation": {
            "tool": tool,
            "args": args,
            "side_effect": "local_mutation",
            "notice": NOTICE,
        },
    }
    return [
        (
            "step.tool_finished",
            {"tool": tool, "duration_ms": 1, "error": LOST},
        ),
        (
            "step.policy",
            {
                "decision": decision,
                "policy_id": "agentrt:interrupted_side_effect",
                "spec_hash": spec_hash,
                "view": {},
            },
        ),
        (
            "approval.requested",
            {
                "approval_id": approval.id,
                "kind": "interrupted_side_effect",
                "reason": REASON,
                "capability": {"tool": tool, "args": args},
                "presentation": decision["presentation"],
                "hash": approval.hash,
            },
        ),
    ]


def test_a_side_effect_whose_tool_says_outcome_unknown_waits_for_a_person_on_the_driver_path(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    ledger = Ledger()
    tool = RecordingTool("append", SideEffect.LOCAL_MUTATION, result=ledger)
    driver = driver_for(store, tool, [Decision.tool_call("append", {"x": 1}), Decision.complete()])
    run = driver.start_sync("append a line")
    assert (run.status, run.reason) == ("WAITING_FOR_APPROVAL", "")
    assert len(ledger.lines) == 1  # not run again on the runtime's own say
    (step,) = store.list_steps(run.id)
    assert step.status == "awaiting_approval"
    assert step.observation is not None
    assert (step.observation.kind, step.observation.content) == (
        "interrupted",
        {"previous_status": "executing", "failure": "outcome_unknown", "error": LOST},
    )
    (approval,) = store.pending_approvals(run.id)
    assert (approval.kind, approval.step_id) == ("interrupted_side_effect", step.id)
    assert approval.presentation == {
        "tool": "append",
        "args": {"x": 1},
        "side_effect": "local_mutation",
        "notice": NOTICE,
    }
    types = [t for t, _ in events(store, run.id)]
    assert types == [
        "run.created",
        "run.started",
        "step.started",
        "step.decided",
        "step.policy",
        "step.tool_started",
        "step.tool_finished",
        "step.policy",
        "approval.requested",
    ]
    assert events(store, run.id)[6:] == expected_pause(store, run.id, "append", {"x": 1})
    lease = store.lease(run.id)
    assert lease is not None and lease.owner == ""  # released, as every pause does

    agentrt.approve(store, run.id, approval.id, by="ops", shown_hash=approval.hash)
    run = driver.resume_sync(run.id)
    assert run.status == "COMPLETED"
    assert ledger.lines == [{"x": 1}, {"x": 1}]  # once more, approved by a person
    assert [(s.index, s.status) for s in store.list_steps(run.id)] == [(0, "done"), (1, "done")]
    assert [t for t, _ in events(store, run.id)][9:13] == [
        "approval.decided",
        "run.resumed",
        "step.policy",
        "step.tool_started",
    ]
    assert store.verify_events().intact


def test_a_rejected_unknown_outcome_ends_the_run_without_calling_the_tool_again(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    ledger = Ledger()
    tool = RecordingTool("append", SideEffect.LOCAL_MUTATION, result=ledger)
    driver = driver_for(store, tool, [Decision.tool_call("append", {"x": 1}), Decision.complete()])
    run = driver.start_sync("append a line")
    (approval,) = store.pending_approvals(run.id)
    agentrt.reject(store, run.id, approval.id, by="ops", note="the line is there")
    run = store.get_run(run.id)
    assert (run.status, run.reason) == ("CANCELLED", "approval_rejected")
    with pytest.raises(agentrt.RunStateError):
        driver.resume_sync(run.id)
    assert len(ledger.lines) == 1


def test_a_read_only_tools_unknown_outcome_is_an_ordinary_error_the_agent_may_retry(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    ledger = Ledger()
    tool = RecordingTool("look", SideEffect.READ_ONLY, result=ledger)
    decisions = [
        Decision.tool_call("look", {"x": 1}),
        Decision.tool_call("look", {"x": 1}),
        Decision.complete(),
    ]
    run = driver_for(store, tool, decisions).start_sync("look twice")
    assert run.status == "COMPLETED"
    assert len(ledger.lines) == 2
    first, second, _ = store.list_steps(run.id)
    assert first.status == "failed" and first.observation is not None
    assert (first.observation.kind, first.observation.content) == (
        "tool_error",
        {"tool": "look", "error": f"OutcomeUnknown: {LOST}", "failure": "error"},
    )
    assert second.status == "done"
    assert store.list_approvals(run.id) == []
    assert "step.failed" in [t for t, _ in events(store, run.id)]


def test_a_side_effect_whose_tool_says_outcome_unknown_waits_for_a_person_on_the_gate_path(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    ledger = Ledger()
    tool = RecordingTool("append", SideEffect.LOCAL_MUTATION, result=ledger)
    gate = make_gate(store, tool)
    session, step = open_step(gate, "append a line")
    verdict = step.propose_sync(Decision.tool_call("append", {"x": 1}))
    assert verdict.outcome == "allowed"
    observation = step.execute_sync()
    assert (observation.kind, observation.content) == (
        "interrupted",
        {"previous_status": "executing", "failure": "outcome_unknown", "error": LOST},
    )
    assert session.done
    assert session.run.status == "WAITING_FOR_APPROVAL"
    with pytest.raises(agentrt.RunStateError):
        session.step_sync()  # the session takes no more steps: a person decides first
    session.close_sync()
    run_id = session.run_id
    assert events(store, run_id)[6:] == expected_pause(store, run_id, "append", {"x": 1})
    assert len(ledger.lines) == 1

    (approval,) = store.pending_approvals(run_id)
    agentrt.approve(store, run_id, approval.id, by="ops", shown_hash=approval.hash)
    attached, judged = gate.attach_sync(run_id)
    assert judged is not None and judged.outcome == "allowed"
    current = attached.current()
    assert current is not None
    again = current.execute_sync()
    assert (again.kind, again.content) == ("tool_result", {"appended": 2})
    assert ledger.lines == [{"x": 1}, {"x": 1}]
    attached.close_sync()


class _Unreadable(OutcomeUnknown):
    @property
    def detail(self) -> str:
        raise RuntimeError("no detail for you")

    @detail.setter
    def detail(self, value: str) -> None:
        pass


def test_an_outcome_unknown_whose_detail_cannot_be_read_still_waits_for_a_person(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    ledger = Ledger(exc=_Unreadable("x"))
    tool = RecordingTool("append", SideEffect.LOCAL_MUTATION, result=ledger)
    driver = driver_for(store, tool, [Decision.tool_call("append", {"x": 1}), Decision.complete()])
    run = driver.start_sync("append a line")
    assert run.status == "WAITING_FOR_APPROVAL"
    (approval,) = store.pending_approvals(run.id)
    assert approval.presentation["notice"] == (
        "This call started, and its tool could not tell whether it took effect. "
        "Approving runs it again with these arguments; rejecting ends the run."
    )
    (step,) = store.list_steps(run.id)
    assert step.observation is not None
    assert step.observation.content["error"] == (
        "the tool could not tell whether the call took effect"
    )


def test_an_async_tool_raising_outcome_unknown_waits_for_a_person_too(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    calls: list[Any] = []

    @agentrt.tool(side_effect=SideEffect.REMOTE_MUTATION, timeout=timedelta(seconds=5))
    async def send(to: str) -> dict[str, str]:
        """Send a message."""
        calls.append(to)
        raise OutcomeUnknown(LOST)

    policy = agentrt.SideEffectPolicy({SideEffect.REMOTE_MUTATION: agentrt.PolicyDecision.allow()})
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("send", {"to": "bob"}), Decision.complete()]),
        policy=policy,
        tools=[send],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("send it")
    assert run.status == "WAITING_FOR_APPROVAL"
    (approval,) = store.pending_approvals(run.id)
    assert approval.presentation["side_effect"] == "remote_mutation"
    assert approval.presentation["notice"] == NOTICE
    assert calls == ["bob"]


def test_a_mutating_plain_tools_timeout_is_an_ordinary_failure_not_a_pause(
    any_store: agentrt.Store,
) -> None:
    """Decision 0054: the runtime's timer cannot tell whether the request left; a tool
    that can raises `OutcomeUnknown` itself."""
    store = any_store
    release = threading.Event()

    def stuck(call: ToolCall) -> ToolResult:
        release.wait(10)
        return ToolResult({"late": True})

    tool = RecordingTool(
        "append", SideEffect.LOCAL_MUTATION, result=stuck, timeout=timedelta(milliseconds=50)
    )
    try:
        run = driver_for(
            store, tool, [Decision.tool_call("append", {"x": 1}), Decision.complete()]
        ).start_sync("append a line")
    finally:
        release.set()
    assert run.status == "COMPLETED"
    assert store.list_approvals(run.id) == []
    step = store.list_steps(run.id)[0]
    assert step.status == "failed" and step.observation is not None
    assert (step.observation.kind, step.observation.content) == (
        "tool_error",
        {"tool": "append", "error": "timed out after 0.05s", "failure": "timeout"},
    )
