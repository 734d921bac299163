"""One database per test, on SQLite or on PostgreSQL: the `database` fixture's backends.

A behavioural test that is not about SQLite's file rules takes the `database`
fixture (tests/conftest.py) and runs twice, once per backend: `sqlite` gives a
fresh file's path in the test's tmp_path, `postgres` a URL naming a schema exactly
as a fresh migration leaves it (already migrated, every table empty: taken from
this process's pool and emptied or dropped after the test, support/schema_pool.py,
decision 0105) on the server `AGENTRT_TEST_POSTGRES_URL` names (support/postgres.py:
skipped with one line without it, failing instead when `CI` is set). Either opens with
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

from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

from agentrt.lowlevel import is_db_url

from .postgres import server_url, with_schema
from .schema_pool import SchemaPool

BACKENDS = ("sqlite", "postgres")

BRIEF_LEASE = timedelta(seconds=3)
"""The lease of a `_brief` scenario: what a harness crash on PostgreSQL waits out."""


_POOL: SchemaPool | None = None


def schema_pool(base: str) -> SchemaPool:
    """This process's pool of migrated schemas on the server `base` (support/schema_pool.py)."""
    global _POOL
    if _POOL is None or _POOL.base != base:
        if _POOL is not None:
            _POOL.close()
        _POOL = SchemaPool(base)
    return _POOL


def close_schema_pool() -> None:
    """Drop every schema this process's pool holds (at the end of the session)."""
    global _POOL
    if _POOL is not None:
        _POOL.close()
        _POOL = None


def pooled_schema(stack: ExitStack, what: str, partitions: int | None = None) -> str:
    """The URL of a schema exactly as a fresh migration leaves it, with `partitions` chain
    partitions (the default N when None): taken from this process's pool, given back
    (emptied) or dropped when `stack` closes, with every schema the test made by its name
    (a crash matrix's cases, kept or not; decision 0105)."""
    base = server_url(what)
    pool = schema_pool(base)
    schema = pool.take(partitions)
    stack.callback(pool.give_back, schema)
    stack.callback(pool.drop_prefixed, schema)
    return with_schema(base, schema)


def make_database(backend: str, tmp_path: Path, stack: ExitStack, what: str) -> str:
    """A fresh database's name on `backend`: a file's path, or a pooled schema's URL."""
    if backend == "sqlite":
        return str(tmp_path / "agentrt.db")
    return pooled_schema(stack, what)


def on_postgres(database: str) -> bool:
    """Whether the `database` fixture's value names a PostgreSQL schema."""
    return is_db_url(database)


def brief(ref: str, database: str) -> str:
    """The scenario factory `ref` for a harness run on `database`: its `_brief` variant
    (lease `BRIEF_LEASE`) on PostgreSQL, `ref` itself on SQLite."""
    return f"{ref}_brief" if is_db_url(database) else ref
