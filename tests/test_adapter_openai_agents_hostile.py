"""The Agents SDK adapter given what the SDK reads one way and agentrt could read another.

Arguments the SDK refuses as JSON (NaN, Infinity), outputs that are not JSON, a tool's
own timeout, an agent changed after `gate_agent` checked it, a run id agentrt cannot
hold. Driven by the real `openai-agents` package and its own
`agents.testing.ScriptedModel` (no network); real tools, a real store on SQLite and on
PostgreSQL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("agents", reason="needs agentrt[openai-agents]")

from agents import Agent, ToolTimeoutError, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from pydantic import BaseModel

import agentrt
from agentrt.adapters.openai_agents import Classification, GatedAgent, gate_agent
from conftest import FakeClock, Ids
from support.adapters.openai_agents_tools import CLASSES, Remote

set_tracing_disabled(True)  # nothing leaves the machine


class Quote(BaseModel):
    price: float


def sync(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test body on its own event loop (the suite has no async plugin)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def outputs(result: Any) -> list[Any]:
    return [item.output for item in result.new_items if type(item).__name__ == "ToolCallOutputItem"]


def gated(
    agent: Agent[Any],
    store: agentrt.Store,
    clock: FakeClock,
    ids: Ids | None = None,
    classes: dict[str, Classification] | None = None,
) -> GatedAgent:
    return gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications=classes if classes is not None else CLASSES,
        now=clock,
        new_id=ids,
    )


# -- arguments the SDK refuses as JSON ----------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    ['{"branch": NaN}', '{"branch": Infinity}', '{"branch": "main", "n": [-Infinity]}'],
    ids=["nan", "infinity", "nested-minus-infinity"],
)
@sync
async def test_arguments_with_nan_or_infinity_are_recorded_verbatim_and_refused_once_approved(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids, arguments: str
) -> None:
    """The model writes `{"branch": NaN}`: the SDK refuses NaN/Infinity as JSON and holds the
    call for a person itself, and the adapter reads the text the same way. The run is
    recorded, so another process resumes it by id; once approved, the call is recorded with
    its text verbatim and answered `invalid_decision`, the tool never run."""
    store = any_store
    remote = Remote()
    script = [
        [function_call("push_branch", arguments, call_id="call-1")],
        [assistant_message("sorry")],
    ]
    model = ScriptedModel(script)
    run = gated(Agent(name="publisher", model=model, tools=remote.tools), store, clock, ids)
    first_run = run.new_run()
    first = await first_run.run_agent("push")
    assert [i.call_id for i in first.interruptions] == ["call-1"]
    saved = first.to_state().to_string()

    # Another process resumes the saved state by the run's id.
    later = gated(Agent(name="publisher", model=model, tools=remote.tools), store, clock).resume(
        first_run.run_id
    )
    state = await later.load_state(saved)
    state.approve(state.get_interruptions()[0])
    result = await asyncio.wait_for(later.run_agent(state), 10)

    assert remote.done == []
    (seen,) = outputs(result)
    assert str(seen).startswith("invalid_decision: args are not usable JSON")
    (step, _) = store.list_steps(first_run.run_id, cap=None)
    assert step.decision is not None
    assert (step.decision.args, step.decision.invalid_args) == (None, arguments)
    assert step.observation is not None and step.observation.kind == "invalid_decision"
    assert (later.run.status, later.run.result) == ("COMPLETED", "sorry")


# -- outputs that are not JSON ------------------------------------------------------------


@sync
async def test_a_tool_returning_a_model_with_an_infinite_float_is_recorded_done_as_its_text(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """A tool returns a pydantic model whose float is `inf`; the model is handed it as a
    success (`price=inf`). agentrt records the call as it ran: done, a `tool_result` whose
    content is the model's text, as for any other output that is not JSON."""
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
    run = gated(agent, store, clock, ids, {"quote": Classification("read_only", 5)}).new_run()
    result = await run.run_agent("quote gold")

    assert quoted == ["gold"]
    assert [str(o) for o in outputs(result)] == ["price=inf"]
    (step, _) = store.list_steps(run.run_id, cap=None)
    assert step.observation is not None
    assert (step.status, step.observation.kind) == ("done", "tool_result")
    assert step.observation.content == "price=inf"


@sync
async def test_a_structured_final_output_holding_1e999_completes_the_agentrt_run(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """With `output_type=Quote`, the model answers `{"price": 1e999}` (pydantic reads `inf`):
    the SDK run ends with that final output, and the agentrt run completes with it (its
    result the output's text), its lease let go."""
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
    classes = {"write_note": Classification("local_mutation", 5)}
    run = gated(agent, store, clock, ids, classes).new_run()
    result = await run.run_agent("quote")

    assert result.final_output == Quote(price=float("inf"))
    assert noted == ["a"]
    assert (run.run.status, run.run.reason, run.run.result) == (
        "COMPLETED",
        "goal_completed",
        "price=inf",
    )
    assert store.lease(run.run_id).owner == ""


@sync
async def test_text_with_a_lone_surrogate_is_recorded_escaped_and_the_run_completes(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """A tool returns `"x\\ud800"` and the model's final answer holds a lone surrogate too
    (a JSON `\\ud800` escape decodes to one): the call is recorded done with that text, the
    surrogate written `\\ud800`, and the agentrt run completes with the answer."""
    store = any_store

    @function_tool
    def note(text: str) -> str:
        """Write a note."""
        return "x\ud800"

    agent = Agent(
        name="writer",
        model=ScriptedModel(
            [
                [function_call("note", {"text": "a"}, call_id="call-1")],
                [assistant_message("ok\ud800")],
            ]
        ),
        tools=[note],
    )
    run = gated(agent, store, clock, ids, {"note": Classification("read_only", 5)}).new_run()
    result = await run.run_agent("note a")

    assert outputs(result) == ["x\ud800"]
    (step, _) = store.list_steps(run.run_id, cap=None)
    assert step.observation is not None
    assert (step.status, step.observation.content) == ("done", "x\\ud800")
    assert (run.run.status, run.run.result) == ("COMPLETED", "ok\\ud800")


# -- a tool's own settings ----------------------------------------------------------------


def _hanging(finished: list[str], **timeout: Any) -> Any:
    @function_tool(timeout=0.5, **timeout)
    async def push_branch(branch: str) -> str:
        """Push a branch."""
        await asyncio.sleep(3)
        finished.append(branch)
        return f"pushed {branch}"

    return push_branch


def _pushing(tool: Any) -> Agent[Any]:
    return Agent(
        name="publisher",
        model=ScriptedModel(
            [
                [function_call("push_branch", {"branch": "main"}, call_id="call-1")],
                [assistant_message("done")],
            ]
        ),
        tools=[tool],
    )


@sync
async def test_a_tools_own_timeout_cuts_off_a_call_that_hangs_and_is_recorded_as_a_timeout(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """A tool made with `@function_tool(timeout=0.5)` hangs; classified with 30 s. Behind the
    Gate its own timeout still holds: the call is cut off at 0.5 s, recorded as a failed
    `tool_error` (failure `timeout`), and the model is told what the SDK tells it."""
    store = any_store
    finished: list[str] = []
    classes = {"push_branch": Classification("local_mutation", 30)}
    run = gated(_pushing(_hanging(finished)), store, clock, ids, classes).new_run()
    began = time.monotonic()
    result = await run.run_agent("push main")
    took = time.monotonic() - began

    assert finished == []
    assert took < 2.5
    (told,) = outputs(result)
    assert told == "Tool 'push_branch' timed out after 0.5 seconds."
    (step, _) = store.list_steps(run.run_id, cap=None)
    assert step.observation is not None
    assert (step.status, step.observation.kind) == ("failed", "tool_error")
    assert step.observation.content["failure"] == "timeout"
    assert (run.run.status, run.run.result) == ("COMPLETED", "done")


@sync
async def test_a_tools_timeout_error_function_answers_the_model_when_its_call_is_cut_off(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """A tool made with `timeout_error_function=...` hangs past its timeout: the model is
    told what that function says, as the SDK alone would tell it."""
    store = any_store
    finished: list[str] = []

    def say(context: Any, error: Exception) -> str:
        return f"too slow: {error}"

    tool = _hanging(finished, timeout_error_function=say)
    classes = {"push_branch": Classification("local_mutation", 30)}
    run = gated(_pushing(tool), store, clock, ids, classes).new_run()
    result = await run.run_agent("push main")

    assert finished == []
    assert outputs(result) == ["too slow: Tool 'push_branch' timed out after 0.5 seconds."]


@sync
async def test_a_tool_whose_timeout_raises_ends_the_framework_run_and_fails_the_agentrt_run(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """A tool made with `timeout_behavior="raise_exception"` hangs past its timeout: the
    call is recorded as a timeout, `ToolTimeoutError` ends the framework run as the SDK
    ends it, and the agentrt run fails with `agent_error`."""
    store = any_store
    finished: list[str] = []
    tool = _hanging(finished, timeout_behavior="raise_exception")
    classes = {"push_branch": Classification("local_mutation", 30)}
    run = gated(_pushing(tool), store, clock, ids, classes).new_run()
    with pytest.raises(ToolTimeoutError):
        await run.run_agent("push main")

    assert finished == []
    (step, _) = store.list_steps(run.run_id, cap=None)
    assert step.observation is not None and step.observation.content["failure"] == "timeout"
    assert (run.run.status, run.run.reason) == ("FAILED", "agent_error")


def test_the_tool_offered_to_the_model_keeps_every_setting_of_the_consumers_tool(
    any_store: agentrt.Store, clock: FakeClock
) -> None:
    """A tool made with settings of its own (deferred loading, a timeout behaviour, an
    output schema): the tool `gate_agent` offers in its place keeps each of them; only its
    approval, its invocation and its timeout (enforced by agentrt) are the Gate's."""

    @function_tool(defer_loading=True, timeout=2, timeout_behavior="raise_exception")
    async def write_note(text: str) -> str:
        """Write a note."""
        return f"noted {text}"

    agent = Agent(name="writer", model=ScriptedModel([]), tools=[write_note])
    classes = {"write_note": Classification("local_mutation", 5)}
    (offered,) = gated(agent, any_store, clock, classes=classes).new_run().agent.tools
    taken = {"on_invoke_tool", "needs_approval", "timeout_seconds"}
    for field in dataclasses.fields(write_note):
        if field.name not in taken:
            assert getattr(offered, field.name) == getattr(write_note, field.name), field.name
    assert (offered.defer_loading, offered.timeout_behavior) == (True, "raise_exception")


# -- an agent changed after gate_agent ----------------------------------------------------


def _helper(remote: Remote) -> Agent[Any]:
    return Agent(
        name="helper",
        model=ScriptedModel(
            [
                [function_call("push_branch", {"branch": "main"}, call_id="h-1")],
                [assistant_message("helper pushed main")],
            ]
        ),
        tools=[remote.tools[2]],  # push_branch, ungated
    )


def _handing_off(remote: Remote) -> tuple[Agent[Any], ScriptedModel]:
    model = ScriptedModel([[function_call("transfer_to_helper", "{}", call_id="call-1")]])
    return Agent(name="publisher", model=model, tools=[remote.tools[0]]), model


@sync
async def test_a_handoff_added_to_the_agent_after_gate_agent_is_refused_by_new_run(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """`gate_agent` refuses handoffs; a handoff appended to `agent.handoffs` afterwards is
    refused by the next `new_run()` (`ConfigError`), never offered: the helper's push never
    runs, the model is not asked."""
    remote = Remote()
    agent, model = _handing_off(remote)
    gate = gated(agent, any_store, clock, ids, {"list_branches": CLASSES["list_branches"]})
    agent.handoffs.append(_helper(remote))

    with pytest.raises(agentrt.ConfigError, match="has handoffs"):
        gate.new_run()

    assert remote.done == []
    assert not model.calls


@pytest.mark.parametrize("added", ["handoff", "tool"])
@sync
async def test_a_handoff_or_a_tool_put_on_the_runs_agent_is_refused_before_the_model_is_asked(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids, added: str
) -> None:
    """A handoff appended to `run.agent.handoffs` (or the consumer's unwrapped tool to
    `run.agent.tools`) after `new_run()`: the framework run is refused at its start (a
    `ConfigError`), before the model is asked; nothing is recorded, the push never runs,
    and the consumer's own agent is left as it was."""
    store = any_store
    remote = Remote()
    agent, model = _handing_off(remote)
    gate = gated(agent, store, clock, ids, {"list_branches": CLASSES["list_branches"]})
    run = gate.new_run()
    if added == "handoff":
        run.agent.handoffs.append(_helper(remote))
    else:
        run.agent.tools.append(remote.tools[2])  # push_branch, ungated

    with pytest.raises(agentrt.ConfigError, match="would bypass the Gate"):
        await run.run_agent("push main")

    assert remote.done == []
    assert not model.calls
    assert (agent.handoffs, agent.tools) == ([], [remote.tools[0]])
    with pytest.raises(agentrt.NotFoundError):
        store.get_run(run.run_id)


def test_an_mcp_server_or_a_tool_added_after_gate_agent_is_refused_by_new_run(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """An MCP server, or a function tool no classification covers, added to the agent after
    `gate_agent`: `new_run()` refuses it (`ConfigError`) rather than offer it ungated."""
    remote = Remote()
    agent = Agent(name="publisher", model=ScriptedModel([]), tools=remote.tools[:2])
    classes = {n: CLASSES[n] for n in ("list_branches", "delete_branch")}
    gate = gated(agent, any_store, clock, ids, classes)

    agent.tools.append(remote.tools[2])
    with pytest.raises(agentrt.ConfigError, match="added or replaced after gate_agent"):
        gate.new_run()
    agent.tools.pop()

    agent.mcp_servers.append(object())  # type: ignore[arg-type]
    with pytest.raises(agentrt.ConfigError, match="MCP servers"):
        gate.new_run()


# -- a run id agentrt cannot hold ---------------------------------------------------------


@pytest.mark.parametrize(
    "run_id", ["", "my-run", "A" * 32, "0" * 31 + "\x00"], ids=["empty", "name", "upper", "nul"]
)
@sync
async def test_new_run_with_an_id_agentrt_cannot_hold_is_refused_before_the_model_is_asked(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids, run_id: str
) -> None:
    """`gated.new_run("my-run")` (or an empty id, upper case, a NUL) is refused by `new_run`
    itself with `ConfigError`, before any model is asked and on any store."""
    remote = Remote()
    model = ScriptedModel(
        [
            [function_call("write_note", {"text": "a"}, call_id="call-1")],
            [assistant_message("noted")],
        ]
    )
    gate = gated(Agent(name="publisher", model=model, tools=remote.tools), any_store, clock, ids)

    with pytest.raises(agentrt.ConfigError, match="run id"):
        run = gate.new_run(run_id)
        await run.run_agent("note a")

    assert not model.calls
    assert remote.done == []


@pytest.mark.parametrize(
    "run_id", ["my-run", "A" * 32, "0" * 31 + "\x00"], ids=["name", "upper", "nul"]
)
def test_resume_with_an_id_agentrt_cannot_hold_is_refused_as_such(
    any_store: agentrt.Store, clock: FakeClock, run_id: str
) -> None:
    """`gated.resume("my-run")` says the id is not one agentrt can hold (`ConfigError`),
    the store not read: no raw store error on PostgreSQL for a NUL."""
    agent = Agent(name="publisher", model=ScriptedModel([]), tools=Remote().tools)
    with pytest.raises(agentrt.ConfigError, match="is not 32 lowercase hex characters"):
        gated(agent, any_store, clock).resume(run_id)
