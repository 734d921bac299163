"""agentrt.testkit: prove the recovery contract holds for your tools and policy.

Describe a `Scenario` (tools, policy, agent, operator) in a factory, name the
points where a process should die (`Crash(step, Point.AFTER_TOOL_STARTED)`),
and `run` it: the kit kills the process there, recovers the run in a fresh one
(with a fresh Scenario from the factory) as a restarted program would, answers
approvals as your operator would, and checks every invariant of `recovery.md`
on what was left behind (`Result.violations`, raised as an AssertionError).
`mode="harness"` simulates processes in this one; `mode="process"` uses real
child processes killed with SIGKILL, also inside a transaction before its
COMMIT. `crash_matrix` crashes at every point of every step a scenario
reaches, the recovery points a crash leads to included, and prints the
outcomes as a table; the pytest plugin (`agentrt.testkit.plugin`, loaded only
when asked for: `-p agentrt.testkit.plugin`) parametrizes one test over that
matrix.
The database is a SQLite file or a PostgreSQL schema (`db_path` takes a path
or a `postgresql://...?schema=NAME` URL; `crash_matrix(directory=URL)` gives
each case a schema of its own): the kit reads the record only through the
store interface, and both modes hold on both backends. On PostgreSQL the
harness cannot move the server's lease clock, so it waits a simulated crash's
lease out in real time (use a short `lease_ttl` there); process mode takes
over at once from a child proved dead (docs/recovery.md, decision 0097).
`check_policy` and `fuzz_args` test a policy and a tool's schema on their own;
`assert_rechecks_same` re-checks a scenario's run with its policy (or a changed one).

This package owns the test kit's public names; each submodule owns one part
(see their docstrings). `agentrt.testkit._process` is also the child's entry
point and is imported only when process mode runs.
"""

from __future__ import annotations

from ..render import same_renders
from ._conformance import ConformanceReport, PolicyCase, check_policy
from ._fuzz import FuzzCase, fuzz_args
from ._invariants import check
from ._matrix import (
    CrashMatrix,
    MatrixCase,
    crash_matrix,
    crash_matrix_sync,
    discover,
    matrix_cases,
)
from ._recheck import assert_rechecks_same, recheck
from ._result import AgentInput, CrashReached, OperatorAnswer, ProbeHit, Result, ToolInvocation
from ._runner import ScenarioError, run, run_sync
from ._scenario import (
    Crash,
    LoopContext,
    Point,
    Scenario,
    SharedScenarioWarning,
    Verdict,
    always,
    by_kind,
    load_factory,
)
from ._violation import InvariantError, Violation

__all__ = [
    "AgentInput",
    "ConformanceReport",
    "Crash",
    "CrashMatrix",
    "CrashReached",
    "FuzzCase",
    "InvariantError",
    "LoopContext",
    "MatrixCase",
    "OperatorAnswer",
    "Point",
    "PolicyCase",
    "ProbeHit",
    "Result",
    "Scenario",
    "ScenarioError",
    "SharedScenarioWarning",
    "ToolInvocation",
    "Verdict",
    "Violation",
    "always",
    "assert_rechecks_same",
    "by_kind",
    "check",
    "check_policy",
    "crash_matrix",
    "crash_matrix_sync",
    "discover",
    "fuzz_args",
    "load_factory",
    "matrix_cases",
    "recheck",
    "run",
    "run_sync",
    "same_renders",
]
