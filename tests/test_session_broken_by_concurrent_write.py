"""A write refused before it touched the session's copy must not break the session
because ANOTHER write of the same session moved the copy meanwhile (decision 0136).

`RunSession.write` snapshots `(run, steps.writes, _approvals_put)` when it starts and
marks the session `broken` if the snapshot differs when it fails. Two model requests
of one step, sent concurrently by an async agent (models.md: "concurrent calls reserve
before dispatch"), make two `MODEL_DISPATCHED` writes queued together by the group
commit: the first commits (replacing `session.run`), the second is refused with
`LimitExceeded` before writing anything. The second write sees the copy moved (by the
first) and breaks the session: the agent, which caught the refusal, proposes its
decision and the Driver raises `RunStateError` ("this session can no longer be used")
instead of completing the run. Passes on 98dd2b0 (before 0136); fails after.
"""

from __future__ import annotations

import asyncio
import contextlib

import agentrt
from agentrt import Decision, LimitExceeded, Limits, RunStatus, SideEffect, StepInput
from agentrt._accounting import project
from agentrt._model import ModelConfig, ModelResponse, Usage
from conftest import FakeClock, Ids, RecordingTool
from support.models import PRICE, REQUEST, FakeModel, reply


def test_a_refused_concurrent_request_does_not_break_the_session(
    any_store: agentrt.Store,
) -> None:
    projected = project(REQUEST, 100, PRICE)
    assert projected.cost_micros is not None
    arrived: list[int] = []
    both = asyncio.Event()

    async def slow() -> ModelResponse:
        arrived.append(1)
        if len(arrived) == 2:
            both.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(both.wait(), 2)
        return reply(usage=Usage(projected.input_tokens, 100, 0))

    model = FakeModel(slow, slow)
    results: list[object] = []

    async def decide(input: StepInput) -> Decision:
        got = await asyncio.gather(
            input.model.generate(REQUEST),  # type: ignore[union-attr]
            input.model.generate(REQUEST),  # type: ignore[union-attr]
            return_exceptions=True,
        )
        results.extend(got)
        return Decision.complete({"ok": 1})

    driver = agentrt.Driver(
        store=any_store,
        agent=decide,
        policy=agentrt.default_policy(),
        tools=[RecordingTool("t", SideEffect.READ_ONLY)],
        model=ModelConfig(model=model, prices=PRICE),
        now=FakeClock(),
        new_id=Ids(),
    )
    # Room for one request at its projection; the loop is the caller's (async), so the
    # store's writes go through the group commit, as in an application's event loop.
    limits = Limits(max_estimated_cost_micros=projected.cost_micros)
    run = asyncio.run(driver.start("g", limits=limits))
    assert len(model.requests) == 1
    assert sum(isinstance(r, LimitExceeded) for r in results) == 1, results
    assert run.status == RunStatus.COMPLETED, (run.status, run.reason)
