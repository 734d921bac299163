"""`agentrt show` of a RUNNING run says who holds it, and whether its process is gone.

After a process is killed mid-call its run still reads RUNNING, exactly as a run whose
loop is alive: the lease is what tells them apart, and a person looking from a terminal
needs to know whether to wait or to restart the program (whose resume then asks them
about the interrupted call). Both backends, except the lapsed lease, whose expiry is
judged by the caller's wall clock only on SQLite (PostgreSQL judges by the server's).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

import agentrt
from agentrt import Gate
from agentrt._clock import format_time
from agentrt.cli import main
from support.left_running import (
    abandoned_run,
    completed_run,
    killed_run,
    released_at_the_lease_read,
)
from test_cli import agentrt_cmd, clean_env


def lease_line(database: str, run_id: str) -> str:
    result = agentrt_cmd("--db", database, "show", run_id)
    assert result.returncode == 0, result.stderr
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("lease ")]
    return line


def lease_json(database: str, run_id: str) -> object:
    result = agentrt_cmd("--db", database, "--json", "show", run_id)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["lease"]


def test_show_says_the_process_holding_a_running_run_is_gone(database: str) -> None:
    run_id = killed_run(database, clean_env())
    with agentrt.open_existing(database, read_only=True) as store:
        lease = store.lease(run_id)
        pid = lease.holder["pid"]
    until = agentrt_time(lease.expires_at)
    assert lease_line(database, run_id) == (
        f"lease     held by {lease.owner} until {until}, but its process is gone (pid {pid}: "
        "no such process): a resume takes the run over at once"
    )
    assert lease_json(database, run_id) == {
        "owner": lease.owner,
        "expires_at": until,
        "state": "owner_gone",
    }
    # A person who tries to decide before the program is restarted is told the same.
    refused = agentrt_cmd("--db", database, "approve", run_id, "--yes")
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        f"agentrt: run {run_id} is RUNNING; it waits on no approval; its lease: held by "
        f"{lease.owner} until {until}, but its process is gone (pid {pid}: no such process): "
        "a resume takes the run over at once\n"
    )


def test_show_says_who_holds_a_live_run_and_until_when(database: str) -> None:
    store = agentrt.open_store(database)
    gate = Gate(store=store, policy=agentrt.default_policy(), lease_owner="worker")
    session = gate.begin_sync("charge the card")
    try:
        lease = store.lease(session.run.id)
        until = agentrt_time(lease.expires_at)
        assert lease_line(database, session.run.id) == (
            f"lease     held by {lease.owner} until {until}"
        )
        assert lease_json(database, session.run.id) == {
            "owner": lease.owner,
            "expires_at": until,
            "state": "held",
        }
    finally:
        session.close_sync()
        store.close()


def test_show_says_nobody_holds_an_abandoned_run(database: str) -> None:
    run_id = abandoned_run(database)
    assert lease_line(database, run_id) == (
        "lease     nobody holds it: a resume takes the run over at once"
    )
    assert lease_json(database, run_id) == {"owner": "", "expires_at": "", "state": "none"}


def test_show_says_a_lease_lapsed(db_path: Path) -> None:
    database = str(db_path)
    store = agentrt.open_store(database)
    long_ago = datetime(2000, 1, 1, tzinfo=UTC)
    gate = Gate(
        store=store, policy=agentrt.default_policy(), lease_owner="worker", wall=lambda: long_ago
    )
    session = gate.begin_sync("charge the card")
    try:
        lease = store.lease(session.run.id)
        until = agentrt_time(lease.expires_at)
        assert until.startswith("2000-01-01T00:00:30")
        assert lease_line(database, session.run.id) == (
            f"lease     held by {lease.owner}, lapsed at {until}: a resume takes the run over"
        )
        assert lease_json(database, session.run.id) == {
            "owner": lease.owner,
            "expires_at": until,
            "state": "lapsed",
        }
    finally:
        session.close_sync()
        store.close()


def test_show_of_a_run_that_is_not_running_has_no_lease_line(database: str) -> None:
    run_id = completed_run(database)
    result = agentrt_cmd("--db", database, "show", run_id)
    assert result.returncode == 0, result.stderr
    assert not [ln for ln in result.stdout.splitlines() if ln.startswith("lease ")]
    assert lease_json(database, run_id) is None


def agentrt_time(value: datetime | None) -> str:
    return format_time(value)


@pytest.mark.parametrize("command", ["show", "runs"])
def test_show_and_runs_read_a_run_and_its_lease_at_one_moment(
    database: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """A lease given back between the read of the run and the read of its lease is not
    seen: both are read in one snapshot, so the run RUNNING and its lease agree."""
    run_id = killed_run(database, clean_env())
    with agentrt.open_existing(database, read_only=True) as store:
        lease = store.lease(run_id)
    released_at_the_lease_read(monkeypatch, database, run_id)
    words = ["show", run_id] if command == "show" else ["runs"]
    assert main(["--db", database, "--json", *words]) == 0
    document = json.loads(capsys.readouterr().out)
    (run,) = [document["run"]] if command == "show" else document["runs"]
    said = run["lease"]
    assert (run["status"], said) == (
        "RUNNING",
        {"owner": lease.owner, "expires_at": agentrt_time(lease.expires_at), "state": "owner_gone"},
    )
    with agentrt.open_existing(database, read_only=True) as store:  # given back after it
        assert store.lease(run_id).owner == ""
