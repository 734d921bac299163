"""The OpenAI Agents SDK adapter: every function-tool call of an SDK agent goes through the Gate.

Driven by the real `openai-agents` package and its own `agents.testing.ScriptedModel`
(no network); real tools, a real store, real child processes killed with SIGKILL.

Every test that touches a store takes `any_store` or `database` and runs on SQLite and on
PostgreSQL (issue 21 item 5); the child processes and the `agentrt` command get the store
by its name, and only the example and the scenario script, each with files of its own,
stay on SQLite.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("agents", reason="needs agentrt[openai-agents]")

from agents import (
    Agent,
    MaxTurnsExceeded,
    RunHooks,
    Runner,
    RunState,
    UserError,
    WebSearchTool,
    function_tool,
    set_tracing_disabled,
)
from agents.lifecycle import AgentHooks
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

import agentrt
from agentrt import _gate
from agentrt.adapters.openai_agents import (
    ApprovalPendingError,
    Classification,
    GatedRun,
    HeldCall,
    InterruptedSideEffectError,
    RequestChangedError,
    RunEndedError,
    RunMismatchError,
    RunNotNamedError,
    UnclassifiedToolError,
    gate_agent,
)
from conftest import FakeClock, Ids, event_types
from support import forkserver
from support.adapters import assert_table_printed_in_docs
from support.adapters.openai_agents_tools import CLASSES, Remote
from support.approvals import a_person_decides, assert_the_persons_decision_stands

set_tracing_disabled(True)  # nothing leaves the machine

ROOT = Path(__file__).resolve().parent.parent
CHILD = ROOT / "tests" / "support" / "adapters" / "openai_agents_child.py"


def gated_agent(
    store: agentrt.Store,
    remote: Remote,
    script: list[Any],
    clock: FakeClock,
    ids: Ids,
    **kwargs: Any,
) -> tuple[GatedRun, ScriptedModel]:
    """A framework run (a new agentrt run) of the publisher agent behind the Gate."""
    model = ScriptedModel(script)
    agent = Agent(name="publisher", model=model, tools=remote.tools)
    gated = gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications=CLASSES,
        now=clock,
        new_id=ids,
        **kwargs,
    )
    return gated.new_run(), model


def sync(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test body on its own event loop (the suite has no async plugin)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def forge(saved: str, item: Any, old: str, new: str) -> str:
    """The run state with the call's arguments changed, its SDK fingerprint recomputed to match.

    The SDK's fingerprint of a call is an unkeyed SHA-256 of its fields, so whoever
    can edit the saved state can recompute it (here with the SDK's own function).
    """
    from agents._tool_invocation import tool_invocation_identity_and_scope

    raw = item.raw_item.model_dump(exclude_none=True)
    changed = dict(raw, arguments=raw["arguments"].replace(old, new))
    before = tool_invocation_identity_and_scope(raw)
    after = tool_invocation_identity_and_scope(changed)
    assert before is not None and after is not None
    return saved.replace(old, new).replace(before[3], after[3])


def outputs(result: Any) -> list[Any]:
    return [item.output for item in result.new_items if type(item).__name__ == "ToolCallOutputItem"]


# -- in one process --------------------------------------------------------------


@sync
async def test_an_allowed_call_is_recorded_verbatim_runs_once_and_the_run_completes_with_the_output(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("list_branches", "{ }", call_id="call-1")],
        [assistant_message("two branches")],
    ]
    gated, _ = gated_agent(store, remote, script, clock, ids)

    result = await Runner.run(gated.agent, "which branches are there?")

    assert result.final_output == "two branches"
    assert outputs(result) == [["main", "feature/login"]]
    assert remote.done == [("list_branches", "")]
    run = gated.run
    assert (run.status, run.reason, run.result) == ("COMPLETED", "goal_completed", "two branches")
    steps = store.list_steps(gated.run_id, cap=None)
    assert [(s.status, s.decision.kind if s.decision else None) for s in steps] == [
        ("done", "tool_call"),
        ("done", "complete"),
    ]
    first = steps[0]
    assert first.decision is not None
    assert (first.decision.tool, first.decision.args) == ("list_branches", {})
    assert first.decision.reason == "openai-agents call_id call-1"
    assert first.observation is not None and first.observation.content == ["main", "feature/login"]
    assert event_types(store, gated.run_id).count("step.tool_started") == 1
    assert store.verify_events().intact


@sync
async def test_a_denied_call_comes_back_to_the_model_as_the_tools_error_and_never_runs(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("delete_branch", {"branch": "main"}, call_id="call-1")],
        [assistant_message("I may not delete main")],
    ]
    gated, model = gated_agent(store, remote, script, clock, ids)

    result = await Runner.run(gated.agent, "delete main")

    assert remote.done == []
    denial = "policy_denied: destructive tools are denied by the default policy"
    assert outputs(result) == [denial]
    shown = model.last_call
    assert shown is not None
    fed_back = [
        i for i in shown.input if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]
    assert [(i["call_id"], i["output"]) for i in fed_back] == [("call-1", denial)]
    (step, _) = store.list_steps(gated.run_id, cap=None)
    assert step.status == "failed"
    assert step.observation is not None and step.observation.kind == "policy_denied"
    assert "step.tool_started" not in event_types(store, gated.run_id)
    assert gated.run.status == "COMPLETED"


@pytest.mark.parametrize(
    ("arguments", "seen", "recorded_args", "invalid_args"),
    [
        (
            '{"branch": 3}',
            "invalid_decision: args do not match the input schema of 'push_branch': "
            "$.branch: 3 is not of type 'string'",
            {"branch": 3},
            None,
        ),
        (
            '{"branch": "a", "force": true}',
            "invalid_decision: args do not match the input schema of 'push_branch': "
            "$: Additional properties are not allowed ('force' was unexpected)",
            {"branch": "a", "force": True},
            None,
        ),
    ],
)
@sync
async def test_arguments_that_fail_the_schema_are_recorded_and_come_back_as_invalid_decision(
    any_store: agentrt.Store,
    clock: FakeClock,
    ids: Ids,
    arguments: str,
    seen: str,
    recorded_args: Any,
    invalid_args: str | None,
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("push_branch", arguments, call_id="call-1")],
        [assistant_message("sorry")],
    ]
    gated, _ = gated_agent(store, remote, script, clock, ids)

    result = await Runner.run(gated.agent, "push")

    assert remote.done == []
    assert outputs(result) == [seen]
    (step, _) = store.list_steps(gated.run_id, cap=None)
    assert step.decision is not None
    assert (step.decision.args, step.decision.invalid_args) == (recorded_args, invalid_args)
    assert step.observation is not None and step.observation.kind == "invalid_decision"


@sync
async def test_arguments_that_are_not_json_are_recorded_as_text_and_never_run(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    # The SDK itself holds a call whose arguments are not a JSON object for a
    # person before any policy is asked; approved, agentrt refuses it.
    store = any_store
    remote = Remote()
    script = [
        [function_call("push_branch", "{not json", call_id="call-1")],
        [assistant_message("sorry")],
    ]
    gated, _ = gated_agent(store, remote, script, clock, ids)
    first = await Runner.run(gated.agent, "push")
    assert [i.call_id for i in first.interruptions] == ["call-1"]
    state = first.to_state()
    state.approve(state.get_interruptions()[0])

    result = await Runner.run(gated.agent, state)

    assert remote.done == []
    (seen,) = outputs(result)
    assert seen.startswith("invalid_decision: args are not usable JSON")
    (step, _) = store.list_steps(gated.run_id, cap=None)
    assert step.decision is not None
    assert (step.decision.args, step.decision.invalid_args) == (None, "{not json")


def test_an_unclassified_tool_is_refused_at_start_up_and_nothing_is_written(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    remote = Remote()
    agent = Agent(name="publisher", model=ScriptedModel([]), tools=remote.tools)
    partial = {"list_branches": CLASSES["list_branches"]}
    with pytest.raises(UnclassifiedToolError, match="'delete_branch', 'push_branch'"):
        gate_agent(agent, store=store, policy=agentrt.default_policy(), classifications=partial)
    assert store.list_runs() == []


def test_a_tool_the_gate_cannot_stand_behind_is_refused_at_start_up(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    agent = Agent(name="searcher", model=ScriptedModel([]), tools=[WebSearchTool()])
    with pytest.raises(agentrt.ConfigError, match="only function tools can be gated"):
        gate_agent(agent, store=store, policy=agentrt.default_policy(), classifications={})
    helper = Agent(name="helper", model=ScriptedModel([]))
    agent = Agent(name="lead", model=ScriptedModel([]), handoffs=[helper])
    with pytest.raises(agentrt.ConfigError, match="handoffs, whose agents' tools would bypass"):
        gate_agent(agent, store=store, policy=agentrt.default_policy(), classifications={})


@sync
async def test_a_limit_ends_the_framework_run_with_gate_run_ended_and_the_call_never_runs(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("list_branches", {}, call_id="call-1")],
        [function_call("list_branches", {}, call_id="call-2")],
        [function_call("push_branch", {"branch": "x"}, call_id="call-3")],
    ]
    gated, _ = gated_agent(store, remote, script, clock, ids, limits=agentrt.Limits(max_steps=2))

    with pytest.raises(RunEndedError) as raised:
        await Runner.run(gated.agent, "look twice then push")

    assert remote.done == [("list_branches", ""), ("list_branches", "")]
    run = raised.value.run
    assert (run.status, run.reason) == ("FAILED", "limit_steps")
    assert gated.run.status == "FAILED"
    assert store.lease(gated.run_id).owner == ""


@sync
async def test_state_approve_is_decided_by_hash_and_an_edited_run_state_is_refused(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [[function_call("push_branch", {"branch": "feature/login"}, call_id="call-1")]]
    gated, _ = gated_agent(store, remote, script, clock, ids)
    first = await Runner.run(gated.agent, "publish")
    saved = first.to_state().to_string()
    edited = forge(saved, first.interruptions[0], "feature/login", "main")

    state = await RunState.from_string(gated.agent, edited)
    state.approve(state.get_interruptions()[0])
    with pytest.raises(RequestChangedError, match="is not the one agentrt recorded"):
        await Runner.run(gated.agent, state)

    assert remote.done == []
    (approval,) = store.list_approvals(gated.run_id, cap=None)
    assert approval.status == "pending"
    assert gated.run.status == "WAITING_FOR_APPROVAL"


@sync
async def test_an_approval_through_agentrt_does_not_carry_over_to_an_edited_run_state(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("push_branch", {"branch": "feature/login"}, call_id="call-1")],
        [assistant_message("done")],
    ]
    gated, _ = gated_agent(store, remote, script, clock, ids)
    first = await Runner.run(gated.agent, "publish")
    saved = first.to_state().to_string()
    (pending,) = gated.pending()
    agentrt.approve(store, gated.run_id, pending.id, by="alice", shown_hash=pending.hash)

    state = await gated.load_state(forge(saved, first.interruptions[0], "feature/login", "main"))
    with pytest.raises(RequestChangedError, match="not the ones agentrt recorded"):
        await Runner.run(gated.agent, state)
    assert remote.done == []

    state = await gated.load_state(saved)
    result = await Runner.run(gated.agent, state)
    assert remote.done == [("push_branch", "feature/login")]
    assert result.final_output == "done"


@sync
async def test_gated_approve_decides_the_agentrt_approval_by_the_hash_of_what_the_person_saw(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """On SQLite and PostgreSQL (issue 21 item 5), this file's one test on both so far."""
    store = any_store
    remote = Remote()
    script = [
        [function_call("push_branch", {"branch": "feature/login"}, call_id="call-1")],
        [assistant_message("published")],
    ]
    gated, _ = gated_agent(store, remote, script, clock, ids)
    first = await Runner.run(gated.agent, "publish")
    state = first.to_state()
    (pending,) = gated.pending()

    decided = await gated.approve(state, state.get_interruptions()[0], by="alice", note="ok")

    assert (decided.id, decided.status, decided.decided_by) == (pending.id, "approved", "alice")
    assert decided.hash == pending.hash
    assert remote.done == []
    result = await Runner.run(gated.agent, state)
    assert remote.done == [("push_branch", "feature/login")]
    assert result.final_output == "published"


@sync
async def test_gated_reject_cancels_the_run_and_the_model_is_told(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("push_branch", {"branch": "feature/login"}, call_id="call-1")],
        [assistant_message("not published")],
    ]
    gated, _ = gated_agent(store, remote, script, clock, ids)
    first = await Runner.run(gated.agent, "publish")
    state = first.to_state()

    await gated.reject(state, state.get_interruptions()[0], by="bob", note="not today")
    result = await Runner.run(gated.agent, state)

    assert remote.done == []
    assert outputs(result) == ["policy_denied: rejected by bob: not today"]
    run = gated.run
    assert (run.status, run.reason) == ("CANCELLED", "approval_rejected")


@sync
async def test_a_state_loaded_after_agentrt_cancel_tells_the_model_the_call_was_not_run(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """A cancel leaves the waiting call's approval expired, decided by no one: the state
    loaded afterwards does not hand the call back as an interruption nobody could decide
    any more; the model is told it was not run, as `run_agent(wait_for_person=True)` tells
    it, and the run stays as the person ended it."""
    store = any_store
    remote = Remote()
    script = [
        [function_call("push_branch", {"branch": "feature/login"}, call_id="call-1")],
        [assistant_message("not published")],
    ]
    gated, model = gated_agent(store, remote, script, clock, ids)
    first = await Runner.run(gated.agent, "publish")
    saved = first.to_state().to_string()
    agentrt.cancel(store, gated.run_id, "carol", "stop")
    events_before = event_types(store, gated.run_id)

    result = await Runner.run(gated.agent, await gated.load_state(saved))

    assert remote.done == []
    assert result.interruptions == []
    assert outputs(result) == [told_not_run(gated.run_id, "cancels")]
    assert result.final_output == "not published"
    assert len(model.calls) == 2
    (approval,) = store.list_approvals(gated.run_id, cap=None)
    assert (approval.status, approval.decided_by) == ("expired", "carol")
    assert (gated.run.status, gated.run.reason) == ("CANCELLED", "operator_cancelled")
    assert event_types(store, gated.run_id) == events_before  # nothing more recorded
    assert store.verify_events().intact


@pytest.mark.parametrize("path", ["load_state", "wait_for_person"])
@sync
async def test_a_call_the_sdk_held_beside_one_waiting_is_told_not_run_once_a_cancel_ended_the_run(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids, path: str, monkeypatch: Any
) -> None:
    """Beside the waiting push the SDK held a note whose arguments are not a JSON object (it
    has no agentrt approval). After `agentrt cancel` neither can be decided any more: both
    are told not run, the model answers and nothing is handed back (decision 0123), through
    `load_state` as through `run_agent(wait_for_person=True)` (which did so before 0123)."""
    from agentrt.adapters.openai_agents import _gated

    store = any_store
    remote = Remote()
    script = [
        [
            function_call("push_branch", {"branch": "feature/login"}, call_id="call-1"),
            function_call("write_note", "[1, 2]", call_id="call-2"),
        ],
        [assistant_message("not published")],
    ]
    gated, model = gated_agent(store, remote, script, clock, ids)
    if path == "load_state":
        first = await Runner.run(gated.agent, "publish")
        assert [i.call_id for i in first.interruptions] == ["call-1", "call-2"]
        saved = first.to_state().to_string()
        agentrt.cancel(store, gated.run_id, "carol", "stop")
        result = await Runner.run(gated.agent, await gated.load_state(saved))
    else:
        wait = _gated.until_decided

        async def cancelled(
            store_: agentrt.Store, run_id: str, approval_id: str, **kw: Any
        ) -> agentrt.Approval:
            agentrt.cancel(store, run_id, "carol", "stop")
            return await wait(store_, run_id, approval_id, **kw)

        monkeypatch.setattr(_gated, "until_decided", cancelled)
        result = await asyncio.wait_for(
            gated.run_agent("publish", wait_for_person=True, poll_interval=0.01), 20
        )

    not_run = told_not_run(gated.run_id, "cancels")
    assert result.interruptions == []
    assert outputs(result) == [not_run, not_run]
    assert (result.final_output, len(model.calls)) == ("not published", 2)
    assert remote.done == []
    assert (gated.run.status, gated.run.reason) == ("CANCELLED", "operator_cancelled")


@sync
async def test_state_reject_is_carried_into_agentrt_and_ends_the_run_while_the_model_is_told(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("push_branch", {"branch": "feature/login"}, call_id="call-1")],
        [assistant_message("not published")],
    ]
    gated, _ = gated_agent(store, remote, script, clock, ids)
    first = await Runner.run(gated.agent, "publish")
    state = first.to_state()
    state.reject(state.get_interruptions()[0])

    result = await Runner.run(gated.agent, state)

    assert remote.done == []
    assert result.final_output == "not published"
    (approval,) = store.list_approvals(gated.run_id, cap=None)
    assert (approval.status, approval.decided_by) == ("rejected", "openai-agents state.reject")
    assert (gated.run.status, gated.run.reason) == ("CANCELLED", "approval_rejected")


@pytest.mark.parametrize("person", ["approves", "rejects", "cancels"])
@sync
async def test_a_person_deciding_while_the_state_reject_is_carried_stands_and_is_told(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids, person: str
) -> None:
    """A person decides between the adapter's read of what is pending and its carrying of
    the SDK's rejection (decision 0115): the person's decision stands, nothing is lost or
    changed, the consumer is told, and the run is not wedged.

    The race is driven at the window itself: the read hands back what it read, and the
    person decides right after it, before the adapter carries `state.reject`.
    """
    store = any_store
    remote = Remote()
    script = [
        [function_call("push_branch", {"branch": "feature/login"}, call_id="call-1")],
        [assistant_message("not published")],
        [assistant_message("published")],
    ]
    gated, model = gated_agent(store, remote, script, clock, ids)
    first = await Runner.run(gated.agent, "publish")
    saved = first.to_state().to_string()
    state = first.to_state()
    state.reject(state.get_interruptions()[0])
    (waiting,) = gated.pending()
    read, raced = gated.pending, []

    def read_then_a_person_decides() -> list[agentrt.Approval]:
        seen = read()
        if seen and not raced:
            raced.append(person)
            a_person_decides(store, gated.run_id, waiting, person)
        return seen

    gated.pending = read_then_a_person_decides  # type: ignore[method-assign]

    if person == "approves":
        with pytest.raises(RunMismatchError) as told:
            await Runner.run(gated.agent, state)
        assert "approved by alice" in str(told.value)
        assert "RunState.reject" in str(told.value) and "was not carried" in str(told.value)
        assert (told.value.approval_id, told.value.approval_hash) == (waiting.id, waiting.hash)
    else:
        result = await Runner.run(gated.agent, state)
        assert result.final_output == "not published"
    assert raced == [person]
    assert remote.done == []
    assert_the_persons_decision_stands(store, gated.run_id, waiting, person)
    expected = {
        "approves": ("WAITING_FOR_APPROVAL", "awaiting_approval"),
        "rejects": ("CANCELLED", "failed"),
        "cancels": ("CANCELLED", "failed"),
    }[person]
    assert gated.run.status == expected[0]
    assert [s for s, _ in calls(store, gated.run_id)] == [expected[1]]
    decided = event_types(store, gated.run_id).count("approval.decided")
    assert decided == (0 if person == "cancels" else 1)  # the person's, and no other
    assert len(model.calls) == (1 if person == "approves" else 2)
    if person == "approves":
        # Not wedged: the saved state, with agentrt's decision carried in, runs the call once.
        gated.pending = read  # type: ignore[method-assign]
        result = await gated.run_agent(await gated.load_state(saved))
        assert remote.done == [("push_branch", "feature/login")]
        assert result.final_output == "not published"
        assert outputs(result) == ["pushed feature/login"]
        assert (gated.run.status, gated.run.reason) == ("COMPLETED", "goal_completed")


def a_person_decides_after_the_read_of(gated: GatedRun, reader: str, person: str) -> list[Any]:
    """`gated.pending` made to hand back what it read and, the first time the adapter's
    method `reader` reads an approval waiting, a person decides it right after the read
    (approves it, rejects it, or cancels the run).

    Returns the list the approval the person decided is appended to, once they have."""
    store, read, raced = gated.store, gated.pending, []

    def read_then_a_person_decides() -> list[agentrt.Approval]:
        seen = read()
        if seen and not raced and sys._getframe(1).f_code.co_name == reader:
            waiting = seen[-1]
            raced.append(waiting)
            a_person_decides(store, gated.run_id, waiting, person)
        return seen

    gated.pending = read_then_a_person_decides  # type: ignore[method-assign]
    return raced


@pytest.mark.parametrize("person", ["approves", "rejects", "cancels"])
@sync
async def test_a_person_deciding_while_the_state_approve_is_carried_stands_and_is_told(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids, person: str
) -> None:
    """A person decides between the adapter's read of what is pending and its carrying of
    the SDK's approval (`state.approve`) as agentrt's (decision 0118): the person's decision
    stands, the call runs once only when they approved it, and the consumer gets no store
    error.

    The race is driven at the window itself: the read `_judge_sdk_approved` makes hands back
    what it read, and the person decides right after it, before the adapter approves.
    """
    store = any_store
    remote = Remote()
    script = [
        [function_call("push_branch", {"branch": "feature/login"}, call_id="call-1")],
        [assistant_message("done")],
    ]
    gated, model = gated_agent(store, remote, script, clock, ids)
    first = await Runner.run(gated.agent, "publish")
    state = first.to_state()
    state.approve(state.get_interruptions()[0])
    (waiting,) = gated.pending()
    raced = a_person_decides_after_the_read_of(gated, "_judge_sdk_approved", person)

    result = await Runner.run(gated.agent, state)

    assert raced == [waiting]
    assert result.final_output == "done"
    told = {
        "approves": "pushed feature/login",
        "rejects": "policy_denied: approval rejected: not today",
        "cancels": "interrupted: cancelled by carol",
    }[person]
    assert outputs(result) == [told]
    assert remote.done == ([("push_branch", "feature/login")] if person == "approves" else [])
    assert_the_persons_decision_stands(store, gated.run_id, waiting, person)
    expected = {
        "approves": ("COMPLETED", "goal_completed", "done"),
        "rejects": ("CANCELLED", "approval_rejected", "failed"),
        "cancels": ("CANCELLED", "operator_cancelled", "failed"),
    }[person]
    assert (gated.run.status, gated.run.reason) == expected[0:2]
    assert [s for s, _ in calls(store, gated.run_id)] == [expected[2]]
    events = event_types(store, gated.run_id)
    assert events.count("approval.decided") == (0 if person == "cancels" else 1)  # the person's
    assert events.count("step.tool_started") == (1 if person == "approves" else 0)
    assert len(model.calls) == 2
    assert store.verify_events().intact


@sync
async def test_calls_of_one_model_response_are_judged_and_run_one_at_a_time_in_order(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [
            function_call("list_branches", {}, call_id="call-1"),
            function_call("delete_branch", {"branch": "main"}, call_id="call-2"),
            function_call("list_branches", {}, call_id="call-3"),
        ],
        [assistant_message("looked")],
    ]
    gated, _ = gated_agent(store, remote, script, clock, ids)

    result = await Runner.run(gated.agent, "look")

    assert result.final_output == "looked"
    assert remote.done == [("list_branches", ""), ("list_branches", "")]
    steps = store.list_steps(gated.run_id, cap=None)
    assert [(s.status, s.decision.reason if s.decision else "") for s in steps] == [
        ("done", "openai-agents call_id call-1"),
        ("failed", "openai-agents call_id call-2"),
        ("done", "openai-agents call_id call-3"),
        ("done", ""),
    ]


# -- a call made beside one that waits for a person (decisions 0050, 0052) ---------


HELD_SCRIPT: list[Any] = [
    [
        function_call("push_branch", {"branch": "feature/login"}, call_id="call-push"),
        function_call("write_note", '{"text": "pushed"}', call_id="call-note"),
    ],
    [assistant_message("published and noted")],
]


class SlowPushStart(RunHooks[Any]):
    """The consumer's run hook, slow for the push: without an order, the note would overtake it."""

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if tool.name == "push_branch":
            await asyncio.sleep(0.05)


def calls(store: agentrt.Store, run_id: str) -> list[tuple[str, str]]:
    return [
        (s.status, s.decision.reason)
        for s in store.list_steps(run_id, cap=None)
        if s.decision is not None and s.decision.kind == "tool_call"
    ]


@sync
async def test_a_call_made_beside_one_that_waits_for_a_person_is_held_and_nothing_runs(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    gated, _ = gated_agent(store, remote, HELD_SCRIPT, clock, ids)

    first = await gated.run_agent("publish and note it")

    assert remote.done == []
    assert [i.call_id for i in first.interruptions] == ["call-push", "call-note"]
    assert calls(store, gated.run_id) == [("awaiting_approval", "openai-agents call_id call-push")]
    (pending,) = gated.pending()
    assert pending.request["args"] == {"branch": "feature/login"}
    (held,) = gated.held(first)
    assert (held.call_id, held.tool, held.behind) == ("call-note", "write_note", "call-push")
    assert held.item is first.interruptions[1]
    assert [h.call_id for h in gated.held(first.to_state())] == ["call-note"]
    assert isinstance(held, HeldCall)
    assert "step.tool_started" not in event_types(store, gated.run_id)
    assert gated.run.status == "WAITING_FOR_APPROVAL"


@sync
async def test_after_state_approve_of_both_the_waiting_call_runs_first_then_the_held_one_each_once(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    gated, _ = gated_agent(store, remote, HELD_SCRIPT, clock, ids)
    first = await gated.run_agent("publish and note it")
    state = first.to_state()
    for item in state.get_interruptions():
        state.approve(item)

    result = await gated.run_agent(state, hooks=SlowPushStart())

    assert result.final_output == "published and noted"
    assert remote.done == [("push_branch", "feature/login"), ("write_note", "pushed")]
    assert outputs(result) == ["pushed feature/login", "noted pushed"]
    assert calls(store, gated.run_id) == [
        ("done", "openai-agents call_id call-push"),
        ("done", "openai-agents held call_id call-note"),
    ]
    note = store.list_steps(gated.run_id, cap=None)[1]
    assert note.decision is not None and note.decision.args == {"text": "pushed"}
    assert event_types(store, gated.run_id).count("step.tool_started") == 2
    (approval,) = store.list_approvals(gated.run_id, cap=None)
    assert (approval.status, approval.decided_by) == ("approved", "openai-agents state.approve")
    assert (gated.run.status, gated.run.reason) == ("COMPLETED", "goal_completed")
    assert store.verify_events().intact


@sync
async def test_gated_approve_of_the_waiting_call_lets_the_sdk_go_on_with_the_held_one(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    gated, _ = gated_agent(store, remote, HELD_SCRIPT, clock, ids)
    first = await gated.run_agent("publish and note it")
    state = first.to_state()
    push, _ = state.get_interruptions()

    await gated.approve(state, push, by="alice")

    assert [h.call_id for h in gated.held(state)] == ["call-note"]
    assert gated.held(state)[0].behind is None  # nothing waits for a person any more
    result = await gated.run_agent(state)
    assert remote.done == [("push_branch", "feature/login"), ("write_note", "pushed")]
    assert result.final_output == "published and noted"
    assert [s for s, _ in calls(store, gated.run_id)] == ["done", "done"]


@pytest.mark.parametrize("how", ["gated.reject", "agentrt reject", "state.reject"])
@sync
async def test_after_the_waiting_call_is_rejected_the_held_call_never_runs(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids, how: str
) -> None:
    store = any_store
    remote = Remote()
    script = [HELD_SCRIPT[0], [assistant_message("nothing was done")]]
    gated, _ = gated_agent(store, remote, script, clock, ids)
    first = await gated.run_agent("publish and note it")
    state = first.to_state()
    push, note = state.get_interruptions()

    if how == "gated.reject":
        await gated.reject(state, push, by="bob", note="not today")
    elif how == "agentrt reject":
        (pending,) = gated.pending()
        agentrt.reject(
            store, gated.run_id, pending.id, by="bob", note="not today", shown_hash=pending.hash
        )
        state = await gated.load_state(first.to_state().to_string())
    else:  # the SDK's own way: the push rejected, the note let through
        state.reject(push)
        state.approve(note)

    if how == "state.reject":
        # The rejection reaches agentrt first; the held call then meets the ended run.
        with pytest.raises(RunEndedError, match="CANCELLED"):
            await gated.run_agent(state)
    else:
        result = await gated.run_agent(state)
        assert result.final_output == "nothing was done"
        assert outputs(result) == [
            "policy_denied: rejected by bob: not today",
            "not run: agentrt run "
            f"{gated.run_id} is CANCELLED (approval_rejected: not today); no tool call runs in it",
        ]
    assert remote.done == []
    assert calls(store, gated.run_id) == [("failed", "openai-agents call_id call-push")]
    assert (gated.run.status, gated.run.reason) == ("CANCELLED", "approval_rejected")
    assert "step.tool_started" not in event_types(store, gated.run_id)


@pytest.mark.parametrize("person", ["approves", "rejects", "cancels"])
@sync
async def test_a_person_deciding_while_a_call_beside_the_waiting_one_is_judged_stands_and_is_told(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids, person: str
) -> None:
    """A person decides the waiting call between the adapter's read of what is pending,
    when it judges the call made beside it, and what it makes of that read (decision 0118).

    Approved: the call beside it is held, as when the person is a moment slower, and the
    framework run ends with both interruptions; it is not told the run ended. Rejected or
    cancelled: the held call meets the run's end, as when the person is a moment quicker.
    The race is driven at the window: `_open`'s read hands back what it read, and the
    person decides right after it.
    """
    store = any_store
    remote = Remote()
    gated, model = gated_agent(store, remote, HELD_SCRIPT, clock, ids)
    raced = a_person_decides_after_the_read_of(gated, "_open", person)

    if person == "approves":
        first = await Runner.run(gated.agent, "publish and note it")
        assert [i.call_id for i in first.interruptions] == ["call-push", "call-note"]
        (held,) = gated.held(first)
        assert (held.call_id, held.behind) == ("call-note", None)  # nothing waits any more
    else:
        ended = "approval_rejected: not today" if person == "rejects" else "operator_cancelled"
        with pytest.raises(RunEndedError, match=f"is CANCELLED \\({ended}"):
            await Runner.run(gated.agent, "publish and note it")
    (waiting,) = raced
    assert remote.done == []
    assert "step.tool_started" not in event_types(store, gated.run_id)
    assert_the_persons_decision_stands(store, gated.run_id, waiting, person)
    expected = {
        "approves": ("WAITING_FOR_APPROVAL", "awaiting_approval"),
        "rejects": ("CANCELLED", "failed"),
        "cancels": ("CANCELLED", "failed"),
    }[person]
    assert gated.run.status == expected[0]
    assert calls(store, gated.run_id) == [(expected[1], "openai-agents call_id call-push")]
    decided = event_types(store, gated.run_id).count("approval.decided")
    assert decided == (0 if person == "cancels" else 1)  # the person's, and no other
    assert len(model.calls) == 1
    if person == "approves":
        # Not wedged: the run state, with agentrt's decision carried in, runs the waiting
        # call once, then the held one in its turn.
        result = await gated.run_agent(await gated.load_state(first.to_state().to_string()))
        assert remote.done == [("push_branch", "feature/login"), ("write_note", "pushed")]
        assert result.final_output == "published and noted"
        assert calls(store, gated.run_id) == [
            ("done", "openai-agents call_id call-push"),
            ("done", "openai-agents held call_id call-note"),
        ]
        assert event_types(store, gated.run_id).count("approval.decided") == 1
        assert (gated.run.status, gated.run.reason) == ("COMPLETED", "goal_completed")
    assert store.verify_events().intact


def told_not_run(run_id: str, person: str) -> str:
    why = "approval_rejected: not today" if person == "rejects" else "operator_cancelled: stop"
    return f"not run: agentrt run {run_id} is CANCELLED ({why}); no tool call runs in it"


@pytest.mark.parametrize("person", ["approves", "rejects", "cancels"])
@sync
async def test_a_person_deciding_right_after_run_agent_reads_what_waits_ends_its_wait_at_once(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids, person: str
) -> None:
    """`run_agent(wait_for_person=True)` reads what the run waits on, then waits for it to be
    decided; a person deciding right after that read (decision 0118) ends the wait at once,
    and the decision is carried as when it comes later: the waiting call runs once only when
    approved, the call held beside it in its turn, or the model is told neither ran."""
    store = any_store
    remote = Remote()
    script = [HELD_SCRIPT[0], [assistant_message("published and noted")]]
    gated, model = gated_agent(store, remote, script, clock, ids)
    raced = a_person_decides_after_the_read_of(gated, "_wait_for_person", person)

    result = await gated.run_agent("publish and note it", wait_for_person=True, poll_interval=60)

    (waiting,) = raced
    assert result.final_output == "published and noted"
    assert result.interruptions == []
    not_run = told_not_run(gated.run_id, person)
    assert (
        outputs(result)
        == {
            "approves": ["pushed feature/login", "noted pushed"],
            "rejects": ["policy_denied: rejected by bob: not today", not_run],
            "cancels": [not_run, not_run],
        }[person]
    )
    ran = [("push_branch", "feature/login"), ("write_note", "pushed")]
    assert remote.done == (ran if person == "approves" else [])
    assert_the_persons_decision_stands(store, gated.run_id, waiting, person)
    expected = {
        "approves": ("COMPLETED", "goal_completed"),
        "rejects": ("CANCELLED", "approval_rejected"),
        "cancels": ("CANCELLED", "operator_cancelled"),
    }[person]
    assert (gated.run.status, gated.run.reason) == expected
    assert calls(store, gated.run_id) == (
        [
            ("done", "openai-agents call_id call-push"),
            ("done", "openai-agents held call_id call-note"),
        ]
        if person == "approves"
        else [("failed", "openai-agents call_id call-push")]
    )
    events = event_types(store, gated.run_id)
    assert events.count("approval.decided") == (0 if person == "cancels" else 1)
    assert events.count("step.tool_started") == (2 if person == "approves" else 0)
    assert len(model.calls) == 2
    assert store.verify_events().intact


@pytest.mark.parametrize("person", ["approves", "rejects", "cancels"])
@sync
async def test_a_person_deciding_while_load_state_carries_decisions_in_is_carried_by_the_next_load(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids, person: str
) -> None:
    """`load_state` carries agentrt's decisions into the run state, then reads what is
    pending to let the SDK go on with a held call; a person deciding right after that read
    (decision 0118) leaves the state as if they had decided just after `load_state`: nothing
    runs and the model is not asked, the framework run hands back the same interruptions,
    and the next `load_state` carries the decision."""
    store = any_store
    remote = Remote()
    script = [HELD_SCRIPT[0], [assistant_message("published and noted")]]
    gated, model = gated_agent(store, remote, script, clock, ids)
    first = await gated.run_agent("publish and note it")
    saved = first.to_state().to_string()
    raced = a_person_decides_after_the_read_of(gated, "_release_held", person)

    state = await gated.load_state(saved)
    again = await Runner.run(gated.agent, state)

    (waiting,) = raced
    assert [i.call_id for i in again.interruptions] == ["call-push", "call-note"]
    assert (remote.done, len(model.calls)) == ([], 1)
    assert "step.tool_started" not in event_types(store, gated.run_id)
    assert_the_persons_decision_stands(store, gated.run_id, waiting, person)
    expected = {
        "approves": ("WAITING_FOR_APPROVAL",),
        "rejects": ("CANCELLED",),
        "cancels": ("CANCELLED",),
    }[person]
    assert gated.run.status == expected[0]
    decided = event_types(store, gated.run_id).count("approval.decided")
    assert decided == (0 if person == "cancels" else 1)

    result = await gated.run_agent(await gated.load_state(saved))

    not_run = told_not_run(gated.run_id, person)
    assert result.final_output == "published and noted"
    assert result.interruptions == []
    told = {
        "approves": ["pushed feature/login", "noted pushed"],
        "rejects": ["policy_denied: rejected by bob: not today", not_run],
        # The cancelled call (its approval expired, decided by no one) is told not run,
        # as `run_agent(wait_for_person=True)` tells it, and so is the call held behind it.
        "cancels": [not_run, not_run],
    }
    assert outputs(result) == told[person]
    ran = [("push_branch", "feature/login"), ("write_note", "pushed")]
    assert remote.done == (ran if person == "approves" else [])
    assert gated.run.status == ("COMPLETED" if person == "approves" else "CANCELLED")
    assert event_types(store, gated.run_id).count("approval.decided") == decided
    assert store.verify_events().intact


@sync
async def test_a_held_call_the_policy_sends_to_a_person_gets_its_own_approval_and_runs_once(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [
            function_call("push_branch", {"branch": "feature/login"}, call_id="call-1"),
            function_call("push_branch", {"branch": "feature/logout"}, call_id="call-2"),
        ],
        [assistant_message("both published")],
    ]
    gated, _ = gated_agent(store, remote, script, clock, ids)
    first = await gated.run_agent("publish both")
    saved = first.to_state().to_string()
    assert [h.call_id for h in gated.held(first)] == ["call-2"]
    state = first.to_state()
    for item in state.get_interruptions():
        state.approve(item)

    # The first push runs; the second, judged in its turn, needs a person. The
    # SDK cannot pause a call it has begun: the framework run stops, nothing else ran.
    with pytest.raises(ApprovalPendingError, match=r"held behind another.*approval"):
        await gated.run_agent(state)

    assert remote.done == [("push_branch", "feature/login")]
    assert calls(store, gated.run_id) == [
        ("done", "openai-agents call_id call-1"),
        ("awaiting_approval", "openai-agents held call_id call-2"),
    ]
    first_approval, second = store.list_approvals(gated.run_id, cap=None)
    assert (second.status, second.request["args"]) == ("pending", {"branch": "feature/logout"})
    assert second.hash != first_approval.hash
    assert [p.id for p in gated.pending()] == [second.id]

    # The SDK approval the person gave while it was held decides nothing.
    state = await RunState.from_string(gated.agent, saved)
    for item in state.get_interruptions():
        state.approve(item)
    with pytest.raises(ApprovalPendingError, match="cannot decide"):
        await gated.run_agent(state)
    assert remote.done == [("push_branch", "feature/login")]
    assert store.get_approval(gated.run_id, second.id).status == "pending"

    # Decided through agentrt, the saved state resumes: the first push is not run
    # again (its recorded outcome), the second runs once.
    agentrt.approve(store, gated.run_id, second.id, by="alice", shown_hash=second.hash)
    result = await gated.run_agent(await gated.load_state(saved))
    assert result.final_output == "both published"
    assert remote.done == [("push_branch", "feature/login"), ("push_branch", "feature/logout")]
    assert outputs(result) == ["pushed feature/login", "pushed feature/logout"]
    assert event_types(store, gated.run_id).count("step.tool_started") == 2
    assert (gated.run.status, gated.run.reason) == ("COMPLETED", "goal_completed")


@sync
async def test_a_held_call_the_person_rejects_the_sdk_way_never_runs_and_is_not_recorded(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [HELD_SCRIPT[0], [assistant_message("published, no note")]]
    gated, _ = gated_agent(store, remote, script, clock, ids)
    first = await gated.run_agent("publish and note it")
    state = first.to_state()
    push, note = state.get_interruptions()
    state.approve(push)
    state.reject(note, rejection_message="no notes today")

    result = await gated.run_agent(state)

    assert result.final_output == "published, no note"
    assert remote.done == [("push_branch", "feature/login")]
    assert outputs(result) == ["pushed feature/login", "no notes today"]
    assert calls(store, gated.run_id) == [("done", "openai-agents call_id call-push")]
    assert (gated.run.status, gated.run.reason) == ("COMPLETED", "goal_completed")


def test_a_tool_input_guardrail_is_refused_at_start_up(any_store: agentrt.Store) -> None:
    store = any_store
    from agents import ToolGuardrailFunctionOutput, tool_input_guardrail

    @tool_input_guardrail
    def allow_all(data: Any) -> ToolGuardrailFunctionOutput:
        return ToolGuardrailFunctionOutput.allow()

    @function_tool(tool_input_guardrails=[allow_all])
    def guarded(q: str) -> str:
        """Guarded."""
        return q

    agent = Agent(name="g", model=ScriptedModel([]), tools=[guarded])
    with pytest.raises(agentrt.ConfigError, match="tool input guardrails on 'guarded'"):
        gate_agent(
            agent,
            store=store,
            policy=agentrt.default_policy(),
            classifications={"guarded": Classification("read_only", 5)},
        )


# -- which agentrt run a framework run names ------------------------------------


def publisher(
    store: agentrt.Store, remote: Remote, script: list[Any], clock: FakeClock, ids: Ids
) -> Any:
    agent = Agent(name="publisher", model=ScriptedModel(script), tools=remote.tools)
    return gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications=CLASSES,
        now=clock,
        new_id=ids,
    )


@sync
async def test_one_gated_agent_built_once_serves_two_framework_runs_each_its_own_agentrt_run(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("list_branches", {}, call_id="call-1")],
        [assistant_message("first")],
        [function_call("list_branches", {}, call_id="call-2")],
        [assistant_message("second")],
    ]
    gated = publisher(store, remote, script, clock, ids)

    first, second = gated.new_run(), gated.new_run()
    one = await first.run_agent("look")
    two = await second.run_agent("look again")

    assert (one.final_output, two.final_output) == ("first", "second")
    assert first.run_id != second.run_id
    assert remote.done == [("list_branches", ""), ("list_branches", "")]
    for run in (first, second):
        assert (run.run.status, run.run.reason) == ("COMPLETED", "goal_completed")
        assert len(store.list_steps(run.run_id, cap=None)) == 2
        assert store.lease(run.run_id).owner == ""


@sync
async def test_a_framework_run_of_the_agent_that_names_no_run_is_refused_before_the_model_is_asked(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    model = ScriptedModel([[function_call("list_branches", {}, call_id="call-1")]])
    agent = Agent(name="publisher", model=model, tools=remote.tools)
    gated = gate_agent(agent, store=store, policy=agentrt.default_policy(), classifications=CLASSES)

    with pytest.raises(RunNotNamedError, match=r"gated.new_run\(\).agent"):
        await Runner.run(gated.agent, "look")

    assert remote.done == []
    assert model.remaining_steps == 1
    assert store.list_runs(cap=None) == []


def test_a_resume_naming_a_run_the_store_never_recorded_is_refused_and_starts_nothing(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    gated = publisher(store, Remote(), [], clock, ids)

    with pytest.raises(RunMismatchError, match="never recorded in this store"):
        gated.resume("cd" * 16)
    with pytest.raises(RunNotNamedError):
        gated.resume("")

    assert store.list_runs(cap=None) == []


@sync
async def test_a_new_run_naming_a_run_that_exists_is_refused(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    script = [[function_call("list_branches", {}, call_id="call-1")], [assistant_message("ok")]]
    gated = publisher(store, Remote(), script, clock, ids)
    run = gated.new_run("ab" * 16)
    await run.run_agent("look")

    with pytest.raises(RunMismatchError, match=r"resume\('abab"):
        gated.new_run("ab" * 16)


@sync
async def test_load_state_refuses_a_state_whose_calls_the_named_run_never_recorded(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("push_branch", {"branch": "feature/login"}, call_id="call-push")],
        [function_call("list_branches", {}, call_id="call-look")],
        [assistant_message("looked")],
    ]
    gated = publisher(store, remote, script, clock, ids)
    pushing = gated.new_run()
    first = await pushing.run_agent("publish")
    saved = first.to_state().to_string()
    other = gated.new_run()
    await other.run_agent("look")

    with pytest.raises(RunMismatchError, match="'call-push'"):
        await other.load_state(saved)

    assert store.list_approvals(other.run_id, cap=None) == []
    assert (other.run.status, other.run.reason) == ("COMPLETED", "goal_completed")
    assert remote.done == [("list_branches", "")]


@sync
async def test_a_call_approved_in_a_state_the_named_run_never_recorded_is_refused_and_never_runs(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("push_branch", {"branch": "feature/login"}, call_id="call-push")],
        [function_call("list_branches", {}, call_id="call-look")],
        [assistant_message("looked")],
    ]
    gated = publisher(store, remote, script, clock, ids)
    first = await gated.new_run().run_agent("publish")
    other = gated.new_run()
    await other.run_agent("look")
    state = await RunState.from_string(other.agent, first.to_state().to_string())
    state.approve(state.get_interruptions()[0])

    with pytest.raises(RunMismatchError, match="never recorded it; nothing ran"):
        await other.run_agent(state)

    assert remote.done == [("list_branches", "")]
    assert store.list_approvals(other.run_id, cap=None) == []
    assert [s.decision.reason for s in store.list_steps(other.run_id, cap=None) if s.decision] == [
        "openai-agents call_id call-look",
        "",
    ]


@sync
async def test_a_framework_run_stopped_by_max_turns_fails_the_agentrt_run_and_lets_go_of_it(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("list_branches", {}, call_id="call-1")],
        [function_call("list_branches", {}, call_id="call-2")],
        [assistant_message("never")],
    ]
    run = publisher(store, remote, script, clock, ids).new_run()

    with pytest.raises(MaxTurnsExceeded):
        await run.run_agent("look", max_turns=1)

    assert remote.done == [("list_branches", "")]
    assert (run.run.status, run.run.reason) == ("FAILED", "agent_error")
    assert store.lease(run.run_id).owner == ""
    steps = store.list_steps(run.run_id, cap=None)
    assert [s.status for s in steps] == ["done", "failed"]


def test_importing_the_adapter_without_the_sdk_names_the_extra_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['agents'] = None  # the SDK is not installed\n"
        "import agentrt.adapters.openai_agents\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "ImportError: agentrt.adapters.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'agentrt[openai-agents]'"
    )


# -- streaming, and the synchronous entry point ----------------------------------


async def consume(result: Any) -> list[str]:
    """Every event of a streamed run, as the SDK's stream gives them (their kinds)."""
    return [event.type async for event in result.stream_events()]


@sync
async def test_a_streamed_run_records_an_allowed_call_runs_it_once_and_completes_at_the_end(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("list_branches", "{ }", call_id="call-1")],
        [assistant_message("two branches")],
    ]
    gated, _ = gated_agent(store, remote, script, clock, ids)

    result = gated.run_agent_streamed("which branches are there?")
    assert store.list_runs(cap=None) == []  # nothing runs before the stream is consumed
    kinds = await consume(result)

    assert "run_item_stream_event" in kinds
    assert result.is_complete and result.final_output == "two branches"
    assert remote.done == [("list_branches", "")]
    (step, end) = store.list_steps(gated.run_id, cap=None)
    assert step.decision is not None
    assert (step.status, step.decision.args, step.decision.reason) == (
        "done",
        {},
        "openai-agents call_id call-1",
    )
    assert end.decision is not None and end.decision.kind == "complete"
    run = gated.run
    assert (run.status, run.reason, run.result) == ("COMPLETED", "goal_completed", "two branches")
    await gated.close()
    assert store.lease(gated.run_id).owner == ""
    assert event_types(store, gated.run_id).count("step.tool_started") == 1


@sync
async def test_a_streamed_run_ends_with_the_interruption_and_resumes_from_its_state(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("push_branch", {"branch": "feature/login"}, call_id="call-1")],
        [assistant_message("published")],
    ]
    gated, _ = gated_agent(store, remote, script, clock, ids)

    first = gated.run_agent_streamed("publish")
    await consume(first)

    assert [i.call_id for i in first.interruptions] == ["call-1"]
    assert remote.done == []
    assert gated.run.status == "WAITING_FOR_APPROVAL"
    await gated.close()
    assert store.lease(gated.run_id).owner == ""
    saved = first.to_state().to_string()

    # Another framework run, streamed too, resumes the saved state once approved.
    (pending,) = gated.pending()
    agentrt.approve(store, gated.run_id, pending.id, by="alice", shown_hash=pending.hash)
    again = publisher(store, remote, script[1:], clock, ids).resume(gated.run_id)
    second = again.run_agent_streamed(await again.load_state(saved))
    await consume(second)

    assert second.final_output == "published"
    assert remote.done == [("push_branch", "feature/login")]
    assert (again.run.status, again.run.reason) == ("COMPLETED", "goal_completed")


@sync
async def test_a_streamed_run_resumes_from_the_streamed_results_own_state(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("push_branch", {"branch": "feature/login"}, call_id="call-1")],
        [assistant_message("published")],
    ]
    gated, _ = gated_agent(store, remote, script, clock, ids)
    first = gated.run_agent_streamed("publish")
    await consume(first)
    state = first.to_state()

    await gated.approve(state, state.get_interruptions()[0], by="alice")
    second = gated.run_agent_streamed(state)
    await consume(second)

    assert second.final_output == "published"
    assert remote.done == [("push_branch", "feature/login")]
    assert gated.run.status == "COMPLETED"


@dataclass
class CutOff:
    """A streamed run whose approved push was cancelled mid-call (`cut_off_mid_call`)."""

    gated: Any
    run: Any
    saved: str
    second: Any
    pushed: list[str]


async def cut_off_mid_call(store: agentrt.Store, clock: FakeClock, ids: Ids, answer: str) -> CutOff:
    """Stream a run to its push's approval (saving its state), approve it, and cancel the
    second stream once the push has begun: the call is cut off mid-way."""
    started = asyncio.Event()
    pushed: list[str] = []

    @function_tool
    async def push_branch(branch: str) -> str:
        """Push a branch."""
        pushed.append(branch)
        started.set()
        await asyncio.sleep(3600)  # cut off here by the cancel
        return f"pushed {branch}"

    script = [
        [function_call("push_branch", {"branch": "feature/login"}, call_id="call-1")],
        [assistant_message(answer)],
    ]
    agent = Agent(name="publisher", model=ScriptedModel(script), tools=[push_branch])
    gated = gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications={"push_branch": Classification("remote_mutation", 30)},
        now=clock,
        new_id=ids,
    )
    run = gated.new_run()
    first = run.run_agent_streamed("publish")
    await consume(first)
    saved = first.to_state().to_string()
    state = first.to_state()
    await run.approve(state, state.get_interruptions()[0], by="alice")
    second = run.run_agent_streamed(state)

    async def cancel_once_started() -> None:
        await started.wait()
        second.cancel()

    canceller = asyncio.create_task(cancel_once_started())
    await consume(second)
    await canceller
    await run.close()
    return CutOff(gated, run, saved, second, pushed)


@sync
async def test_a_streamed_run_cancelled_mid_call_is_left_as_a_crash_leaves_it(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    cut = await cut_off_mid_call(store, clock, ids, "published")
    run, pushed = cut.run, cut.pushed

    assert pushed == ["feature/login"]
    assert cut.second.final_output is None
    (step,) = store.list_steps(run.run_id, cap=None)
    assert step.status == "interrupted"
    assert step.observation is not None
    assert (step.observation.kind, step.observation.content) == (
        "interrupted",
        {"failure": "cancelled", "previous_status": "executing"},
    )
    assert run.run.status == "RUNNING"
    assert store.lease(run.run_id).owner == ""

    # The program resumes its saved state: the push waits for a person, not run again.
    again = cut.gated.resume(run.run_id)
    resumed = await again.load_state(cut.saved)
    assert [i.call_id for i in resumed.get_interruptions()] == ["call-1"]
    (pending,) = again.pending()
    assert pending.kind == "interrupted_side_effect"
    assert pushed == ["feature/login"]


@sync
async def test_a_state_loaded_after_a_cancel_of_a_call_cut_off_mid_way_does_not_say_it_did_not_run(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """A call cut off mid-way waits on `interrupted_side_effect`: it may have taken effect.
    After `agentrt cancel`, the state loaded afterwards tells the model it is not run again
    and that whether it took effect is unknown, never that it did not run (decision 0123)."""
    store = any_store
    cut = await cut_off_mid_call(store, clock, ids, "told")
    run, saved = cut.run, cut.saved
    again = cut.gated.resume(run.run_id)
    await again.load_state(saved)  # taken over: the call waits on interrupted_side_effect
    (pending,) = again.pending()
    assert pending.kind == "interrupted_side_effect"
    await again.close()
    agentrt.cancel(store, run.run_id, "carol", "stop")

    last = cut.gated.resume(run.run_id)
    result = await Runner.run(last.agent, await last.load_state(saved))

    assert cut.pushed == ["feature/login"]
    assert result.interruptions == []
    (told,) = outputs(result)
    assert str(told) == (
        f"not run again: agentrt run {run.run_id} is CANCELLED (operator_cancelled: stop); "
        "no tool call runs in it. The call was cut off mid-way before: whether it took "
        "effect is unknown"
    )
    assert (last.run.status, last.run.reason) == ("CANCELLED", "operator_cancelled")


@sync
async def test_a_streamed_run_that_raises_fails_the_agentrt_run_and_lets_go_of_it(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("list_branches", {}, call_id="call-1")],
        [function_call("list_branches", {}, call_id="call-2")],
        [assistant_message("never")],
    ]
    run = publisher(store, remote, script, clock, ids).new_run()

    # The SDK raises MaxTurnsExceeded from `stream_events()`: `async with run:` sees it.
    with pytest.raises(MaxTurnsExceeded):
        async with run:
            await consume(run.run_agent_streamed("look", max_turns=1))

    assert remote.done == [("list_branches", "")]
    assert (run.run.status, run.run.reason) == ("FAILED", "agent_error")
    assert store.lease(run.run_id).owner == ""

    # A model error ends the run loop itself: the agentrt run fails without `async with`.
    async def fail(call: Any) -> Any:
        raise RuntimeError("the model is unreachable")

    script = [[function_call("list_branches", {}, call_id="call-1")], ModelStep.respond(fail)]
    other = publisher(store, remote, script, clock, ids).new_run()
    with pytest.raises(RuntimeError, match="unreachable"):
        await consume(other.run_agent_streamed("look"))
    await other.close()

    assert (other.run.status, other.run.reason) == ("FAILED", "agent_error")
    assert store.lease(other.run_id).owner == ""


@sync
async def test_a_streamed_run_that_raises_is_failed_only_once_the_stream_let_go_of_it(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids, monkeypatch: Any
) -> None:
    """The stream's ending lets go of the run in a task of its own, the lease given back by
    owner; `async with run:` fails the run through a new attach of the same gate, made
    only once that release is done (decision 0176). Before, under load, the attach could
    take the lease over in between and the release then clear it under the failure:
    `LeaseLostError: run ... is now leased by ''`, the run left RUNNING. The race is made
    at will here: the stream's release is held until the exit of `async with` has gone as
    far as it can (its attach's takeover committed, where it is made before the release)."""
    store = any_store
    order: list[str] = []
    releasing, proceed = threading.Event(), threading.Event()
    give_back = _gate.release_lease
    attach = agentrt.Gate.attach
    attached = asyncio.Event()

    def held_release(config: Any, run_id: str, epoch: int) -> None:
        order.append("release")
        releasing.set()
        assert proceed.wait(10)
        give_back(config, run_id, epoch)
        order.append("released")

    async def logged_attach(gate: agentrt.Gate, run_id: str) -> Any:
        order.append("attach")
        out = await attach(gate, run_id)
        attached.set()
        return out

    monkeypatch.setattr(_gate, "release_lease", held_release)
    monkeypatch.setattr(agentrt.Gate, "attach", logged_attach)
    remote = Remote()
    script = [
        [function_call("list_branches", {}, call_id="call-1")],
        [function_call("list_branches", {}, call_id="call-2")],
    ]
    run = publisher(store, remote, script, clock, ids).new_run()

    result = run.run_agent_streamed("look", max_turns=1)
    with pytest.raises(MaxTurnsExceeded) as raised:
        await consume(result)
    try:
        assert await asyncio.to_thread(releasing.wait, 10)  # the stream's ending lets go now
        # What `async with run:` does with the error, as a task of the loop meanwhile.
        exiting = asyncio.create_task(run.__aexit__(MaxTurnsExceeded, raised.value, None))
        for _ in range(10):
            await asyncio.sleep(0)
        if "attach" in order:  # (the attach made beside the release: let it take over)
            await attached.wait()
    finally:
        proceed.set()
    await exiting

    assert order == ["release", "released", "attach"]
    assert remote.done == [("list_branches", "")]
    assert (run.run.status, run.run.reason) == ("FAILED", "agent_error")
    assert store.lease(run.run_id).owner == ""


@sync
async def test_a_stream_started_while_the_last_one_still_lets_go_waits_for_that_release(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids, monkeypatch: Any
) -> None:
    """A stream that ends with the run RUNNING (`MaxTurnsExceeded`) lets go of it in a task
    of its own; a new stream of the same run started at once attaches it for its first
    call. That attach waits for the release: made beside it, it was refused (`RunStateError`:
    a second live session, decision 0176), or before 0176 took the lease over and lost it
    to the release. Held at will: the release waits until the new stream's call has gone as
    far as it can (its attach begun, or its wait for the release)."""
    store = any_store
    order: list[str] = []
    releasing, proceed = threading.Event(), threading.Event()
    give_back = _gate.release_lease
    attach = agentrt.Gate.attach
    attaching, waiting = asyncio.Event(), asyncio.Event()
    streams_ended = GatedRun._streams_ended

    def held_release(config: Any, run_id: str, epoch: int) -> None:
        order.append("release")
        releasing.set()
        assert proceed.wait(10)
        give_back(config, run_id, epoch)
        order.append("released")

    async def logged_attach(gate: agentrt.Gate, run_id: str) -> Any:
        order.append("attach")
        attaching.set()
        return await attach(gate, run_id)

    async def logged_streams_ended(self: Any) -> None:
        waiting.set()
        await streams_ended(self)

    monkeypatch.setattr(_gate, "release_lease", held_release)
    monkeypatch.setattr(agentrt.Gate, "attach", logged_attach)
    monkeypatch.setattr(GatedRun, "_streams_ended", logged_streams_ended)
    remote = Remote()
    script = [
        [function_call("list_branches", {}, call_id="call-1")],
        [function_call("list_branches", {}, call_id="call-2")],
        [assistant_message("two looks")],
    ]
    run = publisher(store, remote, script, clock, ids).new_run()

    with pytest.raises(MaxTurnsExceeded):
        await consume(run.run_agent_streamed("look", max_turns=1))
    try:
        assert await asyncio.to_thread(releasing.wait, 10)  # the first stream lets go now
        again = run.run_agent_streamed("look again")
        consuming = asyncio.create_task(consume(again))
        await asyncio.wait(
            [asyncio.ensure_future(attaching.wait()), asyncio.ensure_future(waiting.wait())],
            return_when=asyncio.FIRST_COMPLETED,
        )
    finally:
        proceed.set()
    await consuming
    await run.close()

    assert order == ["release", "released", "attach"]
    assert again.final_output == "two looks"
    assert remote.done == [("list_branches", ""), ("list_branches", "")]
    assert run.run.status == "COMPLETED"
    assert store.lease(run.run_id).owner == ""


def test_runner_run_sync_and_run_agent_sync_go_through_the_gate(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("list_branches", {}, call_id="call-1")],
        [assistant_message("first")],
        [function_call("delete_branch", {"branch": "main"}, call_id="call-2")],
        [assistant_message("second")],
    ]
    gated = publisher(store, remote, script, clock, ids)

    one, two = gated.new_run(), gated.new_run()
    first = Runner.run_sync(one.agent, "look")
    second = two.run_agent_sync("delete main")

    assert (first.final_output, second.final_output) == ("first", "second")
    assert remote.done == [("list_branches", "")]
    assert outputs(second) == ["policy_denied: destructive tools are denied by the default policy"]
    for run in (one, two):
        assert (run.run.status, run.run.reason) == ("COMPLETED", "goal_completed")
        assert store.lease(run.run_id).owner == ""


# -- across processes ------------------------------------------------------------


# Every program below is a real process of its own, forked from one that has
# imported the SDK and the adapter once (tests/support/forkserver.py).
PRELOAD = forkserver.OPENAI_AGENTS


def child(*args: str, timeout: float = 120) -> dict[str, Any]:
    done = forkserver.run(
        [sys.executable, str(CHILD), *args], preload=PRELOAD, cwd=ROOT / "tests", timeout=timeout
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def agentrt_approve(db: str) -> None:
    """A person approves what the run waits on, with the `agentrt` command."""
    approve = forkserver.run(
        [sys.executable, "-m", "agentrt", "approve", RUN_ID, "--db", db, "--yes", "--by", "alice"],
        preload=PRELOAD,
        timeout=60,
    )
    assert approve.returncode == 0, approve.stderr


def spawn_child(*args: str) -> forkserver.Child:
    """A child the test will SIGKILL, its output discarded."""
    return forkserver.server(*PRELOAD).spawn(
        [sys.executable, str(CHILD), *args], cwd=ROOT / "tests"
    )


RUN_ID = "0a" * 16


def start_in_a_child(tmp_path: Path, database: str | None = None) -> tuple[str, str]:
    """Start the run in a child, its store `database` (else a file in `tmp_path`)."""
    db, work = database or str(tmp_path / "runs.db"), str(tmp_path)
    out = child("start", db, work, RUN_ID)
    assert out["interruptions"] == [
        {"tool": "push_branch", "call_id": "call-push", "arguments": '{"branch":"feature/login"}'}
    ]
    return db, work


def pushes(tmp_path: Path) -> list[str]:
    remote = tmp_path / "remote.log"
    return remote.read_text().splitlines() if remote.exists() else []


def test_a_remote_change_approved_with_state_approve_in_a_second_process_runs_once(
    database: str,
    tmp_path: Path,
) -> None:
    db, work = start_in_a_child(tmp_path, database=database)
    assert pushes(tmp_path) == []

    out = child("resume", db, work, RUN_ID, "from_json", "--approve")

    assert out == {"final_output": "feature/login is published", "interruptions": []}
    assert pushes(tmp_path) == ["feature/login"]
    store = agentrt.open_existing(database, read_only=True)
    (approval,) = store.list_approvals(RUN_ID, cap=None)
    assert (approval.status, approval.decided_by) == ("approved", "openai-agents state.approve")
    assert store.get_run(RUN_ID).status == "COMPLETED"
    assert store.verify_events().intact


def test_a_remote_change_approved_with_the_agentrt_command_resumes_through_load_state(
    database: str,
    tmp_path: Path,
) -> None:
    db, work = start_in_a_child(tmp_path, database=database)
    agentrt_approve(db)
    assert pushes(tmp_path) == []

    out = child("resume", db, work, RUN_ID, "load_state")

    assert out == {"final_output": "feature/login is published", "interruptions": []}
    assert pushes(tmp_path) == ["feature/login"]
    store = agentrt.open_existing(database, read_only=True)
    (approval,) = store.list_approvals(RUN_ID, cap=None)
    assert (approval.status, approval.decided_by) == ("approved", "alice")


def kill_a_child_inside_the_push(tmp_path: Path, database: str | None = None) -> tuple[str, str]:
    """A child approves the push from the saved state and is SIGKILLed inside it."""
    db, work = start_in_a_child(tmp_path, database)
    (tmp_path / "hang").write_text("")
    proc = spawn_child("resume", db, work, RUN_ID, "from_json", "--approve")
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    (tmp_path / "hang").unlink()
    return db, work


def test_a_call_sigkilled_mid_execution_is_not_run_again_by_the_sdks_resume_until_a_person_approves(
    database: str,
    tmp_path: Path,
) -> None:
    db, work = kill_a_child_inside_the_push(tmp_path, database=database)
    assert pushes(tmp_path) == ["feature/login"]

    # The SDK's own resume path, as the program would do it again: the run state
    # from JSON, the same state.approve. The call is not run again.
    out = child("resume", db, work, RUN_ID, "from_json", "--approve")
    assert out["error"] == "InterruptedSideEffectError"
    assert pushes(tmp_path) == ["feature/login"]

    # Through the adapter's load_state: the pause surfaces as the SDK's interruption.
    out = child("resume", db, work, RUN_ID, "load_state")
    assert out["interruptions"] == [
        {"tool": "push_branch", "call_id": "call-push", "arguments": '{"branch":"feature/login"}'}
    ]
    assert pushes(tmp_path) == ["feature/login"]
    store = agentrt.open_existing(database, read_only=True)
    (pending,) = store.pending_approvals(RUN_ID, cap=None)
    assert pending.kind == "interrupted_side_effect"
    assert "step.interrupted" in event_types(store, RUN_ID)

    agentrt_approve(db)
    out = child("resume", db, work, RUN_ID, "load_state")
    assert out == {"final_output": "feature/login is published", "interruptions": []}
    assert pushes(tmp_path) == ["feature/login", "feature/login"]
    store = agentrt.open_existing(database, read_only=True)
    assert store.get_run(RUN_ID).status == "COMPLETED"
    assert store.verify_events().intact


def test_a_resume_after_a_crash_naming_another_run_is_refused_and_starts_no_run(
    database: str,
    tmp_path: Path,
) -> None:
    db, work = kill_a_child_inside_the_push(tmp_path, database=database)

    other = "cd" * 16
    for how in ("from_json", "load_state"):
        out = child("resume", db, work, other, how, "--approve")
        assert out["error"] == "RunMismatchError"
        assert out["message"].startswith(f"agentrt run {other} was never recorded in this store")

    assert pushes(tmp_path) == ["feature/login"]
    store = agentrt.open_existing(database, read_only=True)
    assert [r.id for r in store.list_runs(cap=None)] == [RUN_ID]
    assert store.get_run(RUN_ID).status == "RUNNING"  # still the crashed run, for its owner


def test_after_a_crash_a_fresh_framework_run_in_a_new_process_is_refused_and_the_saved_state_runs(
    database: str,
    tmp_path: Path,
) -> None:
    db, work = kill_a_child_inside_the_push(tmp_path, database=database)
    assert pushes(tmp_path) == ["feature/login"]

    # A new process starts a framework run of the same agentrt run with a new
    # input: the takeover pauses the cut-off push, and the framework run is refused.
    out = child("fresh", db, work, RUN_ID)
    store = agentrt.open_existing(database, read_only=True)
    (waiting,) = store.pending_approvals(RUN_ID, cap=None)
    assert waiting.kind == "interrupted_side_effect"
    call = "call 'call-push' of 'push_branch'"
    assert out == {
        "error": "RunMismatchError",
        "message": refusal(RUN_ID, waiting, call),
        "approval_id": waiting.id,
    }
    assert pushes(tmp_path) == ["feature/login"]

    agentrt_approve(db)
    out = child("fresh", db, work, RUN_ID)
    approved = store.list_approvals(RUN_ID, cap=None)[-1]
    assert (approved.id, approved.status) == (waiting.id, "approved")
    assert out["message"] == refusal(RUN_ID, approved, call)
    assert pushes(tmp_path) == ["feature/login"]

    # The saved state holds the push: it runs once more, on the person's say.
    out = child("resume", db, work, RUN_ID, "load_state")
    assert out == {"final_output": "feature/login is published", "interruptions": []}
    assert pushes(tmp_path) == ["feature/login", "feature/login"]
    assert calls(store, RUN_ID) == [("done", "openai-agents call_id call-push")]  # no main
    assert store.get_run(RUN_ID).status == "COMPLETED"
    assert store.verify_events().intact


# -- the example and the scenario table -------------------------------------------


# SQLite only: the example program keeps its record in a file of its own.
@pytest.mark.timeout(300)
def test_the_example_denies_the_delete_and_pushes_once_after_a_second_process_approves(
    tmp_path: Path,
) -> None:
    example = ROOT / "examples" / "adapters" / "openai_agents_example.py"
    done = forkserver.run(
        [sys.executable, str(example), "--db", str(tmp_path / "example.db")],
        preload=PRELOAD,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        "tool output the model saw: policy_denied: destructive tools are denied by the "
        "default policy" in lines
    )
    assert 'interruption: push_branch {"branch":"feature/login"} (call call-3)' in lines
    assert "final output: feature/login is published" in lines
    assert "remote: branches=['main', 'feature/login'] pushed=['feature/login']" in lines
    assert "agentrt run: COMPLETED goal_completed, 4 steps" in lines
    assert lines[-1].endswith("events, intact")


# SQLite only: the scenario script (benchmarks/adapters/) keeps its records in files of its own.
@pytest.mark.timeout(600)
def test_the_scenario_script_shows_no_unapproved_re_execution_and_the_tamper_refused() -> None:
    script = ROOT / "benchmarks" / "adapters" / "openai_agents_scenarios.py"
    done = forkserver.run([sys.executable, str(script)], preload=PRELOAD, timeout=600)
    assert done.returncode == 0, done.stderr
    assert_table_printed_in_docs(done.stdout)
    rows = {
        tuple(cell.strip() for cell in line.strip("|").split("|"))[1:]
        for line in done.stdout.splitlines()[2:]
    }
    assert ("pushes before the person approved", "0", "0") in rows
    assert ("pushes after the approval and the resume", "1", "1") in rows
    assert ("pushes when the process died", "1", "1") in rows
    assert (
        "unapproved re-executions when the program resumes its saved state",
        "1",
        "0",
    ) in rows
    assert (
        "what that resume did",
        "completed",
        "refused: `InterruptedSideEffectError`; waits on `interrupted_side_effect`",
    ) in rows
    assert (
        "pushes after a person approves the interrupted call",
        "n/a (already ran again)",
        "1",
    ) in rows
    assert ("branches pushed on resume", "main", "none") in rows
    assert ("what the resume did", "completed", "refused: `RequestChangedError`") in rows


def test_a_call_the_sdk_issues_again_after_a_crash_past_its_outcome_gets_the_recorded_result(
    database: str,
    tmp_path: Path,
) -> None:
    db, work = start_in_a_child(tmp_path, database=database)
    proc = spawn_child("resume", db, work, RUN_ID, "from_json", "--approve", "--hang-model")
    deadline = time.monotonic() + 60
    while not (tmp_path / "model-started").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert pushes(tmp_path) == ["feature/login"]

    # The saved state predates the push: the SDK issues the same call again.
    out = child("resume", db, work, RUN_ID, "from_json", "--approve")

    assert out == {"final_output": "feature/login is published", "interruptions": []}
    assert pushes(tmp_path) == ["feature/login"]
    store = agentrt.open_existing(database, read_only=True)
    assert event_types(store, RUN_ID).count("step.tool_started") == 1
    assert store.get_run(RUN_ID).status == "COMPLETED"


def test_a_held_call_runs_once_after_the_waiting_one_when_a_second_process_resumes_it(
    database: str,
    tmp_path: Path,
) -> None:
    db, work = str(database), str(tmp_path)
    out = child("start", db, work, RUN_ID, "--held")
    assert [(i["tool"], i["call_id"]) for i in out["interruptions"]] == [
        ("push_branch", "call-push"),
        ("write_note", "call-note"),
    ]
    store = agentrt.open_existing(database, read_only=True)
    assert calls(store, RUN_ID) == [("awaiting_approval", "openai-agents call_id call-push")]
    agentrt_approve(db)
    assert pushes(tmp_path) == [] and not (tmp_path / "notes.log").exists()

    out = child("resume", db, work, RUN_ID, "load_state")

    assert out == {"final_output": "feature/login is published", "interruptions": []}
    assert pushes(tmp_path) == ["feature/login"]
    assert (tmp_path / "notes.log").read_text().splitlines() == ["login pushed"]
    store = agentrt.open_existing(database, read_only=True)
    assert calls(store, RUN_ID) == [
        ("done", "openai-agents call_id call-push"),
        ("done", "openai-agents held call_id call-note"),
    ]
    assert event_types(store, RUN_ID).count("step.tool_started") == 2
    assert store.get_run(RUN_ID).status == "COMPLETED"
    assert store.verify_events().intact


def test_a_held_call_approved_with_state_approve_in_a_second_process_runs_after_the_push(
    database: str,
    tmp_path: Path,
) -> None:
    db, work = str(database), str(tmp_path)
    child("start", db, work, RUN_ID, "--held")

    out = child("resume", db, work, RUN_ID, "from_json", "--approve")

    assert out == {"final_output": "feature/login is published", "interruptions": []}
    assert pushes(tmp_path) == ["feature/login"]
    assert (tmp_path / "notes.log").read_text().splitlines() == ["login pushed"]
    store = agentrt.open_existing(database, read_only=True)
    assert [s for s, _ in calls(store, RUN_ID)] == ["done", "done"]
    assert store.get_run(RUN_ID).status == "COMPLETED"


# -- a tool's own approval, agents as tools, a consumer's hook that raises (review) --------


def wipe_agent(
    store: agentrt.Store,
    clock: FakeClock,
    ids: Ids,
    script: list[Any],
    needs_approval: Any,
    side_effect: str = "local_mutation",
) -> tuple[GatedRun, list[str]]:
    """An agent whose one tool carries its own `needs_approval`, behind the Gate."""
    wiped: list[str] = []

    @function_tool(needs_approval=needs_approval)
    def wipe_cache(path: str) -> str:
        """Delete a local cache directory."""
        wiped.append(path)
        return f"wiped {path}"

    agent = Agent(name="janitor", model=ScriptedModel(script), tools=[wipe_cache])
    gated = gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications={"wipe_cache": Classification(side_effect, 5)},  # type: ignore[arg-type]
        now=clock,
        new_id=ids,
    )
    return gated.new_run(), wiped


@sync
async def test_a_tools_own_needs_approval_asks_a_person_through_agentrt_though_the_policy_allows(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    script = [
        [function_call("wipe_cache", {"path": "/var/cache"}, call_id="call-wipe")],
        [assistant_message("wiped")],
    ]
    gated, wiped = wipe_agent(store, clock, ids, script, needs_approval=True)

    result = await gated.run_agent("clean up")

    assert wiped == []
    assert [i.call_id for i in result.interruptions] == ["call-wipe"]
    (approval,) = gated.pending()
    shown = {"tool": "wipe_cache", "args": {"path": "/var/cache"}}
    assert (approval.kind, approval.presentation, approval.capability) == (
        "tool_needs_approval",
        shown,
        shown,
    )
    assert (gated.run.status, calls(store, gated.run_id)) == (
        "WAITING_FOR_APPROVAL",
        [("awaiting_approval", "openai-agents call_id call-wipe")],
    )

    state = result.to_state()
    (item,) = state.get_interruptions()
    decided = await gated.approve(state, item, by="alice")
    result = await gated.run_agent(state)

    assert decided.hash == approval.hash
    assert wiped == ["/var/cache"]
    assert result.final_output == "wiped"
    assert (gated.run.status, calls(store, gated.run_id)) == (
        "COMPLETED",
        [("done", "openai-agents call_id call-wipe")],
    )


@sync
async def test_a_tools_callable_needs_approval_asks_a_person_only_for_the_calls_it_names(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    asked: list[tuple[dict[str, Any], str]] = []

    async def only_the_root(context: Any, params: dict[str, Any], call_id: str) -> bool:
        asked.append((params, call_id))
        return bool(params["path"] == "/")

    script = [
        [function_call("wipe_cache", {"path": "/tmp/cache"}, call_id="call-tmp")],
        [function_call("wipe_cache", {"path": "/"}, call_id="call-root")],
        [assistant_message("done")],
    ]
    gated, wiped = wipe_agent(store, clock, ids, script, needs_approval=only_the_root)

    result = await gated.run_agent("clean up")

    assert asked == [({"path": "/tmp/cache"}, "call-tmp"), ({"path": "/"}, "call-root")]
    assert wiped == ["/tmp/cache"]
    assert [i.call_id for i in result.interruptions] == ["call-root"]
    (approval,) = gated.pending()
    assert (approval.kind, approval.presentation) == (
        "tool_needs_approval",
        {"tool": "wipe_cache", "args": {"path": "/"}},
    )
    state = result.to_state()
    (item,) = state.get_interruptions()
    await gated.reject(state, item, by="alice", note="not the root")
    await gated.run_agent(state)
    assert wiped == ["/tmp/cache"]
    assert (gated.run.status, gated.run.reason) == ("CANCELLED", "approval_rejected")


@sync
async def test_a_tools_own_needs_approval_never_overrides_a_policy_denial(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    script = [
        [function_call("wipe_cache", {"path": "/"}, call_id="call-wipe")],
        [assistant_message("denied")],
    ]
    gated, wiped = wipe_agent(store, clock, ids, script, True, side_effect="destructive")

    result = await gated.run_agent("clean up")

    assert (wiped, result.interruptions, gated.pending()) == ([], [], [])
    assert outputs(result) == ["policy_denied: destructive tools are denied by the default policy"]


def test_an_agent_offered_as_a_tool_is_refused_at_start_up_and_nothing_is_written(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    remote = Remote()
    inner = Agent(name="janitor", model=ScriptedModel([]), tools=remote.tools)
    outer = Agent(
        name="boss",
        model=ScriptedModel([]),
        tools=[inner.as_tool(tool_name="janitor", tool_description="Cleans the repo.")],
    )
    with pytest.raises(agentrt.ConfigError) as refused:
        gate_agent(
            outer,
            store=store,
            policy=agentrt.default_policy(),
            classifications={"janitor": Classification("local_mutation", 30)},
        )
    assert str(refused.value) == (
        "agent 'boss' offers agents as tools ('janitor'; Agent.as_tool), whose own tool calls "
        "would bypass the Gate and the record; gate each with a gate_agent of its own and call "
        "its run_agent from a function tool"
    )
    assert store.list_runs() == [] and remote.done == []


class FailingStart(RunHooks[Any]):
    """A consumer's hook that fails before the first tool call it sees (a metrics exporter down)."""

    def __init__(self) -> None:
        self.seen = 0

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        self.seen += 1
        if self.seen == 1:
            raise RuntimeError("hook failed")


class FailingAgentStart(AgentHooks[Any]):
    """The same, as the agent's own hooks."""

    def __init__(self) -> None:
        self.seen = 0

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        self.seen += 1
        if self.seen == 1:
            raise RuntimeError("hook failed")


@pytest.mark.parametrize("whose", ["the run's", "the agent's"])
@sync
async def test_a_hook_that_raises_before_an_allowed_call_fails_the_run_and_nothing_ran(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids, whose: str
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("write_note", {"text": "a"}, call_id="call-a")],
        [function_call("write_note", {"text": "b"}, call_id="call-b")],
        [assistant_message("done")],
    ]
    model = ScriptedModel(script)
    agent = Agent(name="publisher", model=model, tools=remote.tools)
    kwargs: dict[str, Any] = {"hooks": FailingStart()}
    if whose == "the agent's":
        agent, kwargs = agent.clone(hooks=FailingAgentStart()), {}
    gated = gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications=CLASSES,
        now=clock,
        new_id=ids,
    ).new_run()

    with pytest.raises(UserError, match="hook failed"):
        await gated.run_agent("note a and b", **kwargs)

    assert remote.done == []
    run = gated.run
    assert (run.status, run.reason) == ("FAILED", "agent_error")
    assert run.reason_detail == "UserError: Error running tool write_note: hook failed"
    steps = store.list_steps(gated.run_id, cap=None)
    assert [(s.status, s.decision.reason if s.decision else None) for s in steps] == [
        ("interrupted", "openai-agents call_id call-a"),  # allowed, never started
        ("failed", None),
    ]
    assert "step.tool_started" not in event_types(store, gated.run_id)
    # The same GatedRun again: refused at once (the run has ended), never a hang.
    with pytest.raises(RunEndedError, match="FAILED"):
        await asyncio.wait_for(gated.run_agent("try again"), 10)
    assert remote.done == []


@sync
async def test_a_direct_runner_run_whose_hook_raised_goes_on_when_run_again_on_the_same_run(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [function_call("write_note", {"text": "a"}, call_id="call-a")],
        [function_call("write_note", {"text": "b"}, call_id="call-b")],
        [assistant_message("done")],
    ]
    gated, _ = gated_agent(store, remote, script, clock, ids)

    with pytest.raises(UserError, match="hook failed"):
        await Runner.run(gated.agent, "note a", hooks=FailingStart())
    assert (remote.done, gated.run.status) == ([], "RUNNING")

    result = await asyncio.wait_for(Runner.run(gated.agent, "note b"), 10)

    assert result.final_output == "done"
    assert remote.done == [("write_note", "b")]
    assert calls(store, gated.run_id) == [
        ("interrupted", "openai-agents call_id call-a"),
        ("done", "openai-agents call_id call-b"),
    ]
    assert event_types(store, gated.run_id).count("step.tool_started") == 1
    assert (gated.run.status, gated.run.reason) == ("COMPLETED", "goal_completed")


@sync
async def test_a_run_whose_only_call_the_sdk_held_for_unusable_arguments_can_be_resumed_by_its_id(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    # The SDK holds `[1, 2]` for a person before any tool hook runs; the run it
    # names must still exist, or `resume(run_id)` would refuse the saved state.
    store = any_store
    remote = Remote()
    script = [
        [function_call("write_note", "[1, 2]", call_id="call-1")],
        [assistant_message("sorry")],
    ]
    gated, model = gated_agent(store, remote, script, clock, ids)
    first = await gated.run_agent("note it")
    assert [i.call_id for i in first.interruptions] == ["call-1"]
    assert (gated.run.status, store.list_steps(gated.run_id, cap=None)) == ("RUNNING", [])
    saved = first.to_state().to_string()

    agent = Agent(name="publisher", model=model, tools=remote.tools)
    later = gate_agent(
        agent, store=store, policy=agentrt.default_policy(), classifications=CLASSES, now=clock
    ).resume(gated.run_id)
    state = await later.load_state(saved)
    state.approve(state.get_interruptions()[0])
    result = await asyncio.wait_for(later.run_agent(state), 10)

    assert remote.done == []
    (seen,) = outputs(result)
    assert seen.startswith("invalid_decision: ")
    (step, _) = store.list_steps(gated.run_id, cap=None)
    assert step.decision is not None and step.decision.args == [1, 2]
    assert step.observation is not None and step.observation.kind == "invalid_decision"
    assert (later.run.status, later.run.result) == ("COMPLETED", "sorry")


class FailingSecondStart(RunHooks[Any]):
    """A consumer's hook that fails at the second tool call it sees."""

    def __init__(self) -> None:
        self.seen = 0

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        self.seen += 1
        if self.seen == 2:
            raise RuntimeError("hook failed")


@sync
async def test_a_call_id_reused_for_other_arguments_in_a_later_framework_run_is_refused(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    # The SDK refuses a reused id within its own history; a later framework run
    # of the same agentrt run starts a new history, and a model that numbers
    # its calls from zero again reuses `call_0` for another call.
    store = any_store
    remote = Remote()
    script = [
        [function_call("write_note", {"text": "a"}, call_id="call_0")],
        [function_call("write_note", {"text": "x"}, call_id="call_1")],
        [function_call("write_note", {"text": "b"}, call_id="call_0")],
        [assistant_message("done")],
    ]
    gated, _ = gated_agent(store, remote, script, clock, ids)
    with pytest.raises(UserError, match="hook failed"):
        await Runner.run(gated.agent, "note a", hooks=FailingSecondStart())

    result = await Runner.run(gated.agent, "note b")

    assert remote.done == [("write_note", "a")]
    assert outputs(result) == [
        "invalid_decision: call id 'call_0' names an earlier call agentrt recorded (step 0) "
        "with another tool or other arguments; a changed call is not run as the recorded one, "
        "and nothing ran"
    ]
    assert calls(store, gated.run_id) == [
        ("done", "openai-agents call_id call_0"),
        ("interrupted", "openai-agents call_id call_1"),
    ]
    assert (gated.run.status, gated.run.result) == ("COMPLETED", "done")


class Stop(BaseException):
    """Not an `Exception`: what a tool raises to stop more than itself."""


@sync
async def test_a_tool_that_raises_a_base_exception_records_it_as_its_outcome_once(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    # As for any agentrt tool (decision 0017): the call's outcome, not the program's end.
    store = any_store
    raised: list[str] = []

    @function_tool
    def stop(text: str) -> str:
        """Stop."""
        raised.append(text)
        raise Stop("stop here")

    agent = Agent(
        name="stopper",
        model=ScriptedModel(
            [[function_call("stop", {"text": "a"}, call_id="call-1")], [assistant_message("ok")]]
        ),
        tools=[stop],
    )
    gated = gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications={"stop": Classification("local_mutation", 5)},
        now=clock,
        new_id=ids,
    ).new_run()

    result = await gated.run_agent("go")

    assert raised == ["a"]
    assert outputs(result) == ["tool_error: Stop: stop here"]
    (step, _) = store.list_steps(gated.run_id, cap=None)
    assert (step.status, step.observation and step.observation.kind) == ("failed", "tool_error")
    assert (gated.run.status, gated.run.result) == ("COMPLETED", "ok")


@sync
async def test_a_held_call_sent_to_a_person_names_its_approval_and_hash_and_resumes_via_approve(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    store = any_store
    remote = Remote()
    script = [
        [
            function_call("push_branch", {"branch": "feature/login"}, call_id="call-1"),
            function_call("push_branch", {"branch": "feature/logout"}, call_id="call-2"),
        ],
        [assistant_message("both published")],
    ]
    gated, _ = gated_agent(store, remote, script, clock, ids)
    first = await gated.run_agent("publish both")
    saved = first.to_state().to_string()
    state = first.to_state()
    push, _ = state.get_interruptions()
    await gated.approve(state, push, by="alice")  # lets the SDK go on with the held call

    with pytest.raises(ApprovalPendingError) as pending:
        await gated.run_agent(state)

    (second,) = gated.pending()
    error = pending.value
    assert (error.run_id, error.approval_id, error.approval_hash) == (
        gated.run_id,
        second.id,
        second.hash,
    )
    assert f"approval {second.id} (hash {second.hash})" in str(error)
    assert f"agentrt approve {gated.run_id}" in str(error)
    assert remote.done == [("push_branch", "feature/login")]

    # The documented path: the state saved before, loaded, and the held call
    # approved through GatedRun.approve (bound to the hash of its arguments).
    state = await gated.load_state(saved)
    item = next(i for i in state.get_interruptions() if i.call_id == "call-2")
    decided = await gated.approve(state, item, by="bob")
    result = await gated.run_agent(state)

    assert decided.hash == second.hash
    assert result.final_output == "both published"
    assert remote.done == [("push_branch", "feature/login"), ("push_branch", "feature/logout")]
    assert event_types(store, gated.run_id).count("step.tool_started") == 2
    assert (gated.run.status, gated.run.reason) == ("COMPLETED", "goal_completed")


# -- a framework run that does not carry the call the run waits on ------------------


def refusal(run_id: str, approval: agentrt.Approval, call: str) -> str:
    """The one sentence a framework run gets when it does not hold the call the run waits on."""
    if approval.status == "approved":
        return (
            f"agentrt run {run_id} waits to carry out {call}, approved by {approval.decided_by} "
            f"on approval {approval.id} ({approval.kind}), which this framework run does not "
            "hold and so cannot carry out; it was refused before the model was asked and "
            "nothing of it was recorded: resume the saved RunState that holds that call "
            f"(GatedRun.load_state), or, if none does, end the run with `agentrt cancel {run_id}` "
            "and start a new one (gated.new_run())"
        )
    return (
        f"agentrt run {run_id} waits on {call}, pending on approval {approval.id} "
        f"({approval.kind}), which this framework run does not carry; it was refused before the "
        "model was asked and nothing of it was recorded: resume the saved RunState that holds "
        f"that call (GatedRun.load_state) and decide it, or end the run with `agentrt reject "
        f"{run_id}` (or `agentrt cancel {run_id}`) and start a new one (gated.new_run())"
    )


def cut_off_once(done: list[str], started: asyncio.Event) -> tuple[Any, Any]:
    """Two real tools that do their work, then hang the first time (cut off by a cancel there)."""

    async def work(name: str, value: str) -> str:
        done.append(value)
        if len(done) == 1:
            started.set()
            await asyncio.sleep(3600)
        return f"{name} {value}"

    @function_tool
    async def write_note(text: str) -> str:
        """Write a note in the local work tree."""
        return await work("noted", text)

    @function_tool
    async def push_branch(branch: str) -> str:
        """Push a branch."""
        return await work("pushed", branch)

    return write_note, push_branch


async def cancel_mid_call(run: GatedRun, input: Any, started: asyncio.Event) -> None:
    """`run.run_agent(input)` cancelled while its tool runs: no RunState comes out of it."""
    task = asyncio.create_task(run.run_agent(input))
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@sync
async def test_a_fresh_framework_run_while_a_call_cut_off_mid_way_waits_is_refused_before_the_model(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    # A note the policy allows is cut off mid-call by a cancel: no run state was
    # ever saved, so only agentrt's record holds the call.
    store = any_store
    done: list[str] = []
    started = asyncio.Event()
    model = ScriptedModel(
        [
            [function_call("write_note", {"text": "one"}, call_id="call-1")],
            [function_call("write_note", {"text": "two"}, call_id="call-2")],
            [assistant_message("noted two")],
        ]
    )
    agent = Agent(name="notes", model=model, tools=[cut_off_once(done, started)[0]])
    gated = gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications={"write_note": Classification("local_mutation", 30)},
        now=clock,
        new_id=ids,
    )
    run = gated.new_run()
    await cancel_mid_call(run, "note one", started)
    assert (done, run.run.status) == (["one"], "RUNNING")

    # A fresh framework run of the same agentrt run: the takeover pauses the cut-off
    # call for a person, and the framework run, which cannot carry it, is refused.
    again = gated.resume(run.run_id)
    with pytest.raises(RunMismatchError) as refused:
        await again.run_agent("note two")
    (waiting,) = again.pending()
    assert (waiting.kind, waiting.status) == ("interrupted_side_effect", "pending")
    assert str(refused.value) == refusal(run.run_id, waiting, "call 'call-1' of 'write_note'")
    assert (refused.value.run_id, refused.value.approval_id, refused.value.approval_hash) == (
        run.run_id,
        waiting.id,
        waiting.hash,
    )
    assert len(model.calls) == 1  # the model was not asked again
    assert done == ["one"]
    assert calls(store, run.run_id) == [("awaiting_approval", "openai-agents call_id call-1")]
    assert again.run.status == "WAITING_FOR_APPROVAL"
    assert store.lease(run.run_id).owner == ""
    recorded = event_types(store, run.run_id)

    # Refused again, streamed too: nothing of it is recorded, nothing held.
    with pytest.raises(RunMismatchError):
        await gated.resume(run.run_id).run_agent("note two")
    streamed = gated.resume(run.run_id)
    with pytest.raises(RunMismatchError, match="waits on call 'call-1' of 'write_note'"):
        await consume(streamed.run_agent_streamed("note two"))
    await streamed.close()
    assert event_types(store, run.run_id) == recorded
    assert (len(model.calls), store.lease(run.run_id).owner) == (1, "")

    # A person approves the cut-off call; no run state holds it, so nothing can
    # carry it out: a fresh framework run is refused, and says so.
    agentrt.approve(store, run.run_id, waiting.id, "alice", shown_hash=waiting.hash)
    with pytest.raises(RunMismatchError) as refused:
        await gated.resume(run.run_id).run_agent("note two")
    (approved,) = store.list_approvals(run.run_id, cap=None)
    assert approved.status == "approved"
    assert str(refused.value) == refusal(run.run_id, approved, "call 'call-1' of 'write_note'")
    assert refused.value.approval_id == approved.id
    assert (len(model.calls), done) == (1, ["one"])
    assert event_types(store, run.run_id) == [*recorded, "approval.decided"]
    assert store.get_run(run.run_id).status == "WAITING_FOR_APPROVAL"

    # The way on the sentence names: cancel, and start a new run.
    agentrt.cancel(store, run.run_id, "alice")
    fresh = gated.new_run()
    result = await fresh.run_agent("note two")
    assert result.final_output == "noted two"
    assert done == ["one", "two"]
    assert (store.get_run(run.run_id).status, fresh.run.status) == ("CANCELLED", "COMPLETED")


@sync
async def test_the_saved_state_that_holds_the_waiting_call_still_resumes_after_a_fresh_run_refused(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    # The push waits for a person; the program saves the state, the push is
    # approved, and the framework run that runs it is cut off mid-call.
    store = any_store
    pushed: list[str] = []
    started = asyncio.Event()
    model = ScriptedModel(
        [
            [function_call("push_branch", {"branch": "feature/login"}, call_id="call-1")],
            [assistant_message("published")],  # only once the push's outcome is in
        ]
    )
    agent = Agent(name="publisher", model=model, tools=[cut_off_once(pushed, started)[1]])
    gated = gate_agent(
        agent,
        store=store,
        policy=agentrt.default_policy(),
        classifications={"push_branch": Classification("remote_mutation", 30)},
        now=clock,
        new_id=ids,
    )
    run = gated.new_run()
    first = await run.run_agent("publish feature/login")
    saved = first.to_state().to_string()
    state = first.to_state()
    await run.approve(state, state.get_interruptions()[0], by="alice")
    await cancel_mid_call(run, state, started)
    assert pushed == ["feature/login"]

    # Another input: refused, before the model is asked.
    with pytest.raises(RunMismatchError) as refused:
        await gated.resume(run.run_id).run_agent("publish main")
    waiting = store.pending_approvals(run.run_id, cap=None)[-1]
    assert waiting.kind == "interrupted_side_effect"
    assert str(refused.value) == refusal(run.run_id, waiting, "call 'call-1' of 'push_branch'")
    assert (len(model.calls), pushed) == (1, ["feature/login"])

    # The saved state, its cut-off call rejected the SDK's way: that decides no
    # interrupted side effect (a person does, through agentrt), so nothing goes on.
    rejecting = gated.resume(run.run_id)
    state = await rejecting.load_state(saved)
    state.reject(state.get_interruptions()[0])
    with pytest.raises(InterruptedSideEffectError, match=f"approval {waiting.id}"):
        await rejecting.run_agent(state)
    assert (len(model.calls), pushed, rejecting.run.status) == (
        1,
        ["feature/login"],
        "WAITING_FOR_APPROVAL",
    )

    # Approved through agentrt before the next framework run: another input is
    # still refused (and says the call is approved); the saved state carries it.
    agentrt.approve(store, run.run_id, waiting.id, "bob", shown_hash=waiting.hash)
    with pytest.raises(RunMismatchError) as refused:
        await gated.resume(run.run_id).run_agent("publish main")
    approved = store.list_approvals(run.run_id, cap=None)[-1]
    assert str(refused.value) == refusal(run.run_id, approved, "call 'call-1' of 'push_branch'")
    assert (len(model.calls), pushed) == (1, ["feature/login"])

    later = gated.resume(run.run_id)
    resumed = await later.load_state(saved)
    result = await later.run_agent(resumed)

    assert result.final_output == "published"
    assert pushed == ["feature/login", "feature/login"]  # once more, on the person's say
    assert outputs(result) == ["pushed feature/login"]  # its output reached the model
    assert len(model.calls) == 2
    assert calls(store, run.run_id) == [("done", "openai-agents call_id call-1")]
    assert (later.run.status, later.run.result) == ("COMPLETED", "published")
    assert store.verify_events().intact


@sync
async def test_a_call_of_another_tool_under_the_recorded_call_id_and_arguments_is_refused(
    any_store: agentrt.Store, clock: FakeClock, ids: Ids
) -> None:
    """The check before an allowed call runs compares the tool too, not only the call id and
    the arguments. (The SDK refuses a call id reused for another invocation on its own; this
    is agentrt's check behind it, for a state forged past the SDK's.)"""
    store = any_store
    from agentrt.adapters.openai_agents._gated import _Judged

    gated, _ = gated_agent(store, Remote(), [], clock, ids)
    judged = _Judged("allowed", None, None, "call-1", {"branch": "x"}, "push_branch")
    gated._check_same_call(judged, "push_branch", "call-1", '{"branch": "x"}')
    with pytest.raises(RequestChangedError, match="recorded and judged a call of 'push_branch'"):
        gated._check_same_call(judged, "delete_branch", "call-1", '{"branch": "x"}')
    with pytest.raises(RequestChangedError, match="not the ones agentrt recorded"):
        gated._check_same_call(judged, "push_branch", "call-1", '{"branch": "main"}')
