"""agentrt.testkit in its in-process harness: the seed's crash claims, the invariants, the
matrix, the policy conformance table and argument fuzzing.

Process mode (real children killed with SIGKILL) is in test_testkit_process.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentrt
import support.scenarios as ts
from agentrt import (
    ApprovalStatus,
    Decision,
    PolicyDecision,
    Reconciliation,
    RunStatus,
    SideEffect,
    StepStatus,
    TerminalReason,
    ToolSpec,
)
from agentrt import _commit_plan as plan_mod
from agentrt._records import ChainBreak, Lease, VerifyReport
from agentrt.scripted import ScriptedAgent
from agentrt.testkit import (
    Crash,
    CrashMatrix,
    InvariantError,
    LoopContext,
    Point,
    PolicyCase,
    Result,
    Scenario,
    SharedScenarioWarning,
    Verdict,
    always,
    check,
    check_policy,
    crash_matrix_sync,
    fuzz_args,
    run_sync,
)
from agentrt.testkit._matrix import after_crash
from support.database import BRIEF_LEASE, brief, make_database, on_postgres

INTERRUPTED = "interrupted_side_effect"


def play(scenario: Any, *crashes: Crash, db: Path | str, **kw: Any) -> Result:
    return run_sync(scenario, *crashes, db_path=db, **kw)


def rules(result: Result) -> set[str]:
    return {v.rule for v in check(result)}


def briefly(factory: Callable[[], Scenario], database: str) -> Callable[[], Scenario]:
    """`factory` for a harness run on `database`: on PostgreSQL its scenario with a lease
    of `BRIEF_LEASE` (what the harness waits out in real time after a crash there, the
    server's clock being out of its reach: decision 0097), on SQLite `factory` itself."""
    if not on_postgres(database):
        return factory

    def brief_factory() -> Scenario:
        scenario = factory()
        scenario.lease_ttl = BRIEF_LEASE
        return scenario

    return brief_factory


# -- the seed's claims -----------------------------------------------------------------------


class TestRun:
    @pytest.mark.parametrize("point", [Point.AFTER_TOOL_STARTED, Point.AFTER_TOOL_EFFECT])
    def test_side_effect_lost_to_a_crash_never_runs_again_when_rejected(
        self, tmp_path: Path, point: Point
    ) -> None:
        """REJECT: the interrupted charge is never called again and the run is cancelled."""
        result = play(ts.direct_charge_reject, Crash(1, point), db=tmp_path / "r.db")
        before = 1 if point == Point.AFTER_TOOL_EFFECT else 0  # did the dead process call it?
        charges = result.calls("charge")
        assert len(charges) == before
        assert all(c.process == 1 for c in charges)
        assert (result.run.status, result.run.reason) == (
            RunStatus.CANCELLED,
            TerminalReason.APPROVAL_REJECTED,
        )
        [approval] = result.approvals
        assert (approval.kind, approval.status) == (INTERRUPTED, ApprovalStatus.REJECTED)
        assert result.event_types(step=1).count("step.tool_started") == 1

    @pytest.mark.parametrize("point", [Point.AFTER_TOOL_STARTED, Point.AFTER_TOOL_EFFECT])
    def test_side_effect_lost_to_a_crash_runs_again_only_when_approved(
        self, tmp_path: Path, point: Point
    ) -> None:
        """APPROVE: the same request runs once more, on the same step, under that approval."""
        result = play(ts.direct_charge_approve, Crash(1, point), db=tmp_path / "a.db")
        before = 1 if point == Point.AFTER_TOOL_EFFECT else 0
        charges = result.calls("charge")
        assert len(charges) == before + 1
        again = charges[-1]
        assert (again.process, again.step_index, again.args) == (2, 1, ts.CHARGE)
        assert result.run.status == RunStatus.COMPLETED
        [approval] = result.approvals
        assert (approval.kind, approval.status) == (INTERRUPTED, ApprovalStatus.APPROVED)
        starts = [e for e in result.events if e.type == "step.tool_started"]
        assert starts[-1].step_id == result.step(1).id
        assert starts[-1].payload["approval_id"] == approval.id
        # The agent was never asked to decide step 1 again: the runtime re-ran the request.
        assert [(a.process, a.step_index) for a in result.agent_inputs] == [(1, 0), (1, 1), (2, 2)]

    def test_crash_after_tool_started_and_after_its_effect_leave_the_same_record(
        self, database: str, tmp_path: Path
    ) -> None:
        """The seed: the record cannot tell a crash before the call from one after it."""
        seen = {}

        def leave() -> Scenario:
            return ts.direct_charge(Verdict.LEAVE)

        (tmp_path / "second").mkdir()
        stack = ExitStack()
        second = make_database(
            "postgres" if on_postgres(database) else "sqlite",
            tmp_path / "second",
            stack,
            "the seed's record of a crash after the effect",
        )
        with stack:
            for point, db in (
                (Point.AFTER_TOOL_STARTED, database),
                (Point.AFTER_TOOL_EFFECT, second),
            ):
                r = play(briefly(leave, database), Crash(1, point), db=db)
                step, [approval] = r.step(1), r.approvals
                seen[point] = (
                    [e.type for e in r.events],
                    step.status,
                    step.observation,
                    approval.kind,
                    approval.presentation,
                )
        assert seen[Point.AFTER_TOOL_STARTED] == seen[Point.AFTER_TOOL_EFFECT]

    def test_approved_request_survives_a_crash_after_resume(self, tmp_path: Path) -> None:
        """Crash right after the resume that starts an approved call: it executes at most once."""
        result = play(ts.checkout, Crash(1, Point.AFTER_RESUMED), db=tmp_path / "c.db")
        assert result.run.status == RunStatus.COMPLETED
        assert len(result.calls("charge")) == 1
        granted, interrupted = result.approvals
        assert (granted.kind, granted.status) == ("remote_mutation", ApprovalStatus.APPROVED)
        assert (interrupted.kind, interrupted.status) == (INTERRUPTED, ApprovalStatus.APPROVED)
        starts = [e.payload for e in result.events if e.type == "step.tool_started"]
        # The first grant was spent by the start the crash interrupted; the call that
        # ran carries the operator's answer to the interruption, not the old grant.
        assert [s.get("approval_id") for s in starts[-2:]] == [granted.id, interrupted.id]

    def test_approved_request_survives_a_crash_after_resume_and_rejection_stops_it(
        self, tmp_path: Path
    ) -> None:
        result = play(
            ts.checkout_reject_interrupted, Crash(1, Point.AFTER_RESUMED), db=tmp_path / "c.db"
        )
        assert result.calls("charge") == []
        assert result.run.reason == TerminalReason.APPROVAL_REJECTED

    def test_crash_after_takeover_still_waits_for_the_operator(self, tmp_path: Path) -> None:
        """A resume that itself died after taking over still pauses on the interrupted call."""
        result = play(
            lambda: ts.direct_charge(Verdict.LEAVE),
            Crash(1, Point.AFTER_TOOL_STARTED),
            Crash(1, Point.AFTER_INTERRUPTED),
            db=tmp_path / "t.db",
        )
        assert [r.process for r in result.crashes_reached] == [1, 2]
        assert result.run.status == RunStatus.WAITING_FOR_APPROVAL
        [approval] = result.approvals
        assert (approval.kind, approval.status) == (INTERRUPTED, ApprovalStatus.PENDING)
        assert result.step(1).status == StepStatus.AWAITING_APPROVAL
        assert result.calls("charge") == []
        assert result.event_types().count("lease.taken_over") == 2

    def test_crash_after_takeover_then_approval_runs_the_call_once(self, tmp_path: Path) -> None:
        result = play(
            ts.direct_charge_approve,
            Crash(1, Point.AFTER_TOOL_STARTED),
            Crash(1, Point.AFTER_INTERRUPTED),
            db=tmp_path / "t.db",
        )
        assert result.run.status == RunStatus.COMPLETED
        assert [(c.process, c.step_index) for c in result.calls("charge")] == [(3, 1)]

    @pytest.mark.parametrize("point", [Point.AFTER_TOOL_STARTED, Point.AFTER_TOOL_EFFECT])
    def test_interrupted_read_only_step_continues(self, tmp_path: Path, point: Point) -> None:
        """An interrupted read is not re-run by the runtime and needs nobody: the run goes on."""
        result = play(ts.checkout, Crash(0, point), db=tmp_path / "r.db")
        assert result.run.status == RunStatus.COMPLETED
        assert result.step(0).status == StepStatus.INTERRUPTED
        assert [a.kind for a in result.approvals] == ["remote_mutation"]
        resumed = [e.payload for e in result.events if e.type == "run.resumed"]
        assert {"after": "interruption"} in resumed
        assert result.event_types(step=0).count("step.tool_started") == 1
        # The agent saw the interrupted step and chose to look again, in a new step.
        first_after = next(a for a in result.agent_inputs if a.process == 2)
        assert (0, "interrupted") in first_after.steps
        # The dead process called the lookup only if it crashed after the call.
        expected = [1] if point == Point.AFTER_TOOL_STARTED else [0, 1]
        assert [c.step_index for c in result.calls("lookup")] == expected

    def test_interrupted_deciding_step_continues(self, database: str) -> None:
        # A step is durable `deciding` once a model request's dispatch committed its
        # claim (decision 0088); a crash during that request interrupts it so.
        result = play(
            briefly(ts.with_model, database), Crash(1, Point.DURING_MODEL_REQUEST), db=database
        )
        assert result.step(1).status == StepStatus.INTERRUPTED
        assert result.step(1).observation.content == {"previous_status": "deciding"}  # type: ignore[union-attr]
        assert result.approvals == ()
        # Nothing re-ran step 1; the script offered the charge again, in step 2.
        assert [c.step_index for c in result.calls("charge")] == [2]

    def test_a_crash_after_a_decision_falls_where_the_steps_commit_does(
        self, tmp_path: Path
    ) -> None:
        # Decision 0088: the claim and the decision commit with the step's next commit,
        # so `step.decided` after its commit is the charge's `step.tool_started`: the
        # charge may have run, and a person decides; inside that transaction, nothing
        # of the step is durable and the agent is asked for step 1 again.
        after = play(ts.direct_charge_approve, Crash(1, Point.AFTER_DECIDED), db=tmp_path / "a.db")
        assert [a.kind for a in after.approvals] == [INTERRUPTED]
        assert [(c.process, c.step_index) for c in after.calls("charge")] == [(2, 1)]
        assert after.run.status == RunStatus.COMPLETED
        inside = play(
            ts.direct_charge_approve,
            Crash(1, Point.AFTER_DECIDED, inside_tx=True),
            db=tmp_path / "i.db",
        )
        assert inside.approvals == ()
        assert [(c.process, c.step_index) for c in inside.calls("charge")] == [(2, 1)]
        assert "step.interrupted" not in [e.type for e in inside.events]
        assert inside.run.status == RunStatus.COMPLETED

    def test_resume_is_refused_until_the_dead_owners_short_lease_expires(
        self, tmp_path: Path
    ) -> None:
        result = play(ts.checkout, Crash(0, Point.AFTER_DECIDED), db=tmp_path / "l.db")
        assert result.refusals >= 1
        [taken] = [e.payload for e in result.events if e.type == "lease.taken_over"]
        assert taken["previous_owner"].startswith("testkit-p1/")
        assert taken["owner"].startswith("testkit-p2/")
        assert result.lease.owner == ""

    def test_a_reconciler_decides_instead_of_the_operator(self, tmp_path: Path) -> None:
        seen: list[str] = []

        def reconcile(view: agentrt.RunView) -> Reconciliation:
            seen.append(view.steps[-1].status)
            return Reconciliation.completed({"recovered": "charge found by its order id"})

        def scenario() -> Scenario:
            return dataclasses.replace(ts.direct_charge(Verdict.REJECT), reconcile=reconcile)

        result = play(scenario, Crash(1, Point.AFTER_TOOL_EFFECT), db=tmp_path / "rec.db")
        assert seen == ["interrupted"]
        assert (result.run.status, result.run.result) == (
            RunStatus.COMPLETED,
            {"recovered": "charge found by its order id"},
        )
        assert result.approvals == ()
        assert len(result.calls("charge")) == 1


# -- the harness itself --------------------------------------------------------------------------


class TestHarness:
    def test_points_are_the_probe_names_of_the_step_machine(self) -> None:
        names = {getattr(plan_mod, n) for n in dir(plan_mod) if n.startswith("POINT_")}
        assert names == {p.value for p in Point}

    @pytest.mark.parametrize(
        ("args", "match"),
        [
            ((-1, Point.AFTER_DECIDED), "step index"),
            ((0, "step.nowhere"), "not a crash point"),
            ((0, Point.AFTER_ALLOWED, True), "no transaction"),
            ((0, Point.AFTER_TOOL_EFFECT, True), "no transaction"),
            ((0, Point.AFTER_ATTACH_ALLOWED, True), "no transaction"),
        ],
    )
    def test_a_crash_names_a_real_point_and_step(self, args: tuple[Any, ...], match: str) -> None:
        with pytest.raises(agentrt.ConfigError, match=match):
            Crash(*args)

    def test_a_crash_that_is_never_reached_is_a_violation(self, tmp_path: Path) -> None:
        with pytest.raises(InvariantError) as info:
            play(ts.checkout, Crash(9, Point.AFTER_DECIDED), db=tmp_path / "n.db")
        assert "crash_not_reached" in str(info.value)
        assert "step.decided@9 was never reached" in str(info.value)
        assert isinstance(info.value, AssertionError)

    def test_crashes_fire_in_order_so_a_point_can_crash_twice(self, tmp_path: Path) -> None:
        result = play(
            ts.checkout,
            Crash(1, Point.AFTER_PAUSED),  # the pause for the remote_mutation approval
            Crash(1, Point.AFTER_RESUMED),  # right after the approved call started
            Crash(1, Point.AFTER_PAUSED),  # the pause on the interrupted call
            db=tmp_path / "o.db",
        )
        assert [r.process for r in result.crashes_reached] == [1, 2, 3]
        assert result.processes == 4
        assert [(a.kind, a.status) for a in result.approvals] == [
            ("remote_mutation", ApprovalStatus.APPROVED),
            (INTERRUPTED, ApprovalStatus.APPROVED),
        ]
        assert [c.process for c in result.calls("charge")] == [4]

    def test_no_operator_leaves_the_run_waiting_and_that_is_no_violation(
        self, tmp_path: Path
    ) -> None:
        result = play(ts.checkout_leave, db=tmp_path / "w.db")
        assert result.run.status == RunStatus.WAITING_FOR_APPROVAL
        assert [a.verdict for a in result.operator_answers] == [Verdict.LEAVE]
        assert result.violations == ()

    def test_a_parked_process_writes_nothing_even_when_its_task_is_cancelled(
        self, tmp_path: Path
    ) -> None:
        """The task parked at the crash still exists; cancelling it runs the driver's
        cancellation handlers (record the tool, release the lease), which must find the
        store closed: the harness checks the record did not change."""
        result = play(
            ts.direct_charge_approve, Crash(1, Point.AFTER_TOOL_EFFECT), db=tmp_path / "p.db"
        )
        assert result.errors == ()
        # Process 1's tool returned, yet no step.tool_finished of process 1 exists: the
        # first finish on step 1 is the re-run's, after the takeover.
        types = result.event_types(step=1)
        assert types.index("step.interrupted") < types.index("step.tool_finished")
        assert types.count("step.tool_finished") == 1

    def test_the_harness_notices_a_crashed_process_that_writes(self, tmp_path: Path) -> None:
        """A loop that, unlike the Driver, writes from its failure handler is caught."""
        db = tmp_path / "w.db"

        async def careless(ctx: LoopContext) -> agentrt.Run:
            try:
                if ctx.resuming:
                    return await ctx.driver.resume(ctx.run_id)
                return await ctx.driver.start(ctx.goal, ctx.limits, run_id=ctx.run_id)
            except BaseException:
                # Writes on a connection of its own, which the kit cannot close.
                with sqlite3.connect(db) as own:
                    own.execute("UPDATE runs SET lease_owner = 'a corpse'")
                raise

        def scenario() -> Scenario:
            return dataclasses.replace(ts.direct_charge_reject(), loop=careless)

        result = play(scenario, Crash(0, Point.AFTER_TOOL_FINISHED), db=db, check_invariants=False)
        assert "a crashed process wrote to the database after its crash" in result.errors
        assert {v.rule for v in result.violations} == {"process_error", "lease_held"}

    def test_a_consumer_loop_drives_each_process_and_still_crashes_on_time(
        self, tmp_path: Path
    ) -> None:
        calls: list[bool] = []

        async def mine(ctx: LoopContext) -> agentrt.Run:
            calls.append(ctx.resuming)
            if ctx.resuming:
                return await ctx.driver.resume(ctx.run_id)
            return await ctx.driver.start(ctx.goal, ctx.limits, run_id=ctx.run_id)

        def scenario() -> Scenario:
            return dataclasses.replace(ts.checkout(), loop=mine)

        result = play(scenario, Crash(0, Point.AFTER_TOOL_FINISHED), db=tmp_path / "l.db")
        assert (
            calls[0] is False
            and all(calls[1:])
            and len(calls) == 1 + result.resumes + result.refusals
        )
        assert result.run.status == RunStatus.COMPLETED

    @pytest.mark.parametrize("source", ["support.scenarios:remembering", ts.remembering])
    def test_a_factory_gives_every_simulated_process_a_fresh_scenario(
        self, tmp_path: Path, source: Any
    ) -> None:
        """Nothing held in memory survives a simulated crash, as in process mode: the
        agent that asked for the charge before dying is a new agent after it, asks again,
        and the charge runs (once, at the step the crash left unclaimed)."""
        # Inside the step's one commit: nothing of step 0 is durable (decision 0088).
        crash = Crash(0, Point.AFTER_DECIDED, inside_tx=True)
        result = play(source, crash, db=tmp_path / "m.db")
        assert result.step(0).status == StepStatus.DONE
        assert [(c.process, c.step_index) for c in result.calls("charge")] == [(2, 0)]
        assert [(a.process, a.step_index) for a in result.agent_inputs] == [(1, 0), (2, 0), (2, 1)]
        assert (result.run.status, result.run.result) == (RunStatus.COMPLETED, {"receipt": "r-17"})

    def test_a_scenario_instance_is_shared_by_the_simulated_processes_and_warns(
        self, tmp_path: Path
    ) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            play(ts.remembering(), db=tmp_path / "quiet.db")  # no crash: nothing to warn of
        with pytest.warns(SharedScenarioWarning, match="shared by every simulated process"):
            result = play(
                ts.remembering(),
                Crash(0, Point.AFTER_DECIDED, inside_tx=True),
                db=tmp_path / "i.db",
            )
        # The documented difference: its agent outlived the crash and remembers asking.
        assert result.calls("charge") == []
        assert result.run.status == RunStatus.COMPLETED

    def test_a_scenario_given_by_reference_is_built_from_its_factory(self, tmp_path: Path) -> None:
        result = play("support.scenarios:checkout", db=tmp_path / "f.db")
        assert result.scenario == "checkout"
        assert result.run.id == "c" + "1".rjust(31, "0")  # the scenario's own id factory

    def test_invariants_break_when_a_tool_runs_without_a_recorded_start(
        self, tmp_path: Path
    ) -> None:
        """A loop calling a tool behind the runtime's back: seen invocations exceed starts."""
        scenario = ts.direct_charge_approve()

        async def sneaky(ctx: LoopContext) -> agentrt.Run:
            run = await ctx.driver.start(ctx.goal, ctx.limits, run_id=ctx.run_id)
            charge = next(t for t in ctx.driver.tools if t.spec.name == "charge")
            steps = ctx.store.list_steps(ctx.run_id)
            await charge.call(  # type: ignore[misc]
                agentrt.ToolCall(ctx.run_id, steps[1].id, ts.CHARGE, lease_epoch=1)
            )
            return run

        scenario.loop = sneaky
        result = play(scenario, db=tmp_path / "s.db", check_invariants=False)
        assert [v.rule for v in result.violations] == ["more_invocations_than_starts"]


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Result:
    """A crashed and recovered run (charge re-run after approval) that holds every rule."""
    db = tmp_path_factory.mktemp("inv") / "good.db"
    return play(ts.direct_charge_approve, Crash(1, Point.AFTER_TOOL_EFFECT), db=db)


class TestInvariants:
    """Each rule, shown to fire on a record doctored to break it (and only that rule)."""

    def test_a_recovered_run_holds_every_invariant(self, good: Result) -> None:
        assert check(good) == []

    def test_run_left_running(self, good: Result) -> None:
        run = dataclasses.replace(good.run, status=RunStatus.RUNNING)
        assert rules(dataclasses.replace(good, run=run)) == {"run_left_running"}

    def test_step_left_in_flight(self, good: Result) -> None:
        steps = (dataclasses.replace(good.steps[0], status=StepStatus.EXECUTING), *good.steps[1:])
        assert rules(dataclasses.replace(good, steps=steps)) == {"step_left_in_flight"}

    def test_awaiting_approval_only_under_a_waiting_run(self, good: Result) -> None:
        steps = (dataclasses.replace(good.steps[0], status=StepStatus.AWAITING_APPROVAL),)
        assert rules(dataclasses.replace(good, steps=steps + good.steps[1:])) == {
            "awaiting_outside_waiting"
        }

    def test_every_tool_start_is_finished_or_interrupted(self, good: Result) -> None:
        events = tuple(
            e
            for e in good.events
            if not (e.type == "step.tool_finished" and e.step_id == good.step(0).id)
        )
        assert rules(dataclasses.replace(good, events=events)) == {"tool_start_not_closed"}

    def test_a_step_runs_again_only_under_a_granted_approval(self, good: Result) -> None:
        # Forget the operator's grant: the second start of step 1 is now unapproved.
        approvals = tuple(
            dataclasses.replace(a, status=ApprovalStatus.REJECTED) for a in good.approvals
        )
        found = rules(dataclasses.replace(good, approvals=approvals))
        assert found == {"unapproved_rerun", "too_many_tool_starts"}

    def test_an_approval_is_used_by_one_tool_start(self, good: Result) -> None:
        step1 = good.step(1).id
        starts = [e for e in good.events if e.type == "step.tool_started" and e.step_id == step1]
        first = dataclasses.replace(
            starts[0], payload={**starts[0].payload, "approval_id": good.approvals[0].id}
        )
        events = tuple(first if e is starts[0] else e for e in good.events)
        assert rules(dataclasses.replace(good, events=events)) == {"approval_used_twice"}

    def test_tool_invocations_never_exceed_recorded_starts(self, good: Result) -> None:
        extra = dataclasses.replace(good.tool_calls[0], process=9)
        found = rules(dataclasses.replace(good, tool_calls=(*good.tool_calls, extra)))
        assert found == {"more_invocations_than_starts"}

    def test_no_lease_is_held_at_the_end(self, good: Result) -> None:
        lease = Lease(owner="someone/abc", expires_at=None, epoch=3)
        assert rules(dataclasses.replace(good, lease=lease)) == {"lease_held"}

    def test_the_event_chain_verifies(self, good: Result) -> None:
        chain = VerifyReport(False, 3, 3, "x", ChainBreak(2, "hash mismatch"))
        assert rules(dataclasses.replace(good, chain=chain)) == {"chain_broken"}

    def test_every_requested_crash_is_reached(self, good: Result) -> None:
        more = (*good.crashes, Crash(5, Point.AFTER_DECIDED))
        assert rules(dataclasses.replace(good, crashes=more)) == {"crash_not_reached"}

    def test_a_lost_transaction_must_leave_no_trace(self, good: Result) -> None:
        reached = (
            dataclasses.replace(good.crashes_reached[0], lost_event="ab", lost_present=True),
        )
        found = rules(dataclasses.replace(good, crashes_reached=reached))
        assert found == {"lost_transaction_visible"}

    def test_violations_are_raised_together_as_an_assertion(self, good: Result) -> None:
        bad = dataclasses.replace(
            good,
            lease=Lease(owner="x", expires_at=None, epoch=1),
            run=dataclasses.replace(good.run, status=RunStatus.RUNNING),
        )
        bad = dataclasses.replace(bad, violations=tuple(check(bad)))
        with pytest.raises(AssertionError) as info:
            bad.check()
        text = str(info.value)
        assert "2 invariant violation(s)" in text and "run_left_running" in text
        assert "lease_held" in text and str(good.db_path) in text


# -- the matrix --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkout_matrix() -> CrashMatrix:
    """The Driver's full harness matrix of `checkout` on SQLite (2.5 s of CPU), made once
    for the two tests that judge it: its own cells here, and the Gate's matrix of the same
    scenario against it (TestGateScenario). Nothing reads its cases' files."""
    return crash_matrix_sync("support.scenarios:checkout", "harness", workers=16)


class TestMatrix:
    def test_full_crash_matrix_of_a_read_a_side_effect_and_an_approval_holds_in_the_harness(
        self, checkout_matrix: CrashMatrix
    ) -> None:
        matrix = checkout_matrix
        matrix.assert_ok()
        passed = {p.key for p in matrix.clean.probes}
        assert {
            (c.crashes[0].at.value, c.crashes[0].step, c.crashes[0].inside_tx) for c in matrix.cases
        } == passed
        # Every recovery point that recovery from a first crash passes, at every step, with
        # and without a transaction, is crashed at too: the seed's "after step.interrupted".
        firsts = [c for c in matrix.cases if len(c.crashes) == 1]
        during_recovery = [c for c in matrix.cases if len(c.crashes) == 2]
        reached = [n for c in firsts if c.result for n in after_crash(c.result, inside_tx=True)]
        assert {n[-1] for n in reached} == {c.crashes[-1] for c in during_recovery}
        # Step 2 (the completion) is one commit: a crash at it leaves nothing to recover
        # (inside it) or a finished run (after it), so no recovery runs at step 2.
        assert {(c.crashes[-1].at, c.crashes[-1].step) for c in during_recovery} == {
            (Point.AFTER_INTERRUPTED, 0),
            (Point.AFTER_INTERRUPTED, 1),
            (Point.AFTER_RESUMED, 0),
            (Point.AFTER_RESUMED, 1),
            (Point.AFTER_PAUSED, 1),
        }
        # Each point of each distinct recovery once: far fewer cases than every pair. (20:
        # a takeover with nothing in doubt commits with `run.resumed`, decision 0152, so the
        # recovery after a settled step passes its two points in one commit, in its own
        # order: a recovery of its own.)
        assert len(during_recovery) == 20 < len(reached)
        # The seed's crash after a takeover, during the recovery of an approved charge.
        case = matrix.case(Crash(1, Point.AFTER_RESUMED), Crash(1, Point.AFTER_INTERRUPTED))
        assert case.result is not None
        assert [a.kind for a in case.result.approvals] == ["remote_mutation", INTERRUPTED]
        assert len(case.result.calls("charge")) == 1
        # The points the scenario is about are all in it, inside transactions too.
        for crash in (
            Crash(0, Point.AFTER_TOOL_STARTED),
            Crash(0, Point.AFTER_TOOL_EFFECT),
            Crash(1, Point.AFTER_PAUSED),
            Crash(1, Point.AFTER_RESUMED, inside_tx=True),
            Crash(1, Point.AFTER_TOOL_EFFECT),
            Crash(2, Point.AFTER_DECIDED, inside_tx=True),
        ):
            case = matrix.case(crash)
            assert case.result is not None and case.result.crashes_reached
        assert all(c.outcome == "COMPLETED goal_completed" for c in matrix.cases)

    @pytest.mark.slow
    def test_the_matrix_two_crashes_deep_reaches_recovery_points_and_holds(self) -> None:
        matrix = crash_matrix_sync(
            "support.scenarios:checkout", "harness", depth=2, inside_tx=False, workers=16
        )
        matrix.assert_ok()
        second = {c.crashes[-1].at for c in matrix.cases if len(c.crashes) == 2}
        assert second == {Point.AFTER_INTERRUPTED, Point.AFTER_RESUMED, Point.AFTER_PAUSED}
        # Every recovery after every first crash: the pairs the default matrix leaves out.
        assert {len(c.crashes) for c in matrix.cases} == {1, 2}
        # 22: the Gate's attach.allowed is a first crash too, whose recovery passes
        # run.resumed (29 before that point existed, 30 with it); since a step's claim and
        # decision join its next commit (decision 0088), a crash after either falls where
        # that commit does, and the completion's step leaves nothing to recover.
        assert sum(len(c.crashes) == 2 for c in matrix.cases) == 22
        case = matrix.case(Crash(1, Point.AFTER_RESUMED), Crash(1, Point.AFTER_INTERRUPTED))
        assert case.result is not None
        assert [a.kind for a in case.result.approvals] == ["remote_mutation", INTERRUPTED]

    def test_the_matrix_prints_as_an_aligned_table_with_its_violations(self) -> None:
        # A never-answering operator leaves some runs waiting: outcomes differ by cell.
        matrix = crash_matrix_sync(
            lambda: ts.direct_charge(Verdict.LEAVE), "harness", inside_tx=False, workers=16
        )
        text = str(matrix)
        lines = text.splitlines()
        assert lines[0].startswith("crash matrix of direct_charge (harness)")
        header = next(i for i, line in enumerate(lines) if line.startswith("crash point"))
        columns = [lines[header].index(f"step {s}") for s in (0, 1, 2)]
        for row in lines[header + 2 :]:
            for col in columns:
                assert row[col - 2 : col] == "  " and row[col] != " "
        assert matrix.case(Crash(1, Point.AFTER_TOOL_STARTED)).outcome == "WAITING"
        # After the completion's decision is after its one commit: the run has ended.
        assert matrix.case(Crash(2, Point.AFTER_DECIDED)).outcome == "COMPLETED goal_completed"
        # After the charge's decision is after the commit that started it (decision 0088):
        # a person must decide, and this operator never answers.
        assert matrix.case(Crash(1, Point.AFTER_DECIDED)).outcome == "WAITING"
        assert "·" in text  # a point not passed at a step
        # A crash during recovery reads as its own row, under the step it crashed at; each
        # distinct recovery is crashed once, named by the first crash that leads to it
        # (after step 1's claim, its decision or its tool's start: one commit, one state).
        assert any(line.startswith("step.started@1 ▸ step.interrupted ") for line in lines)
        assert (
            matrix.case(
                Crash(1, Point.AFTER_STEP_STARTED), Crash(1, Point.AFTER_INTERRUPTED)
            ).outcome
            == "WAITING"
        )

    def test_recovery_false_and_select_leave_cases_out(self) -> None:
        matrix = crash_matrix_sync(
            "support.scenarios:small",
            recovery=False,
            select=lambda crashes: crashes[0].step == 1,
            workers=16,
        )
        matrix.assert_ok()
        assert matrix.cases and all(len(c.crashes) == 1 for c in matrix.cases)
        assert {c.crashes[0].step for c in matrix.cases} == {1}
        # A recovery crash left out does not stand for its recovery: the next first crash
        # leading to the same recovery (the takeover of step 0) gets it.
        tool_started = Crash(0, Point.AFTER_TOOL_STARTED)
        matrix = crash_matrix_sync(
            "support.scenarios:checkout",
            inside_tx=False,
            select=lambda crashes: (
                crashes[0].step == 0 and (len(crashes) == 1 or crashes[0] == tool_started)
            ),
            workers=16,
        )
        matrix.assert_ok()
        assert [c.crashes for c in matrix.cases if len(c.crashes) == 2] == [
            (tool_started, Crash(0, Point.AFTER_INTERRUPTED)),
            (tool_started, Crash(0, Point.AFTER_RESUMED)),
        ]
        assert len(matrix.cases) == 2 + 6  # step 0's six points after a commit

    def test_a_matrix_of_a_scenario_instance_warns_once(self) -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            matrix = crash_matrix_sync(
                ts.small(), select=lambda crashes: crashes == (Crash(1, Point.AFTER_DECIDED),)
            )
        # Once for the matrix, not again for its case.
        assert [type(w.message) for w in caught] == [SharedScenarioWarning]
        matrix.assert_ok()
        assert [c.crashes for c in matrix.cases] == [(Crash(1, Point.AFTER_DECIDED),)]


# -- check_policy ------------------------------------------------------------------------------


def _tool(name: str, side_effect: SideEffect, schema: dict[str, Any] | None = None) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=name,
        input_schema=schema or {"type": "object", "properties": {"n": {"type": "integer"}}},
        side_effect=side_effect,
        timeout=timedelta(seconds=1),
    )


class TestCheckPolicy:
    def test_the_default_policy_conforms_to_its_documented_table(self) -> None:
        push = _tool("push", SideEffect.REMOTE_MUTATION)
        report = check_policy(
            agentrt.default_policy(),
            [
                (SideEffect.READ_ONLY, {}, "allow"),
                ("local_mutation", {"path": "x"}, "allow"),
                (push, {"n": 1}, "require_approval:remote_mutation"),
                (SideEffect.DESTRUCTIVE, {}, "deny"),
                (push, {"n": "one"}, "invalid_args", "args failing the schema never reach it"),
                PolicyCase(ts.Lookup(), {"order": 3}, PolicyDecision.allow()),
            ],
        )
        assert report.ok, str(report)
        assert [o.got for o in report.outcomes] == [
            "allow",
            "allow",
            "require_approval:remote_mutation",
            "deny",
            "invalid_args",
            "allow",
        ]

    def test_mismatches_are_reported_row_by_row(self) -> None:
        report = check_policy(
            agentrt.default_policy(),
            [
                (SideEffect.DESTRUCTIVE, {}, "allow", "rm -rf"),
                (SideEffect.REMOTE_MUTATION, {}, "require_approval:some_other_kind"),
                (SideEffect.READ_ONLY, {}, "allow"),
            ],
        )
        assert [o.label for o in report.mismatches] == ["rm -rf", "remote_mutation_tool({})"]
        text = str(report)
        assert "2 mismatch(es)" in text and "✗  rm -rf" in text
        with pytest.raises(AssertionError):
            report.assert_ok()

    def test_a_failing_or_malformed_policy_is_an_error_outcome(self) -> None:
        class Broken:
            policy_id = "broken"

            def evaluate(self, request: Any, view: Any) -> Any:
                if request.spec.side_effect == SideEffect.READ_ONLY:
                    raise RuntimeError("boom")
                return PolicyDecision("maybe")

        report = check_policy(
            Broken(), [(SideEffect.READ_ONLY, {}, "error"), (SideEffect.DESTRUCTIVE, {}, "error")]
        )
        assert report.ok
        assert report.outcomes[0].got == "error: RuntimeError: boom"
        assert "unknown outcome" in report.outcomes[1].got

    def test_an_async_policy_is_checked_from_sync_and_from_async_code(self) -> None:
        class Async:
            policy_id = "async"

            async def evaluate(self, request: Any, view: Any) -> PolicyDecision:
                await asyncio.sleep(0)
                return PolicyDecision.deny("never")

        table: list[tuple[Any, ...]] = [(SideEffect.READ_ONLY, {}, "deny")]
        assert check_policy(Async(), table).ok

        async def inside_a_loop() -> bool:
            return check_policy(Async(), table).ok

        assert asyncio.run(inside_a_loop())

    def test_an_unknown_expectation_is_refused(self) -> None:
        with pytest.raises(agentrt.ConfigError, match="unknown expectation"):
            check_policy(agentrt.default_policy(), [(SideEffect.READ_ONLY, {}, "permit")])


# -- fuzz_args ---------------------------------------------------------------------------------

ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order": {"type": "integer", "minimum": 1, "maximum": 10_000},
        "note": {"type": "string", "minLength": 1, "maxLength": 20},
        "mode": {"enum": ["card", "invoice"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3, "uniqueItems": True},
        "split": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "address": {"$ref": "#/$defs/address"},
        "currency": {"const": "EUR"},
        "batch": {"type": "integer", "multipleOf": 5},
    },
    "required": ["order", "mode"],
    "additionalProperties": False,
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": ["string", "null"]}},
            "required": ["city"],
        }
    },
}


class TestFuzzArgs:
    def test_the_same_seed_gives_the_same_cases_and_another_seed_others(self) -> None:
        first = fuzz_args(ORDER_SCHEMA, 40, seed=7)
        assert first == fuzz_args(ORDER_SCHEMA, 40, seed=7)
        assert first != fuzz_args(ORDER_SCHEMA, 40, seed=8)

    def test_labels_are_the_runtimes_own_check(self) -> None:
        spec = _tool("order", SideEffect.READ_ONLY, ORDER_SCHEMA)
        cases = fuzz_args(spec, 200, seed=1)
        for case in cases:
            assert case.valid == (agentrt.check_args(spec, case.args) == [])
            assert case.errors == tuple(agentrt.check_args(spec, case.args))
        assert 60 < sum(c.valid for c in cases) < 140

    @settings(max_examples=25, deadline=None, derandomize=True)
    @given(st.integers(min_value=0, max_value=2**32))
    def test_built_values_are_valid_and_near_misses_invalid(self, seed: int) -> None:
        for case in fuzz_args(ORDER_SCHEMA, 30, seed=seed):
            assert case.valid == (case.mutation == ""), (case.mutation, case.args, case.errors)

    def test_near_misses_cover_the_common_keywords(self) -> None:
        kinds = {
            c.mutation.split(": ")[-1].split(" '")[0] for c in fuzz_args(ORDER_SCHEMA, 400, seed=3)
        }
        for expected in (
            "required",
            "unknown property",
            "below minimum",
            "above maximum",
            "not in enum",
            "longer than maxLength",
            "more than maxItems",
            "a duplicate item",
            "at exclusiveMinimum",
            "missed const",
            "not a multipleOf",
        ):
            assert any(k.startswith(expected) for k in kinds), (expected, kinds)

    def test_the_ratio_of_near_misses_is_honoured(self) -> None:
        assert all(c.valid for c in fuzz_args(ORDER_SCHEMA, 30, seed=2, invalid_ratio=0.0))
        assert not any(c.valid for c in fuzz_args(ORDER_SCHEMA, 30, seed=2, invalid_ratio=1.0))

    def test_a_schema_the_runtime_refuses_is_refused(self) -> None:
        with pytest.raises(agentrt.ConfigError):
            fuzz_args({"$ref": "https://example.com/schema.json"}, 3, seed=0)

    def test_fuzzed_args_reach_the_tool_exactly_when_valid(self, tmp_path: Path) -> None:
        cases = fuzz_args(ts.Charge(), 12, seed=5)
        agent = ScriptedAgent(
            [*(Decision.tool_call("charge", c.args) for c in cases), Decision.complete()]
        )
        allow = agentrt.SideEffectPolicy({SideEffect.REMOTE_MUTATION: PolicyDecision.allow()})
        scenario = Scenario(
            tools=[ts.Charge()],
            policy=allow,
            agent=agent,
            limits=agentrt.Limits(max_consecutive_tool_failures=50, loop_threshold=50),
            operator=always(Verdict.APPROVE),
        )
        result = play(scenario, db=tmp_path / "fuzz.db")
        assert result.run.status == RunStatus.COMPLETED
        assert [c.args for c in result.calls("charge")] == [c.args for c in cases if c.valid]
        for case, step in zip(cases, result.steps, strict=False):
            assert (step.status == StepStatus.DONE) == case.valid


class TestGateScenario:
    def test_a_loop_over_a_gate_is_crashed_at_every_point_and_holds_in_the_harness(
        self, database: str, request: pytest.FixtureRequest
    ) -> None:
        # On SQLite and on PostgreSQL. There the harness waits each crash's lease out on
        # the server's clock, so the scenario's lease is brief (support/database.py) and
        # the crashes during recovery are left to the process-mode matrix, which takes
        # over at once from a child proved dead (decision 0097).
        recovery = not on_postgres(database)
        matrix = crash_matrix_sync(
            brief("support.scenarios:gate_checkout", database),
            "harness",
            workers=16,
            directory=database,
            recovery=recovery,
        )
        matrix.assert_ok()
        points = {c.crashes[0].at for c in matrix.cases}
        assert {Point.AFTER_ALLOWED, Point.AFTER_ATTACH_ALLOWED, Point.AFTER_TOOL_EFFECT} <= points
        if not recovery:
            # The Driver's matrix is the same on every backend: compared once, on SQLite
            # (each harness crash here waits a lease out on the server's clock).
            return
        # The same cells as the Driver's matrix of the same scenario, with the same outcomes
        # (on SQLite, with recovery: the one TestMatrix judges, made once for both).
        by_driver: CrashMatrix = request.getfixturevalue("checkout_matrix")
        assert {(c.crashes, c.outcome) for c in matrix.cases} == {
            (c.crashes, c.outcome) for c in by_driver.cases
        }
