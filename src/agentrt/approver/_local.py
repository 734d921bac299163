"""The Approver interface and `Local`, its implementation over the SQLite file.

Invariants this module keeps:

- Every decision names the hash of exactly what the person was shown. A
  `Decision` without one is refused at construction (`ApprovalChangedError`),
  and the hash is checked again inside the deciding transaction by the
  operator functions (`agentrt._approval.decide`), which `Local` calls and never
  duplicates.
- What is shown is what the command line shows (`agentrt._render_approval`):
  every field of the hashed object, in hash order, strings bounded as head and
  tail, every text escaped (`trace.sanitize`), never a field left out, because
  the decision covers all of them; and every value shown there in part (a long
  string, a long key) whole, once (`Pending.whole`), so no character of what
  is decided is out of a person's sight.
- An approval whose stored fields no longer hash to its hash is never shown:
  `show` and `pending` raise `ApprovalHashError` instead.
- `by` is a label recorded with the decision (who the caller says decided), not
  an identity this module checked. `by` and `note` are text every store can
  keep: no NUL, no lone surrogate (refused with `ValueError`, one sentence).
- A run or approval id no store can hold (not a string, a NUL, a lone
  surrogate) is `NotFoundError` before any store is asked, the same on SQLite
  and PostgreSQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from os import PathLike
from typing import Any, Protocol, runtime_checkable

from .._approval import verify_stored
from .._clock import Clock, format_time, wall_clock
from .._errors import ApprovalChangedError, NotFoundError
from .._operator import Operator, storable_problem
from .._records import Approval, Run
from .._render_approval import (
    Whole,
    approval_lines,
    hashed_rows,
    interrupted_notice,
    long_text,
    whole_values,
)
from .._store import Store, open_existing
from ..trace import sanitize
from ..view import LIST_TEXT_CAP, approval_reason, approval_tool, choose_approval

PENDING_LIMIT_DEFAULT = 20
PENDING_LIMIT_MAX = 100
BY_MAX = 200
"""Characters of a decision's `by` label."""
NOTE_MAX = 4000
"""Characters of a decision's note."""


def _check_id(what: str, value: object) -> str:
    """`value` as an id a store could hold; else `NotFoundError`: no run or approval has it."""
    if not isinstance(value, str) or storable_problem(value):
        shown = sanitize(value) if isinstance(value, str) else type(value).__name__
        raise NotFoundError(f"no {what} {shown}")
    return value


def _check_label(name: str, value: object, maximum: int, *, one_line: bool) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, not {type(value).__name__}")
    problem = storable_problem(value)
    if problem:
        raise ValueError(f"{name} must be text: {problem}")
    if len(value) > maximum:
        raise ValueError(f"{name} must be at most {maximum} characters, got {len(value)}")
    if one_line:
        if not value.strip():
            raise ValueError(f"{name} must not be empty")
        if sanitize(value) != value:
            raise ValueError(f"{name} must be one line of visible characters: {sanitize(value)}")
    return value


@dataclass(frozen=True)
class Decision:
    """A person's decision on one approval, bound to the hash they were shown.

    `by` is a label (one line of visible characters, at most 200), recorded as
    who decided; `note` is free text of at most 4,000 characters. An empty or
    missing hash is refused with `ApprovalChangedError`: nothing may be decided
    without saying what was seen.
    """

    run_id: str
    approval_id: str
    hash: str
    by: str
    note: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.hash, str) or not self.hash:
            raise ApprovalChangedError(
                f"a decision on approval {self.approval_id} must carry the hash it was shown"
            )
        _check_label("by", self.by, BY_MAX, one_line=True)
        _check_label("note", self.note, NOTE_MAX, one_line=False)


@dataclass(frozen=True)
class Pending:
    """A pending approval as a person is shown it before deciding.

    `fields` are `(path, value)` pairs, one per node of the hashed object, as the
    command line prints them (escaped, long strings as head and tail), `whole` each
    value they show in part, whole; `kind`,
    `tool` and `reason` (why the policy asked) are escaped the same way;
    `expired` says the approval's time ran out, so a decision will be refused
    even though the row still reads pending.
    """

    run_id: str
    approval_id: str
    kind: str
    tool: str
    reason: str
    hash: str
    created_at: datetime | None
    expires_at: datetime | None
    expired: bool
    fields: tuple[tuple[str, str], ...]
    notice: str
    text: str
    """The whole plain rendering (what `?format=text` serves)."""
    whole: tuple[Whole, ...] = ()
    """Every value `fields` shows only in part (a long string, a long key), whole, once:
    what a person approves is readable to its last character (decision 0156)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "approval_id": self.approval_id,
            "kind": self.kind,
            "tool": self.tool,
            "reason": self.reason,
            "hash": self.hash,
            "created_at": format_time(self.created_at),
            "expires_at": format_time(self.expires_at),
            "expired": self.expired,
            "fields": [{"path": path, "value": value} for path, value in self.fields],
            "notice": self.notice,
            "whole": [w.to_json() for w in self.whole],
        }


@runtime_checkable
class Approver(Protocol):
    """Where a person's decisions go: a file on this machine, or a service in front of one."""

    def pending(self, run_id: str, limit: int = PENDING_LIMIT_DEFAULT) -> list[Pending]:
        """The run's pending approvals, oldest first, at most `limit`."""
        ...

    def show(self, run_id: str, approval_id: str) -> Pending:
        """One pending approval as it is to be decided."""
        ...

    def approve(self, decision: Decision) -> Approval:
        """Approve exactly what was shown; executes nothing (the program's resume does)."""
        ...

    def reject(self, decision: Decision) -> Approval:
        """Reject exactly what was shown: the step fails and the run is cancelled."""
        ...

    def cancel(self, run_id: str, by: str, note: str = "") -> Run:
        """Cancel a live run."""
        ...


def end_line(approval_id: str, tool: str) -> str:
    """The last line of an approval's plain rendering."""
    return f"----- end of approval {sanitize(approval_id)} for tool {sanitize(tool) or '-'} -----"


class Local:
    """The Approver over one SQLite file, on the operator functions.

    `now` is the clock the decisions are recorded with and expiry is judged by
    (the wall clock by default). The store is used as given: `Local.open(path)`
    opens an existing file (never creating or migrating one) and `close()`
    closes what it opened.
    """

    def __init__(self, store: Store, *, now: Clock | None = None) -> None:
        self.store = store
        self.now: Clock = now or wall_clock
        self._operator = Operator(store, now=self.now)
        self._owned = False

    @classmethod
    def open(cls, path: str | PathLike[str], *, now: Clock | None = None) -> Local:
        """An Approver over an existing database file."""
        local = cls(open_existing(path), now=now)
        local._owned = True
        return local

    def close(self) -> None:
        if self._owned:
            self.store.close()

    def __enter__(self) -> Local:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Local({self.store!r})"

    # --- reading ----------------------------------------------------------------------------

    def pending(self, run_id: str, limit: int = PENDING_LIMIT_DEFAULT) -> list[Pending]:
        if not isinstance(limit, int) or not 1 <= limit <= PENDING_LIMIT_MAX:
            raise ValueError(f"limit must be between 1 and {PENDING_LIMIT_MAX}, got {limit!r}")
        _check_id("run", run_id)
        self.store.get_run(run_id, cap=LIST_TEXT_CAP)  # NotFoundError for no such run
        now = self.now()
        return [
            self._pending(a, now) for a in self.store.pending_approvals(run_id, cap=None)[:limit]
        ]

    def show(self, run_id: str, approval_id: str) -> Pending:
        _check_id("run", run_id)
        _check_id("approval", approval_id)
        return self._pending(choose_approval(self.store, run_id, approval_id), self.now())

    def _pending(self, approval: Approval, now: datetime) -> Pending:
        verify_stored(approval)
        reason = approval_reason(self.store, approval)
        tool = approval_tool(approval)
        rows = hashed_rows(approval)
        lines = [*approval_lines(approval, reason, verb="decide"), end_line(approval.id, tool)]
        return Pending(
            run_id=approval.run_id,
            approval_id=approval.id,
            kind=sanitize(approval.kind),
            tool=sanitize(tool),
            reason=long_text(reason, 400, 180),
            hash=approval.hash,
            created_at=approval.created_at,
            expires_at=approval.expires_at,
            expired=approval.expires_at is not None and now >= approval.expires_at,
            fields=tuple(rows),
            notice=interrupted_notice(approval),
            text="".join(line + "\n" for line in lines),
            whole=tuple(whole_values(approval)),
        )

    # --- deciding ---------------------------------------------------------------------------

    def approve(self, decision: Decision) -> Approval:
        return self._decide(decision, approve=True)

    def reject(self, decision: Decision) -> Approval:
        return self._decide(decision, approve=False)

    def _decide(self, decision: Decision, *, approve: bool) -> Approval:
        if not isinstance(decision, Decision):
            raise TypeError(f"expected an agentrt.approver.Decision, got {type(decision).__name__}")
        _check_id("run", decision.run_id)
        _check_id("approval", decision.approval_id)
        decide = self._operator.approve if approve else self._operator.reject
        return decide(
            decision.run_id,
            decision.approval_id,
            decision.by,
            decision.note,
            shown_hash=decision.hash,
        )

    def cancel(self, run_id: str, by: str, note: str = "") -> Run:
        _check_id("run", run_id)
        _check_label("by", by, BY_MAX, one_line=True)
        _check_label("note", note, NOTE_MAX, one_line=False)
        return self._operator.cancel(run_id, by, note)


def run_outcome(run: Run) -> dict[str, Any]:
    """A run's state after a decision, small enough for any reply."""
    return {
        "id": run.id,
        "status": str(run.status),
        "reason": str(run.reason),
        "finished_at": format_time(run.finished_at),
    }


def decided_json(approval: Approval) -> dict[str, Any]:
    """A decided approval, without its request (the caller was shown that)."""
    return {
        "approval_id": approval.id,
        "run_id": approval.run_id,
        "status": str(approval.status),
        "hash": approval.hash,
        "decided_at": format_time(approval.decided_at),
        "decided_by": approval.decided_by,
        "note": approval.note,
    }
