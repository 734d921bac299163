"""Every way a step can end: tool outcomes, policy outcomes, invalid decisions, limits."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import (
    AbortRun,
    Decision,
    Limits,
    PolicyDecision,
    RunView,
    SideEffect,
    ToolCall,
    ToolRequest,
    ToolResult,
)
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool, event_types
from support.policies import FixedPolicy


def drive(
    store: agentrt.Store,
    decisions: list[Any],
    tools: list[Any],
    policy: Any = None,
    limits: Limits | None = None,
    clock: FakeClock | None = None,
    observer: Any = None,
) -> agentrt.Run:
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(decisions),
        policy=policy or agentrt.default_policy(),
        tools=tools,
        now=clock or FakeClock(),
        new_id=Ids(),
        observer=observer,
    )
    return driver.start_sync("goal", limits=limits)


def last_observation(store: agentrt.Store, run_id: str, index: int = 0) -> Any:
    step = store.list_steps(run_id)[index]
    assert step.observation is not None
    return step.status, step.observation.kind, step.observation.content


# -- tools -----------------------------------------------------------------


def test_tool_that_raises_becomes_a_tool_error(any_store: agentrt.Store) -> None:
    def boom(call: ToolCall) -> ToolResult:
        raise RuntimeError("disk on fire")

    tool = RecordingTool("t", SideEffect.LOCAL_MUTATION, result=boom)
    run = drive(any_store, [Decision.tool_call("t", {}), Decision.complete()], [tool])
    assert run.status == "COMPLETED"
    assert last_observation(any_store, run.id) == (
        "failed",
        "tool_error",
        {"tool": "t", "error": "RuntimeError: disk on fire", "failure": "error"},
    )
    finished = [e for e in any_store.list_events(run_id=run.id) if e.type == "step.tool_finished"]
    assert finished[0].payload["error"] == "RuntimeError: disk on fire"


def test_sync_tool_that_times_out_becomes_a_timeout(any_store: agentrt.Store) -> None:
    def slow(call: ToolCall) -> ToolResult:
        time.sleep(0.5)
        return ToolResult({"late": True})

    tool = RecordingTool("t", SideEffect.READ_ONLY, result=slow, timeout=timedelta(milliseconds=50))
    run = drive(any_store, [Decision.tool_call("t", {}), Decision.complete()], [tool])
    assert last_observation(any_store, run.id) == (
        "failed",
        "tool_error",
        {"tool": "t", "error": "timed out after 0.05s", "failure": "timeout"},
    )


def test_async_tool_is_cancelled_at_its_timeout(any_store: agentrt.Store) -> None:
    cancelled = []

    @agentrt.tool(side_effect=SideEffect.READ_ONLY, timeout=timedelta(milliseconds=50))
    async def wait_forever() -> dict[str, Any]:
        """Waits for an hour."""
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return {}

    run = drive(
        any_store, [Decision.tool_call("wait_forever", {}), Decision.complete()], [wait_forever]
    )
    assert last_observation(any_store, run.id)[2]["failure"] == "timeout"
    assert cancelled == [True]


def test_tool_returning_non_json_keeps_the_content_as_invalid_content(
    any_store: agentrt.Store,
) -> None:
    tool = RecordingTool(
        "t", SideEffect.READ_ONLY, result=lambda c: ToolResult({"n": float("nan")})
    )
    run = drive(any_store, [Decision.tool_call("t", {}), Decision.complete()], [tool])
    status, kind, content = last_observation(any_store, run.id)
    assert (status, kind, content["failure"]) == ("failed", "tool_error", "invalid_content")
    assert content["content_text"] == "{'n': nan}"
    assert "not usable JSON" in content["error"]


def test_tool_returning_something_else_than_a_tool_result(any_store: agentrt.Store) -> None:
    tool = RecordingTool("t", SideEffect.READ_ONLY, result=lambda c: b"\xff\xfe")
    run = drive(any_store, [Decision.tool_call("t", {}), Decision.complete()], [tool])
    content = last_observation(any_store, run.id)[2]
    assert content["failure"] == "invalid_content"
    assert content["content_text"] == "base64://4="


def test_abort_run_ends_the_run_as_tool_abort(any_store: agentrt.Store) -> None:
    def stop(call: ToolCall) -> ToolResult:
        raise AbortRun("the account is frozen")

    tool = RecordingTool("t", SideEffect.LOCAL_MUTATION, result=stop)
    run = drive(any_store, [Decision.tool_call("t", {}), Decision.complete()], [tool])
    assert (run.status, run.reason, run.reason_detail) == (
        "FAILED",
        "tool_abort",
        "the account is frozen",
    )
    assert event_types(any_store, run.id)[-3:] == [
        "step.tool_finished",
        "step.failed",
        "run.finished",
    ]


def test_terminal_tool_completes_the_run_with_its_content(any_store: agentrt.Store) -> None:
    tool = RecordingTool("answer", SideEffect.READ_ONLY, result={"answer": 42}, terminal=True)
    run = drive(any_store, [Decision.tool_call("answer", {})], [tool])
    assert (run.status, run.reason, run.result) == ("COMPLETED", "goal_completed", {"answer": 42})


def test_decorated_tool_receives_typed_args_and_the_lease_epoch(any_store: agentrt.Store) -> None:
    seen: list[Any] = []

    @agentrt.tool(side_effect=SideEffect.LOCAL_MUTATION, timeout=timedelta(seconds=5))
    def write_note(text: str, copies: int, call: ToolCall) -> dict[str, Any]:
        """Writes a note."""
        seen.append((text, copies, call.lease_epoch))
        return {"written": copies}

    run = drive(
        any_store,
        [Decision.tool_call("write_note", {"text": "hi", "copies": 2}), Decision.complete()],
        [write_note],
    )
    assert run.status == "COMPLETED"
    assert seen == [("hi", 2, 1)]


# -- decisions -------------------------------------------------------------


@pytest.mark.parametrize(
    ("decision", "error"),
    [
        (Decision.tool_call("missing", {}), "unknown tool 'missing'; registered tools: t"),
        (Decision(kind="truncated"), "the reply was cut off before it finished"),
        (Decision(kind="no_tool_call"), "the reply contained no tool call"),
        (Decision(kind="dance"), "unknown decision kind 'dance'"),
        (Decision(kind="tool_call", tool="t", origin="martian"), "unknown decision origin"),
        (Decision.tool_call("t", {"x": "one"}), "$.x: 'one' is not of type 'integer'"),
        (Decision.tool_call("t", [1, 2]), "args do not match the input schema"),
        (Decision.tool_call("t", {"x": float("inf")}), "args are not usable JSON"),
        (Decision.complete({"bad": {1, 2}}), "result is not usable JSON"),
        ("not a decision", "the agent returned str, not a Decision"),
    ],
)
def test_invalid_decision_fails_the_step_and_the_loop_goes_on(
    any_store: agentrt.Store, decision: Any, error: str
) -> None:
    tool = RecordingTool("t", SideEffect.READ_ONLY)
    run = drive(any_store, [decision, Decision.complete("after")], [tool])
    assert (run.status, run.result) == ("COMPLETED", "after")
    status, kind, content = last_observation(any_store, run.id)
    assert (status, kind) == ("failed", "invalid_decision")
    assert error in content["error"]
    assert tool.calls == []
    assert event_types(any_store, run.id)[2:5] == ["step.started", "step.decided", "step.failed"]


def test_unusable_args_are_recorded_as_text_never_as_valid_json(any_store: agentrt.Store) -> None:
    tool = RecordingTool("t", SideEffect.READ_ONLY)
    run = drive(
        any_store, [Decision.tool_call("t", b'{"x": 1, "x": 2}'), Decision.complete()], [tool]
    )
    decided = next(e for e in any_store.list_events(run_id=run.id) if e.type == "step.decided")
    assert decided.payload == {"kind": "tool_call", "tool": "t", "invalid_args": '{"x": 1, "x": 2}'}
    step = any_store.list_steps(run.id)[0]
    assert step.decision is not None and step.decision.args is None
    assert step.decision.invalid_args == '{"x": 1, "x": 2}'


def test_args_given_as_json_bytes_are_parsed_with_literals_kept(any_store: agentrt.Store) -> None:
    tool = RecordingTool("t", SideEffect.READ_ONLY, schema={"type": "object"})
    run = drive(
        any_store, [Decision.tool_call("t", b'{"amount": 10.0}'), Decision.complete()], [tool]
    )
    assert agentrt.canonical_json(tool.calls[0].args) == b'{"amount":10.0}'
    decided = next(e for e in any_store.list_events(run_id=run.id) if e.type == "step.decided")
    assert agentrt.canonical_json(decided.payload["args"]) == b'{"amount":10.0}'


def test_huge_number_against_a_bounded_schema_does_not_crash(any_store: agentrt.Store) -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "maximum": 100, "multipleOf": 3}},
    }
    tool = RecordingTool("t", SideEffect.READ_ONLY, schema=schema)
    huge = b'{"n": 1' + b"0" * 5000 + b"}"
    run = drive(
        any_store,
        [
            Decision.tool_call("t", huge),
            Decision.tool_call("t", b'{"n": 1e400}'),
            Decision.complete(),
        ],
        [tool],
    )
    assert run.status == "COMPLETED"
    for index in (0, 1):
        status, kind, content = last_observation(any_store, run.id, index)
        assert (status, kind) == ("failed", "invalid_decision")
        assert content["error"].startswith("args do not match the input schema of 't': $.n: ")
    assert tool.calls == []


# -- policies --------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        (ValueError("policy bug"), "policy raised ValueError: policy bug"),
        (PolicyDecision(outcome="maybe"), "unknown outcome 'maybe'"),
        (PolicyDecision(outcome=""), "unknown outcome ''"),
        ("allow", "not a PolicyDecision"),
        (
            PolicyDecision.require_approval("k", "r", capability={"n": float("nan")}),
            "capability is not usable JSON",
        ),
        (
            PolicyDecision.require_approval("k", "r", presentation={"s": "\ud800"}),
            "presentation is not usable JSON",
        ),
        (PolicyDecision.require_approval("", "no kind"), "without naming its kind"),
    ],
)
def test_policy_failure_ends_the_run_internal_error_with_nothing_executed(
    any_store: agentrt.Store, answer: Any, detail: str
) -> None:
    tool = RecordingTool("t", SideEffect.READ_ONLY)
    run = drive(
        any_store,
        [Decision.tool_call("t", {}), Decision.complete()],
        [tool],
        policy=FixedPolicy(answer),
    )
    assert (run.status, run.reason) == ("FAILED", "internal_error")
    assert detail in run.reason_detail
    assert tool.calls == []
    assert "step.tool_started" not in event_types(any_store, run.id)
    assert any_store.list_steps(run.id)[0].status == "failed"


def test_policy_abort_ends_the_run_with_nothing_executed(any_store: agentrt.Store) -> None:
    tool = RecordingTool("t", SideEffect.READ_ONLY)
    run = drive(
        any_store,
        [Decision.tool_call("t", {})],
        [tool],
        policy=FixedPolicy(PolicyDecision.abort("never")),
    )
    assert (run.status, run.reason, run.reason_detail) == ("FAILED", "policy_abort", "never")
    assert tool.calls == []
    assert event_types(any_store, run.id)[-3:] == ["step.policy", "step.failed", "run.finished"]


def test_policy_receives_an_independent_copy_and_the_counters(any_store: agentrt.Store) -> None:
    seen: list[Any] = []

    class Meddling:
        policy_id = "meddling/1"

        def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
            seen.append((request.spec.name, request.args, len(view.steps)))
            request.args["x"] = 666  # must not change what executes or is recorded
            return PolicyDecision.allow()

    tool = RecordingTool("t", SideEffect.READ_ONLY)
    drive(
        any_store,
        [Decision.tool_call("t", {"x": 1}), Decision.tool_call("t", {"x": 2}), Decision.complete()],
        [tool],
        policy=Meddling(),
    )
    assert seen == [("t", {"x": 666}, 0), ("t", {"x": 666}, 1)]
    assert [c.args for c in tool.calls] == [{"x": 1}, {"x": 2}]


# -- limits ----------------------------------------------------------------


def test_max_steps(any_store: agentrt.Store) -> None:
    tool = RecordingTool("t", SideEffect.READ_ONLY, result=lambda c: ToolResult(c.step_id))
    run = drive(
        any_store,
        [Decision.tool_call("t", {"x": i}) for i in range(5)],
        [tool],
        limits=Limits(max_steps=3),
    )
    assert (run.status, run.reason) == ("FAILED", "limit_steps")
    assert run.step_count == 3 and len(tool.calls) == 3
    limit = [e for e in any_store.list_events(run_id=run.id) if e.type == "limit.exceeded"]
    assert limit[0].payload == {"reason": "limit_steps", "detail": "3 steps reached max_steps 3"}


def test_consecutive_failures_including_denials(any_store: agentrt.Store) -> None:
    rm = RecordingTool("rm", SideEffect.DESTRUCTIVE)
    run = drive(
        any_store,
        [Decision.tool_call("rm", {"x": i}) for i in range(5)],
        [rm],
        limits=Limits(max_consecutive_tool_failures=2),
    )
    assert (run.status, run.reason) == ("FAILED", "repeated_tool_failures")
    assert run.step_count == 2


def test_a_success_resets_the_failure_count(any_store: agentrt.Store) -> None:
    rm = RecordingTool("rm", SideEffect.DESTRUCTIVE)
    ok = RecordingTool("ok", SideEffect.READ_ONLY, result=lambda c: ToolResult(c.step_id))
    decisions = [
        Decision.tool_call("rm", {}),
        Decision.tool_call("ok", {"x": 1}),
        Decision.tool_call("rm", {}),
        Decision.tool_call("ok", {"x": 2}),
        Decision.complete(),
    ]
    run = drive(any_store, decisions, [rm, ok], limits=Limits(max_consecutive_tool_failures=2))
    assert run.status == "COMPLETED"


def test_loop_detection_same_call_same_outcome(any_store: agentrt.Store) -> None:
    tool = RecordingTool("t", SideEffect.READ_ONLY, result={"same": True})
    run = drive(
        any_store, [Decision.tool_call("t", {"x": 1})] * 6, [tool], limits=Limits(loop_threshold=3)
    )
    assert (run.status, run.reason) == ("FAILED", "loop_detected")
    assert len(tool.calls) == 3
    loop = next(e for e in any_store.list_events(run_id=run.id) if e.type == "loop.detected")
    assert loop.payload == {
        "repeats": 3,
        "tool": "t",
        "args_hash": agentrt.content_hash({"x": 1}),
        "observation_hash": agentrt.content_hash({"same": True}),
    }


def test_a_changing_result_is_progress_not_a_loop(any_store: agentrt.Store) -> None:
    counter = iter(range(100))
    tool = RecordingTool("t", SideEffect.READ_ONLY, result=lambda c: ToolResult(next(counter)))
    run = drive(
        any_store,
        [Decision.tool_call("t", {"x": 1})] * 5 + [Decision.complete()],
        [tool],
        limits=Limits(loop_threshold=2),
    )
    assert run.status == "COMPLETED"


def test_active_time_limit_excludes_time_waiting_for_a_person(any_store: agentrt.Store) -> None:
    clock = FakeClock(tick=timedelta(seconds=1))
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
    read = RecordingTool("read", SideEffect.READ_ONLY, result=lambda c: ToolResult(c.step_id))
    driver = agentrt.Driver(
        store=any_store,
        agent=ScriptedAgent(
            [Decision.tool_call("push", {})]
            + [Decision.tool_call("read", {"x": i}) for i in range(20)]
        ),
        policy=agentrt.default_policy(),
        tools=[push, read],
        now=clock,
        new_id=Ids(),
    )
    run = driver.start_sync("g", limits=Limits(max_active_time=timedelta(seconds=12)))
    (approval,) = any_store.pending_approvals(run.id)
    driver.approve(run.id, approval.id, by="a")
    clock.advance(timedelta(days=3))  # a long weekend waiting for a person is not active time
    run = driver.resume_sync(run.id)
    assert (run.status, run.reason) == ("FAILED", "limit_active_time")
    assert timedelta(seconds=12) <= run.active_time < timedelta(seconds=16)
    assert len(push.calls) == 1 and 1 <= len(read.calls) <= 4


def test_elapsed_time_limit_counts_everything(any_store: agentrt.Store) -> None:
    clock = FakeClock()
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
    driver = agentrt.Driver(
        store=any_store,
        agent=ScriptedAgent([Decision.tool_call("push", {}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[push],
        now=clock,
        new_id=Ids(),
    )
    run = driver.start_sync("g", limits=Limits(max_elapsed_time=timedelta(hours=1)))
    (approval,) = any_store.pending_approvals(run.id)
    driver.approve(run.id, approval.id, by="a")
    clock.advance(timedelta(hours=2))
    run = driver.resume_sync(run.id)
    assert (run.status, run.reason) == ("FAILED", "limit_elapsed_time")
    assert len(push.calls) == 1  # the approved call ran; the limit stops the next step


def test_limits_must_be_positive() -> None:
    with pytest.raises(agentrt.ConfigError, match="max_steps"):
        Limits(max_steps=0)
    with pytest.raises(agentrt.ConfigError, match="approval_ttl"):
        Limits(approval_ttl=timedelta(0))


# -- agent errors, observers, determinism ----------------------------------


def test_agent_error_ends_the_run(any_store: agentrt.Store) -> None:
    def broken(_: Any) -> Decision:
        raise KeyError("oops")

    run = drive(any_store, [broken], [])
    assert (run.status, run.reason, run.reason_detail) == (
        "FAILED",
        "agent_error",
        "KeyError: 'oops'",
    )
    assert any_store.list_steps(run.id)[0].status == "failed"


def test_observer_sees_every_event_after_commit_in_commit_order(any_store: agentrt.Store) -> None:
    seen: list[tuple[int, str, bool]] = []

    def observer(event: agentrt.Event) -> None:
        committed = any(
            e.seq == event.seq
            for e in any_store.list_events(run_id=event.run_id, after_seq=event.seq - 1, limit=1)
        )
        seen.append((event.seq, event.type, committed))

    tool = RecordingTool("t", SideEffect.READ_ONLY)
    run = drive(
        any_store, [Decision.tool_call("t", {}), Decision.complete()], [tool], observer=observer
    )
    stored = any_store.list_events(run_id=run.id)
    assert [(s, t) for s, t, _ in seen] == [(e.seq, e.type) for e in stored]
    assert all(committed for _, _, committed in seen)


def test_an_observer_that_raises_does_not_stop_the_run(any_store: agentrt.Store) -> None:
    def observer(event: agentrt.Event) -> None:
        raise RuntimeError("dashboard down")

    run = drive(any_store, [Decision.complete("ok")], [], observer=observer)
    assert run.status == "COMPLETED"


def test_same_clock_and_ids_give_byte_identical_records(tmp_path: Any) -> None:
    def record(path: Any) -> list[Any]:
        store = agentrt.open_store(path)
        push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
        read = RecordingTool("read", SideEffect.READ_ONLY)
        decisions = [
            Decision.tool_call("read", {"x": 1}),
            Decision.tool_call("push", {}),
            Decision.complete({"n": 1.5}),
        ]
        clock = FakeClock()
        driver = agentrt.Driver(
            store=store,
            agent=ScriptedAgent(decisions),
            policy=agentrt.default_policy(),
            tools=[push, read],
            now=clock,
            new_id=Ids(),
        )
        run = driver.start_sync("g")
        (approval,) = store.pending_approvals(run.id)
        driver.approve(run.id, approval.id, by="a")
        driver.resume_sync(run.id)
        rows = [(e.seq, e.type, e.at, e.payload, e.hash) for e in store.list_events()]
        store.close()
        return [*rows, clock.readings]

    assert record(tmp_path / "a.db") == record(tmp_path / "b.db")


def test_scripted_agent_plays_one_entry_per_step_and_keeps_only_the_last_input(
    any_store: agentrt.Store,
) -> None:
    agent = ScriptedAgent([Decision.tool_call("read", {"x": i}) for i in range(3)])
    driver = agentrt.Driver(
        store=any_store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[RecordingTool("read", SideEffect.READ_ONLY)],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("goal")
    # Past the end of the script: an agent error, after three tool steps.
    assert (run.status, run.reason) == ("FAILED", "agent_error")
    assert "the script has 3 decisions, all carried out; step 3 has none" in run.reason_detail
    assert agent.calls == 4
    assert agent.last_input is not None
    assert [s.index for s in agent.last_input.steps] == [0, 1, 2, 3]
    assert not hasattr(agent, "inputs")


def test_a_schema_edited_after_registration_changes_nothing_the_driver_checks(
    any_store: agentrt.Store,
) -> None:
    """The Driver validates, hashes and approves against the spec as registered."""

    def schema() -> dict[str, Any]:
        return {"type": "object", "properties": {"x": {"type": "integer"}}}

    read = RecordingTool("read", SideEffect.READ_ONLY, schema=schema())
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION, schema=schema())
    agent = ScriptedAgent(
        [
            Decision.tool_call("read", {"x": "one"}),
            Decision.tool_call("push", {"x": 2}),
            Decision.complete(),
        ]
    )
    driver = agentrt.Driver(
        store=any_store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[read, push],
        now=FakeClock(),
        new_id=Ids(),
    )
    for tool in (read, push):  # the consumer edits its dicts after registering them
        tool.spec.input_schema["properties"]["x"]["type"] = "string"
    run = driver.start_sync("goal")
    assert run.status == "WAITING_FOR_APPROVAL"
    first = any_store.list_steps(run.id)[0]
    assert first.observation is not None
    assert first.observation.kind == "invalid_decision"  # "one" is not an integer
    (approval,) = any_store.pending_approvals(run.id)
    driver.approve(run.id, approval.id, by="ops")
    run = driver.resume_sync(run.id)
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    assert [c.args for c in push.calls] == [{"x": 2}]
    assert read.calls == []


class EditingPolicy:
    """Edits the spec it is shown, then answers as the default policy does."""

    policy_id = "editing/1"

    def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        request.spec.input_schema["properties"]["x"]["type"] = "string"
        return agentrt.default_policy().evaluate(request, view)  # type: ignore[return-value]


@pytest.mark.parametrize("editor", ["agent", "policy"])
def test_an_agent_or_a_policy_editing_the_spec_it_is_shown_changes_nothing_the_driver_checks(
    any_store: agentrt.Store, editor: str
) -> None:
    """Agents and policies get copies: the approval, its hash and the resume keep the
    spec as registered, and the approved call runs."""
    push = RecordingTool(
        "push",
        SideEffect.REMOTE_MUTATION,
        schema={"type": "object", "properties": {"x": {"type": "integer"}}},
    )
    script = ScriptedAgent([Decision.tool_call("push", {"x": 2}), Decision.complete()])

    def editing_agent(step_input: agentrt.StepInput) -> Decision:
        for spec in step_input.tools:  # an adapter "normalising" schemas in place, say
            spec.input_schema["properties"]["x"]["type"] = "string"
        return script.decide(step_input)

    driver = agentrt.Driver(
        store=any_store,
        agent=editing_agent if editor == "agent" else script,
        policy=EditingPolicy() if editor == "policy" else agentrt.default_policy(),
        tools=[push],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("goal")
    assert run.status == "WAITING_FOR_APPROVAL", run.reason_detail
    (approval,) = any_store.pending_approvals(run.id)
    assert isinstance(approval.request, dict)
    assert approval.request["spec"]["input_schema"]["properties"]["x"] == {"type": "integer"}
    driver.approve(run.id, approval.id, by="ops")
    run = driver.resume_sync(run.id)
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed"), run.reason_detail
    assert [c.args for c in push.calls] == [{"x": 2}]
    assert push.spec.input_schema["properties"]["x"] == {"type": "integer"}  # the tool's own
