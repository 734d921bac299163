"""Migrating a PostgreSQL schema, attacked: its migration record changed by hand, and the
migrating connection killed by the server (`pg_terminate_backend`) in the middle of a
migration (decision 0169). Each test makes its schema and drops it (support/postgres.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack

import psycopg
import pytest

from agentrt._errors import SchemaVersionError, StoreError
from agentrt._store import open_existing, open_store
from agentrt._store.postgres import _migrations as pg_migrations
from support.postgres import postgres_schema


@pytest.fixture
def url() -> Iterator[str]:
    with ExitStack() as stack:
        yield postgres_schema(stack, "the migration attacks")


def admin(url: str) -> psycopg.Connection[tuple[object, ...]]:
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    conn = psycopg.connect(base, autocommit=True)
    conn.execute(f"SET search_path TO {schema}")
    return conn


def versions(url: str) -> list[int]:
    with admin(url) as conn:
        return [int(r[0]) for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]


@pytest.mark.parametrize(
    ("tamper", "refusal"),
    [
        (
            "DELETE FROM schema_migrations WHERE version = 3",
            r"schema_migrations records the versions 1, 2, 4, 5, where agentrt records each",
        ),
        ("DELETE FROM schema_migrations", r"holds agentrt's tables but no record of its"),
        ("DROP TABLE schema_migrations", r"holds agentrt's tables but no record of its"),
    ],
)
def test_a_migration_record_changed_by_hand_is_refused_by_every_open(
    url: str, tamper: str, refusal: str
) -> None:
    open_store(url).close()
    with admin(url) as conn:
        conn.execute(tamper)
    for opening in (
        lambda: open_store(url),
        lambda: open_existing(url),
        lambda: open_existing(url, read_only=True),
    ):
        with pytest.raises(SchemaVersionError, match=refusal):
            opening()


def test_the_last_version_deleted_is_refused_as_a_record_that_holds_a_later_migration(
    url: str,
) -> None:
    open_store(url).close()
    with admin(url) as conn:
        conn.execute("DELETE FROM schema_migrations WHERE version = 5")
    with pytest.raises(
        SchemaVersionError,
        match=r"^migration 5 cannot be applied \(constraint \"chain_head_id_check\" of relation "
        r"\"chain_head\" does not exist\): the database records schema version 4 but holds what "
        r"a later migration makes",
    ):
        open_store(url)
    assert versions(url) == [1, 2, 3, 4]


def test_a_migration_whose_connection_the_server_kills_midway_leaves_the_old_schema_whole(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 5 waits on a lock of `chain_head` another session holds; the server ends the
    migrating connection there (after migration 5's first statements were sent in its
    transaction). Nothing of it stays; the next open migrates once and keeps every row."""
    with monkeypatch.context() as old:  # a schema of version 4, holding a run and its head
        old.setattr(pg_migrations, "MIGRATIONS", pg_migrations.MIGRATIONS[:4])
        old.setattr(pg_migrations, "SCHEMA_VERSION", 4)
        old.setattr(pg_migrations, "settle_partitions", lambda *a, **k: None)
        open_store(url).close()
    with admin(url) as conn:
        conn.execute("INSERT INTO runs (id, goal, status) VALUES ('r1', 'kept', 'RUNNING')")
        conn.execute("UPDATE chain_head SET seq = 7 WHERE id = 1")
    failed: list[BaseException] = []

    def migrate() -> None:
        try:
            open_store(url).close()
        except BaseException as e:
            failed.append(e)

    with admin(url) as holder:
        holder.execute("BEGIN")
        holder.execute("LOCK TABLE chain_head IN ACCESS SHARE MODE")
        opener = threading.Thread(target=migrate)
        opener.start()
        deadline = time.monotonic() + 4  # inside the migration's lock_timeout (5 s)
        pid = None
        while pid is None and time.monotonic() < deadline:
            row = holder.execute(
                "SELECT l.pid FROM pg_locks AS l WHERE NOT l.granted "
                "AND l.relation = 'chain_head'::regclass"
            ).fetchone()
            pid = None if row is None else row[0]
        assert pid is not None, "the migration never waited on chain_head"
        holder.execute("SELECT pg_terminate_backend(%s)", (pid,))
        opener.join(30)
        holder.execute("ROLLBACK")
    assert len(failed) == 1 and isinstance(failed[0], StoreError), failed
    assert "terminating connection" in str(failed[0])
    assert versions(url) == [1, 2, 3, 4]
    with admin(url) as conn:
        assert conn.execute("SELECT id, goal FROM runs").fetchall() == [("r1", "kept")]
        assert conn.execute("SELECT id, seq FROM chain_head").fetchall() == [(1, 7)]
    with open_store(url) as store:  # the next open migrates, once
        assert store.get_run("r1").goal == "kept"
    assert versions(url) == [1, 2, 3, 4, 5]
    with admin(url) as conn:  # the seq issued before is kept: never issued again
        assert conn.execute("SELECT part, seq, hash FROM chain_head").fetchall() == [(0, 7, "")]
