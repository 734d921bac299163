"""agentrt's writers to one SQLite file take turns through its `-lock` file (decision 0106).

Each test judges the lock file itself (who holds it, read with a non-blocking
`flock` of a descriptor of the test's own) or a real process's death; none
judges how long anything took.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import StoreBusyError
from agentrt._store.sqlite._renewer import ConnectionRenewer
from agentrt._store.sqlite._writer_turns import WriterTurns

pytestmark = pytest.mark.skipif(os.name != "posix", reason="flock is POSIX")

T0 = datetime(2026, 12, 3, tzinfo=UTC)


def add_run(store: agentrt.Store, run_id: str, *, lease_owner: str = "") -> None:
    """A run row written by hand (the store's own SQL escape hatch), leased to `lease_owner`."""
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO runs (id, goal, status, limits_json, created_at, lease_owner) "
            "VALUES (?, 'goal', 'RUNNING', '{}', '2026-12-03T00:00:00.000000Z', ?)",
            (run_id, lease_owner),
        )


def turn_is_free(path: Path) -> bool:
    """Whether nobody holds the writers' turn on the database at `path` (looked at once)."""
    fd = os.open(f"{path}-lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing the only descriptor of this open file gives a turn taken back
    return True


def a_writer_goes_on_at_once(db: Path) -> None:
    """A new store writes a run, its turn's wait cut to 50 ms: a held turn would fail it."""
    store = agentrt.open_store(db)
    store._turns = WriterTurns(str(db), timeout_s=0.05)
    try:
        add_run(store, "r1")
        assert store.get_run("r1").id == "r1"
    finally:
        store.close()


def python_child(script: str) -> subprocess.Popen[str]:
    """A real Python process running `script` (dedented), its stdin and stdout piped."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_transaction_holds_the_turn_from_its_begin_to_its_commit(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = agentrt.open_store(db)
    try:
        add_run(store, "r1")
        assert turn_is_free(db)
        with store.transaction() as tx:
            assert not turn_is_free(db)
            tx.append_event("r1", "", T0, "run.created", {"goal": "g"})
        assert turn_is_free(db)
        with pytest.raises(RuntimeError), store.transaction():
            raise RuntimeError("rolled back")
        assert turn_is_free(db)  # given back after a rollback too
    finally:
        store.close()


def test_two_stores_of_one_process_take_turns_with_each_other(tmp_path: Path) -> None:
    """Two connections of one process (as the store's and the heartbeat's) each have their
    own open lock file: while one is inside a transaction, the other's turn is taken."""
    db = tmp_path / "runs.db"
    first, second = agentrt.open_store(db), agentrt.open_store(db)
    second._turns = WriterTurns(str(db), timeout_s=0.05)  # the 5 s default, shortened
    try:
        with (
            first.transaction(),
            pytest.raises(StoreBusyError, match="held its turn"),
            second.transaction(),
        ):
            pass
        with second.transaction() as tx:  # once the first committed, the second's turn
            assert not tx.run_exists("r1")
    finally:
        first.close()
        second.close()


def test_a_turn_held_past_the_busy_timeout_is_a_busy_error_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    store = agentrt.open_store(db)
    add_run(store, "r1")
    holder = os.open(f"{db}-lock", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        store._turns = WriterTurns(str(db), timeout_s=0.05)  # the 5 s default, shortened
        with (
            pytest.raises(StoreBusyError, match=r"held its turn at .*runs\.db-lock past the"),
            store.transaction() as tx,
        ):
            tx.append_event("r1", "", T0, "run.created", {})
        assert store.list_events() == []
    finally:
        os.close(holder)
    with store.transaction() as tx:  # the turn is free again: the same write goes through
        tx.append_event("r1", "", T0, "run.created", {})
    assert [e.type for e in store.list_events()] == ["run.created"]
    store.close()


def test_a_writer_killed_inside_its_transaction_gives_its_turn_back(tmp_path: Path) -> None:
    """A real process SIGKILLed with the turn and SQLite's write lock held: the kernel drops
    both, and the next writer goes on at once (no busy timeout waited out)."""
    db = tmp_path / "runs.db"
    agentrt.open_store(db).close()
    child = python_child(
        f"""
        import sys, agentrt
        store = agentrt.open_store({str(db)!r})
        with store.transaction() as tx:
            print("inside", flush=True)
            sys.stdin.read()  # until killed
        """
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "inside\n"
        assert not turn_is_free(db)
        child.send_signal(signal.SIGKILL)
        assert child.wait(60) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
    assert turn_is_free(db)
    a_writer_goes_on_at_once(db)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_takes_turns_of_its_own_not_its_parents(tmp_path: Path) -> None:
    """The child inherits the parent's open lock file; had it locked that one, it would have
    got the turn the parent holds. It opens its own, and finds the turn taken."""
    db = tmp_path / "runs.db"
    turns = WriterTurns(str(db), timeout_s=0.05)
    turns.take()
    try:
        pid = os.fork()
        if pid == 0:  # the child: exit 0 only if refused as busy
            code = 1
            try:
                turns.take()
            except StoreBusyError:
                code = 0
            except BaseException:
                code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert not turn_is_free(db)  # the child's exit gave nothing of the parent's back
    finally:
        turns.give()
        turns.close()
    assert turn_is_free(db)


def test_the_heartbeat_renews_in_its_own_turn(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = agentrt.open_store(db)
    try:
        add_run(store, "r1", lease_owner="me")
        renewer = store.renewer(lambda: datetime.now(UTC))
        assert isinstance(renewer, ConnectionRenewer)
        renewer._turns = WriterTurns(str(db), timeout_s=0.05)
        holder = os.open(f"{db}-lock", os.O_RDWR)
        fcntl.flock(holder, fcntl.LOCK_EX)
        try:
            with pytest.raises(StoreBusyError):
                renewer.renew("r1", "me", timedelta(seconds=30))
        finally:
            os.close(holder)
        assert renewer.renew("r1", "me", timedelta(seconds=30)) is True
        assert turn_is_free(db)
        renewer.close()
    finally:
        store.close()


def test_a_refused_nested_transaction_leaves_the_outer_one_its_turn(tmp_path: Path) -> None:
    """Transactions do not nest (`StoreError`); the refused inner one had taken the turn the
    outer holds (the same open file) and gave it back on its way out, so the outer one went
    on without it. It now leaves the turn alone."""
    db = tmp_path / "runs.db"
    store = agentrt.open_store(db)
    try:
        add_run(store, "r1")
        with store.transaction() as tx:
            with pytest.raises(agentrt.StoreError, match="do not nest"), store.transaction():
                pass
            assert not turn_is_free(db)  # still the outer transaction's
            tx.append_event("r1", "", T0, "run.created", {"goal": "g"})
        assert turn_is_free(db)
        assert [e.type for e in store.list_events()] == ["run.created"]
    finally:
        store.close()


def test_a_group_commit_holds_the_turn_from_its_begin_to_its_commit(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = agentrt.open_store(db)
    seen: list[bool] = []
    try:
        add_run(store, "r1")

        def work(tx: Any) -> None:
            seen.append(turn_is_free(db))
            tx.append_event("r1", "", T0, "run.created", {"goal": "g"})

        store.transactions([work, work])
        assert seen == [False, False]
        assert turn_is_free(db)
        assert [e.type for e in store.list_events()] == ["run.created", "run.created"]
    finally:
        store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_writer_killed_in_its_transaction_gives_its_turn_back_beside_a_forked_child(
    tmp_path: Path,
) -> None:
    """A writer that forked a child (`multiprocessing`'s default start on Linux) after its
    first write is SIGKILLed inside a transaction while the child lives on. The child had
    inherited the writer's open lock file, and the kernel drops a `flock` only with the last
    descriptor of that open file: the dead writer's turn stayed held for the child's life,
    every other writer refused as busy. The child now closes what it inherited."""
    db = tmp_path / "runs.db"
    agentrt.open_store(db).close()
    writer = python_child(
        f"""
        import os, sys, time, agentrt
        store = agentrt.open_store({str(db)!r})
        with store.transaction() as tx:  # the lock file is opened
            pass
        ready, told = os.pipe()
        child = os.fork()
        if child == 0:  # past its fork hooks once it runs this
            os.write(told, b"!")
            time.sleep(120)  # lives on; killed by the test
            os._exit(0)
        os.read(ready, 1)  # the child is under way
        with store.transaction() as tx:
            print(child, flush=True)
            sys.stdin.read()  # until killed
        """
    )
    child = 0
    try:
        assert writer.stdout is not None
        child = int(writer.stdout.readline())
        assert not turn_is_free(db)
        writer.send_signal(signal.SIGKILL)
        assert writer.wait(60) == -signal.SIGKILL
        assert turn_is_free(db)
        a_writer_goes_on_at_once(db)
    finally:
        if writer.poll() is None:
            writer.kill()
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)


def test_the_heartbeat_waits_for_the_turn_of_its_own_stores_open_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heartbeat's connection takes turns with its own store's (each its own open lock
    file): inside the store's transaction, the renewal is refused as busy, nothing renewed;
    after it, the renewal goes through. (The test above swaps the renewer's turns for one of
    its own, so it could not see the two share one.)"""
    from agentrt._store.sqlite import _connection

    db = tmp_path / "runs.db"
    store = agentrt.open_store(db)
    try:
        add_run(store, "r1", lease_owner="me")
        monkeypatch.setattr(_connection, "BUSY_TIMEOUT_MS", 50)  # the 5 s default, shortened
        renewer = store.renewer(lambda: T0 + timedelta(days=1))
        assert isinstance(renewer, ConnectionRenewer)
        with store.transaction(), pytest.raises(StoreBusyError, match="held its turn"):
            renewer.renew("r1", "me", timedelta(seconds=30))
        assert store.lease("r1").expires_at is None or store.lease("r1").expires_at < T0
        assert renewer.renew("r1", "me", timedelta(seconds=30)) is True
        assert store.lease("r1").expires_at == T0 + timedelta(days=1, seconds=30)
        renewer.close()
    finally:
        store.close()


def test_a_lock_file_made_a_hard_link_after_the_open_is_not_used_nor_chmodded(
    tmp_path: Path,
) -> None:
    """The lock file is opened at the first write, after the open checked the sidecars. Made
    in between a second name of another file (a hard link), it was used and `fchmod`ed to
    0600, which changed that other file's mode. Now it is passed over: no turns, the write
    goes on under SQLite's own lock, the other file left as it was."""
    db = tmp_path / "runs.db"
    store = agentrt.open_store(db)
    try:
        other = tmp_path / "shared.txt"
        other.write_text("read by others")
        other.chmod(0o644)
        os.link(other, f"{db}-lock")
        add_run(store, "r1")
        assert store.get_run("r1").id == "r1"
        assert other.stat().st_mode & 0o777 == 0o644
    finally:
        store.close()


# --- one busy timeout in all (decision 0109) ---------------------------------------------------


class Holder:
    """The turn on the database at `db`, held by a descriptor of the test's own."""

    def __init__(self, db: Path) -> None:
        self.fd: int | None = os.open(f"{db}-lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class HeldTurn(Holder):
    """A `Holder`, and a clock whose sleeps advance it and give the turn back once
    `held_for` has passed."""

    def __init__(self, db: Path, held_for: float) -> None:
        super().__init__(db)
        self.now = 100.0
        self.release_at = self.now + held_for

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.now >= self.release_at:
            self.release()


def busy_timeout(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA busy_timeout").fetchone()[0])


def connection(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 5000")
    return conn


@pytest.mark.parametrize("held_for", [0.0002, 0.5, 3.0, 4.9995])
def test_a_turn_waited_for_leaves_sqlite_only_the_rest_of_the_busy_timeout(
    tmp_path: Path, held_for: float
) -> None:
    """The turn's wait and SQLite's busy handler after it wait one busy timeout in all:
    the connection about to begin keeps what the turn's wait left, until the turn is
    given back."""
    db = tmp_path / "runs.db"
    conn = connection(db)
    held = HeldTurn(db, held_for)
    turns = WriterTurns(str(db), timeout_s=5.0, clock=held.clock, sleep=held.sleep)
    try:
        start = held.now
        turns.take(conn)
        waited_ms = (held.now - start) * 1000
        assert held_for * 1000 <= waited_ms < held_for * 1000 + 1.1  # one pause past it
        assert not turn_is_free(db)
        left = busy_timeout(conn)
        assert 5000 - waited_ms - 1 < left <= 5000 - waited_ms
        turns.give()
        assert busy_timeout(conn) == 5000
        assert turn_is_free(db)
    finally:
        held.release()
        turns.close()
        conn.close()


def test_a_turn_free_at_the_first_look_runs_no_statement_and_keeps_the_timeout(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    conn = connection(db)
    held = HeldTurn(db, 0.0)
    held.release()
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    turns = WriterTurns(str(db), timeout_s=5.0, clock=held.clock, sleep=held.sleep)
    try:
        turns.take(conn)
        turns.give()
        assert statements == []
        assert busy_timeout(conn) == 5000
    finally:
        turns.close()
        conn.close()


def test_a_turn_held_to_the_end_of_the_busy_timeout_is_busy_and_the_timeout_is_kept(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    conn = connection(db)
    held = HeldTurn(db, 60.0)
    turns = WriterTurns(str(db), timeout_s=5.0, clock=held.clock, sleep=held.sleep)
    try:
        with pytest.raises(StoreBusyError, match="past the busy timeout"):
            turns.take(conn)
        assert 5.0 <= held.now - 100.0 < 5.0011
        assert busy_timeout(conn) == 5000
        turns.give()  # nothing held, nothing shortened: nothing to give back
        assert busy_timeout(conn) == 5000
    finally:
        held.release()
        turns.close()
        conn.close()


def test_a_connection_closed_inside_its_turn_still_gives_the_turn_back(tmp_path: Path) -> None:
    """The heartbeat closes its connection on a failed renewal before giving its turn back:
    the busy timeout cannot be put back on a closed connection, and the turn is freed."""
    db = tmp_path / "runs.db"
    conn = connection(db)
    held = HeldTurn(db, 1.0)
    turns = WriterTurns(str(db), timeout_s=5.0, clock=held.clock, sleep=held.sleep)
    try:
        turns.take(conn)
        assert busy_timeout(conn) < 4001
        conn.close()
        turns.give()
        assert turn_is_free(db)
    finally:
        held.release()
        turns.close()


def test_a_transaction_begins_with_what_its_turns_wait_left_of_the_busy_timeout(
    tmp_path: Path,
) -> None:
    """Through the store: its connection's busy timeout is cut to what the turn's wait left
    just before `BEGIN IMMEDIATE`, and put back after `COMMIT`."""
    db = tmp_path / "runs.db"
    store = agentrt.open_store(db)
    held = HeldTurn(db, 2.0)
    try:
        store._turns = WriterTurns(str(db), timeout_s=5.0, clock=held.clock, sleep=held.sleep)
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)
        add_run(store, "r1")
        store._conn.set_trace_callback(None)
        shortened = statements.index("PRAGMA busy_timeout = 2999")
        begin, commit = statements.index("BEGIN IMMEDIATE"), statements.index("COMMIT")
        assert shortened < begin < commit < statements.index("PRAGMA busy_timeout = 5000")
        assert busy_timeout(store._conn) == 5000
        assert store.get_run("r1").id == "r1"
    finally:
        held.release()
        store.close()


def test_the_heartbeat_renews_with_what_its_turns_wait_left_of_the_busy_timeout(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    store = agentrt.open_store(db)
    try:
        add_run(store, "r1", lease_owner="me")
        renewer = store.renewer(lambda: T0 + timedelta(days=1))
        assert isinstance(renewer, ConnectionRenewer)
        assert renewer.renew("r1", "me", timedelta(seconds=30)) is True  # opens its connection
        assert renewer._conn is not None
        conn = renewer._conn
        held = HeldTurn(db, 4.0)
        renewer._turns = WriterTurns(str(db), timeout_s=5.0, clock=held.clock, sleep=held.sleep)
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        try:
            assert renewer.renew("r1", "me", timedelta(seconds=60)) is True
        finally:
            held.release()
        conn.set_trace_callback(None)
        shortened = statements.index("PRAGMA busy_timeout = 999")
        begin, commit = statements.index("BEGIN IMMEDIATE"), statements.index("COMMIT")
        assert shortened < begin < commit < statements.index("PRAGMA busy_timeout = 5000")
        assert busy_timeout(conn) == 5000
        renewer.close()
    finally:
        store.close()


# --- a taken turn waited for in the kernel (decision 0117) --------------------------------------


def wait_until(condition: Any, what: str, limit_s: float = 30.0) -> None:
    """Look at `condition` until it holds; fail naming `what` if it never does (a bound
    against hanging, never a judgement of how long anything took)."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.001)


@contextlib.contextmanager
def a_given_up_wait(db: Path) -> Iterator[tuple[Holder, WriterTurns]]:
    """Turns whose take gave up at a 50 ms busy timeout while the test's `Holder` holds the
    turn: their wait is still in flock. Released and closed on the way out."""
    holder = Holder(db)
    turns = WriterTurns(str(db), timeout_s=0.05)
    try:
        with pytest.raises(StoreBusyError, match="past the busy timeout"):
            turns.take()
        yield holder, turns
    finally:
        holder.release()
        turns.close()


def take_in_thread(turns: WriterTurns) -> tuple[threading.Thread, list[BaseException | None]]:
    """`turns.take()` on a thread of its own; the list gets None once taken, or the error."""
    outcome: list[BaseException | None] = []

    def take() -> None:
        try:
            turns.take()
        except BaseException as e:
            outcome.append(e)
        else:
            outcome.append(None)

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    return thread, outcome


def waiting_in_the_kernel(turns: WriterTurns) -> bool:
    waiter = turns._waiter
    return waiter is not None and waiter.pending


def test_a_writer_waiting_for_a_taken_turn_gets_it_once_it_is_given_back(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    holder = Holder(db)
    turns = WriterTurns(str(db), timeout_s=60.0)
    try:
        thread, outcome = take_in_thread(turns)
        wait_until(lambda: waiting_in_the_kernel(turns), "the writer waits in flock")
        assert outcome == []  # still waiting: the turn is the holder's
        holder.release()
        thread.join(30)
        assert outcome == [None]
        assert not turn_is_free(db)  # the writer holds it now
        assert not waiting_in_the_kernel(turns)
        turns.give()
        assert turn_is_free(db)
    finally:
        holder.release()
        turns.close()


def test_a_wait_given_up_at_the_busy_timeout_gives_the_turn_straight_back_once_through(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    with a_given_up_wait(db) as (holder, turns):
        assert waiting_in_the_kernel(turns)  # its thread is still in flock
        holder.release()
        wait_until(lambda: not waiting_in_the_kernel(turns), "the wait got through")
        assert turn_is_free(db)  # nobody waited for it any more: given straight back
        turns.take()  # and the next take finds it free at once
        assert not turn_is_free(db)
        turns.give()
    assert turn_is_free(db)


def test_a_take_while_a_given_up_wait_is_still_in_flock_is_given_the_turn_by_that_wait(
    tmp_path: Path,
) -> None:
    """A lock taken beside the wait still in flock would be given back by it once through:
    the next take waits through it instead, and keeps what it is given."""
    db = tmp_path / "runs.db"
    with a_given_up_wait(db) as (holder, turns):
        turns._timeout_s = 60.0
        thread, outcome = take_in_thread(turns)
        holder.release()
        thread.join(30)
        assert outcome == [None]
        wait_until(lambda: not waiting_in_the_kernel(turns), "the wait got through")
        assert not turn_is_free(db)  # the wait handed it over rather than giving it back
        turns.give()
        assert turn_is_free(db)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_its_parent_waits_in_the_kernel_closes_that_waits_descriptor(
    tmp_path: Path,
) -> None:
    """Kept open in a child, the waiting thread's descriptor would hold a turn the parent's
    wait takes after the parent died: every writer busy for the child's life."""
    db = tmp_path / "runs.db"
    with a_given_up_wait(db) as (_, turns):
        waiter = turns._waiter
        assert waiter is not None and waiter.pending
        pid = os.fork()
        if pid == 0:  # the child: exit 0 only if the wait's descriptor is closed
            code = 1
            try:
                os.fstat(waiter.fd)
            except OSError:
                code = 0
            except BaseException:
                code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        os.fstat(waiter.fd)  # the parent's is open: its thread is in flock with it
    wait_until(lambda: turn_is_free(db), "the turn is free")


def test_turns_closed_while_their_wait_is_in_flock_end_its_thread_once_through(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    with a_given_up_wait(db) as (holder, turns):
        waiter = turns._waiter
        assert waiter is not None
        turns.close()
        assert waiter._thread.is_alive()  # in flock until the holder gives the turn back
        holder.release()
        waiter._thread.join(30)
        assert not waiter._thread.is_alive()
        with pytest.raises(OSError):
            os.fstat(waiter.fd)  # closed by its thread on the way out
    assert turn_is_free(db)


class GatedFlock:
    """The module's `fcntl`, except that a blocking `flock` (the waiting thread's) waits for
    `gate` before it goes to the kernel: the test decides when that wait gets through."""

    LOCK_EX, LOCK_NB, LOCK_UN = fcntl.LOCK_EX, fcntl.LOCK_NB, fcntl.LOCK_UN

    def __init__(self) -> None:
        self.gate = threading.Event()

    def flock(self, fd: int, operation: int) -> None:
        if operation == fcntl.LOCK_EX:
            self.gate.wait(30)
        fcntl.flock(fd, operation)


def test_a_turn_free_while_a_given_up_wait_is_not_yet_in_flock_is_still_waited_for_through_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder gives the turn back before the given-up wait reaches flock: a take that
    locked the free file beside that wait would have its turn given back by the wait once
    through, the writer believing it still held it. It waits through the wait instead."""
    from agentrt._store.sqlite import _writer_turns

    gated = GatedFlock()
    monkeypatch.setattr(_writer_turns, "fcntl", gated)
    db = tmp_path / "runs.db"
    holder = Holder(db)
    turns = WriterTurns(str(db), timeout_s=0.05)
    try:
        with pytest.raises(StoreBusyError):
            turns.take()
        waiter = turns._waiter
        assert waiter is not None and waiter.pending  # held at the gate, not yet in flock
        holder.release()
        assert turn_is_free(db)
        turns._timeout_s = 60.0
        thread, outcome = take_in_thread(turns)
        wait_until(lambda: waiter._wanted or outcome != [], "the take waits or returned")
        gated.gate.set()
        thread.join(30)
        assert outcome == [None]
        wait_until(lambda: not waiting_in_the_kernel(turns), "the wait got through")
        assert not turn_is_free(db)  # the writer holds its turn: not given back under it
        turns.give()
        assert turn_is_free(db)
    finally:
        gated.gate.set()
        holder.release()
        turns.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_the_waits_condition_was_held_drops_its_turns_without_hanging(
    tmp_path: Path,
) -> None:
    """The parent's waiting thread (or a writer) may hold the wait's condition at the fork,
    and nothing in the child ever gives it back: the child dropping the turns (or exiting,
    `weakref.finalize`'s atexit) must not wait for it."""
    import gc

    db = tmp_path / "runs.db"
    holder = Holder(db)
    turns: WriterTurns | None = WriterTurns(str(db), timeout_s=0.05)
    assert turns is not None
    try:
        with pytest.raises(StoreBusyError):
            turns.take()
        waiter = turns._waiter
        assert waiter is not None
        with waiter._cv:  # as the parent's waiting thread holds it a moment at a time
            pid = os.fork()
            if pid == 0:  # the child: drops the turns, which stops their wait (finalize)
                try:
                    turns = None
                    gc.collect()
                finally:
                    os._exit(0)
        exited: list[int] = []

        def child_exited() -> bool:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                exited.append(os.waitstatus_to_exitcode(status))
            return bool(done)

        try:
            wait_until(child_exited, "the child exits")
        finally:
            if not exited:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        assert exited == [0]
    finally:
        holder.release()
        if turns is not None:
            turns.close()
    wait_until(lambda: turn_is_free(db), "the turn is free")


class GatedGiveBack:
    """The module's `fcntl`, except that the waiting thread's giving back (`LOCK_UN`) waits
    for `gate`, saying in `reached` that it got there and in `done` that it gave it back."""

    LOCK_EX, LOCK_NB, LOCK_UN = fcntl.LOCK_EX, fcntl.LOCK_NB, fcntl.LOCK_UN

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.reached = threading.Event()
        self.done = threading.Event()

    def flock(self, fd: int, operation: int) -> None:
        if operation == fcntl.LOCK_UN and threading.current_thread().name == "agentrt-writer-turn":
            self.reached.set()
            self.gate.wait(30)
            fcntl.flock(fd, operation)
            self.done.set()
            return
        fcntl.flock(fd, operation)


def in_function(thread: threading.Thread, name: str) -> bool:
    """Whether `thread` is (somewhere down its stack) in a function called `name`."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code.co_name == name:
            return True
        frame = frame.f_back
    return False


def test_a_take_while_a_given_up_wait_gives_the_turn_back_waits_until_it_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait through flock with nobody waiting for it gives the lock back: a take that
    found it through before it had would lock the file beside it and lose its turn to that
    giving back. The giving back is under the wait's condition, before it says it is through."""
    from agentrt._store.sqlite import _writer_turns

    gated = GatedGiveBack()
    monkeypatch.setattr(_writer_turns, "fcntl", gated)
    db = tmp_path / "runs.db"
    holder = Holder(db)
    turns = WriterTurns(str(db), timeout_s=0.05)
    try:
        with pytest.raises(StoreBusyError):
            turns.take()
        holder.release()
        assert gated.reached.wait(30)  # through flock, giving the lock back
        turns._timeout_s = 60.0
        thread, outcome = take_in_thread(turns)
        wait_until(
            lambda: outcome != [] or in_function(thread, "pending"),
            "the take returned or asks whether the wait is through",
        )
        gated.gate.set()
        thread.join(30)
        assert outcome == [None]
        assert gated.done.wait(30)  # the wait gave its lock back
        wait_until(lambda: not waiting_in_the_kernel(turns), "the wait got through")
        assert not turn_is_free(db)  # the writer holds its turn: not given back under it
        turns.give()
        assert turn_is_free(db)
    finally:
        gated.gate.set()
        holder.release()
        turns.close()


def test_closing_turns_held_through_their_wait_frees_the_turn_before_the_wait_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait's own descriptor keeps the open file (and the turn) until its thread ends:
    `close` gives the turn back itself rather than leaving it to that thread."""
    db = tmp_path / "runs.db"
    holder = Holder(db)
    turns = WriterTurns(str(db), timeout_s=60.0)
    try:
        thread, outcome = take_in_thread(turns)
        wait_until(lambda: waiting_in_the_kernel(turns), "the writer waits in flock")
        holder.release()
        thread.join(30)
        assert outcome == [None]
        waiter = turns._waiter
        assert waiter is not None
        stop_wait = waiter.close
        monkeypatch.setattr(waiter, "close", lambda: None)  # its thread left running
        turns.close()
        assert waiter._thread.is_alive()  # its descriptor still open
        assert turn_is_free(db)
        stop_wait()
        waiter._thread.join(30)
        assert not waiter._thread.is_alive()
    finally:
        holder.release()
        turns.close()


def test_turns_that_wait_again_after_a_close_keep_no_earlier_wait_alive(tmp_path: Path) -> None:
    """The renewer closes its turns on an error and takes them again later: one finalizer,
    for the wait of now, so the waits of before are let go."""
    db = tmp_path / "runs.db"
    turns = WriterTurns(str(db), timeout_s=0.05)
    holder = Holder(db)
    try:
        with pytest.raises(StoreBusyError):
            turns.take()
        first = turns._waiter
        assert first is not None
        turns.close()
        holder.release()
        first._thread.join(30)
        assert not first._thread.is_alive()
        gone = weakref.ref(first)
        del first
        holder = Holder(db)
        with pytest.raises(StoreBusyError):
            turns.take()  # a new wait, on the file opened again
        assert turns._waiter is not None
        gc.collect()
        assert gone() is None
    finally:
        holder.release()
        turns.close()


class BrokenBlockingFlock:
    """The module's `fcntl`, except that a blocking `flock` (the waiting thread's) raises
    what no `flock` should: the thread ends on it."""

    LOCK_EX, LOCK_NB, LOCK_UN = fcntl.LOCK_EX, fcntl.LOCK_NB, fcntl.LOCK_UN

    def flock(self, fd: int, operation: int) -> None:
        if operation == fcntl.LOCK_EX:
            raise RuntimeError("not what flock raises")
        fcntl.flock(fd, operation)


def test_a_wait_whose_thread_ends_unexpectedly_tells_its_writer_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its writer is not left waiting out a busy timeout for a thread that is gone: the
    turns are given up (SQLite's own busy handler alone from then on, as where `flock`
    fails), and the writer goes on to its transaction."""
    from agentrt._store.sqlite import _writer_turns

    monkeypatch.setattr(_writer_turns, "fcntl", BrokenBlockingFlock())
    ended: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: ended.append(args.exc_value))
    db = tmp_path / "runs.db"
    holder = Holder(db)
    turns = WriterTurns(str(db), timeout_s=600.0)
    try:
        thread, outcome = take_in_thread(turns)
        thread.join(30)
        assert not thread.is_alive()  # told at once, not after 600 s
        assert outcome == [None]
        assert turns._unavailable  # turns given up
        # The waiting thread tells its writer before its error reaches `excepthook`: that
        # is waited for (a loaded machine ran the check before the thread got there).
        waiting_until = time.monotonic() + 30
        while not ended and time.monotonic() < waiting_until:
            time.sleep(0.01)
        assert [type(e) for e in ended] == [RuntimeError]
    finally:
        holder.release()
        turns.close()
