"""The named reads: every query the rest of the package asks of the file.

Each takes the transaction (or the store) it reads through and returns rows or
decoded records; none writes. Reads inside a write's transaction see what that
transaction wrote.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from .._db import Store, Tx, approval_from_row, event_from_row, run_from_row, step_from_row
from .._errors import NotFoundError
from .._records import Approval, ApprovalStatus, Event, Run, RunStatus, Step


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


def step_record(tx: Tx, step_id: str) -> Step:
    """The step as it stands in this transaction; `NotFoundError` if there is none."""
    row = tx.execute("SELECT * FROM steps WHERE id = ?", (step_id,)).fetchone()
    if row is None:
        raise NotFoundError(f"no step {step_id}")
    return step_from_row(row)


def steps_of_run(tx: Tx, run_id: str) -> list[Step]:
    """Every step of the run, in order."""
    rows = tx.execute("SELECT * FROM steps WHERE run_id = ? ORDER BY idx", (run_id,))
    return [step_from_row(r) for r in rows.fetchall()]


def latest_approval_of_step(tx: Tx, step_id: str) -> sqlite3.Row | None:
    """`id` and `status` of the step's latest approval, or None."""
    row: sqlite3.Row | None = tx.execute(
        "SELECT id, status FROM approvals WHERE step_id = ? ORDER BY rowid DESC LIMIT 1",
        (step_id,),
    ).fetchone()
    return row


def lease_row(tx: Tx, run_id: str) -> sqlite3.Row:
    """`status`, `lease_owner`, `lease_expires_at`, `lease_holder` of the run."""
    row = tx.execute(
        "SELECT status, lease_owner, lease_expires_at, lease_holder FROM runs WHERE id = ?",
        (run_id,),
    ).fetchone()
    if row is None:
        raise NotFoundError(f"no run {run_id}")
    return row  # type: ignore[no-any-return]


def approvals_of_run(tx: Tx, run_id: str) -> list[Approval]:
    """Every approval of the run, oldest first."""
    rows = tx.execute("SELECT * FROM approvals WHERE run_id = ? ORDER BY rowid", (run_id,))
    return [approval_from_row(r) for r in rows.fetchall()]


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


def lease_state(store: Store, run_id: str) -> Any:
    """(`status`, `lease_owner`, `lease_expires_at`, `lease_epoch`) of the run, or None.

    Read on the store's connection outside any transaction: what a write that
    waits out a busy database checks between its tries.
    """
    rows = store.query(
        "SELECT status, lease_owner, lease_expires_at, lease_epoch FROM runs WHERE id = ?",
        (run_id,),
    )
    return tuple(rows[0]) if rows else None


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


# --- the console ------------------------------------------------------------------


def last_event_seq(store: Store, run_id: str) -> int:
    """The seq of the run's last event (0 when it has none)."""
    rows = store.query("SELECT coalesce(max(seq), 0) FROM events WHERE run_id = ?", (run_id,))
    return int(rows[0][0])


def event_count(store: Store, run_id: str) -> int:
    return int(store.query("SELECT count(*) FROM events WHERE run_id = ?", (run_id,))[0][0])


def event_seq_from_end(store: Store, run_id: str, back: int) -> int:
    """The seq of the run's event `back` places before its last (0 when there is none)."""
    rows = store.query(
        "SELECT seq FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?",
        (run_id, back),
    )
    return int(rows[0][0]) if rows else 0


# --- the read models (view.py) -------------------------------------------------------

_TOOL = "json_extract(request_json, '$.spec.name')"


def _waiting_columns(cap: int) -> str:
    # What a list shows of a pending approval, each text column cut at `cap` with its
    # full length beside it. A request that is not valid JSON must not fail the whole
    # page: json_valid guards it.
    return (
        f"substr(id, 1, {cap}) AS id, length(id) AS n_id, run_id, "
        f"substr(kind, 1, {cap}) AS kind, length(kind) AS n_kind, "
        f"substr(hash, 1, {cap}) AS hash, length(hash) AS n_hash, "
        "substr(created_at, 1, 64) AS created_at, substr(expires_at, 1, 64) AS expires_at, "
        f"CASE WHEN json_valid(request_json) THEN substr({_TOOL}, 1, {cap}) END AS tool, "
        f"CASE WHEN json_valid(request_json) THEN length({_TOOL}) END AS n_tool"
    )


def pending_approvals_of(store: Store, run_ids: Sequence[str], cap: int) -> list[sqlite3.Row]:
    """The pending approvals of the runs named, in creation order, texts cut at `cap`."""
    marks = ", ".join("?" for _ in run_ids)
    return store.query(
        f"SELECT {_waiting_columns(cap)} "
        f"FROM approvals WHERE status = ? AND run_id IN ({marks}) ORDER BY rowid",
        [str(ApprovalStatus.PENDING), *run_ids],
    )


def count_runs_asking_a_person(store: Store) -> int:
    """Waiting runs with at least one pending approval (not those decided and not yet resumed)."""
    rows = store.query(
        "SELECT count(*) FROM runs AS r WHERE r.status = ? AND EXISTS ("
        "SELECT 1 FROM approvals AS a WHERE a.run_id = r.id AND a.status = ?)",
        [str(RunStatus.WAITING_FOR_APPROVAL), str(ApprovalStatus.PENDING)],
    )
    return int(rows[0][0])


def newest_pending_approvals(
    store: Store, limit: int, cap: int, goal_cap: int
) -> list[sqlite3.Row]:
    """Waiting runs' pending approvals, newest first, at most `limit`, with the run's goal."""
    return store.query(
        f"SELECT {_waiting_columns(cap)}, goal, n_goal FROM approvals JOIN ("
        f"SELECT a.rowid AS pick, substr(r.goal, 1, {goal_cap}) AS goal, "
        "length(r.goal) AS n_goal FROM runs AS r CROSS JOIN approvals AS a "
        "ON a.run_id = r.id WHERE r.status = ? AND a.status = ? "
        "ORDER BY a.rowid DESC LIMIT ?) ON approvals.rowid = pick ORDER BY approvals.rowid DESC",
        [str(RunStatus.WAITING_FOR_APPROVAL), str(ApprovalStatus.PENDING), limit],
    )


def step_index(store: Store, run_id: str, step_id: str) -> Any:
    """The step's `idx` column as stored (None when there is no such step of the run)."""
    rows = store.query("SELECT idx FROM steps WHERE id = ? AND run_id = ?", (step_id, run_id))
    return rows[0]["idx"] if rows else None


def run_id_exists(store: Store, run_id: str) -> bool:
    return bool(store.query("SELECT 1 FROM runs WHERE id = ?", (run_id,)))


def run_ids_starting(store: Store, prefix: str, limit: int) -> list[str]:
    """Up to `limit` run ids starting with `prefix` (no wildcard in it), in order.

    GLOB is case-sensitive and the prefix holds no wildcard, so SQLite reads a
    range of the primary key's index.
    """
    rows = store.query(
        "SELECT id FROM runs WHERE id GLOB ? ORDER BY id LIMIT ?", (prefix + "*", limit)
    )
    return [str(r[0]) for r in rows]


# --- integrations: a framework's call found by its id (agentrt.lowlevel) -----------

REASON_KEY_LENGTH = 256
"""How many characters of a decision's reason `steps.reason_key` keeps (migration 3)."""

_REASONS_PER_QUERY = 500
"""Reasons looked up in one statement (SQLite's bound-parameter limit is far above it)."""


def steps_with_reasons(store: Store, run_id: str, reasons: Collection[str]) -> list[Step]:
    """The run's steps whose recorded decision gives one of `reasons`, in step order, whole.

    An integration finds the step of a framework's tool call this way: it puts
    the call id in the decision's reason (docs/decisions/0060). One indexed read
    (`steps_run_reason`, on `reason_key`, the reason's head) per few hundred
    reasons, whatever the run's length; each row found is then checked against
    its decoded decision, so a step is returned exactly when
    `step.decision.reason` is one of `reasons`: a decision that does not decode,
    or a longer reason with the same head, is not. Values are read complete (no
    cap). A run with no such step (or no such run) gives `[]`.

    A reason that is not valid UTF-8 text (a lone surrogate, as a framework's
    call id may hold) matches no step and is never bound: the store holds only
    UTF-8 text and a recorded decision's reason reads back as such, so no
    recorded `decision.reason` can equal it.
    """
    if isinstance(reasons, str):
        raise TypeError("reasons is a collection of reasons, not one text")
    wanted = set(reasons)
    if any(not isinstance(r, str) or r == "" for r in wanted):
        raise ValueError("each reason looked up must be a non-empty text")
    wanted = {r for r in wanted if _utf8(r)}
    keys = sorted({r[:REASON_KEY_LENGTH] for r in wanted})
    found: list[Step] = []
    for start in range(0, len(keys), _REASONS_PER_QUERY):
        chunk = keys[start : start + _REASONS_PER_QUERY]
        marks = ", ".join("?" for _ in chunk)
        # `reason_key != ''` is the partial index's own condition: SQLite uses the
        # index only for a query that states it. No ORDER BY: with one, SQLite may
        # prefer walking the run's steps in order (UNIQUE (run_id, idx)) to sorting
        # the few rows found.
        rows = store.query(
            f"SELECT * FROM steps WHERE run_id = ? AND reason_key IN ({marks}) "
            "AND reason_key != ''",
            (run_id, *chunk),
        )
        found.extend(step_from_row(r) for r in rows)
    found.sort(key=lambda s: s.index)
    return [
        s
        for s in found
        if s.decision is not None
        and isinstance(s.decision.reason, str)  # a stored decision may hold anything there
        and s.decision.reason in wanted
    ]


def _utf8(text: str) -> bool:
    """Whether `text` is valid UTF-8 text (holds no lone surrogate)."""
    try:
        str.encode(text, "utf-8")
    except UnicodeEncodeError:
        return False
    return True


def step_of_run(store: Store, run_id: str, step_id: str) -> Step | None:
    """The run's step `step_id`, whole (no cap), or None when the run has no such step."""
    rows = store.query("SELECT * FROM steps WHERE id = ? AND run_id = ?", (step_id, run_id))
    return step_from_row(rows[0]) if rows else None


# --- the crash test kit's bookkeeping (a plain read-only connection) ----------------


def event_hash_exists(conn: sqlite3.Connection, event_hash: str) -> bool:
    """Whether an event with this hash was committed."""
    return conn.execute("SELECT 1 FROM events WHERE hash = ?", (event_hash,)).fetchone() is not None


def newest_event(conn: sqlite3.Connection) -> Any:
    """(`hash`, `at`) of the newest committed event (by seq), or None."""
    return conn.execute("SELECT hash, at FROM events ORDER BY seq DESC LIMIT 1").fetchone()


def every_record_id(conn: sqlite3.Connection) -> list[Any]:
    """Every id of every run, step, approval and model call."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT id FROM runs UNION ALL SELECT id FROM steps "
            "UNION ALL SELECT id FROM approvals UNION ALL SELECT id FROM model_calls"
        )
    ]


class plain_reader:
    """A plain read-only connection to `db_path`, outside any store (the test kit's
    bookkeeping reads): it sees only what is committed."""

    def __init__(self, db_path: str) -> None:
        self.conn = sqlite3.connect(f"{Path(db_path).as_uri()}?mode=ro", uri=True, timeout=5)

    def __enter__(self) -> sqlite3.Connection:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


# --- re-checking a run's policy evaluations (docs/decisions/0072) -------------------


def events_of_types(store: Store, run_id: str, types: Collection[str]) -> list[Event]:
    """The run's events of these types, whole (no cap), in commit order."""
    marks = ",".join("?" for _ in types)
    rows = store.query(
        "SELECT seq, run_id, step_id, at, type, payload_json, hash FROM events "
        f"WHERE run_id = ? AND type IN ({marks}) ORDER BY seq",
        (run_id, *types),
    )
    return [event_from_row(r) for r in rows]


def run_ids_created_since(store: Store, since: str, after_rowid: int, size: int) -> list[Any]:
    """(rowid, id) of runs created at or after `since` (stored time text), oldest first,
    a page of `size` after `after_rowid`."""
    return [
        (r[0], r[1])
        for r in store.query(
            "SELECT rowid, id FROM runs WHERE created_at >= ? AND rowid > ? ORDER BY rowid LIMIT ?",
            (since, after_rowid, size),
        )
    ]
