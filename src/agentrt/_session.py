"""The session handle of a run's step machine, shared by the Driver and the Gate.

A `RunSession` is what executes a RUNNING run while this process holds its
lease: the in-memory copy of the run, its steps and approvals; `write()`
through the I/O thread; the crash-point probes; the heartbeat; the lease guard
(`require_lease`). It owns no transition: the step itself is taken by
`_step.py` (`begin_step`, `propose` with its recorded decision, `run_tool`); a
policy's answer is acted on by `_settle.py` (`settle`, `pause` with the
approval request and its hash, `start_tool_in`), each transaction one named
write of the store's `Tx` whose returned records become the copy; a waiting
run is resumed by `_resume_waiting.py`, a dead owner's run taken over by
`_takeover.py`.

Invariants enforced here:

- Every write first re-reads the run inside its IMMEDIATE transaction: a run
  that is no longer RUNNING (an operator cancelled it) is returned as it
  stands; a lease held by someone else raises `LeaseLostError` before anything
  is written. Side-effect starts also require the lease unexpired by the wall
  clock.
- Every way a run ends settles the step and the run in one transaction.
- A write whose outcome is already known (a tool finished, a model attempt
  settled) waits out a busy database while the lease is ours (`write_outcome`).
- The clock is read exactly once per transaction, in a fixed order, so a fake
  clock gives byte-identical records; lease times use the wall clock only.
- Committed events reach the observer after the commit, in commit order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import logging
import threading
import weakref
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from functools import partial
from typing import Any, TypeVar, cast

from . import _history as history
from . import _limits as limits_mod
from ._canonical import check_json, content_hash, copy_json, to_text
from ._clock import Clock, IdFactory, duration_to_ms
from ._commit_plan import (
    Commit,
    checking,
)
from ._errors import (
    JSONValueError,
    LeaseLostError,
    RunStateError,
    StoreBusyError,
    StoreError,
    is_deadlock,
)
from ._events import Observer, deliver
from ._execute import KeptTask
from ._foreign import exception_text
from ._fork import renewed_in_children
from ._group_commit import committer_for
from ._history import KnownPrefixes, SettledPrefix, StepLog, StepsView
from ._lease import Heartbeat, WallClock
from ._policy import Policy, kept_answer
from ._policy import evaluate as evaluate_policy
from ._policy_input import InputHashes, input_record, step_hash
from ._records import (
    JSON,
    Approval,
    PolicyDecision,
    PolicyOutcome,
    Run,
    RunStatus,
    RunView,
    Step,
    StepStatus,
    ToolRequest,
    ToolSpec,
)
from ._shown import shown_step, shown_view
from ._store import Snapshot, Store, Tx
from ._store._records import GuardedRun, LeaseState
from ._tools import CompiledTool, Tool

T = TypeVar("T")


def _io_threads() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="agentrt-io")


# Store calls taken off the event loop (`run_io`) run on these threads, so that an fsync
# never stalls it; the step machine's commits go to the store's committer instead
# (decision 0126). The store's own lock serializes use of its connection.
_IO_THREADS = _io_threads()

# The parent's I/O threads do not exist in a forked child, and an executor that had idle
# ones would queue the child's work for them for ever: the child gets its own (0125).
renewed_in_children(__name__, "_IO_THREADS", _io_threads)

_POLICY_OUTCOMES = {str(o) for o in PolicyOutcome}

# Argument hashes kept (`RunSession.args_hash`): loop detection reads the newest steps'.
_ARGS_HASHES_KEPT = 256

# Between attempts at a known outcome's write on a busy database (each attempt
# itself waits up to the store's busy timeout).
_BUSY_PAUSE_SECONDS = 0.05


Probe = Callable[[str, "RunSession"], Any]


# Set by the `_sync` twins, whose event loop runs nothing but this driver: there an
# fsync cannot starve anyone, and the thread hand-off would be pure cost.
INLINE_IO: contextvars.ContextVar[bool] = contextvars.ContextVar("agentrt_inline_io", default=False)


SHUTDOWN_GRACE_S = 1.0
"""How long a `_sync` call's own event loop waits, once the run has returned, for
coroutines it cancels (an async tool still running past its timeout) to end."""


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from blocking code, on an event loop of its own.

    The `_sync` twins of the Driver and the Gate. Unlike `asyncio.run`, closing
    that loop never waits without bound: a coroutine left behind (an async tool
    that swallows its cancellation) gets `SHUTDOWN_GRACE_S` to end, then is
    abandoned with the loop, its outcome already recorded as the run's.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coro.close()
        raise RuntimeError(
            "a _sync method was called inside a running event loop; await the async method instead"
        )
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(_owning_the_loop(coro))
    finally:
        _close_leaving_stragglers(loop)


def _close_leaving_stragglers(loop: asyncio.AbstractEventLoop) -> None:
    try:
        pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.wait(pending, timeout=SHUTDOWN_GRACE_S))
            stragglers = sum(not task.done() for task in pending)
            if stragglers:
                logging.getLogger("agentrt").warning(
                    "%d coroutine(s) did not end when cancelled (an async tool swallowing "
                    "its cancellation?); they are abandoned with the event loop",
                    stragglers,
                )
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


async def _owning_the_loop(coro: Coroutine[Any, Any, T]) -> T:
    """The loop is ours alone: store calls may run inline (see `INLINE_IO`)."""
    INLINE_IO.set(True)
    return await coro


async def run_io(fn: Callable[[], T]) -> T:
    """Run a store call off the event loop (inline when the loop is the driver's own)."""
    if INLINE_IO.get():
        return fn()
    loop = asyncio.get_running_loop()
    _note_execute_loop(loop)
    return await loop.run_in_executor(_IO_THREADS, fn)


def off_the_loop(fn: Callable[[], None]) -> None:
    """`fn()` now, or on an I/O thread when an event loop runs on this thread: a future's
    callback that makes a store call (a lease given back once a kept tool ends) runs on the
    thread that ends it, which for a tool's task is its loop's, where a store that waits (a
    slow server, a lock another writer holds) would stall every other coroutine."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        fn()
        return
    try:
        _IO_THREADS.submit(fn)
    except RuntimeError:  # the interpreter is shutting down: no new thread, so here
        fn()


async def through_cancels(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` to its end though the caller is cancelled again while it runs.

    What a cancelled call writes on its way out (a tool's outcome not known, a model
    call's ambiguous settlement) must be committed before the cancellation goes on: the
    caller's next move on a cancel is to give the lease back, and a second cancel that
    cut the wait short would let it go before the outcome's commit (which then found the
    lease gone) and under a tool thread still running. A cancel of `work` itself (the
    loop shutting down) still ends it.
    """
    task = asyncio.ensure_future(work)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                raise
            # Cancelled again while the write runs: wait for it all the same (the
            # caller is already on its way out with a CancelledError).


class VerdictOutcome(StrEnum):
    """What became of a proposed decision (`agentrt.VerdictOutcome`)."""

    ALLOWED = "allowed"  # the tool may be executed now, once
    DENIED = "denied"  # the step failed (invalid decision or policy denial); the loop goes on
    PENDING = "pending"  # the run paused on an approval
    ENDED = "ended"  # the run ended


class RunMoved(Exception):
    """The run left RUNNING under this loop (an operator cancelled it)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        super().__init__(run.status)


@dataclass
class LoopConfig:
    """What every session of one Driver (or Gate) shares."""

    store: Store
    tools: Mapping[str, Tool]
    # The specs as registered (`tools.registered_spec`): the Driver's own copies,
    # never handed to consumer code, so that validation, hashes, approvals and
    # resumes all see the same spec whatever an agent or a policy does.
    specs: Mapping[str, ToolSpec]
    spec_hashes: Mapping[str, str]
    # The specs' schemas compiled once, when the Driver was made, by name.
    compiled: Mapping[str, CompiledTool]
    # Copies of the same specs for agents (`StepInput.tools`) and policies
    # (`ToolRequest.spec`): an edit made to these stays in them.
    shown_specs: Mapping[str, ToolSpec]
    policy: Policy
    policy_id: str
    clock: Clock
    new_id: IdFactory
    observer: Observer | None
    owner: str
    lease_ttl: timedelta
    wall: WallClock
    model: Any = None
    reconcile: Any = None
    # Test-kit hooks: called after the commit of a crash point (may be async),
    # and inside its transaction just before COMMIT (sync, on the I/O thread).
    probe: Probe | None = None
    probe_in_tx: Probe | None = None
    # What the sessions' loads of a run read before, to start the next one from (0130).
    known: KnownPrefixes = field(default_factory=KnownPrefixes)


@dataclass(frozen=True)
class AllowedCall:
    """A call the policy (or a granted approval) allowed, not yet finished."""

    step: Step
    spec: ToolSpec
    args: JSON
    payload: dict[str, Any]
    approval_id: str = ""
    started_at: datetime | None = None
    # The step statuses the tool may start from: `deciding`, or `interrupted` for
    # a re-run a tool's own reconciliation vouched for (decision 0067).
    from_step: tuple[str, ...] = (StepStatus.DECIDING,)
    # Set when a waiting run's granted approval allowed the call (`gate.attach`):
    # nothing is written until `execute`, which judges the grant and resumes the
    # run in the transaction that starts the tool (`_settle.start_resumed`).
    waiting: Any = None


@dataclass
class PolicyCheck:
    """The policy's answer, validated, and what `step.policy` records of it."""

    decision: PolicyDecision | None
    error: str | None
    payload: dict[str, Any] = field(default_factory=dict)


def policy_view_counters(run: Run, prior: Sequence[Step]) -> dict[str, Any]:
    # The steps as held, not the copies a policy is shown of them.
    steps = prior.originals() if isinstance(prior, StepsView) else prior
    return {
        "step_count": run.step_count,
        "consecutive_failures": limits_mod.trailing_failures(steps),
        **run.usage_json(),
    }


def validate_policy_decision(result: Any) -> str | None:
    """Why a policy's answer cannot be used, or None when it can.

    For example: not a `PolicyDecision`, an unknown outcome, a capability that is not usable JSON.
    """
    if not isinstance(result, PolicyDecision):
        return f"policy returned {type(result).__name__}, not a PolicyDecision"
    outcome = result.outcome
    if not isinstance(outcome, str) or str.__str__(outcome) not in _POLICY_OUTCOMES:
        return f"policy returned an unknown outcome {result.outcome!r}"
    if not isinstance(cast(object, result.reason), str) or not isinstance(
        cast(object, result.kind), str
    ):
        return "policy reason and kind must be strings"
    if result.outcome == PolicyOutcome.REQUIRE_APPROVAL and not result.kind:
        return "policy required an approval without naming its kind"
    for name in ("capability", "presentation"):
        value = getattr(result, name)
        if value is None:  # usable JSON, written `null`: nothing to check
            continue
        try:
            check_json(value)
            to_text(value)
        except (JSONValueError, RecursionError, TypeError, ValueError) as exc:
            return f"policy {name} is not usable JSON: {exc}"
    try:
        to_text(result.to_json())
    except (JSONValueError, RecursionError, TypeError, ValueError) as exc:
        return f"policy decision cannot be recorded: {exc}"
    return None


def cancelled_by_caller() -> bool:
    """Whether the current task has a cancel request pending.

    A `CancelledError` caught while it has none was raised by the consumer code
    awaited (an agent, a policy, a reconciliation awaiting a request of its own
    that was cancelled, or raising one itself): that code's failure, recorded as
    any other of its exceptions. One caught while it has is the caller's cancel,
    and goes on. (`Task.cancelling()`, as `asyncio.timeout` tells the two apart.)
    """
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


class _Planned:
    """The default crash point of a write: its commit's own."""


KeptWrite = Callable[[Tx, GuardedRun], Callable[[], object] | None]
"""Writes kept by `RunSession.defer`: called inside the next commit's transaction with the
run as locked there; what it returns (if anything) is called once that commit is durable,
on the loop, before the commit's probes: what the session learns from the lock (a decoded
run) is worked out there, not while the transaction holds the write turn (decision 0128)."""


@dataclass(frozen=True)
class _Deferred:
    """Writes kept by `RunSession.defer` for the next commit."""

    commit: Commit
    fn: KeptWrite


def _nothing(tx: Tx) -> None:
    """A commit that writes only what was deferred."""


PLANNED = _Planned()


async def write_through(
    config: LoopConfig,
    commit: Commit,
    fn: Callable[[Tx], T],
    in_tx: Callable[[], None] | None = None,
) -> T:
    """Make `commit` of the plan: `fn` in one transaction off the event loop; deliver its events.

    `in_tx` runs just before COMMIT (a crash point's probe). A session's writes
    go through here; so do those no session holds: creating a run, and holding
    a waiting run's lease for an attach.
    """
    store = config.store
    observed = config.observer is not None
    checked = checking()

    def work(tx: Tx) -> tuple[T, list[Any]]:
        out = fn(tx)
        if checked:
            commit.check(e.type for e in tx.events)
        if in_tx is not None:
            in_tx()
        return out, tx.events if observed else []

    if INLINE_IO.get():  # the loop is the driver's own: nobody to share a commit with

        def job() -> tuple[T, list[Any]]:
            with store.transaction() as tx:
                return work(tx)

        out, events = job()
    else:
        # Group commit: this work shares one fsync with other runs' queued meanwhile.
        committer = committer_for(store)
        loop = asyncio.get_running_loop()
        writing = _WRITING.get()
        if writing is not None and writing.loop is None:
            writing.loop = loop  # the session's write in flight awaits its commit here
            _note_execute_loop(loop)
        out, events = await committer.submit_soon(work, loop, awaited_at_once=True)
    deliver(config.observer, events)
    return out


class _InFlight:
    """A write of a session in flight (one `write`, or every try of a `write_outcome`), and
    the event loop it awaits its commit on, once `write_through` knew it (None for a
    `_sync` twin's own loop, which ends its tasks before it closes). A write whose loop was
    closed under it (the consumer's own loop, closed with the write pending) is never
    resumed: a close does not wait for it (`RunSession.writes_settled`)."""

    __slots__ = ("loop", "session")

    def __init__(self, session: RunSession) -> None:
        self.session = session
        self.loop: asyncio.AbstractEventLoop | None = None


_WRITING: contextvars.ContextVar[_InFlight | None] = contextvars.ContextVar(
    "agentrt_session_writing", default=None
)
"""The session's write the current context is inside (`RunSession.writes_settled`)."""


class _CancelledAfterRefusal(asyncio.CancelledError):
    """A cancel that went on once the commit it waited for was refused (`refused`)."""

    def __init__(self, refused: BaseException) -> None:
        super().__init__()
        self.refused = refused


async def _ended_first(commit: Coroutine[Any, Any, T]) -> T:
    """`commit`'s outcome (a `write_through`: it ends with the commit, no probe after it); a
    cancel of the caller meanwhile goes on once it has ended, however often repeated:
    `_CancelledAfterRefusal` when it was refused, the cancel itself when it was made (what
    it made is then not learnt, as for a cancel that came after it). A cancel of the commit
    itself (its loop shutting down) ends it. Closed from outside (the loop gone), it is
    left to its loop, which never resumes it."""
    task = asyncio.ensure_future(commit)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            try:
                await asyncio.wait((task,))
            except asyncio.CancelledError:
                continue  # cancelled again: the commit is still waited for
        if task.cancelled():
            raise
        refused = task.exception()
        if refused is None:
            raise
        raise _CancelledAfterRefusal(refused) from refused


class _LoopGone:
    """A session's heartbeat's look at whether its event loop is gone (decision 0223): a
    callable of its own, not a bound method of the session, so that the heartbeat (which the
    session holds) refers not back to it: no cycle to wait for the collector (decision 0099)."""

    __slots__ = ("look",)

    def __init__(self) -> None:
        self.look: Callable[[], bool] | None = None

    def __call__(self) -> bool:
        look = self.look
        return look is not None and look()


def _epoch_of(session: weakref.ref[RunSession]) -> Callable[[], int | None]:
    """A session's lease epoch for its heartbeat's look while paused (decision 0225), holding
    no reference to the session (no cycle, as `_LoopGone`): None once it was collected."""

    def epoch() -> int | None:
        live = session()
        return None if live is None else live.epoch

    return epoch


class ExecuteInFlight:
    """A Gate step's `execute` running (package-internal): the event loop it waits on, noted
    where a store call of it first looks the loop up (`write_through`, `run_io`: no loop call
    more), the tool threads of its call (`_step.run_tool`), and `gone`, set when its
    coroutine was closed from outside (its loop gone). An execute whose loop was closed
    under it is never resumed: a close judges it abandoned (decision 0198)."""

    __slots__ = ("gone", "loop", "threads")

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.threads: list[concurrent.futures.Future[Any]] = []
        self.gone = False

    def abandoned(self) -> bool:
        """Whether nothing will ever resume this execute: its loop was closed, or its
        coroutine was (a `_sync` twin's loop, noted by no store call, ends its tasks first)."""
        return self.gone or (self.loop is not None and self.loop.is_closed())


EXECUTING: contextvars.ContextVar[ExecuteInFlight | None] = contextvars.ContextVar(
    "agentrt_gate_executing", default=None
)
"""The Gate `execute` the current context runs (package-internal)."""


def _note_execute_loop(loop: asyncio.AbstractEventLoop) -> None:
    executing = EXECUTING.get()
    if executing is not None and executing.loop is None:
        executing.loop = loop


_LOOPS_LOOKED_AT_S = 1.0
"""How often a close waiting for the session's writes looks whether the loop of one of them
was closed meanwhile (such a write never ends, nor tells the close)."""


def _wake(waiter: asyncio.Future[None]) -> None:
    """Tell a close waiting for the session's writes that none is in flight, on the waiter's
    own loop: the write may have ended on another thread (a `_sync` twin's loop), where
    setting the future would not wake that loop."""
    with contextlib.suppress(RuntimeError):  # its loop was closed: nobody waits any more
        waiter.get_loop().call_soon_threadsafe(_settled, waiter)


def _settled(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class RunSession:
    """Executes one run while this process holds its lease."""

    def __init__(
        self,
        config: LoopConfig,
        run: Run,
        steps: Sequence[Step],
        approvals: Sequence[Approval],
        epoch: int,
        mark: datetime,
    ) -> None:
        self.config = config
        # While a write's transaction function runs, on the thread running it: whether
        # it has written to this copy (decision 0136; a flag per write, so that another
        # write of the session committing meanwhile is not taken for this one's).
        self._writing = threading.local()
        self._run = run
        # Every step of the run; the newest and unsettled ones held, the others read
        # back from the store when asked for (decision 0098).
        self.steps = (
            steps
            if isinstance(steps, StepLog)
            else StepLog(steps, partial(config.store.steps_from, run.id), digest=step_hash)
        )
        self.approvals: list[Approval] = list(approvals)
        self.epoch = epoch
        # Start of the active segment not yet added to the run's active time.
        self._mark = mark
        self._args_hashes: dict[str, str] = {}
        # Each step's and approval's hash for the `input` of `step.policy` (decision 0072).
        self._input_hashes = InputHashes()
        self._allowed: AllowedCall | None = None
        # The lease heartbeat of the Driver executing this session, if any (the
        # test kit stops it without releasing the lease to imitate a dead process).
        self.heartbeat: Any = None
        # A plain-function tool still running after the caller cancelled the loop:
        # the lease is held (and renewed) until its thread returns.
        self.lingering_tool: concurrent.futures.Future[Any] | None = None
        # The tool tasks among them (left running by an execute closed from outside, or a
        # cancel they swallowed): the heartbeat ends one whose loop was closed (`_KeptTasks`).
        self._kept_tasks = _KeptTasks()
        # Whether the event loop driving this session was closed with its task kept and no
        # tool of it still runs (its `look` set by its gate session): its heartbeat renews
        # nothing then, and the lease lapses as a crashed process's does (decision 0223).
        self.loop_gone = _LoopGone()
        # Set when an exception other than a cancel interrupted a tool's call with no thread
        # to wait for (an async tool's task may still run): the lease is not given back.
        self.tool_may_run = False
        # Set by a caller that closes the session once the call it executes is recorded
        # (an adapter attaching per call): that commit also gives the lease back, the run
        # left RUNNING, and `lease_given_back` says it did (decision 0131).
        self.give_back_with_outcome = False
        self.lease_given_back = False
        # Set by a takeover that found nothing in doubt and committed `run.resumed` with
        # the take (decision 0152): the interruption contract has nothing left to decide.
        self.gone_on = False
        # The id of the step whose `step.tool_started` this session knows is durable (its
        # start commit returned): what a broken session says of a step cut short.
        self.start_recorded = ""
        # Why this session can no longer be used: a commit failed after its transaction
        # had moved the session's copy ahead of the rows (decision 0136); None while usable.
        self.broken: str | None = None
        # Each model request in flight and what it may use, by call id (the accounting
        # caller of every step reserves against the run's limits through it).
        self.models_in_flight: dict[str, Any] = {}
        # Writes made in memory and not yet committed: a step's claim and its decision,
        # which join the next commit of the plan (decision 0088's two-commit step).
        self._deferred: list[_Deferred] = []
        # While a commit's kept writes are followed by its own (`_with_deferred`): the
        # transaction and the run as locked in it before them.
        self._locked: tuple[Tx, GuardedRun] | None = None
        # The writes in flight, and who waits for none to be (`writes_settled`): a close
        # waits for them before it gives the lease back.
        self._writes_in_flight: set[_InFlight] = set()
        self._settle_waiters: list[asyncio.Future[None]] = []
        # Both are also changed by a `_sync` twin's write on another thread (its own loop):
        # counted and handed over under a lock, and a waiter woken on its own loop.
        self._settling = threading.Lock()

    # -- plumbing -----------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self.run.id

    async def write(
        self,
        commit: Commit,
        fn: Callable[[Tx], T],
        point: str | _Planned | None = PLANNED,
        *,
        kept_through_cancel: bool = False,
    ) -> T:
        """Make `commit` of the plan: `fn` in one transaction off the event loop; deliver
        its events.

        `kept_through_cancel`: when the commit carries writes `defer` kept (a step's claim),
        a cancel meanwhile goes on only once the commit has ended, so that a refusal keeps
        them for the next commit as it does for a caller not cancelled (decision 0216).

        Writes deferred by `defer` go first in the same transaction, each followed by
        its own crash point's in-transaction probe; once committed, their after-commit
        probes run in the same order, before this commit's own.

        `point` names a crash point of the test kit (the commit's own unless given):
        its in-transaction probe runs just before COMMIT, its after-commit probe once
        the events are delivered.
        """
        flight, inside = self._count_in()
        try:
            return await self._write_counted(commit, fn, point, kept_through_cancel)
        finally:
            self._count_out(flight, inside)

    def _count_in(self) -> tuple[_InFlight, contextvars.Token[_InFlight | None]]:
        """Count a write in flight, and mark the context as inside it (no loop call: a write
        costs no syscall more; `write_through` notes the loop it already looked up)."""
        flight = _InFlight(self)
        with self._settling:
            self._writes_in_flight.add(flight)
        return flight, _WRITING.set(flight)

    def _count_out(self, flight: _InFlight, inside: contextvars.Token[_InFlight | None]) -> None:
        """The write ended: wake a close that waits for the last one."""
        try:
            _WRITING.reset(inside)
        except ValueError:
            # Closed from outside its context (its loop gone, the coroutine collected): by the
            # cycle collector, on any thread, maybe one holding `_settling` at that moment (an
            # allocation made under it). That lock is not waited for: when it is held, the
            # write is left to the next look at the writes in flight, which drops it as
            # abandoned (its loop is closed).
            if not self._settling.acquire(blocking=False):
                return
        else:
            self._settling.acquire()
        try:
            self._writes_in_flight.discard(flight)
            waiters: list[asyncio.Future[None]] = []
            if not self._writes_in_flight and self._settle_waiters:
                waiters, self._settle_waiters = self._settle_waiters, []
        finally:
            self._settling.release()
        for waiter in waiters:
            _wake(waiter)

    async def _write_counted(
        self,
        commit: Commit,
        fn: Callable[[Tx], T],
        point: str | _Planned | None,
        kept_through_cancel: bool = False,
    ) -> T:
        """`write`, once counted in flight."""
        if isinstance(point, _Planned):
            point = commit.point
        in_tx = None if point is None else partial(self.probe_in_tx, point)
        moved = [False]
        epoch = self.epoch  # the lease granted before this write (one it takes may not commit)

        def tracked(tx: Tx) -> T:
            writing = self._writing
            writing.moved = moved
            try:
                return fn(tx)
            finally:
                writing.moved = None

        try:
            return await self._write(commit, tracked, point, in_tx, kept_through_cancel)
        except Exception as failed:  # a cancel (made or not) or an exit stops the loop anyway
            if moved[0]:
                await self._broke(commit, failed, epoch)
            raise
        except _CancelledAfterRefusal as cut:
            # Refused, then the cancel: the copy is ahead of the rows as for a refusal not
            # cancelled, and is not used again; nothing is read back under the cancel.
            if moved[0]:
                self._broken_by(commit, cut.refused, epoch)
            raise

    async def writes_settled(self) -> None:
        """Return once no write of this session is in flight.

        A close gives the lease back only then: a commit another task awaits (a step's
        decision, its failure) is made under the lease, or fails on its own, but never
        loses the lease to this session's own letting go (decision 0176). Called from
        inside one of this session's writes (a hook run by the commit), it returns at
        once: that write could never end while it waited. A write whose event loop was
        closed under it is not waited for (nothing will ever resume it): it is counted no
        more, and the close goes on as after a crash of that loop.
        """
        inside = _WRITING.get()
        if inside is not None and inside.session is self:
            return
        while self._writes_in_flight:
            waiter = asyncio.get_running_loop().create_future()
            with self._settling:
                if not self._pending_writes():
                    return  # ended (on another thread, say) since the check
                self._settle_waiters.append(waiter)
            # Woken when the last write ends; looked at again now and then, for a write
            # whose loop was closed meanwhile (it never ends, nor wakes anyone).
            done, _ = await asyncio.wait((waiter,), timeout=_LOOPS_LOOKED_AT_S)
            if not done:
                with self._settling:
                    if waiter in self._settle_waiters:
                        self._settle_waiters.remove(waiter)

    def _pending_writes(self) -> bool:
        """Whether a write may still end (under `_settling`): those whose loop was closed are
        dropped, as abandoned."""
        abandoned = [
            flight
            for flight in self._writes_in_flight
            if flight.loop is not None and flight.loop.is_closed()
        ]
        self._writes_in_flight.difference_update(abandoned)
        return bool(self._writes_in_flight)

    @property
    def run(self) -> Run:
        """The run as the session's last commit left it (decision 0011)."""
        return self._run

    @run.setter
    def run(self, run: Run) -> None:
        self._run = run
        self._moved()

    def _moved(self) -> None:
        """Note that the write whose transaction runs on this thread wrote to the copy."""
        moved = getattr(self._writing, "moved", None)
        if moved is not None:
            moved[0] = True

    async def _write(
        self,
        commit: Commit,
        fn: Callable[[Tx], T],
        point: str | None,
        in_tx: Callable[[], None] | None,
        kept_through_cancel: bool = False,
    ) -> T:
        deferred, self._deferred = self._deferred, []
        if not deferred:
            out = await write_through(self.config, commit, fn, in_tx)
        else:
            joined = write_through(
                self.config,
                commit.joining(d.commit for d in deferred),
                partial(self._with_deferred, deferred, fn),
                in_tx,
            )
            try:
                out, after = await (_ended_first(joined) if kept_through_cancel else joined)
            except _CancelledAfterRefusal:
                # Refused with nothing of it made (its outcome known before the cancel goes
                # on): still to be written, by the next commit, as below (decision 0216).
                self._deferred = deferred + self._deferred
                raise
            except (asyncio.CancelledError, GeneratorExit):
                # The caller stopped waiting (cancelled, or its coroutine closed from outside:
                # its loop gone, collected): the commit may have been made or not, as its group
                # goes. Nothing kept is written again (a crash at this point leaves either; a
                # close committing it again would claim a step recorded, or record one a crash
                # leaves unrecorded), and what the session would learn from it is not learnt:
                # a cancelled loop's session is not used again.
                raise
            except BaseException:
                # Rolled back with the rest: still to be written, by the next commit.
                self._deferred = deferred + self._deferred
                raise
            for learn in after:
                learn()
            for done in deferred:
                if done.commit.point is not None:
                    await self.probe(done.commit.point)
        if point is not None:
            await self.probe(point)
        return out

    async def _broke(self, commit: Commit, failed: BaseException, epoch: int) -> None:
        """A commit failed after its transaction had written to the session's copy: the
        copy is ahead of the rows (a tool's outcome, say, that the record does not hold).
        The session is not used again (`broken`); its run is read back, where the store
        still answers, so that what it shows and how it closes follow the record.

        So does the lease's epoch the session gives back by (decision 0187): `epoch`, the
        one granted before the write, when the commit was not made (a lease the write took,
        `take_over`'s, was rolled back with it); the record's, when it is unknown and the
        record shows this owner's lease."""
        unknown = self._broken_by(commit, failed, epoch)
        try:
            self.run = await run_io(partial(self.config.store.get_run, self.run_id))
            if unknown:
                lease = await run_io(partial(self.config.store.lease_state, self.run_id))
                if lease is not None and lease.held_by(self.config.owner):
                    self.epoch = lease.epoch
        except Exception:  # the store may be what failed: the session stays unusable anyway
            logging.getLogger("agentrt").warning(
                "could not read run %s back after a failed commit", self.run_id, exc_info=True
            )

    def _broken_by(self, commit: Commit, failed: BaseException, epoch: int) -> bool:
        """`_broke`'s judgement, without the read back: the session not used again, and the
        epoch it gives back by; True when whether the commit was made is unknown."""
        what = exception_text(failed)
        unknown = isinstance(failed, StoreError) and failed.commit_unknown
        if unknown:
            # The commit may have been made (decision 0163): the record, read again, says.
            recorded = "whether what it would have recorded is in the record is unknown"
        else:
            recorded = "what it would have recorded is not in the record"
            self.epoch = epoch
        self.broken = f"the {commit.name} commit of run {self.run_id} failed ({what}); {recorded}"
        return unknown

    def _with_deferred(
        self, deferred: Sequence[_Deferred], fn: Callable[[Tx], T], tx: Tx
    ) -> tuple[T, list[Callable[[], object]]]:
        guarded = self.hold_lease(tx)  # once, before anything kept is written
        after: list[Callable[[], object]] = []
        for write in deferred:
            learn = write.fn(tx, guarded)
            if learn is not None:
                after.append(learn)
            if write.commit.point is not None:
                self.probe_in_tx(write.commit.point)
        # The kept writes never touch the lease's columns: `check_lease` in `fn` judges
        # the lease as locked above rather than reading the run again.
        self._locked = (tx, guarded)
        try:
            return fn(tx), after
        finally:
            self._locked = None

    def defer(self, commit: Commit, fn: KeptWrite) -> None:
        """Keep `fn`'s writes (the session's copy already shows them) for the next commit.

        `fn` is called inside that commit's transaction once the lease was checked
        (`hold_lease`), with the run as locked there; the callable it may return is
        called once that commit is durable (`KeptWrite`).

        `commit` must be one the plan marks as joining the next (`Commit.joins`): its
        writes then commit with whatever the step does next, in front of its writes.
        """
        if not commit.joins:
            raise RuntimeError(f"the {commit.name!r} writes are a commit of their own")
        self._deferred.append(_Deferred(commit, fn))

    @property
    def has_deferred(self) -> bool:
        """Whether writes kept by `defer` wait for the next commit."""
        return bool(self._deferred)

    def forget_deferred(self) -> None:
        """Drop the writes `defer` kept: a claim refused once made (its session was closed
        while it read the run) is never written, by the close's commit or any other."""
        self._deferred = []

    async def commit_deferred(self, commit: Commit) -> None:
        """Commit the writes `defer` kept, alone, as `commit` (a loop that stops mid-step)."""
        if self._deferred:
            await self.write(commit, _nothing, None)

    async def write_outcome(
        self, commit: Commit, fn: Callable[[Tx], T], point: str | _Planned | None = PLANNED
    ) -> T:
        """`write` for an outcome that is already known (a tool's, a model attempt's).

        Such a write must not give up while its outcome is known: a database
        whose write lock another connection holds past the busy timeout is
        waited out, and the transaction retried, for as long as the lease is
        ours (the heartbeat keeps renewing it whenever it can get the lock).
        Only when the lease is no longer ours, or lapsed while the database
        stayed busy, does it fail loudly, with `LeaseLostError`, having written
        nothing: the outcome is then the next owner's to settle. A busy
        failure is one at `BEGIN IMMEDIATE`, before `fn` ran, so retrying never
        runs `fn` twice. (Decision 0012.)
        """
        # Counted in flight from the first try to the last, the waits between them included:
        # a close waits for the outcome's record before it gives the lease back.
        flight, inside = self._count_in()
        try:
            waiting_since: datetime | None = None
            while True:
                try:
                    return await self._write_counted(commit, fn, point)
                except StoreBusyError as busy:
                    if waiting_since is None:
                        waiting_since = self.config.wall()
                    await self._wait_out_busy(busy, waiting_since)
        finally:
            self._count_out(flight, inside)

    async def _wait_out_busy(self, busy: StoreBusyError, waiting_since: datetime) -> None:
        """Return to retry while the lease is ours; raise `LeaseLostError` once it is not."""
        config = self.config
        lease = await run_io(partial(config.store.lease_state, self.run_id))
        now = await run_io(partial(config.store.lease_now, config.wall))
        if lease is not None:
            if lease.status == RunStatus.RUNNING and lease.held_by(config.owner):
                if lease.live_at(now):
                    await asyncio.sleep(_BUSY_PAUSE_SECONDS)
                    return
                if is_deadlock(busy):  # not a wait past a timeout: say what happened
                    raise LeaseLostError(
                        f"the outcome's write was ended by a deadlock (PostgreSQL found it and "
                        "another transaction each waiting for the other, SQLSTATE 40P01) and "
                        f"the lease on run {self.run_id} had lapsed at {lease.shown_expiry()}, "
                        "so it was not tried again; the outcome was not recorded and is left "
                        "for the next owner"
                    ) from busy
                raise LeaseLostError(
                    f"the database stayed busy until the lease on run {self.run_id} lapsed "
                    f"at {lease.shown_expiry()}; the outcome was not recorded and is left for "
                    "the next owner"
                ) from busy
            # Cancelled while we held the lease: the late record is appended (see
            # `finish_tool`); it is waited for as long as the lease would have lasted.
            if (
                lease.status == RunStatus.CANCELLED
                and lease.epoch == self.epoch
                and config.wall() - waiting_since < config.lease_ttl
            ):
                await asyncio.sleep(_BUSY_PAUSE_SECONDS)
                return
        refused = (
            "its write was retried after a deadlock (SQLSTATE 40P01)"
            if is_deadlock(busy)
            else "the database was busy"
        )
        raise LeaseLostError(
            f"run {self.run_id} changed owner or status while {refused}; "
            "the outcome was not recorded and is left for the current owner"
        ) from busy

    def probe_in_tx(self, point: str) -> None:
        hook = self.config.probe_in_tx
        if hook is not None:
            hook(point, self)

    async def probe(self, point: str) -> None:
        hook = self.config.probe
        if hook is not None:
            await maybe_await(hook(point, self))

    def require_lease(self, tx: Tx, *, side_effect: bool = False) -> Run:
        """Lock the run inside the transaction; refuse to write without the lease.

        Before a side effect the lease must also be provably live by the store's
        lease clock. Returns the run as it stands.
        """
        return self.hold_lease(tx, side_effect=side_effect).run

    def hold_lease(self, tx: Tx, *, side_effect: bool = False) -> GuardedRun:
        """`require_lease`, returning the lock's record: its run is decoded only if asked for."""
        guarded = tx.lock_run(self.run_id)
        if guarded is None:
            raise RunStateError(f"run {self.run_id} disappeared")
        if guarded.lease.status != RunStatus.RUNNING:
            raise RunMoved(guarded.run)
        self._judge(guarded.lease, tx, side_effect)
        return guarded

    def _judge(self, lease: LeaseState, tx: Tx, side_effect: bool) -> None:
        """Refuse to write unless `lease` (of a RUNNING run) is this holder's, and, before a
        side effect, provably live by the store's lease clock."""
        if not lease.held_by(self.config.owner):
            raise LeaseLostError(
                f"run {self.run_id} is now leased by {lease.owner!r}; "
                "this loop stopped before its next side effect"
            )
        if lease.epoch != self.epoch:
            # This owner's, but granted since this session's (the same gate or driver took
            # the run again once this session let go, say while a write of it abandoned with
            # its event loop still waited in the committer): not this session's to write
            # under (decision 0195).
            raise LeaseLostError(
                f"run {self.run_id} is now leased by {lease.owner!r} at epoch {lease.epoch}, "
                f"granted since this session's lease (epoch {self.epoch}); this loop stopped "
                "before its next side effect"
            )
        # An expiry nobody can read is not provably live.
        if side_effect and not lease.live_at(tx.lease_now(self.config.wall)):
            raise LeaseLostError(
                f"the lease on run {self.run_id} lapsed at {lease.shown_expiry()}; "
                "no side effect is started on a lapsed lease"
            )

    def check_lease(self, tx: Tx, *, side_effect: bool = False) -> None:
        """`hold_lease` for a caller that needs only the verdict: inside a commit whose kept
        writes (`defer`) were just made, the lease locked before them is judged again (with
        the time now) instead of the run being read again."""
        locked = self._locked
        if locked is None or locked[0] is not tx:
            self.hold_lease(tx, side_effect=side_effect)
            return
        self._judge(locked[1].lease, tx, side_effect)

    @property
    def replaced(self) -> Sequence[int]:
        """The index of every step replaced in place, in order (appends are not listed):
        what a reader that keeps copies must copy again (`GateSession.input`)."""
        return self.steps.replaced

    def current(self, step: Step) -> Step:
        """The session's copy of `step` as last written (callers may hold an older one)."""
        position = self.steps.position_of(step.id)
        if position is None:
            raise RunStateError(f"step {step.id} is not a step of run {self.run_id}")
        return self.steps[position]

    def put_step(self, step: Step) -> Step:
        """Replace the session's copy of `step` (by id), or add it as the newest step.

        Invariant: after every commit, `self.run` and `self.steps` are what a
        fresh read of the rows would give, to the repr (number literals, key
        order, a time's type and zone): `tests/test_session_mirror.py` checks
        it at every crash point and after a run's last commit (decision 0011).
        An old settled step the log let go is read back from the rows when asked
        for (decision 0098), so it is such a read by construction.
        Every copy put here is what a named write of the store's `Tx`
        returned as written (the hot ones build it from the values they wrote,
        with the reader's own decoders, instead of reading the rows back). (A
        transaction that fails leaves the copy ahead of the rows; the session is
        then `broken` and not used again: decision 0136.)
        """
        self._moved()
        self.steps.put(step)
        return step

    def put_approval(self, approval: Approval) -> Approval:
        """Replace the session's copy of `approval` (by id), or add it as the newest."""
        self._moved()
        for i in range(len(self.approvals) - 1, -1, -1):
            if self.approvals[i].id == approval.id:
                self.approvals[i] = approval
                return approval
        self.approvals.append(approval)
        return approval

    def set_mark(self, now: datetime) -> None:
        """Start the active segment at `now` (a waiting run resumed then)."""
        self._mark = now

    def active_ms_until(self, now: datetime) -> int:
        """Milliseconds of active time since the last settled mark; advances the mark."""
        added = max(0, duration_to_ms(now - self._mark))
        self._mark = now
        return added

    def keep_lease_while(self, thread: concurrent.futures.Future[Any]) -> None:
        """A tool thread still running keeps the lease (renewed) until it returns: with one
        kept already (an earlier call's, cancelled mid-call), until both have returned. The
        one `lingering_tool` a close waits for is then a future done when both are."""
        kept = self.lingering_tool
        if kept is None or kept.done():  # nothing kept runs any more: this one alone
            self.lingering_tool = thread
        else:
            self.lingering_tool = _both_returned(kept, thread)
        if isinstance(thread, KeptTask):
            self._kept_tasks.add(thread)

    def calling(self, call: object) -> None:
        """A tool call of this session is in flight (counted before its lease check): until
        `called`, a heartbeat whose lease was lost keeps looking at what it may keep."""
        self._kept_tasks.calling(call)

    def called(self, call: object) -> None:
        """The call `calling` counted is over (what it kept, it kept already)."""
        self._kept_tasks.called(call)

    def start_heartbeat(self) -> Heartbeat:
        """Renew this session's lease on a thread of its own (idempotent)."""
        if self.heartbeat is None:
            config = self.config
            self.heartbeat = Heartbeat(
                config.store.renewer(config.wall),
                self.run_id,
                config.owner,
                config.lease_ttl,
                on_beat=self._kept_tasks.end_those_whose_loop_closed,
                keeps=self._kept_tasks.may_keep,
                gone=self.loop_gone,
                epoch=_epoch_of(weakref.ref(self)),
            )
            self.heartbeat.start()
        return self.heartbeat  # type: ignore[no-any-return]

    def stop_heartbeat(self) -> None:
        """Stop renewing without waiting for the thread (never blocks the event loop)."""
        if self.heartbeat is not None:
            self.heartbeat.stop(wait=False)

    def active_time_at(self, now: datetime) -> timedelta:
        """The run's active time as of `now`, without settling it."""
        return self.run.active_time + max(timedelta(0), now - self._mark)

    def args_hash(self, step: Step) -> str:
        """The hash of a step's arguments (loop detection), kept for the newest steps."""
        cached = self._args_hashes.get(step.id)
        if cached is None:
            args = step.decision.args if step.decision is not None else None
            cached = content_hash({} if args is None else args)
            hashes = self._args_hashes
            hashes[step.id] = cached
            if len(hashes) > _ARGS_HASHES_KEPT:  # the oldest first: a dict keeps its order
                del hashes[next(iter(hashes))]
        return cached

    def end_in(
        self,
        tx: Tx,
        now: datetime,
        status: str,
        reason: str,
        detail: str,
        *,
        result: JSON = None,
    ) -> Run:
        """End the RUNNING run with no step to settle; the session's copy is what was written."""
        self.run = tx.end_run(
            self.run_id,
            status,
            reason,
            detail,
            result=result,
            active_ms_add=self.active_ms_until(now),
            now=now,
        )
        return self.run

    def step_input_parts(self) -> tuple[Run, StepLog, tuple[Approval, ...]]:
        return self.run, self.steps, tuple(self.approvals)

    # -- 2. propose a decision ---------------------------------------------

    def policy_request(self, step: Step, spec: ToolSpec, args: JSON) -> tuple[ToolRequest, RunView]:
        shown = self.config.shown_specs[spec.name]
        request = ToolRequest(run_id=self.run_id, step_id=step.id, spec=shown, args=copy_json(args))
        # The step being judged is normally the last one: the view is then the log's
        # first n - 1 steps, held ones as they are, old ones read back if asked for.
        steps = self.steps
        prior: Sequence[Step]
        if steps and steps.held(len(steps) - 1) is not None and steps[-1].id == step.id:
            prior = steps.view(len(steps) - 1)
        else:
            prior = tuple(shown_step(s) for s in steps if s.id != step.id)
        view = RunView(run=self.run, steps=prior, approvals=tuple(self.approvals))
        return request, view

    async def ask_policy(self, step: Step, spec: ToolSpec, args: JSON) -> PolicyCheck:
        request, view = self.policy_request(step, spec, args)
        # Hashed before the policy runs: what it was given, whatever it does with it.
        recorded_input = input_record(request, view, self._input_hashes)
        try:
            result = await evaluate_policy(self.config.policy, request, shown_view(view))
        except asyncio.CancelledError as exc:
            if cancelled_by_caller():
                raise
            # The policy's own (it awaited something cancelled): its failure, as below.
            return PolicyCheck(None, f"policy raised {exception_text(exc)}")
        except Exception as exc:  # the policy is consumer code: its failure ends the run
            return PolicyCheck(None, f"policy raised {exception_text(exc)}")
        error = validate_policy_decision(result)
        if error is not None:
            return PolicyCheck(None, error)
        # Copied: the policy's own capability and presentation (a dict it shares between
        # runs, say) may change before `execute` or the pause records them (decision
        # 0138); its outcome is recorded as the `PolicyOutcome` acted on.
        result = kept_answer(result)
        payload = {
            "decision": copy_json(result.to_json()),
            "policy_id": self.config.policy_id,
            "spec_hash": self.config.spec_hashes[spec.name],
            "view": policy_view_counters(self.run, view.steps),
        }
        if recorded_input is not None:
            payload["input"] = recorded_input
        return PolicyCheck(result, None, payload)

    def allow(self, call: AllowedCall) -> None:
        """Hold the call the policy allowed for `execute` (nothing is written yet)."""
        self._allowed = call

    # -- 3. execute the allowed call ---------------------------------------

    def has_allowed_call(self) -> bool:
        return self._allowed is not None

    def allowed_step(self) -> Step:
        assert self._allowed is not None
        return self._allowed.step

    def take_allowed(self, step: Step) -> AllowedCall:
        """The allowed call of `step`, handed out once (`RunStateError` if there is none)."""
        allowed = self._allowed
        if allowed is None or allowed.step.id != step.id:
            raise RunStateError(f"step {step.id} has no allowed call to execute")
        self._allowed = None
        return allowed


_LOAD_PAGE = 256
"""Steps read at a time by `load`: what it holds beyond the log's budget."""


def load(config: LoopConfig, run_id: str) -> tuple[Run, StepLog, list[Approval]]:
    """The whole run as recorded, uncapped, in one consistent read.

    Its steps are a `StepLog` filled a page at a time, so old settled steps are let go
    as they are read: loading a long run holds the log's budget and a page, never the
    whole run (decision 0098). A run loaded before by this Gate or Driver starts from
    what that load read of its steps settled in a final status (`config.known`): only
    the steps after them are read (decision 0130).
    """
    read = partial(config.store.steps_from, run_id)
    known = config.known.get(run_id)
    with config.store.snapshot() as view:
        run = view.run_record(run_id)
        steps = None if known is None else _from_known(known, read, view, run_id)
        if steps is None:
            steps = StepLog([], read, digest=step_hash)
            _read_steps(view, run_id, steps, 0)
        approvals = view.approvals_of_run(run_id)
    config.known.keep(run_id, steps.settled_prefix())
    return run, steps, approvals


def _read_steps(view: Snapshot, run_id: str, steps: StepLog, first: int) -> None:
    """Append the run's steps from index `first` on to `steps`, a page at a time."""
    while True:
        page = view.steps_from(run_id, first, _LOAD_PAGE)
        for step in page:
            steps.append(step)
        if len(page) < _LOAD_PAGE:
            return
        first = page[-1].index + 1


def _from_known(
    known: SettledPrefix, read: Callable[[int, int], list[Step]], view: Snapshot, run_id: str
) -> StepLog | None:
    """The run's steps, from what an earlier load read (`known`) and the steps after it; None
    when the record does not go on from it (the step it ends with is not there, or not as
    it was known: settled, with the same digest).

    Of the newest `MIN_HELD` steps it holds, one it let go is read again (a log holds its
    newest steps, so that the limits and the step judged never read the store).
    """
    end = len(known)
    window = range(max(0, end - history.MIN_HELD), end)
    end = next((i for i in window if known.entries[i] is None), end)
    if end == 0:
        return None
    last_index, last_id, kept = known.indexes[end - 1], known.ids[end - 1], known.digests[end - 1]
    page = view.steps_from(run_id, last_index, _LOAD_PAGE)
    if (
        not page
        or page[0].index != last_index
        or page[0].id != last_id
        or page[0].status not in history.FINAL
        or step_hash(page[0]) != (kept[1] if isinstance(kept, tuple) else kept)
    ):
        # A record that does not hold the known steps as known (a copy restored from
        # before the last of them settled, say): read it whole. The steps before that
        # one cannot differ: none is written again once a later step exists.
        return None
    steps = StepLog(page[1:], read, digest=step_hash, prefix=known.head(end))
    if len(page) == _LOAD_PAGE:
        _read_steps(view, run_id, steps, page[-1].index + 1)
    return steps


class _KeptTasks:
    """The tool tasks a session keeps its lease for (`RunSession.keep_lease_while`). A task
    whose event loop was closed before it ended never runs again, and nothing tells the
    session (a loop's close calls nobody back): the heartbeat looks at each beat, on its own
    thread, and ends the future of such a task, so the lease is given back then, as once a
    kept thread returns (decision 0202 left it renewed for the life of the process). Added to
    on the loop's thread, read on the heartbeat's: the list is replaced, never changed in
    place, so a beat reads one whole list.

    It also counts the session's tool calls in flight (`calling`, `called`: an execute from
    before its lease check until it ends, or until a close counts one abandoned with its
    loop as running no more, its task kept first): only these can keep a task. Once the
    lease is lost no call starts, so a heartbeat that finds none in flight and no task kept
    running has nothing left to look at, and its thread ends (`may_keep`, decision 0209)."""

    __slots__ = ("_calls", "_tasks")

    def __init__(self) -> None:
        self._tasks: tuple[KeptTask, ...] = ()
        self._calls: set[object] = set()  # set.add and discard: one step each under the GIL

    def add(self, task: KeptTask) -> None:
        self._tasks = (*(t for t in self._tasks if not t.done()), task)

    def calling(self, call: object) -> None:
        self._calls.add(call)

    def called(self, call: object) -> None:
        self._calls.discard(call)

    def may_keep(self) -> bool:
        """Whether a task may still be kept: one kept not done, or a call in flight."""
        return bool(self._calls) or any(not t.done() for t in self._tasks)

    def end_those_whose_loop_closed(self) -> None:
        """On a heartbeat's beat: end each kept task's future whose loop was closed (its
        callbacks, a lease given back among them, run here, off any event loop)."""
        for task in self._tasks:
            if not task.done() and task.loop_closed():
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    task.set_result(None)


def _both_returned(
    first: concurrent.futures.Future[Any], second: concurrent.futures.Future[Any]
) -> concurrent.futures.Future[Any]:
    """A future done once `first` and `second` both are (on the thread that ends the last)."""
    both: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def returned(_: concurrent.futures.Future[Any]) -> None:
        if first.done() and second.done():
            with contextlib.suppress(concurrent.futures.InvalidStateError):  # both saw it
                both.set_result(None)

    first.add_done_callback(returned)
    second.add_done_callback(returned)
    return both


def unusable(broken: str) -> RunStateError:
    """The refusal of any call of a session that is `broken` (decision 0136): `broken` says why."""
    return RunStateError(
        f"{broken}; this session can no longer be used: close it (its lease is given back) "
        "and attach again, where the step left in flight is judged (decision 0136)"
    )


def release_lease(config: LoopConfig, run_id: str, epoch: int) -> None:
    """Give up the lease this driver was granted on a run at `epoch` (a session's `epoch`,
    read when it lets go): a lease granted since, to anyone, this driver too, is left as it
    is (decision 0187)."""
    with config.store.transaction() as tx:
        tx.release_lease(run_id, config.owner, epoch=epoch)


async def give_back_lease(config: LoopConfig, run_id: str, epoch: int, after: str) -> None:
    """`release_lease` off the event loop, once a loop or a start failed (`after` says
    which): a store that cannot give it back is logged, and the lease then lapses."""
    try:
        await run_io(lambda: release_lease(config, run_id, epoch))
    except Exception:
        logging.getLogger("agentrt").warning(
            "could not give back the lease on run %s %s; it will expire",
            run_id,
            after,
            exc_info=True,
        )
