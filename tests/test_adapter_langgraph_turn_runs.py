"""Which agentrt run a LangGraph tool call belongs to: its turn, its sub-graph, edited state.

Each turn of a thread is one run (`run_id_for(thread, turn, subgraph)`); the
gated nodes of one graph running calls of one turn at once go through the Gate
one at a time; the run of a call recorded once never changes when the program
edits the graph's state. Real LangGraph graphs driven by LangChain's fake chat
model, tools appending a line to a file when they really run, a real store
(SQLite and PostgreSQL).
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Annotated, Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("langgraph.prebuilt", reason="needs agentrt[langgraph]")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command
from typing_extensions import TypedDict

import agentrt
from agentrt.adapters.langgraph import (
    Classification,
    approve,
    gated_tool_node,
    run_id_for,
    turn_end_node,
)
from support.adapters.langgraph_graphs import (
    CLASSES,
    CONFIG,
    RUN,
    TURN,
    ask,
    build,
    call,
    lines,
    make_tools,
    send,
)

PATHS = ["async", "blocking"]


def test_a_call_that_ran_is_not_run_again_after_the_turns_first_message_is_removed(
    database: str, tmp_path: Path
) -> None:
    """The model asks [write_note, push_branch]: the note runs, the push waits for a person.
    The program removes the user's message from the thread (`update_state` with
    `RemoveMessage`) and resumes with the approval: the answer names the turn's run, which
    recorded the message's calls, so the note gets its recorded outcome (not run again),
    the push runs once, and no second run is begun."""
    graph, store, effects = build(
        tmp_path,
        [
            AIMessage(
                "",
                tool_calls=[
                    call("write_note", "n1", text="hello"),
                    call("push_branch", "p1", branch="feature/login"),
                ],
            ),
            AIMessage("done"),
        ],
        database=database,
    )
    out = ask(graph)
    (pending,) = out["__interrupt__"]
    assert lines(effects) == ["note hello"]

    graph.update_state(CONFIG, {"messages": [RemoveMessage(id=TURN)]})
    out = ask(graph, Command(resume=approve(pending, by="alice")))

    assert lines(effects) == ["note hello", "push feature/login"]
    answers = [(m.tool_call_id, m.content) for m in out["messages"] if isinstance(m, ToolMessage)]
    assert answers == [("n1", "noted hello"), ("p1", "pushed feature/login")]
    assert [r.id for r in store.list_runs()] == [RUN]
    assert [s.status for s in store.list_steps(RUN)] == ["done", "done"]


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


def test_two_gated_agents_one_after_the_other_in_a_turn_each_run_and_end_their_own_run(
    database: str, tmp_path: Path
) -> None:
    """A graph runs two gated prebuilt agents one after the other (a researcher, then a
    writer), each with `post_model_hook=turn_end_node(...)`. Each sub-graph's calls of the
    turn are a run of their own (`run_id_for(thread, turn, subgraph=<agent>)`): the
    researcher's answer completes its run, and the writer's call then runs once in its
    own run, completed by the writer's answer."""
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
    for name, tool_name, answer in [
        ("researcher", "lookup", "the login branch is ready"),
        ("writer", "write_note", "noted"),
    ]:
        run = store.get_run(run_id_for("thread-1", TURN, subgraph=name))
        assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
        assert run.goal == f"LangGraph thread thread-1, turn {TURN}, sub-graph {name}"
        steps = store.list_steps(run.id)
        assert [s.decision.tool if s.decision else None for s in steps[:-1]] == [tool_name]
        assert steps[-1].decision is not None and steps[-1].decision.result == answer
    assert len(store.list_runs()) == 2
    assert store.verify_events().intact


def _slow_tool(name: str, effects: Path) -> BaseTool:
    @tool(name)
    def write(text: str) -> str:
        """Write a line (taking half a second)."""
        time.sleep(0.5)
        with effects.open("a") as f:
            f.write(f"{name} {text}\n")
        return f"{name} wrote {text}"

    return write


def _model(name: str, key: str = "messages") -> Any:
    """A model step (LangChain's fake chat model) asking for one call of the tool `name`."""

    def model(state: Any) -> dict[str, Any]:
        answer = AIMessage("", tool_calls=[call(name, f"{name}-1", text="x")])
        return {key: [GenericFakeChatModel(messages=iter([answer])).invoke(state[key])]}

    return model


def _node(name: str, store: agentrt.Store, effects: Path, key: str = "messages") -> Any:
    return gated_tool_node(
        [_slow_tool(name, effects)],
        store=store,
        policy=agentrt.default_policy(),
        classifications={name: Classification("local_mutation", timeout=10)},
        messages_key=key,
    )


def _answers(messages: list[Any]) -> list[tuple[str, str, Any]]:
    return sorted(
        (m.tool_call_id, m.status, m.content) for m in messages if isinstance(m, ToolMessage)
    )


class _TwoLanes(TypedDict):
    left: Annotated[list[Any], add_messages]
    right: Annotated[list[Any], add_messages]


@pytest.mark.parametrize("path", PATHS)
def test_two_gated_nodes_running_calls_of_one_turn_at_once_go_through_the_gate_in_turn(
    database: str, tmp_path: Path, path: str
) -> None:
    """A graph runs two branches at once in one turn, each with its own model step and its
    own gated tool node (over its own messages key) on one database: both calls belong to
    the turn's one run. The second call waits for the first to be recorded (the gated nodes
    of a process take a run's calls one at a time), then runs: each runs once, recorded
    `done`, and the graph ends with both answers."""
    effects = tmp_path / "effects.log"
    effects.touch()
    store = agentrt.open_store(database)
    builder = StateGraph(_TwoLanes)
    for lane in ("left", "right"):
        builder.add_node(f"{lane}_model", _model(lane, lane))
        builder.add_node(f"{lane}_tools", _node(lane, store, effects, lane))
        builder.add_edge(START, f"{lane}_model")
        builder.add_edge(f"{lane}_model", f"{lane}_tools")
        builder.add_edge(f"{lane}_tools", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    opened = {lane: [HumanMessage("go", id=TURN)] for lane in ("left", "right")}

    out = send(graph, opened, path)

    assert sorted(lines(effects)) == ["left x", "right x"]
    assert _answers(out["left"] + out["right"]) == [
        ("left-1", "success", "left wrote x"),
        ("right-1", "success", "right wrote x"),
    ]
    assert [r.id for r in store.list_runs()] == [RUN]
    assert sorted(s.status for s in store.list_steps(RUN)) == ["done", "done"]
    assert store.verify_events().intact


def _branch(name: str, store: agentrt.Store, effects: Path) -> Any:
    """A sub-graph: a model step asking for one call of its own tool, then its gated node."""
    builder = StateGraph(MessagesState)
    builder.add_node("model", _model(name))
    builder.add_node("tools", _node(name, store, effects))
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    builder.add_edge("tools", END)
    return builder.compile()


@pytest.mark.parametrize("path", PATHS)
def test_two_sub_graphs_running_at_once_each_run_their_call_in_their_own_run(
    database: str, tmp_path: Path, path: str
) -> None:
    """A graph runs two sub-graphs at once in one turn, each with its own gated tool node
    on one database. Each sub-graph's calls of the turn are a run of their own
    (`run_id_for(thread, turn, subgraph=<node>)`): each call runs once, recorded `done` in
    its sub-graph's run, and the graph ends with both answers."""
    effects = tmp_path / "effects.log"
    effects.touch()
    store = agentrt.open_store(database)
    builder = StateGraph(MessagesState)
    for lane in ("left", "right"):
        builder.add_node(lane, _branch(lane, store, effects))
        builder.add_edge(START, lane)
        builder.add_edge(lane, END)
    graph = builder.compile(checkpointer=InMemorySaver())

    out = send(graph, {"messages": [HumanMessage("go", id=TURN)]}, path)

    assert sorted(lines(effects)) == ["left x", "right x"]
    assert _answers(out["messages"]) == [
        ("left-1", "success", "left wrote x"),
        ("right-1", "success", "right wrote x"),
    ]
    for lane in ("left", "right"):
        steps = store.list_steps(run_id_for("thread-1", TURN, subgraph=lane))
        assert [(s.decision.tool if s.decision else None, s.status) for s in steps] == [
            (lane, "done")
        ]
    assert len(store.list_runs()) == 2
