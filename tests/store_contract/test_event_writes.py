"""A transaction's events are written together, just before it commits (decision 0100).

They are numbered and hashed in memory as they are appended and written in one
statement, each partition's head moved once, before `COMMIT` (before a group
commit's work leaves its savepoint). What must not change: a read on the store's
own connection inside the transaction sees them (the test kit reads the uncommitted
head there), a rollback or a failing work leaves none of them and no head moved,
and the next transaction chains to them, in every partition. Each test runs on each
backend with N = 1 and N = 4 chain partitions.
"""

from __future__ import annotations

import pytest

from agentrt._chain import partition_of
from agentrt._errors import StoreError
from agentrt._store import Store

from .conftest import Backend
from .world import EPOCH, OWNER, everything, new_run


def two_runs(store: Store, n: int) -> tuple[str, str]:
    """Two runs in different partitions when N > 1 (the same one when N = 1)."""
    first = "r1"
    apart = [f"r{i}" for i in range(2, 200) if partition_of(f"r{i}", n) != partition_of(first, n)]
    second = "r2" if n == 1 else apart[0]
    new_run(store, first)
    new_run(store, second)
    return first, second


def resume(store: Store, run_id: str, times: int = 1) -> None:
    with store.transaction() as tx:
        for _ in range(times):
            tx.go_on_after_interruption(run_id, {"detail": "x"}, EPOCH)


def test_the_store_reads_the_open_transactions_events_on_its_own_connection(
    parted: Backend,
) -> None:
    store = parted.open()
    run_id, _ = two_runs(store, parted.partitions)
    with store.transaction() as tx:
        tx.go_on_after_interruption(run_id, {"detail": "x"}, EPOCH)
        tx.go_on_after_interruption(run_id, {"detail": "y"}, EPOCH)
        appended = tx.events
        inside_heads = store.chain_heads()
        inside_events = store.list_events(run_id, 0, 1000)
    part = partition_of(run_id, parted.partitions)
    assert inside_heads[part] == (appended[-1].seq, appended[-1].hash)
    assert inside_events[-2:] == appended
    assert store.chain_heads() == inside_heads
    assert store.list_events(run_id, 0, 1000) == inside_events


def test_a_rolled_back_transaction_leaves_no_event_and_no_head_moved(parted: Backend) -> None:
    store = parted.open()
    run_id, other = two_runs(store, parted.partitions)
    before = everything(store)
    with pytest.raises(ZeroDivisionError), store.transaction() as tx:
        tx.go_on_after_interruption(run_id, {"detail": "x"}, EPOCH)
        tx.go_on_after_interruption(other, {"detail": "x"}, EPOCH)
        raise ZeroDivisionError
    assert everything(store) == before
    resume(store, run_id)
    report = store.verify_events(head=store.chain_heads())
    assert report.intact, report.first_break


def test_events_of_two_partitions_in_one_transaction_move_both_heads(parted: Backend) -> None:
    store = parted.open()
    first, second = two_runs(store, parted.partitions)
    with store.transaction() as tx:
        tx.go_on_after_interruption(first, {"detail": "1"}, EPOCH)
        tx.go_on_after_interruption(second, {"detail": "2"}, EPOCH)
        tx.go_on_after_interruption(first, {"detail": "3"}, EPOCH)
        appended = tx.events
    n = parted.partitions
    heads = store.chain_heads()
    for run_id in (first, second):
        part = partition_of(run_id, n)
        last = [e for e in appended if partition_of(e.run_id, n) == part][-1]
        assert heads[part] == (last.seq, last.hash)
    assert store.list_events(None, 0, 1000)[-3:] == sorted(appended, key=lambda e: e.seq)
    resume(store, first)
    resume(store, second)
    report = store.verify_events(head=store.chain_heads())
    assert report.intact, report.first_break
    assert report.checked == len(store.list_events(None, 0, 1000))


def test_many_events_in_one_transaction_are_written_in_order(parted: Backend) -> None:
    store = parted.open()
    run_id, _ = two_runs(store, parted.partitions)
    with store.transaction() as tx:
        for i in range(1203):  # more than one statement's worth on PostgreSQL (1,000 rows)
            tx.go_on_after_interruption(run_id, {"detail": str(i)}, EPOCH)
        appended = tx.events
    assert store.list_events(run_id, 0, 10_000)[-1203:] == appended
    report = store.verify_events(head=store.chain_heads())
    assert report.intact, report.first_break


def test_a_failing_work_of_a_group_leaves_none_of_its_events_and_the_next_chains_on(
    parted: Backend,
) -> None:
    store = parted.open()
    run_id, other = two_runs(store, parted.partitions)

    def good(tx: object) -> int:
        tx.go_on_after_interruption(run_id, {"detail": "kept"}, EPOCH)  # type: ignore[attr-defined]
        return len(tx.events)  # type: ignore[attr-defined]

    def bad(tx: object) -> None:
        tx.go_on_after_interruption(other, {"detail": "lost"}, EPOCH)  # type: ignore[attr-defined]
        tx.go_on_after_interruption(run_id, {"detail": "lost"}, EPOCH)  # type: ignore[attr-defined]
        raise ZeroDivisionError

    outcomes = store.transactions([good, bad, good])
    assert [o.error is None for o in outcomes] == [True, False, True]
    assert isinstance(outcomes[1].error, ZeroDivisionError)
    details = [
        e.payload["detail"] for e in store.list_events(None, 0, 1000) if e.type == "run.resumed"
    ]
    assert details == ["kept", "kept"]
    report = store.verify_events(head=store.chain_heads())
    assert report.intact, report.first_break
    assert store.lease(run_id).owner == OWNER


def test_events_that_cannot_be_written_fail_the_commit_writing_nothing(parted: Backend) -> None:
    # An event of no run breaks the events' foreign key when the events are written, at
    # commit (PostgreSQL: in the pipeline with COMMIT, which the server then skips).
    store = parted.open()
    run_id, _ = two_runs(store, parted.partitions)
    before = everything(store)
    with pytest.raises(StoreError, match=r"(?i)foreign key"), store.transaction() as tx:
        tx.release_lease(run_id, OWNER, epoch=1)
        tx.go_on_after_interruption(run_id, {"detail": "x"}, EPOCH)
        tx.go_on_after_interruption("no-such-run", {"detail": "x"}, EPOCH)
    assert everything(store) == before
    resume(store, run_id)  # the store goes on, and the chain has no gap
    report = store.verify_events(head=store.chain_heads())
    assert report.intact, report.first_break
    kept = everything(store)
    outcomes = store.transactions(
        [lambda tx: tx.go_on_after_interruption("no-such-run", {"detail": "x"}, EPOCH)]
    )
    assert isinstance(outcomes[0].error, StoreError)  # that work's own failure
    assert everything(store) == kept


def test_a_transaction_whose_events_failed_to_write_cannot_commit_even_if_the_error_was_caught(
    parted: Backend,
) -> None:
    # A read on the store's connection inside the transaction writes its events first
    # (to see them): that write fails here, and the caller catches it. Leaving the block
    # normally must not commit the transaction without its events.
    store = parted.open()
    run_id, _ = two_runs(store, parted.partitions)
    before = everything(store)
    with pytest.raises(StoreError), store.transaction() as tx:
        tx.go_on_after_interruption("no-such-run", {"detail": "x"}, EPOCH)
        with pytest.raises(StoreError):
            store.list_events(run_id)
    assert everything(store) == before
    report = store.verify_events(head=store.chain_heads())
    assert report.intact, report.first_break
