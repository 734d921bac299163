"""What a crash test is made of: the scenario, its crash points, and the operator's answers.

This module owns the vocabulary of `agentrt.testkit`:

- `Scenario`: the tools, policy and agent under test plus everything a Driver
  needs (clock, ids, reconciler, short lease) and the `operator` that answers
  every pending approval with a `Verdict`.
- `Point`: the crash points, the same strings the step machine reports to its
  probes (`agentrt.lowlevel.POINT_*`), so records and crash points read alike.
- `Crash(step, at, inside_tx=False)`: one requested crash. Crashes fire in the
  order given: the i-th is armed only once the (i-1)-th fired, so a scenario
  can crash twice at the same point (docs/decisions/0008-testkit.md).
- `load_factory("pkg.mod:make_scenario")`: how process mode (and the pytest
  plugin) names a scenario that a child process can rebuild on its own.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

from .. import (
    Approval,
    ConfigError,
    Decision,
    Driver,
    Gate,
    Limits,
    Policy,
    Run,
    Store,
    Tool,
    lowlevel,
)
from ..lowlevel import Clock, IdFactory
from ..scripted import ScriptedAgent, ScriptEntry


class Point(StrEnum):
    """Where a crash can be requested; the values are the probe point names."""

    AFTER_STEP_STARTED = lowlevel.POINT_STEP_STARTED
    AFTER_DECIDED = lowlevel.POINT_DECIDED
    AFTER_ALLOWED = lowlevel.POINT_ALLOWED
    AFTER_TOOL_STARTED = lowlevel.POINT_TOOL_STARTED
    AFTER_TOOL_EFFECT = lowlevel.POINT_TOOL_EFFECT
    AFTER_TOOL_FINISHED = lowlevel.POINT_TOOL_FINISHED
    AFTER_RESUMED = lowlevel.POINT_RESUMED
    AFTER_INTERRUPTED = lowlevel.POINT_INTERRUPTED
    AFTER_PAUSED = lowlevel.POINT_PAUSED
    # The model request was recorded as dispatched and is in flight: a crash here
    # is a crash during a model request (the attempt stays recorded, uncharged).
    DURING_MODEL_REQUEST = lowlevel.POINT_MODEL_DISPATCHED
    # A waiting run's approved call was allowed again (`gate.attach`, `Driver.resume`):
    # nothing is written until `execute` starts it.
    AFTER_ATTACH_ALLOWED = lowlevel.POINT_ATTACH_ALLOWED

    @property
    def has_transaction(self) -> bool:
        """Whether the point closes a transaction, so a crash inside it (before COMMIT) exists."""
        return self not in _NO_TRANSACTION


# These points sit between transactions: the policy allowed, or a granted approval
# allowed again at attach (nothing written yet), and the tool returned (its record
# not yet written).
_NO_TRANSACTION = frozenset(
    {Point.AFTER_ALLOWED, Point.AFTER_ATTACH_ALLOWED, Point.AFTER_TOOL_EFFECT}
)


@dataclass(frozen=True)
class Crash:
    """Kill the process at `at` while it works on step `step`.

    After the commit of that point by default; with `inside_tx=True`, inside its
    transaction just before the COMMIT, so none of that transaction's writes
    survive. The step is the index of the step the process is working on
    (for `run.resumed`, `step.interrupted` and `run.paused`: the step resumed,
    interrupted or paused).
    """

    step: int
    at: Point
    inside_tx: bool = False

    def __init__(self, step: int, at: Point | str, inside_tx: bool = False) -> None:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ConfigError(f"a crash names a step index (an int >= 0), got {step!r}")
        try:
            point = Point(at)
        except ValueError as exc:
            known = ", ".join(p.value for p in Point)
            raise ConfigError(f"{at!r} is not a crash point; known points: {known}") from exc
        if inside_tx and not point.has_transaction:
            raise ConfigError(
                f"{point.value} commits no transaction, so there is no 'inside' to crash in"
            )
        object.__setattr__(self, "step", step)
        object.__setattr__(self, "at", point)
        object.__setattr__(self, "inside_tx", bool(inside_tx))

    @property
    def label(self) -> str:
        """`step.tool_started@1`, or `step.decided@0 (in tx)` for a crash before COMMIT."""
        return f"{self.at.value}@{self.step}" + (" (in tx)" if self.inside_tx else "")

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "at": self.at.value, "inside_tx": self.inside_tx}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Crash:
        return cls(int(data["step"]), str(data["at"]), bool(data.get("inside_tx", False)))

    def __repr__(self) -> str:
        tx = ", inside_tx=True" if self.inside_tx else ""
        return f"Crash({self.step}, {self.at.name}{tx})"


class SharedScenarioWarning(UserWarning):
    """A Scenario instance is crashed in the in-process harness: its objects are shared by
    every simulated process, so their in-memory state survives the simulated crashes."""


class Verdict(StrEnum):
    """The operator's answer to a pending approval."""

    APPROVE = "approve"  # approve it and resume the run
    REJECT = "reject"  # reject it: the run is cancelled approval_rejected
    LEAVE = "leave"  # nobody answers: the run stays WAITING and the scenario ends


# The operator sees the pending approval (kind, reason, presentation, request)
# and answers. In process mode it runs in whichever child process finds the
# approval pending, so it must be a function of the approval, not of memory.
OperatorFn = Callable[[Approval], "Verdict | str"]


def always(verdict: Verdict | str) -> OperatorFn:
    """An operator giving the same answer to every approval."""
    answer = _verdict(verdict)

    def operator(approval: Approval) -> Verdict:
        return answer

    return operator


def by_kind(
    answers: dict[str, Verdict | str], default: Verdict | str = Verdict.LEAVE
) -> OperatorFn:
    """An operator answering by approval kind (e.g. approve `remote_mutation`, reject
    `interrupted_side_effect`), with `default` for any other kind."""
    table = {kind: _verdict(v) for kind, v in answers.items()}
    fallback = _verdict(default)

    def operator(approval: Approval) -> Verdict:
        return table.get(approval.kind, fallback)

    return operator


def _verdict(value: Any) -> Verdict:
    """`value` as a Verdict, or a ConfigError naming the verdicts there are."""
    try:
        return Verdict(value)
    except ValueError:
        known = ", ".join(repr(v.value) for v in Verdict)
        raise ConfigError(f"{value!r} is not a verdict; expected one of {known}") from None


@dataclass(frozen=True)
class LoopContext:
    """What a consumer's own `loop` gets to drive one process's share of the run.

    `driver` and `gate` are already built with the kit's probes, tools, clock
    and ids (so crashes land in either); `agent` is the scenario's agent as the
    kit watches it (call its `decide` for each `session.input()` in a loop over
    the gate). A loop built on something else passes `probe` and `probe_in_tx`
    on, so crashes still land.
    """

    driver: Driver
    store: Store
    run_id: str
    goal: str
    limits: Limits | None
    resuming: bool
    probe: lowlevel.Probe
    probe_in_tx: lowlevel.Probe
    gate: Gate | None = None
    agent: Any = None


# A consumer's loop: start (resuming=False) or resume (resuming=True) the run and
# return it as it stands when it stops (terminal or WAITING).
Loop = Callable[[LoopContext], Awaitable[Run]]


@dataclass
class Scenario:
    """One run of an agent over some tools under a policy, as the test kit drives it.

    Everything is passed to a fresh `Driver` in every (real or simulated)
    process. `db_path` None: the kit picks a fresh file. `lease_ttl` is the
    run's lease: the harness waits a dead owner's lease out on its own clock
    (no real time passes), and process mode takes over at once from a child it
    can prove dead, else waits the lease out in real time (so short helps
    there). `operator` None answers every approval with `Verdict.LEAVE` (a
    person who has not looked yet).

    Hand the kit a factory that returns a Scenario (`"pkg.mod:make_scenario"`
    or a function) rather than an instance: the kit builds a fresh one for
    every process, real or simulated, so a crash wipes what the agent, tools
    and operator held in memory, as a real death does. An instance cannot be
    rebuilt: in the in-process harness its objects persist across the simulated
    crashes, so an agent that remembers something in memory behaves as no
    restarted program could (the kit warns: `SharedScenarioWarning`).

    `script` is the list of decisions the agent is expected to carry out, in
    order (a function entry stands for any decision); by default a
    `ScriptedAgent`'s own list. When there is one, the kit checks that every
    scripted decision was carried out once, or rejected by a person
    (`script_not_followed`, docs/decisions/0018-...).
    """

    tools: Sequence[Tool]
    policy: Policy
    agent: Any
    goal: str = "testkit scenario"
    limits: Limits | None = None
    reconcile: Any = None
    operator: OperatorFn | None = None
    now: Clock | None = None
    new_id: IdFactory | None = None
    db_path: str | Path | None = None
    lease_ttl: timedelta = timedelta(seconds=1)
    loop: Loop | None = None
    model: Any = None  # a Model or a ModelConfig, as Driver(model=...) takes
    name: str = ""
    script: Sequence[ScriptEntry] | None = None
    # Set by `load_factory`: the reference a child process rebuilds this scenario from.
    factory: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.policy is None:
            raise ConfigError("a Scenario needs a policy")
        if self.agent is None:
            raise ConfigError("a Scenario needs an agent")
        if not isinstance(self.lease_ttl, timedelta) or self.lease_ttl <= timedelta(0):
            raise ConfigError("lease_ttl must be a positive timedelta")
        if self.script is not None:
            if not isinstance(self.script, (list, tuple)):
                raise ConfigError("a Scenario's script is a list of decisions")
            for number, entry in enumerate(self.script):
                if not isinstance(entry, Decision) and not callable(entry):
                    raise ConfigError(
                        f"script entry {number} is {type(entry).__name__}, not a Decision "
                        "or a function of the StepInput"
                    )

    def expected_script(self) -> tuple[Decision | None, ...] | None:
        """The decisions the run must carry out in order (None: any decision), or None when
        the scenario states no script and its agent is not a `ScriptedAgent`."""
        script = self.script
        if script is None and isinstance(self.agent, ScriptedAgent):
            script = self.agent.decisions
        if script is None:
            return None
        return tuple(entry if isinstance(entry, Decision) else None for entry in script)

    @property
    def title(self) -> str:
        return self.name or self.factory or "scenario"


def answer(scenario: Scenario, approval: Approval) -> Verdict:
    """The scenario operator's verdict on `approval` (LEAVE when there is no operator)."""
    if scenario.operator is None:
        return Verdict.LEAVE
    try:
        return Verdict(scenario.operator(approval))
    except ValueError as exc:
        raise ConfigError(f"the operator answered {exc}; expected a Verdict") from exc


def load_factory(ref: str) -> Scenario:
    """Import `"pkg.mod:make_scenario"` and call it (no arguments) for a fresh Scenario."""
    fn = resolve_factory(ref)
    scenario = fn()
    if not isinstance(scenario, Scenario):
        raise ConfigError(f"{ref} returned {type(scenario).__name__}, not a testkit.Scenario")
    scenario.factory = ref
    return scenario


def resolve_factory(ref: str) -> Callable[[], Any]:
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"a scenario factory is named 'pkg.module:function', got {ref!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r} for the scenario {ref}: {exc}") from exc
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise ConfigError(f"{module_name!r} has no {attr!r} (scenario {ref})") from exc
    if not callable(target):
        raise ConfigError(f"{ref} is not callable")
    return target  # type: ignore[no-any-return]


ScenarioSource = Scenario | str | Callable[[], Scenario]


def build(source: ScenarioSource) -> Scenario:
    """A Scenario from an instance, a factory reference, or a factory function."""
    if isinstance(source, Scenario):
        return source
    if isinstance(source, str):
        return load_factory(source)
    if callable(source):
        scenario = source()
        if not isinstance(scenario, Scenario):
            raise ConfigError(f"the factory returned {type(scenario).__name__}, not a Scenario")
        return scenario
    raise ConfigError(f"expected a Scenario or a factory, got {type(source).__name__}")


def floor_clock(clock: Clock, floor: datetime | None) -> Clock:
    """`clock`, never reading earlier than `floor`: a clock rebuilt in a new process
    (a fake one starts over) must not run backwards against what is recorded."""
    if floor is None:
        return clock
    offset = timedelta(0)
    first = True

    def now() -> datetime:
        nonlocal offset, first
        value = clock()
        if first:
            first = False
            if value <= floor:
                offset = floor - value + timedelta(milliseconds=1)
        return value + offset

    return now
