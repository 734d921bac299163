"""A call's look-up for a call made again reads a few steps, whatever the run's length.

For each new call, the Pydantic AI adapter finds where the record stands against the
history (decision 0147) by looking up the history's calls newest first, in windows that
double, and stops at the first one recorded: in a whole history that is the call just
before, one step read. It looked up every call the history held, reading each step back
whole: a run of n calls read about n^2/2 steps (decision 0060 promises a call's look-up
costs the same at the run's 2,000th step as at its first).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import agentrt
from agentrt.adapters import Classification
from agentrt.adapters.pydantic_ai import AgentrtGate

RUN = "0" * 31 + "7"
CALLS = 40


def test_steps_read_per_call_do_not_grow_with_the_run(tmp_path: Path) -> None:
    store = agentrt.open_store(tmp_path / "runs.db")
    read: list[int] = []  # steps read back by reason, per look-up
    original = store.steps_with_reasons

    def counting(run_id: str, reasons: Any) -> list[Any]:
        found = original(run_id, reasons)
        read.append(len(found))
        return found

    store.steps_with_reasons = counting  # type: ignore[method-assign]
    gate = AgentrtGate(
        store=store,
        policy=agentrt.default_policy(),
        classifications={"note": Classification("read_only", timeout=30)},
    )

    def answer(messages: list[Any], info: AgentInfo) -> ModelResponse:
        made = sum(
            1
            for m in messages
            if getattr(m, "kind", "") == "response"
            for p in m.parts
            if getattr(p, "part_kind", "") == "tool-call"
        )
        if made >= CALLS:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("note", {"text": str(made)})])

    agent: Any = Agent(FunctionModel(answer), capabilities=[gate])
    per_call: list[int] = []

    @agent.tool_plain
    async def note(text: str) -> str:
        """Notes the text."""
        per_call.append(sum(read))
        read.clear()
        return f"noted {text}"

    result = asyncio.run(agent.run("go", metadata=gate.run_metadata(RUN)))
    assert result.output == "done"
    assert len(per_call) == CALLS
    # The look-ups made for the first call and for the last read about as many steps.
    assert per_call[-1] <= per_call[1] + 2, per_call
