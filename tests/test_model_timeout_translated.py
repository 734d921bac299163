"""A request cancelled at its call timeout whose client raises an error of its own is the
timeout's: ambiguous, charged the estimate (review of decision 0159)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import agentrt
from agentrt import ModelConfig
from agentrt._accounting import project
from support.models import PRICE, REQUEST, FakeModel, calls, drive


def test_a_model_that_raises_its_own_error_when_cancelled_at_the_timeout_is_a_timeout(
    any_store: agentrt.Store,
) -> None:
    """Review of decision 0159: the runtime cancels a request at its call timeout, and the
    client turns the cancel into an error of its own (`except BaseException: raise
    ClientError`). The request was sent and may have been served: the attempt is the
    timeout's, `ambiguous`, charged the estimate with the full output cap (models.md), not
    "anything else" (`error`, charged nothing, never retried)."""

    async def translating() -> agentrt.ModelResponse:
        try:
            await asyncio.sleep(3)
        except BaseException as exc:  # a client's own wrapper around whatever stops it
            raise RuntimeError("request aborted") from exc
        raise AssertionError("not reached")

    model = FakeModel(translating, translating, translating, translating)
    config = ModelConfig(
        model=model, prices=PRICE, call_timeout=timedelta(milliseconds=20), max_retries=0
    )
    run = drive(any_store, model, config=config)
    assert (run.status, run.reason) == ("FAILED", "model_unavailable"), run
    projected = project(REQUEST, 100, PRICE)
    first = calls(any_store, run.id)[0]
    assert first == (1, "ambiguous", projected.input_tokens, 100, projected.cost_micros)
