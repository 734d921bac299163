"""The session's copy of its run and steps is what a fresh read of the store gives.

`RunSession` keeps the run and its steps in memory so that a step does not
re-read what it has just written (docs/performance.md). That copy feeds the
limits, the policy's view, the agent's `StepInput` and the `Run` the caller
gets back, so it must never drift from the rows: these tests compare the two
after every commit the loop makes, on every path a step can take.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentrt
from agentrt import (
    AbortRun,
    Decision,
    PolicyDecision,
    RunView,
    SideEffect,
    ToolCall,
    ToolRequest,
    ToolResult,
)
from agentrt import _history as history
from agentrt._canonical import JSONFloat, JSONInt
from agentrt._model import ModelConfig, ModelResponse, Price, ToolUseBlock, Usage
from agentrt._session import RunSession
from agentrt.model_agent import ModelAgent
from agentrt.replay import ScriptedModel
from agentrt.scripted import ScriptedAgent
from conftest import EPOCH, FakeClock, Ids, RecordingTool

ANY_OBJECT = {"type": "object"}


class Mirror:
    """A probe that compares the session with the store at every crash point.

    The crash points follow the commits of a step; the commits that have none
    (an invalid decision, a denial, an ending) are compared at the next point,
    whose check covers every step so far, and by `check_final` after the run.
    """

    def __init__(self, store: agentrt.Store) -> None:
        self.store = store
        self.points: list[str] = []
        self.deferred_at: list[str] = []
        self.session: RunSession | None = None

    def __call__(self, point: str, session: RunSession) -> None:
        self.points.append(point)
        self.session = session
        self.compare(session, f"after {point}")

    def compare(self, session: RunSession, when: str) -> None:
        fresh_run = self.store.get_run(session.run_id)
        if session.has_deferred:
            # Between a step's decision and the commit it joins (at `policy.allowed`): the
            # decision is kept in memory, and so is the step's claim unless a model
            # request's dispatch committed it already; the rows are the copy without
            # what is kept (decision 0088).
            pending = session.steps[-1]
            assert pending.status == "deciding" and pending.decision is not None, when
            fresh_steps = self.store.list_steps(session.run_id, cap=None)
            if len(fresh_steps) == len(session.steps):  # claimed at the dispatch
                kept_run, kept_steps = (
                    session.run,
                    [*session.steps[:-1], replace(pending, decision=None)],
                )
            else:
                assert pending.index == fresh_run.step_count, when
                kept_run = replace(session.run, step_count=session.run.step_count - 1)
                kept_steps = session.steps[:-1]
            assert repr(kept_run) == repr(fresh_run), f"run differs {when}"
            assert repr(kept_steps) == repr(fresh_steps), f"steps differ {when}"
            self.deferred_at.append(when)
            return
        # repr, not only ==: 10.0 == 1e1 as numbers, but not as recorded literals;
        # a dict's key order is what the agent and the policy iterate; and a
        # datetime's type, zone and fold are what they are handed.
        assert repr(session.run) == repr(fresh_run), f"run differs {when}"
        fresh_steps = self.store.list_steps(session.run_id, cap=None)
        # Every step, those the session holds and those it reads back (decision 0098).
        assert repr(list(session.steps)) == repr(fresh_steps), f"steps differ {when}"

    def check_final(self, run: agentrt.Run) -> None:
        """The run the caller got back, and the last session's steps, after the last commit."""
        assert repr(run) == repr(self.store.get_run(run.id))
        assert self.session is not None and self.session.run_id == run.id
        self.compare(self.session, "at the end")


class AppTime(datetime):
    """A consumer's datetime type (pendulum, arrow and freezegun have such subclasses)."""


class ZonedClock:
    """Readings in a zone other than UTC, as a subclass, one in two with `fold=1`."""

    def __init__(self) -> None:
        self.t = EPOCH
        self.zone = timezone(timedelta(hours=2))

    def __call__(self) -> datetime:
        self.t += timedelta(milliseconds=1)
        local = self.t.astimezone(self.zone)
        fold = int(local.microsecond // 1000 % 2 == 0)
        return AppTime(*local.timetuple()[:6], local.microsecond, self.zone, fold=fold)


class PolicyIds(StrEnum):
    MIRROR = "mirror/1"


class CapablePolicy:
    """Allows every call with a capability and a presentation whose key order and
    number literals differ from their stored, canonical form; its id is a StrEnum."""

    policy_id = PolicyIds.MIRROR

    def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        return PolicyDecision(
            outcome="allow",
            reason="fine",
            capability={"z": JSONFloat("1e1"), "a": [2.50, 10**20]},
            presentation={"y": "ü", "b": None},
        )


def calls(name: str, args: Any) -> ModelResponse:
    return ModelResponse(
        "", (ToolUseBlock(f"toolu_{name}", name, args),), "tool_use", Usage(120, 30, 20), b""
    )


@pytest.mark.parametrize("let_go", [False, True], ids=["held", "let-go"])
def test_a_model_driven_run_through_every_outcome_keeps_the_session_equal_to_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, let_go: bool
) -> None:
    """Charges between commits, a denial, a nudge, a pause, a resume and a terminal tool.

    `let-go`: the session holds only its newest step and lets every older settled one go
    (decision 0098), so the model agent's render and the comparison read them back."""
    if let_go:
        monkeypatch.setattr(history, "HELD_BYTES", 0)
        monkeypatch.setattr(history, "MIN_HELD", 1)
    store = agentrt.open_store(tmp_path / "runs.db")
    mirror = Mirror(store)
    model = ScriptedModel(
        [
            calls("read", {"x": 1}),
            calls("delete", {"x": 2}),  # destructive: denied
            ModelResponse("all done?", (), "end_turn", Usage(90, 10, 0), b""),  # nudged
            calls("read", {"x": 5}),
            calls("push", {"x": 3}),  # remote: waits for a person
            calls("finish", {"x": 4}),  # terminal
        ]
    )
    driver = agentrt.Driver(
        store=store,
        agent=ModelAgent(),
        policy=agentrt.default_policy(),
        tools=[
            RecordingTool("read", SideEffect.READ_ONLY, result={"lines": ["a", 2.50, 10**30]}),
            RecordingTool("delete", SideEffect.DESTRUCTIVE),
            RecordingTool("push", SideEffect.REMOTE_MUTATION, result={"pushed": 3}),
            RecordingTool("finish", SideEffect.READ_ONLY, terminal=True),
        ],
        model=ModelConfig(
            model=model,
            prices=Price(3_000_000, 15_000_000),
            max_retries=0,
            backoff=timedelta(0),
        ),
        now=FakeClock(),
        new_id=Ids(),
        probe=mirror,
    )
    run = driver.start_sync("tidy and push the notes")
    assert run.status == "WAITING_FOR_APPROVAL"
    mirror.check_final(run)
    assert run.model_calls == 5 and run.estimated_cost_micros > 0
    (approval,) = store.pending_approvals(run.id)
    driver.approve(run.id, approval.id, by="ops")
    run = driver.resume_sync(run.id)
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed"), run.reason_detail
    mirror.check_final(run)
    assert {
        "step.started",
        "step.decided",
        "step.tool_started",
        "step.tool_finished",
        "run.paused",
        "run.resumed",
    } <= set(mirror.points), mirror.points
    store.close()


def failing_tool(call: ToolCall) -> ToolResult:
    raise RuntimeError(f"no page {call.args}")


def aborting_tool(call: ToolCall) -> ToolResult:
    raise AbortRun("the ledger is locked")


def drive_scripted(
    path: Path,
    decisions: list[Decision],
    tools: list[RecordingTool],
    limits: agentrt.Limits,
    *,
    clock: Callable[[], datetime] | None = None,
    policy: Any = None,
) -> tuple[agentrt.Store, agentrt.Run, Mirror]:
    store = agentrt.open_store(path)
    mirror = Mirror(store)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(decisions),
        policy=policy or agentrt.default_policy(),
        tools=tools,
        now=clock or FakeClock(),
        new_id=Ids(),
        probe=mirror,
    )
    run = driver.start_sync("walk every path", limits=limits)
    mirror.check_final(run)
    return store, run, mirror


def test_a_clock_in_another_zone_and_a_policy_with_a_capability_keep_the_copy_exact(
    tmp_path: Path,
) -> None:
    """Times are copied as a read gives them (plain, UTC, fold 0), policies as stored."""
    tools = [RecordingTool("read", SideEffect.READ_ONLY)]
    decisions = [Decision.tool_call("read", {"x": i}) for i in range(3)]
    decisions.append(Decision.complete())
    store, run, mirror = drive_scripted(
        tmp_path / "zoned.db",
        decisions,
        tools,
        agentrt.Limits(),
        clock=ZonedClock(),
        policy=CapablePolicy(),
    )
    assert run.status == "COMPLETED"
    assert mirror.points.count("step.tool_finished") == 3
    # Each allowed step was compared while its claim and decision were kept in memory.
    assert mirror.deferred_at == ["after policy.allowed"] * 3
    assert mirror.session is not None
    step = mirror.session.steps[0]
    assert type(step.started_at) is datetime and step.started_at.tzinfo is UTC
    assert step.policy is not None and list(step.policy.capability) == ["a", "z"]
    assert type(step.policy_id) is str and step.policy_id == "mirror/1"
    store.close()


@pytest.mark.parametrize("let_go", [False, True], ids=["held", "let-go"])
def test_failed_invalid_and_aborted_steps_keep_the_session_equal_to_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, let_go: bool
) -> None:
    if let_go:  # only the newest step held: the others read back (decision 0098)
        monkeypatch.setattr(history, "HELD_BYTES", 0)
        monkeypatch.setattr(history, "MIN_HELD", 1)
    tools = [
        RecordingTool("read", SideEffect.READ_ONLY),
        RecordingTool("broken", SideEffect.READ_ONLY, result=failing_tool),
        RecordingTool("ledger", SideEffect.LOCAL_MUTATION, result=aborting_tool),
    ]
    decisions = [
        Decision.tool_call("read", {"x": 1}),
        Decision.tool_call("nowhere", {}),  # unknown tool: an invalid decision
        Decision.tool_call("read", {"x": "one"}),  # args against the schema
        Decision.tool_call("broken", {"x": 2}),  # the tool raises
        Decision.tool_call("read", {"x": 3}),
        Decision.tool_call("ledger", {"x": 4}),  # AbortRun ends the run
    ]
    store, run, mirror = drive_scripted(
        tmp_path / "runs.db", decisions, tools, agentrt.Limits(max_consecutive_tool_failures=9)
    )
    assert (run.status, run.reason) == ("FAILED", "tool_abort")
    assert mirror.points.count("step.tool_finished") == 4
    store.close()


def test_a_limit_and_a_completion_keep_the_session_equal_to_its_rows(tmp_path: Path) -> None:
    tools = [RecordingTool("read", SideEffect.READ_ONLY)]
    decisions = [Decision.tool_call("read", {"x": i}) for i in range(5)]
    store, run, _ = drive_scripted(
        tmp_path / "limit.db", decisions, tools, agentrt.Limits(max_steps=3)
    )
    assert (run.status, run.reason) == ("FAILED", "limit_steps")
    store.close()
    decisions = [Decision.tool_call("read", {"x": 1}), Decision.complete({"done": 1.0})]
    store, run, _ = drive_scripted(tmp_path / "done.db", decisions, tools, agentrt.Limits())
    assert (run.status, run.result) == ("COMPLETED", {"done": JSONFloat("1.0")})
    store.close()


_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([JSONFloat("10.0"), JSONFloat("1e1"), JSONFloat("-0.0"), JSONInt("-0")]),
    st.text(max_size=8),
)
_values = st.recursive(
    _leaves,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=10,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(_values, min_size=1, max_size=3), summary=st.text(max_size=20))
def test_any_json_in_args_and_observations_keeps_the_session_equal_to_its_rows(
    values: list[Any], summary: str
) -> None:
    """Number literals (10 vs 10.0 vs 1e1, beyond 2^53), escapes and nesting survive the copy."""

    def echo(call: ToolCall) -> ToolResult:
        return ToolResult(content={"echo": call.args}, summary=summary)

    tools = [RecordingTool("echo", SideEffect.READ_ONLY, schema=ANY_OBJECT, result=echo)]
    decisions = [Decision.tool_call("echo", {"v": v}) for v in values]
    decisions.append(Decision.complete({"last": values[-1]}))
    with tempfile.TemporaryDirectory() as directory:
        store, run, mirror = drive_scripted(
            Path(directory) / "runs.db", decisions, tools, agentrt.Limits(loop_threshold=9)
        )
        assert run.status == "COMPLETED", run
        assert mirror.points.count("step.tool_finished") == len(values)
        store.close()


class ApprovalMirror(Mirror):
    """`Mirror`, comparing the session's approvals with a fresh read too."""

    def compare(self, session: RunSession, when: str) -> None:
        super().compare(session, when)
        fresh = self.store.list_approvals(session.run_id, cap=None)
        assert repr(session.approvals) == repr(fresh), f"approvals differ {when}"


@pytest.mark.parametrize("let_go", [False, True], ids=["held", "let-go"])
def test_pauses_a_resume_and_an_expiry_keep_the_sessions_approvals_equal_to_their_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, let_go: bool
) -> None:
    """The session keeps the approval each pause or expiry wrote, never re-reading them."""
    if let_go:  # only the newest step held: the others read back (decision 0098)
        monkeypatch.setattr(history, "HELD_BYTES", 0)
        monkeypatch.setattr(history, "MIN_HELD", 1)
    store = agentrt.open_store(tmp_path / "runs.db")
    mirror = ApprovalMirror(store)
    clock = FakeClock()
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION, result={"pushed": True})
    config: dict[str, Any] = {
        "store": store,
        "policy": agentrt.default_policy(),
        "tools": [push],
        "now": clock,
        "new_id": Ids(),
        "probe": mirror,
    }
    driver = agentrt.Driver(
        agent=ScriptedAgent(
            [Decision.tool_call("push", {"x": 1}), Decision.tool_call("push", {"x": 2})]
        ),
        **config,
    )
    limits = agentrt.Limits(approval_ttl=timedelta(minutes=1))
    run = driver.start_sync("push twice", limits=limits)
    (first,) = store.pending_approvals(run.id)
    driver.approve(run.id, first.id, by="ops")
    run = driver.resume_sync(run.id)  # runs x=1, then pauses again on x=2
    assert run.status == "WAITING_FOR_APPROVAL"
    assert "run.paused" in mirror.points and "run.resumed" in mirror.points
    assert mirror.session is not None and len(mirror.session.approvals) == 2
    mirror.check_final(run)
    clock.advance(timedelta(minutes=2))  # the second approval expires undecided
    session, verdict = agentrt.Gate(**config).attach_sync(run.id)
    assert verdict is not None and verdict.run.reason == "approval_expired"
    mirror.compare(session._rs, "after the expiry")
    assert [a.status for a in session._rs.approvals] == ["approved", "expired"]
    session.close_sync()
    store.close()


def _waiting_and_approved(tmp_path: Path, name: str) -> tuple[dict[str, Any], str, RecordingTool]:
    """A run waiting on an approved push, its step's stored decision made unreadable."""
    path = tmp_path / f"{name}.db"
    store = agentrt.open_store(path)
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION, result={"pushed": True})
    config: dict[str, Any] = {
        "store": store,
        "policy": agentrt.default_policy(),
        "tools": [push],
        "now": FakeClock(),
        "new_id": Ids(name),
    }
    driver = agentrt.Driver(agent=ScriptedAgent([Decision.tool_call("push", {"x": 1})]), **config)
    run = driver.start_sync("push once")
    (approval,) = store.pending_approvals(run.id)
    driver.approve(run.id, approval.id, by="ops")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        changed = conn.execute(
            "UPDATE steps SET decision_json = '{not json' WHERE run_id = ?", (run.id,)
        ).rowcount
        assert changed == 1
    finally:
        conn.close()
    return config, run.id, push


def test_a_waiting_run_whose_stored_request_will_not_decode_ends_with_the_session_equal_to_its_rows(
    tmp_path: Path,
) -> None:
    """The failed run is settled on the session that attach built: its copy is the rows,
    and the ended verdict carries the step's `invalid_decision` observation."""
    config, run_id, push = _waiting_and_approved(tmp_path, "a")
    store = config["store"]
    mirror = ApprovalMirror(store)
    session, verdict = agentrt.Gate(**config).attach_sync(run_id)
    assert verdict is not None and verdict.outcome == "ended"
    assert (verdict.run.status, verdict.run.reason) == ("FAILED", "internal_error")
    assert verdict.observation is not None and verdict.observation.kind == "invalid_decision"
    assert verdict.observation.content["error"].startswith(
        "the run's record cannot be read back (decision_json: "
    )
    assert session.done
    mirror.compare(session._rs, "after the failed attach")
    assert [s.status for s in session._rs.steps] == ["failed"]
    assert push.calls == []
    events = [e.type for e in store.list_events(run_id, cap=None)]
    assert events[-2:] == ["step.failed", "run.finished"]
    session.close_sync()

    config, run_id, push = _waiting_and_approved(tmp_path, "b")
    store = config["store"]
    driver = agentrt.Driver(agent=ScriptedAgent([]), **config)
    run = driver.resume_sync(run_id)
    assert (run.status, run.reason) == ("FAILED", "internal_error")
    assert repr(run) == repr(store.get_run(run_id))
    assert push.calls == []
    (step,) = store.list_steps(run_id, cap=None)
    assert step.status == "failed" and step.observation is not None
    assert step.observation.kind == "invalid_decision"
    store.close()


def test_a_charge_made_elsewhere_under_the_lease_reaches_the_copy_at_the_next_claim(
    tmp_path: Path,
) -> None:
    """The one write another process makes to a run it does not hold: an earlier holder's
    late model reply, charged beyond its estimate while this process holds the lease. The
    next step's claim reads the run with its lock, and the copy learns it once that commit
    is durable (decision 0128): the agent's next input, the limits and the run returned
    count it."""
    path = tmp_path / "runs.db"
    store = agentrt.open_store(path)
    seen: list[tuple[int, int]] = []

    def charge_elsewhere(call: ToolCall) -> ToolResult:
        with agentrt.open_store(path) as other, other.transaction() as tx:
            tx.charge_run(call.run_id, Usage(input_tokens=7), 5)
        return ToolResult({"charged": True}, "charged")

    class Watching:
        def decide(self, input: agentrt.StepInput) -> Decision:
            seen.append((input.run.input_tokens, input.run.estimated_cost_micros))
            if len(input.steps) == 1:
                return Decision.tool_call("charge", {"x": 0})
            if len(input.steps) < 4:
                return Decision.tool_call("read", {"x": len(input.steps)})
            return Decision.complete({"done": True})

    driver = agentrt.Driver(
        store=store,
        agent=Watching(),
        policy=agentrt.default_policy(),
        tools=[
            RecordingTool("charge", SideEffect.READ_ONLY, result=charge_elsewhere),
            RecordingTool("read", SideEffect.READ_ONLY),
        ],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("count a charge made elsewhere")
    # Step 1 decides before its claim commits; step 2 decides on what that claim read.
    assert seen == [(0, 0), (0, 0), (7, 5), (7, 5)]
    assert run.status == "COMPLETED"
    assert (run.input_tokens, run.estimated_cost_micros) == (7, 5)
    assert repr(run) == repr(store.get_run(run.id))
    store.close()
