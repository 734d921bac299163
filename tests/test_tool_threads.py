"""A plain-function tool that outlives its timeout never holds the process open.

Its thread cannot be killed, so it keeps running (and may still act), but it is
a daemon thread outside `concurrent.futures`' registry of workers, which the
interpreter joins at exit; its late result is discarded.
"""

from __future__ import annotations

import linecache
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect, ToolCall, ToolResult
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool

CHILD = textwrap.dedent(
    """
    import sys, time
    from datetime import timedelta
    import agentrt
    from agentrt import Decision, SideEffect, ToolResult, ToolSpec
    from agentrt.scripted import ScriptedAgent

    class Sleeper:
        spec = ToolSpec(
            name="sleeper",
            description="sleeps far past its timeout",
            input_schema={"type": "object"},
            side_effect=SideEffect.LOCAL_MUTATION,
            timeout=timedelta(seconds=0.5),
        )

        def call(self, call):
            time.sleep(30)
            return ToolResult({"late": True})

    store = agentrt.open_store(sys.argv[1])
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("sleeper", {}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[Sleeper()],
    )
    run = driver.start_sync("goal")
    step = store.list_steps(run.id)[0]
    print(run.status, step.status, step.observation.content["failure"], flush=True)
    """
)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_process_whose_plain_tool_timed_out_exits_promptly_after_its_run(
    tmp_path: Path, database: str
) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script), database],
        capture_output=True,
        text=True,
        timeout=45,
    )
    elapsed = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["COMPLETED", "failed", "timeout"]
    # The tool sleeps 30 s; the run takes its 0.5 s timeout plus start-up.
    assert elapsed < 15, f"the process took {elapsed:.1f}s to exit"


def _back_waiting(thread: threading.Thread, timeout: float) -> bool:
    """Whether `thread`, a kept tool thread, is back at its wait for the next call (its
    innermost Python frame the worker's loop, at `self.jobs.get`) within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident or -1)
        if frame is not None and frame.f_code.co_name == "_loop":
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
            if "self.jobs.get(" in line:
                return True
        time.sleep(0.01)
    return False


@pytest.mark.timeout(30)
def test_a_timed_out_tool_keeps_running_on_a_daemon_thread_and_its_late_result_is_discarded(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    release = threading.Event()
    finished = threading.Event()
    seen: list[threading.Thread] = []

    def slow(_: ToolCall) -> ToolResult:
        seen.append(threading.current_thread())
        release.wait(20)
        finished.set()
        return ToolResult({"late": True})

    tool = RecordingTool(
        "slow",
        SideEffect.LOCAL_MUTATION,
        result=slow,
        timeout=__import__("datetime").timedelta(milliseconds=100),
    )
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("slow", {}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("goal")
    assert run.status == "COMPLETED"
    (thread,) = seen
    assert thread.daemon and thread.is_alive()  # still running: a thread cannot be killed
    release.set()
    assert finished.wait(10)
    # Kept for a later call (decision 0092), the thread does not end: wait until it is
    # back waiting for one, its late outcome given (to nobody) on the way.
    assert _back_waiting(thread, timeout=10)
    step = store.list_steps(run.id)[0]
    assert step.observation is not None
    assert step.observation.content == {
        "tool": "slow",
        "error": "timed out after 0.1s",
        "failure": "timeout",
    }
    types = [e.type for e in store.list_events(run_id=run.id)]
    assert types.count("step.tool_finished") == 1  # the late result is never recorded


@pytest.mark.timeout(30)
def test_timed_out_tools_never_starve_the_next_call_of_a_thread(store: agentrt.Store) -> None:
    """More hung calls than any fixed pool would hold: each later call still runs at once."""
    release = threading.Event()

    def hang(_: ToolCall) -> ToolResult:
        release.wait(20)
        return ToolResult({})

    from datetime import timedelta

    hung = RecordingTool(
        "hang", SideEffect.READ_ONLY, result=hang, timeout=timedelta(milliseconds=20)
    )
    quick = RecordingTool("quick", SideEffect.READ_ONLY, timeout=timedelta(seconds=5))
    decisions = [Decision.tool_call("hang", {"x": i}) for i in range(40)]
    decisions += [Decision.tool_call("quick", {}), Decision.complete()]
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(decisions),
        policy=agentrt.default_policy(),
        tools=[hung, quick],
        now=FakeClock(),
        new_id=Ids(),
    )
    try:
        run = driver.start_sync(
            "goal", limits=agentrt.Limits(max_steps=100, max_consecutive_tool_failures=100)
        )
    finally:
        release.set()
    assert run.status == "COMPLETED"
    last_tool_step = store.list_steps(run.id)[-2]
    assert last_tool_step.status == "done"


def tool_thread_calls(*methods: Any) -> list[Any]:
    """Run each method in turn as the executor runs a plain-function tool; their results."""
    from agentrt._execute import _on_own_thread

    call = ToolCall(run_id="r", step_id="s", args={}, lease_epoch=1)
    return [_on_own_thread(method, call).result(10) for method in methods]


def test_a_tool_thread_whose_call_returned_runs_the_next_call() -> None:
    """Decision 0092: no thread started per call once one is idle."""
    first, second = tool_thread_calls(
        lambda _: threading.current_thread(), lambda _: threading.current_thread()
    )
    assert first is second and first.daemon and first.name == "agentrt-tool"


def test_a_tool_thread_still_in_its_call_is_never_given_another() -> None:
    release = threading.Event()
    from agentrt._execute import _on_own_thread

    call = ToolCall(run_id="r", step_id="s", args={}, lease_epoch=1)
    held: list[threading.Thread] = []
    started = threading.Event()

    def hang(_: ToolCall) -> None:
        held.append(threading.current_thread())
        started.set()
        release.wait(20)

    pending = _on_own_thread(hang, call)
    try:
        assert started.wait(10)  # the held call is on its thread before the others come
        others = tool_thread_calls(*[lambda _: threading.current_thread()] * 3)
        assert held and all(other is not held[0] for other in others)
        assert not pending.done()
    finally:
        release.set()
    pending.result(10)


def test_each_tool_call_runs_in_a_new_empty_context() -> None:
    """As on a thread of its own: a context variable a call set is not seen by the next."""
    import contextvars

    mark: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")

    def set_it(_: ToolCall) -> str:
        mark.set("set by an earlier call")
        return mark.get()

    assert tool_thread_calls(set_it, lambda _: mark.get()) == ["set by an earlier call", "unset"]


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_a_forked_child_runs_tools_on_threads_of_its_own() -> None:
    """The parent's idle threads do not exist in a child: it must not hand them calls."""
    import os

    tool_thread_calls(lambda _: None)  # the parent now has an idle tool thread
    pid = os.fork()
    if pid == 0:  # the child: a call must still run (on a new thread), not wait forever
        code = 1
        try:
            (name,) = tool_thread_calls(lambda _: threading.current_thread().name)
            code = 0 if name == "agentrt-tool" else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
