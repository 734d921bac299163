"""Two processes opening one new record at the same moment (decision 0169's check of the
migration record, against a migration another process commits while it is read).

Every worker of a fleet started together calls `open_store` on the same new file: one
migrates, the others wait for its lock and find the record made. Reading whether the
record exists takes more than one statement, and each sees what is committed when it
runs; another process's migration committed between two of them must not make a record
agentrt just wrote look like one changed by hand.
"""

from __future__ import annotations

import sqlite3
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from agentrt._store import open_existing, open_store
from agentrt._store.sqlite import _store as sqlite_store
from agentrt._store.sqlite._migrations import SCHEMA_VERSION

_LOOKUP = "FROM sqlite_master WHERE type = 'table' AND name"


def test_a_new_file_migrated_by_another_opener_between_two_reads_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "agentrt.db"
    real = sqlite_store._connect
    seen: list[str] = []
    migrated: list[int] = []

    def connect(target: str, *, uri: bool) -> sqlite3.Connection:
        conn = real(target, uri=uri)

        def traced(sql: str) -> None:
            # The other opener's whole migration, committed just before the statement
            # after the first look for the record's tables (none committed yet then).
            if not migrated and seen:
                migrated.append(1)
                monkeypatch.setattr(sqlite_store, "_connect", real)  # the other's own
                open_store(path).close()
            if _LOOKUP in sql and not seen:
                seen.append(sql)

        conn.set_trace_callback(traced)
        return conn

    monkeypatch.setattr(sqlite_store, "_connect", connect)
    with open_store(path) as store:
        assert migrated, "the other opener's migration never ran between the two reads"
        assert [tuple(r) for r in store.query("SELECT max(version) FROM schema_migrations")] == [
            (SCHEMA_VERSION,)
        ]
    versions = sqlite3.connect(path).execute("SELECT version FROM schema_migrations").fetchall()
    assert sorted(v for (v,) in versions) == list(range(1, SCHEMA_VERSION + 1))


def test_a_schema_migrated_by_another_session_between_two_reads_opens_on_postgres(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`open_existing` reads the record outside the migration's lock: a schema another
    session creates and commits between its first and second look is opened, not called
    one whose record was changed by hand."""
    from agentrt._store.postgres import _migrations as pg_migrations
    from support.postgres import postgres_schema

    with ExitStack() as stack:
        url = postgres_schema(stack, "a migration record read while another migrates")
        # The schema is there, empty (decision 0192 refuses one that is not, by name, at its
        # first look): what the other session makes between two looks is the record.
        import psycopg

        from agentrt._db_url import schema_of

        with psycopg.connect(url.split("?", 1)[0], autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema_of(url)}")
        real = pg_migrations._exists
        looked: list[str] = []

        def exists(conn: Any, table: str) -> bool:
            found = real(conn, table)
            looked.append(table)
            if len(looked) == 1:  # the other session's whole migration, committed now
                open_store(url).close()
            return found

        monkeypatch.setattr(pg_migrations, "_exists", exists)
        with open_existing(url) as store:
            assert len(looked) >= 2
            rows = store.query("SELECT max(version) FROM schema_migrations")
            assert [tuple(r) for r in rows] == [(SCHEMA_VERSION,)]
