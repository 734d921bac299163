"""A LangGraph thread's run is its own: a Driver sharing the record never takes it over.

Between turns the run of a thread's last turn stays RUNNING with no lease. A Driver of
another program registering tools of the same names must skip it at recovery
(docs/decisions/0049), and the thread's next turn must go on (completing it). Real
LangGraph graph and checkpointer, LangChain's fake chat model, real tools
appending to a file, a real store: on SQLite and on PostgreSQL (issue 21 item 5).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("langgraph.prebuilt", reason="needs agentrt[langgraph]")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

import agentrt
from agentrt import Decision, RecoverAction
from agentrt.adapters.langgraph import Classification, gated_tool_node, run_id_for
from conftest import FakeClock, Ids
from support.rows import snapshot

CONFIG: Any = {"configurable": {"thread_id": "t1"}}


def test_a_drivers_recover_skips_a_langgraph_threads_run_and_the_thread_goes_on(
    any_store: agentrt.Store, database: str, tmp_path: Path
) -> None:
    store, db_path = any_store, database
    effects = tmp_path / "effects.log"
    effects.touch()

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        with effects.open("a") as f:
            f.write(f"graph lookup {q}\n")
        return f"found {q}"

    node = gated_tool_node(
        [lookup],
        store=store,
        policy=agentrt.default_policy(),
        classifications={"lookup": Classification("read_only", 5)},
    )
    script = [
        AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"q": "x"}, "id": "c1"}]),
        AIMessage(content="done"),
        AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"q": "y"}, "id": "c2"}]),
        AIMessage(content="done again"),
    ]

    def agent(state: MessagesState) -> dict[str, Any]:
        turn = sum(isinstance(m, AIMessage) for m in state["messages"])
        model = GenericFakeChatModel(messages=iter([script[turn]]))
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=InMemorySaver())
    graph.invoke({"messages": [HumanMessage("look up x", id="m1")]}, CONFIG)
    run_id = run_id_for("t1", "m1")
    run = store.get_run(run_id)
    assert (run.status, run.origin, store.lease(run_id).owner) == (
        "RUNNING",
        "adapter:langgraph",
        "",
    )
    before = snapshot(db_path)

    @agentrt.tool(side_effect="local_mutation", timeout=5, name="lookup")
    def other_lookup(q: str) -> dict[str, str]:
        """Another program's tool of the same name."""
        with effects.open("a") as f:
            f.write(f"driver lookup {q}\n")
        return {"q": q}

    driver = agentrt.Driver(
        store=store,
        agent=lambda _: Decision.tool_call("lookup", {"q": "from the driver"}),
        policy=agentrt.default_policy(),
        tools=[other_lookup],
        now=FakeClock(),
        new_id=Ids("d"),
    )
    (recovered,) = driver.recover_sync()
    assert (recovered.run_id, recovered.action) == (run_id, RecoverAction.SKIPPED)
    assert "'adapter:langgraph'" in recovered.why
    assert snapshot(db_path) == before
    with pytest.raises(agentrt.ForeignRunError):
        driver.resume_sync(run_id)
    assert snapshot(db_path) == before

    graph.invoke({"messages": [HumanMessage("look up y", id="m2")]}, CONFIG)
    assert effects.read_text().splitlines() == ["graph lookup x", "graph lookup y"]
    assert store.get_run(run_id).status == "COMPLETED"
    next_turn = store.get_run(run_id_for("t1", "m2"))
    assert (next_turn.status, next_turn.origin) == ("RUNNING", "adapter:langgraph")
