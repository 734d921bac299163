"""What one scenario left behind: the record as committed plus what the journal saw.

`Result` is read after every process of the scenario has ended (or died): the
run, steps, approvals and events from a fresh read-only open of the file, the
lease and the chain check, and from the journal every tool invocation (with
whether it returned), every agent input, every crash point passed and every
crash fired, the resumes and the operator's answers. `collect` builds it;
the invariants are checked over it (`invariants.check`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import (
    Approval,
    Decision,
    Event,
    Lease,
    ModelCallRecord,
    Run,
    Step,
    ToolSpec,
    VerifyReport,
    open_existing,
)
from ..lowlevel import JSON, shown_db
from ._journal import read_journal
from ._scenario import Crash, Point, Verdict
from ._violation import InvariantError, Violation


@dataclass(frozen=True)
class ToolInvocation:
    """One call of a tool as the tool itself saw it, in whichever process made it."""

    process: int
    tool: str
    step_id: str
    step_index: int | None
    args: JSON
    lease_epoch: int
    returned: bool  # False: the process died (or was parked) while the tool ran
    error: str = ""  # what the tool raised, when it raised


@dataclass(frozen=True)
class AgentInput:
    """What the agent was shown when it decided a step: the steps as (index, status)."""

    process: int
    step_index: int
    steps: tuple[tuple[int, str], ...]
    run_status: str


@dataclass(frozen=True)
class ProbeHit:
    """A crash point the run passed (whether or not a crash was requested there)."""

    process: int
    point: str
    step: int
    in_tx: bool

    @property
    def key(self) -> tuple[str, int, bool]:
        return (self.point, self.step, self.in_tx)

    def as_crash(self) -> Crash:
        return Crash(self.step, Point(self.point), inside_tx=self.in_tx)


@dataclass(frozen=True)
class CrashReached:
    """A requested crash that fired: in which process, on which step row."""

    crash: Crash
    process: int
    step_id: str
    # For a crash inside a transaction: the hash of the newest event that
    # transaction had written, which must not be in the record afterwards.
    lost_event: str = ""
    # Whether that event was on file right after the process died (it must not be).
    lost_present: bool = False


@dataclass(frozen=True)
class OperatorAnswer:
    """How the scripted operator answered an approval during a scenario.

    In which process, which approval, its kind, and the verdict given.
    """

    process: int
    approval_id: str
    kind: str
    verdict: Verdict


@dataclass(frozen=True)
class Result:
    """One scenario, run to its end: see the module docstring."""

    scenario: str
    mode: str
    # The database: a SQLite file's Path, or a PostgreSQL URL (a str) naming its schema;
    # out of the repr, which an assertion prints (a URL may hold a password; `summary()`
    # shows it without).
    db_path: Path | str = field(repr=False)
    run: Run
    steps: tuple[Step, ...]
    approvals: tuple[Approval, ...]
    events: tuple[Event, ...]
    model_calls: tuple[ModelCallRecord, ...]
    lease: Lease
    chain: VerifyReport
    crashes: tuple[Crash, ...]
    crashes_reached: tuple[CrashReached, ...]
    tool_calls: tuple[ToolInvocation, ...]
    agent_inputs: tuple[AgentInput, ...]
    probes: tuple[ProbeHit, ...]
    operator_answers: tuple[OperatorAnswer, ...]
    resumes: int  # resume calls that were not refused
    refusals: int  # resume calls refused because a (dead) owner's lease was live
    processes: int
    exit_codes: tuple[int, ...] = ()  # process mode: each child's return code
    errors: tuple[str, ...] = ()
    violations: tuple[Violation, ...] = field(default=())
    # The decisions the run had to carry out in order (None: any decision), when the
    # scenario has a script (`Scenario.expected_script`); None when it has none.
    script: tuple[Decision | None, ...] | None = None
    # The tool specs the steps were started under, by spec hash, as recorded.
    tool_specs: Mapping[str, ToolSpec] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return self.run.id

    @property
    def ok(self) -> bool:
        return not self.violations

    def calls(self, tool: str | None = None, step: int | None = None) -> list[ToolInvocation]:
        """Invocations seen, optionally of one tool and/or on one step index."""
        return [
            c
            for c in self.tool_calls
            if (tool is None or c.tool == tool) and (step is None or c.step_index == step)
        ]

    def event_types(self, step: int | None = None) -> list[str]:
        if step is None:
            return [e.type for e in self.events]
        ids = {s.id for s in self.steps if s.index == step}
        return [e.type for e in self.events if e.step_id in ids]

    def step(self, index: int) -> Step:
        for s in self.steps:
            if s.index == index:
                return s
        raise KeyError(f"the run has no step {index}")

    def summary(self) -> str:
        """A few lines for an assertion message: outcome, crashes, calls, processes."""
        run = self.run
        outcome = f"{run.status} {run.reason}".strip()
        crashes = ", ".join(c.label for c in self.crashes) or "none"
        reached = ", ".join(f"{r.crash.label} in process {r.process}" for r in self.crashes_reached)
        calls = ", ".join(
            f"{c.tool}@{c.step_index}{'' if c.returned else ' (no return)'}"
            for c in self.tool_calls
        )
        return (
            f"scenario {self.scenario} ({self.mode}), run {run.id}: {outcome}\n"
            f"  crashes requested: {crashes}; reached: {reached or 'none'}\n"
            f"  tool calls seen: {calls or 'none'}\n"
            f"  processes: {self.processes}, resumes: {self.resumes}, "
            f"refused while leased: {self.refusals}\n"
            f"  database: {shown_db(str(self.db_path))}"
        )

    def check(self) -> None:
        """Raise `InvariantError` (an AssertionError) listing every violation, if any."""
        if self.violations:
            raise InvariantError(self.scenario, self.violations, self.summary())


def collect(
    *,
    scenario: str,
    mode: str,
    db_path: Path | str,
    run_id: str,
    journal_path: Path,
    crashes: Sequence[Crash],
    errors: Sequence[str],
    exit_codes: Sequence[int] = (),
    script: Sequence[Decision | None] | None = None,
) -> Result:
    """Read the record and the journal into a `Result` (violations not yet checked)."""
    with open_existing(str(db_path), read_only=True) as store:
        run = store.get_run(run_id)
        steps = tuple(store.list_steps(run_id, cap=None))
        approvals = tuple(store.list_approvals(run_id, cap=None))
        events = _all_events(store, run_id)
        model_calls = tuple(store.list_model_calls(run_id))
        lease = store.lease(run_id)
        chain = store.verify_events()
        tool_specs: dict[str, ToolSpec] = {}
        for spec_hash in sorted({s.spec_hash for s in steps if s.spec_hash}):
            spec = store.tool_spec(spec_hash)
            if spec is not None:
                tool_specs[spec_hash] = spec
    records = read_journal(journal_path)
    index = {s.id: s.index for s in steps}
    lost_present = {
        int(r["crashed"]) for r in records if r["type"] == "crash.checked" and r["lost_present"]
    }
    returned: dict[tuple[int, int], str] = {}
    for rec in records:
        if rec["type"] == "tool.returned":
            returned[(rec["process"], rec["call"])] = str(rec.get("error", ""))
    tool_calls: list[ToolInvocation] = []
    agent_inputs: list[AgentInput] = []
    probes: list[ProbeHit] = []
    reached: list[CrashReached] = []
    answers: list[OperatorAnswer] = []
    resume_calls = refusals = 0
    processes: set[int] = set()
    for rec in records:
        kind = rec["type"]
        process = int(rec["process"])
        if process > 0:  # process 0 is the supervisor's own bookkeeping
            processes.add(process)
        if kind == "tool.call":
            key = (process, int(rec["call"]))
            tool_calls.append(
                ToolInvocation(
                    process=process,
                    tool=str(rec["tool"]),
                    step_id=str(rec["step_id"]),
                    step_index=index.get(str(rec["step_id"])),
                    args=rec.get("args"),
                    lease_epoch=int(rec.get("lease_epoch", 0)),
                    returned=key in returned,
                    error=returned.get(key, ""),
                )
            )
        elif kind == "agent.input":
            agent_inputs.append(
                AgentInput(
                    process=process,
                    step_index=int(rec["step"]),
                    steps=tuple((int(i), str(s)) for i, s in rec.get("steps", [])),
                    run_status=str(rec.get("run_status", "")),
                )
            )
        elif kind == "probe":
            probes.append(
                ProbeHit(process, str(rec["point"]), int(rec["step"]), bool(rec["in_tx"]))
            )
        elif kind == "crash":
            number = int(rec["index"])
            if number < len(crashes):
                reached.append(
                    CrashReached(
                        crash=crashes[number],
                        process=process,
                        step_id=str(rec.get("step_id", "")),
                        lost_event=str(rec.get("lost_event", "")),
                        lost_present=process in lost_present,
                    )
                )
        elif kind == "operator":
            answers.append(
                OperatorAnswer(
                    process, str(rec["approval_id"]), str(rec["kind"]), Verdict(rec["verdict"])
                )
            )
        elif kind == "resume.call":
            resume_calls += 1
        elif kind == "resume.refused":
            refusals += 1
    return Result(
        scenario=scenario,
        mode=mode,
        db_path=db_path,
        run=run,
        steps=steps,
        approvals=approvals,
        events=events,
        model_calls=model_calls,
        lease=lease,
        chain=chain,
        crashes=tuple(crashes),
        crashes_reached=tuple(reached),
        tool_calls=tuple(tool_calls),
        agent_inputs=tuple(agent_inputs),
        probes=tuple(probes),
        operator_answers=tuple(answers),
        resumes=resume_calls - refusals,
        refusals=refusals,
        processes=len(processes),
        exit_codes=tuple(exit_codes),
        errors=tuple(errors),
        script=None if script is None else tuple(script),
        tool_specs=tool_specs,
    )


def _all_events(store: Any, run_id: str) -> tuple[Event, ...]:
    out: list[Event] = []
    after = 0
    while True:
        page = store.list_events(run_id=run_id, after_seq=after, limit=1000, cap=None)
        out.extend(page)
        if len(page) < 1000:
            return tuple(out)
        after = page[-1].seq
