"""A PostgreSQL connection lost at `COMMIT` leaves the transaction's outcome unknown to the
client: the server may have committed it before the answer was lost. The error must say
so, as the SQLite store's does since decision 0155 for a commit the disk failed to sync,
and never "nothing was written" (review)."""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Any

import psycopg
import pytest

import agentrt
from agentrt._records import Limits
from conftest import EPOCH
from support.postgres import postgres_schema


@pytest.fixture
def url() -> Any:
    with ExitStack() as stack:
        yield postgres_schema(stack, "the commit-lost test")


def test_a_connection_lost_at_commit_is_an_unknown_outcome_not_nothing_written(url: str) -> None:
    store = agentrt.open_store(url)
    try:
        with pytest.raises(agentrt.StoreError) as failed, store.transaction() as tx:
            tx.create_run(
                "r1",
                "goal",
                Limits(),
                owner="me",
                lease_expires_at=EPOCH,
                holder="{}",
                specs=[],
                now=EPOCH,
            )
            pid = store._pg.info.backend_pid  # the store's one connection
            with psycopg.connect(url.partition("?")[0], autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", (pid,))
                for _ in range(500):  # until the backend is gone: the COMMIT finds it lost
                    gone = other.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)
                    ).fetchone()
                    if gone is not None and gone[0] == 0:
                        break
                    time.sleep(0.01)
        message = str(failed.value)
        assert "nothing was written" not in message, message
        assert "unknown" in message, message
    finally:
        store.close()
