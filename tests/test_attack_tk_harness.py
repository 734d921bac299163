"""Attacks on the in-process harness and the invariants: scenarios the kit passes although
the consumer's agent charged twice, or that it cannot bound in time."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

import agentrt
import support.scenarios as ts
from agentrt import Decision, StepInput
from agentrt.testkit import Crash, LoopContext, Point, Scenario, run_sync


def continue_without_looking() -> Scenario:
    """The seed's checkout, allowed by policy, with an agent that decides from the record
    (charge until a charge is done) and a run-level reconciliation that says "go on"
    without looking the charge up."""
    return dataclasses.replace(
        ts.direct_charge_approve(),
        agent=ts.OrderAgent(),
        reconcile=lambda view: agentrt.Reconciliation.continue_run(),
    )


def test_a_charge_that_took_effect_and_is_charged_again_after_a_crash_is_reported(
    tmp_path: Path,
) -> None:
    """The charge returned in process 1, which died before recording it; the consumer's
    reconciliation says continue without looking, and the agent asks for the identical
    charge again in a new step: the card is charged twice (the seed's "effect was the same
    as a rerun"). The kit's own journal shows both charges returned, yet today the run
    passes with no violation; a double side effect must not come out green."""
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
    assert not result.ok, "a card charged twice passed every invariant"


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
def test_the_harness_timeout_bounds_a_process_whose_agent_blocks(tmp_path: Path) -> None:
    """`run(timeout=1)` in the harness, with an agent that blocks the event loop for 4 s:
    today the timeout never fires (it is an `asyncio.wait` on the very loop that is
    blocked), so the run passes after 4 s (and an agent that blocks for good hangs the kit
    forever), where process mode reports the child did not finish. It should be reported."""
    began = time.monotonic()
    result = run_sync(slow_agent, db_path=tmp_path / "slow.db", timeout=1, check_invariants=False)
    elapsed = time.monotonic() - began
    assert any("did not finish within 1s" in e for e in result.errors), (
        elapsed,
        result.errors,
        result.run.status,
    )


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
    card is charged twice with one recorded start. Today the kit counts only calls made
    through its wrappers in `ctx.driver.tools`, so `more_invocations_than_starts` (meant
    for exactly this) never fires and the run passes; the scenario's tools must be watched
    whoever calls them."""
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


def test_an_in_memory_database_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`db_path=":memory:"` (which `open_store` takes): today every simulated process gets
    a new empty database, so the recovering one finds no run; the whole scenario runs (the
    card charged) and only then does a raw StoreError come out of the result's read, with a
    journal file named ':memory:.testkit-....jsonl' left in the working directory. It
    should be refused up front with a ConfigError, leaving nothing behind."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(agentrt.ConfigError, match="memory"):
        run_sync(
            ts.direct_charge_approve,
            Crash(1, Point.AFTER_TOOL_EFFECT),
            db_path=":memory:",
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == []
