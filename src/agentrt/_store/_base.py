"""The store interface: what the step machine, the views and the tools ask of a database.

`Store` is one database; `Tx` one write transaction it hands out. Both are
protocols: the SQLite backend (`agentrt._store.sqlite`) implements them, and
any other backend is new files beside it that pass the same contract suite
(`tests/store_contract/`). Nothing here names SQL, a driver, a row or a cursor:
methods take and return records.

The contracts every backend keeps:

- **One transaction, one durable commit, or nothing.** `Store.transaction()`
  commits once, durably, when its block ends, and rolls back everything
  (events included) on any exception. Transactions do not nest; a read-only
  store refuses them.
- **Every write is a compare-and-set.** A named write names the state it may
  leave and raises `RunStateError`, writing nothing, when the row it guards
  has moved; it appends its own audit events (decision 0036) and returns the
  records as written.
- **Two locks, named for what they protect.** `Tx.lock_run` holds the run row
  (status, lease, step count) for the rest of the transaction: every write of
  the step machine starts there. The chain head is held by the first event a
  transaction appends, so events are chained in commit order with no gap and
  no fork. (SQLite: both are its one writer, `BEGIN IMMEDIATE`.)
- **One lease clock.** `Tx.lease_now(wall)` / `Store.lease_now(wall)` is the
  time every lease is judged by and every new expiry computed from: the
  caller's wall clock for SQLite, the database server's clock for a shared one.
- **No driver exception crosses this interface.** `StoreBusyError` means
  nothing was written and a retry is safe (busy before a transaction's work
  began, or on a read); inside the work or at commit, busy is a plain
  `StoreError` (nothing written either, but the work ran once). Damage the
  storage finds is `StoreDamagedError`; anything else a `StoreError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from .._capped import TEXT_CAP
from .._model import Usage
from .._records import (
    JSON,
    Approval,
    ApprovalStatus,
    Decision,
    Event,
    FileCheck,
    Lease,
    Limits,
    ModelCallRecord,
    Observation,
    PolicyDecision,
    Run,
    Step,
    StepStatus,
    ToolSpec,
    VerifyReport,
)
from ._records import (
    ApprovalState,
    Claim,
    Grouped,
    GuardedRun,
    Leased,
    LeaseState,
    Paused,
    RequestRow,
    RunCandidate,
    RunCursor,
    Settled,
    TakenOver,
    ToolStart,
    WaitingRow,
    WrittenObservation,
)


class Renewer(Protocol):
    """How a heartbeat renews one lease, on a connection (or its equivalent) of its own."""

    def renew(self, run_id: str, owner: str, ttl: timedelta) -> bool:
        """Push the lease's expiry to the lease clock's now plus `ttl`, if `owner` still
        holds it; False when it does not. Busy or failing: raises, and the heartbeat
        retries at its next tick."""

    def holds(self, run_id: str, owner: str, epoch: int) -> bool:
        """Whether the run's lease still names `owner` at `epoch`, expired or not: a read,
        nothing written (a paused heartbeat's look, decision 0225). Failing: raises."""

    def close(self) -> None:
        """Let go of what the renewals hold; never raises, and a later `renew` reopens."""


class Snapshot(Protocol):
    """One consistent read of several records: valid only inside its `Store.snapshot()` block."""

    def run_record(self, run_id: str) -> Run:
        """The run as it stands; `NotFoundError` if there is none."""

    def steps_of_run(self, run_id: str) -> list[Step]:
        """Every step of the run, in order, whole."""

    def steps_from(self, run_id: str, first_index: int, limit: int) -> list[Step]:
        """At most `limit` of the run's steps whose index is `first_index` or more, whole,
        in index order (a session's steps loaded a page at a time, decision 0098)."""

    def approvals_of_run(self, run_id: str) -> list[Approval]:
        """Every approval of the run, oldest first, whole."""


class Tx(Protocol):
    """One write transaction: valid only inside its `Store.transaction()` block."""

    @property
    def events(self) -> list[Event]:
        """The events this transaction appended, in order, as a read would give them."""

    def lock_run(self, run_id: str) -> GuardedRun | None:
        """The run and its lease, held for the rest of the transaction; None if no such run."""

    def lock_lease(self, run_id: str) -> LeaseState | None:
        """`lock_run`'s lease alone, the run locked the same way; None if no such run (a
        caller that judges only the lease reads no more of the run than the lease)."""

    def lease_now(self, wall: Callable[[], datetime]) -> datetime:
        """The time leases are judged by in this transaction: the backend's lease clock (the
        caller's `wall` for SQLite, the server's clock for a shared database)."""

    def run_record(self, run_id: str) -> Run:
        """The run as it stands in this transaction; `NotFoundError` if there is none."""

    def steps_of_run(self, run_id: str) -> list[Step]:
        """Every step of the run, in order."""

    def step_record(self, step_id: str) -> Step:
        """The step as it stands in this transaction; `NotFoundError` if there is none."""

    def latest_approval_of_step(self, step_id: str) -> ApprovalState | None:
        """The id, status and expiry of the step's latest approval, or None."""

    def approvals_of_run(self, run_id: str) -> list[Approval]:
        """Every approval of the run, oldest first."""

    def approval_of_run(self, approval_id: str, run_id: str) -> Approval | None:
        """The run's approval with this id as it stands in this transaction, or None."""

    def decide_approval(
        self, approval: Approval, status: ApprovalStatus, by: str, note: str, now: datetime
    ) -> Approval:
        """Approve or reject a pending approval still bearing its hash; `approval.decided`."""

    def cancel_run(self, run_id: str, by: str, note: str, now: datetime) -> Run:
        """Cancel a live run: its in-flight steps fail, its pending approvals expire, it ends."""

    def create_run(
        self,
        run_id: str,
        goal: str,
        limits: Limits,
        *,
        owner: str,
        lease_expires_at: datetime,
        holder: str,
        specs: Sequence[tuple[str, ToolSpec]],
        now: datetime,
        origin: str = "gate",
    ) -> Run:
        """A new RUNNING run leased to `owner` at epoch 1, its tool specs kept by hash."""

    def dispatch_model_call(
        self,
        run_id: str,
        step_id: str,
        call_id: str,
        attempt: int,
        model: str,
        estimate: Usage,
        estimate_cost_micros: int,
        now: datetime,
    ) -> Run:
        """Record a model attempt as `dispatched` at its estimate, before it is sent."""

    def settle_model_call(
        self,
        run_id: str,
        step_id: str,
        call_id: str,
        attempt: int,
        model: str,
        *,
        status: str,
        usage: Usage,
        cost_micros: int | None,
        latency_ms: int,
        error: str,
        now: datetime,
    ) -> Run | None:
        """Record a still-dispatched attempt's outcome, charge the run, and append its event."""

    def charge_beyond_estimate(
        self,
        run_id: str,
        call_id: str,
        attempt: int,
        model: str,
        usage: Usage,
        cost: int,
        now: datetime,
    ) -> None:
        """A late reply to an attempt already charged at its estimate: add only the excess."""

    def claim_step(
        self,
        run_id: str,
        index: int,
        owner: str,
        new_id: Callable[[], str],
        now: datetime,
        *,
        epoch: int,
    ) -> Step:
        """Claim step `index` of a RUNNING run leased to `owner` at `epoch`: `step_count`
        compare-and-set on exactly that lease (the same owner's lease granted again at a
        later epoch is another session's: `RunStateError`, nothing written, decision 0204).
        Inserts the step `deciding` (its id from `new_id`, drawn once the claim held),
        appends `step.started`, and returns the step as written."""

    def claim_next_step(
        self, run: Run, owner: str, new_id: Callable[[], str], now: datetime, *, epoch: int
    ) -> Settled:
        """`claim_step` for the step after `run` (the caller's copy: the claim is a
        compare-and-set on its step count); returns the run and the new step as written,
        the run built from the copy and the count written rather than read back (decision
        0011)."""

    def record_decision(self, step: Step, text: str, decision: Decision, now: datetime) -> Step:
        """Record a deciding step's decision verbatim (`text`), then `step.decided`; returns
        `step` (the caller's copy) as written. `decision` is what `text` reads back as
        (`_decisions.record` makes the two together), so it is not decoded again here."""

    def pause_for_approval(
        self,
        run_id: str,
        step_id: str,
        *,
        new_id: Callable[[], str],
        decision: PolicyDecision,
        request: JSON,
        digest: str,
        expires_at: datetime | None,
        payload: dict[str, Any],
        active_ms: int,
        from_step: tuple[str, ...],
        from_run: str,
        now: datetime,
    ) -> Paused:
        """Pause for a person: step `awaiting_approval` with its policy, a pending approval
        bound by `digest` to `request`, the run WAITING with its lease released; then
        `step.policy` and `approval.requested`. Returns the three as written."""

    def start_tool(
        self,
        step: Step,
        start: ToolStart,
        *,
        from_statuses: tuple[str, ...],
        now: datetime,
    ) -> Step:
        """Step `executing` with its policy; `step.policy`, `step.tool_started`, as `start`
        encoded them (`tool_start`, before the transaction). Returns `step` as written."""

    def finish_tool(
        self,
        step: Step,
        status: str,
        written: WrittenObservation,
        finished: dict[str, Any],
        *,
        failed_event: bool,
        now: datetime,
    ) -> Step:
        """An executing step's outcome: its observation (`written_observation`, encoded
        before the transaction), `step.tool_finished` (`finished`) and, when
        `failed_event`, `step.failed`. Returns `step` (the caller's copy) as written, the
        observation as a read of its text gives it."""

    def leave_running(self, run_id: str, owner: str, *, epoch: int, active_ms_add: int = 0) -> Run:
        """`owner` gives up the lease it was granted at `epoch` of a run left RUNNING (for a
        later resume), adding active time; `LeaseLostError` (nothing written) when the run
        is not RUNNING under exactly that lease. Returns the run as written."""

    def add_active_time(self, run: Run, owner: str, active_ms: int, *, epoch: int) -> Run:
        """Add a loop's active time to `run` (the caller's copy, as it stands in this
        transaction), RUNNING under the lease `owner` was granted at `epoch`;
        `LeaseLostError` (nothing written) otherwise. Returns the run as written, built
        from the copy (decision 0011)."""

    def release_lease(self, run_id: str, owner: str, *, epoch: int) -> bool:
        """Give up exactly the lease `owner` was granted at `epoch` (the run's lease epoch
        when it was taken: `create_run`'s 1, `take_over`'s and `hold_waiting`'s new one, which
        `leave_waiting` keeps); False, nothing changed, for any other lease.
        One owner string stands for every session of a Gate or Driver, so a release that
        comes late (its lease lapsed and was granted again, to another owner or to the same
        one at a later epoch) must not give up the newer lease; nor is it an error for a
        holder letting go, as a run that ended is not (decisions 0036, 0187)."""

    def end_run(
        self,
        run_id: str,
        status: str,
        reason: str,
        detail: str,
        *,
        result: JSON = None,
        active_ms_add: int = 0,
        now: datetime,
    ) -> Run:
        """End a RUNNING run with no step to settle (a record that will not decode, a
        takeover's verdict, a tool that aborted or completed the run); `run.finished`."""

    def fail_at_limit(
        self,
        run_id: str,
        *,
        reason: str,
        detail: str,
        loop: JSON = None,
        active_ms_add: int,
        now: datetime,
    ) -> Run:
        """A limit was reached before a step: `loop.detected` (with `loop`, the repeated
        call) or `limit.exceeded`, then the RUNNING run ends FAILED with `reason`."""

    def end_with_step(
        self,
        run_id: str,
        step_id: str,
        *,
        status: str,
        reason: str,
        detail: str,
        step_status: str = StepStatus.FAILED,
        observation: Observation | None = None,
        policy: dict[str, Any] | None = None,
        result: JSON = None,
        active_ms_add: int = 0,
        from_step: str = StepStatus.DECIDING,
        now: datetime,
    ) -> Settled:
        """End a RUNNING run with its step, in one transaction: the step's policy
        (`step.policy`, when given), the step `step_status` (with `observation` and
        `step.failed`, or closed without one), the run `status` (`run.finished`). The step
        is `deciding`, or (`from_step`) `interrupted` at a takeover whose call is judged
        again (decision 0135)."""

    def end_waiting(
        self,
        run_id: str,
        step_id: str,
        observation: Observation,
        *,
        status: str,
        reason: str,
        detail: str,
        policy: dict[str, Any] | None = None,
        expire: str = "",
        now: datetime,
    ) -> Settled:
        """End a WAITING run: its step awaiting approval fails with `observation`
        (`step.policy` first when given, then `step.failed`), the run ends `status`
        (`run.finished`). The one way a run ends from waiting: a policy that aborts or
        fails at a resume, an approval or grant that expired, a rejection, a record that
        will not decode. `expire` names the step's approval, expired if still pending (a
        run that ended can never have it decided)."""

    def expire_waiting(
        self, run_id: str, step_id: str, approval: Approval, *, tool: str, why: str, now: datetime
    ) -> tuple[Settled, Approval]:
        """Cancel a WAITING run `approval_expired`: `approval` (the step's latest) expires
        if still pending, the step fails denied with `why`, the run ends. Returns the run
        and step, and the approval, as written."""

    def reject_approval(
        self, approval: Approval, by: str, note: str, now: datetime
    ) -> tuple[Approval, Run]:
        """A person rejects a pending approval still bearing its hash: `approval.decided`,
        the step fails `policy_denied` (`Observation.rejected`), the run is cancelled
        `approval_rejected`. `ApprovalChangedError` (nothing written) when the approval
        is no longer pending with that hash. Returns the approval and the run as written."""

    def leave_waiting(
        self,
        run_id: str,
        approval_id: str,
        *,
        owner: str,
        epoch: int,
        expires_at: datetime,
        holder: str,
        now: datetime,
    ) -> Leased:
        """Take a WAITING run that `owner` holds at `epoch` (`hold_waiting`'s) back to
        RUNNING under that lease, its expiry and holder renewed, the epoch kept: the
        session that held the run is the one that runs it (compare-and-set on the status
        and exactly that hold: of two resumes exactly one leaves, and a hold granted since,
        to the same owner too, is not this one's), then `run.resumed` naming the approval
        that allowed it. `RunStateError` when no row matched. The caller then starts the
        tool or fails the step."""

    def hold_waiting(
        self,
        run_id: str,
        *,
        owner: str,
        expires_at: datetime,
        holder: str,
        previous: LeaseState,
    ) -> Leased:
        """`owner` holds the lease of a WAITING run it is attaching (decision 0032): a
        compare-and-set on the status and on exactly the lease the caller judged free
        (none, expired, its own, or a dead holder's: owner, expiry and epoch), so of two
        attaches one holds it and the other is refused. Each hold is a lease of its own,
        at the next epoch (decision 0204): two holds by one owner are told apart, as their
        releases are (`release_lease`). The run stays WAITING, and no event is appended:
        nothing about the run has changed until `leave_waiting`. `RunStateError` when no
        row matched. Returns the run as written and the hold's epoch."""

    def fail_and_go_on(
        self,
        run_id: str,
        step_id: str,
        observation: Observation,
        *,
        policy: dict[str, Any] | None = None,
        from_step: str,
        now: datetime,
    ) -> Step:
        """The step fails and the run goes on: `step.policy` (when the policy judged it),
        then the step `failed` from `from_step` with `observation` and `step.failed`.
        Returns the step as written."""

    def take_over(
        self,
        run_id: str,
        *,
        owner: str,
        expires_at: datetime,
        holder: str,
        previous: LeaseState,
        proof: dict[str, Any],
        now: datetime,
    ) -> TakenOver:
        """Take a RUNNING run whose owner is gone: the lease (compare-and-set on exactly the
        lease judged gone; epoch + 1), `lease.taken_over` with `proof` (when there was an
        owner), unsettled model attempts charged, in-flight steps `interrupted`."""

    def go_on_after_interruption(
        self, run_id: str, payload: dict[str, Any], now: datetime
    ) -> dict[str, Any]:
        """A taken-over run goes on (nothing was executing, a read-only call, or a
        consumer's `reconcile` said so): `run.resumed` with `payload`; no row changes.
        Returns the event's payload as appended."""

    def record_reconciled(
        self, run_id: str, step_id: str, payload: dict[str, Any], now: datetime
    ) -> None:
        """A tool's reconciliation answered about its interrupted step: `step.reconciled`
        (`payload` names the decider and the answer); no row changes (decision 0067)."""

    def complete_reconciled(
        self, step: Step, observation: Observation, payload: dict[str, Any], now: datetime
    ) -> Step:
        """An interrupted step whose tool's reconciliation found the effect: `done` with the
        recovered result as its observation; `step.reconciled` (`payload`). Returns `step`
        (the caller's copy) as written (decision 0067)."""

    def record_late_outcome(
        self, run_id: str, step_id: str, finished: dict[str, Any], now: datetime
    ) -> Settled:
        """A tool finished after an operator cancelled its run (under the lease the cancel
        ended): `step.tool_finished` marked `late`, changing no row. Returns the run and
        step as they stand."""


@runtime_checkable
class Store(Protocol):
    """One database, opened by `agentrt.open_store` or `agentrt.open_existing`."""

    read_only: bool

    def __enter__(self) -> Store: ...

    def __exit__(self, *exc: object) -> None: ...

    def transaction(self) -> contextlib.AbstractContextManager[Tx]:
        """A write transaction: one durable commit when the block ends, or nothing at all.

        Any exception (a `BaseException` too) rolls the whole transaction back,
        events included. Transactions do not nest; a read-only store refuses them.
        A database too busy to begin raises `StoreBusyError` before the block runs,
        with nothing written (safe to retry); any failure after the block began,
        its commit included, is a plain `StoreError`, also with nothing written."""

    def transactions(self, works: Sequence[Callable[[Tx], Any]]) -> list[Grouped]:
        """Group commit: each of `works` runs as its own transaction, all of them sharing
        one durable commit where the backend can (a savepoint each inside one transaction,
        or none for a group of one);
        a backend that cannot runs each alone, in order.

        A work that raises is rolled back alone, with everything it wrote, and its
        exception is its outcome (`Grouped.error`); the others' writes commit. Nothing is
        returned before that commit is durable. Where the works share one commit, a
        failure to begin (`StoreBusyError`, nothing written, safe to retry) or to
        commit (`StoreError`, nothing written) is raised for the whole group, as is a
        `BaseException` that is not an `Exception`, which rolls every work back. Where
        each work commits alone, every failure is that work's outcome, and after a
        `BaseException` the works not yet run fail with `StoreError`, nothing of them
        written."""

    def snapshot(self) -> contextlib.AbstractContextManager[Snapshot]:
        """A read transaction: every read in the block sees one committed state of the
        database, and nothing in it can write. Takes no writer's lock where the backend
        has readers beside its writer. The store's own reads (`get_run`, `lease`,
        `leases_of`, `pending_approvals`, ...) made in the block by the thread that opened
        it are reads of the same state: a view reads its pieces at one moment so (decision
        0203); other threads' reads wait for the block to end."""

    def renewer(self, wall: Callable[[], datetime]) -> Renewer:
        """The heartbeat's way to renew: on a connection of its own (the store's in memory)."""

    def lease_now(self, wall: Callable[[], datetime]) -> datetime:
        """The time leases are judged by outside a transaction: the backend's lease clock (the
        caller's `wall` for SQLite, the server's clock for a shared database)."""

    def close(self) -> None: ...

    def get_run(self, run_id: str, *, cap: int | None = None) -> Run: ...

    def list_runs(
        self,
        limit: int = 100,
        offset: int = 0,
        status: str | None = None,
        *,
        cap: int | None = TEXT_CAP,
    ) -> list[Run]:
        """Newest first (insertion order, reversed)."""

    def count_runs(self, status: str | None = None) -> int: ...

    def list_steps(
        self, run_id: str, limit: int | None = None, offset: int = 0, *, cap: int | None = TEXT_CAP
    ) -> list[Step]:
        """The run's steps in index order. Pass `cap=None` for complete values."""

    def list_approvals(self, run_id: str, *, cap: int | None = TEXT_CAP) -> list[Approval]:
        """The run's approvals in insertion order. Pass `cap=None` for complete values."""

    def get_approval(
        self, run_id: str, approval_id: str, *, cap: int | None = None
    ) -> Approval: ...

    def pending_approvals(
        self,
        run_id: str | None = None,
        *,
        limit: int | None = None,
        cap: int | None = TEXT_CAP,
    ) -> list[Approval]:
        """Approvals waiting for a person."""

    def list_events(
        self,
        run_id: str | None = None,
        after_seq: int = 0,
        limit: int = 1000,
        *,
        cap: int | None = TEXT_CAP,
        partition: int | None = None,
    ) -> list[Event]:
        """Events with `seq > after_seq` in seq order, of one run or of all (or of the runs
        of one chain `partition`): commit order within a partition, so for a run. Only
        committed events: a partition's events up to any seq read are all there is
        below it, for ever (an event still uncommitted takes a higher seq than its
        partition's committed ones); across partitions a later commit can carry a lower
        seq, so paging all runs goes by one position per partition (decision 0095)."""

    def list_model_calls(self, run_id: str) -> list[ModelCallRecord]: ...

    def lease(self, run_id: str) -> Lease:
        """The run's lease: owner `''` and `expires_at` None when nobody holds it."""

    def leases_of(self, run_ids: Sequence[str]) -> dict[str, Lease]:
        """The leases of the runs named, in one read, as `lease` reads each (a page of runs
        judged together); a run that does not exist is left out."""

    def tool_spec(self, hash: str) -> ToolSpec | None:
        """The stored spec with this hash, None if none; StoreError if it will not decode."""

    def chain_head(self) -> tuple[int, str]:
        """The chain's head as one value, to keep out of reach: with one partition `(seq,
        hash)` of the last event, `(0, '')` when there is none; with N > 1 partitions
        `(N, digest)` over `chain_heads()` (decision 0093)."""

    def chain_heads(self) -> tuple[tuple[int, str], ...]:
        """Each partition's head `(seq, hash)`, in partition order: the kept head that
        `verify_events(head=...)` checks. Its last committed event: an append not yet
        committed moves it for no other reader."""

    def check_file(self, *, full: bool = False, max_problems: int = 100) -> FileCheck:
        """The storage's own check of what it holds, apart from the chain (SQLite: `PRAGMA
        quick_check`, or `integrity_check` if `full`); `ok` False with a problem saying so
        when the backend cannot check from a client."""

    def verify_events(
        self,
        from_seq: int | None = None,
        to_seq: int | None = None,
        *,
        head: tuple[int, str] | Sequence[tuple[int, str]] | None = None,
    ) -> VerifyReport:
        """Check the event chain in bounded pages, writing nothing; see `agentrt._chain`."""

    def lease_state(self, run_id: str) -> LeaseState | None:
        """The run's status and lease, or None when there is no such run."""

    def run_cursor(self, run_id: str) -> RunCursor | None:
        """Where the run stands in recovery's order (an opaque cursor); None when there is no
        such run."""

    def unfinished_runs(self, after: RunCursor | None, limit: int) -> list[RunCandidate]:
        """RUNNING and WAITING runs after `after`, oldest first, at most `limit`."""

    def latest_approval_state(self, run_id: str) -> ApprovalState | None:
        """The id, status and expiry of the run's latest approval, or None."""

    def started_tool_names(self, run_id: str) -> list[str | None]:
        """The names of the tools the run was started with (its `run.created`), as stored."""

    def run_status(self, run_id: str) -> str | None:
        """The run's status as stored, shown if unreadable (None when there is no such run)."""

    def last_event_seq(self, run_id: str) -> int:
        """The seq of the run's last event (0 when it has none)."""

    def newest_event(self, run_id: str | None = None) -> Event | None:
        """The event with the highest seq, of the run or of the whole record, whole; None
        when there is none. Inside a transaction open on this store (on its thread), that
        transaction's own events count: a store opened apart sees only what is committed."""

    def event_hash_exists(self, event_hash: str) -> bool:
        """Whether an event with this hash is in the record."""

    def record_ids(self) -> set[str]:
        """Every id of every run, step, approval and model call in the record."""

    def event_count(self, run_id: str) -> int: ...

    def event_seq_from_end(self, run_id: str, back: int) -> int:
        """The seq of the run's event `back` places before its last (0 when there is none)."""

    def pending_approvals_of(self, run_ids: Sequence[str], cap: int) -> list[WaitingRow]:
        """The pending approvals of the runs named, in creation order, texts cut at `cap`."""

    def count_runs_asking_a_person(self) -> int:
        """Waiting runs with at least one pending approval."""

    def newest_pending_approvals(self, limit: int, cap: int, goal_cap: int) -> list[WaitingRow]:
        """Waiting runs' pending approvals, newest first, at most `limit`, with the run's goal."""

    def step_index(self, run_id: str, step_id: str) -> int | None:
        """The step's index in its run (None when there is no such step, or it will not read)."""

    def run_id_exists(self, run_id: str) -> bool: ...

    def run_ids_starting(self, prefix: str, limit: int) -> list[str]:
        """Up to `limit` run ids starting with `prefix` (no wildcard in it), in order."""

    def steps_with_reasons(self, run_id: str, reasons: Collection[str]) -> list[Step]:
        """The run's steps whose recorded decision gives one of `reasons`, in step order, whole."""

    def step_of_run(self, run_id: str, step_id: str) -> Step | None:
        """The run's step `step_id`, whole (no cap), or None when the run has no such step."""

    def steps_from(self, run_id: str, first_index: int, limit: int) -> list[Step]:
        """At most `limit` of the run's steps whose index is `first_index` or more, whole
        (no cap), in index order (`ValueError` for a negative argument)."""

    def events_of_types(self, run_id: str, types: Collection[str]) -> list[Event]:
        """The run's events of these types, whole (no cap), in commit order."""

    def run_ids_created_since(
        self, since: datetime, after: RunCursor | None, limit: int
    ) -> list[tuple[RunCursor, str]]:
        """Ids of runs created at or after `since`, oldest first, at most `limit` after
        `after`, each with where it stands in that order."""

    # --- the proxy's rows (agentrt-proxy: one run per tool call, tied by a request key) ----

    def migrate_proxy(self, now: datetime) -> int:
        """Apply the proxy's pending migrations in one transaction; returns the version reached.

        A database whose proxy tables are newer than this code is refused
        (`SchemaVersionError`) before anything changes."""

    def proxy_versions(self) -> list[int]:
        """The proxy migrations applied, in order."""

    def latest_request(self, key: str) -> RequestRow | None:
        """The latest run made for `key`, or None."""

    def request_of_run(self, run_id: str) -> RequestRow | None:
        """The key row that made `run_id`, or None for a run the proxy did not make."""

    def claim_request(
        self,
        key: str,
        judged_seq: int | None,
        run_id: str,
        tool: str,
        side_effect: str,
        now: datetime,
        *,
        cap: int | None = None,
        awaiting: Collection[str] = (),
        fresh_since: datetime | None = None,
    ) -> Claim:
        """Record, in a durable transaction of its own, that `run_id` is the key's next run,
        if the key's latest row is still `judged_seq` (None: none); writes nothing when
        another call claimed the key since, or, given a `cap`, when `cap` of the proxy's
        calls already wait for a person or are on their way to one (`full`)."""

    def unsettled_requests(
        self, tool: str, ended: Collection[tuple[str, str | None]]
    ) -> list[RequestRow]:
        """The latest row of each request key of `tool` whose run is RUNNING or
        WAITING_FOR_APPROVAL, or ended with a (reason, reason_detail) pair of `ended` (a
        None detail: any), oldest first: the calls of the tool whose outcome may be
        unknown with nobody settling it (the proxy judges each from its record)."""
