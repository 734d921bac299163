"""Read models for operators: run and step summaries, waiting approvals, the approval meant.

Everything here reads bounded pages: a page of runs with the approvals they wait
on and who holds each RUNNING one (each fetched for the whole page in one query,
never one query per run), a page of
one run's steps, the pending approvals of one run, and the newest pending
approvals of all runs. Nothing here writes.

`choose_approval` is the rule for the approval an operator means when they
approve or reject a run: a named approval must be pending; with no name, the run
must have exactly one pending approval; an ambiguous run names its candidates.

Summaries are plain text, not yet escaped: whoever prints them passes them
through `agentrt.trace.sanitize`. Text a read cut at its cap is a
`store.CappedText`; the JSON shapes here write it as the truncated marker
(`{"truncated": true, "length": n, "head": ...}`), never as if it were whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ._approval import decided_words, expired_error
from ._canonical import to_text
from ._capped import TEXT_CAP
from ._clock import duration_to_ms, format_time
from ._errors import (
    AmbiguousRunIdError,
    NotFoundError,
    NotPendingError,
    RunStateError,
)
from ._lease import prove_dead
from ._records import (
    JSON,
    MCP_PROXY_ORIGIN,
    RECOVERABLE_ORIGINS,
    Approval,
    ApprovalStatus,
    DecisionKind,
    Lease,
    Observation,
    PolicyDecision,
    PolicyOutcome,
    Run,
    RunStatus,
    Step,
)
from ._store import Store
from ._store._records import WaitingRow
from .trace import text_json

RUN_PAGE_DEFAULT = 50
RUN_PAGE_MAX = 1000
STEP_PAGE_DEFAULT = 50
PENDING_PAGE_DEFAULT = 50
PENDING_PAGE_MAX = 1000
STEP_PAGE_MAX = 1000
LIST_TEXT_CAP = 4096
"""Characters of each text column a page of runs reads: a goal is shown clipped in a list."""
SUMMARY_LIMIT = 160
"""Characters of a step's decision, policy or observation summary."""
RUN_PREFIX_MIN = 8
"""The fewest characters of a run id the command accepts in place of the whole id."""
RUN_PREFIX_CANDIDATES = 5
"""Runs an ambiguous prefix names."""
RUN_ID_LENGTH = 32
"""Characters of a whole run id: text this long is never read as a prefix."""
_HEX = re.compile(r"[0-9a-f]+")
_FIELD_CAP = 256  # ids, kinds, tool names and hashes of waiting approvals


class AmbiguousApprovalError(RunStateError):
    """The run waits on more than one approval and none was named; `candidates` lists them."""

    def __init__(self, run_id: str, candidates: Sequence[Approval]) -> None:
        self.run_id = run_id
        self.candidates = tuple(candidates)
        names = ", ".join(f"{a.id} ({a.kind})" for a in self.candidates)
        super().__init__(
            f"run {run_id} waits on {len(self.candidates)} pending approvals: {names}; "
            "name the one you mean"
        )


# --- records ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WaitingApproval:
    """A pending approval as a list shows it: enough to recognise it, not to decide it."""

    id: str
    run_id: str
    kind: str
    tool: str
    hash: str
    created_at: datetime | None
    expires_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": text_json(self.id),
            "kind": text_json(self.kind),
            "tool": text_json(self.tool),
            "hash": text_json(self.hash),
            "created_at": format_time(self.created_at),
            "expires_at": format_time(self.expires_at),
        }


@dataclass(frozen=True)
class RunSummary:
    """One run with its totals and the approvals it waits on."""

    run: Run
    waiting: tuple[WaitingApproval, ...] = ()
    lease: LeaseView | None = None
    """Who holds the run, judged when it was read: None unless it is RUNNING."""

    @property
    def tokens(self) -> int:
        """Input plus output tokens (cached input is part of the input)."""
        return self.run.input_tokens + self.run.output_tokens

    def to_json(self) -> dict[str, Any]:
        out = run_json(self.run)
        out["tokens"] = self.tokens
        out["waiting"] = [w.to_json() for w in self.waiting]
        out["lease"] = None if self.lease is None else self.lease.to_json()
        return out


@dataclass(frozen=True)
class RunPage:
    """A page of runs, newest first, and how many match in all."""

    runs: tuple[RunSummary, ...]
    total: int
    offset: int
    limit: int
    status: str | None = None

    @property
    def next_offset(self) -> int | None:
        """The offset of the next page, None when this page is the last."""
        following = self.offset + len(self.runs)
        return following if following < self.total else None


@dataclass(frozen=True)
class StepSummary:
    """One step as a line: what was decided, what the policy said, what the world answered."""

    step: Step
    decision: str
    policy: str
    observation: str


@dataclass(frozen=True)
class StepPage:
    """A page of one run's steps in index order; `total` is the run's step count."""

    steps: tuple[StepSummary, ...]
    total: int
    offset: int
    limit: int


@dataclass(frozen=True)
class RunDetail:
    """What `show` prints: the run, the approvals it waits on (whole), a page of steps."""

    summary: RunSummary
    waiting: tuple[Approval, ...]
    steps: StepPage


# --- JSON shapes --------------------------------------------------------------------------------


def run_json(run: Run) -> dict[str, Any]:
    """A run as a JSON object with the stored column names' meaning.

    A text column the read cut at its cap (a long goal, say) is the truncated
    marker `{"truncated": true, "length": n, "head": ...}`, as a capped JSON value is.
    """
    out: dict[str, Any] = {
        "id": text_json(run.id),
        "goal": text_json(run.goal),
        "status": text_json(run.status),
        "origin": text_json(run.origin),
        "reason": text_json(run.reason),
        "reason_detail": text_json(run.reason_detail),
        "limits": run.limits.to_json(),
        "step_count": run.step_count,
        "created_at": format_time(run.created_at),
        "started_at": format_time(run.started_at),
        "finished_at": format_time(run.finished_at),
        "result": run.result,
        **run.usage_json(),
    }
    if run.decode_error:
        out["decode_error"] = run.decode_error
    return out


def step_json(step: Step) -> dict[str, Any]:
    """A step as the JSON the command and the console print.

    Times as text; `decode_error` only when set.
    """
    out: dict[str, Any] = {
        "id": text_json(step.id),
        "index": step.index,
        "status": text_json(step.status),
        "decision": None if step.decision is None else step.decision.to_json(),
        "policy": None if step.policy is None else step.policy.to_json(),
        "observation": None if step.observation is None else step.observation.to_json(),
        "started_at": format_time(step.started_at),
        "finished_at": format_time(step.finished_at),
        "spec_hash": text_json(step.spec_hash),
        "policy_id": text_json(step.policy_id),
    }
    if step.decode_error:
        out["decode_error"] = step.decode_error
    return out


def approval_json(approval: Approval) -> dict[str, Any]:
    """An approval as the JSON the command and the console print.

    Times as text; `decode_error` only when set.
    """
    out: dict[str, Any] = {
        "id": text_json(approval.id),
        "run_id": text_json(approval.run_id),
        "step_id": text_json(approval.step_id),
        "kind": text_json(approval.kind),
        "capability": approval.capability,
        "presentation": approval.presentation,
        "request": approval.request,
        "hash": text_json(approval.hash),
        "status": text_json(approval.status),
        "created_at": format_time(approval.created_at),
        "expires_at": format_time(approval.expires_at),
        "decided_at": format_time(approval.decided_at),
        "decided_by": text_json(approval.decided_by),
        "note": text_json(approval.note),
    }
    if approval.decode_error:
        out["decode_error"] = approval.decode_error
    return out


# --- summaries ----------------------------------------------------------------------------------


def _clip(text: str, limit: int = SUMMARY_LIMIT) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… (+{len(text) - limit} chars)"


def _json_text(value: JSON, limit: int) -> str:
    try:
        return _clip(to_text(value), limit)
    except (ValueError, TypeError):  # a decoded value is JSON; be safe with anything else
        return _clip(repr(value), limit)


def _content_text(content: JSON, key: str) -> str:
    """`content[key]` when content is an object holding that text, else the content as JSON."""
    if isinstance(content, dict) and isinstance(content.get(key), str):
        return str(content[key])
    return _json_text(content, SUMMARY_LIMIT)


def decision_summary(step: Step) -> str:
    """A step's decision in one bounded line (`tool {args}`, `complete ...`, `fail: ...`)."""
    d = step.decision
    if d is None:
        return "-"
    if d.kind == DecisionKind.TOOL_CALL:
        if d.invalid_args is not None:
            return _clip(f"{d.tool} <args not usable JSON, {len(d.invalid_args)} chars>")
        args = "{}" if d.args is None else _json_text(d.args, SUMMARY_LIMIT)
        return _clip(f"{d.tool} {args}")
    if d.kind == DecisionKind.COMPLETE:
        if d.invalid_result is not None:
            return f"complete <result not usable JSON, {len(d.invalid_result)} chars>"
        return "complete" if d.result is None else _clip(f"complete {_json_text(d.result, 140)}")
    if d.kind == DecisionKind.FAIL:
        return _clip(f"fail: {d.message}")
    detail = d.message or d.reason
    return _clip(f"{d.kind}: {detail}" if detail else str(d.kind))


def policy_summary(policy: PolicyDecision | None) -> str:
    """A policy's verdict in one bounded line (`allow`, `approval: KIND`, `deny: REASON`)."""
    if policy is None:
        return "-"
    if policy.outcome == PolicyOutcome.ALLOW:
        return "allow"
    if policy.outcome == PolicyOutcome.REQUIRE_APPROVAL:
        return _clip(f"approval: {policy.kind}" if policy.kind else "approval")
    if policy.reason:
        return _clip(f"{policy.outcome}: {policy.reason}")
    return str(policy.outcome)


_OBSERVATION_KEYS = {
    "tool_error": "error",
    "policy_denied": "reason",
    "invalid_decision": "error",
}


def observation_summary(observation: Observation | None) -> str:
    """An observation in one bounded line (`KIND: text`), or `-`."""
    if observation is None:
        return "-"
    key = _OBSERVATION_KEYS.get(str(observation.kind))
    if key is not None:
        text = _content_text(observation.content, key)
    elif observation.summary:
        text = observation.summary
    else:
        text = _json_text(observation.content, SUMMARY_LIMIT)
    return _clip(f"{observation.kind}: {text}")


def step_summary(step: Step) -> StepSummary:
    """A step's decision, verdict and observation as one row of bounded lines."""
    decision = decision_summary(step)
    if step.decode_error:
        decision = f"{decision} [unreadable: {_clip(step.decode_error, 80)}]"
    return StepSummary(
        step=step,
        decision=decision,
        policy=policy_summary(step.policy),
        observation=observation_summary(step.observation),
    )


# --- queries ------------------------------------------------------------------------------------


def _waiting(row: WaitingRow) -> WaitingApproval:
    return WaitingApproval(
        id=row.id,
        run_id=row.run_id,
        kind=row.kind,
        tool=row.tool,
        hash=row.hash,
        created_at=row.created_at,
        expires_at=row.expires_at,
    )


def waiting_approvals(store: Store, run_ids: Sequence[str]) -> dict[str, list[WaitingApproval]]:
    """The pending approvals of every run in `run_ids`, in one query, in creation order."""
    found: dict[str, list[WaitingApproval]] = {run_id: [] for run_id in run_ids}
    if not run_ids:
        return found
    if len(run_ids) > RUN_PAGE_MAX:
        raise ValueError(f"at most {RUN_PAGE_MAX} runs at a time")
    rows = store.pending_approvals_of(run_ids, _FIELD_CAP)
    for row in rows:
        waiting = _waiting(row)
        found.setdefault(waiting.run_id, []).append(waiting)
    return found


@dataclass(frozen=True)
class PendingApproval:
    """A pending approval in the list of all runs': the approval and its run's goal."""

    approval: WaitingApproval
    goal: str

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": text_json(self.approval.run_id),
            **self.approval.to_json(),
            "goal": text_json(self.goal),
        }


@dataclass(frozen=True)
class PendingPage:
    """The newest pending approvals of all runs, at most `limit`; `more` if others wait."""

    approvals: tuple[PendingApproval, ...]
    limit: int
    more: bool


def pending_page(store: Store, *, limit: int = PENDING_PAGE_DEFAULT) -> PendingPage:
    """Every run's pending approvals, newest first, at most `limit` (one indexed query).

    The same read as `Store.pending_approvals()` with no run id, cut for a list.
    """
    _check_page(limit, 0, PENDING_PAGE_MAX)
    rows = store.newest_pending_approvals(limit + 1, _FIELD_CAP, LIST_TEXT_CAP)
    found = tuple(PendingApproval(_waiting(row), row.goal) for row in rows)
    return PendingPage(approvals=found[:limit], limit=limit, more=len(found) > limit)


def _check_page(limit: int, offset: int, maximum: int) -> None:
    if not 1 <= limit <= maximum:
        raise ValueError(f"limit must be between 1 and {maximum}, got {limit}")
    if offset < 0:
        raise ValueError(f"offset must not be negative, got {offset}")


def run_page(
    store: Store,
    *,
    limit: int = RUN_PAGE_DEFAULT,
    offset: int = 0,
    status: str | None = None,
    wall: Callable[[], datetime] | None = None,
) -> RunPage:
    """A page of runs, newest first, with the approvals each waits on and who holds each
    RUNNING one (`lease_views`): 2 queries and a count, and, when the page holds a RUNNING
    run, one read of their leases and one of the lease clock."""
    _check_page(limit, offset, RUN_PAGE_MAX)
    if status is not None:
        status = str(RunStatus(status))
    runs = store.list_runs(limit, offset, status, cap=LIST_TEXT_CAP)
    waiting = waiting_approvals(store, [r.id for r in runs])
    leases = lease_views(store, runs, wall=wall or _utc_now)
    return RunPage(
        runs=tuple(RunSummary(r, tuple(waiting.get(r.id, ())), leases.get(r.id)) for r in runs),
        total=store.count_runs(status),
        offset=offset,
        limit=limit,
        status=status,
    )


def step_page(
    store: Store, run: Run, *, limit: int = STEP_PAGE_DEFAULT, offset: int | None = None
) -> StepPage:
    """A page of the run's steps; with no offset, the latest `limit` steps."""
    total = max(run.step_count, 0)
    if offset is None:
        offset = max(total - limit, 0)
    _check_page(limit, offset, STEP_PAGE_MAX)
    steps = store.list_steps(run.id, limit, offset)
    return StepPage(
        steps=tuple(step_summary(s) for s in steps),
        # step_count counts claimed steps; rows are the truth if they ever disagree.
        total=max(total, offset + len(steps)),
        offset=offset,
        limit=limit,
    )


def run_detail(
    store: Store,
    run_id: str,
    *,
    step_limit: int = STEP_PAGE_DEFAULT,
    step_offset: int | None = None,
    wall: Callable[[], datetime] | None = None,
) -> RunDetail:
    """The run, the approvals it waits on, who holds it if it is RUNNING (`lease_view`), and
    one page of its steps. NotFoundError if none."""
    run = store.get_run(run_id, cap=TEXT_CAP)
    waiting = tuple(store.pending_approvals(run_id))
    summary = RunSummary(
        run,
        tuple(
            WaitingApproval(
                id=a.id,
                run_id=a.run_id,
                kind=a.kind,
                tool=approval_tool(a),
                hash=a.hash,
                created_at=a.created_at,
                expires_at=a.expires_at,
            )
            for a in waiting
        ),
        lease_view(store, run, wall=wall or _utc_now),
    )
    return RunDetail(
        summary=summary,
        waiting=waiting,
        steps=step_page(store, run, limit=step_limit, offset=step_offset),
    )


def approval_tool(approval: Approval) -> str:
    """The name of the tool an approval's request calls, `''` if the request has none."""
    request = approval.request
    if isinstance(request, dict):
        spec = request.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            return str(spec["name"])
    return ""


def approval_reason(store: Store, approval: Approval) -> str:
    """Why the policy asked for this approval (its step's policy reason), `''` if unknown."""
    idx = store.step_index(approval.run_id, approval.step_id)
    if not isinstance(idx, int):
        return ""
    steps = store.list_steps(approval.run_id, 1, idx)
    # The page is by position: with a gap in the indexes it holds another step.
    if not steps or steps[0].id != approval.step_id or steps[0].policy is None:
        return ""
    return steps[0].policy.reason


def choose_approval(store: Store, run_id: str, approval_id: str | None = None) -> Approval:
    """The approval an operator means, read whole (uncapped) so that it can be hashed.

    A named approval must exist on the run (NotFoundError) and be pending
    (`NotPendingError`, or `ApprovalExpiredError` when it expired). With no name
    the run must wait on exactly one: none is a `RunStateError` saying what the
    run is doing, several an `AmbiguousApprovalError` naming them.
    """
    run = store.get_run(run_id, cap=LIST_TEXT_CAP)
    if approval_id is not None:
        approval = store.get_approval(run_id, approval_id)
        if approval.status == ApprovalStatus.EXPIRED:
            raise expired_error(approval)
        if approval.status != ApprovalStatus.PENDING:
            raise NotPendingError(
                f"approval {approval_id} of run {run_id} was already "
                f"{decided_words(approval)}; nothing was decided"
            )
        return approval
    pending = store.pending_approvals(run_id, cap=None)
    if not pending:
        last = last_decided(store, run_id)
        if run.status == RunStatus.WAITING_FOR_APPROVAL:
            if last is not None:
                raise RunStateError(
                    f"run {run_id} is waiting, but no approval of it is pending: approval "
                    f"{last.id} was already {decided_words(last)}, and the run waits for its "
                    "program to resume it; nothing was decided"
                )
            raise RunStateError(f"run {run_id} is waiting, but no approval of it is pending")
        said = f" (approval {last.id} was {decided_words(last)})" if last is not None else ""
        lease = lease_view(store, run)  # a run killed mid-call reads RUNNING: say who holds it
        held = "" if lease is None else f"; its lease: {lease.words()}"
        raise RunStateError(f"run {run_id} is {run.status}; it waits on no approval{said}{held}")
    if len(pending) > 1:
        raise AmbiguousApprovalError(run_id, pending)
    return pending[0]


def last_decided(store: Store, run_id: str) -> Approval | None:
    """The run's most recently requested approval that a person decided, None if none was."""
    decided = (ApprovalStatus.APPROVED, ApprovalStatus.REJECTED)
    found = [a for a in store.list_approvals(run_id, cap=LIST_TEXT_CAP) if a.status in decided]
    return found[-1] if found else None


def resolve_run_id(store: Store, text: str) -> str:
    """The run an operator means by `text`: its whole id, or a unique prefix of it.

    A prefix must be at least `RUN_PREFIX_MIN` lowercase hex characters (what
    run ids are made of; a shorter one that is no whole id is refused as too
    short, whether or not it would match); one that matches several runs is refused
    (`AmbiguousRunIdError`, naming up to `RUN_PREFIX_CANDIDATES` of them), one
    that matches none is a `NotFoundError`. Read through the primary key's index.
    """
    if store.run_id_exists(text):
        return text
    if len(text) >= RUN_ID_LENGTH:
        raise NotFoundError(f"no run {text!r}")
    if _HEX.fullmatch(text) and len(text) < RUN_PREFIX_MIN:
        raise NotFoundError(
            f"run id prefix {text} is too short ({len(text)} characters): give at least "
            f"{RUN_PREFIX_MIN} characters of the run id"
        )
    if not _HEX.fullmatch(text):
        raise NotFoundError(
            f"no run {text!r} (a run id may be shortened to a unique prefix of at least "
            f"{RUN_PREFIX_MIN} of its hex characters)"
        )
    # GLOB is case-sensitive and `text` holds no wildcard, so SQLite reads a range of the index.
    ids = store.run_ids_starting(text, RUN_PREFIX_CANDIDATES + 1)
    if not ids:
        raise NotFoundError(f"no run id starts with {text}")
    if len(ids) > 1:
        more = len(ids) > RUN_PREFIX_CANDIDATES
        raise AmbiguousRunIdError(text, ids[:RUN_PREFIX_CANDIDATES], more)
    return ids[0]


def format_cost(micros: int) -> str:
    """Micro-dollars as dollars with six decimals: `$0.001200`."""
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(micros), 1_000_000)
    return f"{sign}${whole:,}.{frac:06d}"


def format_duration(value: timedelta) -> str:
    """A duration as seconds with millisecond precision: `1.250s`."""
    ms = duration_to_ms(value)
    return f"{ms // 1000}.{ms % 1000:03d}s"


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class LeaseView:
    """Who holds a RUNNING run, judged now: `state` is `held`, `lapsed`, `owner_gone` (the
    holder's process is provably gone from this host, `proof` says how) or `none`.

    A run killed mid-call reads RUNNING exactly as a live one does; this tells a person
    whether to wait or to restart the program, whose resume then takes the run over (and
    asks them about an interrupted call)."""

    owner: str
    expires_at: str
    state: str
    proof: str = ""
    lapses_in: timedelta | None = field(default=None, compare=False)
    """For a lease still running (`held`, `owner_gone`): how long after it was judged it
    lapses, by the lease clock; no event marks that moment, so a page that shows the lease
    draws itself again then (the console, decision 0203). Not part of `to_json`."""

    def words(self) -> str:
        """The lease in one plain line (not yet escaped)."""
        if self.state == "none":
            return "nobody holds it: a resume takes the run over at once"
        if self.state == "lapsed":
            return f"held by {self.owner}, lapsed at {self.expires_at}: a resume takes the run over"
        if self.state == "owner_gone":
            return (
                f"held by {self.owner} until {self.expires_at}, but its process is gone "
                f"({self.proof}): a resume takes the run over at once"
            )
        return f"held by {self.owner} until {self.expires_at}"

    def to_json(self) -> dict[str, str]:
        return {"owner": self.owner, "expires_at": self.expires_at, "state": self.state}


def lease_view(
    store: Store, run: Run, *, wall: Callable[[], datetime] = _utc_now
) -> LeaseView | None:
    """The lease of `run` as `LeaseView`, None unless the run is RUNNING. An expiry is judged
    by the store's lease clock (`wall` on SQLite, the server's on PostgreSQL); a holder's
    death only by the facts a takeover accepts (`prove_dead`: this host, no such pid, ...)."""
    if run.status != RunStatus.RUNNING:
        return None
    return lease_views(store, [run], wall=wall).get(run.id, LeaseView("", "", "none"))


def lease_views(
    store: Store, runs: Sequence[Run], *, wall: Callable[[], datetime] = _utc_now
) -> dict[str, LeaseView]:
    """`lease_view` of each RUNNING run of `runs` (a page of them), by run id: their leases
    in one read (`Store.leases_of`) and the lease clock read once, none of either when no
    run is RUNNING or nobody holds any. Runs of other statuses are left out."""
    running = [r.id for r in runs if r.status == RunStatus.RUNNING]
    if not running:
        return {}
    if len(running) > RUN_PAGE_MAX:
        raise ValueError(f"at most {RUN_PAGE_MAX} runs at a time")
    leases = store.leases_of(running)
    now = store.lease_now(wall) if any(lease.owner for lease in leases.values()) else None
    found: dict[str, LeaseView] = {}
    for run_id, lease in leases.items():
        if not lease.owner or now is None:
            found[run_id] = LeaseView("", "", "none")
        else:
            found[run_id] = _judged(lease, now)
    return found


def _judged(lease: Lease, now: datetime) -> LeaseView:
    """A held lease judged at `now` (the store's lease clock): lapsed, its process provably
    gone from this host (`prove_dead`), or held."""
    until = format_time(lease.expires_at)
    if lease.expires_at is not None and lease.expires_at <= now:
        return LeaseView(lease.owner, until, "lapsed")
    left = None if lease.expires_at is None else lease.expires_at - now
    proof = prove_dead(json.dumps(dict(lease.holder))) if lease.holder else None
    if proof is not None:
        gone = f"pid {proof['pid']}: {proof['proof']}"
        return LeaseView(lease.owner, until, "owner_gone", gone, lapses_in=left)
    return LeaseView(lease.owner, until, "held", lapses_in=left)


def what_continues(origin: str) -> str:
    """What goes on with an approved run, by who began it (`Run.origin`), as the end of a
    sentence: a Driver resumes only its own and a plain Gate's runs (decision 0049), so a
    person is never sent to `Driver.resume` for another program's run. Plain text."""
    if origin in RECOVERABLE_ORIGINS:
        return (
            "the program that owns it resumes it: Driver.resume (or Driver.recover) or Gate.attach."
        )
    if origin == MCP_PROXY_ORIGIN:
        return (
            "the MCP host makes the identical call again through agentrt-proxy; "
            "a Driver does not resume it."
        )
    if origin.startswith("adapter:"):
        return (
            f"the program that began it ({origin!r}) continues that framework run "
            "(one waiting for a person goes on by itself); a Driver does not resume it."
        )
    return (
        f"the program that began it ({origin!r}) continues it with Gate.attach; "
        "a Driver does not resume it."
    )


__all__ = [
    "LIST_TEXT_CAP",
    "PENDING_PAGE_DEFAULT",
    "PENDING_PAGE_MAX",
    "RUN_PAGE_DEFAULT",
    "RUN_PAGE_MAX",
    "RUN_PREFIX_MIN",
    "STEP_PAGE_DEFAULT",
    "STEP_PAGE_MAX",
    "AmbiguousApprovalError",
    "LeaseView",
    "PendingApproval",
    "PendingPage",
    "RunDetail",
    "RunPage",
    "RunSummary",
    "StepPage",
    "StepSummary",
    "WaitingApproval",
    "approval_json",
    "approval_reason",
    "approval_tool",
    "choose_approval",
    "decision_summary",
    "format_cost",
    "format_duration",
    "last_decided",
    "lease_view",
    "lease_views",
    "observation_summary",
    "pending_page",
    "policy_summary",
    "resolve_run_id",
    "run_detail",
    "run_json",
    "run_page",
    "step_json",
    "step_page",
    "step_summary",
    "waiting_approvals",
    "what_continues",
]
