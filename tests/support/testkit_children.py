"""Process mode's children forked from a prepared process, for the crash matrices' dozens of them.

`agentrt.testkit` in process mode starts every process of a scenario as
`python -m agentrt.testkit._process` (its plan in its environment) with `subprocess.run`,
its stderr to a file. A crash matrix starts one to three such children per case, dozens
in all, and each paid an interpreter's start and `import agentrt` before doing anything.
`forked_process_mode` (a context manager) makes process mode start exactly that
command through `tests/support/forkserver.py` instead: the same argv,
environment (the factory's folder on PYTHONPATH) and stderr, in a
real process of its own that dies of its own SIGKILL at its crash point and is
reported `-9`, as `subprocess` reports it. Only that command is forked; the
tests that run a single scenario still start fresh interpreters, so the real
`python -m agentrt.testkit._process` stays covered.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any

from agentrt.testkit import _process

from . import forkserver
from .database import on_postgres

# Not pytest: the scenarios' factories in `tests/support/` no longer import it (their
# database helpers import it only to skip or fail a test).
PRELOAD = ("agentrt.testkit", "agentrt.lowlevel", "agentrt.testkit._harness")
COMMAND = [sys.executable, "-m", "agentrt.testkit._process"]


def _run(command: Sequence[str], **kwargs: Any) -> Any:
    if list(command) != COMMAND:
        return subprocess.run(command, **kwargs)
    stderr: Any = kwargs.get("stderr")
    assert hasattr(stderr, "write"), kwargs  # process mode sends the child's stderr to a file
    done = forkserver.run(
        command, preload=PRELOAD, env=kwargs.get("env"), timeout=kwargs.get("timeout") or 120
    )
    stderr.write(done.stderr.encode("utf-8", errors="replace"))
    return subprocess.CompletedProcess(done.args, done.returncode)


@contextlib.contextmanager
def forked_process_mode() -> Iterator[None]:
    """While open, process mode's children are forked (see the module's docstring)."""
    shim = SimpleNamespace(
        run=_run, DEVNULL=subprocess.DEVNULL, TimeoutExpired=subprocess.TimeoutExpired
    )
    saved = _process.subprocess
    _process.subprocess = shim  # type: ignore[assignment]
    try:
        yield
    finally:
        _process.subprocess = saved


def kit_mode(database: str) -> contextlib.AbstractContextManager[str]:
    """The crash test kit's mode for a single scenario on `database`, as a context: the
    harness on SQLite; on PostgreSQL real children killed with SIGKILL (forked, as
    above), each proved dead at once, where the harness would wait every crash's lease
    out on the server's clock (support/database.py)."""
    if not on_postgres(database):
        return contextlib.nullcontext("harness")
    return _forked("process")


@contextlib.contextmanager
def _forked(mode: str) -> Iterator[str]:
    with forked_process_mode():
        yield mode
