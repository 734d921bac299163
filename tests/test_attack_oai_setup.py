"""Attack: what the consumer set on its agent and tools, and what `gate_agent` keeps of it.

Driven by the real `openai-agents` package and its own `agents.testing.ScriptedModel`;
a real store on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("agents", reason="needs agentrt[openai-agents]")

from agents import Agent, function_tool, set_tracing_disabled
from agents.exceptions import AgentsException
from agents.testing import ScriptedModel, assistant_message, function_call

import agentrt
from agentrt.adapters.openai_agents import Classification, gate_agent
from conftest import FakeClock, Ids
from support.adapters.oai_attack import CLASSES, Remote, outputs, sync

set_tracing_disabled(True)  # nothing leaves the machine


@sync
async def test_a_tools_own_timeout_still_cuts_off_a_call_that_hangs(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """A tool made with `@function_tool(timeout=0.5)` hangs; the SDK alone answers the model
    "timed out after 0.5 seconds", but `gate_agent` rebuilds the tool without its
    `timeout_seconds`, so behind the Gate the call runs on to its end (3 s here) with nothing
    said. The tool's own timeout should still hold (the call cut off and recorded as a
    timeout), or `gate_agent` should refuse the setting at start-up (`ConfigError`)."""
    store = any_store
    finished: list[str] = []

    @function_tool(timeout=0.5)
    async def push_branch(branch: str) -> str:
        """Push a branch."""
        await asyncio.sleep(3)
        finished.append(branch)
        return f"pushed {branch}"

    agent = Agent(
        name="publisher",
        model=ScriptedModel(
            [
                [function_call("push_branch", {"branch": "main"}, call_id="call-1")],
                [assistant_message("done")],
            ]
        ),
        tools=[push_branch],
    )
    try:
        gated = gate_agent(
            agent,
            store=store,
            policy=agentrt.default_policy(),
            classifications={"push_branch": Classification("local_mutation", 30)},
            now=clock,
            new_id=ids,
        )
    except agentrt.ConfigError as refused:  # refusing the setting is a fix too
        assert "timeout" in str(refused)
        return
    run = gated.new_run()
    began = time.monotonic()
    result = await run.run_agent("push main")
    took = time.monotonic() - began

    assert finished == []
    assert took < 2.5
    (told,) = outputs(result)
    assert "timed out" in str(told)
    (step, _) = store.list_steps(run.run_id, cap=None)
    assert step.status != "done"


@sync
async def test_a_handoff_added_to_the_agent_after_gate_agent_never_runs_its_tools_ungated(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """`gate_agent` refuses handoffs at start-up (their agents' tools would bypass the Gate),
    but each `new_run()` clones the consumer's agent as it is now: a handoff appended to
    `agent.handoffs` afterwards is offered, and the helper's push runs with nobody asked and
    nothing recorded. The handoff should be refused or not offered; the push never runs."""
    store = any_store
    remote = Remote()
    helper = Agent(
        name="helper",
        model=ScriptedModel(
            [
                [function_call("push_branch", {"branch": "main"}, call_id="h-1")],
                [assistant_message("helper pushed main")],
            ]
        ),
        tools=[remote.tools[2]],  # push_branch, ungated
    )
    agent = Agent(
        name="publisher",
        model=ScriptedModel([[function_call("transfer_to_helper", "{}", call_id="call-1")]]),
        tools=[remote.tools[0]],  # list_branches
    )
    gated = gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications={"list_branches": CLASSES["list_branches"]},
        now=clock,
        new_id=ids,
    )
    agent.handoffs.append(helper)  # after the start-up checks

    refused: Exception | None = None
    try:
        await gated.new_run().run_agent("push main")
    except (agentrt.ConfigError, AgentsException) as exc:
        refused = exc

    assert remote.done == []
    assert refused is not None


@pytest.mark.parametrize(
    "run_id", ["", "my-run", "A" * 32, "0" * 31 + "\x00"], ids=["empty", "name", "upper", "nul"]
)
@sync
async def test_new_run_with_an_id_agentrt_cannot_hold_is_refused_before_the_model_is_asked(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids, run_id: str
) -> None:
    """`gated.new_run("my-run")` is accepted; the model is then asked and its first tool call
    fails inside the SDK as `UserError: Error running tool ...: run id 'my-run' is not 32
    lowercase hex characters`. An id agentrt cannot hold should be refused by `new_run`
    itself (`ConfigError`), before any model is asked."""
    store = any_store
    remote = Remote()
    model = ScriptedModel(
        [
            [function_call("write_note", {"text": "a"}, call_id="call-1")],
            [assistant_message("noted")],
        ]
    )
    agent = Agent(name="publisher", model=model, tools=remote.tools)
    gated = gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications=CLASSES,
        now=clock,
        new_id=ids,
    )

    with pytest.raises(agentrt.ConfigError, match="run id"):
        run = gated.new_run(run_id)
        await run.run_agent("note a")

    assert model.calls == []
    assert remote.done == []
