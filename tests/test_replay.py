"""agentrt.replay: scripted, recording and replaying models (models.md, "Replay")."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentrt import ServedModelError, TransientModelError, canonical_json
from agentrt._canonical import parse_json
from agentrt._model import Message, ModelRequest, ModelResponse, TextBlock, ToolUseBlock, Usage
from agentrt.replay import (
    FORMAT,
    RecordedModelError,
    Recorder,
    RecordingError,
    Replayer,
    ReplayMissError,
    ScriptedModel,
    ScriptExhaustedError,
    request_key,
)


def request(text: str = "hello", max_output_tokens: int | None = 100) -> ModelRequest:
    return ModelRequest(
        system="sys",
        messages=(Message("user", (TextBlock(text),)),),
        max_output_tokens=max_output_tokens,
    )


def reply(text: str, raw: bytes = b"") -> ModelResponse:
    return ModelResponse(
        text=text, tool_uses=(), stop_reason="end_turn", usage=Usage(10, 2, 1), raw=raw
    )


def play(model: Any, req: ModelRequest) -> ModelResponse:
    result: ModelResponse = asyncio.run(model.generate(req))
    return result


def fails(model: Any, req: ModelRequest) -> BaseException:
    try:
        asyncio.run(model.generate(req))
    except BaseException as exc:
        return exc
    raise AssertionError("the model answered")


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


# --------------------------------------------------------------------------- ScriptedModel


def test_scripted_model_returns_responses_in_order_and_records_requests() -> None:
    model = ScriptedModel([reply("one"), reply("two")], name="script-a")
    assert model.name == "script-a"
    assert play(model, request("a")).text == "one"
    assert play(model, request("b")).text == "two"
    assert model.requests == [request("a"), request("b")]


def test_scripted_model_past_the_end_is_a_clear_error() -> None:
    model = ScriptedModel([reply("only")])
    play(model, request())
    exc = fails(model, request())
    assert isinstance(exc, ScriptExhaustedError)
    assert str(exc) == "the script of model 'scripted' has 1 responses; request 2 has none"
    assert len(model.requests) == 2


def test_scripted_model_raises_scripted_failures_and_calls_functions() -> None:
    model = ScriptedModel(
        [
            TransientModelError("busy", retry_after=3),
            lambda req: reply(f"saw {len(req.messages)} message(s)"),
        ]
    )
    exc = fails(model, request())
    assert isinstance(exc, TransientModelError) and exc.retry_after == 3
    assert play(model, request()).text == "saw 1 message(s)"


# --------------------------------------------------------------------------- keys


def test_key_is_sha256_of_the_canonical_model_and_request() -> None:
    req = request()
    expected = hashlib.sha256(canonical_json({"model": "m", "request": req.to_json()})).hexdigest()
    assert request_key("m", req) == expected
    assert request_key("other", req) != expected
    assert request_key("m", request(max_output_tokens=101)) != expected


def test_key_keeps_number_literals() -> None:
    def with_args(text: bytes) -> ModelRequest:
        call = ToolUseBlock("toolu_1", "t", parse_json(text))
        return ModelRequest("s", (Message("assistant", (call,)),))

    keys = {request_key("m", with_args(t)) for t in (b'{"x":10}', b'{"x":10.0}', b'{"x":1e1}')}
    assert len(keys) == 3


# --------------------------------------------------------------------------- record / replay


def test_identical_requests_are_recorded_in_sequence_and_replayed_in_order(
    tmp_path: Path,
) -> None:
    inner = ScriptedModel([reply("first"), reply("other"), reply("second")], name="prov:m")
    recorder = Recorder(inner, tmp_path)
    assert recorder.name == "prov:m"
    assert [play(recorder, request(t)).text for t in ("a", "b", "a")] == [
        "first",
        "other",
        "second",
    ]

    replayer = Replayer(tmp_path, "prov:m")
    assert play(replayer, request("a")).text == "first"
    assert play(replayer, request("b")).text == "other"
    assert play(replayer, request("a")).text == "second"
    exc = fails(replayer, request("a"))
    key = request_key("prov:m", request("a"))
    assert isinstance(exc, ReplayMissError) and exc.key == key
    assert key in str(exc) and "recorded 2 time(s); attempt 3 was not" in str(exc)


def test_a_request_never_recorded_is_an_error_naming_its_key(tmp_path: Path) -> None:
    play(Recorder(ScriptedModel([reply("x")], name="m"), tmp_path), request("a"))
    exc = fails(Replayer(tmp_path, "m"), request("never"))
    assert isinstance(exc, ReplayMissError)
    assert exc.key == request_key("m", request("never")) and exc.key in str(exc)
    # The model name is part of the key: another model's replayer finds nothing.
    assert isinstance(fails(Replayer(tmp_path, "n"), request("a")), ReplayMissError)


def test_raw_bytes_and_number_literals_survive_byte_identical(tmp_path: Path) -> None:
    raw = bytes(range(256)) + b"\xff\xfe\x80 not utf-8"
    args = parse_json(b'{"price":1.50,"big":123456789012345678901234567890,"e":1e1}')
    original = ModelResponse(
        text="caf\u00e9 \U0001f600",
        tool_uses=(ToolUseBlock("toolu_9", "buy", args),),
        stop_reason="tool_use",
        usage=Usage(7, 3, 0),
        raw=raw,
    )
    play(Recorder(ScriptedModel([original], name="m"), tmp_path), request())
    replayed = play(Replayer(tmp_path, "m"), request())
    assert replayed.raw == raw
    assert replayed == original
    assert canonical_json(replayed.tool_uses[0].input) == (
        b'{"big":123456789012345678901234567890,"e":1e1,"price":1.50}'
    )


def test_recordings_are_owner_only_and_leave_no_temp_files(tmp_path: Path, umask_022: None) -> None:
    directory = tmp_path / "recordings"
    recorder = Recorder(ScriptedModel([reply("a"), reply("b")], name="m"), directory)
    play(recorder, request("a"))
    play(recorder, request("a"))  # rewritten in place: still owner-only
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    (path,) = directory.iterdir()
    assert path.name == request_key("m", request("a")) + ".json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    document = json.loads(path.read_text())
    assert document["format"] == FORMAT and document["model"] == "m"
    assert document["request"] == request("a").to_json()
    assert [e["response"]["text"] for e in document["entries"]] == ["a", "b"]


def test_a_failed_write_leaves_the_previous_recording_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    play(Recorder(ScriptedModel([reply("kept")], name="m"), tmp_path), request())
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def broken_replace(src: Any, dst: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    # The provider served (and billed) the reply: the caller must still charge it,
    # so the failure to record is a served error carrying the reply's usage.
    with pytest.raises(ServedModelError, match="could not be recorded: disk full") as caught:
        play(Recorder(ScriptedModel([reply("lost")], name="m"), tmp_path), request())
    assert caught.value.usage == reply("lost").usage
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_new_recorder_session_replaces_the_sequences_it_records(tmp_path: Path) -> None:
    first = Recorder(ScriptedModel([reply("a1"), reply("a2"), reply("b1")], name="m"), tmp_path)
    for text in ("a", "a", "b"):
        play(first, request(text))
    second = Recorder(ScriptedModel([reply("a-new")], name="m"), tmp_path)
    play(second, request("a"))

    replayer = Replayer(tmp_path, "m")
    assert play(replayer, request("a")).text == "a-new"
    assert isinstance(fails(replayer, request("a")), ReplayMissError)
    # A key the second session never recorded keeps the first session's sequence.
    assert play(replayer, request("b")).text == "b1"


def test_failures_replay_with_the_same_class_message_and_details(tmp_path: Path) -> None:
    script: list[Any] = [
        TransientModelError("overloaded", retry_after=timedelta(seconds=2, microseconds=5)),
        TransientModelError("rate limited", retry_after=1.5),
        ServedModelError("unusable arguments", usage=Usage(11, 4, 0)),
        ConnectionResetError("connection reset by peer"),
        TimeoutError(),
        ValueError("something odd"),
        reply("finally"),
    ]
    recorder = Recorder(ScriptedModel(script, name="m"), tmp_path)
    recorded = [fails(recorder, request()) for _ in range(6)]
    assert play(recorder, request()).text == "finally"

    replayer = Replayer(tmp_path, "m")
    replayed = [fails(replayer, request()) for _ in range(6)]
    for original, again in zip(recorded, replayed, strict=True):
        assert type(again).__name__ == type(original).__name__
        assert str(again) == str(original)
    assert isinstance(replayed[0], TransientModelError)
    assert replayed[0].retry_after == timedelta(seconds=2, microseconds=5)
    assert isinstance(replayed[1], TransientModelError) and replayed[1].retry_after == 1.5
    assert isinstance(replayed[2], ServedModelError) and replayed[2].usage == Usage(11, 4, 0)
    assert isinstance(replayed[3], ConnectionResetError)
    assert isinstance(replayed[4], TimeoutError)
    assert isinstance(replayed[5], RecordedModelError)
    assert play(replayer, request()).text == "finally"


def test_an_attempt_cancelled_in_flight_replays_as_the_timeout_the_caller_saw(
    tmp_path: Path,
) -> None:
    class Hangs:
        name = "m"

        async def generate(self, request: ModelRequest) -> ModelResponse:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    recorder = Recorder(Hangs(), tmp_path)

    async def call_with_timeout(model: Any) -> BaseException:
        try:
            await asyncio.wait_for(model.generate(request()), 0.01)
        except BaseException as exc:
            return exc
        raise AssertionError("answered")

    seen = asyncio.run(call_with_timeout(recorder))
    assert isinstance(seen, TimeoutError)
    again = asyncio.run(call_with_timeout(Replayer(tmp_path, "m")))
    assert type(again) is type(seen) and str(again) == str(seen)


def test_concurrent_identical_requests_are_all_recorded(tmp_path: Path) -> None:
    recorder = Recorder(ScriptedModel([reply(str(i)) for i in range(6)], name="m"), tmp_path)

    async def burst() -> list[ModelResponse]:
        return list(await asyncio.gather(*(recorder.generate(request()) for _ in range(6))))

    answered = sorted(r.text for r in asyncio.run(burst()))
    replayer = Replayer(tmp_path, "m")
    assert sorted(play(replayer, request()).text for _ in range(6)) == answered
    assert replayer.unplayed() == {}


def test_unplayed_counts_what_is_left_of_this_model_only(tmp_path: Path) -> None:
    play(Recorder(ScriptedModel([reply("a"), reply("b")], name="m"), tmp_path), request("x"))
    play(Recorder(ScriptedModel([reply("c")], name="other"), tmp_path), request("x"))
    recorder = Recorder(ScriptedModel([reply("a"), reply("b")], name="m"), tmp_path)
    play(recorder, request("x"))
    play(recorder, request("x"))
    replayer = Replayer(tmp_path, "m")
    key = request_key("m", request("x"))
    assert replayer.unplayed() == {key: 2}
    play(replayer, request("x"))
    assert replayer.unplayed() == {key: 1}


def test_a_recording_edited_or_renamed_is_refused(tmp_path: Path) -> None:
    play(Recorder(ScriptedModel([reply("a")], name="m"), tmp_path), request("a"))
    path = tmp_path / (request_key("m", request("a")) + ".json")
    document = json.loads(path.read_text())
    document["request"]["system"] = "edited"
    path.write_text(json.dumps(document))
    exc = fails(Replayer(tmp_path, "m"), request("a"))
    assert isinstance(exc, RecordingError) and "does not hash to its name" in str(exc)

    path.write_text('{"format": "something else"}')
    exc = fails(Replayer(tmp_path, "m"), request("a"))
    assert isinstance(exc, RecordingError) and FORMAT in str(exc)


def test_recorder_refuses_what_is_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"agentrt\.Model"):
        Recorder(object(), tmp_path)  # type: ignore[arg-type]
