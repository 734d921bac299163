"""The named reads: every query the rest of the package asks of the file.

Each takes the transaction (or the store) it reads through and returns rows or
decoded records; none writes. Reads inside a write's transaction see what that
transaction wrote.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ..errors import NotFoundError
from ..records import Approval, Run
from ..store import Tx, approval_from_row, run_from_row


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
