"""The pytest plugin: one test, parametrized over a scenario's whole crash matrix.

Loaded only when a project asks for it (decision 0056): installing agentrt
registers no `pytest11` entry point, so no other project's pytest session
imports agentrt or sees its fixture and marker. Ask with
`-p agentrt.testkit.plugin` on the command line, `addopts = ["-p",
"agentrt.testkit.plugin"]` in the pytest configuration, or
`pytest_plugins = ["agentrt.testkit.plugin"]` in the root `conftest.py`.
A consumer then writes::

    @pytest.mark.crash_matrix("myapp.tests.scenarios:payment", mode="process")
    def test_payment_survives_every_crash(crash_case):
        result = crash_case.run()          # raises AssertionError on any violation
        assert len(result.calls("charge")) <= 2

At collection the plugin finds the cases of the scenario's crash matrix
(`agentrt.testkit.matrix_cases`), then generates one test per case: ids like
`step.tool_started@1` or `step.decided@0-in_tx` for one crash, and
`step.tool_started@1+step.interrupted@1` for a crash during the recovery from
another, plus `no-crash` for the clean run. The marker takes `mode` ("harness"
or "process"), `inside_tx` (default True: include the crashes before a
COMMIT), `recovery` (default True: also crash at each recovery point, e.g.
`step.interrupted`, of each distinct recovery) and `depth` (default 1; 2
crashes at every recovery point after every first crash), as `crash_matrix`.
Finding the recovery points means playing the first crashes once at
collection (`recovery=False` plays only the clean run). Cases are cached per
scenario and marker arguments for the session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..lowlevel import run_sync as _run_coro
from ._matrix import matrix_cases
from ._result import Result
from ._runner import MODES, run_sync
from ._scenario import Crash

MARKER = "crash_matrix"
_discovered: dict[tuple[str, str, bool, int, bool], list[tuple[Crash, ...]]] = {}


@dataclass
class CrashCase:
    """One cell of the matrix, ready to run on a fresh file in the test's tmp_path."""

    scenario: str
    mode: str
    crashes: tuple[Crash, ...]
    db_path: Path | None = None
    result: Result | None = field(default=None, repr=False)

    @property
    def id(self) -> str:
        return case_id(self.crashes)

    def run(self, *, check_invariants: bool = True) -> Result:
        """Play the scenario with these crashes; raise on any invariant violation."""
        self.result = run_sync(
            self.scenario,
            *self.crashes,
            mode=self.mode,
            db_path=self.db_path,
            check_invariants=check_invariants,
        )
        return self.result


def case_id(crashes: tuple[Crash, ...]) -> str:
    if not crashes:
        return "no-crash"
    return "+".join(f"{c.at.value}@{c.step}" + ("-in_tx" if c.inside_tx else "") for c in crashes)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(scenario, mode='harness', inside_tx=True, recovery=True, depth=1): "
        "parametrize the crash_case fixture over every crash point and step the scenario "
        "factory reaches, recovery points included",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "crash_case" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: the crash_case fixture needs "
            f"@pytest.mark.{MARKER}('pkg.module:make_scenario')"
        )
    key = _marker_args(marker)
    scenario, mode, inside_tx, depth, recovery = key
    if key not in _discovered:
        _, cases = _run_coro(
            matrix_cases(scenario, mode, depth=depth, recovery=recovery, inside_tx=inside_tx)
        )
        _discovered[key] = [(), *cases]
    cases = _discovered[key]
    metafunc.parametrize(
        "crash_case",
        [CrashCase(scenario, mode, crashes) for crashes in cases],
        ids=[case_id(c) for c in cases],
        indirect=True,
    )


def _marker_args(marker: pytest.Mark) -> tuple[str, str, bool, int, bool]:
    scenario: Any = marker.args[0] if marker.args else marker.kwargs.get("scenario")
    if not isinstance(scenario, str) or ":" not in scenario:
        raise pytest.UsageError(
            f"@pytest.mark.{MARKER} names the scenario factory as 'pkg.module:function', "
            f"got {scenario!r}"
        )
    mode = str(marker.kwargs.get("mode", "harness"))
    if mode not in MODES:
        raise pytest.UsageError(f"@pytest.mark.{MARKER}: mode must be one of {MODES}")
    depth = marker.kwargs.get("depth", 1)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise pytest.UsageError(f"@pytest.mark.{MARKER}: depth must be an int >= 1, got {depth!r}")
    unknown = set(marker.kwargs) - {"scenario", "mode", "inside_tx", "recovery", "depth"}
    if unknown:
        raise pytest.UsageError(f"@pytest.mark.{MARKER}: unknown argument(s) {sorted(unknown)}")
    return (
        scenario,
        mode,
        bool(marker.kwargs.get("inside_tx", True)),
        depth,
        bool(marker.kwargs.get("recovery", True)),
    )


@pytest.fixture
def crash_case(request: pytest.FixtureRequest, tmp_path: Path) -> CrashCase:
    """The crash case this test instance runs (see the module docstring)."""
    param = getattr(request, "param", None)
    if not isinstance(param, CrashCase):
        raise pytest.UsageError(
            f"crash_case is parametrized by @pytest.mark.{MARKER}('pkg.module:make_scenario')"
        )
    return CrashCase(param.scenario, param.mode, param.crashes, db_path=tmp_path / "run.db")
