"""The Driver's loop end to end: a full run's exact record, and every way a step ends."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import agentrt
from agentrt import Decision
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids
from support.tools import make_tools


def policy_input(
    steps: int, approvals: int, hashes: tuple[str, str, str, str], **run: Any
) -> dict[str, Any]:
    """The `input` of a `step.policy` (decision 0072): the run's columns as the policy saw
    them, how many steps and approvals its view held, and the hash of each part."""
    columns: dict[str, Any] = {
        "active_ms": 0,
        "cached_input_tokens": 0,
        "created_at": "2026-11-30T09:00:00.001000Z",
        "estimated_cost_micros": 0,
        "finished_at": "",
        "input_tokens": 0,
        "model_calls": 0,
        "origin": "driver",
        "output_tokens": 0,
        "reason": "",
        "reason_detail": "",
        "result_json": "",
        "started_at": "2026-11-30T09:00:00.001000Z",
        "status": "RUNNING",
        "step_count": 1,
    }
    request, run_hash, steps_hash, approvals_hash = hashes
    return {
        "v": 1,
        "run": {**columns, **run},
        "steps": steps,
        "approvals": approvals,
        "hashes": {
            "request": request,
            "run": run_hash,
            "steps": steps_hash,
            "approvals": approvals_hash,
        },
    }


EMPTY = "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"  # of []

FULL_RUN_EVENTS: list[tuple[str, str, str, dict[str, Any]]] = [
    (
        "run.created",
        "",
        "09:00:00.001",
        {
            "goal": "tidy the repo",
            "limits": {
                "approval_ttl": None,
                "grant_ttl": None,
                "loop_threshold": 3,
                "max_active_time": None,
                "max_consecutive_tool_failures": 3,
                "max_elapsed_time": None,
                "max_estimated_cost_micros": None,
                "max_model_calls": None,
                "max_output_tokens_per_call": None,
                "max_steps": 50,
                "max_total_tokens": None,
            },
            "tools": [
                "814cfe0aa55b2ef2e4ac34ec51aa9691b91a25e1538c6cf7ddfe7c6004edc093",
                "61fc7845f8bd066f7af5dadc3fdd0fd46d94e544a9f038ac1bafb6a32a8d23ad",
                "19838ed0c078edabeff111bb4637c1a8b2f5f97347c9ccd62f1187cacaa68b6f",
            ],
        },
    ),
    ("run.started", "", "09:00:00.001", {}),
    ("step.started", "02", "09:00:00.002", {"index": 0}),
    ("step.decided", "02", "09:00:00.003", {"args": {"x": 1}, "kind": "tool_call", "tool": "read"}),
    (
        "step.policy",
        "02",
        "09:00:00.004",
        {
            "decision": {"outcome": "allow"},
            "input": policy_input(
                0,
                0,
                (
                    "35c611ee98f497871046c966780c4f50c9a96acc89cff871d17f25bbfb07cb9d",
                    "5d85800f2850e8f2f579242625f71e891c912d284594c470edf2a0208cc4166c",
                    EMPTY,
                    EMPTY,
                ),
            ),
            "policy_id": "agentrt.default_policy/1",
            "spec_hash": "61fc7845f8bd066f7af5dadc3fdd0fd46d94e544a9f038ac1bafb6a32a8d23ad",
            "view": {
                "active_ms": 0,
                "cached_input_tokens": 0,
                "consecutive_failures": 0,
                "estimated_cost_micros": 0,
                "input_tokens": 0,
                "model_calls": 0,
                "output_tokens": 0,
                "step_count": 1,
            },
        },
    ),
    ("step.tool_started", "02", "09:00:00.004", {"args": {"x": 1}, "tool": "read"}),
    (
        "step.tool_finished",
        "02",
        "09:00:00.005",
        {
            "content_hash": "a0f4abfa168e667fb3529749ce2473a497224ac9ad07d283147896413e6d87c2",
            "duration_ms": 1,
            "summary": "read ok",
            "tool": "read",
        },
    ),
    ("step.started", "03", "09:00:00.006", {"index": 1}),
    (
        "step.decided",
        "03",
        "09:00:00.007",
        {"args": {"x": "seven"}, "kind": "tool_call", "tool": "push"},
    ),
    (
        "step.failed",
        "03",
        "09:00:00.008",
        {
            "content": {
                "error": "args do not match the input schema of 'push': $.x: 'seven' is not of type 'integer'"
            },
            "content_hash": "d26f426fcc1d310975a47f464727c4f74c1eaeadc4cf87ad9b57115c54b396d5",
            "kind": "invalid_decision",
            "summary": "args do not match the input schema of 'push': $.x: 'seven' is not of type 'integer'",
        },
    ),
    ("step.started", "04", "09:00:00.009", {"index": 2}),
    ("step.decided", "04", "09:00:00.010", {"args": {"x": 2}, "kind": "tool_call", "tool": "rm"}),
    (
        "step.policy",
        "04",
        "09:00:00.011",
        {
            "decision": {
                "outcome": "deny",
                "reason": "destructive tools are denied by the default policy",
            },
            "input": policy_input(
                2,
                0,
                (
                    "7dce9711d2e7f856409420c945ca85c780250da25ed3a710a72f06b7c508d6db",
                    "e7398ca7ce396f2e1a75f19c8de318bc339caa38b83ed07d9f91e2601860c268",
                    "a6fc653bd0ebe375265e643ab904cde7c8d0a422532ca88bc09c2c809eb446c1",
                    EMPTY,
                ),
                active_ms=4,
                step_count=3,
            ),
            "policy_id": "agentrt.default_policy/1",
            "spec_hash": "19838ed0c078edabeff111bb4637c1a8b2f5f97347c9ccd62f1187cacaa68b6f",
            "view": {
                "active_ms": 4,
                "cached_input_tokens": 0,
                "consecutive_failures": 1,
                "estimated_cost_micros": 0,
                "input_tokens": 0,
                "model_calls": 0,
                "output_tokens": 0,
                "step_count": 3,
            },
        },
    ),
    (
        "step.failed",
        "04",
        "09:00:00.011",
        {
            "content": {
                "reason": "destructive tools are denied by the default policy",
                "tool": "rm",
            },
            "content_hash": "7573eb3943ed32794a55e58c2d2260ad0928bf660533a0c7dda4e1900b13128a",
            "kind": "policy_denied",
            "summary": "destructive tools are denied by the default policy",
        },
    ),
    ("step.started", "05", "09:00:00.012", {"index": 3}),
    ("step.decided", "05", "09:00:00.013", {"args": {"x": 3}, "kind": "tool_call", "tool": "push"}),
    (
        "step.policy",
        "05",
        "09:00:00.014",
        {
            "decision": {
                "capability": {"args": {"x": 3}, "tool": "push"},
                "kind": "remote_mutation",
                "outcome": "require_approval",
                "presentation": {"args": {"x": 3}, "tool": "push"},
                "reason": "tool 'push' changes a remote system; a person must approve it",
            },
            "input": policy_input(
                3,
                0,
                (
                    "fd8d6206335e19694ae54653ec59ef2b0e983c34cf0057def7c82ca644730571",
                    "50789e66cce3f35fa4539ab34e0c6b446aa27933b0293cf24615efe3cad907d9",
                    "6198b7a8b1dc016f476d32aa572fa4e0572a8deeb186deac67b913740fdacdb0",
                    EMPTY,
                ),
                active_ms=4,
                step_count=4,
            ),
            "policy_id": "agentrt.default_policy/1",
            "spec_hash": "814cfe0aa55b2ef2e4ac34ec51aa9691b91a25e1538c6cf7ddfe7c6004edc093",
            "view": {
                "active_ms": 4,
                "cached_input_tokens": 0,
                "consecutive_failures": 2,
                "estimated_cost_micros": 0,
                "input_tokens": 0,
                "model_calls": 0,
                "output_tokens": 0,
                "step_count": 4,
            },
        },
    ),
    (
        "approval.requested",
        "05",
        "09:00:00.014",
        {
            "approval_id": "a0000000000000000000000000000006",
            "capability": {"args": {"x": 3}, "tool": "push"},
            "hash": "1c7ecbd561772a7d4e6493bab5f3016b04db46f18ff2148b44a0697841aee29f",
            "kind": "remote_mutation",
            "presentation": {"args": {"x": 3}, "tool": "push"},
            "reason": "tool 'push' changes a remote system; a person must approve it",
        },
    ),
    (
        "approval.decided",
        "05",
        "09:00:00.015",
        {
            "approval_id": "a0000000000000000000000000000006",
            "by": "alice",
            "note": "ok",
            "status": "approved",
        },
    ),
    ("run.resumed", "", "09:00:00.016", {"approval_id": "a0000000000000000000000000000006"}),
    (
        "step.policy",
        "05",
        "09:00:00.016",
        {
            "decision": {
                "capability": {"args": {"x": 3}, "tool": "push"},
                "kind": "remote_mutation",
                "outcome": "require_approval",
                "presentation": {"args": {"x": 3}, "tool": "push"},
                "reason": "tool 'push' changes a remote system; a person must approve it",
            },
            "input": policy_input(
                3,
                1,
                (
                    "fd8d6206335e19694ae54653ec59ef2b0e983c34cf0057def7c82ca644730571",
                    "06d3f1334f996040799790cf58620e53a52ef32c00e92f609585af4dcf758323",
                    "6198b7a8b1dc016f476d32aa572fa4e0572a8deeb186deac67b913740fdacdb0",
                    "60bab42828bcafe7c5b38c33091d5d7670d12b2f517af0784751140516cacdc9",
                ),
                active_ms=13,
                status="WAITING_FOR_APPROVAL",
                step_count=4,
            ),
            "policy_id": "agentrt.default_policy/1",
            "spec_hash": "814cfe0aa55b2ef2e4ac34ec51aa9691b91a25e1538c6cf7ddfe7c6004edc093",
            "view": {
                "active_ms": 13,
                "cached_input_tokens": 0,
                "consecutive_failures": 2,
                "estimated_cost_micros": 0,
                "input_tokens": 0,
                "model_calls": 0,
                "output_tokens": 0,
                "step_count": 4,
            },
        },
    ),
    (
        "step.tool_started",
        "05",
        "09:00:00.016",
        {"approval_id": "a0000000000000000000000000000006", "args": {"x": 3}, "tool": "push"},
    ),
    (
        "step.tool_finished",
        "05",
        "09:00:00.017",
        {
            "content_hash": "5fbb32052ce94ec2852de99e0c08cffbe16b02ee4e7a23e8962a57301c20bd21",
            "duration_ms": 1,
            "summary": "push ok",
            "tool": "push",
        },
    ),
    ("step.started", "07", "09:00:00.018", {"index": 4}),
    ("step.decided", "07", "09:00:00.019", {"kind": "complete", "result": {"done": True}}),
    (
        "run.finished",
        "",
        "09:00:00.020",
        {"detail": "", "reason": "goal_completed", "status": "COMPLETED", "steps": 5},
    ),
]


def dump_events(store: agentrt.Store, run_id: str) -> list[tuple[str, str, str, Any]]:
    return [
        (e.type, e.step_id[-2:], e.at.isoformat()[11:23] if e.at else "", e.payload)
        for e in store.list_events(run_id=run_id, limit=10_000)
    ]


def test_full_run_event_sequence_and_payloads_are_pinned(any_store: agentrt.Store) -> None:
    read, push, rm = make_tools()
    agent = ScriptedAgent(
        [
            Decision.tool_call("read", {"x": 1}),
            Decision.tool_call("push", {"x": "seven"}),
            Decision.tool_call("rm", {"x": 2}),
            Decision.tool_call("push", {"x": 3}),
            Decision.complete({"done": True}),
        ]
    )
    driver = agentrt.Driver(
        store=any_store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[read, push, rm],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("tidy the repo")
    assert run.status == "WAITING_FOR_APPROVAL"
    (pending,) = any_store.pending_approvals(run.id)
    driver.approve(run.id, pending.id, by="alice", note="ok")
    run = driver.resume_sync(run.id)
    assert run.status == "COMPLETED" and run.reason == "goal_completed"
    assert run.result == {"done": True}
    assert dump_events(any_store, run.id) == FULL_RUN_EVENTS
    steps = any_store.list_steps(run.id)
    assert [(s.index, s.status) for s in steps] == [
        (0, "done"),
        (1, "failed"),
        (2, "failed"),
        (3, "done"),
        (4, "done"),
    ]
    assert [s.observation.kind if s.observation else None for s in steps] == [
        "tool_result",
        "invalid_decision",
        "policy_denied",
        "tool_result",
        None,
    ]
    assert [len(t.calls) for t in (read, push, rm)] == [1, 1, 0]
    assert push.calls[0].lease_epoch == 2  # a new owner took the run when it resumed
    assert read.calls[0].lease_epoch == 1
    assert run.active_time == timedelta(milliseconds=17)  # 19 ms elapsed minus 2 ms waiting
    assert any_store.lease(run.id).owner == ""
    assert any_store.verify_events().intact
