"""The Gate: the runtime's controls for a loop the consumer owns.

The consumer keeps its loop and its model; the runtime keeps the effect. A
`Gate` is the Driver's configuration less the agent: `begin` creates a run
under this process's lease and returns a `GateSession`; `session.step()`
claims the next step (checking the limits); `step.propose(decision)` records
the decision verbatim, validates it and asks the policy, returning a
`Verdict`; `step.execute()` runs an allowed call, exactly once, and records
its outcome. `attach` continues a run that waited for a person, or takes over
one whose owner died, under exactly the rules of `Driver.resume`. The Driver
itself is a Gate plus an agent (`_driver.py`).

Invariants (each has a test named for it in `tests/test_gate*.py`):

- The consumer never runs a tool: `execute` does, once per allowed verdict.
- An allowed verdict writes nothing: the step's claim and its decision are
  kept in memory and commit with the step's next commit, which for an allowed
  call is `execute`'s, with `step.tool_started`, before the tool runs (decision
  0088). A session abandoned after an allowed verdict leaves nothing of the
  step (`close` leaves it `deciding`), and recovery asks for the step again.
- A session abandoned during `execute` is a crash: the run pauses on an
  `interrupted_side_effect` approval at the next `attach`/`resume`.
- An `execute` whose tool-starting commit the store refuses with nothing written
  (`StoreBusyError`, or a `StoreError` whose commit is not of unknown outcome: a
  connection lost before it was sent) leaves the step open and allowed; a retry makes
  the same commit, and `step()` is refused meanwhile. Once `step.tool_started` is
  durable the step is never executable again (decision 0179).
- An `execute` cancelled before its outcome was recorded leaves the session `broken`
  (whether the tool's start was recorded is unknown to it): no more steps; `close` and
  `attach` judge the step as a crash left it. So is one abandoned with its event loop
  (the loop closed under it): it never finishes a close, so a close (a second one, after
  one that found it running) gives the lease back, once its tool's thread has returned.
  A close whose own loop was closed under it is made again by the next close (decision 0202).
- The lease is kept while any tool of the session may still run: every call cancelled
  mid-call whose thread still runs, and an async tool's task left running by an execute
  closed from outside on a live loop (decisions 0163, 0199, 0202).
- An `execute` that raised `LeaseLostError` stopped the loop: the session's `step()` and
  `propose` raise it too, writing nothing; `close` leaves the step `deciding`.
- One session per run: a run with a live session (this process, or another
  holding its lease) refuses a second `begin`/`attach`. A session being closed
  stays live until its lease is given back: a session of the same gate never
  takes over a lease that the close it follows then releases under it.
- Misuse raises before anything is written: `RunStateError` (a second open
  step, `execute` without an allowed verdict or twice, `propose` twice, a call
  after the run ended), `SessionClosedError` (any call after `close`).
- The lease is renewed while the session holds it; a lost lease raises
  `LeaseLostError` before any tool starts.

Every async entry point has a blocking `_sync` twin named like the Driver's
(`begin_sync`, `attach_sync`, `step_sync`, `propose_sync`, `execute_sync`,
`fail_sync`, `close_sync`); a twin called inside a running event loop raises.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import os
import re
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from . import _commit_plan as plan
from . import _step
from ._accounting import AccountingCaller
from ._canonical import copy_json
from ._clock import Clock, IdFactory, new_id, wall_clock
from ._continuation import Continuer, How, Refusal, RunFacts, executes_none, judge
from ._decisions import call_args
from ._errors import (
    ConfigError,
    LeaseLostError,
    RunStateError,
    SessionClosedError,
    StoreBusyError,
    StoreError,
)
from ._events import Observer
from ._execute import KeptTask
from ._fork import left_to_the_parent
from ._history import ShownSteps, StepLog
from ._lease import FIRST_EPOCH, WallClock, holder_json, make_owner
from ._model import Model, ModelConfig
from ._policy import Policy, policy_id_of
from ._records import (
    DRIVER_ORIGIN,
    MAX_DURATION_LIMIT,
    RECOVERABLE_ORIGINS,
    Approval,
    DecisionKind,
    Limits,
    Observation,
    Run,
    RunStatus,
    Step,
    StepInput,
    ToolRequest,
)
from ._resume_waiting import resume_waiting
from ._session import (
    EXECUTING,
    ExecuteInFlight,
    LoopConfig,
    Probe,
    RunMoved,
    RunSession,
    VerdictOutcome,
    give_back_lease,
    load,
    off_the_loop,
    release_lease,
    run_io,
    run_sync,
    unusable,
    write_through,
)
from ._shown import shown_approval, shown_run, shown_step
from ._store import Store, Tx
from ._takeover import take_over
from ._tools import Tool, compile_tool, registered_spec, spec_hash, validate_tools

__all__ = ["Gate", "GateSession", "GateStep", "Verdict", "VerdictOutcome"]

_ID = re.compile(r"[0-9a-f]{32}")

_ABANDONED = "was abandoned with its event loop (the loop was closed under it)"
"""What became of an execute whose loop was closed under it, in a broken session's sentence."""


@dataclass(frozen=True)
class Verdict:
    """What became of a proposed decision, or of a run `attach` continued.

    `outcome`: `allowed` (the open step's call may be executed, once),
    `denied` (the step failed: a policy denial or an invalid decision; the run
    goes on), `pending` (the run waits for a person on `approval`), `ended`
    (the run ended; `run.reason` says why). `request` is the call judged (None
    for a decision that is not a valid tool call), `observation` what the
    step's record shows the model (a denial's reason; None while nothing was
    observed), `run` the run as it stands after the verdict.
    """

    outcome: VerdictOutcome
    request: ToolRequest | None
    observation: Observation | None
    approval: Approval | None
    run: Run


@dataclass
class _Setup:
    """The configuration a Driver and a Gate share, validated once."""

    config: LoopConfig
    model_config: ModelConfig | None
    model: Model | None
    policy_id: str
    tools: list[Tool]
    owner: str


_ORIGIN = re.compile(r"[a-z0-9][a-z0-9:._-]{0,63}")

MAX_LEASE_OWNER = 1024
"""The longest `lease_owner` a Gate or Driver takes (decision 0200)."""


def check_origin(origin: object) -> None:
    """Refuse an origin label that is not 1-64 lowercase ASCII letters, digits or `:._-`."""
    if not isinstance(origin, str) or _ORIGIN.fullmatch(origin) is None:
        raise ConfigError(
            "origin must be a short label of lowercase ASCII letters, digits and ':._-' "
            f"(at most 64 characters, such as 'adapter:langgraph'), got {origin!r:.80}"
        )


def configure(
    who: str,
    store: Store,
    policy: Policy,
    tools: Sequence[Tool],
    observer: Observer | None,
    model: Model | ModelConfig | None,
    reconcile: Any,
    now: Clock | None,
    new_id: IdFactory | None,
    lease_ttl: timedelta,
    lease_owner: str,
    wall: WallClock | None,
    probe: Probe | None,
    probe_in_tx: Probe | None,
) -> _Setup:
    """Validate a Driver's or a Gate's configuration and build what its sessions share."""
    if store is None:
        raise ConfigError(f"{who} needs a store (agentrt.open_store(path))")
    if isinstance(store, str | bytes | os.PathLike):
        # A path is the commonest first mistake; it would fail inside the first step.
        shown = os.fsdecode(store)
        raise ConfigError(
            f"{who} needs a store, such as agentrt.open_store({shown!r}), "
            f"not the {type(store).__name__} {shown!r}"
        )
    if policy is None:
        raise ConfigError(f"{who} needs a policy (agentrt.default_policy() is a start)")
    check_policy(policy)
    tools = check_tools_list(tools)
    if not isinstance(lease_ttl, timedelta) or lease_ttl <= timedelta(0):
        raise ConfigError("lease_ttl must be a positive timedelta")
    if lease_ttl > MAX_DURATION_LIMIT:
        # Its expiry is the lease clock plus the length: bounded as a limit's duration is,
        # or a length past the last date a timestamp holds fails inside the first write.
        raise ConfigError(
            f"lease_ttl must be at most {MAX_DURATION_LIMIT.days} days, got {lease_ttl}"
        )
    if not isinstance(lease_owner, str):
        raise ConfigError("lease_owner must be a string")
    # Written into every lease of the run, read whole by every view of it: bounded, and text
    # every record can hold (a lone surrogate failed the run's first write, after this).
    if len(lease_owner) > MAX_LEASE_OWNER:
        raise ConfigError(
            f"lease_owner must be at most {MAX_LEASE_OWNER:,} characters, got {len(lease_owner):,}"
        )
    if not lease_owner.isascii():
        try:
            lease_owner.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(
                "lease_owner must be text UTF-8 can hold (it has a lone surrogate)"
            ) from None
    validated = validate_tools(list(tools))
    # One place to configure a model (docs/decisions/0020): a bare Model gets the
    # default ModelConfig; a ModelConfig carries the Model itself.
    model_config: ModelConfig | None
    if isinstance(model, ModelConfig):
        model_config = model
    elif model is None:
        model_config = None
    elif isinstance(model, Model) and not isinstance(model, str):
        model_config = ModelConfig(model=model)
    else:
        raise ConfigError(
            "model must be an agentrt.Model (name and async generate) or a ModelConfig"
        )
    the_model = None if model_config is None else model_config.model
    owner = make_owner(lease_owner)
    policy_id = policy_id_of(policy)
    specs = {t.spec.name: registered_spec(t.spec) for t in validated}
    config = LoopConfig(
        store=store,
        tools={t.spec.name: t for t in validated},
        specs=specs,
        spec_hashes={name: spec_hash(spec) for name, spec in specs.items()},
        compiled={name: compile_tool(spec) for name, spec in specs.items()},
        shown_specs={name: registered_spec(spec) for name, spec in specs.items()},
        policy=policy,
        policy_id=policy_id,
        clock=now or wall_clock,
        new_id=new_id or _default_new_id,
        observer=observer,
        owner=owner,
        lease_ttl=lease_ttl,
        wall=wall or wall_clock,
        model=the_model,
        reconcile=reconcile,
        probe=probe,
        probe_in_tx=probe_in_tx,
    )
    return _Setup(config, model_config, the_model, policy_id, validated, owner)


def _uncalled(thing: object, role: str, method: str) -> str:
    """What is wrong with a class or a function given where an instance is expected."""
    name = getattr(thing, "__name__", type(thing).__name__)
    if isinstance(thing, type):
        return f"; {name} is a class: pass an instance, {name}(...)"
    try:
        takes_nothing = not any(
            p.default is inspect.Parameter.empty
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            for p in inspect.signature(thing).parameters.values()  # type: ignore[arg-type]
        )
    except (TypeError, ValueError):
        takes_nothing = False
    if takes_nothing:  # a factory, such as agentrt.default_policy
        return f"; {name} is a function: did you mean {name}()?"
    return f"; {name} is a function: make it the {method} method of a {role} class"


def check_policy(policy: object) -> None:
    """Refuse, when a Driver or a Gate is built, a policy that could never answer."""
    if isinstance(policy, type) or not callable(getattr(policy, "evaluate", None)):
        what = (
            _uncalled(policy, "policy", "evaluate")
            if callable(policy)
            else f", got {type(policy).__name__}"
        )
        raise ConfigError(f"policy must be an object with an evaluate(request, view) method{what}")


def check_agent(agent: object) -> None:
    """Refuse, when a Driver is built, an agent that could never decide."""
    if isinstance(agent, type):
        raise ConfigError(
            "agent must have a decide(input) method or be a function of the step input"
            + _uncalled(agent, "agent", "decide")
        )
    if not callable(getattr(agent, "decide", agent)):
        raise ConfigError(
            "agent must have a decide(input) method or be a function of the step input, "
            f"got {type(agent).__name__}"
        )


def check_tools_list(tools: Any) -> Sequence[Tool]:
    """`tools` as a sequence of tools; one tool, a name or a mapping is refused, named."""
    spec = getattr(tools, "spec", None)
    if spec is not None and isinstance(getattr(spec, "name", None), str):
        raise ConfigError(f"tools must be a list of tools: [{spec.name}], not the tool itself")
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Iterable):
        raise ConfigError(
            f"tools must be a list of tools (made with @agentrt.tool), got {type(tools).__name__}"
        )
    return list(tools)


def check_goal(goal: Any, limits: Any, run_id: Any, new_run_id: IdFactory) -> tuple[Limits, str]:
    """A new run's goal, limits and id, checked; ConfigError names what is wrong."""
    if not isinstance(goal, str):
        raise ConfigError("goal must be a string")
    try:
        goal.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError("goal is not valid UTF-8 text") from exc
    limits = limits or Limits()
    if not isinstance(limits, Limits):
        raise ConfigError("limits must be an agentrt.Limits")
    rid = run_id if run_id is not None else new_run_id()
    if not isinstance(rid, str) or not _ID.fullmatch(rid):
        # store.md: ids are 32 lowercase hex characters. Anything else would end
        # up inside commands an operator is told to copy and run.
        raise ConfigError(f"run id {rid!r} is not 32 lowercase hex characters")
    return limits, rid


class Gate:
    """The controls (record, check, policy, approval, lease, execution) for your own loop."""

    def __init__(
        self,
        store: Store,
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
        origin: str = "gate",
    ) -> None:
        check_origin(origin)
        setup = configure(
            "Gate",
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
        self._init(setup, origin)

    @classmethod
    def _from_setup(cls, setup: _Setup, origin: str) -> Gate:
        gate = cls.__new__(cls)
        gate._init(setup, origin)
        return gate

    def _init(self, setup: _Setup, origin: str) -> None:
        self._setup = setup
        self.origin = origin
        self._config = setup.config
        self.store = setup.config.store
        self.policy = setup.config.policy
        self.policy_id = setup.policy_id
        self.tools = setup.tools
        self.lease_owner = setup.owner
        self._live: set[str] = set()
        self._lock = threading.Lock()
        left_to_the_parent(self)  # its lock made again in a forked child (decision 0127)

    def _leave(self, parent: int) -> None:
        """In a forked child, a lock another thread held at the fork would never be given
        back: a new one (it guards a set of run ids for a moment, which the child finds
        whole, so a fork does not wait for it). Its store refuses the child (0127)."""
        self._lock = threading.Lock()

    # -- entry points ----------------------------------------------------

    async def begin(
        self, goal: str, limits: Limits | None = None, run_id: str | None = None
    ) -> GateSession:
        """Create a run toward `goal` under this process's lease; its session."""
        limits, rid = check_goal(goal, limits, run_id, self._config.new_id)
        self._hold(rid)
        written = threading.Event()
        try:
            rs = await self._create(rid, goal, limits, written)
        except BaseException:
            self._let_go(rid)
            # The run may have been created (an observer raising `KeyboardInterrupt` on
            # `run.created`, a commit whose outcome is unknown): nothing runs under its
            # lease, which is given back (no-op when it is not this gate's). A begin that
            # wrote no run (a closed store, busy before its transaction, a run id taken)
            # holds no lease: nothing to give back, nor to log (decision 0203).
            if written.is_set():
                await self._give_back_created(rid)
            raise
        rs.start_heartbeat()
        return GateSession(self, rs)

    async def attach(self, run_id: str) -> tuple[GateSession, Verdict | None]:
        """Continue a run that waited for a person, or take over one whose owner died.

        The verdict: for a waiting run, what its approved request now is
        (`allowed` with the open step ready to `execute`, `denied`, `pending`
        again, or `ended`); for a taken-over run, `pending` when an interrupted
        side effect waits for a person, `ended` when the run ended, and None
        when the run simply goes on with no open step (nothing was judged).
        """
        return await self._attach_held(run_id, "there is nothing to attach to")

    def begin_sync(
        self, goal: str, limits: Limits | None = None, run_id: str | None = None
    ) -> GateSession:
        return run_sync(self.begin(goal, limits, run_id))

    def attach_sync(self, run_id: str) -> tuple[GateSession, Verdict | None]:
        return run_sync(self.attach(run_id))

    # -- internals ---------------------------------------------------------

    def _hold(self, run_id: str) -> None:
        with self._lock:
            if run_id in self._live:
                raise RunStateError(
                    f"run {run_id} already has a live session; a second one is refused"
                )
            self._live.add(run_id)

    async def _attach_held(self, run_id: str, nothing: str) -> tuple[GateSession, Verdict | None]:
        """`attach`, for the package: `nothing` ends the refusal of a run with nothing
        to continue (the Driver says "there is nothing to resume")."""
        self._hold(run_id)
        try:
            return await self._attach(run_id, nothing)
        except BaseException:
            self._let_go(run_id)
            raise

    def _let_go(self, run_id: str) -> None:
        # Not under `_lock`: a session's letting go closed from outside (its loop gone) and a
        # session's finalizer (`_abandoned`) free the run from the cycle collector, on any
        # thread, one holding that lock too (`_hold` builds its refusal under it): waiting for
        # it there never ends (decision 0195's `_settling`, 0209's claim). One discard is one
        # step under the GIL, and `_hold`'s look and add, under the lock, come before or after
        # it whole: a hold beside it finds the run live (refused) or free (held).
        self._live.discard(run_id)

    async def _give_back_created(self, run_id: str) -> None:
        """Give up this gate's lease on `run_id` after `begin` failed; a store that cannot is
        logged (the lease then lapses)."""
        # `create_run` grants epoch 1: a lease this gate took back since (an attach of the
        # run once it was freed) has a later one and is left as it is (decision 0187).
        await give_back_lease(self._config, run_id, FIRST_EPOCH, "after its start failed")

    async def _create(
        self, run_id: str, goal: str, limits: Limits, written: threading.Event
    ) -> RunSession:
        """Create the run; `written` is set once a transaction holds it (committed or not)."""
        config = self._config
        now = config.clock()
        specs = [(config.spec_hashes[name], config.specs[name]) for name in sorted(config.specs)]

        def tx_create(tx: Tx) -> Run:
            run = tx.create_run(
                run_id,
                goal,
                limits,
                owner=config.owner,
                lease_expires_at=tx.lease_now(config.wall) + config.lease_ttl,
                holder=holder_json(),
                specs=specs,
                now=now,
                origin=self.origin,
            )
            written.set()
            return run

        run = await write_through(config, plan.RUN_CREATED, tx_create)
        return RunSession(config, run, [], [], epoch=FIRST_EPOCH, mark=now)

    def _continuer(self, executing: Callable[[str], bool] = executes_none) -> Continuer:
        """Who asks to continue a run: this gate's owner, origins and tools.

        A Driver continues only what a Driver or a plain Gate began (decision
        0049). `executing` names the runs a Driver executes now (its recover asks).
        """
        return Continuer(
            self._config.owner,
            RECOVERABLE_ORIGINS if self.origin == DRIVER_ORIGIN else None,
            frozenset(self._config.specs),
            executing,
        )

    async def _attach(self, run_id: str, nothing: str) -> tuple[GateSession, Verdict | None]:
        config = self._config
        run, steps, approvals = await run_io(lambda: load(config, run_id))
        # The snapshot's judgement: its status and origin (the lease and the approval
        # are judged where the takeover and the waiting run's resume read them).
        judged = judge(
            RunFacts(run.id, run.status, run.origin),
            self._continuer(),
            lease_now=lambda: config.store.lease_now(config.wall),
            now=config.clock,
            nothing=nothing,
        )
        if isinstance(judged, Refusal):
            raise judged.error
        if judged.how != How.TAKE_OVER:  # resume waiting, or settle its expired approval
            rs = await resume_waiting(config, run, steps, approvals)
            waiting_step = rs.steps[-1] if rs.steps else None
            session = GateSession(self, rs)
            if rs.has_allowed_call():
                # The waiting run's lease is held (`hold_waiting`): keep it renewed
                # until `execute` takes the run back, or `close` gives it up.
                rs.start_heartbeat()
                open_step = session._open_allowed(rs.allowed_step())
                return session, session._verdict(open_step.step)
            if rs.run.status == RunStatus.RUNNING:
                rs.start_heartbeat()
            verdict = session._verdict(waiting_step)
            session._settle_if_done()
            return session, verdict
        # A RUNNING run whose owner is gone: take it over (the lease is judged there).
        # The takeover loads the run again, in its own read: this look's steps go first.
        del steps, approvals
        rs = await take_over(config, run_id)
        session = GateSession(self, rs)
        if rs.has_allowed_call():
            # A tool's reconciliation vouched that its interrupted request may run
            # again and the policy allowed it (decision 0067): held for execute.
            open_step = session._open_allowed(rs.allowed_step())
            return session, session._verdict(open_step.step)
        if rs.run.status == RunStatus.RUNNING:
            return session, None
        verdict = session._verdict(rs.steps[-1] if rs.steps else None)
        session._settle_if_done()
        return session, verdict


class GateSession:
    """One run under this process's lease, driven by the consumer's loop."""

    def __init__(self, gate: Gate, rs: RunSession) -> None:
        self._gate = gate
        self._rs = rs
        self._open: GateStep | None = None
        self._closed = False
        self._released = False
        # The claim (`step()`) being made right now, with the event loop it waits on: None
        # when none is. One whose loop was closed under it is never resumed, and refuses no
        # later claim (decision 0216).
        self._claiming: _Claim | None = None
        # The close came while a step was claimed: the claim is refused, and the close
        # commits none of what the session kept (it is that claim's).
        self._claim_cut = False
        # The close's letting go is made once: by `close`, or by the `execute` it came
        # during; both may look at once from two threads (a `_sync` twin's loop each).
        # `_closed` and `_executing` are changed together under this lock.
        self._close_taken = False
        self._close_lock = threading.Lock()
        # The event loop the close's letting go waits on, and whether it ended: one whose loop
        # was closed under it (the consumer's own) never resumes, and the next close makes it
        # again (`_close_stranded`). The run is freed for this gate once (`_free`).
        self._closing_on: asyncio.AbstractEventLoop | None = None
        self._let_go_ended = False
        self._freed = False
        self._free_lock = threading.Lock()
        # Called once the lease is given back after a lingering tool thread returned.
        self._on_given_back: list[Callable[[], None]] = []
        # A session dropped without close() stops renewing its lease once it is
        # collected, so the run can be taken over when the lease expires instead of
        # being held until the process exits. (The callback holds no reference to
        # the session; a running execute() keeps the session alive.)
        self._finalizer = weakref.finalize(self, _abandoned, rs, gate, rs.run_id)
        # The event loop a Driver drives this session on (`Driver._drive`), referred to
        # weakly: once it is closed (its task kept), the heartbeat renews nothing, unless a
        # tool of it still runs (decision 0223). None for a consumer's own session: its
        # claim and executes in flight name their loops.
        self._driven_on: weakref.ref[asyncio.AbstractEventLoop] | None = None
        rs.loop_gone.look = _looks_gone(weakref.ref(self))
        # The execute() calls running now (each with the loop it waits on and its tool's
        # threads), and the step each executes: changed under `_close_lock`.
        self._executions: dict[ExecuteInFlight, GateStep] = {}
        # An execute raised `LeaseLostError`: the loop stopped, no more steps (a lapse nobody
        # took over would still let a new step's plain writes through).
        self._lease_lost = False
        # The copies shown, one per step in order (None for a step the session's log let
        # go: read back when asked for), and how much of the log's lists of replaced and
        # let-go steps they have taken in: an input copies only steps new or replaced
        # since the last one, so a run of n steps costs one copy per step written.
        self._shown: list[Step | None] = []
        self._replaced_seen = 0
        self._dropped_seen = 0

    @property
    def _executing(self) -> int:
        """How many execute() calls are running a tool right now."""
        return len(self._executions)

    # -- reading -----------------------------------------------------------

    @property
    def run(self) -> Run:
        """The run as last written by this session."""
        return self._rs.run

    @property
    def run_id(self) -> str:
        return self._rs.run_id

    @property
    def done(self) -> bool:
        """Whether the run left RUNNING (ended, or waiting for a person): no more steps."""
        return self._rs.run.status != RunStatus.RUNNING and not self._rs.has_allowed_call()

    def current(self) -> GateStep | None:
        """The open step (claimed, not yet settled), or None."""
        if self._open is not None and self._open._settled:
            self._open = None
        return self._open

    def input(self) -> StepInput:
        """What an agent would be shown now (the Driver shows its agent the same); no clock read."""
        self._usable()
        rs = self._rs
        run, steps, approvals = rs.step_input_parts()
        shown = rs.config.shown_specs
        specs = tuple(shown[name] for name in sorted(shown))
        open_step = self.current()
        caller = open_step.model if open_step is not None else None
        # Copies: what the consumer does to them changes nothing recorded, judged or
        # executed. A held step's copy is made once per version of the step (a run of
        # n steps costs one copy per step written, not n per input: O(1) amortized),
        # so a consumer that edits what it was shown sees its own edits in the next
        # input while the step is held; an old step the log let go is read back, a
        # new copy each time it is asked for (decision 0098).
        return StepInput(
            run=shown_run(run),
            steps=self._steps_shown(steps),
            approvals=tuple(shown_approval(approval) for approval in approvals),
            tools=specs,
            model=caller,
        )

    def _steps_shown(self, steps: StepLog) -> ShownSteps:
        """Copies of `steps`: those kept from the last input, new ones for held steps added
        or replaced since, none for those the log let go (it lists both by index)."""
        shown = self._shown
        for index in set(steps.replaced[self._replaced_seen :]):
            if index < len(shown):
                held = steps.held(index)
                shown[index] = None if held is None else shown_step(held)
        self._replaced_seen = len(steps.replaced)
        for index in steps.dropped[self._dropped_seen :]:
            if index < len(shown):
                shown[index] = None
        self._dropped_seen = len(steps.dropped)
        for index in range(len(shown), len(steps)):
            held = steps.held(index)
            shown.append(None if held is None else shown_step(held))
        return ShownSteps(steps, tuple(shown))

    # -- the loop ----------------------------------------------------------

    async def step(self) -> GateStep | None:
        """Claim the next step; None when a limit (or a cancel) ended the run instead.

        The claim is made in memory (the run's status read first, no commit) and
        commits with the step's next commit (decision 0088).
        """
        return await self._claim(read_first=True)

    async def _claim(self, *, read_first: bool) -> GateStep | None:
        # Under the close lock, as `execute` counts itself: a close (from this loop or
        # another thread) either comes after the claim is decided, and commits it as an
        # open step (`LEFT_OPEN`), or finds it being claimed and commits none of it. So is
        # a second claim on another thread: it finds this one marked, or its open step.
        claim = _Claim(asyncio.get_running_loop())
        with self._close_lock:
            self._claimable()
            self._claiming = claim
        step: Step | None = None
        closed = cut_off = False
        opened: GateStep | None = None
        try:
            step = await _step.begin_step(self._rs, read_first=read_first)
        except LeaseLostError:
            if self._closed:
                raise self._closed_while_claiming() from None
            raise
        except GeneratorExit:
            # Closed from outside (its loop closed under the status read or a limit's commit,
            # the coroutine collected): the collector may close it on a thread that holds the
            # close lock (a close looking under it), so the lock is not taken here (decision
            # 0195's `_settling`). Nothing of the claim is kept: `begin_step` keeps it only
            # after its last await, and a limit's commit cut short takes what it kept with it
            # (decision 0206). The mark alone is taken back, an attribute set: no other claim
            # runs while it is set, and a close that reads it either way commits nothing of
            # this claim, none being kept (decision 0209). Only its own mark: a claim whose
            # loop was closed long before may be closed now, past a claim made since from a
            # live loop, whose mark it must not take back (decision 0216).
            cut_off = True
            raise
        finally:
            if cut_off:
                claim.ended = True
            else:
                with self._close_lock:
                    claim.ended = True
                    if self._claiming is claim:
                        self._claiming = None
                    closed = self._closed
                    if closed:
                        # Closed while the claim was made: that close gives the lease back and
                        # commits nothing the session kept (`_claim_cut`), so the claim (kept for
                        # the step's first commit) is never written.
                        self._rs.forget_deferred()
                    elif step is not None:
                        # Open before the mark is taken back: a claim on another thread then
                        # finds the step open.
                        self._open = opened = GateStep(self, step, self._caller(step))
        if closed and step is not None:
            raise self._closed_while_claiming()
        if opened is None:
            self._settle_if_done()
            return None
        return opened

    def _claimable(self) -> None:
        """Refuse a claim now (under the close lock): closed, a step open or being claimed, a
        tool running, the run not RUNNING or its lease not held."""
        self._drop_abandoned()
        self._usable()
        open_step = self.current()
        if open_step is not None and open_step._refused:
            raise RunStateError(
                f"step {open_step.index} of run {self.run_id} is still open: its execute was "
                f"refused {open_step._refused} before the tool started, and nothing of that "
                "execute was written; execute it again, or close the session"
            )
        if open_step is not None:
            raise RunStateError(
                f"step {open_step.index} of run {self.run_id} "
                "is still open; propose and execute it (or fail it) first"
            )
        if self._claim_in_flight():
            raise RunStateError(
                f"a step of run {self.run_id} is being claimed by another call; "
                "one open step at a time"
            )
        if self._executing:
            raise RunStateError(
                f"a tool of run {self.run_id} is still running; the next step is claimed once "
                "its execute has returned"
            )
        self._running()
        self._lease_held()

    def _loop_gone(self) -> bool:
        """On the heartbeat's thread, with no lock: whether the event loop driving this session
        was closed with its task kept, so that nothing of it can run again, and no tool of it
        still runs (a real side effect in progress keeps the lease renewed, as a long tool
        call's). The Driver's loop (`_driven_on`) whatever it awaits; else a consumer's claim
        or executes in flight, each on a closed loop (an idle session judges nothing: its
        consumer may be deciding on a live loop). Its lease then lapses, as a crashed
        process's does, and another process may take the run over (decision 0223)."""
        lingering = self._rs.lingering_tool
        if lingering is not None and not lingering.done():
            return False
        flights = list(self._executions)  # a copy: one step under the GIL (hashed by id)
        if any(_runs(thread) for flight in flights for thread in list(flight.threads)):
            return False
        driven = self._driven_on
        if driven is not None:
            loop = driven()
            return loop is None or loop.is_closed()
        looks = [flight.abandoned() for flight in flights]
        claim = self._claiming
        if claim is not None and not claim.ended:
            looks.append(claim.loop.is_closed())
        return bool(looks) and all(looks)

    def _claim_in_flight(self) -> bool:
        """Under `_close_lock`: whether a claim is being made that may still go on. One whose
        event loop was closed under it (the consumer's own, its task kept referenced) is
        never resumed: its mark is dropped here, as a close drops an execute abandoned with
        its loop (decision 0198). Nothing of it is kept: `begin_step` keeps the claim after
        its last await, and a limit's commit it awaited took what it kept with it (decision
        0206); a later claim judges the run on the session's copy, and every step's first
        commit carries its claim, checked against the record (decision 0216)."""
        claim = self._claiming
        if claim is None:
            return False
        if claim.ended or claim.loop.is_closed():
            self._claiming = None
            return False
        return True

    def _closed_while_claiming(self) -> SessionClosedError:
        return SessionClosedError(
            f"the gate session of run {self.run_id} was closed while its next step was "
            "claimed; nothing of that step was recorded"
        )

    async def close(self) -> None:
        """Release the lease; an open step is left `deciding`, as a crash would leave it.

        An `execute` whose event loop was closed under it counts as running no more: the
        session is broken as a cancelled one's is, and a close made after that (a second one,
        if the first came while it ran) lets go of the lease (decision 0198).

        Not while a tool may still run under it: a tool thread still running keeps it,
        renewed, until the thread returns; a call an exception (not a cancel) broke into
        with no thread to wait for (an async tool's task) keeps it until it lapses, as the
        Driver's loop does (decision 0163).

        The open step's claim (and its decision, if proposed) is committed first
        (`plan.LEFT_OPEN`). A step proposed and allowed but not executed stays
        never run: a later `attach`/`resume` judges it as a step that was deciding
        (it continues), or, for a waiting run, judges the approved request again.
        """
        # Under the close lock: an `execute` on another thread either counts as running
        # before this looks (it then finishes the close) or finds the session closed.
        with self._close_lock:
            first = not self._closed
            if first:
                self._closed = True
                # A claim being made now is refused once it ends (it looks under this lock):
                # what it keeps is not this close's to commit.
                self._claim_cut = self._claim_in_flight()
            # An execute whose event loop was closed under it never finishes the close: it
            # counts as running no more (decision 0198). A second close finishes the close a
            # first one left to such an execute.
            dropped = self._drop_abandoned()
            executing = self._executing
            # A letting go abandoned with its loop (closed under the close) is made again here.
            stranded = self._close_stranded()
            if stranded:
                self._close_taken = False
        if not first and not dropped and not stranded:
            return
        if executing:
            # A tool is running under this lease: it stays renewed until the call's
            # outcome is recorded; the `execute` in flight then finishes the close.
            return
        await self._finish_close()

    async def _finish_close(self) -> None:
        # Once: a close from another thread may find no execute running just as the
        # execute it came beside finds it closed; a second letting go would free the run
        # of a session of this gate attached after the first (its lease is not given back:
        # the release names this session's epoch, decision 0187).
        loop = asyncio.get_running_loop()
        with self._close_lock:
            if self._close_taken:
                return
            self._close_taken = True
            self._closing_on = loop
        # In a task of its own, shielded: a caller that stops waiting does not stop the
        # close half-way (the lease given back, the run freed for this gate's sessions).
        await _told_when_ended(self._close_once_written(), _nobody)

    def _close_stranded(self) -> bool:
        """Under `_close_lock`: whether the close's letting go was taken on an event loop that
        was closed under it before it ended (the consumer's own loop): nothing will resume it,
        so the next close makes it again, as for an execute abandoned with its loop (decision
        0198). Its steps are each made at most once in effect: the writes of the abandoned
        one are not waited for (their loop is closed, decision 0188), what it kept to commit
        it took with it, and the lease is given back by this session's epoch (0187)."""
        loop = self._closing_on
        return (
            self._close_taken and not self._let_go_ended and loop is not None and loop.is_closed()
        )

    def _free(self) -> None:
        """Free the run for another session of this gate, once: a letting go abandoned with its
        loop and closed later (collected) must not free the run of a session attached since."""
        with self._free_lock:  # not the close lock: a collected letting go may free the run
            if self._freed:  # on a thread holding that lock (decision 0195's `_settling`)
                return
            self._freed = True
        self._gate._let_go(self.run_id)

    async def _close_once_written(self) -> None:
        try:
            await self._letting_go()
        except GeneratorExit:
            raise  # closed from outside (its loop gone): a next close makes it again
        except BaseException:
            self._let_go_ended = True
            raise
        self._let_go_ended = True

    async def _letting_go(self) -> None:
        rs = self._rs
        # Another task's commit in flight (a step's decision, its failure) is made first:
        # letting go never races a step still being recorded (decision 0176).
        try:
            await rs.writes_settled()
        except BaseException:
            # The wait itself was cut short (the loop ending cancels every task, this one
            # too): nothing is given back, and the lease lapses as after a crash, but it is
            # renewed no more and the run is this gate's no longer (a later attach takes
            # it over), as a close cut short before the wait existed left it.
            self._detach()
            raise
        held = rs.run.status == RunStatus.RUNNING or rs.has_allowed_call()
        # A broken session's copy may be ahead of the rows (a run shown ended that the
        # record holds RUNNING): its lease is given back all the same (a no-op if not held).
        held = held or rs.broken is not None
        kept = rs.lingering_tool
        kept_ended = kept is not None and kept.done()
        if kept_ended:
            # Every tool kept for the lease ended before this close (a thread that returned,
            # a task the heartbeat found its loop closed): nothing to wait for, so the lease is
            # given back here, before the close returns, not by the kept future's callback on
            # an I/O thread after it (an attach right after was refused, decision 0206's
            # review); whoever waits for that give back is told, as `_give_back` tells them.
            rs.lingering_tool = None
        try:
            # As a Driver's stopped loop (decision 0163): a tool thread still running keeps
            # the lease until it returns (`_detach`); a call an exception broke into with no
            # thread to wait for (an async tool's task) keeps it, unrenewed, to lapse as after
            # a crash.
            if (
                held
                and rs.lingering_tool is None
                and not rs.tool_may_run
                and not rs.lease_given_back
            ):
                # The run stays this gate's until its lease is given back, as a Driver's does
                # (decision 0163): a second live session of the run is refused meanwhile
                # (decision 0176). The release names this session's epoch, so it could not
                # give up the lease of a session attached in between in any case (decision
                # 0187).
                self._detach(free=False)
                try:
                    await self._let_go_of_lease()
                finally:
                    self._free()
                return
            self._detach()
        except GeneratorExit:
            kept_ended = False  # closed from outside (its loop gone): nothing given back
            raise
        finally:
            if kept_ended:
                for told in self._on_given_back:
                    told()

    async def _let_go_of_lease(self) -> None:
        """Commit an open step's claim and decision (`plan.LEFT_OPEN`), then give the lease back.

        The step is left `deciding`, as a crash after those writes would leave it; a run
        that moved meanwhile (cancelled, or taken over) keeps nothing of it.
        """
        rs = self._rs

        def release() -> None:
            release_lease(rs.config, rs.run_id, rs.epoch)

        try:
            if not self._claim_cut:
                await rs.commit_deferred(plan.LEFT_OPEN)
        except GeneratorExit:
            # Closed from outside (its loop gone, the coroutine collected): nothing awaited;
            # a next close gives the lease back. That commit was made or not, as its group
            # went, and what it kept went with it (`RunSession._write`): it is not committed
            # again (made, a second claim is refused, and a close warned it "left
            # unrecorded"); not made, the step is left as a crash before its first commit
            # leaves it.
            raise
        except (RunMoved, LeaseLostError):
            pass  # the run is no longer this session's: nothing of the step is kept
        except Exception:
            # Not written: as a death before the step's first commit leaves it. The
            # lease is given back all the same.
            logging.getLogger("agentrt").warning(
                "could not record the open step of run %s; it was left unrecorded",
                rs.run_id,
                exc_info=True,
            )
        except BaseException:
            await run_io(release)
            raise
        await run_io(release)

    def step_sync(self) -> GateStep | None:
        return run_sync(self.step())

    def close_sync(self) -> None:
        run_sync(self.close())

    async def __aenter__(self) -> GateSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals -----------------------------------------------------------

    def _detach(self, *, free: bool = True) -> None:
        """Stop renewing the lease and free the run for another session of this gate.

        A plain-function tool still running after its `execute` was cancelled
        keeps the lease renewed until its thread returns (nobody may start the
        call beside it); the lease is given back then. `free=False`: the caller
        frees the run itself, once it has given the lease back (`_finish_close`).
        """
        if self._released:
            return
        self._released = True
        self._finalizer.detach()  # let go here; a later session of the run is not touched
        lingering = self._rs.lingering_tool
        if lingering is None:
            self._rs.stop_heartbeat()
            if free:
                self._free()
        else:
            # On the thread that ends it: a tool's thread, or the loop of a tool's task
            # kept (`_execute._track`), where the release's store call is not made.
            lingering.add_done_callback(lambda _: off_the_loop(self._give_back))

    def _give_back(self) -> None:
        """The lingering tool thread returned: stop renewing and release the lease.

        The one place a lease held for a lingering tool is given back (a closed
        session's or a cancelled Driver loop's); then whoever waited is told.
        """
        rs = self._rs
        try:
            rs.stop_heartbeat()
            release_lease(rs.config, rs.run_id, rs.epoch)
        except Exception:  # the store may be closed by now: the lease then simply expires
            logging.getLogger("agentrt").warning(
                "could not release the lease on run %s; it will expire", rs.run_id
            )
        finally:
            self._free()
            for told in self._on_given_back:
                told()

    def _drop_abandoned(self) -> bool:
        """Under `_close_lock`: count as running no more an execute whose event loop was
        closed under it (the consumer's own loop closed, or its coroutine closed), which
        nothing will resume; True if one was. Its step is as a cancel left it (decision
        0183): the session is broken unless the outcome is in its copy. A tool thread of its
        call still running keeps the lease, renewed, until it returns (`_detach`), as a
        cancelled call's does: nobody may start the call beside it (decision 0198)."""
        if not self._executions:
            return False
        gone = [entry for entry in self._executions if entry.abandoned()]
        for entry in gone:
            step = self._executions.pop(entry)
            step._broken_if_unrecorded(_ABANDONED)
            thread = next((f for f in entry.threads if not f.done()), None)
            if thread is not None:  # with an earlier call's thread kept: until both return
                self._rs.keep_lease_while(thread)
            self._rs.called(entry)  # its task, if any, is kept (looked at) now
        return bool(gone)

    def _for_driver(self) -> DriverPath:
        """The one package-internal path the Driver drives this session by."""
        return DriverPath(self)

    def _settle_if_done(self) -> None:
        if self.done:
            self._detach()

    def _usable(self) -> None:
        if self._closed:
            raise SessionClosedError(f"the gate session of run {self.run_id} was closed")
        if self._rs.broken is not None:
            raise unusable(self._rs.broken)

    def _running(self) -> None:
        if self._rs.run.status != RunStatus.RUNNING:
            raise RunStateError(
                f"run {self.run_id} is {self._rs.run.status}; this session takes no more steps"
            )

    def _lease_held(self) -> None:
        if self._rs.lease_given_back:
            raise RunStateError(
                f"the lease on run {self.run_id} was given back with the last call's outcome "
                "(`_execute_then_close`); close this session and attach again"
            )
        heartbeat = self._rs.heartbeat
        if self._lease_lost or (heartbeat is not None and heartbeat.lost.is_set()):
            raise LeaseLostError(f"the lease on run {self.run_id} was lost; the loop stopped")

    def _caller(self, step: Step) -> AccountingCaller | None:
        setup = self._gate._setup
        if setup.model is None or setup.model_config is None:
            return None
        return AccountingCaller(self._rs, step, setup.model, setup.model_config)

    def _open_allowed(self, step: Step) -> GateStep:
        self._open = GateStep(self, step, None)
        self._open._verdict = VerdictOutcome.ALLOWED
        return self._open

    def _verdict(self, step: Step | None) -> Verdict:
        """The verdict the session's state shows for `step` (what was just settled)."""
        rs = self._rs
        current = rs.current(step) if step is not None else None
        status = rs.run.status
        if rs.has_allowed_call():
            outcome = VerdictOutcome.ALLOWED
        elif status == RunStatus.WAITING_FOR_APPROVAL:
            outcome = VerdictOutcome.PENDING
        elif status == RunStatus.RUNNING:
            outcome = VerdictOutcome.DENIED
        else:
            outcome = VerdictOutcome.ENDED
        approval = None
        if outcome == VerdictOutcome.PENDING and current is not None:
            mine = [a for a in rs.approvals if a.step_id == current.id]
            approval = mine[-1] if mine else None
        return Verdict(
            outcome=outcome,
            request=self._request(current),
            observation=current.observation if current is not None else None,
            approval=approval,
            run=rs.run,
        )

    def _request(self, step: Step | None) -> ToolRequest | None:
        if step is None or step.decision is None or step.decision.kind != DecisionKind.TOOL_CALL:
            return None
        spec = self._rs.config.shown_specs.get(step.decision.tool)
        if spec is None:
            return None
        args = copy_json(call_args(step.decision))
        return ToolRequest(run_id=self.run_id, step_id=step.id, spec=spec, args=args)


async def _told_when_ended(letting_go: Coroutine[Any, Any, None], then: Callable[[], None]) -> None:
    """Await `letting_go` (a lease given back), shielded; when the wait itself is cut short
    (a caller's cancel, a second Ctrl-C) or the release raises, it goes on and `then` is
    told once it has ended, so the run is not marked free before its lease is given back,
    nor left marked this driver's for good (the caller then skips telling `then`).

    One whose event loop was closed under it (the consumer's own, this coroutine closed
    from outside after) never ends, nor tells anyone: `then` is told at once. No tool is
    kept (a kept one is told by `_give_back`), its commit and its release name this
    session's epoch (decision 0187), and the run is freed for the gate by the caller's
    `end`: the run goes on as after a crash, its lease given back or left to lapse
    (decision 0216).

    Left to go on, it tells `then` as it ends however it ends: done, cancelled, or its
    coroutine closed with its loop, closed before it ended (the collector closes it, on any
    thread): a done callback would never run there (decision 0218)."""
    told = _Told(then)
    task = asyncio.ensure_future(_telling(letting_go, told))
    try:
        await asyncio.shield(task)
    except BaseException:
        if task.done() or task.get_loop().is_closed():
            told.tell()
        else:
            told.left = True  # told by `_telling` as it ends
            task.add_done_callback(_retrieved)
        raise


class _Told:
    """`then`, told once (`tell`), by the waiter or, once it left (`left`), the letting go."""

    __slots__ = ("left", "then")

    def __init__(self, then: Callable[[], None]) -> None:
        self.then: Callable[[], None] | None = then
        self.left = False

    def tell(self) -> None:
        then, self.then = self.then, None
        if then is not None:
            then()


async def _telling(letting_go: Coroutine[Any, Any, None], told: _Told) -> None:
    try:
        await letting_go
    finally:
        if told.left:
            told.tell()


def _nobody() -> None:
    """Nobody to tell once a close's letting go has ended (it frees the run itself)."""


def _retrieved(ended: asyncio.Future[None]) -> None:
    """A release awaited by nobody ended: its error retrieved (it was logged, or it is a
    second interrupt's)."""
    if not ended.cancelled():
        ended.exception()


def _runs(thread: concurrent.futures.Future[Any]) -> bool:
    """Whether a tool's thread (or its task left running, `KeptTask`) may still act: a task
    whose loop was closed never runs again (decision 0198)."""
    if thread.done():
        return False
    return not (isinstance(thread, KeptTask) and thread.loop_closed())


def _looks_gone(session: weakref.ref[GateSession]) -> Callable[[], bool]:
    """`GateSession._loop_gone` for its heartbeat, holding no reference to the session (one
    dropped is collected, and its finalizer stops the heartbeat)."""

    def gone() -> bool:
        live = session()
        return live is not None and live._loop_gone()

    return gone


class _Claim:
    """A claim (`GateSession.step`) being made: the event loop it waits on, and whether it
    ended (set by the claim alone, an attribute: its coroutine may be closed by the cycle
    collector on any thread, decision 0209)."""

    __slots__ = ("ended", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ended = False


class DriverPath:
    """What the Driver needs of a gate session beyond the public API (package-internal).

    `step` claims the next step without the status read `GateSession.step` makes;
    `run` executes an allowed step without raising when the run moved (the
    Driver returns the run as it stands); `cancelled` decides the lease when the
    Driver's loop is cancelled (released now, or, while a tool thread still
    runs under it, once the thread returns, telling `then`); `end` stops
    renewing and frees the run for another session.
    """

    def __init__(self, session: GateSession) -> None:
        self._session = session

    async def step(self) -> GateStep | None:
        """`GateSession.step` without reading the run first: the Driver claims its next
        step only right after a commit (or the attach) of this session, which found the
        run RUNNING and leased to it under the run's lock; a cancel since is found by the
        step's first commit, as one during the agent's decision is (decision 0101)."""
        return await self._session._claim(read_first=False)

    async def run(self, step: GateStep) -> None:
        await step._run()

    async def cancelled(self, then: Callable[[], None]) -> bool:
        """The loop was cancelled: release the lease now, or later. True when later."""
        if not self._tool_kept():
            await _told_when_ended(self._session._let_go_of_lease(), then)
            return False
        self._session._on_given_back.append(then)
        return True

    def closed_from_outside(self, then: Callable[[], None]) -> bool:
        """The loop's coroutine was closed from outside (its event loop closed under it):
        nothing is awaited. True when a tool thread still running keeps the lease, `then`
        told once it returns (`_give_back`); False when nothing is kept, the lease left as a
        crash leaves it (decision 0218). Attributes and a list only: the cycle collector
        may close the coroutine on any thread, one holding a lock of this session's."""
        if not self._tool_kept():
            return False
        self._session._on_given_back.append(then)
        return True

    def _tool_kept(self) -> bool:
        """Whether a tool kept for the lease may still run. One that ended (a cancelled call's
        thread that returned while its outcome was committed) keeps nothing: the lease is
        given back before the loop's `run` returns, as a close does (decision 0206's
        review), not by its callback on an I/O thread after (decision 0207)."""
        rs = self._session._rs
        kept = rs.lingering_tool
        if kept is not None and kept.done():
            rs.lingering_tool = None
        return rs.lingering_tool is not None

    async def stopped(self, then: Callable[[], None]) -> bool:
        """The loop stopped on an exception that is not a cancel (a store error, an id
        factory repeating ids, a `KeyboardInterrupt` or `SystemExit` from the agent, the
        policy or an observer): give the lease back, the run left as the record stands,
        unless a tool may still run under it. A tool thread still running: given
        back once it returns, telling `then` (True: later). A tool whose call the exception
        interrupted with no thread to wait for (an async tool's task): kept, to lapse as
        after a crash (False, nothing given back). Never raises but for a second
        `BaseException` (a second Ctrl-C): a store that cannot give it back is logged, the
        lease then lapses."""
        session = self._session
        rs = session._rs
        if self._tool_kept():
            session._on_given_back.append(then)
            return True
        if rs.tool_may_run:
            return False
        session._detach()
        # Only the lease: the record is left as it stands (a step's claim and decision kept
        # for the next commit are not written after a failure, as a death before that
        # commit leaves them). By this owner and this session's epoch: a no-op when that
        # lease is not held (decision 0187).
        giving_back = give_back_lease(rs.config, rs.run_id, rs.epoch, "after its loop stopped")
        await _told_when_ended(giving_back, then)
        return False

    def abandoned(self, then: Callable[[], None]) -> bool:
        """The Driver's event loop was closed under this session, its task kept referenced:
        nothing will ever resume it (decision 0219). Let it go as a crash leaves it: nothing
        of it is written (a step's claim and decision kept for the next commit go with it),
        its heartbeat is stopped and the run freed for the gate, its lease left in the record
        for the driver's resume to take over from its own. An execute abandoned with that
        loop counts as running no more (decision 0198): a tool thread of its call still
        running keeps the lease renewed until it returns, then gives it back and tells
        `then` (True: later). False: let go now."""
        session = self._session
        with session._close_lock:
            session._drop_abandoned()
        if self._tool_kept():
            session._on_given_back.append(then)
            session._detach()
            return True
        session._detach()
        session._free()  # once: also when a letting go abandoned with that loop detached it
        return False

    def end(self) -> None:
        self._session._detach()


class GateStep:
    """The open step of a gate session: propose a decision, execute what was allowed."""

    def __init__(self, session: GateSession, step: Step, model: AccountingCaller | None) -> None:
        self._session = session
        self.step = step
        self.model = model  # the accounting caller for this step (None without a model)
        self._verdict: VerdictOutcome | None = None
        self._proposed = False  # a decision was handed to propose (at most one per step)
        self._executed = False
        self._settled = False
        # How its `execute` was refused before the tool started, nothing written ("busy",
        # "by the store"): open, to be executed again (decision 0179); "" otherwise.
        self._refused = ""

    def _settle(self) -> None:
        """No more verdict or execution for this step; the session stops holding it as open
        (so a finished session and its steps are freed when the last reference goes,
        without waiting for the cycle collector)."""
        self._settled = True
        if self._session._open is self:
            self._session._open = None

    @property
    def id(self) -> str:
        return self.step.id

    @property
    def index(self) -> int:
        return self.step.index

    async def propose(self, decision: Any) -> Verdict:
        """Record `decision` verbatim, validate it and ask the policy; what became of it."""
        session = self._session
        session._usable()
        if self._verdict is not None or self._settled or self._proposed:
            raise RunStateError(f"step {self.index} already has a verdict; propose once per step")
        session._running()
        session._lease_held()
        rs = session._rs
        # Marked before the first await: a second propose (concurrent, or after this
        # one was cancelled) can never record a second decision for the step.
        self._proposed = True
        try:
            outcome = await _step.propose(rs, self.step, decision)
        except RunMoved as moved:
            rs.run = moved.run
            outcome = VerdictOutcome.ENDED
        except LeaseLostError:
            if session._closed:
                # Closed by another task while the decision was judged: the close gave the
                # lease back (the step left open, as a crash would leave it).
                raise SessionClosedError(
                    f"the gate session of run {session.run_id} was closed while step "
                    f"{self.index}'s decision was judged; its verdict was not recorded"
                ) from None
            raise
        self._verdict = outcome
        if outcome != VerdictOutcome.ALLOWED:
            self._settle()
            session._settle_if_done()
        verdict = session._verdict(self.step)
        return Verdict(outcome, verdict.request, verdict.observation, verdict.approval, rs.run)

    async def execute(self) -> Observation:
        """Run the allowed call, once, and record its outcome; the observation recorded.

        `StoreBusyError` (the store was busy or deadlocked at the commit that starts the
        tool, which was rolled back whole: nothing of the step written, the tool not
        started), or a `StoreError` whose `commit_unknown` is False from that commit (a
        connection lost before it was sent), leaves the step open and allowed: call
        `execute` again, which makes the same commit, or `close` the session (decision
        0179). Once the tool has started, the step is never executed again."""
        observation = await self._run()
        if observation is None:
            raise RunStateError(
                f"run {self._session.run_id} moved before the tool started; nothing ran"
            )
        return observation

    async def _execute_then_close(self) -> Observation:
        """`execute`, for a caller that closes the session right after (an adapter that
        attaches its run for each call): the commit recording the outcome also gives the
        lease back, the run left RUNNING, so the close commits nothing (decision 0131)."""
        self._executable()  # refused as `execute` would be, before anything is marked
        self._session._rs.give_back_with_outcome = True
        return await self.execute()

    def _executable(self) -> None:
        """Refuse, changing nothing, a step that may not be executed now."""
        session = self._session
        session._usable()
        if self._executed:
            raise RunStateError(f"step {self.index} was executed already; a call runs once")
        if self._verdict != VerdictOutcome.ALLOWED:
            raise RunStateError(
                f"step {self.index} has no allowed verdict ({self._verdict or 'not proposed'}); "
                "nothing is executed"
            )
        session._lease_held()

    async def _run(self) -> Observation | None:
        session = self._session
        running = ExecuteInFlight()
        with session._close_lock:  # a close from another thread sees it running, or refuses it
            # Counted before the lease is checked: a heartbeat that finds its lease lost after
            # this sees the call, and keeps looking at what it may keep (decision 0209).
            session._rs.calling(running)
            try:
                self._executable()
            except BaseException:
                session._rs.called(running)
                raise
            self._executed = True
            self._settle()
            session._executions[running] = self
        rs = session._rs
        inside = EXECUTING.set(running)
        closed_from_outside = False
        try:
            try:
                await _step.run_tool(rs, self.step)
            except RunMoved as moved:
                rs.run = moved.run
            except StoreError as refused:
                self._reopen_if_handed_back(refused)
                raise
            except asyncio.CancelledError:
                self._broken_if_unrecorded("was cancelled")
                raise
            except LeaseLostError:
                # The loop stops here (recovery: before its next side effect): a lapse nobody
                # took over lets plain writes through, and a step claimed next would commit
                # this one's kept claim and decision in front of its own, `deciding` for good
                # under a run that went on. `close` records it `deciding`, for `attach`.
                session._lease_lost = True
                raise
        except GeneratorExit:
            # Its coroutine closed from outside (its loop gone): it cannot await a close
            # here. It is left to a close, or a claim, to judge as abandoned.
            closed_from_outside = True
            raise
        finally:
            with contextlib.suppress(ValueError):  # closed from another context
                EXECUTING.reset(inside)
            if closed_from_outside:
                # Marked only, without the close lock: the cycle collector may close the
                # coroutine on a thread that holds that lock (decision 0195's `_settling`).
                running.gone = True
            else:
                with session._close_lock:
                    # Not when a close (or a claim) judged it abandoned already: that close
                    # let go of the session without it.
                    mine = session._executions.pop(running, None) is not None
                    closed = mine and session._closed and not session._executing
                    rs.called(running)  # what it kept, it kept already
                if mine:
                    session._settle_if_done()
                if closed:
                    await session._finish_close()  # a close() came while the tool ran
        return rs.current(self.step).observation

    def _broken_if_unrecorded(self, how: str) -> None:
        """Cancelled before the step's outcome was recorded: the commit that starts the tool
        was made or not, as its group went (the committer makes a work it has begun whatever
        its caller does), so the session's copy may be ahead of the rows or behind them. It
        is not used again (`broken`, decision 0136): a step claimed next would go on over a
        step `executing` (or `deciding`) for good. `close` then `attach` judge it as a
        crash left it. A cancel once the outcome is recorded (a tool call cancelled mid-call
        records its unknown outcome first) leaves the session usable. `how` says what became
        of the execute ("was cancelled", or abandoned with its loop, decision 0198)."""
        rs = self._session._rs
        if rs.broken is None and rs.current(self.step).observation is None:
            # What the session knows: its start commit returned, or not.
            known = (
                "its tool's start is in the record (the session committed step.tool_started), "
                "and whether its outcome is in the record is unknown to this session"
                if rs.start_recorded == self.step.id
                else "whether its tool's start is in the record is unknown to this session"
            )
            rs.broken = (
                f"the execute of step {self.index} of run {rs.run_id} {how} before its "
                f"outcome was recorded: {known}"
            )

    def _reopen_if_handed_back(self, refused: StoreError) -> None:
        """The commit that would start the tool was refused with nothing written (busy, or
        by the store: a connection lost before it was sent), and the call was held again
        (`_step._hand_back`): the step is open and executable, so that a retry of `execute`
        makes the same commit (decision 0179)."""
        session, rs = self._session, self._session._rs
        if not rs.has_allowed_call() or rs.allowed_step().id != self.step.id:
            return
        rs.give_back_with_outcome = False  # set for this call only (`_execute_then_close`)
        self._executed = False
        self._settled = False
        self._refused = "busy" if isinstance(refused, StoreBusyError) else "by the store"
        session._open = self

    async def fail(self, error: BaseException) -> Run:
        """The consumer's loop could not decide this step: the run ends, as the Driver's would.

        A `LimitExceeded` ends it with its limit's reason, `ModelUnavailableError`
        with `model_unavailable`, anything else with `agent_error`.
        """
        session = self._session
        session._usable()
        if self._verdict is not None or self._settled:
            raise RunStateError(f"step {self.index} already has a verdict; it cannot fail now")
        if self._proposed:
            raise RunStateError(
                f"step {self.index} has a decision proposed (its verdict was not returned); "
                "close the session and attach again"
            )
        session._running()
        rs = session._rs
        self._settle()
        try:
            await _step.fail_step(rs, self.step, error)
        except RunMoved as moved:
            rs.run = moved.run
        except (asyncio.CancelledError, GeneratorExit) as cut:
            # Its commit (the step's kept claim, the step failed, the run ended) was made or
            # not, as its group went, and what it kept went with it (decision 0206): the copy
            # shows the step claimed either way. Not used again, as an execute cut short is
            # (decision 0183): a next claim would judge the limits on that copy (a run with no
            # step recorded ended at `max_steps`) or claim step 1 over a step the record may
            # not hold. Only an attribute set: the collector may close this coroutine on any
            # thread, one holding a lock of the session too (decision 0195).
            if rs.broken is None:
                how = (
                    "was cancelled"
                    if isinstance(cut, asyncio.CancelledError)
                    else "was closed from outside"
                )
                rs.broken = (
                    f"the failure of step {self.index} of run {rs.run_id} {how} before its "
                    "commit returned: whether it is in the record is unknown to this session"
                )
            raise
        session._settle_if_done()
        return rs.run

    def propose_sync(self, decision: Any) -> Verdict:
        return run_sync(self.propose(decision))

    def execute_sync(self) -> Observation:
        return run_sync(self.execute())

    def fail_sync(self, error: BaseException) -> Run:
        return run_sync(self.fail(error))


def _abandoned(rs: RunSession, gate: Gate, run_id: str) -> None:
    """A gate session was collected without `close()`: stop renewing its lease, and free the
    run for the gate's next session, the lease left to lapse as a crash leaves it.

    A plain-function tool's thread still running (a call cancelled mid-call) keeps both
    until it returns, as a close waits for it (`_detach`): freed at once, the gate's own
    next attach would take the run over at once beside the running call, and this
    session's heartbeat, never stopped, would renew that newer lease (one owner) for as
    long as the process lives."""
    lingering = rs.lingering_tool
    if lingering is None:
        rs.stop_heartbeat()
        gate._let_go(run_id)
        return

    def returned(_: object) -> None:
        rs.stop_heartbeat()
        gate._let_go(run_id)

    lingering.add_done_callback(returned)


def _default_new_id() -> str:
    return new_id()
