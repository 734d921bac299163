"""The test kit's re-check helpers: a scenario's run asked again of its policy, or of another."""

from __future__ import annotations

from pathlib import Path

import pytest

import agentrt
import support.scenarios as ts
from agentrt import PolicyDecision, RunView, ToolRequest
from agentrt.testkit import Crash, Point, assert_rechecks_same, recheck, run_sync


class NoCharges:
    policy_id = "no-charges/1"

    def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        if request.spec.name == "charge":
            return PolicyDecision.deny("no charges \x1b[31mtoday")
        return PolicyDecision.allow()


def test_a_scenario_rechecks_the_same_with_its_own_policy(tmp_path: Path) -> None:
    result = run_sync(ts.checkout, db_path=tmp_path / "r.db")
    report = assert_rechecks_same(result, scenario=ts.checkout)
    assert report.evaluations and {e.verdict for e in report.evaluations} == {"same"}


def test_the_runtimes_own_pause_after_a_crash_does_not_fail_the_assertion(
    tmp_path: Path,
) -> None:
    result = run_sync(
        ts.direct_charge_approve, Crash(1, Point.AFTER_TOOL_STARTED), db_path=tmp_path / "r.db"
    )
    report = assert_rechecks_same(result, scenario=ts.direct_charge_approve)
    verdicts = [e.verdict for e in report.evaluations]
    assert "not_a_policy_evaluation" in verdicts and "different" not in verdicts


def test_a_changed_policy_fails_the_assertion_naming_each_difference(tmp_path: Path) -> None:
    result = run_sync(ts.checkout, db_path=tmp_path / "r.db")
    with pytest.raises(AssertionError) as failed:
        assert_rechecks_same(result, NoCharges())
    message = str(failed.value)
    assert "do not re-check the same" in message
    assert "different" in message and "step 1 charge" in message
    assert "\\x1b[31m" in message and "\x1b" not in message
    report = recheck(result, NoCharges())
    assert report.policy_changed and len(report.differences) >= 1


def test_a_policy_or_a_scenario_must_be_named(tmp_path: Path) -> None:
    result = run_sync(ts.checkout, db_path=tmp_path / "r.db")
    with pytest.raises(agentrt.ConfigError):
        recheck(result)
