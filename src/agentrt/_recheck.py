"""Re-checkable decisions: would the policy given now have decided a run's calls the same?

`recheck(store, run_id, policy, tools=None)` asks `policy` again about every
policy evaluation a run recorded (each `step.policy` event), from the record
alone: the run from `run.created` and the columns recorded with the
evaluation, the view's steps and approvals from the run's rows (checked by
hash against what the policy was given, `_policy_input`), the tool spec by its
hash from the record or else from `tools` (the current registration), the
args from the step's recorded decision. Each evaluation is reported as

- `same`: outcome, approval kind and approval hash all equal (a reason's
  wording is never compared);
- `different`: any of the three differs, or the policy now raises or returns
  something that is not a usable decision;
- `not_a_policy_evaluation`: the runtime's own pause (an interrupted side
  effect, a reconciliation's pause), which no policy decided;
- `not_recheckable`: the record cannot rebuild exactly what the policy was
  given (a record older than decision 0072, a spec in neither the record nor
  `tools`, a row changed since). Never a guess.

Nothing is written: a re-check reads committed rows and calls the policy.
Invariant: the policy receives the request and view it received the first
time, equal field for field and byte for byte in canonical JSON
(`tests/test_recheck.py` pins it against the original call).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, overload

from . import _events as ev
from ._approval import approval_hash, approval_request
from ._canonical import copy_json
from ._foreign import exception_text
from ._history import StepsLikeATuple
from ._policy import INTERRUPTED_POLICY_ID, Policy, policy_id_of
from ._policy_input import InputHashes, rebuild, rebuild_run
from ._records import (
    ENDED_STATUSES,
    JSON,
    Event,
    PolicyDecision,
    PolicyOutcome,
    RunView,
    Step,
    ToolRequest,
    ToolSpec,
)
from ._session import run_sync, validate_policy_decision
from ._shown import shown_step, shown_view
from ._store import Store
from ._takeover import RECONCILE_POLICY_ID
from ._tools import registered_spec, spec_hash
from .trace import clip, sanitize

REASON_WIDTH = 120
"""Characters of a reason or an error a one-line form shows."""

__all__ = [
    "RecheckReport",
    "RecheckVerdict",
    "RecheckedEvaluation",
    "SpecSource",
    "recheck",
    "recheck_async",
]

_RUNTIME_POLICY_IDS = frozenset({INTERRUPTED_POLICY_ID, RECONCILE_POLICY_ID})


class RecheckVerdict(StrEnum):
    """What re-asking one recorded evaluation found (the Go library's strings)."""

    SAME = "same"
    DIFFERENT = "different"
    NOT_A_POLICY_EVALUATION = "not_a_policy_evaluation"
    NOT_RECHECKABLE = "not_recheckable"


class SpecSource(StrEnum):
    """Where a re-check found the tool spec the evaluation was about."""

    RECORD = "record"  # the run's own `tool_specs` row, by hash
    REGISTRATION = "registration"  # the `tools` given to the re-check, by hash
    NONE = ""  # in neither: not re-checkable


@dataclass(frozen=True)
class Judgement:
    """What a policy decided, as a re-check compares it: outcome, approval kind and hash.

    `error` is set (and the rest empty) when the policy raised or its answer was unusable.
    """

    outcome: str = ""
    kind: str = ""
    approval_hash: str = ""
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        if self.error:
            return {"error": self.error}
        out: dict[str, Any] = {"outcome": self.outcome}
        if self.kind:
            out["kind"] = self.kind
        if self.approval_hash:
            out["approval_hash"] = self.approval_hash
        return out


@dataclass(frozen=True)
class RecheckedEvaluation:
    """One recorded evaluation and what the policy given now decided about it."""

    seq: int
    step_id: str
    step_index: int
    tool: str
    verdict: str
    policy_id: str
    recorded: Judgement | None
    now: Judgement | None = None
    differences: tuple[str, ...] = ()
    spec_source: str = SpecSource.NONE
    reason: str = ""
    detail: str = ""
    """Why the evaluation is not re-checkable or not a policy's; the recorded reason
    and the new one when they differ (shown, never compared)."""
    now_reason: str = ""

    def line(self, run_id: str) -> str:
        """This evaluation on one line, every recorded text escaped (what `agentrt recheck`
        prints and the test kit's assertion shows)."""
        where = f"{sanitize(run_id)} step {self.step_index} {sanitize(self.tool) or '?'}"
        if self.verdict == RecheckVerdict.DIFFERENT:
            words = [
                f"different  {where}: {_judged(self.recorded)} -> {_judged(self.now)}",
                f"[{', '.join(self.differences)}]",
            ]
            if self.now_reason:
                words.append(f"now: {clip(sanitize(self.now_reason), REASON_WIDTH)}")
            return "  ".join(words)
        if self.verdict == RecheckVerdict.SAME:
            return f"same  {where}: {_judged(self.recorded)}"
        return f"{self.verdict}  {where}: {clip(sanitize(self.detail), REASON_WIDTH)}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "seq": self.seq,
            "step_id": self.step_id,
            "step_index": self.step_index,
            "tool": self.tool,
            "verdict": str(self.verdict),
            "policy_id": self.policy_id,
            "recorded": None if self.recorded is None else self.recorded.to_json(),
            "now": None if self.now is None else self.now.to_json(),
            "differences": list(self.differences),
            "spec_source": str(self.spec_source),
        }
        if self.detail:
            out["detail"] = self.detail
        if self.reason:
            out["reason"] = self.reason
        if self.now_reason:
            out["now_reason"] = self.now_reason
        return out


@dataclass(frozen=True)
class RecheckReport:
    """A run's recorded policy evaluations, each re-asked of the policy given now.

    `policy_changed` is whether the policy's identity (`policy_id_of`) differs from
    the one recorded with any of the run's policy evaluations; `ended` whether the
    run had ended when it was read (a live run is re-checked as far as it got).
    """

    run_id: str
    run_status: str
    ended: bool
    policy_id: str
    recorded_policy_ids: tuple[str, ...]
    policy_changed: bool
    evaluations: tuple[RecheckedEvaluation, ...] = field(default_factory=tuple)

    def count(self, verdict: str) -> int:
        return sum(1 for e in self.evaluations if e.verdict == verdict)

    @property
    def differences(self) -> tuple[RecheckedEvaluation, ...]:
        """The evaluations the policy given now decides differently."""
        return tuple(e for e in self.evaluations if e.verdict == RecheckVerdict.DIFFERENT)

    @property
    def same(self) -> bool:
        """True when no evaluation differs and none could not be re-checked."""
        return all(
            e.verdict in (RecheckVerdict.SAME, RecheckVerdict.NOT_A_POLICY_EVALUATION)
            for e in self.evaluations
        )

    def counts(self) -> dict[str, int]:
        return {str(v): self.count(v) for v in RecheckVerdict}

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "run_status": str(self.run_status),
            "ended": self.ended,
            "policy_id": self.policy_id,
            "recorded_policy_ids": list(self.recorded_policy_ids),
            "policy_changed": self.policy_changed,
            "counts": self.counts(),
            "evaluations": [e.to_json() for e in self.evaluations],
        }


def recheck(
    store: Store,
    run_id: str,
    policy: Policy,
    tools: Sequence[Any] | None = None,
) -> RecheckReport:
    """Re-ask `policy` about every policy evaluation run `run_id` recorded.

    `tools`: the current registration (`Tool`s or `ToolSpec`s), consulted by hash
    for a spec the record does not hold. An async policy is awaited on an event
    loop of this call's own; inside a running loop, `await recheck_async(...)`.
    `NotFoundError` when there is no such run. Writes nothing.
    """
    return run_sync(recheck_async(store, run_id, policy, tools))


async def recheck_async(
    store: Store,
    run_id: str,
    policy: Policy,
    tools: Sequence[Any] | None = None,
) -> RecheckReport:
    """`recheck` for a caller inside an event loop."""
    policy_id = policy_id_of(policy)
    registered = registration(tools)
    # Events first: every row an event names was committed with it, so the rows read
    # after are at least as new (and the input's hashes catch anything else).
    events = store.events_of_types(run_id, (ev.RUN_CREATED, ev.STEP_POLICY))
    run = store.get_run(run_id)
    steps = store.list_steps(run_id, cap=None)
    approvals = store.list_approvals(run_id, cap=None)
    created = next((e for e in events if e.type == ev.RUN_CREATED), None)
    created_payload = created.payload if created is not None else None
    by_id = {s.id: s for s in steps}
    found: list[RecheckedEvaluation] = []
    recorded_ids: list[str] = []
    # One for the whole run, as a session keeps one: evaluation k's view holds the first
    # k steps, each hashed once (the record's rows are the same objects throughout),
    # not k of them per evaluation (a run of n steps would hash n(n-1)/2).
    hashes = InputHashes()
    for event in events:
        if event.type != ev.STEP_POLICY:
            continue
        one = await _one(
            event,
            policy,
            store,
            run_id,
            created_payload,
            by_id,
            steps,
            approvals,
            registered,
            hashes,
        )
        if one.verdict != RecheckVerdict.NOT_A_POLICY_EVALUATION and one.policy_id not in (
            recorded_ids
        ):
            recorded_ids.append(one.policy_id)
        found.append(one)
    return RecheckReport(
        run_id=run_id,
        run_status=run.status,
        ended=run.status in ENDED_STATUSES,
        policy_id=policy_id,
        recorded_policy_ids=tuple(recorded_ids),
        policy_changed=any(p != policy_id for p in recorded_ids),
        evaluations=tuple(found),
    )


def registration(tools: Sequence[Any] | None) -> dict[str, ToolSpec]:
    """The tools given to a re-check by spec hash; `TypeError` for one that is not a tool."""
    out: dict[str, ToolSpec] = {}
    for tool in tools or ():
        spec = tool if isinstance(tool, ToolSpec) else getattr(tool, "spec", None)
        if not isinstance(spec, ToolSpec):
            raise TypeError(f"tools must be Tools or ToolSpecs, got {type(tool).__name__}")
        copy = registered_spec(spec)
        out[spec_hash(copy)] = copy
    return out


def _judgement(decision: PolicyDecision, request: JSON) -> Judgement:
    if decision.outcome != PolicyOutcome.REQUIRE_APPROVAL:
        return Judgement(outcome=str(decision.outcome))
    digest = approval_hash(decision.kind, decision.capability, decision.presentation, request)
    return Judgement(outcome=str(decision.outcome), kind=decision.kind, approval_hash=digest)


def _differences(recorded: Judgement, now: Judgement) -> tuple[str, ...]:
    if now.error:
        return ("outcome",)
    names = ("outcome", "kind", "approval_hash")
    return tuple(n for n in names if getattr(recorded, n) != getattr(now, n))


async def _one(
    event: Event,
    policy: Policy,
    store: Store,
    run_id: str,
    created: JSON,
    by_id: Mapping[str, Step],
    steps: Sequence[Step],
    approvals: Sequence[Any],
    registered: Mapping[str, ToolSpec],
    hashes: InputHashes,
) -> RecheckedEvaluation:
    payload = event.payload if isinstance(event.payload, dict) else {}
    step = by_id.get(event.step_id)
    recorded_id = payload.get("policy_id")
    base: dict[str, Any] = {
        "seq": event.seq,
        "step_id": event.step_id,
        "step_index": -1 if step is None else step.index,
        "tool": "" if step is None or step.decision is None else step.decision.tool,
        "policy_id": recorded_id if isinstance(recorded_id, str) else "",
        "recorded": None,
    }

    def unrecheckable(why: str, **more: Any) -> RecheckedEvaluation:
        return RecheckedEvaluation(
            **{**base, **more}, verdict=RecheckVerdict.NOT_RECHECKABLE, detail=why
        )

    if event.decode_error or not isinstance(payload.get("decision"), dict):
        return unrecheckable(f"the step.policy event does not decode: {event.decode_error}")
    decision = PolicyDecision.from_json(payload["decision"])
    if base["policy_id"] in _RUNTIME_POLICY_IDS:
        return RecheckedEvaluation(
            **base,
            verdict=RecheckVerdict.NOT_A_POLICY_EVALUATION,
            detail=f"the runtime's own pause ({base['policy_id']}), not a policy's decision",
        )
    # A recorded decision the loop would not have acted on (a tampered or damaged row)
    # is no answer to compare with: neither `same` nor `different`.
    unusable = validate_policy_decision(decision)
    if unusable is not None:
        return unrecheckable(f"the recorded decision is not a usable decision: {unusable}")
    record = payload.get("input")
    if not isinstance(record, dict) or record.get("v") != 1:
        return unrecheckable(
            "the record predates re-checkable decisions: it does not keep the policy's input"
        )
    if not isinstance(created, dict):
        return unrecheckable("the run has no readable run.created event")
    if step is None or step.decision is None:
        return unrecheckable("the evaluated step or its decision cannot be read back")
    spec, source = _spec(store, payload.get("spec_hash"), registered)
    if spec is None:
        return unrecheckable(
            "the tool spec the policy saw is in neither the record nor the tools given"
        )
    base["spec_source"] = source
    args = {} if step.decision.args is None else step.decision.args
    request = ToolRequest(run_id=run_id, step_id=step.id, spec=spec, args=copy_json(args))
    hashed = approval_request(run_id, step.id, spec, args)
    recorded = _judgement(decision, hashed)
    base["recorded"] = recorded
    recorded_run = record.get("run")
    if not isinstance(recorded_run, dict):
        return unrecheckable("the recorded input has no run")
    try:
        run = rebuild_run(recorded_run, run_id, created)
    except Exception as exc:  # stored data may be anything
        return unrecheckable(f"the recorded run does not decode: {exception_text(exc)}")
    rebuilt = rebuild(record, request, run, steps, approvals, hashes)
    if rebuilt.request is None or rebuilt.view is None:
        return unrecheckable(rebuilt.problem)
    # The policy is shown copies, as in the loop (`shown_view`): what it does to them
    # reaches neither the record's rows nor the next evaluation's input.
    view = rebuilt.view
    shown = shown_view(
        RunView(run=view.run, steps=_ShownSteps(view.steps), approvals=view.approvals)
    )
    now, now_reason = await _ask(policy, rebuilt.request, shown, hashed)
    differences = _differences(recorded, now)
    verdict = RecheckVerdict.DIFFERENT if differences else RecheckVerdict.SAME
    return RecheckedEvaluation(
        **base,
        verdict=verdict,
        now=now,
        differences=differences,
        reason=decision.reason if differences else "",
        now_reason=now_reason if differences else "",
    )


class _ShownSteps(StepsLikeATuple):
    """The view's steps as a policy is shown them: each a fresh copy (`shown_step`) made
    when asked for, as a session's `StepsView` does; printed and compared as the tuple
    of its steps."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self._steps = tuple(steps)

    def __len__(self) -> int:
        return len(self._steps)

    @overload
    def __getitem__(self, index: int) -> Step: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Step, ...]: ...

    def __getitem__(self, index: int | slice) -> Step | tuple[Step, ...]:
        if isinstance(index, slice):
            return tuple(shown_step(s) for s in self._steps[index])
        return shown_step(self._steps[index])

    def __iter__(self) -> Iterator[Step]:
        for step in self._steps:
            yield shown_step(step)


def _spec(
    store: Store, digest: Any, registered: Mapping[str, ToolSpec]
) -> tuple[ToolSpec | None, str]:
    if not isinstance(digest, str) or not digest:
        return None, SpecSource.NONE
    try:
        stored = store.tool_spec(digest)
    except Exception:  # a spec row that will not decode is not in the record
        stored = None
    if stored is not None:
        return stored, SpecSource.RECORD
    current = registered.get(digest)
    if current is not None:
        return registered_spec(current), SpecSource.REGISTRATION
    return None, SpecSource.NONE


async def _ask(
    policy: Policy, request: ToolRequest, view: Any, hashed: JSON
) -> tuple[Judgement, str]:
    """The policy's answer now, as compared, and its reason (shown, never compared)."""
    try:
        result = policy.evaluate(request, view)
        if inspect.isawaitable(result):
            result = await result
    except Exception as exc:  # the policy is consumer code
        return Judgement(error=f"policy raised {exception_text(exc)}"), ""
    error = validate_policy_decision(result)
    if error is not None:
        return Judgement(error=error), ""
    assert isinstance(result, PolicyDecision)
    return _judgement(result, hashed), result.reason


def _judged(judged: Judgement | None) -> str:
    if judged is None:
        return "?"
    if judged.error:
        return "error: " + clip(sanitize(judged.error), REASON_WIDTH)
    outcome = sanitize(str(judged.outcome))
    return f"{outcome}({sanitize(str(judged.kind))})" if judged.kind else outcome
