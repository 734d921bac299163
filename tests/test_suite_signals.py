"""The suite's children start with SIGINT and SIGTERM at their defaults, however it was started.

Many tests end a child (`agentrt console`, `agentrt-proxy`, `agentrt mcp`, the examples)
with a real Ctrl-C or `kill`, as a person at a terminal or a service manager would. A
disposition set to "ignore" passes to every child across `exec`, and since decision 0233
the console keeps a signal its caller ignores: a suite started as a script's `pytest &`
(POSIX ignores SIGINT and SIGQUIT in a background command without job control) or by a
host that keeps SIGTERM for itself failed 36 tests on their timeouts, each child ignoring
the signal that should have ended it. The suite's conftest gives both their defaults back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

_PROBE = (
    "import signal; "
    "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "
    "signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)"
)


def test_a_child_of_the_suite_starts_with_sigint_and_sigterm_at_their_defaults() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    assert probe.stdout == "True True\n"


def _ignoring_both() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def test_a_suite_started_with_both_ignored_still_starts_its_children_with_their_defaults(
    tmp_path: Path,
) -> None:
    # The test above, in a pytest of its own started as `pytest &` from a script would be
    # (and with SIGTERM ignored too): it passes only if the suite gave both back.
    here = Path(__file__)
    env = dict(os.environ)
    # No VACUUM of the test server from the nested run, in the middle of the suite's own
    # PostgreSQL tests (as test_suite_sessionstart.py's nested runs).
    env.pop("AGENTRT_TEST_POSTGRES_URL", None)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            f"--rootdir={here.parent.parent}",
            f"--basetemp={tmp_path / 'inner'}",
            f"{here}::test_a_child_of_the_suite_starts_with_sigint_and_sigterm_at_their_defaults",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        preexec_fn=_ignoring_both,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
