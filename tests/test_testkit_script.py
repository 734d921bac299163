"""A scripted agent replays what was carried out, and the crash test kit holds it to that.

`ScriptedAgent` offers an entry again when the step it was offered in was
interrupted before carrying it out (docs/decisions/0018-...), and the kit's
`script_not_followed` invariant reports any agent that skips or repeats a scripted
decision, shown here on an agent with the old index-based behaviour.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest

import agentrt
import support.scenarios as ts
from agentrt import (
    Decision,
    RunStatus,
    SideEffect,
    StepInput,
    TerminalReason,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from agentrt._model import Message, ModelRequest, TextBlock
from agentrt.scripted import ScriptedAgent
from agentrt.testkit import (
    Crash,
    InvariantError,
    Point,
    Result,
    Scenario,
    check,
    crash_matrix_sync,
    run_sync,
)

INTERRUPTED = "interrupted_side_effect"


def play(scenario: Any, *crashes: Crash, db: Path, **kw: Any) -> Result:
    return run_sync(scenario, *crashes, db_path=db, **kw)


def decided(result: Result) -> list[tuple[int, str, str]]:
    """Each step as (index, status, what it decided)."""
    out = []
    for step in result.steps:
        d = step.decision
        what = "" if d is None else (d.tool or str(d.kind))
        out.append((step.index, str(step.status), what))
    return out


# -- the regression: an interrupted read is done, and the charge after it too -------------------


@pytest.mark.parametrize(
    "crash",
    [
        Crash(0, Point.AFTER_STEP_STARTED),
        Crash(0, Point.AFTER_DECIDED),
        Crash(0, Point.AFTER_TOOL_STARTED),
        Crash(0, Point.AFTER_TOOL_EFFECT),
    ],
    ids=lambda c: c.label,
)
def test_a_scripted_read_interrupted_by_a_crash_is_offered_again_and_the_charge_after_it_runs(
    tmp_path: Path, crash: Crash
) -> None:
    result = play(ts.direct_charge_approve, crash, db=tmp_path / "r.db")
    assert (result.run.status, result.run.reason) == (
        RunStatus.COMPLETED,
        TerminalReason.GOAL_COMPLETED,
    )
    assert result.run.result == {"receipt": "r-17"}
    # Step 0 was interrupted; the lookup was offered again in step 1 and done, then the
    # charge (step 2) and the completion (step 3). (Its claim and decision commit with
    # `step.tool_started`, decision 0088: a crash after any of the three finds them.)
    assert decided(result) == [
        (0, "interrupted", "lookup"),
        (1, "done", "lookup"),
        (2, "done", "charge"),
        (3, "done", "complete"),
    ]
    # The dead process called the lookup only when it crashed after the call returned.
    before = [0] if crash.at == Point.AFTER_TOOL_EFFECT else []
    assert [c.step_index for c in result.calls("lookup")] == [*before, 1]
    assert [(c.step_index, c.args) for c in result.calls("charge")] == [(2, ts.CHARGE)]
    assert result.approvals == ()


def test_a_scripted_charge_whose_step_died_while_deciding_is_charged_once_after_resume(
    tmp_path: Path,
) -> None:
    # Died inside the commit that would have started the charge: nothing of step 1 was
    # durable (decision 0088), so the charge is offered again at step 1.
    crash = Crash(1, Point.AFTER_DECIDED, inside_tx=True)
    result = play(ts.direct_charge_approve, crash, db=tmp_path / "d.db")
    assert result.run.status == RunStatus.COMPLETED
    assert decided(result) == [
        (0, "done", "lookup"),
        (1, "done", "charge"),
        (2, "done", "complete"),
    ]
    assert [(c.process, c.step_index) for c in result.calls("charge")] == [(2, 1)]
    # Died while the model was asked for step 1: the step was durable `deciding` (the
    # dispatch committed its claim); it is interrupted, and the charge offered in step 2.
    result = play(
        _model_asking(ScriptedAgent), Crash(1, Point.DURING_MODEL_REQUEST), db=tmp_path / "m.db"
    )
    assert decided(result) == [
        (0, "done", "lookup"),
        (1, "interrupted", ""),
        (2, "done", "charge"),
        (3, "done", "complete"),
    ]
    assert [(c.process, c.step_index) for c in result.calls("charge")] == [(2, 2)]


@pytest.mark.slow
def test_a_scripted_read_cut_off_by_sigkill_is_done_after_resume_and_so_is_the_charge(
    tmp_path: Path,
) -> None:
    """The same, with a real child process killed by SIGKILL inside the lookup's step."""
    result = play(
        "support.scenarios:direct_charge_approve",
        Crash(0, Point.AFTER_TOOL_STARTED),
        db=tmp_path / "p.db",
        mode="process",
    )
    assert result.exit_codes[0] == -9
    assert result.run.status == RunStatus.COMPLETED
    assert [(c.process, c.step_index) for c in result.calls("lookup")] == [(2, 1)]
    assert [(c.process, c.step_index) for c in result.calls("charge")] == [(2, 2)]
    assert decided(result)[0] == (0, "interrupted", "lookup")


# -- what settles an entry: every other outcome --------------------------------------------------


def _spec(name: str, side_effect: SideEffect) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=name,
        input_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
        side_effect=side_effect,
        timeout=timedelta(seconds=5),
    )


class Raises:
    spec = _spec("flaky", SideEffect.LOCAL_MUTATION)

    def call(self, call: ToolCall) -> ToolResult:
        raise RuntimeError("the disk is full")


class Reads:
    spec = _spec("read", SideEffect.READ_ONLY)

    def call(self, call: ToolCall) -> ToolResult:
        return ToolResult({"n": call.args.get("n")}, "read")


class Wipes:
    spec = _spec("wipe", SideEffect.DESTRUCTIVE)

    def call(self, call: ToolCall) -> ToolResult:  # pragma: no cover - always denied
        raise AssertionError("a denied tool was called")


def test_done_tool_error_denied_and_invalid_steps_each_settle_one_scripted_entry() -> None:
    store = agentrt.open_store(":memory:")
    agent = ScriptedAgent(
        [
            Decision.tool_call("nonexistent", {}),  # invalid_decision
            Decision.tool_call("wipe", {}),  # denied by the default policy
            Decision.tool_call("flaky", {"n": 1}),  # tool_error
            Decision.tool_call("read", {"n": 2}),  # done
            Decision.complete({"ok": True}),
        ]
    )
    driver = agentrt.Driver(
        store=store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[Raises(), Reads(), Wipes()],
    )
    run = driver.start_sync("settle", limits=agentrt.Limits(max_consecutive_tool_failures=5))
    assert (run.status, run.result) == (RunStatus.COMPLETED, {"ok": True})
    steps = store.list_steps(run.id)
    assert [(s.status, s.observation.kind if s.observation else None) for s in steps] == [
        ("failed", "invalid_decision"),
        ("failed", "policy_denied"),
        ("failed", "tool_error"),
        ("done", "tool_result"),
        ("done", None),
    ]
    assert agent.calls == 5


def test_a_scripted_side_effect_interrupted_and_approved_runs_on_its_own_step_once(
    tmp_path: Path,
) -> None:
    """Interrupted then approved: the runtime re-runs it on the same step; the script goes on."""
    result = play(
        ts.direct_charge_approve, Crash(1, Point.AFTER_TOOL_STARTED), db=tmp_path / "a.db"
    )
    assert decided(result) == [
        (0, "done", "lookup"),
        (1, "done", "charge"),
        (2, "done", "complete"),
    ]
    assert [a.kind for a in result.approvals] == [INTERRUPTED]
    assert [c.step_index for c in result.calls("charge")] == [1]


def test_a_scripted_side_effect_interrupted_and_rejected_is_approved_away(tmp_path: Path) -> None:
    result = play(ts.direct_charge_reject, Crash(1, Point.AFTER_TOOL_STARTED), db=tmp_path / "j.db")
    assert (result.run.status, result.run.reason) == (
        RunStatus.CANCELLED,
        TerminalReason.APPROVAL_REJECTED,
    )
    assert decided(result) == [(0, "done", "lookup"), (1, "failed", "charge")]
    assert result.calls("charge") == []
    assert check(result) == []


def test_a_scripted_side_effect_interrupted_and_continued_by_reconcile_is_not_asked_again(
    tmp_path: Path,
) -> None:
    """Its outcome is unknown and the consumer said go on: the script does not repeat it."""

    def scenario() -> Scenario:
        return dataclasses.replace(
            ts.direct_charge_reject(), reconcile=lambda view: agentrt.Reconciliation.continue_run()
        )

    result = play(scenario, Crash(1, Point.AFTER_TOOL_STARTED), db=tmp_path / "c.db")
    assert result.run.status == RunStatus.COMPLETED
    assert decided(result) == [
        (0, "done", "lookup"),
        (1, "interrupted", "charge"),
        (2, "done", "complete"),
    ]
    assert result.calls("charge") == []


def test_a_scripted_read_interrupted_and_continued_by_reconcile_is_offered_again(
    tmp_path: Path,
) -> None:
    def scenario() -> Scenario:
        return dataclasses.replace(
            ts.direct_charge_approve(),
            reconcile=lambda view: agentrt.Reconciliation.continue_run(),
        )

    result = play(scenario, Crash(0, Point.AFTER_TOOL_STARTED), db=tmp_path / "c.db")
    assert [s.status for s in result.steps] == ["interrupted", "done", "done", "done"]
    assert [c.step_index for c in result.calls("lookup")] == [1]


def test_a_scripted_agent_past_its_last_carried_out_entry_is_an_agent_error() -> None:
    store = agentrt.open_store(":memory:")
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("read", {"n": 1})]),
        policy=agentrt.default_policy(),
        tools=[Reads()],
    )
    run = driver.start_sync("too short")
    assert (run.status, run.reason) == (RunStatus.FAILED, TerminalReason.AGENT_ERROR)
    assert "the script has 1 decisions, all carried out; step 1 has none" in run.reason_detail


# -- the kit catches an agent that skips (or repeats) a scripted decision -------------------------


class IndexScriptedAgent(ScriptedAgent):
    """The old behaviour: decision i for step i, whatever happened to the earlier steps."""

    def decide(self, input: StepInput) -> Decision:
        index = input.steps[-1].index
        entry = self.decisions[index]
        return entry(input) if callable(entry) else entry


class RepeatingScriptedAgent(ScriptedAgent):
    """A broken replay the other way: offers a read again although it was carried out."""

    def decide(self, input: StepInput) -> Decision:
        index = input.steps[-1].index
        entry = self.decisions[max(0, index - 1)]
        return entry(input) if callable(entry) else entry


def _with_agent(agent_type: type[ScriptedAgent]) -> Any:
    def factory() -> Scenario:
        scenario = ts.direct_charge_approve()
        assert isinstance(scenario.agent, ScriptedAgent)
        return dataclasses.replace(scenario, agent=agent_type(scenario.agent.decisions))

    return factory


def _model_asking(agent_type: type[ScriptedAgent]) -> Any:
    """`_with_agent`, the agent asking a model (through the runtime) before each decision:
    a crash during that request leaves its step durable `deciding`."""

    class Asking(agent_type):  # type: ignore[misc,valid-type]
        async def decide(self, input: StepInput) -> Decision:
            assert input.model is not None
            await input.model.generate(
                ModelRequest(system="plan", messages=[Message("user", [TextBlock("next?")])])
            )
            return agent_type.decide(self, input)

    def factory() -> Scenario:
        scenario = _with_agent(Asking)()
        return dataclasses.replace(scenario, model=ts.Planner())

    return factory


def test_the_kit_reports_an_index_scripted_agent_that_skips_an_interrupted_read(
    tmp_path: Path,
) -> None:
    result = play(
        _with_agent(IndexScriptedAgent),
        Crash(0, Point.AFTER_TOOL_STARTED),
        db=tmp_path / "old.db",
        check_invariants=False,
    )
    # The old behaviour: the run completes and the lookup was never done.
    assert result.run.status == RunStatus.COMPLETED
    assert result.calls("lookup") == []
    assert [(v.rule, v.detail) for v in result.violations] == [
        (
            "script_not_followed",
            'step 1 decided tool_call charge {"amount_micros":12500000,"order":17}, but the '
            'script\'s next entry is #0, tool_call lookup {"order":17}, which step 0 was '
            "offered and did not carry out (interrupted while executing read-only lookup): "
            "a scripted decision must be carried out once, or rejected by a person",
        )
    ]
    with pytest.raises(InvariantError, match="script_not_followed: step 1 decided"):
        result.check()


def test_the_kit_reports_an_index_scripted_agent_that_skips_a_charge_interrupted_while_deciding(
    tmp_path: Path,
) -> None:
    result = play(
        _model_asking(IndexScriptedAgent),
        Crash(1, Point.DURING_MODEL_REQUEST),
        db=tmp_path / "old.db",
        check_invariants=False,
    )
    assert result.calls("charge") == []
    [violation] = result.violations
    assert violation.rule == "script_not_followed"
    assert violation.detail.startswith("step 2 decided complete")
    assert "(interrupted while deciding)" in violation.detail


def test_the_kit_reports_a_scripted_decision_carried_out_twice(tmp_path: Path) -> None:
    result = play(
        _with_agent(RepeatingScriptedAgent), db=tmp_path / "rep.db", check_invariants=False
    )
    [violation] = result.violations
    assert violation.rule == "script_not_followed"
    assert violation.detail.startswith('step 1 decided tool_call lookup {"order":17}, but')
    assert "script's next entry is #1, tool_call charge" in violation.detail
    assert "carried out twice" in violation.detail


def test_a_run_that_follows_its_script_through_crashes_holds_the_script_invariant(
    tmp_path: Path,
) -> None:
    result = play(
        ts.direct_charge_approve,
        Crash(0, Point.AFTER_TOOL_STARTED),
        Crash(2, Point.AFTER_TOOL_STARTED),
        db=tmp_path / "ok.db",
    )
    assert result.violations == ()
    assert [c.step_index for c in result.calls("charge")] == [2]


def test_a_scenario_states_the_script_of_an_agent_that_is_not_a_scripted_agent(
    tmp_path: Path,
) -> None:
    """`Scenario(script=...)`: a consumer's own agent held to a plan."""

    class Forgetful:
        """Decides from the step index, like the old ScriptedAgent."""

        plan: ClassVar[list[Decision]] = [
            Decision.tool_call("lookup", ts.ORDER),
            Decision.tool_call("charge", ts.CHARGE),
            Decision.complete({"receipt": "r-17"}),
        ]

        def decide(self, input: StepInput) -> Decision:
            return self.plan[input.steps[-1].index]

    def scenario() -> Scenario:
        return dataclasses.replace(
            ts.direct_charge_approve(), agent=Forgetful(), script=Forgetful.plan
        )

    result = play(
        scenario, Crash(0, Point.AFTER_TOOL_STARTED), db=tmp_path / "s.db", check_invariants=False
    )
    assert [v.rule for v in result.violations] == ["script_not_followed"]
    # Without a stated script the kit has nothing to hold a non-scripted agent to.
    unstated = play(
        lambda: dataclasses.replace(ts.direct_charge_approve(), agent=Forgetful()),
        Crash(0, Point.AFTER_TOOL_STARTED),
        db=tmp_path / "u.db",
        check_invariants=False,
    )
    assert unstated.violations == ()


def test_a_stated_script_must_list_decisions_or_functions() -> None:
    with pytest.raises(agentrt.ConfigError, match="script entry 1 is int"):
        dataclasses.replace(ts.direct_charge_approve(), script=[Decision.complete(), 3])


def test_the_crash_matrix_of_an_index_scripted_agent_fails_every_cell_that_skipped_an_entry(
    tmp_path: Path,
) -> None:
    """Every crash that leaves a step interrupted while reading: a violation."""
    matrix = crash_matrix_sync(
        _with_agent(IndexScriptedAgent),
        inside_tx=False,
        recovery=False,
        workers=16,
        directory=tmp_path,
    )
    failed = {case.label for case in matrix.cases if not case.ok}
    # The interrupted lookup of step 0 (its claim and decision commit with its
    # `step.tool_started`, decision 0088, so a crash after any of them interrupts it).
    # A crash before a step's first commit leaves nothing of it: the agent is asked for
    # the same index again, which even this agent answers right; a step interrupted
    # while deciding (during a model request) is
    # `test_the_kit_reports_an_index_scripted_agent_that_skips_a_charge_interrupted_while_deciding`.
    assert failed == {
        "step.started@0",
        "step.decided@0",
        "step.tool_started@0",
        "tool.effect@0",
    }
    assert {v.rule for case in matrix.cases for v in case.violations} == {"script_not_followed"}
    # The fixed agent holds everywhere, with the same crashes.
    crash_matrix_sync(
        ts.direct_charge_approve, inside_tx=False, recovery=False, workers=16, directory=tmp_path
    ).assert_ok()
