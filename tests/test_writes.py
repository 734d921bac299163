"""The named writes of the store layer (`agentrt._store.sqlite._writes`).

Each is a compare-and-set on the statuses it may leave: when the row has moved
it raises `RunStateError` and, the transaction rolling back, nothing it wrote
stays. Each returns what it wrote, equal to a fresh read of the rows.

Every test runs on SQLite and on PostgreSQL (the `database` fixture; `store` here is
its store), the rows read behind the store's back through `support.rows`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt._canonical import JSONFloat, JSONInt
from agentrt._clock import parse_time
from agentrt._decisions import record
from agentrt._errors import RunStateError
from agentrt._model import Usage
from agentrt._records import ApprovalStatus, Limits, Observation, PolicyDecision, StepStatus
from agentrt._store import Tx
from agentrt._store._records import tool_start, written_observation
from conftest import EPOCH, Ids
from support.leases import judged_lease
from support.rows import query, snapshot

OWNER = "writer/000000000000"


@pytest.fixture
def store(any_store: agentrt.Store) -> agentrt.Store:
    """The store on each backend (`any_store`)."""
    return any_store


def new_run(store: agentrt.Store, run_id: str = "r1") -> agentrt.Run:
    with store.transaction() as tx:
        return tx.create_run(
            run_id,
            "goal",
            Limits(),
            owner=OWNER,
            lease_expires_at=parse_time("2999-01-01T00:00:00.000000Z"),
            holder="{}",
            specs=[],
            now=EPOCH,
        )


def test_create_run_returns_the_run_as_a_fresh_read_gives_it(store: agentrt.Store) -> None:
    created = new_run(store)
    assert repr(created) == repr(store.get_run("r1"))
    assert created.status == "RUNNING"


def test_create_run_refuses_an_id_in_use_and_writes_nothing(
    store: agentrt.Store, database: str
) -> None:
    new_run(store)
    before = snapshot(database)
    with pytest.raises(RunStateError):
        new_run(store)
    assert snapshot(database) == before


def test_claim_step_returns_the_step_as_a_fresh_read_gives_it(store: agentrt.Store) -> None:
    new_run(store)
    with store.transaction() as tx:
        step = tx.claim_step("r1", 0, OWNER, Ids("s"), EPOCH, epoch=1)
    assert repr(step) == repr(store.list_steps("r1")[0])
    assert store.get_run("r1").step_count == 1


def test_claim_next_step_returns_the_run_and_the_step_as_a_fresh_read_gives_them(
    store: agentrt.Store, database: str
) -> None:
    run = new_run(store)
    with store.transaction() as tx:
        claimed = tx.claim_next_step(run, OWNER, Ids("s"), EPOCH, epoch=1)
    assert repr(claimed.run) == repr(store.get_run("r1"))
    assert repr(claimed.step) == repr(store.list_steps("r1")[0])
    assert (claimed.run.step_count, claimed.step.index) == (1, 0)
    assert event_types(store)[-1] == "step.started"
    # The copy it was given is stale now (step_count 0): the claim is refused.
    refused_and_nothing_written(
        database,
        RunStateError,
        lambda tx: tx.claim_next_step(run, OWNER, Ids("t"), EPOCH, epoch=1),
        store,
    )


@pytest.mark.parametrize("moved", ["step_count", "owner"])
def test_claim_step_on_a_run_that_moved_raises_and_writes_nothing(
    store: agentrt.Store, database: str, moved: str
) -> None:
    new_run(store)
    index, owner = (1, OWNER) if moved == "step_count" else (0, "someone/else")
    before = snapshot(database)
    with pytest.raises(RunStateError), store.transaction() as tx:
        tx.claim_step("r1", index, owner, Ids("s"), EPOCH, epoch=1)
    assert snapshot(database) == before


def test_finish_tool_of_a_step_that_is_not_executing_raises_and_writes_nothing(
    store: agentrt.Store, database: str
) -> None:
    new_run(store)
    with store.transaction() as tx:
        step = tx.claim_step("r1", 0, OWNER, Ids("s"), EPOCH, epoch=1)
    before = snapshot(database)
    observation = Observation.tool_result({"ok": True}, "ok")
    with pytest.raises(RunStateError), store.transaction() as tx:
        tx.finish_tool(
            step,
            StepStatus.DONE,
            written_observation(observation),
            {},
            failed_event=False,
            now=EPOCH,
        )
    assert snapshot(database) == before


def test_an_approval_decided_once_cannot_be_decided_again(
    store: agentrt.Store, database: str
) -> None:
    new_run(store)
    with store.transaction() as tx:
        step = tx.claim_step("r1", 0, OWNER, Ids("s"), EPOCH, epoch=1)
        payload = {"decision": {}, "spec_hash": "h", "policy_id": "p", "view": {}}
        tx.pause_for_approval(
            "r1",
            step.id,
            new_id=Ids("ap"),
            decision=PolicyDecision.require_approval("remote_change", "why"),
            request={"x": 1},
            digest="d" * 64,
            expires_at=None,
            payload=payload,
            active_ms=0,
            from_step=(StepStatus.DECIDING,),
            from_run="RUNNING",
            now=EPOCH,
        )
        (approval,) = tx.approvals_of_run("r1")
    with store.transaction() as tx:
        decided = tx.decide_approval(approval, ApprovalStatus.APPROVED, "alice", "", EPOCH)
    assert repr(decided) == repr(store.list_approvals("r1")[0])
    assert decided.status == "approved"
    before = snapshot(database)
    with pytest.raises(RunStateError), store.transaction() as tx:
        tx.decide_approval(approval, ApprovalStatus.REJECTED, "bob", "", EPOCH)
    assert snapshot(database) == before


def test_cancel_run_fails_the_open_step_and_returns_the_run_as_stored(
    store: agentrt.Store,
) -> None:
    new_run(store)
    with store.transaction() as tx:
        step = tx.claim_step("r1", 0, OWNER, Ids("s"), EPOCH, epoch=1)
    with store.transaction() as tx:
        run = tx.cancel_run("r1", "alice", "stop", EPOCH)
    assert repr(run) == repr(store.get_run("r1"))
    assert (run.status, run.reason, run.reason_detail) == (
        "CANCELLED",
        "operator_cancelled",
        "stop",
    )
    (stored,) = store.list_steps("r1")
    assert (stored.id, stored.status) == (step.id, "failed")
    assert stored.observation == Observation.cancelled("alice", "stop")


@pytest.mark.parametrize("write", ["leave_running", "add_active_time"])
def test_the_run_writes_after_a_tool_refuse_a_lease_held_by_someone_else_and_write_nothing(
    store: agentrt.Store, database: str, write: str
) -> None:
    new_run(store)
    before = snapshot(database)
    with pytest.raises(agentrt.LeaseLostError), store.transaction() as tx:
        if write == "leave_running":
            tx.leave_running("r1", "someone/else", epoch=1, active_ms_add=5)
        else:
            tx.add_active_time(tx.run_record("r1"), "someone/else", 5, epoch=1)
    assert snapshot(database) == before
    with store.transaction() as tx:  # the owner's own write goes through
        if write == "leave_running":
            tx.leave_running("r1", OWNER, epoch=1, active_ms_add=5)
        else:
            tx.add_active_time(tx.run_record("r1"), OWNER, 5, epoch=1)
    run = store.get_run("r1")
    assert run.active_time.total_seconds() == 0.005
    assert (store.lease("r1").owner == "") == (write == "leave_running")


# --- the step machine's named transitions (decision 0036) ------------------------------
#
# Each returns the records as written (equal, to the repr, to a fresh read), appends its
# events in the caller's transaction (a transaction that rolls back leaves neither the
# rows nor the events), and refuses a stale compare-and-set with the error it always
# raised, writing nothing.

LATER = "2999-01-01T00:00:00.000000Z"
LATER_AT = parse_time(LATER)
PAYLOAD = {"decision": {"outcome": "deny"}, "spec_hash": "h", "policy_id": "p", "view": {}}


def event_types(store: agentrt.Store, run_id: str = "r1") -> list[str]:
    return [e.type for e in store.list_events(run_id)]


def deciding_step(store: agentrt.Store) -> agentrt.Step:
    new_run(store)
    with store.transaction() as tx:
        return tx.claim_step("r1", 0, OWNER, Ids("s"), EPOCH, epoch=1)


def waiting_run(store: agentrt.Store, *, approve: bool = False) -> agentrt.Approval:
    """A run WAITING on a pending (or approved) approval of its step `push`."""
    step = deciding_step(store)
    recorded = record(agentrt.Decision.tool_call("push", {"x": 1}))
    with store.transaction() as tx:
        tx.record_decision(step, recorded.text, recorded.decision, EPOCH)
        paused = tx.pause_for_approval(
            "r1",
            step.id,
            new_id=Ids("ap"),
            decision=PolicyDecision.require_approval("remote_change", "why"),
            request={"spec": {"name": "push"}, "args": {"x": 1}},
            digest="d" * 64,
            expires_at=None,
            payload=PAYLOAD,
            active_ms=0,
            from_step=(StepStatus.DECIDING,),
            from_run="RUNNING",
            now=EPOCH,
        )
    if not approve:
        return paused.approval
    with store.transaction() as tx:
        return tx.decide_approval(paused.approval, ApprovalStatus.APPROVED, "alice", "", EPOCH)


def refused_and_nothing_written(
    database: str, error: type[BaseException], write: Any, store: agentrt.Store
) -> None:
    before = snapshot(database)
    with pytest.raises(error), store.transaction() as tx:
        write(tx)
    assert snapshot(database) == before


def test_the_hot_writes_of_a_step_return_the_step_as_a_fresh_read_gives_it(
    store: agentrt.Store,
) -> None:
    step = deciding_step(store)
    recorded = record(agentrt.Decision.tool_call("read", {"n": JSONFloat("1e1"), "a": 2.50}))
    with store.transaction() as tx:
        decided = tx.record_decision(step, recorded.text, recorded.decision, EPOCH)
    assert repr(decided) == repr(store.list_steps("r1")[0])
    policy = {
        "decision": {"outcome": "allow", "reason": "", "capability": {"z": 1, "a": 2}},
        "spec_hash": "h",
        "policy_id": "p",
        "view": {},
    }
    with store.transaction() as tx:
        started = tx.start_tool(
            decided,
            tool_start("read", {"n": 1}, policy),
            from_statuses=(StepStatus.DECIDING,),
            now=EPOCH,
        )
    assert repr(started) == repr(store.list_steps("r1")[0])
    observation = Observation.tool_result({"lines": [JSONFloat("2.50"), 10**30]}, "ok")
    with store.transaction() as tx:
        finished = tx.finish_tool(
            started,
            StepStatus.DONE,
            written_observation(observation),
            {},
            failed_event=False,
            now=EPOCH,
        )
        run = tx.add_active_time(tx.run_record("r1"), OWNER, 7, epoch=1)
    assert repr(finished) == repr(store.list_steps("r1")[0])
    assert repr(run) == repr(store.get_run("r1"))
    assert event_types(store)[-3:] == ["step.policy", "step.tool_started", "step.tool_finished"]


def test_pause_for_approval_returns_the_run_the_step_and_the_approval_as_written(
    store: agentrt.Store,
) -> None:
    approval = waiting_run(store)
    assert repr(approval) == repr(store.list_approvals("r1")[0])
    assert store.get_run("r1").status == "WAITING_FOR_APPROVAL"


def test_end_run_returns_the_run_and_refuses_a_run_that_is_no_longer_running(
    store: agentrt.Store, database: str
) -> None:
    new_run(store)
    with store.transaction() as tx:
        run = tx.end_run("r1", "COMPLETED", "goal_completed", "", result={"ok": 1}, now=EPOCH)
    assert repr(run) == repr(store.get_run("r1"))
    assert event_types(store)[-1] == "run.finished"
    refused_and_nothing_written(
        database,
        RunStateError,
        lambda tx: tx.end_run("r1", "FAILED", "agent_error", "x", now=EPOCH),
        store,
    )


@pytest.mark.parametrize("loop", [None, {"tool": "read", "repeats": 3}])
def test_fail_at_limit_appends_its_limit_event_and_ends_the_run_in_one_transaction(
    store: agentrt.Store, database: str, loop: Any
) -> None:
    new_run(store)
    with store.transaction() as tx:
        run = tx.fail_at_limit(
            "r1", reason="limit_steps", detail="3 steps", loop=loop, active_ms_add=5, now=EPOCH
        )
    assert repr(run) == repr(store.get_run("r1"))
    assert (run.status, run.reason, run.reason_detail) == ("FAILED", "limit_steps", "3 steps")
    first = "loop.detected" if loop else "limit.exceeded"
    events = store.list_events("r1")
    assert [e.type for e in events[-2:]] == [first, "run.finished"]
    assert events[-2].payload == (loop or {"reason": "limit_steps", "detail": "3 steps"})
    # The run has ended: a second limit is refused, and its event is not left behind.
    refused_and_nothing_written(
        database,
        RunStateError,
        lambda tx: tx.fail_at_limit(
            "r1", reason="limit_steps", detail="again", active_ms_add=0, now=EPOCH
        ),
        store,
    )


def test_end_with_step_settles_the_deciding_step_and_the_run_together(
    store: agentrt.Store, database: str
) -> None:
    step = deciding_step(store)
    with store.transaction() as tx:
        settled = tx.end_with_step(
            "r1",
            step.id,
            status="COMPLETED",
            reason="goal_completed",
            detail="",
            step_status=StepStatus.DONE,
            result={"answer": JSONInt("42")},
            active_ms_add=3,
            now=EPOCH,
        )
    assert repr(settled.run) == repr(store.get_run("r1"))
    assert repr(settled.step) == repr(store.list_steps("r1")[0])
    assert (settled.step.status, settled.run.result) == ("done", {"answer": 42})
    assert event_types(store)[-1] == "run.finished"
    refused_and_nothing_written(
        database,
        RunStateError,
        lambda tx: tx.end_with_step(
            "r1",
            step.id,
            status="FAILED",
            reason="agent_error",
            detail="x",
            observation=Observation.invalid_decision("x"),
            policy=PAYLOAD,
            now=EPOCH,
        ),
        store,
    )


def test_end_waiting_fails_the_awaiting_step_and_ends_the_run_from_waiting(
    store: agentrt.Store, database: str
) -> None:
    approval = waiting_run(store)
    observation = Observation.denied("push", "aborted")
    with store.transaction() as tx:
        settled = tx.end_waiting(
            "r1",
            approval.step_id,
            observation,
            status="FAILED",
            reason="policy_abort",
            detail="aborted",
            policy=PAYLOAD,
            now=EPOCH,
        )
    assert repr(settled.run) == repr(store.get_run("r1"))
    assert repr(settled.step) == repr(store.list_steps("r1")[0])
    assert (settled.run.status, settled.step.status) == ("FAILED", "failed")
    assert settled.step.observation == observation
    assert event_types(store)[-3:] == ["step.policy", "step.failed", "run.finished"]
    refused_and_nothing_written(
        database,
        RunStateError,
        lambda tx: tx.end_waiting(
            "r1",
            approval.step_id,
            observation,
            status="FAILED",
            reason="policy_abort",
            detail="again",
            now=EPOCH,
        ),
        store,
    )


def test_end_waiting_refuses_a_run_that_is_running(store: agentrt.Store, database: str) -> None:
    step = deciding_step(store)
    refused_and_nothing_written(
        database,
        RunStateError,
        lambda tx: tx.end_waiting(
            "r1",
            step.id,
            Observation.denied("push", "x"),
            status="FAILED",
            reason="policy_abort",
            detail="x",
            policy=PAYLOAD,
            now=EPOCH,
        ),
        store,
    )


def test_expire_waiting_expires_the_approval_and_cancels_the_run_approval_expired(
    store: agentrt.Store, database: str
) -> None:
    approval = waiting_run(store)
    with store.transaction() as tx:
        settled, expired = tx.expire_waiting(
            "r1", approval.step_id, approval, tool="push", why="too late", now=EPOCH
        )
    assert repr(settled.run) == repr(store.get_run("r1"))
    assert repr(settled.step) == repr(store.list_steps("r1")[0])
    assert repr(expired) == repr(store.list_approvals("r1")[0])
    assert (expired.status, settled.run.status, settled.run.reason) == (
        "expired",
        "CANCELLED",
        "approval_expired",
    )
    assert settled.step.observation == Observation.denied("push", "too late")
    refused_and_nothing_written(
        database,
        RunStateError,
        lambda tx: tx.expire_waiting(
            "r1", approval.step_id, approval, tool="push", why="again", now=EPOCH
        ),
        store,
    )


def test_reject_approval_decides_it_fails_the_step_and_cancels_the_run(
    store: agentrt.Store, database: str
) -> None:
    approval = waiting_run(store)
    with store.transaction() as tx:
        rejected, run = tx.reject_approval(approval, "bob", "no", EPOCH)
    assert repr(rejected) == repr(store.list_approvals("r1")[0])
    assert repr(run) == repr(store.get_run("r1"))
    assert (rejected.status, run.status, run.reason) == (
        "rejected",
        "CANCELLED",
        "approval_rejected",
    )
    assert store.list_steps("r1")[0].observation == Observation.rejected("push", "no")
    assert event_types(store)[-3:] == ["approval.decided", "step.failed", "run.finished"]
    refused_and_nothing_written(
        database,
        agentrt.ApprovalChangedError,
        lambda tx: tx.reject_approval(approval, "bob", "again", EPOCH),
        store,
    )


def test_leave_waiting_takes_the_run_back_under_a_new_lease_once(
    store: agentrt.Store, database: str
) -> None:
    approval = waiting_run(store, approve=True)
    hold = hold_by("second/1", previous=("", ""))
    # Only the run's holder leaves waiting: before the hold, nobody does.
    refused_and_nothing_written(
        database,
        RunStateError,
        lambda tx: tx.leave_waiting(
            "r1",
            approval.id,
            owner="second/1",
            epoch=1,
            expires_at=LATER_AT,
            holder="{}",
            now=EPOCH,
        ),
        store,
    )
    with store.transaction() as tx:
        held = hold(tx)
        leased = tx.leave_waiting(
            "r1",
            approval.id,
            owner="second/1",
            epoch=held.epoch,
            expires_at=LATER_AT,
            holder="{}",
            now=EPOCH,
        )
    assert repr(leased.run) == repr(store.get_run("r1"))
    assert (leased.run.status, leased.epoch) == ("RUNNING", 2)
    assert (store.lease("r1").owner, store.lease("r1").epoch) == ("second/1", 2)
    last = store.list_events("r1")[-1]
    assert (last.type, last.payload) == ("run.resumed", {"approval_id": approval.id})
    # Of two resumes exactly one leaves waiting: the second is refused, writing nothing.
    refused_and_nothing_written(
        database,
        RunStateError,
        lambda tx: tx.leave_waiting(
            "r1", approval.id, owner="third/1", epoch=2, expires_at=LATER_AT, holder="{}", now=EPOCH
        ),
        store,
    )


def hold_by(owner: str, *, previous: tuple[str, str]) -> Any:
    return lambda tx: tx.hold_waiting(
        "r1",
        owner=owner,
        expires_at=LATER_AT,
        holder="{}",
        previous=judged_lease("r1", previous[0], previous[1], "WAITING_FOR_APPROVAL"),
    )


def test_hold_waiting_holds_a_waiting_run_for_one_attach_and_writes_nothing_else(
    store: agentrt.Store, database: str
) -> None:
    waiting_run(store, approve=True)
    events_before = event_types(store)
    with store.transaction() as tx:
        hold_by("first/1", previous=("", ""))(tx)
    run = store.get_run("r1")
    lease = store.lease("r1")
    # The hold is a lease of its own, at the run's next epoch (decision 0204).
    assert (run.status, lease.owner, lease.epoch) == ("WAITING_FOR_APPROVAL", "first/1", 2)
    assert event_types(store) == events_before
    # A second attach that judged the lease free (as it was before the first hold) loses.
    refused_and_nothing_written(
        database, RunStateError, hold_by("second/1", previous=("", "")), store
    )


def test_fail_and_go_on_fails_the_step_and_leaves_the_run_running(
    store: agentrt.Store, database: str
) -> None:
    step = deciding_step(store)
    observation = Observation.denied("delete", "destructive")
    with store.transaction() as tx:
        failed = tx.fail_and_go_on(
            "r1", step.id, observation, policy=PAYLOAD, from_step=StepStatus.DECIDING, now=EPOCH
        )
    assert repr(failed) == repr(store.list_steps("r1")[0])
    assert (failed.status, store.get_run("r1").status) == ("failed", "RUNNING")
    assert event_types(store)[-2:] == ["step.policy", "step.failed"]
    refused_and_nothing_written(
        database,
        RunStateError,
        lambda tx: tx.fail_and_go_on(
            "r1", step.id, observation, policy=PAYLOAD, from_step=StepStatus.DECIDING, now=EPOCH
        ),
        store,
    )


def test_take_over_takes_exactly_the_lease_judged_gone_and_interrupts_the_steps_in_flight(
    store: agentrt.Store, database: str
) -> None:
    step = deciding_step(store)
    proof = {"by": "lease expired"}

    def take(previous_expires_at: str) -> Any:
        return lambda tx: tx.take_over(
            "r1",
            owner="second/1",
            expires_at=LATER_AT,
            holder="{}",
            previous=judged_lease("r1", OWNER, previous_expires_at),
            proof=proof,
            now=EPOCH,
        )

    # A lease other than the one judged gone (it was renewed meanwhile) is not taken.
    refused_and_nothing_written(database, RunStateError, take("2000-01-01T00:00:00.000000Z"), store)
    with store.transaction() as tx:
        taken = take(LATER)(tx)
    assert repr(taken.run) == repr(store.get_run("r1"))
    assert repr(list(taken.interrupted)) == repr(store.list_steps("r1"))
    assert (taken.epoch, taken.interrupted[0].id, taken.interrupted[0].status) == (
        2,
        step.id,
        "interrupted",
    )
    events = store.list_events("r1")
    assert [e.type for e in events[-2:]] == ["lease.taken_over", "step.interrupted"]
    assert events[-2].payload == {
        "previous_owner": OWNER,
        "previous_expires_at": LATER,
        "owner": "second/1",
        "epoch": 2,
        "proof": proof,
    }


def test_go_on_after_interruption_appends_run_resumed_in_the_callers_transaction(
    store: agentrt.Store, database: str
) -> None:
    new_run(store)

    def then_fail(tx: Tx) -> None:
        tx.go_on_after_interruption("r1", {"detail": "x"}, EPOCH)
        raise ZeroDivisionError  # the caller's transaction fails after the write

    refused_and_nothing_written(database, ZeroDivisionError, then_fail, store)
    with store.transaction() as tx:
        tx.go_on_after_interruption("r1", {"reconcile": "continue"}, EPOCH)
    last = store.list_events("r1")[-1]
    assert (last.type, last.payload) == (
        "run.resumed",
        {"after": "interruption", "reconcile": "continue"},
    )


def test_record_late_outcome_appends_a_late_finish_and_returns_the_rows_as_they_stand(
    store: agentrt.Store,
) -> None:
    step = deciding_step(store)
    with store.transaction() as tx:
        tx.cancel_run("r1", "alice", "stop", EPOCH)
    with store.transaction() as tx:
        late = tx.record_late_outcome("r1", step.id, {"tool": "push", "duration_ms": 4}, EPOCH)
    assert repr(late.run) == repr(store.get_run("r1"))
    assert repr(late.step) == repr(store.list_steps("r1")[0])
    last = store.list_events("r1")[-1]
    assert (last.type, last.payload) == (
        "step.tool_finished",
        {"tool": "push", "duration_ms": 4, "late": True},
    )


def test_the_model_call_writes_return_the_run_as_written(store: agentrt.Store) -> None:
    step = deciding_step(store)
    with store.transaction() as tx:
        run = tx.dispatch_model_call("r1", step.id, "c1", 1, "m", Usage(100, 10), 7, EPOCH)
    assert repr(run) == repr(store.get_run("r1"))
    with store.transaction() as tx:
        settled = tx.settle_model_call(
            "r1",
            step.id,
            "c1",
            1,
            "m",
            status="ok",
            usage=Usage(90, 9),
            cost_micros=5,
            latency_ms=3,
            error="",
            now=EPOCH,
        )
    assert settled is not None and repr(settled) == repr(store.get_run("r1"))
    assert (settled.model_calls, settled.input_tokens, settled.estimated_cost_micros) == (1, 90, 5)
    with store.transaction() as tx:  # settled already: nothing more is written
        assert (
            tx.settle_model_call(
                "r1",
                step.id,
                "c1",
                1,
                "m",
                status="ok",
                usage=Usage(90, 9),
                cost_micros=5,
                latency_ms=3,
                error="",
                now=EPOCH,
            )
            is None
        )


def test_release_lease_says_whether_the_owner_let_go_and_leaves_anothers_lease_alone(
    store: agentrt.Store, database: str
) -> None:
    new_run(store)
    before = snapshot(database)
    with store.transaction() as tx:
        assert tx.release_lease("r1", "someone-else/1", epoch=1) is False
    assert snapshot(database) == before
    with store.transaction() as tx:
        assert tx.release_lease("r1", OWNER, epoch=1) is True
    assert store.lease("r1").owner == ""
    with store.transaction() as tx:
        assert tx.release_lease("r1", OWNER, epoch=1) is False


def test_expire_approval_says_whether_it_expired_a_pending_approval(
    store: agentrt.Store, database: str
) -> None:
    approval = waiting_run(store)
    with store.transaction() as tx:
        assert tx.expire_approval(approval.id) is True
    assert [a.status for a in store.list_approvals("r1")] == ["expired"]
    before = snapshot(database)
    with store.transaction() as tx:
        assert tx.expire_approval(approval.id) is False
    assert snapshot(database) == before


def test_expire_waiting_refuses_an_approval_decided_since_it_was_read_and_writes_nothing(
    store: agentrt.Store, database: str
) -> None:
    pending = waiting_run(store)
    with store.transaction() as tx:
        tx.decide_approval(pending, ApprovalStatus.APPROVED, "ops", "", EPOCH)
    refused_and_nothing_written(
        database,
        RunStateError,
        lambda tx: tx.expire_waiting(
            "r1", pending.step_id, pending, tool="push", why="expired", now=EPOCH
        ),
        store,
    )
    assert store.get_run("r1").status == "WAITING_FOR_APPROVAL"


def test_hold_waiting_returns_the_run_as_written(store: agentrt.Store) -> None:
    waiting_run(store, approve=True)
    with store.transaction() as tx:
        held = hold_by("first/1", previous=("", ""))(tx)
    assert repr(held.run) == repr(store.get_run("r1"))
    assert (held.run.status, held.epoch) == ("WAITING_FOR_APPROVAL", 2)


def test_go_on_after_interruption_returns_the_payload_it_appended(store: agentrt.Store) -> None:
    new_run(store)
    with store.transaction() as tx:
        appended = tx.go_on_after_interruption("r1", {"detail": "x"}, EPOCH)
    assert appended == store.list_events("r1")[-1].payload
    assert appended == {"after": "interruption", "detail": "x"}


def test_record_policy_refuses_a_step_no_longer_in_the_status_judged_and_writes_nothing(
    store: agentrt.Store, database: str
) -> None:
    step = deciding_step(store)
    refused_and_nothing_written(
        database,
        RunStateError,
        lambda tx: tx.record_policy(
            "r1", step.id, PAYLOAD, EPOCH, from_status=StepStatus.EXECUTING
        ),
        store,
    )
    with store.transaction() as tx:
        tx.record_policy("r1", step.id, PAYLOAD, EPOCH, from_status=StepStatus.DECIDING)
    assert event_types(store)[-1] == "step.policy"
    assert store.list_steps("r1")[0].policy_id == "p"


def test_take_over_of_a_released_lease_charges_the_attempts_in_flight_at_the_takeovers_time(
    store: agentrt.Store, database: str
) -> None:
    """A lease given back is matched as the empty lease it is; an attempt left dispatched
    is settled `ambiguous` and charged, and the step interrupted, at the takeover's time."""
    step = deciding_step(store)
    with store.transaction() as tx:
        tx.dispatch_model_call("r1", step.id, "c1", 1, "m", Usage(100, 10), 7, EPOCH)
    with store.transaction() as tx:
        assert tx.release_lease("r1", OWNER, epoch=1)
    later = EPOCH + timedelta(minutes=5)
    before = len(store.list_events("r1"))
    with store.transaction() as tx:
        taken = tx.take_over(
            "r1",
            owner="second/1",
            expires_at=LATER_AT,
            holder="{}",
            previous=judged_lease("r1", "", ""),
            proof={},
            now=later,
        )
    assert (taken.epoch, store.lease("r1").owner, taken.run.input_tokens) == (2, "second/1", 100)
    assert query(database, "SELECT status, completed_at FROM model_calls") == [
        ("ambiguous", "2026-11-30T09:05:00.000000Z")
    ]
    assert query(database, "SELECT status, finished_at FROM steps") == [
        ("interrupted", "2026-11-30T09:05:00.000000Z")
    ]
    appended = store.list_events("r1")[before:]
    assert [(e.type, e.at) for e in appended] == [
        ("model.failed", later),
        ("step.interrupted", later),
    ]
