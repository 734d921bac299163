"""The event hash chain: the hash itself, chaining across runs, and catching every kind of break."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentrt._canonical import to_text
from agentrt._chain import event_hash, netstring, verify_chain
from agentrt._clock import format_time
from agentrt._records import ChainBreak, VerifyReport
from agentrt._store import Store, open_existing, open_store
from agentrt._store.sqlite._chain_rows import SqliteChainReader

T0 = datetime(2026, 11, 30, 2, 42, 14, 123456, tzinfo=UTC)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "chain.db"


@pytest.fixture
def store(db: Path) -> Iterator[Store]:
    s = open_store(db)
    with s.transaction() as tx:
        for run_id in ("ra", "rb"):
            tx.execute(
                "INSERT INTO runs (id, status, limits_json) VALUES (?, 'RUNNING', '{}')",
                (run_id,),
            )
    yield s
    s.close()


def fill(store: Store, count: int) -> None:
    """`count` events alternating between two runs, one transaction each."""
    for i in range(count):
        with store.transaction() as tx:
            tx.append_event(
                "ra" if i % 2 == 0 else "rb",
                f"s{i}",
                T0 + timedelta(seconds=i),
                "step.started",
                {"index": i},
            )


def tamper(db: Path, sql: str, params: tuple[object, ...] = ()) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute(sql, params)
    finally:
        conn.close()


def rows(db: Path) -> list[tuple[int, str, str, str, str, str, str]]:
    conn = sqlite3.connect(db)
    try:
        return list(
            conn.execute(
                "SELECT seq, run_id, step_id, at, type, payload_json, hash FROM events ORDER BY seq"
            )
        )
    finally:
        conn.close()


# --- the hash -----------------------------------------------------------------------------------


def test_netstring_counts_utf8_bytes() -> None:
    assert netstring("") == b"0:,"
    assert netstring("abc") == b"3:abc,"
    assert netstring("é") == b"2:\xc3\xa9,"


def test_event_hash_is_sha256_over_seven_netstrings() -> None:
    payload = to_text({"goal": "é"})
    assert payload == '{"goal":"é"}'
    expected = hashlib.sha256(
        b'0:,1:1,2:r1,0:,27:2026-11-30T02:42:14.123456Z,11:run.created,13:{"goal":"\xc3\xa9"},'
    ).hexdigest()
    got = event_hash("", 1, "r1", "", "2026-11-30T02:42:14.123456Z", "run.created", payload)
    assert got == expected
    assert got == "46ec8ef73f74eb312aa1f143a8cce14a1c4ce1835a7ddca2fb8beb3311211de0"
    # Every field counts, and the netstrings keep field boundaries apart.
    assert event_hash("", 1, "r1", "x", "", "", "") != event_hash("", 1, "r1x", "", "", "", "")
    assert event_hash("a", 1, "", "", "", "", "") != event_hash("", 1, "", "", "", "", "")
    with pytest.raises(TypeError, match="seq must be an int"):
        event_hash("", True, "", "", "", "", "")


@pytest.mark.parametrize(
    "columns",
    [
        ("", 1, "r1", "", "2026-11-30T02:42:14.123456Z", "run.created", "{}"),
        ("ab" * 32, 10**12, "é", "s", "t", "step.policy", '{"x":"ü😀"}'),  # a non-ASCII id
        ("h", 5, "r", "s\x00", "t", "typé", ""),  # a non-ASCII type
        ("h", 5, "r", "s", "t", "ty", b"p\xff"),  # stored bytes that are not UTF-8
        ("h", 5, b"r\xff", "s", "t", "ty", "p"),
        ("h", -5, "r", "s", "t", "ty", '{"a":"\u2028"}'),
    ],
)
def test_event_hash_is_the_seven_netstrings_whatever_the_columns_hold(
    columns: tuple[str | bytes, int, str | bytes, str, str, str, str | bytes],
) -> None:
    """The one-formatting path for ASCII columns (decision 0110) and the netstring path
    hash the same bytes: each column's, as stored."""
    prev, seq, run_id, step_id, at, type, payload = columns
    parts = (prev, str(seq), run_id, step_id, at, type, payload)
    expected = hashlib.sha256(b"".join(map(netstring, parts))).hexdigest()
    assert event_hash(prev, seq, run_id, step_id, at, type, payload) == expected  # type: ignore[arg-type]


def test_events_chain_across_runs_in_commit_order(store: Store, db: Path) -> None:
    fill(store, 5)
    prev = ""
    for seq, run_id, step_id, at, type_, payload, digest in rows(db):
        assert digest == event_hash(prev, seq, run_id, step_id, at, type_, payload)
        prev = digest
    assert [r[0] for r in rows(db)] == [1, 2, 3, 4, 5]
    assert [r[1] for r in rows(db)] == ["ra", "rb", "ra", "rb", "ra"]
    assert store.chain_head() == (5, prev)


def test_appended_event_is_returned_as_stored(store: Store) -> None:
    with store.transaction() as tx:
        seq = tx.append_event("ra", "s1", T0, "step.tool_started", {"b": [1, 2.50], "a": None})
        (event,) = tx.events
    (stored,) = store.list_events()
    assert seq == event.seq
    assert event == stored
    assert event.payload == {"a": None, "b": [1, 2.50]}
    assert store.chain_head() == (event.seq, event.hash)


# --- verification -------------------------------------------------------------------------------


def test_empty_chain_is_intact(store: Store) -> None:
    assert store.verify_events() == VerifyReport(
        intact=True, checked=0, head_seq=0, head_hash="", first_break=None
    )
    assert store.chain_head() == (0, "")


def test_intact_chain_reports_checked_count_and_head(store: Store) -> None:
    fill(store, 7)
    seq, digest = store.chain_head()
    assert store.verify_events() == VerifyReport(
        intact=True, checked=7, head_seq=7, head_hash=digest, first_break=None
    )
    assert store.verify_events(head=(seq, digest)).intact


def test_edited_payload_is_altered(store: Store, db: Path) -> None:
    fill(store, 6)
    before = rows(db)
    tamper(db, "UPDATE events SET payload_json = ? WHERE seq = 4", ('{"index":99}',))
    report = store.verify_events()
    assert report.intact is False
    assert report.first_break == ChainBreak(seq=4, problem="altered")
    # The head reported is the last event that verified.
    assert (report.checked, report.head_seq, report.head_hash) == (3, 3, before[2][6])


@pytest.mark.parametrize("column", ["run_id", "step_id", "at", "type", "hash"])
def test_any_edited_column_is_altered(store: Store, db: Path, column: str) -> None:
    fill(store, 4)
    value = "rb" if column == "run_id" else "changed"
    tamper(db, f"UPDATE events SET {column} = ? WHERE seq = 1", (value,))
    assert store.verify_events().first_break == ChainBreak(seq=1, problem="altered")


def test_deleted_event_is_found(store: Store, db: Path) -> None:
    fill(store, 6)
    tamper(db, "DELETE FROM events WHERE seq = 3")
    report = store.verify_events()
    assert report.first_break == ChainBreak(seq=3, problem="deleted")
    assert (report.checked, report.head_seq) == (2, 2)


def test_deleted_first_event_is_found(store: Store, db: Path) -> None:
    fill(store, 3)
    tamper(db, "DELETE FROM events WHERE seq = 1")
    assert store.verify_events().first_break == ChainBreak(seq=1, problem="deleted")


def test_two_swapped_events_whole_rows(store: Store, db: Path) -> None:
    fill(store, 6)
    # Swap everything but seq between events 2 and 5 (hashes travel with their rows).
    tamper(db, "UPDATE events SET seq = -5 WHERE seq = 5")
    tamper(db, "UPDATE events SET seq = 5 WHERE seq = 2")
    tamper(db, "UPDATE events SET seq = 2 WHERE seq = -5")
    assert store.verify_events().first_break == ChainBreak(seq=2, problem="swapped")


def test_two_swapped_events_content_only(store: Store, db: Path) -> None:
    fill(store, 6)
    original = {r[0]: r for r in rows(db)}
    for seq, other in ((3, 4), (4, 3)):
        _, run_id, step_id, at, type_, payload, _ = original[other]
        tamper(
            db,
            "UPDATE events SET run_id = ?, step_id = ?, at = ?, type = ?, payload_json = ? "
            "WHERE seq = ?",
            (run_id, step_id, at, type_, payload, seq),
        )
    assert store.verify_events().first_break == ChainBreak(seq=3, problem="swapped")


def test_swap_is_found_across_a_page_boundary(store: Store, db: Path) -> None:
    fill(store, 10)
    tamper(db, "UPDATE events SET seq = -1 WHERE seq = 3")
    tamper(db, "UPDATE events SET seq = 3 WHERE seq = 5")
    tamper(db, "UPDATE events SET seq = 5 WHERE seq = -1")
    conn = sqlite3.connect(db)
    try:
        report = verify_chain(SqliteChainReader(conn), page_size=3)
    finally:
        conn.close()
    assert report.first_break == ChainBreak(seq=3, problem="swapped")


def test_truncated_tail_is_found_by_the_issued_seqs_of_the_head_row(store: Store, db: Path) -> None:
    fill(store, 5)
    tamper(db, "DELETE FROM events WHERE seq >= 4")
    report = store.verify_events()
    assert report.first_break == ChainBreak(seq=4, problem="truncated")
    assert (report.checked, report.head_seq) == (3, 3)


def test_truncated_tail_hidden_from_the_head_row_is_found_by_the_kept_head(
    store: Store, db: Path
) -> None:
    fill(store, 5)
    kept = store.chain_head()
    tamper(db, "DELETE FROM events WHERE seq >= 4")
    tamper(db, "UPDATE chain_head SET seq = 3, hash = (SELECT hash FROM events WHERE seq = 3)")
    assert store.verify_events().intact  # nothing inside the file shows it any more
    report = store.verify_events(head=kept)
    assert report.first_break == ChainBreak(seq=4, problem="truncated")


def test_recomputed_chain_is_found_by_the_kept_head(store: Store, db: Path) -> None:
    fill(store, 4)
    kept = store.chain_head()
    tamper(db, "UPDATE events SET payload_json = '{\"index\":42}' WHERE seq = 2")
    # The forger rehashes every event after the edit so the chain verifies again.
    prev = ""
    for seq, run_id, step_id, at, type_, payload, _ in rows(db):
        prev = event_hash(prev, seq, run_id, step_id, at, type_, payload)
        tamper(db, "UPDATE events SET hash = ? WHERE seq = ?", (prev, seq))
    assert store.verify_events().intact
    report = store.verify_events(head=kept)
    assert report.first_break == ChainBreak(seq=4, problem="rewritten")
    assert report.checked == 4


def test_a_gap_after_a_deleted_tail_stays_visible_to_new_appends(store: Store, db: Path) -> None:
    fill(store, 4)
    tamper(db, "DELETE FROM events WHERE seq = 4")
    with store.transaction() as tx:
        seq = tx.append_event("ra", "", T0, "run.finished", {})
    assert seq == 5  # AUTOINCREMENT never reuses a seq
    assert store.verify_events().first_break == ChainBreak(seq=4, problem="deleted")


def test_after_every_event_is_deleted_the_next_one_starts_a_chain_past_the_issued_seqs(
    store: Store, db: Path
) -> None:
    fill(store, 3)
    last = store.chain_head()[1]
    tamper(db, "DELETE FROM events")
    with store.transaction() as tx:
        seq = tx.append_event("ra", "", T0, "run.finished", {})
        (event,) = tx.events
    assert seq == 4
    # Chained to the head row, the event appended last (decision 0093), not to nothing.
    assert event.hash == event_hash(last, 4, "ra", "", format_time(T0), "run.finished", "{}")
    assert store.verify_events().first_break == ChainBreak(seq=1, problem="deleted")


def test_range_verification_takes_the_event_before_as_given(store: Store, db: Path) -> None:
    fill(store, 8)
    tamper(db, "UPDATE events SET payload_json = '{}' WHERE seq = 7")
    tamper(db, "UPDATE events SET step_id = 'forged' WHERE seq = 2")
    report = store.verify_events(from_seq=3, to_seq=5)
    assert (report.intact, report.checked, report.head_seq) == (True, 3, 5)
    assert store.verify_events(from_seq=3).first_break == ChainBreak(seq=7, problem="altered")
    assert store.verify_events(to_seq=5).first_break == ChainBreak(seq=2, problem="altered")
    # The range's first event is checked against the stored hash before it.
    assert store.verify_events(from_seq=2, to_seq=2).first_break == ChainBreak(2, "altered")
    tamper(db, "UPDATE events SET hash = 'forged' WHERE seq = 4")
    assert store.verify_events(from_seq=5, to_seq=6).first_break == ChainBreak(5, "altered")
    assert store.verify_events(from_seq=20).checked == 0


def test_paging_covers_every_event(store: Store, db: Path) -> None:
    fill(store, 10)
    tamper(db, "UPDATE events SET type = 'x' WHERE seq = 8")
    conn = sqlite3.connect(db)
    try:
        assert verify_chain(SqliteChainReader(conn), to_seq=7, page_size=3) == VerifyReport(
            intact=True, checked=7, head_seq=7, head_hash=rows(db)[6][6]
        )
        assert verify_chain(SqliteChainReader(conn), page_size=3).first_break == ChainBreak(
            8, "altered"
        )
        with pytest.raises(ValueError, match="page_size"):
            verify_chain(SqliteChainReader(conn), page_size=0)
    finally:
        conn.close()


def test_verification_writes_nothing_and_works_read_only(store: Store, db: Path) -> None:
    fill(store, 3)
    reader = open_existing(db, read_only=True)
    try:
        assert reader.verify_events().intact
        assert reader.chain_head() == store.chain_head()
    finally:
        reader.close()
    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    try:
        before = conn.total_changes
        assert verify_chain(SqliteChainReader(conn)).intact
        assert conn.total_changes == before
    finally:
        conn.close()


def test_verify_runs_beside_an_open_write_transaction(store: Store) -> None:
    fill(store, 3)
    with store.transaction() as tx:
        tx.append_event("ra", "", T0, "pending", {})
        # Another connection sees only committed events, and is not blocked.
        assert store.verify_events().checked == 3
    assert store.verify_events().checked == 4
