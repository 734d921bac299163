"""A model's own `CancelledError` (its client awaited something cancelled; nobody
cancelled the request) is "anything else" since decision 0153: `error`, charged nothing,
not retried. Recording such a run must not change it, and replaying the recording must
give the same rows (review): the Recorder kept it as a cancel at the call timeout, which
replays as `TimeoutError`, `ambiguous`, charged the estimate and retried."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import agentrt
from agentrt import ModelConfig
from agentrt.replay import Recorder, Replayer
from support.models import PRICE, FakeModel, drive, reply


def _attempts(store: agentrt.Store, run_id: str) -> list[tuple[Any, ...]]:
    return [
        (c.attempt, c.status, c.input_tokens, c.output_tokens, c.cost_micros, c.error)
        for c in store.list_model_calls(run_id)
    ]


def _own_cancel() -> Any:
    async def raising() -> Any:
        raise asyncio.CancelledError  # the model's own: nobody cancelled the request

    return raising


def test_a_models_own_cancel_is_recorded_and_replayed_as_the_error_it_was(tmp_path: Path) -> None:
    def run_with(model: Any, path: Path) -> list[tuple[Any, ...]]:
        store = agentrt.open_store(path)
        config = ModelConfig(model=model, prices=PRICE, max_retries=1, backoff=timedelta(0))
        run = drive(store, model, config=config)
        assert (run.status, run.reason) == ("FAILED", "model_unavailable"), run
        rows = _attempts(store, run.id)
        store.close()
        return rows

    plain = run_with(FakeModel(_own_cancel(), reply(), name="m"), tmp_path / "plain.db")
    assert plain == [(1, "error", 0, 0, 0, "CancelledError")]
    recorded = run_with(
        Recorder(FakeModel(_own_cancel(), reply(), name="m"), tmp_path / "rec"),
        tmp_path / "recorded.db",
    )
    assert recorded == plain  # recording a run does not change it
    replayer = Replayer(tmp_path / "rec", "m")
    assert run_with(replayer, tmp_path / "replayed.db") == plain
    assert replayer.unplayed() == {}
