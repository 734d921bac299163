"""One database per test, on SQLite or on PostgreSQL: the `database` fixture's backends.

A behavioural test that is not about SQLite's file rules takes the `database`
fixture (tests/conftest.py) and runs twice, once per backend: `sqlite` gives a
fresh file's path in the test's tmp_path, `postgres` a URL naming a fresh schema
on the server `AGENTRT_TEST_POSTGRES_URL` names (support/postgres.py: skipped
with one line without it, failing instead when `CI` is set). Either opens with
`agentrt.open_store(database)` and goes to the crash test kit as its `db_path`.

Given to a crash matrix as its `directory`, the same name holds the cases: on
SQLite a folder of that name (nothing else is at the path), on PostgreSQL
schemas prefixed by the schema's name. Every schema so prefixed is dropped
after the test, kept cases too.

The crash test kit's harness cannot move a server's lease clock, so on
PostgreSQL a simulated crash's lease is waited out in real time (decision
0097): `brief(ref, database)` names the scenario factory's variant with a
lease of `BRIEF_LEASE` there (the same scenario otherwise), and the factory
itself on SQLite.
"""

from __future__ import annotations

import uuid
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

from agentrt.lowlevel import is_db_url

from .postgres import server_url, with_schema

BACKENDS = ("sqlite", "postgres")

BRIEF_LEASE = timedelta(seconds=3)
"""The lease of a `_brief` scenario: what a harness crash on PostgreSQL waits out."""


def make_database(backend: str, tmp_path: Path, stack: ExitStack, what: str) -> str:
    """A fresh database's name on `backend`: a file's path, or a schema's URL."""
    if backend == "sqlite":
        return str(tmp_path / "agentrt.db")
    base = server_url(what)
    import psycopg

    schema = f"k_{uuid.uuid4().hex[:12]}"

    def drop() -> None:
        with psycopg.connect(base, autocommit=True) as conn:
            names = conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname = %s OR nspname LIKE %s",
                (schema, schema + "\\_%"),
            ).fetchall()
            for (name,) in names:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')

    stack.callback(drop)
    return with_schema(base, schema)


def on_postgres(database: str) -> bool:
    """Whether the `database` fixture's value names a PostgreSQL schema."""
    return is_db_url(database)


def brief(ref: str, database: str) -> str:
    """The scenario factory `ref` for a harness run on `database`: its `_brief` variant
    (lease `BRIEF_LEASE`) on PostgreSQL, `ref` itself on SQLite."""
    return f"{ref}_brief" if is_db_url(database) else ref
