"""A run's lease: renewed by its owner only, taken only as judged, judged by one clock.

Every expiry here is computed from the backend's lease clock (`lease_now(wall)`,
the caller's injected wall clock for SQLite, the server's for a shared
database), never from the machine's own time. Derived from
`tests/test_lease_contract.py` (the renewer and takeover tests),
`tests/test_takeover_contract.py::test_a_lease_is_expired_at_the_very_instant_it_names`
and `::test_a_lease_renewed_between_the_first_look_and_the_transaction_is_refused_naming_the_run`,
`tests/test_writes.py::test_release_lease_says_whether_the_owner_let_go_and_leaves_anothers_lease_alone`
and `tests/test_bad_bytes.py::test_an_unreadable_lease_expiry_or_owner_reads_as_held_never_as_free`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from agentrt._errors import LeaseLostError, RunStateError
from agentrt._store import Store, Tx
from agentrt._store._records import Leased, LeaseState, TakenOver

from .conftest import Backend
from .world import (
    EPOCH,
    FAR,
    HOLDER,
    OWNER,
    event_types,
    everything,
    new_run,
    refused,
    waiting_run,
    wall_at,
)

TTL = timedelta(seconds=30)
FAR_AS_HELD = datetime.max.replace(tzinfo=UTC)  # an expiry nobody can date
WALL = wall_at(EPOCH)


def test_a_new_run_holds_the_lease_it_was_created_with(backend: Backend) -> None:
    store = backend.open()
    expires = store.lease_now(WALL) + TTL
    new_run(store, expires=expires)
    assert store.lease_state("r1") == LeaseState(
        run_id="r1",
        status="RUNNING",
        owner=OWNER,
        expires_at=expires,
        holder=HOLDER,
        epoch=1,
    )
    assert store.lease_state("nope") is None


def test_the_owner_renews_its_lease_to_the_lease_clock_plus_the_ttl(backend: Backend) -> None:
    store = backend.open()
    new_run(store, expires=store.lease_now(WALL))
    renewer = store.renewer(WALL)
    try:
        earliest = store.lease_now(WALL) + TTL
        assert renewer.renew("r1", OWNER, TTL) is True
        latest = store.lease_now(WALL) + TTL
    finally:
        renewer.close()
    lease = store.lease_state("r1")
    assert lease is not None and lease.expires_at is not None
    assert earliest <= lease.expires_at <= latest
    assert (lease.owner, lease.epoch, lease.holder) == (OWNER, 1, HOLDER)


@pytest.mark.parametrize(("run_id", "owner"), [("r1", "someone-else"), ("nope", OWNER)])
def test_a_renewal_for_another_owner_or_run_is_refused_and_changes_nothing(
    backend: Backend, run_id: str, owner: str
) -> None:
    store = backend.open()
    new_run(store)
    before = everything(store)
    renewer = store.renewer(WALL)
    try:
        assert renewer.renew(run_id, owner, TTL) is False
    finally:
        renewer.close()
    assert everything(store) == before


def test_a_released_lease_is_not_renewed(backend: Backend) -> None:
    store = backend.open()
    new_run(store)
    with store.transaction() as tx:
        assert tx.release_lease("r1", OWNER, epoch=1) is True
    renewer = store.renewer(WALL)
    try:
        assert renewer.renew("r1", OWNER, TTL) is False
    finally:
        renewer.close()
    assert store.lease("r1").owner == ""


def test_a_renewer_closed_renews_again_and_closing_twice_is_harmless(backend: Backend) -> None:
    store = backend.open()
    new_run(store, expires=EPOCH)
    renewer = store.renewer(WALL)
    try:
        assert renewer.renew("r1", OWNER, TTL) is True
        renewer.close()
        earliest = store.lease_now(WALL) + 2 * TTL
        assert renewer.renew("r1", OWNER, 2 * TTL) is True
    finally:
        renewer.close()
        renewer.close()
    # The lease clock may move (a server's): the renewal's expiry lies between two reads.
    expires_at = store.lease("r1").expires_at
    assert expires_at is not None and earliest <= expires_at <= store.lease_now(WALL) + 2 * TTL


def test_holds_reads_whether_the_lease_names_the_owner_at_the_epoch_and_writes_nothing(
    backend: Backend,
) -> None:
    """A paused heartbeat's look (decision 0225): expired or not, only the exact owner and
    epoch hold; a released lease, another run or a run unknown hold nothing."""
    store = backend.open()
    new_run(store, expires=EPOCH)  # long expired by the lease clock: still named
    before = everything(store)
    renewer = store.renewer(WALL)
    try:
        assert renewer.holds("r1", OWNER, 1) is True
        assert renewer.holds("r1", OWNER, 2) is False
        assert renewer.holds("r1", "someone-else", 1) is False
        assert renewer.holds("nope", OWNER, 1) is False
        assert everything(store) == before
        with store.transaction() as tx:
            assert tx.release_lease("r1", OWNER, epoch=1) is True
        assert renewer.holds("r1", OWNER, 1) is False
        renewer.close()
        assert renewer.holds("r1", OWNER, 1) is False  # a closed renewer reads again
    finally:
        renewer.close()


def test_release_lets_the_owner_go_and_leaves_anothers_lease_alone(backend: Backend) -> None:
    store = backend.open()
    new_run(store)
    before = everything(store)
    with store.transaction() as tx:
        assert tx.release_lease("r1", "someone-else", epoch=1) is False
    assert everything(store) == before
    with store.transaction() as tx:
        assert tx.release_lease("r1", OWNER, epoch=1) is True
    assert store.lease_state("r1") == LeaseState("r1", "RUNNING", "", None, "", 1)
    with store.transaction() as tx:
        assert tx.release_lease("r1", OWNER, epoch=1) is False


def test_a_late_release_leaves_the_same_owners_newer_lease_alone(backend: Backend) -> None:
    """One owner string stands for every session of a Gate or Driver: a release of the
    lease granted at epoch 1, made after that lease lapsed and was granted to the same
    owner again (epoch 2), changes nothing; only the release naming epoch 2 gives it up."""
    store = backend.open()
    new_run(store, expires=EPOCH)  # lapsed
    lapsed = store.lease_state("r1")
    assert lapsed is not None and lapsed.expired_at(store.lease_now(WALL))
    with store.transaction() as tx:
        taken = tx.take_over(
            "r1",
            owner=OWNER,
            expires_at=FAR,
            holder=HOLDER,
            previous=lapsed,
            proof={"by": "lease expired"},
            now=EPOCH,
        )
    assert taken.epoch == 2
    before = everything(store)
    for owner, epoch in [(OWNER, 1), (OWNER, 3), (OWNER, 0), ("someone-else", 2)]:
        with store.transaction() as tx:
            assert tx.release_lease("r1", owner, epoch=epoch) is False
        assert everything(store) == before, (owner, epoch)
    assert store.lease_state("r1") == LeaseState("r1", "RUNNING", OWNER, FAR, HOLDER, 2)
    with store.transaction() as tx:
        assert tx.release_lease("r1", OWNER, epoch=2) is True
    assert store.lease_state("r1") == LeaseState("r1", "RUNNING", "", None, "", 2)


def _granted_again(store: Store) -> None:
    """Run r1's lease, granted at epoch 1, lapsed and taken over by the same owner (epoch 2)."""
    new_run(store, expires=EPOCH)  # lapsed
    lapsed = store.lease_state("r1")
    assert lapsed is not None and lapsed.expired_at(store.lease_now(WALL))
    with store.transaction() as tx:
        taken = tx.take_over(
            "r1",
            owner=OWNER,
            expires_at=FAR,
            holder=HOLDER,
            previous=lapsed,
            proof={"by": "lease expired"},
            now=EPOCH,
        )
    assert taken.epoch == 2


def test_a_stale_session_of_the_same_owner_claims_no_step_under_its_newer_lease(
    backend: Backend,
) -> None:
    """A claim is a compare-and-set on the lease the claiming session was granted: owner
    and epoch. The same owner's session of epoch 1, whose lease lapsed and was granted
    again (epoch 2), claims nothing (`claim_step`, `claim_next_step`); the session of
    epoch 2 claims the step."""
    store = backend.open()
    _granted_again(store)
    run = store.get_run("r1")
    for epoch in (1, 3):
        refused(
            store,
            RunStateError,
            lambda tx, e=epoch: tx.claim_step("r1", 0, OWNER, lambda: "s1", EPOCH, epoch=e),
            match="moved while claiming step 0",
        )
        refused(
            store,
            RunStateError,
            lambda tx, e=epoch: tx.claim_next_step(run, OWNER, lambda: "s1", EPOCH, epoch=e),
            match="moved while claiming step 0",
        )
    with store.transaction() as tx:
        claimed = tx.claim_next_step(run, OWNER, lambda: "s1", EPOCH, epoch=2)
    assert (claimed.run.step_count, claimed.step.index, claimed.step.id) == (1, 0, "s1")
    assert store.get_run("r1").step_count == 1


@pytest.mark.parametrize("write", ["leave_running", "add_active_time"])
def test_a_stale_session_of_the_same_owner_neither_gives_up_nor_adds_time_to_its_newer_lease(
    backend: Backend, write: str
) -> None:
    """`leave_running` and `add_active_time` judge the lease by owner and epoch: the same
    owner's session of epoch 1 is refused (`LeaseLostError`, nothing written) once the
    lease was granted again at epoch 2; the session of epoch 2 writes."""

    def made(tx: Tx, epoch: int) -> object:
        if write == "leave_running":
            return tx.leave_running("r1", OWNER, epoch=epoch, active_ms_add=5)
        return tx.add_active_time(tx.run_record("r1"), OWNER, 5, epoch=epoch)

    store = backend.open()
    _granted_again(store)
    refused(
        store,
        LeaseLostError,
        lambda tx: made(tx, 1),
        match=f"run r1 is not running under {OWNER!r}'s lease granted at epoch 1",
    )
    with store.transaction() as tx:
        made(tx, 2)
    run = store.get_run("r1")
    assert run.active_time == timedelta(milliseconds=5)
    assert store.lease("r1").owner == ("" if write == "leave_running" else OWNER)


def test_a_release_by_the_epoch_a_hold_kept_gives_up_the_hold_of_a_waiting_run(
    backend: Backend,
) -> None:
    """A waiting run's hold is a lease at the next epoch (decision 0204): the hold is
    released by that epoch, and a release naming the epoch the run waited at changes
    nothing."""
    store = backend.open()
    waiting_run(store, approve=True)
    free = store.lease_state("r1")
    assert free is not None and (free.status, free.owner, free.epoch) == (
        "WAITING_FOR_APPROVAL",
        "",
        1,
    )
    with store.transaction() as tx:
        held = tx.hold_waiting("r1", owner=OWNER, expires_at=FAR, holder=HOLDER, previous=free)
    assert held.epoch == 2
    before = everything(store)
    for epoch in (1, 3):
        with store.transaction() as tx:
            assert tx.release_lease("r1", OWNER, epoch=epoch) is False
        assert everything(store) == before
    with store.transaction() as tx:
        assert tx.release_lease("r1", OWNER, epoch=2) is True
    assert store.lease_state("r1") == LeaseState("r1", "WAITING_FOR_APPROVAL", "", None, "", 2)


def test_two_holds_of_a_waiting_run_by_one_owner_are_two_leases(backend: Backend) -> None:
    """One owner holds a waiting run twice (two sessions of one Gate, the first one's hold
    judged the gate's own by the second): each hold is its own epoch, so the first one's
    late release gives up nothing and its `leave_waiting` is refused; the second leaves
    waiting at its own epoch, kept."""
    store = backend.open()
    approval = waiting_run(store, approve=True)
    free = store.lease_state("r1")
    assert free is not None
    with store.transaction() as tx:
        first = tx.hold_waiting("r1", owner=OWNER, expires_at=FAR, holder=HOLDER, previous=free)
    mine = store.lease_state("r1")
    assert mine is not None
    with store.transaction() as tx:
        second = tx.hold_waiting("r1", owner=OWNER, expires_at=FAR, holder=HOLDER, previous=mine)
    assert (first.epoch, second.epoch) == (2, 3)
    # The first hold's lease, judged by the second attach, is no longer there to take.
    refused(
        store,
        RunStateError,
        lambda tx: tx.hold_waiting("r1", owner=OWNER, expires_at=FAR, holder=HOLDER, previous=mine),
        match="was attached elsewhere or changed status",
    )
    before = everything(store)
    with store.transaction() as tx:
        assert tx.release_lease("r1", OWNER, epoch=first.epoch) is False
    assert everything(store) == before

    def leave(epoch: int) -> Callable[[Tx], object]:
        return lambda tx: tx.leave_waiting(
            "r1", approval.id, owner=OWNER, epoch=epoch, expires_at=FAR, holder=HOLDER, now=EPOCH
        )

    refused(store, RunStateError, leave(first.epoch), match="taken by another resume")
    with store.transaction() as tx:
        leased = leave(second.epoch)(tx)
    assert isinstance(leased, Leased) and leased.epoch == 3
    assert store.lease_state("r1") == LeaseState("r1", "RUNNING", OWNER, FAR, HOLDER, 3)
    assert event_types(store)[-1] == "run.resumed"


def test_a_lease_is_expired_at_the_very_instant_it_names_and_live_just_before(
    backend: Backend,
) -> None:
    store = backend.open()
    expiry = store.lease_now(WALL)
    new_run(store, expires=expiry)
    lease = store.lease_state("r1")
    assert lease is not None and lease.expires_at == expiry  # to the microsecond
    assert lease.expired_at(expiry) and not lease.live_at(expiry)
    just_before = expiry - timedelta(microseconds=1)
    assert lease.live_at(just_before) and not lease.expired_at(just_before)
    assert lease.expired_at(store.lease_now(WALL))


def test_a_takeover_replaces_only_the_exact_lease_it_judged(backend: Backend) -> None:
    store = backend.open()
    new_run(store, expires=store.lease_now(WALL))
    judged = store.lease_state("r1")
    assert judged is not None and judged.expired_at(store.lease_now(WALL))
    renewer = store.renewer(WALL)  # the owner's heartbeat renews before the takeover commits
    try:
        assert renewer.renew("r1", OWNER, TTL) is True
    finally:
        renewer.close()

    def take(previous: LeaseState) -> Callable[[Tx], TakenOver]:
        return lambda tx: tx.take_over(
            "r1",
            owner="taker",
            expires_at=FAR,
            holder="{}",
            previous=previous,
            proof={"by": "lease expired"},
            now=EPOCH,
        )

    refused(
        store,
        RunStateError,
        take(judged),
        match="^run r1 was taken by another resume or changed status; nothing was executed$",
    )
    fresh = store.lease_state("r1")
    assert fresh is not None
    with store.transaction() as tx:
        taken = take(fresh)(tx)
    assert taken.epoch == 2
    assert store.lease_state("r1") == LeaseState("r1", "RUNNING", "taker", FAR, "{}", 2)


def test_a_takeover_of_a_run_that_ended_since_it_was_judged_is_refused(backend: Backend) -> None:
    store = backend.open()
    new_run(store, expires=EPOCH)
    judged = store.lease_state("r1")
    assert judged is not None
    with store.transaction() as tx:
        tx.cancel_run("r1", "ops", "stop", EPOCH)
    refused(
        store,
        RunStateError,
        lambda tx: tx.take_over(
            "r1", owner="taker", expires_at=FAR, holder="", previous=judged, proof={}, now=EPOCH
        ),
    )


def test_lock_run_reads_the_lease_the_store_reads_on_the_same_clock(backend: Backend) -> None:
    store = backend.open()
    new_run(store, expires=datetime(2026, 11, 30, 9, 0, 30, 123456, tzinfo=UTC))
    earliest = store.lease_now(WALL)
    with store.transaction() as tx:
        locked = tx.lock_run("r1")
        inside = tx.lease_now(WALL)
    assert earliest <= inside <= store.lease_now(WALL)  # one clock, inside and out
    assert locked is not None
    assert locked.lease == store.lease_state("r1")
    lease = store.lease("r1")
    assert (lease.owner, lease.expires_at, lease.epoch) == (
        locked.lease.owner,
        locked.lease.expires_at,
        locked.lease.epoch,
    )


def test_an_unreadable_lease_expiry_or_owner_reads_as_held_never_as_free(
    backend: Backend,
) -> None:
    if not backend.holds_bytes:
        pytest.skip(f"{backend.name} cannot hold bytes that are not text")
    store = backend.open()
    new_run(store, expires=EPOCH)
    tamper = backend.tamper(store)
    tamper.write_bytes("runs", "r1", "lease_owner", b"\xff")
    tamper.write_bytes("runs", "r1", "lease_expires_at", b"\xff")
    state = store.lease_state("r1")
    assert state is not None
    assert (state.owner, state.expiry_readable, state.shown_expiry()) == ("\\xff", False, "\\xff")
    far_later = datetime(9000, 1, 1, tzinfo=UTC)
    assert not state.expired_at(far_later) and not state.live_at(EPOCH)
    lease = store.lease("r1")
    assert lease.owner == "\\xff"
    assert lease.expires_at is not None and lease.expires_at.year == 9999
    # Nobody holding it can renew it: the owner it names is not the owner that was.
    renewer = store.renewer(WALL)
    try:
        assert renewer.renew("r1", OWNER, TTL) is False
    finally:
        renewer.close()


def test_the_leases_of_a_page_of_runs_are_read_together_as_each_alone_reads(
    backend: Backend,
) -> None:
    """`leases_of`: how a list of runs says who holds each RUNNING one (decision 0196)
    without a read per run; a run that does not exist is left out, none named reads none."""
    store = backend.open()
    new_run(store, "r1", expires=EPOCH)
    new_run(store, "r2", owner="other/1")
    new_run(store, "r3")
    with store.transaction() as tx:
        assert tx.release_lease("r3", OWNER, epoch=1) is True
    leases = store.leases_of(["r3", "r1", "nope", "r2"])
    assert leases == {run_id: store.lease(run_id) for run_id in ("r1", "r2", "r3")}
    assert (leases["r1"].owner, leases["r1"].expires_at, leases["r1"].epoch) == (OWNER, EPOCH, 1)
    assert leases["r1"].holder == {"host": "contract"}
    assert leases["r2"].owner == "other/1" and leases["r3"].owner == ""
    assert store.leases_of([]) == {}
    if not backend.holds_bytes:  # PostgreSQL refuses such bytes at the door
        return
    # An owner or expiry that will not read is held, as `lease` reads it (never "nobody").
    tamper = backend.tamper(store)
    assert tamper.write_bytes("runs", "r2", "lease_owner", b"\xffother") == 1
    assert tamper.write_bytes("runs", "r2", "lease_expires_at", b"\xff") == 1
    unreadable = store.leases_of(["r2"])
    assert unreadable == {"r2": store.lease("r2")}
    assert unreadable["r2"].owner != "" and unreadable["r2"].expires_at == FAR_AS_HELD
