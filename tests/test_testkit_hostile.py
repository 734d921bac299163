"""The crash test kit against consumers it must not let pass by accident: a matrix that
crashed nowhere, a marker argument dropped, a charge carried out twice around a "go on",
a tool re-run by hand, an agent or a helper process that hangs, a folder of the
consumer's, an in-memory database, bounds past a float, and arguments of the wrong kind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
import support.scenarios as ts
from agentrt import Decision, SideEffect, StepInput, ToolCall, ToolResult, ToolSpec
from agentrt.scripted import ScriptedAgent
from agentrt.testkit import (
    Crash,
    InvariantError,
    LoopContext,
    Point,
    Scenario,
    Verdict,
    always,
    by_kind,
    crash_matrix_sync,
    fuzz_args,
    run_sync,
)

# -- a matrix that crashed nowhere -------------------------------------------------------------


async def production_gate_loop(ctx: LoopContext) -> agentrt.Run:
    """The consumer's production loop, reused as is: it builds its own Gate from the store
    (as docs/own-loop.md shows), so nothing of it passes the kit's probes."""
    scenario = ts.direct_charge_approve()
    gate = agentrt.Gate(
        ctx.store, scenario.policy, tools=ctx.driver.tools, lease_ttl=scenario.lease_ttl
    )
    if ctx.resuming:
        session, _ = await gate.attach(ctx.run_id)
    else:
        session = await gate.begin(ctx.goal, ctx.limits, run_id=ctx.run_id)
    while not session.done:
        step = await session.step()
        if step is None:
            break
        decision = await ctx.agent.decide(session.input())
        verdict = await step.propose(decision)
        if verdict.outcome == agentrt.VerdictOutcome.ALLOWED:
            await step.execute()
    await session.close()
    return session.run


def own_gate_scenario() -> Scenario:
    return dataclasses.replace(ts.direct_charge_approve(), loop=production_gate_loop)


def test_a_matrix_that_passed_no_crash_point_fails_saying_nothing_was_crashed() -> None:
    """A consumer's loop builds its own Gate without the kit's probes: the scenario runs
    (charging once) but passes no crash point, so the matrix has no case. It does not
    report "all invariants hold": `assert_ok` fails with `nothing_crashed`, saying why."""
    matrix = crash_matrix_sync(own_gate_scenario, "harness")
    assert matrix.clean.run.status == agentrt.RunStatus.COMPLETED
    assert len(matrix.clean.calls("charge")) == 1
    assert matrix.cases == ()
    assert not matrix.ok
    assert [v.rule for _, v in matrix.violations] == ["nothing_crashed"]
    assert "passed no crash point" in str(matrix)
    assert "all invariants hold" not in str(matrix)
    with pytest.raises(InvariantError, match="nothing_crashed"):
        matrix.assert_ok()


def test_a_matrix_whose_selection_left_no_case_fails_saying_nothing_was_crashed() -> None:
    """`select` that keeps no case: the matrix proves nothing, and says so."""
    matrix = crash_matrix_sync(
        "support.scenarios:small", "harness", recovery=False, select=lambda crashes: False
    )
    assert [v.rule for _, v in matrix.violations] == ["nothing_crashed"]
    assert "no crash point was selected" in str(matrix)


# -- the pytest plugin's marker ----------------------------------------------------------------


def _pytest(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_consumer.py").write_text(textwrap.dedent(source))
    env = dict(os.environ)
    tests_dir = str(Path(__file__).parent)
    env["PYTHONPATH"] = os.pathsep.join([tests_dir, env.get("PYTHONPATH", "")])
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "agentrt.testkit.plugin",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            *args,
            str(tmp_path / "test_consumer.py"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )


def test_the_crash_matrix_marker_takes_its_mode_by_position(tmp_path: Path) -> None:
    """`@pytest.mark.crash_matrix("pkg:make", "process")`, as its registered signature
    reads: the cases run in process mode, with real SIGKILLs."""
    done = _pytest(
        tmp_path,
        """
        import pytest

        @pytest.mark.crash_matrix("support.scenarios:small", "process", inside_tx=False,
                                  recovery=False)
        def test_small_with_real_sigkills(crash_case):
            result = crash_case.run()
            assert result.mode == "process", f"ran in {result.mode} mode"
        """,
        "-q",
        "-k",
        "no-crash",
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "1 passed" in out, out


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ('"support.scenarios:small", inside_tx="no"', "inside_tx must be True or False"),
        ('"support.scenarios:small", "harness", mode="process"', "both by position and by name"),
        ('"support.scenarios:small", "harness", True, True, 1, 2', "at most 5 positional"),
    ],
    ids=["a-string-flag", "mode-twice", "too-many"],
)
def test_a_crash_matrix_marker_argument_of_the_wrong_kind_is_a_usage_error(
    tmp_path: Path, arguments: str, said: str
) -> None:
    """A flag given as a string ("no" would read as True), an argument given twice or one
    too many: collection stops with a usage error naming it; nothing runs."""
    done = _pytest(
        tmp_path,
        f"""
        import pytest

        @pytest.mark.crash_matrix({arguments})
        def test_it(crash_case):
            crash_case.run()
        """,
        "-q",
    )
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "UsageError" in out and said in out, out


# -- a side effect carried out again around a "go on" ------------------------------------------


def continue_without_looking() -> Scenario:
    """The seed's charge, allowed by policy, with an agent that decides from the record
    (charge until a charge is done) and a run-level reconciliation that says "go on"
    without looking the charge up."""
    return dataclasses.replace(
        ts.direct_charge_approve(),
        agent=ts.OrderAgent(),
        reconcile=lambda view: agentrt.Reconciliation.continue_run(),
    )


def test_a_charge_that_took_effect_and_is_charged_again_after_a_crash_is_a_violation(
    tmp_path: Path,
) -> None:
    """The charge returned in process 1, which died before recording it; the consumer's
    reconciliation says continue without looking, and the agent asks for the identical
    charge in a new step: the card is charged twice where the run without a crash charges
    it once. The kit reports `repeated_side_effect`."""
    result = run_sync(
        continue_without_looking,
        Crash(1, Point.AFTER_TOOL_EFFECT),
        db_path=tmp_path / "twice.db",
        check_invariants=False,
    )
    charges = result.calls("charge")
    assert [(c.process, c.step_index, c.returned) for c in charges] == [
        (1, 1, True),
        (2, 2, True),
    ]
    assert charges[0].args == charges[1].args == ts.CHARGE
    assert result.approvals == ()  # nobody approved the second charge
    [repeated] = [v for v in result.violations if v.rule == "repeated_side_effect"]
    assert "charge returned on step 1 in process 1" in repeated.detail
    assert "on 2 step(s), on 1 without a crash" in repeated.detail


def charge_twice_then_go_on() -> Scenario:
    """A script that charges the same amount twice on purpose, with the same "go on"."""
    return dataclasses.replace(
        ts.direct_charge_approve(),
        agent=ScriptedAgent(
            [
                Decision.tool_call("charge", ts.CHARGE),
                Decision.tool_call("charge", ts.CHARGE),
                Decision.complete(),
            ]
        ),
        reconcile=lambda view: agentrt.Reconciliation.continue_run(),
    )


def test_a_request_the_scenario_repeats_without_a_crash_is_no_violation_after_one(
    tmp_path: Path,
) -> None:
    """The same identical charge twice, as the scenario does without a crash: a crash after
    the first one's effect, "go on", and the second charge is the script's own second
    entry, not a repeat. No violation: the run without a crash charges twice too."""
    result = run_sync(
        charge_twice_then_go_on,
        Crash(0, Point.AFTER_TOOL_EFFECT),
        db_path=tmp_path / "planned.db",
    )
    assert [(c.process, c.step_index) for c in result.calls("charge")] == [(1, 0), (2, 1)]
    assert result.ok


def test_a_charge_repeated_around_a_go_on_fails_the_matrix_cell_it_happens_in() -> None:
    """The matrix compares each case with its own clean run: the cell where the charge
    took effect before the crash is red, the cell where it had not is not."""
    matrix = crash_matrix_sync(
        continue_without_looking,
        "harness",
        recovery=False,
        select=lambda crashes: (
            crashes[-1].step == 1
            and crashes[-1].at in (Point.AFTER_TOOL_STARTED, Point.AFTER_TOOL_EFFECT)
            and not crashes[-1].inside_tx
        ),
    )
    rules = {case.crashes[-1].at: {v.rule for v in case.violations} for case in matrix.cases}
    assert "repeated_side_effect" in rules[Point.AFTER_TOOL_EFFECT]
    assert "repeated_side_effect" not in rules[Point.AFTER_TOOL_STARTED]


# -- a tool re-run by hand ---------------------------------------------------------------------


def _finishes_interrupted_charges_by_hand() -> Scenario:
    scenario = ts.direct_charge_reject()
    charge = next(t for t in scenario.tools if t.spec.name == "charge")
    done_by_hand: list[str] = []

    async def loop(ctx: LoopContext) -> agentrt.Run:
        if ctx.resuming and not done_by_hand:
            # A home-grown recovery: a charge left executing by a dead process is finished
            # by calling the charge tool (the object this factory built) again, by hand.
            last = ctx.store.list_steps(ctx.run_id)[-1]
            if last.status == agentrt.StepStatus.EXECUTING and last.decision is not None:
                done_by_hand.append(last.id)
                await charge.call(  # type: ignore[misc]
                    agentrt.ToolCall(ctx.run_id, last.id, last.decision.args, lease_epoch=0)
                )
        if ctx.resuming:
            return await ctx.driver.resume(ctx.run_id)
        return await ctx.driver.start(ctx.goal, ctx.limits, run_id=ctx.run_id)

    scenario.loop = loop
    return scenario


def test_a_tool_the_consumers_loop_reruns_by_hand_after_a_crash_is_seen_by_the_kit(
    tmp_path: Path,
) -> None:
    """The charge took effect in process 1, which died; on restart the consumer's loop
    re-runs the interrupted charge itself, calling the tool object its factory built: the
    kit watches that object, so it sees two charges for one recorded start and reports
    `more_invocations_than_starts`."""
    result = run_sync(
        _finishes_interrupted_charges_by_hand,
        Crash(1, Point.AFTER_TOOL_EFFECT),
        db_path=tmp_path / "by-hand.db",
        check_invariants=False,
    )
    assert result.run.status == agentrt.RunStatus.CANCELLED  # the operator said no re-run
    assert result.event_types(step=1).count("step.tool_started") == 1
    assert [(c.process, c.step_index) for c in result.calls("charge")] == [(1, 1), (2, 1)]
    assert "more_invocations_than_starts" in {v.rule for v in result.violations}


# -- what hangs --------------------------------------------------------------------------------


class SlowFirstDecision:
    """An agent whose first decision blocks its thread (a synchronous HTTP client to its
    model, say) for longer than the scenario's timeout."""

    def __init__(self) -> None:
        self.asked = 0

    def decide(self, input: StepInput) -> Decision:
        self.asked += 1
        if self.asked == 1:
            time.sleep(4)
        return Decision.complete({"ok": True})


def slow_agent() -> Scenario:
    return dataclasses.replace(ts.small(), agent=SlowFirstDecision())


@pytest.mark.timeout(60)
def test_the_harness_timeout_bounds_a_process_whose_agent_blocks_its_event_loop(
    tmp_path: Path,
) -> None:
    """`run(timeout=1)` in the harness, with an agent that blocks the event loop for 4 s:
    the process is reported as not finished within 1 s, as process mode reports a child
    that hangs, without waiting for the agent."""
    began = time.monotonic()
    result = run_sync(slow_agent, db_path=tmp_path / "slow.db", timeout=1, check_invariants=False)
    elapsed = time.monotonic() - began
    assert any("process 1 did not finish within 1s" in e for e in result.errors), result.errors
    assert elapsed < 4


PIDS = "AGENTRT_TESTKIT_HELPER_PIDS"


def _allow_all() -> agentrt.SideEffectPolicy:
    allow = agentrt.PolicyDecision.allow()
    return agentrt.SideEffectPolicy(
        {SideEffect.READ_ONLY: allow, SideEffect.REMOTE_MUTATION: allow}, policy_id="allow-all"
    )


class StartHelper:
    """Starts a helper process that outlives the call (a local daemon, an ssh agent, a
    preview server), as plenty of real tools do; its stdio is inherited, as by default."""

    spec = ToolSpec(
        name="start_helper",
        description="start a background helper",
        input_schema={"type": "object", "additionalProperties": False},
        side_effect=SideEffect.REMOTE_MUTATION,
        timeout=timedelta(seconds=10),
    )

    def call(self, call: ToolCall) -> ToolResult:
        helper = subprocess.Popen(["sleep", "30"])
        with open(os.environ[PIDS], "a") as pids:
            pids.write(f"{helper.pid}\n")
        return ToolResult({"helper": "started"}, "started")


def starts_a_helper() -> Scenario:
    return Scenario(
        tools=[StartHelper()],
        policy=_allow_all(),
        agent=ScriptedAgent([Decision.tool_call("start_helper", {}), Decision.complete()]),
        operator=always(Verdict.APPROVE),
        lease_ttl=timedelta(seconds=30),
        name="starts_a_helper",
    )


@pytest.fixture
def helper_pids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "helpers.txt"
    path.touch()
    monkeypatch.setenv(PIDS, str(path))
    yield path
    for line in path.read_text().split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line), signal.SIGKILL)


@pytest.mark.timeout(120)
def test_a_child_that_exited_is_judged_by_its_exit_though_a_helper_holds_its_streams(
    tmp_path: Path, helper_pids: Path
) -> None:
    """A tool starts a background helper that inherits the child's stdout and stderr; the
    child completes the run and exits 0. Process mode judges the child by its exit: the
    run passes at once, not after the timeout with "did not finish"."""
    began = time.monotonic()
    result = run_sync(
        f"{__name__}:starts_a_helper",
        mode="process",
        db_path=tmp_path / "h.db",
        timeout=8,
        check_invariants=False,
    )
    assert result.run.status == agentrt.RunStatus.COMPLETED
    assert [v.rule for v in result.violations] == [], result.violations
    assert result.exit_codes == (0,)
    assert time.monotonic() - began < 8


# -- the consumer's files and databases --------------------------------------------------------


def test_a_matrix_removes_only_the_files_it_made_in_a_folder_it_was_given(tmp_path: Path) -> None:
    """A consumer points the matrix at a folder of theirs (`directory="build"`, say) that
    already holds their own files: when every case holds, the kit removes the cases'
    databases and journals it wrote there, and nothing else."""
    folder = tmp_path / "build"
    folder.mkdir()
    (folder / "notes.txt").write_text("the consumer's own file")
    matrix = crash_matrix_sync(
        "support.scenarios:small",
        "harness",
        directory=folder,
        recovery=False,
        select=lambda crashes: crashes == (Crash(0, Point.AFTER_TOOL_STARTED),),
    )
    matrix.assert_ok()
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    assert (folder / "notes.txt").read_text() == "the consumer's own file"


def test_a_matrix_removes_a_folder_it_had_to_make(tmp_path: Path) -> None:
    """A folder named that does not exist yet is the kit's: made, and removed whole."""
    folder = tmp_path / "cases"
    crash_matrix_sync(
        "support.scenarios:small",
        "harness",
        directory=folder,
        recovery=False,
        select=lambda crashes: crashes == (Crash(0, Point.AFTER_TOOL_STARTED),),
    ).assert_ok()
    assert not folder.exists()


def test_an_in_memory_database_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`db_path=":memory:"` (which `open_store` takes) would give every process its own
    empty database: it is refused up front with a ConfigError, leaving nothing behind."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(agentrt.ConfigError, match="memory"):
        run_sync(ts.direct_charge_approve, Crash(1, Point.AFTER_TOOL_EFFECT), db_path=":memory:")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_runs_whose_ids_share_a_prefix_keep_a_journal_each(tmp_path: Path) -> None:
    """Two runs on one database whose ids share their first 16 characters: each journal is
    named by its whole run id, so neither overwrites the other."""
    db = tmp_path / "shared.db"
    first, second = "0" * 16 + "1" * 16, "0" * 16 + "2" * 16
    run_sync("support.scenarios:small", db_path=db, run_id=first)
    run_sync("support.scenarios:small", db_path=db, run_id=second)
    journals = sorted(p.name for p in tmp_path.glob("shared.db.testkit-*.jsonl"))
    assert journals == [f"shared.db.testkit-{first}.jsonl", f"shared.db.testkit-{second}.jsonl"]


# -- arguments -------------------------------------------------------------------------------


def _one_integer(**bounds: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"n": {"type": "integer", **bounds}},
        "required": ["n"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    "schema",
    [
        # An id-sized exact range: the only valid value is 2**53 + 1.
        _one_integer(minimum=2**53 + 1, maximum=2**53 + 1),
        # A bound too large for a float: the runtime accepts the schema.
        _one_integer(minimum=0, maximum=10**400),
        # Exclusive bounds past 2**53, and a fractional exclusive bound.
        _one_integer(exclusiveMinimum=2**60, exclusiveMaximum=2**60 + 2),
        _one_integer(exclusiveMinimum=5.5, maximum=6),
    ],
    ids=["bound-past-2**53", "bound-past-float-range", "exclusive-past-2**53", "fractional"],
)
def test_fuzzed_integers_respect_bounds_beyond_what_a_float_holds(schema: dict[str, Any]) -> None:
    """A tool's schema bounds an integer beyond what a float holds exactly (an id, an
    amount in micros): the generator works in exact integers, so every value built to be
    valid is valid, and near misses are labelled by the runtime's check."""
    cases = fuzz_args(schema, n=20, seed=0, invalid_ratio=0.0)
    assert len(cases) == 20
    assert all(c.valid for c in cases), [(c.args, c.errors) for c in cases if not c.valid][:3]
    for case in fuzz_args(schema, n=20, seed=1, invalid_ratio=1.0):
        assert case.valid == (not case.errors)


def test_an_operator_answer_that_is_no_verdict_is_a_config_error() -> None:
    """`always("maybe")`, `by_kind({...: "yes"})`: refused when the operator is made, with
    the verdicts there are."""
    with pytest.raises(agentrt.ConfigError, match="'maybe' is not a verdict"):
        always("maybe")
    with pytest.raises(agentrt.ConfigError, match="'yes' is not a verdict"):
        by_kind({"remote_mutation": "yes"})
    with pytest.raises(agentrt.ConfigError, match="'later' is not a verdict"):
        by_kind({}, default="later")


def test_a_matrix_given_workers_of_the_wrong_kind_is_a_config_error() -> None:
    with pytest.raises(agentrt.ConfigError, match="workers must be an int"):
        crash_matrix_sync("support.scenarios:small", workers="4")  # type: ignore[arg-type]
