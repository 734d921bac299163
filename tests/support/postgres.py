"""A schema of its own on the test PostgreSQL server, for a test that runs on PostgreSQL.

The server is named by `AGENTRT_TEST_POSTGRES_URL` (e.g.
`postgresql://root@127.0.0.1:5432/test`); `postgres_schema` gives a URL whose
`?schema=` is a fresh schema, dropped when the given `ExitStack` closes. Without
the variable the test skips with one line saying how to enable it; with `CI` set
it fails instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from typing import Any

POSTGRES_URL_VARIABLE = "AGENTRT_TEST_POSTGRES_URL"


def server_url(what: str) -> str:
    """The test server's URL; skips (fails under `CI`) without one, saying it is for `what`."""
    base = os.environ.get(POSTGRES_URL_VARIABLE, "")
    if not base:
        message = (
            f"postgres: set {POSTGRES_URL_VARIABLE} (e.g. "
            f"postgresql://root@127.0.0.1:5432/test) to run {what} on PostgreSQL"
        )
        # Imported here, not at the top: a crash-matrix child imports this module (through
        # the scenarios' `support.database`) and has no use for pytest's 0.1 s of imports.
        import pytest

        if os.environ.get("CI"):
            pytest.fail(message + " (CI is set: it must not skip)")
        pytest.skip(message)
    return base


def with_schema(base: str, schema: str) -> str:
    """`base` with `schema=` added to its query."""
    return f"{base}{'&' if '?' in base else '?'}schema={schema}"


def postgres_schema(stack: ExitStack, what: str = "the contract suite") -> str:
    """A fresh schema's URL on the test server (dropped when `stack` closes)."""
    base = server_url(what)
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:16]}"

    def drop() -> None:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")

    stack.callback(drop)
    return with_schema(base, schema)


def held_run(store: Any, run_id: str, now: datetime = datetime(2026, 12, 2, tzinfo=UTC)) -> None:
    """A run `me` holds until 2100, made in a transaction of its own."""
    from agentrt._records import Limits

    with store.transaction() as tx:
        tx.create_run(
            run_id,
            "goal",
            Limits(),
            owner="me",
            lease_expires_at=datetime(2100, 1, 1, tzinfo=UTC),
            holder="{}",
            specs=[],
            now=now,
            origin="gate",
        )


@contextmanager
def store_holding_r1(url: str, now: datetime) -> Iterator[Any]:
    """The PostgreSQL store at `url`, with run `r1` made and held by `me` (`held_run`)."""
    import agentrt
    from agentrt._store.postgres import PostgresStore

    opened = agentrt.open_store(url)
    assert isinstance(opened, PostgresStore)
    try:
        held_run(opened, "r1", now)
        yield opened
    finally:
        opened.close()
