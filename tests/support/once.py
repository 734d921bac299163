"""Something slow made once per test run and shared by every xdist worker.

A module-scoped fixture runs once per worker that runs a test of its module, so
with several workers an expensive product (the documentation site) can be built
several times over in one run. `once` builds it in a folder every worker of the
run can see, under an exclusive lock: the first worker to ask builds it, the
others wait and read what it built. A build that fails leaves no mark of having
been made, so the next worker to ask builds again, from an empty folder, and sees
the failure itself.

The shared folder is the run's own: xdist gives each worker a base temp folder
inside the run's (`.../pytest-N/popen-gwK`), so their common parent is that
run's folder and never an earlier run's. Without xdist the folder is the
session's own base temp folder.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder this test run's workers share (this session's own without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once(shared: Path, name: str, build: Callable[[Path], None]) -> Path:
    """`shared / name`, made by `build(folder)` by the first process that asks for it.

    `shared` is a folder every asker sees (`run_folder`); the askers serialise on an
    exclusive lock on a file beside it.
    """
    target = shared / name
    done = shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(target, ignore_errors=True)  # what a failed build left
            target.mkdir()
            build(target)
            done.touch()
    return target
