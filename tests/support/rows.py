"""Every stored row, read and changed behind the runtime's back, on either backend.

`snapshot` reads each table a run's life writes (runs, steps, approvals,
events, model_calls), in rowid order (PostgreSQL's tables carry a `rowid`
identity column for the same order; events in seq order), through a connection of its own (not the
store's), so comparing a snapshot taken before a refused call with one taken
after shows that not one row was added, changed or removed.

`execute` makes one change the way another process (or a person with write
access) would: on a SQLite file through `sqlite3`, on a PostgreSQL schema (the
`database` fixture's URL) through psycopg with the schema on its search path.
Statements use `?` placeholders on both.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentrt.lowlevel import is_db_url, schema_of

TABLES = ("runs", "steps", "approvals", "events", "model_calls")
_ORDER = {"events": "seq"}  # PostgreSQL's events have no rowid: their seq orders them


@contextmanager
def _connected(database: Path | str) -> Iterator[Any]:
    """A DB-API connection of its own to `database`, committing what it did on exit."""
    if not is_db_url(str(database)):
        conn = sqlite3.connect(database)
        try:
            yield conn
            conn.commit()
        finally:
            conn.close()
        return
    import psycopg

    url = str(database)
    base, _, query = url.partition("?")
    kept = [p for p in query.split("&") if p and not p.startswith("schema=")]
    with psycopg.connect(base + ("?" + "&".join(kept) if kept else ""), autocommit=True) as pg:
        pg.execute(f'SET search_path TO "{schema_of(url)}"')
        yield pg


def _placeholders(database: Path | str, sql: str) -> str:
    return sql.replace("?", "%s") if is_db_url(str(database)) else sql


def execute(database: Path | str, sql: str, params: Sequence[Any] = ()) -> int:
    """Run one statement on a connection of its own; return how many rows it changed."""
    with _connected(database) as conn:
        return int(conn.execute(_placeholders(database, sql), tuple(params)).rowcount)


def query(database: Path | str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """The rows of one read, on a connection of its own."""
    with _connected(database) as conn:
        return [tuple(r) for r in conn.execute(_placeholders(database, sql), tuple(params))]


def snapshot(database: Path | str) -> list[tuple[Any, ...]]:
    """Every row of those tables, each prefixed with its table's name."""
    with _connected(database) as conn:
        rows: list[tuple[Any, ...]] = []
        for table in TABLES:
            rows += [
                (table, *r)
                for r in conn.execute(
                    f"SELECT * FROM {table} ORDER BY {_ORDER.get(table, 'rowid')}"
                )
            ]
        return rows
