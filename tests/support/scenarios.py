"""Scenario factories for the test kit's tests, importable by name in child processes.

Process mode rebuilds a scenario in every child from a reference such as
`"support.scenarios:checkout"`: this module is that consumer code. It lives in
tests/support/ (tests/ is on sys.path under pytest; the kit puts it on the
children's path).

The story is the seed's: an agent looks an order up (a read), charges a card
(a remote side effect), and completes.
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import agentrt
from agentrt import Decision, SideEffect, StepInput, StepStatus, ToolCall, ToolResult, ToolSpec
from agentrt._model import Message, ModelRequest, ModelResponse, TextBlock, Usage
from agentrt.scripted import ScriptedAgent
from agentrt.testkit import LoopContext, Scenario, Verdict, always, by_kind

from .database import BRIEF_LEASE

# Long enough that no load lapses a live lease: the harness waits a dead owner's lease
# out on its own clock, and a real process that died is proved dead at once.
LEASE = timedelta(seconds=30)
ORDER = {"order": 17}
CHARGE = {"order": 17, "amount_micros": 12_500_000}


class Clock:
    """A fake clock ticking 1 ms per reading (deterministic records in the harness)."""

    def __init__(self) -> None:
        self.t = datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.t += timedelta(milliseconds=1)
        return self.t


def ids(prefix: str = "c") -> Any:
    counter = itertools.count(1)
    return lambda: f"{prefix}{next(counter):031x}"


class Lookup:
    """Reads an order: read_only, so an interrupted lookup is simply not retried by the runtime."""

    spec = ToolSpec(
        name="lookup",
        description="look an order up",
        input_schema={
            "type": "object",
            "properties": {"order": {"type": "integer"}},
            "required": ["order"],
            "additionalProperties": False,
        },
        side_effect=SideEffect.READ_ONLY,
        timeout=timedelta(seconds=5),
    )

    def call(self, call: ToolCall) -> ToolResult:
        return ToolResult({"order": call.args["order"], "total_micros": 12_500_000}, "found")


class Charge:
    """Charges a card (simulated): a remote side effect that must never run twice on its own."""

    spec = ToolSpec(
        name="charge",
        description="charge the customer's card",
        input_schema={
            "type": "object",
            "properties": {
                "order": {"type": "integer"},
                "amount_micros": {"type": "integer", "minimum": 1},
            },
            "required": ["order", "amount_micros"],
            "additionalProperties": False,
        },
        side_effect=SideEffect.REMOTE_MUTATION,
        timeout=timedelta(seconds=5),
    )

    async def call(self, call: ToolCall) -> ToolResult:
        await asyncio.sleep(0)
        return ToolResult({"charged_micros": call.args["amount_micros"]}, "charged")


def _script() -> ScriptedAgent:
    return ScriptedAgent(
        [
            Decision.tool_call("lookup", ORDER),
            Decision.tool_call("charge", CHARGE),
            Decision.complete({"receipt": "r-17"}),
        ]
    )


class OrderAgent:
    """Decides from the record, as a model reads its transcript: look the order up until a
    lookup is done, then charge until a charge is done, then complete. After a crash it
    simply carries on from what the record says was done."""

    def decide(self, input: StepInput) -> Decision:
        done = {
            s.decision.tool
            for s in input.steps
            if s.status == StepStatus.DONE and s.decision is not None
        }
        if "lookup" not in done:
            return Decision.tool_call("lookup", ORDER)
        if "charge" not in done:
            return Decision.tool_call("charge", CHARGE)
        return Decision.complete({"receipt": "r-17"})


class ChargeThenComplete:
    """Charges until a charge is done, then completes (decided from the record)."""

    def decide(self, input: StepInput) -> Decision:
        if any(s.status == StepStatus.DONE for s in input.steps):
            return Decision.complete()
        return Decision.tool_call("charge", CHARGE)


class RememberingAgent:
    """Remembers in memory, not in the record, that it asked for the charge, and completes
    once it has. A process that dies after the ask forgets it: a restarted one asks again."""

    def __init__(self) -> None:
        self.asked = False

    def decide(self, input: StepInput) -> Decision:
        if self.asked:
            return Decision.complete({"receipt": "r-17"})
        self.asked = True
        return Decision.tool_call("charge", CHARGE)


def _allow_all() -> agentrt.SideEffectPolicy:
    allow = agentrt.PolicyDecision.allow()
    return agentrt.SideEffectPolicy(
        {SideEffect.READ_ONLY: allow, SideEffect.REMOTE_MUTATION: allow}, policy_id="allow-all"
    )


def checkout(operator: Verdict = Verdict.APPROVE) -> Scenario:
    """The matrix scenario: lookup (read), charge (remote, needs approval), complete."""
    return Scenario(
        tools=[Lookup(), Charge()],
        policy=agentrt.default_policy(),
        agent=OrderAgent(),
        goal="charge order 17",
        operator=always(operator),
        now=Clock(),
        new_id=ids(),
        lease_ttl=LEASE,
        name="checkout",
    )


def checkout_reject_interrupted() -> Scenario:
    """checkout whose operator approves the charge but rejects re-running an interrupted one."""
    scenario = checkout()
    scenario.operator = by_kind(
        {"remote_mutation": Verdict.APPROVE, "interrupted_side_effect": Verdict.REJECT}
    )
    return scenario


def checkout_leave() -> Scenario:
    """checkout whose operator never answers: the run is left waiting."""
    return checkout(Verdict.LEAVE)


def direct_charge(operator: Verdict) -> Scenario:
    """lookup then charge, both allowed by policy (no approval): the seed's card charge."""
    return Scenario(
        tools=[Lookup(), Charge()],
        policy=_allow_all(),
        agent=_script(),
        goal="charge order 17",
        operator=always(operator),
        now=Clock(),
        new_id=ids("d"),
        lease_ttl=LEASE,
        name="direct_charge",
    )


def direct_charge_approve() -> Scenario:
    return direct_charge(Verdict.APPROVE)


def direct_charge_reject() -> Scenario:
    return direct_charge(Verdict.REJECT)


def remembering() -> Scenario:
    """A charge allowed by policy, asked for by an agent with in-memory state."""
    return Scenario(
        tools=[Charge()],
        policy=_allow_all(),
        agent=RememberingAgent(),
        goal="charge order 17",
        operator=always(Verdict.APPROVE),
        now=Clock(),
        new_id=ids("f"),
        lease_ttl=LEASE,
        name="remembering",
    )


def small() -> Scenario:
    """Two steps (a charge allowed by policy, then complete), for the plugin's own test."""
    return Scenario(
        tools=[Charge()],
        policy=_allow_all(),
        agent=ChargeThenComplete(),
        goal="charge",
        operator=always(Verdict.APPROVE),
        lease_ttl=LEASE,
        name="small",
    )


def broken_loop() -> Scenario:
    """A scenario whose consumer loop fails before the run is even created."""

    async def loop(ctx: LoopContext) -> agentrt.Run:
        raise RuntimeError("the consumer's loop is broken")

    scenario = small()
    scenario.loop = loop
    return scenario


class Note:
    """A remote mutation whose result reads like an interruption's record."""

    spec = ToolSpec(
        name="note",
        description="write a note",
        input_schema={
            "type": "object",
            "properties": {"x": {"type": "integer"}},
            "additionalProperties": False,
        },
        side_effect=SideEffect.REMOTE_MUTATION,
        timeout=timedelta(seconds=5),
    )

    def call(self, call: ToolCall) -> ToolResult:
        return ToolResult(content={"previous_status": "executing"}, summary="note ok")


def echo() -> Scenario:
    """One allowed `note` call whose result looks like an interruption, then complete."""
    return Scenario(
        tools=[Note()],
        policy=_allow_all(),
        agent=ScriptedAgent([Decision.tool_call("note", {"x": 1}), Decision.complete()]),
        operator=always(Verdict.APPROVE),
        lease_ttl=LEASE,
        name="echo",
    )


async def gate_loop(ctx: LoopContext) -> agentrt.Run:
    """A consumer's own loop over a Gate: the agent decides, the gate judges and executes.

    The session is closed only when the loop stops by itself: a process that dies
    (a crash) leaves everything as it was, as a real death would.
    """
    gate = ctx.gate
    assert gate is not None
    if ctx.resuming:
        session, _ = await gate.attach(ctx.run_id)
    else:
        session = await gate.begin(ctx.goal, ctx.limits, run_id=ctx.run_id)
    allowed = session.current()  # an approved call attach allowed
    if allowed is not None:
        await allowed.execute()
    while not session.done:
        step = await session.step()
        if step is None:
            break
        try:
            decision = ctx.agent.decide(session.input())
            if asyncio.iscoroutine(decision):
                decision = await decision
        except Exception as exc:
            await step.fail(exc)
            break
        verdict = await step.propose(decision)
        if verdict.outcome == agentrt.VerdictOutcome.ALLOWED:
            await step.execute()
    await session.close()
    return session.run


def gate_checkout() -> Scenario:
    """checkout driven by a hand-written loop over a Gate instead of the Driver."""
    scenario = checkout()
    scenario.loop = gate_loop
    scenario.name = "gate_checkout"
    return scenario


def checkout_brief() -> Scenario:
    """checkout with a lease of `support.database.BRIEF_LEASE`: what the harness waits out
    in real time after a crash on PostgreSQL, whose lease clock it cannot move."""
    scenario = checkout()
    scenario.lease_ttl = BRIEF_LEASE
    return scenario


def gate_checkout_brief() -> Scenario:
    """gate_checkout with a lease of `support.database.BRIEF_LEASE` (see `checkout_brief`)."""
    scenario = gate_checkout()
    scenario.lease_ttl = BRIEF_LEASE
    return scenario


class Planner:
    """A local stand-in for a model: every request gets a short text reply."""

    name = "fake:planner"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(0)
        return ModelResponse(
            text="carry on", tool_uses=[], stop_reason="end_turn", usage=Usage(12, 3, 0)
        )


class ModelOrderAgent(OrderAgent):
    """OrderAgent that asks its model (through the runtime's accounting) before each step."""

    async def decide(self, input: StepInput) -> Decision:  # type: ignore[override]
        assert input.model is not None
        await input.model.generate(
            ModelRequest(system="plan", messages=[Message("user", [TextBlock("next?")])])
        )
        return OrderAgent.decide(self, input)


def with_model() -> Scenario:
    """checkout's story told by an agent that asks a model at every step."""
    return Scenario(
        tools=[Lookup(), Charge()],
        policy=_allow_all(),
        agent=ModelOrderAgent(),
        model=Planner(),
        goal="charge order 17",
        operator=always(Verdict.APPROVE),
        now=Clock(),
        new_id=ids("e"),
        lease_ttl=LEASE,
        name="with_model",
    )
