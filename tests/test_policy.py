"""Policies: the default and side-effect policies, policy ids, approvals' helpers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import pydantic
import pytest
from typing_extensions import TypedDict  # pydantic needs it on Python 3.11

from agentrt._errors import ConfigError
from agentrt._policy import (
    DEFAULT_POLICY_ID,
    INTERRUPTED_NOTICE,
    Policy,
    SideEffectPolicy,
    decode_presentation,
    default_policy,
    evaluate,
    interrupted_side_effect_decision,
    need_approval,
    policy_id_of,
)
from agentrt._records import (
    Approval,
    Limits,
    PolicyDecision,
    PolicyOutcome,
    Run,
    RunView,
    SideEffect,
    ToolRequest,
    ToolSpec,
)

AT = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def spec(side_effect: str, name: str = "act") -> ToolSpec:
    return ToolSpec(
        name=name,
        description="does something",
        input_schema={"type": "object"},
        side_effect=side_effect,
        timeout=timedelta(seconds=5),
    )


def request(side_effect: str, args: Any = None, name: str = "act") -> ToolRequest:
    return ToolRequest(run_id="r" * 32, step_id="s" * 32, spec=spec(side_effect, name), args=args)


def view() -> RunView:
    run = Run(
        id="r" * 32,
        goal="test",
        status="RUNNING",
        reason="",
        reason_detail="",
        limits=Limits(),
        step_count=1,
        created_at=AT,
        started_at=AT,
        finished_at=None,
        result=None,
    )
    return RunView(run=run, steps=(), approvals=())


def approval(presentation: Any, decode_error: str = "") -> Approval:
    return Approval(
        id="a" * 32,
        run_id="r" * 32,
        step_id="s" * 32,
        kind="remote_mutation",
        capability=None,
        presentation=presentation,
        request={},
        hash="0" * 64,
        status="pending",
        created_at=AT,
        expires_at=None,
        decided_at=None,
        decode_error=decode_error,
    )


# ---------------------------------------------------------------------------
# default_policy


def test_default_policy_allows_reads_and_local_mutations() -> None:
    policy = default_policy()
    assert policy.evaluate(request("read_only"), view()) == PolicyDecision(outcome="allow")
    assert policy.evaluate(request("local_mutation", {"x": 1}), view()) == PolicyDecision(
        outcome="allow"
    )


def test_default_policy_asks_approval_for_remote_mutations() -> None:
    decision = default_policy().evaluate(
        request("remote_mutation", {"to": "ops@example.com", "n": [1, 2]}, name="send"), view()
    )
    assert decision == PolicyDecision(
        outcome="require_approval",
        reason="tool 'send' changes a remote system; a person must approve it",
        kind="remote_mutation",
        capability={"tool": "send", "args": {"to": "ops@example.com", "n": [1, 2]}},
        presentation={"tool": "send", "args": {"to": "ops@example.com", "n": [1, 2]}},
    )


def test_default_policy_approval_does_not_alias_the_request_args() -> None:
    args: dict[str, Any] = {"n": [1]}
    decision = default_policy().evaluate(request("remote_mutation", args), view())
    args["n"].append(2)
    assert decision.capability == {"tool": "act", "args": {"n": [1]}}
    assert decision.presentation == {"tool": "act", "args": {"n": [1]}}
    assert decision.capability is not decision.presentation


def test_default_policy_remote_mutation_with_no_args_shows_an_empty_object() -> None:
    decision = default_policy().evaluate(request("remote_mutation", None), view())
    assert decision.capability == {"tool": "act", "args": {}}
    assert decision.presentation == {"tool": "act", "args": {}}


def test_default_policy_denies_destructive_and_unmapped() -> None:
    policy = default_policy()
    assert policy.evaluate(request("destructive"), view()) == PolicyDecision(
        outcome="deny", reason="destructive tools are denied by the default policy"
    )
    assert policy.evaluate(request("teleport", name="beam"), view()) == PolicyDecision(
        outcome="deny",
        reason="side effect 'teleport' of tool 'beam' is not allowed by this policy",
    )


def test_default_policy_identity() -> None:
    policy = default_policy()
    assert DEFAULT_POLICY_ID == "agentrt.default_policy/1"
    assert policy_id_of(policy) == "agentrt.default_policy/1"
    assert isinstance(policy, Policy)


# ---------------------------------------------------------------------------
# SideEffectPolicy


def test_side_effect_policy_with_a_callable_entry_and_string_keys() -> None:
    seen: list[ToolRequest] = []

    def by_amount(req: ToolRequest) -> PolicyDecision:
        seen.append(req)
        if req.args["amount_micros"] > 1_000_000:
            return need_approval("large_charge", "over one dollar", capability=req.args)
        return PolicyDecision.allow()

    policy = SideEffectPolicy(
        {"remote_mutation": by_amount, "read_only": PolicyDecision.allow()},
        policy_id="shop/charges@3",
    )
    small = request("remote_mutation", {"amount_micros": 5})
    large = request("remote_mutation", {"amount_micros": 2_000_000})
    assert policy.evaluate(small, view()) == PolicyDecision.allow()
    assert policy.evaluate(large, view()) == PolicyDecision(
        outcome="require_approval",
        reason="over one dollar",
        kind="large_charge",
        capability={"amount_micros": 2_000_000},
    )
    assert seen == [small, large]
    assert policy.evaluate(request("read_only"), view()) == PolicyDecision.allow()
    assert policy.evaluate(request("local_mutation", name="w"), view()) == PolicyDecision.deny(
        "side effect 'local_mutation' of tool 'w' is not allowed by this policy"
    )
    assert policy_id_of(policy) == "shop/charges@3"


def test_side_effect_policy_empty_mapping_denies_everything() -> None:
    policy = SideEffectPolicy({})
    for kind in SideEffect:
        assert policy.evaluate(request(kind.value), view()).outcome == PolicyOutcome.DENY
    assert policy_id_of(policy) == "agentrt.SideEffectPolicy"


def test_side_effect_policy_refuses_bad_configuration() -> None:
    with pytest.raises(ConfigError, match="side effect 'teleport' is not one of read_only, "):
        SideEffectPolicy({"teleport": PolicyDecision.allow()})
    with pytest.raises(ConfigError, match="the entry for read_only must be a PolicyDecision"):
        SideEffectPolicy({"read_only": "allow"})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="control character U\\+000A"):
        SideEffectPolicy({}, policy_id="a\nb")


def test_side_effect_policy_callable_returning_something_else_raises() -> None:
    not_a_decision: Any = lambda req: "allow"  # noqa: E731
    policy = SideEffectPolicy({"read_only": not_a_decision})
    with pytest.raises(TypeError, match="returned str, not a PolicyDecision"):
        policy.evaluate(request("read_only"), view())


# ---------------------------------------------------------------------------
# policy_id_of


class Unnamed:
    def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        return PolicyDecision.allow()


class Named(Unnamed):
    def __init__(self, policy_id: Any) -> None:
        self.policy_id = policy_id


def test_policy_id_defaults_to_the_qualified_class_name() -> None:
    assert policy_id_of(Unnamed()) == f"{__name__}.Unnamed"


def test_policy_id_attribute_is_used_as_given() -> None:
    assert policy_id_of(Named("billing/v2")) == "billing/v2"
    assert policy_id_of(Named("")) == ""
    assert policy_id_of(Named("é" * 128)) == "é" * 128  # exactly 256 bytes


def test_a_policy_id_of_a_str_subclass_is_recorded_as_its_plain_text() -> None:
    class Loud(str):
        def __str__(self) -> str:
            return "SOMETHING ELSE"

    class Ids(StrEnum):
        BILLING = "billing/v2"

    for declared in (Ids.BILLING, Loud("billing/v2")):
        recorded = policy_id_of(Named(declared))
        assert type(recorded) is str and recorded == "billing/v2"


@pytest.mark.parametrize(
    ("policy_id", "message"),
    [
        ("é" * 129, "policy_id is 258 bytes of UTF-8; at most 256 are allowed"),
        ("x" * 257, "policy_id is 257 bytes of UTF-8; at most 256 are allowed"),
        ("bad\ud800", "is not encodable as UTF-8"),
        ("nul\x00", "contains the control character U+0000"),
        ("tab\tid", "contains the control character U+0009"),
        ("del\x7f", "contains the control character U+007F"),
        ("c1\x85", "contains the control character U+0085"),
        (7, "policy_id must be a string, got int"),
    ],
)
def test_policy_id_refusals(policy_id: Any, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        policy_id_of(Named(policy_id))
    assert message in str(raised.value)


# ---------------------------------------------------------------------------
# evaluate


class AsyncPolicy:
    policy_id = "async/1"

    async def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        await asyncio.sleep(0)
        return PolicyDecision.deny(f"no {request.spec.name}")


class Broken:
    def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        raise RuntimeError("policy bug")


class Wrong:
    policy_id = "wrong/1"

    def evaluate(self, request: ToolRequest, view: RunView) -> Any:
        return "allow"


def test_evaluate_calls_sync_and_async_policies() -> None:
    assert asyncio.run(evaluate(Unnamed(), request("read_only"), view())) == PolicyDecision.allow()
    assert asyncio.run(evaluate(AsyncPolicy(), request("read_only"), view())) == (
        PolicyDecision.deny("no act")
    )
    assert asyncio.run(evaluate(default_policy(), request("destructive"), view())).outcome == (
        "deny"
    )


def test_evaluate_lets_policy_errors_through() -> None:
    with pytest.raises(RuntimeError, match="policy bug"):
        asyncio.run(evaluate(Broken(), request("read_only"), view()))
    with pytest.raises(TypeError, match="policy 'wrong/1' returned str, not a PolicyDecision"):
        asyncio.run(evaluate(Wrong(), request("read_only"), view()))


# ---------------------------------------------------------------------------
# need_approval, decode_presentation


def test_need_approval_is_require_approval() -> None:
    assert need_approval("k", "why", {"c": 1}, {"p": 2}) == PolicyDecision.require_approval(
        "k", "why", {"c": 1}, {"p": 2}
    )
    assert need_approval("k", "why") == PolicyDecision(
        outcome="require_approval", reason="why", kind="k"
    )
    with pytest.raises(ConfigError, match="an approval kind must be a non-empty string, got ''"):
        need_approval("", "why")
    with pytest.raises(ConfigError, match="an approval kind must be a non-empty string"):
        need_approval(None, "why")  # type: ignore[arg-type]


class Transfer(pydantic.BaseModel):
    tool: str
    args: dict[str, int]


@dataclass
class TransferDC:
    tool: str
    args: dict[str, int]


class TransferTD(TypedDict):
    tool: str
    args: dict[str, int]


def test_decode_presentation_into_models_dataclasses_and_typed_dicts() -> None:
    shown = approval({"tool": "pay", "args": {"amount_micros": 5}})
    assert decode_presentation(shown, Transfer) == Transfer(tool="pay", args={"amount_micros": 5})
    assert decode_presentation(shown, TransferDC) == TransferDC(
        tool="pay", args={"amount_micros": 5}
    )
    assert decode_presentation(shown, TransferTD) == {"tool": "pay", "args": {"amount_micros": 5}}


def test_decode_presentation_that_does_not_fit_raises_validation_error() -> None:
    shown = approval({"tool": "pay", "args": {"amount_micros": "lots"}})
    with pytest.raises(pydantic.ValidationError, match=r"args\.amount_micros") as raised:
        decode_presentation(shown, Transfer)
    assert isinstance(raised.value, ValueError)
    with pytest.raises(ValueError, match="Input should be a valid dictionary"):
        decode_presentation(approval(None), Transfer)


def test_decode_presentation_of_an_undecodable_approval() -> None:
    broken = approval(None, decode_error="presentation_json: not JSON")
    with pytest.raises(ValueError, match=f"approval {'a' * 32} could not be decoded"):
        decode_presentation(broken, Transfer)


# ---------------------------------------------------------------------------
# interrupted side effect


def test_interrupted_side_effect_decision() -> None:
    decision = interrupted_side_effect_decision(spec("remote_mutation", name="push"), {"ref": "m"})
    assert decision == PolicyDecision(
        outcome="require_approval",
        reason="interrupted while executing; outcome unknown",
        kind="interrupted_side_effect",
        capability={"tool": "push", "args": {"ref": "m"}},
        presentation={
            "tool": "push",
            "args": {"ref": "m"},
            "side_effect": "remote_mutation",
            "notice": (
                "This call started, and the process stopped before its outcome was recorded, "
                "so whether it took effect is unknown. "
                "Approving runs it again with these arguments; rejecting ends the run."
            ),
        },
    )
    assert decision.presentation["notice"] == INTERRUPTED_NOTICE
    assert type(decision.presentation["side_effect"]) is str


def test_interrupted_side_effect_decision_without_args() -> None:
    decision = interrupted_side_effect_decision(spec(SideEffect.DESTRUCTIVE), None)
    assert decision.capability == {"tool": "act", "args": {}}
    assert decision.presentation["args"] == {}
    assert decision.presentation["side_effect"] == "destructive"
