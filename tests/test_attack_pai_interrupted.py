"""Attack: a call cut off mid-way, retried by a model that names its calls afresh.

Real models (and Pydantic AI itself, for a `ToolCallPart` without an id) give every
tool call a new id. A real Pydantic AI agent on its `FunctionModel`, behind
`AgentrtGate`, on a real SQLite file; the cut is a real cancellation of the
framework run mid-call (what a Ctrl-C under `asyncio.run` does, documented to
leave the call as a crash would).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolApproved
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import agentrt
from agentrt.adapters import Classification
from agentrt.adapters.pydantic_ai import AgentrtGate

RUN = "0" * 31 + "1"


def fresh_ids_model() -> FunctionModel:
    """Asks for `note(text="a")` until it is told a return, then answers "done"; each call
    gets the id Pydantic AI generates, new every time, as a provider's would be."""

    def answer(messages: list[Any], info: AgentInfo) -> ModelResponse:
        told = any(type(p).__name__ == "ToolReturnPart" for p in messages[-1].parts)
        if told:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("note", {"text": "a"})])

    return FunctionModel(answer)


def test_an_approved_interrupted_call_the_model_makes_again_under_a_new_id_runs_once(
    tmp_path: Path,
) -> None:
    """A call is cut off mid-way; retried from the prompt, the model makes it again under a
    new id, and a person approves the interrupted request (`agentrt approve`): today the new
    call stays "held behind" the old id for ever, so the approved request never runs and the
    run is wedged; continuing with a `ToolApproved` per deferred call should run it once."""
    store = agentrt.open_store(tmp_path / "runs.db")
    gate = AgentrtGate(
        store=store,
        policy=agentrt.default_policy(),
        classifications={"note": Classification("local_mutation", timeout=30)},
    )
    agent: Any = Agent(
        fresh_ids_model(), output_type=[str, DeferredToolRequests], capabilities=[gate]
    )
    ran: list[str] = []

    @agent.tool_plain
    async def note(text: str) -> str:
        """Acts, then (the first time) takes its time: the cancel lands there."""
        ran.append(text)
        if len(ran) == 1:
            await asyncio.sleep(30)
        return f"noted {text}"

    meta = gate.run_metadata(RUN)

    async def main() -> Any:
        task = asyncio.create_task(agent.run("go", metadata=meta))
        while not ran:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Retried from the prompt (the history was never saved).
        result = await agent.run("go", metadata=meta)
        assert isinstance(result.output, DeferredToolRequests)
        (pending,) = store.pending_approvals(RUN)
        assert pending.kind == "interrupted_side_effect"
        # A person approves the exact interrupted request, the `agentrt approve` way.
        agentrt.approve(store, RUN, pending.id, by="alice", shown_hash=pending.hash)
        for _ in range(3):
            if not isinstance(result.output, DeferredToolRequests):
                break
            results = DeferredToolResults(
                approvals={c.tool_call_id: ToolApproved() for c in result.output.approvals}
            )
            result = await agent.run(
                message_history=result.all_messages(),
                deferred_tool_results=results,
                metadata=meta,
            )
        return result

    result = asyncio.run(main())
    assert result.output == "done"
    assert ran == ["a", "a"]
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")


def test_with_wait_for_person_a_retried_interrupted_call_waits_for_the_person_not_cancelled(
    tmp_path: Path,
) -> None:
    """The short path (`wait_for_person=True`, no `DeferredToolRequests`): a call is cut off
    mid-way and the program retries from the prompt, the model making the call under a new id.
    Today that call is "held" behind the old id, Pydantic AI raises `UserError` and agentrt
    CANCELS the run (its note even advising `wait_for_person=True`); the retry should wait
    inside the run for the person, who approves, and the request should run once more."""
    store = agentrt.open_store(tmp_path / "runs.db")
    gate = AgentrtGate(
        store=store,
        policy=agentrt.default_policy(),
        classifications={"note": Classification("local_mutation", timeout=30)},
        wait_for_person=True,
        poll_interval=0.05,
    )
    agent: Any = Agent(fresh_ids_model(), capabilities=[gate])
    ran: list[str] = []

    @agent.tool_plain
    async def note(text: str) -> str:
        """Acts, then (the first time) takes its time: the cancel lands there."""
        ran.append(text)
        if len(ran) == 1:
            await asyncio.sleep(30)
        return f"noted {text}"

    meta = gate.run_metadata(RUN)
    seen: list[str] = []

    async def person() -> None:
        while True:
            pending = store.pending_approvals(RUN)
            if pending:
                seen.append(pending[0].kind)
                agentrt.approve(store, RUN, pending[0].id, by="alice", shown_hash=pending[0].hash)
                return
            await asyncio.sleep(0.05)

    async def main() -> Any:
        task = asyncio.create_task(agent.run("go", metadata=meta))
        while not ran:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        deciding = asyncio.create_task(person())
        try:
            return await asyncio.wait_for(agent.run("go", metadata=meta), 20)
        finally:
            deciding.cancel()

    result = asyncio.run(main())
    assert result.output == "done"
    assert seen == ["interrupted_side_effect"]
    assert ran == ["a", "a"]
    assert store.get_run(RUN).status == "COMPLETED"


def test_a_vouched_rerun_the_model_makes_again_under_a_new_id_runs_once(
    tmp_path: Path,
) -> None:
    """A charge is cut off mid-way; its reconciliation says `not_found(safe_to_repeat=True)`;
    retried from the prompt, the model makes the same charge under a new id: today it is
    refused ("first runs again the call ..."), the framework run ends with the model's
    answer and the agentrt run stays RUNNING, the same on every retry; the same request
    should run once, as vouched, and the run complete."""
    store = agentrt.open_store(tmp_path / "runs.db")
    pay = agentrt.SideEffectPolicy(
        {agentrt.SideEffect.REMOTE_MUTATION: agentrt.PolicyDecision.allow()}, policy_id="pay/1"
    )

    def reconcile(call: agentrt.ToolCall) -> agentrt.Reconciled:
        return agentrt.Reconciled.not_found("no charge with that id", safe_to_repeat=True)

    gate = AgentrtGate(
        store=store,
        policy=pay,
        classifications={
            "note": Classification("remote_mutation", timeout=30, reconcile=reconcile)
        },
    )
    agent: Any = Agent(
        fresh_ids_model(), output_type=[str, DeferredToolRequests], capabilities=[gate]
    )
    ran: list[str] = []

    @agent.tool_plain
    async def note(text: str) -> str:
        """Acts, then (the first time) takes its time: the cancel lands there."""
        ran.append(text)
        if len(ran) == 1:
            await asyncio.sleep(30)
        return f"noted {text}"

    meta = gate.run_metadata(RUN)

    async def main() -> Any:
        task = asyncio.create_task(agent.run("go", metadata=meta))
        while not ran:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await agent.run("go", metadata=meta)

    result = asyncio.run(main())
    assert result.output == "done"
    assert ran == ["a", "a"]
    run = store.get_run(RUN)
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
