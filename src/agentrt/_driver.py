"""The Driver: an agent plus the step machine, run to a pause or an end.

`Driver.start` creates a run in one transaction (RUNNING, lease taken,
`run.created`, `run.started`, tool specs stored) and drives the loop;
`Driver.resume` continues a WAITING run after a person decided, or takes over a
RUNNING run whose process died. Both return the run as it stands when the loop
stops: terminal, or WAITING_FOR_APPROVAL. Every async entry point has a
blocking `_sync` twin for scripts and tests.

The Driver is a Gate plus an agent (`_gate.py`): `start` is `gate.begin`,
`resume` is `gate.attach`, and the loop is the one any consumer can write
over a gate session: `session.step()`, the agent's decision for
`session.input()`, `step.propose(decision)`, `step.execute()` when allowed.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

from ._clock import Clock, IdFactory
from ._errors import ConfigError, LeaseLostError, RunStateError
from ._events import Observer
from ._fork import left_to_the_parent
from ._gate import (
    Gate,
    GateSession,
    GateStep,
    Verdict,
    VerdictOutcome,
    check_agent,
    check_goal,
    configure,
)
from ._lease import WallClock
from ._model import Model, ModelConfig
from ._operator import Operator
from ._policy import Policy
from ._records import DRIVER_ORIGIN, Approval, Decision, Limits, Run, StepInput
from ._session import (
    SHUTDOWN_GRACE_S,
    Probe,
    RunMoved,
    cancelled_by_caller,
    maybe_await,
    run_sync,
)
from ._store import Store
from ._tools import Tool
from .recover import DEFAULT_LIMIT, Recovered
from .recover import recover as recover_runs

__all__ = ["SHUTDOWN_GRACE_S", "Agent", "Driver", "run_sync"]


@runtime_checkable
class Agent(Protocol):
    """Decides each step. `decide` may be a plain function or a coroutine."""

    def decide(self, input: StepInput) -> Decision | Awaitable[Decision]: ...


class Driver:
    """Drives runs of one agent over one set of tools under one policy."""

    def __init__(
        self,
        store: Store,
        agent: Agent | Callable[[StepInput], Any],
        policy: Policy,
        tools: Sequence[Tool] = (),
        observer: Observer | None = None,
        model: Model | ModelConfig | None = None,
        reconcile: Any = None,
        now: Clock | None = None,
        new_id: IdFactory | None = None,
        lease_ttl: timedelta = timedelta(seconds=30),
        lease_owner: str = "",
        *,
        wall: WallClock | None = None,
        probe: Probe | None = None,
        probe_in_tx: Probe | None = None,
    ) -> None:
        if store is not None and agent is None:
            raise ConfigError("Driver needs an agent")
        if store is not None:
            check_agent(agent)
        setup = configure(
            "Driver",
            store,
            policy,
            tools,
            observer,
            model,
            reconcile,
            now,
            new_id,
            lease_ttl,
            lease_owner,
            wall,
            probe,
            probe_in_tx,
        )
        self._gate = Gate._from_setup(setup, DRIVER_ORIGIN)
        self._config = setup.config
        self.store = store
        self.agent = agent
        self.policy = policy
        self.policy_id = setup.policy_id
        self.tools = setup.tools
        self.observer = observer
        self.model_config: ModelConfig | None = setup.model_config
        self.model: Model | None = setup.model
        self.reconcile = reconcile
        self.now: Clock = setup.config.clock
        self.new_id: IdFactory = setup.config.new_id
        self.lease_ttl = lease_ttl
        self.lease_owner = setup.owner
        self._wall: WallClock = setup.config.wall
        # One mark per `start`/`resume` running (`_Mark`: its run, its event loop, its session).
        self._active: set[_Mark] = set()
        # Runs whose cancelled loop left a tool thread running under our lease.
        self._lingering: set[str] = set()
        self._active_lock = threading.Lock()
        left_to_the_parent(self)  # its lock made again in a forked child (decision 0127)

    def _leave(self, parent: int) -> None:
        """In a forked child, a lock another thread held at the fork would never be given
        back: a new one (it guards a set of run ids for a moment, which the child finds
        whole, so a fork does not wait for it). Its store refuses the child (0127)."""
        self._active_lock = threading.Lock()

    # -- entry points ----------------------------------------------------

    async def start(
        self, goal: str, limits: Limits | None = None, run_id: str | None = None
    ) -> Run:
        """Create a run toward `goal` and drive it until it pauses or ends."""
        limits, rid = check_goal(goal, limits, run_id, self.new_id)
        with self._exclusive(rid) as mark:
            session = await self._gate.begin(goal, limits, rid)
            try:
                return await self._drive(session, mark)
            except RunMoved as moved:  # an operator cancelled it under us
                return moved.run

    async def resume(self, run_id: str) -> Run:
        """Continue a WAITING run after its approval was decided, or take over a dead one."""
        with self._exclusive(run_id) as mark:
            session: GateSession | None = None
            try:
                # One read of the run: attach refuses a run with nothing to continue.
                session, _ = await self._gate._attach_held(run_id, "there is nothing to resume")
                if session.done:
                    return session.run
                return await self._drive(session, mark)
            except RunMoved as moved:  # an operator cancelled it under us
                return moved.run
            finally:
                if session is not None:
                    session._for_driver().end()

    def approve(
        self, run_id: str, approval_id: str, by: str, note: str = "", shown_hash: str | None = None
    ) -> Approval:
        return self._operator().approve(run_id, approval_id, by, note, shown_hash)

    def reject(
        self, run_id: str, approval_id: str, by: str, note: str = "", shown_hash: str | None = None
    ) -> Approval:
        return self._operator().reject(run_id, approval_id, by, note, shown_hash)

    def cancel(self, run_id: str, by: str, note: str = "") -> Run:
        return self._operator().cancel(run_id, by, note)

    def start_sync(self, goal: str, limits: Limits | None = None, run_id: str | None = None) -> Run:
        return run_sync(self.start(goal, limits, run_id))

    def resume_sync(self, run_id: str) -> Run:
        return run_sync(self.resume(run_id))

    async def recover(
        self, *, limit: int = DEFAULT_LIMIT, after: str | None = None, concurrency: int = 1
    ) -> list[Recovered]:
        """Resume every run this program can resume; one `Recovered` per run examined.

        For a program starting up: RUNNING runs whose lease expired or whose
        owner is provably dead are taken over, WAITING runs whose latest
        approval was decided are resumed; a live lease and an undecided
        approval are skipped, and one run's failure never stops the others.
        At most `limit` runs are examined, oldest first; `after=` goes on past
        a run id. See `agentrt.recover` and docs/decisions/0021.
        """
        return await recover_runs(
            self.store,
            self._gate._continuer(self._is_executing),
            self.resume,
            now=self.now,
            wall=self._wall,
            limit=limit,
            after=after,
            concurrency=concurrency,
        )

    def recover_sync(
        self, *, limit: int = DEFAULT_LIMIT, after: str | None = None, concurrency: int = 1
    ) -> list[Recovered]:
        return run_sync(self.recover(limit=limit, after=after, concurrency=concurrency))

    approve_sync = approve
    reject_sync = reject
    cancel_sync = cancel

    # -- internals ---------------------------------------------------------

    def _operator(self) -> Operator:
        return Operator(self.store, observer=self.observer, now=self.now)

    def _exclusive(self, run_id: str) -> _Exclusive:
        return _Exclusive(self, run_id)

    def _given_back(self, run_id: str) -> None:
        """A tool thread outlived its cancelled loop; the session gave the run up.

        Not under `_active_lock`: a loop abandoned with its event loop tells this from the
        cycle collector, on any thread, one holding that lock too (`_exclusive` builds its
        refusal under it): waiting for it there never ends. One discard is one step under
        the GIL, and `_exclusive`'s look and add, under the lock, come whole before or
        after it (decision 0210's `Gate._let_go`, decision 0216)."""
        self._lingering.discard(run_id)

    def _linger(self, run_id: str) -> None:
        """Keep the run this driver's past its loop, until `_given_back`.

        Not under `_active_lock`, as `_given_back`: a loop abandoned with its event loop is
        closed by the cycle collector (`GeneratorExit`, this path), on any thread, one
        holding that lock too: waiting for it there never ends. Safe without it: the run is
        in `_active` all the while (`_drive` runs inside `_exclusive`), so no look of
        `_exclusive`'s admits the run before or after this add (decision 0218)."""
        self._lingering.add(run_id)

    def _is_executing(self, run_id: str) -> bool:
        with self._active_lock:
            if run_id in self._lingering:
                return True
            return any(m.run_id == run_id and not m.abandoned() for m in self._marks())

    def _marks(self) -> set[_Mark]:
        """The marks as they are now, to look through: `_active` itself may lose one to a
        loop ending on another thread (`_Exclusive.__exit__`, without the lock) between two
        looks of an iteration, which then fails ("Set changed size during iteration"). One
        copy is one step under the GIL (no Python code runs in it: a mark hashes by its id)."""
        return self._active.copy()

    async def _drive(self, session: GateSession, mark: _Mark) -> Run:
        """The loop over a gate session: step, decide, propose, execute what was allowed."""
        path = session._for_driver()
        run_id = session.run_id
        mark.session = session  # no await since the begin or the attach that made it
        # Its heartbeat renews nothing once this loop is closed, its task kept, and no tool
        # of it still runs: the lease lapses as a crashed process's does (decision 0223).
        session._driven_on = weakref.ref(mark.loop)
        try:
            allowed = session.current()
            if allowed is not None:  # attach allowed an approved call
                await path.run(allowed)
                if session.done:
                    return session.run
            while True:
                step = await path.step()
                if step is None:
                    return session.run
                decided = await self._decide(session, step)
                if decided is None:  # the agent's call ended the run
                    return session.run
                # Whatever the agent returned, None included, is recorded and validated.
                verdict: Verdict = await step.propose(decided.value)
                if verdict.outcome == VerdictOutcome.ALLOWED:
                    await path.run(step)
                    if session.done:
                        return session.run
                elif verdict.outcome in (VerdictOutcome.PENDING, VerdictOutcome.ENDED):
                    return session.run
        except asyncio.CancelledError:
            # A tool thread still running keeps the run this driver's until it
            # returns: neither a resume nor recover() of this driver may start a
            # call beside it. Marked before the session can give the run back.
            self._linger(run_id)
            if not await path.cancelled(lambda: self._given_back(run_id)):
                self._given_back(run_id)
            raise
        except RunMoved:
            raise  # an operator cancelled it under us: the run is no longer leased
        except GeneratorExit:
            # Closed from outside: its event loop was closed under it and the coroutine is
            # closed now (by the cycle collector, on any thread): nothing can be awaited
            # here, nor will its letting go ever run. A tool thread still running keeps the
            # run this driver's until it returns (told by `_give_back`); else the run is
            # freed now, its lease left to lapse or taken over by a resume, as after a crash
            # (decision 0218, as decision 0216 for a loop closed while it let go).
            if mark.taken:
                # Closed after a resume took the run from this loop, whose event loop was
                # closed: its session was let go there, and the run is that resume's now
                # (decision 0219).
                raise
            self._linger(run_id)
            if not path.closed_from_outside(lambda: self._given_back(run_id)):
                self._given_back(run_id)
            raise
        except BaseException:
            # Anything else (a store error, an id repeated, a KeyboardInterrupt or SystemExit
            # from the agent, the policy or an observer) still reaches the caller, but the
            # lease is not left to lapse under a loop that stopped: given back now, or once
            # a tool thread still running returns (decision 0163).
            self._linger(run_id)
            if not await path.stopped(lambda: self._given_back(run_id)):
                self._given_back(run_id)
            raise
        finally:
            path.end()

    async def _decide(self, session: GateSession, step: GateStep) -> _Decided | None:
        """The agent's answer for `step`, wrapped; None when asking it ended the run.

        The answer is always wrapped, so no value an agent can return (None
        included) is ever mistaken for the run having ended. An agent's
        exception fails the step as `step.fail` maps it.
        """
        step_input = session.input()
        agent: Any = self.agent
        try:
            decide: Callable[[StepInput], Any] = getattr(agent, "decide", agent)
            return _Decided(await maybe_await(decide(step_input)))
        except asyncio.CancelledError as exc:
            if cancelled_by_caller():
                raise
            # The agent's own (it awaited a request that was cancelled under it): nobody
            # cancelled this loop, so it is the agent's error, as a tool's own is its.
            await step.fail(exc)
        except (LeaseLostError, RunMoved):
            raise
        except Exception as exc:
            await step.fail(exc)
        return None


@dataclass(frozen=True)
class _Decided:
    """What the agent returned for a step, whatever it is (see `Driver._decide`)."""

    value: Any


class _Mark:
    """One `start`/`resume` of a run by this driver: the event loop it runs on, the gate
    session it drives once it has one, and `taken`, set when a later resume took the run
    from it (its loop closed). An attribute each: read by a coroutine closed from outside,
    on any thread (decision 0219)."""

    __slots__ = ("loop", "run_id", "session", "taken")

    def __init__(self, run_id: str, loop: asyncio.AbstractEventLoop) -> None:
        self.run_id = run_id
        self.loop = loop
        self.session: GateSession | None = None
        self.taken = False

    def abandoned(self) -> bool:
        """Whether nothing will ever resume this loop, its session known: its event loop was
        closed (the consumer's own, its task kept referenced, so never collected). Nothing
        is scheduled on a closed loop: the coroutine can only be closed, never go on. Its
        begin or attach in flight (no session yet) is not judged here: still refused."""
        return self.session is not None and self.loop.is_closed()


class _Exclusive:
    """Refuses a second concurrent call on a run this driver is executing.

    A mark whose loop is abandoned (`_Mark.abandoned`) refuses no resume: its session is
    let go as a crash leaves it (`DriverPath.abandoned`), and the run is then judged and
    taken over from this driver's own lease, the step in flight interrupted, never run
    again on its own. A tool thread of that loop still running keeps it refused until it
    returns (decision 0219)."""

    def __init__(self, driver: Driver, run_id: str) -> None:
        self.driver = driver
        self.run_id = run_id
        self.mark: _Mark | None = None

    def __enter__(self) -> _Mark:
        driver = self.driver
        run_id = self.run_id
        self.mark = mark = _Mark(run_id, asyncio.get_running_loop())  # entered by a coroutine
        with driver._active_lock:
            mine = [m for m in driver._marks() if m.run_id == run_id]
            left = mine[0] if len(mine) == 1 and mine[0].abandoned() else None
            if run_id in driver._lingering or (mine and left is None):
                raise _refused(run_id)
            if left is not None:
                left.taken = True  # looked at by that loop's coroutine closed from outside
                driver._active.discard(left)
                driver._lingering.add(run_id)  # until its session is let go
            driver._active.add(mark)
        if left is None:
            return mark
        session = left.session
        assert session is not None
        path = session._for_driver()
        try:
            later = path.abandoned(lambda: driver._given_back(run_id))
        except BaseException:
            if not path._tool_kept():  # a tool kept tells `_given_back` when it returns
                driver._given_back(run_id)
            driver._active.discard(mark)
            raise
        if later:  # a tool thread of the closed loop still runs: refused until it returns
            driver._active.discard(mark)
            raise _refused(run_id)
        driver._given_back(run_id)
        return mark

    def __exit__(self, *exc: object) -> None:
        # Not under the lock, as `Driver._given_back` (decision 0216): left by the cycle
        # collector's close of a loop abandoned with its event loop, on any thread. Its own
        # mark only: a resume that took the run from this loop marked it with another.
        if self.mark is not None:
            self.driver._active.discard(self.mark)


def _refused(run_id: str) -> RunStateError:
    return RunStateError(
        f"this driver is already executing run {run_id}; a second concurrent call is refused"
    )
