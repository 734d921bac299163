"""Operation ids and a tool's own reconciliation (issue 24, decision 0067).

Every crash here is real: `crashing_child.py` SIGKILLs itself inside its
`charge` tool after journalling the call, and a restarted driver, whose
`charge` tool carries a reconciliation, takes the run over.

Every test that takes a database takes `database` (or `any_store`) and runs on SQLite
and on PostgreSQL (issue 21 item 5; decisions 0103, 0105): each answer a tool's
reconciliation can give, a run's own reconcile before the tool's, a Gate's attach, a
terminal tool, a reconciliation that raises, times out or is cancelled, and the
approval screens' notices.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
import crashing_child as child
from agentrt import (
    ConfigError,
    Decision,
    OutcomeUnknown,
    PolicyDecision,
    Reconciled,
    Reconciliation,
    RunView,
    SideEffect,
    SideEffectPolicy,
    ToolCall,
    ToolResult,
)
from agentrt._render_approval import INTERRUPTED_NOTICE, summary, summary_lines
from agentrt.approver import Local
from agentrt.scripted import ScriptedAgent
from support.crashes import crash


class ReconciledCharge(child.JournalTool):
    """The child's `charge` (a ToolSpec-based tool) with a reconciliation of its own."""

    def __init__(self, db: Path | str, answer: Any) -> None:
        super().__init__("charge", SideEffect.REMOTE_MUTATION, child.journal_path(db), die=False)
        self.answer = answer
        self.asked: list[ToolCall] = []
        self.calls: list[ToolCall] = []

    def call(self, call: ToolCall) -> ToolResult:
        self.calls.append(call)
        return super().call(call)

    def reconcile(self, call: ToolCall) -> Any:
        self.asked.append(call)
        if callable(self.answer):
            return self.answer(call)
        return self.answer


def resume_with(db: Path | str, tool: Any, **kw: Any) -> tuple[agentrt.Store, agentrt.Driver]:
    store = agentrt.open_store(db)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(child.script("charge")),
        policy=kw.pop("policy", child.policy()),
        tools=[
            tool,
            child.JournalTool(
                "lookup", SideEffect.READ_ONLY, Path(f"{child.journal_path(db)}.j2"), False
            ),
        ],
        lease_owner="restarted",
        **kw,
    )
    return store, driver


def reconciled_events(store: agentrt.Store, run_id: str) -> list[Any]:
    return [e.payload for e in store.list_events(run_id=run_id) if e.type == "step.reconciled"]


def expected_op(run_id: str, step_id: str) -> str:
    text = f"agentrt.operation/1\n{run_id}\n{step_id}".encode()
    return "op_" + hashlib.sha256(text).hexdigest()[:32]


# -- operation_id ------------------------------------------------------------------


def test_operation_id_is_derived_from_run_and_step_and_differs_per_step_with_identical_args(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    seen: list[ToolCall] = []

    @agentrt.tool(side_effect="remote_mutation", timeout=5)
    def charge(amount: int, call: ToolCall) -> dict[str, Any]:
        """Charge."""
        seen.append(call)
        return {"ok": True}

    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(
            [
                Decision.tool_call("charge", {"amount": 5}),
                Decision.tool_call("charge", {"amount": 5}),
                Decision.complete(),
            ]
        ),
        policy=child.policy(),
        tools=[charge],
    )
    run = driver.start_sync("charge twice")
    assert run.status == "COMPLETED"
    first, second = seen
    assert first.operation_id == expected_op(run.id, first.step_id)
    assert second.operation_id == expected_op(run.id, second.step_id)
    assert first.operation_id != second.operation_id  # same args, another step
    assert agentrt.operation_id(run.id, first.step_id) == first.operation_id
    request = agentrt.ToolRequest(run.id, first.step_id, charge.spec, {"amount": 5})
    assert request.operation_id == first.operation_id


def test_operation_id_is_the_same_when_an_approved_rerun_executes_the_request_again(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    seen: list[ToolCall] = []

    @agentrt.tool(side_effect="remote_mutation", timeout=5)
    def charge(amount: int, call: ToolCall) -> dict[str, Any]:
        """Charge."""
        seen.append(call)
        if len(seen) == 1:
            raise OutcomeUnknown("the connection dropped after the charge was sent")
        return {"ok": True}

    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("charge", {"amount": 5}), Decision.complete()]),
        policy=child.policy(),
        tools=[charge],
    )
    run = driver.start_sync("charge")
    (approval,) = store.pending_approvals(run.id)
    agentrt.approve(store, run.id, approval.id, by="ops", shown_hash=approval.hash)
    assert driver.resume_sync(run.id).status == "COMPLETED"
    first, again = seen
    assert first.step_id == again.step_id
    assert first.operation_id == again.operation_id
    assert again.lease_epoch > first.lease_epoch


def test_a_reconcile_that_is_not_callable_is_refused_at_decoration() -> None:
    with pytest.raises(ConfigError, match="reconcile must be a function"):
        agentrt.tool(side_effect="remote_mutation", timeout=5, reconcile="yes")  # type: ignore[arg-type]


# -- each answer, after a real SIGKILL inside the charge -------------------------------


def test_tool_reconcile_found_completes_the_step_with_the_recovered_result_and_asks_nobody(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")

    def look_up(call: ToolCall) -> Reconciled:
        charged = [ln for ln in child.journal_lines(db_path) if call.step_id in ln]
        if charged:
            return Reconciled.found(
                {"charged": 5, "found": True}, "journal has the charge", "5 charged"
            )
        return Reconciled.not_found("no charge in the journal")

    tool = ReconciledCharge(db_path, look_up)
    store, driver = resume_with(db_path, tool)
    run = driver.resume_sync(run_id)
    assert (run.status, run.result) == ("COMPLETED", {"done": True})
    assert len(child.journal_lines(db_path)) == 1  # the charge never ran again
    assert tool.calls == []
    (asked,) = tool.asked
    (step0, step1) = store.list_steps(run_id)
    assert (asked.run_id, asked.step_id, asked.args) == (run_id, step0.id, {"amount": 5})
    assert asked.operation_id == expected_op(run_id, step0.id)
    assert asked.lease_epoch == 2
    assert step0.status == "done"
    assert step0.observation is not None
    assert (step0.observation.kind, step0.observation.content, step0.observation.summary) == (
        "tool_result",
        {"charged": 5, "found": True},
        "5 charged",
    )
    assert store.pending_approvals(run_id) == [] and store.list_approvals(run_id) == []
    (payload,) = reconciled_events(store, run_id)
    assert payload == {
        "decider": "tool_reconcile",
        "tool": "charge",
        "operation_id": asked.operation_id,
        "answer": "found",
        "detail": "journal has the charge",
        "summary": "5 charged",
        "content_hash": step0.observation.content_hash,
    }
    types = [e.type for e in store.list_events(run_id=run_id)]
    i = types.index("step.interrupted")
    assert types[i : i + 3] == ["step.interrupted", "step.reconciled", "run.resumed"]
    resumed = [e.payload for e in store.list_events(run_id=run_id) if e.type == "run.resumed"]
    assert resumed == [{"after": "interruption", "reconcile": "tool_reconcile", "answer": "found"}]
    assert step1.decision is not None and step1.decision.kind == "complete"


def test_tool_reconcile_safe_to_repeat_reruns_on_the_same_step_with_the_same_operation_id(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    tool = ReconciledCharge(
        db_path, Reconciled.not_found("provider has no charge under this key", safe_to_repeat=True)
    )
    store, driver = resume_with(db_path, tool)
    run = driver.resume_sync(run_id)
    assert run.status == "COMPLETED"
    lines = child.journal_lines(db_path)
    step0 = store.list_steps(run_id)[0]
    assert len(lines) == 2 and all(ln.split()[2] == step0.id for ln in lines)
    (asked,) = tool.asked
    (again,) = tool.calls
    assert again.operation_id == asked.operation_id == expected_op(run_id, step0.id)
    assert again.step_id == step0.id and again.args == {"amount": 5}
    assert step0.status == "done"
    assert store.list_approvals(run_id) == []
    (payload,) = reconciled_events(store, run_id)
    assert payload["answer"] == "safe_to_repeat" and payload["decider"] == "tool_reconcile"
    events = store.list_events(run_id=run_id)
    starts = [e.payload for e in events if e.type == "step.tool_started"]
    assert starts == [
        {"tool": "charge", "args": {"amount": 5}},
        {"tool": "charge", "args": {"amount": 5}, "reconciled": True},
    ]
    types = [e.type for e in events]
    i = types.index("step.reconciled")
    assert types[i : i + 4] == [
        "step.reconciled",
        "run.resumed",
        "step.policy",
        "step.tool_started",
    ]


def test_tool_reconcile_safe_to_repeat_still_passes_the_policy(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    tool = ReconciledCharge(db_path, Reconciled.not_found(safe_to_repeat=True))
    deny = SideEffectPolicy(
        {
            SideEffect.READ_ONLY: PolicyDecision.allow(),
            SideEffect.REMOTE_MUTATION: PolicyDecision.deny("charges are frozen"),
        },
        policy_id="frozen/1",
    )
    store, driver = resume_with(db_path, tool, policy=deny)
    run = driver.resume_sync(run_id)
    assert tool.calls == [] and len(child.journal_lines(db_path)) == 1
    step0 = store.list_steps(run_id)[0]
    assert step0.status == "failed"
    assert step0.observation is not None and step0.observation.kind == "policy_denied"
    assert run.status == "COMPLETED"


def test_tool_reconcile_safe_to_repeat_then_a_policy_abort_ends_the_run(
    database: str, crash_journal: Path
) -> None:
    """The call judged again after "safe to repeat" may end the run: the interrupted step
    fails with the policy's reason in the same commit (it was refused as a step that moved,
    the run left RUNNING, and every resume failed the same way: decision 0135)."""
    db_path = database
    run_id = crash(db_path, "charge")
    tool = ReconciledCharge(db_path, Reconciled.not_found(safe_to_repeat=True))
    stop = SideEffectPolicy(
        {
            SideEffect.READ_ONLY: PolicyDecision.allow(),
            SideEffect.REMOTE_MUTATION: PolicyDecision.abort("charges are stopped"),
        },
        policy_id="stopped/1",
    )
    store, driver = resume_with(db_path, tool, policy=stop)
    run = driver.resume_sync(run_id)
    assert (run.status, run.reason, run.reason_detail) == (
        "FAILED",
        "policy_abort",
        "charges are stopped",
    )
    assert tool.calls == [] and len(child.journal_lines(db_path)) == 1
    (step0,) = store.list_steps(run_id)
    assert step0.status == "failed"
    assert step0.observation is not None and step0.observation.kind == "policy_denied"
    assert step0.policy is not None and step0.policy.outcome == "abort"
    types = [e.type for e in store.list_events(run_id=run_id)]
    i = types.index("step.reconciled")
    assert types[i:] == [
        "step.reconciled",
        "run.resumed",
        "step.policy",
        "step.failed",
        "run.finished",
    ]


def test_tool_reconcile_not_found_waits_for_a_person_with_the_answer_in_the_approval(
    database: str,
    crash_journal: Path,
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    tool = ReconciledCharge(db_path, Reconciled.not_found("no charge under this key"))
    store, driver = resume_with(db_path, tool)
    run = driver.resume_sync(run_id)
    assert run.status == "WAITING_FOR_APPROVAL"
    assert tool.calls == [] and len(child.journal_lines(db_path)) == 1
    (approval,) = store.pending_approvals(run_id)
    assert approval.kind == "interrupted_side_effect"
    notice = approval.presentation["notice"]
    assert "did not find it: no charge under this key." in notice
    assert approval.presentation["reconciliation"] == {
        "answer": "not_found",
        "detail": "no charge under this key",
    }
    (payload,) = reconciled_events(store, run_id)
    assert (payload["answer"], payload["detail"]) == ("not_found", "no charge under this key")
    # The screens show what the reconciliation said, not the crash's fixed notice.
    lines = summary_lines(summary(approval, "interrupted"))
    assert f"NOTICE: {notice}" in lines and INTERRUPTED_NOTICE not in lines
    agentrt.approve(store, run_id, approval.id, by="ops", shown_hash=approval.hash)
    assert driver.resume_sync(run_id).status == "COMPLETED"
    (again,) = tool.calls
    assert again.operation_id == tool.asked[0].operation_id


def raise_lookup(call: ToolCall) -> Reconciled:
    raise ConnectionError("provider unreachable")


def hang(call: ToolCall) -> Reconciled:
    threading.Event().wait(30)
    return Reconciled.found({"late": True})


async def async_hang(call: ToolCall) -> Reconciled:
    await asyncio.sleep(30)
    return Reconciled.found({"late": True})


class Hostile:
    def __str__(self) -> str:
        raise RuntimeError("no")


@pytest.mark.parametrize(
    ("answer", "detail", "error"),
    [
        (Reconciled.unknown("provider returned 503"), "provider returned 503", None),
        (raise_lookup, "", "the reconciliation raised ConnectionError: provider unreachable"),
        (hang, "", "the reconciliation did not answer within 0.5s"),
        (async_hang, "", "the reconciliation did not answer within 0.5s"),
        (lambda call: {"found": True}, "", "the reconciliation returned dict, not a Reconciled"),
        (lambda call: None, "", "the reconciliation returned NoneType, not a Reconciled"),
        (
            lambda call: Reconciled("maybe"),
            "",
            "the reconciliation answered 'maybe'",
        ),
        (
            lambda call: Reconciled.found({1, 2}, "found it"),
            "found it",
            "the reconciliation found a result that is not usable",
        ),
    ],
    ids=[
        "unknown",
        "raises",
        "times-out",
        "async-times-out",
        "not-reconciled",
        "none",
        "unknown-answer",
        "unusable-result",
    ],
)
def test_tool_reconcile_unknown_or_failing_waits_for_a_person_with_the_failure_recorded(
    database: str, crash_journal: Path, answer: Any, detail: str, error: str | None
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    tool = ReconciledCharge(db_path, answer)
    tool.spec = agentrt.ToolSpec(
        name="charge",
        description=tool.spec.description,
        input_schema=tool.spec.input_schema,
        side_effect=SideEffect.REMOTE_MUTATION,
        timeout=timedelta(seconds=0.5),
    )
    store, driver = resume_with(db_path, tool)
    run = driver.resume_sync(run_id)
    assert run.status == "WAITING_FOR_APPROVAL"
    assert tool.calls == [] and len(child.journal_lines(db_path)) == 1
    (payload,) = reconciled_events(store, run_id)
    assert payload["answer"] == "unknown"
    assert payload["detail"] == detail
    if error is None:
        assert "error" not in payload
    else:
        assert payload["error"].startswith(error)
    (approval,) = store.pending_approvals(run_id)
    assert "could not tell whether it took effect" in approval.presentation["notice"]
    assert approval.presentation["reconciliation"]["answer"] == "unknown"


def test_a_run_level_reconcile_takes_precedence_over_the_tools_own(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    tool = ReconciledCharge(db_path, Reconciled.found({"charged": 5}))
    views: list[RunView] = []

    def run_level(view: RunView) -> Reconciliation:
        views.append(view)
        return Reconciliation.conflict("the ledger disagrees")

    store, driver = resume_with(db_path, tool, reconcile=run_level)
    run = driver.resume_sync(run_id)
    assert (run.status, run.reason) == ("FAILED", "reconcile_conflict")
    assert len(views) == 1 and tool.asked == []
    assert reconciled_events(store, run_id) == []


def test_a_function_tools_reconcile_settles_its_interrupted_call(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    asked: list[ToolCall] = []

    def look_up(call: ToolCall) -> Reconciled:
        asked.append(call)
        return Reconciled.found({"charged": call.args["amount"]})

    @agentrt.tool(side_effect="remote_mutation", timeout=5, reconcile=look_up)
    def charge(amount: int) -> dict[str, Any]:
        """Charge."""
        raise AssertionError("not run again")

    store, driver = resume_with(db_path, charge)
    run = driver.resume_sync(run_id)
    assert run.status == "COMPLETED"
    assert len(asked) == 1
    step0 = store.list_steps(run_id)[0]
    assert step0.observation is not None and step0.observation.content == {"charged": 5}


# -- the approval screens say what happened -----------------------------------------


def test_the_approval_screens_show_an_outcome_unknown_pauses_own_notice_not_the_crash_notice(
    any_store: agentrt.Store,
) -> None:
    store = any_store

    @agentrt.tool(side_effect="remote_mutation", timeout=5)
    def charge(amount: int) -> dict[str, Any]:
        """Charge."""
        raise OutcomeUnknown("the connection to the bank was lost after the charge was sent")

    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("charge", {"amount": 5})]),
        policy=child.policy(),
        tools=[charge],
    )
    run = driver.start_sync("charge")
    (approval,) = store.pending_approvals(run.id)
    said = approval.presentation["notice"]
    assert "the connection to the bank was lost" in said
    lines = summary_lines(summary(approval, "why"))
    assert f"NOTICE: {said}" in lines
    assert not any("process running it stopped" in line for line in lines)
    (pending,) = Local(store).pending(run.id)
    assert pending.notice == f"NOTICE: {said}"


def test_the_approval_screens_still_show_the_crash_notice_after_a_crash(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    store = agentrt.open_store(db_path)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(child.script("charge")),
        policy=child.policy(),
        tools=child.tools(db_path),
    )
    assert driver.resume_sync(run_id).status == "WAITING_FOR_APPROVAL"
    (approval,) = store.pending_approvals(run_id)
    lines = summary_lines(summary(approval, "why"))
    assert INTERRUPTED_NOTICE in lines


def test_the_approval_screens_show_the_proxys_timeout_hold_notice(any_store: agentrt.Store) -> None:
    store = any_store
    from agentrt.mcp._proxy import TIMED_OUT_NOTICE, timed_out_decision

    class HoldsAsTheProxyDoes:
        id = "proxy-hold/1"

        def evaluate(self, request: agentrt.ToolRequest, view: RunView) -> PolicyDecision:
            return timed_out_decision(request)

    @agentrt.tool(side_effect="remote_mutation", timeout=5)
    def append(entry: str) -> str:
        """Append."""
        raise AssertionError("held, not run")

    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("append", {"entry": "rent"})]),
        policy=HoldsAsTheProxyDoes(),
        tools=[append],
    )
    run = driver.start_sync("append")
    (approval,) = store.pending_approvals(run.id)
    lines = summary_lines(summary(approval, "why"))
    assert f"NOTICE: {TIMED_OUT_NOTICE}" in lines
    assert INTERRUPTED_NOTICE not in lines


def test_a_gates_attach_holds_the_reconciled_rerun_as_allowed_and_execute_runs_it_once(
    database: str,
    crash_journal: Path,
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    tool = ReconciledCharge(db_path, Reconciled.not_found("none yet", safe_to_repeat=True))
    store = agentrt.open_store(db_path)
    gate = agentrt.Gate(store=store, policy=child.policy(), tools=[tool], lease_owner="own-loop")
    session, verdict = gate.attach_sync(run_id)
    assert verdict is not None and verdict.outcome == "allowed"
    assert verdict.request is not None
    assert verdict.request.operation_id == tool.asked[0].operation_id
    assert tool.calls == []  # nothing runs before execute
    open_step = session.current()
    assert open_step is not None
    observation = open_step.execute_sync()
    assert observation.kind == "tool_result"
    (again,) = tool.calls
    assert again.operation_id == tool.asked[0].operation_id
    assert len(child.journal_lines(db_path)) == 2
    session.close_sync()


def test_tool_reconcile_found_for_a_terminal_tool_completes_the_run_with_the_result(
    database: str,
    crash_journal: Path,
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    tool = ReconciledCharge(db_path, Reconciled.found({"receipt": "r-17"}))
    tool.spec = agentrt.ToolSpec(
        name="charge",
        description=tool.spec.description,
        input_schema=tool.spec.input_schema,
        side_effect=SideEffect.REMOTE_MUTATION,
        timeout=timedelta(seconds=10),
        terminal=True,
    )
    store, driver = resume_with(db_path, tool)
    run = driver.resume_sync(run_id)
    assert (run.status, run.reason, run.result) == (
        "COMPLETED",
        "goal_completed",
        {"receipt": "r-17"},
    )
    assert [s.status for s in store.list_steps(run_id)] == ["done"]
    types = [e.type for e in store.list_events(run_id=run_id)]
    assert types[-2:] == ["step.reconciled", "run.finished"]
    assert tool.calls == [] and len(child.journal_lines(db_path)) == 1


# -- a reconciliation's own cancel or exit; one bound in total; the caller's cancel ----


def _raising_direct(exc: BaseException) -> Any:
    async def look_up(call: ToolCall) -> Reconciled:
        raise exc

    return look_up


def _raising_nested(exc: BaseException) -> Any:
    async def inner() -> Reconciled:
        raise exc

    async def look_up(call: ToolCall) -> Any:
        return inner()  # an async reconciliation that returns an awaitable

    return look_up


def _async_charge(look_up: Any, timeout: float = 5) -> Any:
    @agentrt.tool(side_effect="remote_mutation", timeout=timeout, reconcile=look_up)
    def charge(amount: int) -> dict[str, Any]:
        """Charge."""
        raise AssertionError("not run again")

    return charge


@pytest.mark.parametrize("shape", [_raising_direct, _raising_nested], ids=["direct", "nested"])
@pytest.mark.parametrize(
    ("exc", "name"),
    [
        (asyncio.CancelledError(), "CancelledError"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
        (SystemExit(3), "SystemExit"),
    ],
    ids=["cancelled", "keyboard-interrupt", "system-exit"],
)
def test_a_tool_reconcile_that_raises_a_cancel_or_exit_is_unknown_and_a_person_decides(
    database: str, crash_journal: Path, shape: Any, exc: BaseException, name: str
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    store, driver = resume_with(db_path, _async_charge(shape(exc)))
    run = driver.resume_sync(run_id)  # does not raise: the takeover is not cancelled
    assert run.status == "WAITING_FOR_APPROVAL"
    (payload,) = reconciled_events(store, run_id)
    assert payload["answer"] == "unknown"
    assert payload["error"].startswith(f"the reconciliation raised {name}")
    (approval,) = store.pending_approvals(run_id)
    assert approval.presentation["reconciliation"]["answer"] == "unknown"


def test_a_tool_reconcile_and_the_awaitable_it_returns_share_one_timeout(
    database: str, crash_journal: Path
) -> None:
    # 0.3 s before returning the awaitable, 0.4 s more in it: 0.7 s in all, past the
    # 0.5 s timeout (a loaded machine only makes it later), so the answer is unknown.
    db_path = database

    async def inner() -> Reconciled:
        await asyncio.sleep(0.4)
        return Reconciled.found({"late": True})

    async def look_up(call: ToolCall) -> Any:
        await asyncio.sleep(0.3)
        return inner()

    run_id = crash(db_path, "charge")
    store, driver = resume_with(db_path, _async_charge(look_up, timeout=0.5))
    run = driver.resume_sync(run_id)
    assert run.status == "WAITING_FOR_APPROVAL"
    (payload,) = reconciled_events(store, run_id)
    assert payload["answer"] == "unknown"
    assert payload["error"] == "the reconciliation did not answer within 0.5s"
    assert store.list_steps(run_id)[0].status == "awaiting_approval"


def test_a_cancelled_takeover_still_propagates_its_cancel_through_a_tool_reconcile(
    database: str,
    crash_journal: Path,
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    cancelled: list[str] = []

    async def attempt() -> None:
        started = asyncio.Event()

        async def inner() -> Reconciled:
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append("inner")
                raise
            return Reconciled.found({"late": True})

        async def look_up(call: ToolCall) -> Any:
            return inner()

        _, driver = resume_with(db_path, _async_charge(look_up, timeout=60))
        task = asyncio.ensure_future(driver.resume(run_id))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(attempt())
    assert cancelled == ["inner"]  # the reconciliation was cancelled with its caller
    store = agentrt.open_store(db_path)
    assert store.get_run(run_id).status == "RUNNING"  # nothing was decided
    assert reconciled_events(store, run_id) == []
    # The lease was given back: the next takeover asks again, at once.
    tool = ReconciledCharge(db_path, Reconciled.not_found("no charge under this key"))
    store, driver = resume_with(db_path, tool)
    assert driver.resume_sync(run_id).status == "WAITING_FOR_APPROVAL"
    assert [p["answer"] for p in reconciled_events(store, run_id)] == ["not_found"]
