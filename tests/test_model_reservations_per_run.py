"""The cost and token reservations of requests in flight are the run's (decision 0139).

Found by an attack: they were per step, in memory, and a second caller bypassed them.

models.md: before every attempt the limits are checked against the run's recorded
totals plus the attempts in flight; concurrent calls reserve before dispatch, "so they
cannot all pass the check". The attempts in flight are kept in the `AccountingCaller`
of one step (`_in_flight`), although every dispatched attempt is a `model_calls` row
carrying its estimate. An agent that keeps the handle of an earlier step (an adapter
that binds the model once, say) and calls through it concurrently with the current
step's handle sends two requests that each pass the check alone: the run spends twice
a cost limit that had room for one.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import agentrt
from agentrt import Decision, LimitExceeded, Limits, RunStatus, SideEffect, StepInput
from agentrt._accounting import project
from agentrt._model import ModelConfig, ModelResponse, Usage
from conftest import FakeClock, Ids, RecordingTool
from support.models import PRICE, REQUEST, FakeModel, reply


class TwoAtOnce:
    """A model both of whose requests are held until the other arrives, so that both are
    in flight together (no race: if only one is sent, this bounded wait just ends)."""

    def __init__(self) -> None:
        self.projected = project(REQUEST, 100, PRICE)
        assert self.projected.cost_micros is not None
        self.arrived = 0
        self.both = asyncio.Event()
        self.model = FakeModel(self.slow, self.slow)

    async def slow(self) -> ModelResponse:
        self.arrived += 1
        if self.arrived == 2:
            self.both.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.both.wait(), 2)
        return reply(usage=Usage(self.projected.input_tokens, 100, 0))

    def driver(self, store: agentrt.Store, decide: Any) -> agentrt.Driver:
        return agentrt.Driver(
            store=store,
            agent=decide,
            policy=agentrt.default_policy(),
            tools=[RecordingTool("t", SideEffect.READ_ONLY)],
            model=ModelConfig(model=self.model, prices=PRICE),
            now=FakeClock(),
            new_id=Ids(),
        )

    def room_for_one(self) -> Limits:
        return Limits(max_estimated_cost_micros=self.projected.cost_micros)


def test_two_handles_of_one_run_cannot_both_spend_the_last_of_the_budget(
    any_store: agentrt.Store,
) -> None:
    two = TwoAtOnce()
    handles: list[object] = []

    async def decide(input: StepInput) -> Decision:
        handles.append(input.model)
        if len(handles) == 1:
            return Decision.tool_call("t", {"x": 1})
        first, current = handles
        results = await asyncio.gather(
            first.generate(REQUEST),  # type: ignore[attr-defined]
            current.generate(REQUEST),  # type: ignore[attr-defined]
            return_exceptions=True,
        )
        return Decision.complete({"ok": sum(not isinstance(r, BaseException) for r in results)})

    run = two.driver(any_store, decide).start_sync("g", limits=two.room_for_one())
    assert len(two.model.requests) == 1, f"{len(two.model.requests)} requests sent"
    assert two.projected.cost_micros is not None
    assert run.estimated_cost_micros <= two.projected.cost_micros, run.estimated_cost_micros


def test_a_refused_concurrent_request_does_not_break_the_session(
    any_store: agentrt.Store,
) -> None:
    """A write refused before it touched the session's copy does not break the session
    because another write of the session moved the copy meanwhile (decision 0136; found
    by a review): two requests of one step on the group committer (an async loop), the
    first dispatched, the second refused `LimitExceeded` untouched; the agent caught it
    and completes."""
    two = TwoAtOnce()
    results: list[object] = []

    async def decide(input: StepInput) -> Decision:
        got = await asyncio.gather(
            input.model.generate(REQUEST),  # type: ignore[union-attr]
            input.model.generate(REQUEST),  # type: ignore[union-attr]
            return_exceptions=True,
        )
        results.extend(got)
        return Decision.complete({"ok": 1})

    driver = two.driver(any_store, decide)
    run = asyncio.run(driver.start("g", limits=two.room_for_one()))
    assert len(two.model.requests) == 1
    assert sum(isinstance(r, LimitExceeded) for r in results) == 1, results
    assert run.status == RunStatus.COMPLETED, (run.status, run.reason)
