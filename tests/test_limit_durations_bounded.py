"""Duration limits are at most a hundred years (decision 0139).

Found by an attack: duration limits that `Limits` accepted overflowed the runtime's date
arithmetic.

`Limits.__post_init__` accepts any positive `timedelta` for `approval_ttl`,
`grant_ttl`, `max_active_time` and `max_elapsed_time`, and `timedelta.max` (or any
few million days) is the obvious way to write "practically unlimited". The runtime
then adds them to a date without a bound:

- `approval_ttl`: the pause computes `expires_at = now + approval_ttl` and raises
  OverflowError out of `start`, leaving the run RUNNING with its step never recorded;
- `grant_ttl`: every resume computes `decided_at + grant_ttl` and raises
  OverflowError, so an approved run can never execute, expire or end: it is stuck
  WAITING for good;
- `max_elapsed_time`: a retry wait computes `created_at + max_elapsed_time` and the
  run ends `agent_error` "OverflowError: date value out of range".

Such a limit is now refused up front (`ConfigError`, nothing created); the longest one
taken, `MAX_DURATION_LIMIT` (36,500 days; None means unlimited), works through a pause,
an approval, a resume and a retry.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import Decision, Limits, PolicyDecision, SideEffect
from agentrt._errors import ConfigError, TransientModelError
from agentrt._model import ModelConfig
from agentrt._records import MAX_DURATION_LIMIT
from conftest import FakeClock, Ids, RecordingTool
from support.models import PRICE, FakeModel, drive, reply

HUGE = [timedelta.max, timedelta(days=5_000_000), MAX_DURATION_LIMIT + timedelta(seconds=1)]
DURATIONS = ["approval_ttl", "grant_ttl", "max_elapsed_time", "max_active_time"]


@pytest.mark.parametrize("ttl", HUGE, ids=["max", "5M days", "just over"])
@pytest.mark.parametrize("which", DURATIONS)
def test_a_duration_limit_past_a_hundred_years_is_refused_up_front(
    which: str, ttl: timedelta
) -> None:
    with pytest.raises(ConfigError) as refused:
        Limits(**{which: ttl})
    assert str(refused.value) == (
        f"Limits.{which} must be at most 36500 days; None means unlimited"
    )


class AskEveryTime:
    policy_id = "ask/1"

    def evaluate(self, request: Any, view: Any) -> PolicyDecision:
        return PolicyDecision.require_approval("check", "a person checks every call")


def approved_run(store: agentrt.Store, limits: Limits) -> tuple[agentrt.Run, RecordingTool]:
    tool = RecordingTool("t", SideEffect.DESTRUCTIVE)
    decisions = iter([Decision.tool_call("t", {"x": 1}), Decision.complete({"done": True})])
    driver = agentrt.Driver(
        store=store,
        agent=lambda input: next(decisions),
        policy=AskEveryTime(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("g", limits=limits)
    assert run.status == "WAITING_FOR_APPROVAL", (run.status, run.reason_detail)
    (approval,) = store.list_approvals(run.id)
    driver.approve(run.id, approval.id, by="operator")
    return driver.resume_sync(run.id), tool


@pytest.mark.parametrize("ttl", [MAX_DURATION_LIMIT], ids=["100 years"])
@pytest.mark.parametrize("which", ["approval_ttl", "grant_ttl"])
def test_the_longest_approval_or_grant_ttl_does_not_strand_the_run(
    any_store: agentrt.Store, which: str, ttl: timedelta
) -> None:
    run, tool = approved_run(any_store, Limits(**{which: ttl}))
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed"), run.reason_detail
    assert len(tool.calls) == 1


@pytest.mark.parametrize("limit", [MAX_DURATION_LIMIT], ids=["100 years"])
@pytest.mark.parametrize("which", ["max_elapsed_time", "max_active_time"])
def test_the_longest_time_limit_does_not_crash_a_retry(
    any_store: agentrt.Store, which: str, limit: timedelta
) -> None:
    limits = Limits(**{which: limit})
    model = FakeModel(TransientModelError("overloaded"), reply())
    config = ModelConfig(model=model, prices=PRICE, max_retries=1, backoff=timedelta(0))
    run = drive(any_store, model, config=config, limits=limits)
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed"), run.reason_detail
