"""When several limits are reached at once, the run ends with the first in the fixed
order (loop.md, _limits.py): limit_steps, repeated_tool_failures, limit_active_time,
limit_elapsed_time, loop_detected.

Every adjacent pair of that order is reached together in one case below, so any
reordering of the checks makes at least one case fail. Both tests take `any_store` and
run on SQLite and on PostgreSQL (issue 21 item 5; decision 0105).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentrt
from agentrt import Decision, Limits, SideEffect, StepInput, ToolCall, ToolResult
from agentrt._canonical import content_hash
from agentrt._limits import trailing_repeats
from agentrt._records import Observation, Step, StepStatus
from conftest import FakeClock, Ids, RecordingTool, event_types

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


def run_to_a_limit(
    store: agentrt.Store, limits: Limits, *, tool_fails: bool, minutes_per_call: int
) -> tuple[agentrt.Run, RecordingTool]:
    """The agent calls the same tool with the same args at every step; each call
    advances the clock (so active and elapsed time grow together) and returns the
    same outcome (a failure when `tool_fails`), so repeats grow by one per step."""
    clock = FakeClock()

    def call(c: ToolCall) -> ToolResult:
        clock.advance(minutes_per_call * MINUTE)
        if tool_fails:
            raise RuntimeError("always the same failure")
        return ToolResult(content={"same": True}, summary="same")

    tool = RecordingTool("t", SideEffect.READ_ONLY, result=call)

    def decide(input: StepInput) -> Decision:
        return Decision.tool_call("t", {"x": 1})

    driver = agentrt.Driver(
        store=store,
        agent=decide,
        policy=agentrt.default_policy(),
        tools=[tool],
        now=clock,
        new_id=Ids(),
    )
    return driver.start_sync("goal", limits=limits), tool


# Three steps of 20 minutes each reach every limit below together, after step 3 and
# not before: max_steps 3, three failures (or successes) in a row, three identical
# outcomes, 60 minutes of active and of elapsed time.
ALL = {
    "max_steps": 3,
    "max_consecutive_tool_failures": 3,
    "loop_threshold": 3,
    "max_active_time": HOUR,
    "max_elapsed_time": HOUR,
}
NONE = {
    "max_steps": 50,
    "max_consecutive_tool_failures": 50,
    "loop_threshold": 50,
    "max_active_time": None,
    "max_elapsed_time": None,
}
CASES = {
    # name: (limits reached together, whether the tool fails, the expected reason)
    "all five": (list(ALL), True, "limit_steps"),
    "steps and failures": (["max_steps", "max_consecutive_tool_failures"], True, "limit_steps"),
    "failures and active time": (
        ["max_consecutive_tool_failures", "max_active_time"],
        True,
        "repeated_tool_failures",
    ),
    "active and elapsed time": (
        ["max_active_time", "max_elapsed_time"],
        False,
        "limit_active_time",
    ),
    "elapsed time and loop": (["max_elapsed_time", "loop_threshold"], False, "limit_elapsed_time"),
    "failures, times and loop": (
        ["max_consecutive_tool_failures", "max_active_time", "max_elapsed_time", "loop_threshold"],
        True,
        "repeated_tool_failures",
    ),
    "active time and loop": (["max_active_time", "loop_threshold"], False, "limit_active_time"),
    "steps and loop": (["max_steps", "loop_threshold"], False, "limit_steps"),
    "steps and elapsed time": (["max_steps", "max_elapsed_time"], False, "limit_steps"),
    "failures and loop": (
        ["max_consecutive_tool_failures", "loop_threshold"],
        True,
        "repeated_tool_failures",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_limits_reached_together_end_the_run_with_the_first_in_the_fixed_order(
    any_store: agentrt.Store, case: str
) -> None:
    store = any_store
    reached, tool_fails, expected = CASES[case]
    limits = Limits(**{**NONE, **{name: ALL[name] for name in reached}})  # type: ignore[arg-type]
    run, tool = run_to_a_limit(store, limits, tool_fails=tool_fails, minutes_per_call=20)
    assert (run.status, run.reason) == ("FAILED", expected)
    # All were reached at the same check: after the third step, before a fourth.
    assert len(tool.calls) == 3
    assert run.step_count == 3
    events = store.list_events(run_id=run.id)
    limit_events = [e for e in events if e.type in ("limit.exceeded", "loop.detected")]
    if expected == "loop_detected":
        assert [e.type for e in limit_events] == ["loop.detected"]
    else:
        assert [(e.type, e.payload["reason"]) for e in limit_events] == [
            ("limit.exceeded", expected)
        ]
        assert limit_events[0].payload["detail"] == run.reason_detail
    assert event_types(store, run.id)[-2:] == [limit_events[0].type, "run.finished"]


ALONE = {
    "max_steps": (False, "limit_steps"),
    "max_consecutive_tool_failures": (True, "repeated_tool_failures"),
    "max_active_time": (False, "limit_active_time"),
    "max_elapsed_time": (False, "limit_elapsed_time"),
    "loop_threshold": (False, "loop_detected"),
}


@pytest.mark.parametrize("name", list(ALONE))
def test_each_limit_alone_is_reached_after_the_same_three_steps(
    any_store: agentrt.Store, name: str
) -> None:
    """The cases above are simultaneous: each limit alone also ends the run after step 3."""
    store = any_store
    tool_fails, expected = ALONE[name]
    limits = Limits(**{**NONE, name: ALL[name]})  # type: ignore[arg-type]
    run, tool = run_to_a_limit(store, limits, tool_fails=tool_fails, minutes_per_call=20)
    assert (run.reason, len(tool.calls)) == (expected, 3)


def _repeats_as_before(steps: list[Any], args_hash: Any) -> int:
    """`trailing_repeats` as it was written before decision 0114 (every key up front)."""
    if not steps:
        return 0
    last = steps[-1]
    if last.decision is None or last.decision.kind != "tool_call" or last.observation is None:
        return 0
    key = (last.decision.tool, args_hash(last), last.observation.content_hash)
    count = 0
    for step in reversed(steps):
        if (
            step.decision is None
            or step.observation is None
            or (step.decision.tool, args_hash(step), step.observation.content_hash) != key
        ):
            break
        count += 1
    return count


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["tool_call", "complete", None]),
            st.sampled_from(["a", "b"]),
            st.sampled_from([{"n": 1}, {"n": 2}, None]),
            st.sampled_from(["ok", "other", None]),
        ),
        max_size=8,
    )
)
def test_trailing_repeats_counts_as_it_did(made: list[tuple[Any, str, Any, Any]]) -> None:
    # Decision 0114: the arguments' hashes are only compared once tool and outcome match.
    steps = []
    for i, (kind, tool, args, outcome) in enumerate(made):
        decision = None if kind is None else Decision(kind=kind, tool=tool, args=args)
        observation = (
            None if outcome is None else Observation.tool_result({"seen": outcome}, outcome)
        )
        steps.append(
            Step(
                id=f"s{i}",
                run_id="r",
                index=i,
                status=StepStatus.DONE,
                decision=decision,
                policy=None,
                observation=observation,
                started_at=None,
                finished_at=None,
            )
        )

    def args_hash(step: Any) -> str:
        return content_hash({} if step.decision.args is None else step.decision.args)

    assert trailing_repeats(steps, args_hash) == _repeats_as_before(steps, args_hash)
