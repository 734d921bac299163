"""An adapter's tool that says `OutcomeUnknown` waits for a person, as after a crash.

Decision 0054, through the Gate an adapter drives. A Pydantic AI agent (its
own `FunctionModel` playing a script) calls a mutating tool that records its
work and then raises `agentrt.OutcomeUnknown`: the framework run ends with
that exception; the agentrt run waits on an `interrupted_side_effect`
approval; continuing the framework run before a person decides runs nothing,
and after an approval runs the call once more. A LangGraph graph (LangChain's
fake chat model) meets the same tool: the gated node asks the person with
`interrupt()`, as after a crash, and a resume that approves runs it once more.
The OpenAI Agents SDK passes the exception on only from a tool declared with
`failure_error_function=None`: the run then waits; by default the SDK turns
it into the tool's text result before agentrt sees it (a limit the SDK sets).

Every test runs on SQLite and on PostgreSQL (`any_store`, `database`; issue 21 item 5).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("pydantic_ai", reason="needs agentrt[pydantic-ai]")
    pytest.importorskip("langgraph", reason="needs agentrt[langgraph]")
    pytest.importorskip("agents", reason="needs agentrt[openai-agents]")

from agents import Agent as SDKAgent
from agents import Runner, UserError, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import Command
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
from agentrt.adapters.langgraph import approve, gated_tool_node
from agentrt.adapters.openai_agents import gate_agent
from agentrt.adapters.pydantic_ai import RUN_ID_KEY, AgentrtGate
from support.adapters.langgraph_graphs import RUN, ask, build, call

LOST = "the connection was lost after the call was sent"


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if not any(isinstance(m, ModelResponse) for m in messages):
        return ModelResponse(parts=[ToolCallPart("write_note", {"text": "hi"}, tool_call_id="c1")])
    return ModelResponse(parts=[TextPart("noted")])


def test_a_pydantic_ai_tool_saying_outcome_unknown_waits_for_a_person_and_runs_once_approved(
    any_store: agentrt.Store,
) -> None:
    store = any_store
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


def test_a_langgraph_tool_saying_outcome_unknown_is_asked_with_interrupt_and_runs_once_approved(
    database: str,
    tmp_path: Path,
) -> None:
    lines: list[str] = []

    @tool
    def append(entry: str) -> str:
        """Append an entry to the ledger."""
        lines.append(entry)
        if len(lines) == 1:
            raise agentrt.OutcomeUnknown(LOST)
        return f"appended {entry}"

    def node(_: Any) -> Any:
        return gated_tool_node(
            [append],
            store=agentrt.open_store(database),
            policy=agentrt.default_policy(),
            classifications={"append": Classification("local_mutation", timeout=5)},
        )

    script = [AIMessage("", tool_calls=[call("append", "c1", entry="rent")]), AIMessage("done")]
    graph, store, _ = build(tmp_path, script, node=node, database=database)
    out = ask(graph)
    (pending,) = out["__interrupt__"]
    value = pending.value
    assert (value["kind"], value["tool"], value["tool_call_id"], value["status"]) == (
        "interrupted_side_effect",
        "append",
        "c1",
        "pending",
    )
    assert value["presentation"]["notice"] == (
        f"This call started, and its tool could not tell whether it took effect: {LOST}. "
        "Approving runs it again with these arguments; rejecting ends the run."
    )
    assert not any(isinstance(m, ToolMessage) for m in out["messages"])  # nothing told yet
    assert lines == ["rent"] and store.get_run(RUN).status == "WAITING_FOR_APPROVAL"

    out = ask(graph, Command(resume=approve(pending, by="alice")))
    told = [
        (m.tool_call_id, m.status, m.content) for m in out["messages"] if isinstance(m, ToolMessage)
    ]
    assert told == [("c1", "success", "appended rent")]
    assert lines == ["rent", "rent"]  # once more, because a person approved it
    assert [s.status for s in store.list_steps(RUN)] == ["done"]


def sdk_run(store: agentrt.Store, raise_errors: bool) -> tuple[Any, list[str]]:
    set_tracing_disabled(True)  # nothing leaves the machine
    lines: list[str] = []

    def append(entry: str) -> str:
        """Append an entry to the ledger."""
        lines.append(entry)
        raise agentrt.OutcomeUnknown(LOST)

    tool = (
        function_tool(append, failure_error_function=None)
        if raise_errors
        else function_tool(append)
    )
    script = [
        [function_call("append", {"entry": "rent"}, call_id="c1")],
        [assistant_message("done")],
    ]
    agent = SDKAgent(
        name="ledger", instructions="Keep it.", model=ScriptedModel(script), tools=[tool]
    )
    gated = gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications={"append": Classification("local_mutation", 5)},
        goal="keep the ledger",
    )

    async def main() -> Any:
        run = gated.new_run("f" * 32)
        try:
            return await Runner.run(run.agent, "append rent")
        except UserError as exc:
            return exc
        finally:
            await run.close()

    return asyncio.run(main()), lines


def test_an_agents_sdk_tool_that_lets_outcome_unknown_raise_waits_for_a_person(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    raised, lines = sdk_run(store, raise_errors=True)
    assert isinstance(raised, UserError) and LOST in str(raised)
    assert lines == ["rent"]
    assert store.get_run("f" * 32).status == "WAITING_FOR_APPROVAL"
    (approval,) = store.pending_approvals("f" * 32)
    assert approval.kind == "interrupted_side_effect"
    assert approval.presentation["notice"].endswith(
        f"could not tell whether it took effect: {LOST}. "
        "Approving runs it again with these arguments; rejecting ends the run."
    )


def test_an_agents_sdk_tool_whose_error_the_sdk_turns_into_its_result_never_reaches_agentrt(
    any_store: agentrt.Store,
) -> None:
    """The limit: the SDK's default `failure_error_function` answers the model itself."""
    store = any_store
    result, lines = sdk_run(store, raise_errors=False)
    assert result.final_output == "done" and lines == ["rent"]
    assert store.get_run("f" * 32).status == "COMPLETED"
    assert store.list_approvals("f" * 32) == []
    # Recorded as a call that finished, its text the SDK's (docs/adapters.md says so).
    call, _final = store.list_steps("f" * 32)
    assert call.status == "done" and call.observation is not None
    assert call.observation.kind == "tool_result"
