"""One judgement of "can this run be continued by me": attach, resume and recover share it.

`judge` answers for one look at a run (`RunFacts`: its status, origin and,
where the look read it, its lease) and one asker (`Continuer`: the lease owner,
the origins it continues, the tools it registers, the runs it executes now).
It writes nothing and reads the store only through what it is handed, each
read made only when a rule needs it, in the order the rules apply:

1. A run neither RUNNING nor WAITING_FOR_APPROVAL has nothing to continue.
2. A run begun by an origin the asker does not continue (a Driver continues
   what a Driver or a plain Gate began, docs/decisions/0049) is the program's
   that began it. An origin that could not be read (`''`) is not refused here:
   the run's decode error fails it when it is continued.
3. RUNNING and executed by the asker now → refused (its loop, or a tool thread
   its cancelled loop left running, still holds it).
4. RUNNING: taken over when `check_live_lease` proves the previous owner gone
   (no lease, an expired one, the asker's own, a holder provably dead on this
   host); a live lease of another owner is never stolen.
5. WAITING: its latest approval decides. None on record, or decided other
   than approved → resumed (the resume says what is wrong with it); pending
   past its expiry (by the asker's clock) → settled as expired; pending →
   refused; approved → resumed under the lease rule of 4 (the resume holds the
   waiting run's lease, decision 0032).
6. When the asker chose the run itself (`recover`), a run started with a tool
   it does not register (by name) belongs to another program.

A look may leave part of the judgement to a later look that reads more: a
snapshot without the lease (`RunFacts.lease` None) judges no lease, and one
without the approval (`approval` None) judges no approval; the takeover and
the hold judge them again inside their transaction, on the run as locked.

The answer is a `Continuable` (how: take over with the proof, resume waiting,
settle an expired approval; and why, as `recover()` reports it) or a
`Refusal` (the exception an attach or a resume raises, and the sentence
`recover()` reports the run skipped with).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from ._clock import format_time
from ._errors import ForeignRunError, RunLeasedError, RunStateError
from ._lease import check_live_lease
from ._records import ENDED_STATUSES, Approval, ApprovalStatus, RunStatus
from ._store._records import ApprovalState, LeaseState

EXECUTING = "this driver is executing it now"
"""Why `recover()` skips a run its own driver is executing."""


class Facts(Protocol):
    """What one look at a run saw: `RunCandidate` (recovery's page) is one."""

    @property
    def run_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def origin(self) -> str: ...
    @property
    def lease(self) -> LeaseState | None: ...


@dataclass(frozen=True)
class RunFacts:
    """A look at a run made by an attach or a transaction (`lease` None: not read)."""

    run_id: str
    status: str
    origin: str
    lease: LeaseState | None = None


def executes_none(run_id: str) -> bool:
    """An asker that executes no run (an attach, having held the run for itself)."""
    return False


@dataclass(frozen=True)
class Continuer:
    """Who asks: the lease owner, the origins and tools it continues, what it runs now.

    `origins` None continues any origin (a plain Gate); `tool_names` None asks
    nothing of the run's tools. `executing` names runs this asker is executing
    now and so must not begin again; an attach, which has already held the run
    for itself, asks with none.
    """

    owner: str
    origins: frozenset[str] | None = None
    tool_names: frozenset[str] | None = None
    executing: Callable[[str], bool] = field(default=executes_none, compare=False)


class How(StrEnum):
    """How a run may be continued."""

    TAKE_OVER = "take_over"  # a RUNNING run whose owner is gone: `proof` says how we know
    RESUME_WAITING = "resume_waiting"  # a WAITING run: its latest approval is settled
    SETTLE_EXPIRED = "settle_expired"  # a WAITING run whose pending approval expired


@dataclass(frozen=True)
class Continuable:
    """The run may be continued, `how`; `why` in recover()'s words; the lease's proof."""

    how: How
    why: str
    proof: dict[str, Any] | None = None


@dataclass(frozen=True)
class Refusal:
    """The run is not this asker's to continue: what a resume raises, what recover says."""

    error: RunStateError
    skipped: str


Judgement = Continuable | Refusal


def judge(
    facts: Facts,
    me: Continuer,
    *,
    lease_now: Callable[[], datetime],
    now: Callable[[], datetime],
    approval: Callable[[], ApprovalState | None] | None = None,
    tools: Callable[[], Sequence[str | None]] | None = None,
    nothing: str = "there is nothing to resume",
) -> Judgement:
    """Whether `me` may continue the run `facts` saw, and how; or why not.

    `lease_now` is the store's lease clock, `now` the asker's own (an
    approval's expiry is its business); `approval` reads the latest approval
    of a waiting run, `tools` the names of the tools the run was started with
    (asked only of a run the asker chose itself). Each is called at most once,
    only when a rule needs it; what they raise is the caller's to report.
    `nothing` ends the refusal of a run with nothing to continue.
    """
    run_id, status = facts.run_id, facts.status
    if status not in (RunStatus.RUNNING, RunStatus.WAITING_FOR_APPROVAL):
        return Refusal(
            RunStateError(f"run {run_id} is {status}; {nothing}"),
            f"it changed meanwhile: it is now {status}",
        )
    if me.origins is not None and facts.origin and facts.origin not in me.origins:
        return Refusal(ForeignRunError(run_id, facts.origin), foreign(facts.origin))
    if status == RunStatus.RUNNING:
        judged = _running(facts, me, lease_now)
    else:
        judged = _waiting(facts, me, approval, lease_now, now)
    if isinstance(judged, Refusal) or tools is None or me.tool_names is None:
        return judged
    missing = {"?" if n is None else n for n in tools()} - me.tool_names
    if missing:
        said = (
            f"it was started with tools this driver does not register "
            f"({', '.join(sorted(missing))}); it belongs to another program"
        )
        return Refusal(RunStateError(f"run {run_id}: {said}"), said)
    return judged


def _running(facts: Facts, me: Continuer, lease_now: Callable[[], datetime]) -> Judgement:
    run_id = facts.run_id
    if me.executing(run_id):
        return Refusal(
            RunStateError(
                f"this driver is already executing run {run_id}; "
                "a second concurrent call is refused"
            ),
            EXECUTING,
        )
    lease = facts.lease
    if lease is None:
        return Continuable(How.TAKE_OVER, "RUNNING; its lease is judged as it is taken")
    proof = _lease_proof(lease, me, lease_now)
    if isinstance(proof, Refusal):
        return proof
    by = proof.get("by")
    if by == "no lease":
        why = "RUNNING with no lease"
    elif by == "this driver's own lease":
        why = "RUNNING under this driver's own lease; its loop had stopped"
    elif by == "lease expired":
        why = f"RUNNING and its lease expired at {lease.shown_expiry()}"
    else:
        why = (
            f"RUNNING and its owner's process is gone "
            f"(pid {proof.get('pid')}: {proof.get('proof')})"
        )
    return Continuable(How.TAKE_OVER, why, proof)


def _waiting(
    facts: Facts,
    me: Continuer,
    approval: Callable[[], ApprovalState | None] | None,
    lease_now: Callable[[], datetime],
    now: Callable[[], datetime],
) -> Judgement:
    if approval is None:
        return Continuable(How.RESUME_WAITING, "WAITING; its approval is judged as it is read")
    latest = approval()
    if latest is None:  # the resume says what is wrong with such a run
        return Continuable(How.RESUME_WAITING, "WAITING, with no approval on record")
    if latest.status == ApprovalStatus.PENDING:
        if latest.expires_at is not None and now() >= latest.expires_at:
            return Continuable(
                How.SETTLE_EXPIRED,
                f"WAITING and its approval {latest.id} expired undecided at "
                f"{format_time(latest.expires_at)}",
            )
        return Refusal(
            RunStateError(
                f"run {facts.run_id} is waiting for approval {latest.id}, which is still pending"
            ),
            f"WAITING for approval {latest.id}, which is still pending",
        )
    why = f"WAITING and its approval {latest.id} was {latest.status}"
    if latest.status != ApprovalStatus.APPROVED or facts.lease is None:
        return Continuable(How.RESUME_WAITING, why)
    proof = _lease_proof(facts.lease, me, lease_now)
    if isinstance(proof, Refusal):
        return proof
    return Continuable(How.RESUME_WAITING, why, proof)


def _lease_proof(
    lease: LeaseState, me: Continuer, lease_now: Callable[[], datetime]
) -> dict[str, Any] | Refusal:
    try:
        return check_live_lease(lease, me.owner, lease_now())
    except RunLeasedError as exc:
        return Refusal(exc, live(exc.owner, exc.expires_at, lease.status))


def live(owner: str, expires_at: Any, status: str = RunStatus.RUNNING) -> str:
    """Why `recover()` skips a run under another owner's live lease (a RUNNING run's, or
    a WAITING run's approved request held by another program's attach)."""
    if status == RunStatus.WAITING_FOR_APPROVAL:
        return (
            f"WAITING_FOR_APPROVAL, its approved request held by {owner} until {expires_at} "
            "(another program is resuming it); not taken"
        )
    return f"RUNNING under a live lease held by {owner} until {expires_at}; not taken"


def moved_on(run_id: str, status: str, doing: str) -> RunStateError:
    """The refusal of a resume whose transaction found the run, once locked, no longer as
    it judged it: ended meanwhile (an operator's cancel, say), or resumed elsewhere.
    `doing` says what this resume was doing ("taking it over")."""
    if status in ENDED_STATUSES:
        return RunStateError(
            f"run {run_id} is {status}: it ended while this resume was {doing}; nothing was resumed"
        )
    return RunStateError(f"run {run_id} is {status}; it was resumed elsewhere")


def foreign(origin: str) -> str:
    """Why `recover()` skips a run an integration began."""
    return (
        f"it was begun by {origin!r}, not by a Driver or a plain Gate; "
        "the program that began it continues it"
    )


def approval_state(approval: Approval) -> ApprovalState:
    """The part of an approval record a judgement reads."""
    return ApprovalState(approval.id, approval.status, approval.expires_at)
