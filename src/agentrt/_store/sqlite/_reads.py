"""The named reads: every query the rest of the package asks of the file.

Each takes the transaction (or the store) it reads through and returns rows or
decoded records; none writes. Reads inside a write's transaction see what that
transaction wrote.
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ..._canonical import from_text
from ..._clock import format_time
from ..._errors import NotFoundError
from ..._records import Approval, ApprovalStatus, Event, Run, RunStatus, Step
from ..._stored_text import shown_text
from .._records import (
    ApprovalState,
    GuardedRun,
    LeaseState,
    RunCandidate,
    RunCursor,
    WaitingRow,
)
from ._codecs import (
    approval_from_row,
    approval_state,
    capped_sql,
    event_from_row,
    lease_from,
    run_from_row,
    step_from_row,
    waiting_from_row,
)
from ._connection import store_error
from ._tx import TxCore

_CANDIDATE_COLUMNS = ("id", "status", "lease_owner", "lease_expires_at", "lease_holder", "origin")


def _candidate(values: tuple[Any, ...]) -> RunCandidate:
    """One row of `unfinished_runs` (rowid, epoch, then the columns as bytes) decoded."""
    rowid, epoch, *raw = values
    texts: list[str] = []
    unreadable: list[str] = []
    for name, value in zip(_CANDIDATE_COLUMNS, raw, strict=True):
        data = value if isinstance(value, bytes) else b""
        try:
            texts.append(data.decode("utf-8"))
        except UnicodeDecodeError:
            texts.append(data.decode("utf-8", "replace"))
            unreadable.append(name)
    run_id, status, owner, expires, holder, origin = texts
    return RunCandidate(
        cursor=RunCursor(int(rowid)),
        run_id=run_id,
        status=status,
        lease=lease_from(run_id, status, owner, expires, holder, epoch),
        origin=origin,
        unreadable=tuple(unreadable),
    )


# --- the read models (view.py) -------------------------------------------------------

_TOOL = "json_extract(request_json, '$.spec.name')"


def _waiting_columns(cap: int) -> str:
    # What a list shows of a pending approval, each text column cut at `cap` with its
    # full length beside it. A request that is not valid JSON must not fail the whole
    # page: json_valid guards it.
    tool = f"CASE WHEN json_valid(request_json) THEN {_TOOL} END"
    return (
        f"{capped_sql('id', cap, 'id', 'n_id')}, run_id, "
        f"{capped_sql('kind', cap, 'kind', 'n_kind')}, "
        f"{capped_sql('hash', cap, 'hash', 'n_hash')}, "
        "substr(created_at, 1, 64) AS created_at, substr(expires_at, 1, 64) AS expires_at, "
        f"{capped_sql(tool, cap, 'tool', 'n_tool')}, "
        # A packed request (decision 0084) is not JSON to SQLite: read whole (short as it
        # is; the row factory puts its parts back), its tool's name taken in `_waiting`.
        # So is one holding an escaped NUL: SQLite 3.40's json_extract stops at it, 3.53's
        # does not (decision 0239); read in Python, the name is the record's on every SQLite.
        "CASE WHEN instr(request_json, char(1)) > 0 OR instr(request_json, '\\u0000') > 0 "
        "THEN request_json END AS request_json"
    )


def _waiting(rows: Sequence[Any], cap: int, *, with_goal: bool = False) -> list[WaitingRow]:
    out: list[WaitingRow] = []
    for row in rows:
        request = row["request_json"]
        if isinstance(request, str):
            values = dict(zip(row.keys(), row, strict=True))
            tool = _tool_of(request)
            values["tool"] = None if tool is None else tool[:cap]
            values["n_tool"] = None if tool is None else len(tool)
            row = values
        out.append(waiting_from_row(row, with_goal=with_goal))
    return out


def _tool_of(request: str) -> str | None:
    try:
        spec = from_text(request).get("spec", {})
    except Exception:  # a stored request may be anything
        return None
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) else None


# --- integrations: a framework's call found by its id (agentrt.lowlevel) -----------

REASON_KEY_LENGTH = 256
"""How many characters of a decision's reason `steps.reason_key` keeps (migration 3)."""


def reason_key(reason: str) -> str:
    """What `steps.reason_key` holds for a decision's reason: its first `REASON_KEY_LENGTH`
    characters, each NUL as U+FFFD (a PostgreSQL text holds no NUL, and SQLite's `substr`
    stopped at one: the key is cut in Python, the same on both)."""
    return reason[:REASON_KEY_LENGTH].replace("\0", "\ufffd")


def _lookup_keys(reason: str) -> tuple[str, ...]:
    """The keys a step with this reason may be indexed under: `reason_key`'s, and for a
    reason holding a NUL the head before it, which SQLite's `substr` wrote before decision
    0143 (on PostgreSQL such a step could not be written then)."""
    if "\0" not in reason:
        return (reason[:REASON_KEY_LENGTH],)
    return (reason_key(reason), reason.split("\0", 1)[0][:REASON_KEY_LENGTH])


_REASONS_PER_QUERY = 500
"""Reasons looked up in one statement (SQLite's bound-parameter limit is far above it)."""


def _utf8(text: str) -> bool:
    """Whether `text` is valid UTF-8 text (holds no lone surrogate)."""
    try:
        str.encode(text, "utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --- the crash test kit's bookkeeping (a plain read-only connection) ----------------


def _plain(conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    try:
        return list(conn.execute(sql, params).fetchall())
    except sqlite3.Error as e:
        raise store_error(e, "a plain read of the file failed") from e


def event_hash_exists(conn: sqlite3.Connection, event_hash: str) -> bool:
    """Whether an event with this hash was committed."""
    return bool(_plain(conn, "SELECT 1 FROM events WHERE hash = ?", (event_hash,)))


def newest_event(conn: sqlite3.Connection) -> Any:
    """(`hash`, `at`) of the newest committed event (by seq), or None."""
    found = _plain(conn, "SELECT hash, at FROM events ORDER BY seq DESC LIMIT 1")
    return found[0] if found else None


def every_record_id(conn: sqlite3.Connection) -> list[Any]:
    """Every id of every run, step, approval and model call. `StoreError` when the file is
    not an agentrt database (yet)."""
    return [
        r[0]
        for r in _plain(
            conn,
            "SELECT id FROM runs UNION ALL SELECT id FROM steps "
            "UNION ALL SELECT id FROM approvals UNION ALL SELECT id FROM model_calls",
        )
    ]


class plain_reader:
    """A plain read-only connection to `db_path`, outside any store (the test kit's
    bookkeeping reads): it sees only what is committed."""

    def __init__(self, db_path: str) -> None:
        try:
            self.conn = sqlite3.connect(f"{Path(db_path).as_uri()}?mode=ro", uri=True, timeout=5)
        except sqlite3.Error as e:
            raise store_error(e, f"cannot read {db_path}") from e

    def __enter__(self) -> sqlite3.Connection:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


_LEASE_COLUMNS = (
    "SELECT status, lease_owner, lease_expires_at, lease_holder, lease_epoch FROM runs WHERE id = ?"
)


class TxReads(TxCore):
    """The named reads inside a transaction: they see what the transaction wrote."""

    def _run_row(self, run_id: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.execute(
            "SELECT * FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
        return row

    def lock_run(self, run_id: str) -> GuardedRun | None:
        """The run and its lease, held for the rest of the transaction; None if no such run.

        `BEGIN IMMEDIATE` already excludes every other writer, so a plain read holds it.
        """
        row = self._run_row(run_id)
        if row is None:
            return None
        lease = lease_from(
            run_id,
            row["status"],
            row["lease_owner"],
            row["lease_expires_at"],
            row["lease_holder"],
            row["lease_epoch"],
        )
        return GuardedRun(None, lease, lambda: run_from_row(row))

    def lock_lease(self, run_id: str) -> LeaseState | None:
        """`lock_run`'s lease, its five columns read alone (held as `lock_run` holds them)."""
        row = self.execute(_LEASE_COLUMNS, (run_id,)).fetchone()
        if row is None:
            return None
        status, owner, expires, holder, epoch = row
        return lease_from(run_id, status, owner, expires, holder, epoch)

    def lease_now(self, wall: Callable[[], datetime]) -> datetime:
        """The time leases are judged by in this transaction: the caller's wall clock."""
        return wall()

    def run_exists(self, run_id: str) -> bool:
        return self.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None

    def run_record(self, run_id: str) -> Run:
        """The run as it stands in this transaction; `NotFoundError` if there is none."""
        row = self._run_row(run_id)
        if row is None:
            raise NotFoundError(f"no run {run_id}")
        return run_from_row(row)

    def step_record(self, step_id: str) -> Step:
        """The step as it stands in this transaction; `NotFoundError` if there is none."""
        row = self.execute("SELECT * FROM steps WHERE id = ?", (step_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no step {step_id}")
        return step_from_row(row)

    def steps_of_run(self, run_id: str) -> list[Step]:
        """Every step of the run, in order."""
        rows = self.execute("SELECT * FROM steps WHERE run_id = ? ORDER BY idx", (run_id,))
        return [step_from_row(r) for r in rows.fetchall()]

    def steps_from(self, run_id: str, first_index: int, limit: int) -> list[Step]:
        """At most `limit` of the run's steps from index `first_index`, whole, in order."""
        if first_index < 0 or limit < 0:
            raise ValueError("first_index and limit must not be negative")
        rows = self.execute(
            "SELECT * FROM steps WHERE run_id = ? AND idx >= ? ORDER BY idx LIMIT ?",
            (run_id, first_index, limit),
        )
        return [step_from_row(r) for r in rows.fetchall()]

    def latest_approval_of_step(self, step_id: str) -> ApprovalState | None:
        """The id, status and expiry of the step's latest approval, or None."""
        row = self.execute(
            "SELECT id, status, expires_at FROM approvals WHERE step_id = ? "
            "ORDER BY rowid DESC LIMIT 1",
            (step_id,),
        ).fetchone()
        return None if row is None else approval_state(row)

    def approvals_of_run(self, run_id: str) -> list[Approval]:
        """Every approval of the run, oldest first."""
        rows = self.execute("SELECT * FROM approvals WHERE run_id = ? ORDER BY rowid", (run_id,))
        return [approval_from_row(r) for r in rows.fetchall()]

    def _approval_row(self, approval_id: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.execute(
            "SELECT * FROM approvals WHERE id = ?", (approval_id,)
        ).fetchone()
        return row

    def approval_of_run(self, approval_id: str, run_id: str) -> Approval | None:
        """The run's approval with this id as it stands in this transaction, or None."""
        row = self.execute(
            "SELECT * FROM approvals WHERE id = ? AND run_id = ?", (approval_id, run_id)
        ).fetchone()
        return None if row is None else approval_from_row(row)

    def approval_record(self, approval_id: str) -> Approval:
        row = self._approval_row(approval_id)
        if row is None:
            raise NotFoundError(f"no approval {approval_id}")
        return approval_from_row(row)

    def steps_in(self, run_id: str, statuses: Sequence[str]) -> list[tuple[str, str]]:
        """`(id, status)` of the run's steps in one of `statuses`, in step order."""
        placeholders = ",".join("?" for _ in statuses)
        rows = list(
            self.execute(
                f"SELECT id, status FROM steps WHERE run_id = ? AND status IN ({placeholders}) "
                "ORDER BY idx",
                (run_id, *[str(s) for s in statuses]),
            ).fetchall()
        )
        return [(str(r[0]), str(r[1])) for r in rows]


class StoreReads(ABC):
    """The named reads on a store, outside any transaction (each one read)."""

    @abstractmethod
    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Run one read on the store's connection, under its lock."""

    def lease_state(self, run_id: str) -> LeaseState | None:
        """The run's status and lease, or None when there is no such run.

        Read on the store's connection outside any transaction: what a write that
        waits out a busy database checks between its tries, and a takeover's first look.
        """
        rows = self._query(
            "SELECT status, lease_owner, lease_expires_at, lease_holder, lease_epoch "
            "FROM runs WHERE id = ?",
            (run_id,),
        )
        return lease_from(run_id, *tuple(rows[0])) if rows else None

    # --- recovery ---------------------------------------------------------------------

    def run_cursor(self, run_id: str) -> RunCursor | None:
        """Where the run stands in recovery's order (its rowid); None when there is no such run."""
        rows = self._query("SELECT rowid FROM runs WHERE id = ?", (run_id,))
        return RunCursor(int(rows[0][0])) if rows else None

    def unfinished_runs(self, after: RunCursor | None, limit: int) -> list[RunCandidate]:
        """RUNNING and WAITING runs after `after`, oldest first, at most `limit`.

        The columns are read as bytes: a column holding bytes that are not UTF-8
        fails only its own candidate (`unreadable`), never the page.
        """
        cols = ", ".join(f"CAST({c} AS BLOB)" for c in _CANDIDATE_COLUMNS)
        rows = self._query(
            f"SELECT rowid, lease_epoch, {cols} FROM runs "
            "WHERE status IN (?, ?) AND rowid > ? ORDER BY rowid LIMIT ?",
            (
                str(RunStatus.RUNNING),
                str(RunStatus.WAITING_FOR_APPROVAL),
                0 if after is None else after.position,
                limit,
            ),
        )
        return [_candidate(tuple(r)) for r in rows]

    def latest_approval_state(self, run_id: str) -> ApprovalState | None:
        """The id, status and expiry of the run's latest approval, or None."""
        rows = self._query(
            "SELECT id, status, expires_at FROM approvals WHERE run_id = ? "
            "ORDER BY rowid DESC LIMIT 1",
            (run_id,),
        )
        return approval_state(rows[0]) if rows else None

    def started_tool_names(self, run_id: str) -> list[str | None]:
        """The names of the tools the run was started with (its `run.created`), as stored.

        A spec whose name cannot be read gives None in its place, and so does a
        `run.created` that will not decode (its tools cannot be known). Read in
        Python, not with SQLite's JSON functions: a packed payload (decision 0084)
        is JSON only once its parts are back.
        """
        created = self._query(
            "SELECT payload_json FROM events WHERE run_id = ? AND type = 'run.created' "
            "ORDER BY seq LIMIT 1",
            (run_id,),
        )
        if not created:
            return []
        try:
            tools = from_text(created[0][0]).get("tools")
        except Exception:  # a stored payload may be anything
            return [None]
        if not isinstance(tools, list):
            return []
        hashes = sorted({t for t in tools if isinstance(t, str)})
        if not hashes:
            return []
        marks = ", ".join("?" for _ in hashes)
        rows = self._query(
            f"SELECT spec_json FROM tool_specs WHERE hash IN ({marks}) ORDER BY hash", hashes
        )
        names: list[str | None] = []
        for (text,) in rows:
            try:
                name = from_text(text).get("name")
            except Exception:  # a stored spec may be anything
                name = None
            names.append(name if isinstance(name, str) else None)
        return names

    def run_status(self, run_id: str) -> str | None:
        """The run's status as stored, shown if unreadable (None when there is no such run)."""
        rows = self._query("SELECT status FROM runs WHERE id = ?", (run_id,))
        return shown_text(rows[0][0]) if rows else None

    # --- the console ------------------------------------------------------------------

    def last_event_seq(self, run_id: str) -> int:
        """The seq of the run's last event (0 when it has none)."""
        rows = self._query("SELECT coalesce(max(seq), 0) FROM events WHERE run_id = ?", (run_id,))
        return int(rows[0][0])

    def newest_event(self, run_id: str | None = None) -> Event | None:
        """The event with the highest seq, of the run or of the whole record, whole; None
        when there is none. Read on the store's connection: inside a transaction open on
        it, that transaction's own events count."""
        where, params = ("WHERE run_id = ? ", (run_id,)) if run_id is not None else ("", ())
        rows = self._query(
            "SELECT seq, run_id, step_id, at, type, payload_json, hash FROM events "
            f"{where}ORDER BY seq DESC LIMIT 1",
            params,
        )
        return event_from_row(rows[0]) if rows else None

    def event_hash_exists(self, event_hash: str) -> bool:
        """Whether an event with this hash is in the record."""
        return bool(self._query("SELECT 1 FROM events WHERE hash = ?", (event_hash,)))

    def record_ids(self) -> set[str]:
        """Every id of every run, step, approval and model call in the record (an id that
        will not read as text, shown)."""
        rows = self._query(
            "SELECT id FROM runs UNION ALL SELECT id FROM steps "
            "UNION ALL SELECT id FROM approvals UNION ALL SELECT id FROM model_calls"
        )
        return {shown_text(r[0]) for r in rows}

    def event_count(self, run_id: str) -> int:
        return int(self._query("SELECT count(*) FROM events WHERE run_id = ?", (run_id,))[0][0])

    def event_seq_from_end(self, run_id: str, back: int) -> int:
        """The seq of the run's event `back` places before its last (0 when there is none)."""
        rows = self._query(
            "SELECT seq FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?",
            (run_id, back),
        )
        return int(rows[0][0]) if rows else 0

    def pending_approvals_of(self, run_ids: Sequence[str], cap: int) -> list[WaitingRow]:
        """The pending approvals of the runs named, in creation order, texts cut at `cap`."""
        marks = ", ".join("?" for _ in run_ids)
        rows = self._query(
            f"SELECT {_waiting_columns(cap)} "
            f"FROM approvals WHERE status = ? AND run_id IN ({marks}) ORDER BY rowid",
            [str(ApprovalStatus.PENDING), *run_ids],
        )
        return _waiting(rows, cap)

    def count_runs_asking_a_person(self) -> int:
        """Waiting runs with at least one pending approval.

        Not those whose approval was decided and that are not yet resumed."""
        rows = self._query(
            "SELECT count(*) FROM runs AS r WHERE r.status = ? AND EXISTS ("
            "SELECT 1 FROM approvals AS a WHERE a.run_id = r.id AND a.status = ?)",
            [str(RunStatus.WAITING_FOR_APPROVAL), str(ApprovalStatus.PENDING)],
        )
        return int(rows[0][0])

    def newest_pending_approvals(self, limit: int, cap: int, goal_cap: int) -> list[WaitingRow]:
        """Waiting runs' pending approvals, newest first, at most `limit`, with the run's goal."""
        rows = self._query(
            f"SELECT {_waiting_columns(cap)}, goal, n_goal FROM approvals JOIN ("
            f"SELECT a.rowid AS pick, {capped_sql('r.goal', goal_cap, 'goal', 'n_goal')} "
            "FROM runs AS r CROSS JOIN approvals AS a "
            "ON a.run_id = r.id WHERE r.status = ? AND a.status = ? "
            "ORDER BY a.rowid DESC LIMIT ?) ON approvals.rowid = pick "
            "ORDER BY approvals.rowid DESC",
            [str(RunStatus.WAITING_FOR_APPROVAL), str(ApprovalStatus.PENDING), limit],
        )
        return _waiting(rows, cap, with_goal=True)

    def step_index(self, run_id: str, step_id: str) -> int | None:
        """The step's index in its run (None when there is no such step, or it will not read)."""
        rows = self._query("SELECT idx FROM steps WHERE id = ? AND run_id = ?", (step_id, run_id))
        idx = rows[0]["idx"] if rows else None
        return idx if isinstance(idx, int) and not isinstance(idx, bool) else None

    def run_id_exists(self, run_id: str) -> bool:
        return bool(self._query("SELECT 1 FROM runs WHERE id = ?", (run_id,)))

    def run_ids_starting(self, prefix: str, limit: int) -> list[str]:
        """Up to `limit` run ids starting with `prefix` (no wildcard in it), in order.

        GLOB is case-sensitive and the prefix holds no wildcard, so SQLite reads a
        range of the primary key's index.
        """
        rows = self._query(
            "SELECT id FROM runs WHERE id GLOB ? ORDER BY id LIMIT ?", (prefix + "*", limit)
        )
        return [str(r[0]) for r in rows]

    def steps_with_reasons(self, run_id: str, reasons: Collection[str]) -> list[Step]:
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
        call id may hold) matches no step and is never bound: the self holds only
        UTF-8 text and a recorded decision's reason reads back as such, so no
        recorded `decision.reason` can equal it.
        """
        if isinstance(reasons, str):
            raise TypeError("reasons is a collection of reasons, not one text")
        wanted = set(reasons)
        if any(not isinstance(r, str) or r == "" for r in wanted):
            raise ValueError("each reason looked up must be a non-empty text")
        wanted = {r for r in wanted if _utf8(r)}
        keys = sorted({key for r in wanted for key in _lookup_keys(r) if key})
        found: list[Step] = []
        for start in range(0, len(keys), _REASONS_PER_QUERY):
            chunk = keys[start : start + _REASONS_PER_QUERY]
            marks = ", ".join("?" for _ in chunk)
            # `reason_key != ''` is the partial index's own condition: SQLite uses the
            # index only for a query that states it. No ORDER BY: with one, SQLite may
            # prefer walking the run's steps in order (UNIQUE (run_id, idx)) to sorting
            # the few rows found.
            rows = self._query(
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

    def events_of_types(self, run_id: str, types: Collection[str]) -> list[Event]:
        """The run's events of these types, whole (no cap), in commit order."""
        marks = ",".join("?" for _ in types)
        rows = self._query(
            "SELECT seq, run_id, step_id, at, type, payload_json, hash FROM events "
            f"WHERE run_id = ? AND type IN ({marks}) ORDER BY seq",
            (run_id, *types),
        )
        return [event_from_row(r) for r in rows]

    def run_ids_created_since(
        self, since: datetime, after: RunCursor | None, limit: int
    ) -> list[tuple[RunCursor, str]]:
        """Ids of runs created at or after `since`, oldest first, at most `limit` after
        `after`, each with where it stands in that order."""
        rows = self._query(
            "SELECT rowid, id FROM runs WHERE created_at >= ? AND rowid > ? ORDER BY rowid LIMIT ?",
            (format_time(since), 0 if after is None else after.position, limit),
        )
        return [(RunCursor(int(r[0])), str(r[1])) for r in rows]

    def step_of_run(self, run_id: str, step_id: str) -> Step | None:
        """The run's step `step_id`, whole (no cap), or None when the run has no such step."""
        rows = self._query("SELECT * FROM steps WHERE id = ? AND run_id = ?", (step_id, run_id))
        return step_from_row(rows[0]) if rows else None

    def steps_from(self, run_id: str, first_index: int, limit: int) -> list[Step]:
        """At most `limit` of the run's steps whose index is `first_index` or more, whole
        (no cap), in index order: an old step a running session no longer holds (decision 0098)."""
        if first_index < 0 or limit < 0:
            raise ValueError("first_index and limit must not be negative")
        rows = self._query(
            "SELECT * FROM steps WHERE run_id = ? AND idx >= ? ORDER BY idx LIMIT ?",
            (run_id, first_index, limit),
        )
        return [step_from_row(r) for r in rows]
