"""A recorded call the model makes again under a new id, after its history lost it.

Real models (and Pydantic AI itself, for a `ToolCallPart` without an id) give every
tool call a new id. A program cut off mid-call, or killed after a call was
recorded, retries from its prompt; the model makes the same call again under a
new id. A call cut off mid-way waits for a person or its reconciliation as the
same request, whatever id it comes back under; a call recorded done gets its
recorded outcome; none runs twice on the runtime's say alone. A real Pydantic AI
agent on its `FunctionModel`, behind `AgentrtGate`, on a real SQLite file; the cut
is a real cancellation of the framework run mid-call (what a Ctrl-C under
`asyncio.run` does, documented to leave the call as a crash would), the kill a
real SIGKILL of a child process.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
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
    new id, which is deferred as the interrupted request waiting for a person; a person
    approves it (`agentrt approve`) and the program continues with a `ToolApproved`: the
    request runs once more, once, and the run completes."""
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


def test_with_wait_for_person_an_interrupted_call_made_again_waits_for_the_person(
    tmp_path: Path,
) -> None:
    """The short path (`wait_for_person=True`, no `DeferredToolRequests`): a call is cut off
    mid-way and the program retries from the prompt, the model making the call under a new
    id: the retry waits inside the run for the person, who approves the interrupted
    request, which runs once more; the run completes."""
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
    retried from the prompt, the model makes the same charge under a new id: it runs once
    more, as vouched, and the run completes."""
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


def test_a_call_the_model_repeats_in_a_whole_history_runs_again_as_a_new_request(
    tmp_path: Path,
) -> None:
    """The model makes `note(text="a")`, sees its return, and makes it again: the history
    holds the first call, so the second is a new request, recorded and run as its own."""
    store = agentrt.open_store(tmp_path / "runs.db")
    gate = AgentrtGate(
        store=store,
        policy=agentrt.default_policy(),
        classifications={"note": Classification("local_mutation", timeout=30)},
    )

    def answer(messages: list[Any], info: AgentInfo) -> ModelResponse:
        if sum(isinstance(m, ModelResponse) for m in messages) == 2:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("note", {"text": "a"})])

    agent: Any = Agent(
        FunctionModel(answer), output_type=[str, DeferredToolRequests], capabilities=[gate]
    )
    ran: list[str] = []

    @agent.tool_plain
    def note(text: str) -> str:
        """Write a note."""
        ran.append(text)
        return f"noted {text}"

    assert agent.run_sync("go", metadata=gate.run_metadata(RUN)).output == "done"
    assert ran == ["a", "a"]
    assert [str(s.status) for s in store.list_steps(RUN)] == ["done", "done", "done"]


ROOT = Path(__file__).resolve().parent.parent

CHILD = r'''
import json, sys, time
from datetime import timedelta
from pathlib import Path
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel
import agentrt
from agentrt.adapters import Classification
from agentrt.adapters.pydantic_ai import AgentrtGate

workdir, mode = Path(sys.argv[1]), sys.argv[2]

def answer(messages, info):
    told = any(type(p).__name__ == "ToolReturnPart" for p in messages[-1].parts)
    if not told:
        return ModelResponse(parts=[ToolCallPart("write_note", {"text": "hello"})])
    if mode == "start":
        (workdir / "model-started").write_text("1")
        while True:
            time.sleep(1)
    return ModelResponse(parts=[TextPart("noted")])

store = agentrt.open_store(workdir / "runs.db")
gate = AgentrtGate(
    store=store,
    policy=agentrt.default_policy(),
    classifications={"write_note": Classification("local_mutation", timeout=5)},
    lease_ttl=timedelta(seconds=1),
)
agent = Agent(FunctionModel(answer), output_type=[str, DeferredToolRequests], capabilities=[gate])

@agent.tool_plain
def write_note(text: str) -> str:
    """Write a note in the local log."""
    with (workdir / "effects.log").open("a") as f:
        f.write(f"write_note {text}\n")
    return f"noted {text}"

result = agent.run_sync("write the note", metadata=gate.run_metadata(sys.argv[3]))
output = result.output
print(json.dumps({"output": output if isinstance(output, str) else type(output).__name__}))
'''


def effects(workdir: Path) -> list[str]:
    path = workdir / "effects.log"
    return path.read_text().splitlines() if path.exists() else []


def child(workdir: Path, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    return subprocess.Popen(
        [sys.executable, str(workdir / "child.py"), str(workdir), mode, RUN],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_a_recorded_change_is_not_run_again_when_the_killed_program_retries_from_its_prompt(
    tmp_path: Path,
) -> None:
    """A program is SIGKILLed after its local change ran and was recorded, before the run
    ended (no history saved yet); it retries with its prompt and the same metadata, and
    the model, not having seen the return, makes the same call again under a new id: the
    call gets its recorded return, the change does not run again, and the run completes
    with one step for it."""
    (tmp_path / "child.py").write_text(CHILD)
    proc = child(tmp_path, "start")
    deadline = time.monotonic() + 60
    while not (tmp_path / "model-started").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert effects(tmp_path) == ["write_note hello"]
    with agentrt.open_store(tmp_path / "runs.db") as store:
        (step,) = store.list_steps(RUN)
        assert (step.status, store.get_run(RUN).status) == ("done", "RUNNING")
    time.sleep(1.5)  # the dead owner's short lease lapses
    retry = child(tmp_path, "retry")
    out, err = retry.communicate(timeout=120)
    assert retry.returncode == 0, err
    assert json.loads(out.splitlines()[-1]) == {"output": "noted"}
    assert effects(tmp_path) == ["write_note hello"]
    with agentrt.open_store(tmp_path / "runs.db") as store:
        assert store.get_run(RUN).status == "COMPLETED"
        assert [s.decision.kind for s in store.list_steps(RUN) if s.decision] == [
            "tool_call",
            "complete",
        ]
