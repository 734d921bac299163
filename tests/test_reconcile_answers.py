"""A reconciliation's answer that cannot be stored or read still settles the run.

The run-level `reconcile` and a tool's own reconciliation are consumer code. What
they answer is acted on, or taken as what the spec says it is (`internal_error` for
the run-level one, `unknown` for a tool's), never raised out of the takeover: a run
left RUNNING with no lease, whose every resume asks the same reconciliation again
and fails again, has no way on but an operator's cancel.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import (
    Decision,
    PolicyDecision,
    Reconciled,
    Reconciliation,
    SideEffect,
    ToolCall,
    ToolResult,
)
from agentrt.scripted import ScriptedAgent
from conftest import RecordingTool
from support.leases import expire_lease
from support.policies import FixedPolicy


@dataclass
class Taken:
    run: agentrt.Run | None
    error: BaseException | None
    store: agentrt.Store


def taken_over(database: str, **taker: Any) -> Taken:
    """A `charge` call whose owner stalls mid-call; another driver (`taker`) takes it over."""
    box: dict[str, Any] = {}

    def mid_call(call: ToolCall) -> ToolResult:
        expire_lease(database, call.run_id)
        tools = taker.pop("tools", None) or [RecordingTool("charge", SideEffect.REMOTE_MUTATION)]
        other = agentrt.Driver(
            store=agentrt.open_store(database),
            agent=ScriptedAgent([Decision.complete({"after": "takeover"})] * 2),
            policy=FixedPolicy(PolicyDecision.allow()),
            tools=tools,
            lease_owner="taker",
            **taker,
        )
        try:
            box["run"] = other.resume_sync(call.run_id)
        except BaseException as exc:  # what the takeover raised is the finding
            box["error"] = exc
        return ToolResult({"late": True})

    first = agentrt.Driver(
        store=agentrt.open_store(database),
        agent=ScriptedAgent([Decision.tool_call("charge", {"x": 1}), Decision.complete()]),
        policy=FixedPolicy(PolicyDecision.allow()),
        tools=[RecordingTool("charge", SideEffect.REMOTE_MUTATION, result=mid_call)],
        lease_owner="first",
        lease_ttl=timedelta(hours=1),
    )
    with pytest.raises(agentrt.LeaseLostError):
        first.start_sync("charge it")
    return Taken(box.get("run"), box.get("error"), agentrt.open_existing(database))


class _ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("repr boom")


@pytest.mark.parametrize(
    ("answer", "status", "reason", "detail"),
    [
        (
            Reconciliation.conflict("charge \ud800 seen twice"),
            "FAILED",
            "reconcile_conflict",
            "charge \\ud800 seen twice",
        ),
        (Reconciliation.continue_run("looked \udfff"), "COMPLETED", "goal_completed", ""),
        (
            Reconciliation.completed({"ok": 1}, "found \ud800 it"),
            "COMPLETED",
            "goal_completed",
            "found \\ud800 it",
        ),
    ],
    ids=["conflict", "continue", "completed"],
)
def test_a_run_reconciles_detail_with_a_lone_surrogate_is_kept_escaped_and_the_run_settles(
    database: str, answer: Reconciliation, status: str, reason: str, detail: str
) -> None:
    taken = taken_over(database, reconcile=lambda view: answer)

    assert taken.error is None, repr(taken.error)
    assert taken.run is not None
    assert (taken.run.status, taken.run.reason, taken.run.reason_detail) == (status, reason, detail)
    stored = taken.store.get_run(taken.run.id)
    assert (stored.status, stored.reason_detail) == (status, detail)
    assert taken.store.lease_state(taken.run.id).owner == ""
    assert taken.store.verify_events().intact


def test_a_run_reconciles_detail_whose_repr_raises_ends_the_run_internal_error(
    database: str,
) -> None:
    answer = Reconciliation(outcome="conflict", detail=_ReprRaises())  # type: ignore[arg-type]
    taken = taken_over(database, reconcile=lambda view: answer)

    assert taken.error is None, repr(taken.error)
    assert taken.run is not None
    assert (taken.run.status, taken.run.reason) == ("FAILED", "internal_error")
    assert "detail" in taken.run.reason_detail
    assert taken.store.get_run(taken.run.id).status == "FAILED"


class _AnswerRaises(Reconciled):
    """A `Reconciled` whose answer cannot be read: reading it raises `raised`."""

    raised: BaseException = SystemExit(4)

    @property  # type: ignore[misc]
    def answer(self) -> str:  # type: ignore[override]
        raise self.raised


@pytest.mark.parametrize(
    "raised", [SystemExit(4), asyncio.CancelledError(), KeyboardInterrupt()], ids=type
)
def test_a_tool_reconciliation_whose_answer_raises_a_cancel_or_exit_is_unknown_and_a_person_decides(
    database: str, raised: BaseException
) -> None:
    class Hostile(_AnswerRaises):
        pass

    Hostile.raised = raised
    tool = RecordingTool("charge", SideEffect.REMOTE_MUTATION)
    tool.reconcile = lambda call: object.__new__(Hostile)  # type: ignore[attr-defined]
    taken = taken_over(database, tools=[tool])

    assert taken.error is None, repr(taken.error)
    assert taken.run is not None and taken.run.status == "WAITING_FOR_APPROVAL"
    (approval,) = taken.store.list_approvals(taken.run.id)
    assert approval.kind == "interrupted_side_effect"
    (reconciled,) = [
        e for e in taken.store.list_events(run_id=taken.run.id) if e.type == "step.reconciled"
    ]
    assert reconciled.payload["answer"] == "unknown"
    assert type(raised).__name__ in reconciled.payload["error"]
    assert tool.calls == []


def test_a_run_reconciles_outcome_that_is_not_a_str_ends_the_run_internal_error_naming_it(
    database: str,
) -> None:
    answer = Reconciliation(outcome=["shrug"] * 500, detail="x")  # type: ignore[arg-type]
    taken = taken_over(database, reconcile=lambda view: answer)

    assert taken.error is None, repr(taken.error)
    assert taken.run is not None
    assert (taken.run.status, taken.run.reason) == ("FAILED", "internal_error")
    detail = taken.run.reason_detail
    assert detail.startswith("reconcile returned an unknown outcome ['shrug', "), detail
    assert len(detail) < 300  # the outcome's repr is bounded, not kept whole
    assert taken.store.get_run(taken.run.id).reason_detail == detail
