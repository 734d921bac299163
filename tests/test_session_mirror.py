"""The session's copy of its run and steps is what a fresh read of the store gives.

`RunSession` keeps the run and its steps in memory so that a step does not
re-read what it has just written (docs/performance.md). That copy feeds the
limits, the policy's view, the agent's `StepInput` and the `Run` the caller
gets back, so it must never drift from the rows: these tests compare the two
after every commit the loop makes, on every path a step can take.
"""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentrt
from agentrt import AbortRun, Decision, SideEffect, ToolCall, ToolResult
from agentrt.canonical import JSONFloat, JSONInt
from agentrt.model import ModelConfig, ModelResponse, Price, ToolUseBlock, Usage
from agentrt.model_agent import ModelAgent
from agentrt.replay import ScriptedModel
from agentrt.scripted import ScriptedAgent
from agentrt.session import RunSession
from conftest import FakeClock, Ids, RecordingTool

ANY_OBJECT = {"type": "object"}


class Mirror:
    """A probe that compares the session with the store after every commit."""

    def __init__(self, store: agentrt.Store) -> None:
        self.store = store
        self.points: list[str] = []

    def __call__(self, point: str, session: RunSession) -> None:
        self.points.append(point)
        fresh_run = self.store.get_run(session.run_id)
        # repr, not only ==: 10.0 == 1e1 as numbers, but not as recorded literals,
        # and a dict's key order is what the agent and the policy iterate.
        assert repr(session.run) == repr(fresh_run), f"run differs after {point}"
        fresh_steps = self.store.list_steps(session.run_id, cap=None)
        assert repr(session.steps) == repr(fresh_steps), f"steps differ after {point}"


def check_returned(store: agentrt.Store, run: agentrt.Run) -> None:
    assert repr(run) == repr(store.get_run(run.id))


def calls(name: str, args: Any) -> ModelResponse:
    return ModelResponse(
        "", (ToolUseBlock(f"toolu_{name}", name, args),), "tool_use", Usage(120, 30, 20), b""
    )


def test_a_model_driven_run_through_every_outcome_keeps_the_session_equal_to_its_rows(
    tmp_path: Path,
) -> None:
    """Charges between commits, a denial, a nudge, a pause, a resume and a terminal tool."""
    store = agentrt.open_store(tmp_path / "runs.db")
    mirror = Mirror(store)
    model = ScriptedModel(
        [
            calls("read", {"x": 1}),
            calls("delete", {"x": 2}),  # destructive: denied
            ModelResponse("all done?", (), "end_turn", Usage(90, 10, 0), b""),  # nudged
            calls("read", {"x": 5}),
            calls("push", {"x": 3}),  # remote: waits for a person
            calls("finish", {"x": 4}),  # terminal
        ]
    )
    driver = agentrt.Driver(
        store=store,
        agent=ModelAgent(),
        policy=agentrt.default_policy(),
        tools=[
            RecordingTool("read", SideEffect.READ_ONLY, result={"lines": ["a", 2.50, 10**30]}),
            RecordingTool("delete", SideEffect.DESTRUCTIVE),
            RecordingTool("push", SideEffect.REMOTE_MUTATION, result={"pushed": 3}),
            RecordingTool("finish", SideEffect.READ_ONLY, terminal=True),
        ],
        model=model,
        model_config=ModelConfig(
            model=model.name,
            prices=Price(3_000_000, 15_000_000),
            max_retries=0,
            backoff=timedelta(0),
        ),
        now=FakeClock(),
        new_id=Ids(),
        probe=mirror,
    )
    run = driver.start_sync("tidy and push the notes")
    assert run.status == "WAITING_FOR_APPROVAL"
    check_returned(store, run)
    assert run.model_calls == 5 and run.estimated_cost_micros > 0
    (approval,) = store.pending_approvals(run.id)
    driver.approve(run.id, approval.id, by="ops")
    run = driver.resume_sync(run.id)
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    check_returned(store, run)
    assert {
        "step.started",
        "step.decided",
        "step.tool_started",
        "step.tool_finished",
        "run.paused",
        "run.resumed",
    } <= set(mirror.points), mirror.points
    store.close()


def failing_tool(call: ToolCall) -> ToolResult:
    raise RuntimeError(f"no page {call.args}")


def aborting_tool(call: ToolCall) -> ToolResult:
    raise AbortRun("the ledger is locked")


def drive_scripted(
    path: Path, decisions: list[Decision], tools: list[RecordingTool], limits: agentrt.Limits
) -> tuple[agentrt.Store, agentrt.Run, Mirror]:
    store = agentrt.open_store(path)
    mirror = Mirror(store)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(decisions),
        policy=agentrt.default_policy(),
        tools=tools,
        now=FakeClock(),
        new_id=Ids(),
        probe=mirror,
    )
    run = driver.start_sync("walk every path", limits=limits)
    check_returned(store, run)
    return store, run, mirror


def test_failed_invalid_and_aborted_steps_keep_the_session_equal_to_its_rows(
    tmp_path: Path,
) -> None:
    tools = [
        RecordingTool("read", SideEffect.READ_ONLY),
        RecordingTool("broken", SideEffect.READ_ONLY, result=failing_tool),
        RecordingTool("ledger", SideEffect.LOCAL_MUTATION, result=aborting_tool),
    ]
    decisions = [
        Decision.tool_call("read", {"x": 1}),
        Decision.tool_call("nowhere", {}),  # unknown tool: an invalid decision
        Decision.tool_call("read", {"x": "one"}),  # args against the schema
        Decision.tool_call("broken", {"x": 2}),  # the tool raises
        Decision.tool_call("read", {"x": 3}),
        Decision.tool_call("ledger", {"x": 4}),  # AbortRun ends the run
    ]
    store, run, mirror = drive_scripted(
        tmp_path / "runs.db", decisions, tools, agentrt.Limits(max_consecutive_tool_failures=9)
    )
    assert (run.status, run.reason) == ("FAILED", "tool_abort")
    assert mirror.points.count("step.tool_finished") == 4
    store.close()


def test_a_limit_and_a_completion_keep_the_session_equal_to_its_rows(tmp_path: Path) -> None:
    tools = [RecordingTool("read", SideEffect.READ_ONLY)]
    decisions = [Decision.tool_call("read", {"x": i}) for i in range(5)]
    store, run, _ = drive_scripted(
        tmp_path / "limit.db", decisions, tools, agentrt.Limits(max_steps=3)
    )
    assert (run.status, run.reason) == ("FAILED", "limit_steps")
    store.close()
    decisions = [Decision.tool_call("read", {"x": 1}), Decision.complete({"done": 1.0})]
    store, run, _ = drive_scripted(tmp_path / "done.db", decisions, tools, agentrt.Limits())
    assert (run.status, run.result) == ("COMPLETED", {"done": JSONFloat("1.0")})
    store.close()


_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([JSONFloat("10.0"), JSONFloat("1e1"), JSONFloat("-0.0"), JSONInt("-0")]),
    st.text(max_size=8),
)
_values = st.recursive(
    _leaves,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=10,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(_values, min_size=1, max_size=3), summary=st.text(max_size=20))
def test_any_json_in_args_and_observations_keeps_the_session_equal_to_its_rows(
    values: list[Any], summary: str
) -> None:
    """Number literals (10 vs 10.0 vs 1e1, beyond 2^53), escapes and nesting survive the copy."""

    def echo(call: ToolCall) -> ToolResult:
        return ToolResult(content={"echo": call.args}, summary=summary)

    tools = [RecordingTool("echo", SideEffect.READ_ONLY, schema=ANY_OBJECT, result=echo)]
    decisions = [Decision.tool_call("echo", {"v": v}) for v in values]
    decisions.append(Decision.complete({"last": values[-1]}))
    with tempfile.TemporaryDirectory() as directory:
        store, run, mirror = drive_scripted(
            Path(directory) / "runs.db", decisions, tools, agentrt.Limits(loop_threshold=9)
        )
        assert run.status == "COMPLETED", run
        assert mirror.points.count("step.tool_finished") == len(values)
        store.close()
