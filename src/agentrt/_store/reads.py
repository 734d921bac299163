"""The named reads: every query the rest of the package asks of the file.

Each takes the transaction (or the store) it reads through and returns rows or
decoded records; none writes. Reads inside a write's transaction see what that
transaction wrote.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from ..errors import NotFoundError
from ..records import Approval, Run, RunStatus
from ..store import Store, Tx, approval_from_row, run_from_row


def run_row(tx: Tx, run_id: str) -> sqlite3.Row | None:
    """The run's row as stored, or None."""
    row: sqlite3.Row | None = tx.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
    return row


def run_exists(tx: Tx, run_id: str) -> bool:
    return tx.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None


def run_record(tx: Tx, run_id: str) -> Run:
    """The run as it stands in this transaction; `NotFoundError` if there is none."""
    row = run_row(tx, run_id)
    if row is None:
        raise NotFoundError(f"no run {run_id}")
    return run_from_row(row)


def approval_row(tx: Tx, approval_id: str, run_id: str | None = None) -> sqlite3.Row | None:
    """The approval's row (of that run, when one is named), or None."""
    if run_id is None:
        row: sqlite3.Row | None = tx.execute(
            "SELECT * FROM approvals WHERE id = ?", (approval_id,)
        ).fetchone()
        return row
    row = tx.execute(
        "SELECT * FROM approvals WHERE id = ? AND run_id = ?", (approval_id, run_id)
    ).fetchone()
    return row


def approval_record(tx: Tx, approval_id: str) -> Approval:
    row = approval_row(tx, approval_id)
    if row is None:
        raise NotFoundError(f"no approval {approval_id}")
    return approval_from_row(row)


def steps_in(tx: Tx, run_id: str, statuses: Sequence[str]) -> list[sqlite3.Row]:
    """`id` and `status` of the run's steps in one of `statuses`, in step order."""
    placeholders = ",".join("?" for _ in statuses)
    return list(
        tx.execute(
            f"SELECT id, status FROM steps WHERE run_id = ? AND status IN ({placeholders}) "
            "ORDER BY idx",
            (run_id, *[str(s) for s in statuses]),
        ).fetchall()
    )


# --- recovery ---------------------------------------------------------------------


def run_rowid(store: Store, run_id: str) -> int | None:
    """The run's rowid (recovery pages by it), or None when there is no such run."""
    rows = store.query("SELECT rowid FROM runs WHERE id = ?", (run_id,))
    return int(rows[0][0]) if rows else None


def unfinished_runs_page(
    store: Store, columns: Sequence[str], after_rowid: int, size: int
) -> list[sqlite3.Row]:
    """RUNNING and WAITING runs after `after_rowid`, oldest first: rowid, then `columns`.

    The columns are read as bytes: a column holding bytes that are not UTF-8
    must fail only its own run, never the page.
    """
    cols = ", ".join(f"CAST({c} AS BLOB)" for c in columns)
    return store.query(
        f"SELECT rowid, {cols} FROM runs "
        "WHERE status IN (?, ?) AND rowid > ? ORDER BY rowid LIMIT ?",
        (str(RunStatus.RUNNING), str(RunStatus.WAITING_FOR_APPROVAL), after_rowid, size),
    )


def latest_approval_state(store: Store, run_id: str) -> sqlite3.Row | None:
    """`id`, `status`, `expires_at` of the run's latest approval, or None."""
    rows = store.query(
        "SELECT id, status, expires_at FROM approvals WHERE run_id = ? ORDER BY rowid DESC LIMIT 1",
        (run_id,),
    )
    return rows[0] if rows else None


def started_tool_names(store: Store, run_id: str) -> list[Any]:
    """The names of the tools the run was started with (its `run.created`), as stored."""
    rows = store.query(
        "SELECT json_extract(spec_json, '$.name') FROM tool_specs WHERE hash IN "
        "(SELECT value FROM json_each((SELECT payload_json FROM events "
        "WHERE run_id = ? AND type = 'run.created' ORDER BY seq LIMIT 1), '$.tools'))",
        (run_id,),
    )
    return [r[0] for r in rows]


def run_status(store: Store, run_id: str) -> Any:
    """The run's status column as stored (None when there is no such run)."""
    rows = store.query("SELECT status FROM runs WHERE id = ?", (run_id,))
    return rows[0][0] if rows else None
