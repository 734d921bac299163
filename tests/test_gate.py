"""The Gate: the runtime's controls for a loop the consumer owns (issue 10, Part 2).

Each invariant of `agentrt._gate` has a test named for it here; misuse is shown to
raise and to change no row and no event.

Every test that takes a store takes `any_store` and runs on SQLite and on PostgreSQL
(issue 21 item 5; decisions 0103, 0105): a Gate's loop, its misuse changing no row, a
cancel, an attach after an approval, a lease renewed while a session is open, a lost
lease (expired by its stored expiry: PostgreSQL judges it by the server's clock), a
sync twin, an error's reason, the agent's input, a limit.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import (
    Decision,
    Limits,
    StepStatus,
    Verdict,
    VerdictOutcome,
)
from agentrt._errors import StoreError
from conftest import FakeClock, Ids, RecordingTool, event_types
from support.approvals import approved_run
from support.gates import make_gate, open_step
from support.leases import expire_lease, wait_for_renewal
from support.models import TINY_REQUEST, Replies
from support.policies import FixedPolicy
from support.rows import snapshot
from support.tools import push_tool, read_tool, rm_tool

allow_all = FixedPolicy(agentrt.PolicyDecision.allow())


def test_a_gate_loop_reads_executes_and_completes_a_run(any_store: agentrt.Store) -> None:
    store = any_store
    read = read_tool()
    push = push_tool()
    rm = rm_tool()
    gate = make_gate(store, read, push, rm)
    session = gate.begin_sync("tidy the repo")
    step = session.step_sync()
    assert step is not None and step.index == 0 and session.current() is step
    verdict = step.propose_sync(Decision.tool_call("read", {"x": 1}))
    assert isinstance(verdict, Verdict)
    assert verdict.outcome == VerdictOutcome.ALLOWED == "allowed"
    assert verdict.request is not None and verdict.request.args == {"x": 1}
    assert verdict.observation is None and verdict.approval is None
    observation = step.execute_sync()
    assert observation.kind == "tool_result" and observation.content == {"files": ["a.txt"]}
    assert session.current() is None
    last = session.step_sync()
    assert last is not None
    ended = last.propose_sync(Decision.complete({"done": True}))
    assert ended.outcome == VerdictOutcome.ENDED
    assert session.done and session.run.status == "COMPLETED"
    assert store.get_run(session.run.id).result == {"done": True}
    assert len(read.calls) == 1
    assert store.lease(session.run.id).owner == ""
    session.close_sync()


def test_the_consumer_never_runs_the_tool_itself_execute_runs_it_once(
    any_store: agentrt.Store, database: str
) -> None:
    store, db_path = any_store, database
    read = read_tool()
    session, step = open_step(make_gate(store, read), "read it")
    step.propose_sync(Decision.tool_call("read", {"x": 1}))
    assert read.calls == []  # allowed is not run
    step.execute_sync()
    assert len(read.calls) == 1
    before = snapshot(db_path)
    with pytest.raises(agentrt.RunStateError, match="executed already"):
        step.execute_sync()
    assert len(read.calls) == 1
    assert snapshot(db_path) == before
    session.close_sync()


def test_close_gives_the_lease_back_even_when_the_open_step_cannot_be_recorded(
    any_store: agentrt.Store, caplog: pytest.LogCaptureFixture
) -> None:
    # Decision 0088: close() commits an open step's claim (and decision) first; if that
    # fails, the step is left unrecorded, as a death before its first commit leaves it,
    # and the lease is released all the same.
    store = any_store
    session, _step = open_step(make_gate(store, read_tool()), "read it")
    run_id = session.run.id

    async def refused(commit: Any) -> None:
        raise StoreError("the disk is full")

    session._rs.commit_deferred = refused  # type: ignore[method-assign]
    session.close_sync()
    assert store.lease(run_id).owner == ""
    assert store.list_steps(run_id) == []
    assert "could not record the open step" in caplog.text


def test_an_allowed_verdict_writes_nothing_of_its_step_until_execute_commits_it_whole(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    # Decision 0088: the step's claim and decision are kept in memory and commit with
    # the policy's verdict and `step.tool_started`, in one transaction, before the tool.
    read = read_tool()
    session, step = open_step(make_gate(store, read), "read it")
    verdict = step.propose_sync(Decision.tool_call("read", {"x": 1}))
    assert verdict.outcome == "allowed"
    run_id = session.run.id
    assert event_types(store, run_id) == ["run.created", "run.started"]
    assert store.list_steps(run_id) == []
    assert store.get_run(run_id).step_count == 0
    step.execute_sync()
    assert event_types(store, run_id) == [
        "run.created",
        "run.started",
        "step.started",
        "step.decided",
        "step.policy",
        "step.tool_started",
        "step.tool_finished",
    ]
    assert [s.status for s in store.list_steps(run_id)] == ["done"]
    session.close_sync()


def test_a_session_abandoned_after_an_allowed_verdict_leaves_the_step_never_run(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    push = push_tool()
    clock = FakeClock()
    session, step = open_step(make_gate(store, push, clock=clock, policy=allow_all), "push it")
    assert step.propose_sync(Decision.tool_call("push", {"x": 1})).outcome == "allowed"
    session.close_sync()
    run_id = session.run.id
    # `close` released the lease: a new gate attaches at once; the step was deciding,
    # so it continues (no interrupted_side_effect), and the call never ran.
    again, verdict = make_gate(store, push, clock=clock, policy=allow_all).attach_sync(run_id)
    assert verdict is None
    assert again.run.status == "RUNNING" and again.current() is None
    (first,) = store.list_steps(run_id)
    assert first.status == "interrupted"
    assert first.observation is not None
    assert first.observation.content["previous_status"] == "deciding"  # type: ignore[index]
    assert store.pending_approvals(run_id) == []
    assert push.calls == []
    again.close_sync()


def test_a_session_abandoned_after_an_allowed_verdict_is_judged_again_by_driver_resume(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    read = read_tool()
    session, step = open_step(make_gate(store, read), "read it")
    assert step.propose_sync(Decision.tool_call("read", {"x": 1})).outcome == "allowed"
    session.close_sync()
    driver = agentrt.Driver(
        store=store,
        agent=agentrt.scripted.ScriptedAgent(
            [Decision.tool_call("read", {"x": 2}), Decision.complete("ok")]
        ),
        policy=agentrt.default_policy(),
        tools=[read],
        now=FakeClock(),
        new_id=Ids("b"),
    )
    run = driver.resume_sync(session.run.id)
    assert run.status == "COMPLETED"
    assert [c.args for c in read.calls] == [{"x": 2}]  # the abandoned call never ran
    assert store.pending_approvals(run.id) == []


def test_one_session_per_run(any_store: agentrt.Store) -> None:
    store = any_store
    read = read_tool()
    gate = make_gate(store, read)
    session = gate.begin_sync("read it")
    run_id = session.run.id
    with pytest.raises(agentrt.RunStateError, match="live session"):
        gate.attach_sync(run_id)
    other = make_gate(store, read, ids=Ids("c"))
    with pytest.raises(agentrt.RunLeasedError):
        other.attach_sync(run_id)
    with pytest.raises(agentrt.RunStateError):
        other.begin_sync("again", run_id=run_id)
    session.close_sync()
    # Once closed, the run is free to be attached again.
    again, verdict = gate.attach_sync(run_id)
    assert verdict is None and again.run.status == "RUNNING"
    again.close_sync()


def test_misuse_a_second_open_step_raises_and_changes_nothing(
    any_store: agentrt.Store, database: str
) -> None:
    store, db_path = any_store, database
    read = read_tool()
    session, step = open_step(make_gate(store, read), "read it")
    before = snapshot(db_path)
    with pytest.raises(agentrt.RunStateError, match="still open"):
        session.step_sync()
    assert snapshot(db_path) == before
    step.propose_sync(Decision.tool_call("read", {"x": 1}))
    before = snapshot(db_path)
    with pytest.raises(agentrt.RunStateError, match="still open"):
        session.step_sync()  # allowed but not executed is still open
    assert snapshot(db_path) == before
    session.close_sync()


def test_misuse_execute_without_an_allowed_verdict_raises_and_changes_nothing(
    any_store: agentrt.Store, database: str
) -> None:
    store, db_path = any_store, database
    read = read_tool()
    rm = rm_tool()
    session, step = open_step(make_gate(store, read, rm), "clean up")
    before = snapshot(db_path)
    with pytest.raises(agentrt.RunStateError, match="not proposed"):
        step.execute_sync()
    assert snapshot(db_path) == before
    denied = step.propose_sync(Decision.tool_call("rm", {"x": 1}))
    assert denied.outcome == VerdictOutcome.DENIED
    assert denied.observation is not None and denied.observation.kind == "policy_denied"
    before = snapshot(db_path)
    with pytest.raises(agentrt.RunStateError, match="no allowed verdict"):
        step.execute_sync()
    assert snapshot(db_path) == before
    assert rm.calls == []
    session.close_sync()


def test_misuse_propose_twice_raises_and_changes_nothing(
    any_store: agentrt.Store, database: str
) -> None:
    store, db_path = any_store, database
    read = read_tool()
    session, step = open_step(make_gate(store, read), "read it")
    step.propose_sync(Decision.tool_call("read", {"x": 1}))
    before = snapshot(db_path)
    with pytest.raises(agentrt.RunStateError, match="propose once"):
        step.propose_sync(Decision.tool_call("read", {"x": 2}))
    assert snapshot(db_path) == before
    session.close_sync()


def test_misuse_any_call_after_close_raises_session_closed_and_changes_nothing(
    any_store: agentrt.Store, database: str
) -> None:
    store, db_path = any_store, database
    read = read_tool()
    session, step = open_step(make_gate(store, read), "read it")
    session.close_sync()
    before = snapshot(db_path)
    calls: list[Any] = [
        session.step_sync,
        session.input,
        lambda: step.propose_sync(Decision.tool_call("read", {"x": 1})),
        step.execute_sync,
        lambda: step.fail_sync(ValueError("x")),
    ]
    for call in calls:
        with pytest.raises(agentrt.SessionClosedError):
            call()
    assert snapshot(db_path) == before
    session.close_sync()  # closing twice is harmless


def test_misuse_a_call_after_the_run_ended_raises_run_state_error_and_changes_nothing(
    any_store: agentrt.Store, database: str
) -> None:
    store, db_path = any_store, database
    read = read_tool()
    session, step = open_step(make_gate(store, read), "finish")
    assert step.propose_sync(Decision.complete("ok")).outcome == "ended"
    before = snapshot(db_path)
    with pytest.raises(agentrt.RunStateError, match="COMPLETED"):
        session.step_sync()
    with pytest.raises(agentrt.RunStateError):
        step.propose_sync(Decision.complete("again"))
    with pytest.raises(agentrt.RunStateError):
        make_gate(store, read).attach_sync(session.run.id)
    assert snapshot(db_path) == before


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (agentrt.LimitExceeded("limit_model_calls", "too many calls"), "limit_model_calls"),
        (agentrt.ModelUnavailableError("the model is down"), "model_unavailable"),
        (ValueError("bad thought"), "agent_error"),
    ],
)
def test_fail_maps_an_error_to_the_reason_the_driver_would_record(
    any_store: agentrt.Store, error: BaseException, reason: str
) -> None:
    store = any_store
    read = read_tool()
    session, step = open_step(make_gate(store, read), "think")
    run = step.fail_sync(error)
    assert run.status == "FAILED" and run.reason == reason
    assert session.done
    (failed,) = store.list_steps(run.id)
    assert failed.status == "failed" and failed.observation is not None
    assert failed.observation.kind == "invalid_decision"


def test_a_limit_ends_the_run_and_step_returns_none(any_store: agentrt.Store) -> None:
    store = any_store
    read = read_tool()
    session = make_gate(store, read).begin_sync("read", limits=Limits(max_steps=1))
    step = session.step_sync()
    assert step is not None
    step.propose_sync(Decision.tool_call("read", {"x": 1}))
    step.execute_sync()
    assert session.step_sync() is None
    assert session.done and session.run.reason == "limit_steps"


def test_an_operator_cancel_ends_the_session_step_returns_none(
    any_store: agentrt.Store, database: str
) -> None:
    store, db_path = any_store, database
    read = read_tool()
    session = make_gate(store, read).begin_sync("read")
    agentrt.cancel(store, session.run.id, by="ops")
    before = snapshot(db_path)
    assert session.step_sync() is None
    assert (session.run.status, session.run.reason) == ("CANCELLED", "operator_cancelled")
    assert session.done
    assert snapshot(db_path) == before  # the session saw the cancel; it wrote nothing
    assert read.calls == []
    session.close_sync()


def test_execute_after_a_cancel_of_a_held_waiting_run_raises_and_writes_nothing(
    any_store: agentrt.Store, database: str
) -> None:
    store, db_path = any_store, database
    driver, run, push, _ = approved_run(store)
    gate = agentrt.Gate(store=store, policy=agentrt.default_policy(), tools=driver.tools)
    session, verdict = gate.attach_sync(run.id)
    assert verdict is not None and verdict.outcome == VerdictOutcome.ALLOWED
    agentrt.cancel(store, run.id, by="ops")
    before = snapshot(db_path)
    allowed = session.current()
    assert allowed is not None
    # Found at the write that would leave WAITING, as a running run's cancel is (0137).
    with pytest.raises(
        agentrt.RunStateError, match=f"^run {run.id} moved before the tool started; nothing ran$"
    ):
        allowed.execute_sync()
    assert session.run.status == "CANCELLED"
    assert snapshot(db_path) == before
    assert push.calls == []
    assert store.get_run(run.id).status == "CANCELLED"
    session.close_sync()


def _pause(store: agentrt.Store, push: RecordingTool, clock: FakeClock, **kw: Any) -> str:
    session = make_gate(store, push, clock=clock).begin_sync("push it", **kw)
    step = session.step_sync()
    assert step is not None
    verdict = step.propose_sync(Decision.tool_call("push", {"x": 1}))
    assert verdict.outcome == VerdictOutcome.PENDING
    assert verdict.approval is not None and verdict.approval.status == "pending"
    assert session.done and session.run.status == "WAITING_FOR_APPROVAL"
    assert store.lease(session.run.id).owner == ""
    session.close_sync()
    return session.run.id


def test_attach_to_an_approved_run_allows_the_open_step_and_execute_runs_it_once(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    push = push_tool()
    clock = FakeClock()
    run_id = _pause(store, push, clock)
    (pending,) = store.pending_approvals(run_id)
    with pytest.raises(agentrt.RunStateError, match="still pending"):
        make_gate(store, push, clock=clock).attach_sync(run_id)
    agentrt.approve(store, run_id, pending.id, by="alice")
    session, verdict = make_gate(store, push, clock=clock).attach_sync(run_id)
    assert verdict is not None and verdict.outcome == VerdictOutcome.ALLOWED
    assert verdict.request is not None and verdict.request.args == {"x": 1}
    # Nothing claims the tool started until execute: the run still waits.
    assert store.get_run(run_id).status == "WAITING_FOR_APPROVAL"
    assert "run.resumed" not in event_types(store, run_id)
    step = session.current()
    assert step is not None and step.index == 0
    observation = step.execute_sync()
    assert observation.kind == "tool_result" and len(push.calls) == 1
    assert event_types(store, run_id)[-4:] == [
        "run.resumed",
        "step.policy",
        "step.tool_started",
        "step.tool_finished",
    ]
    assert session.run.status == "RUNNING"
    session.close_sync()


def test_execute_rejudges_grant_ttl_for_a_step_that_attach_allowed(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    push = push_tool()
    clock = FakeClock()
    run_id = _pause(store, push, clock, limits=Limits(grant_ttl=timedelta(minutes=5)))
    (pending,) = store.pending_approvals(run_id)
    agentrt.Operator(store, now=clock).approve(run_id, pending.id, by="alice")
    session, verdict = make_gate(store, push, clock=clock).attach_sync(run_id)
    assert verdict is not None and verdict.outcome == "allowed"
    clock.advance(timedelta(minutes=6))  # the grant lapses between attach and execute
    step = session.current()
    assert step is not None
    observation = step.execute_sync()
    assert observation.kind == "policy_denied"
    assert push.calls == []
    run = store.get_run(run_id)
    assert run.status == "CANCELLED" and run.reason == "approval_expired"
    assert "step.tool_started" not in event_types(store, run_id)
    assert session.done


def test_attach_when_the_policy_now_denies_the_approved_request_is_denied(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    push = push_tool()
    clock = FakeClock()
    run_id = _pause(store, push, clock)
    (pending,) = store.pending_approvals(run_id)
    agentrt.approve(store, run_id, pending.id, by="alice")
    deny_all = FixedPolicy(agentrt.PolicyDecision.deny("no pushes today"))
    session, verdict = make_gate(store, push, clock=clock, policy=deny_all).attach_sync(run_id)
    assert verdict is not None and verdict.outcome == VerdictOutcome.DENIED
    assert verdict.observation is not None and verdict.observation.kind == "policy_denied"
    assert session.current() is None and session.run.status == "RUNNING"
    assert push.calls == []
    session.close_sync()


def test_the_lease_is_renewed_while_the_session_is_open(any_store: agentrt.Store) -> None:
    store = any_store
    read = read_tool()
    session = make_gate(store, read, lease_ttl=timedelta(milliseconds=300)).begin_sync("wait")
    first = store.lease(session.run.id).expires_at
    assert first is not None
    # Waits on the heartbeat's write (a third of the lease on), not on a fixed time.
    later = wait_for_renewal(lambda: store.lease(session.run.id).expires_at, first)
    assert later > first
    session.close_sync()
    assert store.lease(session.run.id).owner == ""


def test_a_lost_lease_raises_lease_lost_before_any_tool_starts(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    read = read_tool()
    gate = make_gate(store, read, lease_ttl=timedelta(hours=1))
    session, step = open_step(gate, "read it")
    assert step.propose_sync(Decision.tool_call("read", {"x": 1})).outcome == "allowed"
    # The lease lapsed (an hour long: the heartbeat never renewed it), on the clock that
    # judges it: the wall's on SQLite, the server's on PostgreSQL.
    expire_lease(database, session.run.id, holder_elsewhere=False)
    with pytest.raises(agentrt.LeaseLostError):
        step.execute_sync()
    assert read.calls == []
    assert "step.tool_started" not in event_types(store, session.run.id)
    session.close_sync()


def test_after_an_execute_refused_for_a_lapsed_lease_the_session_takes_no_more_steps(
    any_store: agentrt.Store, database: str
) -> None:
    """The loop stopped at `LeaseLostError` (store.md, recovery: a loop that loses its lease
    stops before its next side effect). A lapse nobody took over still lets the session's
    plain writes through, so a `step()` accepted here once committed the stopped step's
    kept claim and decision in front of its own: a run that went on to its end kept step
    0 `deciding` for good. Now `step()` is refused, writing nothing; `close` leaves step 0
    `deciding` and the next `attach` interrupts it and goes on, the call never made."""
    store = any_store
    read = read_tool()
    gate = make_gate(store, read, lease_ttl=timedelta(hours=1))
    session, step = open_step(gate, "read it")
    run_id = session.run.id
    assert step.propose_sync(Decision.tool_call("read", {"x": 1})).outcome == "allowed"
    expire_lease(database, run_id, holder_elsewhere=False)
    with pytest.raises(agentrt.LeaseLostError):
        step.execute_sync()
    with pytest.raises(agentrt.LeaseLostError) as refused:
        session.step_sync()
    assert str(refused.value) == f"the lease on run {run_id} was lost; the loop stopped"
    assert event_types(store, run_id) == ["run.created", "run.started"]
    session.close_sync()
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, StepStatus.DECIDING)]
    attached, verdict = make_gate(store, read, ids=Ids("c")).attach_sync(run_id)
    assert verdict is None
    again = attached.step_sync()
    assert again is not None and again.index == 1
    assert again.propose_sync(Decision.complete("done")).outcome == "ended"
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [
        (0, StepStatus.INTERRUPTED),
        (1, StepStatus.DONE),
    ]
    assert read.calls == []
    attached.close_sync()


def test_a_sync_twin_inside_a_running_loop_raises(any_store: agentrt.Store) -> None:
    store = any_store
    read = read_tool()
    gate = make_gate(store, read)

    async def inside() -> None:
        with pytest.raises(RuntimeError, match="inside a running event loop"):
            gate.begin_sync("x")
        session = await gate.begin("x")
        with pytest.raises(RuntimeError, match="inside a running event loop"):
            session.step_sync()
        await session.close()

    asyncio.run(inside())


def test_input_is_what_the_driver_shows_its_agent_and_reads_no_clock(
    any_store: agentrt.Store, tmp_path: Path
) -> None:
    store = any_store
    read = read_tool()
    shown: list[agentrt.StepInput] = []

    def agent(step_input: agentrt.StepInput) -> Decision:
        shown.append(step_input)
        return Decision.complete("ok")

    other = agentrt.open_store(tmp_path / "driver.db")
    try:
        agentrt.Driver(
            store=other,
            agent=agent,
            policy=agentrt.default_policy(),
            tools=[read],
            now=FakeClock(),
            new_id=Ids(),
        ).start_sync("look")
    finally:
        other.close()
    clock = FakeClock()
    session, step = open_step(make_gate(store, read, clock=clock), "look")
    readings = clock.readings
    given = session.input()
    assert clock.readings == readings
    assert given.model is None and step.model is None
    # The same run but for the kind of program that began it (decision 0049).
    assert (shown[0].run.origin, given.run.origin) == ("driver", "gate")
    assert dataclasses.replace(given.run, origin="driver") == shown[0].run
    assert given.steps == shown[0].steps
    assert given.tools == shown[0].tools
    session.close_sync()


def test_verdict_and_outcome_are_exported_and_frozen() -> None:
    assert {o.value for o in VerdictOutcome} == {"allowed", "denied", "pending", "ended"}
    assert agentrt.Verdict is Verdict
    import dataclasses

    assert dataclasses.fields(Verdict)[0].name == "outcome"
    with pytest.raises(dataclasses.FrozenInstanceError):
        Verdict(VerdictOutcome.ENDED, None, None, None, None).outcome = "x"  # type: ignore[arg-type,misc]


def test_with_a_model_the_open_step_and_its_input_carry_the_accounting_caller(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    model = Replies()
    session = make_gate(store, read_tool(), model=model).begin_sync("ask")
    step = session.step_sync()
    assert step is not None and step.model is not None
    assert session.input().model is step.model

    async def ask() -> None:
        assert step.model is not None
        await step.model.generate(TINY_REQUEST)

    agentrt._driver.run_sync(ask())
    (call,) = store.list_model_calls(session.run.id)
    assert call.step_id == step.id and call.model == "local:tiny"
    assert step.propose_sync(Decision.complete("ok")).outcome == "ended"
    assert store.get_run(session.run.id).model_calls == 1
