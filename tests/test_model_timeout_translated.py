"""A request cancelled at its call timeout whose client raises an error of its own is the
timeout's: ambiguous, charged the estimate (review of decision 0159)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import agentrt
from agentrt import ModelConfig
from agentrt._accounting import project
from agentrt.replay import Recorder, Replayer
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
    assert any_store.list_model_calls(run.id)[0].error == "TimeoutError"


def test_such_a_timeout_is_recorded_and_replayed_as_it_was_judged(tmp_path: Path) -> None:
    """Recording the run does not change it, and its replay gives the same rows: the
    Recorder keeps what a cancelled request raised as the cancel (`TimeoutError` on replay),
    not as the client's error (which would replay as "anything else")."""

    async def translating() -> agentrt.ModelResponse:
        try:
            await asyncio.sleep(3)
        except BaseException as exc:
            raise RuntimeError("request aborted") from exc
        raise AssertionError("not reached")

    def run_with(model: Any, path: Path) -> list[tuple[Any, ...]]:
        store = agentrt.open_store(path)
        config = ModelConfig(
            model=model, prices=PRICE, call_timeout=timedelta(milliseconds=20), max_retries=1
        )
        run = drive(store, model, config=config)
        assert (run.status, run.reason) == ("FAILED", "model_unavailable"), run
        rows = [
            (*row, c.error)
            for row, c in zip(calls(store, run.id), store.list_model_calls(run.id), strict=True)
        ]
        store.close()
        return rows

    plain = run_with(FakeModel(translating, translating, name="m"), tmp_path / "plain.db")
    assert [row[1] for row in plain] == ["ambiguous", "ambiguous"]
    recorded = run_with(
        Recorder(FakeModel(translating, translating, name="m"), tmp_path / "rec"),
        tmp_path / "recorded.db",
    )
    assert recorded == plain
    replayer = Replayer(tmp_path / "rec", "m")
    assert run_with(replayer, tmp_path / "replayed.db") == plain
    assert replayer.unplayed() == {}
