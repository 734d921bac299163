"""agentrt.testkit in process mode: every process a real child Python process, SIGKILLed.

Each child rebuilds its scenario from `support.scenarios` (a factory reference),
and dies of SIGKILL at its crash point: after a commit, or inside a transaction
before its COMMIT. The matrix here is the one the harness runs in
test_testkit.py, with real deaths; the number of children is bounded by the
3-step scenario (about 60). The two matrices fork their children from a
prepared process (support/testkit_children.py); every other test here starts
fresh interpreters, the command as process mode runs it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agentrt
import support.scenarios as ts
from agentrt import ApprovalStatus, RunStatus, StepStatus, TerminalReason
from agentrt._driver import run_sync as run_coro
from agentrt.lowlevel import schema_of, shown_db, with_schema
from agentrt.testkit import (
    Crash,
    Point,
    ScenarioError,
    crash_matrix_sync,
    discover,
    run_sync,
)
from agentrt.testkit.plugin import _marker_args, case_id
from support.database import on_postgres
from support.testkit_children import forked_process_mode

SIGKILLED = -9


def play(ref: str, *crashes: Crash, db: Path | str) -> agentrt.testkit.Result:
    return run_sync(ref, *crashes, mode="process", db_path=db)


@pytest.mark.slow
# Dozens of real children, each paying an interpreter's start: on shared cores this
# runs past the suite's two-minute hang guard without hanging (it judges no time).
@pytest.mark.timeout(600)
def test_full_crash_matrix_in_process_mode_holds_with_real_sigkills(database: str) -> None:
    # Every point of every step; the crashes during recovery (three children a case)
    # only in the recovery of the approved charge on step 1, which passes every recovery
    # point (the harness matrix has them all), to keep the time down.
    # Its children are forked from a prepared process (support/testkit_children.py):
    # real processes, killed by real SIGKILLs, without an interpreter's start each.
    # On SQLite (a file a case) and on PostgreSQL (a schema a case), where a child
    # killed inside a transaction leaves the server to roll back its dropped connection.
    resumed = Crash(1, Point.AFTER_RESUMED)
    with forked_process_mode():
        matrix = crash_matrix_sync(
            "support.scenarios:checkout",
            "process",
            workers=4,
            directory=database,
            select=lambda crashes: len(crashes) == 1 or crashes[0] == resumed,
        )
    matrix.assert_ok()
    first = {
        (c.crashes[0].at.value, c.crashes[0].step, c.crashes[0].inside_tx) for c in matrix.cases
    }
    assert first == {p.key for p in matrix.clean.probes}
    assert any(c.crashes[0].inside_tx for c in matrix.cases)
    for case in matrix.cases:
        assert case.result is not None
        # Every child but the last died of SIGKILL at its crash point.
        assert case.result.exit_codes == (SIGKILLED,) * len(case.crashes) + (0,), case.label
    assert matrix.clean.exit_codes == (0,)
    during_recovery = {c.crashes[-1] for c in matrix.cases if len(c.crashes) == 2}
    assert during_recovery == {
        Crash(1, point, inside_tx=tx)
        for point in (Point.AFTER_INTERRUPTED, Point.AFTER_PAUSED, Point.AFTER_RESUMED)
        for tx in (False, True)
    }


@pytest.mark.slow
# Dozens of real children, each paying an interpreter's start: on shared cores this
# runs past the suite's two-minute hang guard without hanging (it judges no time).
@pytest.mark.timeout(600)
def test_a_loop_over_a_gate_holds_its_crash_matrix_with_real_sigkills() -> None:
    # A consumer's own loop over a Gate, killed by SIGKILL after every commit point of
    # every step (the in-process matrix covers the transactions and the recoveries).
    with forked_process_mode():  # as in the matrix above
        matrix = crash_matrix_sync(
            "support.scenarios:gate_checkout", "process", workers=4, inside_tx=False, recovery=False
        )
    matrix.assert_ok()
    first = {(c.crashes[0].at, c.crashes[0].step) for c in matrix.cases}
    assert (Point.AFTER_ALLOWED, 0) in first and (Point.AFTER_ATTACH_ALLOWED, 1) in first
    for case in matrix.cases:
        assert case.result is not None
        assert case.result.exit_codes == (SIGKILLED, 0), case.label
        assert len(case.result.calls("charge")) >= 1


@pytest.mark.parametrize("keep", [False, True])
def test_a_matrix_on_a_database_of_each_kind_removes_its_cases_unless_kept(
    database: str, keep: bool
) -> None:
    # `directory` names a folder (SQLite) or a URL whose schema prefixes one schema a
    # case (PostgreSQL): what the cases leave is removed when they hold, unless kept.
    def one(crashes: tuple[Crash, ...]) -> bool:
        return crashes == (Crash(0, Point.AFTER_TOOL_STARTED, inside_tx=True),)

    with forked_process_mode():  # as in the matrices above
        matrix = crash_matrix_sync(
            "support.scenarios:small",
            "process",
            directory=database,
            recovery=False,
            select=one,
            keep_files=keep,
        )
    matrix.assert_ok()
    [case] = matrix.cases
    assert case.result is not None and case.result.exit_codes == (SIGKILLED, 0)
    assert (matrix.directory is not None) == keep
    if on_postgres(database):
        prefix = schema_of(database)
        made = [with_schema(database, f"{prefix}_{name}") for name in ("clean", "c0000")]
        assert [matrix.clean.db_path, case.result.db_path] == made
        for url, result in zip(made, (matrix.clean, case.result), strict=True):
            if keep:
                with agentrt.open_existing(url, read_only=True) as kept:
                    assert kept.get_run(result.run_id).status == RunStatus.COMPLETED
            else:
                with pytest.raises(
                    agentrt.SchemaVersionError, match=f"has no schema {schema_of(url)} "
                ):
                    agentrt.open_existing(url, read_only=True)
    else:
        folder = Path(database)
        assert [matrix.clean.db_path, case.result.db_path] == [
            folder / "clean.db",
            folder / "case-0000.db",
        ]
        assert folder.is_dir() == keep


class TestSigkill:
    def test_sigkill_inside_a_transaction_leaves_none_of_its_writes(self, database: str) -> None:
        # On SQLite and on PostgreSQL, where the child dies holding an open transaction
        # on its connection and the server rolls it back.
        result = play(
            "support.scenarios:checkout",
            Crash(0, Point.AFTER_DECIDED, inside_tx=True),
            db=database,
        )
        assert result.exit_codes == (SIGKILLED, 0)
        [fired] = result.crashes_reached
        assert fired.lost_event and not fired.lost_present
        assert fired.lost_event not in {e.hash for e in result.events}
        # The step's claim and decision were written inside the killed transaction (the
        # one that would have started its tool, decision 0088): none of it is on file, the
        # takeover found no step in flight, and the agent was asked for step 0 again.
        step0 = result.step(0)
        assert step0.status == StepStatus.DONE
        assert result.event_types(step=0) == [
            "step.started",
            "step.decided",
            "step.policy",
            "step.tool_started",
            "step.tool_finished",
        ]
        assert "step.interrupted" not in [e.type for e in result.events]
        assert [c.process for c in result.calls("lookup")] == [2]
        assert result.run.status == RunStatus.COMPLETED

    def test_sigkill_inside_the_pause_transaction_leaves_no_approval(self, database: str) -> None:
        result = play(
            "support.scenarios:checkout",
            Crash(1, Point.AFTER_PAUSED, inside_tx=True),
            db=database,
        )
        assert result.exit_codes == (SIGKILLED, 0)
        # The pause, with step 1's claim and decision, was killed before its COMMIT:
        # nothing of it is on file; the agent was asked for step 1 again, and the
        # approval is the one the second process asked for.
        [fired] = result.crashes_reached
        assert fired.lost_event and not fired.lost_present
        assert "step.interrupted" not in [e.type for e in result.events]
        [approval] = result.approvals
        assert approval.step_id == result.step(1).id
        requested = [e for e in result.events if e.type == "approval.requested"]
        assert [e.payload["approval_id"] for e in requested] == [approval.id]

    @pytest.mark.parametrize(
        ("ref", "charges", "status"),
        [
            ("support.scenarios:direct_charge_reject", [1], RunStatus.CANCELLED),
            ("support.scenarios:direct_charge_approve", [1, 2], RunStatus.COMPLETED),
        ],
    )
    def test_side_effect_lost_to_a_real_sigkill_runs_again_only_when_approved(
        self, database: str, ref: str, charges: list[int], status: str
    ) -> None:
        """The card was charged, then the process was killed before recording it."""
        result = play(ref, Crash(1, Point.AFTER_TOOL_EFFECT), db=database)
        assert result.exit_codes == (SIGKILLED, 0)
        assert [c.process for c in result.calls("charge")] == charges
        assert {c.step_index for c in result.calls("charge")} == {1}
        assert result.calls("charge")[0].returned  # it returned; only its record was lost
        assert result.run.status == status
        [approval] = result.approvals
        assert approval.kind == "interrupted_side_effect"
        expected = ApprovalStatus.APPROVED if len(charges) == 2 else ApprovalStatus.REJECTED
        assert approval.status == expected

    def test_sigkill_during_a_model_request_leaves_the_attempt_recorded(
        self, database: str
    ) -> None:
        result = play(
            "support.scenarios:with_model",
            Crash(0, Point.DURING_MODEL_REQUEST),
            db=database,
        )
        assert result.exit_codes == (SIGKILLED, 0)
        first = result.model_calls[0]
        # Sent, never answered: recorded, not counted as a reply.
        assert first.step_id == result.step(0).id and first.status != "ok"
        assert result.step(0).status == StepStatus.INTERRUPTED
        assert result.run.status == RunStatus.COMPLETED
        assert [c.tool for c in result.tool_calls] == ["lookup", "charge"]

    def test_crash_after_takeover_in_a_real_process_still_waits_for_the_operator(
        self, database: str
    ) -> None:
        result = play(
            "support.scenarios:direct_charge_approve",
            Crash(1, Point.AFTER_TOOL_STARTED),
            Crash(1, Point.AFTER_INTERRUPTED),
            db=database,
        )
        assert result.exit_codes == (SIGKILLED, SIGKILLED, 0)
        assert [a.kind for a in result.approvals] == ["interrupted_side_effect"]
        assert [c.process for c in result.calls("charge")] == [3]
        assert result.run.reason == TerminalReason.GOAL_COMPLETED

    def test_a_rebuilt_id_factory_never_reuses_a_recorded_id(self, tmp_path: Path) -> None:
        # Every child rebuilds the scenario's deterministic id factory from 1.
        result = play(
            "support.scenarios:checkout", Crash(0, Point.AFTER_TOOL_FINISHED), db=tmp_path / "i.db"
        )
        ids = [result.run.id, *(s.id for s in result.steps), *(a.id for a in result.approvals)]
        assert len(ids) == len(set(ids))
        # A rebuilt fake clock does not run backwards against what is recorded.
        times = [e.at.isoformat() for e in result.events if e.at is not None]
        assert len(times) == len(result.events) and times == sorted(times)


def test_the_harness_forgets_an_agents_memory_at_a_crash_as_a_real_death_does(
    tmp_path: Path,
) -> None:
    """An agent that remembers, in memory only, that it asked for the charge: a real
    death wipes that, and so does a simulated one (the harness rebuilds the scenario
    from its factory for every process), so both modes leave the same record."""
    seen = {}
    for mode in ("harness", "process"):
        r = run_sync(
            "support.scenarios:remembering",
            # Inside the commit that would start the charge: nothing of step 0 is durable.
            Crash(0, Point.AFTER_DECIDED, inside_tx=True),
            mode=mode,
            db_path=tmp_path / f"{mode}.db",
        )
        seen[mode] = (
            [(c.process, c.step_index) for c in r.calls("charge")],
            [(a.process, a.step_index) for a in r.agent_inputs],
            [(s.index, s.status) for s in r.steps],
            [e.type for e in r.events],
            (r.run.status, r.run.result),
        )
    assert seen["harness"] == seen["process"]
    assert seen["process"][0] == [(2, 0)]


class TestProcessModeErrors:
    def test_process_mode_needs_a_factory_reference(self, tmp_path: Path) -> None:
        with pytest.raises(agentrt.ConfigError, match="factory"):
            run_sync(ts.checkout(), mode="process", db_path=tmp_path / "x.db")

    def test_a_failing_child_is_reported_with_its_traceback(self, tmp_path: Path) -> None:
        with pytest.raises(ScenarioError) as info:
            run_sync("support.scenarios:broken_loop", mode="process", db_path=tmp_path / "b.db")
        assert "process 1 exited with 3" in str(info.value)
        assert "the consumer's loop is broken" in str(info.value)


# -- the pytest plugin -----------------------------------------------------------------------


def _pytest(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_consumer.py").write_text(textwrap.dedent(source))
    env = dict(os.environ)
    tests_dir = str(Path(__file__).parent)
    env["PYTHONPATH"] = os.pathsep.join([tests_dir, env.get("PYTHONPATH", "")])
    # Load exactly this plugin, by module, whether or not its pytest11 entry point is
    # installed (loading it twice, by entry point and by -p, would be refused).
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


@pytest.mark.slow
def test_the_plugin_parametrizes_one_test_over_the_whole_matrix(tmp_path: Path) -> None:
    done = _pytest(
        tmp_path,
        """
        import pytest

        @pytest.mark.crash_matrix("support.scenarios:small", inside_tx=False, recovery=False)
        def test_small_survives_every_crash(crash_case):
            result = crash_case.run()
            assert result.run.status == "COMPLETED"
            assert len(result.calls("charge")) <= 2

        @pytest.mark.crash_matrix("support.scenarios:small", inside_tx=False)
        def test_small_survives_crashes_during_recovery(crash_case):
            result = crash_case.run()
            assert len(result.crashes_reached) == len(crash_case.crashes)
        """,
        "-v",
        # All of the first test; of the second, the crash at the takeover of step 0's tool
        # start (a case only the recovery points add; named by the first crash that leads
        # to it, step 0's claim, which commits with the tool's start: decision 0088).
        "-k",
        "test_small_survives_every_crash or (interrupted and not tool_finished)",
    )
    _, cases = run_coro(discover("support.scenarios:small"))
    expected = ["no-crash"] + [case_id(c) for c in cases if not c[0].inside_tx]
    out = done.stdout + done.stderr
    assert f"{len(expected) + 1} passed" in out, out
    for ident in expected:
        assert f"test_small_survives_every_crash[{ident}] PASSED" in done.stdout
    recovery = "step.started@0+step.interrupted@0"
    assert f"test_small_survives_crashes_during_recovery[{recovery}] PASSED" in done.stdout
    # The rest of the second test: the same first crashes, and more during recovery.
    deselected = re.search(r"(\d+) deselected", done.stdout)
    assert deselected is not None and int(deselected.group(1)) > len(expected), out


def test_the_plugin_marker_takes_the_matrix_arguments() -> None:
    mark = pytest.mark.crash_matrix("pkg.mod:make", mode="process", depth=2, recovery=False).mark
    assert _marker_args(mark) == ("pkg.mod:make", "process", True, 2, False)
    assert _marker_args(pytest.mark.crash_matrix("pkg.mod:make").mark) == (
        "pkg.mod:make",
        "harness",
        True,
        1,
        True,
    )
    for bad in ({"depth": 0}, {"depth": "2"}, {"deep": 2}):
        with pytest.raises(pytest.UsageError):
            _marker_args(pytest.mark.crash_matrix("pkg.mod:make", **bad).mark)


@pytest.mark.slow
def test_the_plugin_refuses_crash_case_without_its_marker(tmp_path: Path) -> None:
    done = _pytest(
        tmp_path,
        """
        def test_forgot_the_marker(crash_case):
            crash_case.run()
        """,
        "--collect-only",
        "-q",
    )
    assert done.returncode != 0
    assert "needs @pytest.mark.crash_matrix" in done.stdout + done.stderr


def test_a_password_in_a_postgres_databases_url_is_in_no_repr_of_a_result_or_matrix(
    tmp_path: Path,
) -> None:
    """An assertion on a result prints its repr: the URL's password is never in it (nor
    in a matrix's), while `summary()` names the database without it."""
    from contextlib import ExitStack
    from urllib.parse import urlsplit, urlunsplit

    from support.database import make_database

    with ExitStack() as stack:
        url = make_database("postgres", tmp_path, stack, "a password kept out of a repr")
        parts = urlsplit(url)
        user = parts.username or "root"
        netloc = f"{user}:hunter2secret@{parts.hostname}:{parts.port or 5432}"
        secret = urlunsplit(parts._replace(netloc=netloc))  # trust auth ignores it
        with forked_process_mode():  # as in the matrices above
            matrix = crash_matrix_sync(
                "support.scenarios:small",
                "process",
                directory=secret,
                recovery=False,
                select=lambda crashes: (
                    crashes == (Crash(0, Point.AFTER_TOOL_STARTED, inside_tx=True),)
                ),
            )
        matrix.assert_ok()
        shown = repr(matrix) + repr(matrix.clean) + "".join(repr(c) for c in matrix.cases)
        assert "hunter2secret" not in shown
        assert "hunter2secret" not in matrix.clean.summary()
        assert "hunter2secret" in str(matrix.clean.db_path)  # kept, only not shown


def test_a_childs_plan_and_the_urls_password_never_reach_its_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process list shows every user each process's command line: a child's plan, the
    database's URL and its password in it, travels in the child's environment instead
    (readable by its own user only). Real children, started as process mode starts them."""
    from contextlib import ExitStack
    from types import SimpleNamespace
    from urllib.parse import urlsplit, urlunsplit

    from agentrt.testkit import _process
    from support.database import make_database

    started: list[list[str]] = []

    def recording_run(command: list[str], **kwargs: object) -> object:
        started.append(list(command))
        return subprocess.run(command, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(
        _process,
        "subprocess",
        SimpleNamespace(
            run=recording_run,
            DEVNULL=subprocess.DEVNULL,
            TimeoutExpired=subprocess.TimeoutExpired,
        ),
    )
    with ExitStack() as stack:
        url = make_database("postgres", tmp_path, stack, "a plan kept off the command line")
        parts = urlsplit(url)
        netloc = f"{parts.username or 'root'}:hunter2secret@{parts.hostname}:{parts.port or 5432}"
        secret = urlunsplit(parts._replace(netloc=netloc))  # trust auth ignores it
        result = play("support.scenarios:checkout", Crash(0, Point.AFTER_TOOL_STARTED), db=secret)
    assert result.exit_codes == (SIGKILLED, 0)
    assert result.run.status == RunStatus.COMPLETED  # each child found its plan
    assert started == [[sys.executable, "-m", "agentrt.testkit._process"]] * 2
    assert _process.PLAN_VARIABLE not in os.environ  # the parent's own is untouched


def test_a_child_started_without_its_plan_says_how_to_give_it() -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTRT_TESTKIT_PLAN"}
    done = subprocess.run(
        [sys.executable, "-m", "agentrt.testkit._process", '{"factory": "x"}'],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 2
    assert "AGENTRT_TESTKIT_PLAN='<plan json>' python -m agentrt.testkit._process" in done.stderr


@pytest.mark.parametrize("keep", [False, True], ids=["removed", "kept"])
def test_a_matrix_whose_clean_run_fails_leaves_no_schema_unless_kept_and_says_where(
    tmp_path: Path, keep: bool
) -> None:
    """The clean run's failure reaches the caller with no matrix to name the cases'
    databases: they are removed then, or, with `keep_files`, the error says where."""
    from contextlib import ExitStack

    import psycopg

    from support.database import make_database
    from support.postgres import server_url

    with ExitStack() as stack:
        url = make_database("postgres", tmp_path, stack, "a failed matrix's schemas")
        prefix = schema_of(url)
        with pytest.raises(ScenarioError, match="the consumer's loop is broken") as info:
            crash_matrix_sync(
                "support.scenarios:broken_loop", "harness", directory=url, keep_files=keep
            )
        with psycopg.connect(server_url("the schemas left"), autocommit=True) as conn:
            left = conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s ORDER BY 1",
                (prefix + "\\_%",),
            ).fetchall()
        notes = getattr(info.value, "__notes__", [])
        if keep:
            assert left == [(f"{prefix}_clean",)]
            assert notes == [f"the cases' databases are kept in {shown_db(url)}"]
        else:
            assert left == [] and notes == []
