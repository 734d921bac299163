"""The lease's renewal and its proof of a dead holder, pinned by the mutation campaign.

A `:memory:` store has one connection, so its heartbeat renews through the
store's own transactions (`StoreRenewer`) rather than a connection of its own.
No other test reached that path: every mutant of it lived.

Proving a same-host holder dead (`prove_dead`, the /proc facts it reads, the
host id) was exercised only by the recovery tests' crashing children, which run
the unmutated code; the tests below pin it in process (docs/mutation.md).
They name no live process but this one and its own children: a mutant may turn
`os.kill(pid, 0)` into a real signal, and must never send it to anyone else's.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt._lease
from agentrt._errors import RunStateError
from agentrt._lease import (
    Heartbeat,
    _process_state,
    _read_first_line,
    _stat_fields,
    boot_id,
    holder_json,
    host_id,
    pid_namespace,
    process_start_time,
    prove_dead,
)
from agentrt._store import Store, open_store
from agentrt._store.sqlite._filesafety import FileIdentity
from agentrt._store.sqlite._renewer import ConnectionRenewer, StoreRenewer
from agentrt._store.sqlite._writer_turns import WriterTurns
from support.leases import take_in

EXPIRES = "2026-11-30T09:00:00.000000Z"
RENEWED = "2026-11-30T09:05:00.000000Z"
AT_EXPIRY = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
"""The wall clock the renewers below renew on: a ttl of TO_RENEWED renews to RENEWED."""
TO_RENEWED = timedelta(minutes=5)
TO_EXPIRES = timedelta(0)


def at_expiry() -> datetime:
    return AT_EXPIRY


@pytest.fixture
def memory() -> Iterator[Store]:
    store = open_store(":memory:")
    with store.transaction() as tx:
        for run_id in ("r1", "r2"):
            tx.execute(
                "INSERT INTO runs (id, status, limits_json, lease_owner, lease_expires_at) "
                "VALUES (?, 'RUNNING', '{}', 'me', ?)",
                (run_id, EXPIRES),
            )
    yield store
    store.close()


def expiries(store: Store) -> dict[str, str]:
    with store.transaction() as tx:
        return dict(tx.execute("SELECT id, lease_expires_at FROM runs ORDER BY id").fetchall())


def test_an_in_memory_store_renews_through_its_own_connection(memory: Store) -> None:
    renewer = memory.renewer(at_expiry)
    assert isinstance(renewer, StoreRenewer)
    assert renewer.renew("r1", "me", TO_RENEWED) is True
    assert expiries(memory) == {"r1": RENEWED, "r2": EXPIRES}  # only that run's lease
    renewer.close()
    assert renewer.renew("r1", "me", TO_EXPIRES) is True  # closing closes nothing of the store's


def test_an_in_memory_renewal_for_another_owner_or_run_reports_the_lease_lost(
    memory: Store,
) -> None:
    renewer = memory.renewer(at_expiry)
    assert renewer.renew("r1", "someone-else", TO_RENEWED) is False
    assert renewer.renew("no-such-run", "me", TO_RENEWED) is False
    assert expiries(memory) == {"r1": EXPIRES, "r2": EXPIRES}


def test_a_heartbeat_on_an_in_memory_store_renews_until_another_owner_takes_the_run(
    memory: Store,
) -> None:
    wall = datetime(2026, 11, 30, 9, 1, tzinfo=UTC)
    beat = Heartbeat(memory.renewer(lambda: wall), "r1", "me", timedelta(milliseconds=90))
    beat.start()
    try:
        deadline = time.monotonic() + 10
        while beat.renewals < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert beat.renewals >= 1
        assert expiries(memory)["r1"] == "2026-11-30T09:01:00.090000Z"
        with memory.transaction() as tx:
            tx.execute("UPDATE runs SET lease_owner = 'thief' WHERE id = 'r1'")
        assert beat.lost.wait(10)
    finally:
        beat.stop()


# Proving a same-host holder dead, in process: the recovery tests' crashing
# children run the unmutated code, so these pin `prove_dead` and the facts it
# reads (/proc/PID/stat, the host id, the boot id, the pid namespace) here.


def never_a_pid() -> int:
    """A pid no process can have: pids are below the kernel's pid_max."""
    with open("/proc/sys/kernel/pid_max", encoding="ascii") as f:
        return int(f.read())


def this_host(pid: int, start: str) -> dict[str, Any]:
    return {
        "host": host_id(),
        "boot": boot_id(),
        "pidns": pid_namespace(),
        "pid": pid,
        "start": start,
    }


def test_this_live_process_with_its_recorded_start_time_is_not_proved_dead() -> None:
    assert prove_dead(holder_json()) is None
    assert prove_dead(json.dumps(this_host(os.getpid(), process_start_time(os.getpid())))) is None


def test_a_holder_whose_process_has_exited_and_been_reaped_is_proved_dead() -> None:
    child = subprocess.Popen(["sleep", "30"])
    start = process_start_time(child.pid)
    assert start.isdigit()
    child.kill()
    child.wait()
    assert prove_dead(json.dumps(this_host(child.pid, start))) == {
        "host": host_id(),
        "pid": child.pid,
        "start": start,
        "proof": "no such process",
    }


def test_a_holder_whose_pid_no_process_can_have_is_proved_dead() -> None:
    assert prove_dead(json.dumps(this_host(never_a_pid(), "12345"))) == {
        "host": host_id(),
        "pid": never_a_pid(),
        "start": "12345",
        "proof": "no such process",
    }


def test_a_pid_now_used_by_a_process_with_another_start_time_is_proved_reused() -> None:
    assert prove_dead(json.dumps(this_host(os.getpid(), "1"))) == {
        "host": host_id(),
        "pid": os.getpid(),
        "start": "1",
        "proof": "pid reused by a process with another start time",
    }


def test_a_holder_that_exited_but_was_not_reaped_is_proved_dead_as_a_zombie() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        start = process_start_time(child.pid)
        child.kill()
        # Wait for it to exit without reaping it: it stays a zombie.
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        assert _process_state(child.pid) == "Z"
        assert prove_dead(json.dumps(this_host(child.pid, start))) == {
            "host": host_id(),
            "pid": child.pid,
            "start": start,
            "proof": "the process has exited (zombie)",
        }
    finally:
        child.kill()
        child.wait()


def test_a_holder_on_another_host_is_never_proved_dead() -> None:
    holder = this_host(never_a_pid(), "12345")
    assert prove_dead(json.dumps(holder)) is not None  # the control: only the host differs
    assert prove_dead(json.dumps({**holder, "host": "another-host"})) is None
    assert prove_dead(json.dumps({**holder, "host": ""})) is None


@pytest.mark.parametrize(
    "change",
    [
        {"pid": None},
        {"pid": str(never_a_pid())},
        {"pid": True},
        {"pid": 0},
        {"pid": -1},
        {"pid": float(never_a_pid())},
        {"start": None},
        {"start": ""},
        {"start": 12345},
        {"boot": None},
        {"boot": ""},
        {"boot": "another-boot"},
        {"pidns": None},
        {"pidns": ""},
        {"pidns": "pid:[1]"},
        {"host": None},
    ],
)
def test_a_holder_field_missing_or_malformed_is_never_proof_of_death(
    change: dict[str, Any],
) -> None:
    holder = this_host(never_a_pid(), "12345")
    assert prove_dead(json.dumps(holder)) is not None  # the control: dead but for the change
    changed = {k: v for k, v in {**holder, **change}.items() if v is not None}
    assert prove_dead(json.dumps(changed)) is None


@pytest.mark.parametrize(
    "text", ["", "not json", "{", "[]", "null", '"text"', "42", "{}", '{"pid": 1}']
)
def test_a_holder_record_that_is_not_a_json_object_of_the_fields_proves_nothing(
    text: str,
) -> None:
    assert prove_dead(text) is None


@pytest.fixture
def odd_comm() -> Iterator[str]:
    """This process's command name set to one with spaces, parentheses and a non-ASCII byte."""
    with open("/proc/self/comm", encoding="utf-8") as f:
        before = f.read().rstrip("\n")
    name = "a) (b ) é"
    with open("/proc/self/comm", "w", encoding="utf-8") as f:
        f.write(name)
    try:
        yield name
    finally:
        with open("/proc/self/comm", "w", encoding="utf-8") as f:
            f.write(before)


def test_stat_fields_split_after_the_last_parenthesis_of_an_odd_command_name(
    odd_comm: str,
) -> None:
    with open(f"/proc/{os.getpid()}/stat", "rb") as f:
        raw = f.read()
    assert f"({odd_comm})".encode() in raw  # the kernel really holds the odd name
    fields = _stat_fields(os.getpid())
    assert fields[0] == "R"  # field 3, the state: this process is running while it reads
    assert fields[1] == str(os.getppid())  # field 4, the parent's pid
    assert fields[2] == str(os.getpgrp())  # field 5, the process group
    assert len(fields) == len(raw.rsplit(b")", 1)[1].split())
    assert process_start_time(os.getpid()) == fields[19] != ""
    assert _process_state(os.getpid()) == "R"


def test_the_start_time_is_the_twenty_second_stat_field_and_tells_processes_apart() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        with open(f"/proc/{child.pid}/stat", encoding="ascii") as f:
            fields = f.read().split()
        assert fields[1] == "(sleep)"  # a plain name: the fields split on spaces alone
        assert process_start_time(child.pid) == fields[21]
        assert int(process_start_time(child.pid)) >= int(process_start_time(os.getpid()))
    finally:
        child.kill()
        child.wait()


def test_a_pid_with_no_process_has_no_stat_fields_state_or_start_time() -> None:
    assert _stat_fields(never_a_pid()) == []
    assert _process_state(never_a_pid()) == ""
    assert process_start_time(never_a_pid()) == ""


@pytest.fixture
def id_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """host_id's two machine-id files redirected to files under tmp_path."""
    files = {
        "/etc/machine-id": tmp_path / "etc-machine-id",
        "/var/lib/dbus/machine-id": tmp_path / "dbus-machine-id",
    }
    real_open = open

    def redirected(path: str, *args: Any, **kwargs: Any) -> Any:
        return real_open(files.get(path, path), *args, **kwargs)

    monkeypatch.setattr(agentrt._lease, "open", redirected, raising=False)
    monkeypatch.setattr(socket, "gethostname", lambda: "the-hostname")
    return files


def test_the_host_id_is_the_machine_id_stripped(id_files: dict[str, Path]) -> None:
    id_files["/etc/machine-id"].write_text("  0123abcd\n", encoding="ascii")
    id_files["/var/lib/dbus/machine-id"].write_text("dbus-id\n", encoding="ascii")
    assert host_id() == "0123abcd"
    assert host_id() == host_id()


def test_the_host_id_falls_back_to_dbus_when_the_machine_id_is_missing_or_blank(
    id_files: dict[str, Path],
) -> None:
    id_files["/var/lib/dbus/machine-id"].write_text("dbus-id\n", encoding="ascii")
    assert host_id() == "dbus-id"
    id_files["/etc/machine-id"].write_text(" \n", encoding="ascii")
    assert host_id() == "dbus-id"


def test_the_host_id_falls_back_to_the_hostname_when_no_machine_id_is_readable(
    id_files: dict[str, Path],
) -> None:
    assert host_id() == "the-hostname"
    id_files["/etc/machine-id"].write_text("\n", encoding="ascii")
    id_files["/var/lib/dbus/machine-id"].write_text("", encoding="ascii")
    assert host_id() == "the-hostname"


def test_the_host_id_of_this_machine_is_its_machine_id() -> None:
    with open("/etc/machine-id", encoding="ascii") as f:
        assert host_id() == f.read().strip() != ""


def test_the_holder_record_is_compact_sorted_json_of_this_process() -> None:
    pid = os.getpid()
    assert re.fullmatch(r"pid:\[\d+\]", pid_namespace())
    assert re.fullmatch(r"[0-9a-f-]{36}", boot_id())
    assert holder_json() == (
        f'{{"boot":"{boot_id()}","host":"{host_id()}","pid":{pid},'
        f'"pidns":"{pid_namespace()}","start":"{process_start_time(pid)}"}}'
    )


def test_a_connection_renewer_reopens_after_close_and_survives_a_failing_close(
    tmp_path: Path,
) -> None:
    store = open_store(str(tmp_path / "runs.db"))
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO runs (id, status, limits_json, lease_owner, lease_expires_at) "
            "VALUES ('r1', 'RUNNING', '{}', 'me', ?)",
            (EXPIRES,),
        )
    opened: list[sqlite3.Connection] = []

    def connect() -> sqlite3.Connection:
        opened.append(store._open_connection())
        return opened[-1]

    path = str(tmp_path / "runs.db")
    renewer = ConnectionRenewer(connect, at_expiry, WriterTurns(path, 5.0), FileIdentity(path))
    try:
        assert renewer.renew("r1", "me", TO_RENEWED) is True
        renewer.close()
        with pytest.raises(sqlite3.ProgrammingError):
            opened[0].execute("SELECT 1")  # close closed it
        assert renewer.renew("r1", "me", TO_EXPIRES) is True
        assert len(opened) == 2  # a new connection after close
        renewer.close()
        renewer.close()  # closing twice is harmless

        class FailingClose(sqlite3.Connection):
            def close(self) -> None:
                raise sqlite3.OperationalError("cannot close")

        failing = ConnectionRenewer(
            lambda: sqlite3.connect(str(tmp_path / "runs.db"), factory=FailingClose),
            at_expiry,
            WriterTurns(path, 5.0),
            FileIdentity(path),
        )
        assert failing.renew("r1", "me", TO_RENEWED) is True
        failing.close()  # the error is swallowed: closing never raises
        assert failing._conn is None
    finally:
        store.close()
    assert expiries_of(tmp_path / "runs.db") == {"r1": RENEWED}


def expiries_of(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(str(path))
    try:
        return dict(conn.execute("SELECT id, lease_expires_at FROM runs").fetchall())
    finally:
        conn.close()


def test_a_first_line_is_read_as_ascii_with_other_bytes_replaced(tmp_path: Path) -> None:
    path = tmp_path / "boot_id"
    path.write_bytes("b\u00e9ad\nsecond line\n".encode())
    assert _read_first_line(str(path)) == "b\ufffd\ufffdad"
    assert _read_first_line(str(tmp_path / "missing")) == ""


def test_a_machine_id_with_bytes_that_are_not_ascii_still_gives_a_host_id(
    id_files: dict[str, Path],
) -> None:
    # A corrupt machine id must not make every lease (every run start) raise.
    id_files["/etc/machine-id"].write_bytes("\u00e90123\n".encode())
    assert host_id() == "\ufffd\ufffd0123"  # read as ASCII: each byte not ASCII replaced


def test_the_start_time_needs_all_twenty_fields_up_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    fields = [str(n) for n in range(3, 23)]  # stat fields 3 to 22: 20 of them
    monkeypatch.setattr(agentrt._lease, "_stat_fields", lambda pid: fields)
    assert process_start_time(42) == "22"
    monkeypatch.setattr(agentrt._lease, "_stat_fields", lambda pid: fields[:19])
    assert process_start_time(42) == ""


def test_an_unreadable_pid_namespace_is_empty_and_so_never_matches_a_holder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    holder = this_host(never_a_pid(), "12345")

    def unreadable(path: str) -> str:
        raise PermissionError(path)

    monkeypatch.setattr(os, "readlink", unreadable)
    assert pid_namespace() == ""
    assert prove_dead(json.dumps({**holder, "pidns": ""})) is None


def test_a_takeover_wins_only_against_the_exact_lease_it_judged_expired(memory: Store) -> None:
    wall = datetime(2026, 11, 30, 9, 1, tzinfo=UTC)
    ttl = timedelta(seconds=30)

    def take(previous_owner: str | None, previous_expires_at: str | None) -> int:
        with memory.transaction() as tx:
            return take_in(
                tx,
                "r1",
                "new",
                ttl,
                lambda: wall,
                from_status="RUNNING",
                previous_owner=previous_owner,
                previous_expires_at=previous_expires_at,
            )

    def lease() -> tuple[Any, ...]:
        with memory.transaction() as tx:
            row = tx.execute(
                "SELECT lease_owner, lease_expires_at, lease_epoch, lease_holder "
                "FROM runs WHERE id = 'r1'"
            ).fetchone()
            return tuple(row)

    before = lease()
    refused = "^run r1 was taken by another resume or changed status; nothing was executed$"
    for owner, expires in (("someone-else", EXPIRES), ("me", RENEWED), ("me", None)):
        with pytest.raises(RunStateError, match=refused):
            take(owner, expires)
        assert lease() == before  # the lease renewed or taken meanwhile: nothing changes
    epoch = take("me", EXPIRES)
    assert lease() == ("new", "2026-11-30T09:01:30.000000Z", epoch, holder_json())
    assert epoch == before[2] + 1
    assert take(None, None) == epoch + 1  # no previous lease named: from_status alone


def test_the_heartbeat_thread_is_a_daemon_named_after_the_run(memory: Store) -> None:
    beat = Heartbeat(memory.renewer(at_expiry), "0123456789", "me", timedelta(seconds=30))
    beat.start()
    try:
        (thread,) = [t for t in threading.enumerate() if t.name == "agentrt-heartbeat-01234567"]
        assert thread.daemon is True  # a heartbeat never keeps the interpreter alive at exit
    finally:
        beat.stop()
    assert not thread.is_alive()


class _FlakyRenewer:
    """Fails its first `failures` renewals (a busy database), then renews."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts = 0
        self.closed = False

    def renew(self, run_id: str, owner: str, ttl: timedelta) -> bool:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise RuntimeError("database is locked")
        return True

    def close(self) -> None:
        self.closed = True


def test_a_renewal_that_raises_is_retried_at_the_next_tick_and_the_lease_is_not_lost() -> None:
    renewer = _FlakyRenewer(failures=2)
    beat = Heartbeat(renewer, "r1", "me", timedelta(milliseconds=60))  # type: ignore[arg-type]
    beat.start()
    try:
        deadline = time.monotonic() + 10
        while beat.renewals < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        beat.stop()
    assert renewer.attempts >= 3 and beat.renewals >= 1
    assert not beat.lost.is_set()
    assert renewer.closed


def test_a_streak_of_failed_renewals_is_logged_once_with_its_cause_and_its_end_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An operator sees why a lease may lapse: the first renewal of a streak that fails is
    logged (a warning naming the run and the cause), the rest of the streak is not (a busy
    database would fill the log), and the first renewal that holds again is logged once."""
    renewer = _FlakyRenewer(failures=3)
    beat = Heartbeat(renewer, "r1", "me", timedelta(milliseconds=60))  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="agentrt"):
        beat.start()
        try:
            deadline = time.monotonic() + 10
            while beat.renewals < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            beat.stop()
    assert beat.renewals >= 3
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "agentrt"]
    assert said == [
        (
            "WARNING",
            "renewing the lease on run r1 failed: database is locked; "
            "tried again at each beat until it holds or lapses",
        ),
        ("INFO", "the lease on run r1 was renewed again after 3 failed renewals"),
    ]


class _HeldRenewer:
    """Renews `held` times, then reports the lease lost; records when each renewal came."""

    def __init__(self, held: int) -> None:
        self.held = held
        self.calls: list[float] = []
        self.closed = False

    def renew(self, run_id: str, owner: str, ttl: timedelta) -> bool:
        self.calls.append(time.monotonic())
        return len(self.calls) <= self.held

    def close(self) -> None:
        self.closed = True


class _HangingRenewer:
    """A renewal that blocks (a write stuck on the disk) until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def renew(self, run_id: str, owner: str, ttl: timedelta) -> bool:
        self.entered.set()
        self.release.wait()
        return True

    def close(self) -> None:
        pass


def test_the_heartbeat_counts_each_renewal_that_held_and_stops_when_the_lease_is_lost() -> None:
    renewer = _HeldRenewer(held=3)
    beat = Heartbeat(renewer, "r1", "me", timedelta(milliseconds=30))
    beat.start()
    try:
        assert beat.lost.wait(10)
        beat._thread.join(10)
    finally:
        beat.stop()
    assert len(renewer.calls) == 4  # three held, the fourth found the lease gone
    assert beat.renewals == 3
    assert renewer.closed


def test_the_heartbeat_first_renews_a_third_of_the_lease_after_it_starts() -> None:
    renewer = _HeldRenewer(held=1)
    beat = Heartbeat(renewer, "r1", "me", timedelta(milliseconds=2400))
    started = time.monotonic()
    beat.start()
    try:
        assert beat.lost.wait(20)
    finally:
        beat.stop()
    first, second = renewer.calls
    assert first - started >= 0.8  # a third of 2.4 s: not sooner, however loaded the machine
    assert second - first >= 0.8


def test_stopping_a_heartbeat_that_never_started_returns_without_joining() -> None:
    beat = Heartbeat(_HeldRenewer(held=1), "r1", "me", timedelta(seconds=30))
    beat.stop()  # nothing to wait for: joining a thread never started would raise
    beat.stop(wait=False)
    assert not beat._thread.is_alive()


def test_stop_without_waiting_returns_while_a_renewal_is_still_in_flight() -> None:
    renewer = _HangingRenewer()
    beat = Heartbeat(renewer, "r1", "me", timedelta(milliseconds=30))
    beat.start()
    assert renewer.entered.wait(10)
    # Should stop() wait after all, this ends the renewal before stop()'s own five-second
    # bound, so a waiting stop() returns with the renewal over and the test sees it.
    watchdog = threading.Timer(4, renewer.release.set)
    watchdog.start()
    try:
        beat.stop(wait=False)  # what a session does on the event loop: must not block
        assert not renewer.release.is_set() and beat._thread.is_alive()
    finally:
        renewer.release.set()
        watchdog.cancel()
        beat._thread.join(10)


def test_stop_gives_up_waiting_for_a_renewal_that_hangs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agentrt._lease, "STOP_WAIT_S", 0.5)  # five seconds in the library
    renewer = _HangingRenewer()
    beat = Heartbeat(renewer, "r1", "me", timedelta(milliseconds=30))
    beat.start()
    assert renewer.entered.wait(10)
    watchdog = threading.Timer(15, renewer.release.set)
    watchdog.start()
    try:
        started = time.monotonic()
        beat.stop()  # waits a bounded time (`STOP_WAIT_S`), not for ever
        assert time.monotonic() - started >= 0.5
        assert not renewer.release.is_set() and beat._thread.is_alive()
    finally:
        renewer.release.set()
        watchdog.cancel()
        beat._thread.join(10)


def test_the_heartbeats_look_runs_on_its_thread_before_each_renewal_and_may_stop_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`on_beat` (a session's look at its kept tool tasks, decision 0206) is called on the
    heartbeat's thread before each renewal; one that raises is logged and the renewal made;
    one that stops the heartbeat (a lease given back) ends the beat with nothing renewed."""
    renewer = _HeldRenewer(held=100)
    seen: list[tuple[bool, int]] = []

    def look() -> None:
        seen.append((threading.current_thread() is beat._thread, len(renewer.calls)))
        if len(seen) == 2:
            raise RuntimeError("a look that failed")
        if len(seen) == 3:
            beat.stop(wait=False)

    beat = Heartbeat(renewer, "r1", "me", timedelta(milliseconds=30), on_beat=look)
    with caplog.at_level(logging.WARNING, logger="agentrt"):
        beat.start()
        beat._thread.join(10)
    assert not beat._thread.is_alive()
    assert seen == [(True, 0), (True, 1), (True, 2)]
    assert len(renewer.calls) == 2, "the heartbeat renewed a lease its look had given back"
    assert renewer.closed
    assert [r.getMessage() for r in caplog.records if r.name == "agentrt"] == [
        "a heartbeat's look at run r1's kept tools failed"
    ]


def test_once_the_lease_is_lost_the_heartbeat_renews_nothing_but_its_look_goes_on() -> None:
    """A heartbeat with a look (`on_beat`, a session's at its kept tool tasks) that finds its
    lease lost renews nothing more and closes its renewer, but goes on looking at each beat
    until it is stopped: a kept task whose loop is closed after the loss is still found
    (decision 0207). Without a look it stops at the loss, as before."""
    renewer = _HeldRenewer(held=1)
    after_the_loss = threading.Semaphore(0)

    def look() -> None:
        if beat.lost.is_set():
            after_the_loss.release()

    beat = Heartbeat(renewer, "r1", "me", timedelta(milliseconds=30), on_beat=look)
    beat.start()
    try:
        assert beat.lost.wait(10)
        for _ in range(3):  # three looks after the loss
            assert after_the_loss.acquire(timeout=10)
        assert beat._thread.is_alive()
        assert len(renewer.calls) == 2, "the heartbeat renewed a lease it had lost"
        assert renewer.closed
    finally:
        beat.stop()
    beat._thread.join(10)
    assert not beat._thread.is_alive()
    assert len(renewer.calls) == 2
