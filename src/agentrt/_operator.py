"""What a person does to a run from outside its loop: approve, reject, cancel.

These are plain synchronous functions, one transaction each, on the wall clock
(or an injected one through `Operator`). They never need the run's lease:
deciding an approval touches a WAITING run, which no loop leases (an attach
may hold it while it judges an approved request, decision 0032; a decision is
made before that, on a pending approval), and cancel closes any non-terminal
run, whoever executes or holds it; a loop still running finds out at its next
write.
"""

from __future__ import annotations

from ._approval import decide
from ._clock import Clock, wall_clock
from ._errors import NotFoundError, RunFinishedError, RunStateError
from ._events import Observer, deliver
from ._records import Approval, Run, RunStatus
from ._store import Store
from .trace import sanitize

_STATUSES = {str(s) for s in RunStatus}


def storable_problem(text: str) -> str:
    """Why no store can keep `text` ("" when it can): a NUL, or a lone surrogate."""
    if "\x00" in text:
        return f"it holds a NUL character at position {text.index(chr(0)) + 1}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"it holds {sanitize(text[exc.start])} at position {exc.start + 1}, "
            "which is not a character (bytes that are not UTF-8?)"
        )
    return ""


def _recordable(name: str, value: object) -> None:
    """`by` and `note` as a store can keep them (either backend); else ValueError, one sentence."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, not {type(value).__name__}")
    if name == "by" and not value.strip():
        # Who decided is in the record for good: nobody is not an answer.
        raise ValueError("by must name who decides (a person or a system), not be blank")
    problem = storable_problem(value)
    if problem:
        raise ValueError(f"{name} cannot be recorded: {problem}")


class Operator:
    """The operator functions bound to a store, an observer and a clock."""

    def __init__(self, store: Store, observer: Observer | None = None, now: Clock | None = None):
        self.store = store
        self.observer = observer
        self.now = now or wall_clock

    def approve(
        self, run_id: str, approval_id: str, by: str, note: str = "", shown_hash: str | None = None
    ) -> Approval:
        """Approve a pending approval; executes nothing (a resume does)."""
        return self._decide(run_id, approval_id, True, by, note, shown_hash)

    def reject(
        self, run_id: str, approval_id: str, by: str, note: str = "", shown_hash: str | None = None
    ) -> Approval:
        """Reject a pending approval: the step fails and the run is cancelled."""
        return self._decide(run_id, approval_id, False, by, note, shown_hash)

    def _decide(
        self,
        run_id: str,
        approval_id: str,
        approve: bool,
        by: str,
        note: str,
        shown_hash: str | None,
    ) -> Approval:
        _recordable("by", by)
        _recordable("note", note)
        approval, events = decide(
            self.store,
            run_id,
            approval_id,
            approve=approve,
            by=by,
            note=note,
            shown_hash=shown_hash,
            now=self.now(),
        )
        deliver(self.observer, events)
        return approval

    def cancel(self, run_id: str, by: str, note: str = "") -> Run:
        """Cancel any non-terminal run, without its lease."""
        _recordable("by", by)
        _recordable("note", note)
        now = self.now()
        with self.store.transaction() as tx:
            guarded = tx.lock_run(run_id)
            if guarded is None:
                raise NotFoundError(f"no run {run_id}")
            stored = guarded.lease.status
            status = RunStatus(stored) if stored in _STATUSES else None
            refused = f"run {run_id} is {stored}; only a live run is cancelled"
            if status is not None and status.terminal:
                raise RunFinishedError(refused)
            if status is None:
                raise RunStateError(refused)
            run = tx.cancel_run(run_id, by, note, now)
            events = list(tx.events)
        deliver(self.observer, events)
        return run


def approve(
    store: Store,
    run_id: str,
    approval_id: str,
    by: str,
    note: str = "",
    shown_hash: str | None = None,
) -> Approval:
    """Approve a pending approval as `by`; executes nothing (a resume does).

    With `shown_hash`, refused unless it is still the approval's hash (`Operator.approve`).
    """
    return Operator(store).approve(run_id, approval_id, by, note, shown_hash)


def reject(
    store: Store,
    run_id: str,
    approval_id: str,
    by: str,
    note: str = "",
    shown_hash: str | None = None,
) -> Approval:
    """Reject a pending approval as `by`: the step fails and the run is cancelled.

    With `shown_hash`, refused unless it is still the approval's hash (`Operator.reject`).
    """
    return Operator(store).reject(run_id, approval_id, by, note, shown_hash)


def cancel(store: Store, run_id: str, by: str, note: str = "") -> Run:
    """Cancel any run that has not finished, as `by`, without its lease."""
    return Operator(store).cancel(run_id, by, note)


__all__ = ["Operator", "approve", "cancel", "reject", "storable_problem"]
