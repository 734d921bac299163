"""The lease on PostgreSQL is judged by the server's clock, whatever each host's says.

Real processes (`tests/postgres_child.py`) whose wall and event clocks are ten
minutes fast or slow share one record on the test server (issue 21 item 3):

- a slow holder (-10 min) takes and renews a lease that the server says is live,
  so a fast resumer (+10 min), by whose clock it lapsed long ago, cannot take it;
- a slow resumer (-10 min) takes over a lease the server says expired, though by
  its own clock it has nine minutes to run.

The holder's record names another host in each case, so no proof that a process
is dead can decide: only the clock judges. Expiries are set from the server's own
`clock_timestamp()`, never from a race with the real clock.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import ExitStack
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import agentrt
from agentrt._clock import format_time, parse_time
from support.postgres import postgres_schema

HERE = Path(__file__).resolve().parent
CHILD = HERE / "postgres_child.py"
TEN_MINUTES = 600
SHARED = "5a" * 16
LEFT = "1e" * 16
ANOTHER_HOST = '{"host":"another-host","pid":1,"start":"1"}'


@pytest.fixture
def url() -> Any:
    with ExitStack() as stack:
        yield postgres_schema(stack, "the skewed-clock lease tests")


def spawn(mode: str, url: str, run_id: str, skew: int, dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), mode, url, run_id, str(skew), str(dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def said(proc: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def server_now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]


def lease_row(conn: psycopg.Connection[Any], run_id: str) -> tuple[str, str]:
    row = conn.execute(
        "SELECT lease_owner, lease_expires_at FROM runs WHERE id = %s", (run_id,)
    ).fetchone()
    assert row is not None
    return str(row[0]), str(row[1])


def wait_for(check: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def connect(url: str) -> psycopg.Connection[Any]:
    base, _, schema = url.rpartition("schema=")
    conn = psycopg.connect(base.rstrip("?&"), autocommit=True)
    conn.execute(f"SET search_path TO {schema}")
    return conn


def test_a_fast_resumer_cannot_take_the_live_lease_of_a_slow_holder(
    url: str, tmp_path: Path
) -> None:
    agentrt.open_store(url).close()
    conn = connect(url)
    before = server_now(conn)
    holder = spawn("hold", url, SHARED, -TEN_MINUTES, tmp_path)
    try:
        wait_for(
            lambda: (tmp_path / "started").exists() or holder.poll() is not None,
            "the holder's tool to start",
        )
        assert holder.poll() is None, holder.communicate()
        after = server_now(conn)
        # The holder's expiry is the server's clock plus the ttl, not its own (ten
        # minutes slow, which would have left the lease expired as it was taken).
        owner, expires = lease_row(conn, SHARED)
        assert owner.startswith("hold-")
        ttl = timedelta(seconds=15)
        assert before + ttl <= parse_time(expires) <= after + ttl
        conn.execute("UPDATE runs SET lease_holder = %s WHERE id = %s", (ANOTHER_HOST, SHARED))

        # Ten minutes fast: by its clock the lease lapsed 9m45s ago; the server says live.
        fast = said(spawn("resume", url, SHARED, TEN_MINUTES, tmp_path))
        assert fast["error"] == "RunLeasedError", fast
        assert lease_row(conn, SHARED)[0] == owner

        # The slow holder's heartbeat renews by the server's clock, so it keeps it.
        renewed = wait_for(
            lambda: (lambda row: row if row[1] != expires else None)(lease_row(conn, SHARED)),
            "the holder's heartbeat to renew",
        )
        assert renewed[0] == owner
        assert parse_time(renewed[1]) > server_now(conn)
        (tmp_path / "release").write_text("")
        assert said(holder) == {"status": "COMPLETED"}
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    conn.close()
    store = agentrt.open_existing(url, read_only=True)
    try:
        events = store.list_events(SHARED)
        assert not [e for e in events if e.type == "lease.taken_over"]
        assert [e.payload["tool"] for e in events if e.type == "step.tool_started"] == ["wait"]
        assert store.verify_events().intact
    finally:
        store.close()
    journal = (tmp_path / "journal").read_text().splitlines()
    assert len(journal) == 1 and " wait " in journal[0]


def test_a_slow_resumer_takes_a_lease_the_server_says_expired(url: str, tmp_path: Path) -> None:
    agentrt.open_store(url).close()
    crashed = spawn("crash", url, LEFT, 0, tmp_path)
    crashed.communicate(timeout=120)
    assert crashed.returncode == -9  # SIGKILLed mid-tool, the lease left held
    conn = connect(url)
    # Expired a minute ago by the server's clock; by the resumer's (ten minutes
    # slow) it has nine minutes to run. The holder is on "another host": no proof
    # of death can decide, only the clock.
    expired = format_time(server_now(conn) - timedelta(minutes=1))
    conn.execute(
        "UPDATE runs SET lease_expires_at = %s, lease_holder = %s WHERE id = %s",
        (expired, ANOTHER_HOST, LEFT),
    )
    slow = said(spawn("resume", url, LEFT, -TEN_MINUTES, tmp_path))
    assert slow == {"status": "COMPLETED"}
    conn.close()
    store = agentrt.open_existing(url, read_only=True)
    try:
        events = store.list_events(LEFT)
        (taken,) = [e for e in events if e.type == "lease.taken_over"]
        assert taken.payload["proof"] == {"by": "lease expired"}, taken.payload
        assert store.verify_events().intact
    finally:
        store.close()
    journal = (tmp_path / "journal").read_text().splitlines()
    assert [line.split()[1] for line in journal] == ["lookup", "lookup"]
    assert len({line.split()[0] for line in journal}) == 2  # the crashed child, then the resumer


@pytest.mark.parametrize("skew", [TEN_MINUTES, -TEN_MINUTES])
def test_the_store_lease_clock_is_the_servers_whatever_the_wall(url: str, skew: int) -> None:
    store = agentrt.open_store(url)
    conn = connect(url)
    try:
        before = server_now(conn)
        seen = store.lease_now(lambda: before + timedelta(seconds=skew))
        after = server_now(conn)
        assert before <= seen <= after
    finally:
        conn.close()
        store.close()
