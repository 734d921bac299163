"""Attacks on the crash matrix and the pytest plugin: cases that report green without
having crashed anything, or in another mode than the one asked for."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agentrt
import support.scenarios as ts
from agentrt.testkit import InvariantError, LoopContext, Scenario, crash_matrix_sync


async def production_gate_loop(ctx: LoopContext) -> agentrt.Run:
    """The consumer's production loop, reused as is: it builds its own Gate from the store
    (as docs/own-loop.md shows), so nothing of it passes the kit's probes."""
    scenario = ts.direct_charge_approve()
    gate = agentrt.Gate(
        ctx.store,
        scenario.policy,
        tools=ctx.driver.tools,
        lease_ttl=scenario.lease_ttl,
    )
    if ctx.resuming:
        session, _ = await gate.attach(ctx.run_id)
    else:
        session = await gate.begin(ctx.goal, ctx.limits, run_id=ctx.run_id)
    while not session.done:
        step = await session.step()
        if step is None:
            break
        decision = await ctx.agent.decide(session.input())
        verdict = await step.propose(decision)
        if verdict.outcome == agentrt.VerdictOutcome.ALLOWED:
            await step.execute()
    await session.close()
    return session.run


def own_gate_scenario() -> Scenario:
    return dataclasses.replace(ts.direct_charge_approve(), loop=production_gate_loop)


def test_a_matrix_that_crashed_nowhere_is_not_reported_as_holding() -> None:
    """A consumer's loop builds its own Gate, so no crash point is ever passed: today the
    matrix has 0 cases and prints "all invariants hold" (and `assert_ok` passes) although
    not one crash was tried; a matrix with no crash point must fail, not prove anything."""
    with pytest.raises((InvariantError, agentrt.ConfigError)):
        matrix = crash_matrix_sync(own_gate_scenario, "harness")
        # The scenario did run: it charged once and completed.
        assert matrix.clean.run.status == agentrt.RunStatus.COMPLETED
        assert len(matrix.clean.calls("charge")) == 1
        matrix.assert_ok()


def _pytest(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_consumer.py").write_text(textwrap.dedent(source))
    env = dict(os.environ)
    tests_dir = str(Path(__file__).parent)
    env["PYTHONPATH"] = os.pathsep.join([tests_dir, env.get("PYTHONPATH", "")])
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "agentrt.testkit.plugin",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            *args,
            str(tmp_path / "test_consumer.py"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )


def test_the_plugin_marker_does_not_drop_a_positional_mode(tmp_path: Path) -> None:
    """The marker is registered as `crash_matrix(scenario, mode='harness', ...)`, so a
    consumer writes `crash_matrix("pkg:make", "process")`: today the positional mode is
    silently ignored and every case runs in the in-process harness, with no SIGKILL at all.
    It must either run in process mode or be refused as a usage error."""
    done = _pytest(
        tmp_path,
        """
        import pytest

        @pytest.mark.crash_matrix("support.scenarios:small", "process", inside_tx=False,
                                  recovery=False)
        def test_small_with_real_sigkills(crash_case):
            result = crash_case.run()
            assert result.mode == "process", f"ran in {result.mode} mode"
        """,
        "-q",
        "-k",
        "no-crash",
    )
    out = done.stdout + done.stderr
    refused = done.returncode != 0 and "UsageError" in out and "crash_matrix" in out
    honoured = done.returncode == 0 and "1 passed" in out
    assert refused or honoured, out


def test_a_matrix_removes_only_the_files_it_made_in_the_folder_it_was_given(
    tmp_path: Path,
) -> None:
    """A consumer points the matrix at a folder of theirs (`directory="build"`, say) that
    already holds their own files: today, when every case holds, the kit `rmtree`s the whole
    folder, the consumer's files with it. It should remove only the cases' databases (and
    journals) it wrote there; on PostgreSQL it already drops only the schemas it made."""
    from agentrt.testkit import Crash, Point

    folder = tmp_path / "build"
    folder.mkdir()
    (folder / "notes.txt").write_text("the consumer's own file")
    matrix = crash_matrix_sync(
        "support.scenarios:small",
        "harness",
        directory=folder,
        recovery=False,
        select=lambda crashes: crashes == (Crash(0, Point.AFTER_TOOL_STARTED),),
    )
    matrix.assert_ok()
    assert (folder / "notes.txt").read_text() == "the consumer's own file"
