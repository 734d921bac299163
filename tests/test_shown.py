"""The copies a consumer is shown (`_shown`): equal to the records, sharing no container."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from agentrt import Approval, Decision, Limits, Observation, PolicyDecision, Run, Step
from agentrt._shown import shown_approval, shown_run, shown_step

AT = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def containers(value: Any) -> list[int]:
    """The ids of every dict and list inside `value`."""
    if isinstance(value, dict):
        return [id(value), *(i for item in value.values() for i in containers(item))]
    if isinstance(value, list):
        return [id(value), *(i for item in value for i in containers(item))]
    return []


def a_run(result: Any) -> Run:
    return Run(
        id="r1",
        goal="g",
        status="COMPLETED",
        reason="goal_completed",
        reason_detail="",
        limits=Limits(max_active_time=timedelta(seconds=5)),
        step_count=1,
        created_at=AT,
        started_at=AT,
        finished_at=AT,
        result=result,
    )


def a_step(args: Any, content: Any, capability: Any = None, presentation: Any = None) -> Step:
    return Step(
        id="s1",
        run_id="r1",
        index=0,
        status="done",
        decision=Decision.tool_call("read", args),
        policy=PolicyDecision.require_approval("k", "why", capability, presentation),
        observation=Observation.tool_result(content, "ok"),
        started_at=AT,
        finished_at=AT,
        spec_hash="h",
        policy_id="p",
    )


def test_a_step_copy_is_equal_and_owns_every_container() -> None:
    step = a_step({"x": [1, {"y": 2}]}, {"files": ["a"]}, {"c": [1]}, {"p": {"q": 1}})
    copy = shown_step(step)
    assert copy == step and repr(copy) == repr(step)
    assert type(copy) is Step and type(copy.decision) is Decision
    mine = containers(step.decision.args) + containers(step.observation.content)  # type: ignore[union-attr]
    mine += containers(step.policy.capability) + containers(step.policy.presentation)  # type: ignore[union-attr]
    theirs = containers(copy.decision.args) + containers(copy.observation.content)  # type: ignore[union-attr]
    theirs += containers(copy.policy.capability) + containers(copy.policy.presentation)  # type: ignore[union-attr]
    assert len(theirs) == len(mine) == 9 and not set(mine) & set(theirs)
    copy.decision.args["x"][1]["y"] = 666  # type: ignore[union-attr]
    copy.observation.content["files"].append("b")  # type: ignore[union-attr]
    assert step.decision.args == {"x": [1, {"y": 2}]}  # type: ignore[union-attr]
    assert step.observation.content == {"files": ["a"]}  # type: ignore[union-attr]


def test_a_record_with_no_container_is_shown_as_itself() -> None:
    step = a_step(None, "text")
    assert shown_step(step) is step
    run = a_run(3)
    assert shown_run(run) is run


def test_a_run_and_an_approval_copy_own_their_json() -> None:
    run = a_run({"pages": [1, 2]})
    copy = shown_run(run)
    assert copy == run and copy.result is not run.result
    copy.result["pages"].append(3)
    assert run.result == {"pages": [1, 2]}
    approval = Approval(
        id="a1",
        run_id="r1",
        step_id="s1",
        kind="k",
        capability={"c": 1},
        presentation={"p": [1]},
        request={"args": {"x": 1}},
        hash="h",
        status="pending",
        created_at=AT,
        expires_at=None,
        decided_at=None,
    )
    shown = shown_approval(approval)
    assert shown == approval
    assert not set(containers(shown.request)) & set(containers(approval.request))
    assert shown.presentation is not approval.presentation
