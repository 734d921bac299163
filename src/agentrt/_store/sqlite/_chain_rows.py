"""The reads the event chain's verifier makes, on a plain connection.

Part of the store layer, apart from `reads` because the store itself verifies
the chain (`agentrt._db` imports `agentrt._chain`): this module imports nothing
of the store, so that import stays acyclic.
"""

from __future__ import annotations

import sqlite3
from typing import Any


def event_before(conn: sqlite3.Connection, seq: int) -> Any:
    """(`seq`, `hash`) of the last event before `seq`, or None."""
    return conn.execute(
        "SELECT seq, hash FROM events WHERE seq < ? ORDER BY seq DESC LIMIT 1", (seq,)
    ).fetchone()


def events_between(
    conn: sqlite3.Connection, columns: str, first: int, last: int, limit: int
) -> sqlite3.Cursor:
    """Up to `limit` events from seq `first` to `last`, in order, `columns` of each."""
    return conn.execute(
        f"SELECT {columns} FROM events WHERE seq >= ? AND seq <= ? ORDER BY seq LIMIT ?",
        (first, last, limit),
    )


def events_after(conn: sqlite3.Connection, columns: str, after: int, limit: int) -> sqlite3.Cursor:
    """Up to `limit` events after seq `after`, in order, `columns` of each."""
    return conn.execute(
        f"SELECT {columns} FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit)
    )


def issued_event_seq(conn: sqlite3.Connection) -> Any:
    """The highest event seq SQLite ever handed out (`sqlite_sequence`), or None."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
    return None if row is None else row[0]


def event_hash(conn: sqlite3.Connection, seq: int) -> Any:
    """A one-column row holding the hash of the event at `seq`, or None when there is none."""
    return conn.execute("SELECT hash FROM events WHERE seq = ?", (seq,)).fetchone()


def last_event_seq(conn: sqlite3.Connection) -> int:
    """The highest seq in the table now (0 when it is empty)."""
    last = conn.execute("SELECT max(seq) FROM events").fetchone()
    return int(last[0]) if last is not None and last[0] is not None else 0
