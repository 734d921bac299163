"""LangGraph's tool calls behind the Gate: the gated ToolNode (agentrt.adapters.langgraph).

Real LangGraph graphs (StateGraph, ToolNode, checkpointers) driven by
LangChain's own fake chat model, real LangChain tools writing real effects, a
real store. Each tool appends a line to a file when it really runs, so a test
counts executions, not calls of ours.

Every test that touches a store takes `database` and runs on SQLite and on PostgreSQL
(issue 21 item 5); the children open the store named in WORKDIR/database, and the
`agentrt` command is given it with `--db`.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import weakref
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("langgraph.prebuilt", reason="needs agentrt[langgraph]")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

import agentrt
from agentrt.adapters.langgraph import (
    Classification,
    EarlierTurnWaitsError,
    RunEndedError,
    UnclassifiedToolError,
    approve,
    decided,
    gated_tool_node,
    reject,
    run_id_for,
)
from support import forkserver
from support.adapters import assert_table_printed_in_docs
from support.adapters.langgraph_graphs import (
    CLASSES,
    CONFIG,
    PRELOAD,
    ROOT,
    RUN,
    TURN,
    ask,
    build,
    call,
    child,
    kill_inside_the_tool,
    lines,
    make_tools,
    push_script,
    tool_messages,
)
from support.approvals import a_person_decides, assert_the_persons_decision_stands
from support.freed import freed


def events(store: agentrt.Store) -> list[str]:
    return [e.type for e in store.list_events(RUN)]


# -- allow, deny, schema --------------------------------------------------------


def test_an_allowed_call_runs_once_and_its_decision_is_recorded_verbatim(
    database: str, tmp_path: Path
) -> None:
    graph, store, effects = build(
        tmp_path,
        [AIMessage("", tool_calls=[call("lookup", "c1", q="x")]), AIMessage("done")],
        database=database,
    )
    out = ask(graph)
    assert tool_messages(out) == [("c1", "success", "found x")]
    assert lines(effects) == ["lookup x"]
    (step,) = store.list_steps(RUN)
    assert step.status == "done"
    assert step.decision is not None
    assert step.decision.to_json() == {
        "kind": "tool_call",
        "tool": "lookup",
        "args": {"q": "x"},
        "reason": "langgraph tool call c1",
    }
    assert step.observation is not None and step.observation.content == "found x"
    assert store.get_run(RUN).status == "RUNNING"  # the thread goes on; its run with it
    assert store.lease(RUN).owner == ""  # released between node executions
    assert store.verify_events().intact


def test_a_denied_call_comes_back_to_the_model_as_an_error_tool_message(
    database: str, tmp_path: Path
) -> None:
    graph, store, effects = build(
        tmp_path,
        [AIMessage("", tool_calls=[call("delete_branch", "c1", branch="main")]), AIMessage("ok")],
        database=database,
    )
    out = ask(graph)
    assert tool_messages(out) == [
        ("c1", "error", "Denied by the policy: destructive tools are denied by the default policy")
    ]
    assert lines(effects) == []
    (step,) = store.list_steps(RUN)
    assert (step.status, step.observation and step.observation.kind) == ("failed", "policy_denied")
    assert out["messages"][-1].content == "ok"  # the model heard it and went on


def test_a_call_outside_the_tool_schema_never_runs_and_the_model_hears_why(
    database: str, tmp_path: Path
) -> None:
    graph, store, effects = build(
        tmp_path,
        [AIMessage("", tool_calls=[call("lookup", "c1", q=7)]), AIMessage("ok")],
        database=database,
    )
    out = ask(graph)
    ((call_id, status, content),) = tool_messages(out)
    assert (call_id, status) == ("c1", "error")
    assert content.startswith("Invalid call: ") and "q" in content
    assert lines(effects) == []
    (step,) = store.list_steps(RUN)
    assert step.observation is not None and step.observation.kind == "invalid_decision"
    assert step.decision is not None and step.decision.args == {"q": 7}  # recorded as sent


def test_a_tool_that_raises_is_recorded_as_a_tool_error_and_the_model_hears_it(
    database: str,
    tmp_path: Path,
) -> None:
    graph, store, effects = build(
        tmp_path,
        [AIMessage("", tool_calls=[call("flaky", "c1", q="x")]), AIMessage("ok")],
        database=database,
    )
    out = ask(graph)
    assert tool_messages(out) == [
        ("c1", "error", "Error: ConnectionError: remote closed the connection for x")
    ]
    assert lines(effects) == ["flaky x"]
    (step,) = store.list_steps(RUN)
    assert step.observation is not None
    assert (step.observation.kind, step.observation.content["failure"]) == ("tool_error", "error")


def test_each_thread_is_a_run_of_its_own_and_the_tool_sees_its_threads_config(
    database: str,
    tmp_path: Path,
) -> None:
    from langgraph.config import get_config

    seen: list[Any] = []

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        seen.append((q, get_config()["configurable"]["thread_id"]))
        return "ok"

    graph, _, _ = build(
        tmp_path,
        [AIMessage("", tool_calls=[call("lookup", "c1", q="x")]), AIMessage("done")],
        node=lambda tools: gated_tool_node(
            [lookup, *tools[1:]],
            store=agentrt.open_store(database),
            policy=agentrt.default_policy(),
            classifications=CLASSES,
        ),
        database=database,
    )
    ask(graph)
    graph.invoke(
        {"messages": [HumanMessage("again", id="again")]}, {"configurable": {"thread_id": "t2"}}
    )
    assert seen == [("x", "thread-1"), ("x", "t2")]
    store = agentrt.open_store(database)
    assert sorted(r.id for r in store.list_runs()) == sorted([RUN, run_id_for("t2", "again")])


def test_an_unclassified_tool_is_refused_when_the_node_is_built(
    database: str, tmp_path: Path
) -> None:
    store = agentrt.open_store(database)
    tools = make_tools(tmp_path / "effects.log")
    with pytest.raises(UnclassifiedToolError, match=r"no classification for tool 'delete_branch'"):
        gated_tool_node(
            tools,
            store=store,
            policy=agentrt.default_policy(),
            classifications={k: v for k, v in CLASSES.items() if k != "delete_branch"},
        )
    assert store.list_runs() == []


def test_without_langgraph_the_adapter_says_which_extra_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['langgraph'] = None\n"
        "try:\n"
        "    import agentrt.adapters.langgraph\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (
        "agentrt.adapters.langgraph needs LangGraph: pip install 'agentrt[langgraph]'"
    )


def test_a_graph_without_a_thread_id_is_refused_before_anything_runs(
    database: str, tmp_path: Path
) -> None:
    graph, store, effects = build(
        tmp_path,
        [AIMessage("", tool_calls=[call("lookup", "c1", q="x")]), AIMessage("done")],
        saver=None,
        database=database,
    )
    with pytest.raises(agentrt.ConfigError, match="thread_id"):
        asyncio.run(graph.ainvoke({"messages": [HumanMessage("go", id=TURN)]}))
    assert lines(effects) == [] and store.list_runs() == []


# -- approvals ----------------------------------------------------------------


def test_require_approval_surfaces_as_an_interrupt_showing_the_request_and_its_hash(
    database: str,
    tmp_path: Path,
) -> None:
    graph, store, effects = build(tmp_path, push_script(), database=database)
    out = ask(graph)
    (pending,) = out["__interrupt__"]
    (approval,) = store.pending_approvals(RUN)
    value = pending.value
    assert value["type"] == "agentrt.approval"
    assert (value["run_id"], value["approval_id"], value["hash"]) == (
        RUN,
        approval.id,
        approval.hash,
    )
    assert value["hash"] == agentrt.approval_hash(
        value["kind"], value["capability"], value["presentation"], value["request"]
    )
    assert value["request"]["args"] == {"branch": "feature/login"}
    assert (value["tool"], value["tool_call_id"], value["status"]) == (
        "push_branch",
        "c1",
        "pending",
    )
    assert approval.hash in value["text"] and "feature/login" in value["text"]
    assert lines(effects) == []
    assert store.get_run(RUN).status == "WAITING_FOR_APPROVAL"


def test_approving_through_the_resume_runs_the_request_once(tmp_path: Path, database: str) -> None:
    graph, store, effects = build(tmp_path, push_script(), database=database)
    (pending,) = ask(graph)["__interrupt__"]
    out = ask(graph, Command(resume=approve(pending, by="alice", note="fine")))
    assert tool_messages(out) == [("c1", "success", "pushed feature/login")]
    assert lines(effects) == ["push feature/login"]
    (approval,) = store.list_approvals(RUN)
    assert (approval.status, approval.decided_by, approval.note) == ("approved", "alice", "fine")
    assert out["messages"][-1].content == "pushed"


def test_a_resume_naming_another_hash_is_refused_and_the_interrupt_stays_open(
    database: str,
    tmp_path: Path,
) -> None:
    graph, store, effects = build(tmp_path, push_script(), database=database)
    (pending,) = ask(graph)["__interrupt__"]
    forged = {**approve(pending, by="mallory"), "hash": "0" * 64}
    with pytest.raises(agentrt.ApprovalChangedError, match="a decision for another request"):
        ask(graph, Command(resume=forged))
    with pytest.raises(agentrt.ApprovalChangedError, match="does not answer approval"):
        ask(graph, Command(resume="yes"))
    assert lines(effects) == []
    (approval,) = store.list_approvals(RUN)
    assert approval.status == "pending"
    assert len(graph.get_state(CONFIG).interrupts) == 1  # LangGraph saved neither answer
    out = ask(graph, Command(resume=approve(pending, by="alice")))
    assert lines(effects) == ["push feature/login"]
    assert tool_messages(out) == [("c1", "success", "pushed feature/login")]


def test_a_resume_value_is_built_only_from_an_agentrt_interrupt() -> None:
    with pytest.raises(agentrt.ConfigError, match="not an agentrt approval"):
        approve({"action": "push"}, by="alice")
    value = {"type": "agentrt.approval", "run_id": RUN, "approval_id": "a" * 32, "hash": "h"}
    assert reject(value, by="alice", note="no") == {
        "type": "agentrt.approval",
        "run_id": RUN,
        "approval_id": "a" * 32,
        "hash": "h",
        "decision": "reject",
        "by": "alice",
        "note": "no",
    }
    assert decided(value)["decision"] == "decided" and "by" not in decided(value)


def test_approving_through_agentrt_then_resuming_with_decided_runs_it_once(
    database: str, tmp_path: Path
) -> None:
    graph, store, effects = build(tmp_path, push_script(), database=database)
    (pending,) = ask(graph)["__interrupt__"]
    with pytest.raises(agentrt.RunStateError, match="still pending"):
        ask(graph, Command(resume=decided(pending)))
    agentrt.approve(
        store, RUN, pending.value["approval_id"], by="bob", shown_hash=pending.value["hash"]
    )
    out = ask(graph, Command(resume=decided(pending)))
    assert tool_messages(out) == [("c1", "success", "pushed feature/login")]
    assert lines(effects) == ["push feature/login"]


def test_a_rejection_tells_the_model_ends_the_run_and_the_call_never_runs(
    database: str, tmp_path: Path
) -> None:
    script = [*push_script()[:1], AIMessage("", tool_calls=[call("lookup", "c2", q="x")])]
    graph, store, effects = build(tmp_path, script, database=database)
    (pending,) = ask(graph)["__interrupt__"]
    with pytest.raises(RunEndedError, match="CANCELLED \\(approval_rejected") as ended:
        ask(graph, Command(resume=reject(pending, by="alice", note="not today")))
    assert lines(effects) == []  # neither the push nor the lookup the model tried next
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("CANCELLED", "approval_rejected")
    assert ended.value.run.id == RUN
    messages = graph.get_state(CONFIG).values["messages"]
    assert [
        (m.tool_call_id, m.status, m.content) for m in messages if isinstance(m, ToolMessage)
    ] == [("c1", "error", "Denied by the policy: approval rejected: not today")]


@pytest.mark.parametrize("person", ["approves", "rejects", "cancels"])
def test_a_person_deciding_while_the_resumes_answer_is_carried_stands_and_is_told(
    database: str, tmp_path: Path, person: str
) -> None:
    """A person decides between the node's last look at the approval (still pending) and its
    carrying of the resume's answer (here an approval by another): their decision stands,
    the answer is not carried, and the turn goes on as if they had decided first, never
    with a bare store error (decision 0118). Driven at the window: the look hands back what
    it read and the person decides right after it."""
    graph, store, effects = build(tmp_path, push_script(), database=database)
    (pending,) = ask(graph)["__interrupt__"]
    read, raced = store.get_approval, []

    def read_then_a_person_decides(run_id: str, approval_id: str) -> agentrt.Approval:
        seen = read(run_id, approval_id)
        if not raced and sys._getframe(1).f_code.co_name == "_answer":
            raced.append(seen)
            a_person_decides(store, RUN, seen, person)
        return seen

    store.get_approval = read_then_a_person_decides  # type: ignore[method-assign]

    out = ask(graph, Command(resume=approve(pending, by="dave", note="mine")))

    (waiting,) = raced
    told = {
        "approves": ("success", "pushed feature/login"),
        "rejects": ("error", "Denied by the policy: approval rejected: not today"),
        "cancels": ("error", "Not run: cancelled by carol"),
    }[person]
    assert tool_messages(out) == [("c1", *told)]
    assert out["messages"][-1].content == "pushed"  # the model answered; the turn went on
    assert lines(effects) == (["push feature/login"] if person == "approves" else [])
    assert_the_persons_decision_stands(store, RUN, waiting, person)
    (approval,) = store.list_approvals(RUN)
    assert (approval.id, approval.hash) == (pending.value["approval_id"], pending.value["hash"])
    expected = {
        "approves": ("RUNNING", "done"),
        "rejects": ("CANCELLED", "failed"),
        "cancels": ("CANCELLED", "failed"),
    }[person]
    assert store.get_run(RUN).status == expected[0]
    assert [s.status for s in store.list_steps(RUN)] == [expected[1]]
    recorded = events(store)
    assert recorded.count("approval.decided") == (0 if person == "cancels" else 1)  # alice's
    assert recorded.count("step.tool_started") == (1 if person == "approves" else 0)
    assert store.verify_events().intact


def test_an_approval_answered_after_its_time_ran_out_ends_the_run_and_nothing_runs(
    database: str,
    tmp_path: Path,
) -> None:
    clock = [datetime(2026, 12, 1, 9, 0, tzinfo=UTC)]

    def now() -> datetime:
        return clock[0]

    graph, store, effects = build(
        tmp_path,
        push_script(),
        now=now,
        limits=agentrt.Limits(approval_ttl=timedelta(minutes=5)),
        database=database,
    )
    (pending,) = ask(graph)["__interrupt__"]
    clock[0] += timedelta(minutes=6)
    with pytest.raises(RunEndedError, match="approval_expired"):
        ask(graph, Command(resume=approve(pending, by="alice")))
    assert lines(effects) == []
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("CANCELLED", "approval_expired")


def test_a_call_changed_in_the_graph_state_after_approval_is_refused(
    database: str, tmp_path: Path
) -> None:
    graph, _, effects = build(tmp_path, push_script(), database=database)
    (pending,) = ask(graph)["__interrupt__"]
    state = graph.get_state(CONFIG)
    ai = state.values["messages"][-1]
    changed = ai.model_copy(update={"tool_calls": [call("push_branch", "c1", branch="main")]})
    graph.update_state(CONFIG, {"messages": [changed]}, as_node="agent")
    with pytest.raises(agentrt.ApprovalChangedError, match="a changed call is refused"):
        ask(graph, Command(resume=approve(pending, by="alice")))
    assert lines(effects) == []


def test_a_changed_call_names_the_approval_it_was_not_given_for(
    database: str, tmp_path: Path
) -> None:
    graph, _, _ = build(tmp_path, push_script(), database=database)
    (pending,) = ask(graph)["__interrupt__"]
    ai = graph.get_state(CONFIG).values["messages"][-1]
    changed = ai.model_copy(update={"tool_calls": [call("push_branch", "c1", branch="main")]})
    graph.update_state(CONFIG, {"messages": [changed]}, as_node="agent")
    with pytest.raises(agentrt.ApprovalChangedError) as refused:
        ask(graph, Command(resume=approve(pending, by="alice")))
    assert str(refused.value) == (
        f"tool call c1 was recorded as push_branch with other arguments (step 0 of run {RUN}, "
        f"approval {pending.value['approval_id']}); a changed call is refused, not run as the "
        "approved one"
    )


def test_a_tool_call_id_used_again_in_a_turn_for_another_request_is_answered_not_run(
    database: str,
    tmp_path: Path,
) -> None:
    """The model reuses call_0 for another note: it is not run, the model hears why, the turn
    goes on (nothing wedged, no approval blamed), and resuming the thread changes nothing."""
    script = [
        AIMessage("", tool_calls=[call("write_note", "call_0", text="a")]),
        AIMessage("", tool_calls=[call("write_note", "call_0", text="b")]),
        AIMessage("done"),
    ]
    graph, store, effects = build(tmp_path, script, database=database)
    out = ask(graph)
    reused = (
        f'Not run: tool call id call_0 was already used in this turn by write_note {{"text":"a"}} '
        f"(step 0 of agentrt run {RUN}); give each tool call of a turn an id of its own"
    )
    assert tool_messages(out) == [("call_0", "success", "noted a"), ("call_0", "error", reused)]
    assert out["messages"][-1].content == "done"
    assert lines(effects) == ["note a"]
    (step,) = store.list_steps(RUN)
    assert step.decision is not None and step.decision.args == {"text": "a"}
    assert "approval" not in reused
    again = dict(graph.invoke(None, CONFIG))  # the turn is over: no error, nothing runs
    assert again["messages"][-1].content == "done" and lines(effects) == ["note a"]
    assert len(store.list_steps(RUN)) == 1


def test_a_tool_calling_langgraphs_own_interrupt_is_refused_and_runs_once(
    database: str,
    tmp_path: Path,
) -> None:
    """A person is asked through agentrt's policy, not from inside a gated tool: LangGraph
    would run the tool again from its top on resume. The step fails with a clear error the
    model hears; the graph does not pause; the tool's work before interrupt() happened once."""
    asked: list[str] = []

    @tool
    def confirm(question: str) -> str:
        """Ask a person, LangGraph's own way."""
        asked.append(question)
        return str(interrupt({"question": question}))

    def node(tools: list[BaseTool]) -> Any:
        return gated_tool_node(
            [*tools, confirm],
            store=store,
            policy=agentrt.default_policy(),
            classifications={**CLASSES, "confirm": Classification("read_only", timeout=5)},
        )

    store = agentrt.open_store(database)
    script = [AIMessage("", tool_calls=[call("confirm", "c1", question="ok?")]), AIMessage("ok")]
    graph, _, _ = build(tmp_path, script, node=node, database=database)
    for path in ("async", "blocking"):
        config = {"configurable": {"thread_id": path}}
        opener = {"messages": [HumanMessage("go", id=TURN)]}
        out = dict(
            asyncio.run(graph.ainvoke(opener, config))
            if path == "async"
            else graph.invoke(opener, config)
        )
        assert "__interrupt__" not in out
        message = (
            "Error: InterruptRefusedError: tool confirm called LangGraph's interrupt(), which a "
            "gated tool may not do (LangGraph would run it again from its top on resume): it "
            "ran once and was stopped there, and asking a person is the agentrt policy's job "
            "(require_approval)"
        )
        assert tool_messages(out) == [("c1", "error", message)]
        assert out["messages"][-1].content == "ok"
        (step,) = store.list_steps(run_id_for(path, TURN))
        assert step.observation is not None
        assert (step.status, step.observation.kind) == ("failed", "tool_error")
    assert asked == ["ok?", "ok?"]  # once per thread


# -- LangGraph's node replay (langgraph issue 7780) ------------------------------


def two_calls_script() -> list[AIMessage]:
    return [
        AIMessage(
            "",
            tool_calls=[
                call("write_note", "c1", text="before"),
                call("push_branch", "c2", branch="feature/login"),
            ],
        ),
        AIMessage("both done"),
    ]


def test_on_resume_a_call_that_ran_before_the_interrupt_gets_its_recorded_result(
    database: str,
    tmp_path: Path,
) -> None:
    graph, store, effects = build(tmp_path, two_calls_script(), database=database)
    (pending,) = ask(graph)["__interrupt__"]
    assert lines(effects) == ["note before"]
    out = ask(graph, Command(resume=approve(pending, by="alice")))
    # LangGraph ran the tool node again from its top; the first call was not run again.
    assert lines(effects) == ["note before", "push feature/login"]
    assert tool_messages(out) == [
        ("c1", "success", "noted before"),
        ("c2", "success", "pushed feature/login"),
    ]
    assert [(s.decision and s.decision.tool, s.status) for s in store.list_steps(RUN)] == [
        ("write_note", "done"),
        ("push_branch", "done"),
    ]
    assert events(store).count("step.tool_started") == 2


def test_the_same_replay_on_the_blocking_path_does_not_run_the_first_call_again(
    database: str,
    tmp_path: Path,
) -> None:
    graph, _, effects = build(tmp_path, two_calls_script(), database=database)
    out = graph.invoke({"messages": [HumanMessage("go", id=TURN)]}, CONFIG)
    (pending,) = out["__interrupt__"]
    out = graph.invoke(Command(resume=approve(pending, by="alice")), CONFIG)
    assert lines(effects) == ["note before", "push feature/login"]
    assert [m[0] for m in tool_messages(out)] == ["c1", "c2"]


def test_without_the_gate_langgraph_runs_the_first_call_again_on_resume(
    database: str, tmp_path: Path
) -> None:
    """What the gate prevents, measured with LangGraph's own interrupt in a tool wrapper."""
    from langgraph.types import interrupt

    def ask_first(request: Any, execute: Any) -> Any:
        if request.tool_call["name"] == "push_branch":
            interrupt({"approve": request.tool_call["args"]})
        return execute(request)

    graph, _, effects = build(
        tmp_path,
        two_calls_script(),
        node=lambda tools: ToolNode(tools, wrap_tool_call=ask_first),
        database=database,
    )
    graph.invoke({"messages": [HumanMessage("go", id=TURN)]}, CONFIG)
    assert lines(effects) == ["note before"]
    graph.invoke(Command(resume=True), CONFIG)
    # On resume LangGraph runs the node's calls again, in its thread pool: in either order.
    assert sorted(lines(effects)[1:]) == ["note before", "push feature/login"]


@pytest.mark.parametrize("path", ["async", "blocking"])
def test_two_approvals_in_one_node_are_answered_one_by_one_across_two_resumes(
    database: str, tmp_path: Path, path: str
) -> None:
    script = [
        AIMessage(
            "",
            tool_calls=[
                call("push_branch", "c1", branch="a"),
                call("push_branch", "c2", branch="b"),
            ],
        ),
        AIMessage("done"),
    ]
    graph, store, effects = build(tmp_path, script, database=database)

    def send(what: Any) -> dict[str, Any]:
        return ask(graph, what) if path == "async" else dict(graph.invoke(what, CONFIG))

    (first,) = send({"messages": [HumanMessage("go", id=TURN)]})["__interrupt__"]
    (second,) = send(Command(resume=approve(first, by="alice")))["__interrupt__"]
    assert {first.value["tool_call_id"], second.value["tool_call_id"]} == {"c1", "c2"}
    assert len(lines(effects)) == 1
    # The first answer again (a stale client): it decides nothing; the second stays open.
    (again,) = send(Command(resume=approve(first, by="alice")))["__interrupt__"]
    assert again.value["approval_id"] == second.value["approval_id"]
    assert [a.status for a in store.list_approvals(RUN)] == ["approved", "pending"]
    assert len(lines(effects)) == 1
    out = send(Command(resume=approve(second, by="alice")))
    assert sorted(lines(effects)) == ["push a", "push b"]
    assert sorted(m[2] for m in tool_messages(out)) == ["pushed a", "pushed b"]


# -- limits -------------------------------------------------------------------------


def test_a_limit_ends_the_turns_run_and_the_graph_with_run_ended_error(
    database: str, tmp_path: Path
) -> None:
    script = [AIMessage("", tool_calls=[call("lookup", f"c{i}", q=str(i))]) for i in range(5)]
    graph, store, effects = build(
        tmp_path, script, limits=agentrt.Limits(max_steps=2), database=database
    )
    with pytest.raises(RunEndedError, match="limit_steps") as ended:
        ask(graph)
    assert lines(effects) == ["lookup 0", "lookup 1"]
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("FAILED", "limit_steps")
    assert ended.value.run.id == RUN
    with pytest.raises(RunEndedError):  # going on with the turn: its run stays ended
        asyncio.run(graph.ainvoke(None, CONFIG))
    assert lines(effects) == ["lookup 0", "lookup 1"]


def days(n: int, *calls: dict[str, Any]) -> list[AIMessage]:
    """A script of `n` turns, each one model message making `calls` (ids made unique) then one
    answer."""
    script: list[AIMessage] = []
    for day in range(1, n + 1):
        made = [{**c, "id": f"{c['id']}-day{day}"} for c in calls]
        script += [AIMessage("", tool_calls=made), AIMessage(f"answered day {day}")]
    return script


def test_three_turns_asking_the_same_read_only_call_are_not_a_loop(
    database: str, tmp_path: Path
) -> None:
    graph, store, effects = build(
        tmp_path, days(3, call("lookup", "w", q="Paris")), database=database
    )
    for day in (1, 2, 3):
        out = ask(graph, {"messages": [HumanMessage("weather in Paris?", id=f"day-{day}")]})
        assert tool_messages(out)[-1] == (f"w-day{day}", "success", "found Paris")
        assert out["messages"][-1].content == f"answered day {day}"
    assert lines(effects) == ["lookup Paris"] * 3
    runs = [store.get_run(run_id_for("thread-1", f"day-{day}")) for day in (1, 2, 3)]
    assert [r.goal for r in runs] == [f"LangGraph thread thread-1, turn day-{d}" for d in (1, 2, 3)]
    # a turn's run ends when the next turn begins its own: one tool call, then `complete`
    assert [[s.decision and s.decision.kind for s in store.list_steps(r.id)] for r in runs] == [
        ["tool_call", "complete"],
        ["tool_call", "complete"],
        ["tool_call"],
    ]
    assert [(r.status, r.reason) for r in runs] == [("COMPLETED", "goal_completed")] * 2 + [
        ("RUNNING", "")
    ]


def test_a_next_turns_call_is_refused_while_an_earlier_turn_waits_for_a_person(
    database: str,
    tmp_path: Path,
) -> None:
    script = [
        AIMessage("", tool_calls=[call("push_branch", "c1", branch="feature/login")]),
        AIMessage("", tool_calls=[call("lookup", "c2", q="status")]),
        AIMessage("looked"),
    ]
    graph, store, effects = build(tmp_path, script, database=database)
    (pending,) = ask(graph)["__interrupt__"]
    with pytest.raises(EarlierTurnWaitsError):  # refused, not run beside it (decision 0053)
        ask(graph, {"messages": [HumanMessage("never mind, look up the status", id="turn-2")]})
    assert lines(effects) == []
    waiting = store.get_run(RUN)
    assert waiting.status == "WAITING_FOR_APPROVAL"  # not completed: a person still decides
    assert [a.status for a in store.list_approvals(RUN)] == ["pending"]
    assert pending.value["run_id"] == RUN


def test_a_thread_goes_on_past_fifty_tool_calls_over_its_turns(
    database: str, tmp_path: Path
) -> None:
    calls = [call("lookup", f"q{i}", q=str(i)) for i in range(3)]
    graph, store, effects = build(
        tmp_path, days(18, *calls), database=database
    )  # default Limits: max_steps=50
    for day in range(1, 19):
        out = ask(graph, {"messages": [HumanMessage("look up three things", id=f"day-{day}")]})
        assert [m[1] for m in tool_messages(out)[-3:]] == ["success"] * 3
    assert len(lines(effects)) == 54
    assert sorted(set(lines(effects))) == ["lookup 0", "lookup 1", "lookup 2"]
    assert len(store.list_runs()) == 18


def test_two_workers_resuming_one_thread_run_its_call_once(database: str, tmp_path: Path) -> None:
    """Worker B reads "c1 is not recorded", then waits; worker A runs c1 to the end.

    B takes the lease after A let it go: it reads the call's steps again under
    the lease, finds A's record and answers with it instead of running c1 again.
    """
    effects = tmp_path / "effects.log"
    first = AIMessage("", tool_calls=[call("write_note", "c0", text="first")])
    second = AIMessage("", tool_calls=[call("write_note", "c1", text="hi")])
    graph_a, _, _ = build(
        tmp_path, [first, AIMessage("done0"), second, AIMessage("done")], database=database
    )
    graph_b, _, _ = build(tmp_path, [second, AIMessage("done")], database=database)
    ask(graph_a, {"messages": [HumanMessage("first", id="h1")]})
    gated_b = graph_b.nodes["tools"].bound._awrap_tool_call.__self__
    read_b = gated_b._read
    b_has_read, a_is_done = threading.Event(), threading.Event()

    def read_then_wait(run_id: str, call_id: str) -> Any:
        seen = read_b(run_id, call_id)
        if call_id == "c1" and not b_has_read.is_set():
            b_has_read.set()
            assert a_is_done.wait(30)
        return seen

    gated_b._read = read_then_wait
    outcome: dict[str, Any] = {}
    worker = threading.Thread(
        target=lambda: outcome.update(ask(graph_b, {"messages": [HumanMessage("hi", id="h2")]}))
    )
    worker.start()
    assert b_has_read.wait(30)
    out_a = ask(graph_a, {"messages": [HumanMessage("hi", id="h2")]})
    a_is_done.set()
    worker.join(60)
    assert lines(effects) == ["note first", "note hi"]
    assert tool_messages(out_a)[-1] == ("c1", "success", "noted hi")
    assert tool_messages(outcome) == [("c1", "success", "noted hi")]


def test_a_worker_that_read_before_another_recorded_the_call_reads_again_under_the_lease(
    database: str,
    tmp_path: Path,
) -> None:
    """The turn's run exists: worker B reads "c1 is not recorded" in it, then waits; worker A
    records and runs c1 and lets the lease go. B attaches, reads again under the lease, finds
    A's record and answers with it: c1 ran once (the read before attaching is not enough)."""
    effects = tmp_path / "effects.log"
    script = [
        AIMessage("", tool_calls=[call("write_note", "c0", text="first")]),
        AIMessage("", tool_calls=[call("write_note", "c1", text="hi")]),
        AIMessage("done"),
    ]
    graph_a, store, _ = build(tmp_path, script, database=database)
    graph_b, _, _ = build(tmp_path, script, database=database)
    gated_b = graph_b.nodes["tools"].bound._awrap_tool_call.__self__
    read_b = gated_b._read
    b_has_read, a_is_done = threading.Event(), threading.Event()

    def read_then_wait(run_id: str, call_id: str) -> Any:
        seen = read_b(run_id, call_id)
        if call_id == "c1" and not b_has_read.is_set():
            assert seen[0] is not None and seen[1] is None  # the run exists; c1 is not in it
            b_has_read.set()
            assert a_is_done.wait(30)
        return seen

    gated_b._read = read_then_wait
    outcome: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: outcome.update(ask(graph_b)))
    worker.start()
    assert b_has_read.wait(30)
    out_a = ask(graph_a)  # c0 is B's record (answered, not run); c1 is A's to run
    a_is_done.set()
    worker.join(60)
    assert lines(effects) == ["note first", "note hi"]
    assert tool_messages(out_a) == [("c0", "success", "noted first"), ("c1", "success", "noted hi")]
    assert tool_messages(outcome) == tool_messages(out_a)
    assert [s.decision and s.decision.reason for s in store.list_steps(RUN)] == [
        "langgraph tool call c0",
        "langgraph tool call c1",
    ]


# -- across processes --------------------------------------------------------------


@pytest.mark.slow
def test_an_approval_from_the_agentrt_command_is_resumed_by_another_process(
    database: str, tmp_path: Path
) -> None:
    (tmp_path / "database").write_text(database)  # the children's store
    first = child(tmp_path, "start", "push_branch")
    (value,) = first["interrupts"]
    assert first["run"][1] == "WAITING_FOR_APPROVAL"
    cmd = [sys.executable, "-m", "agentrt", "approve", value["run_id"], "--db"]
    cmd += [database, "--yes", "--by", "operator"]
    approved = forkserver.run(cmd, preload=PRELOAD, timeout=60)
    assert approved.returncode == 0, approved.stderr
    second = child(tmp_path, "decided", "push_branch")
    assert second["interrupts"] == []
    assert second["messages"][-2:] == ["pushed feature/login", "all done"]
    assert lines(tmp_path / "effects.log") == ["push feature/login"]


@pytest.mark.slow
def test_a_child_killed_during_a_mutating_call_waits_for_a_person_when_langgraph_resumes(
    database: str, tmp_path: Path
) -> None:
    (tmp_path / "database").write_text(database)  # the children's store
    kill_inside_the_tool(tmp_path, "start", "write_note")
    effects = tmp_path / "effects.log"
    assert lines(effects) == ["note hello"]

    # LangGraph's own way on after a crash: invoke(None) from the last checkpoint.
    again = child(tmp_path, "continue", "write_note")
    (value,) = again["interrupts"]
    assert value["kind"] == "interrupted_side_effect"
    assert value["tool_call_id"] == "call-1"
    assert "whether it took effect is unknown" in value["text"]
    assert again["run"][1] == "WAITING_FOR_APPROVAL"
    assert lines(effects) == ["note hello"]  # not run again on its own

    still = child(tmp_path, "continue", "write_note")  # asking again changes nothing
    assert [v["approval_id"] for v in still["interrupts"]] == [value["approval_id"]]
    assert lines(effects) == ["note hello"]

    done = child(tmp_path, "approve", "write_note")  # a person approves: once more
    assert done["interrupts"] == []
    assert done["messages"][-2:] == ["noted hello", "all done"]
    assert lines(effects) == ["note hello", "note hello"]
    store = agentrt.open_existing(database, read_only=True)
    kinds = [e.type for e in store.list_events(done["run"][0])]
    assert kinds.count("step.tool_started") == 2
    assert kinds.count("step.interrupted") == 1
    assert store.verify_events().intact


@pytest.mark.slow
def test_a_turn_cut_off_in_a_side_effect_is_not_rerun_and_the_next_turn_waits_for_its_end(
    database: str, tmp_path: Path
) -> None:
    (tmp_path / "database").write_text(database)  # the children's store
    kill_inside_the_tool(tmp_path, "start", "write_note")
    following = child(tmp_path, "next", "write_note")  # the user moves on: a new turn
    effects = tmp_path / "effects.log"
    assert lines(effects) == ["note hello"]  # the cut-off note never ran again
    store = agentrt.open_existing(database, read_only=True)
    cut_off = store.get_run(run_id_for("t", "publish"))
    assert cut_off.status == "WAITING_FOR_APPROVAL"  # the takeover paused it for a person
    (approval,) = store.list_approvals(cut_off.id)
    assert (approval.kind, approval.status) == ("interrupted_side_effect", "pending")
    # The new turn's call is refused before anything of it is recorded or run.
    assert following["refused"] == {
        "type": "EarlierTurnWaitsError",
        "run_id": cut_off.id,
        "approval_id": approval.id,
        "approval_hash": approval.hash,
    }
    assert "waits on call 'call-1' of 'write_note', pending on approval" in following["message"]
    assert "(interrupted_side_effect, hash" in following["message"]
    assert "it will not be run again" in following["message"]
    assert [r.id for r in store.list_runs()] == [cut_off.id]

    cmd = [sys.executable, "-m", "agentrt", "reject", cut_off.id, "--db"]
    cmd += [database, "--yes", "--by", "operator"]
    rejected = forkserver.run(cmd, preload=PRELOAD, timeout=60)
    assert rejected.returncode == 0, rejected.stderr
    on = child(tmp_path, "continue", "write_note")  # invoke(None): the refused node again
    assert on["interrupts"] == []
    assert on["messages"][-2:] == ["read hello", "all done"]  # (the continue child's script)
    assert lines(effects) == ["note hello", "read hello"]  # the new turn's call, once
    assert store.get_run(cut_off.id).status == "CANCELLED"
    assert store.get_run(run_id_for("t", "next")).status == "RUNNING"


# -- the example and the scenario table -------------------------------------------------


# SQLite only: the example program keeps its record in a file of its own.
@pytest.mark.slow
def test_the_langgraph_example_runs_offline_and_pushes_once_after_a_second_process_approves(
    tmp_path: Path,
) -> None:
    example = ROOT / "examples" / "adapters" / "langgraph_example.py"
    done = forkserver.run(
        [sys.executable, str(example), "--dir", str(tmp_path)], preload=PRELOAD, timeout=180
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "tool delete_branch [error]: Denied by the policy" in out
    assert "[process 2] agentrt approve ... --yes: approved" in out
    assert "notes written: 1 (once, though LangGraph ran the tool node twice)" in out
    assert "remote received: ['feature/login']" in out
    assert 'step 4: complete "feature/login is on the remote." -> done' in out
    assert "run: COMPLETED (goal_completed)" in out  # the end node completed the turn's run
    assert out.rstrip().endswith("intact")
    assert (tmp_path / "notes.txt").read_text().splitlines() == ["pushing feature/login"]


# SQLite only: the scenario script (benchmarks/adapters/) keeps its records in files of its own.
@pytest.mark.slow
# A hang guard, not a speed test: the scenario script starts a dozen fresh interpreters,
# which on shared cores can outlast the suite's two minutes.
@pytest.mark.timeout(600)
def test_the_scenario_script_measures_no_unapproved_execution_with_the_gate() -> None:
    script = ROOT / "benchmarks" / "adapters" / "langgraph_scenarios.py"
    done = forkserver.run([sys.executable, str(script)], preload=PRELOAD, timeout=300)
    assert done.returncode == 0, done.stderr
    assert_table_printed_in_docs(done.stdout)
    rows = {}
    for line in done.stdout.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[(cells[0], cells[1])] = cells[2:]
    assert len(rows) == 6
    gate, alone = "LangGraph + agentrt gate", "LangGraph alone"
    for scenario in ("approval (remote change)", "crash mid-call (SIGKILL)", "tampered approval"):
        assert rows[(scenario, gate)][1] == "0"
    assert rows[("approval (remote change)", gate)][0] == "note 1x, push 1x"
    assert rows[("approval (remote change)", alone)][0] == "note 2x, push 1x"
    assert rows[("crash mid-call (SIGKILL)", alone)][1] == "1"
    assert rows[("crash mid-call (SIGKILL)", gate)][2].startswith(
        "paused on interrupted_side_effect; ran once more only when a person approved"
    )
    assert rows[("tampered approval", alone)][1] == "1"
    assert rows[("tampered approval", gate)][0] == "push main 0x, push feature/login 0x"
    assert rows[("tampered approval", gate)][2].startswith("refused (ApprovalChangedError)")


@pytest.mark.slow
def test_an_approved_push_killed_mid_call_asks_the_person_again_and_not_the_old_approval(
    database: str, tmp_path: Path
) -> None:
    (tmp_path / "database").write_text(database)  # the children's store
    (first,) = child(tmp_path, "start", "push_branch")["interrupts"]
    kill_inside_the_tool(tmp_path, "approve", "push_branch")  # approved, then killed in the push
    effects = tmp_path / "effects.log"
    assert lines(effects) == ["push feature/login"]
    again = child(tmp_path, "continue", "push_branch")
    # The first approval's answer was saved by LangGraph and is replayed; only the new
    # question is open: did the push take effect?
    (value,) = again["interrupts"]
    assert value["kind"] == "interrupted_side_effect"
    assert value["approval_id"] != first["approval_id"]
    assert lines(effects) == ["push feature/login"]
    done = child(tmp_path, "approve", "push_branch")
    assert done["messages"][-2:] == ["pushed feature/login", "all done"]
    assert lines(effects) == ["push feature/login", "push feature/login"]


@pytest.mark.slow
def test_a_read_only_call_killed_mid_call_simply_runs_again_when_langgraph_resumes(
    database: str, tmp_path: Path
) -> None:
    (tmp_path / "database").write_text(database)  # the children's store
    kill_inside_the_tool(tmp_path, "start", "read_notes")
    again = child(tmp_path, "continue", "read_notes")
    assert again["interrupts"] == []
    assert again["messages"][-2:] == ["read hello", "all done"]
    assert lines(tmp_path / "effects.log") == ["read hello", "read hello"]
    store = agentrt.open_existing(database, read_only=True)
    assert [s.status for s in store.list_steps(again["run"][0])] == ["interrupted", "done"]


def test_a_node_that_asked_a_person_is_freed_with_its_store_once_its_graph_is_dropped(
    database: str, tmp_path: Path
) -> None:
    """Each interrupt hands LangGraph a response schema whose validator checks the answer.
    Python's typing keeps such `Annotated` types in a cache of its own (128 of them): the
    validator holds the node only weakly, so a graph dropped after asking a person frees
    its node and its store (on PostgreSQL, the store's connection) rather than leaving
    the last 128 alive."""
    graph, store, _ = build(tmp_path, push_script(), database=database)
    out = ask(graph)
    assert out["__interrupt__"]
    gone = weakref.ref(store)
    store.close()
    del graph, store, out
    assert freed(gone)  # a pool thread may still be letting go of its task
