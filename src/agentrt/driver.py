"""The Driver: an agent plus the step machine, run to a pause or an end.

`Driver.start` creates a run in one transaction (RUNNING, lease taken,
`run.created`, `run.started`, tool specs stored) and drives the loop;
`Driver.resume` continues a WAITING run after a person decided, or takes over a
RUNNING run whose process died. Both return the run as it stands when the loop
stops: terminal, or WAITING_FOR_APPROVAL. Every async entry point has a
blocking `_sync` twin for scripts and tests.

The loop itself lives in `session.RunSession`; the Driver only adds the agent:
begin a step, ask the agent, propose its decision, execute what was allowed.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, TypeVar, runtime_checkable

from . import _step
from ._resume_waiting import Undecodable, resume_waiting
from ._session import (
    INLINE_IO,
    LoopConfig,
    Probe,
    RunMoved,
    RunSession,
    Verdict,
    load,
    maybe_await,
    release_lease,
    run_io,
    write_through,
)
from ._store.writes import create_run, fail_waiting_run
from ._takeover import take_over
from .accounting import AccountingCaller
from .clock import Clock, IdFactory, new_id, wall_clock
from .errors import (
    ConfigError,
    LeaseLostError,
    LimitExceeded,
    ModelUnavailableError,
    RunStateError,
)
from .events import Observer
from .foreign import exception_text
from .lease import WallClock, expiry, holder_json, make_owner
from .model import Model, ModelConfig
from .operator import Operator
from .policy import Policy, policy_id_of
from .records import (
    Approval,
    Decision,
    Limits,
    Observation,
    Run,
    RunStatus,
    StepInput,
    StepStatus,
    TerminalReason,
)
from .recover import DEFAULT_LIMIT, Recovered
from .recover import recover as recover_runs
from .store import Store, Tx
from .tools import Tool, compile_tool, registered_spec, spec_hash, validate_tools

T = TypeVar("T")

_ID = re.compile(r"[0-9a-f]{32}")


@runtime_checkable
class Agent(Protocol):
    """Decides each step. `decide` may be a plain function or a coroutine."""

    def decide(self, input: StepInput) -> Decision | Awaitable[Decision]: ...


SHUTDOWN_GRACE_S = 1.0
"""How long a `_sync` call's own event loop waits, once the run has returned, for
coroutines it cancels (an async tool still running past its timeout) to end."""


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from blocking code, on an event loop of its own.

    Unlike `asyncio.run`, closing that loop never waits without bound: a coroutine
    left behind (an async tool that swallows its cancellation) gets
    `SHUTDOWN_GRACE_S` to end, then is abandoned with the loop, its outcome
    already recorded as the run's.
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
    """The loop is ours alone: store calls may run inline (see `session.INLINE_IO`)."""
    INLINE_IO.set(True)
    return await coro


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
        if store is None:
            raise ConfigError("Driver needs a store (agentrt.open_store(path))")
        if agent is None:
            raise ConfigError("Driver needs an agent")
        if policy is None:
            raise ConfigError("Driver needs a policy (agentrt.default_policy() is a start)")
        if not isinstance(lease_ttl, timedelta) or lease_ttl <= timedelta(0):
            raise ConfigError("lease_ttl must be a positive timedelta")
        if not isinstance(lease_owner, str):
            raise ConfigError("lease_owner must be a string")
        validated = validate_tools(list(tools))
        self.store = store
        self.agent = agent
        self.policy = policy
        self.policy_id = policy_id_of(policy)
        self.tools = validated
        self.observer = observer
        # One place to configure a model (docs/decisions/0020): a bare Model gets the
        # default ModelConfig; a ModelConfig carries the Model itself.
        if isinstance(model, ModelConfig):
            self.model_config: ModelConfig | None = model
        elif model is None:
            self.model_config = None
        elif isinstance(model, Model) and not isinstance(model, str):
            self.model_config = ModelConfig(model=model)
        else:
            raise ConfigError(
                "model must be an agentrt.Model (name and async generate) or a ModelConfig"
            )
        self.model: Model | None = None if self.model_config is None else self.model_config.model
        self.reconcile = reconcile
        self.now: Clock = now or wall_clock
        self.new_id: IdFactory = new_id or _default_new_id
        self.lease_ttl = lease_ttl
        self.lease_owner = make_owner(lease_owner)
        self._wall: WallClock = wall or wall_clock
        self._active: set[str] = set()
        # Runs whose cancelled loop left a tool thread running under our lease.
        self._lingering: set[str] = set()
        self._active_lock = threading.Lock()
        specs = {t.spec.name: registered_spec(t.spec) for t in validated}
        self._config = LoopConfig(
            store=store,
            tools={t.spec.name: t for t in validated},
            specs=specs,
            spec_hashes={name: spec_hash(spec) for name, spec in specs.items()},
            compiled={name: compile_tool(spec) for name, spec in specs.items()},
            shown_specs={name: registered_spec(spec) for name, spec in specs.items()},
            policy=policy,
            policy_id=self.policy_id,
            clock=self.now,
            new_id=self.new_id,
            observer=observer,
            owner=self.lease_owner,
            lease_ttl=lease_ttl,
            wall=self._wall,
            model=self.model,
            reconcile=reconcile,
            probe=probe,
            probe_in_tx=probe_in_tx,
        )

    # -- entry points ----------------------------------------------------

    async def start(
        self, goal: str, limits: Limits | None = None, run_id: str | None = None
    ) -> Run:
        """Create a run toward `goal` and drive it until it pauses or ends."""
        if not isinstance(goal, str):
            raise ConfigError("goal must be a string")
        try:
            goal.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ConfigError("goal is not valid UTF-8 text") from exc
        limits = limits or Limits()
        if not isinstance(limits, Limits):
            raise ConfigError("limits must be an agentrt.Limits")
        rid = run_id if run_id is not None else self.new_id()
        if not isinstance(rid, str) or not _ID.fullmatch(rid):
            # store.md: ids are 32 lowercase hex characters. Anything else would end
            # up inside commands an operator is told to copy and run.
            raise ConfigError(f"run id {rid!r} is not 32 lowercase hex characters")
        with self._exclusive(rid):
            session = await self._create(rid, goal, limits)
            try:
                return await self._drive(session)
            except RunMoved as moved:  # an operator cancelled it under us
                return moved.run

    async def resume(self, run_id: str) -> Run:
        """Continue a WAITING run after its approval was decided, or take over a dead one."""
        with self._exclusive(run_id):
            config = self._config
            run, steps, approvals = await run_io(lambda: load(config, run_id))
            session: RunSession | None = None
            try:
                if run.status == RunStatus.WAITING_FOR_APPROVAL:
                    try:
                        session = await resume_waiting(config, run, steps, approvals)
                    except Undecodable as exc:
                        return await self._fail_undecodable(run, str(exc))
                elif run.status == RunStatus.RUNNING:
                    session = await take_over(config, run_id)
                else:
                    raise RunStateError(f"run {run_id} is {run.status}; there is nothing to resume")
                if session.run.status != RunStatus.RUNNING:
                    return session.run
                return await self._drive(session)
            except RunMoved as moved:  # an operator cancelled it under us
                return moved.run
            finally:
                if session is not None and session.lingering_tool is None:
                    session.stop_heartbeat()

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
        return await recover_runs(self, limit=limit, after=after, concurrency=concurrency)

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

    def _let_go(self, session: RunSession) -> None:
        """A tool thread outlived its cancelled loop and has now returned: give the run up."""
        try:
            session.stop_heartbeat()
            release_lease(session.config, session.run_id)
        except Exception:  # the store may be closed by now: the lease then simply expires
            logging.getLogger("agentrt").warning(
                "could not release the lease on run %s; it will expire", session.run_id
            )
        finally:
            with self._active_lock:
                self._lingering.discard(session.run_id)

    def _is_executing(self, run_id: str) -> bool:
        with self._active_lock:
            return run_id in self._active or run_id in self._lingering

    async def _create(self, run_id: str, goal: str, limits: Limits) -> RunSession:
        config = self._config
        now = self.now()
        specs = [(config.spec_hashes[name], config.specs[name]) for name in sorted(config.specs)]

        def tx_create(tx: Tx) -> Run:
            return create_run(
                tx,
                run_id,
                goal,
                limits,
                owner=config.owner,
                lease_expires_at=expiry(config.wall, config.lease_ttl),
                holder=holder_json(),
                specs=specs,
                now=now,
            )

        run = await write_through(config, tx_create)
        return RunSession(config, run, [], [], epoch=1, mark=now)

    async def _fail_undecodable(self, run: Run, why: str) -> Run:
        """store.md: a run whose record will not decode is failed, never continued."""
        config = self._config
        detail = f"the run's record cannot be read back ({why}); it is not continued"

        def tx_fail(tx: Tx) -> Run:
            return fail_waiting_run(tx, run.id, detail, config.clock())

        return await write_through(config, tx_fail)

    async def _drive(self, session: RunSession) -> Run:
        config = self._config
        heartbeat = session.start_heartbeat()
        try:
            if session.has_allowed_call():
                await _step.execute(session, session.allowed_step())
                if session.run.status != RunStatus.RUNNING:
                    return session.run
            while True:
                if heartbeat.lost.is_set():
                    raise LeaseLostError(
                        f"the lease on run {session.run_id} was lost; the loop stopped"
                    )
                step = await _step.begin_step(session)
                if step is None:
                    return session.run
                decided = await self._decide(session, step)
                if decided is None:  # the agent's call ended the run
                    return session.run
                # Whatever the agent returned, None included, is recorded and validated.
                verdict = await _step.propose(session, step, decided.value)
                if verdict == Verdict.ALLOWED:
                    await _step.execute(session, step)
                    if session.run.status != RunStatus.RUNNING:
                        return session.run
                elif verdict in (Verdict.PENDING, Verdict.ENDED):
                    return session.run
        except asyncio.CancelledError:
            lingering = session.lingering_tool
            if lingering is None:
                await asyncio.shield(run_io(lambda: release_lease(config, session.run_id)))
            else:
                # The run stays this driver's until the thread returns: neither a
                # resume nor recover() of this driver may start a call beside it.
                with self._active_lock:
                    self._lingering.add(session.run_id)
                lingering.add_done_callback(lambda _: self._let_go(session))
            raise
        finally:
            if session.lingering_tool is None:
                session.stop_heartbeat()

    async def _decide(self, session: RunSession, step: Any) -> _Decided | None:
        """The agent's answer for `step`, wrapped; None when asking it ended the run.

        The answer is always wrapped, so no value an agent can return (None
        included) is ever mistaken for the run having ended.
        """
        run, steps, approvals = session.step_input_parts()
        shown = self._config.shown_specs
        specs = tuple(shown[name] for name in sorted(shown))
        caller = None
        if self.model is not None and self.model_config is not None:
            caller = AccountingCaller(session, step, self.model, self.model_config)
        step_input = StepInput(run=run, steps=steps, approvals=approvals, tools=specs, model=caller)
        agent: Any = self.agent
        try:
            decide: Callable[[StepInput], Any] = getattr(agent, "decide", agent)
            return _Decided(await maybe_await(decide(step_input)))
        except (LeaseLostError, RunMoved, asyncio.CancelledError):
            raise
        except LimitExceeded as exc:
            reason, detail = _limit_reason(exc)
        except ModelUnavailableError as exc:
            reason, detail = TerminalReason.MODEL_UNAVAILABLE, exception_text(exc, named=False)
        except Exception as exc:
            reason, detail = TerminalReason.AGENT_ERROR, exception_text(exc)
        await session.end_with_step(
            step,
            RunStatus.FAILED,
            reason,
            detail,
            step_status=StepStatus.FAILED,
            observation=Observation.invalid_decision(detail),
        )
        return None


@dataclass(frozen=True)
class _Decided:
    """What the agent returned for a step, whatever it is (see `Driver._decide`)."""

    value: Any


class _Exclusive:
    """Refuses a second concurrent call on a run this driver is executing."""

    def __init__(self, driver: Driver, run_id: str) -> None:
        self.driver = driver
        self.run_id = run_id

    def __enter__(self) -> None:
        with self.driver._active_lock:
            if self.run_id in self.driver._active or self.run_id in self.driver._lingering:
                raise RunStateError(
                    f"this driver is already executing run {self.run_id}; "
                    "a second concurrent call is refused"
                )
            self.driver._active.add(self.run_id)

    def __exit__(self, *exc: object) -> None:
        with self.driver._active_lock:
            self.driver._active.discard(self.run_id)


_MODEL_LIMITS = frozenset(
    {TerminalReason.LIMIT_MODEL_CALLS, TerminalReason.LIMIT_TOKENS, TerminalReason.LIMIT_COST}
)


def _limit_reason(exc: LimitExceeded) -> tuple[str, str]:
    """A model limit's reason and detail; a `LimitExceeded` naming no model limit is the agent's."""
    try:  # an agent may raise its own LimitExceeded (subclass): read it defensively
        reason, detail = exc.reason, exc.detail
        if isinstance(reason, str) and isinstance(detail, str):
            plain = str.__str__(reason)
            if plain in _MODEL_LIMITS:
                return plain, str.__str__(detail)
    except Exception:
        pass
    return TerminalReason.AGENT_ERROR, exception_text(exc)


def _default_new_id() -> str:
    return new_id()
