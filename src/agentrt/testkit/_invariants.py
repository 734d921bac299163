"""The recovery contract as checks over one scenario's record: what must hold after any crash.

Each rule reads only what the run left behind (rows, events, the chain) and what
the journal saw happen (tool invocations, crashes fired, process outcomes), and
reports every breach it finds as a `Violation` rather than stopping at the first,
so one failing scenario shows all it broke. The rules are those of
`recovery.md` ("Invariants asserted after every scenario"), plus four the kit
can check because it caused the crash: no re-execution of a step without a
granted approval, no write by a crashed process, no trace of a transaction
killed before its COMMIT, and no side effect a crash hid from the record
carried out again by a later step more often than the scenario carries it out
without a crash; and, for a scenario with a script, that every scripted
decision is carried out once or rejected by a person, never skipped
or repeated across an interruption (docs/decisions/0018-...).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING

from .. import (
    ApprovalStatus,
    Decision,
    DecisionKind,
    RunStatus,
    SideEffect,
    Step,
    StepStatus,
    TerminalReason,
    canonical_json,
    lowlevel,
)
from ..scripted import settles_its_entry
from ._violation import Violation

if TYPE_CHECKING:
    from ._result import Result, ToolInvocation


def check(result: Result, clean: Result | None = None) -> list[Violation]:
    """Every violation of the contract in `result`, in rule order; `[]` when it holds.
    `clean` is the same scenario played without a crash, when known (`_repeated_effects`)."""
    found: list[Violation] = []
    found += _processes(result)
    found += _crashes(result)
    found += _run_settled(result)
    found += _tool_starts(result)
    found += _invocations(result)
    found += _repeated_effects(result, clean)
    found += _script(result)
    found += _lease(result)
    found += _chain(result)
    return found


def _processes(result: Result) -> list[Violation]:
    return [Violation("process_error", error) for error in result.errors]


def _crashes(result: Result) -> list[Violation]:
    out: list[Violation] = []
    reached = len(result.crashes_reached)
    for crash in result.crashes[reached:]:
        out.append(Violation("crash_not_reached", f"{crash.label} was never reached"))
    for fired in result.crashes_reached:
        if fired.lost_present:
            out.append(
                Violation(
                    "lost_transaction_visible",
                    f"the transaction killed before its COMMIT at {fired.crash.label} left "
                    f"its event {fired.lost_event[:12]} on file",
                )
            )
    return out


def _run_settled(result: Result) -> list[Violation]:
    out: list[Violation] = []
    run = result.run
    if run.status == RunStatus.RUNNING:
        out.append(Violation("run_left_running", f"run {run.id} is still RUNNING"))
    for step in result.steps:
        if step.status in (StepStatus.DECIDING, StepStatus.EXECUTING):
            out.append(
                Violation("step_left_in_flight", f"step {step.index} is still {step.status}")
            )
        if (
            step.status == StepStatus.AWAITING_APPROVAL
            and run.status != RunStatus.WAITING_FOR_APPROVAL
        ):
            out.append(
                Violation(
                    "awaiting_outside_waiting",
                    f"step {step.index} is awaiting_approval under a {run.status} run",
                )
            )
    return out


def _tool_starts(result: Result) -> list[Violation]:
    """Starts are closed before a step starts again, and only granted approvals re-run a step."""
    out: list[Violation] = []
    index = {s.id: s.index for s in result.steps}
    granted: dict[str, set[str]] = defaultdict(set)
    for approval in result.approvals:
        if approval.status == ApprovalStatus.APPROVED:
            granted[approval.step_id].add(approval.id)
    open_start: dict[str, int] = {}
    starts: dict[str, list[str]] = defaultdict(list)
    used: Counter[str] = Counter()
    # Re-runs a tool's own reconciliation vouched for (decision 0067): each
    # `step.reconciled` answering `safe_to_repeat` allows one start marked `reconciled`.
    vouched: Counter[str] = Counter()
    vouched_total: Counter[str] = Counter()
    for event in result.events:
        step_id = event.step_id
        if event.type == lowlevel.STEP_RECONCILED:
            payload = event.payload if isinstance(event.payload, dict) else {}
            if payload.get("answer") == "safe_to_repeat":
                vouched[step_id] += 1
                vouched_total[step_id] += 1
        elif event.type == lowlevel.STEP_TOOL_STARTED:
            label = f"step {index.get(step_id, '?')}"
            if step_id in open_start:
                out.append(
                    Violation(
                        "tool_start_not_closed",
                        f"{label} started its tool again (event {event.seq}) before "
                        f"the start at event {open_start[step_id]} finished or was interrupted",
                    )
                )
            open_start[step_id] = event.seq
            payload = event.payload if isinstance(event.payload, dict) else {}
            approval_id = str(payload.get("approval_id", ""))
            if approval_id:
                used[approval_id] += 1
            by_reconcile = payload.get("reconciled") is True and not approval_id
            if by_reconcile and vouched[step_id] > 0:
                vouched[step_id] -= 1
            elif by_reconcile:
                out.append(
                    Violation(
                        "unvouched_rerun",
                        f"{label} started its tool again (event {event.seq}) as a reconciled "
                        "re-run without a step.reconciled answer saying safe_to_repeat",
                    )
                )
            elif starts[step_id] and approval_id not in granted[step_id]:
                out.append(
                    Violation(
                        "unapproved_rerun",
                        f"{label} started its tool again (event {event.seq}) without "
                        "an approval granted for that step",
                    )
                )
            starts[step_id].append(approval_id)
        elif event.type in (lowlevel.STEP_TOOL_FINISHED, lowlevel.STEP_INTERRUPTED):
            open_start.pop(step_id, None)
    for step_id, seq in open_start.items():
        out.append(
            Violation(
                "tool_start_not_closed",
                f"step {index.get(step_id, '?')}: the tool start at event {seq} was never "
                "followed by step.tool_finished or step.interrupted",
            )
        )
    for step_id, list_of_starts in starts.items():
        allowed = 1 + len(granted[step_id]) + vouched_total[step_id]
        if len(list_of_starts) > allowed:
            out.append(
                Violation(
                    "too_many_tool_starts",
                    f"step {index.get(step_id, '?')} started its tool {len(list_of_starts)} "
                    f"times with {len(granted[step_id])} approval(s) granted (at most {allowed})",
                )
            )
    for approval_id, count in sorted(used.items()):
        if count > 1:
            out.append(
                Violation(
                    "approval_used_twice",
                    f"approval {approval_id} appears in {count} tool starts",
                )
            )
    return out


def _invocations(result: Result) -> list[Violation]:
    out: list[Violation] = []
    index = {s.id: s.index for s in result.steps}
    starts: Counter[str] = Counter(
        e.step_id for e in result.events if e.type == lowlevel.STEP_TOOL_STARTED
    )
    seen: Counter[str] = Counter(call.step_id for call in result.tool_calls)
    for step_id, count in sorted(seen.items()):
        if count > starts[step_id]:
            out.append(
                Violation(
                    "more_invocations_than_starts",
                    f"step {index.get(step_id, step_id)}: the tool was invoked {count} time(s) "
                    f"but {starts[step_id]} start(s) were recorded",
                )
            )
    return out


def repeats(result: Result) -> list[tuple[ToolInvocation, ToolInvocation]]:
    """(a side-effecting call that returned on a step whose record never learned it, a later
    step's call of the same tool with the same arguments), once per such returned call.

    What a crash followed by "go on" (a reconciliation's `continue_run`, an agent that
    reads only what is recorded) does to a charge: it took effect, the record says it
    was interrupted, and the identical request is carried out again in a new step.
    """
    finished = {e.step_id for e in result.events if e.type == lowlevel.STEP_TOOL_FINISHED}
    out: list[tuple[ToolInvocation, ToolInvocation]] = []
    for first in result.tool_calls:
        if first.step_id in finished or first.step_index is None or not _took_effect(result, first):
            continue
        for later in result.tool_calls:
            if (
                later.tool == first.tool
                and later.step_index is not None
                and later.step_index > first.step_index
                and _same_args(later.args, first.args)
            ):
                out.append((first, later))
                break
    return out


def _repeated_effects(result: Result, clean: Result | None) -> list[Violation]:
    """A side effect carried out again after a crash hid it from the record, more often than
    the scenario does without a crash (so a request the scenario repeats anyway is no
    violation). Needs the run without a crash: `clean`."""
    if clean is None:
        return []
    out: list[Violation] = []
    mine, theirs = effect_steps(result), effect_steps(clean)
    reported: set[str] = set()
    for first, later in repeats(result):
        tool = first.tool
        if tool in reported or mine[tool] <= theirs[tool]:
            continue
        reported.add(tool)
        out.append(
            Violation(
                "repeated_side_effect",
                f"{tool} returned on step {first.step_index} in process {first.process}, "
                f"which died before recording it; step {later.step_index} carried out the "
                f"identical {tool} call again: {tool} took effect on {mine[tool]} step(s), "
                f"on {theirs[tool]} without a crash",
            )
        )
    return out


def effect_steps(result: Result) -> Counter[str]:
    """By tool: on how many steps a side-effecting call of it returned (took effect)."""
    steps: dict[str, set[str]] = defaultdict(set)
    for call in result.tool_calls:
        if _took_effect(result, call):
            steps[call.tool].add(call.step_id)
    return Counter({tool: len(ids) for tool, ids in steps.items()})


def _took_effect(result: Result, call: ToolInvocation) -> bool:
    if not call.returned or call.error:
        return False
    specs = [spec for spec in result.tool_specs.values() if spec.name == call.tool]
    return not specs or any(spec.side_effect != SideEffect.READ_ONLY for spec in specs)


def _same_args(one: object, other: object) -> bool:
    try:
        return canonical_json(one) == canonical_json(other)
    except (TypeError, ValueError, RecursionError):
        return one == other


def _lease(result: Result) -> list[Violation]:
    if result.lease.owner:
        return [
            Violation(
                "lease_held",
                f"the run ends {result.run.status} with its lease still held by "
                f"{result.lease.owner!r}",
            )
        ]
    return []


def _chain(result: Result) -> list[Violation]:
    report = result.chain
    if report.intact:
        return []
    where = report.first_break
    detail = f"at seq {where.seq}: {where.problem}" if where is not None else "broken"
    return [Violation("chain_broken", f"the event chain does not verify {detail}")]


def _script(result: Result) -> list[Violation]:
    """Walk the steps in order against the script: each step decides the entry due, and the
    entry falls due only once a step settled it (ScriptedAgent's rule, read-only-ness as
    recorded). The first step that decided anything else is reported, once; so is a run
    ended `agent_error` by a step that was due a plain scripted decision (which cannot fail)."""
    script = result.script
    if script is None:
        return []
    rule = "a scripted decision must be carried out once, or rejected by a person"
    position = 0
    # Which step was offered an entry and did not settle it, and which step settled it.
    unsettled: dict[int, tuple[Step, str]] = {}
    settled_by: dict[int, Step] = {}
    steps = sorted(result.steps, key=lambda s: s.index)
    for number, step in enumerate(steps):
        decision = step.decision
        if decision is None and not step.decode_error:
            if (
                number == len(steps) - 1
                and result.run.reason == TerminalReason.AGENT_ERROR
                and position < len(script)
                and script[position] is not None
            ):
                due = f"the script's next entry #{position}, {_describe(script[position])}"
                if position in unsettled:
                    offered, why = unsettled[position]
                    due += f", which step {offered.index} was offered and did not carry out ({why})"
                return [
                    Violation(
                        "script_not_followed",
                        f"step {step.index} ended the run agent_error instead of offering "
                        f"{due}: {rule}",
                    )
                ]
        elif decision is not None and not step.decode_error:
            expected = script[position] if position < len(script) else None
            if position >= len(script) or (expected is not None and not _same(decision, expected)):
                detail = _diverged(step, decision, position, script, unsettled, settled_by)
                return [Violation("script_not_followed", f"{detail}: {rule}")]
        spec = result.tool_specs.get(step.spec_hash)
        read_only = (
            {spec.name} if spec is not None and spec.side_effect == SideEffect.READ_ONLY else set()
        )
        if settles_its_entry(step, read_only):
            settled_by[position] = step
            unsettled.pop(position, None)
            position += 1
        else:
            unsettled[position] = (step, _why_unsettled(step))
    return []


def _why_unsettled(step: Step) -> str:
    content = step.observation.content if step.observation is not None else None
    if isinstance(content, dict) and content.get("previous_status") == StepStatus.DECIDING:
        return "interrupted while deciding"
    tool = step.decision.tool if step.decision is not None else "?"
    return f"interrupted while executing read-only {tool}"


def _diverged(
    step: Step,
    decision: Decision,
    position: int,
    script: tuple[Decision | None, ...],
    unsettled: dict[int, tuple[Step, str]],
    settled_by: dict[int, Step],
) -> str:
    said = f"step {step.index} decided {_describe(decision)}"
    if position >= len(script):
        return f"{said}, but the script's {len(script)} entries were all carried out"
    due = f"the script's next entry is #{position}, {_describe(script[position])}"
    if position in unsettled:
        offered, why = unsettled[position]
        return (
            f"{said}, but {due}, which step {offered.index} was offered and did not carry out "
            f"({why})"
        )
    for number, entry in enumerate(script):
        if entry is not None and _same(decision, entry):
            if number < position and number in settled_by:
                return (
                    f"{said}, but {due}; entry #{number} was already carried out by step "
                    f"{settled_by[number].index}, so it was carried out twice"
                )
            if number > position:
                return f"{said}, but {due}; entry #{number} was offered instead"
    return f"{said}, but {due}"


def _same(recorded: Decision, scripted: Decision) -> bool:
    try:
        return canonical_json(recorded.to_json()) == canonical_json(scripted.to_json())
    except (TypeError, ValueError, RecursionError):
        # A scripted decision that is not usable JSON was recorded with its args or
        # result moved aside: it is the same decision if it names the same thing.
        return (recorded.kind, recorded.tool) == (scripted.kind, scripted.tool)


def _describe(decision: Decision | None) -> str:
    if decision is None:
        return "(a function of the input)"
    if decision.kind == DecisionKind.TOOL_CALL:
        what = f"tool_call {decision.tool} {_short(decision.args)}"
    elif decision.kind == DecisionKind.COMPLETE:
        what = f"complete {_short(decision.result)}"
    elif decision.kind == DecisionKind.FAIL:
        what = f"fail {_short(decision.message)}"
    else:
        what = f"{decision.kind} {decision.tool}".rstrip()
    return what


def _short(value: object) -> str:
    try:
        text = canonical_json(value).decode()
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= 200 else text[:199] + "…"
