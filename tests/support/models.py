"""A scripted model behind the accounting caller, and a run that asks it.

`FakeModel` plays a list of behaviours (a `ModelResponse`, an exception to
raise, or a callable, sync or async, giving either); `reply` builds a response
as a provider would return it; `model_agent` is an agent that asks the model
and completes; `drive` runs one such agent through a Driver whose model config
is priced at `PRICE`; `calls` lists the recorded attempts of a run.
`Replies` is a model that fails transiently a given number of times, then
answers `TINY_REQUEST` (or any request) with "ok".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import agentrt
from agentrt import Decision, Limits, StepInput
from agentrt._errors import TransientModelError
from agentrt._model import (
    Message,
    ModelConfig,
    ModelRequest,
    ModelResponse,
    Price,
    TextBlock,
    ToolUseBlock,
    Usage,
)
from conftest import FakeClock, Ids

REQUEST = ModelRequest(
    system="be brief",
    messages=[Message("user", [TextBlock("hello")])],
    max_output_tokens=100,
)
PRICE = Price(input_micros=3_000_000, output_micros=15_000_000)  # $3 / $15 per Mtok


def reply(text: str = "done", usage: Usage | None = None, tool: str = "") -> ModelResponse:
    uses = [ToolUseBlock("toolu_1", tool, {})] if tool else []
    return ModelResponse(
        text=text,
        tool_uses=uses,
        stop_reason="tool_use" if tool else "end_turn",
        usage=usage or Usage(10, 5, 0),
        raw=b'{"raw": true}',
    )


class FakeModel:
    """Plays a list of behaviours: a ModelResponse, an exception, or a callable."""

    def __init__(self, *behaviours: Any, name: str = "fake:model") -> None:
        self.name = name
        self.behaviours = list(behaviours)
        self.requests: list[ModelRequest] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        behaviour = self.behaviours.pop(0)
        if callable(behaviour) and not isinstance(behaviour, type):
            behaviour = behaviour()
            if asyncio.iscoroutine(behaviour):
                behaviour = await behaviour
        if isinstance(behaviour, BaseException):
            raise behaviour
        return behaviour  # type: ignore[no-any-return]


def model_agent(request: ModelRequest = REQUEST, calls: int = 1) -> Callable[..., Any]:
    """An agent that asks the model `calls` times per step, then completes."""

    async def decide(input: StepInput) -> Decision:
        responses = [await input.model.generate(request) for _ in range(calls)]
        return Decision.complete({"text": responses[-1].text})

    return decide


def drive(
    store: agentrt.Store,
    model: Any,
    agent: Any = None,
    limits: Limits | None = None,
    config: ModelConfig | None = None,
    tools: list[Any] | None = None,
) -> agentrt.Run:
    driver = agentrt.Driver(
        store=store,
        agent=agent or model_agent(),
        policy=agentrt.default_policy(),
        tools=tools or [],
        model=config or ModelConfig(model=model, prices=PRICE),
        now=FakeClock(),
        new_id=Ids(),
    )
    return driver.start_sync("g", limits=limits)


def calls(store: agentrt.Store, run_id: str) -> list[tuple[Any, ...]]:
    return [
        (c.attempt, c.status, c.input_tokens, c.output_tokens, c.cost_micros)
        for c in store.list_model_calls(run_id)
    ]


TINY_REQUEST = ModelRequest(
    system="", messages=[Message("user", [TextBlock("hi")])], max_output_tokens=10
)


class Replies:
    """A model that fails transiently `failures` times, then answers."""

    def __init__(self, name: str = "local:tiny", failures: int = 0) -> None:
        self.name = name
        self.failures = failures
        self.requests = 0

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests += 1
        if self.requests <= self.failures:
            raise TransientModelError("busy")
        return ModelResponse("ok", (), "end_turn", Usage(1_000_000, 10, 0))


@contextlib.contextmanager
def recorded_sleeps() -> Iterator[list[float]]:
    """Replace the caller's sleep with one that records the waits instead of waiting."""
    import agentrt._accounting as accounting

    sleeps: list[float] = []
    original = accounting.AccountingCaller.__init__

    def recording_init(self: Any, *args: Any, **kwargs: Any) -> None:
        async def sleep(seconds: float) -> None:
            sleeps.append(seconds)

        original(self, *args, sleep=sleep, **kwargs)

    accounting.AccountingCaller.__init__ = recording_init  # type: ignore[method-assign]
    try:
        yield sleeps
    finally:
        accounting.AccountingCaller.__init__ = original  # type: ignore[method-assign]
