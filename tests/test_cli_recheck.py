"""`agentrt recheck`: differences first, one escaped line each, `--json`, exit codes, `--all`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect
from agentrt.cli import main
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool

SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}},
    "additionalProperties": False,
}

POLICIES = """
import agentrt
from agentrt import PolicyDecision


def same():
    return agentrt.default_policy()


class NoSend:
    policy_id = "no-send/1"

    def evaluate(self, request, view):
        if request.spec.name == "send":
            return PolicyDecision.deny("no sending to " + request.args["to"])
        return agentrt.default_policy().evaluate(request, view)


no_send = NoSend()
not_a_policy = 42


def broken():
    raise RuntimeError("cannot build it")
"""


@pytest.fixture
def policies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    folder = tmp_path / "policy_code"
    folder.mkdir()
    (folder / "recheck_policies.py").write_text(textwrap.dedent(POLICIES))
    monkeypatch.syspath_prepend(str(folder))
    return str(folder)


def make_run(db: Path, to: str, *, prefix: str, day: int = 30) -> agentrt.Run:
    """A lookup (allowed), then a send (paused, approved, sent), then complete."""
    store = agentrt.open_store(db)
    try:
        tools = [
            RecordingTool("lookup", SideEffect.READ_ONLY),
            RecordingTool("send", SideEffect.REMOTE_MUTATION, schema=SCHEMA),
        ]
        driver = agentrt.Driver(
            store=store,
            agent=ScriptedAgent(
                [
                    Decision.tool_call("lookup", {}),
                    Decision.tool_call("send", {"to": to}),
                    Decision.complete({"ok": True}),
                ]
            ),
            policy=agentrt.default_policy(),
            tools=tools,
            now=FakeClock(start=datetime(2026, 11, day, 9, tzinfo=UTC)),
            new_id=Ids(prefix),
        )
        run = driver.start_sync("send a note")
        (pending,) = store.pending_approvals(run.id)
        driver.approve(run.id, pending.id, by="alice")
        finished: agentrt.Run = driver.resume_sync(run.id)
        return finished
    finally:
        store.close()


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_same_policy_prints_each_evaluation_same_and_exits_0(
    db_path: Path, policies: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(db_path, "bob", prefix="a")
    code, out, err = run_main(
        capsys, "--db", str(db_path), "recheck", run.id, "--policy", "recheck_policies:same"
    )
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"same  {run.id} step 0 lookup: allow",
        f"same  {run.id} step 1 send: require_approval(remote_mutation)",
        f"same  {run.id} step 1 send: require_approval(remote_mutation)",
        "3 evaluations: 3 same, 0 different, 0 not_a_policy_evaluation, 0 not_recheckable; "
        "policy agentrt.default_policy/1 (unchanged; recorded: agentrt.default_policy/1); "
        "run COMPLETED, ended",
    ]


def test_a_stricter_policy_prints_differences_first_escaped_and_exits_1(
    db_path: Path, policies: str, capsys: pytest.CaptureFixture[str]
) -> None:
    to = "eve\x1b[2J\u202e"  # model-written text that would move a terminal or flip a line
    run = make_run(db_path, to, prefix="a")
    code, out, err = run_main(
        capsys, "--db", str(db_path), "recheck", run.id, "--policy", "recheck_policies:no_send"
    )
    assert (code, err) == (1, "")
    difference = (
        f"different  {run.id} step 1 send: require_approval(remote_mutation) -> deny  "
        "[outcome, kind, approval_hash]  now: no sending to eve\\x1b[2J\\u202e"
    )
    assert out.splitlines() == [
        difference,
        difference,
        f"same  {run.id} step 0 lookup: allow",
        "3 evaluations: 1 same, 2 different, 0 not_a_policy_evaluation, 0 not_recheckable; "
        "policy no-send/1 (changed; recorded: agentrt.default_policy/1); run COMPLETED, ended",
    ]
    assert "\x1b" not in out and "\u202e" not in out


def test_json_is_the_report_as_one_document(
    db_path: Path, policies: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(db_path, "bob", prefix="a")
    code, out, _ = run_main(
        capsys,
        "--db",
        str(db_path),
        "recheck",
        run.id[:10],  # a unique prefix, as every command takes
        "--policy",
        "recheck_policies:NoSend",  # a class is made with no arguments
        "--json",
    )
    assert code == 1
    doc = json.loads(out)
    assert doc["run_id"] == run.id and doc["policy_changed"] is True
    assert doc["counts"] == {
        "same": 1,
        "different": 2,
        "not_a_policy_evaluation": 0,
        "not_recheckable": 0,
    }
    first = doc["evaluations"][1]
    assert first["verdict"] == "different" and first["now"] == {"outcome": "deny"}
    assert first["recorded"]["kind"] == "remote_mutation"
    assert first["now_reason"] == "no sending to bob" and first["spec_source"] == "record"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["recheck", "RUN"], "say which policy to ask now: --policy MODULE:ATTR"),
        (["recheck", "--policy", "recheck_policies:same"], "say which run"),
        (["recheck", "RUN", "--all", "--policy", "recheck_policies:same"], "not both"),
        (["recheck", "--all", "--policy", "recheck_policies:same"], "--all needs --since"),
        (
            ["recheck", "--all", "--since", "last tuesday", "--policy", "recheck_policies:same"],
            "is not a time",
        ),
        (["recheck", "RUN", "--policy", "recheck_policies"], "--policy is MODULE:ATTR"),
        (["recheck", "RUN", "--policy", "no_such_module_xyz:p"], "cannot import"),
        (["recheck", "RUN", "--policy", "recheck_policies:nothing"], "has no 'nothing'"),
        (["recheck", "RUN", "--policy", "recheck_policies:not_a_policy"], "is not a policy"),
        (["recheck", "RUN", "--policy", "recheck_policies:broken"], "raised RuntimeError"),
    ],
)
def test_usage_errors_exit_2(
    db_path: Path,
    policies: str,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    says: str,
) -> None:
    run = make_run(db_path, "bob", prefix="a")
    argv = ["--db", str(db_path), *[run.id if a == "RUN" else a for a in args]]
    code, out, err = run_main(capsys, *argv)
    assert code == 2 and out == ""
    assert says in err


def test_all_since_rechecks_the_runs_created_since_with_a_summary(
    db_path: Path, policies: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make_run(db_path, "old", prefix="a", day=1)  # before --since: not re-checked
    changed = make_run(db_path, "bob", prefix="b", day=20)
    common = ["--db", str(db_path), "recheck", "--all", "--since", "2026-11-10"]
    code, out, _ = run_main(capsys, *common, "--policy", "recheck_policies:no_send")
    assert code == 1
    lines = out.splitlines()
    assert [line.split("  ")[0] for line in lines[:2]] == ["different", "different"]
    assert all(changed.id in line for line in lines[:2])
    assert lines[2:] == [
        "1 run since 2026-11-10T00:00:00.000000Z: 1 would have changed "
        "(2 of 3 evaluations differ), 0 with evaluations not re-checkable"
    ]
    code, out, _ = run_main(capsys, *common, "--policy", "recheck_policies:same", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["summary"] == {
        "runs": 1,
        "runs_changed": 0,
        "runs_with_not_recheckable": 0,
        "evaluations": 3,
        "different": 0,
        "not_recheckable": 0,
    }
    assert [r["run_id"] for r in doc["runs"]] == [changed.id]


def test_the_real_command_in_its_own_process(db_path: Path, policies: str) -> None:
    run = make_run(db_path, "bob", prefix="a")
    env: dict[str, Any] = {k: v for k, v in os.environ.items() if k != "AGENTRT_DB"}
    env["PYTHONPATH"] = os.pathsep.join([policies, env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [
            *(sys.executable, "-m", "agentrt", "recheck", run.id),
            *("--policy", "recheck_policies:no_send", "--db", str(db_path)),
        ],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[0].startswith(f"different  {run.id} step 1 send")
