"""The SQLite store never acknowledges a commit that is not durable in the record at its path.

A disk that fills up under a transaction, a sync the disk fails (EIO), a database file or
WAL deleted or replaced while the store is open, and a signal landing between `BEGIN` and
the transaction's block: each ends in a `StoreError` that says what is known, never in
an acknowledged commit that a restart loses, a half-written transaction, or a wedged store.

Real SQLite on real files: a small tmpfs for the full disk (the tests run as root, in CI
too), an `LD_PRELOAD` shim (`tools/failing_fsync.c`) for the failing sync, in a process of
its own.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentrt._errors import StoreError
from agentrt._records import Limits
from agentrt._store import open_store
from agentrt._store.sqlite._writer_turns import WriterTurns
from agentrt._store.sqlite._writes import SqliteTx
from conftest import EPOCH

ROOT = Path(__file__).resolve().parents[1]


def _create(store: Any, run_id: str) -> None:
    with store.transaction() as tx:
        tx.create_run(
            run_id,
            "goal",
            Limits(),
            owner="me",
            lease_expires_at=EPOCH,
            holder="{}",
            specs=[],
            now=EPOCH,
        )


def _run_ids(path: Path) -> list[str]:
    store = open_store(path)
    try:
        return sorted(r.id for r in store.list_runs())
    finally:
        store.close()


def test_a_transaction_sqlite_rolled_back_on_a_full_disk_writes_nothing_after_it(
    small_disk: Path,
) -> None:
    store = open_store(small_disk / "x.db")
    with store.transaction() as tx:
        tx.execute("CREATE TABLE mine (v BLOB)")
    with pytest.raises(StoreError) as ended, store.transaction() as tx:
        tx.execute("INSERT INTO mine VALUES ('first')")
        # Bigger than the page cache and than the disk: written out before COMMIT, and
        # SQLite rolls the whole transaction back when the disk is full.
        with pytest.raises(StoreError, match="database or disk is full"):
            tx.execute("INSERT INTO mine VALUES (zeroblob(4000000))")
        # A consumer that goes on after the failed statement: its next write is refused
        # rather than committed on its own outside any transaction.
        with pytest.raises(StoreError, match="SQLite rolled the whole transaction back"):
            tx.execute("INSERT INTO mine VALUES ('after')")
    assert "SQLite rolled the whole transaction back" in str(ended.value)
    assert [tuple(r) for r in store.query("SELECT v FROM mine")] == []
    # The space is there again for a transaction that fits: the store goes on.
    with store.transaction() as tx:
        tx.execute("INSERT INTO mine VALUES ('fits')")
    assert [tuple(r) for r in store.query("SELECT v FROM mine")] == [("fits",)]
    store.close()


def test_a_group_whose_work_fills_the_disk_fails_whole_with_nothing_written(
    small_disk: Path,
) -> None:
    store = open_store(small_disk / "x.db")
    with store.transaction() as tx:
        tx.execute("CREATE TABLE mine (v BLOB)")

    def insert(value: str) -> Any:
        return lambda tx: tx.execute("INSERT INTO mine VALUES (?)", (value,))

    def too_big(tx: Any) -> None:
        tx.execute("INSERT INTO mine VALUES (zeroblob(4000000))")

    with pytest.raises(StoreError, match="SQLite rolled the whole transaction back") as failed:
        store.transactions([insert("a"), too_big, insert("c")])
    assert "nothing was written" in str(failed.value)
    assert store.query("SELECT v FROM mine") == []
    store.transactions([insert("x"), insert("y")])
    assert [tuple(r) for r in store.query("SELECT v FROM mine")] == [("x",), ("y",)]
    store.close()


@pytest.fixture(scope="module")
def failing_fsync(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tools/failing_fsync.c`, built."""
    if shutil.which("gcc") is None and not os.environ.get("CI"):
        pytest.skip("no gcc to build tools/failing_fsync.c")
    out = tmp_path_factory.mktemp("shim") / "failing_fsync.so"
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-O2",
            "-o",
            str(out),
            str(ROOT / "tools" / "failing_fsync.c"),
            "-ldl",
        ],
        check=True,
        capture_output=True,
    )
    return out


_EIO_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from agentrt._records import Limits
    from agentrt._store import open_store
    from conftest import EPOCH

    path, flag = sys.argv[1], sys.argv[2]
    said = {}

    def create(store, run_id):
        try:
            with store.transaction() as tx:
                tx.create_run(run_id, "goal", Limits(), owner="me", lease_expires_at=EPOCH,
                              holder="{}", specs=[], now=EPOCH)
            said[run_id] = "acknowledged"
        except BaseException as e:
            said[run_id] = f"{type(e).__module__}.{type(e).__name__}: {e}"

    store = open_store(path)
    create(store, "r1")
    open(flag, "w").close()  # the disk fails every sync from here
    create(store, "r2")
    os.unlink(flag)  # and syncs again: the store must not take that for durability
    create(store, "r3")
    print(json.dumps(said))
    sys.stdout.flush()
    os._exit(0)  # dies without closing, as a killed process would
    """
)


def test_a_commit_whose_fsync_failed_is_not_acknowledged_and_the_store_stops_writing(
    tmp_path: Path, failing_fsync: Path
) -> None:
    db = tmp_path / "x.db"
    flag = tmp_path / "fail-now"
    env = {
        **os.environ,
        "LD_PRELOAD": str(failing_fsync),
        "FAILING_FSYNC_FLAG": str(flag),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", _EIO_SCRIPT, str(db), str(flag)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["r1"] == "acknowledged"
    # Not acknowledged, and not said to have written nothing: the WAL may hold the commit,
    # and a restart may find it there.
    assert said["r2"].startswith("agentrt.StoreError: ")
    assert "nothing was written" not in said["r2"]
    assert "could not be made durable" in said["r2"]
    # The store does not go on writing as if its disk were sound.
    assert said["r3"].startswith("agentrt.StoreError: ")
    assert "reopen" in said["r3"]
    assert "r3" not in _run_ids(db)
    assert "r1" in _run_ids(db)


def _replace(db: Path) -> None:
    os.rename(db, db.with_name("old.db"))
    shutil.copyfile(db.with_name("old.db"), db)
    os.chmod(db, 0o600)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda db: os.unlink(db), id="database-deleted"),
        pytest.param(lambda db: os.unlink(f"{db}-wal"), id="wal-deleted"),
        pytest.param(_replace, id="database-replaced"),
    ],
)
def test_a_commit_to_a_database_file_deleted_or_replaced_while_open_is_not_acknowledged(
    tmp_path: Path, change: Any
) -> None:
    db = tmp_path / "x.db"
    store = open_store(db)
    _create(store, "r1")
    change(db)
    with pytest.raises(StoreError, match="deleted or replaced while the store was open"):
        _create(store, "r2")
    # Nor does any later one commit into a file a restart will not find.
    with pytest.raises(StoreError, match="deleted or replaced while the store was open"):
        _create(store, "r3")
    store.close()


def test_a_wal_deleted_while_open_loses_no_acknowledged_commit_once_the_store_stops(
    tmp_path: Path,
) -> None:
    db = tmp_path / "x.db"
    store = open_store(db)
    _create(store, "r1")
    os.unlink(f"{db}-wal")
    with pytest.raises(StoreError, match="deleted or replaced"):
        _create(store, "r2")
    # r1 was acknowledged; it lived only in the WAL that was deleted. The store, stopping,
    # put it into the database file, and r2 is nowhere.
    assert _run_ids(db) == ["r1"]


def test_a_signal_between_begin_and_the_transactions_block_leaves_the_store_usable(
    tmp_path: Path,
) -> None:
    db = tmp_path / "x.db"
    store = open_store(db)
    _create(store, "r1")

    # A KeyboardInterrupt landing on the first bytecode after `BEGIN IMMEDIATE` returned:
    # as a signal handler's would, raised where the transaction object is made.
    def interrupt(frame: Any, event: str, arg: Any) -> Any:
        made = event == "call" and frame.f_code.co_name == "__init__"
        if made and isinstance(frame.f_locals.get("self"), SqliteTx):
            sys.settrace(None)
            raise KeyboardInterrupt
        return None

    sys.settrace(interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            _create(store, "r2")
    finally:
        sys.settrace(None)
    # Nothing of it written, no transaction left open on the connection, and the write
    # lock given back: the same store and another one both write.
    _create(store, "r3")
    other = open_store(db)
    _create(other, "r4")
    assert sorted(r.id for r in other.list_runs()) == ["r1", "r3", "r4"]
    other.close()
    store.close()


def test_a_database_file_deleted_during_the_commit_itself_is_not_acknowledged(
    tmp_path: Path,
) -> None:
    """The file deleted after the check before the COMMIT, as the COMMIT runs: the commit
    went to a file no one can open, so it is not acknowledged ("unknown"), and the store
    refuses further use."""
    db = tmp_path / "x.db"
    store = open_store(db)
    _create(store, "r1")

    def on_statement(sql: str) -> None:
        if sql.strip().upper() == "COMMIT" and db.exists():
            os.unlink(db)

    store._conn.set_trace_callback(on_statement)
    with pytest.raises(StoreError, match="deleted or replaced while the store was open") as said:
        _create(store, "r2")
    assert "unknown" in str(said.value), said.value
    with pytest.raises(StoreError, match="deleted or replaced"):
        _create(store, "r3")
    store.close()


def test_a_signal_just_after_the_writers_turn_is_taken_gives_the_turn_back(
    tmp_path: Path,
) -> None:
    db = tmp_path / "x.db"
    store = open_store(db)
    _create(store, "r1")

    # A KeyboardInterrupt landing in `WriterTurns.take` once the turn is held, before it
    # returns: as a signal handler's would, between two of its lines.
    def in_take(frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_locals["self"]._held:  # `self` is the WriterTurns
            sys.settrace(None)
            raise KeyboardInterrupt
        return in_take

    def interrupt(frame: Any, event: str, arg: Any) -> Any:
        taking = event == "call" and frame.f_code.co_name == "take"
        if taking and isinstance(frame.f_locals.get("self"), WriterTurns):
            return in_take
        return None

    sys.settrace(interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            _create(store, "r2")
    finally:
        sys.settrace(None)
    # The turn was given back: another store of the file writes at once, not after
    # waiting out a busy timeout for a turn nobody will give back.
    other = open_store(db)
    _create(other, "r3")
    _create(store, "r4")
    assert sorted(r.id for r in other.list_runs()) == ["r1", "r3", "r4"]
    other.close()
    store.close()


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda db: os.unlink(db), id="database-deleted"),
        pytest.param(lambda db: os.unlink(f"{db}-wal"), id="wal-deleted"),
        pytest.param(_replace, id="database-replaced"),
    ],
)
def test_a_heartbeat_stops_renewing_a_lease_in_a_file_deleted_or_replaced_under_its_run(
    tmp_path: Path, change: Any
) -> None:
    """The heartbeat's own connection, like the store's, writes on through the descriptors it
    opened: a file deleted or replaced under a running run once had its lease renewed into
    the orphan every third of the lease, a renewal no other process reads, for as long as
    the tool ran. It now finds the change at its next renewal, stops and reports the lease
    lost; the loop's next commit is refused as the store's own check refuses it."""
    import agentrt
    from agentrt import Decision, SideEffect, ToolCall, ToolResult
    from agentrt.scripted import ScriptedAgent
    from conftest import RecordingTool

    db = tmp_path / "x.db"
    store = agentrt.open_store(db)
    sessions: list[Any] = []
    seen: dict[str, Any] = {}

    def probe(point: str, session: Any) -> None:
        if not sessions:
            sessions.append(session)

    def long_call(call: ToolCall) -> ToolResult:
        heartbeat = sessions[0].heartbeat
        deadline = time.monotonic() + 60
        while heartbeat.renewals < 1 and time.monotonic() < deadline:  # its connection open
            time.sleep(0.01)
        seen["renewed before"] = heartbeat.renewals >= 1
        change(db)
        deadline = time.monotonic() + 30  # a hundred renewals' time: never, before the fix
        while not heartbeat.lost.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen["lost"] = heartbeat.lost.is_set()
        seen["renewals at the loss"] = heartbeat.renewals
        return ToolResult({"done": True})

    slow = RecordingTool(
        "slow", SideEffect.LOCAL_MUTATION, result=long_call, timeout=timedelta(seconds=120)
    )
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("slow", {}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[slow],
        lease_ttl=timedelta(milliseconds=300),
        probe=probe,
    )
    with pytest.raises(StoreError, match="deleted or replaced while the store was open"):
        driver.start_sync("long")
    # Once lost, nothing more is renewed; the heartbeat's thread (which goes on looking at
    # kept tools until its session stops it, decision 0207) ends with the loop.
    heartbeat = sessions[0].heartbeat
    heartbeat._thread.join(timeout=30)
    seen["heartbeat ended"] = not heartbeat._thread.is_alive()
    seen["renewed after the loss"] = heartbeat.renewals != seen.pop("renewals at the loss")
    assert seen == {
        "renewed before": True,
        "lost": True,
        "heartbeat ended": True,
        "renewed after the loss": False,
    }
    assert len(slow.calls) == 1
    store.close()


def test_a_heartbeat_connection_opened_after_the_file_was_replaced_renews_nothing_in_it(
    tmp_path: Path,
) -> None:
    """The heartbeat opens its connection at its first renewal: a file put at the path
    since the store opened (a copy holding the same run and lease) is not the record the
    store writes, and its lease is left as it is there."""
    from datetime import UTC, datetime

    db = tmp_path / "x.db"
    store = open_store(db)
    _create(store, "r1")  # leased by "me", expired at EPOCH
    _replace(db)
    renewer = store.renewer(lambda: datetime.now(UTC))
    try:
        assert renewer.renew("r1", "me", timedelta(seconds=30)) is False
    finally:
        renewer.close()
    copy = open_store(db)
    try:
        lease = copy.lease("r1")
        assert lease is not None and lease.owner == "me" and lease.expires_at == EPOCH
    finally:
        copy.close()
    store.close()


def test_a_file_replaced_between_a_renewals_update_and_its_commit_gets_nothing_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race between the heartbeat's check and its COMMIT: the database replaced by a
    copy (its `-wal` left at the path) after the renewal's UPDATE, just before its COMMIT.
    The check made there rolls the renewal back: not renewed, and nothing of it in the file
    at the path, which a restart reads with that `-wal`. Pins the check before the COMMIT
    (the ones before the connection opens and after the COMMIT do not see this change
    in time)."""
    from datetime import UTC, datetime

    from agentrt._store.sqlite import _filesafety

    db = tmp_path / "x.db"
    store = open_store(db)
    _create(store, "r1")  # leased by "me", expired at EPOCH
    with sqlite3.connect(db) as other:  # the run in the database file, so in its copy too
        other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    other.close()
    renewer = store.renewer(lambda: datetime.now(UTC))
    checks: list[bool] = []
    real_moved = _filesafety.FileIdentity.moved

    def moved(self: _filesafety.FileIdentity) -> bool:
        conn = renewer._conn
        if not checks and conn is not None and conn.in_transaction:  # UPDATE made, no COMMIT
            _replace(db)
            checks.append(real_moved(self))
            return checks[-1]
        return real_moved(self)

    monkeypatch.setattr(_filesafety.FileIdentity, "moved", moved)
    try:
        assert renewer.renew("r1", "me", timedelta(seconds=30)) is False
    finally:
        renewer.close()
    monkeypatch.setattr(_filesafety.FileIdentity, "moved", real_moved)
    assert checks == [True]  # the change found just before the COMMIT
    store.close()
    for path in (db, db.with_name("old.db")):
        again = open_store(path)
        try:
            lease = again.lease("r1")
            assert lease is not None and lease.owner == "me" and lease.expires_at == EPOCH
        finally:
            again.close()


_EIO_BESIDE_A_LINK = textwrap.dedent(
    """
    import json, os, sys
    from agentrt._records import Limits
    from agentrt._store import open_store
    from conftest import EPOCH

    path, flag, target = sys.argv[1], sys.argv[2], sys.argv[3]
    store = open_store(path)
    # The lock file replaced by a symlink while the store is open (it keeps its own open
    # file): its target is on another filesystem.
    os.symlink(target, path + "-link")
    os.replace(path + "-link", path + "-lock")
    open(flag, "w").close()  # the disk fails every sync from here
    try:
        with store.transaction() as tx:
            tx.create_run("r1", "goal", Limits(), owner="me", lease_expires_at=EPOCH,
                          holder="{}", specs=[], now=EPOCH)
        said = "acknowledged"
    except BaseException as e:
        said = f"{type(e).__module__}.{type(e).__name__}: {e}"
    print(json.dumps(said))
    sys.stdout.flush()
    os._exit(0)
    """
)


_AN_IO_ERROR = "agentrt.StoreError: commit failed: the disk reported an I/O error"


def _fail_a_sync_beside_a_linked_lock_file(
    tmp_path: Path, failing_fsync: Path, target: Path
) -> str:
    db, flag = tmp_path / "x.db", tmp_path / "fail-now"
    env = {
        **os.environ,
        "LD_PRELOAD": str(failing_fsync),
        "FAILING_FSYNC_FLAG": str(flag),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", _EIO_BESIDE_A_LINK, str(db), str(flag), str(target)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert isinstance(said, str)
    return said


def test_a_failed_sync_is_not_said_a_read_only_filesystem_for_a_lock_file_linked_to_one(
    tmp_path: Path, failing_fsync: Path, small_disk: Path
) -> None:
    """The look for a filesystem turned read-only (decision 0208) is the store's own
    filesystem's: a `-lock` replaced by a symlink to a file on a read-only filesystem does
    not make a writable one's failed sync read as read-only."""
    target = small_disk / "elsewhere"
    target.write_text("")
    remounted = subprocess.run(
        ["mount", "-o", "remount,ro", str(small_disk)], capture_output=True, text=True
    )
    assert remounted.returncode == 0, remounted.stderr
    said = _fail_a_sync_beside_a_linked_lock_file(tmp_path, failing_fsync, target)
    assert said.startswith(_AN_IO_ERROR), said
    assert "read-only" not in said


def test_a_failed_sync_writes_nothing_through_a_lock_file_replaced_by_a_symlink(
    tmp_path: Path, failing_fsync: Path
) -> None:
    """Looking for a filesystem turned read-only after a failed commit (decision 0208)
    never writes through a symlink planted at the `-lock` path (not even its times)."""
    target = tmp_path / "elsewhere"
    target.write_text("")
    os.utime(target, (1_000_000, 1_000_000))
    said = _fail_a_sync_beside_a_linked_lock_file(tmp_path, failing_fsync, target)
    assert said.startswith(_AN_IO_ERROR), said
    assert os.stat(target).st_mtime == 1_000_000
