"""Two gated prebuilt agents in one graph, each ending through `turn_end_node` (attack campaign).

LangGraph's prebuilt `create_react_agent` given `post_model_hook=turn_end_node(tools_node)`,
as docs/adapters.md advises, composed as two sub-agents of one graph (a researcher, then a
writer: the multi-agent pattern). Driven by LangChain's fake chat model, tools appending a
line to a file when they really run, a real store (SQLite and PostgreSQL).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("langgraph.prebuilt", reason="needs agentrt[langgraph]")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

import agentrt
from agentrt.adapters.langgraph import gated_tool_node, turn_end_node
from support.adapters.langgraph_graphs import CLASSES, ask, call, lines, make_tools


class _Agent(GenericFakeChatModel):
    """LangChain's fake chat model for one named agent: answers by how many AI messages
    that agent has made."""

    script: list[AIMessage]
    agent: str

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        made = sum(isinstance(m, AIMessage) and m.name == self.agent for m in messages)
        self.messages = iter([self.script[made]])
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kw)


def test_a_second_gated_agent_in_the_same_turn_runs_its_calls_after_the_first_one_ended(
    database: str, tmp_path: Path
) -> None:
    """A graph runs two gated prebuilt agents one after the other, each with
    `post_model_hook=turn_end_node(...)`. Today the first agent's answer completes the
    turn's run, and the second agent's first tool call raises RunEndedError out of the
    graph (going on raises again); each agent's calls should run, once."""
    from langgraph.prebuilt import create_react_agent

    effects = tmp_path / "effects.log"
    effects.touch()
    store = agentrt.open_store(database)

    def agent(name: str, script: list[AIMessage]) -> Any:
        tools_node = gated_tool_node(
            make_tools(effects),
            store=store,
            policy=agentrt.default_policy(),
            classifications=CLASSES,
        )
        model = _Agent(messages=iter([]), script=script, agent=name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_react_agent is deprecated in LangGraph 1.x
            return create_react_agent(
                model, tools=tools_node, post_model_hook=turn_end_node(tools_node), name=name
            )

    researcher = agent(
        "researcher",
        [
            AIMessage("", tool_calls=[call("lookup", "r1", q="login")], name="researcher"),
            AIMessage("the login branch is ready", name="researcher"),
        ],
    )
    writer = agent(
        "writer",
        [
            AIMessage("", tool_calls=[call("write_note", "w1", text="ready")], name="writer"),
            AIMessage("noted", name="writer"),
        ],
    )
    builder = StateGraph(MessagesState)
    builder.add_node("researcher", researcher)
    builder.add_node("writer", writer)
    builder.add_edge(START, "researcher")
    builder.add_edge("researcher", "writer")
    builder.add_edge("writer", END)
    graph = builder.compile(checkpointer=InMemorySaver())

    out = ask(graph)

    assert lines(effects) == ["lookup login", "note ready"]
    answers = {
        m.tool_call_id: (m.status, m.content) for m in out["messages"] if isinstance(m, ToolMessage)
    }
    assert answers == {"r1": ("success", "found login"), "w1": ("success", "noted ready")}
    assert out["messages"][-1].content == "noted"
    assert store.verify_events().intact
