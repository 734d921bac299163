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

import agentrt
from agentrt import Decision, Limits, SideEffect, StepInput
from agentrt._accounting import project
from agentrt._model import ModelConfig, ModelResponse, Usage
from conftest import FakeClock, Ids, RecordingTool
from support.models import PRICE, REQUEST, FakeModel, reply


def test_two_handles_of_one_run_cannot_both_spend_the_last_of_the_budget(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    projected = project(REQUEST, 100, PRICE)
    assert projected.cost_micros is not None

    arrived: list[int] = []
    both = asyncio.Event()

    async def slow() -> ModelResponse:
        # Held until the other request arrives too, so both are in flight together (no
        # race: under the bug both arrive at once; once fixed, the second is never sent
        # and this bounded wait just ends).
        arrived.append(1)
        if len(arrived) == 2:
            both.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(both.wait(), 2)
        return reply(usage=Usage(projected.input_tokens, 100, 0))

    model = FakeModel(slow, slow)
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

    driver = agentrt.Driver(
        store=store,
        agent=decide,
        policy=agentrt.default_policy(),
        tools=[RecordingTool("t", SideEffect.READ_ONLY)],
        model=ModelConfig(model=model, prices=PRICE),
        now=FakeClock(),
        new_id=Ids(),
    )
    # Room for exactly one request at its projection.
    run = driver.start_sync("g", limits=Limits(max_estimated_cost_micros=projected.cost_micros))
    assert len(model.requests) == 1, f"{len(model.requests)} requests sent"
    assert run.estimated_cost_micros <= projected.cost_micros, run.estimated_cost_micros
