"""The records a store hands the step machine besides runs, steps and approvals.

Every backend decodes its own rows into these; nothing above the store layer
sees a database row. They carry the decoding rules that used to be applied by
whoever read a column: a lease whose expiry or owner cannot be read is held by
somebody (never "free"), and a column that will not decode is named, not
guessed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .._canonical import from_text, to_text
from .._clock import format_time
from .._records import JSON, Approval, Observation, PolicyDecision, Run, Step
from .._stored_text import shown_text


@dataclass(frozen=True)
class LeaseState:
    """A run's status and lease as one read saw them.

    `owner` is `''` when nobody holds the lease; an owner that cannot be read
    is shown as what could be read of it (never `''`: somebody holds it), and
    `owner_readable` is False: such an owner is never "me" (`held_by`).
    `expires_at` is None when no expiry is recorded; `expiry_readable` is False
    when the stored expiry is not a readable time, and then the lease is never
    judged expired (nobody can date it) and never proves the owner's own lease
    live. `stored` is the backend's exact (owner, expiry) as read, which a
    takeover compares against so that it replaces exactly the lease it judged.
    """

    run_id: str
    status: str
    owner: str
    expires_at: datetime | None
    holder: str = ""
    epoch: int = 0
    expiry_readable: bool = True
    owner_readable: bool = True
    stored: tuple[object, object] = field(default=("", ""), compare=False, repr=False)

    def held_by(self, owner: str) -> bool:
        """True when the stored owner is readable text and is exactly `owner`."""
        return self.owner_readable and self.owner == owner

    def live_at(self, now: datetime) -> bool:
        """True when the lease provably runs past `now` (what a side effect needs)."""
        return self.expiry_readable and self.expires_at is not None and self.expires_at > now

    def expired_at(self, now: datetime) -> bool:
        """True when the lease provably ended by `now` (what a takeover needs)."""
        return self.expiry_readable and (self.expires_at is None or self.expires_at <= now)

    def shown_expiry(self) -> str:
        """The expiry as stored (`''` for none), or what could be read of it."""
        if self.expiry_readable:
            return format_time(self.expires_at)
        return shown_text(self.stored[1])


@dataclass(frozen=True)
class ToolStart:
    """An allowed call's start as `Tx.start_tool` writes it, encoded before the transaction.

    Everything here is a pure function of the call and its policy verdict, so it is made
    (`tool_start`) before the write turn is taken: a transaction that holds the database's
    write lock spends it on statements, not on encoding (decision 0128). `policy` is
    what a read of `policy_text` gives, so the step kept in memory is the step a read
    of its row gives (decision 0011).
    """

    spec_hash: str
    policy_id: str
    policy_text: str
    """`policy_json` as written: the verdict's `decision`, encoded."""
    policy: PolicyDecision
    payload_text: str
    """`step.policy`'s payload, encoded."""
    started_text: str
    """`step.tool_started`'s payload, encoded."""


def tool_start(
    tool: str,
    args: JSON,
    payload: dict[str, Any],
    *,
    approval_id: str = "",
    reconciled: bool = False,
) -> ToolStart:
    """Encode a call's start: `payload` is `step.policy`'s (its `decision`, `policy_id` and
    `spec_hash` go in the step's row); `step.tool_started` names the tool and its `args`,
    the approval that granted it, and `reconciled` for a re-run the tool's own
    reconciliation vouched for (decision 0067)."""
    policy_text = to_text(payload["decision"])
    started: dict[str, Any] = {"tool": tool, "args": args}
    if approval_id:
        started["approval_id"] = approval_id
    if reconciled:
        started["reconciled"] = True
    return ToolStart(
        spec_hash=payload["spec_hash"],
        policy_id=payload["policy_id"],
        policy_text=policy_text,
        policy=PolicyDecision.from_json(from_text(policy_text)),
        payload_text=to_text(payload),
        started_text=to_text(started),
    )


@dataclass(frozen=True)
class WrittenObservation:
    """An observation as `Tx.finish_tool` writes it, encoded before the transaction
    (`written_observation`, decision 0128): its text, its content hash, and `read`, what
    a read of the text gives (the step kept in memory is the step a read gives)."""

    observation: Observation
    text: str
    read: Observation


def written_observation(observation: Observation) -> WrittenObservation:
    """`observation` encoded for `Tx.finish_tool`, and read back from that text."""
    text = to_text(observation.to_json())
    return WrittenObservation(observation, text, Observation.from_json(from_text(text)))


class GuardedRun:
    """What `Tx.lock_run` returns: the run, and its lease as stored, held until commit.

    `run` is decoded from the row read when it is first asked for (`decode`), or given:
    a caller that judges only the lease (most transactions of a step) never pays for
    decoding the whole run. Either way it is the run as the lock read it.
    """

    __slots__ = ("_decode", "_run", "lease")

    def __init__(
        self, run: Run | None, lease: LeaseState, decode: Callable[[], Run] | None = None
    ) -> None:
        if run is None and decode is None:
            raise ValueError("GuardedRun needs the run or a way to decode it")
        self._run = run
        self._decode = decode
        self.lease = lease

    @property
    def run(self) -> Run:
        run = self._run
        if run is None:
            assert self._decode is not None  # by the constructor's check
            run = self._run = self._decode()
            self._decode = None
        return run

    def __repr__(self) -> str:
        return f"GuardedRun(run={self.run!r}, lease={self.lease!r})"


@dataclass(frozen=True)
class ApprovalState:
    """The id, status and expiry of an approval: what a judgement of a waiting run reads."""

    id: str
    status: str
    expires_at: datetime | None


@dataclass(frozen=True, order=True)
class RunCursor:
    """Where a page of runs ended: opaque to callers, ordered as the backend pages."""

    position: int


@dataclass(frozen=True)
class RunCandidate:
    """An unfinished run as recovery pages through them.

    `unreadable` names the columns that hold something that is not text; such a
    run fails its own judgement and never the page.
    """

    cursor: RunCursor
    run_id: str
    status: str
    lease: LeaseState
    origin: str
    unreadable: tuple[str, ...] = ()


@dataclass(frozen=True)
class WaitingRow:
    """A pending approval as a list shows it, with its run's goal.

    Text fields may be `CappedText` (cut at the read's cap); times that will not
    parse are None.
    """

    id: str
    run_id: str
    kind: str
    tool: str
    hash: str
    created_at: datetime | None
    expires_at: datetime | None
    goal: str = ""


# --- what the named transitions return ------------------------------------------------------


@dataclass(frozen=True)
class Grouped:
    """One work's outcome in a group commit (`Store.transactions`): what it returned,
    or the exception that rolled its writes back."""

    value: Any = None
    error: BaseException | None = None


@dataclass(frozen=True)
class Settled:
    """A run and one of its steps, as a transition left them."""

    run: Run
    step: Step


@dataclass(frozen=True)
class Paused:
    """A run paused for a person: the run, the step awaiting and the new approval."""

    run: Run
    step: Step
    approval: Approval


@dataclass(frozen=True)
class Leased:
    """A run taken back to RUNNING under a new lease; `epoch` is the fencing token."""

    run: Run
    epoch: int


@dataclass(frozen=True)
class TakenOver:
    """A run taken over from a dead owner: the run, the new epoch, the steps interrupted."""

    run: Run
    epoch: int
    interrupted: tuple[Step, ...]


@dataclass(frozen=True)
class RequestRow:
    """One run made for a request key; `seq` orders the runs of a key."""

    seq: int
    request_key: str
    run_id: str
    tool: str
    side_effect: str
    created_at: datetime | None


@dataclass(frozen=True)
class Claim:
    """What `claim_request` did: claimed the key, found it taken, or found the cap full."""

    claimed: bool
    full: bool = False
    waiting: int = 0
