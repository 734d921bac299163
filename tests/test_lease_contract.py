"""The lease's renewal on an in-memory store, pinned by the mutation campaign (docs/mutation.md).

A `:memory:` store has one connection, so its heartbeat renews through the
store's own transactions (`StoreRenewer`) rather than a connection of its own.
No other test reached that path: every mutant of it lived.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from agentrt._db import Store, open_store
from agentrt._lease import Heartbeat, StoreRenewer, renewer_for

EXPIRES = "2026-11-30T09:00:00.000000Z"
RENEWED = "2026-11-30T09:05:00.000000Z"


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
    renewer = renewer_for(memory)
    assert isinstance(renewer, StoreRenewer)
    assert renewer.renew("r1", "me", RENEWED) is True
    assert expiries(memory) == {"r1": RENEWED, "r2": EXPIRES}  # only that run's lease
    renewer.close()
    assert renewer.renew("r1", "me", EXPIRES) is True  # closing closes nothing of the store's


def test_an_in_memory_renewal_for_another_owner_or_run_reports_the_lease_lost(
    memory: Store,
) -> None:
    renewer = renewer_for(memory)
    assert renewer.renew("r1", "someone-else", RENEWED) is False
    assert renewer.renew("no-such-run", "me", RENEWED) is False
    assert expiries(memory) == {"r1": EXPIRES, "r2": EXPIRES}


def test_a_heartbeat_on_an_in_memory_store_renews_until_another_owner_takes_the_run(
    memory: Store,
) -> None:
    wall = datetime(2026, 11, 30, 9, 1, tzinfo=UTC)
    beat = Heartbeat(renewer_for(memory), "r1", "me", timedelta(milliseconds=90), lambda: wall)
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
