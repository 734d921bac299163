"""Pydantic AI streaming: the agentrt run ends when the output is consumed (issue 18, item 3).

Every streaming entry point (`run_stream`, `run_stream_sync`, `iter`,
`run_stream_events`), each used as Pydantic AI documents it, with its context
manager and without one: right after the output has been read, and before any
context manager is left, the agentrt run is COMPLETED (or waits for a person,
lease let go) with its events written. The result objects stay referenced
while the run is checked, so nothing here depends on garbage collection.
The agent is a real Pydantic AI agent on its `FunctionModel`
(tests/support/adapters/pydantic_ai_child.py).

Both tests run on SQLite and on PostgreSQL (`database`; issue 21 item 5).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")

from pydantic_ai import AgentRunResultEvent, DeferredToolRequests

import agentrt
from agentrt.adapters.pydantic_ai import AgentrtGate, approved
from support.adapters import pydantic_ai_child as child

RUN = "0" * 31 + "1"

COMPLETED_TAIL = ["step.started", "step.decided", "run.finished"]


def gate_for(store: agentrt.Store) -> AgentrtGate:
    return AgentrtGate(store=store, policy=agentrt.default_policy(), classifications=child.CLASSES)


def effects(workdir: Path) -> list[str]:
    path = workdir / "effects.log"
    return path.read_text().splitlines() if path.exists() else []


Check = Callable[[Any], None]

STYLES = [
    "run_stream_sync with",
    "run_stream_sync without with",
    "run_stream_sync without with, stream_output",
    "run_stream async with",
    "run_stream entered by hand",
    "iter async with",
    "iter driven by next()",
    "run_stream_events async with",
]


def consume(agent: Any, style: str, check: Check, prompt: str | None, **kw: Any) -> list[Any]:
    """Read the run's output in `style`; call `check(output)` at once, inside any context.

    Returns the message history, for a continuation.
    """
    if style == "run_stream_sync with":
        with agent.run_stream_sync(prompt, **kw) as res:
            check(res.get_output())
            return list(res.all_messages())
    if style.startswith("run_stream_sync without with"):
        res = agent.run_stream_sync(prompt, **kw)
        if style.endswith("stream_output"):
            partial = list(res.stream_output())
            assert partial, "the stream carried the output"
        check(res.get_output())
        history = list(res.all_messages())
        res.__exit__(None, None, None)  # what garbage collection would do, later
        return history

    async def drive() -> list[Any]:
        if style == "run_stream async with":
            async with agent.run_stream(prompt, **kw) as res:
                check(await res.get_output())
                return list(res.all_messages())
        if style == "run_stream entered by hand":
            manager = agent.run_stream(prompt, **kw)
            res = await manager.__aenter__()
            check(await res.get_output())
            history = list(res.all_messages())
            await manager.__aexit__(None, None, None)
            return history
        if style == "iter async with":
            async with agent.iter(prompt, **kw) as run:
                async for _node in run:
                    pass
                assert run.result is not None
                check(run.result.output)
                return list(run.result.all_messages())
        if style == "iter driven by next()":
            async with agent.iter(prompt, **kw) as run:
                node = run.next_node
                while not agent.is_end_node(node):
                    node = await run.next(node)
                assert run.result is not None
                check(run.result.output)
                return list(run.result.all_messages())
        assert style == "run_stream_events async with"
        async with agent.run_stream_events(prompt, **kw) as events:
            async for event in events:
                if isinstance(event, AgentRunResultEvent):
                    check(event.result.output)
                    return list(event.result.all_messages())
        raise AssertionError("the events ended without an AgentRunResultEvent")

    return asyncio.run(drive())


@pytest.mark.parametrize("style", STYLES)
def test_consuming_the_output_completes_the_agentrt_run_at_once_on_every_entry_point(
    database: str, tmp_path: Path, style: str
) -> None:
    store = agentrt.open_store(database)
    gate = gate_for(store)
    agent = child.agent(tmp_path, "allow", gate=gate)
    seen: list[tuple[str, str, Any, str, list[str]]] = []

    def check(output: Any) -> None:
        run = store.get_run(RUN)
        events = [e.type for e in store.list_events(RUN)]
        seen.append((run.status, run.reason, run.result, store.lease(RUN).owner, events[-3:]))
        assert output == "done"

    consume(agent, style, check, "tidy the repo", metadata=gate.run_metadata(RUN))
    assert seen == [("COMPLETED", "goal_completed", "done", "", COMPLETED_TAIL)]
    assert effects(tmp_path) == ["write_note hello"]
    # Leaving the stream afterwards records nothing more.
    events = [e.type for e in store.list_events(RUN)]
    assert events[-3:] == COMPLETED_TAIL
    assert events.count("run.finished") == 1
    assert store.verify_events().intact


@pytest.mark.parametrize("style", STYLES)
def test_an_output_of_deferred_requests_leaves_the_run_waiting_and_its_lease_let_go_at_once(
    database: str, tmp_path: Path, style: str
) -> None:
    store = agentrt.open_store(database)
    gate = gate_for(store)
    agent = child.agent(tmp_path, "held", gate=gate)
    meta = gate.run_metadata(RUN)
    seen: list[Any] = []

    def waiting(output: Any) -> None:
        run = store.get_run(RUN)
        seen.append((run.status, store.lease(RUN).owner, len(store.pending_approvals(RUN))))
        assert isinstance(output, DeferredToolRequests)
        seen.append(output)

    history = consume(agent, style, waiting, "publish", metadata=meta)
    assert seen[0] == ("WAITING_FOR_APPROVAL", "", 1)
    requests = seen[1]
    seen.clear()

    def completed(output: Any) -> None:
        run = store.get_run(RUN)
        events = [e.type for e in store.list_events(RUN)]
        seen.append((run.status, run.result, store.lease(RUN).owner, events[-3:], output))

    consume(
        agent,
        style,
        completed,
        None,
        message_history=history,
        deferred_tool_results=approved(requests, "call-push", by="alice"),
        metadata=meta,
    )
    assert seen == [("COMPLETED", "done", "", COMPLETED_TAIL, "done")]
    assert effects(tmp_path) == ["push_branch feature/login", "write_note pushed login"]
