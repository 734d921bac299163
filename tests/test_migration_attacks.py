"""Opening a record of an older schema, attacked: every older version, a process killed at each
statement of the migration, several processes and the command line at once, a newer record, a
full disk, a read-only file and a tampered migration table (decision 0169).

Real SQLite on real files: the crashes are real processes killed with SIGKILL
(tests/migration_crash_child.py), the full disk a small tmpfs (the tests run as root, in CI
too), the read-only file a tmpfs remounted read-only.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrt._errors import SchemaVersionError, StoreError
from agentrt._store import open_existing, open_store
from agentrt._store.sqlite._migrations import MIGRATIONS, SCHEMA_VERSION, statements
from store_contract.world import everything
from support.old_records import applied_versions, make_old_record, raw_rows

ROOT = Path(__file__).resolve().parents[1]
ALL = list(range(1, SCHEMA_VERSION + 1))


def reference(old: Path, tmp_path: Path) -> tuple[str, dict[str, list[tuple[object, ...]]]]:
    """What the record at `old` reads as once migrated (on a copy), and its rows before."""
    copy = tmp_path / "reference.db"
    shutil.copyfile(old, copy)
    with open_store(copy) as store:
        assert store.verify_events().intact
        return everything(store), raw_rows(old)


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION))
def test_a_record_of_each_older_schema_is_migrated_with_every_row_and_event_unchanged(
    version: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "old.db"
    make_old_record(db, version, monkeypatch)
    assert applied_versions(db) == ALL[:version]
    before = raw_rows(db)
    kept = tmp_path / "kept.db"
    shutil.copyfile(db, kept)
    with open_store(db) as store:
        report = store.verify_events()
        assert report.intact and report.checked == len(before["events"]) > 0
        runs = store.list_runs(cap=None)
        assert sorted(r.status.value for r in runs) == ["COMPLETED", "WAITING_FOR_APPROVAL"]
        assert {r.origin for r in runs} == {"driver"}
        read = everything(store)
    assert applied_versions(db) == ALL
    assert raw_rows(db, columns_of=kept) == before  # no row rewritten, none added or lost
    conn = sqlite3.connect(db)
    try:
        keys = conn.execute("SELECT reason_key FROM steps ORDER BY rowid").fetchall()
        head = conn.execute("SELECT part, seq, hash FROM chain_head").fetchall()
        last = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        meta = dict(conn.execute("SELECT key, value FROM agentrt_meta").fetchall())
    finally:
        conn.close()
    assert ("call é\U0001f600 " + "r" * 300)[:256] in [k[0] for k in keys]
    assert head == [(0, last[0], last[1])]
    assert meta == {"min_writer_version": "0.2.0", "chain_partitions": "1"}
    with open_existing(db, read_only=True) as store:  # as `agentrt verify` opens it
        assert everything(store) == read
        assert store.verify_events().intact


# --- a process killed at each statement of the open -------------------------------------------


@pytest.fixture
def crasher() -> Iterator[subprocess.Popen[str]]:
    """The fork server of tests/migration_crash_child.py (one import for every crash)."""
    child = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "migration_crash_child.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield child
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(60)


def killed_at(crasher: subprocess.Popen[str], path: Path, n: int) -> str:
    assert crasher.stdin is not None and crasher.stdout is not None
    crasher.stdin.write(f"{path} {n}\n")
    crasher.stdin.flush()
    return crasher.stdout.readline().strip()


@pytest.mark.parametrize("version", [0, 1, 4])
def test_an_open_killed_at_any_statement_leaves_the_old_record_and_the_next_open_migrates_once(
    version: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    crasher: subprocess.Popen[str],
) -> None:
    """Killed before each statement in turn, from the first setting to the one after the
    migration's COMMIT: the file then holds its old version or the new one whole, never a
    part; the next open migrates it once, and every row and event reads as an open that was
    never killed leaves them."""
    old = tmp_path / "old.db"
    if version:
        make_old_record(old, version, monkeypatch)
        expected, rows = reference(old, tmp_path)
    n = 0
    outcomes: list[str] = []
    at: list[str] = []
    while True:
        case = tmp_path / f"case{n}.db"
        if version:
            shutil.copyfile(old, case)
        said = killed_at(crasher, case, n)
        outcomes.append(said)
        if said == "opened":
            break
        assert said == "killed", (n, said)
        at.append(Path(f"{case}.killed-at").read_text(encoding="utf-8"))
        found = applied_versions(case) if case.exists() else []
        assert found in (ALL[:version], ALL), (n, found)
        conn = sqlite3.connect(case)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        finally:
            conn.close()
        with open_store(case) as store:  # the restart
            assert store.verify_events().intact
            if version:
                assert everything(store) == expected
        assert applied_versions(case) == ALL
        if version:
            assert raw_rows(case, columns_of=old) == rows
        for suffix in ("", "-wal", "-shm"):
            Path(f"{case}{suffix}").unlink(missing_ok=True)
        n += 1
    # Each statement of every pending migration was a crash point, and its COMMIT.
    pending = [s for m in MIGRATIONS[version:] for s in statements(m.sql)]
    assert [s for s in at if s in pending] == pending
    recorded = [s for s in at if s.startswith("INSERT INTO schema_migrations ")]
    assert len(recorded) == len(MIGRATIONS[version:])
    assert at[at.index("BEGIN IMMEDIATE") :].count("COMMIT") == 1


# --- a migration record changed by hand ---------------------------------------------------------


@pytest.mark.parametrize(
    ("tamper", "refusal"),
    [
        (
            "DELETE FROM schema_migrations WHERE version = 3",
            r"schema_migrations records the versions 1, 2, 4, 5, where agentrt records each "
            r"from 1 to the highest once: the record was changed by hand",
        ),
        (
            "INSERT INTO schema_migrations (version, applied_at) VALUES (0, '')",
            r"records the versions 0, 1, 2, 3, 4, 5, where",
        ),
        (
            "DELETE FROM schema_migrations",
            r"holds agentrt's tables but no record of its migrations \(schema_migrations is "
            r"missing or empty\): the record was changed by hand",
        ),
        ("DROP TABLE schema_migrations", r"holds agentrt's tables but no record of its migrations"),
    ],
)
def test_a_migration_record_changed_by_hand_is_refused_by_every_open_and_nothing_is_written(
    tamper: str, refusal: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "old.db"
    make_old_record(db, 4, monkeypatch)
    open_store(db).close()
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute(tamper)
    finally:
        conn.close()
    before = db.read_bytes()
    for opening in (
        lambda: open_store(db),
        lambda: open_existing(db),
        lambda: open_existing(db, read_only=True),
    ):
        with pytest.raises(SchemaVersionError, match=refusal):
            opening()
    assert db.read_bytes() == before
    code, said = agentrt_command("--db", str(db), "runs")
    assert code == 1 and re.search(refusal, said), said


def test_the_last_version_deleted_is_refused_as_a_record_that_holds_a_later_migration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record then reads as schema 4 and is sent to a migration: migration 5 finds its
    table there and is refused whole, in words, not as SQLite's "already exists" alone."""
    db = tmp_path / "old.db"
    make_old_record(db, 4, monkeypatch)
    open_store(db).close()
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("DELETE FROM schema_migrations WHERE version = 5")
    finally:
        conn.close()
    rows = raw_rows(db)
    with pytest.raises(
        SchemaVersionError,
        match=r"^migration 5 cannot be applied \(table chain_head already exists\): the database "
        r"records schema version 4 but holds what a later migration makes, so its record of "
        r"migrations was changed by hand; refused, nothing was changed$",
    ):
        open_store(db)
    assert applied_versions(db) == ALL[:4] and raw_rows(db) == rows


def test_another_programs_database_is_not_migrated_into(tmp_path: Path) -> None:
    db = tmp_path / "theirs.db"
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("CREATE TABLE runs (id TEXT, theirs TEXT)")
        conn.execute("INSERT INTO runs VALUES ('x', 'kept')")
    finally:
        conn.close()
    db.chmod(0o600)
    with pytest.raises(
        SchemaVersionError,
        match=r"^migration 1 cannot be applied \(table runs already exists\): the database holds "
        r"no record of agentrt's migrations but a table or index of a name agentrt makes",
    ):
        open_store(db)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("runs",)]
    finally:
        conn.close()


def agentrt_command(*args: str) -> tuple[int, str]:
    """`agentrt ARGS` in a process of its own: its exit code and what it wrote to stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "agentrt", *args], capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stderr


def test_a_newer_record_is_refused_by_every_open_and_the_command_line_with_nothing_written(
    tmp_path: Path,
) -> None:
    db = tmp_path / "newer.db"
    open_store(db).close()
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (6, '')")
        conn.execute("CREATE TABLE grants (id TEXT) STRICT")
    finally:
        conn.close()
    before = (db.read_bytes(), db.stat().st_mtime_ns, sorted(p.name for p in tmp_path.iterdir()))
    said = r"written by a newer agentrt \(schema version 6; this agentrt 0\.2\.0 knows up to 5\)"
    for opening in (
        lambda: open_store(db),
        lambda: open_store(db, chain_partitions=4),
        lambda: open_existing(db),
        lambda: open_existing(db, read_only=True),
    ):
        with pytest.raises(SchemaVersionError, match=said):
            opening()
    code, err = agentrt_command("--db", str(db), "approve", "a1")
    assert code == 1 and re.search(said, err), err
    after = (db.read_bytes(), db.stat().st_mtime_ns, sorted(p.name for p in tmp_path.iterdir()))
    assert after == before


def test_a_migration_on_a_full_disk_fails_leaving_the_old_record_whole_and_migrates_with_room(
    small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = tmp_path / "old.db"
    make_old_record(old, 1, monkeypatch)
    rows = raw_rows(old)
    db = small_disk / "old.db"
    shutil.copyfile(old, db)
    db.chmod(0o600)
    filler = small_disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError, match="No space left"):
            while True:
                os.write(fd, b"x" * 4096)
    finally:
        os.close(fd)
    os.truncate(filler, filler.stat().st_size - 32768)  # room for the -shm, not the migration
    with pytest.raises(StoreError, match=r"database or disk is full"):
        open_store(db)
    assert applied_versions(db) == [1] and raw_rows(db) == rows
    filler.unlink()
    with open_store(db) as store:
        assert store.verify_events().intact
    assert applied_versions(db) == ALL and raw_rows(db, columns_of=old) == rows
