"""One tool call under its timeout (`agentrt._execute.invoke`): a plain-function tool's thread.

The plain-function tool's outcome is awaited on one future of the loop, which its
thread answers (decision 0124). These pin what that way must keep from the task's way
it replaced: a call its thread has not taken yet is never run once the caller is
cancelled or the timeout passes; an awaitable the function returns is awaited within
the time left; a loop closed while the thread runs is no error of the thread's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from agentrt import SideEffect, ToolCall, ToolResult, ToolSpec
from agentrt import _execute as execute

CALL = ToolCall(run_id="r" * 32, step_id="s" * 32, args={}, lease_epoch=1)


class Plain:
    """A plain-function tool whose body the test gives."""

    def __init__(self, body: Callable[[], Any], timeout: float = 5.0) -> None:
        self.spec = ToolSpec(
            name="plain",
            description="a plain function",
            input_schema={"type": "object"},
            side_effect=SideEffect.LOCAL_MUTATION,
            timeout=timedelta(seconds=timeout),
        )
        self.body = body

    def call(self, call: ToolCall) -> Any:
        return self.body()


class HeldThreads:
    """Tool threads that take no call until the test lets them (`take`)."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = []

    def run(self, call: Callable[[], Any], future: concurrent.futures.Future[Any]) -> None:
        self.jobs.append((call, future))

    def take(self) -> None:
        """What a tool thread does with each job: run it unless its future was cancelled."""
        for call, future in self.jobs:
            if future.set_running_or_notify_cancel():
                future.set_result(call())


def ran_once(ran: list[str]) -> ToolResult:
    ran.append("ran")
    return ToolResult({"ok": True})


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> HeldThreads:
    threads = HeldThreads()
    monkeypatch.setattr(execute, "_THREADS", threads)
    return threads


def test_a_call_not_yet_taken_by_its_thread_never_runs_once_the_caller_is_cancelled(
    held: HeldThreads,
) -> None:
    ran: list[str] = []
    tool = Plain(lambda: ran_once(ran))
    threads: list[concurrent.futures.Future[Any]] = []

    async def main() -> None:
        task = asyncio.ensure_future(execute.invoke(tool, tool.spec, CALL, threads))
        for _ in range(10):  # until the call is handed to its (held) thread
            if held.jobs:
                break
            await asyncio.sleep(0)
        assert len(held.jobs) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    held.take()
    assert ran == []
    (future,) = threads
    assert future.cancelled()  # done: the caller keeps no lease for it


def test_a_call_not_yet_taken_by_its_thread_never_runs_once_its_timeout_passed(
    held: HeldThreads,
) -> None:
    ran: list[str] = []
    tool = Plain(lambda: ran_once(ran), timeout=0.01)
    threads: list[concurrent.futures.Future[Any]] = []

    outcome = asyncio.run(execute.invoke(tool, tool.spec, CALL, threads))

    held.take()
    assert ran == []
    assert outcome.observation.kind == "tool_error"
    assert outcome.observation.content["failure"] == "timeout"
    assert threads[0].cancelled()


def test_an_awaitable_a_plain_tool_returns_is_awaited_and_its_result_recorded() -> None:
    async def later() -> ToolResult:
        await asyncio.sleep(0)
        return ToolResult({"page": 1})

    tool = Plain(later)

    outcome = asyncio.run(execute.invoke(tool, tool.spec, CALL, []))

    assert outcome.observation.kind == "tool_result"
    assert outcome.observation.content == {"page": 1}


def test_an_awaitable_a_plain_tool_returns_gets_only_the_time_left() -> None:
    started = threading.Event()

    async def forever() -> ToolResult:
        await asyncio.sleep(60)
        return ToolResult({"late": True})

    def body() -> Any:
        started.set()
        return forever()

    tool = Plain(body, timeout=0.2)

    outcome = asyncio.run(execute.invoke(tool, tool.spec, CALL, []))

    assert started.is_set()
    assert outcome.observation.content["failure"] == "timeout"
    assert outcome.observation.content["error"] == "timed out after 0.2s"


def test_an_awaitable_that_raises_is_the_tools_error() -> None:
    async def fails() -> ToolResult:
        raise ValueError("no such page")

    tool = Plain(fails)

    outcome = asyncio.run(execute.invoke(tool, tool.spec, CALL, []))

    assert outcome.observation.kind == "tool_error"
    assert outcome.observation.content["failure"] == "error"
    assert "no such page" in outcome.observation.content["error"]


def test_a_loop_closed_while_the_thread_runs_leaves_no_error_on_the_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inside, finish = threading.Event(), threading.Event()

    def body() -> ToolResult:
        inside.set()
        finish.wait(10)
        return ToolResult({"late": True})

    tool = Plain(body)
    threads: list[concurrent.futures.Future[Any]] = []

    tasks: list[asyncio.Future[Any]] = []

    async def main() -> None:
        tasks.append(asyncio.ensure_future(execute.invoke(tool, tool.spec, CALL, threads)))
        while not inside.is_set():
            await asyncio.sleep(0.01)
        # main returns: asyncio.run cancels the call's task and closes the loop

    with caplog.at_level(logging.ERROR, logger="concurrent.futures"):
        asyncio.run(main())
        (future,) = threads
        answered = threading.Event()  # after the runtime's own callback, in order
        future.add_done_callback(lambda _: answered.set())
        finish.set()
        assert answered.wait(10)
        assert future.result() == ToolResult({"late": True})
    assert caplog.records == []  # the thread's answer to a closed loop is dropped quietly


def test_a_plain_tool_whose_thread_cannot_start_is_a_tool_error_not_a_raise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`invoke` raises only for its caller's cancellation: no thread to run the call on (the
    process is out of them) is the call's error, recorded as such; it never ran."""

    class NoThreads:
        def run(self, call: Callable[[], Any], future: concurrent.futures.Future[Any]) -> None:
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(execute, "_THREADS", NoThreads())
    ran: list[str] = []
    tool = Plain(lambda: ran_once(ran))
    threads: list[concurrent.futures.Future[Any]] = []

    outcome = asyncio.run(execute.invoke(tool, tool.spec, CALL, threads))

    assert ran == []
    assert threads == []  # nothing runs: the caller keeps no lease for it
    assert outcome.observation.content == {
        "tool": "plain",
        "error": "RuntimeError: can't start new thread",
        "failure": "error",
    }


class _NoClass:
    """A value whose `__class__` raises: `isinstance` on it raises too."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        raise ValueError("no class to read")


class _AsyncReturns:
    def __init__(self) -> None:
        self.spec = Plain(lambda: None).spec

    async def call(self, call: ToolCall) -> Any:
        return _NoClass()


@pytest.mark.parametrize("kind", ["plain", "async"])
def test_a_returned_value_that_cannot_be_inspected_is_invalid_content_not_a_raise(
    kind: str,
) -> None:
    tool: Any = Plain(_NoClass) if kind == "plain" else _AsyncReturns()

    outcome = asyncio.run(execute.invoke(tool, tool.spec, CALL, []))

    assert outcome.observation.content == {
        "tool": "plain",
        "error": "tool returned a _NoClass that could not be inspected",
        "failure": "invalid_content",
    }


def test_a_tool_whose_call_cannot_be_read_is_a_tool_error_not_a_raise() -> None:
    class Unreadable:
        spec = Plain(lambda: None).spec

        @property
        def call(self) -> Any:
            raise ValueError("no call to read")

    tool: Any = Unreadable()

    outcome = asyncio.run(execute.invoke(tool, tool.spec, CALL, []))

    assert outcome.observation.content == {
        "tool": "plain",
        "error": "ValueError: no call to read",
        "failure": "error",
    }


@pytest.mark.parametrize("kind", ["plain", "async"])
def test_a_reconciliation_returning_a_value_that_cannot_be_inspected_is_unknown_not_a_raise(
    kind: str,
) -> None:
    """`_tool_reconcile.ask` never raises but for its caller's cancel: a returned value whose
    class cannot be read is an `unknown` answer, as a tool's is its recorded error."""
    from agentrt import _tool_reconcile

    async def look_up_async(call: ToolCall) -> Any:
        return _NoClass()

    def look_up_plain(call: ToolCall) -> Any:
        return _NoClass()

    look_up = look_up_plain if kind == "plain" else look_up_async
    spec = Plain(lambda: None).spec

    answer = asyncio.run(_tool_reconcile.ask(look_up, spec, CALL))

    assert answer.answer == "unknown"
    assert answer.error == "the reconciliation returned _NoClass, not a Reconciled"
