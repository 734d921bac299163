"""Every stored row, read behind the runtime's back, to show a refusal changed nothing.

`snapshot` reads each table a run's life writes (runs, steps, approvals,
events, model_calls), in rowid order, through its
own `sqlite3` connection (not the store's), so comparing a snapshot taken
before a refused call with one taken after shows that not one row was added,
changed or removed.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

TABLES = ("runs", "steps", "approvals", "events", "model_calls")


def snapshot(db_path: Path) -> list[tuple[Any, ...]]:
    """Every row of those tables, each prefixed with its table's name."""
    conn = sqlite3.connect(db_path)
    try:
        rows: list[tuple[Any, ...]] = []
        for table in TABLES:
            rows += [(table, *r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]
        return rows
    finally:
        conn.close()
