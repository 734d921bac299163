"""What the console reads, as plain values: blocking store calls, run on a worker thread.

Every read goes through the existing read models (`agentrt.view`) and the
store's own read methods on one read-only `Store`; nothing here writes. The
app calls these functions with `run_in_threadpool`, so SQLite never blocks
the event loop.

The timeline is built from the run's audit events (the record, not the
mutable rows): one entry per event a person cares about (its title and detail
clipped, with the count of characters left out), with the durations
the events carry (`step.tool_finished.duration_ms`) or imply (a wait from
`approval.requested` to `approval.decided`). Entries hold plain text; the page
escapes it.

The chain's verification (`Store.verify_events()`, the whole chain) is
cached by the chain head it saw: a head that has not moved needs no second pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from .. import view
from .._approval import verify_stored
from .._errors import ApprovalHashError
from .._records import JSON, Approval, ApprovalStatus, Event, RunStatus, VerifyReport
from .._store import Store
from ..trace import compact

TIMELINE_EVENTS = 500
"""Events of a run the timeline shows at most: the latest ones."""
DETAIL = 240
"""Characters of JSON shown in a timeline entry's detail."""
TITLE = 160
"""Characters shown of a timeline entry's title (it may name a model-written tool)."""


# --- the chain ----------------------------------------------------------------------------------


class ChainStatus:
    """`verify_events()` of the whole chain, made at most once every `min_interval` seconds.

    Pages ask for it each time they are drawn, and a moving run redraws its page
    at every commit: without a bound, a busy database would pay a pass of its
    whole chain per page. The page shows when the report was made; a later edit
    of the file shows at the first check after it.
    """

    def __init__(
        self,
        min_interval: float = 10.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lock = threading.Lock()
        self._min_interval = min_interval
        self._monotonic = monotonic
        self._report: VerifyReport | None = None
        self._checked_at: datetime | None = None
        self._when = 0.0

    def get(self, store: Store) -> tuple[VerifyReport, datetime | None]:
        """The report and the wall-clock time it was made."""
        with self._lock:
            if self._report is not None and self._monotonic() - self._when < self._min_interval:
                return self._report, self._checked_at
        checked_at = datetime.now(UTC)
        report = store.verify_events()
        with self._lock:
            self._report, self._checked_at, self._when = report, checked_at, self._monotonic()
        return report, checked_at


# --- the run list -------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexData:
    waiting: view.RunPage
    runs: view.RunPage
    version: int
    asking_total: int = 0
    """Waiting runs with a pending approval: those a person is needed for."""
    decided: dict[str, Approval | None] = field(default_factory=dict)
    """For each shown run that waits with nothing pending, its last decided approval."""

    @property
    def asking(self) -> tuple[view.RunSummary, ...]:
        """The waiting runs shown that ask a person now."""
        return tuple(s for s in self.waiting.runs if s.waiting)

    @property
    def resuming(self) -> tuple[view.RunSummary, ...]:
        """The waiting runs shown whose request was decided: they wait for their program."""
        return tuple(s for s in self.waiting.runs if not s.waiting)


def _decided_of(store: Store, pages: tuple[view.RunPage, ...]) -> dict[str, Approval | None]:
    found: dict[str, Approval | None] = {}
    for page in pages:
        for s in page.runs:
            if waits_for_its_program(s) and s.run.id not in found:
                found[s.run.id] = view.last_decided(store, s.run.id)
    return found


def waits_for_its_program(s: view.RunSummary) -> bool:
    """A run still WAITING_FOR_APPROVAL whose approvals are all decided: a person has
    answered and the program that owns it has not resumed it yet."""
    return s.run.status == RunStatus.WAITING_FOR_APPROVAL and not s.waiting


def index_data(store: Store, *, status: str | None, offset: int, limit: int) -> IndexData:
    """The run list, every piece of it read at one moment (one snapshot, decision 0203)."""
    with store.snapshot():
        waiting = view.run_page(store, limit=view.RUN_PAGE_DEFAULT, status="WAITING_FOR_APPROVAL")
        runs = view.run_page(store, limit=limit, offset=offset, status=status)
        return IndexData(
            waiting=waiting,
            runs=runs,
            version=_changes(store),
            asking_total=store.count_runs_asking_a_person(),
            decided=_decided_of(store, (waiting, runs)),
        )


def index_version(store: Store) -> int:
    """Changes whenever anything is recorded: every state change commits an event."""
    return _changes(store)


def _changes(store: Store) -> int:
    """The sum of the chain partitions' head seqs (one chain: its last seq), which every
    event committed moves (decision 0093)."""
    return sum(seq for seq, _ in store.chain_heads())


# --- a run --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    """A pending approval read whole, as it will be hashed, and whether it still matches."""

    approval: Approval
    reason: str
    hash_error: str = ""


@dataclass
class Entry:
    """One row of the timeline, plain text."""

    seq: int
    at: datetime | None
    kind: str  # the row's look: run, step, decide, policy, tool, ok, fail, wait, person, ...
    title: str
    detail: str = ""
    step: int | None = None
    duration_ms: int | None = None
    width: int = 0  # 0..20: the duration bar, relative to the longest on the page


@dataclass(frozen=True)
class RunData:
    detail: view.RunDetail
    pending: tuple[Pending, ...]
    decided: tuple[Approval, ...]
    timeline: tuple[Entry, ...]
    events_shown: int
    events_total: int
    chain: VerifyReport
    chain_checked_at: datetime | None
    version: int


def run_version(store: Store, run_id: str) -> int:
    """The seq of the run's last event: it moves with every change to the run."""
    return store.last_event_seq(run_id)


def run_state(store: Store, run_id: str) -> dict[str, object]:
    """The small JSON the page polls: version, status, and the approvals pending now (read
    at one moment)."""
    with store.snapshot():
        run = store.get_run(run_id, cap=64)
        pending = view.waiting_approvals(store, [run_id]).get(run_id, [])
        version = run_version(store, run_id)
    return {
        "version": version,
        "status": str(run.status),
        "pending": [{"id": str(w.id), "hash": str(w.hash)} for w in pending],
    }


def run_data(store: Store, run_id: str, chain: ChainStatus) -> RunData:
    """The run page: the run, its lease, approvals and events read at one moment (one
    snapshot, decision 0203); the chain's report is `chain`'s, made apart from it."""
    report, checked_at = chain.get(store)
    with store.snapshot():
        return _run_read(store, run_id, report, checked_at)


def _run_read(
    store: Store, run_id: str, report: VerifyReport, checked_at: datetime | None
) -> RunData:
    detail = view.run_detail(store, run_id, step_limit=1)  # the run; its steps are the timeline
    pending = []
    # Read whole (uncapped), as `choose_approval` does: what is shown is what is hashed.
    for approval in store.pending_approvals(run_id, cap=None):
        error = ""
        try:
            verify_stored(approval)
        except ApprovalHashError as e:
            error = str(e)
        pending.append(Pending(approval, view.approval_reason(store, approval), error))
    decided = tuple(
        a
        for a in store.list_approvals(run_id)
        if a.status in (ApprovalStatus.APPROVED, ApprovalStatus.REJECTED)
    )
    total = store.event_count(run_id)
    after = 0
    if total > TIMELINE_EVENTS:
        after = store.event_seq_from_end(run_id, TIMELINE_EVENTS)
    events = store.list_events(run_id, after_seq=after, limit=TIMELINE_EVENTS)
    return RunData(
        detail=detail,
        pending=tuple(pending),
        decided=decided,
        timeline=tuple(timeline(events)),
        events_shown=len(events),
        events_total=total,
        chain=report,
        chain_checked_at=checked_at,
        version=max((e.seq for e in events), default=0),
    )


# --- the timeline -------------------------------------------------------------------------------


def _get(payload: JSON, key: str) -> JSON:
    return payload.get(key) if isinstance(payload, dict) else None


def _str(payload: JSON, key: str) -> str:
    value = _get(payload, key)
    return value if isinstance(value, str) else ""


def _int(payload: JSON, key: str) -> int | None:
    value = _get(payload, key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _json(value: JSON) -> str:
    return compact(value, DETAIL)


def seconds(ms: int) -> str:
    """`1.234 s`, `2 min 05 s`, `3 h 02 min`: how long, as a person reads it."""
    if ms < 60_000:
        return f"{ms / 1000:.3f} s"
    s = ms // 1000
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _clipped(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters and how many more there are."""
    return text if len(text) <= limit else f"{text[:limit]}… (+{len(text) - limit:,} chars)"


@dataclass
class _Builder:
    entries: list[Entry] = field(default_factory=list)
    step_index: dict[str, int] = field(default_factory=dict)
    waits: dict[str, datetime | None] = field(default_factory=dict)

    def add(self, event: Event, kind: str, title: str, detail: str = "", **kw: int | None) -> None:
        self.entries.append(
            Entry(
                seq=event.seq,
                at=event.at,
                kind=kind,
                title=_clipped(title, TITLE),
                detail=_clipped(detail, DETAIL),
                step=self.step_index.get(event.step_id),
                duration_ms=kw.get("duration_ms"),
            )
        )


def _policy(b: _Builder, e: Event) -> None:
    decision = _get(e.payload, "decision")
    outcome = _str(decision, "outcome")
    reason = _str(decision, "reason")
    if outcome == "allow":
        b.add(e, "policy", "Policy allowed it", reason)
    elif outcome == "require_approval":
        b.add(
            e,
            "policy",
            "Policy asks a person",
            " · ".join(x for x in (_str(decision, "kind"), reason) if x),
        )
    elif outcome == "deny":
        b.add(e, "fail", "Policy denied it", reason)
    else:
        b.add(e, "fail", f"Policy: {outcome or 'unknown'}", reason)


def _decided(b: _Builder, e: Event) -> None:
    p = e.payload
    kind = _str(p, "kind")
    if kind == "tool_call":
        args = _get(p, "args")
        detail = _json(args) if args is not None else _str(p, "invalid_args")
        why = _str(p, "reason")
        b.add(e, "decide", f"Asks to call {_str(p, 'tool')}", detail + (f" — {why}" if why else ""))
    elif kind == "complete":
        b.add(e, "decide", "Says the goal is done", _json(_get(p, "result")))
    elif kind == "fail":
        b.add(e, "fail", "Gives up", _str(p, "message"))
    else:
        b.add(e, "decide", f"Decides: {kind or '?'}", _json(p))


def _tool_finished(b: _Builder, e: Event) -> None:
    p = e.payload
    tool = _str(p, "tool")
    ms = _int(p, "duration_ms")
    late = " (late: the run had already ended, so this was not recorded on the step)"
    suffix = late if _get(p, "late") is True else ""
    if _get(p, "error") is not None:
        b.add(e, "fail", f"{tool} failed{suffix}", _json(_get(p, "error")), duration_ms=ms)
    else:
        b.add(e, "ok", f"{tool} finished{suffix}", _str(p, "summary"), duration_ms=ms)


def _approval_decided(b: _Builder, e: Event) -> None:
    p = e.payload
    status, by, note = _str(p, "status"), _str(p, "by"), _str(p, "note")
    asked = b.waits.get(_str(p, "approval_id"))
    ms = None
    if asked is not None and e.at is not None:
        ms = max(int((e.at - asked).total_seconds() * 1000), 0)
    title = f"{status.capitalize() or 'Decided'} by {by or 'someone'}"
    b.add(e, "person" if status == "approved" else "fail", title, note, duration_ms=ms)


def timeline(events: list[Event]) -> list[Entry]:
    """The events a person cares about, in commit order, with durations and bar widths."""
    b = _Builder()
    for e in events:
        p = e.payload
        t = e.type
        if t == "run.created":
            b.add(e, "run", "Run created", _str(p, "goal"))
        elif t == "run.started":
            continue
        elif t == "step.started":
            index = _int(p, "index")
            if index is not None:
                b.step_index[e.step_id] = index
            b.add(e, "step", f"Step {index if index is not None else '?'} started")
        elif t == "step.decided":
            _decided(b, e)
        elif t == "step.policy":
            _policy(b, e)
        elif t == "step.tool_started":
            again = " again, as approved" if _str(p, "approval_id") else ""
            b.add(e, "tool", f"{_str(p, 'tool')} started{again}", _json(_get(p, "args")))
        elif t == "step.tool_finished":
            _tool_finished(b, e)
        elif t == "step.failed":
            observation = _get(p, "observation")
            b.add(e, "fail", "Step failed", _str(observation, "summary") or _json(observation))
        elif t == "step.interrupted":
            was = _str(p, "previous_status")
            b.add(
                e,
                "warn",
                "Step interrupted",
                f"it was {was} when its process stopped" if was else "",
            )
        elif t == "approval.requested":
            b.waits[_str(p, "approval_id")] = e.at
            b.add(
                e,
                "wait",
                "Waiting for a person",
                f"{_str(p, 'kind')} · hash {_str(p, 'hash')[:16]}…",
            )
        elif t == "approval.decided":
            _approval_decided(b, e)
        elif t == "run.resumed":
            b.add(e, "run", "Resumed by its program")
        elif t == "lease.taken_over":
            proof = _get(p, "proof")
            why = _str(proof, "by")
            b.add(
                e,
                "warn",
                "Taken over from a stopped process",
                f"previous owner {_str(p, 'previous_owner')}" + (f": {why}" if why else ""),
            )
        elif t == "limit.exceeded":
            b.add(e, "fail", f"Limit reached: {_str(p, 'reason')}", _str(p, "detail"))
        elif t == "loop.detected":
            b.add(
                e,
                "fail",
                "Loop detected",
                f"{_int(p, 'repeats')} identical calls of {_str(p, 'tool')}",
            )
        elif t == "model.dispatched":
            b.add(e, "model", f"Model request to {_str(p, 'model') or 'the model'}")
        elif t == "model.completed":
            b.add(e, "model", "Model answered", "", duration_ms=_int(p, "latency_ms"))
        elif t == "model.failed":
            b.add(
                e,
                "fail",
                "Model request failed",
                _str(p, "error"),
                duration_ms=_int(p, "latency_ms"),
            )
        elif t == "run.finished":
            status, reason = _str(p, "status"), _str(p, "reason")
            kind = "done" if status == "COMPLETED" else "fail"
            b.add(
                e,
                kind,
                f"Run {status.lower() or 'ended'}",
                " · ".join(x for x in (reason, _str(p, "detail")) if x),
            )
        else:
            b.add(e, "run", t, _json(p))
    longest = max((x.duration_ms or 0 for x in b.entries), default=0)
    for x in b.entries:
        if x.duration_ms is not None and longest > 0:
            x.width = max(1, round(20 * x.duration_ms / longest))
    return b.entries


__all__ = [
    "ChainStatus",
    "Entry",
    "IndexData",
    "Pending",
    "RunData",
    "index_data",
    "index_version",
    "run_data",
    "run_state",
    "run_version",
    "seconds",
    "timeline",
    "waits_for_its_program",
]
