"""agentrt.view: run and step summaries, waiting approvals in one query, choosing the approval.

Every test but the formatting one takes `database` and runs on SQLite and on PostgreSQL
(issue 21 item 5); rows are changed by hand through `support.rows` on either.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect, ToolCall
from agentrt.scripted import ScriptedAgent
from agentrt.view import (
    AmbiguousApprovalError,
    choose_approval,
    format_cost,
    format_duration,
    run_detail,
    run_page,
    step_page,
    waiting_approvals,
)
from conftest import FakeClock, Ids, RecordingTool
from support.rows import execute, query


def _broken(call: ToolCall) -> agentrt.ToolResult:
    raise RuntimeError("disk on fire")


def tools() -> list[RecordingTool]:
    return [
        RecordingTool("lookup", SideEffect.READ_ONLY),
        RecordingTool("send", SideEffect.REMOTE_MUTATION),
        RecordingTool("wipe", SideEffect.DESTRUCTIVE),
        RecordingTool("broken", SideEffect.READ_ONLY, result=_broken),
    ]


def drive(db: str, decisions: Sequence[Decision], *, prefix: str, goal: str = "g") -> agentrt.Run:
    store = agentrt.open_store(db)
    try:
        driver = agentrt.Driver(
            store=store,
            agent=ScriptedAgent(list(decisions)),
            policy=agentrt.default_policy(),
            tools=tools(),
            now=FakeClock(),
            new_id=Ids(prefix),
        )
        return driver.start_sync(goal)
    finally:
        store.close()


def waiting_run(db: str, prefix: str, x: int = 1) -> agentrt.Run:
    return drive(db, [Decision.tool_call("send", {"x": x})], prefix=prefix, goal=f"send {x}")


def add_pending_copy(db: str, run_id: str, new_id: str) -> None:
    """A second pending approval on the same run (what a reconciliation pause can leave)."""
    execute(
        db,
        "INSERT INTO approvals (id, run_id, step_id, kind, capability_json, "
        "presentation_json, request_json, hash, status, created_at) "
        "SELECT ?, run_id, step_id, kind, capability_json, presentation_json, request_json, "
        "hash, status, created_at FROM approvals WHERE run_id = ?",
        (new_id, run_id),
    )


def test_run_page_has_totals_and_fetches_waiting_approvals_in_one_query(database: str) -> None:
    waiting = [waiting_run(database, p, x) for p, x in (("1", 1), ("2", 2), ("3", 3))]
    done = drive(database, [Decision.complete({"ok": True})], prefix="4")
    statements: list[str] = []
    with agentrt.open_existing(database, read_only=True) as store:
        real = store._query  # the store's one read path, on either backend

        def counted(sql: str, params: Any = ()) -> Any:
            statements.append(sql)
            return real(sql, params)

        store._query = counted
        page = run_page(store, limit=10)
        store._query = real
        pending = {r.id: store.pending_approvals(r.id)[0] for r in waiting}
    assert [s.run.id for s in page.runs] == [done.id] + [r.id for r in reversed(waiting)]
    assert page.total == 4 and page.next_offset is None
    assert len([s for s in statements if "FROM approvals" in s]) == 1
    assert page.runs[0].waiting == ()
    assert page.runs[0].run.status == "COMPLETED"
    for summary in page.runs[1:]:
        (w,) = summary.waiting
        expected = pending[summary.run.id]
        assert (w.id, w.kind, w.tool, w.hash) == (
            expected.id,
            "remote_mutation",
            "send",
            expected.hash,
        )
        assert summary.to_json()["waiting"][0]["id"] == expected.id


def test_run_page_filters_by_status_and_pages(database: str) -> None:
    for p in "123":
        waiting_run(database, p)
    drive(database, [Decision.fail("no")], prefix="4")
    with agentrt.open_existing(database, read_only=True) as store:
        first = run_page(store, limit=2, status="WAITING_FOR_APPROVAL")
        second = run_page(store, limit=2, offset=2, status="WAITING_FOR_APPROVAL")
        failed = run_page(store, status="FAILED")
        with pytest.raises(ValueError):
            run_page(store, limit=0)
        with pytest.raises(ValueError):
            run_page(store, status="waiting")
    assert (len(first.runs), first.total, first.next_offset) == (2, 3, 2)
    assert (len(second.runs), second.next_offset) == (1, None)
    assert [s.run.reason for s in failed.runs] == ["goal_failed"]


def test_step_summaries_say_what_happened(database: str) -> None:
    run = drive(
        database,
        [
            Decision.tool_call("lookup", {"x": 1}),
            Decision.tool_call("nope", {}),
            Decision.tool_call("wipe", {"x": 2}),
            Decision.tool_call("lookup", {"x": 3}),
            Decision.tool_call("broken", {"x": 4}),
            Decision.complete({"ok": True}),
        ],
        prefix="a",
    )
    assert run.status == "COMPLETED"
    with agentrt.open_existing(database, read_only=True) as store:
        page = step_page(store, store.get_run(run.id))
    steps = [s.step for s in page.steps]
    # The texts come from other modules; the summaries' own format is what is pinned here.
    unknown = steps[1].observation.content["error"]  # type: ignore[union-attr]
    denied = steps[2].policy.reason  # type: ignore[union-attr]
    error = steps[4].observation.content["error"]  # type: ignore[union-attr]
    assert unknown.startswith("unknown tool 'nope'") and "destructive" in denied
    assert "disk on fire" in error
    rows = [(s.step.index, s.decision, s.policy, s.observation) for s in page.steps]
    assert rows == [
        (0, 'lookup {"x":1}', "allow", "tool_result: lookup ok"),
        (1, "nope {}", "-", f"invalid_decision: {unknown}"),
        (2, 'wipe {"x":2}', f"deny: {denied}", f"policy_denied: {denied}"),
        (3, 'lookup {"x":3}', "allow", "tool_result: lookup ok"),
        (4, 'broken {"x":4}', "allow", f"tool_error: {error}"),
        (5, 'complete {"ok":true}', "-", "-"),
    ]
    assert (page.total, page.offset) == (6, 0)


def test_step_page_defaults_to_the_latest_steps(database: str) -> None:
    decisions = [Decision.tool_call("lookup", {"x": i}) for i in range(7)]
    run = drive(database, [*decisions, Decision.complete()], prefix="a")
    with agentrt.open_existing(database, read_only=True) as store:
        latest = step_page(store, store.get_run(run.id), limit=3)
        first = step_page(store, store.get_run(run.id), limit=3, offset=0)
    assert [s.step.index for s in latest.steps] == [5, 6, 7]
    assert (latest.total, latest.offset) == (8, 5)
    assert [s.step.index for s in first.steps] == [0, 1, 2]


def test_run_detail_puts_the_pending_approval_whole(database: str) -> None:
    run = waiting_run(database, "a", 9)
    with agentrt.open_existing(database, read_only=True) as store:
        detail = run_detail(store, run.id)
    (approval,) = detail.waiting
    assert approval.request["args"] == {"x": 9}
    assert detail.summary.waiting[0].tool == "send"
    assert [s.step.status for s in detail.steps.steps] == ["awaiting_approval"]
    with (
        agentrt.open_existing(database, read_only=True) as store,
        pytest.raises(agentrt.NotFoundError),
    ):
        run_detail(store, "0" * 32)


def test_choose_approval_takes_the_only_pending_one(database: str) -> None:
    run = waiting_run(database, "a")
    with agentrt.open_existing(database) as store:
        chosen = choose_approval(store, run.id)
        assert chosen.status == "pending" and chosen.run_id == run.id
        assert choose_approval(store, run.id, chosen.id) == chosen
        agentrt.approve(store, run.id, chosen.id, by="ann")
        with pytest.raises(agentrt.NotPendingError, match="already approved"):
            choose_approval(store, run.id, chosen.id)
        with pytest.raises(agentrt.RunStateError, match="no approval of it is pending"):
            choose_approval(store, run.id)
        with pytest.raises(agentrt.NotFoundError):
            choose_approval(store, run.id, "f" * 32)
        with pytest.raises(agentrt.NotFoundError):
            choose_approval(store, "0" * 32)


def test_choose_approval_refuses_a_run_that_waits_on_nothing(database: str) -> None:
    run = drive(database, [Decision.complete()], prefix="a")
    with (
        agentrt.open_existing(database) as store,
        pytest.raises(
            agentrt.RunStateError, match=f"run {run.id} is COMPLETED; it waits on no approval"
        ),
    ):
        choose_approval(store, run.id)


def test_choose_approval_names_the_candidates_of_an_ambiguous_run(database: str) -> None:
    run = waiting_run(database, "a")
    with agentrt.open_existing(database) as store:
        first = choose_approval(store, run.id)
    add_pending_copy(database, run.id, "c" * 32)
    with agentrt.open_existing(database) as store:
        with pytest.raises(AmbiguousApprovalError) as caught:
            choose_approval(store, run.id)
        assert [a.id for a in caught.value.candidates] == [first.id, "c" * 32]
        assert f"{first.id} (remote_mutation), {'c' * 32} (remote_mutation)" in str(caught.value)
        assert choose_approval(store, run.id, "c" * 32).id == "c" * 32


def test_choose_approval_reports_an_expired_approval(database: str) -> None:
    run = waiting_run(database, "a")
    execute(database, "UPDATE approvals SET status = 'expired'")
    with agentrt.open_existing(database) as store:
        (approval,) = store.list_approvals(run.id)
        with pytest.raises(agentrt.ApprovalExpiredError):
            choose_approval(store, run.id, approval.id)


def test_waiting_approvals_survive_an_unreadable_request(database: str) -> None:
    run = waiting_run(database, "a")
    execute(database, "UPDATE approvals SET request_json = '{not json'")
    with agentrt.open_existing(database, read_only=True) as store:
        found = waiting_approvals(store, [run.id, "0" * 32])
    assert [w.tool for w in found[run.id]] == [""]
    assert found["0" * 32] == []


def test_a_tool_name_holding_a_nul_is_read_whole_whatever_sqlite_does_with_it(
    database: str,
) -> None:
    # SQLite 3.40's json_extract stops at a `\u0000` (it gave "send"), 3.53's does not; the
    # name comes out as the record holds it on every SQLite, and on PostgreSQL (decision XXXX).
    run = waiting_run(database, "a")
    ((text,),) = query(database, "SELECT request_json FROM approvals")
    request = json.loads(text)
    request["spec"]["name"] = "send\x00tail"  # a name no tool spec carries: an edited record
    execute(database, "UPDATE approvals SET request_json = ?", (json.dumps(request),))
    with agentrt.open_existing(database, read_only=True) as store:
        found = waiting_approvals(store, [run.id])
    assert [w.tool for w in found[run.id]] == ["send\x00tail"]


def test_money_and_durations_read_plainly() -> None:
    assert format_cost(0) == "$0.000000"
    assert format_cost(1_234_567) == "$1.234567"
    assert format_cost(12_000_000_000) == "$12,000.000000"
    assert format_duration(timedelta(milliseconds=1250)) == "1.250s"


def test_text_cut_at_the_read_cap_is_marked_as_cut(database: str) -> None:
    goal = "G" * 100 + "m" * 70_000 + "DELETE EVERYTHING"
    run = drive(database, [Decision.fail("d" * 70_000 + " the end")], prefix="a", goal=goal)
    waiting = waiting_run(database, "b")
    ((text,),) = query(database, "SELECT request_json FROM approvals")
    request = json.loads(text)
    request["spec"]["name"] = "t" * 300 + "!"  # a tool name no tool spec would carry
    execute(database, "UPDATE approvals SET request_json = ?", (json.dumps(request),))
    with agentrt.open_existing(database, read_only=True) as store:
        page = run_page(store)
        detail = run_detail(store, run.id)
    listed = {s.run.id: s for s in page.runs}
    assert listed[run.id].to_json()["goal"] == {
        "truncated": True,
        "length": 70_117,
        "head": goal[:4096],
    }
    whole = detail.summary.to_json()
    assert whole["goal"] == {"truncated": True, "length": 70_117, "head": goal[:65_536]}
    assert whole["reason_detail"] == {
        "truncated": True,
        "length": 70_008,
        "head": "d" * 65_536,
    }
    assert whole["id"] == run.id and whole["status"] == "FAILED"  # whole text stays text
    (w,) = listed[waiting.id].waiting
    assert w.to_json()["tool"] == {"truncated": True, "length": 301, "head": "t" * 256}
    assert w.to_json()["kind"] == "remote_mutation"
