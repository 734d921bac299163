"""`agentrt runs` says who holds each RUNNING run, as `show` does (decision 0196).

A run whose process was killed mid-call read RUNNING in the list exactly as a live one:
the list now has a LEASE column (`held`, `lapsed`, `owner_gone`, `none`; `-` for a run
that is not running), and `runs --json` gives each run the `lease` object `show --json`
gives. The page's leases are read in one read, never one per run. Both backends, except
the lapsed lease, whose expiry only SQLite judges by the caller's wall clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from shlex import quote
from typing import Any

import pytest

import agentrt
from agentrt import Gate
from agentrt._clock import format_time
from agentrt.view import run_detail, run_page
from support.left_running import abandoned_run, completed_run, killed_run, live_run
from test_cli import agentrt_cmd, clean_env

HINT = (
    "LEASE owner_gone, lapsed or none: no live process holds the run, and its program's "
    "resume takes it over; who held it: agentrt --db {db} show RUN"
)


@pytest.fixture
def live(database: str) -> Iterator[tuple[agentrt.Store, str]]:
    with live_run(database) as held:
        yield held


def table(database: str) -> dict[str, list[str]]:
    result = agentrt_cmd("--db", database, "runs")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["RUN", "STATUS", "LEASE", "ORIGIN"]
    return {line.split()[0]: line.split() for line in lines[1:] if len(line.split()[0]) == 32}


def listed_json(database: str) -> dict[str, Any]:
    result = agentrt_cmd("--db", database, "--json", "runs")
    assert result.returncode == 0, result.stderr
    return {r["id"]: r for r in json.loads(result.stdout)["runs"]}


def test_runs_says_which_running_run_is_held_which_process_is_gone_and_which_nobody_holds(
    database: str, live: tuple[agentrt.Store, str]
) -> None:
    store, held = live
    gone, nobody, done = (
        killed_run(database, clean_env()),
        abandoned_run(database),
        completed_run(database),
    )
    rows = table(database)
    assert {run_id: row[1:3] for run_id, row in rows.items()} == {
        held: ["RUNNING", "held"],
        gone: ["RUNNING", "owner_gone"],
        nobody: ["RUNNING", "none"],
        done: ["COMPLETED", "-"],
    }
    result = agentrt_cmd("--db", database, "runs")
    assert result.stdout.splitlines()[-1] == HINT.format(db=quote(database))
    listed = listed_json(database)
    for run_id in (held, gone):
        lease = store.lease(run_id)
        state = "held" if run_id == held else "owner_gone"
        expected = {"owner": lease.owner, "expires_at": format_time(lease.expires_at)}
        assert listed[run_id]["lease"] == {**expected, "state": state}
    assert listed[nobody]["lease"] == {"owner": "", "expires_at": "", "state": "none"}
    assert listed[done]["lease"] is None
    # `show --json` says the same of each, in its own `lease` and in its run object.
    for run_id in (held, gone, nobody, done):
        shown = json.loads(agentrt_cmd("--db", database, "--json", "show", run_id).stdout)
        assert shown["lease"] == shown["run"]["lease"] == listed[run_id]["lease"]


def test_a_page_of_only_held_runs_prints_no_hint(
    database: str, live: tuple[agentrt.Store, str]
) -> None:
    completed_run(database)
    result = agentrt_cmd("--db", database, "runs")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "runs 1-2 of 2, newest first"


def test_the_leases_of_a_page_are_read_in_one_read_and_not_at_all_without_a_running_run(
    database: str, live: tuple[agentrt.Store, str]
) -> None:
    killed_run(database, clean_env())
    abandoned_run(database)
    completed_run(database)
    statements: list[str] = []
    with agentrt.open_existing(database, read_only=True) as store:
        real = store._query  # the store's one read path, on either backend

        def counted(sql: str, params: Any = ()) -> Any:
            statements.append(sql)
            return real(sql, params)

        store._query = counted
        page = run_page(store, limit=10)
        leases = [s for s in statements if "lease_owner" in s]
        statements.clear()
        done = run_page(store, limit=10, status="COMPLETED")
        store._query = real
    assert len(leases) == 1
    assert sorted(str(s.lease.state) for s in page.runs if s.lease is not None) == [
        "held",
        "none",
        "owner_gone",
    ]
    assert [s.lease for s in done.runs] == [None]
    assert not [s for s in statements if "lease_owner" in s]


def test_runs_says_a_lease_lapsed(db_path: Path) -> None:
    database = str(db_path)
    store = agentrt.open_store(database)
    long_ago = datetime(2000, 1, 1, tzinfo=UTC)
    gate = Gate(
        store=store, policy=agentrt.default_policy(), lease_owner="worker", wall=lambda: long_ago
    )
    session = gate.begin_sync("charge the card")
    try:
        assert table(database)[session.run.id][1:3] == ["RUNNING", "lapsed"]
        assert listed_json(database)[session.run.id]["lease"]["state"] == "lapsed"
        with agentrt.open_existing(database, read_only=True) as reader:
            lease = run_detail(reader, session.run.id).summary.lease
        assert lease is not None and lease.state == "lapsed"
    finally:
        session.close_sync()
        store.close()
