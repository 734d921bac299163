"""What a model adapter hands back, however it misbehaves, is recorded and ends the run
clearly (attack on the model-driven agent; decision 0159).

- An adapter that raises a `BaseException` that is not an `Exception` (`SystemExit` from a
  library calling `sys.exit()`, `KeyboardInterrupt`, `GeneratorExit`, a custom one)
  escaped the accounting caller: the attempt was left `dispatched`, the run RUNNING, and
  the exception came out of `start` (a `SystemExit` even stopped the event loop).
- An adapter that swallows its cancellation at the call timeout held the step until it
  chose to return, and its late reply was then charged as a success; a caller's cancel
  waited on it the same way.
- A `ModelResponse` whose text, stop reason or tool uses are not of their types
  (a hand-written adapter) was recorded `ok`, then crashed the agent (`AttributeError`).
- A model's text with a lone surrogate (JSON allows `\\ud800`) made its decision
  unrecordable: a refusal did not end the run (the model was asked again), and a valid
  call was refused because of the text before it.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import ModelConfig, ModelResponse, SideEffect, ToolUseBlock, Usage
from agentrt._accounting import project
from agentrt.model_agent import ModelAgent
from agentrt.render import RenderOptions, decide, messages
from conftest import FakeClock, Ids, RecordingTool
from support.models import PRICE, REQUEST, FakeModel, calls, drive, model_agent, reply


class _Custom(BaseException):
    """A library's own BaseException subclass."""


@pytest.mark.parametrize(
    ("raised", "text"),
    [
        (SystemExit(3), "SystemExit: 3"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
        (GeneratorExit(), "GeneratorExit"),
        (_Custom("deep in the client"), "_Custom: deep in the client"),
    ],
    ids=["system-exit", "keyboard-interrupt", "generator-exit", "custom"],
)
def test_a_model_raising_a_base_exception_fails_the_attempt_and_ends_the_run_model_unavailable(
    any_store: agentrt.Store, raised: BaseException, text: str
) -> None:
    store = any_store
    run = drive(store, FakeModel(raised))
    assert (run.status, run.reason) == ("FAILED", "model_unavailable"), run
    assert run.reason_detail == text
    # "Anything else": recorded `error`, charged nothing, not retried.
    assert calls(store, run.id) == [(1, "error", 0, 0, 0)]
    assert store.list_model_calls(run.id)[0].error == text
    (stored,) = store.list_runs()
    assert stored.status == "FAILED"


def test_a_model_that_swallows_its_cancellation_at_the_timeout_is_let_go_and_ambiguous(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    cancelled = []

    async def stubborn() -> ModelResponse:
        try:
            await asyncio.sleep(3)
        except asyncio.CancelledError:
            cancelled.append(True)
            await asyncio.sleep(3)  # a retry loop with a bare except
        return reply(usage=Usage(1, 1, 0))

    model = FakeModel(stubborn)
    config = ModelConfig(model=model, prices=PRICE, call_timeout=timedelta(milliseconds=20))
    began = time.monotonic()
    run = drive(store, model, config=config)
    assert time.monotonic() - began < 2.5  # the grace, not the model's whim
    assert cancelled == [True]
    assert (run.status, run.reason) == ("FAILED", "model_unavailable"), run
    projected = project(REQUEST, 100, PRICE)
    # Ambiguous, charged the estimate with the full output cap; the late reply is discarded.
    assert calls(store, run.id) == [
        (1, "ambiguous", projected.input_tokens, 100, projected.cost_micros)
    ]
    assert "did not stop" in store.list_model_calls(run.id)[0].error


def _malformed(field: str, value: Any) -> ModelResponse:
    response = reply(tool="finish")
    object.__setattr__(response, field, value)  # what a careless adapter builds
    return response


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("text", None, "its text is a NoneType, not a str"),
        ("stop_reason", 7, "its stop_reason is a int, not a str"),
        ("tool_uses", "finish", "its tool_uses is a str, not a list or tuple of ToolUseBlock"),
        ("tool_uses", ({"name": "finish"},), "its tool_uses[0] is a dict, not a ToolUseBlock"),
        (
            "tool_uses",
            (ToolUseBlock("t", None, {}),),  # type: ignore[arg-type]
            "its tool_uses[0].name is a NoneType, not a str",
        ),
    ],
    ids=["text", "stop-reason", "uses-str", "use-dict", "use-name"],
)
def test_a_reply_whose_fields_are_not_of_their_types_is_an_unusable_reply(
    any_store: agentrt.Store, field: str, value: Any, why: str
) -> None:
    store = any_store
    agent = ModelAgent(RenderOptions(max_output_tokens=100))
    model = FakeModel(_malformed(field, value))
    finish = RecordingTool("finish", SideEffect.READ_ONLY, terminal=True)
    run = drive(store, model, agent=agent, tools=[finish])
    assert (run.status, run.reason) == ("FAILED", "model_unavailable"), run.reason_detail
    assert "AttributeError" not in run.reason_detail
    (attempt,) = store.list_model_calls(run.id)
    assert attempt.status == "error"
    assert attempt.error == f"the model's reply is not a usable ModelResponse: {why}"
    # The reply was served: charged the conservative estimate, like implausible usage.
    assert attempt.cost_micros == run.estimated_cost_micros > 0
    assert finish.calls == []


def test_decide_keeps_a_lone_surrogate_of_the_models_text_as_storable_text() -> None:
    refused = decide(ModelResponse("no \ud800 way", (), "refusal", Usage(1, 1, 0)))
    assert refused.message == "the model refused: no \\ud800 way"
    call = decide(
        ModelResponse("I \udfff read", (ToolUseBlock("t", "read", {}),), "tool_use", Usage())
    )
    assert call.reason == "I \\udfff read"
    refused.message.encode("utf-8")
    call.reason.encode("utf-8")


def test_decide_keeps_a_lone_surrogate_of_a_tool_name_it_will_not_run_as_storable_text() -> None:
    read = ToolUseBlock("a", "read", {})
    odd = ToolUseBlock("b", "wr\ud800ite", {})
    call = decide(ModelResponse("", (read, odd), "tool_use", Usage()))
    assert call.reason.endswith("not run: 'wr\\ud800ite']"), call.reason
    cut = decide(ModelResponse("", (odd,), "max_tokens", Usage()))
    assert cut.reason.endswith("[cut off while calling 'wr\\ud800ite']"), cut.reason
    call.reason.encode("utf-8")
    cut.reason.encode("utf-8")


def _model_run(database: str, replies: list[ModelResponse], tool: RecordingTool) -> Any:
    store = agentrt.open_store(database)
    model = FakeModel(*replies)
    finish = RecordingTool("finish", SideEffect.READ_ONLY, terminal=True)
    driver = agentrt.Driver(
        store=store,
        agent=ModelAgent(),
        policy=agentrt.default_policy(),
        tools=[tool, finish],
        model=ModelConfig(model=model, prices=agentrt.Price.free()),
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("g")
    store.close()
    return run, model


def test_a_refusal_whose_text_has_a_lone_surrogate_ends_the_run_at_once(database: str) -> None:
    read = RecordingTool("read", SideEffect.READ_ONLY)
    run, model = _model_run(
        database,
        [
            ModelResponse("I will not \ud800", (), "refusal", Usage(5, 5, 0)),
            ModelResponse("asked again", (), "refusal", Usage(5, 5, 0)),
        ],
        read,
    )
    assert (run.status, run.reason) == ("FAILED", "goal_failed"), run
    assert run.reason_detail == "the model refused: I will not \\ud800"
    assert len(model.requests) == 1


def test_a_call_whose_reason_has_a_lone_surrogate_runs(database: str) -> None:
    read = RecordingTool("read", SideEffect.READ_ONLY)
    use = ToolUseBlock("a", "read", {"x": 1})
    done = ToolUseBlock("b", "finish", {"x": 2})
    run, model = _model_run(
        database,
        [
            ModelResponse("look \ud83d first", (use,), "tool_use", Usage(5, 5, 0)),
            ModelResponse("", (done,), "tool_use", Usage(5, 5, 0)),
        ],
        read,
    )
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed"), run
    assert [c.args for c in read.calls] == [{"x": 1}]
    # The next request shows the reason as recorded, and the call's plain result.
    second = model.requests[1].to_json()["messages"]
    assert second[1]["content"][0] == {"type": "text", "text": "look \\ud83d first"}
    assert second[2]["content"][0]["is_error"] is False
    assert messages  # the module renders what the run recorded


def test_a_caller_cancel_cancels_the_model_request_in_flight(any_store: agentrt.Store) -> None:
    """The caller's cancel reaches the request: a model that honours its cancellation
    stops, rather than being left running after the run was cancelled."""
    store = any_store
    started = asyncio.Event()
    ended: list[str] = []

    async def honours_cancel() -> ModelResponse:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise
        ended.append("finished")
        return reply(usage=Usage(1, 1, 0))

    model = FakeModel(honours_cancel)
    driver = agentrt.Driver(
        store=store,
        agent=model_agent(),
        policy=agentrt.default_policy(),
        model=ModelConfig(model=model, prices=PRICE),
        new_id=Ids(),
    )

    async def main() -> list[str]:
        task = asyncio.create_task(driver.start("g"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return list(ended)  # before the loop ends, which cancels whatever is left

    assert asyncio.run(main()) == ["cancelled"]
    (run,) = store.list_runs()
    assert store.list_model_calls(run.id)[0].error == "cancelled by the caller; outcome unknown"


def test_a_caller_cancel_is_not_held_by_a_model_that_swallows_its_cancellation(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    started = asyncio.Event()

    async def stubborn() -> ModelResponse:
        started.set()
        try:
            await asyncio.sleep(3)
        except asyncio.CancelledError:
            await asyncio.sleep(3)
        return reply(usage=Usage(1, 1, 0))

    model = FakeModel(stubborn)
    driver = agentrt.Driver(
        store=store,
        agent=model_agent(),
        policy=agentrt.default_policy(),
        model=ModelConfig(model=model, prices=PRICE),
        new_id=Ids(),
    )

    async def main() -> float:
        task = asyncio.create_task(driver.start("g"))
        await started.wait()
        began = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - began

    assert asyncio.run(main()) < 2.5
    (run,) = store.list_runs()
    projected = project(REQUEST, 100, PRICE)
    assert calls(store, run.id) == [
        (1, "ambiguous", projected.input_tokens, 100, projected.cost_micros)
    ]
    assert store.list_model_calls(run.id)[0].error == "cancelled by the caller; outcome unknown"
