"""Progress: a live view of a run (`observer=TextObserver(...)`) and sinks for the exporter.

What the README shows, run as it is written there.
"""

from __future__ import annotations

import io
from pathlib import Path

import agentrt
from agentrt import Decision, Event, SideEffect
from agentrt.export import Follower, JsonLinesSink, Sink
from agentrt.scripted import ScriptedAgent
from agentrt.trace import TextObserver
from conftest import RecordingTool, event_types


def test_a_text_observer_given_to_the_driver_prints_each_event_as_it_commits(
    store: agentrt.Store,
) -> None:
    screen = io.StringIO()
    seen_by_the_tool: list[int] = []

    def look(call: agentrt.ToolCall) -> agentrt.ToolResult:
        # While the tool runs, the lines of everything committed before it are printed.
        seen_by_the_tool.append(len(screen.getvalue().splitlines()))
        return agentrt.ToolResult({"ok": True})

    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("look", {"x": 1}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("look", SideEffect.READ_ONLY, result=look)],
        observer=TextObserver(screen),
    )
    run = driver.start_sync("look once")
    lines = screen.getvalue().splitlines()
    types = event_types(store, run.id)
    assert len(lines) == len(types) == 10
    assert [line.split()[4] for line in lines] == types  # seq, time, run, step, type
    assert seen_by_the_tool == [types.index("step.tool_started") + 1]


def test_any_callable_taking_an_event_is_a_sink_and_its_flush_runs_after_each_page(
    store: agentrt.Store, db_path: Path, tmp_path: Path
) -> None:
    agentrt.Driver(
        store=store, agent=ScriptedAgent([Decision.complete()]), policy=agentrt.default_policy()
    ).start_sync("g")
    received: list[int] = []
    log: list[str] = []

    class Buffered:
        def __call__(self, event: Event) -> None:
            received.append(event.seq)
            log.append(f"event {event.seq}")

        def flush(self) -> None:
            log.append(f"flush, cursor at {follower.position}")

    sink: Sink = Buffered()
    with Follower(db_path, page_size=2, cursor=tmp_path / "cursor") as follower:
        assert follower.run(sink, follow=False) == 5
    assert received == [1, 2, 3, 4, 5]
    # flush comes after each page and before the page is acknowledged.
    assert log == [
        "event 1", "event 2", "flush, cursor at 0",
        "event 3", "event 4", "flush, cursor at 2",
        "event 5", "flush, cursor at 4",
    ]  # fmt: skip
    plain: list[Event] = []
    with Follower(db_path) as again:  # list.append is a sink too
        again.run(plain.append, follow=False)
    assert [e.seq for e in plain] == received
    with Follower(db_path) as third, JsonLinesSink(tmp_path / "events.jsonl") as lines:
        third.run(lines, follow=False)  # the README's durable file sink
    assert len((tmp_path / "events.jsonl").read_text().splitlines()) == 5
