"""A reply the provider served that the Recorder cannot write is still charged its usage.

`Recorder.generate` raises `ServedModelError` with the reply's usage whatever stops it
recording the reply: a full disk, or content the recording's canonical JSON refuses (a
lone surrogate in the text, which Python's JSON decoder gives for `"\\ud800"`), which
escaped as a `JSONValueError` and left the attempt recorded with no tokens and no cost
(decision 0143). A key's later replies are recorded as before.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import agentrt
from agentrt import ServedModelError
from agentrt._model import ModelResponse, Usage
from agentrt.replay import Recorder, Replayer
from support.models import PRICE, TINY_REQUEST, FakeModel, calls, drive


def served(text: str) -> ModelResponse:
    return ModelResponse(text, (), "end_turn", Usage(10, 5, 0), b'{"served": true}')


def test_a_served_reply_the_recorder_cannot_write_is_still_charged_its_usage(
    any_store: agentrt.Store, tmp_path: Path
) -> None:
    """A developer records a run with `Recorder(model, dir)`; the model serves (and bills) a
    reply whose text holds a lone surrogate: the attempt is charged the 10 + 5 tokens the
    provider reported, as it is without the Recorder."""
    other = agentrt.open_store(str(tmp_path / "plain.db"))
    try:
        plain = drive(other, FakeModel(served("caf\ud800")))
        assert calls(other, plain.id)[0][2:] == (10, 5, PRICE.cost_micros(Usage(10, 5, 0)))
    finally:
        other.close()

    recorded = drive(any_store, Recorder(FakeModel(served("caf\ud800")), tmp_path / "rec"))
    assert calls(any_store, recorded.id)[0][2:] == (10, 5, PRICE.cost_micros(Usage(10, 5, 0)))
    assert recorded.estimated_cost_micros >= PRICE.cost_micros(Usage(10, 5, 0))


def test_a_reply_that_could_not_be_recorded_leaves_the_keys_next_replies_recorded(
    tmp_path: Path,
) -> None:
    """The same request asked again after a reply the recording refused: the next reply is
    recorded and replays (the refused one is not kept, so it does not fail every later
    write of that request)."""
    recorder = Recorder(FakeModel(served("caf\ud800"), served("fine")), tmp_path / "rec")
    with pytest.raises(ServedModelError, match="could not be recorded") as refused:
        asyncio.run(recorder.generate(TINY_REQUEST))
    assert refused.value.usage == Usage(10, 5, 0)
    assert asyncio.run(recorder.generate(TINY_REQUEST)).text == "fine"

    replayer = Replayer(tmp_path / "rec", "fake:model")
    assert asyncio.run(replayer.generate(TINY_REQUEST)).text == "fine"
    assert replayer.unplayed() == {}
