"""A LangGraph tool's own reconciliation (`Classification(reconcile=...)`) and operation id.

A real LangGraph graph (StateGraph, the gated ToolNode, an in-memory
checkpointer) driven by LangChain's fake chat model, as
tests/test_adapter_langgraph.py drives it. The crash is in-process: the
graph's `ainvoke` cancelled mid-charge leaves the step `interrupted` and the
turn's run RUNNING with its lease given back; LangGraph's own way on,
`ainvoke(None, config)` from the last checkpoint, issues the call again and
the adapter's `Gate.attach` takes the run over, which asks the tool's
reconciliation (the path a SIGKILLed worker's successor takes from `attach`,
tests/test_adapter_langgraph.py's kill tests); one test SIGKILLs a child process
mid-charge. Decision 0091.

Every test takes `any_store` or `database` and runs on SQLite and on PostgreSQL (issue
21 item 5); the SIGKILLed child opens the store by its name (`config.json`).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("langgraph.prebuilt", reason="needs agentrt[langgraph]")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_config
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

import agentrt
from agentrt.adapters import current_operation_id
from agentrt.adapters.langgraph import Classification, gated_tool_node, run_id_for
from support import forkserver
from support.adapters import reconcile_child
from support.adapters.langgraph_graphs import CONFIG, PRELOAD, ROOT, RUN, TURN, call
from support.adapters.reconcile_child import PAY, Charges, reconciled_events

CHILD = Path(reconcile_child.__file__)

SCRIPT = [AIMessage("", tool_calls=[call("charge", "c1", amount=5)]), AIMessage("paid")]


def graph_of(store: agentrt.Store, charge: BaseTool, charges: Charges, script: list[Any]) -> Any:
    node = gated_tool_node(
        [charge],
        store=store,
        policy=PAY,
        classifications={
            "charge": Classification("remote_mutation", timeout=30, reconcile=charges.reconcile)
        },
    )

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
    return builder.compile(checkpointer=InMemorySaver())


def cut_off_then_resume(store: agentrt.Store, answer: Any) -> tuple[Charges, dict[str, Any]]:
    charges = Charges(answer)

    @tool
    async def charge(amount: int) -> str:
        """Charge the card."""
        charges.seen.append(current_operation_id())
        if charges.hang_first:
            charges.hang_first = False
            await asyncio.sleep(3600)  # cut off here
        return f"charged {amount} as {current_operation_id()}"

    graph = graph_of(store, charge, charges, SCRIPT)

    async def main() -> Any:
        first = {"messages": [HumanMessage("pay", id=TURN)]}
        task = asyncio.create_task(graph.ainvoke(first, CONFIG))
        while not charges.seen:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        (step,) = store.list_steps(RUN)
        assert (step.status, store.get_run(RUN).status) == ("interrupted", "RUNNING")
        assert charges.asked == []
        return await graph.ainvoke(None, CONFIG)  # LangGraph's own way on

    return charges, dict(asyncio.run(main()))


def charge_step(store: agentrt.Store) -> agentrt.Step:
    (step,) = [s for s in store.list_steps(RUN) if s.decision and s.decision.tool == "charge"]
    return step


def tool_messages(out: dict[str, Any]) -> list[tuple[str, str, Any]]:
    return [
        (m.tool_call_id, m.status, m.content) for m in out["messages"] if isinstance(m, ToolMessage)
    ]


def test_found_completes_the_cut_off_call_with_the_recovered_result_and_asks_nobody(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    found = agentrt.Reconciled.found("charged 5 (found by ch_1)", detail="ch_1 found")
    charges, out = cut_off_then_resume(store, found)
    step = charge_step(store)
    op = agentrt.operation_id(RUN, step.id)
    assert charges.seen == [op]
    (asked,) = charges.asked
    assert (asked.run_id, asked.step_id, asked.args, asked.operation_id) == (
        RUN,
        step.id,
        {"amount": 5},
        op,
    )
    assert tool_messages(out) == [("c1", "success", "charged 5 (found by ch_1)")]
    assert out["messages"][-1].content == "paid"
    assert step.status == "done"
    (event,) = reconciled_events(store, RUN)
    assert (event["decider"], event["tool"], event["answer"], event["operation_id"]) == (
        "tool_reconcile",
        "charge",
        "found",
        op,
    )
    assert event["detail"] == "ch_1 found"
    assert store.list_approvals(RUN) == []
    assert "__interrupt__" not in out


def test_safe_to_repeat_runs_the_same_request_again_on_the_same_step_with_the_same_id(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    vouched = agentrt.Reconciled.not_found("no ch_1", safe_to_repeat=True)
    charges, out = cut_off_then_resume(store, vouched)
    step = charge_step(store)
    op = agentrt.operation_id(RUN, step.id)
    assert charges.seen == [op, op]  # the framework tool saw the same id both times
    assert tool_messages(out) == [("c1", "success", f"charged 5 as {op}")]
    assert step.status == "done"
    (event,) = reconciled_events(store, RUN)
    assert (event["decider"], event["answer"], event["operation_id"]) == (
        "tool_reconcile",
        "safe_to_repeat",
        op,
    )
    started = [e.payload for e in store.list_events(RUN) if e.type == "step.tool_started"]
    assert [s.get("reconciled", False) for s in started] == [False, True]
    assert store.list_approvals(RUN) == []
    assert store.verify_events().intact


@pytest.mark.parametrize(
    ("answer", "said", "error"),
    [
        (agentrt.Reconciled.not_found("no ch_1"), "not_found", ""),
        (agentrt.Reconciled.unknown("the provider is down"), "unknown", ""),
        (RuntimeError("lookup failed"), "unknown", "the reconciliation raised RuntimeError"),
    ],
    ids=["not_found", "unknown", "raising"],
)
def test_not_found_unknown_or_a_raising_reconcile_waits_for_a_person_with_the_answer_shown(
    any_store: agentrt.Store, answer: Any, said: str, error: str
) -> None:
    store = any_store
    charges, out = cut_off_then_resume(store, answer)
    (shown,) = [i.value for i in out["__interrupt__"]]
    assert (shown["kind"], shown["tool_call_id"]) == ("interrupted_side_effect", "c1")
    step = charge_step(store)
    assert charges.seen == [agentrt.operation_id(RUN, step.id)]  # not run again
    assert step.status == "awaiting_approval"
    (approval,) = store.list_approvals(RUN)
    assert (approval.kind, approval.status, approval.id) == (
        "interrupted_side_effect",
        "pending",
        shown["approval_id"],
    )
    assert isinstance(approval.presentation, dict)
    assert approval.presentation["reconciliation"]["answer"] == said
    assert approval.presentation["reconciliation"].get("error", "").startswith(error)
    (event,) = reconciled_events(store, RUN)
    assert (event["decider"], event["answer"]) == ("tool_reconcile", said)
    assert event.get("error", "").startswith(error)
    assert store.get_run(RUN).status == "WAITING_FOR_APPROVAL"


def test_each_step_hands_its_own_operation_id_to_a_blocking_framework_tool(
    any_store: agentrt.Store,
) -> None:
    """The blocking path (`invoke`, a plain-function tool on agentrt's own thread)."""
    store = any_store
    charges = Charges(None)

    @tool
    def charge(amount: int) -> str:
        """Charge the card."""
        charges.seen.append(current_operation_id())
        return f"charged {amount}"

    script = [
        AIMessage("", tool_calls=[call("charge", "c1", amount=5)]),
        AIMessage("", tool_calls=[call("charge", "c2", amount=5)]),
        AIMessage("paid twice"),
    ]
    graph = graph_of(store, charge, charges, script)
    out = graph.invoke({"messages": [HumanMessage("pay", id=TURN)]}, CONFIG)
    assert out["messages"][-1].content == "paid twice"
    ops = [agentrt.operation_id(RUN, s.id) for s in store.list_steps(RUN) if s.decision]
    assert charges.seen == ops
    assert len(set(ops)) == 2


def test_a_plain_function_tool_under_ainvoke_gets_its_calls_id_and_langgraphs_config(
    any_store: agentrt.Store,
) -> None:
    """A blocking tool on the async path (LangChain runs it on a worker thread) that also
    takes LangGraph's injected `RunnableConfig`: each call of one message sees its own
    step's operation id, and the config (injected and `get_config()`) is the graph's."""
    store = any_store
    charges = Charges(None)

    @tool
    def charge(amount: int, config: RunnableConfig) -> str:
        """Charge the card."""
        injected = (config.get("configurable") or {}).get("thread_id")
        ambient = (get_config().get("configurable") or {}).get("thread_id")
        charges.seen.append(f"{current_operation_id()} {injected} {ambient}")
        return f"charged {amount}"

    script = [
        AIMessage("", tool_calls=[call("charge", "c1", amount=5), call("charge", "c2", amount=7)]),
        AIMessage("paid twice"),
    ]
    graph = graph_of(store, charge, charges, script)
    out = asyncio.run(graph.ainvoke({"messages": [HumanMessage("pay", id=TURN)]}, CONFIG))
    assert out["messages"][-1].content == "paid twice"
    ops = [agentrt.operation_id(RUN, s.id) for s in store.list_steps(RUN) if s.decision]
    assert len(set(ops)) == 2
    thread = CONFIG["configurable"]["thread_id"]
    assert charges.seen == [f"{op} {thread} {thread}" for op in ops]


@pytest.mark.slow
@pytest.mark.parametrize("terminal", [False, True], ids=["tool", "terminal_tool"])
def test_a_charge_cut_off_by_sigkill_is_settled_by_the_tools_reconciliation(
    database: str, tmp_path: Path, terminal: bool
) -> None:
    """A real SIGKILL mid-charge; LangGraph's `invoke(None, config)` in a new process goes on.

    The takeover finds the step still `executing`; for a terminal tool the found answer
    also completes the run, and the call still gets the recovered result."""
    run_id = run_id_for("t", "pay")
    config = {"run_id": run_id, "terminal": terminal, "database": database}
    (tmp_path / "config.json").write_text(json.dumps(config))
    argv = [sys.executable, str(CHILD), str(tmp_path), "langgraph"]
    proc = forkserver.server(*PRELOAD).spawn(argv, cwd=ROOT, capture=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "charged").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    done = forkserver.run(argv, preload=PRELOAD, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    with agentrt.open_store(database) as store:
        (step,) = store.list_steps(run_id)
        op = agentrt.operation_id(run_id, step.id)
        assert (tmp_path / "charges.log").read_text().splitlines() == [op]  # charged once
        recovered = json.dumps({"charged": 5, "op": op}, separators=(",", ":"))
        said = json.loads(done.stdout.strip().splitlines()[-1])
        assert said["asked"] == [op]
        assert said["output"][1:] == [recovered, "done"]
        assert step.status == "done"
        assert [e.type for e in store.list_events(run_id)].count("lease.taken_over") == 1
        (event,) = reconciled_events(store, run_id)
        assert (event["decider"], event["answer"], event["operation_id"]) == (
            "tool_reconcile",
            "found",
            op,
        )
        assert store.list_approvals(run_id) == []
        run = store.get_run(run_id)
        assert run.status == ("COMPLETED" if terminal else "RUNNING")
        if terminal:
            assert run.result == {"charged": 5, "op": op}


def test_another_call_while_a_vouched_rerun_waits_is_answered_not_run_and_not_recorded(
    any_store: agentrt.Store,
) -> None:
    """The turn goes on past the cut-off call (its ToolMessage written by the consumer): a
    later call of the turn is answered `Not run` (an error ToolMessage), nothing of it
    recorded or run, and the cut-off step is left `interrupted` with the lease let go
    (decision 0091: the next takeover asks the reconciliation again)."""
    store = any_store
    charges = Charges(agentrt.Reconciled.not_found("no ch_1", safe_to_repeat=True))

    @tool
    async def charge(amount: int) -> str:
        """Charge the card."""
        charges.seen.append(current_operation_id())
        if charges.hang_first:
            charges.hang_first = False
            await asyncio.sleep(3600)  # cut off here
        return f"charged {amount}"

    script = [
        AIMessage("", tool_calls=[call("charge", "c1", amount=5)]),
        AIMessage("", tool_calls=[call("charge", "c2", amount=7)]),
        AIMessage("gave up"),
    ]
    graph = graph_of(store, charge, charges, script)

    async def main() -> Any:
        task = asyncio.create_task(
            graph.ainvoke({"messages": [HumanMessage("pay", id=TURN)]}, CONFIG)
        )
        while not charges.seen:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The consumer answers c1 itself, so LangGraph never issues it again.
        await graph.aupdate_state(
            CONFIG, {"messages": [ToolMessage("abandoned", tool_call_id="c1")]}, as_node="tools"
        )
        return await graph.ainvoke(None, CONFIG)

    out = asyncio.run(main())
    step = charge_step(store)
    op = agentrt.operation_id(RUN, step.id)
    assert charges.seen == [op]  # neither the vouched call nor c2 ran
    ((c1, _, _), (c2, status, content)) = tool_messages(out)
    assert (c1, c2, status) == ("c1", "c2", "error")
    assert str(content).startswith(f"Not run: run {RUN} first runs again call c1")
    assert out["messages"][-1].content == "gave up"
    # Nothing of c2 recorded; the cut-off step is left as the crash left it, lease let go.
    assert [s.decision.tool for s in store.list_steps(RUN) if s.decision] == ["charge"]
    assert step.status == "interrupted"
    assert (store.get_run(RUN).status, store.lease(RUN).owner) == ("RUNNING", "")
    assert [e["answer"] for e in reconciled_events(store, RUN)] == ["safe_to_repeat"]
    assert store.list_approvals(RUN) == []
