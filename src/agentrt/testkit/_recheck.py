"""Re-checking a scenario's run: would its policy (or another) decide every call the same?

`recheck(result, policy)` is `agentrt.recheck` on the run a scenario left in its
database; `assert_rechecks_same(result, ...)` raises an AssertionError listing,
one escaped line each, every evaluation that differs or could not be re-checked
(the runtime's own pauses, which no policy decided, are not failures). Without
a `policy`, the one of a fresh Scenario built from `scenario` (an instance, a
factory reference or a factory) is asked, with its tools as the registration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import ConfigError, Policy, RecheckReport, RecheckVerdict, open_existing
from .. import recheck as recheck_run
from ._result import Result
from ._scenario import ScenarioSource, build


def recheck(
    result: Result,
    policy: Policy | None = None,
    tools: Sequence[Any] | None = None,
    *,
    scenario: ScenarioSource | None = None,
) -> RecheckReport:
    """Re-check the run of `result` with `policy` (or `scenario`'s policy, built fresh)."""
    if policy is None:
        if scenario is None:
            raise ConfigError("say which policy to re-check with: policy=... or scenario=...")
        built = build(scenario)
        policy = built.policy
        tools = list(built.tools) if tools is None else tools
    with open_existing(str(result.db_path), read_only=True) as store:
        return recheck_run(store, result.run_id, policy, tools)


def assert_rechecks_same(
    result: Result,
    policy: Policy | None = None,
    tools: Sequence[Any] | None = None,
    *,
    scenario: ScenarioSource | None = None,
) -> RecheckReport:
    """`recheck`, raising an AssertionError unless every policy evaluation is `same`."""
    report = recheck(result, policy, tools, scenario=scenario)
    if report.same:
        return report
    wrong = [
        e
        for e in report.evaluations
        if e.verdict in (RecheckVerdict.DIFFERENT, RecheckVerdict.NOT_RECHECKABLE)
    ]
    lines = "\n".join("  " + e.line(report.run_id) for e in wrong)
    raise AssertionError(
        f"scenario {result.scenario}: {len(wrong)} of {len(report.evaluations)} policy "
        f"evaluations of run {report.run_id} do not re-check the same:\n{lines}"
    )
