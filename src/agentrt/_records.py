"""The values the runtime records and hands around: enums and frozen dataclasses.

Every record here is immutable. Records that are stored have `to_json()` (a plain
JSON-ready dict, the exact shape written to the database) and `from_json()`.
Money is integer micro-dollars, durations are `timedelta` (stored as integer
nanoseconds), times are timezone-aware UTC `datetime`.
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar, cast

from ._canonical import content_hash
from ._clock import duration_to_ms, duration_to_ns, ns_to_duration

JSON = Any  # a plain JSON value: dict, list, str, int, float, bool or None


class RunStatus(StrEnum):
    """Where a run stands; the strings are stored in `runs.status`."""

    RUNNING = "RUNNING"
    WAITING_FOR_APPROVAL = "WAITING_FOR_APPROVAL"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


ENDED_STATUSES = frozenset(status for status in RunStatus if status.terminal)
"""The statuses a run ends in, as the strings stored."""


class TerminalReason(StrEnum):
    """Why a run ended; the strings are stored in `runs.reason`."""

    GOAL_COMPLETED = "goal_completed"
    GOAL_FAILED = "goal_failed"
    LIMIT_STEPS = "limit_steps"
    LIMIT_MODEL_CALLS = "limit_model_calls"
    LIMIT_TOKENS = "limit_tokens"
    LIMIT_COST = "limit_cost"
    LIMIT_ACTIVE_TIME = "limit_active_time"
    LIMIT_ELAPSED_TIME = "limit_elapsed_time"
    APPROVAL_EXPIRED = "approval_expired"
    APPROVAL_REJECTED = "approval_rejected"
    MODEL_UNAVAILABLE = "model_unavailable"
    REPEATED_TOOL_FAILURES = "repeated_tool_failures"
    LOOP_DETECTED = "loop_detected"
    POLICY_ABORT = "policy_abort"
    TOOL_ABORT = "tool_abort"
    OPERATOR_CANCELLED = "operator_cancelled"
    RECONCILE_CONFLICT = "reconcile_conflict"
    AGENT_ERROR = "agent_error"
    INTERNAL_ERROR = "internal_error"


class StepStatus(StrEnum):
    """Where a step stands; the strings are stored in `steps.status`."""

    DECIDING = "deciding"
    AWAITING_APPROVAL = "awaiting_approval"
    EXECUTING = "executing"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class DecisionKind(StrEnum):
    """What an agent decided: call a tool, complete or fail (or a kind the runtime refuses)."""

    TOOL_CALL = "tool_call"
    COMPLETE = "complete"
    FAIL = "fail"
    # Deliberately invalid kinds: a decoder produces them so that a truncated or
    # tool-less model reply is recorded and refused, never half-executed.
    TRUNCATED = "truncated"
    NO_TOOL_CALL = "no_tool_call"


class DecisionOrigin(StrEnum):
    """Who made a decision: the model, a plan or an operator (unset when not said)."""

    UNSET = ""
    MODEL = "model"
    PLAN = "plan"
    OPERATOR = "operator"


MAX_SUMMARY = 1024
"""The longest summary an observation keeps (its content keeps everything)."""


class ObservationKind(StrEnum):
    """What a step observed: a tool's result or error, a denial, an interruption, ..."""

    TOOL_RESULT = "tool_result"
    TOOL_ERROR = "tool_error"
    POLICY_DENIED = "policy_denied"
    INVALID_DECISION = "invalid_decision"
    INTERRUPTED = "interrupted"


class SideEffect(StrEnum):
    """What a tool does to the world, declared by its author; the default policy reads it."""

    READ_ONLY = "read_only"
    LOCAL_MUTATION = "local_mutation"
    REMOTE_MUTATION = "remote_mutation"
    DESTRUCTIVE = "destructive"


class PolicyOutcome(StrEnum):
    """A policy's verdict on one request."""

    ALLOW = "allow"
    REQUIRE_APPROVAL = "require_approval"
    DENY = "deny"
    ABORT = "abort"


class ApprovalStatus(StrEnum):
    """Where an approval stands; the strings are stored in `approvals.status`."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


class ReconcileOutcome(StrEnum):
    """What a consumer's reconciliation decided about a call a crash cut off."""

    CONTINUE = "continue"
    COMPLETED = "completed"
    WAITING = "waiting"
    CONFLICT = "conflict"


class ModelCallStatus(StrEnum):
    """Where one model attempt stands; the strings are stored in `model_calls.status`."""

    DISPATCHED = "dispatched"
    OK = "ok"
    ERROR = "error"
    AMBIGUOUS = "ambiguous"


_DURATION_LIMITS = ("max_active_time", "max_elapsed_time", "approval_ttl", "grant_ttl")
_COUNT_LIMITS = (
    "max_steps",
    "max_consecutive_tool_failures",
    "loop_threshold",
    "max_model_calls",
    "max_output_tokens_per_call",
    "max_total_tokens",
    "max_estimated_cost_micros",
)


_DECODING: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "agentrt_limits_decoding", default=False
)

MAX_DURATION_LIMIT = timedelta(days=36_500)
"""The longest duration a limit takes (about a hundred years); None means unlimited."""


@dataclass(frozen=True)
class Limits:
    """What a run may consume. The first three must be positive; None means unlimited; a
    duration is at most `MAX_DURATION_LIMIT` (36,500 days)."""

    max_steps: int = 50
    max_consecutive_tool_failures: int = 3
    loop_threshold: int = 3
    max_model_calls: int | None = None
    max_output_tokens_per_call: int | None = None
    max_total_tokens: int | None = None
    max_estimated_cost_micros: int | None = None
    max_active_time: timedelta | None = None
    max_elapsed_time: timedelta | None = None
    approval_ttl: timedelta | None = None
    grant_ttl: timedelta | None = None

    def __post_init__(self) -> None:
        from ._errors import ConfigError

        for name in ("max_steps", "max_consecutive_tool_failures", "loop_threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"Limits.{name} must be a positive integer, got {value!r}")
        for name in _COUNT_LIMITS[3:]:
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ConfigError(f"Limits.{name} must be None or a non-negative integer")
        for name in _DURATION_LIMITS:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, timedelta) or value <= timedelta(0)):
                raise ConfigError(f"Limits.{name} must be None or a positive timedelta")
            if value is not None and value > MAX_DURATION_LIMIT and not _DECODING.get():
                # Added to a date, a longer one overflows mid-run (decision 0139).
                raise ConfigError(
                    f"Limits.{name} must be at most {MAX_DURATION_LIMIT.days} days; "
                    "None means unlimited"
                )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in _COUNT_LIMITS}
        for name in _DURATION_LIMITS:
            value = getattr(self, name)
            out[name] = None if value is None else duration_to_ns(value)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Limits:
        kwargs: dict[str, Any] = {}
        for name in _COUNT_LIMITS:
            if name in data:
                kwargs[name] = data[name]
        for name in _DURATION_LIMITS:
            if data.get(name) is not None:
                kwargs[name] = ns_to_duration(int(data[name]))
        # A run recorded before the bound keeps the limits it was given (decision 0139).
        token = _DECODING.set(True)
        try:
            return cls(**kwargs)
        finally:
            _DECODING.reset(token)


@dataclass(frozen=True)
class Decision:
    """What the agent proposes for one step, recorded verbatim before validation."""

    kind: str
    tool: str = ""
    args: JSON = None
    reason: str = ""
    result: JSON = None
    message: str = ""
    origin: str = ""
    invalid_args: str | None = None
    invalid_result: str | None = None

    @staticmethod
    def tool_call(tool: str, args: JSON = None, reason: str = "") -> Decision:
        return Decision(kind=DecisionKind.TOOL_CALL, tool=tool, args=args, reason=reason)

    @staticmethod
    def complete(result: JSON = None) -> Decision:
        return Decision(kind=DecisionKind.COMPLETE, result=result)

    @staticmethod
    def fail(message: str) -> Decision:
        return Decision(kind=DecisionKind.FAIL, message=message)

    def to_json(self) -> dict[str, Any]:
        """Stored shape: `kind` always, every other field only when set."""
        out: dict[str, Any] = {"kind": str(self.kind)}
        if self.tool:
            out["tool"] = self.tool
        if self.args is not None:
            out["args"] = self.args
        if self.reason:
            out["reason"] = self.reason
        if self.result is not None:
            out["result"] = self.result
        if self.message:
            out["message"] = self.message
        if self.origin:
            out["origin"] = str(self.origin)
        if self.invalid_args is not None:
            out["invalid_args"] = self.invalid_args
        if self.invalid_result is not None:
            out["invalid_result"] = self.invalid_result
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Decision:
        return cls(
            kind=data.get("kind", ""),
            tool=data.get("tool", ""),
            args=data.get("args"),
            reason=data.get("reason", ""),
            result=data.get("result"),
            message=data.get("message", ""),
            origin=data.get("origin", ""),
            invalid_args=data.get("invalid_args"),
            invalid_result=data.get("invalid_result"),
        )


@dataclass(frozen=True)
class Observation:
    """What the world answered to a step: a tool result, an error, a denial..."""

    kind: str
    content: JSON = None
    summary: str = ""
    content_hash: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "content": self.content,
            "summary": self.summary,
            "content_hash": self.content_hash,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Observation:
        return cls(
            kind=data.get("kind", ""),
            content=data.get("content"),
            summary=data.get("summary", ""),
            content_hash=data.get("content_hash", ""),
        )

    @property
    def failed(self) -> bool:
        return self.kind != ObservationKind.TOOL_RESULT

    # The named constructors: every observation the runtime writes is built by
    # one of these, so its `content_hash` is always the hash of its content.

    @classmethod
    def _hashed(cls, kind: ObservationKind, content: JSON, summary: str) -> Observation:
        return cls(kind, content, summary, content_hash(content))

    @classmethod
    def tool_result(cls, content: JSON, summary: str) -> Observation:
        """What a tool returned (content already checked usable); summary cut to 1,024."""
        return cls._hashed(ObservationKind.TOOL_RESULT, content, summary[:MAX_SUMMARY])

    @classmethod
    def tool_error(cls, tool: str, failure: str, error: str, **kept: Any) -> Observation:
        """A tool call that failed (`failure` names how); `kept` adds what is kept beside."""
        content: dict[str, Any] = {"tool": tool, "error": error, "failure": failure, **kept}
        return cls._hashed(ObservationKind.TOOL_ERROR, content, error[:MAX_SUMMARY])

    @classmethod
    def denied(cls, tool: str, reason: str) -> Observation:
        """A call the policy denied (or a policy that failed), with its reason."""
        content = {"tool": tool, "reason": reason}
        return cls._hashed(ObservationKind.POLICY_DENIED, content, reason[:MAX_SUMMARY])

    @classmethod
    def rejected(cls, tool: str, note: str) -> Observation:
        """A call a person rejected: a denial whose reason carries their note."""
        return cls.denied(tool, f"approval rejected: {note}")

    @classmethod
    def invalid_decision(cls, error: str) -> Observation:
        """A decision that could not be acted on, with why."""
        content = {"error": error}
        return cls._hashed(ObservationKind.INVALID_DECISION, content, error[:MAX_SUMMARY])

    @classmethod
    def interrupted(cls, previous_status: str) -> Observation:
        """A step found in flight when its run was taken over: its outcome is unknown."""
        content = {"previous_status": previous_status}
        return cls._hashed(
            ObservationKind.INTERRUPTED, content, f"interrupted while {previous_status}"
        )

    @classmethod
    def cancelled_mid_call(cls) -> Observation:
        """A tool call whose caller cancelled it while it ran: its outcome is unknown."""
        content = {"previous_status": "executing", "failure": "cancelled"}
        return cls._hashed(
            ObservationKind.INTERRUPTED, content, "cancelled by the caller; outcome unknown"
        )

    @classmethod
    def outcome_unknown(cls, error: str) -> Observation:
        """A side-effect call whose tool said it cannot tell whether it took effect
        (`OutcomeUnknown`): interrupted while executing, as a crash leaves it."""
        content = {"previous_status": "executing", "failure": "outcome_unknown", "error": error}
        return cls._hashed(
            ObservationKind.INTERRUPTED, content, f"outcome unknown: {error}"[:MAX_SUMMARY]
        )

    @classmethod
    def cancelled(cls, by: str, note: str) -> Observation:
        """A step of a run a person cancelled."""
        content = {"by": by, "note": note}
        return cls._hashed(ObservationKind.INTERRUPTED, content, f"cancelled by {by}")


@dataclass(frozen=True)
class PolicyDecision:
    """A policy's answer to one request."""

    outcome: str
    reason: str = ""
    kind: str = ""
    capability: JSON = None
    presentation: JSON = None

    @staticmethod
    def allow() -> PolicyDecision:
        return PolicyDecision(outcome=PolicyOutcome.ALLOW)

    @staticmethod
    def deny(reason: str) -> PolicyDecision:
        return PolicyDecision(outcome=PolicyOutcome.DENY, reason=reason)

    @staticmethod
    def abort(reason: str) -> PolicyDecision:
        return PolicyDecision(outcome=PolicyOutcome.ABORT, reason=reason)

    @staticmethod
    def require_approval(
        kind: str, reason: str, capability: JSON = None, presentation: JSON = None
    ) -> PolicyDecision:
        return PolicyDecision(
            outcome=PolicyOutcome.REQUIRE_APPROVAL,
            reason=reason,
            kind=kind,
            capability=capability,
            presentation=presentation,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"outcome": str(self.outcome)}
        if self.reason:
            out["reason"] = self.reason
        if self.kind:
            out["kind"] = self.kind
        if self.capability is not None:
            out["capability"] = self.capability
        if self.presentation is not None:
            out["presentation"] = self.presentation
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PolicyDecision:
        return cls(
            outcome=data.get("outcome", ""),
            reason=data.get("reason", ""),
            kind=data.get("kind", ""),
            capability=data.get("capability"),
            presentation=data.get("presentation"),
        )


@dataclass(frozen=True)
class ToolSpec:
    """What a tool is, as the model and the policy see it and as it is hashed."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    side_effect: str
    timeout: timedelta
    terminal: bool = False

    def to_json(self) -> dict[str, Any]:
        """The hashed shape: timeout in integer nanoseconds, `terminal` only when true."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "side_effect": str(self.side_effect),
            "timeout": duration_to_ns(self.timeout),
        }
        if self.terminal:
            out["terminal"] = True
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolSpec:
        return cls(
            name=data["name"],
            description=data.get("description", ""),
            input_schema=data.get("input_schema", {}),
            side_effect=data.get("side_effect", ""),
            timeout=ns_to_duration(int(data.get("timeout", 0))),
            terminal=bool(data.get("terminal", False)),
        )


OPERATION_ID_PREFIX = "op_"


def operation_id(run_id: str, step_id: str) -> str:
    """The stable id of the one request a step makes (decision 0067).

    `"op_"` and the first 32 hex digits of SHA-256 over
    `"agentrt.operation/1\n" + run_id + "\n" + step_id`: derived from the record
    alone, so an approved or reconciled re-run of that request on the same step
    carries the same id, and a call on any other step (even with identical
    arguments) another. Send it as an `Idempotency-Key` header, or stamp it on
    what the tool creates, so a reconciliation can look the effect up by it.
    """
    text = f"agentrt.operation/1\n{run_id}\n{step_id}"
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return OPERATION_ID_PREFIX + digest[:32]


@dataclass(frozen=True)
class ToolCall:
    """What a tool receives: where it runs, its validated args, and the lease's fencing epoch.

    `operation_id` is the request's stable id (`operation_id(run_id, step_id)`):
    the same for every execution of this step's request, different on every other step.
    """

    run_id: str
    step_id: str
    args: JSON
    lease_epoch: int

    @property
    def operation_id(self) -> str:
        return operation_id(self.run_id, self.step_id)


class ReconcileAnswer(StrEnum):
    """What a tool's own reconciliation found about its interrupted call (decision 0067)."""

    FOUND = "found"  # the effect happened: the step completes with the recovered result
    SAFE_TO_REPEAT = "safe_to_repeat"  # not found; repeating this operation id cannot duplicate it
    NOT_FOUND = "not_found"  # not found: a person decides, shown the answer
    UNKNOWN = "unknown"  # it cannot tell: a person decides


@dataclass(frozen=True)
class Reconciled:
    """A tool's reconciliation's answer about its interrupted call (decision 0067).

    Build it with `found(result)`, `not_found(detail, safe_to_repeat=...)` or
    `unknown(detail)`. `detail` says what was looked up; it is recorded in the
    `step.reconciled` event and, when a person decides, shown in the approval.
    """

    answer: str
    detail: str = ""
    result: JSON = None
    summary: str = ""

    @staticmethod
    def found(result: JSON, detail: str = "", summary: str = "") -> Reconciled:
        """The effect happened; `result` is the call's result, as the tool would return it."""
        return Reconciled(ReconcileAnswer.FOUND, detail=detail, result=result, summary=summary)

    @staticmethod
    def not_found(detail: str = "", *, safe_to_repeat: bool = False) -> Reconciled:
        """No effect found. `safe_to_repeat=True` vouches that repeating this operation id
        cannot duplicate the effect (the provider deduplicates by it): the runtime runs
        the same request again on the same step. Otherwise a person decides."""
        answer = ReconcileAnswer.SAFE_TO_REPEAT if safe_to_repeat else ReconcileAnswer.NOT_FOUND
        return Reconciled(answer, detail=detail)

    @staticmethod
    def unknown(detail: str = "") -> Reconciled:
        """The reconciliation cannot tell whether the effect happened: a person decides."""
        return Reconciled(ReconcileAnswer.UNKNOWN, detail=detail)


@dataclass(frozen=True)
class ToolResult:
    """What a tool returns.

    `content` is JSON, stored as the step's observation; `summary` is optional and short.
    """

    content: JSON
    summary: str = ""


DRIVER_ORIGIN = "driver"
"""The origin of runs a `Driver` begins."""
GATE_ORIGIN = "gate"
"""The origin of runs a plain `Gate` begins (an own loop; a Driver may recover them)."""
RECOVERABLE_ORIGINS = frozenset({DRIVER_ORIGIN, GATE_ORIGIN})
"""Origins whose runs `Driver.resume` and `Driver.recover` take on (docs/decisions/0049)."""
MCP_PROXY_ORIGIN = "mcp-proxy"
"""The origin of runs `agentrt-proxy` begins (a host's identical re-call continues them)."""


@dataclass(frozen=True)
class Run:
    """One run as recorded.

    `result` is what the agent completed with, as stored: a JSON value (dict,
    list, str, int, float, bool or None; number literals kept as written,
    decision 0003), never an object of the agent's. A pydantic model returned
    by a tool is stored as `model_dump(mode="json")`, so a date or a Decimal
    comes back as a string; `MyModel.model_validate(run.result)` gives the
    typed value back.
    """

    id: str
    goal: str
    status: str
    reason: str
    reason_detail: str
    limits: Limits
    step_count: int
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    result: JSON
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    estimated_cost_micros: int = 0
    active_time: timedelta = timedelta(0)
    decode_error: str = ""
    origin: str = "driver"
    """Which kind of program began the run: 'driver', 'gate', or an integration's label
    ('adapter:langgraph', 'mcp-proxy', ...); a Driver resumes only the first two."""

    def usage_json(self) -> dict[str, int]:
        """The run's usage totals and active milliseconds, as views and policies show them."""
        return {
            "model_calls": self.model_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "estimated_cost_micros": self.estimated_cost_micros,
            "active_ms": duration_to_ms(self.active_time),
        }


@dataclass(frozen=True)
class Step:
    """One step of a run as recorded: the decision, the policy's verdict, the observation.

    `decode_error` names a field that could not be read back.
    """

    id: str
    run_id: str
    index: int
    status: str
    decision: Decision | None
    policy: PolicyDecision | None
    observation: Observation | None
    started_at: datetime | None
    finished_at: datetime | None
    spec_hash: str = ""
    policy_id: str = ""
    decode_error: str = ""


@dataclass(frozen=True)
class Approval:
    """One approval as recorded, with the hash a decision must name.

    What is asked is `capability`, `presentation` and `request`; `hash` is the SHA-256 over them
    (`approval_hash`); `status`, `decided_by` and `note` say who decided and how.
    """

    id: str
    run_id: str
    step_id: str
    kind: str
    capability: JSON
    presentation: JSON
    request: JSON
    hash: str
    status: str
    created_at: datetime | None
    expires_at: datetime | None
    decided_at: datetime | None
    decided_by: str = ""
    note: str = ""
    decode_error: str = ""


@dataclass(frozen=True)
class ToolRequest:
    """What a policy is asked about: one call of one tool, as registered."""

    run_id: str
    step_id: str
    spec: ToolSpec
    args: JSON

    @property
    def operation_id(self) -> str:
        """The request's stable id, as its tool will receive it (`ToolCall.operation_id`)."""
        return operation_id(self.run_id, self.step_id)


@dataclass(frozen=True)
class RunView:
    """A read-only view of a run handed to policies and reconcilers."""

    run: Run
    steps: Sequence[Step]
    approvals: Sequence[Approval]


@dataclass(frozen=True)
class StepInput:
    """What an agent sees when it decides a step."""

    run: Run
    steps: Sequence[Step]
    approvals: Sequence[Approval]
    tools: Sequence[ToolSpec]
    model: Any = None


@dataclass(frozen=True)
class Reconciliation:
    """A consumer's verdict on an interrupted run (see `recovery.md`)."""

    outcome: str
    detail: str = ""
    result: JSON = None
    pause: PolicyDecision | None = None

    @staticmethod
    def continue_run(detail: str = "") -> Reconciliation:
        return Reconciliation(outcome=ReconcileOutcome.CONTINUE, detail=detail)

    @staticmethod
    def completed(result: JSON, detail: str = "") -> Reconciliation:
        return Reconciliation(outcome=ReconcileOutcome.COMPLETED, detail=detail, result=result)

    @staticmethod
    def waiting(pause: PolicyDecision, detail: str = "") -> Reconciliation:
        return Reconciliation(outcome=ReconcileOutcome.WAITING, detail=detail, pause=pause)

    @staticmethod
    def conflict(detail: str) -> Reconciliation:
        return Reconciliation(outcome=ReconcileOutcome.CONFLICT, detail=detail)


@dataclass(frozen=True)
class Event:
    """One audit event, in commit order (`seq`).

    `hash` chains it to the event before; `verify_events()` checks the chain.
    """

    seq: int
    run_id: str
    step_id: str
    at: datetime | None
    type: str
    payload: JSON
    hash: str = ""
    decode_error: str = ""


@dataclass(frozen=True)
class Lease:
    """Who holds a run, until when, and its fencing `epoch`.

    `holder` (host, pid, process start time) is what proves a local owner dead.
    """

    owner: str
    expires_at: datetime | None
    epoch: int
    holder: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChainBreak:
    """Where the event chain first fails to verify: the `seq` and the problem."""

    seq: int
    problem: str
    detail: str = ""  # what is wrong, when more than the problem's name says (`unreadable`)


@dataclass(frozen=True)
class VerifyReport:
    """What `Store.verify_events()` found.

    Whether the chain is intact, how many events it checked, the head it reached, and the first
    break. For a record of N > 1 chain partitions (decision 0093), `heads` holds each
    partition's last event that verified, `(seq, hash)` in partition order (`(0, '')` for
    none), and `head_seq`/`head_hash` are N and the digest over them (`Store.chain_head()`);
    for one partition `heads` is empty and the head is the last event that verified.
    """

    intact: bool
    checked: int
    head_seq: int
    head_hash: str
    first_break: ChainBreak | None = None
    heads: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class FileCheck:
    """What SQLite's own check of the file found: `ok`, or its problems (bounded), and which check.

    `check` is `quick_check` (every page and record readable and well formed) or
    `integrity_check` (that, and every index agrees with its table); `server` when
    the store's server keeps and checks its own files and the client checked
    nothing (PostgreSQL): then `ok` says only that nothing was found, and what
    shows it says "not checked here".
    """

    ok: bool
    check: str
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelCallRecord:
    """One attempt to call a model, recorded before it was sent and settled after.

    Its status, tokens, cost in micro-dollars, latency and error.
    """

    id: str
    run_id: str
    step_id: str
    attempt: int
    status: str
    model: str
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost_micros: int
    latency_ms: int
    error: str
    dispatched_at: datetime | None
    completed_at: datetime | None
    decode_error: str = ""


_R = TypeVar("_R")

_PLAIN_FIELDS: dict[type, frozenset[str]] = {
    Run: frozenset(Run.__dataclass_fields__),
    Step: frozenset(Step.__dataclass_fields__),
}
"""The records whose generated `__init__` only assigns their fields (no `__post_init__`,
no field left out of `__init__`), with their field names: `evolve` may skip `__init__`."""


def evolve(record: _R, **changes: Any) -> _R:
    """`dataclasses.replace(record, **changes)` for a `Run` or a `Step`, without calling
    `__init__` again: it would only assign the same fields (about a quarter of the cost,
    six times a step). Any other record (a subclass too), or a name that is not one of
    its fields, goes through `dataclasses.replace` (which raises for the latter)."""
    names = _PLAIN_FIELDS.get(type(record))
    if names is None or not names.issuperset(changes):
        replaced: _R = cast(Any, dataclasses.replace)(record, **changes)
        return replaced
    new = object.__new__(type(record))
    fields = new.__dict__
    fields.update(record.__dict__)
    fields.update(changes)
    return new
