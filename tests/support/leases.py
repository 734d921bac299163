"""Taking a run's lease by hand, as another process's takeover would (the named write
`take_lease` with an expiry from a clock and this process as the holder)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from agentrt._lease import WallClock, expiry, holder_json
from agentrt._store.writes import take_lease


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
    return take_lease(
        tx,
        run_id,
        owner,
        expiry(wall, ttl),
        holder_json(),
        from_status=from_status,
        previous=None if previous_owner is None else (previous_owner, previous_expires_at or ""),
    )
