"""`agentrt demo`: the seed's story on a real file, with a real SIGKILL, as a user runs it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import agentrt


def agentrt_cmd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrt", *args], capture_output=True, text=True, timeout=120
    )


def test_demo_kills_the_charge_midway_and_a_person_decides(tmp_path: Path) -> None:
    result = agentrt_cmd("demo", "--dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "worker exit status: -9 (killed by signal 9)" in out
    assert "driver.recover_sync() resumes every run this program can resume." in out
    assert "resumed: RUNNING and its owner's process is gone (pid " in out
    assert "no such process" in out
    assert "  tool       charge_card (remote_mutation)\n" in out
    assert "    amount_cents  4200\n" in out
    assert (
        '  why asked  "interrupted while executing; outcome unknown" (interrupted_side_effect)\n'
        in out
    )
    assert "whether it took effect is unknown" in out
    assert f"agentrt --db {tmp_path / 'demo.db'} approve " in out
    assert "the card processor received 2 charge requests" in out
    assert "event chain: 23 events, intact" in out

    store = agentrt.open_existing(tmp_path / "demo.db", read_only=True)
    (run,) = store.list_runs()
    assert (run.status, run.result) == ("COMPLETED", {"order": "A-1001", "paid": True})
    types = [e.type for e in store.list_events(run_id=run.id)]
    assert types[10:19] == [
        "step.tool_started",
        "lease.taken_over",
        "step.interrupted",
        "step.policy",
        "approval.requested",
        "approval.decided",
        "run.resumed",
        "step.policy",
        "step.tool_started",
    ]
    (approval,) = store.list_approvals(run.id)
    assert (approval.kind, approval.status, approval.decided_by) == (
        "interrupted_side_effect",
        "approved",
        "demo-operator",
    )
    charges = [
        json.loads(line) for line in (tmp_path / "card-processor.log").read_text().splitlines()
    ]
    assert [c["lease_epoch"] for c in charges] == [1, 3]  # the lost call, the approved one
    steps = store.list_steps(run.id)
    assert steps[1].id == approval.step_id  # the same step ran once more
    store.close()


def test_demo_can_stop_for_a_person_to_approve_with_the_printed_command(tmp_path: Path) -> None:
    """The printed commands paste into a shell as they are, even for a path with a space."""
    tmp_path = tmp_path / "my demo"
    first = agentrt_cmd("demo", "--dir", str(tmp_path), "--stop-at-approval")
    assert first.returncode == 0, first.stderr
    command = next(
        line.split(maxsplit=1)[1]
        for line in first.stdout.splitlines()
        if line.strip().startswith("agentrt --db") and " approve " in line
    )
    # The person may decide in a browser instead: the printed console command is pasteable.
    console = f"  agentrt console --db {shlex.quote(str(tmp_path / 'demo.db'))}"
    assert console in first.stdout.splitlines()
    store = agentrt.open_existing(tmp_path / "demo.db", read_only=True)
    (run,) = store.list_runs()
    assert run.status == "WAITING_FOR_APPROVAL"
    early = agentrt_cmd("demo", "--resume", str(tmp_path))
    assert early.returncode == 1 and "approve it first" in early.stdout

    approved = agentrt_cmd(*shlex.split(command))
    assert approved.returncode == 0, approved.stderr + approved.stdout
    finish = agentrt_cmd("demo", "--resume", str(tmp_path))
    assert finish.returncode == 0, finish.stderr
    assert "COMPLETED (goal_completed)" in finish.stdout
    assert f"recover: run {run.id} resumed: WAITING and its approval " in finish.stdout
    resume_hint = next(
        line.strip() for line in first.stdout.splitlines() if "demo --resume" in line
    )
    assert shlex.split(resume_hint) == ["agentrt", "demo", "--resume", str(tmp_path)]
    assert store.get_run(run.id).status == "COMPLETED"
    store.close()
