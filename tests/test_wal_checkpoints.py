"""The WAL's checkpoints run after a write's turn is given back, not inside it (decision 0120).

Each test judges statements traced on the store's connection, the lock file (who holds
the writers' turn, looked at with a non-blocking `flock` of the test's own), the WAL's
size and the WAL-index header; none judges how long anything took.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import agentrt
from agentrt._store.sqlite import _checkpoints
from agentrt._store.sqlite._checkpoints import PAGES, WalCheckpoints
from agentrt._store.sqlite._renewer import ConnectionRenewer

pytestmark = pytest.mark.skipif(os.name != "posix", reason="flock is POSIX")

CHECKPOINT = "PRAGMA wal_checkpoint(PASSIVE)"
PAD = "x" * 3000  # a run row of about a page: each commit adds a few pages to the WAL


def turn_is_free(db: Path) -> bool:
    fd = os.open(f"{db}-lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def add_run(store: agentrt.Store, run_id: str) -> None:
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO runs (id, goal, status, limits_json, created_at) "
            "VALUES (?, ?, 'RUNNING', '{}', '2026-12-04T00:00:00.000000Z')",
            (run_id, PAD),
        )


def add_runs_in_a_group(store: agentrt.Store, run_ids: list[str]) -> None:
    def work(run_id: str) -> object:
        def write(tx: object) -> None:
            tx.execute(  # type: ignore[attr-defined]
                "INSERT INTO runs (id, goal, status, limits_json, created_at) "
                "VALUES (?, ?, 'RUNNING', '{}', '2026-12-04T00:00:00.000000Z')",
                (run_id, PAD),
            )

        return write

    outcomes = store.transactions([work(r) for r in run_ids])  # type: ignore[arg-type]
    assert all(o.error is None for o in outcomes)


class Traced:
    """The statements the store's connection runs; at each checkpoint, whether the turn
    was free and how many pages the header said were waiting."""

    def __init__(self, store: agentrt.Store, db: Path) -> None:
        self.statements: list[str] = []
        self.at_checkpoint: list[tuple[bool, int | None]] = []
        self._store = store
        self._db = db
        store._conn.set_trace_callback(self._seen)  # type: ignore[attr-defined]

    def _seen(self, sql: str) -> None:
        self.statements.append(sql)
        if sql == CHECKPOINT:
            waiting = self._store._checkpoints.waiting()  # type: ignore[attr-defined]
            self.at_checkpoint.append((turn_is_free(self._db), waiting))


def test_the_stores_connection_turns_sqlites_auto_checkpoint_off_and_the_heartbeats_keeps_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    store = agentrt.open_store(db)
    try:
        conn: sqlite3.Connection = store._conn  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        assert store._checkpoints is not None  # type: ignore[attr-defined]
        renewer = store.renewer(lambda: datetime(2026, 12, 4, tzinfo=UTC))
        assert isinstance(renewer, ConnectionRenewer)
        renewer.renew("nobody", "me", timedelta(seconds=30))  # opens its connection
        assert renewer._conn is not None
        assert renewer._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == PAGES
        renewer.close()
    finally:
        store.close()


def test_a_checkpoint_runs_after_the_commit_once_the_wal_holds_its_pages_with_the_turn_free(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    store = agentrt.open_store(db)
    try:
        traced = Traced(store, db)
        i = 0
        while not traced.at_checkpoint:
            add_run(store, f"r{i}")
            i += 1
            assert i < 5 * PAGES, "no checkpoint ever ran"
        free, waiting = traced.at_checkpoint[0]
        assert free  # the turn was given back before it
        assert waiting is not None and waiting >= PAGES
        before = traced.statements[traced.statements.index(CHECKPOINT) - 1]
        assert before == "COMMIT"
        assert i > 1  # not at every commit: only once the pages had piled up
        assert store._checkpoints.waiting() < PAGES  # type: ignore[attr-defined]
        assert len(store.list_runs(limit=10_000)) == i  # every run kept
    finally:
        store.close()


def test_a_group_commit_checkpoints_after_its_commit_with_the_turn_free(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = agentrt.open_store(db)
    try:
        traced = Traced(store, db)
        groups = 0
        while not traced.at_checkpoint:
            add_runs_in_a_group(store, [f"g{groups}-{k}" for k in range(8)])
            groups += 1
            assert groups < PAGES, "no checkpoint ever ran"
        free, waiting = traced.at_checkpoint[0]
        assert free
        assert waiting is not None and waiting >= PAGES
        assert traced.statements[traced.statements.index(CHECKPOINT) - 1] == "COMMIT"
    finally:
        store.close()


def test_the_wal_stays_bounded_over_many_commits(tmp_path: Path) -> None:
    """As with SQLite's own auto-checkpoint: the WAL is reused from its start once
    checkpointed, so it never holds much more than the mark's pages."""
    db = tmp_path / "runs.db"
    store = agentrt.open_store(db)
    try:
        page = store._conn.execute("PRAGMA page_size").fetchone()[0]  # type: ignore[attr-defined]
        for i in range(4 * PAGES):
            add_run(store, f"r{i}")
        frame = page + 24
        assert os.path.getsize(f"{db}-wal") <= 32 + (PAGES + 64) * frame
    finally:
        store.close()


def test_a_failed_write_runs_no_checkpoint(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = agentrt.open_store(db)
    try:
        for i in range(PAGES // 2):
            add_run(store, f"r{i}")
        traced = Traced(store, db)
        store._checkpoints.run_if_due = lambda conn: pytest.fail("ran")  # type: ignore[attr-defined]
        with pytest.raises(RuntimeError), store.transaction():
            raise RuntimeError("the work failed")
        assert CHECKPOINT not in traced.statements
        assert "ROLLBACK" in traced.statements
    finally:
        store.close()


def test_a_wal_index_that_cannot_be_read_keeps_sqlites_auto_checkpoint(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE t (x)")
        assert WalCheckpoints.take_over(str(tmp_path / "none.db"), conn) is None  # no -shm
        # A header of another format (the version this code reads changed).
        other = tmp_path / "other.db"
        Path(f"{other}-shm").write_bytes(bytes(136))
        assert WalCheckpoints.take_over(str(other), conn) is None
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == PAGES
        checkpoints = WalCheckpoints.take_over(str(db), conn)
        assert checkpoints is not None
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        checkpoints.close()
    finally:
        conn.close()


def test_a_torn_header_counts_as_due(tmp_path: Path) -> None:
    """Its two copies differ while SQLite writes it: unreadable, so a checkpoint runs
    rather than the WAL growing unseen."""
    db = tmp_path / "runs.db"
    store = agentrt.open_store(db)
    try:
        add_run(store, "r0")
        shm = Path(f"{db}-shm").read_bytes()
        torn = tmp_path / "torn.db"
        Path(f"{torn}-shm").write_bytes(shm[:48] + bytes(48) + shm[96:136])
        fd = os.open(f"{torn}-shm", os.O_RDONLY)
        checkpoints = WalCheckpoints(fd)
        assert checkpoints.waiting() is None
        traced = Traced(store, db)
        assert checkpoints.run_if_due(store._conn) is True  # type: ignore[attr-defined]
        assert CHECKPOINT in traced.statements
        checkpoints.close()
    finally:
        store.close()


def test_an_in_memory_or_read_only_store_has_no_checkpoints_of_its_own(tmp_path: Path) -> None:
    memory = agentrt.open_store(":memory:")
    try:
        assert memory._checkpoints is None  # type: ignore[attr-defined]
    finally:
        memory.close()
    db = tmp_path / "runs.db"
    agentrt.open_store(db).close()
    reader = agentrt.open_existing(db, read_only=True)
    try:
        assert reader._checkpoints is None  # type: ignore[attr-defined]
    finally:
        reader.close()


def test_the_mark_is_sqlites_own_default() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        # SQLite's compiled-in default mark, read on a fresh connection.
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == _checkpoints.PAGES
    finally:
        conn.close()
