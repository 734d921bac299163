"""Two gated tool nodes of one graph running calls of one turn at once (attack campaign).

A graph fans out to two branches (LangGraph runs them as tasks of one superstep), each
with its own model step and its own `gated_tool_node` over one agentrt store: the calls
of both belong to the same turn, so to the same agentrt run. Real LangGraph, real tools
appending a line to a file when they really run, a real store (SQLite and PostgreSQL).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("langgraph.prebuilt", reason="needs agentrt[langgraph]")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

import agentrt
from agentrt.adapters.langgraph import Classification, gated_tool_node, run_id_for
from support.adapters.langgraph_graphs import call, lines

CONFIG: Any = {"configurable": {"thread_id": "thread-1"}}
RUN = run_id_for("thread-1", "turn-1")


def _slow_tool(name: str, effects: Path) -> BaseTool:
    @tool(name)
    def write(text: str) -> str:
        """Write a line (taking half a second)."""
        time.sleep(0.5)
        with effects.open("a") as f:
            f.write(f"{name} {text}\n")
        return f"{name} wrote {text}"

    return write


def _branch(name: str, store: agentrt.Store, effects: Path) -> Any:
    """A sub-graph: a model step (LangChain's fake chat model) asking for one call of its
    own tool, then its gated node."""
    node = gated_tool_node(
        [_slow_tool(name, effects)],
        store=store,
        policy=agentrt.default_policy(),
        classifications={name: Classification("local_mutation", timeout=10)},
    )

    def model(state: MessagesState) -> dict[str, Any]:
        answer = AIMessage("", tool_calls=[call(name, f"{name}-1", text="x")])
        return {
            "messages": [GenericFakeChatModel(messages=iter([answer])).invoke(state["messages"])]
        }

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", node)
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    builder.add_edge("tools", END)
    return builder.compile()


@pytest.mark.parametrize("path", ["async", "blocking"])
def test_two_branches_each_with_a_gated_node_run_their_calls_of_one_turn_once_each(
    database: str, tmp_path: Path, path: str
) -> None:
    """A graph runs two branches at once, each with its own gated tool node, in one turn.
    Today the second call's attach finds the run leased by the first and RunLeasedError
    fails the graph (on ainvoke LangGraph then cancels the first tool after its effect,
    recorded `interrupted`); both calls should go through the Gate in turn, once each."""
    effects = tmp_path / "effects.log"
    effects.touch()
    store = agentrt.open_store(database)
    builder = StateGraph(MessagesState)
    builder.add_node("left", _branch("left", store, effects))
    builder.add_node("right", _branch("right", store, effects))
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    builder.add_edge("left", END)
    builder.add_edge("right", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    what = {"messages": [HumanMessage("go", id="turn-1")]}

    if path == "async":
        out = dict(asyncio.run(graph.ainvoke(what, CONFIG)))
    else:
        out = dict(graph.invoke(what, CONFIG))

    assert sorted(lines(effects)) == ["left x", "right x"]
    answers = sorted(
        (m.tool_call_id, m.status, m.content) for m in out["messages"] if isinstance(m, ToolMessage)
    )
    assert answers == [
        ("left-1", "success", "left wrote x"),
        ("right-1", "success", "right wrote x"),
    ]
    assert sorted(s.status for s in store.list_steps(RUN)) == ["done", "done"]
