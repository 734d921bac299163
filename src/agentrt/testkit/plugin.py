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
crashes at every recovery point after every first crash), as `crash_matrix`,
by position (in that order) or by name; anything else is a usage error. A
scenario whose clean run passes no crash point is a usage error too: a matrix
of the clean run alone would pass without having crashed anything.
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
from ._matrix import matrix_cases, nothing_crashed
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
        clean, cases = _run_coro(
            matrix_cases(scenario, mode, depth=depth, recovery=recovery, inside_tx=inside_tx)
        )
        if not cases:
            # A matrix of the clean run alone would pass without having crashed anything.
            raise pytest.UsageError(
                f"{metafunc.definition.nodeid}: {scenario}: {nothing_crashed(clean).detail}"
            )
        _discovered[key] = [(), *cases]
    cases = _discovered[key]
    metafunc.parametrize(
        "crash_case",
        [CrashCase(scenario, mode, crashes) for crashes in cases],
        ids=[case_id(c) for c in cases],
        indirect=True,
    )


_MARKER_PARAMETERS = ("scenario", "mode", "inside_tx", "recovery", "depth")


def _marker_args(marker: pytest.Mark) -> tuple[str, str, bool, int, bool]:
    """The marker's arguments, positional or by name, in the order of its signature."""
    where = f"@pytest.mark.{MARKER}"
    if len(marker.args) > len(_MARKER_PARAMETERS):
        raise pytest.UsageError(
            f"{where} takes at most {len(_MARKER_PARAMETERS)} positional arguments "
            f"{_MARKER_PARAMETERS}, got {len(marker.args)}"
        )
    given = dict(zip(_MARKER_PARAMETERS, marker.args, strict=False))
    twice = sorted(set(given) & set(marker.kwargs))
    if twice:
        raise pytest.UsageError(f"{where}: {twice} given both by position and by name")
    unknown = set(marker.kwargs) - set(_MARKER_PARAMETERS)
    if unknown:
        raise pytest.UsageError(f"{where}: unknown argument(s) {sorted(unknown)}")
    given.update(marker.kwargs)
    scenario: Any = given.get("scenario")
    if not isinstance(scenario, str) or ":" not in scenario:
        raise pytest.UsageError(
            f"{where} names the scenario factory as 'pkg.module:function', got {scenario!r}"
        )
    mode = given.get("mode", "harness")
    if mode not in MODES:
        raise pytest.UsageError(f"{where}: mode must be one of {MODES}, got {mode!r}")
    depth = given.get("depth", 1)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise pytest.UsageError(f"{where}: depth must be an int >= 1, got {depth!r}")
    flags = {name: given.get(name, True) for name in ("inside_tx", "recovery")}
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise pytest.UsageError(f"{where}: {name} must be True or False, got {flag!r}")
    return (scenario, str(mode), flags["inside_tx"], depth, flags["recovery"])


@pytest.fixture
def crash_case(request: pytest.FixtureRequest, tmp_path: Path) -> CrashCase:
    """The crash case this test instance runs (see the module docstring)."""
    param = getattr(request, "param", None)
    if not isinstance(param, CrashCase):
        raise pytest.UsageError(
            f"crash_case is parametrized by @pytest.mark.{MARKER}('pkg.module:make_scenario')"
        )
    return CrashCase(param.scenario, param.mode, param.crashes, db_path=tmp_path / "run.db")
