"""A plain-function tool that outlives its timeout never holds the process open.

Its thread cannot be killed, so it keeps running (and may still act), but it is
a daemon thread outside `concurrent.futures`' registry of workers, which the
interpreter joins at exit; its late result is discarded.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

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
    tmp_path: Path,
) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "runs.db")],
        capture_output=True,
        text=True,
        timeout=45,
    )
    elapsed = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["COMPLETED", "failed", "timeout"]
    # The tool sleeps 30 s; the run takes its 0.5 s timeout plus start-up.
    assert elapsed < 15, f"the process took {elapsed:.1f}s to exit"


@pytest.mark.timeout(30)
def test_a_timed_out_tool_keeps_running_on_a_daemon_thread_and_its_late_result_is_discarded(
    store: agentrt.Store,
) -> None:
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
    thread.join(10)
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
