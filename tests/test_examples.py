"""The examples run as a new user would run them, in their own processes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import agentrt
from support.examples import run_example

ROOT = Path(__file__).resolve().parent.parent


def test_scripted_example_pauses_then_a_second_process_approves_and_resumes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "example.db"
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "scripted.py"), "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "stopped: WAITING_FOR_APPROVAL" in out
    # Each step's outcome as `agentrt show` writes it: a tool's result shows what it returned.
    shown = '[process 1]   step 0 list_branches  tool_result: {"branches":["main","feature/login"],'
    assert shown + '"pushed":[]}' in out, out
    assert "$.branch: 42 is not of type 'string'" in out
    assert "policy_denied: destructive tools are denied by the default policy" in out
    assert "[process 2] resumed: COMPLETED goal_completed" in out
    assert "event chain: 26 events, intact" in out
    store = agentrt.open_existing(db, read_only=True)
    (run,) = store.list_runs()
    assert (run.status, run.result) == ("COMPLETED", {"pushed": "feature/login"})
    types = [e.type for e in store.list_events(run_id=run.id)]
    assert "lease.taken_over" not in types  # the second process resumed a waiting run
    approval = store.list_approvals(run.id)[0]
    assert (approval.status, approval.decided_by) == ("approved", "example-operator")
    store.close()


def test_own_loop_example_reads_is_denied_waits_then_attaches_after_a_second_process_approves(
    tmp_path: Path,
) -> None:
    db = tmp_path / "own_loop.db"
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "own_loop.py"), "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "step 0: tool_call list_branches -> allowed" in out
    assert "step 1: tool_call delete_branch -> denied" in out
    assert "model hears: policy_denied: destructive tools are denied by the default policy" in out
    assert "step 2: tool_call push_branch -> pending" in out
    assert "attach: allowed" in out
    store = agentrt.open_existing(db, read_only=True)
    (run,) = store.list_runs()
    store.close()
    # What the second process ran, as a person would type it (not Python's `-m`).
    assert f"[process 2] agentrt approve {run.id[:8]}... --yes: approved\n" in out
    assert 'model hears: tool_result: {"pushed": "feature/login"}' in out
    assert "finished: COMPLETED goal_completed" in out
    store = agentrt.open_existing(db, read_only=True)
    (run,) = store.list_runs()
    assert (run.status, run.result) == ("COMPLETED", {"pushed": "feature/login"})
    steps = store.list_steps(run.id)
    assert [(s.index, s.status) for s in steps] == [
        (0, "done"),
        (1, "failed"),
        (2, "done"),
        (3, "done"),
    ]
    (approval,) = store.list_approvals(run.id)
    assert (approval.status, approval.decided_by) == ("approved", "example-operator")
    assert store.verify_events().intact
    store.close()


def _examples_taking_db() -> list[Path]:
    """Every example whose command line has a --db option (found, so a new one is covered)."""
    return sorted(
        p
        for p in (ROOT / "examples").rglob("*.py")
        if re.search(r"add_argument\(\s*\"--db\"", p.read_text(encoding="utf-8"))
    )


def test_every_example_that_takes_db_is_found() -> None:
    names = {p.relative_to(ROOT / "examples").as_posix() for p in _examples_taking_db()}
    assert {"scripted.py", "own_loop.py", "webhook_chat.py", "live.py"} <= names
    assert {"adapters/pydantic_ai_example.py", "mcp/run_agent.py"} <= names


@pytest.mark.slow
@pytest.mark.parametrize(
    "example", _examples_taking_db(), ids=lambda p: p.relative_to(ROOT / "examples").as_posix()
)
def test_an_example_given_db_in_a_missing_directory_says_so_in_one_sentence_and_exits_2(
    tmp_path: Path, example: Path
) -> None:
    db = tmp_path / "no such folder" / "runs.db"
    # Forked from a prepared process (tests/support/examples.py): the answer is judged,
    # not the interpreter's start.
    result = run_example(example, "--db", str(db), cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"{example.name}: --db {db}: {db.parent} is not an existing directory\n"
    )
    assert not db.parent.exists()  # nothing was created on the way
