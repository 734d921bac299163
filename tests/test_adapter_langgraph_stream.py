"""The gated ToolNode under LangGraph's streaming entry points: `stream` and `astream`.

A streamed graph runs the same node as `invoke`: an allowed call runs once and
is recorded; a call needing a person shows up in the stream as LangGraph's own
`__interrupt__`; resuming with `Command(resume=...)` through the stream runs the
approved call once. Both stream modes a chat application uses ("updates",
"values"), on the blocking and async paths. Real graphs, LangChain's fake chat
model, tools appending a line to a file when they really run, a real store.

Every test that touches a store takes `database` and runs on SQLite and on PostgreSQL
(issue 21 item 5).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("langgraph.prebuilt", reason="needs agentrt[langgraph]")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command

from agentrt.adapters.langgraph import approve
from support.adapters.langgraph_graphs import (
    CONFIG,
    RUN,
    TURN,
    build,
    build_ending,
    build_prebuilt,
    call,
    lines,
    push_script,
)

CASES = [(mode, path) for mode in ("updates", "values") for path in ("async", "blocking")]
GO = {"messages": [HumanMessage("go", id=TURN)]}


def stream(graph: Any, what: Any, mode: str, path: str) -> list[Any]:
    if path == "blocking":
        return list(graph.stream(what, CONFIG, stream_mode=mode))

    async def collect() -> list[Any]:
        return [chunk async for chunk in graph.astream(what, CONFIG, stream_mode=mode)]

    return asyncio.run(collect())


def interrupts(chunks: list[Any]) -> list[Any]:
    """LangGraph's `__interrupt__` entries in the chunks, whichever the stream mode."""
    return [i for c in chunks if isinstance(c, dict) for i in c.get("__interrupt__", ())]


def streamed_tool_messages(chunks: list[Any], mode: str) -> list[tuple[str, str, Any]]:
    if mode == "updates":
        found = [m for c in chunks for m in (c.get("tools") or {}).get("messages", [])]
    else:
        found = chunks[-1]["messages"]
    return [(m.tool_call_id, m.status, m.content) for m in found if isinstance(m, ToolMessage)]


@pytest.mark.parametrize(("mode", "path"), CASES)
def test_a_streamed_allowed_call_runs_once_and_is_recorded(
    database: str, tmp_path: Path, mode: str, path: str
) -> None:
    graph, store, effects = build(
        tmp_path,
        [AIMessage("", tool_calls=[call("lookup", "c1", q="x")]), AIMessage("done")],
        database=database,
    )
    chunks = stream(graph, GO, mode, path)
    assert streamed_tool_messages(chunks, mode) == [("c1", "success", "found x")]
    assert interrupts(chunks) == []
    assert lines(effects) == ["lookup x"]
    (step,) = store.list_steps(RUN)
    assert (step.status, step.decision and step.decision.reason) == (
        "done",
        "langgraph tool call c1",
    )
    assert [e.type for e in store.list_events(RUN)].count("step.tool_started") == 1


@pytest.mark.parametrize(("mode", "path"), CASES)
def test_a_streamed_approval_is_langgraphs_interrupt_and_a_streamed_resume_runs_it_once(
    database: str, tmp_path: Path, mode: str, path: str
) -> None:
    graph, store, effects = build(tmp_path, push_script(), database=database)
    (pending,) = interrupts(stream(graph, GO, mode, path))
    (approval,) = store.pending_approvals(RUN)
    assert pending.value["type"] == "agentrt.approval"
    assert (pending.value["approval_id"], pending.value["hash"]) == (approval.id, approval.hash)
    assert lines(effects) == []
    chunks = stream(graph, Command(resume=approve(pending, by="alice")), mode, path)
    assert interrupts(chunks) == []
    assert streamed_tool_messages(chunks, mode) == [("c1", "success", "pushed feature/login")]
    assert lines(effects) == ["push feature/login"]
    # Streaming the resume again after the graph finished runs nothing a second time.
    stream(graph, None, mode, path)
    assert lines(effects) == ["push feature/login"]
    assert [e.type for e in store.list_events(RUN)].count("step.tool_started") == 1


@pytest.mark.parametrize("path", ["async", "blocking"])
def test_a_streamed_turn_holds_the_call_beside_the_push_and_its_end_completes_the_run(
    database: str, tmp_path: Path, path: str
) -> None:
    script = [
        AIMessage(
            "",
            tool_calls=[
                call("push_branch", "c1", branch="feature/login"),
                call("write_note", "c2", text="pushed"),
            ],
        ),
        AIMessage("pushed and noted"),
    ]
    graph, store, effects, _ = build_ending(tmp_path, script, database=database)
    (pending,) = interrupts(stream(graph, GO, "updates", path))
    assert pending.value["held"] == ["c2"]
    assert lines(effects) == [] and len(store.list_steps(RUN)) == 1
    chunks = stream(graph, Command(resume=approve(pending, by="alice")), "updates", path)
    assert [next(iter(c)) for c in chunks] == ["tools", "agent", "agentrt_end"]
    assert lines(effects) == ["push feature/login", "note pushed"]
    run = store.get_run(RUN)
    assert run.status == "COMPLETED"
    assert [s.decision and str(s.decision.kind) for s in store.list_steps(RUN)] == [
        "tool_call",
        "tool_call",
        "complete",
    ]


@pytest.mark.parametrize(("mode", "path"), CASES)
def test_the_prebuilt_agent_streamed_holds_the_sent_note_behind_the_push_with_one_interrupt(
    database: str, tmp_path: Path, mode: str, path: str
) -> None:
    """`create_react_agent` sends each call as a task of its own: the held task adds no
    interrupt of its own to the stream, and one streamed resume runs both calls once."""
    script = [
        AIMessage(
            "",
            tool_calls=[
                call("push_branch", "c1", branch="feature/login"),
                call("write_note", "c2", text="pushed"),
            ],
        ),
        AIMessage("pushed and noted"),
    ]
    graph, store, effects = build_prebuilt(tmp_path, script, database=database)
    (pending,) = interrupts(stream(graph, GO, mode, path))
    assert (pending.value["tool_call_id"], pending.value["held"]) == ("c1", ["c2"])
    assert lines(effects) == [] and len(store.list_steps(RUN)) == 1
    chunks = stream(graph, Command(resume=approve(pending, by="alice")), mode, path)
    assert interrupts(chunks) == []
    assert lines(effects) == ["push feature/login", "note pushed"]
    assert [s.decision and s.decision.reason for s in store.list_steps(RUN)] == [
        "langgraph tool call c1",
        "langgraph tool call c2",
    ]
