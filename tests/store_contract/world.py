"""What the contract tests build their runs from: through the interface only.

Fixed clocks and ids, a run made by `create_run`, a step claimed by
`claim_next_step`, a run paused on an approval, and `everything(store)`: every
record the interface can read, to show that a refused write changed nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentrt._decisions import record
from agentrt._records import (
    Approval,
    ApprovalStatus,
    Decision,
    Limits,
    PolicyDecision,
    Run,
    Step,
    StepStatus,
)
from agentrt._store import Store, Tx
from agentrt._store._records import tool_start

EPOCH = datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC)
FAR = datetime(2999, 1, 1, tzinfo=UTC)
OWNER = "writer/000000000000"
HOLDER = '{"host":"contract"}'
PAYLOAD: dict[str, Any] = {
    "decision": {"outcome": "deny"},
    "spec_hash": "h",
    "policy_id": "p",
    "view": {},
}
ALLOW: dict[str, Any] = {
    "decision": {"outcome": "allow", "reason": "", "capability": {"z": 1, "a": 2}},
    "spec_hash": "h",
    "policy_id": "p",
    "view": {},
}


def at(seconds: float) -> datetime:
    """`EPOCH` plus `seconds`."""
    return EPOCH + timedelta(seconds=seconds)


def wall_at(when: datetime) -> Callable[[], datetime]:
    """A wall clock stopped at `when`."""
    return lambda: when


class Ids:
    """Sequential ids with a prefix: `s0001`, `s0002`, ..."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.counter = itertools.count(1)

    def __call__(self) -> str:
        return f"{self.prefix}{next(self.counter):04d}"


def new_run(
    store: Store,
    run_id: str = "r1",
    *,
    owner: str = OWNER,
    expires: datetime = FAR,
    now: datetime = EPOCH,
    goal: str = "goal",
    origin: str = "gate",
) -> Run:
    """A RUNNING run leased to `owner` until `expires`."""
    with store.transaction() as tx:
        return tx.create_run(
            run_id,
            goal,
            Limits(),
            owner=owner,
            lease_expires_at=expires,
            holder=HOLDER,
            specs=[],
            now=now,
            origin=origin,
        )


def claim(store: Store, run_id: str = "r1", *, ids: str = "s", now: datetime = EPOCH) -> Step:
    """The run's next step, claimed (`deciding`)."""
    with store.transaction() as tx:
        locked = tx.lock_run(run_id)
        assert locked is not None
        return tx.claim_next_step(
            locked.run, OWNER, Ids(f"{ids}{run_id}-"), now, epoch=locked.lease.epoch
        ).step


def deciding_step(store: Store, run_id: str = "r1") -> Step:
    """A new run with its first step claimed."""
    new_run(store, run_id)
    return claim(store, run_id)


def decide(store: Store, step: Step, decision: Decision) -> Step:
    recorded = record(decision)
    with store.transaction() as tx:
        return tx.record_decision(step, recorded.text, recorded.decision, EPOCH)


def executing_step(store: Store, run_id: str = "r1") -> Step:
    """A new run whose first step's tool `read` has started."""
    step = decide(store, deciding_step(store, run_id), Decision.tool_call("read", {"n": 1}))
    with store.transaction() as tx:
        return tx.start_tool(
            step,
            tool_start("read", {"n": 1}, ALLOW),
            from_statuses=(StepStatus.DECIDING,),
            now=EPOCH,
        )


def pause(store: Store, run_id: str, step: Step) -> Approval:
    """Pause the run's deciding step on an approval of the call `push {"x": 1}`."""
    with store.transaction() as tx:
        paused = tx.pause_for_approval(
            run_id,
            step.id,
            new_id=Ids(f"ap{run_id}-"),
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
    return paused.approval


def waiting_run(store: Store, run_id: str = "r1", *, approve: bool = False) -> Approval:
    """A run WAITING on a pending (or approved) approval of its first step."""
    step = decide(store, deciding_step(store, run_id), Decision.tool_call("push", {"x": 1}))
    approval = pause(store, run_id, step)
    if not approve:
        return approval
    with store.transaction() as tx:
        return tx.decide_approval(approval, ApprovalStatus.APPROVED, "alice", "", EPOCH)


def everything(store: Store) -> str:
    """Every record the interface reads, whole: equal before and after means nothing changed."""
    runs = store.list_runs(limit=10_000, cap=None)
    seen: list[object] = [store.chain_head(), runs]
    for run in runs:
        seen += [
            store.lease(run.id),
            store.lease_state(run.id),
            store.list_steps(run.id, cap=None),
            store.list_approvals(run.id, cap=None),
            store.list_model_calls(run.id),
        ]
    seen.append(store.list_events(None, 0, 100_000, cap=None))
    return repr(seen)


def refused(
    store: Store,
    error: type[BaseException],
    write: Callable[[Tx], object],
    match: str | None = None,
) -> BaseException:
    """`write` in a transaction of its own raises `error` (matching `match`) and writes nothing."""
    before = everything(store)
    with pytest.raises(error, match=match) as caught, store.transaction() as tx:
        write(tx)
    assert everything(store) == before
    return caught.value


def event_types(store: Store, run_id: str = "r1") -> list[str]:
    return [e.type for e in store.list_events(run_id, 0, 100_000)]
