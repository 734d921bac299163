"""Taking a run's lease by hand, as another process's takeover would (the named write
`take_lease` with an expiry from a clock and this process as the holder); a wall
clock the test moves; a lease expired by moving its stored expiry (the only way on
PostgreSQL, whose server clock judges it); and waiting for the heartbeat's renewal
instead of sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agentrt._clock import format_time, parse_time, wall_clock
from agentrt._lease import WallClock, holder_json
from agentrt._store._records import LeaseState

from .rows import execute, query

ANOTHER_HOST = '{"host":"another-host","pid":1,"start":"1"}'
"""A lease holder's record naming another host: no proof of its death can be had here."""


def take_in(
    tx: Any,
    run_id: str,
    owner: str,
    ttl: timedelta,
    wall: WallClock,
    *,
    from_status: str,
    previous_owner: str | None = None,
    previous_expires_at: str | None = None,
) -> int:
    """Move the run to RUNNING under a new lease, compare-and-set; return the new epoch.

    With `previous_owner`, the write also requires the lease to be exactly the one
    the caller judged expired (what a takeover does)."""
    return tx.take_lease(
        run_id,
        owner,
        wall() + ttl,
        holder_json(),
        from_status=from_status,
        previous=None
        if previous_owner is None
        else judged_lease(run_id, previous_owner, previous_expires_at or ""),
    )


def judged_lease(
    run_id: str, owner: str, expires_text: str, status: str = "RUNNING", epoch: int = 1
) -> LeaseState:
    """A lease as a caller judged it from a SQLite read: the stored owner and expiry text,
    at `epoch` (a run's first unless told).

    A write that replaces "exactly the lease judged" compares these stored values.
    """
    try:
        expires_at = parse_time(expires_text)
        readable = True
    except ValueError:
        expires_at, readable = None, False
    return LeaseState(
        run_id=run_id,
        status=status,
        owner=owner,
        expires_at=expires_at,
        epoch=epoch,
        expiry_readable=readable,
        stored=(owner, expires_text),
    )


class MovableWall:
    """A wall clock the test moves: leases are judged on it, so no load can lapse one.

    The heartbeat still renews on real time (a third of the lease); only what
    "expired" means is the test's to say.
    """

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


def stored_expiry(db_path: Path | str, run_id: str) -> str:
    """The run's lease expiry as stored, read on a connection of its own (either backend)."""
    ((expiry,),) = query(db_path, "SELECT lease_expires_at FROM runs WHERE id = ?", (run_id,))
    return str(expiry)


def expire_lease(database: Path | str, run_id: str, *, holder_elsewhere: bool = True) -> str:
    """Make the run's lease expired an hour ago by the clock that judges it; return the expiry.

    That clock is the store's lease clock (`Store.lease_now`): the wall clock on
    SQLite, the server's on PostgreSQL, where a test cannot move it; so the test
    moves the expiry instead, as a stall of an hour would leave it. The holder's
    record names another host (unless told not to), so only the clock can decide,
    never a proof that the holder's process is gone. The holder's heartbeat must
    not be renewing the lease meanwhile (it is gone, or its lease is long).
    """
    import agentrt

    store = agentrt.open_existing(str(database))
    try:
        expired = format_time(store.lease_now(wall_clock) - timedelta(hours=1))
    finally:
        store.close()
    if holder_elsewhere:
        execute(
            database,
            "UPDATE runs SET lease_expires_at = ?, lease_holder = ? WHERE id = ?",
            (expired, ANOTHER_HOST, run_id),
        )
    else:
        execute(database, "UPDATE runs SET lease_expires_at = ? WHERE id = ?", (expired, run_id))
    return expired


def wait_for_renewal(read: Callable[[], Any], past: Any, within: float = 60.0) -> Any:
    """Wait until the expiry `read` returns (text or a time) is later than `past`; return it.

    Synchronises on the heartbeat's write, not on how long it usually takes: a
    renewal that never comes fails after `within` seconds.
    """
    deadline = time.monotonic() + within
    while True:
        now = read()
        if now is not None and now > past:
            return now
        assert time.monotonic() < deadline, f"the lease was not renewed past {past} in {within}s"
        time.sleep(0.01)
