"""A Pydantic AI tool's own reconciliation (`Classification(reconcile=...)`) and operation id.

A real Pydantic AI agent, its `FunctionModel` playing a script
(tests/support/adapters/pydantic_ai_child.py), behind `AgentrtGate`. The crash
is the adapter's in-process one (a framework run cancelled mid-call leaves the
step `interrupted` and the run RUNNING with its lease given back, as
`test_a_framework_run_cancelled_mid_call_pauses_its_retry_on_the_interrupted_side_effect`
shows: the next framework run takes it over through the same `Gate.attach`);
one test SIGKILLs a child process mid-charge. Decision 0091.

Every test that touches a store takes `any_store` or `database` and runs on SQLite and
on PostgreSQL (issue 21 item 5); the SIGKILLed child opens the store by its name.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")

from pydantic_ai import Agent, DeferredToolRequests

import agentrt
from agentrt.adapters import Classification, current_operation_id
from agentrt.adapters.pydantic_ai import AgentrtGate
from support import forkserver
from support.adapters import pydantic_ai_child as child
from support.adapters import reconcile_child
from support.adapters.reconcile_child import PAY, Charges, reconciled_events

RUN = "0" * 31 + "7"
ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(reconcile_child.__file__)


def gated_agent(store: agentrt.Store, charges: Charges, script: list[Any]) -> Any:
    gate = AgentrtGate(
        store=store,
        policy=PAY,
        classifications={
            "charge": Classification("remote_mutation", timeout=30, reconcile=charges.reconcile)
        },
    )
    agent: Any = Agent(
        child.model(script), output_type=[str, DeferredToolRequests], capabilities=[gate]
    )

    @agent.tool_plain
    async def charge(amount: int) -> dict[str, Any]:
        """Charges the card; the first charge is cut off after it acted."""
        charges.seen.append(current_operation_id())
        if charges.hang_first:
            charges.hang_first = False
            await asyncio.sleep(30)
        return {"charged": amount, "op": current_operation_id()}

    return agent, gate.run_metadata(RUN)


SCRIPT: list[Any] = [[("charge", {"amount": 5}, "c1")], "done"]


def cut_off_then_resume(store: agentrt.Store, answer: Any) -> tuple[agentrt.Store, Charges, Any]:
    """Charge, cancel mid-charge (the step `interrupted`, the run RUNNING), then run again."""
    charges = Charges(answer)
    agent, meta = gated_agent(store, charges, SCRIPT)

    async def main() -> Any:
        task = asyncio.create_task(agent.run("pay", metadata=meta))
        while not charges.seen:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        step = charge_step(store)
        assert (step.status, store.get_run(RUN).status) == ("interrupted", "RUNNING")
        assert charges.asked == []
        return await agent.run("pay", metadata=meta)

    return store, charges, asyncio.run(main())


def charge_step(store: agentrt.Store) -> agentrt.Step:
    """The run's one step that called `charge` (the others decide `complete`)."""
    (step,) = [s for s in store.list_steps(RUN) if s.decision and s.decision.tool == "charge"]
    return step


def test_found_completes_the_cut_off_call_with_the_recovered_result_and_asks_nobody(
    any_store: agentrt.Store,
) -> None:
    found = agentrt.Reconciled.found({"charged": 5, "recovered": True}, detail="charge ch_1 found")
    store, charges, result = cut_off_then_resume(any_store, found)
    assert result.output == "done"
    step = charge_step(store)
    op = agentrt.operation_id(RUN, step.id)
    assert charges.seen == [op]  # charged once, never again
    (asked,) = charges.asked
    assert (asked.run_id, asked.step_id, asked.args, asked.operation_id) == (
        RUN,
        step.id,
        {"amount": 5},
        op,
    )
    assert step.status == "done"
    assert step.observation is not None
    assert step.observation.content == {"charged": 5, "recovered": True}
    (event,) = reconciled_events(store, RUN)
    assert event["decider"] == "tool_reconcile"
    assert (event["tool"], event["operation_id"], event["answer"]) == ("charge", op, "found")
    assert event["detail"] == "charge ch_1 found"
    assert store.list_approvals(RUN) == []
    run = store.get_run(RUN)
    assert (run.status, run.result) == ("COMPLETED", "done")
    # The model was told the recovered result as the call's return.
    returns = [
        p.content
        for m in result.all_messages()
        for p in m.parts
        if type(p).__name__ == "ToolReturnPart"
    ]
    assert returns == [{"charged": 5, "recovered": True}]


def test_found_for_a_terminal_tool_gives_the_framework_the_recovered_result(
    any_store: agentrt.Store,
) -> None:
    """A terminal tool's found call completes the run in the takeover (decision 0067); the
    framework run that issues the call again still gets the recovered result as its return,
    as after the tool's own return, and is not refused as a run that ended."""
    store = any_store
    charges = Charges(agentrt.Reconciled.found({"charged": 5, "recovered": True}))
    gate = AgentrtGate(
        store=store,
        policy=PAY,
        classifications={
            "charge": Classification(
                "remote_mutation", 30, terminal=True, reconcile=charges.reconcile
            )
        },
    )
    agent: Any = Agent(
        child.model(SCRIPT), output_type=[str, DeferredToolRequests], capabilities=[gate]
    )

    @agent.tool_plain
    async def charge(amount: int) -> dict[str, Any]:
        """Charges the card; the first charge is cut off after it acted."""
        charges.seen.append(current_operation_id())
        await asyncio.sleep(30)
        return {"charged": amount}

    meta = gate.run_metadata(RUN)

    async def main() -> Any:
        task = asyncio.create_task(agent.run("pay", metadata=meta))
        while not charges.seen:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await agent.run("pay", metadata=meta)

    result = asyncio.run(main())
    assert result.output == "done"
    step = charge_step(store)
    assert charges.seen == [agentrt.operation_id(RUN, step.id)]  # charged once
    run = store.get_run(RUN)
    assert (run.status, run.result) == ("COMPLETED", {"charged": 5, "recovered": True})
    returns = [
        p.content
        for m in result.all_messages()
        for p in m.parts
        if type(p).__name__ == "ToolReturnPart"
    ]
    assert returns == [{"charged": 5, "recovered": True}]
    assert [e["answer"] for e in reconciled_events(store, RUN)] == ["found"]
    assert store.list_approvals(RUN) == []


def test_safe_to_repeat_runs_the_same_request_again_on_the_same_step_with_the_same_id(
    any_store: agentrt.Store,
) -> None:
    vouched = agentrt.Reconciled.not_found("no charge ch_1", safe_to_repeat=True)
    store, charges, result = cut_off_then_resume(any_store, vouched)
    assert result.output == "done"
    step = charge_step(store)
    op = agentrt.operation_id(RUN, step.id)
    assert charges.seen == [op, op]  # the framework tool saw the same id both times
    assert step.status == "done"
    assert step.observation is not None
    assert step.observation.content == {"charged": 5, "op": op}
    (event,) = reconciled_events(store, RUN)
    assert (event["decider"], event["answer"], event["operation_id"]) == (
        "tool_reconcile",
        "safe_to_repeat",
        op,
    )
    started = [e.payload for e in store.list_events(RUN) if e.type == "step.tool_started"]
    assert [s.get("reconciled", False) for s in started] == [False, True]
    assert store.list_approvals(RUN) == []
    assert store.get_run(RUN).status == "COMPLETED"
    assert store.verify_events().intact


@pytest.mark.parametrize(
    ("answer", "said", "error"),
    [
        (agentrt.Reconciled.not_found("no charge ch_1"), "not_found", ""),
        (agentrt.Reconciled.unknown("the provider is down"), "unknown", ""),
        (RuntimeError("lookup failed"), "unknown", "the reconciliation raised RuntimeError"),
    ],
    ids=["not_found", "unknown", "raising"],
)
def test_not_found_unknown_or_a_raising_reconcile_waits_for_a_person_with_the_answer_shown(
    any_store: agentrt.Store, answer: Any, said: str, error: str
) -> None:
    store, charges, result = cut_off_then_resume(any_store, answer)
    assert isinstance(result.output, DeferredToolRequests)
    shown = result.output.metadata["c1"]["agentrt"]
    assert shown["kind"] == "interrupted_side_effect"
    step = charge_step(store)
    op = agentrt.operation_id(RUN, step.id)
    assert charges.seen == [op]  # not run again
    assert step.status == "awaiting_approval"
    (approval,) = store.list_approvals(RUN)
    assert (approval.kind, approval.status) == ("interrupted_side_effect", "pending")
    assert isinstance(approval.presentation, dict)
    reconciliation = approval.presentation["reconciliation"]
    assert reconciliation["answer"] == said
    assert reconciliation.get("error", "").startswith(error)
    assert "reconciliation" in approval.presentation["notice"]
    (event,) = reconciled_events(store, RUN)
    assert (event["decider"], event["answer"]) == ("tool_reconcile", said)
    assert event.get("error", "").startswith(error)
    assert store.get_run(RUN).status == "WAITING_FOR_APPROVAL"


def test_each_step_hands_its_own_operation_id_to_the_framework_tool(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    charges = Charges(None)
    charges.hang_first = False
    script: list[Any] = [
        [("charge", {"amount": 5}, "c1")],
        [("charge", {"amount": 5}, "c2")],
        "done",
    ]
    agent, meta = gated_agent(store, charges, script)
    assert agent.run_sync("pay", metadata=meta).output == "done"
    steps = store.list_steps(RUN)
    ids = [agentrt.operation_id(RUN, s.id) for s in steps if s.decision and s.decision.tool]
    assert charges.seen == ids
    assert len(set(ids)) == 2


def test_the_operation_id_answers_only_inside_the_call_and_an_inner_call_restores_the_outer() -> (
    None
):
    from agentrt.adapters._operation import running

    outer = agentrt.ToolCall(run_id="r", step_id="s1", args={}, lease_epoch=1)
    inner = agentrt.ToolCall(run_id="r", step_id="s2", args={}, lease_epoch=1)
    with pytest.raises(LookupError, match="no agentrt-gated tool call runs here"):
        current_operation_id()
    with running(outer):
        assert current_operation_id() == agentrt.operation_id("r", "s1")
        with running(inner):
            assert current_operation_id() == agentrt.operation_id("r", "s2")
        assert current_operation_id() == agentrt.operation_id("r", "s1")
    with pytest.raises(LookupError, match="no agentrt-gated tool call runs here"):
        current_operation_id()  # reset when the call ended, as after every gated call


def test_a_plain_function_tool_gets_each_calls_own_operation_id_on_its_worker_thread(
    any_store: agentrt.Store,
) -> None:
    """A blocking tool (Pydantic AI runs it on a worker thread), two calls in one response."""
    store = any_store
    gate = AgentrtGate(
        store=store, policy=PAY, classifications={"charge": Classification("remote_mutation", 30)}
    )
    script: list[Any] = [[("charge", {"amount": 5}, "c1"), ("charge", {"amount": 7}, "c2")], "done"]
    agent: Any = Agent(
        child.model(script), output_type=[str, DeferredToolRequests], capabilities=[gate]
    )
    seen: list[tuple[str, bool]] = []

    @agent.tool_plain
    def charge(amount: int) -> str:
        """Charges the card."""
        seen.append((current_operation_id(), threading.current_thread() is threading.main_thread()))
        return f"charged {amount}"

    assert agent.run_sync("pay", metadata=gate.run_metadata(RUN)).output == "done"
    ops = [agentrt.operation_id(RUN, s.id) for s in store.list_steps(RUN) if s.decision.tool]
    assert len(set(ops)) == 2
    assert seen == [(op, False) for op in ops]


@pytest.mark.slow
def test_a_charge_cut_off_by_sigkill_is_settled_by_the_tools_reconciliation(
    database: str, tmp_path: Path
) -> None:
    """A real SIGKILL mid-charge; the next process's takeover asks the reconciliation."""
    config = {"run_id": RUN, "answer": "found", "database": database}
    (tmp_path / "config.json").write_text(json.dumps(config))
    preload = ("pydantic_ai", "agentrt.adapters.pydantic_ai")
    proc = forkserver.server(*preload).spawn(
        [sys.executable, str(CHILD), str(tmp_path), "pydantic_ai"], cwd=ROOT, capture=True
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "charged").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    done = forkserver.run(
        [sys.executable, str(CHILD), str(tmp_path), "pydantic_ai"],
        preload=preload,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    with agentrt.open_store(database) as store:
        step = charge_step(store)
        op = agentrt.operation_id(RUN, step.id)
        # One charge, by the killed process, with the step's operation id.
        assert (tmp_path / "charges.log").read_text().splitlines() == [op]
        assert json.loads(done.stdout.strip().splitlines()[-1]) == {
            "output": "done",
            "asked": [op],
        }
        assert step.status == "done"
        assert [e.type for e in store.list_events(RUN)].count("lease.taken_over") == 1
        (event,) = reconciled_events(store, RUN)
        assert (event["decider"], event["answer"], event["operation_id"]) == (
            "tool_reconcile",
            "found",
            op,
        )
        assert store.list_approvals(RUN) == []
        assert store.get_run(RUN).status == "COMPLETED"


def test_another_call_while_a_vouched_rerun_waits_is_refused_and_the_next_takeover_asks_again(
    any_store: agentrt.Store,
) -> None:
    """A framework run whose model makes another call (a new id) does not run the vouched one."""
    store = any_store
    charges = Charges(agentrt.Reconciled.not_found("no ch_1", safe_to_repeat=True))
    agent, meta = gated_agent(store, charges, SCRIPT)
    other, _ = gated_agent(store, charges, [[("charge", {"amount": 7}, "c9")], "gave up"])

    async def main() -> Any:
        task = asyncio.create_task(agent.run("pay", metadata=meta))
        while not charges.seen:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await other.run("pay", metadata=meta)

    result = asyncio.run(main())
    step = charge_step(store)
    op = agentrt.operation_id(RUN, step.id)
    assert charges.seen == [op]  # neither the vouched call nor the other one ran
    (failed,) = [
        p.content
        for m in result.all_messages()
        for p in m.parts
        if type(p).__name__ == "RetryPromptPart" or type(p).__name__ == "ToolReturnPart"
    ]
    assert "first runs again the call c1 (charge)" in str(failed)
    # Nothing of c9 recorded; the cut-off step is left as the crash left it.
    assert [s.decision.tool for s in store.list_steps(RUN) if s.decision] == ["charge"]
    assert step.status == "interrupted"
    assert (store.get_run(RUN).status, store.lease(RUN).owner) == ("RUNNING", "")
    # The framework run that issues the call runs it, after the reconciliation is asked again.
    again = asyncio.run(agent.run("pay", metadata=meta))
    assert again.output == "done"
    assert charges.seen == [op, op]
    assert [e["answer"] for e in reconciled_events(store, RUN)] == ["safe_to_repeat"] * 2
    assert store.get_run(RUN).status == "COMPLETED"
