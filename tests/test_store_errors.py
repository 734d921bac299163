"""No driver exception crosses the store interface: SQLite's failures become `StoreError`s.

A damaged page is `StoreDamagedError`, a lock held past the busy timeout is
`StoreBusyError`, anything else a plain `StoreError`; the CLI, the console, the
webhook and the test kit catch `AgentrtError` only (tests/test_layering.py keeps
`sqlite3` out of every module but the backend's).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentrt import StoreBusyError, StoreDamagedError, StoreError
from agentrt._store import Store, open_existing, open_store
from agentrt._store.sqlite import _connection
from agentrt.lowlevel import every_record_id, plain_reader
from support.damage import finished_run_file, smash_page

WALL = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A file with one finished run of a few steps, every commit in the main file."""
    return finished_run_file(tmp_path / "agentrt.db", steps=20)


def _public_reads(store: Store, run_id: str) -> dict[str, Callable[[], Any]]:
    """One call of each of the interface's reads that touch the damaged tables."""
    return {
        "get_run": lambda: store.get_run(run_id),
        "list_runs": lambda: store.list_runs(),
        "count_runs": lambda: store.count_runs(),
        "list_steps": lambda: store.list_steps(run_id),
        "list_events": lambda: store.list_events(run_id),
        "last_event_seq": lambda: store.last_event_seq(run_id),
        "event_count": lambda: store.event_count(run_id),
        "lease": lambda: store.lease(run_id),
        "lease_state": lambda: store.lease_state(run_id),
        "unfinished_runs": lambda: store.unfinished_runs(None, 10),
        "chain_head": lambda: store.chain_head(),
        "verify_events": lambda: store.verify_events(),
        "check_file": lambda: store.check_file(),
    }


@pytest.mark.parametrize("table", ["runs", "steps", "events"])
def test_no_read_of_a_damaged_file_raises_anything_but_a_store_error(db: Path, table: str) -> None:
    with open_store(db) as store:
        run_id = store.list_runs()[0].id
    smash_page(db, table)
    raised: dict[str, str] = {}
    with open_existing(db, read_only=True) as store:
        for name, read in _public_reads(store, run_id).items():
            try:
                read()
            except Exception as e:  # what each read raises, if anything, is the point
                assert isinstance(e, StoreError), f"{name} raised {type(e).__name__}: {e}"
                raised[name] = type(e).__name__
    # The damaged table's own reads said so, as the store's error for damage.
    assert raised, "no read noticed the damage"
    assert set(raised.values()) == {"StoreDamagedError"}


def test_a_write_transaction_on_a_damaged_table_fails_as_damage_and_writes_nothing(
    db: Path,
) -> None:
    with open_store(db) as store:
        run_id = store.list_runs()[0].id
    smash_page(db, "runs")
    with (
        open_existing(db) as store,
        pytest.raises(StoreDamagedError, match="SQLite finds the file damaged"),
        store.transaction() as tx,
    ):
        tx.lock_run(run_id)


def test_an_exclusive_lock_held_past_the_busy_timeout_is_store_busy_at_open(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second connection holding an exclusive lock: opening (which reads the schema)
    gives up with `StoreBusyError` after the busy timeout, never `sqlite3.OperationalError`."""
    monkeypatch.setattr(_connection, "BUSY_TIMEOUT_MS", 50)
    blocker = sqlite3.connect(db, isolation_level=None)
    try:
        blocker.execute("PRAGMA locking_mode = EXCLUSIVE")
        blocker.execute("BEGIN EXCLUSIVE")
        blocker.execute("UPDATE runs SET goal = goal")
        with pytest.raises(StoreBusyError, match="database is locked"):
            open_existing(db)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_a_renewal_on_a_damaged_table_raises_store_damaged_and_closes_its_connection(
    db: Path,
) -> None:
    with open_store(db) as store:
        run_id = store.list_runs()[0].id
    smash_page(db, "runs")
    with open_existing(db) as store:
        renewer = store.renewer(lambda: WALL)
        with pytest.raises(StoreDamagedError, match=f"renewing the lease on run {run_id}"):
            renewer.renew(run_id, "me", timedelta(seconds=30))
        assert renewer._conn is None  # type: ignore[attr-defined]  # the next renew reopens
        renewer.close()


def test_the_plain_reads_of_a_file_that_is_not_an_agentrt_database_are_store_errors(
    tmp_path: Path,
) -> None:
    other = tmp_path / "other.db"
    sqlite3.connect(other).close()  # an empty SQLite file: no agentrt tables
    with plain_reader(str(other)) as conn, pytest.raises(StoreError, match="no such table"):
        every_record_id(conn)
    with pytest.raises(StoreError, match="cannot read"):
        plain_reader(str(tmp_path / "missing" / "nothing.db"))
