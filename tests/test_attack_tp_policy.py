"""Attack campaign (tp): what a policy's answer and its view can do to the record.

loop.md: the policy gets a read-only view; `step.policy` carries the decision; an
unknown outcome ends the run `FAILED internal_error` with nothing executed.
Decision 0138: a policy's answer is read once, by its base type, and what is
recorded is what it answered. `_shown`: nothing a consumer does to what it was shown
changes what the runtime records, judges or shows others.
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
    """A policy answers `PolicyDecision(outcome=Verdict.allow)` with its own `(str, Enum)`.
    The runtime compares the value ("allow") and runs the tool, but records
    `str(outcome)`, "Verdict.allow": `step.policy` holds an outcome that is no outcome,
    beside a call that was executed. What is recorded should be the outcome acted on
    ("allow"), or the answer refused as unknown with nothing run."""
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
    first = store.list_steps(run.id)[0]
    if not tool.calls:  # refused as an unknown outcome: acceptable
        assert run.status == "FAILED"
        assert run.reason == "internal_error"
        return
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
    turn of the loop. `step.policy` records the answer as given (`{"amount": 1}`, copied
    at the verdict, decision 0138), but the approval row, its `approval.requested` event
    and its hash are made from the policy's own dict when the pause is written:
    `{"amount": 1000}`, which the policy never answered. Both should hold what it
    answered."""
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
    """A policy edits the capability of an approval in its `RunView` (its view's steps are
    copies, its approvals are the session's own objects). The run is approved with
    `{"x": 1}` and the record keeps it, but the agent's next `StepInput.approvals` shows
    `{"x": 999}`, which no record holds. The agent should be shown what is recorded."""
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
