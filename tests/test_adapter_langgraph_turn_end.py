"""A turn's run is completed when the graph stops with the model's answer (`turn_end_node`).

The user routes the end of the graph through the node (`tools_condition`'s path
map `{END: "agentrt_end"}`) or gives it to the prebuilt ReAct agent as its
`post_model_hook`. The model's final answer completes the turn's run (a
`complete` step whose result is the answer); a replayed node, another process
or a turn that called no tool writes nothing; a run that waits for a person, is
leased by a live process or was cut off in a side effect is never completed.
Real graphs and checkpointers, LangChain's fake chat model, real tools, a real
store, a real child process for the crash.

Every test that touches a store takes `database` and runs on SQLite and on PostgreSQL
(issue 21 item 5); the SIGKILLed child opens the store named in WORKDIR/database.
"""

from __future__ import annotations

import asyncio
import os
import warnings
import weakref
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("langgraph.prebuilt", reason="needs agentrt[langgraph]")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

import agentrt
from agentrt.adapters.langgraph import (
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
    build_ending,
    call,
    go,
    kill_inside_the_tool,
    lines,
    make_tools,
    send,
    tool_messages,
)
from support.freed import freed
from support.rows import snapshot

PATHS = ["async", "blocking"]


def kinds(store: agentrt.Store, run_id: str) -> list[str | None]:
    return [s.decision and str(s.decision.kind) for s in store.list_steps(run_id)]


@pytest.mark.parametrize("path", PATHS)
def test_the_models_final_answer_completes_the_turns_run_with_the_answer_as_its_result(
    database: str, tmp_path: Path, path: str
) -> None:
    script = [AIMessage("", tool_calls=[call("lookup", "c1", q="x")]), AIMessage("x is found")]
    graph, store, effects, _ = build_ending(tmp_path, script, database=database)
    out = send(graph, go(), path)
    assert out["messages"][-1].content == "x is found"
    assert lines(effects) == ["lookup x"]
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    steps = store.list_steps(RUN)
    assert [(str(s.decision and s.decision.kind), str(s.status)) for s in steps] == [
        ("tool_call", "done"),
        ("complete", "done"),
    ]
    assert steps[1].decision is not None
    assert steps[1].decision.to_json() == {"kind": "complete", "result": "x is found"}
    events = store.list_events(RUN)
    assert [e.type for e in events] == [
        "run.created",
        "run.started",
        "step.started",
        "step.decided",
        "step.policy",
        "step.tool_started",
        "step.tool_finished",
        "run.resumed",  # the end node takes the released run back for its last step
        "step.started",
        "step.decided",
        "run.finished",
    ]
    assert events[-2].payload == {"kind": "complete", "result": "x is found"}
    assert events[-1].payload == {
        "detail": "",
        "reason": "goal_completed",
        "status": "COMPLETED",
        "steps": 2,
    }
    assert store.lease(RUN).owner == ""
    assert store.verify_events().intact


@pytest.mark.parametrize("path", PATHS)
def test_two_turns_of_a_thread_are_each_completed_when_the_model_answers(
    database: str, tmp_path: Path, path: str
) -> None:
    script = [
        AIMessage("", tool_calls=[call("lookup", "c1", q="x")]),
        AIMessage("x is found"),
        AIMessage("", tool_calls=[call("write_note", "c2", text="x")]),
        AIMessage("noted"),
    ]
    graph, store, effects, _ = build_ending(tmp_path, script, database=database)
    send(graph, go("day-1"), path)
    first = run_id_for("thread-1", "day-1")
    assert store.get_run(first).status == "COMPLETED"  # before the next turn began
    out = send(graph, go("day-2", "note it"), path)
    assert out["messages"][-1].content == "noted"
    second = run_id_for("thread-1", "day-2")
    assert lines(effects) == ["lookup x", "note x"]
    for run_id, answer in ((first, "x is found"), (second, "noted")):
        assert store.get_run(run_id).status == "COMPLETED"
        assert kinds(store, run_id) == ["tool_call", "complete"]
        last = store.list_steps(run_id)[-1]
        assert last.decision is not None and last.decision.result == answer


@pytest.mark.parametrize("path", PATHS)
def test_a_turn_that_called_no_tool_has_no_run_and_nothing_is_written(
    database: str, tmp_path: Path, path: str
) -> None:
    graph, store, _, _ = build_ending(tmp_path, [AIMessage("hello")], database=database)
    before = snapshot(database)
    out = send(graph, go(text="hi"), path)
    assert out["messages"][-1].content == "hello"
    assert store.list_runs() == []
    assert snapshot(database) == before


@pytest.mark.parametrize("path", PATHS)
def test_the_end_node_run_again_from_an_earlier_checkpoint_writes_nothing(
    database: str, tmp_path: Path, path: str
) -> None:
    script = [AIMessage("", tool_calls=[call("lookup", "c1", q="x")]), AIMessage("x is found")]
    graph, store, effects, _ = build_ending(tmp_path, script, database=database)
    send(graph, go(), path)
    completed = snapshot(database)
    # LangGraph's own replay: go on again from the checkpoint taken before the end node
    # ran, as a process that died after the node wrote and before LangGraph saved it would.
    (before_end,) = [s for s in graph.get_state_history(CONFIG) if s.next == ("agentrt_end",)]
    out = send(graph, None, path, before_end.config)
    assert out["messages"][-1].content == "x is found"
    assert snapshot(database) == completed
    # Another process (another gate, another lease owner) ending the same turn: nothing.
    _, _, _, other = build_ending(tmp_path, script, database=database)
    values = graph.get_state(CONFIG).values
    if path == "async":
        asyncio.run(turn_end_node(other).ainvoke(values, CONFIG))
    else:
        turn_end_node(other).invoke(values, CONFIG)
    assert snapshot(database) == completed
    assert lines(effects) == ["lookup x"]
    assert kinds(store, RUN) == ["tool_call", "complete"]


def final_state(*messages: Any) -> dict[str, Any]:
    return {"messages": [HumanMessage("go", id=TURN), *messages]}


@pytest.mark.parametrize("path", PATHS)
def test_a_run_that_waits_for_a_person_is_not_completed_by_the_end_node(
    database: str, tmp_path: Path, path: str
) -> None:
    script = [AIMessage("", tool_calls=[call("push_branch", "c1", branch="main")])]
    graph, store, effects, tools_node = build_ending(tmp_path, script, database=database)
    (pending,) = send(graph, go(), path)["__interrupt__"]
    before = snapshot(database)
    end = turn_end_node(tools_node)
    state = final_state(*graph.get_state(CONFIG).values["messages"][1:], AIMessage("gave up"))
    if path == "async":
        assert asyncio.run(end.ainvoke(state, CONFIG)) == {}
    else:
        assert end.invoke(state, CONFIG) == {}
    assert snapshot(database) == before
    assert store.get_run(RUN).status == "WAITING_FOR_APPROVAL"
    assert pending.value["status"] == "pending" and lines(effects) == []


def test_a_run_leased_by_a_live_process_is_not_completed_until_it_lets_go(
    database: str,
    tmp_path: Path,
) -> None:
    script = [AIMessage("", tool_calls=[call("lookup", "c1", q="x")]), AIMessage("x is found")]
    _, store, _, tools_node = build_ending(tmp_path, script, database=database)
    end = turn_end_node(tools_node)
    state = final_state(
        AIMessage("", tool_calls=[call("lookup", "c1", q="x")], id="ai-1"),
        ToolMessage("found x", tool_call_id="c1", name="lookup"),
        AIMessage("x is found", id="ai-2"),
    )
    # The turn's run, begun by a gated node whose graph has no end node: RUNNING, no lease.
    plain, _, _ = build(tmp_path, script, database=database)
    ask(plain)
    assert store.get_run(RUN).status == "RUNNING"
    # Another worker holds the run's lease (its session is live).
    other = gated_tool_node(
        make_tools(tmp_path / "effects.log"),
        store=store,
        policy=agentrt.default_policy(),
        classifications=CLASSES,
    )
    session, verdict = other.agentrt_gate.gate.attach_sync(RUN)
    assert verdict is None
    before = snapshot(database)
    assert end.invoke(state, CONFIG) == {}
    assert store.get_run(RUN).status == "RUNNING"
    assert snapshot(database) == before
    session.close_sync()
    end.invoke(state, CONFIG)
    assert store.get_run(RUN).status == "COMPLETED"
    assert kinds(store, RUN) == ["tool_call", "complete"]


@pytest.mark.slow
def test_a_turn_cut_off_in_a_side_effect_is_left_for_a_person_and_never_completed(
    database: str, tmp_path: Path
) -> None:
    (tmp_path / "database").write_text(database)  # the children's store
    kill_inside_the_tool(tmp_path, "start", "write_note")
    store = agentrt.open_store(database)
    tools_node = gated_tool_node(
        make_tools(tmp_path / "effects.log"),
        store=store,
        policy=agentrt.default_policy(),
        classifications=CLASSES,
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    state = {
        "messages": [
            HumanMessage("publish the login branch", id="publish"),
            AIMessage("", tool_calls=[call("write_note", "call-1", text="hello")]),
            AIMessage("all done"),
        ]
    }
    turn_end_node(tools_node).invoke(state, config)
    run = store.get_run(run_id_for("t", "publish"))
    assert run.status == "WAITING_FOR_APPROVAL"  # the interruption contract: a person decides
    (approval,) = store.list_approvals(run.id)
    assert (approval.kind, approval.status) == ("interrupted_side_effect", "pending")
    assert "complete" not in kinds(store, run.id)
    assert lines(tmp_path / "effects.log") == ["note hello"]  # not run again


def test_the_end_node_is_made_only_from_a_gated_tool_node(tmp_path: Path) -> None:
    with pytest.raises(agentrt.ConfigError, match="gated_tool_node"):
        turn_end_node(ToolNode(make_tools(tmp_path / "effects.log")))


@pytest.mark.parametrize("path", PATHS)
def test_the_prebuilt_react_agent_completes_the_turn_through_its_post_model_hook(
    database: str, tmp_path: Path, path: str
) -> None:
    from langgraph.prebuilt import create_react_agent

    effects = tmp_path / "effects.log"
    effects.touch()
    store = agentrt.open_store(database)
    tools_node = gated_tool_node(
        make_tools(effects), store=store, policy=agentrt.default_policy(), classifications=CLASSES
    )
    script = [
        AIMessage("", tool_calls=[call("push_branch", "c1", branch="feature/login")]),
        AIMessage("pushed it"),
    ]

    def model(state: Any, runtime: Any) -> GenericFakeChatModel:
        answered = sum(isinstance(m, AIMessage) for m in state["messages"])
        return GenericFakeChatModel(messages=iter([script[answered]]))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated in favour of langchain's create_agent
        agent = create_react_agent(
            model,
            tools_node,
            post_model_hook=turn_end_node(tools_node),
            checkpointer=InMemorySaver(),
        )
    (pending,) = send(agent, go(text="publish"), path)["__interrupt__"]
    assert store.get_run(RUN).status == "WAITING_FOR_APPROVAL"
    out = send(agent, Command(resume=approve(pending, by="alice")), path)
    assert tool_messages(out) == [("c1", "success", "pushed feature/login")]
    assert out["messages"][-1].content == "pushed it"
    assert lines(effects) == ["push feature/login"]
    assert store.get_run(RUN).status == "COMPLETED"
    assert kinds(store, RUN) == ["tool_call", "complete"]


def test_a_turn_that_made_max_steps_calls_ends_failed_at_its_end_as_a_drivers_run_does(
    database: str,
    tmp_path: Path,
) -> None:
    """`complete` is a step: it counts against `Limits.max_steps` (decision 0053)."""
    script = [AIMessage("", tool_calls=[call("lookup", "c1", q="x")]), AIMessage("x is found")]
    graph, store, effects, _ = build_ending(
        tmp_path, script, limits=agentrt.Limits(max_steps=1), database=database
    )
    out = send(graph, go(), "async")
    assert out["messages"][-1].content == "x is found"
    assert lines(effects) == ["lookup x"]
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("FAILED", "limit_steps")
    assert kinds(store, RUN) == ["tool_call"]


@pytest.mark.parametrize("path", PATHS)
def test_a_graph_dropped_after_its_turn_ended_frees_its_node_and_store(
    database: str, tmp_path: Path, path: str
) -> None:
    """LangChain keeps what a `RunnableLambda`'s functions read in a cache of its own (256
    of them, keyed by the function): the end node's functions hold the gated node weakly,
    the end node holds it, so a graph dropped after its turn ended frees its node and its
    store (on PostgreSQL, the store's connection) rather than leaving them to that cache."""
    script = [AIMessage("", tool_calls=[call("lookup", "c1", q="x")]), AIMessage("x is found")]
    graph, store, _, tools_node = build_ending(tmp_path, script, database=database)
    send(graph, go(), path)
    assert store.get_run(RUN).status == "COMPLETED"
    gone = weakref.ref(store)
    store.close()
    del graph, store, tools_node
    assert freed(gone)  # a pool thread may still be letting go of its task
