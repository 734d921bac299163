"""The event chain's edges, pinned by the mutation campaign (docs/mutation.md).

Each test here kills mutants of `agentrt._chain` that the behavioural tests in
`test_chain.py` let live: the kept head at its boundaries, the one-page window
the swap search looks in, and the refusal of a seq that is not an int.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentrt._chain import event_hash, verify_chain
from agentrt._records import ChainBreak
from agentrt._store import Store, open_store
from agentrt._store.sqlite._chain_rows import SqliteChainReader

T0 = datetime(2026, 11, 30, 2, 42, 14, tzinfo=UTC)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "chain.db"


@pytest.fixture
def store(db: Path) -> Iterator[Store]:
    s = open_store(db)
    with s.transaction() as tx:
        tx.execute("INSERT INTO runs (id, status, limits_json) VALUES ('ra', 'RUNNING', '{}')")
    yield s
    s.close()


def fill(store: Store, count: int) -> None:
    for _ in range(count):
        with store.transaction() as tx:
            index = tx.execute("SELECT count(*) FROM events").fetchone()[0]
            tx.append_event("ra", f"s{index}", T0 + timedelta(seconds=index), "step.started", {})


def tamper(db: Path, sql: str, params: tuple[object, ...] = ()) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute(sql, params)
    finally:
        conn.close()


def verify(
    db: Path,
    *,
    from_seq: int | None = None,
    to_seq: int | None = None,
    head: tuple[int, str] | None = None,
    page_size: int = 1000,
) -> ChainBreak | None:
    conn = sqlite3.connect(db)
    try:
        report = verify_chain(
            SqliteChainReader(conn),
            from_seq=from_seq,
            to_seq=to_seq,
            head=head,
            page_size=page_size,
        )
        return report.first_break
    finally:
        conn.close()


def swap_content(db: Path, a: int, b: int) -> None:
    """Exchange everything but seq and hash between events `a` and `b`."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        cols = "run_id, step_id, at, type, payload_json"
        rows = {
            seq: conn.execute(f"SELECT {cols} FROM events WHERE seq = ?", (seq,)).fetchone()
            for seq in (a, b)
        }
        for seq, other in ((a, b), (b, a)):
            conn.execute(
                "UPDATE events SET run_id = ?, step_id = ?, at = ?, type = ?, payload_json = ? "
                "WHERE seq = ?",
                (*rows[other], seq),
            )
    finally:
        conn.close()


def test_a_kept_head_at_seq_zero_means_nothing_was_kept_and_finds_no_break(
    store: Store, db: Path
) -> None:
    fill(store, 3)
    assert verify(db, head=(0, "")) is None


def test_a_rewritten_first_event_is_found_by_a_head_kept_at_seq_one(store: Store, db: Path) -> None:
    fill(store, 1)
    kept = store.chain_head()
    assert kept[0] == 1
    tamper(db, "UPDATE events SET payload_json = '{\"forged\":true}' WHERE seq = 1")
    conn = sqlite3.connect(db)
    try:
        run_id, step_id, at, type_, payload = conn.execute(
            "SELECT run_id, step_id, at, type, payload_json FROM events WHERE seq = 1"
        ).fetchone()
    finally:
        conn.close()
    tamper(
        db,
        "UPDATE events SET hash = ? WHERE seq = 1",
        (event_hash("", 1, run_id, step_id, at, type_, payload),),
    )
    assert verify(db) is None  # the chain itself verifies after the rehash
    assert verify(db, head=kept) == ChainBreak(seq=1, problem="rewritten")


def test_a_kept_head_finds_every_event_gone_when_the_head_row_forgot_them_too(
    store: Store, db: Path
) -> None:
    fill(store, 3)
    kept = store.chain_head()
    tamper(db, "DELETE FROM events")
    tamper(db, "UPDATE chain_head SET seq = 0, hash = ''")
    assert verify(db) is None  # nothing inside the file shows it
    assert verify(db, head=kept) == ChainBreak(seq=1, problem="truncated")


def test_a_kept_head_whose_event_was_deleted_beyond_the_verified_range_is_reported_deleted(
    store: Store, db: Path
) -> None:
    fill(store, 3)
    kept = store.chain_head()
    fill(store, 2)
    tamper(db, "DELETE FROM events WHERE seq = 3")
    assert verify(db, to_seq=2, head=kept) == ChainBreak(seq=3, problem="deleted")


def test_a_swap_with_the_first_event_of_the_next_page_is_reported_swapped(
    store: Store, db: Path
) -> None:
    fill(store, 8)
    swap_content(db, 1, 5)
    assert verify(db, page_size=4) == ChainBreak(seq=1, problem="swapped")


def test_a_swap_with_an_event_more_than_one_page_later_is_reported_altered(
    store: Store, db: Path
) -> None:
    # The search for the displaced event is bounded to one page after the break.
    fill(store, 10)
    swap_content(db, 1, 6)
    assert verify(db, page_size=4) == ChainBreak(seq=1, problem="altered")
    assert verify(db, page_size=5) == ChainBreak(seq=1, problem="swapped")


@pytest.mark.parametrize(("seq", "name"), [("1", "str"), (True, "bool"), (1.0, "float")])
def test_event_hash_refuses_a_seq_that_is_not_an_int_naming_its_type(
    seq: object, name: str
) -> None:
    with pytest.raises(TypeError, match=f"^seq must be an int, got {name}$"):
        event_hash("", seq, "r", "s", "t", "x", "{}")  # type: ignore[arg-type]


def test_a_page_of_one_event_verifies_the_whole_chain(store: Store, db: Path) -> None:
    fill(store, 3)
    conn = sqlite3.connect(db)
    try:
        report = verify_chain(SqliteChainReader(conn), page_size=1)
    finally:
        conn.close()
    assert (report.intact, report.checked, report.head_seq) == (True, 3, 3)


def test_a_page_size_below_one_is_refused(store: Store, db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        with pytest.raises(ValueError, match=r"^page_size must be at least 1$"):
            verify_chain(SqliteChainReader(conn), page_size=0)
    finally:
        conn.close()


def test_a_range_from_seq_one_checks_the_first_event(store: Store, db: Path) -> None:
    fill(store, 3)
    tamper(db, "UPDATE events SET payload_json = '{\"forged\":true}' WHERE seq = 1")
    assert verify(db, from_seq=1) == ChainBreak(seq=1, problem="altered")
    assert verify(db, from_seq=0) == ChainBreak(seq=1, problem="altered")


def test_a_range_that_ends_on_a_page_boundary_returns_its_report(store: Store, db: Path) -> None:
    fill(store, 6)
    conn = sqlite3.connect(db)
    try:
        report = verify_chain(SqliteChainReader(conn), to_seq=4, page_size=2)
    finally:
        conn.close()
    assert (report.intact, report.checked, report.head_seq) == (True, 4, 4)
