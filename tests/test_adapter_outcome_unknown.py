"""An adapter's tool that says `OutcomeUnknown` waits for a person, as after a crash.

Decision 0054, through the Gate an adapter drives: a Pydantic AI agent (its
own `FunctionModel` playing a script) calls a mutating tool that records its
work and then raises `agentrt.OutcomeUnknown`. The framework run ends with
that exception; the agentrt run waits on an `interrupted_side_effect`
approval; continuing the framework run before a person decides runs nothing,
and after an approval runs the call once more.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import agentrt
from agentrt.adapters import Classification
from agentrt.adapters.pydantic_ai import RUN_ID_KEY, AgentrtGate

LOST = "the connection was lost after the call was sent"


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if not any(isinstance(m, ModelResponse) for m in messages):
        return ModelResponse(parts=[ToolCallPart("write_note", {"text": "hi"}, tool_call_id="c1")])
    return ModelResponse(parts=[TextPart("noted")])


def test_a_pydantic_ai_tool_saying_outcome_unknown_waits_for_a_person_and_runs_once_approved(
    store: agentrt.Store,
) -> None:
    lines: list[str] = []
    gate = AgentrtGate(
        store=store,
        policy=agentrt.default_policy(),
        classifications={"write_note": Classification("local_mutation", timeout=5)},
    )
    agent = Agent(
        FunctionModel(script), output_type=[str, DeferredToolRequests], capabilities=[gate]
    )

    @agent.tool_plain
    def write_note(text: str) -> str:
        lines.append(text)
        if len(lines) == 1:
            raise agentrt.OutcomeUnknown(LOST)
        return "written"

    meta = gate.run_metadata()
    run_id = meta[RUN_ID_KEY]
    # What the framework run had when the tool raised: the prompt and the model's call.
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("note")]),
        ModelResponse(parts=[ToolCallPart("write_note", {"text": "hi"}, tool_call_id="c1")]),
    ]

    async def main() -> tuple[Any, Any]:
        with pytest.raises(agentrt.OutcomeUnknown, match=LOST):
            await agent.run("note", metadata=meta)
        assert store.get_run(run_id).status == "WAITING_FOR_APPROVAL"
        (approval,) = store.pending_approvals(run_id)
        assert approval.kind == "interrupted_side_effect"
        assert approval.presentation["notice"] == (
            f"This call started, and its tool could not tell whether it took effect: {LOST}. "
            "Approving runs it again with these arguments; rejecting ends the run."
        )
        undecided = await agent.run(message_history=history, metadata=meta)
        assert lines == ["hi"]  # continuing before a person decides runs nothing
        agentrt.approve(store, run_id, approval.id, by="ops", shown_hash=approval.hash)
        decided = await agent.run(message_history=history, metadata=meta)
        return undecided.output, decided.output

    undecided, decided = asyncio.run(main())
    assert isinstance(undecided, DeferredToolRequests)
    assert [call.tool_call_id for call in undecided.approvals] == ["c1"]
    assert decided == "noted"
    assert lines == ["hi", "hi"]  # once more, because a person approved it
    assert store.get_run(run_id).status == "COMPLETED"
    assert [s.status for s in store.list_steps(run_id)] == ["done", "done"]
