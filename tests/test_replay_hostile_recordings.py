"""A recording holds every failure as the provider raised it, and a tampered one is refused
as a recording (attack on replay; decision 0159).

- A `Recorder` whose provider failed with something the recording's JSON refuses (a
  `retry_after` that is NaN or infinite, a message with a lone surrogate) raised the JSON
  error instead of the provider's failure: a transient failure that would have been
  retried ended the run, so recording a run changed it, and nothing was recorded.
- A recording whose `retry_after` was edited past any duration raised `OverflowError`
  from the replayer, not `RecordingError`.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import ModelConfig, TransientModelError
from agentrt._canonical import policy_json
from agentrt.replay import Recorder, RecordingError, Replayer, _document, request_key
from support.models import PRICE, REQUEST, FakeModel, drive, reply


def _attempts(store: agentrt.Store, run_id: str) -> list[tuple[Any, ...]]:
    return [
        (c.attempt, c.status, c.input_tokens, c.output_tokens, c.cost_micros, c.error)
        for c in store.list_model_calls(run_id)
    ]


@pytest.mark.parametrize(
    ("failure", "status", "error"),
    [
        (
            TransientModelError("busy", retry_after=float("nan")),
            "COMPLETED",
            "TransientModelError: busy",
        ),
        (
            TransientModelError("busy", retry_after=float("inf")),
            "FAILED",
            "TransientModelError: busy",
        ),
        (
            TransientModelError("busy \ud800 now"),
            "COMPLETED",
            "TransientModelError: busy \\ud800 now",
        ),
    ],
    ids=["nan-retry-after", "infinite-retry-after", "lone-surrogate"],
)
def test_a_failure_the_json_cannot_hold_is_recorded_and_replayed_as_the_provider_raised_it(
    tmp_path: Path, failure: TransientModelError, status: str, error: str
) -> None:
    def run_with(model: Any, path: Path) -> list[tuple[Any, ...]]:
        store = agentrt.open_store(path)
        config = ModelConfig(model=model, prices=PRICE, max_retries=1, backoff=timedelta(0))
        run = drive(store, model, config=config)
        assert run.status == status, run
        rows = _attempts(store, run.id)
        store.close()
        return rows

    plain = run_with(FakeModel(failure, reply(), name="m"), tmp_path / "plain.db")
    assert plain[0][1:] == ("error", 0, 0, 0, error)
    recorded = run_with(
        Recorder(FakeModel(failure, reply(), name="m"), tmp_path / "rec"),
        tmp_path / "recorded.db",
    )
    assert recorded == plain  # recording a run does not change it
    replayer = Replayer(tmp_path / "rec", "m")
    assert run_with(replayer, tmp_path / "replayed.db") == plain
    assert replayer.unplayed() == {}


@pytest.mark.parametrize(
    "retry_after",
    [{"microseconds": 10**30}, {"microseconds": True}, {"microseconds": 1.5}, {"seconds": 1}],
    ids=["past-any-duration", "bool", "float", "other-unit"],
)
def test_a_recording_with_an_edited_retry_after_is_refused_as_a_recording(
    tmp_path: Path, retry_after: Any
) -> None:
    entry = {
        "error": {"class": "transient", "type": "T", "message": "x", "retry_after": retry_after}
    }
    key = request_key("m", REQUEST)
    (tmp_path / f"{key}.json").write_bytes(policy_json(_document("m", REQUEST, [entry])))
    with pytest.raises(RecordingError, match="a recorded failure is malformed"):
        asyncio.run(Replayer(tmp_path, "m").generate(REQUEST))


def test_a_recorder_records_a_failure_whose_message_cannot_be_read(tmp_path: Path) -> None:
    class Unreadable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    model = Recorder(FakeModel(Unreadable(), name="m"), tmp_path)
    with pytest.raises(Unreadable):
        asyncio.run(model.generate(REQUEST))
    replayed = Replayer(tmp_path, "m")
    with pytest.raises(Exception) as caught:
        asyncio.run(replayed.generate(REQUEST))
    assert type(caught.value).__name__ == "Unreadable"
    assert str(caught.value) == "<its message could not be read: RuntimeError>"


def test_a_base_exception_of_the_provider_is_recorded_and_replays_to_the_same_attempt(
    tmp_path: Path,
) -> None:
    def run_with(model: Any, path: Path) -> list[tuple[Any, ...]]:
        store = agentrt.open_store(path)
        run = drive(store, model)
        assert (run.status, run.reason, run.reason_detail) == (
            "FAILED",
            "model_unavailable",
            "SystemExit: 3",
        )
        rows = _attempts(store, run.id)
        store.close()
        return rows

    recorded = run_with(
        Recorder(FakeModel(SystemExit(3), name="m"), tmp_path / "rec"), tmp_path / "a.db"
    )
    assert recorded == [(1, "error", 0, 0, 0, "SystemExit: 3")]
    replayer = Replayer(tmp_path / "rec", "m")
    assert run_with(replayer, tmp_path / "b.db") == recorded
    assert replayer.unplayed() == {}
