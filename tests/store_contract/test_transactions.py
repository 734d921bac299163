"""A transaction commits once, durably, when its block ends, or leaves nothing at all.

Derived from `tests/test_store.py` (the transaction tests) and
`tests/test_busy_database.py::test_the_busy_timeout_alone_refuses_a_write_with_store_busy_error`.
"""

from __future__ import annotations

import threading

import pytest

from agentrt._errors import RunStateError, StoreBusyError, StoreError
from agentrt._records import Limits

from .conftest import Backend
from .world import EPOCH, OWNER, everything, new_run


def test_an_exception_in_the_block_rolls_back_every_write_and_every_event(
    backend: Backend,
) -> None:
    store = backend.open()
    new_run(store, "r0")
    before = everything(store)
    with pytest.raises(ZeroDivisionError), store.transaction() as tx:
        tx.go_on_after_interruption("r0", {"detail": "x"}, EPOCH)
        tx.release_lease("r0", OWNER, epoch=1)
        raise ZeroDivisionError
    assert everything(store) == before


def test_a_base_exception_in_the_block_rolls_back_too(backend: Backend) -> None:
    store = backend.open()
    before = everything(store)
    with pytest.raises(KeyboardInterrupt), store.transaction() as tx:
        tx.create_run(
            "r1",
            "goal",
            Limits(),
            owner=OWNER,
            lease_expires_at=EPOCH,
            holder="{}",
            specs=[],
            now=EPOCH,
        )
        raise KeyboardInterrupt
    assert everything(store) == before
    assert store.run_id_exists("r1") is False


def test_a_refused_write_rolls_back_the_writes_before_it_in_the_same_transaction(
    backend: Backend,
) -> None:
    store = backend.open()
    new_run(store, "r0")
    before = everything(store)
    with pytest.raises(RunStateError), store.transaction() as tx:
        tx.go_on_after_interruption("r0", {"detail": "first"}, EPOCH)
        tx.end_run("r0", "COMPLETED", "goal_completed", "", now=EPOCH)
        tx.end_run("r0", "FAILED", "agent_error", "twice", now=EPOCH)  # no longer RUNNING
    assert everything(store) == before


def test_tx_events_lists_the_appended_events_in_order_as_a_read_gives_them(
    backend: Backend,
) -> None:
    store = backend.open()
    with store.transaction() as tx:
        new = tx.create_run(
            "r1",
            "goal",
            Limits(),
            owner=OWNER,
            lease_expires_at=EPOCH,
            holder="{}",
            specs=[],
            now=EPOCH,
        )
        tx.go_on_after_interruption("r1", {"n": [1, 2.5, None]}, EPOCH)
        appended = tx.events
    assert new.id == "r1"
    assert [e.type for e in appended] == ["run.created", "run.started", "run.resumed"]
    assert [e.seq for e in appended] == [1, 2, 3]
    assert appended == store.list_events(None, 0, 100, cap=None)


def test_a_transaction_is_unusable_after_its_block(backend: Backend) -> None:
    store = backend.open()
    new_run(store)
    with store.transaction() as tx:
        pass
    before = everything(store)
    with pytest.raises(StoreError):
        tx.lock_run("r1")
    with pytest.raises(StoreError):
        tx.go_on_after_interruption("r1", {}, EPOCH)
    assert everything(store) == before


def test_transactions_do_not_nest(backend: Backend) -> None:
    store = backend.open()
    with (
        store.transaction(),
        pytest.raises(StoreError, match="do not nest"),
        store.transaction(),
    ):
        pass
    new_run(store)  # the store still writes afterwards
    assert store.run_id_exists("r1")


def test_a_commit_is_seen_by_another_store_on_the_same_database(backend: Backend) -> None:
    store = backend.open()
    created = new_run(store)
    other = backend.reopen()
    assert repr(other.get_run("r1")) == repr(created)
    assert other.list_events(None, 0, 100, cap=None) == store.list_events(None, 0, 100, cap=None)


def test_a_read_only_store_refuses_a_transaction(backend: Backend) -> None:
    store = backend.open()
    new_run(store)
    reader = backend.reader()
    assert reader.read_only is True
    with pytest.raises(StoreError, match="read-only"), reader.transaction():
        pass
    assert everything(reader) == everything(store)


def test_a_closed_store_refuses_transactions_and_reads(backend: Backend) -> None:
    store = backend.open()
    new_run(store)
    store.close()
    with pytest.raises(StoreError, match="closed"), store.transaction():
        pass
    with pytest.raises(StoreError, match="closed"):
        store.get_run("r1")
    store.close()  # closing twice is harmless


def test_a_database_held_by_another_writer_past_the_wait_is_store_busy_and_nothing_is_written(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not backend.one_writer:
        pytest.skip(
            f"{backend.name}: writers do not wait for one another to begin (no database-wide "
            "write lock); see the next test for a held run"
        )
    holder = backend.open()
    new_run(holder, "r0")
    impatient = backend.impatient(monkeypatch)
    holding, refused = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def hold() -> None:
        try:
            with holder.transaction() as tx:
                tx.go_on_after_interruption("r0", {"held": True}, EPOCH)
                holding.set()
                assert refused.wait(60), "the impatient write never gave up"
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)
            holding.set()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(60)
        with pytest.raises(StoreBusyError), impatient.transaction() as tx:
            tx.release_lease("r0", OWNER, epoch=1)
    finally:
        refused.set()
        thread.join(60)
    assert failures == []
    # Only the holder's write committed; the busy one left nothing.
    assert impatient.lease("r0").owner == OWNER
    assert [e.type for e in impatient.list_events("r0", 0, 100)][-1] == "run.resumed"


def test_a_run_held_by_another_transaction_past_the_wait_refuses_the_write_writing_nothing(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lock_run` holds the run until commit: a second writer of that run waits at most
    the backend's lock wait, then fails with `StoreBusyError` (busy at its begin on
    SQLite, at its own `lock_run` on a server: before it wrote anything, so the outcome
    writes may retry it), leaving nothing written."""
    holder = backend.open()
    new_run(holder, "r0")
    impatient = backend.impatient(monkeypatch)
    holding, refused = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def hold() -> None:
        try:
            with holder.transaction() as tx:
                assert tx.lock_run("r0") is not None
                tx.go_on_after_interruption("r0", {"held": True}, EPOCH)
                holding.set()
                assert refused.wait(60), "the impatient write never gave up"
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)
            holding.set()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(60)
        with pytest.raises(StoreBusyError), impatient.transaction() as tx:
            tx.lock_run("r0")
            tx.release_lease("r0", OWNER, epoch=1)
    finally:
        refused.set()
        thread.join(60)
    assert failures == []
    assert impatient.lease("r0").owner == OWNER
    assert [e.type for e in impatient.list_events("r0", 0, 100)][-1] == "run.resumed"


def test_a_snapshot_reads_the_run_its_steps_and_its_approvals_whole(backend: Backend) -> None:
    store = backend.open()
    run = new_run(store, "r0")
    with store.snapshot() as view:
        assert view.run_record("r0") == run
        assert view.steps_of_run("r0") == []
        assert view.approvals_of_run("r0") == []


def test_a_snapshot_refuses_every_write_and_changes_nothing(backend: Backend) -> None:
    store = backend.open()
    new_run(store, "r0")
    before = everything(store)
    with pytest.raises(StoreError), store.snapshot() as view:
        view.release_lease("r0", OWNER, epoch=1)  # type: ignore[attr-defined]  # not on Snapshot
    assert everything(store) == before
    with store.transaction() as tx:  # the store writes again after the snapshot
        assert tx.release_lease("r0", OWNER, epoch=1) is True


def test_a_snapshot_does_not_nest_in_a_transaction(backend: Backend) -> None:
    store = backend.open()
    new_run(store, "r0")
    with store.transaction(), pytest.raises(StoreError, match="do not nest"), store.snapshot():
        pass


def test_a_snapshot_sees_one_committed_state_while_another_store_writes(
    backend: Backend,
) -> None:
    """Reads inside one snapshot agree with each other while a second store commits."""
    store = backend.open()
    new_run(store, "r0")
    other = backend.reopen()
    with store.snapshot() as view:
        first = view.run_record("r0")
        with other.transaction() as tx:
            tx.release_lease("r0", OWNER, epoch=1)
        assert view.run_record("r0") == first
    assert store.lease("r0").owner == ""


def test_the_stores_own_reads_inside_a_snapshot_are_of_its_moment(backend: Backend) -> None:
    """A view that reads a run, its approvals and its lease with the store's own reads,
    inside one `snapshot()` block (on the thread that opened it), reads them at one moment:
    a lease given back by another store meanwhile is not seen until the block ends."""
    store = backend.open()
    new_run(store, "r0")
    other = backend.reopen()
    with store.snapshot():
        run = store.get_run("r0")
        with other.transaction() as tx:
            tx.release_lease("r0", OWNER, epoch=1)
        assert store.get_run("r0") == run
        assert store.lease("r0").owner == OWNER
        assert store.leases_of(["r0"])["r0"].owner == OWNER
        state = store.lease_state("r0")
        assert state is not None and state.owner == OWNER
        assert [r.id for r in store.list_runs()] == ["r0"]
    assert store.lease("r0").owner == ""


# -- group commit (`Store.transactions`) ---------------------------------------------------------


def _create(run_id: str) -> object:
    def work(tx: object) -> str:
        run = tx.create_run(  # type: ignore[attr-defined]
            run_id,
            "goal",
            Limits(),
            owner=OWNER,
            lease_expires_at=EPOCH,
            holder="{}",
            specs=[],
            now=EPOCH,
        )
        return str(run.id)

    return work


def test_a_group_commits_every_work_and_returns_each_outcome_in_order(backend: Backend) -> None:
    store = backend.open()
    outcomes = store.transactions([_create("r1"), _create("r2"), _create("r3")])
    assert [(o.value, o.error) for o in outcomes] == [("r1", None), ("r2", None), ("r3", None)]
    assert sorted(r.id for r in store.list_runs()) == ["r1", "r2", "r3"]
    # One chain, in the works' order, with no gap.
    events = store.list_events()
    assert [(e.seq, e.run_id) for e in events] == [
        (1, "r1"),
        (2, "r1"),
        (3, "r2"),
        (4, "r2"),
        (5, "r3"),
        (6, "r3"),
    ]
    assert store.verify_events().intact


def test_a_work_that_raises_is_rolled_back_alone_and_the_chain_has_no_gap(
    backend: Backend,
) -> None:
    store = backend.open()
    new_run(store, "r0")
    before = [(e.seq, e.hash) for e in store.list_events()]

    def failing(tx: object) -> None:
        _create("bad")(tx)
        raise ZeroDivisionError("the work's own failure")

    outcomes = store.transactions([_create("r1"), failing, _create("r2")])
    assert outcomes[0].value == "r1" and outcomes[2].value == "r2"
    assert isinstance(outcomes[1].error, ZeroDivisionError)
    assert store.run_id_exists("bad") is False
    events = store.list_events()
    assert [(e.seq, e.hash) for e in events][: len(before)] == before
    assert [e.run_id for e in events[len(before) :]] == ["r1", "r1", "r2", "r2"]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert store.verify_events().intact


def test_a_refused_write_in_a_group_is_that_works_error_only(backend: Backend) -> None:
    store = backend.open()
    new_run(store, "r0")

    def twice(tx: object) -> None:
        tx.end_run("r0", "COMPLETED", "goal_completed", "", now=EPOCH)  # type: ignore[attr-defined]
        tx.end_run("r0", "FAILED", "agent_error", "twice", now=EPOCH)  # type: ignore[attr-defined]

    outcomes = store.transactions([twice, _create("r1")])
    assert isinstance(outcomes[0].error, RunStateError)
    assert outcomes[1].value == "r1"
    assert store.get_run("r0").status == "RUNNING"
    assert store.run_id_exists("r1") is True


def test_a_base_exception_in_a_group_loses_no_committed_work_and_writes_nothing_after_it(
    backend: Backend,
) -> None:
    """Where the works share one commit, the group is rolled back and the exception
    raised; where each commits alone, the works before it keep their outcomes and the
    works after it never run. Either way no outcome misreports what is on record."""
    store = backend.open()

    def interrupted(tx: object) -> None:
        _create("mid")(tx)
        raise KeyboardInterrupt

    try:
        outcomes = store.transactions([_create("r1"), interrupted, _create("r2")])
    except KeyboardInterrupt:
        assert store.list_runs() == [] and store.list_events() == []
        return
    assert outcomes[0].value == "r1" and outcomes[0].error is None
    assert isinstance(outcomes[1].error, KeyboardInterrupt)
    assert isinstance(outcomes[2].error, StoreError)
    assert [r.id for r in store.list_runs()] == ["r1"]
    assert store.verify_events().intact


def test_lock_run_gives_the_run_as_the_lock_read_it_whenever_it_is_asked_for(
    backend: Backend,
) -> None:
    """`GuardedRun.run` is decoded when first asked for (decision 0092's cut of a step's
    CPU), but it is the run as the lock read it: not changed by a write after the lock
    in the same transaction, and readable after the transaction ended."""
    store = backend.open()
    created = new_run(store)
    with store.transaction() as tx:
        locked = tx.lock_run("r1")
        assert locked is not None and locked.lease.owner == OWNER
        claimed = tx.claim_next_step(tx.lock_run("r1").run, OWNER, lambda: "s1", EPOCH, epoch=1)  # type: ignore[union-attr]
        assert claimed.run.step_count == 1
        after = tx.lock_run("r1")
    assert locked.run == created and locked.run.step_count == 0
    assert after is not None and after.run == claimed.run == store.get_run("r1")
    assert repr(locked.run) == repr(created)
