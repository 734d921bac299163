"""The suite's own `pytest_sessionstart` (tests/conftest.py) run as a person runs the suite.

Decision 0228 builds Hypothesis's UTF-8 character table there. The conftest's hook runs
before Hypothesis's own `pytest_sessionstart`, which is where Hypothesis ends its plugin
initialization: building the table then made Hypothesis warn "Slow code in plugin: avoid
lazy evaluation of characters(codec='utf-8') during pytest plugin or conftest
initialization!" on every run, and with `PYTHONWARNINGS=error` (what that warning tells a
reader to set) the run ended in an INTERNALERROR before any test.

Without xdist (`-p no:xdist`, or not installed) the conftest's `pytest_xdist_auto_num_workers`
was a hook pytest does not know: an INTERNALERROR (`PluginValidationError`) before any test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "workers",
    # A worker (`-n 1`) runs the same hook under the same warnings as `-n 0` does: not run
    # again here (a nested run with a worker costs about 6 s of CPU).
    [["-n", "0"], ["-p", "no:xdist"]],
    ids=["no-workers", "without-xdist"],
)
def test_the_suites_sessionstart_warns_of_nothing_even_with_warnings_as_errors(
    workers: list[str],
) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    env.pop("AGENTRT_TEST_POSTGRES_URL", None)  # no VACUUM from the nested run
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            *workers,
            "tests/test_canonical.py::test_plain_python_numbers",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = done.stdout + done.stderr
    assert "HypothesisSideeffectWarning" not in said, said
    assert (done.returncode, "1 passed" in done.stdout) == (0, True), said
