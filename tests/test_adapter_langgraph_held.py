"""A call made beside one that waits for a person is held, then judged in its turn (decision 0050).

The model answers with [push_branch (the default policy asks a person),
write_note (allowed)] in one AI message. LangGraph's ToolNode runs the calls of
one message together (a thread pool for `invoke`, tasks for `ainvoke`); the
gated node puts them through the Gate one at a time in the message's order, so
the note waits behind the push: nothing runs before the person decides, and
LangGraph runs the node again on resume, where the push is settled first and
the note then goes through the Gate. Real graphs, LangChain's fake chat model,
tools appending a line to a file when they really run, a real store.

Every test that touches a store takes `database` and runs on SQLite and on PostgreSQL
(issue 21 item 5); the SIGKILLed children open the store named in WORKDIR/database.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("langgraph.prebuilt", reason="needs agentrt[langgraph]")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, Send

import agentrt
from agentrt.adapters.langgraph import approve, gated_tool_node, reject
from support.adapters.langgraph_graphs import (
    CLASSES,
    CONFIG,
    RUN,
    TURN,
    build,
    build_prebuilt,
    call,
    child,
    kill_inside_the_tool,
    lines,
    make_tools,
    send,
    tool_messages,
)
from support.freed import freed

PATHS = ["async", "blocking"]


def push_then_note() -> AIMessage:
    return AIMessage(
        "",
        tool_calls=[
            call("push_branch", "c1", branch="feature/login"),
            call("write_note", "c2", text="pushed it"),
        ],
    )


GO = {"messages": [HumanMessage("publish and note it", id=TURN)]}


def recorded(store: Any) -> list[tuple[int, str | None, str]]:
    return [
        (s.index, s.decision and s.decision.reason, str(s.status)) for s in store.list_steps(RUN)
    ]


@pytest.mark.parametrize("path", PATHS)
def test_a_call_beside_one_that_waits_for_a_person_is_held_and_nothing_runs(
    database: str, tmp_path: Path, path: str
) -> None:
    graph, store, effects = build(
        tmp_path, [push_then_note(), AIMessage("done")], database=database
    )
    out = send(graph, GO, path)
    (pending,) = out["__interrupt__"]
    assert (pending.value["tool_call_id"], pending.value["held"]) == ("c1", ["c2"])
    assert lines(effects) == []
    assert recorded(store) == [(0, "langgraph tool call c1", "awaiting_approval")]
    assert [e.type for e in store.list_events(RUN)].count("step.started") == 1
    # No ToolMessage reached the state: the note was not answered "Not run" to the model.
    assert tool_messages(dict(graph.get_state(CONFIG).values)) == []
    (approval,) = store.pending_approvals(RUN)
    assert approval.id == pending.value["approval_id"]


@pytest.mark.parametrize("path", PATHS)
def test_after_approval_the_held_call_is_recorded_judged_and_run_once_after_the_push(
    database: str, tmp_path: Path, path: str
) -> None:
    graph, store, effects = build(
        tmp_path, [push_then_note(), AIMessage("done")], database=database
    )
    (pending,) = send(graph, GO, path)["__interrupt__"]
    out = send(graph, Command(resume=approve(pending, by="alice")), path)
    assert "__interrupt__" not in out
    assert lines(effects) == ["push feature/login", "note pushed it"]
    assert tool_messages(out) == [
        ("c1", "success", "pushed feature/login"),
        ("c2", "success", "noted pushed it"),
    ]
    assert recorded(store) == [
        (0, "langgraph tool call c1", "done"),
        (1, "langgraph tool call c2", "done"),
    ]
    (note,) = [s for s in store.list_steps(RUN) if s.index == 1]
    assert note.decision is not None
    assert (note.decision.tool, note.decision.args) == ("write_note", {"text": "pushed it"})
    kinds = [e.type for e in store.list_events(RUN)]
    assert kinds.count("step.tool_started") == 2
    assert out["messages"][-1].content == "done"


@pytest.mark.parametrize("path", PATHS)
def test_after_a_rejection_the_held_call_never_runs_and_the_model_hears_the_run_ended(
    database: str, tmp_path: Path, path: str
) -> None:
    graph, store, effects = build(
        tmp_path, [push_then_note(), AIMessage("ok, not pushing")], database=database
    )
    (pending,) = send(graph, GO, path)["__interrupt__"]
    out = send(graph, Command(resume=reject(pending, by="alice", note="not today")), path)
    assert lines(effects) == []
    assert tool_messages(out) == [
        ("c1", "error", "Denied by the policy: approval rejected: not today"),
        (
            "c2",
            "error",
            f"Not run: the agentrt run {RUN} ended (CANCELLED, approval_rejected: not today) on an "
            "earlier call of this message; no tool runs in this turn again",
        ),
    ]
    assert recorded(store) == [(0, "langgraph tool call c1", "failed")]  # the note: nothing
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("CANCELLED", "approval_rejected")
    assert out["messages"][-1].content == "ok, not pushing"
    assert store.verify_events().intact


@pytest.mark.parametrize("path", PATHS)
def test_a_held_call_that_needs_a_person_asks_with_its_own_approval_after_the_first_is_decided(
    database: str, tmp_path: Path, path: str
) -> None:
    script = [
        AIMessage(
            "",
            tool_calls=[
                call("push_branch", "c1", branch="a"),
                call("write_note", "c2", text="between"),
                call("push_branch", "c3", branch="b"),
            ],
        ),
        AIMessage("done"),
    ]
    graph, store, effects = build(tmp_path, script, database=database)
    (first,) = send(graph, GO, path)["__interrupt__"]
    assert (first.value["tool_call_id"], first.value["held"]) == ("c1", ["c2", "c3"])
    (second,) = send(graph, Command(resume=approve(first, by="alice")), path)["__interrupt__"]
    assert (second.value["tool_call_id"], second.value["held"]) == ("c3", [])
    assert second.value["approval_id"] != first.value["approval_id"]
    assert second.value["request"]["args"] == {"branch": "b"}
    assert lines(effects) == ["push a", "note between"]
    assert [a.status for a in store.list_approvals(RUN)] == ["approved", "pending"]
    out = send(graph, Command(resume=approve(second, by="alice")), path)
    assert lines(effects) == ["push a", "note between", "push b"]
    assert [m[0] for m in tool_messages(out)] == ["c1", "c2", "c3"]
    assert recorded(store) == [
        (0, "langgraph tool call c1", "done"),
        (1, "langgraph tool call c2", "done"),
        (2, "langgraph tool call c3", "done"),
    ]


@pytest.mark.slow
def test_a_call_held_behind_a_note_cut_off_by_a_crash_runs_once_after_a_person_approves(
    database: str, tmp_path: Path
) -> None:
    """[write_note, read_notes] in one message; the child is SIGKILLed inside the note.

    The read never started (it was held behind the note). A new process going on
    with `invoke(None)` pauses on the note's `interrupted_side_effect` with the
    read held; after a person approves, the note runs once more and the read once.
    """
    (tmp_path / "database").write_text(database)  # the children's store
    kill_inside_the_tool(tmp_path, "start", "note_then_read")
    effects = tmp_path / "effects.log"
    assert lines(effects) == ["note hello"]  # the read was held behind the note
    again = child(tmp_path, "continue", "note_then_read")
    (value,) = again["interrupts"]
    assert (value["kind"], value["tool_call_id"], value["held"]) == (
        "interrupted_side_effect",
        "call-1",
        ["call-2"],
    )
    assert lines(effects) == ["note hello"]
    done = child(tmp_path, "approve", "note_then_read")
    assert done["interrupts"] == []
    assert done["messages"][-3:] == ["noted hello", "read hello", "all done"]
    assert lines(effects) == ["note hello", "note hello", "read hello"]
    store = agentrt.open_existing(database, read_only=True)
    steps = store.list_steps(done["run"][0])
    assert [(s.decision and s.decision.reason, str(s.status)) for s in steps] == [
        ("langgraph tool call call-1", "done"),
        ("langgraph tool call call-2", "done"),
    ]


@pytest.mark.slow
def test_under_send_a_note_held_behind_a_push_cut_off_by_a_crash_runs_once_after_it(
    database: str, tmp_path: Path
) -> None:
    """The prebuilt agent (each call a `Send` task) in a child process: [push_branch,
    write_note]; the push is approved and the child SIGKILLed inside it.

    A new process going on through LangGraph's checkpointer (`invoke(None)`) does not run
    the push again: it pauses on `interrupted_side_effect` (an interrupt) with the note held
    behind it, neither run nor recorded. After a person approves, the push runs once more,
    then the note once, in order.
    """
    (tmp_path / "database").write_text(database)  # the children's store
    (first,) = child(tmp_path, "start", "push_then_note")["interrupts"]
    assert (first["kind"], first["tool_call_id"], first["held"]) == (
        "remote_mutation",
        "call-1",
        ["call-2"],
    )
    kill_inside_the_tool(tmp_path, "approve", "push_then_note")
    effects = tmp_path / "effects.log"
    assert lines(effects) == ["push feature/login"]  # the note was held behind the push
    again = child(tmp_path, "continue", "push_then_note")
    (value,) = again["interrupts"]  # one interrupt: the held task adds none
    assert (value["kind"], value["tool_call_id"], value["held"]) == (
        "interrupted_side_effect",
        "call-1",
        ["call-2"],
    )
    assert value["approval_id"] != first["approval_id"]
    assert lines(effects) == ["push feature/login"]
    store = agentrt.open_existing(database, read_only=True)
    run_id = again["run"][0]
    assert [(s.decision and s.decision.reason) for s in store.list_steps(run_id)] == [
        "langgraph tool call call-1"
    ]
    done = child(tmp_path, "approve", "push_then_note")
    assert done["interrupts"] == []
    assert done["messages"][-3:] == ["pushed feature/login", "noted hello", "all done"]
    assert lines(effects) == ["push feature/login", "push feature/login", "note hello"]
    steps = store.list_steps(run_id)
    assert [(s.decision and s.decision.reason, str(s.status)) for s in steps] == [
        ("langgraph tool call call-1", "done"),
        ("langgraph tool call call-2", "done"),
    ]
    started = [e.step_id for e in store.list_events(run_id) if e.type == "step.tool_started"]
    assert started == [steps[0].id, steps[0].id, steps[1].id]


@pytest.mark.parametrize("path", PATHS)
def test_a_call_that_fails_before_the_gate_stops_the_calls_behind_it_instead_of_hanging(
    database: str, tmp_path: Path, path: str
) -> None:
    """No thread id: the first call is refused; the second, waiting its turn, stops too."""
    graph, store, effects = build(
        tmp_path, [push_then_note(), AIMessage("done")], saver=None, database=database
    )
    outcome: list[BaseException] = []

    def invoke() -> None:
        try:
            if path == "async":
                asyncio.run(graph.ainvoke(GO))
            else:
                graph.invoke(GO)
        except BaseException as exc:  # the outcome is asserted below
            outcome.append(exc)

    worker = threading.Thread(target=invoke, daemon=True)
    worker.start()
    worker.join(60)  # a guard only: the graph answers at once, or hangs for good
    assert not worker.is_alive(), "the held call waited forever"
    (error,) = outcome
    assert isinstance(error, agentrt.ConfigError) and "thread_id" in str(error)
    assert lines(effects) == [] and store.list_runs() == []


def first_call_late(node: Any) -> dict[str, threading.Event]:
    """Wrap the node's hooks so call c1 reaches the gated hook only after c2 did.

    c2 enters the hook first (an event c1 waits for); c1 then gives c2 up to a
    second to go through the Gate and run before it enters itself. In the
    model's order c2 waits its turn behind c1, so it cannot finish first: c1
    goes on when the second is up, and c2 follows it.
    """
    seen = {"c2 arrived": threading.Event(), "c2 done": threading.Event()}
    hook, ahook = node._wrap_tool_call, node._awrap_tool_call

    def wrap(request: Any, execute: Any) -> Any:
        if request.tool_call["id"] == "c1":
            assert seen["c2 arrived"].wait(30), "c2 never reached the hook"
            seen["c2 done"].wait(1)
            return hook(request, execute)
        seen["c2 arrived"].set()
        try:
            return hook(request, execute)
        finally:
            seen["c2 done"].set()

    async def awrap(request: Any, execute: Any) -> Any:
        if request.tool_call["id"] == "c1":
            arrived = await asyncio.to_thread(seen["c2 arrived"].wait, 30)
            assert arrived, "c2 never reached the hook"
            await asyncio.to_thread(seen["c2 done"].wait, 1)
            return await ahook(request, execute)
        seen["c2 arrived"].set()
        try:
            return await ahook(request, execute)
        finally:
            seen["c2 done"].set()

    node._wrap_tool_call, node._awrap_tool_call = wrap, awrap
    return seen


@pytest.mark.parametrize("path", PATHS)
def test_calls_of_one_message_go_through_in_its_order_when_the_first_reaches_the_hook_late(
    database: str, tmp_path: Path, path: str
) -> None:
    """No Send: the ToolNode's pool (invoke) or tasks (ainvoke) run both calls at once."""
    two_notes = AIMessage(
        "",
        tool_calls=[
            call("write_note", "c1", text="first"),
            call("write_note", "c2", text="second"),
        ],
    )
    nodes: list[Any] = []

    def node(tools: list[Any]) -> Any:
        nodes.append(
            gated_tool_node(
                tools, store=store, policy=agentrt.default_policy(), classifications=CLASSES
            )
        )
        return nodes[-1]

    store = agentrt.open_store(database)
    graph, _, effects = build(
        tmp_path, [two_notes, AIMessage("done")], node=node, database=database
    )
    seen = first_call_late(nodes[0])
    out = send(graph, GO, path)
    assert seen["c2 arrived"].is_set() and seen["c2 done"].is_set()
    assert lines(effects) == ["note first", "note second"]
    assert recorded(store) == [
        (0, "langgraph tool call c1", "done"),
        (1, "langgraph tool call c2", "done"),
    ]
    assert tool_messages(out) == [
        ("c1", "success", "noted first"),
        ("c2", "success", "noted second"),
    ]
    assert out["messages"][-1].content == "done"


# -- calls dispatched with Send (the prebuilt agent: one task per call) ----------


@pytest.mark.parametrize("path", PATHS)
def test_under_send_the_call_beside_one_that_waits_is_held_and_nothing_runs(
    database: str, tmp_path: Path, path: str
) -> None:
    graph, store, effects = build_prebuilt(
        tmp_path, [push_then_note(), AIMessage("done")], database=database
    )
    out = send(graph, GO, path)
    (pending,) = out["__interrupt__"]  # one interrupt: the held task adds none
    assert (pending.value["tool_call_id"], pending.value["held"]) == ("c1", ["c2"])
    assert lines(effects) == []
    assert recorded(store) == [(0, "langgraph tool call c1", "awaiting_approval")]
    assert tool_messages(dict(graph.get_state(CONFIG).values)) == []
    # The held task raised an interrupt with no value: LangGraph saved nothing for it (no
    # pending interrupt, no answer), so it runs again on resume; only the push waits.
    state = graph.get_state(CONFIG)
    assert [i.id for i in state.interrupts] == [pending.id]
    assert sorted((t.name, len(t.interrupts), t.result) for t in state.tasks) == [
        ("tools", 0, None),
        ("tools", 1, None),
    ]


@pytest.mark.parametrize("path", PATHS)
def test_under_send_after_approval_both_calls_run_once_in_order_each_its_own_step(
    database: str, tmp_path: Path, path: str
) -> None:
    graph, store, effects = build_prebuilt(
        tmp_path, [push_then_note(), AIMessage("done")], database=database
    )
    (pending,) = send(graph, GO, path)["__interrupt__"]
    out = send(graph, Command(resume=approve(pending, by="alice")), path)
    assert "__interrupt__" not in out
    assert lines(effects) == ["push feature/login", "note pushed it"]
    assert sorted(tool_messages(out)) == [
        ("c1", "success", "pushed feature/login"),
        ("c2", "success", "noted pushed it"),
    ]
    assert recorded(store) == [
        (0, "langgraph tool call c1", "done"),
        (1, "langgraph tool call c2", "done"),
    ]
    assert [e.type for e in store.list_events(RUN)].count("step.tool_started") == 2
    assert out["messages"][-1].content == "done"


@pytest.mark.parametrize("path", PATHS)
def test_under_send_after_a_rejection_the_held_note_never_runs(
    database: str, tmp_path: Path, path: str
) -> None:
    graph, store, effects = build_prebuilt(
        tmp_path, [push_then_note(), AIMessage("ok, not pushing")], database=database
    )
    (pending,) = send(graph, GO, path)["__interrupt__"]
    out = send(graph, Command(resume=reject(pending, by="alice", note="not today")), path)
    assert lines(effects) == []
    assert sorted(tool_messages(out)) == [
        ("c1", "error", "Denied by the policy: approval rejected: not today"),
        (
            "c2",
            "error",
            f"Not run: the agentrt run {RUN} ended (CANCELLED, approval_rejected: not today) on an "
            "earlier call of this message; no tool runs in this turn again",
        ),
    ]
    assert recorded(store) == [(0, "langgraph tool call c1", "failed")]
    assert out["messages"][-1].content == "ok, not pushing"
    assert store.verify_events().intact


@pytest.mark.parametrize("path", PATHS)
def test_under_send_a_call_that_ran_before_the_waiting_one_is_not_waited_for_on_resume(
    database: str, tmp_path: Path, path: str
) -> None:
    """[note, push, note]: the first note's task finishes (LangGraph keeps its answer and does
    not run it again); on resume the second note waits only for the push."""
    script = [
        AIMessage(
            "",
            tool_calls=[
                call("write_note", "c1", text="before"),
                call("push_branch", "c2", branch="b"),
                call("write_note", "c3", text="after"),
            ],
        ),
        AIMessage("done"),
    ]
    graph, store, effects = build_prebuilt(tmp_path, script, database=database)
    (pending,) = send(graph, GO, path)["__interrupt__"]
    assert (pending.value["tool_call_id"], pending.value["held"]) == ("c2", ["c3"])
    assert lines(effects) == ["note before"]
    out = send(graph, Command(resume=approve(pending, by="alice")), path)
    assert lines(effects) == ["note before", "push b", "note after"]
    assert recorded(store) == [
        (0, "langgraph tool call c1", "done"),
        (1, "langgraph tool call c2", "done"),
        (2, "langgraph tool call c3", "done"),
    ]
    assert out["messages"][-1].content == "done"


@pytest.mark.parametrize("path", PATHS)
def test_under_send_a_call_sent_in_a_later_superstep_is_not_waited_for(
    database: str, tmp_path: Path, path: str
) -> None:
    """A graph of its own sends [note c1, note c2] last call first, one superstep each: c2
    does not wait for c1 (not sent in its superstep); each runs once, in the graph's order."""
    store = agentrt.open_store(database)
    effects = tmp_path / "effects.log"
    effects.touch()
    node = gated_tool_node(
        make_tools(effects), store=store, policy=agentrt.default_policy(), classifications=CLASSES
    )
    script = [
        AIMessage(
            "",
            tool_calls=[call("write_note", "c1", text="one"), call("write_note", "c2", text="two")],
        ),
        AIMessage("done"),
    ]

    def agent(state: MessagesState) -> dict[str, Any]:
        turn = sum(isinstance(m, AIMessage) for m in state["messages"])
        return {"messages": [script[turn]]}

    def last_unanswered(state: MessagesState) -> Any:
        messages = state["messages"]
        (ai,) = [m for m in messages if isinstance(m, AIMessage) and m.tool_calls][-1:]
        answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
        pending = [c for c in ai.tool_calls if c["id"] not in answered]
        if not pending:
            return "agent"
        packet = {"__type": "tool_call_with_context", "tool_call": pending[-1], "state": state}
        return [Send("tools", packet)]

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges(
        "agent", lambda s: last_unanswered(s) if s["messages"][-1].tool_calls else END
    )
    builder.add_conditional_edges("tools", last_unanswered)
    graph = builder.compile(checkpointer=InMemorySaver())
    outcome: list[Any] = []
    worker = threading.Thread(target=lambda: outcome.append(send(graph, GO, path)), daemon=True)
    worker.start()
    worker.join(60)  # a guard only: the graph answers at once, or hangs for good
    assert not worker.is_alive(), "the call sent first waited for one sent later"
    (out,) = outcome
    assert out["messages"][-1].content == "done"
    assert lines(effects) == ["note two", "note one"]
    assert recorded(store) == [
        (0, "langgraph tool call c2", "done"),
        (1, "langgraph tool call c1", "done"),
    ]


NOTES = AIMessage(
    "", tool_calls=[call("write_note", "c1", text="one"), call("write_note", "c2", text="two")]
)


def sending(
    tmp_path: Path,
    dispatch: Callable[[MessagesState], Any],
    database: str | None = None,
    **nodes: Any,
) -> tuple[Any, agentrt.Store, Path]:
    """A graph of its own: the model answers NOTES then "done"; `dispatch` sends its calls
    to the gated node "tools" (and to `nodes`); the calls' answers go back to the model.
    Its store is on `database` when given, else a file in `tmp_path`."""
    store = agentrt.open_store(database or tmp_path / "runs.db")
    effects = tmp_path / "effects.log"
    effects.touch()
    node = gated_tool_node(
        make_tools(effects), store=store, policy=agentrt.default_policy(), classifications=CLASSES
    )
    script = [NOTES, AIMessage("done")]

    def agent(state: MessagesState) -> dict[str, Any]:
        turn = sum(isinstance(m, AIMessage) for m in state["messages"])
        return {"messages": [script[turn]]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    for name, action in nodes.items():
        builder.add_node(name, action)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", dispatch)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=InMemorySaver()), store, effects


@pytest.mark.timeout(30, method="thread")  # without the fix the graph call waits for good
def test_under_send_a_call_waiting_for_a_task_langgraph_cancelled_is_held_not_left_blocked(
    database: str,
    tmp_path: Path,
) -> None:
    """A graph of its own sends [note c2, a failing node, a busy node, note c1] on two threads
    (`max_concurrency`): c2 starts and waits for c1; the failing node fails, the busy node
    takes its thread until c1's task ends, and LangGraph cancels c1's task before it starts.
    c2 is held (nothing recorded or run) instead of waiting for good; the graph raises the
    node's error, and going on from the checkpoint runs both notes once, in order."""
    failing = [True]

    def fail(_: Any) -> dict[str, Any]:
        if failing[0]:
            raise RuntimeError("the other node failed")
        return {}

    def busy(_: Any, config: RunnableConfig) -> dict[str, Any]:
        """Holds the second thread until c1's task ended (LangGraph's futures of the superstep)."""
        futures = config["configurable"]["__pregel_call"].keywords["futures"]()
        # A bound, not a timing: should LangGraph never submit c1's task, the node
        # gives its thread back and the test fails on what was run, instead of a
        # thread spinning for good in the worker.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = [f for f, t in list(futures.items()) if t and t.input.get("tool_call")]
            c1 = [f for f in found if futures[f].input["tool_call"]["id"] == "c1"]
            if c1:
                concurrent.futures.wait(c1, timeout=60)
                return {}
            time.sleep(0.01)  # c1's task is not submitted yet
        return {}

    def dispatch(state: MessagesState) -> Any:
        if not state["messages"][-1].tool_calls:
            return END
        packets = [
            {"__type": "tool_call_with_context", "tool_call": c, "state": state}
            for c in NOTES.tool_calls
        ]
        return [
            Send("tools", packets[1]),
            Send("fail", {}),
            Send("busy", {}),
            Send("tools", packets[0]),
        ]

    graph, store, effects = sending(tmp_path, dispatch, fail=fail, busy=busy, database=database)
    config: Any = {**CONFIG, "max_concurrency": 2}
    with pytest.raises(RuntimeError, match="the other node failed"):
        graph.invoke(GO, config)
    assert lines(effects) == []
    assert recorded(store) == []
    failing[0] = False
    out = graph.invoke(None, config)
    assert out["messages"][-1].content == "done"
    assert lines(effects) == ["note one", "note two"]
    assert recorded(store) == [
        (0, "langgraph tool call c1", "done"),
        (1, "langgraph tool call c2", "done"),
    ]


@pytest.mark.timeout(30, method="thread")  # without the bound it waits for good
@pytest.mark.parametrize("path", PATHS)
def test_under_send_calls_sent_later_call_first_on_too_few_threads_are_refused_not_hung(
    database: str, tmp_path: Path, path: str
) -> None:
    """A graph of its own sends [note c2, note c1] one task at a time (`max_concurrency=1`):
    c2 takes the only place and waits for c1, whose task cannot start. Refused with
    `ConfigError` naming both calls, nothing recorded or run; going on with two at a time
    runs both notes once, in the message's order."""

    def dispatch(state: MessagesState) -> Any:
        if not state["messages"][-1].tool_calls:
            return END
        return [
            Send("tools", {"__type": "tool_call_with_context", "tool_call": c, "state": state})
            for c in reversed(NOTES.tool_calls)
        ]

    graph, store, effects = sending(tmp_path, dispatch, database=database)
    with pytest.raises(agentrt.ConfigError, match="tool call c2 waits for tool call c1"):
        send(graph, GO, path, {**CONFIG, "max_concurrency": 1})
    assert lines(effects) == []
    assert recorded(store) == []
    out = send(graph, None, path, {**CONFIG, "max_concurrency": 2})
    assert out["messages"][-1].content == "done"
    assert lines(effects) == ["note one", "note two"]
    assert recorded(store) == [
        (0, "langgraph tool call c1", "done"),
        (1, "langgraph tool call c2", "done"),
    ]


@pytest.mark.parametrize("path", PATHS)
def test_under_send_a_graph_dropped_after_its_interrupt_frees_its_node_and_store(
    database: str, tmp_path: Path, path: str
) -> None:
    """The calls of one message sent as tasks share one execution until their superstep is
    gone; what drops it then holds the node only weakly, so the interrupt's traceback (its
    frames reach the superstep) does not keep the node, its Gate and its store (on
    PostgreSQL, a connection) alive once the graph is dropped."""
    graph, store, _ = build_prebuilt(
        tmp_path, [push_then_note(), AIMessage("done")], database=database
    )
    assert send(graph, GO, path)["__interrupt__"]
    gone = weakref.ref(store)
    store.close()
    del graph, store
    assert freed(gone)  # a pool thread may still be letting go of its task
