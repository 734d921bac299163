"""Bounded reads: recovery's pages of unfinished runs and the lists the views page through.

Derived from `tests/test_recover.py::test_recover_pages_through_runs_oldest_first_within_its_limit`,
`::test_recover_refuses_an_after_that_names_no_run`, `tests/test_store.py` (the list
tests), `tests/test_view.py` and `tests/test_export.py`.
"""

from __future__ import annotations

import pytest

from agentrt import Decision
from agentrt._store import Store
from agentrt._store._records import RunCandidate, RunCursor

from .conftest import Backend
from .world import EPOCH, FAR, HOLDER, OWNER, at, claim, decide, new_run, waiting_run


def five_runs(store: Store) -> None:
    """r1..r5 in that order: r2 ended, r4 waiting on an approval, the others running."""
    for n in (1, 2, 3):
        new_run(store, f"r{n}", goal=f"goal {n}")
    with store.transaction() as tx:
        tx.end_run("r2", "COMPLETED", "goal_completed", "", now=EPOCH)
    waiting_run(store, "r4")
    new_run(store, "r5", goal="goal 5", origin="driver")


def ids(candidates: list[RunCandidate]) -> list[str]:
    return [c.run_id for c in candidates]


def test_unfinished_runs_are_paged_oldest_first_skipping_ended_runs(backend: Backend) -> None:
    store = backend.open()
    five_runs(store)
    assert ids(store.unfinished_runs(None, 100)) == ["r1", "r3", "r4", "r5"]


def test_a_page_of_unfinished_runs_holds_at_most_its_limit_and_goes_on_after_its_cursor(
    backend: Backend,
) -> None:
    store = backend.open()
    five_runs(store)
    first = store.unfinished_runs(None, 2)
    assert ids(first) == ["r1", "r3"]
    second = store.unfinished_runs(first[-1].cursor, 2)
    assert ids(second) == ["r4", "r5"]
    assert store.unfinished_runs(second[-1].cursor, 2) == []


def test_an_unfinished_run_is_read_with_its_status_lease_and_origin(backend: Backend) -> None:
    store = backend.open()
    five_runs(store)
    by_id = {c.run_id: c for c in store.unfinished_runs(None, 100)}
    r4, r5 = by_id["r4"], by_id["r5"]
    assert (r5.status, r5.origin, r5.unreadable) == ("RUNNING", "driver", ())
    assert r5.lease == store.lease_state("r5")
    assert (r5.lease.owner, r5.lease.expires_at, r5.lease.holder) == (OWNER, FAR, HOLDER)
    assert (r4.status, r4.origin, r4.lease.owner) == ("WAITING_FOR_APPROVAL", "gate", "")
    assert r4.cursor == store.run_cursor("r4")


def test_run_cursors_follow_the_order_runs_were_made_in_and_an_unknown_run_has_none(
    backend: Backend,
) -> None:
    store = backend.open()
    five_runs(store)
    cursors = [store.run_cursor(f"r{n}") for n in range(1, 6)]
    assert all(isinstance(c, RunCursor) for c in cursors)
    assert sorted(c for c in cursors if c is not None) == cursors
    assert store.run_cursor("nope") is None
    r2 = cursors[1]
    assert r2 is not None and ids(store.unfinished_runs(r2, 100)) == ["r3", "r4", "r5"]


def test_list_runs_is_newest_first_within_its_limit_offset_and_status(backend: Backend) -> None:
    store = backend.open()
    five_runs(store)
    assert [r.id for r in store.list_runs()] == ["r5", "r4", "r3", "r2", "r1"]
    assert [r.id for r in store.list_runs(limit=2, offset=1)] == ["r4", "r3"]
    assert [r.id for r in store.list_runs(status="RUNNING")] == ["r5", "r3", "r1"]
    assert (store.count_runs(), store.count_runs("RUNNING"), store.count_runs("FAILED")) == (
        5,
        3,
        0,
    )
    with pytest.raises(ValueError):
        store.list_runs(limit=-1)
    with pytest.raises(ValueError):
        store.list_runs(offset=-1)


def test_list_steps_is_in_index_order_within_its_limit_and_offset(backend: Backend) -> None:
    store = backend.open()
    new_run(store)
    steps = [claim(store, ids=f"x{n}") for n in range(4)]
    assert [s.index for s in store.list_steps("r1")] == [0, 1, 2, 3]
    assert [s.id for s in store.list_steps("r1", limit=2, offset=1)] == [s.id for s in steps[1:3]]
    assert store.list_steps("nope") == []


def test_list_events_gives_the_events_after_a_seq_within_its_limit(backend: Backend) -> None:
    store = backend.open()
    new_run(store, "ra")
    new_run(store, "rb")
    with store.transaction() as tx:
        tx.go_on_after_interruption("ra", {}, at(1))
    assert [e.seq for e in store.list_events()] == [1, 2, 3, 4, 5]
    assert [e.seq for e in store.list_events(after_seq=2, limit=2)] == [3, 4]
    assert [e.seq for e in store.list_events("ra")] == [1, 2, 5]
    assert [e.seq for e in store.list_events("ra", after_seq=2)] == [5]
    assert store.list_events(after_seq=5) == []
    with pytest.raises(ValueError):
        store.list_events(limit=-1)


def test_a_runs_event_positions_are_read_from_its_end(backend: Backend) -> None:
    store = backend.open()
    new_run(store, "ra")
    new_run(store, "rb")
    with store.transaction() as tx:
        tx.go_on_after_interruption("ra", {}, at(1))
    assert (store.last_event_seq("ra"), store.event_count("ra")) == (5, 3)
    assert [store.event_seq_from_end("ra", back) for back in range(4)] == [5, 2, 1, 0]
    assert (store.last_event_seq("nope"), store.event_count("nope")) == (0, 0)


def test_the_newest_event_the_record_ids_and_an_event_hash_are_read(backend: Backend) -> None:
    # The crash test kit's reads (the newest recorded time, every id a rebuilt id
    # factory must skip, whether a lost transaction's event is on file).
    store = backend.open()
    assert (store.newest_event(), store.newest_event("ra"), store.record_ids()) == (
        None,
        None,
        set(),
    )
    new_run(store, "ra")
    approval = waiting_run(store, "rb")
    first = store.list_events(run_id="ra", cap=None)
    second = store.list_events(run_id="rb", cap=None)
    assert store.newest_event("ra") == first[-1]
    assert store.newest_event() == store.newest_event("rb") == second[-1]
    assert store.newest_event("nope") is None
    assert store.event_hash_exists(first[0].hash)
    assert not store.event_hash_exists("0" * 64)
    steps = {s.id for s in store.list_steps("rb")}
    assert len(steps) == 1
    assert store.record_ids() == {"ra", "rb", approval.id} | steps


def test_a_transactions_own_events_are_newest_on_its_store_and_absent_elsewhere(
    backend: Backend,
) -> None:
    store = backend.open()
    new_run(store, "ra")
    committed = store.newest_event("ra")
    reader = backend.reader()
    with store.transaction() as tx:
        tx.go_on_after_interruption("ra", {}, at(1))
        mine = tx.events[-1]
        assert store.newest_event("ra") == store.newest_event() == mine
        assert store.event_hash_exists(mine.hash)
        assert reader.newest_event("ra") == reader.newest_event() == committed
        assert not reader.event_hash_exists(mine.hash)
    assert reader.newest_event("ra") == mine


def test_run_ids_are_found_by_prefix_in_order_within_a_limit(backend: Backend) -> None:
    store = backend.open()
    for run_id in ("ab2", "ab1", "b", "a_c", "ab%"):
        new_run(store, run_id)
    assert store.run_ids_starting("ab", 10) == ["ab%", "ab1", "ab2"]
    assert store.run_ids_starting("ab", 2) == ["ab%", "ab1"]
    assert store.run_ids_starting("a_", 10) == ["a_c"]  # no wildcard in a prefix
    assert store.run_ids_starting("z", 10) == []
    assert (store.run_id_exists("b"), store.run_id_exists("c")) == (True, False)


def test_pending_approvals_are_listed_per_run_and_newest_first_across_runs(
    backend: Backend,
) -> None:
    store = backend.open()
    first = waiting_run(store, "r1")
    second = waiting_run(store, "r2")
    new_run(store, "r3")
    assert [a.id for a in store.pending_approvals("r1")] == [first.id]
    assert [a.id for a in store.pending_approvals()] == [second.id, first.id]
    assert [a.id for a in store.pending_approvals(limit=1)] == [second.id]
    assert store.count_runs_asking_a_person() == 2
    newest = store.newest_pending_approvals(10, 100, 100)
    assert [(w.id, w.run_id, w.tool, w.goal) for w in newest] == [
        (second.id, "r2", "push", "goal"),
        (first.id, "r1", "push", "goal"),
    ]
    assert [w.id for w in store.newest_pending_approvals(1, 100, 100)] == [second.id]
    of = store.pending_approvals_of(["r2", "r3"], 100)
    assert [(w.id, w.kind, w.hash, w.created_at) for w in of] == [
        (second.id, "remote_change", "d" * 64, EPOCH)
    ]
    for limit in (0, 1001):
        with pytest.raises(ValueError):
            store.pending_approvals(limit=limit)


def test_a_decided_approval_no_longer_asks_a_person(backend: Backend) -> None:
    store = backend.open()
    waiting_run(store, "r1", approve=True)
    assert store.pending_approvals() == []
    assert store.count_runs_asking_a_person() == 0
    assert store.newest_pending_approvals(10, 100, 100) == []


def test_a_runs_steps_are_read_from_an_index_whole_at_most_a_limit_in_index_order(
    backend: Backend,
) -> None:
    """`steps_from`: how a running session reads back an old step it no longer holds
    (decision 0098); each step as `step_of_run` reads it, large values whole."""
    store = backend.open()
    new_run(store, "r1")
    new_run(store, "r2")
    steps = [decide(store, claim(store, ids=f"s{n}"), big_call(n)) for n in range(5)]
    other = claim(store, "r2", ids="o")
    assert [repr(s) for s in store.steps_from("r1", 0, 10)] == [repr(s) for s in steps]
    assert [s.id for s in store.steps_from("r1", 1, 2)] == [steps[1].id, steps[2].id]
    assert [repr(s) for s in store.steps_from("r1", 3, 10)] == [repr(s) for s in steps[3:]]
    assert store.steps_from("r1", 5, 10) == []
    assert store.steps_from("r1", 0, 0) == []
    assert [s.id for s in store.steps_from("r2", 0, 10)] == [other.id]
    assert store.steps_from("r9", 0, 10) == []
    assert steps[4].decision is not None
    assert store.steps_from("r1", 4, 1)[0].decision == steps[4].decision
    with pytest.raises(ValueError):
        store.steps_from("r1", -1, 1)
    with pytest.raises(ValueError):
        store.steps_from("r1", 0, -1)
    # The same read inside a snapshot (a session's steps loaded a page at a time).
    with store.snapshot() as view:
        assert [repr(s) for s in view.steps_from("r1", 0, 10)] == [repr(s) for s in steps]
        assert [s.id for s in view.steps_from("r1", 2, 2)] == [steps[2].id, steps[3].id]
        assert view.steps_from("r1", 5, 10) == []
        with pytest.raises(ValueError):
            view.steps_from("r1", -1, 1)


def big_call(n: int) -> Decision:
    """A call whose argument is stored once, by reference (longer than the inline limit)."""
    return Decision.tool_call("t", {"n": n, "pad": str(n) * 5000})
