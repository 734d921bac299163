"""The chain in N partitions (decision 0093): each run's events in one partition, every
break found in any partition, a kept head per partition, writers of other partitions
not waiting. Every test runs on each backend with N = 1 and N = 4; the damage is the
backend's tamper hook, as in `test_chain.py`.
"""

from __future__ import annotations

import pytest

from agentrt._canonical import to_text
from agentrt._chain import heads_digest, partition_of
from agentrt._errors import StoreBusyError, StoreError
from agentrt._records import ChainBreak, Event
from agentrt._store import Store, open_store

from .conftest import Backend
from .test_chain import events, stored_hash
from .world import EPOCH, at, new_run


def run_in(partition: int, n: int, taken: set[str]) -> str:
    """A run id whose events are chained in `partition` of `n`, not one of `taken`."""
    for k in range(10_000):
        run_id = f"run-{partition}-{k}"
        if run_id not in taken and partition_of(run_id, n) == partition:
            taken.add(run_id)
            return run_id
    raise AssertionError("no run id found")


def fill_partitions(store: Store, n: int, per_run: int = 3) -> dict[int, list[Event]]:
    """One run in each partition, its `run.created` then `per_run` events, the runs'
    transactions interleaved; returns each partition's events as read."""
    taken: set[str] = set()
    runs = [run_in(p, n, taken) for p in range(n)]
    for run_id in runs:
        new_run(store, run_id)
    for i in range(per_run):
        for run_id in runs:
            with store.transaction() as tx:
                tx.record_reconciled(run_id, f"s{i}", {"index": i}, at(i))
    found: dict[int, list[Event]] = {p: [] for p in range(n)}
    for event in events(store):
        found[event.seq % n].append(event)
    return found


def test_a_runs_events_stay_in_its_partition_in_commit_order(parted: Backend) -> None:
    store = parted.open()
    n = parted.partitions
    found = fill_partitions(store, n)
    seqs = [e.seq for e in events(store)]
    per_run = len(found[0])  # the run's making, then its three reconciliations
    assert len(seqs) == len(set(seqs)) == n * per_run
    for p, chain in found.items():
        assert {partition_of(e.run_id, n) for e in chain} == {p}
        assert len({e.run_id for e in chain}) == 1
        first = p or n
        assert [e.seq for e in chain] == [first + n * i for i in range(per_run)]  # step N
        assert [e.type for e in chain][-4:] == ["run.started", *["step.reconciled"] * 3]
        assert [e.payload.get("index") for e in chain[-3:]] == [0, 1, 2]  # commit order
        prev = ""
        for event in chain:  # each partition is one chain, in its commit order
            assert event.hash == stored_hash(event, prev)
            prev = event.hash
    heads = tuple((chain[-1].seq, chain[-1].hash) for _, chain in sorted(found.items()))
    assert store.chain_heads() == heads
    expected = heads[0] if n == 1 else (n, heads_digest(heads))
    assert store.chain_head() == expected
    report = store.verify_events(head=store.chain_heads())
    assert (report.intact, report.checked) == (True, per_run * n)
    assert (report.head_seq, report.head_hash) == expected
    assert report.heads == (() if n == 1 else heads)


def test_an_altered_event_is_found_in_any_partition(parted: Backend) -> None:
    n = parted.partitions
    store = parted.open()
    found = fill_partitions(store, n)
    tamper = parted.tamper(store)
    for p in range(n):
        target = found[p][2]
        assert tamper.set_event(target.seq, "payload_json", '{"index":99}') == 1
        assert store.verify_events().first_break == ChainBreak(target.seq, "altered")
        tamper.set_event(target.seq, "payload_json", to_text(target.payload))
        assert store.verify_events().intact


def test_a_deleted_event_is_found_in_any_partition(parted: Backend) -> None:
    n = parted.partitions
    for p in range(n):
        store = fresh(parted, p)
        found = fill_partitions(store, n)
        target = found[p][1]
        assert parted.tamper(store).delete_events(target.seq, target.seq) == 1
        assert store.verify_events().first_break == ChainBreak(target.seq, "deleted")


def test_two_swapped_events_are_found_in_any_partition(parted: Backend) -> None:
    n = parted.partitions
    for p in range(n):
        store = fresh(parted, p)
        found = fill_partitions(store, n)
        a, b = found[p][1].seq, found[p][3].seq
        assert parted.tamper(store).swap_events(a, b) == 1
        assert store.verify_events().first_break == ChainBreak(a, "swapped")


def test_a_truncated_partition_is_found_by_its_head_row_and_by_a_kept_head(
    parted: Backend,
) -> None:
    n = parted.partitions
    for p in range(n):
        store = fresh(parted, p)
        found = fill_partitions(store, n)
        kept = store.chain_heads()
        last, before = found[p][-1], found[p][-2]
        tamper = parted.tamper(store)
        assert tamper.delete_events(last.seq, last.seq) == 1
        assert store.verify_events().first_break == ChainBreak(last.seq, "truncated")
        tamper.forget_issued(before.seq)  # the head row covered up as well
        assert store.verify_events().intact  # nothing inside the database shows it now
        checked = store.verify_events(head=kept)
        assert checked.first_break == ChainBreak(last.seq, "truncated")


def test_a_recomputed_partition_is_found_rewritten_by_a_kept_head(parted: Backend) -> None:
    n = parted.partitions
    store = parted.open()
    found = fill_partitions(store, n)
    kept = store.chain_heads()
    p = n - 1
    tamper = parted.tamper(store)
    tamper.set_event(found[p][1].seq, "payload_json", '{"index":42}')
    prev = found[p][0].hash
    for event in found[p][1:]:  # the forger rehashes that partition after the edit
        prev = stored_hash(events_at(store, event.seq), prev)
        tamper.set_event(event.seq, "hash", prev)
    assert store.verify_events().intact
    assert store.verify_events(head=kept).first_break == ChainBreak(found[p][-1].seq, "rewritten")


def test_a_kept_head_that_does_not_fit_the_record_is_refused(parted: Backend) -> None:
    store = parted.open()
    n = parted.partitions
    fill_partitions(store, n)
    with pytest.raises(ValueError, match="partition"):
        store.verify_events(head=[(0, "")] * (n + 1))


def test_the_partitions_are_fixed_when_the_record_is_created(parted: Backend) -> None:
    store = parted.open()
    assert store.chain_heads() == ((0, ""),) * parted.partitions
    if not parted.shared:
        return
    again = parted.reopen()  # no N given: the record's own
    assert again.chain_heads() == store.chain_heads()
    other = 2 if parted.partitions != 2 else 3
    with pytest.raises(StoreError, match=f"has {parted.partitions} partition"):
        reopen_with(parted, other)


def test_new_records_default_to_one_partition_on_sqlite_and_16_on_postgres(
    backend: Backend,
) -> None:
    backend.unmade()
    target = ":memory:" if backend.name == "sqlite-memory" else None
    if backend.name == "postgres":
        target = backend.url
    elif target is None:
        target = str(backend._tmp_path / "default.db")
    with open_store(target) as store:
        assert len(store.chain_heads()) == (16 if backend.name == "postgres" else 1)


def test_writers_of_runs_in_other_partitions_do_not_wait_for_each_other(
    parted: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    if parted.one_writer:
        pytest.skip(f"{parted.name}: one writer at a time for the whole database")
    n = parted.partitions
    store = parted.open()
    taken: set[str] = set()
    mine, same = run_in(n - 1, n, taken), run_in(n - 1, n, taken)
    other = run_in(0, n, taken) if n > 1 else None
    for run_id in (mine, same, *([other] if other else [])):
        new_run(store, run_id)
    impatient = parted.impatient(monkeypatch)  # gives up at once on a held lock
    with store.transaction() as held:
        held.record_reconciled(mine, "s", {"held": True}, EPOCH)  # holds its head to commit
        if other is not None:
            with impatient.transaction() as tx:  # another partition: no wait at all
                tx.record_reconciled(other, "s", {"held": False}, EPOCH)
        # The same partition waits for the held head (and this one gives up at once).
        with pytest.raises(StoreBusyError), impatient.transaction() as tx:
            tx.record_reconciled(same, "s", {"held": False}, EPOCH)
    assert store.verify_events().intact  # the partitions no run wrote to are empty, not cut
    types = [(e.run_id, e.payload) for e in events(store) if e.type == "step.reconciled"]
    expected = [(mine, {"held": True})]
    if other is not None:
        expected.insert(0, (other, {"held": False}))  # committed first, while the other held
    assert sorted(types, key=str) == sorted(expected, key=str)


def test_an_uncommitted_event_is_seen_by_no_reader_and_commits_below_what_was_read(
    parted: Backend,
) -> None:
    # What paging all runs relies on (decision 0095): a reader sees each partition up to
    # its last committed event, whole; an event still open is above its partition's head
    # and becomes visible there later, even below a higher seq of another partition
    # that committed meanwhile (where writers of other partitions do not wait).
    n = parted.partitions
    store = parted.open()
    reader = parted.reader()
    taken: set[str] = set()
    held_run, other = run_in(0, n, taken), run_in(n - 1, n, taken)
    new_run(store, held_run)
    before = reader.chain_heads()
    listed = events(reader)
    with store.transaction() as held:
        held.record_reconciled(held_run, "s", {"held": True}, EPOCH)
        (uncommitted,) = held.events
        assert uncommitted.seq == before[0][0] + n
        assert reader.chain_heads() == before
        assert events(reader) == listed
        assert reader.list_events(None, before[0][0], 10, partition=0) == []
        if n > 1 and not parted.one_writer:
            writer = parted.reopen()
            new_run(writer, other)
            for i in range(2):
                with writer.transaction() as tx:
                    tx.record_reconciled(other, f"s{i}", {"held": False}, EPOCH)
            heads = reader.chain_heads()
            assert heads[0] == before[0]
            assert heads[n - 1][0] > uncommitted.seq  # a higher seq, committed first
    (seen,) = reader.list_events(None, before[0][0], 10, partition=0)
    assert (seen.seq, seen.hash, seen.payload) == (
        uncommitted.seq,
        uncommitted.hash,
        {"held": True},
    )
    assert reader.chain_heads()[0] == (uncommitted.seq, uncommitted.hash)


def fresh(parted: Backend, p: int) -> Store:
    """A store on a new, empty database of the backend's kind (one per partition tried)."""
    if p > 0:
        parted._path = None
        if parted._url is not None:
            from support.database import pooled_schema

            parted._url = pooled_schema(parted._stack, "the contract suite", parted.partitions)
    return parted.open()


def reopen_with(parted: Backend, n: int) -> Store:
    target = parted._url if parted._url is not None else parted._path
    assert target is not None
    return open_store(target, chain_partitions=n)


def events_at(store: Store, seq: int) -> Event:
    (event,) = store.list_events(None, seq - 1, 1, cap=None)
    assert event.seq == seq
    return event
