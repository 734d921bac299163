"""A read's snapshot that ends as it should leaves the store's session as it was: the
statements psycopg prepared on the store's connection stay prepared (psycopg's own
rollback, which decision 0167's after-the-merge fix uses after a failure, forgets them all
and deallocates them on the server; a snapshot that failed nothing has no reason to)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import psycopg
import pytest

import agentrt
from agentrt import Decision
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids
from support.postgres import postgres_schema


@pytest.fixture
def url() -> Iterator[str]:
    with ExitStack() as stack:
        yield postgres_schema(stack, "a rollback and the prepared statements")


def start(store: Any, ids: Ids) -> None:
    agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.fail("stopped")]),
        policy=agentrt.default_policy(),
        tools=[],
        now=FakeClock(),
        new_id=ids,
    ).start_sync("a goal")


def prepared(conn: psycopg.Connection[Any]) -> set[str]:
    """The statements the session holds prepared (read on the session itself, not prepared)."""
    rows = conn.execute("SELECT name FROM pg_prepared_statements", prepare=False).fetchall()
    return {row[0] for row in rows}


def test_a_snapshot_that_ends_keeps_the_sessions_prepared_statements(url: str) -> None:
    store = agentrt.open_store(url)
    try:
        ids = Ids("b")
        for _ in range(8):  # past psycopg's threshold: the writes' statements are prepared
            start(store, ids)
        conn = store._pg
        before = prepared(conn)
        assert before, "no statement of the store's was prepared"
        run_id = conn.execute("SELECT id FROM runs LIMIT 1", prepare=False).fetchone()[0]
        with store.snapshot() as view:
            assert view.run_record(run_id) is not None
        assert prepared(conn) == before
        start(store, ids)  # and the next writes use them, without preparing any again
        assert prepared(conn) == before
    finally:
        store.close()
