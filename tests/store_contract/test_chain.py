"""The event chain: events hashed in commit order across runs, and every break found.

The damage is done by the backend's tamper hook (edit, delete, swap, forget the
issued seqs), as someone with write access to the database would; the finding
is the interface's `verify_events`. Derived from `tests/test_chain.py`,
`tests/test_chain_contract.py` and `tests/test_verify_integrity.py`.
"""

from __future__ import annotations

import threading

import pytest

from agentrt._canonical import to_text
from agentrt._chain import PAGE_SIZE, event_hash
from agentrt._clock import format_time
from agentrt._records import ChainBreak, Event, VerifyReport
from agentrt._store import Store

from .conftest import Backend, Tamper
from .world import EPOCH, at, everything, new_run


def fill(store: Store, count: int) -> list[Event]:
    """`count` events (at least 4): runs `ra` and `rb` made, then alternating
    `step.reconciled` events, one transaction each; returns them as read."""
    new_run(store, "ra")
    new_run(store, "rb")
    for i in range(4, count):
        with store.transaction() as tx:
            tx.record_reconciled("ra" if i % 2 == 0 else "rb", f"s{i}", {"index": i}, at(i))
    return events(store)


def fill_many(store: Store, count: int) -> None:
    """`count` events in few transactions (for the tests that cross a page)."""
    new_run(store, "ra")
    new_run(store, "rb")
    with store.transaction() as tx:
        for i in range(4, count):
            tx.record_reconciled("ra" if i % 2 == 0 else "rb", f"s{i}", {"index": i}, at(i))


def events(store: Store) -> list[Event]:
    return store.list_events(None, 0, 100_000, cap=None)


def stored_hash(event: Event, prev: str, seq: int | None = None) -> str:
    """The event's hash over its stored texts, chained to `prev` (at `seq`, or its own)."""
    return event_hash(
        prev,
        event.seq if seq is None else seq,
        event.run_id,
        event.step_id,
        format_time(event.at),
        event.type,
        to_text(event.payload),
    )


def rehash(store: Store, tamper: Tamper) -> None:
    """What a forger does after an edit: recompute every hash so the chain verifies again."""
    prev = ""
    for event in events(store):
        prev = stored_hash(event, prev)
        tamper.set_event(event.seq, "hash", prev)


def report(checked: int, digest: str, problem: ChainBreak | None = None) -> VerifyReport:
    return VerifyReport(
        intact=problem is None,
        checked=checked,
        head_seq=checked,
        head_hash=digest,
        first_break=problem,
    )


# --- the hash and the order -------------------------------------------------------------------


def test_each_event_is_hashed_over_its_stored_texts_chained_to_the_one_before(
    backend: Backend,
) -> None:
    store = backend.open()
    prev = ""
    for event in fill(store, 7):
        assert event.hash == stored_hash(event, prev)
        prev = event.hash
    assert store.chain_head() == (7, prev)


def test_events_are_chained_in_commit_order_across_runs(backend: Backend) -> None:
    store = backend.open()
    found = fill(store, 7)
    assert [(e.seq, e.run_id) for e in found] == [
        (1, "ra"),
        (2, "ra"),
        (3, "rb"),
        (4, "rb"),
        (5, "ra"),
        (6, "rb"),
        (7, "ra"),
    ]


def test_an_appended_event_reads_back_exactly_as_the_transaction_listed_it(
    backend: Backend,
) -> None:
    store = backend.open()
    new_run(store, "ra")
    with store.transaction() as tx:
        tx.record_reconciled("ra", "s1", {"b": [1, 2.50], "a": None, "é": "\u2028"}, EPOCH)
        (event,) = tx.events
    assert events(store)[-1] == event
    assert event.payload == {"a": None, "b": [1, 2.50], "é": "\u2028"}
    assert store.chain_head() == (event.seq, event.hash)


# --- verification -------------------------------------------------------------------------------


def test_an_empty_chain_is_intact_and_its_head_is_zero(backend: Backend) -> None:
    store = backend.open()
    assert store.verify_events() == report(0, "")
    assert store.chain_head() == (0, "")


def test_an_intact_chain_reports_its_count_and_head(backend: Backend) -> None:
    store = backend.open()
    found = fill(store, 7)
    assert store.verify_events() == report(7, found[-1].hash)
    assert store.verify_events(head=store.chain_head()) == report(7, found[-1].hash)


def test_an_edited_payload_is_altered_and_the_head_is_the_last_event_that_verified(
    backend: Backend,
) -> None:
    store = backend.open()
    found = fill(store, 6)
    assert backend.tamper(store).set_event(4, "payload_json", '{"index":99}') == 1
    assert store.verify_events() == report(3, found[2].hash, ChainBreak(4, "altered"))


@pytest.mark.parametrize("column", ["run_id", "step_id", "at", "type", "hash"])
def test_any_edited_column_is_altered(backend: Backend, column: str) -> None:
    store = backend.open()
    fill(store, 4)
    value = "rb" if column == "run_id" else "changed"
    backend.tamper(store).set_event(1, column, value)
    assert store.verify_events().first_break == ChainBreak(seq=1, problem="altered")


def test_a_deleted_event_is_found_deleted(backend: Backend) -> None:
    store = backend.open()
    found = fill(store, 6)
    backend.tamper(store).delete_events(3, 3)
    assert store.verify_events() == report(2, found[1].hash, ChainBreak(3, "deleted"))


def test_a_deleted_first_event_is_found_deleted(backend: Backend) -> None:
    store = backend.open()
    fill(store, 4)
    backend.tamper(store).delete_events(1, 1)
    assert store.verify_events() == report(0, "", ChainBreak(1, "deleted"))


def test_two_whole_events_swapped_are_found_swapped(backend: Backend) -> None:
    store = backend.open()
    fill(store, 6)
    backend.tamper(store).swap_events(2, 5)
    assert store.verify_events().first_break == ChainBreak(seq=2, problem="swapped")


def test_the_contents_of_two_events_swapped_are_found_swapped(backend: Backend) -> None:
    store = backend.open()
    fill(store, 6)
    assert backend.tamper(store).swap_event_content(3, 4) == 2
    assert store.verify_events().first_break == ChainBreak(seq=3, problem="swapped")


def test_a_swap_with_the_first_event_of_the_next_page_is_found_swapped(
    backend: Backend,
) -> None:
    store = backend.open()
    fill_many(store, PAGE_SIZE + 5)
    backend.tamper(store).swap_events(PAGE_SIZE - 1, PAGE_SIZE + 1)
    assert store.verify_events().first_break == ChainBreak(PAGE_SIZE - 1, "swapped")


def test_a_swap_with_an_event_more_than_a_page_later_is_found_altered(backend: Backend) -> None:
    store = backend.open()
    fill_many(store, PAGE_SIZE + 10)
    backend.tamper(store).swap_events(3, PAGE_SIZE + 5)
    assert store.verify_events().first_break == ChainBreak(3, "altered")


def test_a_truncated_tail_is_found_by_the_seqs_the_database_issued(backend: Backend) -> None:
    store = backend.open()
    found = fill(store, 5)
    backend.tamper(store).delete_events(4)
    assert store.verify_events() == report(3, found[2].hash, ChainBreak(4, "truncated"))


def test_a_truncated_tail_hidden_from_the_database_is_found_by_a_kept_head(
    backend: Backend,
) -> None:
    store = backend.open()
    fill(store, 5)
    kept = store.chain_head()
    tamper = backend.tamper(store)
    tamper.delete_events(4)
    tamper.forget_issued(3)
    assert store.verify_events().intact  # nothing inside the database shows it any more
    assert store.verify_events(head=kept).first_break == ChainBreak(4, "truncated")


def test_a_recomputed_chain_is_found_rewritten_by_a_kept_head(backend: Backend) -> None:
    store = backend.open()
    fill(store, 4)
    kept = store.chain_head()
    tamper = backend.tamper(store)
    tamper.set_event(2, "payload_json", '{"index":42}')
    rehash(store, tamper)
    assert store.verify_events().intact
    checked = store.verify_events(head=kept)
    assert (checked.first_break, checked.checked) == (ChainBreak(4, "rewritten"), 4)


def test_a_rewritten_first_event_is_found_by_a_head_kept_at_seq_one(backend: Backend) -> None:
    store = backend.open()
    new_run(store, "ra")
    tamper = backend.tamper(store)
    tamper.delete_events(2)
    tamper.forget_issued(1)
    kept = store.chain_head()
    assert kept[0] == 1
    tamper.set_event(1, "payload_json", '{"goal":"forged"}')
    rehash(store, tamper)
    assert store.verify_events().intact
    assert store.verify_events(head=kept).first_break == ChainBreak(1, "rewritten")


def test_a_head_kept_at_seq_zero_means_nothing_was_kept_and_finds_no_break(
    backend: Backend,
) -> None:
    store = backend.open()
    found = fill(store, 4)
    assert store.verify_events(head=(0, "")) == report(4, found[-1].hash)


def test_the_seqs_of_a_deleted_tail_are_never_issued_again(backend: Backend) -> None:
    store = backend.open()
    fill(store, 4)
    backend.tamper(store).delete_events(4, 4)
    with store.transaction() as tx:
        tx.go_on_after_interruption("ra", {}, EPOCH)
        (event,) = tx.events
    assert event.seq == 5
    assert store.verify_events().first_break == ChainBreak(seq=4, problem="deleted")


def test_after_every_event_is_deleted_the_next_starts_a_chain_past_the_issued_seqs(
    backend: Backend,
) -> None:
    store = backend.open()
    last = fill(store, 4)[-1]
    backend.tamper(store).delete_events(1)
    with store.transaction() as tx:
        tx.go_on_after_interruption("ra", {}, EPOCH)
        (event,) = tx.events
    assert event.seq == 5
    # Chained to the partition's head row, the event appended last (decision 0093).
    assert event.hash == stored_hash(event, last.hash)


def test_a_range_is_verified_from_the_stored_hash_of_the_event_before_it(
    backend: Backend,
) -> None:
    store = backend.open()
    fill(store, 8)
    tamper = backend.tamper(store)
    tamper.set_event(7, "payload_json", "{}")
    tamper.set_event(2, "step_id", "forged")
    checked = store.verify_events(from_seq=3, to_seq=5)
    assert (checked.intact, checked.checked, checked.head_seq) == (True, 3, 5)
    assert store.verify_events(from_seq=3).first_break == ChainBreak(7, "altered")
    assert store.verify_events(to_seq=5).first_break == ChainBreak(2, "altered")
    assert store.verify_events(from_seq=2, to_seq=2).first_break == ChainBreak(2, "altered")
    tamper.set_event(4, "hash", "forged")
    assert store.verify_events(from_seq=5, to_seq=6).first_break == ChainBreak(5, "altered")
    assert store.verify_events(from_seq=20).checked == 0


def test_verification_writes_nothing(backend: Backend) -> None:
    store = backend.open()
    fill(store, 6)
    backend.tamper(store).delete_events(3, 3)
    before = everything(store)
    assert not store.verify_events().intact
    assert everything(store) == before


def test_a_read_only_store_verifies_the_chain_and_reads_its_head(backend: Backend) -> None:
    store = backend.open()
    found = fill(store, 5)
    reader = backend.reader()
    assert reader.verify_events() == report(5, found[-1].hash)
    assert reader.chain_head() == store.chain_head()


def test_verification_sees_only_committed_events_beside_an_open_write_transaction(
    backend: Backend,
) -> None:
    store = backend.open()
    if not backend.shared:
        pytest.skip(
            f"{backend.name}: one connection, so a read waits for the store's open transaction"
        )
    found = fill(store, 4)
    appended, release = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            with store.transaction() as tx:
                tx.go_on_after_interruption("ra", {}, EPOCH)
                appended.set()
                assert release.wait(60)
        except BaseException as exc:
            failures.append(exc)
            appended.set()

    thread = threading.Thread(target=write)
    thread.start()
    try:
        assert appended.wait(60)
        assert store.verify_events() == report(4, found[-1].hash)  # not blocked, not seen
    finally:
        release.set()
        thread.join(60)
    assert failures == []
    assert store.verify_events().checked == 5
