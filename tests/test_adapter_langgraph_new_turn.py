"""A new turn on a thread whose earlier turn waits for a person (agentrt.adapters.langgraph).

LangGraph drops a pending interrupt when the thread is sent a new message, so
the earlier turn's call could never be carried out once a person approved it.
The new turn's first tool call is refused (`EarlierTurnWaitsError`) before
anything of it is recorded or run; once that turn is ended (`agentrt reject` /
`agentrt cancel`), `invoke(None)` runs the refused tool node again and the new
turn goes on. A new turn that calls no tool is refused the same way at its end
(`turn_end_node`), and goes on the same way. Real LangGraph graphs driven by
LangChain's fake chat model, a real store. The crash case (a turn cut off in a side effect) is
`test_adapter_langgraph.py::test_a_turn_cut_off_in_a_side_effect_is_not_rerun_and_the_next_turn_waits_for_its_end`.

Every test that touches a store takes `database` and runs on SQLite and on PostgreSQL
(issue 21 item 5).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("langgraph.prebuilt", reason="needs agentrt[langgraph]")

from langchain_core.messages import AIMessage

import agentrt
from agentrt.adapters.langgraph import EarlierTurnWaitsError, run_id_for
from support.adapters.langgraph_graphs import (
    CONFIG,
    RUN,
    build,
    build_ending,
    call,
    go,
    lines,
    send,
    tool_messages,
)

NEXT = run_id_for("thread-1", "turn-2")


def waiting_then_new_turn(
    tmp_path: Path, path: str, database: str | None = None
) -> tuple[object, agentrt.Store, Path]:
    """Turn 1's push waits for a person; the thread is sent a new message instead."""
    script = [
        AIMessage("", tool_calls=[call("push_branch", "c1", branch="feature/login")]),
        AIMessage("", tool_calls=[call("write_note", "c2", text="n")]),
        AIMessage("noted"),
    ]
    graph, store, effects = build(tmp_path, script, database=database)
    (pending,) = send(graph, go(), path)["__interrupt__"]
    assert pending.value["run_id"] == RUN
    return graph, store, effects


def record(store: agentrt.Store) -> tuple[object, ...]:
    runs = [(r.id, r.status) for r in store.list_runs()]
    steps = [(s.id, s.status) for s in store.list_steps(RUN)]
    approvals = [(a.id, a.status) for a in store.list_approvals(RUN)]
    return runs, steps, approvals, len(store.list_events(RUN))


@pytest.mark.parametrize("path", ["async", "sync"])
def test_a_new_turn_is_refused_while_the_earlier_turn_waits_for_a_person(
    database: str, tmp_path: Path, path: str
) -> None:
    graph, store, effects = waiting_then_new_turn(tmp_path, path, database=database)
    before = record(store)
    (approval,) = store.pending_approvals(RUN)
    with pytest.raises(EarlierTurnWaitsError) as refused:
        send(graph, go("turn-2", "write a note instead"), path)
    err = refused.value
    assert isinstance(err, agentrt.RunStateError)
    assert (err.run_id, err.approval_id, err.approval_hash) == (RUN, approval.id, approval.hash)
    assert str(err) == (
        f"the thread's earlier turn (agentrt run {RUN}) waits on call 'c1' of 'push_branch', "
        f"pending on approval {approval.id} ({approval.kind}, hash {approval.hash}); this "
        "turn's call 'c2' of 'write_note' was refused before anything of it was recorded or "
        "run (LangGraph dropped that turn's interrupt, so nothing would carry its call out): "
        "answer that turn's interrupt with Command(resume=...) from a checkpoint that still "
        f"holds it, or end that turn with `agentrt reject {RUN}` (or `agentrt cancel {RUN}`; "
        "nothing of it runs) and invoke the graph again (invoke(None) runs this tool node again)"
    )
    assert record(store) == before  # nothing written by the refusal
    assert [r.id for r in store.list_runs()] == [RUN]  # the new turn has no run
    assert store.get_run(RUN).status == "WAITING_FOR_APPROVAL"
    assert lines(effects) == []


@pytest.mark.parametrize("path", ["async", "sync"])
def test_a_new_turn_is_refused_while_the_earlier_turns_approved_call_is_not_carried_out(
    database: str, tmp_path: Path, path: str
) -> None:
    graph, store, effects = waiting_then_new_turn(tmp_path, path, database=database)
    (approval,) = store.pending_approvals(RUN)
    with pytest.raises(EarlierTurnWaitsError):
        send(graph, go("turn-2", "write a note instead"), path)
    agentrt.approve(store, RUN, approval.id, "alice", shown_hash=approval.hash)
    before = record(store)
    with pytest.raises(EarlierTurnWaitsError) as refused:
        send(graph, None, path)  # LangGraph's way on: the refused tool node again
    message = str(refused.value)
    assert (
        f"waits on call 'c1' of 'push_branch', approved by alice on approval {approval.id} "
        f"({approval.kind}, hash {approval.hash}) and not carried out;"
    ) in message
    assert (
        f"end that turn with `agentrt cancel {RUN}` (nothing of it runs) and invoke the graph again"
    ) in message
    assert "agentrt reject" not in message  # an approved call is ended by a cancel
    assert record(store) == before
    assert lines(effects) == []

    agentrt.cancel(store, RUN, "alice", "the user moved on")
    out = send(graph, None, path)
    assert tool_messages(out) == [("c2", "success", "noted n")]
    assert lines(effects) == ["note n"]  # the push never ran; the note ran once
    assert store.get_run(RUN).status == "CANCELLED"


@pytest.mark.parametrize("path", ["async", "sync"])
def test_after_the_earlier_turn_is_rejected_the_new_turn_goes_on_and_runs_its_call_once(
    database: str, tmp_path: Path, path: str
) -> None:
    graph, store, effects = waiting_then_new_turn(tmp_path, path, database=database)
    (approval,) = store.pending_approvals(RUN)
    with pytest.raises(EarlierTurnWaitsError):
        send(graph, go("turn-2", "write a note instead"), path)
    agentrt.reject(store, RUN, approval.id, "alice", shown_hash=approval.hash)
    out = send(graph, None, path)
    assert tool_messages(out) == [("c2", "success", "noted n")]
    assert out["messages"][-1].content == "noted"
    assert lines(effects) == ["note n"]
    again = send(graph, None, path)  # nothing left to do: nothing runs again
    assert lines(effects) == ["note n"]
    assert tool_messages(again) == [("c2", "success", "noted n")]
    assert store.get_run(RUN).status == "CANCELLED"
    (step,) = store.list_steps(NEXT)
    assert step.status == "done"
    assert step.decision is not None and step.decision.tool == "write_note"
    assert [a.status for a in store.list_approvals(RUN)] == ["rejected"]
    assert graph.get_state(CONFIG).next == ()


# -- a new turn that calls no tool: its end (`turn_end_node`) is refused the same way --


def answer_while_waiting(
    tmp_path: Path, path: str, database: str | None = None
) -> tuple[object, agentrt.Store, Path]:
    """Turn 1's push waits for a person; turn 2's model answers with no tool call.

    (The prebuilt agent never gets this far: it refuses a new message while a
    tool call of the state has no answer, before its model or `post_model_hook`.)
    """
    script = [
        AIMessage("", tool_calls=[call("push_branch", "c1", branch="feature/login")]),
        AIMessage("fine, no push"),
    ]
    graph, store, effects, _ = build_ending(tmp_path, script, database=database)
    (pending,) = send(graph, go(), path)["__interrupt__"]
    assert pending.value["run_id"] == RUN
    return graph, store, effects


def end_refusal(approval: agentrt.Approval) -> str:
    return (
        f"the thread's earlier turn (agentrt run {RUN}) waits on call 'c1' of 'push_branch', "
        f"pending on approval {approval.id} ({approval.kind}, hash {approval.hash}); this "
        "turn's end (the model's answer, no tool call) was refused before anything of it was "
        "recorded or run (LangGraph dropped that turn's interrupt, so nothing would carry its "
        "call out): answer that turn's interrupt with Command(resume=...) from a checkpoint "
        f"that still holds it, or end that turn with `agentrt reject {RUN}` (or `agentrt cancel "
        f"{RUN}`; nothing of it runs) and invoke the graph again (invoke(None) runs this end "
        "node again)"
    )


@pytest.mark.parametrize("ending", ["reject", "cancel"])
@pytest.mark.parametrize("path", ["async", "sync"])
def test_a_new_turn_that_calls_no_tool_cannot_end_while_the_earlier_turn_waits(
    database: str, tmp_path: Path, path: str, ending: str
) -> None:
    graph, store, effects = answer_while_waiting(tmp_path, path, database=database)
    (approval,) = store.pending_approvals(RUN)
    before = record(store)
    with pytest.raises(EarlierTurnWaitsError) as refused:
        send(graph, go("turn-2", "never mind"), path)
    err = refused.value
    assert (err.run_id, err.approval_id, err.approval_hash) == (RUN, approval.id, approval.hash)
    assert str(err) == end_refusal(approval)
    assert record(store) == before  # nothing written by the refusal
    with pytest.raises(EarlierTurnWaitsError):
        send(graph, None, path)  # the end node again: still refused, still nothing written
    assert record(store) == before

    if ending == "reject":
        agentrt.reject(store, RUN, approval.id, "alice", shown_hash=approval.hash)
    else:
        agentrt.cancel(store, RUN, "alice", "the user moved on")
    out = send(graph, None, path)  # the end node runs again and the turn ends
    assert out["messages"][-1].content == "fine, no push"
    assert graph.get_state(CONFIG).next == ()
    assert [r.id for r in store.list_runs()] == [RUN]  # the new turn called no tool: no run
    assert store.get_run(RUN).status == "CANCELLED"
    if ending == "reject":
        assert [a.status for a in store.list_approvals(RUN)] == ["rejected"]
    assert lines(effects) == []  # the push never ran
