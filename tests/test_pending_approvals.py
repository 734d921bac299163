"""Approvals across runs: `store.pending_approvals()` with no run id, and `agentrt approvals`."""

from __future__ import annotations

import json
from pathlib import Path
from shlex import quote
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect
from agentrt._store.sqlite import _store as store_mod
from agentrt.cli import main
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool


def waiting(
    store: agentrt.Store, prefix: str, goal: str = "push it", tool: str = "push"
) -> agentrt.Approval:
    """A run that asked to push and waits on one approval; ids start with `prefix`."""
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call(tool, {"x": 1}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[RecordingTool(tool, SideEffect.REMOTE_MUTATION)],
        now=FakeClock(),
        new_id=Ids(prefix),
    )
    run = driver.start_sync(goal)
    (approval,) = store.pending_approvals(run.id)
    return approval


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_pending_approvals_without_a_run_id_lists_every_runs_newest_first(
    any_store: agentrt.Store,
) -> None:
    first, second, third = (waiting(any_store, p) for p in "123")
    agentrt.approve(any_store, second.run_id, second.id, by="ops")  # decided: no longer pending
    done = agentrt.Driver(
        store=any_store,
        agent=ScriptedAgent([Decision.complete()]),
        policy=agentrt.default_policy(),
    ).start_sync("finished")
    assert done.status == "COMPLETED"
    assert any_store.pending_approvals() == [third, first]
    assert any_store.pending_approvals(first.run_id) == [first]  # one run's, as before


def test_pending_approvals_across_runs_stop_at_the_limit_newest_first(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = [waiting(any_store, p) for p in "1234"]
    assert [a.id for a in any_store.pending_approvals(limit=2)] == [made[3].id, made[2].id]
    assert store_mod.PENDING_APPROVALS_DEFAULT == 100
    monkeypatch.setattr(store_mod, "PENDING_APPROVALS_DEFAULT", 3)
    assert [a.id for a in any_store.pending_approvals()] == [a.id for a in made[:0:-1]]


@pytest.mark.parametrize("limit", [0, -1, store_mod.PENDING_APPROVALS_MAX + 1, True, 2.0])
def test_pending_approvals_refuse_a_limit_out_of_bounds(
    any_store: agentrt.Store, limit: Any
) -> None:
    with pytest.raises(ValueError, match="limit must be from 1 to 1000"):
        any_store.pending_approvals(limit=limit)


def test_approvals_command_lists_the_pending_approvals_of_every_run(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with agentrt.open_store(database) as store:
        first = waiting(store, "1", goal="push the docs")
        second = waiting(store, "2", goal="push the site")
    code, out, err = cli(capsys, "--db", database, "approvals")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["RUN", "APPROVAL", "KIND", "TOOL", "CREATED", "EXPIRES", "GOAL"]
    assert [line.split()[:4] for line in lines[1:3]] == [
        [second.run_id, second.id, "remote_mutation", "push"],
        [first.run_id, first.id, "remote_mutation", "push"],
    ]
    assert lines[1].split()[5:] == ["never", "push", "the", "site"]
    assert lines[3] == "2 pending approvals, newest first"
    assert lines[4] == (
        "decide one (the request is shown first): "
        f"agentrt --db {quote(database)} approve RUN --approval ID   or   "
        f"agentrt --db {quote(database)} reject RUN --approval ID"
    )


def test_approvals_command_in_json_gives_each_approval_with_its_run_and_goal(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with agentrt.open_store(database) as store:
        approval = waiting(store, "1", goal="push the docs")
    code, out, err = cli(capsys, "--db", database, "--json", "approvals")
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "limit": 50,
        "more": False,
        "approvals": [
            {
                "run_id": approval.run_id,
                "id": approval.id,
                "kind": "remote_mutation",
                "tool": "push",
                "hash": approval.hash,
                "created_at": agentrt._clock.format_time(approval.created_at),
                "expires_at": "",
                "goal": "push the docs",
            }
        ],
    }


def test_approvals_command_escapes_what_a_model_wrote(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = "push \x1b[2Jnow\u202e"
    with agentrt.open_store(database) as store:
        waiting(store, "1", goal=hostile)
    code, out, _ = cli(capsys, "--db", database, "approvals")
    assert code == 0
    assert "\x1b" not in out and "\u202e" not in out
    assert out.splitlines()[1].endswith("push \\x1b[2Jnow\\u202e")
    code, out, _ = cli(capsys, "--db", database, "--json", "approvals")
    assert "\x1b" not in out and json.loads(out)["approvals"][0]["goal"] == hostile


def test_approvals_command_says_when_none_is_pending_and_when_more_wait(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    agentrt.open_store(database).close()
    assert cli(capsys, "--db", database, "approvals") == (0, "no approval is pending\n", "")
    with agentrt.open_store(database) as store:
        waiting(store, "1")
        newest = waiting(store, "2")
    code, out, _ = cli(capsys, "--db", database, "approvals", "--limit", "1")
    lines = out.splitlines()
    assert code == 0 and lines[1].split()[0] == newest.run_id and len(lines) == 4
    assert lines[2] == (
        f"1 pending approval, newest first; more are waiting: "
        f"agentrt --db {quote(database)} approvals --limit 1000"
    )
    code, out, _ = cli(capsys, "--db", database, "--json", "approvals", "--limit", "1")
    assert json.loads(out)["more"] is True
    code, _, err = cli(capsys, "--db", database, "approvals", "--limit", "1001")
    assert code == 2 and "must be between 1 and 1000" in err


def test_approvals_command_opens_the_database_read_only_and_changes_nothing(
    db_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with agentrt.open_store(db_path) as store:
        waiting(store, "1")
    opened: list[bool] = []
    original = agentrt.open_existing

    def spy(path: Any, read_only: bool = False) -> agentrt.Store:
        opened.append(read_only)
        return original(path, read_only=read_only)

    monkeypatch.setattr("agentrt.cli._opening.open_existing", spy)
    before = db_path.read_bytes()  # on SQLite only: the file, byte for byte
    assert cli(capsys, "--db", str(db_path), "approvals")[0] == 0
    assert opened == [True]
    assert db_path.read_bytes() == before
