"""A policy's answer is kept as the runtime's own copy; its view owns what it holds.

Decision 0138: a policy's answer is read once, by its base type, and what is
recorded (the step's verdict, a pause's approval row and its hash) is what it
answered. `_shown`: nothing a policy does to its view's run or approvals changes
what the runtime records, judges or shows the agent.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Any

import agentrt
from agentrt import Decision, PolicyDecision, RunView, SideEffect, StepInput, ToolRequest
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool


class Verdict(str, enum.Enum):  # noqa: UP042  # deliberately not a StrEnum
    """A consumer's own outcome enum: `str(Verdict.allow)` is "Verdict.allow" on 3.11."""

    allow = "allow"
    deny = "deny"


class EnumOutcomePolicy:
    policy_id = "enum-outcome"

    def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        return PolicyDecision(outcome=Verdict.allow)


def test_an_outcome_from_a_str_enum_is_recorded_as_the_outcome_acted_on(
    store: agentrt.Store,
) -> None:
    """A policy answers `PolicyDecision(outcome=Verdict.allow)` with its own `(str, Enum)`
    (whose `str()` is "Verdict.allow"). The tool runs, and `step.policy` records the
    outcome acted on, "allow"."""
    tool = RecordingTool("push", SideEffect.REMOTE_MUTATION)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("push", {"x": 1}), Decision.complete()]),
        policy=EnumOutcomePolicy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("push it")
    assert run.status == "COMPLETED"
    assert len(tool.calls) == 1
    first = store.list_steps(run.id)[0]
    assert first.policy is not None
    assert first.policy.outcome == "allow"
    [event] = [e for e in store.list_events(run.id) if e.type == "step.policy"]
    assert event.payload["decision"]["outcome"] == "allow"


class SharedBudgetPolicy:
    """Asks a person, with a capability dict it shares and changes right after answering
    (as another run's evaluation on the same loop would)."""

    policy_id = "shared-budget"

    def __init__(self) -> None:
        self.capability: dict[str, Any] = {"amount": 1}

    def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        answer = agentrt.need_approval(
            "payment", "a person approves payments", capability=self.capability
        )
        asyncio.get_running_loop().call_soon(self.capability.__setitem__, "amount", 1000)
        return answer


def test_a_pause_records_the_capability_the_policy_returned(store: agentrt.Store) -> None:
    """A policy asks for approval with a capability dict it keeps and changes on the next
    turn of the loop. `step.policy`, the approval row and its `approval.requested` event
    all hold what it answered, `{"amount": 1}`."""
    policy = SharedBudgetPolicy()
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("pay", {"x": 1}), Decision.complete()]),
        policy=policy,
        tools=[RecordingTool("pay", SideEffect.REMOTE_MUTATION)],
        now=FakeClock(),
        new_id=Ids(),
    )

    async def start() -> agentrt.Run:
        return await driver.start("pay")

    run = asyncio.run(start())
    assert run.status == "WAITING_FOR_APPROVAL"
    [approval] = store.list_approvals(run.id)
    [step] = store.list_steps(run.id)
    assert step.policy is not None
    assert step.policy.capability == {"amount": 1}
    assert approval.capability == {"amount": 1}
    [requested] = [e for e in store.list_events(run.id) if e.type == "approval.requested"]
    assert requested.payload["capability"] == {"amount": 1}


class EditingPolicy:
    """The default policy, after "normalising" the approvals in its read-only view."""

    policy_id = "editing"

    def __init__(self) -> None:
        self.inner = agentrt.default_policy()

    def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        for approval in view.approvals:
            approval.capability["args"]["x"] = 999
        return self.inner.evaluate(request, view)


def test_what_a_policy_does_to_its_view_of_approvals_never_reaches_the_agent(
    store: agentrt.Store,
) -> None:
    """A policy edits the capability of an approval in its `RunView`. The run is approved
    with `{"x": 1}`, the record keeps it, and the agent's next `StepInput.approvals`
    shows what is recorded: the policy edited its own copy."""
    shown: list[list[Any]] = []

    def agent(step_input: StepInput) -> Decision:
        shown.append([a.capability for a in step_input.approvals])
        if len(shown) == 1:
            return Decision.tool_call("push", {"x": 1})
        return Decision.complete("ok")

    push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
    driver = agentrt.Driver(
        store=store,
        agent=agent,
        policy=EditingPolicy(),
        tools=[push],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("push it")
    (pending,) = store.pending_approvals(run.id)
    driver.approve(run.id, pending.id, by="alice")
    run = driver.resume_sync(run.id)
    assert run.status == "COMPLETED"
    recorded = [a.capability for a in store.list_approvals(run.id)]
    assert recorded == [{"tool": "push", "args": {"x": 1}}]
    assert shown[-1] == recorded


def test_a_reconciliations_view_owns_its_approvals_as_a_policys_does(
    store: agentrt.Store,
) -> None:
    """The view a takeover hands the consumer's reconciliation is made by the same
    `shown_view` as a policy's: its approvals are copies, so what a reconciliation edits
    there never reaches the session's approvals (nor the record, nor the agent)."""
    from agentrt._shown import shown_view

    push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("push", {"x": 1}), Decision.complete("ok")]),
        policy=agentrt.default_policy(),
        tools=[push],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("push it")
    (approval,) = store.pending_approvals(run.id)
    view = RunView(run=store.get_run(run.id), steps=(), approvals=(approval,))
    shown = shown_view(view)
    assert shown.approvals == view.approvals
    shown.approvals[0].capability["args"]["x"] = 999
    assert approval.capability == {"tool": "push", "args": {"x": 1}}
    assert shown.run == view.run
