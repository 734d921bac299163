"""Whatever a tool raises is its recorded outcome: the step finishes, the driver goes on.

Only a cancellation of the caller is a cancel; a tool's own `CancelledError`,
`SystemExit`, `KeyboardInterrupt`, custom `BaseException`, or an exception
whose `str()`/`repr()` raises or whose message is huge becomes `tool_error`.

Every test that takes a store takes `any_store` and runs on SQLite and on PostgreSQL
(issue 21 item 5; decision 0105).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

import agentrt
from agentrt import AbortRun, Decision, SideEffect, ToolCall, ToolResult, ToolSpec
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool, event_types


class HostileStr(Exception):
    def __str__(self) -> str:
        raise ValueError("no text for you")


class HostileStrAndRepr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str")

    def __repr__(self) -> str:
        raise RuntimeError("repr")


class StrRaisesSystemExit(Exception):
    def __str__(self) -> str:
        raise SystemExit(3)


class NotAnException(BaseException):
    pass


class Shouty(str):
    """A str subclass whose own methods all raise: only str's own code may touch it."""

    def __getitem__(self, item: Any) -> Any:
        raise RuntimeError("getitem")

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("encode")


class ReturnsShoutyStr(Exception):
    def __str__(self) -> str:
        return Shouty("loud message")


class SneakyMeta(type):
    @property
    def __name__(cls) -> str:  # type: ignore[override]
        raise RuntimeError("no name")


class NamelessError(Exception, metaclass=SneakyMeta):
    pass


class HostileDetailAbort(AbortRun):
    @property  # type: ignore[misc]
    def detail(self) -> str:
        raise RuntimeError("no detail")

    @detail.setter
    def detail(self, value: str) -> None:
        pass


def drive_once(store: agentrt.Store, tool: Any) -> agentrt.Run:
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call(tool.spec.name, {}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
    )
    return driver.start_sync("goal")


def raising(exc: BaseException) -> Callable[[ToolCall], ToolResult]:
    def call(_: ToolCall) -> ToolResult:
        raise exc

    return call


class AsyncTool:
    def __init__(self, name: str, body: Callable[[], Any]) -> None:
        self.spec = ToolSpec(
            name=name,
            description="an async tool",
            input_schema={"type": "object"},
            side_effect=SideEffect.LOCAL_MUTATION,
            timeout=__import__("datetime").timedelta(seconds=5),
        )
        self.body = body
        self.calls = 0

    async def call(self, call: ToolCall) -> ToolResult:
        self.calls += 1
        await asyncio.sleep(0)
        result: ToolResult = await self.body()
        return result


def tool_step(store: agentrt.Store, run_id: str) -> tuple[str, str, Any]:
    step = store.list_steps(run_id)[0]
    assert step.observation is not None
    return step.status, step.observation.kind, step.observation.content


HOSTILE = [
    pytest.param(
        HostileStr("x"), "HostileStr: <its message could not be read: ValueError>", id="str-raises"
    ),
    pytest.param(
        HostileStrAndRepr(),
        "HostileStrAndRepr: <its message could not be read: RuntimeError>",
        id="str-and-repr-raise",
    ),
    pytest.param(
        StrRaisesSystemExit(),
        "StrRaisesSystemExit: <its message could not be read: SystemExit>",
        id="str-raises-system-exit",
    ),
    pytest.param(ReturnsShoutyStr(), "ReturnsShoutyStr: loud message", id="str-returns-subclass"),
    pytest.param(NamelessError("m"), "NamelessError: m", id="metaclass-hides-name"),
    pytest.param(SystemExit(2), "SystemExit: 2", id="system-exit"),
    pytest.param(KeyboardInterrupt(), "KeyboardInterrupt", id="keyboard-interrupt"),
    pytest.param(NotAnException("custom"), "NotAnException: custom", id="custom-base-exception"),
    pytest.param(GeneratorExit(), "GeneratorExit", id="generator-exit"),
    pytest.param(
        RuntimeError("é" * 5_000_000),
        "RuntimeError: " + "é" * (4096 - len("RuntimeError: ")),
        id="huge-message-clipped",
    ),
    pytest.param(
        RuntimeError("lone \ud800 surrogate"),
        "RuntimeError: lone \\ud800 surrogate",
        id="lone-surrogate-escaped",
    ),
]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("exc", "error"), HOSTILE)
def test_a_plain_tool_raising_anything_ends_its_step_as_a_recorded_tool_error(
    any_store: agentrt.Store, exc: BaseException, error: str
) -> None:
    store = any_store
    tool = RecordingTool("t", SideEffect.LOCAL_MUTATION, result=raising(exc))
    run = drive_once(store, tool)
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    assert tool_step(store, run.id) == (
        "failed",
        "tool_error",
        {"tool": "t", "error": error, "failure": "error"},
    )
    finished = [e for e in store.list_events(run_id=run.id) if e.type == "step.tool_finished"]
    assert finished[0].payload["error"] == error
    assert store.lease(run.id).owner == ""


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("exc", "error"), HOSTILE)
def test_an_async_tool_raising_anything_ends_its_step_as_a_recorded_tool_error(
    any_store: agentrt.Store, exc: BaseException, error: str
) -> None:
    store = any_store

    async def body() -> ToolResult:
        raise exc

    tool = AsyncTool("t", body)
    run = drive_once(store, tool)
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    assert tool_step(store, run.id) == (
        "failed",
        "tool_error",
        {"tool": "t", "error": error, "failure": "error"},
    )


def test_a_tool_returning_a_value_whose_repr_raises_is_invalid_content(
    any_store: agentrt.Store,
) -> None:
    store = any_store

    class Unprintable:
        def __repr__(self) -> str:
            raise RuntimeError("repr")

    tool = RecordingTool("t", SideEffect.READ_ONLY, result=lambda _: Unprintable())
    run = drive_once(store, tool)
    assert run.status == "COMPLETED"
    status, kind, content = tool_step(store, run.id)
    assert (status, kind) == ("failed", "tool_error")
    assert content == {
        "tool": "t",
        "error": "tool returned Unprintable, not a ToolResult",
        "failure": "invalid_content",
        "content_text": "<Unprintable object; repr raised RuntimeError>",
    }


def test_an_abort_whose_detail_cannot_be_read_still_aborts_the_run(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    tool = RecordingTool("t", SideEffect.READ_ONLY, result=raising(HostileDetailAbort()))
    run = drive_once(store, tool)
    assert (run.status, run.reason) == ("FAILED", "tool_abort")
    assert tool_step(store, run.id)[2] == {
        "tool": "t",
        "error": "the tool aborted the run",
        "failure": "abort",
    }


# -- CancelledError: the tool's own, or the caller's ------------------------


@pytest.mark.timeout(30)
def test_an_async_tool_raising_cancelled_error_itself_is_a_tool_error_and_the_step_finishes(
    any_store: agentrt.Store,
) -> None:
    store = any_store

    async def body() -> ToolResult:
        raise asyncio.CancelledError("gave up on its own")

    tool = AsyncTool("t", body)
    run = drive_once(store, tool)  # start_sync returns: nothing cancelled the caller
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    assert tool_step(store, run.id) == (
        "failed",
        "tool_error",
        {
            "tool": "t",
            "error": "CancelledError: gave up on its own "
            "(raised by the tool itself; the run was not cancelled)",
            "failure": "error",
        },
    )
    assert "step.interrupted" not in event_types(store, run.id)
    assert store.pending_approvals(run.id) == []


@pytest.mark.timeout(30)
def test_an_async_tool_awaiting_a_task_that_was_cancelled_is_a_tool_error(
    any_store: agentrt.Store,
) -> None:
    store = any_store

    async def body() -> ToolResult:
        inner = asyncio.ensure_future(asyncio.sleep(10))
        asyncio.get_running_loop().call_soon(inner.cancel)
        await inner  # raises CancelledError: the inner task's, not ours
        return ToolResult({})

    run = drive_once(store, AsyncTool("t", body))
    assert run.status == "COMPLETED"
    assert tool_step(store, run.id)[:2] == ("failed", "tool_error")


@pytest.mark.timeout(30)
def test_a_plain_tool_raising_cancelled_error_is_a_tool_error(any_store: agentrt.Store) -> None:
    store = any_store
    tool = RecordingTool("t", SideEffect.READ_ONLY, result=raising(asyncio.CancelledError()))
    run = drive_once(store, tool)
    assert run.status == "COMPLETED"
    assert tool_step(store, run.id) == (
        "failed",
        "tool_error",
        {
            "tool": "t",
            "error": "CancelledError (raised by the tool itself; the run was not cancelled)",
            "failure": "error",
        },
    )


@pytest.mark.timeout(30)
def test_a_real_cancel_of_start_during_an_async_tool_is_still_recorded_as_cancelled(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    entered = asyncio.Event()
    unwound: list[str] = []

    async def body() -> ToolResult:
        entered.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            unwound.append("cancelled")
            raise
        return ToolResult({})

    tool = AsyncTool("t", body)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("t", {}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
    )

    async def cancel_mid_call() -> None:
        task = asyncio.create_task(driver.start("goal"))
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_mid_call())
    (run,) = store.list_runs()
    assert unwound == ["cancelled"]  # the tool was cancelled and unwound first
    status, kind, content = tool_step(store, run.id)
    assert (status, kind) == ("interrupted", "interrupted")
    assert content == {"previous_status": "executing", "failure": "cancelled"}
    assert store.lease(run.id).owner == ""


@pytest.mark.timeout(30)
def test_a_real_cancel_of_start_during_a_plain_tool_is_still_recorded_as_cancelled(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    started = threading.Event()
    release = threading.Event()

    def slow(_: ToolCall) -> ToolResult:
        started.set()
        release.wait(10)
        return ToolResult({})

    tool = RecordingTool("t", SideEffect.LOCAL_MUTATION, result=slow)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("t", {}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
    )

    async def cancel_mid_call() -> None:
        task = asyncio.create_task(driver.start("goal"))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(cancel_mid_call())
    finally:
        release.set()
    (run,) = store.list_runs()
    assert tool_step(store, run.id)[:2] == ("interrupted", "interrupted")


@pytest.mark.timeout(30)
def test_a_plain_tool_raising_stop_iteration_is_a_prompt_tool_error_not_a_timeout(
    any_store: agentrt.Store,
) -> None:
    # `next()` on an exhausted iterator: asyncio refuses a StopIteration into a
    # future, so it must never travel as the thread's exception.
    store = any_store
    tool = RecordingTool("t", SideEffect.LOCAL_MUTATION, result=raising(StopIteration("spent")))
    run = drive_once(store, tool)
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    assert tool_step(store, run.id) == (
        "failed",
        "tool_error",
        {"tool": "t", "error": "StopIteration: spent", "failure": "error"},
    )


class Stubborn:
    """An async tool whose retry loop swallows every cancellation until `stop` is set."""

    def __init__(self, timeout_s: float) -> None:
        self.spec = ToolSpec(
            name="stubborn",
            description="retries with a bare except",
            input_schema={"type": "object"},
            side_effect=SideEffect.READ_ONLY,
            timeout=__import__("datetime").timedelta(seconds=timeout_s),
        )
        self.entered = threading.Event()
        self.stop = threading.Event()
        self.cancels = 0

    async def call(self, call: ToolCall) -> ToolResult:
        self.entered.set()
        while not self.stop.is_set():
            try:
                await asyncio.sleep(0.02)
            except BaseException:  # the bare `except:` of a careless retry loop
                self.cancels += 1
        return ToolResult({"late": True})


def stubborn_driver(store: agentrt.Store, tool: Stubborn) -> agentrt.Driver:
    return agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("stubborn", {}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[tool],
        new_id=Ids(),
    )


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_an_async_tool_that_swallows_its_cancellation_still_times_out_and_the_run_goes_on(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    tool = Stubborn(timeout_s=0.2)
    driver = stubborn_driver(store, tool)
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.setdefault("run", driver.start_sync("goal")))
    thread.start()
    try:
        # The run must end while the tool still runs: it is never let go by the test here.
        for _ in range(200):
            runs = store.list_runs()
            if runs and runs[0].status != "RUNNING":
                break
            threading.Event().wait(0.05)
        (run,) = store.list_runs()
        ended_while_the_tool_ran = not tool.stop.is_set()
    finally:
        tool.stop.set()  # lets the stray coroutine end, so the loop can close
        thread.join(30)
    assert ended_while_the_tool_ran and tool.cancels >= 1
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    assert tool_step(store, run.id) == (
        "failed",
        "tool_error",
        {"tool": "stubborn", "error": "timed out after 0.2s", "failure": "timeout"},
    )


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_caller_cancel_during_an_async_tool_that_swallows_it_returns_and_keeps_the_lease(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    tool = Stubborn(timeout_s=30)
    driver = stubborn_driver(store, tool)

    async def cancel_mid_call() -> tuple[str, str]:
        task = asyncio.create_task(driver.start("goal"))
        while not tool.entered.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        try:
            # Before: the cancel waited for the tool, which never ends by itself.
            done, _ = await asyncio.wait({task}, timeout=10)
            assert task in done and task.cancelled()
            (run,) = store.list_runs()
            held = store.lease(run.id).owner  # the tool still runs: the lease stays ours
        finally:
            tool.stop.set()
        for _ in range(200):
            if store.lease(run.id).owner == "":
                break
            await asyncio.sleep(0.05)
        return held, store.lease(run.id).owner

    held, after = asyncio.run(cancel_mid_call())
    assert held == driver.lease_owner and after == ""
    (run,) = store.list_runs()
    status, kind, content = tool_step(store, run.id)
    assert (status, kind) == ("interrupted", "interrupted")
    assert content == {"previous_status": "executing", "failure": "cancelled"}


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_start_sync_returns_promptly_even_while_an_async_tool_swallows_its_cancellation(
    any_store: agentrt.Store,
) -> None:
    # asyncio.run would wait at shutdown, without bound, for the stray coroutine.
    store = any_store
    tool = Stubborn(timeout_s=0.2)
    driver = stubborn_driver(store, tool)
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.setdefault("run", driver.start_sync("goal")))
    thread.start()
    try:
        thread.join(15)
        returned_while_the_tool_ran = not thread.is_alive() and not tool.stop.is_set()
    finally:
        tool.stop.set()
        thread.join(30)
    assert returned_while_the_tool_ran
    run = box["run"]
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    assert tool.cancels >= 2  # the tool's timeout, then the loop's closing
