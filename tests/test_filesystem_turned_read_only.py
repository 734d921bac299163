"""The filesystem holding an open SQLite store turns read-only under it.

ext4 mounted `errors=remount-ro` does that on its first error: every write from then on
fails (`EROFS`), to files already open too. The tests make it happen for real: an ext4 of
their own on a loop device (`support.disks.ext4`), turned read-only by its kernel's
`trigger_fs_error` while a run is mid-way, then repaired (`e2fsck`) and mounted
read-write again, as an operator does. (An operator's `mount -o remount,ro` cannot do it
to a live writer: Linux refuses to remount read-only a filesystem with a file open for
writing, which the first test pins on a tmpfs.)

What is asserted: the commit that meets the read-only filesystem is refused with an agentrt
`StoreError` naming the file and saying its filesystem is read-only (never acknowledged,
never SQLite's bare words, never a hang); the store refuses further use; readers (the
API's read-only open, `agentrt runs` and `show`) read the record meanwhile; the heartbeat
neither crashes nor spins and its lease is left to expire; repaired and reopened, the record
holds exactly what was acknowledged, its chain intact, and the run is resumed as after a
crash.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect, StoreError, ToolCall, ToolResult
from agentrt.scripted import ScriptedAgent
from conftest import EPOCH, FakeClock, Ids, RecordingTool
from support import disks
from support.disks import Ext4, ext4
from support.gates import make_gate, open_step
from test_cli import agentrt_cmd, clean_env

RUN = "a" + "0" * 30 + "1"  # the first id of Ids("a")


def _A_DAY_AHEAD() -> datetime:
    return datetime.now(UTC) + timedelta(days=1)


def _turning(store: agentrt.Store, tool: RecordingTool, **kw: Any) -> agentrt.Driver:
    """A Driver whose one step calls `tool` (the one that turns the filesystem read-only),
    then completes; its lease judged a day ahead, so it outlives the test whatever the
    machine's load."""
    return agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("turn", {}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids("a"),
        wall=_A_DAY_AHEAD,
        **kw,
    )


def _events(store: agentrt.Store, run_id: str) -> list[tuple[int, str, str]]:
    return [(e.seq, e.type, e.hash) for e in store.list_events(run_id)]


def _read_only_commit_refused(db: Path) -> str:
    return (
        f"commit failed: the filesystem holding {db} is read-only (it was remounted "
        "read-only under the open store, as ext4 mounted errors=remount-ro does after an "
        "error), so the transaction could not be made durable; whether it is in the file "
        "is unknown until the database is reopened. The store refuses further use: reopen "
        "it once the filesystem is read-write again (meanwhile it can be read: "
        "open_existing(path, read_only=True), or the agentrt commands that only read: runs, "
        "show, events, verify)"
    )


def test_linux_refuses_to_remount_read_only_a_filesystem_an_open_store_writes(
    small_disk: Path,
) -> None:
    """The operator's `mount -o remount,ro` cannot turn a store's filesystem read-only under
    it: the kernel refuses (EBUSY) while a file is open for writing, and the store goes on."""
    db = small_disk / "agentrt.db"
    with agentrt.open_store(db) as store:
        make_gate(store).begin_sync("first")
        done = subprocess.run(
            ["mount", "-o", "remount,ro", str(small_disk)], capture_output=True, text=True
        )
        assert done.returncode == 32 and "busy" in done.stderr, done
        make_gate(store, ids=Ids("b")).begin_sync("second")
        assert sorted(r.goal for r in store.list_runs()) == ["first", "second"]


def _readers_read(db: Path, run_id: str, events: list[tuple[int, str, str]]) -> None:
    """While the filesystem is read-only: the API's read-only open, `agentrt runs` and
    `agentrt show` read the record as acknowledged."""
    with agentrt.open_existing(db, read_only=True) as reader:
        assert _events(reader, run_id) == events
        assert reader.get_run(run_id).status is agentrt.RunStatus.RUNNING
        assert reader.verify_events().intact
    runs = agentrt_cmd("--db", str(db), "runs", env=clean_env())
    assert (runs.returncode, runs.stderr) == (0, ""), runs
    _, row, footer = runs.stdout.splitlines()
    assert row.split()[:4] == [run_id, "RUNNING", "held", "driver"]
    assert footer == "runs 1-1 of 1, newest first"
    show = agentrt_cmd("--db", str(db), "show", run_id, env=clean_env())
    assert (show.returncode, show.stderr) == (0, ""), show
    lines = show.stdout.splitlines()
    assert lines[0].split() == ["run", run_id]
    assert lines[2].split() == ["status", "RUNNING"]
    assert lines[-1].split() == ["0", "executing", "turn", "{}", "allow", "-"]


def test_a_runs_commit_on_a_filesystem_turned_read_only_is_refused_and_nothing_acknowledged_is_lost(
    ext4_disk: Ext4,
) -> None:
    db = ext4_disk.mount / "agentrt.db"
    store = agentrt.open_store(db)
    seen: dict[str, Any] = {}

    def turn(call: ToolCall) -> ToolResult:
        with agentrt.open_existing(db, read_only=True) as reader:
            seen["acknowledged"] = _events(reader, RUN)
        ext4_disk.turn_read_only()
        return ToolResult({"done": True})

    tool = RecordingTool("turn", SideEffect.READ_ONLY, result=turn)
    driver = _turning(store, tool)
    with pytest.raises(StoreError) as refused:
        driver.start_sync("meets a read-only filesystem")
    assert type(refused.value) is StoreError
    assert str(refused.value) == _read_only_commit_refused(db)
    assert refused.value.commit_unknown is True
    assert len(tool.calls) == 1
    acknowledged = seen["acknowledged"]
    assert [t for _, t, _ in acknowledged] == [
        "run.created",
        "run.started",
        "step.started",
        "step.decided",
        "step.policy",
        "step.tool_started",
    ]
    # The store refuses further use, saying why.
    with pytest.raises(StoreError, match="the store stopped") as again:
        store.list_runs()
    assert str(db) in str(again.value) and "read-only" in str(again.value)
    _readers_read(db, RUN, acknowledged)
    store.close()

    ext4_disk.repair()
    with agentrt.open_store(db) as reopened:
        assert _events(reopened, RUN) == acknowledged
        assert reopened.verify_events().intact
        assert reopened.get_run(RUN).status is agentrt.RunStatus.RUNNING
        # Resumed as after a crash, by a driver whose lease clock is past the dead lease.
        resumed = agentrt.Driver(
            store=reopened,
            agent=ScriptedAgent([Decision.complete()]),
            policy=agentrt.default_policy(),
            tools=[tool],
            now=FakeClock(EPOCH + timedelta(hours=1)),
            new_id=Ids("b"),
            wall=lambda: datetime.now(UTC) + timedelta(days=2),
        ).resume_sync(RUN)
        assert resumed.status is agentrt.RunStatus.COMPLETED
        assert reopened.verify_events().intact
        after = _events(reopened, RUN)
        assert after[: len(acknowledged)] == acknowledged
        # The step in flight is interrupted (its read-only call is not run again) and the
        # run goes on, as after a crash.
        assert [t for _, t, _ in after[len(acknowledged) :]] == [
            "lease.taken_over",
            "step.interrupted",
            "run.resumed",
            "step.started",
            "step.decided",
            "run.finished",
        ]
        assert len(tool.calls) == 1


def test_a_heartbeat_on_a_filesystem_turned_read_only_retries_each_beat_and_its_lease_expires(
    ext4_disk: Ext4,
) -> None:
    """The heartbeat's renewal fails at every beat once the filesystem is read-only: each
    failure a `StoreError` naming the file, retried at the next beat (a third of the lease
    later, never sooner: no spin), the process unharmed. The lease is not said lost (no
    write could record anything anyway; the loop's next commit says why); it is not renewed
    in the record either, so it expires at its last renewal, and a resume takes the run
    over after that."""
    db = ext4_disk.mount / "agentrt.db"
    store = agentrt.open_store(db)
    ttl = timedelta(milliseconds=300)
    sessions: list[Any] = []
    attempts: list[tuple[float, object]] = []  # (when it began, what it returned or raised)
    changed = threading.Condition()
    # Held by a renewal from its start to its end, and by the test while it turns the
    # filesystem read-only: every renewal is wholly before or wholly after the turn, however
    # slow the machine (a beat that fell between a count and the turn renewed for real).
    between = threading.Lock()
    seen: dict[str, Any] = {}

    def probe(point: str, session: Any) -> None:
        if not sessions:
            sessions.append(session)

    def counted(renew: Callable[..., bool]) -> Callable[..., bool]:
        def renew_counted(*args: Any) -> bool:
            with between:
                if "turned at" in seen and "renewals" not in seen:
                    # On the heartbeat's thread, before its first renewal after the turn:
                    # every renewal before it is counted by now.
                    seen["renewals"] = sessions[0].heartbeat.renewals
                began = time.monotonic()
                outcome: object = None
                try:
                    outcome = renew(*args)
                    return bool(outcome)
                except BaseException as e:
                    outcome = e
                    raise
                finally:
                    with changed:
                        attempts.append((began, outcome))
                        changed.notify_all()

        return renew_counted

    def turn(call: ToolCall) -> ToolResult:
        heartbeat = sessions[0].heartbeat
        heartbeat._renewer.renew = counted(heartbeat._renewer.renew)
        with changed:
            assert changed.wait_for(lambda: any(o is True for _, o in attempts), 60)
        with between:  # no renewal under way
            ext4_disk.turn_read_only()
            seen["turned at"] = _A_DAY_AHEAD()  # after the last renewal's wall reading
            with changed:
                first = len(attempts)
        with changed:
            assert changed.wait_for(lambda: len(attempts) >= first + 3, 60)
            seen["after"] = attempts[first:]
        seen["lost"] = heartbeat.lost.is_set()
        # Read after the third failed renewal: its beat counts nothing, and the next
        # renewal, if one has begun, waits for nothing of this thread's.
        seen["renewals since"] = heartbeat.renewals - seen["renewals"]
        seen["alive"] = heartbeat._thread.is_alive()
        return ToolResult({"done": True})

    tool = RecordingTool("turn", SideEffect.READ_ONLY, result=turn)
    driver = _turning(store, tool, lease_ttl=ttl, probe=probe)
    with pytest.raises(StoreError) as refused:
        driver.start_sync("its heartbeat meets a read-only filesystem")
    assert str(refused.value) == _read_only_commit_refused(db)
    heartbeat = sessions[0].heartbeat
    heartbeat._thread.join(timeout=30)
    assert not heartbeat._thread.is_alive()  # ended with its loop
    after = seen.pop("after")
    said = (
        f"renewing the lease on run {RUN} failed: the filesystem holding {db} is read-only "
        "(it was remounted read-only under the open store, as ext4 mounted errors=remount-ro "
        "does after an error), so the renewal could not be written; the lease expires at "
        "its last renewal unless the filesystem is read-write again by then"
    )
    assert [(type(o), str(o)) for _, o in after] == [(StoreError, said)] * len(after)
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(after)]
    assert all(gap >= ttl.total_seconds() / 3 - 0.005 for gap in gaps), gaps
    assert seen.pop("lost") is False
    assert seen.pop("renewals since") == 0
    assert seen.pop("alive") is True
    store.close()

    ext4_disk.repair()
    with agentrt.open_store(db) as reopened:
        lease = reopened.lease(RUN)
        assert lease.owner != "" and lease.expires_at <= seen["turned at"] + ttl
        assert reopened.verify_events().intact
        resumed = agentrt.Driver(
            store=reopened,
            agent=ScriptedAgent([Decision.complete()]),
            policy=agentrt.default_policy(),
            tools=[tool],
            now=FakeClock(EPOCH + timedelta(hours=1)),
            new_id=Ids("b"),
            wall=lambda: lease.expires_at + timedelta(milliseconds=1),
        ).resume_sync(RUN)
        assert resumed.status is agentrt.RunStatus.COMPLETED


def test_a_gate_steps_commit_on_a_filesystem_turned_read_only_is_refused_the_same_way(
    ext4_disk: Ext4,
) -> None:
    db = ext4_disk.mount / "agentrt.db"
    store = agentrt.open_store(db)
    tool = RecordingTool("look", SideEffect.READ_ONLY, result={"seen": True})
    # Its heartbeat never beats within the test: a renewal before the turn would leave the
    # renewer's connection open on the disk (the session is never closed), and `repair()`'s
    # unmount would find it busy on a machine slow enough to take a third of the lease.
    gate = make_gate(store, tool, wall=_A_DAY_AHEAD, lease_ttl=timedelta(hours=1))
    session, step = open_step(gate, "a gate meets a read-only filesystem")
    run_id = session.run_id
    acknowledged = _events(store, run_id)
    ext4_disk.turn_read_only()
    # A proposal writes nothing of its own (the step's events go with its execute's commit).
    verdict = step.propose_sync(Decision.tool_call("look", {}))
    assert verdict.outcome is agentrt.VerdictOutcome.ALLOWED
    with pytest.raises(StoreError) as refused:
        step.execute_sync()
    assert type(refused.value) is StoreError
    assert str(refused.value) == _read_only_commit_refused(db)
    assert refused.value.commit_unknown is True
    assert tool.calls == []
    with agentrt.open_existing(db, read_only=True) as reader:
        assert _events(reader, run_id) == acknowledged
    store.close()

    ext4_disk.repair()
    with agentrt.open_store(db) as reopened:
        assert _events(reopened, run_id) == acknowledged
        assert reopened.verify_events().intact
        again = make_gate(
            reopened, tool, ids=Ids("b"), wall=lambda: datetime.now(UTC) + timedelta(days=2)
        )
        resumed, _ = again.attach_sync(run_id)
        step = resumed.step_sync()
        assert step is not None
        verdict = step.propose_sync(Decision.tool_call("look", {}))
        assert verdict.outcome is agentrt.VerdictOutcome.ALLOWED
        observed = step.execute_sync()
        assert (observed.kind, observed.content) == ("tool_result", {"seen": True})
        assert len(tool.calls) == 1
        after = _events(reopened, run_id)
        assert after[: len(acknowledged)] == acknowledged
        # Nothing of the refused step: it is taken over and claimed again from the start.
        assert [t for _, t, _ in after[len(acknowledged) :]] == [
            "lease.taken_over",
            "run.resumed",
            "step.started",
            "step.decided",
            "step.policy",
            "step.tool_started",
            "step.tool_finished",
        ]
        assert reopened.verify_events().intact


class _Refused(Exception):
    pass


def _refuse(said: str) -> None:
    raise _Refused(said)


def test_an_ext4_is_refused_before_anything_is_made_where_a_command_it_needs_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without `e2fsck` (which `repair()` runs mid-test) the disk is refused in one line
    before anything is made, not failed half-way through a test."""
    path = tmp_path / "bin"
    path.mkdir()
    for tool in disks.EXT4_TOOLS:
        found = shutil.which(tool)
        if found is not None and tool != "e2fsck":
            (path / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(path))
    with pytest.raises(_Refused) as refused, ext4(tmp_path, "16M", _refuse):
        pass
    assert "e2fsck" in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "ext4.img").exists()


def test_an_ext4_the_kernel_cannot_turn_read_only_is_refused_and_left_unmounted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the kernel has no `trigger_fs_error` for the disk (an older kernel, a read-only
    /sys), it is refused before the test begins, and nothing stays mounted."""
    if os.geteuid() != 0:
        disks._cannot_make_ext4("mounting a loop device needs root")
    monkeypatch.setattr(disks, "EXT4_SYSFS", tmp_path / "no-sysfs")
    with pytest.raises(_Refused) as refused, ext4(tmp_path, "16M", _refuse):
        pass
    assert str(refused.value).endswith(
        "trigger_fs_error cannot be written: this kernel cannot turn it read-only"
    )
    assert not os.path.ismount(tmp_path / "disk")


# --- a statement failing before the COMMIT (decision 0214) ---------------------------------------


def _read_only_statement_refused(db: Path) -> str:
    return (
        f"a statement of the transaction failed: the filesystem holding {db} is read-only (it "
        "was remounted read-only under the open store, as ext4 mounted errors=remount-ro does "
        "after an error), so nothing of the transaction was written. No write can be made "
        "until the filesystem is read-write again: reopen the store then (meanwhile it can be "
        "read: open_existing(path, read_only=True), or the agentrt commands that only read: "
        "runs, show, events, verify)"
    )


def _only_first_run_after_repair(ext4_disk: Ext4, db: Path) -> None:
    ext4_disk.repair()
    with agentrt.open_store(db) as reopened:
        assert [r.goal for r in reopened.list_runs()] == ["first"]
        assert reopened.verify_events().intact


def test_a_store_opened_on_a_filesystem_turned_read_only_names_it_at_its_first_write(
    ext4_disk: Ext4,
) -> None:
    """A store opened once the filesystem turned read-only (a program started again, a second
    process) opens it read-only underneath, and its first write fails before the COMMIT
    (SQLITE_READONLY): it said "a statement of the transaction failed: attempt to write a
    readonly database". Now it names the file and the cause, and that nothing was written;
    the store is not stopped (nothing is unknown): it reads, and says the same again."""
    db = ext4_disk.mount / "agentrt.db"
    with agentrt.open_store(db) as first:
        make_gate(first).begin_sync("first")
        ext4_disk.turn_read_only()
        with agentrt.open_store(db) as later:
            for attempt in ("second", "third"):
                with pytest.raises(StoreError) as refused:
                    make_gate(later, ids=Ids("b")).begin_sync(attempt)
                assert type(refused.value) is StoreError
                assert str(refused.value) == _read_only_statement_refused(db)
                assert refused.value.commit_unknown is False
                assert [r.goal for r in later.list_runs()] == ["first"]
    _only_first_run_after_repair(ext4_disk, db)


def test_a_statement_that_writes_before_the_commit_on_a_filesystem_turned_read_only_names_it(
    ext4_disk: Ext4,
) -> None:
    """A transaction larger than SQLite's page cache writes pages to the WAL before its
    COMMIT; on a filesystem turned read-only that write fails (SQLITE_IOERR_WRITE) and SQLite
    rolls the transaction back: it said "disk I/O error; SQLite rolled the whole transaction
    back ...". Now it names the file and the cause, and that nothing was written."""
    db = ext4_disk.mount / "agentrt.db"
    with agentrt.open_store(db) as store:
        make_gate(store).begin_sync("first")
        ext4_disk.turn_read_only()
        with pytest.raises(StoreError) as refused:
            make_gate(store, ids=Ids("b")).begin_sync("x" * 5_000_000)  # past the cache
        assert type(refused.value) is StoreError
        assert str(refused.value) == _read_only_statement_refused(db)
        assert refused.value.commit_unknown is False
        assert [r.goal for r in store.list_runs()] == ["first"]  # not stopped: it reads
    _only_first_run_after_repair(ext4_disk, db)
