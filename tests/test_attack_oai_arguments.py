"""Attack: tool arguments the model writes that the Agents SDK and the adapter read differently.

Driven by the real `openai-agents` package and its own `agents.testing.ScriptedModel`;
a real store on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import os

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("agents", reason="needs agentrt[openai-agents]")

from agents import Agent, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

import agentrt
from agentrt.adapters.openai_agents import gate_agent
from conftest import FakeClock, Ids
from support.adapters.oai_attack import CLASSES, Remote, outputs, sync

set_tracing_disabled(True)  # nothing leaves the machine


@pytest.mark.parametrize(
    "arguments",
    ['{"branch": NaN}', '{"branch": Infinity}', '{"branch": "main", "n": [-Infinity]}'],
    ids=["nan", "infinity", "nested-minus-infinity"],
)
@sync
async def test_arguments_with_a_non_standard_json_constant_are_recorded_and_refused_once_approved(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids, arguments: str
) -> None:
    """The model writes `{"branch": NaN}`; the SDK holds that call for a person itself (its
    parser refuses NaN/Infinity), but the adapter's own parser reads it as a usable object, so
    today the run is never recorded and the approved call is refused as `RunMismatchError`
    ("never recorded"). It should be what any unusable arguments are (docs/adapters.md): the
    run recorded so `resume(run_id)` finds it, and once approved, recorded verbatim and
    answered `invalid_decision`, the tool never run."""
    store = any_store
    remote = Remote()
    script = [
        [function_call("push_branch", arguments, call_id="call-1")],
        [assistant_message("sorry")],
    ]
    model = ScriptedModel(script)
    agent = Agent(name="publisher", model=model, tools=remote.tools)
    gated = gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications=CLASSES,
        now=clock,
        new_id=ids,
    )
    run = gated.new_run()
    first = await run.run_agent("push")
    assert [i.call_id for i in first.interruptions] == ["call-1"]
    saved = first.to_state().to_string()

    # Another process resumes the saved state by the run's id, as for `[1, 2]`.
    later = gate_agent(
        Agent(name="publisher", model=model, tools=remote.tools),
        store=store,
        policy=agentrt.default_policy(),
        classifications=CLASSES,
        now=clock,
    ).resume(run.run_id)
    state = await later.load_state(saved)
    state.approve(state.get_interruptions()[0])
    result = await asyncio.wait_for(later.run_agent(state), 10)

    assert remote.done == []
    (seen,) = outputs(result)
    assert str(seen).startswith("invalid_decision: args are not usable JSON")
    (step, _) = store.list_steps(run.run_id, cap=None)
    assert step.decision is not None
    assert (step.decision.args, step.decision.invalid_args) == (None, arguments)
    assert step.observation is not None and step.observation.kind == "invalid_decision"
    assert (later.run.status, later.run.result) == ("COMPLETED", "sorry")
