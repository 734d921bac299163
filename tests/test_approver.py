"""The Approver interface over the record: what a person is shown, and decisions bound to it.

Every test that takes a store takes `any_store` and runs on SQLite and on PostgreSQL, but
`Local.open`'s refusals of a missing file and a symlink (a file's rules; test_cli_postgres.py
opens `Local` by URL) and the import rules, which read no record.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

import agentrt
from agentrt import (
    ApprovalChangedError,
    ApprovalExpiredError,
    ApprovalHashError,
    Limits,
    NotFoundError,
    NotPendingError,
    RunFinishedError,
    SideEffect,
    SymlinkError,
)
from agentrt.approver import Approver, Decision, Local
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool
from support.approvals import paused_run, push_with_schema, restarted, tamper
from support.rows import snapshot


def test_a_pending_item_carries_the_request_field_by_field_its_reason_and_its_hash(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    clock = FakeClock()
    _driver, run, _push = paused_run(
        store, clock, tool=push_with_schema(), args={"x": 1, "branch": "main"}
    )
    (approval,) = store.pending_approvals(run.id)
    (item,) = Local(store, now=clock).pending(run.id)
    assert (item.run_id, item.approval_id, item.hash) == (run.id, approval.id, approval.hash)
    assert (item.kind, item.tool) == ("remote_mutation", "push")
    assert item.reason == "tool 'push' changes a remote system; a person must approve it"
    assert item.expired is False and item.expires_at is None
    assert item.notice == ""
    fields = dict(item.fields)
    assert fields["kind"] == '"remote_mutation" (string, 15 chars)'
    assert fields["request.args"] == "{…} (object, 2 keys)"
    assert fields["request.args.branch"] == '"main" (string, 4 chars)'
    assert fields["request.args.x"] == "1"
    assert fields["request.spec.name"] == '"push" (string, 4 chars)'
    # every node of the hashed object, in the order it is hashed
    assert [p for p, _ in item.fields][:3] == [
        "capability",
        "capability.args",
        "capability.args.branch",
    ]
    assert item.text.splitlines()[-1] == (
        f"----- end of approval {approval.id} for tool push -----"
    )
    assert f"hash  {approval.hash}" in item.text


def test_long_and_invisible_text_in_a_request_is_shown_bounded_and_escaped(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    clock = FakeClock()
    branch = "\u202eevil\x1b[31m" + "a" * 5000 + "\u200bend"
    _driver, run, _push = paused_run(
        store, clock, tool=push_with_schema(), args={"x": 1, "branch": branch}
    )
    item = Local(store, now=clock).show(run.id, store.pending_approvals(run.id)[0].id)
    shown = dict(item.fields)["request.args.branch"]
    assert shown.startswith('"\\u202eevil\\u001b[31maaa')
    assert "chars not shown" in shown and shown.endswith("(string, 5,014 chars)")
    assert len(shown) < 400
    for text in (item.text, *(v for _, v in item.fields)):
        assert "\u202e" not in text and "\x1b" not in text and "\u200b" not in text


def test_pending_of_a_run_that_waits_on_nothing_is_empty_and_of_no_run_is_not_found(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    clock = FakeClock()
    driver, run, _push = paused_run(store, clock, tool=push_with_schema())
    local = Local(store, now=clock)
    approval = store.pending_approvals(run.id)[0]
    driver.approve(run.id, approval.id, by="alice")
    assert local.pending(run.id) == []
    with pytest.raises(NotFoundError):
        local.pending("no-such-run")
    with pytest.raises(NotFoundError):
        local.show(run.id, "no-such-approval")
    with pytest.raises(NotPendingError, match="already approved"):
        local.show(run.id, approval.id)
    with pytest.raises(ValueError, match="limit"):
        local.pending(run.id, 0)


def test_a_decision_without_a_hash_is_refused_before_anything_is_read(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    clock = FakeClock()
    _driver, run, _push = paused_run(store, clock, tool=push_with_schema())
    approval = store.pending_approvals(run.id)[0]
    before = snapshot(database)
    with pytest.raises(ApprovalChangedError, match="must carry the hash"):
        Decision(run.id, approval.id, "", "alice")
    with pytest.raises(ApprovalChangedError):
        Decision(run.id, approval.id, None, "alice")  # type: ignore[arg-type]
    assert snapshot(database) == before


@pytest.mark.parametrize(
    ("by", "note", "problem"),
    [
        ("", "", "by must not be empty"),
        ("alice\nbob", "", "one line of visible characters"),
        ("\u202ealice", "", "one line of visible characters"),
        ("a" * 201, "", "at most 200"),
        ("alice", "n" * 4001, "note must be at most 4000"),
    ],
)
def test_a_decision_with_an_unusable_label_is_refused(by: str, note: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Decision("r", "a", "h" * 64, by, note)


def test_approve_binds_the_shown_hash_and_resume_executes_exactly_that_request(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    clock = FakeClock()
    driver, run, push = paused_run(store, clock, tool=push_with_schema(), args={"x": 7})
    local = Local(store, now=clock)
    assert isinstance(local, Approver)
    (item,) = local.pending(run.id)
    decided = local.approve(Decision(run.id, item.approval_id, item.hash, "alice", "ok"))
    assert (decided.status, decided.decided_by, decided.note) == ("approved", "alice", "ok")
    assert push.calls == []  # approving executes nothing
    assert driver.resume_sync(run.id).status == "COMPLETED"
    assert [c.args for c in push.calls] == [{"x": 7}]
    events = store.list_events(run_id=run.id, limit=1000)
    decided_events = [e for e in events if e.type == "approval.decided"]
    assert [e.payload for e in decided_events] == [
        {"approval_id": item.approval_id, "status": "approved", "by": "alice", "note": "ok"}
    ]


def test_a_stale_hash_is_refused_as_changed_and_changes_nothing(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    clock = FakeClock()
    driver, run, _push = paused_run(store, clock, tool=push_with_schema())
    local = Local(store, now=clock)
    (shown,) = local.pending(run.id)
    local.approve(Decision(run.id, shown.approval_id, shown.hash, "bob"))
    # The tool changed before the resume: the run waits again, on a new request.
    changed = RecordingTool("push", SideEffect.REMOTE_MUTATION, description="force-pushes")
    restarted(store, driver.agent, changed, clock).resume_sync(run.id)
    (current,) = local.pending(run.id)
    assert current.hash != shown.hash
    before = snapshot(database)
    with pytest.raises(ApprovalChangedError, match="changed since it was shown"):
        local.approve(Decision(run.id, current.approval_id, shown.hash, "alice"))
    assert snapshot(database) == before


def test_reject_cancels_the_run_and_the_tool_is_never_called(any_store: agentrt.Store) -> None:
    store = any_store
    clock = FakeClock()
    driver, run, push = paused_run(store, clock, tool=push_with_schema())
    local = Local(store, now=clock)
    (item,) = local.pending(run.id)
    decided = local.reject(Decision(run.id, item.approval_id, item.hash, "carol", "no"))
    assert decided.status == "rejected"
    got = store.get_run(run.id)
    assert (got.status, got.reason) == ("CANCELLED", "approval_rejected")
    with pytest.raises(agentrt.RunStateError, match="nothing to resume"):
        driver.resume_sync(run.id)
    assert push.calls == []


def test_cancel_ends_a_live_run_and_a_finished_run_is_refused_as_finished(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    clock = FakeClock()
    _driver, run, push = paused_run(store, clock, tool=push_with_schema())
    local = Local(store, now=clock)
    cancelled = local.cancel(run.id, "dave", "not today")
    assert (cancelled.status, cancelled.reason) == ("CANCELLED", "operator_cancelled")
    with pytest.raises(RunFinishedError, match="only a live run is cancelled"):
        local.cancel(run.id, "dave")
    with pytest.raises(ValueError, match="by must not be empty"):
        local.cancel(run.id, " ")
    assert push.calls == []


def test_an_approval_past_its_ttl_shows_as_expired_and_its_decision_is_refused(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    clock = FakeClock()
    _driver, run, _push = paused_run(
        store, clock, tool=push_with_schema(), limits=Limits(approval_ttl=timedelta(minutes=10))
    )
    local = Local(store, now=clock)
    (item,) = local.pending(run.id)
    assert item.expired is False and item.expires_at is not None
    clock.advance(timedelta(minutes=11))
    (item,) = local.pending(run.id)
    assert item.expired is True
    before = snapshot(database)
    with pytest.raises(ApprovalExpiredError):
        local.approve(Decision(run.id, item.approval_id, item.hash, "late"))
    assert snapshot(database) == before


def test_an_approval_altered_in_the_file_is_never_shown_or_decided(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    clock = FakeClock()
    _driver, run, push = paused_run(store, clock, tool=push_with_schema())
    (item,) = Local(store, now=clock).pending(run.id)
    tamper(database, item.approval_id)
    local = Local(store, now=clock)
    with pytest.raises(ApprovalHashError):
        local.pending(run.id)
    with pytest.raises(ApprovalHashError):
        local.show(run.id, item.approval_id)
    before = snapshot(database)
    with pytest.raises(ApprovalHashError):
        local.approve(Decision(run.id, item.approval_id, item.hash, "alice"))
    assert snapshot(database) == before
    assert push.calls == []


def test_local_open_decides_on_an_existing_file_and_never_creates_one(
    store: agentrt.Store, db_path: Path, tmp_path: Path
) -> None:
    clock = FakeClock()
    driver, run, push = paused_run(store, clock, tool=push_with_schema())
    with Local.open(db_path, now=clock) as local:
        (item,) = local.pending(run.id)
        local.approve(Decision(run.id, item.approval_id, item.hash, "erin"))
    assert driver.resume_sync(run.id).status == "COMPLETED"
    assert len(push.calls) == 1
    with pytest.raises(agentrt.StoreError):
        Local.open(tmp_path / "absent.db")
    assert not (tmp_path / "absent.db").exists()
    link = tmp_path / "link.db"
    link.symlink_to(db_path)
    with pytest.raises(SymlinkError):
        Local.open(link)


def test_an_interrupted_side_effect_carries_the_plain_notice(any_store: agentrt.Store) -> None:
    store = any_store
    from agentrt._policy import interrupted_side_effect_decision

    clock = FakeClock()

    class Interrupted:
        def evaluate(
            self, request: agentrt.ToolRequest, view: agentrt.RunView
        ) -> agentrt.PolicyDecision:
            return interrupted_side_effect_decision(request.spec, request.args)

    push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([agentrt.Decision.tool_call("push", {"x": 1})]),
        policy=Interrupted(),
        tools=[push],
        now=clock,
        new_id=Ids(),
    )
    run = driver.start_sync("push")
    (item,) = Local(store, now=clock).pending(run.id)
    assert item.kind == "interrupted_side_effect"
    assert "whether it took effect is unknown" in item.notice
    assert item.notice in item.text


def test_the_approver_decision_is_not_the_agents_decision() -> None:
    import agentrt.approver

    assert agentrt.Decision is not agentrt.approver.Decision
    assert agentrt.approver.Decision.__module__ == "agentrt.approver"
    assert not hasattr(agentrt, "Approver")


def test_import_agentrt_approver_loads_no_starlette() -> None:
    code = (
        "import sys, agentrt.approver; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn') "
        "or m == 'agentrt.approver._webhook'))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_the_core_and_the_approver_work_without_starlette_and_the_webhook_says_what_to_install(
    tmp_path: Path,
) -> None:
    code = (
        "import sys; sys.modules['starlette'] = None; "  # as if it were not installed
        "import agentrt, agentrt.approver; "
        "store = agentrt.open_store(sys.argv[1])\n"
        "try:\n"
        "    agentrt.approver.Local(store).pending('no-run')\n"
        "except agentrt.NotFoundError as exc:\n"
        "    print(exc)\n"
        "agentrt.approver.WebhookClient('http://127.0.0.1:9', 's' * 32).close()\n"
        "try:\n"
        "    agentrt.approver.webhook_app(agentrt.approver.Local(store), secret='s' * 32)\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "x.db")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "no run 'no-run'\nthe approval webhook needs Starlette: pip install 'agentrt[webhook]'\n"
    )
