"""The step machine's commit plan (`agentrt._commit_plan`): every transaction in one place.

Every write of the machine names a commit of the plan; a transaction that appends an
event its commit does not list is refused, writing nothing (the whole suite runs with
the check on: tests/conftest.py); the plan is the table in docs/architecture.md; and
an allowed tool step makes the commits the plan says, in order.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect, _session
from agentrt import _commit_plan as plan
from agentrt._commit_plan import CommitPlanError
from agentrt._store import open_store
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "agentrt"
WRITES = {"write", "write_outcome", "write_through", "defer", "commit_deferred"}
"""The session's writes, and its writes kept for the next commit (`defer`)."""


def _write_calls() -> list[tuple[str, int, ast.expr]]:
    """Every call of a session write in the package: (file, line, the commit it names)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name not in WRITES or not node.args:
                continue
            if isinstance(func, ast.Attribute) and not (
                isinstance(func.value, ast.Name) and func.value.id in {"session", "self", "rs"}
            ):
                continue  # a file's or a stream's write, not the session's
            commit = node.args[1] if name == "write_through" else node.args[0]
            found.append((path.relative_to(PACKAGE).as_posix(), node.lineno, commit))
    return found


def test_every_write_of_the_step_machine_names_a_commit_of_the_plan() -> None:
    calls = _write_calls()
    assert len(calls) >= len(plan.PLAN)
    unnamed = [
        f"{where}:{line}"
        for where, line, commit in calls
        if not (
            (
                isinstance(commit, ast.Attribute)
                and isinstance(commit.value, ast.Name)
                and commit.value.id in {"plan", "origin"}
            )
            # the session's own plumbing passes on the commit it was given, with the
            # deferred writes joining it
            or (where == "_session.py" and isinstance(commit, ast.Name) and commit.id == "commit")
            or (
                where == "_session.py"
                and isinstance(commit, ast.Call)
                and isinstance(commit.func, ast.Attribute)
                and commit.func.attr == "joining"
            )
        )
    ]
    assert unnamed == []


def test_every_commit_of_the_plan_is_made_somewhere_and_named_once() -> None:
    named = {
        commit.attr
        for _, _, commit in _write_calls()
        if isinstance(commit, ast.Attribute) and isinstance(commit.value, ast.Name)
    }
    by_origin = {"STEP_ENDED", "PAUSED", "RESUME_FAILED", "WAIT_ENDED", "RE_PAUSED"}
    constants = {n for n in dir(plan) if isinstance(getattr(plan, n), plan.Commit)}
    assert constants - named - by_origin == set()
    assert len({c.name for c in plan.PLAN}) == len(plan.PLAN) == len(constants)


def test_the_architecture_document_shows_the_plan_as_it_is() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert plan.table() in text


def test_a_transaction_that_appends_an_unplanned_event_is_refused_writing_nothing(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "plan.db")
    config: Any = type("Config", (), {"store": store, "observer": None})()
    narrow = plan.Commit("narrow", "a test", ("create_run",), frozenset({"run.created"}))

    def create(tx: Any) -> None:
        tx.create_run(
            "r1",
            "goal",
            agentrt.Limits(),
            owner="me",
            lease_expires_at=agentrt.lowlevel.wall_clock(),
            holder="{}",
            specs=[],
            now=agentrt.lowlevel.wall_clock(),
        )

    with pytest.raises(CommitPlanError, match=r"appended run\.started, which the commit plan"):
        agentrt.lowlevel.run_sync(_session.write_through(config, narrow, create))
    assert store.count_runs() == 0
    assert store.list_events() == []
    store.close()


def test_the_check_is_off_without_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(plan.CHECK_VARIABLE)
    assert plan.checking() is False
    monkeypatch.setenv(plan.CHECK_VARIABLE, "1")
    assert plan.checking() is True


def test_an_allowed_tool_step_makes_the_commits_the_plan_says_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []
    real = _session.write_through

    async def recording(config: Any, commit: plan.Commit, fn: Any, in_tx: Any = None) -> Any:
        made.append(commit.name)
        return await real(config, commit, fn, in_tx)

    monkeypatch.setattr(_session, "write_through", recording)
    monkeypatch.setattr(agentrt._gate, "write_through", recording)
    driver = agentrt.Driver(
        store=open_store(tmp_path / "step.db"),
        agent=ScriptedAgent([Decision.tool_call("lookup", {"x": 1}), Decision.complete({})]),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("lookup", SideEffect.READ_ONLY)],
        now=FakeClock(),
        new_id=Ids("a"),
    )
    try:
        assert driver.start_sync("look").status == agentrt.RunStatus.COMPLETED
    finally:
        driver.store.close()
    assert made == [
        "run created",
        # the allowed tool step: two commits, the claim and the decision joining the first
        "step started + decided + tool started",
        "tool finished",
        # the completion: its step and the run's end, one commit
        "step started + decided + step ended",
    ]
