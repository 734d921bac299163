"""The store: safe opening, pragmas, tables, transactions, reads, decoding, bounds.

The tests of transactions, reads, decoding a tampered row, the values at the read cap, the
columns' defaults and a consumer's own tables take `any_store` or `database` and run on
SQLite and on PostgreSQL. The rest stay on SQLite, being about its file rules (modes,
sidecars, symlinks, paths, a read-only directory, in-memory, its version, its pragmas and
second connection) or its SQL (the read cap's `substr` traced, the saturating `CASE`,
`sqlite_master`); PostgreSQL's are in the store contract suite and `test_postgres_*.py`.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentrt._canonical import to_text
from agentrt._capped import TEXT_CAP
from agentrt._errors import (
    InsecureModeError,
    NotFoundError,
    StoreError,
    SymlinkError,
    UnsafeSchemaError,
)
from agentrt._records import (
    ApprovalStatus,
    Decision,
    Lease,
    Limits,
    Observation,
    PolicyDecision,
    RunStatus,
    StepStatus,
    ToolSpec,
)
from agentrt._store import Store, open_existing, open_store
from agentrt._store.sqlite._codecs import MAX_INT64, clamp_charge, saturating_add_sql
from agentrt._store.sqlite._connection import check_sqlite_version
from agentrt._store.sqlite._filesafety import check_all
from support.database import on_postgres
from support.rows import execute

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
NOBODY = 65534
T0 = datetime(2026, 11, 30, 2, 42, 14, 123456, tzinfo=UTC)


def stamp(seconds: int = 0) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def add_run(store: Store, run_id: str, *, goal: str = "goal", status: str = "RUNNING") -> None:
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO runs (id, goal, status, limits_json, created_at) VALUES (?, ?, ?, ?, ?)",
            (run_id, goal, status, to_text(Limits(max_steps=7).to_json()), stamp()),
        )


def raw(path: Path) -> sqlite3.Connection:
    """A plain connection for tampering, as an attacker with write access would have."""
    return sqlite3.connect(path, isolation_level=None)


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "agentrt.db"


@pytest.fixture
def store(db: Path) -> Iterator[Store]:
    s = open_store(db)
    yield s
    s.close()


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    original = os.umask(0o022)
    os.umask(original)

    def set_umask(value: int) -> None:
        os.umask(value)

    yield set_umask
    os.umask(original)


# --- creation, modes, refusals ------------------------------------------------------------------


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o077])
def test_new_database_and_sidecars_are_owner_only_whatever_the_umask(
    db: Path, umask: Callable[[int], None], mask: int
) -> None:
    umask(mask)
    store = open_store(db)
    try:
        add_run(store, "r1")
        files = {p.name: mode(p) for p in db.parent.iterdir()}
        # The writers' lock file (decision 0106) too: it holds no data, but whoever could
        # lock it could hold every writer up to its busy timeout.
        assert files == {
            "agentrt.db": 0o600,
            "agentrt.db-wal": 0o600,
            "agentrt.db-shm": 0o600,
            "agentrt.db-lock": 0o600,
        }
    finally:
        store.close()


def test_pragmas_on_the_writer_and_on_open_connection(store: Store) -> None:
    with store.transaction() as tx:
        main = {
            name: tx.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
        }
        trusted = tx.execute("PRAGMA trusted_schema").fetchone()[0]
    assert main == {
        "journal_mode": "wal",
        "synchronous": 2,
        "foreign_keys": 1,
        "busy_timeout": 5000,
    }
    assert trusted == 0
    other = store._open_connection()
    try:
        assert other.execute("PRAGMA synchronous").fetchone()[0] == 2
        assert other.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert other.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
        assert other.execute("PRAGMA trusted_schema").fetchone()[0] == 0
        assert other.isolation_level is None
    finally:
        other.close()


def test_open_connection_sees_and_makes_committed_writes(store: Store) -> None:
    add_run(store, "r1")
    conn = store._open_connection()
    try:
        cur = conn.execute("UPDATE runs SET lease_owner = 'hb' WHERE id = 'r1'")
        assert cur.rowcount == 1
    finally:
        conn.close()
    assert store.lease("r1").owner == "hb"


def test_in_memory_store_works_but_has_no_second_connection() -> None:
    store = open_store(":memory:")
    try:
        assert store.in_memory
        add_run(store, "r1")
        with store.transaction() as tx:
            tx.append_event("r1", "", T0, "run.created", {"a": 1})
        assert store.get_run("r1").goal == "goal"
        assert store.verify_events().intact
        with pytest.raises(StoreError, match="in-memory"):
            store._open_connection()
    finally:
        store.close()


def test_too_old_sqlite_is_refused_naming_the_version_needed() -> None:
    with pytest.raises(StoreError, match=r"SQLite 3\.37\.0 or newer.*links SQLite 3\.36\.9"):
        check_sqlite_version((3, 36, 9))
    check_sqlite_version((3, 37, 0))


def test_group_writable_database_is_refused(db: Path) -> None:
    open_store(db).close()
    os.chmod(db, 0o620)
    with pytest.raises(InsecureModeError, match="writable by group or others"):
        open_store(db)
    with pytest.raises(InsecureModeError, match="writable by group or others"):
        open_existing(db, read_only=True)
    assert mode(db) == 0o620


def test_world_writable_wal_is_refused(db: Path) -> None:
    writer = open_store(db)
    try:
        add_run(writer, "r1")
        os.chmod(f"{db}-wal", 0o602)
        with pytest.raises(InsecureModeError, match=r"wal file .* writable by group or others"):
            open_existing(db, read_only=True)
        with pytest.raises(InsecureModeError, match="wal file"):
            open_store(db)
    finally:
        writer.close()


@pytest.mark.parametrize("suffix", ["-shm", "-wal", "-journal", "-lock"])
def test_sidecar_that_is_a_directory_is_refused(db: Path, suffix: str) -> None:
    open_store(db).close()
    os.mkdir(f"{db}{suffix}")
    with pytest.raises(InsecureModeError, match=r"not a regular file \(a directory\)"):
        open_store(db)
    with pytest.raises(InsecureModeError, match="not a regular file"):
        open_existing(db, read_only=True)


def test_sidecar_that_is_a_symlink_is_refused(db: Path, tmp_path: Path) -> None:
    open_store(db).close()
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    os.chmod(target, 0o600)
    os.symlink(target, f"{db}-wal")
    with pytest.raises(InsecureModeError, match=r"not a regular file \(a symlink\)"):
        open_store(db)
    with pytest.raises(InsecureModeError, match=r"not a regular file \(a symlink\)"):
        open_existing(db)


@pytest.mark.skipif(not IS_ROOT, reason="only root can make a file owned by another user")
def test_files_owned_by_another_user_are_refused(db: Path) -> None:
    writer = open_store(db)
    add_run(writer, "r1")
    try:
        os.chown(f"{db}-shm", NOBODY, NOBODY)
        with pytest.raises(InsecureModeError, match=f"shm file .* owned by uid {NOBODY}"):
            open_existing(db, read_only=True)
    finally:
        writer.close()
    os.chown(db, NOBODY, NOBODY)
    with pytest.raises(InsecureModeError, match=f"database .* owned by uid {NOBODY}"):
        open_store(db)


def test_symlink_is_refused_by_open_existing_and_open_store(db: Path, tmp_path: Path) -> None:
    open_store(db).close()
    link = tmp_path / "link.db"
    os.symlink(db, link)
    with pytest.raises(SymlinkError, match="is a symlink"):
        open_existing(link)
    with pytest.raises(SymlinkError, match="is a symlink"):
        open_existing(link, read_only=True)
    with pytest.raises(SymlinkError, match="is a symlink"):
        open_store(link)
    dangling = tmp_path / "dangling.db"
    os.symlink(tmp_path / "nowhere.db", dangling)
    with pytest.raises(SymlinkError):
        open_store(dangling)
    assert not (tmp_path / "nowhere.db").exists()


def test_open_existing_never_creates(db: Path) -> None:
    with pytest.raises(StoreError, match="no database at"):
        open_existing(db)
    with pytest.raises(StoreError, match="no database at"):
        open_existing(db, read_only=True)
    assert not db.exists()
    with pytest.raises(StoreError, match="memory"):
        open_existing(":memory:")


def test_open_store_in_a_missing_directory_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="directory does not exist"):
        open_store(tmp_path / "missing" / "x.db")


def test_a_file_that_is_not_a_database_is_a_store_error(db: Path) -> None:
    db.write_bytes(b"this is not sqlite" * 100)
    os.chmod(db, 0o600)
    with pytest.raises(StoreError, match="not a database"):
        open_store(db)


@pytest.mark.parametrize("kind", ["trigger", "view"])
def test_trigger_or_view_is_refused_on_every_open(db: Path, kind: str) -> None:
    open_store(db).close()
    conn = raw(db)
    if kind == "trigger":
        conn.execute(
            "CREATE TRIGGER sneaky AFTER UPDATE ON approvals "
            "BEGIN UPDATE approvals SET status = 'approved'; END"
        )
    else:
        conn.execute("CREATE VIEW sneaky AS SELECT id FROM runs")
    conn.close()
    openers: list[Callable[[], Store]] = [
        lambda: open_store(db),
        lambda: open_existing(db),
        lambda: open_existing(db, read_only=True),
    ]
    for opener in openers:
        with pytest.raises(UnsafeSchemaError, match=f"{kind} 'sneaky'"):
            opener()


def test_readable_file_is_tightened_by_a_writer_only(db: Path) -> None:
    open_store(db).close()
    os.chmod(db, 0o644)
    open_existing(db, read_only=True).close()
    assert mode(db) == 0o644
    open_existing(db).close()
    assert mode(db) == 0o600
    os.chmod(db, 0o640)
    open_store(db).close()
    assert mode(db) == 0o600


def test_readable_wal_is_tightened_by_a_writer(db: Path) -> None:
    writer = open_store(db)
    try:
        add_run(writer, "r1")
        os.chmod(f"{db}-wal", 0o644)
        second = open_store(db)
        second.close()
        assert mode(f"{db}-wal") == 0o600
    finally:
        writer.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="O_PATH is Linux's")
@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_tightening_a_file_keeps_the_posix_locks_this_process_holds_on_it(
    db: Path, suffix: str
) -> None:
    # Closing any descriptor of a file drops every POSIX lock the process holds on it:
    # SQLite's, for another connection of this process. Tightening must not close one.
    import fcntl

    writer = open_store(db)
    try:
        add_run(writer, "r1")
        target = f"{db}{suffix}"
        assert os.path.exists(target)
        os.chmod(target, 0o644)
        held = os.open(target, os.O_RDWR)
        try:
            fcntl.lockf(held, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 2**40)  # past SQLite's bytes
            check_all(str(db), tighten=True)
            assert mode(target) == 0o600
            probe = (
                "import fcntl, os, sys\n"
                "fd = os.open(sys.argv[1], os.O_RDWR)\n"
                "try:\n"
                "    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 2**40)\n"
                "except OSError:\n"
                "    print('held')\n"
                "else:\n"
                "    print('free')\n"
            )
            seen = subprocess.run(
                [sys.executable, "-c", probe, target], capture_output=True, text=True, check=True
            )
            assert seen.stdout.strip() == "held"
        finally:
            os.close(held)
    finally:
        writer.close()


def test_a_file_swapped_for_a_symlink_before_it_is_tightened_is_refused_and_its_target_kept(
    tmp_path: Path,
) -> None:
    # What `_tighten` meets when the checked file became a symlink after its lstat.
    from agentrt._store.sqlite._filesafety import _tighten

    target = tmp_path / "elsewhere"
    target.write_text("not ours")
    os.chmod(target, 0o644)
    link = tmp_path / "agentrt.db"
    link.symlink_to(target)
    with pytest.raises(SymlinkError, match="became a symlink while it was being checked"):
        _tighten(str(link))
    assert mode(target) == 0o644


@pytest.mark.parametrize("name", ["a?b.db", "c#d.db", "e%20f.db", "g%.db", "h?i#j%k l.db"])
def test_paths_with_uri_characters_open_the_file_they_name(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    store = open_store(path)
    add_run(store, "r1", goal=name)
    store.close()
    # SQLite removes its -wal and -shm at the last close; the writers' lock file stays (it is
    # never removed: a writer could hold it while another made a new one; decision 0106).
    assert sorted(p.name for p in tmp_path.iterdir()) == [name, name + "-lock"]
    reader = open_existing(str(path), read_only=True)
    try:
        assert reader.get_run("r1").goal == name
        assert reader.path == str(path)
    finally:
        reader.close()


# --- read-only opens ----------------------------------------------------------------------------


def test_read_only_open_beside_a_live_writer(db: Path) -> None:
    writer = open_store(db)
    try:
        add_run(writer, "r1")
        reader = open_existing(db, read_only=True)
        try:
            assert reader.read_only
            assert [r.id for r in reader.list_runs()] == ["r1"]
            add_run(writer, "r2")
            assert [r.id for r in reader.list_runs()] == ["r2", "r1"]
            with pytest.raises(StoreError, match="read-only"), reader.transaction():
                pass
            conn = reader._open_connection()
            try:
                with pytest.raises(sqlite3.OperationalError, match="readonly database"):
                    conn.execute("DELETE FROM runs")
            finally:
                conn.close()
            assert reader.verify_events().intact
        finally:
            reader.close()
        assert writer.count_runs() == 2
    finally:
        writer.close()


def _in_child(work: Callable[[], dict[str, Any]], drop_to: int | None) -> dict[str, Any]:
    """Run `work` in a forked child (as `drop_to` when given) and return what it reports.

    Root ignores directory permissions, so the read-only-directory case is only
    meaningful as another user; the child uses the modules already imported here.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            os.close(read_fd)
            if drop_to is not None:
                os.setgroups([])
                os.setgid(drop_to)
                os.setuid(drop_to)
            out = work()
        except BaseException as e:
            out = {"error": f"{type(e).__name__}: {e}"}
            code = 1
        with os.fdopen(write_fd, "w") as f:
            f.write(json.dumps(out))
        os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        text = f.read()
    os.waitpid(pid, 0)
    result: dict[str, Any] = json.loads(text)
    return result


@pytest.fixture
def user_dir(tmp_path: Path) -> Iterator[tuple[Path, int | None]]:
    """A directory the (possibly dropped) child user owns and may make read-only."""
    if not IS_ROOT:
        directory = tmp_path / "ro"
        directory.mkdir()
        yield directory, None
        os.chmod(directory, 0o700)
        return
    # pytest's temporary tree is private to root; the dropped child needs a path it can reach.
    base = Path(tempfile.mkdtemp(prefix="agentrt-ro-"))
    try:
        os.chmod(base, 0o711)
        directory = base / "ro"
        directory.mkdir()
        os.chown(directory, NOBODY, NOBODY)
        yield directory, NOBODY
    finally:
        shutil.rmtree(base)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork to act as another user")
def test_read_only_open_in_a_read_only_directory(user_dir: tuple[Path, int | None]) -> None:
    directory, drop_to = user_dir
    path = directory / "agentrt.db"

    def work() -> dict[str, Any]:
        store = open_store(path)
        add_run(store, "r1", goal="kept")
        with store.transaction() as tx:
            tx.append_event("r1", "", T0, "run.created", {"goal": "kept"})
        store.close()
        os.chmod(directory, 0o555)
        creatable = os.access(directory, os.W_OK)
        # The case being tested: SQLite alone cannot read a WAL file here (no -shm to create).
        plain = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        try:
            plain.execute("SELECT count(*) FROM sqlite_master")
            plain_reads = True
        except sqlite3.OperationalError:
            plain_reads = False
        finally:
            plain.close()
        reader = open_existing(path, read_only=True)
        try:
            return {
                "creatable": creatable,
                "plain_reads": plain_reads,
                "goal": reader.get_run("r1").goal,
                "events": len(reader.list_events()),
                "intact": reader.verify_events().intact,
                "files": sorted(p.name for p in directory.iterdir()),
            }
        finally:
            reader.close()

    result = _in_child(work, drop_to)
    assert result == {
        "creatable": False,
        "plain_reads": False,
        "goal": "kept",
        "events": 1,
        "intact": True,
        "files": ["agentrt.db", "agentrt.db-lock"],  # the reader made nothing
    }


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork to act as another user")
def test_read_only_open_in_a_read_only_directory_beside_a_live_writer(
    user_dir: tuple[Path, int | None],
) -> None:
    directory, drop_to = user_dir
    path = directory / "agentrt.db"

    def work() -> dict[str, Any]:
        writer = open_store(path)
        add_run(writer, "r1")
        os.chmod(directory, 0o555)
        reader = open_existing(path, read_only=True)
        try:
            before = [r.id for r in reader.list_runs()]
            add_run(writer, "r2")
            after = [r.id for r in reader.list_runs()]
        finally:
            reader.close()
            writer.close()
        return {"creatable": os.access(directory, os.W_OK), "before": before, "after": after}

    result = _in_child(work, drop_to)
    assert result == {"creatable": False, "before": ["r1"], "after": ["r2", "r1"]}


# --- transactions -------------------------------------------------------------------------------


class Boom(Exception):
    pass


def test_transaction_that_raises_leaves_nothing(any_store: Store) -> None:
    store = any_store
    head = store.chain_head()  # (0, "") on SQLite; PostgreSQL's partitions' digest
    with pytest.raises(Boom), store.transaction() as tx:
        tx.execute("INSERT INTO runs (id, status) VALUES ('r1', 'RUNNING')")
        lost = tx.append_event("r1", "", T0, "run.created", {})
        raise Boom
    assert store.count_runs() == 0
    assert store.list_events() == []
    assert store.chain_head() == head
    add_run(store, "r1")
    with store.transaction() as tx:
        seq = tx.append_event("r1", "", T0, "run.created", {})
    # The rolled-back insert consumed no seq: the same run's first event gets it again.
    assert seq == lost


def test_transaction_is_rolled_back_on_base_exceptions_too(any_store: Store) -> None:
    store = any_store
    with pytest.raises(KeyboardInterrupt), store.transaction() as tx:
        tx.execute("INSERT INTO runs (id, status) VALUES ('r1', 'RUNNING')")
        raise KeyboardInterrupt
    assert store.count_runs() == 0


def test_constraint_violation_rolls_back_the_whole_transaction(any_store: Store) -> None:
    store = any_store
    with pytest.raises(StoreError, match=r"(?i)foreign key"), store.transaction() as tx:
        tx.execute("INSERT INTO runs (id, status) VALUES ('r1', 'RUNNING')")
        tx.execute("INSERT INTO steps (id, run_id, idx) VALUES ('s1', 'no-such-run', 0)")
    assert store.count_runs() == 0


def test_tx_is_unusable_after_its_block_and_transactions_do_not_nest(any_store: Store) -> None:
    store = any_store
    with store.transaction() as tx:
        with pytest.raises(StoreError, match="do not nest"), store.transaction():
            pass
        tx.execute("INSERT INTO runs (id, status) VALUES ('r1', 'RUNNING')")
    with pytest.raises(StoreError, match="transaction is over"):
        tx.execute("SELECT 1")
    with pytest.raises(StoreError, match="transaction is over"):
        tx.append_event("r1", "", T0, "x", {})
    assert store.count_runs() == 1


def test_tx_events_lists_the_appended_events_in_order(database: str, any_store: Store) -> None:
    store = any_store
    add_run(store, "r1")
    with store.transaction() as tx:
        seqs = [
            tx.append_event("r1", "", T0, "run.created", {"n": 1}),
            tx.append_event("r1", "s1", T0, "step.started", {"index": 0}),
        ]
        first, second = tx.events
    assert tx.events == [first, second]
    # Consecutive on SQLite (1, 2); on PostgreSQL a run's partition's seqs, N apart.
    assert first.seq < second.seq
    if not on_postgres(database):
        assert (first.seq, second.seq) == (1, 2)
    assert [first.seq, second.seq] == seqs
    assert store.list_events() == [first, second]
    assert second.at == T0
    assert second.payload == {"index": 0}


def test_closed_store_refuses_use(database: str) -> None:
    store = open_store(database)
    store.close()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get_run("r1")
    with pytest.raises(StoreError, match="closed"), store.transaction():
        pass


def test_one_store_serializes_threads(any_store: Store) -> None:
    store = any_store
    add_run(store, "r1")
    per_thread = 25

    def bump() -> None:
        for _ in range(per_thread):
            with store.transaction() as tx:
                (count,) = tx.execute("SELECT step_count FROM runs WHERE id = 'r1'").fetchone()
                time.sleep(0.0005)  # invite an interleaving the lock must prevent
                tx.execute("UPDATE runs SET step_count = ? WHERE id = 'r1'", (count + 1,))
                tx.append_event("r1", "", T0, "bump", {"count": count + 1})

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.get_run("r1").step_count == 4 * per_thread
    report = store.verify_events()
    assert (report.intact, report.checked) == (True, 4 * per_thread)


def test_two_connections_serialize_under_begin_immediate(database: str) -> None:
    """Two stores on one record, each transaction taking the run as the runtime's writes do
    (`lock_run`): SQLite's BEGIN IMMEDIATE holds it, PostgreSQL's lock on the run's row."""
    first = open_store(database)
    second = open_existing(database)
    add_run(first, "r1")
    per_thread = 20
    errors: list[BaseException] = []

    def bump(store: Store) -> None:
        try:
            for _ in range(per_thread):
                with store.transaction() as tx:
                    locked = tx.lock_run("r1")
                    assert locked is not None
                    count = locked.run.step_count
                    time.sleep(0.001)
                    tx.execute("UPDATE runs SET step_count = ? WHERE id = 'r1'", (count + 1,))
                    tx.append_event("r1", "", T0, "bump", {"count": count + 1})
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=bump, args=(s,)) for s in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        assert first.get_run("r1").step_count == 2 * per_thread
        counts = [e.payload["count"] for e in first.list_events()]
        assert counts == list(range(1, 2 * per_thread + 1))
        assert first.verify_events().intact
    finally:
        first.close()
        second.close()


# --- reads --------------------------------------------------------------------------------------


def test_get_run_decodes_every_field(any_store: Store) -> None:
    store = any_store
    limits = Limits(max_steps=9, max_active_time=timedelta(seconds=3), max_total_tokens=100)
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO runs (id, goal, status, reason, reason_detail, limits_json, step_count, "
            "created_at, started_at, finished_at, result_json, model_calls, input_tokens, "
            "output_tokens, cached_input_tokens, estimated_cost_micros, active_ms) "
            "VALUES ('r1', 'g', 'COMPLETED', 'goal_completed', 'done', ?, 3, ?, ?, ?, ?, "
            "2, 10, 20, 5, 1234, 1500)",
            (to_text(limits.to_json()), stamp(0), stamp(1), stamp(2), to_text({"ok": [1, 2]})),
        )
    run = store.get_run("r1")
    assert run.status == RunStatus.COMPLETED
    assert RunStatus(run.status).terminal
    assert (run.reason, run.reason_detail, run.step_count) == ("goal_completed", "done", 3)
    assert run.limits == limits
    assert (run.created_at, run.started_at) == (T0, T0 + timedelta(seconds=1))
    assert run.finished_at == T0 + timedelta(seconds=2)
    assert run.result == {"ok": [1, 2]}
    assert (run.model_calls, run.input_tokens, run.output_tokens) == (2, 10, 20)
    assert (run.cached_input_tokens, run.estimated_cost_micros) == (5, 1234)
    assert run.active_time == timedelta(milliseconds=1500)
    assert run.decode_error == ""
    with pytest.raises(NotFoundError, match="no run 'nope'"):
        store.get_run("nope")


def test_list_runs_newest_first_by_insertion_not_timestamp(any_store: Store) -> None:
    store = any_store
    with store.transaction() as tx:
        for i, run_id in enumerate(["a", "b", "c", "d"]):
            status = "COMPLETED" if run_id in ("b", "d") else "RUNNING"
            # created_at runs backwards: order must follow rowid, never timestamp text.
            tx.execute(
                "INSERT INTO runs (id, status, limits_json, created_at) VALUES (?, ?, '{}', ?)",
                (run_id, status, stamp(100 - i)),
            )
    assert [r.id for r in store.list_runs()] == ["d", "c", "b", "a"]
    assert [r.id for r in store.list_runs(limit=2, offset=1)] == ["c", "b"]
    assert [r.id for r in store.list_runs(status="COMPLETED")] == ["d", "b"]
    assert store.count_runs() == 4
    assert store.count_runs(status=RunStatus.RUNNING) == 2
    with pytest.raises(ValueError, match="offset"):
        store.list_runs(offset=-1)


def _add_step(
    store: Store, step_id: str, run_id: str, idx: int, status: str = "done", **cols: str
) -> None:
    names = ["id", "run_id", "idx", "status", *cols]
    placeholders = ", ".join("?" for _ in names)
    with store.transaction() as tx:
        tx.execute(
            f"INSERT INTO steps ({', '.join(names)}) VALUES ({placeholders})",
            [step_id, run_id, idx, status, *cols.values()],
        )


def test_list_steps_in_index_order_with_decoded_records(any_store: Store) -> None:
    store = any_store
    add_run(store, "r1")
    decision = Decision.tool_call("search", {"q": "x"}, reason="look")
    policy = PolicyDecision.require_approval("remote_mutation", "ask", {"tool": "s"})
    observation = Observation(
        kind="tool_result", content={"hits": 2}, summary="2", content_hash="h"
    )
    _add_step(store, "s2", "r1", 1, status="deciding")
    _add_step(
        store,
        "s1",
        "r1",
        0,
        decision_json=to_text(decision.to_json()),
        policy_json=to_text(policy.to_json()),
        observation_json=to_text(observation.to_json()),
        started_at=stamp(1),
        finished_at=stamp(2),
        spec_hash="abc",
        policy_id="p1",
    )
    steps = store.list_steps("r1")
    assert [(s.id, s.index, s.status) for s in steps] == [("s1", 0, "done"), ("s2", 1, "deciding")]
    first = steps[0]
    assert first.decision == decision
    assert first.policy == policy
    assert first.observation == observation
    assert (first.started_at, first.finished_at) == (
        T0 + timedelta(seconds=1),
        T0 + timedelta(seconds=2),
    )
    assert (first.spec_hash, first.policy_id, first.decode_error) == ("abc", "p1", "")
    assert steps[1].status == StepStatus.DECIDING
    assert (steps[1].decision, steps[1].observation, steps[1].started_at) == (None, None, None)
    assert [s.id for s in store.list_steps("r1", limit=1, offset=1)] == ["s2"]
    assert store.list_steps("other") == []


def test_steps_are_unique_per_run_and_index(any_store: Store) -> None:
    store = any_store
    add_run(store, "r1")
    _add_step(store, "s1", "r1", 0)
    with pytest.raises(StoreError, match=r"(?i)unique"):
        _add_step(store, "s2", "r1", 0)


def _add_approval(store: Store, approval_id: str, run_id: str, status: str, at: int) -> None:
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO approvals (id, run_id, step_id, kind, capability_json, "
            "presentation_json, request_json, hash, status, created_at, expires_at) "
            "VALUES (?, ?, 's1', 'remote_mutation', ?, ?, ?, 'h', ?, ?, ?)",
            (
                approval_id,
                run_id,
                to_text({"tool": "pay"}),
                to_text({"tool": "pay", "args": {"amount": 5}}),
                to_text({"run_id": run_id, "step_id": "s1", "args": {"amount": 5}}),
                status,
                stamp(at),
                stamp(at + 60),
            ),
        )


def test_approvals_in_insertion_order_pending_and_get(any_store: Store) -> None:
    store = any_store
    add_run(store, "r1")
    _add_approval(store, "a2", "r1", "rejected", at=50)
    _add_approval(store, "a1", "r1", "pending", at=10)
    _add_approval(store, "a3", "r1", "pending", at=5)
    assert [a.id for a in store.list_approvals("r1")] == ["a2", "a1", "a3"]
    assert [a.id for a in store.pending_approvals("r1")] == ["a1", "a3"]
    approval = store.get_approval("r1", "a1")
    assert approval.status == ApprovalStatus.PENDING
    assert approval.capability == {"tool": "pay"}
    assert approval.presentation == {"tool": "pay", "args": {"amount": 5}}
    assert approval.request == {"run_id": "r1", "step_id": "s1", "args": {"amount": 5}}
    assert (approval.created_at, approval.expires_at) == (
        T0 + timedelta(seconds=10),
        T0 + timedelta(seconds=70),
    )
    assert (approval.decided_at, approval.decided_by, approval.decode_error) == (None, "", "")
    with pytest.raises(NotFoundError, match="no approval 'a1' in run 'r2'"):
        store.get_approval("r2", "a1")


def test_list_events_filters_by_run_cursor_and_limit(database: str, any_store: Store) -> None:
    store = any_store
    add_run(store, "r1")
    add_run(store, "r2")
    with store.transaction() as tx:
        seqs = [
            tx.append_event("r1" if i % 2 == 0 else "r2", "", T0, f"e{i}", {"i": i})
            for i in range(6)
        ]
    # In seq order: 1 to 6 on SQLite; on PostgreSQL each run's partition issues its own
    # seqs, so the two runs' events interleave by seq, each run's in the order appended.
    if not on_postgres(database):
        assert seqs == [1, 2, 3, 4, 5, 6]
    by_seq = sorted(zip(seqs, (f"e{i}" for i in range(6)), strict=True))
    assert [e.type for e in store.list_events()] == [t for _, t in by_seq]
    r1, r2 = seqs[0::2], seqs[1::2]
    assert r1 == sorted(r1) and r2 == sorted(r2)
    assert [e.seq for e in store.list_events(run_id="r2")] == r2
    assert [e.seq for e in store.list_events(run_id="r1", after_seq=r1[0])] == r1[1:]
    ordered = [q for q, _ in by_seq]
    assert [e.seq for e in store.list_events(after_seq=ordered[1], limit=2)] == ordered[2:4]


def test_list_model_calls(any_store: Store) -> None:
    store = any_store
    add_run(store, "r1")
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO model_calls (id, run_id, step_id, attempt, status, model, "
            "input_tokens, output_tokens, cached_input_tokens, cost_micros, latency_ms, error, "
            "dispatched_at, completed_at) "
            "VALUES ('m1', 'r1', 's1', 1, 'ok', 'claude', 10, 20, 3, 400, 250, '', ?, ?)",
            (stamp(0), stamp(1)),
        )
        tx.execute(
            "INSERT INTO model_calls (id, run_id, step_id, attempt, status, model, dispatched_at)"
            " VALUES ('m2', 'r1', 's1', 2, 'dispatched', 'claude', ?)",
            (stamp(2),),
        )
    calls = store.list_model_calls("r1")
    assert [(c.id, c.attempt, c.status) for c in calls] == [
        ("m1", 1, "ok"),
        ("m2", 2, "dispatched"),
    ]
    assert (calls[0].input_tokens, calls[0].output_tokens, calls[0].cached_input_tokens) == (
        10,
        20,
        3,
    )
    assert (calls[0].cost_micros, calls[0].latency_ms) == (400, 250)
    assert calls[0].completed_at == T0 + timedelta(seconds=1)
    assert calls[1].completed_at is None


def test_lease_reads(any_store: Store) -> None:
    store = any_store
    add_run(store, "r1")
    assert store.lease("r1") == Lease(owner="", expires_at=None, epoch=0, holder={})
    with store.transaction() as tx:
        tx.execute(
            "UPDATE runs SET lease_owner = 'w/abc', lease_expires_at = ?, lease_epoch = 3, "
            "lease_holder = ? WHERE id = 'r1'",
            (stamp(30), to_text({"host": "h", "pid": 42, "start": "99"})),
        )
    lease = store.lease("r1")
    assert lease == Lease(
        owner="w/abc",
        expires_at=T0 + timedelta(seconds=30),
        epoch=3,
        holder={"host": "h", "pid": 42, "start": "99"},
    )
    with pytest.raises(NotFoundError):
        store.lease("nope")


def test_lease_with_an_unreadable_expiry_reads_as_held(any_store: Store, database: str) -> None:
    store = any_store
    add_run(store, "r1")
    execute(
        database,
        "UPDATE runs SET lease_owner = 'w', lease_expires_at = 'soon', lease_holder = '{' "
        "WHERE id = 'r1'",
    )
    lease = store.lease("r1")
    assert lease.expires_at == datetime.max.replace(tzinfo=UTC)
    assert lease.holder == {}


def test_tool_spec_roundtrip(any_store: Store) -> None:
    store = any_store
    spec = ToolSpec(
        name="pay",
        description="Pay.",
        input_schema={"type": "object"},
        side_effect="remote_mutation",
        timeout=timedelta(seconds=5),
    )
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO tool_specs (hash, spec_json) VALUES ('h1', ?)", (to_text(spec.to_json()),)
        )
        tx.execute("INSERT INTO tool_specs (hash, spec_json) VALUES ('bad', '[1')")
    assert store.tool_spec("h1") == spec
    assert store.tool_spec("h2") is None
    with pytest.raises(StoreError, match="tool spec bad does not decode"):
        store.tool_spec("bad")


# --- decode errors ------------------------------------------------------------------------------


def test_tampered_step_row_reads_with_decode_error(any_store: Store, database: str) -> None:
    store = any_store
    add_run(store, "r1")
    _add_step(
        store,
        "s1",
        "r1",
        0,
        policy_json=to_text(PolicyDecision.allow().to_json()),
        finished_at=stamp(3),
    )
    execute(
        database,
        "UPDATE steps SET decision_json = '{\"kind\": ', started_at = 'yesterday' WHERE id = 's1'",
    )
    (step,) = store.list_steps("r1")
    assert step.decision is None
    assert step.started_at is None
    assert step.policy == PolicyDecision.allow()
    assert step.finished_at == T0 + timedelta(seconds=3)
    assert step.decode_error.startswith("decision_json: invalid JSON")
    assert "started_at: not a stored timestamp" in step.decode_error


def test_tampered_run_rows_read_with_decode_error(any_store: Store, database: str) -> None:
    store = any_store
    add_run(store, "r1")
    add_run(store, "r2")
    add_run(store, "r3")
    execute(database, "UPDATE runs SET limits_json = '{\"max_steps\": 0}' WHERE id = 'r1'")
    execute(database, "UPDATE runs SET limits_json = 'nope', status = 'PAUSED' WHERE id = 'r2'")
    execute(database, "UPDATE runs SET limits_json = '', result_json = '[' WHERE id = 'r3'")
    r3, r2, r1 = store.list_runs()
    assert r1.limits == Limits()
    assert r1.decode_error.startswith("limits_json: does not decode: ConfigError")
    assert r2.limits == Limits()
    assert r2.status == "PAUSED"
    assert "status: 'PAUSED' is not a RunStatus" in r2.decode_error
    assert "limits_json: invalid JSON" in r2.decode_error
    assert r3.limits == Limits()
    assert r3.result is None
    assert "limits_json: empty" in r3.decode_error
    assert "result_json: invalid JSON" in r3.decode_error


def test_tampered_approval_and_event_rows_read_with_decode_error(
    any_store: Store, database: str
) -> None:
    store = any_store
    add_run(store, "r1")
    _add_approval(store, "a1", "r1", "pending", at=0)
    with store.transaction() as tx:
        tx.append_event("r1", "", T0, "run.created", {})
    execute(database, "UPDATE approvals SET request_json = '{\"a\":1,\"a\":2}', status = 'maybe'")
    execute(database, "UPDATE events SET payload_json = 'NaN', at = '2026-13-01T00:00:00.000000Z'")
    (approval,) = store.list_approvals("r1")
    assert approval.request is None
    assert approval.capability == {"tool": "pay"}
    assert approval.decode_error.startswith("request_json: invalid JSON")
    assert "status: 'maybe' is not a ApprovalStatus" in approval.decode_error
    assert store.get_approval("r1", "a1").decode_error == approval.decode_error
    (event,) = store.list_events()
    assert (event.payload, event.at, event.type) == (None, None, "run.created")
    assert "payload_json: invalid JSON" in event.decode_error
    assert "at: not a stored timestamp" in event.decode_error


# --- bounded reads ------------------------------------------------------------------------------


def test_page_reads_cap_text_columns_in_sql(store: Store) -> None:
    big = "x" * 200_000
    add_run(store, "r1", goal=big)
    with store.transaction() as tx:
        tx.execute("UPDATE runs SET result_json = ? WHERE id = 'r1'", (to_text(big),))
        tx.append_event("r1", "", T0, "run.created", {"goal": big})
        tx.execute(
            "INSERT INTO steps (id, run_id, idx, status, decision_json) VALUES ('s1', 'r1', 0, "
            "'done', ?)",
            (to_text(Decision.complete(big).to_json()),),
        )
    statements: list[str] = []
    with store.transaction() as tx:
        tx.conn.set_trace_callback(statements.append)
    try:
        (run,) = store.list_runs()
        (event,) = store.list_events()
        (step,) = store.list_steps("r1")
    finally:
        with store.transaction() as tx:
            tx.conn.set_trace_callback(None)
    run_reads = [s for s in statements if "FROM runs" in s]
    assert run_reads and all("ELSE substr(goal, 1, 65536) END AS goal" in s for s in run_reads)
    assert run.goal == big[:TEXT_CAP]
    assert run.result == {"truncated": True, "length": 200_002, "head": '"' + big[: TEXT_CAP - 1]}
    assert run.decode_error == ""
    payload_text = to_text({"goal": big})
    assert event.payload == {
        "truncated": True,
        "length": len(payload_text),
        "head": payload_text[:TEXT_CAP],
    }
    assert step.decision is None
    decision_text = to_text(Decision.complete(big).to_json())
    assert step.decode_error == (
        f"decision_json: holds {len(decision_text)} characters, over this read's cap of 65536"
    )
    # Whole values on request, and single-row reads are whole by default.
    assert store.get_run("r1").goal == big
    assert store.list_steps("r1", cap=None)[0].decision == Decision.complete(big)
    assert store.list_events(cap=None)[0].payload == {"goal": big}


def test_values_at_the_cap_are_not_truncated(any_store: Store) -> None:
    store = any_store
    exact = "y" * TEXT_CAP
    add_run(store, "r1", goal=exact)
    (run,) = store.list_runs()
    assert run.goal == exact
    assert run.decode_error == ""


# --- saturating totals --------------------------------------------------------------------------


def _add(conn: sqlite3.Connection, start: int, charge: int) -> tuple[Any, str]:
    expr = saturating_add_sql("input_tokens", ":p")
    conn.execute("UPDATE runs SET input_tokens = ?", (start,))
    conn.execute(f"UPDATE runs SET input_tokens = {expr}", {"p": clamp_charge(charge)})
    row = conn.execute("SELECT input_tokens, typeof(input_tokens) FROM runs").fetchone()
    return row[0], row[1]


def test_saturating_add_at_the_64_bit_edge(store: Store) -> None:
    add_run(store, "r1")
    with store.transaction() as tx:
        conn = tx.conn
        assert _add(conn, 5, 7) == (12, "integer")
        assert _add(conn, MAX_INT64 - 5, 5) == (MAX_INT64, "integer")
        assert _add(conn, MAX_INT64 - 5, 6) == (MAX_INT64, "integer")
        assert _add(conn, MAX_INT64, MAX_INT64) == (MAX_INT64, "integer")
        assert _add(conn, 0, MAX_INT64) == (MAX_INT64, "integer")
        assert _add(conn, 10, -3) == (10, "integer")
        # What the CASE prevents: a plain sum overflows to a float, which STRICT refuses.
        conn.execute("UPDATE runs SET input_tokens = ?", (MAX_INT64,))
        with pytest.raises(sqlite3.IntegrityError, match="cannot store REAL"):
            conn.execute("UPDATE runs SET input_tokens = input_tokens + 1")


def test_saturating_add_sql_refuses_what_is_not_a_name() -> None:
    assert saturating_add_sql("a", ":b") == (
        "CASE WHEN :b <= 9223372036854775807 - a THEN a + :b ELSE 9223372036854775807 END"
    )
    with pytest.raises(ValueError, match="column"):
        saturating_add_sql("a; DROP TABLE runs", ":b")
    with pytest.raises(ValueError, match="named parameter"):
        saturating_add_sql("a", "?")
    assert (clamp_charge(-1), clamp_charge(3), clamp_charge(2**70)) == (0, 3, MAX_INT64)


# --- the schema ---------------------------------------------------------------------------------

EXPECTED_COLUMNS = {
    "runs": [
        "id",
        "goal",
        "status",
        "reason",
        "reason_detail",
        "limits_json",
        "step_count",
        "created_at",
        "started_at",
        "finished_at",
        "result_json",
        "model_calls",
        "input_tokens",
        "output_tokens",
        "cached_input_tokens",
        "estimated_cost_micros",
        "active_ms",
        "lease_owner",
        "lease_expires_at",
        "lease_epoch",
        "lease_holder",
        "origin",  # migration 2 (docs/decisions/0049)
    ],
    "steps": [
        "id",
        "run_id",
        "idx",
        "status",
        "decision_json",
        "policy_json",
        "observation_json",
        "observation_hash",
        "started_at",
        "finished_at",
        "spec_hash",
        "policy_id",
        "reason_key",  # migration 3 (docs/decisions/0060)
    ],
    "events": ["seq", "run_id", "step_id", "at", "type", "payload_json", "hash"],
    "approvals": [
        "id",
        "run_id",
        "step_id",
        "kind",
        "capability_json",
        "presentation_json",
        "request_json",
        "hash",
        "status",
        "created_at",
        "expires_at",
        "decided_at",
        "decided_by",
        "note",
    ],
    "model_calls": [
        "id",
        "run_id",
        "step_id",
        "attempt",
        "status",
        "model",
        "input_tokens",
        "output_tokens",
        "cached_input_tokens",
        "cost_micros",
        "latency_ms",
        "error",
        "dispatched_at",
        "completed_at",
    ],
    "tool_specs": ["hash", "spec_json"],
    "stored_values": ["hash", "length", "body"],
    "chain_head": ["part", "seq", "hash"],
    "agentrt_meta": ["key", "value"],
    "schema_migrations": ["version", "applied_at"],
}


def test_tables_and_columns_are_exactly_the_documented_ones(store: Store) -> None:
    with store.transaction() as tx:
        tables = {
            r[0]
            for r in tx.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        assert tables == set(EXPECTED_COLUMNS)
        for table, columns in EXPECTED_COLUMNS.items():
            info = tx.execute(f"PRAGMA table_info({table})").fetchall()
            assert [r["name"] for r in info] == columns, table
            for r in info:
                assert r["notnull"] == 1 or r["pk"] == 1, (table, r["name"])
        indexes = {
            r["name"]: [c["name"] for c in tx.execute(f"PRAGMA index_info({r['name']})")]
            for r in tx.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        }
        assert indexes["events_run_seq"] == ["run_id", "seq"]
        assert indexes["approvals_run_created"] == ["run_id", "created_at"]
        assert indexes["model_calls_run"] == ["run_id"]
        assert indexes["steps_run_reason"] == ["run_id", "reason_key", "idx"]
        partial = tx.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'steps_run_reason'"
        ).fetchone()[0]
        assert partial.endswith("WHERE reason_key != ''")
        assert ["run_id", "idx"] in indexes.values()  # UNIQUE(run_id, idx)
        autoincrement = tx.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'events'"
        ).fetchone()[0]
        assert "seq INTEGER PRIMARY KEY AUTOINCREMENT" in autoincrement


def test_defaults_are_explicit(any_store: Store, database: str) -> None:
    store = any_store
    with store.transaction() as tx:
        tx.execute("INSERT INTO runs (id) VALUES ('r1')")
        row = dict(tx.execute("SELECT * FROM runs").fetchone())
    if on_postgres(database):  # its tables' identity column, as SQLite's implicit rowid
        assert row.pop("rowid") == 1
    assert row == {
        name: (
            "r1"
            if name == "id"
            else "driver"  # a row written before origins were recorded was a Driver's
            if name == "origin"
            else 0
            if name in _INTEGER_RUN_COLUMNS
            else ""
        )
        for name in EXPECTED_COLUMNS["runs"]
    }


_INTEGER_RUN_COLUMNS = {
    "step_count",
    "model_calls",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "estimated_cost_micros",
    "active_ms",
    "lease_epoch",
}


def test_consumers_may_keep_their_own_tables(database: str) -> None:
    store = open_store(database)
    with store.transaction() as tx:
        tx.execute("CREATE TABLE app_orders (id TEXT PRIMARY KEY, run_id TEXT)")
        tx.execute("INSERT INTO app_orders VALUES ('o1', 'r1')")
    store.close()
    again = open_existing(database)
    try:
        with again.transaction() as tx:
            assert tx.execute("SELECT count(*) FROM app_orders").fetchone()[0] == 1
    finally:
        again.close()
