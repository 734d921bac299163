"""Policies: the `Policy` protocol, policy identity, and the policies agentrt ships.

This module owns how a policy is called (`evaluate`, sync or async), how its
identity is derived and refused (`policy_id_of`), the side-effect policy and
the default policy built on it, the runtime's own copy of an answer
(`kept_answer`), approval helpers (`need_approval`, `decode_presentation`),
and the pause recovery imposes on an interrupted side
effect (`interrupted_side_effect_decision`).
"""

from __future__ import annotations

import copy
import inspect
import unicodedata
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, TypeVar, runtime_checkable

from ._canonical import copy_json
from ._errors import ConfigError
from ._records import (
    JSON,
    Approval,
    PolicyDecision,
    PolicyOutcome,
    RunView,
    SideEffect,
    ToolRequest,
    ToolSpec,
)

__all__ = [
    "DEFAULT_POLICY_ID",
    "INTERRUPTED_NOTICE",
    "INTERRUPTED_REASON",
    "INTERRUPTED_SIDE_EFFECT",
    "Policy",
    "SideEffectPolicy",
    "decode_presentation",
    "default_policy",
    "evaluate",
    "interrupted_side_effect_decision",
    "kept_answer",
    "need_approval",
    "outcome_unknown_decision",
    "policy_id_of",
]

T = TypeVar("T")

MAX_POLICY_ID_BYTES = 256
DEFAULT_POLICY_ID = "agentrt.default_policy/1"
SIDE_EFFECT_POLICY_ID = "agentrt.SideEffectPolicy"

INTERRUPTED_SIDE_EFFECT = "interrupted_side_effect"
INTERRUPTED_REASON = "interrupted while executing; outcome unknown"
INTERRUPTED_NOTICE = (
    "This call started, and the process stopped before its outcome was recorded, "
    "so whether it took effect is unknown. "
    "Approving runs it again with these arguments; rejecting ends the run."
)

OUTCOME_UNKNOWN_REASON = "the tool could not tell whether the call took effect; outcome unknown"
INTERRUPTED_POLICY_ID = "agentrt:interrupted_side_effect"
"""The policy id recorded with a pause the runtime imposes on an unknown outcome."""


@runtime_checkable
class Policy(Protocol):
    """Decides each tool request: allow, deny, abort, or pause for a person's approval.

    `evaluate` may be a plain function or a coroutine function. A policy may also
    carry a `policy_id: str` attribute, a stable identity recorded with each
    evaluation (see `policy_id_of`).
    """

    def evaluate(
        self, request: ToolRequest, view: RunView
    ) -> PolicyDecision | Awaitable[PolicyDecision]: ...


def policy_id_of(policy: object) -> str:
    """The identity recorded with each evaluation of `policy`.

    The policy's `policy_id` attribute when it has one (an explicit `""` records no
    identity); otherwise its class's qualified name, `module.QualName`. Refused
    with ConfigError: not a str, over 256 bytes of UTF-8, not encodable as UTF-8,
    or containing a control character.
    """
    declared = getattr(policy, "policy_id", None)
    if declared is None:
        cls = type(policy)
        declared = f"{cls.__module__}.{cls.__qualname__}"
    if not isinstance(declared, str):
        raise ConfigError(f"policy_id must be a string, got {type(declared).__name__}")
    # Its characters as a plain str: a subclass (a StrEnum member, say) could
    # override how it prints or encodes, and the record must be plain text.
    plain = str.__str__(declared)
    _check_policy_id(plain)
    return plain


def _check_policy_id(policy_id: str) -> None:
    try:
        encoded = policy_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(f"policy_id {policy_id!r} is not encodable as UTF-8") from exc
    if len(encoded) > MAX_POLICY_ID_BYTES:
        raise ConfigError(
            f"policy_id is {len(encoded)} bytes of UTF-8; at most {MAX_POLICY_ID_BYTES} are allowed"
        )
    for char in policy_id:
        if unicodedata.category(char) == "Cc":
            raise ConfigError(
                f"policy_id {policy_id!r} contains the control character U+{ord(char):04X}"
            )


async def evaluate(policy: Policy, request: ToolRequest, view: RunView) -> PolicyDecision:
    """Ask `policy` about `request`, awaiting it when it is a coroutine.

    Exceptions raised by the policy propagate (the driver turns them into
    `internal_error`); a result that is not a PolicyDecision raises TypeError.
    """
    result = policy.evaluate(request, view)
    if inspect.isawaitable(result):
        result = await result
    if not isinstance(result, PolicyDecision):
        raise TypeError(
            f"policy {policy_id_of(policy)!r} returned {type(result).__name__}, "
            "not a PolicyDecision"
        )
    return result


def kept_answer(answer: PolicyDecision) -> PolicyDecision:
    """The runtime's own copy of a policy's validated answer, read once by base type
    (decision 0138): its outcome a `PolicyOutcome` (a consumer's `(str, Enum)` member is
    its value), its reason and kind plain strings, its capability and presentation copied.
    An answer with nothing to copy or normalise (an allow, a deny) is kept as itself."""
    outcome, reason, kind = answer.outcome, answer.reason, answer.kind
    if (
        type(answer) is PolicyDecision
        and type(outcome) is PolicyOutcome
        and type(reason) is str
        and type(kind) is str
        and answer.capability is None
        and answer.presentation is None
    ):
        return answer
    return PolicyDecision(
        outcome=PolicyOutcome(str.__str__(outcome)),
        reason=str.__str__(reason),
        kind=str.__str__(kind),
        capability=copy_json(answer.capability),
        presentation=copy_json(answer.presentation),
    )


PolicyEntry = PolicyDecision | Callable[[ToolRequest], PolicyDecision]

_SIDE_EFFECTS = frozenset(member.value for member in SideEffect)


class SideEffectPolicy:
    """Decides each request by the tool's declared side effect.

    Each entry is a fixed PolicyDecision or a function of the request returning
    one. A side effect with no entry is denied. The kind of effect is what the
    tool declares; the policy does not verify it.
    """

    def __init__(
        self,
        mapping: Mapping[SideEffect | str, PolicyEntry],
        *,
        policy_id: str = SIDE_EFFECT_POLICY_ID,
    ) -> None:
        if not isinstance(policy_id, str):
            raise ConfigError(f"policy_id must be a string, got {type(policy_id).__name__}")
        _check_policy_id(policy_id)
        entries: dict[SideEffect, PolicyEntry] = {}
        for key, entry in mapping.items():
            try:
                side_effect = SideEffect(key)
            except ValueError as exc:
                kinds = ", ".join(member.value for member in SideEffect)
                raise ConfigError(f"side effect {key!r} is not one of {kinds}") from exc
            if not isinstance(entry, PolicyDecision) and not callable(entry):
                raise ConfigError(
                    f"the entry for {side_effect.value} must be a PolicyDecision or a function "
                    f"of the request, got {type(entry).__name__}"
                )
            entries[side_effect] = entry
        self._entries = entries
        self.policy_id = policy_id

    def __repr__(self) -> str:
        kinds = ", ".join(sorted(entry.value for entry in self._entries))
        return f"SideEffectPolicy({kinds}; policy_id={self.policy_id!r})"

    def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        side_effect = request.spec.side_effect
        known = isinstance(side_effect, str) and side_effect in _SIDE_EFFECTS
        entry = self._entries.get(SideEffect(side_effect)) if known else None
        if entry is None:
            return PolicyDecision.deny(
                f"side effect {str(side_effect)!r} of tool {request.spec.name!r} "
                "is not allowed by this policy"
            )
        if isinstance(entry, PolicyDecision):
            return entry
        decision = entry(request)
        if not isinstance(decision, PolicyDecision):
            raise TypeError(
                f"the {side_effect} entry of {self.policy_id!r} returned "
                f"{type(decision).__name__}, not a PolicyDecision"
            )
        return decision


def _tool_and_args(request: ToolRequest) -> dict[str, JSON]:
    # A copy per field, so a capability and a presentation never share (and never
    # alias the request's) mutable arguments.
    return {"tool": request.spec.name, "args": _args_or_empty(request.args)}


def _args_or_empty(args: JSON) -> JSON:
    return {} if args is None else copy.deepcopy(args)


def _remote_mutation(request: ToolRequest) -> PolicyDecision:
    return need_approval(
        SideEffect.REMOTE_MUTATION.value,
        f"tool {request.spec.name!r} changes a remote system; a person must approve it",
        capability=_tool_and_args(request),
        presentation=_tool_and_args(request),
    )


def default_policy() -> SideEffectPolicy:
    """read_only and local_mutation allowed; remote_mutation waits for approval; destructive
    and anything unmapped denied. Its policy_id is `agentrt.default_policy/1`."""
    return SideEffectPolicy(
        {
            SideEffect.READ_ONLY: PolicyDecision.allow(),
            SideEffect.LOCAL_MUTATION: PolicyDecision.allow(),
            SideEffect.REMOTE_MUTATION: _remote_mutation,
            SideEffect.DESTRUCTIVE: PolicyDecision.deny(
                "destructive tools are denied by the default policy"
            ),
        },
        policy_id=DEFAULT_POLICY_ID,
    )


def need_approval(
    kind: str, reason: str, capability: JSON = None, presentation: JSON = None
) -> PolicyDecision:
    """A `require_approval` decision; refuses (ConfigError) an empty or non-string kind."""
    if not isinstance(kind, str) or not kind:
        raise ConfigError(f"an approval kind must be a non-empty string, got {kind!r}")
    if not isinstance(reason, str):
        raise ConfigError(f"an approval reason must be a string, got {type(reason).__name__}")
    return PolicyDecision.require_approval(kind, reason, capability, presentation)


def decode_presentation(approval: Approval, type_: type[T]) -> T:
    """Validate an approval's presentation into `type_` (a pydantic model, dataclass,
    TypedDict (from `typing_extensions` before Python 3.12) or any type pydantic accepts).

    Raises ValueError: `pydantic.ValidationError` (a ValueError) when the
    presentation does not fit, or a plain ValueError when the approval row
    could not be decoded.
    """
    if approval.decode_error:
        raise ValueError(
            f"approval {approval.id} could not be decoded, so it has no presentation: "
            f"{approval.decode_error}"
        )
    import pydantic  # imported at first use, not by `import agentrt` (decision 0061)

    return pydantic.TypeAdapter(type_).validate_python(approval.presentation)


def interrupted_side_effect_decision(spec: ToolSpec, args: JSON) -> PolicyDecision:
    """The pause for a side effect whose outcome a crash left unknown (recovery.md).

    Approving runs the same request once more; rejecting ends the run.
    """
    return PolicyDecision.require_approval(
        kind=INTERRUPTED_SIDE_EFFECT,
        reason=INTERRUPTED_REASON,
        capability={"tool": spec.name, "args": _args_or_empty(args)},
        presentation={
            "tool": spec.name,
            "args": _args_or_empty(args),
            "side_effect": str(spec.side_effect),
            "notice": INTERRUPTED_NOTICE,
        },
    )


OUTCOME_UNKNOWN_NOTICE_START = (
    "This call started, and its tool could not tell whether it took effect"
)


def outcome_unknown_notice(what_happened: str) -> str:
    """The notice of a pause on a tool's `OutcomeUnknown`, saying what happened."""
    said = f": {what_happened.rstrip('.')}" if what_happened.strip() else ""
    return (
        f"{OUTCOME_UNKNOWN_NOTICE_START}{said}. "
        "Approving runs it again with these arguments; rejecting ends the run."
    )


def outcome_unknown_decision(spec: ToolSpec, args: JSON, what_happened: str) -> PolicyDecision:
    """The pause for a side effect whose tool raised `OutcomeUnknown` (decision 0054):
    an `interrupted_side_effect` approval, as after a crash, whose notice says what
    happened. Approving runs the same request once more; rejecting ends the run."""
    return PolicyDecision.require_approval(
        kind=INTERRUPTED_SIDE_EFFECT,
        reason=OUTCOME_UNKNOWN_REASON,
        capability={"tool": spec.name, "args": _args_or_empty(args)},
        presentation={
            "tool": spec.name,
            "args": _args_or_empty(args),
            "side_effect": str(spec.side_effect),
            "notice": outcome_unknown_notice(what_happened),
        },
    )
