"""An Agents SDK tool's own reconciliation (`Classification(reconcile=...)`) and operation id.

The real `openai-agents` package, its `ScriptedModel`, behind `gate_agent`. A
charge waits for a person first (so the SDK's saved `RunState` holds the call,
as a resume after a crash needs); approved, it is cut off mid-charge by the
adapter's in-process crash (a framework run cancelled mid-call: the step
`interrupted`, the run RUNNING, the lease given back, as
`test_a_fresh_framework_run_while_a_call_cut_off_mid_way_waits_is_refused_before_the_model`
uses). The next framework run resumes the saved state; its `load_state` takes
the run over, which asks the tool's reconciliation. One test SIGKILLs a child
process mid-charge. Decision 0091.

Every test takes `any_store` or `database` and runs on SQLite and on PostgreSQL (issue
21 item 5); the SIGKILLed child opens the store by its name (`config.json`).
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
    pytest.importorskip("agents", reason="needs agentrt[openai-agents]")

from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

import agentrt
from agentrt.adapters import current_operation_id
from agentrt.adapters.openai_agents import (
    Classification,
    RequestChangedError,
    RunMismatchError,
    gate_agent,
)
from conftest import FakeClock, Ids
from support import forkserver
from support.adapters import reconcile_child
from support.adapters.reconcile_child import PAY, AskFirst, Charges, reconciled_events

set_tracing_disabled(True)  # nothing leaves the machine

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(reconcile_child.__file__)


def gated(
    store: agentrt.Store,
    charges: Charges,
    script: list[Any],
    clock: FakeClock,
    ids: Ids,
    policy: Any,
) -> Any:
    @function_tool
    async def charge(amount: int) -> dict[str, Any]:
        """Charge the card."""
        charges.seen.append(current_operation_id())
        if charges.hang_first:
            charges.hang_first = False
            await asyncio.sleep(3600)  # cut off here
        return {"charged": amount, "op": current_operation_id()}

    agent = Agent(name="payer", model=ScriptedModel(script), tools=[charge])
    return gate_agent(
        agent,
        store=store,
        policy=policy,
        classifications={
            "charge": Classification("remote_mutation", 30, reconcile=charges.reconcile)
        },
        now=clock,
        new_id=ids,
    )


SCRIPT: list[Any] = [
    [function_call("charge", {"amount": 5}, call_id="c1")],
    [assistant_message("paid")],
]


async def cut_off(gated_agent: Any, charges: Charges) -> tuple[Any, str]:
    """Ask, approve, and cut the approved charge off mid-way (the framework run cancelled);
    the run and the state saved before the approval."""
    run = gated_agent.new_run()
    first = await run.run_agent("pay")
    state = first.to_state()
    saved = state.to_string()
    await run.approve(state, state.get_interruptions()[0], by="alice")
    task = asyncio.create_task(run.run_agent(state))
    while not charges.seen:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return run, saved


async def cut_off_then_resume(
    store: agentrt.Store, clock: FakeClock, ids: Ids, answer: Any
) -> tuple[Charges, str, Any, Any]:
    """Ask, approve, cut the charge off mid-way, then resume the saved state in a new run."""
    charges = Charges(answer)
    gated_agent = gated(store, charges, SCRIPT, clock, ids, AskFirst())
    run, saved = await cut_off(gated_agent, charges)
    (step,) = store.list_steps(run.run_id)
    assert (step.status, run.run.status, charges.asked) == ("interrupted", "RUNNING", [])
    again = gated_agent.resume(run.run_id)
    resumed = await again.load_state(saved)  # takes the run over: the reconciliation is asked
    result = await again.run_agent(resumed)
    return charges, run.run_id, result, again


def charge_step(store: agentrt.Store, run_id: str) -> agentrt.Step:
    (step,) = [s for s in store.list_steps(run_id) if s.decision and s.decision.tool == "charge"]
    return step


def test_found_completes_the_cut_off_call_with_the_recovered_result_and_asks_nobody(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    found = agentrt.Reconciled.found({"charged": 5, "recovered": True}, detail="ch_1 found")
    charges, run_id, result, _ = asyncio.run(cut_off_then_resume(store, clock, ids, found))
    assert result.final_output == "paid"
    step = charge_step(store, run_id)
    op = agentrt.operation_id(run_id, step.id)
    assert charges.seen == [op]
    (asked,) = charges.asked
    assert (asked.run_id, asked.step_id, asked.args, asked.operation_id) == (
        run_id,
        step.id,
        {"amount": 5},
        op,
    )
    assert step.status == "done"
    assert step.observation is not None
    assert step.observation.content == {"charged": 5, "recovered": True}
    (event,) = reconciled_events(store, run_id)
    assert (event["decider"], event["tool"], event["answer"], event["operation_id"]) == (
        "tool_reconcile",
        "charge",
        "found",
        op,
    )
    # Only the first charge's approval: nobody was asked about the cut-off call.
    assert [a.kind for a in store.list_approvals(run_id)] == ["remote_mutation"]
    outputs = [i.output for i in result.new_items if type(i).__name__ == "ToolCallOutputItem"]
    assert outputs == [{"charged": 5, "recovered": True}]
    assert store.get_run(run_id).status == "COMPLETED"


def test_found_for_a_terminal_tool_gives_the_sdk_the_recovered_result(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """A terminal tool's found call completes the run in the takeover (decision 0067); the
    SDK's call from the saved state still gets the recovered result, not the run's end."""
    store = any_store
    charges = Charges(agentrt.Reconciled.found({"charged": 5, "recovered": True}))

    @function_tool
    async def charge(amount: int) -> dict[str, Any]:
        """Charge the card."""
        charges.seen.append(current_operation_id())
        await asyncio.sleep(3600)  # cut off here
        return {"charged": amount}

    agent = Agent(name="payer", model=ScriptedModel(SCRIPT), tools=[charge])
    classes = {
        "charge": Classification("remote_mutation", 30, terminal=True, reconcile=charges.reconcile)
    }
    gated_agent = gate_agent(
        agent, store=store, policy=AskFirst(), classifications=classes, now=clock, new_id=ids
    )

    async def main() -> tuple[str, Any]:
        run = gated_agent.new_run()
        state = (await run.run_agent("pay")).to_state()
        saved = state.to_string()
        await run.approve(state, state.get_interruptions()[0], by="alice")
        task = asyncio.create_task(run.run_agent(state))
        while not charges.seen:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        again = gated_agent.resume(run.run_id)
        return run.run_id, await again.run_agent(await again.load_state(saved))

    run_id, result = asyncio.run(main())
    outputs = [i.output for i in result.new_items if type(i).__name__ == "ToolCallOutputItem"]
    assert outputs == [{"charged": 5, "recovered": True}]
    step = charge_step(store, run_id)
    assert charges.seen == [agentrt.operation_id(run_id, step.id)]  # charged once
    run = store.get_run(run_id)
    assert (run.status, run.result) == ("COMPLETED", {"charged": 5, "recovered": True})
    assert [e["answer"] for e in reconciled_events(store, run_id)] == ["found"]


def test_safe_to_repeat_runs_the_same_request_again_on_the_same_step_with_the_same_id(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    vouched = agentrt.Reconciled.not_found("no ch_1", safe_to_repeat=True)
    charges, run_id, result, _ = asyncio.run(cut_off_then_resume(store, clock, ids, vouched))
    assert result.final_output == "paid"
    step = charge_step(store, run_id)
    op = agentrt.operation_id(run_id, step.id)
    assert charges.seen == [op, op]
    assert step.status == "done"
    assert step.observation is not None
    assert step.observation.content == {"charged": 5, "op": op}
    (event,) = reconciled_events(store, run_id)
    assert (event["decider"], event["answer"], event["operation_id"]) == (
        "tool_reconcile",
        "safe_to_repeat",
        op,
    )
    started = [e.payload for e in store.list_events(run_id) if e.type == "step.tool_started"]
    assert [s.get("reconciled", False) for s in started] == [False, True]
    assert [a.kind for a in store.list_approvals(run_id)] == ["remote_mutation"]
    assert store.get_run(run_id).status == "COMPLETED"
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
    any_store: agentrt.Store, clock: FakeClock, ids: Ids, answer: Any, said: str, error: str
) -> None:
    store = any_store
    charges, run_id, result, again = asyncio.run(cut_off_then_resume(store, clock, ids, answer))
    assert [i.call_id for i in result.interruptions] == ["c1"]
    step = charge_step(store, run_id)
    assert charges.seen == [agentrt.operation_id(run_id, step.id)]  # not run again
    assert step.status == "awaiting_approval"
    (waiting,) = again.pending()
    assert waiting.kind == "interrupted_side_effect"
    assert isinstance(waiting.presentation, dict)
    assert waiting.presentation["reconciliation"]["answer"] == said
    assert waiting.presentation["reconciliation"].get("error", "").startswith(error)
    (event,) = reconciled_events(store, run_id)
    assert (event["decider"], event["answer"]) == ("tool_reconcile", said)
    assert store.get_run(run_id).status == "WAITING_FOR_APPROVAL"


def test_a_fresh_framework_run_while_a_vouched_rerun_waits_is_refused_before_the_model(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """A re-run vouched for waits on its call: a framework run not holding it cannot run it."""
    store = any_store
    charges = Charges(agentrt.Reconciled.not_found("no ch_1", safe_to_repeat=True))
    gated_agent = gated(store, charges, SCRIPT + SCRIPT, clock, ids, AskFirst())

    async def main() -> str:
        run = gated_agent.new_run()
        first = await run.run_agent("pay")
        state = first.to_state()
        await run.approve(state, state.get_interruptions()[0], by="alice")
        task = asyncio.create_task(run.run_agent(state))
        while not charges.seen:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(RunMismatchError, match="waits to run again call 'c1' of 'charge'"):
            await gated_agent.resume(run.run_id).run_agent("pay again")
        return str(run.run_id)

    run_id = asyncio.run(main())
    step = charge_step(store, run_id)
    assert charges.seen == [agentrt.operation_id(run_id, step.id)]  # not run again
    assert step.status == "interrupted"  # asked again at the next takeover
    assert [e["answer"] for e in reconciled_events(store, run_id)] == ["safe_to_repeat"]
    assert (store.get_run(run_id).status, store.lease(run_id).owner) == ("RUNNING", "")


def test_another_call_while_a_vouched_rerun_waits_is_refused_and_nothing_of_it_recorded(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """The resumed state holds the vouched call but the SDK does not run it (the consumer
    rejected it in the state): the model's next call is refused (`RequestChangedError`),
    not recorded or run, and the cut-off step is left `interrupted`, the lease let go."""
    store = any_store
    charges = Charges(agentrt.Reconciled.not_found("no ch_1", safe_to_repeat=True))
    script = [*SCRIPT[:1], [function_call("charge", {"amount": 9}, call_id="c2")], *SCRIPT[1:]]
    gated_agent = gated(store, charges, script, clock, ids, AskFirst())

    async def main() -> str:
        run, saved = await cut_off(gated_agent, charges)
        again = gated_agent.resume(run.run_id)
        resumed = await again.load_state(saved)  # the takeover: safe_to_repeat, held
        resumed.reject(resumed.get_interruptions()[0], rejection_message="not now")
        with pytest.raises(RequestChangedError, match="the call 'c2' is not it, and nothing ran"):
            await again.run_agent(resumed)
        return str(run.run_id)

    run_id = asyncio.run(main())
    step = charge_step(store, run_id)
    assert charges.seen == [agentrt.operation_id(run_id, step.id)]  # nothing ran again
    assert [s.decision.tool for s in store.list_steps(run_id) if s.decision] == ["charge"]
    assert step.status == "interrupted"
    assert [e["answer"] for e in reconciled_events(store, run_id)] == ["safe_to_repeat"]
    assert (store.get_run(run_id).status, store.lease(run_id).owner) == ("RUNNING", "")


def test_each_step_hands_its_own_operation_id_to_the_framework_tool(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    charges = Charges(None)
    charges.hang_first = False
    script: list[Any] = [
        [function_call("charge", {"amount": 5}, call_id="c1")],
        [function_call("charge", {"amount": 5}, call_id="c2")],
        [assistant_message("paid twice")],
    ]
    run = gated(store, charges, script, clock, ids, PAY).new_run()
    assert run.run_agent_sync("pay").final_output == "paid twice"
    steps = [s for s in store.list_steps(run.run_id) if s.decision and s.decision.tool]
    ops = [agentrt.operation_id(run.run_id, s.id) for s in steps]
    assert charges.seen == ops
    assert len(set(ops)) == 2


def test_a_plain_function_tool_gets_each_calls_own_operation_id_on_its_worker_thread(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """A blocking tool (the SDK runs it on a worker thread), two calls in one response,
    which the SDK starts as concurrent tasks."""
    store = any_store
    seen: list[tuple[str, bool]] = []

    @function_tool
    def charge(amount: int) -> str:
        """Charge the card."""
        seen.append((current_operation_id(), threading.current_thread() is threading.main_thread()))
        return f"charged {amount}"

    script: list[Any] = [
        [
            function_call("charge", {"amount": 5}, call_id="c1"),
            function_call("charge", {"amount": 7}, call_id="c2"),
        ],
        [assistant_message("paid twice")],
    ]
    agent = Agent(name="payer", model=ScriptedModel(script), tools=[charge])
    gated = gate_agent(
        agent,
        store=store,
        policy=PAY,
        classifications={"charge": Classification("remote_mutation", 30)},
        now=clock,
        new_id=ids,
    )
    run = gated.new_run()
    assert run.run_agent_sync("pay").final_output == "paid twice"
    steps = [s for s in store.list_steps(run.run_id) if s.decision and s.decision.tool]
    ops = [agentrt.operation_id(run.run_id, s.id) for s in steps]
    assert len(set(ops)) == 2
    assert seen == [(op, False) for op in ops]


@pytest.mark.slow
def test_a_charge_cut_off_by_sigkill_is_settled_by_the_tools_reconciliation(
    database: str, tmp_path: Path
) -> None:
    """A real SIGKILL mid-charge; the next process resumes the saved RunState."""
    run_id = "0" * 31 + "9"
    (tmp_path / "config.json").write_text(json.dumps({"run_id": run_id, "database": database}))
    argv = [sys.executable, str(CHILD), str(tmp_path), "openai_agents"]
    preload = ("agents", "agentrt.adapters.openai_agents")
    proc = forkserver.server(*preload).spawn(argv, cwd=ROOT, capture=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "charged").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    done = forkserver.run(argv, preload=preload, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    with agentrt.open_store(database) as store:
        step = charge_step(store, run_id)
        op = agentrt.operation_id(run_id, step.id)
        assert (tmp_path / "charges.log").read_text().splitlines() == [op]  # charged once
        said = json.loads(done.stdout.strip().splitlines()[-1])
        assert said == {"output": "paid", "asked": [op]}
        assert step.status == "done"
        assert step.observation is not None
        assert step.observation.content == {"charged": 5, "op": op}
        assert [e.type for e in store.list_events(run_id)].count("lease.taken_over") == 1
        (event,) = reconciled_events(store, run_id)
        assert (event["decider"], event["answer"], event["operation_id"]) == (
            "tool_reconcile",
            "found",
            op,
        )
        assert [a.kind for a in store.list_approvals(run_id)] == ["remote_mutation"]
        assert store.get_run(run_id).status == "COMPLETED"
