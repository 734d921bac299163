"""The chain in partitions (decision 0093) around the store: a record made before them
migrated unchanged, older writers locked out, `agentrt verify` with a head per partition,
and the export follower's cursor of one position per partition.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentrt._chain import partition_of
from agentrt._errors import SchemaVersionError
from agentrt._records import ChainBreak, Event
from agentrt._store import Store, open_existing, open_store
from agentrt._store.sqlite import _migrations as migrations
from agentrt._store.sqlite._migrations import MIGRATIONS, check_writer
from agentrt.cli import main
from agentrt.cli._verify import _verify_json, _verify_text
from agentrt.export import CursorError, Follower, load_cursor
from support.previous_release import previous_release_chain

T0 = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)


def make_run(store: Store, run_id: str) -> None:
    with store.transaction() as tx:
        tx.create_run(
            run_id,
            "goal",
            _limits(),
            owner="w",
            lease_expires_at=datetime(2999, 1, 1, tzinfo=UTC),
            holder="{}",
            specs=[],
            now=T0,
            origin="gate",
        )


def _limits() -> Any:
    from agentrt._records import Limits

    return Limits()


def note(store: Store, run_id: str, i: int) -> Event:
    with store.transaction() as tx:
        tx.record_reconciled(run_id, f"s{i}", {"index": i}, T0)
        (event,) = tx.events
    return event


def run_in(partition: int, n: int, k: int = 0) -> str:
    found = [f"r{j}" for j in range(1000) if partition_of(f"r{j}", n) == partition]
    return found[k]


def events(store: Store) -> list[Event]:
    return store.list_events(None, 0, 100_000, cap=None)


# --- a record made before partitions --------------------------------------------------------


def test_a_record_of_schema_4_becomes_partition_0_of_1_and_reads_and_verifies_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "old.db"
    with monkeypatch.context() as old:  # the previous release's file and its chain
        previous_release_chain(old)
        old.setattr(migrations, "MIGRATIONS", MIGRATIONS[:4])
        old.setattr(migrations, "SCHEMA_VERSION", 4)
        store = open_store(db)
        for run_id in ("ra", "rb"):
            make_run(store, run_id)
        for i in range(5):
            note(store, "ra" if i % 2 else "rb", i)
        before = (store.chain_head(), store.verify_events(), events(store))
        kept = store.chain_head()
        store.close()
    head, report, listed = before
    text, doc = _verify_text(report, None), json.dumps(_verify_json(report))
    with open_store(db) as store:  # migrates: nothing rewritten
        assert store.chain_head() == head == (listed[-1].seq, listed[-1].hash)
        assert store.chain_heads() == (head,)
        again = store.verify_events()
        assert again == report and again.heads == ()
        assert _verify_text(again, None) == text  # what `agentrt verify` prints, byte for byte
        assert json.dumps(_verify_json(again)) == doc
        assert events(store) == listed
        assert store.verify_events(head=kept) == report
        appended = note(store, "ra", 9)  # the next event continues the one chain
        assert appended.seq == head[0] + 1
        assert store.verify_events().intact
    conn = sqlite3.connect(db)
    try:
        meta = dict(conn.execute("SELECT key, value FROM agentrt_meta").fetchall())
        assert meta == {"min_writer_version": "0.2.0", "chain_partitions": "1"}
        assert conn.execute("SELECT part, seq, hash FROM chain_head").fetchall() == [
            (0, appended.seq, appended.hash)
        ]
    finally:
        conn.close()


def test_an_older_writer_is_refused_a_record_with_partitions(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    open_store(db, chain_partitions=4).close()
    conn = sqlite3.connect(db)
    try:
        check_writer(conn, runtime_version="0.2.0")
        with pytest.raises(SchemaVersionError, match=r"only by agentrt 0\.2\.0 or later"):
            check_writer(conn, runtime_version="0.1.0")  # it would chain past the head rows
    finally:
        conn.close()


@pytest.fixture
def pg_url() -> Iterator[str]:
    from support.postgres import postgres_schema

    with ExitStack() as stack:
        yield postgres_schema(stack)


def test_a_postgres_record_of_schema_4_becomes_partition_0_of_1_and_older_writers_are_refused(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentrt._store.postgres import _migrations as pg_migrations

    with monkeypatch.context() as old:  # the previous release: one head row, `id = 1`
        previous_release_chain(old)
        old.setattr(pg_migrations, "MIGRATIONS", pg_migrations.MIGRATIONS[:4])
        old.setattr(pg_migrations, "SCHEMA_VERSION", 4)
        store = open_store(pg_url)
        make_run(store, "ra")
        for i in range(3):
            note(store, "ra", i)
        listed = events(store)
        store.close()
    with open_store(pg_url) as store:  # migrates
        assert store.chain_heads() == ((listed[-1].seq, listed[-1].hash),)
        assert store.chain_head() == (listed[-1].seq, listed[-1].hash)
        report = store.verify_events(head=store.chain_head())
        assert (report.intact, report.checked, report.head_seq) == (True, len(listed), 5)
        assert note(store, "ra", 9).seq == 6
    import psycopg

    from agentrt._store.postgres._connection import connect, parse_target

    conn = connect(parse_target(pg_url))
    try:
        pg_migrations.check_writer(conn, runtime_version="0.2.0")
        with pytest.raises(SchemaVersionError, match=r"only by agentrt 0\.2\.0 or later"):
            pg_migrations.check_writer(conn, runtime_version="0.1.0")
        rows = conn.execute("SELECT part, seq FROM chain_head").fetchall()
        assert [tuple(r) for r in rows] == [(0, 6)]
    except psycopg.Error:
        raise
    finally:
        conn.close()


# --- agentrt verify with a head per partition ----------------------------------------------


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    out, _ = capsys.readouterr()
    return code, out


def four_partitions(db: Path) -> dict[int, list[Event]]:
    store = open_store(db, chain_partitions=4)
    try:
        for p in (1, 3):
            make_run(store, run_in(p, 4))
        for i in range(4):
            note(store, run_in(1 + 2 * (i % 2), 4), i)
        found: dict[int, list[Event]] = {0: [], 1: [], 2: [], 3: []}
        for event in events(store):
            found[event.seq % 4].append(event)
        return found
    finally:
        store.close()


def test_verify_prints_and_takes_a_head_per_partition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "p.db"
    found = four_partitions(db)
    code, out = run_main(capsys, "--db", str(db), "--json", "verify")
    doc = json.loads(out)
    heads = [(0, ""), (found[1][-1].seq, found[1][-1].hash), (0, "")]
    heads.append((found[3][-1].seq, found[3][-1].hash))
    with open_existing(db, read_only=True) as store:
        assert store.chain_heads() == tuple(heads)
        n, digest = store.chain_head()
    assert code == 0
    assert doc["intact"] and doc["checked"] == 8 and doc["partitions"] == 4
    assert (doc["head_seq"], doc["head_hash"]) == (4, digest) and n == 4
    assert doc["heads"] == [{"seq": s, "hash": h} for s, h in heads]
    kept = ",".join(f"{s}:{h}" for s, h in heads)
    assert doc["head"] == kept
    code, out = run_main(capsys, "--db", str(db), "verify", "--head", kept)
    assert (code, out.splitlines()[0]) == (
        0,
        f"intact: 8 events checked in 4 partitions; head 4:{digest} (N:DIGEST; verify --json "
        "prints the heads to keep); the kept heads of 4 partitions match",
    )
    # Cut partition 3's last event and cover the tracks in its head row: only the kept heads
    # tell.
    last, before = found[3][-1], found[3][-2]
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DELETE FROM events WHERE seq = ?", (last.seq,))
        conn.execute(
            "UPDATE chain_head SET seq = ?, hash = ? WHERE part = 3", (before.seq, before.hash)
        )
    conn.close()
    assert run_main(capsys, "--db", str(db), "verify")[0] == 0
    code, out = run_main(capsys, "--db", str(db), "verify", "--head", kept)
    assert code == 1
    assert out.startswith(f"broken at seq {last.seq}: truncated")
    code, out = run_main(capsys, "--db", str(db), "verify", "--head", f"{last.seq}:{last.hash}")
    assert code == 2 and out == ""  # one head for a record of four: a usage error
    # The text's N:DIGEST pasted back as a head: told what to keep instead.
    assert main(["--db", str(db), "verify", "--head", f"4:{digest}"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "agentrt: --head names one head, and this record's chain is in 4 partitions: keep the "
        'heads verify --json prints as "head" (SEQ:HASH,SEQ:HASH,..., one per partition); the '
        "N:DIGEST the text prints is their digest, not a head"
    )
    assert main(["--db", str(db), "verify", "--head", f"{kept},{kept}"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "agentrt: --head names 8 partition heads, and this record's chain is in 4 "
        "partition(s): keep the head verify prints for this record"
    )


# --- the follower's cursor ----------------------------------------------------------------


class Collect:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)


def test_the_follower_delivers_each_partition_in_commit_order_and_resumes_from_its_cursor(
    tmp_path: Path,
) -> None:
    db, cursor = tmp_path / "p.db", tmp_path / "cursor.json"
    high, low = run_in(3, 4), run_in(0, 4)
    with open_store(db, chain_partitions=4) as store:
        make_run(store, high)
        note(store, high, 0)
        note(store, high, 1)  # partition 3: seqs 3, 7, 11, 15
    sink = Collect()
    with Follower(db, cursor=cursor) as follower:
        assert follower.run(sink, follow=False) == 4
        assert follower.position == 15
    assert [e.seq for e in sink.events] == [3, 7, 11, 15]
    with open_store(db) as store:
        make_run(store, low)  # committed after 15, with lower seqs: partition 0's 4 and 8
        note(store, low, 0)
    saved = load_cursor(cursor)
    assert saved is not None and saved.heads == (
        (0, ""),
        (0, ""),
        (0, ""),
        (15, sink.events[-1].hash),
    )
    more = Collect()
    with Follower(db, cursor=cursor) as follower:  # a seq cursor would skip 4, 8 and 12
        assert follower.run(more, follow=False) == 3
        assert follower.positions[0] == (12, more.events[-1].hash)
    assert [(e.seq, e.run_id) for e in more.events] == [(4, low), (8, low), (12, low)]
    with Follower(db, cursor=cursor) as follower:
        assert follower.poll() == []


def test_a_one_pair_cursor_file_of_before_reads_as_partition_0_of_1(tmp_path: Path) -> None:
    db, cursor = tmp_path / "one.db", tmp_path / "cursor.json"
    with open_store(db) as store:
        make_run(store, "ra")
        for i in range(3):
            note(store, "ra", i)
        listed = events(store)
    third = listed[2]
    cursor.write_text(
        json.dumps({"version": 1, "seq": third.seq, "hash": third.hash, "run_id": None})
    )
    sink = Collect()
    with Follower(db, cursor=cursor) as follower:
        assert follower.positions == ((third.seq, third.hash),)
        assert follower.run(sink, follow=False) == len(listed) - 3
    assert sink.events == listed[3:]
    saved = json.loads(cursor.read_text())
    assert saved == {"version": 2, "heads": [[listed[-1].seq, listed[-1].hash]], "run_id": None}
    parted = tmp_path / "four.db"
    four_partitions(parted)
    cursor.write_text(
        json.dumps({"version": 1, "seq": third.seq, "hash": third.hash, "run_id": None})
    )
    with pytest.raises(CursorError, match="1 partition position"):
        Follower(parted, cursor=cursor)


def test_a_range_of_a_chain_in_partitions_starts_from_each_partitions_event_before_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "p.db"
    found = four_partitions(db)
    with open_existing(db, read_only=True) as store:
        start = found[3][1].seq
        report = store.verify_events(from_seq=start)
        assert report.intact
        assert report.checked == len([e for e in events(store) if e.seq >= start])
    conn = sqlite3.connect(db)
    with conn:  # an event of partition 1 before the range is edited: the range still verifies
        conn.execute("UPDATE events SET step_id = 'x' WHERE seq = ?", (found[1][0].seq,))
    conn.close()
    with open_existing(db, read_only=True) as store:
        assert store.verify_events(from_seq=found[1][1].seq).intact
        assert store.verify_events().first_break == ChainBreak(found[1][0].seq, "altered")
