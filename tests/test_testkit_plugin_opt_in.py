"""The test kit's pytest plugin loads only when a project asks for it (decision 0056).

Installing agentrt registers no `pytest11` entry point: a pytest session of
another project, in an environment where agentrt is installed, imports no
agentrt module and has no `crash_case` fixture and no `crash_matrix` marker.
`-p agentrt.testkit.plugin` or `pytest_plugins` in a root conftest loads it.
Each session here is a real pytest process in a temporary project, with
pytest's plugin autoloading left on, as any project's would be.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

CONSUMER_TESTS = """
import json
import pathlib
import sys

import pytest


def test_report_what_the_session_has(request):
    report = {
        "modules": sorted(m for m in sys.modules if m == "agentrt" or m.startswith("agentrt.")),
        "markers": sorted(m.split("(")[0].split(":")[0] for m in request.config.getini("markers")),
    }
    try:
        request.getfixturevalue("crash_case")
        report["crash_case"] = "returned"
    except pytest.FixtureLookupError:
        report["crash_case"] = "not found"
    except pytest.UsageError as exc:
        report["crash_case"] = str(exc)
    pathlib.Path("report.json").write_text(json.dumps(report))
"""


def project(tmp_path: Path, conftest: str | None = None) -> Path:
    """Another project: its own tests (and conftest), nothing of this repository's."""
    home = tmp_path / "project"
    home.mkdir()
    (home / "test_theirs.py").write_text(textwrap.dedent(CONSUMER_TESTS))
    if conftest is not None:
        (home / "conftest.py").write_text(conftest)
    return home


def others_plugins() -> list[str]:
    """`-p no:NAME` for each installed pytest plugin entry point that is not agentrt's.

    Autoloading stays on: an entry point of agentrt's (as an older install may leave)
    still loads, as it would in any project, and the tests below would see it. The
    others' plugins (the test extra's: xdist, timeout, Hypothesis, anyio, LangSmith,
    platformdirs) are left out because a session paid 2.8 s of CPU for their imports
    against 0.4 s without them, and none of them imports agentrt.
    """
    blocked = []
    for e in entry_points(group="pytest11"):
        dist = e.dist.name.lower() if e.dist is not None else ""
        if dist != "agentrt" and not e.value.startswith("agentrt"):
            blocked += ["-p", f"no:{e.name}"]
    return blocked


def pytest_in(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)  # autoloading on, as in any project
    return subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *others_plugins()),
            *("--rootdir", str(home), *args),
        ],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_installing_agentrt_registers_no_pytest_plugin_entry_point() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "pytest11" not in declared.get("entry-points", {})
    installed = [e.value for e in entry_points(group="pytest11")]
    assert [v for v in installed if v.startswith("agentrt")] == [], (
        "this environment still has the entry point of an older install: pip install -e ."
    )


def session(home: Path, *args: str) -> dict[str, Any]:
    """What a pytest session of `home` had: agentrt modules, markers, the crash_case fixture."""
    ran = pytest_in(home, "-q", *args)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    report: dict[str, Any] = json.loads((home / "report.json").read_text())
    return report


@pytest.mark.slow
def test_a_pytest_session_that_does_not_ask_sees_no_agentrt_fixture_marker_or_module(
    tmp_path: Path,
) -> None:
    seen = session(project(tmp_path))
    assert seen["modules"] == []
    assert "crash_matrix" not in seen["markers"]
    assert seen["crash_case"] == "not found"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["-p on the command line", "pytest_plugins in the conftest"])
def test_a_project_that_asks_for_the_plugin_gets_its_fixture_and_marker(
    tmp_path: Path, how: str
) -> None:
    if how.startswith("-p"):
        seen = session(project(tmp_path), "-p", "agentrt.testkit.plugin")
    else:
        seen = session(project(tmp_path, 'pytest_plugins = ["agentrt.testkit.plugin"]\n'))
    assert "agentrt.testkit.plugin" in seen["modules"]
    assert "crash_matrix" in seen["markers"]
    # The plugin's own fixture, refusing to run without its marker.
    assert "crash_case is parametrized by @pytest.mark.crash_matrix" in seen["crash_case"]
