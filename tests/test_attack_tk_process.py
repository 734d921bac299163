"""Attacks on process mode: real child processes, real SIGKILLs, judged by how they end."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest

import agentrt
from agentrt import Decision, SideEffect, ToolCall, ToolResult, ToolSpec
from agentrt.scripted import ScriptedAgent
from agentrt.testkit import Scenario, Verdict, always, run_sync

PIDS = "AGENTRT_ATTACK_TK_HELPER_PIDS"


def _allow_all() -> agentrt.SideEffectPolicy:
    allow = agentrt.PolicyDecision.allow()
    return agentrt.SideEffectPolicy(
        {SideEffect.READ_ONLY: allow, SideEffect.REMOTE_MUTATION: allow}, policy_id="allow-all"
    )


class StartHelper:
    """Starts a helper process that outlives the call (a local daemon, an ssh agent, a
    preview server), as plenty of real tools do; its stdio is inherited, as by default."""

    spec = ToolSpec(
        name="start_helper",
        description="start a background helper",
        input_schema={"type": "object", "additionalProperties": False},
        side_effect=SideEffect.REMOTE_MUTATION,
        timeout=timedelta(seconds=10),
    )

    def call(self, call: ToolCall) -> ToolResult:
        helper = subprocess.Popen(["sleep", "30"])
        with open(os.environ[PIDS], "a") as pids:
            pids.write(f"{helper.pid}\n")
        return ToolResult({"helper": "started"}, "started")


def starts_a_helper() -> Scenario:
    return Scenario(
        tools=[StartHelper()],
        policy=_allow_all(),
        agent=ScriptedAgent([Decision.tool_call("start_helper", {}), Decision.complete()]),
        operator=always(Verdict.APPROVE),
        lease_ttl=timedelta(seconds=30),
        name="starts_a_helper",
    )


@pytest.fixture
def helper_pids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    path = tmp_path / "helpers.txt"
    path.touch()
    monkeypatch.setenv(PIDS, str(path))
    yield path
    for line in path.read_text().split():
        try:
            os.kill(int(line), signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.timeout(120)
def test_a_child_that_exited_is_not_reported_as_hung_because_a_helper_holds_its_pipes(
    tmp_path: Path, helper_pids: Path
) -> None:
    """A tool starts a background helper and the child completes the run and exits 0: today
    the kit waits for EOF on the child's captured stdout/stderr (held open by the helper),
    so it sits out the whole timeout and reports "process 1 did not finish ... (killed)".
    It should judge the child by its exit, not by its pipes."""
    began = time.monotonic()
    result = run_sync(
        f"{__name__}:starts_a_helper",
        mode="process",
        db_path=tmp_path / "h.db",
        timeout=8,
        check_invariants=False,
    )
    elapsed = time.monotonic() - began
    assert result.run.status == agentrt.RunStatus.COMPLETED
    assert [v.rule for v in result.violations] == [], result.violations
    assert result.exit_codes == (0,)
    assert elapsed < 8
