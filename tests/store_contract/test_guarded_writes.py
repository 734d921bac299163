"""Every named write of `Tx` is a compare-and-set that appends its own events.

Each returns the records as written, equal to a fresh read; each refuses a row
that has moved with the error it names, writing nothing (events included);
each appends exactly its events with exactly their payloads (decision 0036).
Derived from `tests/test_writes.py`, `tests/test_accounting_contract.py`,
`tests/test_approvals.py` and `tests/test_pending_approvals.py`.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from agentrt import _events as ev
from agentrt._canonical import JSONFloat, JSONInt
from agentrt._errors import ApprovalChangedError, LeaseLostError, NotFoundError, RunStateError
from agentrt._model import Usage
from agentrt._records import (
    ApprovalStatus,
    Decision,
    Limits,
    Observation,
    SideEffect,
    StepStatus,
    ToolSpec,
)
from agentrt._store import Store
from agentrt._store._records import (
    ApprovalState,
    Claim,
    RequestRow,
    tool_start,
    written_observation,
)
from agentrt._store.sqlite import _proxy_rows
from agentrt._tools import spec_hash

from .conftest import Backend
from .world import (
    ALLOW,
    EPOCH,
    FAR,
    HOLDER,
    OWNER,
    PAYLOAD,
    Ids,
    at,
    claim,
    decide,
    deciding_step,
    event_types,
    everything,
    executing_step,
    new_run,
    refused,
    waiting_run,
)


def last_event(store: Store, run_id: str = "r1") -> tuple[str, object]:
    event = store.list_events(run_id, 0, 100_000, cap=None)[-1]
    return event.type, event.payload


# --- runs ----------------------------------------------------------------------------------


def test_create_run_returns_the_run_as_a_fresh_read_leased_at_epoch_one(backend: Backend) -> None:
    store = backend.open()
    created = new_run(store, origin="driver")
    assert repr(created) == repr(store.get_run("r1"))
    assert (created.status, created.goal, created.step_count) == ("RUNNING", "goal", 0)
    lease = store.lease("r1")
    assert (lease.owner, lease.expires_at, lease.epoch) == (OWNER, FAR, 1)
    assert [(e.type, e.payload) for e in store.list_events("r1", 0, 100, cap=None)] == [
        ("run.created", {"goal": "goal", "limits": Limits().to_json(), "tools": []}),
        ("run.started", {}),
    ]


def test_create_run_refuses_an_id_in_use_and_writes_nothing(backend: Backend) -> None:
    store = backend.open()
    new_run(store)
    refused(
        store,
        RunStateError,
        lambda tx: tx.create_run(
            "r1", "again", Limits(), owner="x", lease_expires_at=FAR, holder="", specs=[], now=EPOCH
        ),
    )


def test_create_run_keeps_each_tool_spec_once_by_its_hash(backend: Backend) -> None:
    store = backend.open()
    spec = ToolSpec(
        name="lookup",
        description="looks it up",
        input_schema={"type": "object"},
        side_effect=SideEffect.READ_ONLY,
        timeout=timedelta(seconds=5),
    )
    digest = spec_hash(spec)
    for run_id in ("r1", "r2"):
        with store.transaction() as tx:
            tx.create_run(
                run_id,
                "goal",
                Limits(),
                owner=OWNER,
                lease_expires_at=FAR,
                holder=HOLDER,
                specs=[(digest, spec)],
                now=EPOCH,
            )
    assert store.tool_spec(digest) == spec
    assert store.tool_spec("0" * 64) is None
    assert store.started_tool_names("r2") == ["lookup"]
    assert store.list_events("r2", 0, 10)[0].payload["tools"] == [digest]


def test_end_run_returns_the_run_and_refuses_a_run_no_longer_running(backend: Backend) -> None:
    store = backend.open()
    new_run(store)
    with store.transaction() as tx:
        run = tx.end_run("r1", "COMPLETED", "goal_completed", "", result={"ok": 1}, now=at(1))
    assert repr(run) == repr(store.get_run("r1"))
    assert (run.status, run.reason, run.result, run.finished_at) == (
        "COMPLETED",
        "goal_completed",
        {"ok": 1},
        at(1),
    )
    assert store.lease("r1").owner == ""
    assert last_event(store) == (
        "run.finished",
        {"status": "COMPLETED", "reason": "goal_completed", "detail": "", "steps": 0},
    )
    refused(
        store, RunStateError, lambda tx: tx.end_run("r1", "FAILED", "agent_error", "x", now=EPOCH)
    )


@pytest.mark.parametrize("loop", [None, {"tool": "read", "repeats": 3}])
def test_fail_at_limit_appends_its_limit_event_then_ends_the_run(
    backend: Backend, loop: Any
) -> None:
    store = backend.open()
    new_run(store)
    with store.transaction() as tx:
        run = tx.fail_at_limit(
            "r1", reason="limit_steps", detail="3 steps", loop=loop, active_ms_add=5, now=EPOCH
        )
    assert repr(run) == repr(store.get_run("r1"))
    assert (run.status, run.reason, run.reason_detail) == ("FAILED", "limit_steps", "3 steps")
    events = store.list_events("r1", 0, 100, cap=None)
    assert [(e.type, e.payload) for e in events[-2:-1]] == [
        ("loop.detected", loop)
        if loop
        else ("limit.exceeded", {"reason": "limit_steps", "detail": "3 steps"})
    ]
    assert events[-1].type == "run.finished"
    refused(
        store,
        RunStateError,
        lambda tx: tx.fail_at_limit(
            "r1", reason="limit_steps", detail="again", active_ms_add=0, now=EPOCH
        ),
    )


def test_cancel_run_fails_the_open_step_expires_its_approvals_and_ends_the_run(
    backend: Backend,
) -> None:
    store = backend.open()
    approval = waiting_run(store)
    with store.transaction() as tx:
        run = tx.cancel_run("r1", "alice", "stop", at(2))
    assert repr(run) == repr(store.get_run("r1"))
    assert (run.status, run.reason, run.reason_detail) == (
        "CANCELLED",
        "operator_cancelled",
        "stop",
    )
    (step,) = store.list_steps("r1", cap=None)
    assert (step.id, step.status) == (approval.step_id, "failed")
    assert step.observation == Observation.cancelled("alice", "stop")
    (expired,) = store.list_approvals("r1", cap=None)
    assert (expired.status, expired.decided_by, expired.note) == (
        "expired",
        "alice",
        "the run was cancelled",
    )
    assert store.pending_approvals("r1") == []
    assert event_types(store)[-2:] == ["step.failed", "run.finished"]
    refused(store, RunStateError, lambda tx: tx.cancel_run("r1", "bob", "again", EPOCH))


@pytest.mark.parametrize("write", ["leave_running", "add_active_time"])
def test_the_run_writes_after_a_tool_refuse_a_lease_held_by_someone_else(
    backend: Backend, write: str
) -> None:
    store = backend.open()
    new_run(store)
    if write == "leave_running":
        refused(
            store,
            LeaseLostError,
            lambda tx: tx.leave_running("r1", "other", epoch=1, active_ms_add=5),
        )
        with store.transaction() as tx:
            run = tx.leave_running("r1", OWNER, epoch=1, active_ms_add=5)
    else:
        refused(
            store,
            LeaseLostError,
            lambda tx: tx.add_active_time(tx.run_record("r1"), "other", 5, epoch=1),
        )
        with store.transaction() as tx:
            run = tx.add_active_time(tx.run_record("r1"), OWNER, 5, epoch=1)
    assert repr(run) == repr(store.get_run("r1"))
    assert run.active_time == timedelta(milliseconds=5)
    assert store.lease("r1").owner == ("" if write == "leave_running" else OWNER)
    assert event_types(store) == ["run.created", "run.started"]  # neither appends an event


def test_go_on_after_interruption_appends_run_resumed_and_returns_its_payload(
    backend: Backend,
) -> None:
    store = backend.open()
    new_run(store)
    before = everything(store)
    with pytest.raises(ZeroDivisionError), store.transaction() as tx:
        tx.go_on_after_interruption("r1", {"detail": "x"}, EPOCH)
        raise ZeroDivisionError  # the caller's transaction fails after the write
    assert everything(store) == before
    with store.transaction() as tx:
        appended = tx.go_on_after_interruption("r1", {"reconcile": "continue"}, EPOCH)
    assert appended == {"after": "interruption", "reconcile": "continue"}
    assert last_event(store) == ("run.resumed", appended)


# --- one step ------------------------------------------------------------------------------


def test_claim_next_step_returns_the_run_and_step_as_a_fresh_read_and_refuses_a_stale_copy(
    backend: Backend,
) -> None:
    store = backend.open()
    run = new_run(store)
    with store.transaction() as tx:
        claimed = tx.claim_next_step(run, OWNER, Ids("s"), at(1), epoch=1)
    assert repr(claimed.run) == repr(store.get_run("r1"))
    assert repr(claimed.step) == repr(store.list_steps("r1", cap=None)[0])
    assert (claimed.run.step_count, claimed.step.index, claimed.step.id) == (1, 0, "s0001")
    assert (claimed.step.status, claimed.step.started_at) == ("deciding", at(1))
    assert last_event(store) == ("step.started", {"index": 0})
    # The copy it was given is stale now (step_count 0): the claim is refused.
    refused(
        store, RunStateError, lambda tx: tx.claim_next_step(run, OWNER, Ids("t"), EPOCH, epoch=1)
    )


def test_claim_next_step_refuses_a_run_leased_to_someone_else(backend: Backend) -> None:
    store = backend.open()
    run = new_run(store)
    refused(
        store, RunStateError, lambda tx: tx.claim_next_step(run, "other", Ids("s"), EPOCH, epoch=1)
    )


def test_claim_next_step_refuses_a_run_that_is_not_running(backend: Backend) -> None:
    store = backend.open()
    run = new_run(store)
    with store.transaction() as tx:
        tx.end_run("r1", "COMPLETED", "goal_completed", "", now=EPOCH)
    refused(
        store, RunStateError, lambda tx: tx.claim_next_step(run, OWNER, Ids("s"), EPOCH, epoch=1)
    )


def test_record_decision_returns_the_step_as_a_fresh_read_and_records_once(
    backend: Backend,
) -> None:
    store = backend.open()
    step = deciding_step(store)
    decision = Decision.tool_call("read", {"n": JSONFloat("1e1"), "a": 2.50})
    decided = decide(store, step, decision)
    (stored,) = store.list_steps("r1", cap=None)
    assert repr(decided) == repr(stored)
    assert stored.decision is not None and stored.decision.to_json() == decision.to_json()
    assert last_event(store) == ("step.decided", decision.to_json())
    with pytest.raises(RunStateError):
        decide(store, step, Decision.complete({}))
    assert repr(store.list_steps("r1", cap=None)[0]) == repr(stored)


def test_start_tool_returns_the_step_as_a_fresh_read_after_its_two_events(
    backend: Backend,
) -> None:
    store = backend.open()
    started = executing_step(store)
    assert repr(started) == repr(store.list_steps("r1", cap=None)[0])
    assert (started.status, started.spec_hash, started.policy_id) == ("executing", "h", "p")
    events = store.list_events("r1", 0, 100, cap=None)
    assert [(e.type, e.payload) for e in events[-2:]] == [
        ("step.policy", ALLOW),
        ("step.tool_started", {"tool": "read", "args": {"n": 1}}),
    ]


def test_start_tool_refuses_a_step_not_in_the_statuses_named(backend: Backend) -> None:
    store = backend.open()
    started = executing_step(store)
    refused(
        store,
        RunStateError,
        lambda tx: tx.start_tool(
            started,
            tool_start("read", {"n": 1}, ALLOW),
            from_statuses=(StepStatus.DECIDING,),
            now=EPOCH,
        ),
    )


def test_finish_tool_returns_the_step_as_a_fresh_read_and_refuses_one_not_executing(
    backend: Backend,
) -> None:
    store = backend.open()
    started = executing_step(store)
    observation = Observation.tool_result({"lines": [JSONFloat("2.50"), 10**30]}, "ok")
    finished_payload = {"tool": "read", "summary": "ok"}
    with store.transaction() as tx:
        finished = tx.finish_tool(
            started,
            StepStatus.DONE,
            written_observation(observation),
            finished_payload,
            failed_event=False,
            now=at(3),
        )
    assert repr(finished) == repr(store.list_steps("r1", cap=None)[0])
    assert (finished.status, finished.finished_at) == ("done", at(3))
    assert last_event(store) == ("step.tool_finished", finished_payload)
    refused(
        store,
        RunStateError,
        lambda tx: tx.finish_tool(
            started,
            StepStatus.DONE,
            written_observation(observation),
            {},
            failed_event=False,
            now=EPOCH,
        ),
    )


def test_finish_tool_with_a_failure_appends_step_failed_after_the_finish(
    backend: Backend,
) -> None:
    store = backend.open()
    started = executing_step(store)
    observation = Observation.tool_error("read", "raised", "boom")
    with store.transaction() as tx:
        failed = tx.finish_tool(
            started,
            StepStatus.FAILED,
            written_observation(observation),
            {"x": 1},
            failed_event=True,
            now=EPOCH,
        )
    assert repr(failed) == repr(store.list_steps("r1", cap=None)[0])
    events = store.list_events("r1", 0, 100, cap=None)
    assert [(e.type, e.payload) for e in events[-2:]] == [
        ("step.tool_finished", {"x": 1}),
        ("step.failed", ev.observation_payload(observation)),
    ]


def test_fail_step_fails_a_step_from_the_statuses_named_only(backend: Backend) -> None:
    store = backend.open()
    step = deciding_step(store)
    observation = Observation.invalid_decision("not json")
    refused(
        store,
        RunStateError,
        lambda tx: tx.fail_step(
            "r1", step.id, observation, EPOCH, from_statuses=(StepStatus.EXECUTING,)
        ),
    )
    with store.transaction() as tx:
        tx.fail_step("r1", step.id, observation, at(4), from_statuses=(StepStatus.DECIDING,))
    (stored,) = store.list_steps("r1", cap=None)
    assert (stored.status, stored.observation, stored.finished_at) == (
        "failed",
        observation,
        at(4),
    )
    assert last_event(store) == ("step.failed", ev.observation_payload(observation))


def test_fail_and_go_on_fails_the_step_and_leaves_the_run_running(backend: Backend) -> None:
    store = backend.open()
    step = deciding_step(store)
    observation = Observation.denied("delete", "destructive")
    with store.transaction() as tx:
        failed = tx.fail_and_go_on(
            "r1", step.id, observation, policy=PAYLOAD, from_step=StepStatus.DECIDING, now=EPOCH
        )
    assert repr(failed) == repr(store.list_steps("r1", cap=None)[0])
    assert (failed.status, store.get_run("r1").status) == ("failed", "RUNNING")
    assert event_types(store)[-2:] == ["step.policy", "step.failed"]
    refused(
        store,
        RunStateError,
        lambda tx: tx.fail_and_go_on(
            "r1", step.id, observation, policy=PAYLOAD, from_step=StepStatus.DECIDING, now=EPOCH
        ),
    )


def test_end_with_step_settles_the_deciding_step_and_the_run_together(backend: Backend) -> None:
    store = backend.open()
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
    assert repr(settled.step) == repr(store.list_steps("r1", cap=None)[0])
    assert (settled.step.status, settled.run.result) == ("done", {"answer": 42})
    assert event_types(store)[-1] == "run.finished"
    refused(
        store,
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
    )


def test_record_late_outcome_appends_a_late_finish_and_changes_no_row(backend: Backend) -> None:
    store = backend.open()
    step = deciding_step(store)
    with store.transaction() as tx:
        tx.cancel_run("r1", "alice", "stop", EPOCH)
    rows_before = (repr(store.get_run("r1")), repr(store.list_steps("r1", cap=None)))
    with store.transaction() as tx:
        late = tx.record_late_outcome("r1", step.id, {"tool": "push", "duration_ms": 4}, EPOCH)
    assert (repr(late.run), repr([late.step])) == rows_before
    assert rows_before == (repr(store.get_run("r1")), repr(store.list_steps("r1", cap=None)))
    assert last_event(store) == (
        "step.tool_finished",
        {"tool": "push", "duration_ms": 4, "late": True},
    )


# --- approvals and waiting runs ------------------------------------------------------------


def test_pause_for_approval_returns_the_run_the_step_and_the_approval_as_written(
    backend: Backend,
) -> None:
    store = backend.open()
    approval = waiting_run(store)
    run = store.get_run("r1")
    assert repr(approval) == repr(store.list_approvals("r1", cap=None)[0])
    assert repr([approval]) == repr(store.pending_approvals("r1", cap=None))
    assert (run.status, store.lease("r1").owner) == ("WAITING_FOR_APPROVAL", "")
    assert (approval.id, approval.status, approval.hash, approval.kind) == (
        "apr1-0001",
        "pending",
        "d" * 64,
        "remote_change",
    )
    events = store.list_events("r1", 0, 100, cap=None)
    assert [e.type for e in events[-2:]] == ["step.policy", "approval.requested"]
    assert events[-1].payload["approval_id"] == approval.id
    assert events[-1].payload["hash"] == "d" * 64
    with store.transaction() as tx:
        assert tx.latest_approval_of_step(approval.step_id) == ApprovalState(
            approval.id, "pending", None
        )
        assert repr(tx.approvals_of_run("r1")) == repr([approval])
        assert repr(tx.approval_of_run(approval.id, "r1")) == repr(approval)
        assert tx.approval_of_run(approval.id, "r2") is None
    assert store.latest_approval_state("r1") == ApprovalState(approval.id, "pending", None)


def test_pause_for_approval_refuses_a_step_that_moved(backend: Backend) -> None:
    store = backend.open()
    step = executing_step(store)
    from .world import pause

    before = everything(store)
    with pytest.raises(RunStateError):
        pause(store, "r1", step)
    assert everything(store) == before


def test_an_approval_decided_once_cannot_be_decided_again(backend: Backend) -> None:
    store = backend.open()
    approval = waiting_run(store)
    with store.transaction() as tx:
        decided = tx.decide_approval(approval, ApprovalStatus.APPROVED, "alice", "ok", at(5))
    assert repr(decided) == repr(store.list_approvals("r1", cap=None)[0])
    assert (decided.status, decided.decided_by, decided.note, decided.decided_at) == (
        "approved",
        "alice",
        "ok",
        at(5),
    )
    assert last_event(store) == (
        "approval.decided",
        {"approval_id": approval.id, "status": "approved", "by": "alice", "note": "ok"},
    )
    refused(
        store,
        RunStateError,
        lambda tx: tx.decide_approval(approval, ApprovalStatus.REJECTED, "bob", "", EPOCH),
    )


def test_an_approval_is_decided_only_while_it_bears_the_hash_that_was_shown(
    backend: Backend,
) -> None:
    store = backend.open()
    approval = waiting_run(store)
    refused(
        store,
        RunStateError,
        lambda tx: tx.decide_approval(
            replace(approval, hash="e" * 64), ApprovalStatus.APPROVED, "alice", "", EPOCH
        ),
    )


def test_reject_approval_decides_it_fails_the_step_and_cancels_the_run(backend: Backend) -> None:
    store = backend.open()
    approval = waiting_run(store)
    with store.transaction() as tx:
        rejected, run = tx.reject_approval(approval, "bob", "no", EPOCH)
    assert repr(rejected) == repr(store.list_approvals("r1", cap=None)[0])
    assert repr(run) == repr(store.get_run("r1"))
    assert (rejected.status, run.status, run.reason) == (
        "rejected",
        "CANCELLED",
        "approval_rejected",
    )
    assert store.list_steps("r1", cap=None)[0].observation == Observation.rejected("push", "no")
    assert event_types(store)[-3:] == ["approval.decided", "step.failed", "run.finished"]
    refused(
        store,
        ApprovalChangedError,
        lambda tx: tx.reject_approval(approval, "bob", "again", EPOCH),
    )


def test_end_waiting_fails_the_awaiting_step_and_ends_the_run_from_waiting(
    backend: Backend,
) -> None:
    store = backend.open()
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
    assert repr(settled.step) == repr(store.list_steps("r1", cap=None)[0])
    assert (settled.run.status, settled.step.status) == ("FAILED", "failed")
    assert settled.step.observation == observation
    assert event_types(store)[-3:] == ["step.policy", "step.failed", "run.finished"]


def test_end_waiting_refuses_a_run_that_is_running(backend: Backend) -> None:
    store = backend.open()
    step = deciding_step(store)
    refused(
        store,
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
    )


def test_expire_waiting_expires_the_approval_and_cancels_the_run(backend: Backend) -> None:
    store = backend.open()
    approval = waiting_run(store)
    with store.transaction() as tx:
        settled, expired = tx.expire_waiting(
            "r1", approval.step_id, approval, tool="push", why="too late", now=EPOCH
        )
    assert repr(settled.run) == repr(store.get_run("r1"))
    assert repr(settled.step) == repr(store.list_steps("r1", cap=None)[0])
    assert repr(expired) == repr(store.list_approvals("r1", cap=None)[0])
    assert (expired.status, settled.run.status, settled.run.reason) == (
        "expired",
        "CANCELLED",
        "approval_expired",
    )
    assert settled.step.observation == Observation.denied("push", "too late")


def test_expire_waiting_refuses_an_approval_decided_since_it_was_read(backend: Backend) -> None:
    store = backend.open()
    pending = waiting_run(store)
    with store.transaction() as tx:
        tx.decide_approval(pending, ApprovalStatus.APPROVED, "ops", "", EPOCH)
    refused(
        store,
        RunStateError,
        lambda tx: tx.expire_waiting(
            "r1", pending.step_id, pending, tool="push", why="expired", now=EPOCH
        ),
    )
    assert store.get_run("r1").status == "WAITING_FOR_APPROVAL"


def test_hold_waiting_holds_a_waiting_run_for_one_attach_and_appends_nothing(
    backend: Backend,
) -> None:
    store = backend.open()
    waiting_run(store, approve=True)
    judged = store.lease_state("r1")
    assert judged is not None and judged.owner == ""
    events_before = event_types(store)
    with store.transaction() as tx:
        held = tx.hold_waiting("r1", owner="first", expires_at=FAR, holder="{}", previous=judged)
    assert repr(held.run) == repr(store.get_run("r1"))
    lease = store.lease("r1")
    # A lease of its own: the run's next epoch (decision 0204).
    assert (held.run.status, lease.owner, lease.expires_at, lease.epoch, held.epoch) == (
        "WAITING_FOR_APPROVAL",
        "first",
        FAR,
        2,
        2,
    )
    assert event_types(store) == events_before
    # A second attach that judged the lease free (as it was before the first hold) loses.
    refused(
        store,
        RunStateError,
        lambda tx: tx.hold_waiting(
            "r1", owner="second", expires_at=FAR, holder="{}", previous=judged
        ),
    )


def test_leave_waiting_takes_the_held_run_back_under_a_new_lease_once(backend: Backend) -> None:
    store = backend.open()
    approval = waiting_run(store, approve=True)

    def leave(owner: str) -> Any:
        return lambda tx: tx.leave_waiting(
            "r1", approval.id, owner=owner, epoch=2, expires_at=FAR, holder="{}", now=EPOCH
        )

    refused(store, RunStateError, leave("second"))  # nobody holds it yet: nobody leaves
    judged = store.lease_state("r1")
    assert judged is not None
    with store.transaction() as tx:
        tx.hold_waiting("r1", owner="second", expires_at=FAR, holder="{}", previous=judged)
        leased = leave("second")(tx)
    assert repr(leased.run) == repr(store.get_run("r1"))
    assert (leased.run.status, leased.epoch) == ("RUNNING", 2)
    assert (store.lease("r1").owner, store.lease("r1").epoch) == ("second", 2)
    assert last_event(store) == ("run.resumed", {"approval_id": approval.id})
    refused(store, RunStateError, leave("second"))  # left already: not twice


# --- takeovers and reconciliation ----------------------------------------------------------


def test_take_over_takes_the_lease_at_the_next_epoch_and_interrupts_the_steps_in_flight(
    backend: Backend,
) -> None:
    store = backend.open()
    step = deciding_step(store)
    judged = store.lease_state("r1")
    assert judged is not None
    proof = {"by": "lease expired"}
    with store.transaction() as tx:
        taken = tx.take_over(
            "r1",
            owner="second",
            expires_at=FAR,
            holder="{}",
            previous=judged,
            proof=proof,
            now=at(9),
        )
    assert repr(taken.run) == repr(store.get_run("r1"))
    assert repr(list(taken.interrupted)) == repr(store.list_steps("r1", cap=None))
    assert (taken.epoch, taken.interrupted[0].id, taken.interrupted[0].status) == (
        2,
        step.id,
        "interrupted",
    )
    assert taken.interrupted[0].observation == Observation.interrupted("deciding")
    events = store.list_events("r1", 0, 100, cap=None)
    assert [(e.type, e.payload, e.at) for e in events[-2:]] == [
        (
            "lease.taken_over",
            {
                "previous_owner": OWNER,
                "previous_expires_at": "2999-01-01T00:00:00.000000Z",
                "owner": "second",
                "epoch": 2,
                "proof": proof,
            },
            at(9),
        ),
        ("step.interrupted", Observation.interrupted("deciding").content, at(9)),
    ]


def test_take_over_of_a_released_lease_appends_no_takeover_and_charges_attempts_in_flight(
    backend: Backend,
) -> None:
    store = backend.open()
    step = deciding_step(store)
    with store.transaction() as tx:
        tx.dispatch_model_call("r1", step.id, "c1", 1, "m", Usage(100, 10), 7, EPOCH)
        assert tx.release_lease("r1", OWNER, epoch=1) is True
    judged = store.lease_state("r1")
    assert judged is not None and judged.owner == ""
    before = len(store.list_events("r1", 0, 1000))
    with store.transaction() as tx:
        taken = tx.take_over(
            "r1",
            owner="second",
            expires_at=FAR,
            holder="{}",
            previous=judged,
            proof={},
            now=at(300),
        )
    assert (taken.epoch, taken.run.input_tokens, taken.run.estimated_cost_micros) == (2, 100, 7)
    (call,) = store.list_model_calls("r1")
    assert (call.status, call.completed_at) == ("ambiguous", at(300))
    (interrupted,) = store.list_steps("r1", cap=None)
    assert (interrupted.status, interrupted.finished_at) == ("interrupted", at(300))
    appended = store.list_events("r1", 0, 1000)[before:]
    assert [(e.type, e.at) for e in appended] == [
        ("model.failed", at(300)),
        ("step.interrupted", at(300)),
    ]


def test_record_reconciled_appends_step_reconciled_and_changes_no_row(backend: Backend) -> None:
    store = backend.open()
    step = deciding_step(store)
    rows = repr(store.list_steps("r1", cap=None))
    with store.transaction() as tx:
        tx.record_reconciled("r1", step.id, {"by": "tool", "answer": "not_done"}, EPOCH)
    assert repr(store.list_steps("r1", cap=None)) == rows
    assert last_event(store) == ("step.reconciled", {"by": "tool", "answer": "not_done"})


def test_complete_reconciled_completes_only_an_interrupted_step(backend: Backend) -> None:
    store = backend.open()
    step = executing_step(store)
    observation = Observation.tool_result({"found": True}, "found")
    refused(
        store,
        RunStateError,
        lambda tx: tx.complete_reconciled(step, observation, {"answer": "done"}, EPOCH),
    )
    judged = store.lease_state("r1")
    assert judged is not None
    with store.transaction() as tx:
        (interrupted,) = tx.take_over(
            "r1", owner="b", expires_at=FAR, holder="{}", previous=judged, proof={}, now=EPOCH
        ).interrupted
    with store.transaction() as tx:
        done = tx.complete_reconciled(interrupted, observation, {"answer": "done"}, at(7))
    assert repr(done) == repr(store.list_steps("r1", cap=None)[0])
    assert (done.status, done.observation, done.finished_at) == ("done", observation, at(7))
    assert last_event(store) == ("step.reconciled", {"answer": "done"})


# --- model calls -----------------------------------------------------------------------------


def test_a_dispatched_model_call_is_counted_and_settled_once_charging_the_run(
    backend: Backend,
) -> None:
    store = backend.open()
    step = deciding_step(store)
    with store.transaction() as tx:
        run = tx.dispatch_model_call("r1", step.id, "c1", 1, "m", Usage(100, 10), 7, EPOCH)
    assert repr(run) == repr(store.get_run("r1"))
    assert (run.model_calls, run.input_tokens) == (1, 0)  # counted, not charged yet
    assert last_event(store) == ("model.dispatched", {"call_id": "c1", "attempt": 1, "model": "m"})

    def settle(tx: Any) -> Any:
        return tx.settle_model_call(
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

    with store.transaction() as tx:
        settled = settle(tx)
    assert settled is not None and repr(settled) == repr(store.get_run("r1"))
    assert (settled.input_tokens, settled.output_tokens, settled.estimated_cost_micros) == (
        90,
        9,
        5,
    )
    assert last_event(store)[0] == "model.completed"
    before = everything(store)
    with store.transaction() as tx:
        assert settle(tx) is None  # settled already: nothing more is written
    assert everything(store) == before


def test_a_late_reply_to_an_attempt_charged_at_its_estimate_adds_only_the_excess(
    backend: Backend,
) -> None:
    store = backend.open()
    step = deciding_step(store)
    with store.transaction() as tx:
        tx.dispatch_model_call("r1", step.id, "c1", 1, "m", Usage(100, 10), 7, EPOCH)
    with store.transaction() as tx:
        tx.cancel_run("r1", "ops", "stop", EPOCH)  # charges the attempt at its estimate
    assert (store.get_run("r1").input_tokens, store.get_run("r1").estimated_cost_micros) == (100, 7)
    with store.transaction() as tx:
        tx.charge_beyond_estimate("r1", "c1", 1, "m", Usage(150, 5), 9, EPOCH)
    run = store.get_run("r1")
    assert (run.input_tokens, run.output_tokens, run.estimated_cost_micros) == (150, 10, 9)
    assert last_event(store)[1] == {
        "call_id": "c1",
        "attempt": 1,
        "status": "late",
        "model": "m",
        "usage": Usage(50, 0).to_json(),
        "cost_micros": 2,
        "latency_ms": 0,
        "error": "a late reply cost more than the estimate charged for it",
    }
    before = everything(store)
    with store.transaction() as tx:  # nothing beyond what is charged now: nothing written
        tx.charge_beyond_estimate("r1", "c1", 1, "m", Usage(150, 5), 9, EPOCH)
    assert everything(store) == before


# --- reads inside a transaction ---------------------------------------------------------------


def test_lock_run_gives_the_run_and_its_lease_as_stored_or_none(backend: Backend) -> None:
    store = backend.open()
    step = deciding_step(store)
    with store.transaction() as tx:
        locked = tx.lock_run("r1")
        assert tx.lock_run("nope") is None
        with pytest.raises(NotFoundError):
            tx.run_record("nope")
        assert locked is not None
        assert repr(locked.run) == repr(store.get_run("r1")) == repr(tx.run_record("r1"))
        assert locked.lease == store.lease_state("r1")
        assert repr(tx.steps_of_run("r1")) == repr([step])
        assert tx.latest_approval_of_step(step.id) is None


def test_lock_lease_gives_the_lease_lock_run_gives_or_none(backend: Backend) -> None:
    # Decision 0114: a step's outcome commit judges the lease alone.
    store = backend.open()
    deciding_step(store)
    with store.transaction() as tx:
        assert tx.lock_lease("nope") is None
        lease = tx.lock_lease("r1")
        locked = tx.lock_run("r1")
        assert locked is not None and lease == locked.lease == store.lease_state("r1")
    with store.transaction() as tx:
        tx.release_lease("r1", OWNER, epoch=1)
        released = tx.lock_lease("r1")
        assert released is not None and released.owner == ""
    assert released == store.lease_state("r1")


def test_reads_inside_a_transaction_see_its_own_writes(backend: Backend) -> None:
    store = backend.open()
    new_run(store)
    with store.transaction() as tx:
        locked = tx.lock_run("r1")
        assert locked is not None
        tx.claim_next_step(locked.run, OWNER, Ids("s"), EPOCH, epoch=1)
        relocked = tx.lock_run("r1")
        assert relocked is not None and relocked.run.step_count == 1
        assert [s.id for s in tx.steps_of_run("r1")] == ["s0001"]


# --- the proxy's rows ------------------------------------------------------------------------


def test_a_request_key_is_claimed_once_per_judged_latest_row(backend: Backend) -> None:
    store = backend.open()
    assert store.migrate_proxy(EPOCH) == store.proxy_versions()[-1]
    key = "k" * 64
    assert store.latest_request(key) is None
    assert store.claim_request(key, None, "p1", "push", "remote_mutation", EPOCH) == Claim(True)
    first = store.latest_request(key)
    assert first == RequestRow(
        first.seq if first else 0, key, "p1", "push", "remote_mutation", EPOCH
    )
    assert store.request_of_run("p1") == first
    assert store.request_of_run("nope") is None
    # A second call that judged the key unclaimed is refused, writing nothing.
    assert store.claim_request(key, None, "p2", "push", "remote_mutation", EPOCH) == Claim(False)
    assert store.latest_request(key) == first
    second = store.claim_request(key, first.seq, "p2", "push", "remote_mutation", at(1))
    assert second == Claim(True)
    latest = store.latest_request(key)
    assert latest is not None and (latest.run_id, latest.created_at) == ("p2", at(1))
    assert latest.seq > first.seq


def test_a_request_claim_with_a_full_cap_writes_nothing_and_says_how_many_wait(
    backend: Backend,
) -> None:
    store = backend.open()
    store.migrate_proxy(EPOCH)
    assert store.claim_request("a" * 64, None, "r1", "push", "remote_mutation", EPOCH).claimed
    waiting_run(store, "r1")
    full = store.claim_request("b" * 64, None, "r2", "push", "remote_mutation", EPOCH, cap=1)
    assert full == Claim(claimed=False, full=True, waiting=1)
    assert store.latest_request("b" * 64) is None
    assert store.claim_request(
        "b" * 64, None, "r2", "push", "remote_mutation", EPOCH, cap=2
    ) == Claim(claimed=True, waiting=1)


def test_unsettled_requests_are_the_latest_row_of_each_key_of_the_tool_still_open(
    backend: Backend,
) -> None:
    store = backend.open()
    store.migrate_proxy(EPOCH)

    def made(key: str, run_id: str, tool: str = "push") -> None:
        latest = store.latest_request(key * 64)
        judged = None if latest is None else latest.seq
        assert store.claim_request(key * 64, judged, run_id, tool, "remote_mutation", EPOCH).claimed

    def ended(run_id: str, status: str, reason: str, detail: str = "") -> None:
        new_run(store, run_id)
        with store.transaction() as tx:
            tx.end_run(run_id, status, reason, detail, now=EPOCH)

    made("a", "running")
    new_run(store, "running")
    made("b", "waiting")
    waiting_run(store, "waiting")
    made("c", "expired")
    ended("expired", "CANCELLED", "approval_expired")
    made("d", "given-up")
    ended("given-up", "FAILED", "goal_failed", "no room")
    made("e", "failed")
    ended("failed", "FAILED", "goal_failed", "the tool failed")
    made("f", "done")
    ended("done", "COMPLETED", "goal_completed")
    made("g", "old")  # a key whose latest run is done: its earlier open run is not listed
    new_run(store, "old")
    made("g", "newer")
    ended("newer", "COMPLETED", "goal_completed")
    made("h", "elsewhere", tool="pull")
    new_run(store, "elsewhere")
    made("i", "unmade")  # a key row whose run was never created
    ending = [("approval_expired", None), ("goal_failed", "no room")]
    assert [row.run_id for row in store.unsettled_requests("push", ending)] == [
        "running",
        "waiting",
        "expired",
        "given-up",
    ]
    assert [row.run_id for row in store.unsettled_requests("push", [])] == ["running", "waiting"]
    (row,) = store.unsettled_requests("pull", ending)
    assert row == store.latest_request("h" * 64)


def test_migrating_the_proxy_twice_changes_nothing(backend: Backend) -> None:
    store = backend.open()
    version = store.migrate_proxy(EPOCH)
    versions = store.proxy_versions()
    assert versions == list(range(1, version + 1))
    assert store.migrate_proxy(at(1)) == version
    assert store.proxy_versions() == versions


def _proxy_migrations_of(backend: Backend) -> Any:
    """The module whose `PROXY_MIGRATIONS` the backend's `migrate_proxy` applies."""
    if backend.name == "postgres":
        from agentrt._store.postgres import _store as postgres_store

        return postgres_store
    return _proxy_rows


def _proxy_indexes(store: Store, backend: Backend) -> list[str]:
    if backend.name == "postgres":
        sql = (
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
            "AND indexname LIKE 'proxy%' ORDER BY 1"
        )
    else:
        sql = (
            "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'proxy%' ORDER BY 1"
        )
    return [str(next(iter(row))) for row in store.query(sql)]


def test_a_proxy_record_of_version_1_migrates_to_its_indexes_and_keeps_its_rows(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decision 0115: proxy migration 2 adds the indexes of the proxy's look-ups to a
    record the proxy wrote before it, every row kept as it was."""
    store = backend.open()
    module = _proxy_migrations_of(backend)
    with monkeypatch.context() as before:
        before.setattr(module, "PROXY_MIGRATIONS", module.PROXY_MIGRATIONS[:1])
        assert store.migrate_proxy(EPOCH) == 1
    assert store.proxy_versions() == [1]
    indexes = _proxy_indexes(store, backend)
    assert "proxy_requests_key" in indexes and "proxy_requests_tool" not in indexes
    assert store.claim_request("a" * 64, None, "p1", "push", "remote_mutation", EPOCH).claimed
    waiting_run(store, "p1")
    first = store.latest_request("a" * 64)
    assert first is not None
    assert store.claim_request("a" * 64, first.seq, "p2", "push", "remote_mutation", at(1)).claimed
    assert store.claim_request("b" * 64, None, "p3", "pull", "read_only", at(2)).claimed
    new_run(store, "p3")
    rows = [store.request_of_run(run_id) for run_id in ("p1", "p2", "p3")]
    recorded = everything(store)

    assert store.migrate_proxy(at(3)) == 2
    assert store.proxy_versions() == [1, 2]
    added = set(_proxy_indexes(store, backend)) - set(indexes)
    assert added == {"proxy_approvals_pending", "proxy_requests_created", "proxy_requests_tool"}
    assert [store.request_of_run(run_id) for run_id in ("p1", "p2", "p3")] == rows
    assert everything(store) == recorded
    assert [r.run_id for r in store.unsettled_requests("pull", [])] == ["p3"]
    assert store.unsettled_requests("push", []) == []  # the key's latest run was never made
    # The cap counts as before: p1 waits on its pending approval.
    full = store.claim_request("c" * 64, None, "p4", "push", "remote_mutation", at(4), cap=1)
    assert full == Claim(claimed=False, full=True, waiting=1)


def _plan(store: Store, backend: Backend, sql: str, params: tuple[Any, ...], *off: str) -> str:
    """The plan of `sql`: SQLite's EXPLAIN QUERY PLAN; PostgreSQL's EXPLAIN with sequential
    scans off (its tables here are too small for a plan of their own to mean anything),
    and the planner's methods named in `off` too (e.g. `nestloop`)."""
    if backend.name == "postgres":
        with store.transaction() as tx:
            for method in ("seqscan", *off):
                tx.execute(f"SET LOCAL enable_{method} = off")
            return "\n".join(str(r[0]) for r in tx.execute("EXPLAIN " + sql, params).fetchall())
    return "\n".join(str(tuple(r)[-1]) for r in store.query("EXPLAIN QUERY PLAN " + sql, params))


def _read_whole(plan: str, tables: tuple[str, ...]) -> list[str]:
    """The nodes of PostgreSQL's EXPLAIN text that read one of `tables` whole: a sequential
    scan, or an index or bitmap scan with no condition on the index (a full index scan)."""
    nodes: list[list[str]] = []
    for line in plan.splitlines():
        text = line.strip().removeprefix("->  ")
        if line.strip().startswith("->") or not nodes:
            nodes.append([text])
        else:
            nodes[-1].append(text)
    whole = []
    for node in nodes:
        head = node[0].split("  (cost=")[0]
        if not any(head.endswith(f" on {table}") or f" on {table} " in head for table in tables):
            continue
        conditions = [x for x in node[1:] if x.startswith(("Index Cond:", "Recheck Cond:"))]
        if head.startswith("Seq Scan") or not conditions:
            whole.append(head)
    return whole


def test_the_proxy_look_ups_search_their_indexes_not_the_whole_tables(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decision 0115: `unsettled_requests` finds a tool's rows through `proxy_requests_tool`,
    a capped `claim_request` counts pending approvals through `proxy_approvals_pending` and
    the calls on their way to a person through `proxy_requests_created`. Decision 0119: the
    look-up reads neither `proxy_requests` nor `runs` whole on either backend, PostgreSQL's
    planner left no join to start from `runs` (each of its join methods turned off in turn)."""
    store = backend.open()
    store.migrate_proxy(EPOCH)
    for n, tool in enumerate(("push", "pull", "push")):
        assert store.claim_request(f"{n}" * 64, None, f"p{n}", tool, "remote_mutation", EPOCH)
        waiting_run(store, f"p{n}")
    seen: list[tuple[str, tuple[Any, ...]]] = []
    read = store._query  # type: ignore[attr-defined]  # the store's one read path

    def reading(sql: str, params: Any = ()) -> Any:
        seen.append((sql, tuple(params)))
        return read(sql, params)

    class Counting:
        def __init__(self, tx: Any) -> None:
            self.tx = tx

        def execute(self, sql: str, params: Any = ()) -> Any:
            seen.append((sql, tuple(params)))
            return self.tx.execute(sql, params)

    count = _proxy_rows._waiting_or_on_the_way
    with monkeypatch.context() as traced:
        traced.setattr(store, "_query", reading)
        traced.setattr(
            _proxy_rows, "_waiting_or_on_the_way", lambda tx, *a: count(Counting(tx), *a)
        )
        unsettled = store.unsettled_requests("push", [("approval_expired", None)])
        claimed = store.claim_request(
            "9" * 64,
            None,
            "p9",
            "push",
            "remote_mutation",
            at(1),
            cap=10,
            awaiting=["remote_mutation"],
            fresh_since=EPOCH,
        )
    assert [r.run_id for r in unsettled] == ["p0", "p2"]
    assert claimed == Claim(claimed=True, waiting=3)
    assert len(seen) == 3  # the look-up, then the claim's two counts
    plans = [_plan(store, backend, sql, params) for sql, params in seen]
    indexes = ("proxy_requests_tool", "proxy_approvals_pending", "proxy_requests_created")
    for plan, index in zip(plans, indexes, strict=True):
        assert index in plan, plan
    if backend.name != "postgres":
        assert "SEARCH p USING INDEX proxy_requests_tool (tool=?)" in plans[0]
        assert "SEARCH p USING INDEX proxy_requests_created (created_at>?)" in plans[2]
        for plan in plans:  # no table read whole (the partial index holds the pending only)
            lines = plan.splitlines()
            assert not [x for x in lines if x.startswith("SCAN ") and " USING " not in x], plan
    else:
        for plan in plans:
            assert (
                "Seq Scan on proxy_requests" not in plan and "Seq Scan on approvals" not in plan
            ), plan
    # Decision 0119: the look-up reads neither `proxy_requests` nor `runs` whole, whatever
    # join the planner would prefer (none is left to it: the run is probed by id).
    sql, params = seen[0]
    _assert_unsettled_searches(store, backend, sql, params)


def _assert_unsettled_searches(
    store: Store, backend: Backend, sql: str, params: tuple[Any, ...]
) -> None:
    """`unsettled_requests`'s statement finds the tool's rows by `proxy_requests_tool`, each
    key's latest by `proxy_requests_key` and each run by its id, and reads no table whole."""
    if backend.name != "postgres":
        plan = _plan(store, backend, sql, params)
        lines = plan.splitlines()
        assert not [x for x in lines if x.startswith("SCAN ")], plan
        assert "SEARCH p USING INDEX proxy_requests_tool (tool=?)" in lines, plan
        assert "SEARCH q USING COVERING INDEX proxy_requests_key (request_key=?)" in lines, plan
        assert [x for x in lines if x.startswith("SEARCH r ")] == [
            "SEARCH r USING INDEX sqlite_autoindex_runs_1 (id=?)"
        ], plan
        return
    # Each of the planner's ways to join turned off in turn: a plan that joined `runs`
    # (main's, decision 0115) reads it whole under one of them (a hash or merge join
    # reads every run; the session-14 measurement saw `Seq Scan on runs` unforced).
    for off in ((), ("nestloop",), ("hashjoin", "mergejoin")):
        plan = _plan(store, backend, sql, params, *off)
        assert _read_whole(plan, ("proxy_requests", "runs")) == [], (off, plan)
        assert "proxy_requests_tool" in plan and "proxy_requests_key" in plan, plan
        assert "Index Cond: (id = p.run_id)" in plan, plan


def _mixed_proxy_record(store: Store) -> None:
    """Request keys of two tools, each with its latest row (some with an older one) and a
    run in each state `unsettled_requests` tells apart (decision 0119's test)."""
    store.migrate_proxy(EPOCH)
    rows = [  # (key, run, tool, how the run stands); claimed in this order
        ("k1", "p01", "push", "approval_expired"),  # open, but its key's latest is p02
        ("k1", "p02", "push", "RUNNING"),
        ("k2", "p03", "push", "RUNNING"),  # not its key's latest: p04 completed it
        ("k2", "p04", "push", "goal_completed"),
        ("k3", "p05", "push", "WAITING_FOR_APPROVAL"),
        ("k4", "p06", "push", "approval_expired"),
        ("k5", "p07", "push", "limit_steps"),
        ("k6", "p08", "push", "given_up"),
        ("k7", "p09", "push", "goal_failed"),  # another detail
        ("k8", "p10", "push", None),  # claimed, its run never made
        ("k9", "p11", "push", "cancelled_expired"),  # CANCELLED with reason approval_expired
        ("k10", "p12", "pull", "RUNNING"),
        ("k11", "p13", "pull", "approval_expired"),
        ("k12", "p14", "push", "RUNNING"),  # a key whose latest row names another tool
        ("k12", "p15", "pull", "goal_completed"),
        ("k13", "p16", "push", "goal_completed"),
        ("k13", "p17", "pull", "RUNNING"),
        ("k14", "p18", "pull", "WAITING_FOR_APPROVAL"),
    ]
    endings = {
        "approval_expired": ("FAILED", "approval_expired", ""),
        "limit_steps": ("FAILED", "limit_steps", ""),
        "given_up": ("FAILED", "goal_failed", GIVEN_UP),
        "goal_failed": ("FAILED", "goal_failed", "the tool said no"),
        "goal_completed": ("COMPLETED", "goal_completed", ""),
        "cancelled_expired": ("CANCELLED", "approval_expired", ""),
    }
    for n, (name, run_id, tool, state) in enumerate(rows):
        key = hashlib.sha256(name.encode()).hexdigest()
        latest = store.latest_request(key)
        judged = None if latest is None else latest.seq
        assert store.claim_request(key, judged, run_id, tool, "remote_mutation", at(n)).claimed
        if state == "WAITING_FOR_APPROVAL":
            waiting_run(store, run_id)
        elif state is not None:
            new_run(store, run_id)
        if state in endings:
            status, reason, detail = endings[state]
            with store.transaction() as tx:
                tx.end_run(run_id, status, reason, detail, now=at(n))


GIVEN_UP = "the call did not answer in time and its run had no step left to hold it"
PROXY_ENDINGS = (("approval_expired", None), ("limit_steps", None), ("goal_failed", GIVEN_UP))


def _unsettled_by_reads(
    store: Store, tool: str, ended: tuple[tuple[str, str | None], ...]
) -> list[RequestRow]:
    """What `unsettled_requests` answers, worked out from the store's other reads: each
    run's key row, that key's latest row and the run (main's statement, in Python)."""
    found = []
    for n in range(1, 19):
        row = store.request_of_run(f"p{n:02d}")
        assert row is not None
        latest = store.latest_request(row.request_key)
        if row.tool != tool or latest is None or latest.seq != row.seq:
            continue
        try:
            run = store.get_run(row.run_id)
        except NotFoundError:
            continue
        if run.status in ("RUNNING", "WAITING_FOR_APPROVAL") or any(
            run.reason == reason and detail in (None, run.reason_detail) for reason, detail in ended
        ):
            found.append(row)
    return sorted(found, key=lambda r: r.seq)


@pytest.mark.parametrize(
    ("tool", "ended", "expected"),
    [
        ("push", (), ["p02", "p05"]),
        ("push", PROXY_ENDINGS, ["p02", "p05", "p06", "p07", "p08", "p11"]),
        ("push", (("goal_failed", None),), ["p02", "p05", "p08", "p09"]),
        ("push", (("approval_expired", None), ("goal_failed", "x")), ["p02", "p05", "p06", "p11"]),
        ("pull", (), ["p12", "p17", "p18"]),
        ("pull", PROXY_ENDINGS, ["p12", "p13", "p17", "p18"]),
        ("read", PROXY_ENDINGS, []),
    ],
)
def test_unsettled_requests_answers_the_latest_open_row_of_each_key_of_the_tool(
    backend: Backend,
    tool: str,
    ended: tuple[tuple[str, str | None], ...],
    expected: list[str],
) -> None:
    """Decision 0119: the look-up rewritten to probe each run by its id answers as the join
    did (decision 0115's statement): a key's latest row only, whichever tool an older row
    named; RUNNING or WAITING_FOR_APPROVAL, or ended with a given (reason, detail) whatever
    its status; never a row whose run was never made; oldest first, every column."""
    store = backend.open()
    _mixed_proxy_record(store)
    found = store.unsettled_requests(tool, ended)
    assert [r.run_id for r in found] == expected
    assert found == _unsettled_by_reads(store, tool, ended)
    assert [r.seq for r in found] == sorted(r.seq for r in found)


def test_unsettled_requests_on_a_mixed_record_reads_no_table_whole(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decision 0119: on a record holding every kind of row, the one statement the look-up
    runs (traced) still searches its indexes and probes each run by id."""
    store = backend.open()
    _mixed_proxy_record(store)
    seen: list[tuple[str, tuple[Any, ...]]] = []
    read = store._query  # type: ignore[attr-defined]  # the store's one read path

    def reading(sql: str, params: Any = ()) -> Any:
        seen.append((sql, tuple(params)))
        return read(sql, params)

    with monkeypatch.context() as traced:
        traced.setattr(store, "_query", reading)
        found = store.unsettled_requests("push", PROXY_ENDINGS)
    assert [r.run_id for r in found] == ["p02", "p05", "p06", "p07", "p08", "p11"]
    assert len(seen) == 1
    _assert_unsettled_searches(store, backend, *seen[0])


def test_a_claimed_step_reads_back_by_its_index_and_id(backend: Backend) -> None:
    store = backend.open()
    step = deciding_step(store)
    second = claim(store, ids="t")
    assert store.step_index("r1", step.id) == 0
    assert store.step_index("r1", second.id) == 1
    assert store.step_index("r2", step.id) is None
    assert repr(store.step_of_run("r1", second.id)) == repr(second)
    assert store.step_of_run("r2", second.id) is None
