"""Two stores on one database (two processes): of two writes that judged the same state,
exactly one succeeds and the other raises, writing nothing.

A race is forced, never timed: the first store's transaction writes and is held
open on a thread (a `threading.Event` says when it has written); the second
store makes its judgement then (it sees the state from before the write), and
starts its own transaction on another thread; only then is the first released.
Whenever the second transaction begins, before or after the first commits, its
compare-and-set must fail. Derived from `tests/test_concurrency.py`,
`tests/test_gate_concurrency.py` and
`tests/test_store.py::test_two_connections_serialize_under_begin_immediate`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pytest

from agentrt._errors import RunStateError
from agentrt._records import ApprovalStatus, Event
from agentrt._store import Store, Tx

from .conftest import Backend
from .world import EPOCH, FAR, OWNER, Ids, at, deciding_step, new_run, waiting_run

J = TypeVar("J")


@dataclass
class Outcome:
    """What one side of a race did: its result, or what it raised, and its events."""

    result: object = None
    error: BaseException | None = None
    events: list[Event] = field(default_factory=list)


@dataclass
class Race(Generic[J]):
    first: Outcome
    second: Outcome
    judged: J


def race(
    first: Store,
    second: Store,
    write_first: Callable[[Tx], object],
    judge: Callable[[], J],
    write_second: Callable[[Tx, J], object],
) -> Race[J]:
    """`write_first` in `first`'s transaction, held open while `second` judges (`judge`)
    and begins `write_second` with that judgement; then `first` commits."""
    written, release = threading.Event(), threading.Event()
    one, two = Outcome(), Outcome()

    def run_first() -> None:
        try:
            with first.transaction() as tx:
                one.result = write_first(tx)
                one.events = tx.events
                written.set()
                assert release.wait(60), "the race was never released"
        except BaseException as exc:
            one.error = exc
        finally:
            written.set()

    def run_second(judged: J) -> None:
        try:
            with second.transaction() as tx:
                two.result = write_second(tx, judged)
                two.events = tx.events
        except BaseException as exc:
            two.error = exc

    holder = threading.Thread(target=run_first)
    holder.start()
    try:
        assert written.wait(60)
        judged = judge()  # sees the state from before the first write
        challenger = threading.Thread(target=run_second, args=(judged,))
        challenger.start()
    finally:
        release.set()
        holder.join(60)
    challenger.join(60)
    assert not holder.is_alive() and not challenger.is_alive()
    assert one.error is None, one.error
    return Race(one, two, judged)


def only_the_first_won(result: Race[Any], store: Store) -> None:
    """The second side raised `RunStateError` and appended nothing; the first's events are
    the database's last."""
    assert isinstance(result.second.error, RunStateError), result.second.error
    assert result.second.events == []
    tail = store.list_events(None, 0, 100_000, cap=None)[-len(result.first.events) :]
    assert tail == result.first.events


def test_of_two_claims_of_the_same_step_exactly_one_succeeds(backend: Backend) -> None:
    first = backend.open()
    second = backend.reopen()
    new_run(first)

    def claim(tx: Tx) -> object:
        locked = tx.lock_run("r1")
        assert locked is not None
        return tx.claim_next_step(locked.run, OWNER, Ids("a"), EPOCH, epoch=1)

    result = race(
        first,
        second,
        claim,
        lambda: second.get_run("r1"),
        lambda tx, run: tx.claim_next_step(run, OWNER, Ids("b"), EPOCH, epoch=1),
    )
    assert result.judged.step_count == 0
    only_the_first_won(result, second)
    assert [(s.id, s.index) for s in second.list_steps("r1")] == [("a0001", 0)]


def test_of_two_takeovers_of_the_same_lease_exactly_one_takes_it(backend: Backend) -> None:
    first = backend.open()
    second = backend.reopen()
    new_run(first, expires=EPOCH)
    judged_first = first.lease_state("r1")
    assert judged_first is not None

    def take(owner: str) -> Callable[..., object]:
        return lambda tx, judged=judged_first: tx.take_over(
            "r1", owner=owner, expires_at=FAR, holder="", previous=judged, proof={}, now=at(1)
        )

    result = race(first, second, take("one"), lambda: second.lease_state("r1"), take("two"))
    assert result.judged == judged_first
    only_the_first_won(result, second)
    lease = second.lease("r1")
    assert (lease.owner, lease.epoch) == ("one", 2)


def test_of_two_decisions_of_the_same_approval_exactly_one_is_recorded(
    backend: Backend,
) -> None:
    first = backend.open()
    second = backend.reopen()
    approval = waiting_run(first)
    result = race(
        first,
        second,
        lambda tx: tx.decide_approval(approval, ApprovalStatus.APPROVED, "alice", "", EPOCH),
        lambda: second.get_approval("r1", approval.id),
        lambda tx, seen: tx.decide_approval(seen, ApprovalStatus.REJECTED, "bob", "", EPOCH),
    )
    assert result.judged.status == "pending"
    only_the_first_won(result, second)
    decided = second.get_approval("r1", approval.id)
    assert (decided.status, decided.decided_by) == ("approved", "alice")


def test_of_two_attaches_holding_the_same_waiting_run_exactly_one_holds_it(
    backend: Backend,
) -> None:
    first = backend.open()
    second = backend.reopen()
    waiting_run(first, approve=True)
    judged_first = first.lease_state("r1")
    assert judged_first is not None

    def hold(owner: str) -> Callable[..., object]:
        return lambda tx, judged=judged_first: tx.hold_waiting(
            "r1", owner=owner, expires_at=FAR, holder="", previous=judged
        )

    result = race(first, second, hold("one"), lambda: second.lease_state("r1"), hold("two"))
    assert result.judged == judged_first
    assert isinstance(result.second.error, RunStateError)
    assert second.lease("r1").owner == "one"


def test_of_two_resumes_of_the_same_held_run_exactly_one_leaves_waiting(
    backend: Backend,
) -> None:
    first = backend.open()
    second = backend.reopen()
    approval = waiting_run(first, approve=True)
    judged = first.lease_state("r1")
    assert judged is not None
    with first.transaction() as tx:
        tx.hold_waiting("r1", owner="me", expires_at=FAR, holder="", previous=judged)

    def leave(tx: Tx, _: object = None) -> object:
        return tx.leave_waiting(
            "r1", approval.id, owner="me", epoch=2, expires_at=FAR, holder="", now=EPOCH
        )

    result = race(first, second, leave, lambda: second.run_status("r1"), leave)
    assert result.judged == "WAITING_FOR_APPROVAL"
    only_the_first_won(result, second)
    assert (second.get_run("r1").status, second.lease("r1").epoch) == ("RUNNING", 2)


def test_two_writers_on_two_stores_never_fork_the_chain(backend: Backend) -> None:
    first = backend.open()
    second = backend.reopen()
    new_run(first, "ra")
    new_run(first, "rb")
    result = race(
        first,
        second,
        lambda tx: tx.go_on_after_interruption("ra", {"by": "first"}, EPOCH),
        second.chain_head,
        lambda tx, _: tx.go_on_after_interruption("rb", {"by": "second"}, EPOCH),
    )
    assert result.judged[0] == 4  # the second judged before the first committed
    assert result.second.error is None
    (one,), (two,) = result.first.events, result.second.events
    assert (one.seq, two.seq) == (5, 6)  # chained in commit order, one after the other
    assert second.verify_events().intact
    assert second.chain_head() == (6, two.hash)


def test_a_transaction_begun_beside_another_stores_sees_its_commit(backend: Backend) -> None:
    first = backend.open()
    second = backend.reopen()
    step = deciding_step(first)
    result = race(
        first,
        second,
        lambda tx: tx.cancel_run("r1", "ops", "stop", EPOCH),
        lambda: second.get_run("r1").status,
        lambda tx, _: tx.lock_run("r1"),
    )
    assert result.judged == "RUNNING"
    locked = result.second.result
    assert locked is not None and locked.run.status == "CANCELLED"  # type: ignore[attr-defined]
    assert second.list_steps("r1")[0].id == step.id


def test_of_two_claims_of_one_request_key_judged_alike_exactly_one_claims_it(
    backend: Backend,
) -> None:
    first = backend.open()
    second = backend.reopen()
    first.migrate_proxy(EPOCH)
    key = "k" * 64
    judged = second.latest_request(key)
    assert judged is None
    assert first.claim_request(key, None, "p1", "push", "remote_mutation", EPOCH).claimed
    assert not second.claim_request(key, None, "p2", "push", "remote_mutation", EPOCH).claimed
    latest = second.latest_request(key)
    assert latest is not None and latest.run_id == "p1"


@pytest.fixture(autouse=True)
def _shared_only(backend: Backend) -> None:
    if not backend.shared:
        pytest.skip(f"{backend.name}: a race needs a second store on the same database")
