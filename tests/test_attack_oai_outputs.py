"""Attack: what a tool or the agent hands back, and what agentrt records of it.

Driven by the real `openai-agents` package and its own `agents.testing.ScriptedModel`;
a real store on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import os

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("agents", reason="needs agentrt[openai-agents]")

from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from pydantic import BaseModel

import agentrt
from agentrt.adapters.openai_agents import Classification, gate_agent
from conftest import FakeClock, Ids
from support.adapters.oai_attack import outputs, sync

set_tracing_disabled(True)  # nothing leaves the machine


class Quote(BaseModel):
    price: float


@sync
async def test_a_tool_returning_a_model_with_an_infinite_float_is_recorded_as_what_the_model_saw(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """A tool returns a pydantic model whose float is `inf`; the model is handed that output as
    a success (`price=inf`), but agentrt records the call as failed (`tool_error`: content not
    usable JSON). The record should say the call ran and returned (done, `tool_result`), as it
    does for any other output that is not JSON (kept as its text)."""
    store = any_store
    quoted: list[str] = []

    @function_tool
    def quote(item: str) -> Quote:
        """Quote an item."""
        quoted.append(item)
        return Quote(price=float("inf"))

    agent = Agent(
        name="quoter",
        model=ScriptedModel(
            [
                [function_call("quote", {"item": "gold"}, call_id="call-1")],
                [assistant_message("ok")],
            ]
        ),
        tools=[quote],
    )
    gated = gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications={"quote": Classification("read_only", 5)},
        now=clock,
        new_id=ids,
    )
    run = gated.new_run()
    result = await run.run_agent("quote gold")

    assert quoted == ["gold"]
    assert [str(o) for o in outputs(result)] == ["price=inf"]  # the model was told it worked
    (step, _) = store.list_steps(run.run_id, cap=None)
    assert step.observation is not None
    assert (step.status, step.observation.kind) == ("done", "tool_result")


@sync
async def test_a_structured_final_output_the_model_fills_with_1e999_still_ends_the_agentrt_run(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """With `output_type=Quote`, the model answers `{"price": 1e999}` (pydantic reads it as
    `inf`): the SDK run ends with that final output, but the agentrt run is left RUNNING for
    ever (its `complete` refused as invalid_decision, the lease let go). The agentrt run
    should end as the framework run did: COMPLETED, its result what the model answered."""
    store = any_store
    noted: list[str] = []

    @function_tool
    def write_note(text: str) -> str:
        """Write a note."""
        noted.append(text)
        return f"noted {text}"

    agent = Agent(
        name="quoter",
        model=ScriptedModel(
            [
                [function_call("write_note", {"text": "a"}, call_id="call-1")],
                [assistant_message('{"price": 1e999}')],
            ]
        ),
        tools=[write_note],
        output_type=Quote,
    )
    gated = gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications={"write_note": Classification("local_mutation", 5)},
        now=clock,
        new_id=ids,
    )
    run = gated.new_run()
    result = await run.run_agent("quote")

    assert result.final_output == Quote(price=float("inf"))
    assert noted == ["a"]
    assert (run.run.status, run.run.reason) == ("COMPLETED", "goal_completed")
    assert store.lease(run.run_id).owner == ""
