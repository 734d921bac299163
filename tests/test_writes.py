"""The named writes of the store layer (`agentrt._store.writes`).

Each is a compare-and-set on the statuses it may leave: when the row has moved
it raises `RunStateError` and, the transaction rolling back, nothing it wrote
stays. Each returns what it wrote, equal to a fresh read of the rows.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt._errors import RunStateError
from agentrt._records import ApprovalStatus, Limits, Observation, PolicyDecision, StepStatus
from agentrt._store import reads, writes
from conftest import EPOCH, Ids

OWNER = "writer/000000000000"


def rows(db_path: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db_path)
    try:
        found: list[tuple[Any, ...]] = []
        for table in ("runs", "steps", "approvals", "model_calls", "events"):
            found += [(table, *r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]
        return found
    finally:
        conn.close()


def new_run(store: agentrt.Store, run_id: str = "r1") -> agentrt.Run:
    with store.transaction() as tx:
        return writes.create_run(
            tx,
            run_id,
            "goal",
            Limits(),
            owner=OWNER,
            lease_expires_at="2999-01-01T00:00:00.000000Z",
            holder="{}",
            specs=[],
            now=EPOCH,
        )


def test_create_run_returns_the_run_as_a_fresh_read_gives_it(store: agentrt.Store) -> None:
    created = new_run(store)
    assert repr(created) == repr(store.get_run("r1"))
    assert created.status == "RUNNING"


def test_create_run_refuses_an_id_in_use_and_writes_nothing(
    store: agentrt.Store, db_path: Path
) -> None:
    new_run(store)
    before = rows(db_path)
    with pytest.raises(RunStateError):
        new_run(store)
    assert rows(db_path) == before


def test_claim_step_returns_the_step_as_a_fresh_read_gives_it(store: agentrt.Store) -> None:
    new_run(store)
    with store.transaction() as tx:
        step = writes.claim_step(tx, "r1", 0, OWNER, Ids("s"), EPOCH)
    assert repr(step) == repr(store.list_steps("r1")[0])
    assert store.get_run("r1").step_count == 1


@pytest.mark.parametrize("moved", ["step_count", "owner"])
def test_claim_step_on_a_run_that_moved_raises_and_writes_nothing(
    store: agentrt.Store, db_path: Path, moved: str
) -> None:
    new_run(store)
    index, owner = (1, OWNER) if moved == "step_count" else (0, "someone/else")
    before = rows(db_path)
    with pytest.raises(RunStateError), store.transaction() as tx:
        writes.claim_step(tx, "r1", index, owner, Ids("s"), EPOCH)
    assert rows(db_path) == before


def test_finish_tool_of_a_step_that_is_not_executing_raises_and_writes_nothing(
    store: agentrt.Store, db_path: Path
) -> None:
    new_run(store)
    with store.transaction() as tx:
        step = writes.claim_step(tx, "r1", 0, OWNER, Ids("s"), EPOCH)
    before = rows(db_path)
    observation = Observation.tool_result({"ok": True}, "ok")
    with pytest.raises(RunStateError), store.transaction() as tx:
        writes.finish_tool(
            tx, step, StepStatus.DONE, observation, {}, failed_event=False, now=EPOCH
        )
    assert rows(db_path) == before


def test_an_approval_decided_once_cannot_be_decided_again(
    store: agentrt.Store, db_path: Path
) -> None:
    new_run(store)
    with store.transaction() as tx:
        step = writes.claim_step(tx, "r1", 0, OWNER, Ids("s"), EPOCH)
        payload = {"decision": {}, "spec_hash": "h", "policy_id": "p", "view": {}}
        writes.pause_for_approval(
            tx,
            "r1",
            step.id,
            new_id=Ids("ap"),
            decision=PolicyDecision.require_approval("remote_change", "why"),
            request={"x": 1},
            digest="d" * 64,
            expires_at="",
            payload=payload,
            active_ms=0,
            from_step=(StepStatus.DECIDING,),
            from_run="RUNNING",
            now=EPOCH,
        )
        (approval,) = reads.approvals_of_run(tx, "r1")
    with store.transaction() as tx:
        decided = writes.decide_approval(tx, approval, ApprovalStatus.APPROVED, "alice", "", EPOCH)
    assert repr(decided) == repr(store.list_approvals("r1")[0])
    assert decided.status == "approved"
    before = rows(db_path)
    with pytest.raises(RunStateError), store.transaction() as tx:
        writes.decide_approval(tx, approval, ApprovalStatus.REJECTED, "bob", "", EPOCH)
    assert rows(db_path) == before


def test_cancel_run_fails_the_open_step_and_returns_the_run_as_stored(
    store: agentrt.Store,
) -> None:
    new_run(store)
    with store.transaction() as tx:
        step = writes.claim_step(tx, "r1", 0, OWNER, Ids("s"), EPOCH)
    with store.transaction() as tx:
        run = writes.cancel_run(tx, "r1", "alice", "stop", EPOCH)
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
    store: agentrt.Store, db_path: Path, write: str
) -> None:
    new_run(store)
    before = rows(db_path)
    with pytest.raises(agentrt.LeaseLostError), store.transaction() as tx:
        if write == "leave_running":
            writes.leave_running(tx, "r1", "someone/else", active_ms_add=5)
        else:
            writes.add_active_time(tx, "r1", "someone/else", 5)
    assert rows(db_path) == before
    with store.transaction() as tx:  # the owner's own write goes through
        if write == "leave_running":
            writes.leave_running(tx, "r1", OWNER, active_ms_add=5)
        else:
            writes.add_active_time(tx, "r1", OWNER, 5)
    run = store.get_run("r1")
    assert run.active_time.total_seconds() == 0.005
    assert (store.lease("r1").owner == "") == (write == "leave_running")
