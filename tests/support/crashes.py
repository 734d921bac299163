"""Helpers for the crash tests: a child process that SIGKILLs itself mid-step, and
the driver that resumes what it left behind, on a SQLite file or a PostgreSQL schema
(the `database` fixture's value; its journal then needs the `crash_journal` fixture)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import agentrt
import crashing_child as child
from agentrt.scripted import ScriptedAgent

from . import forkserver
from .leases import ANOTHER_HOST
from .rows import execute

HERE = Path(__file__).resolve().parent.parent
# What `crashing_child.py` imports before its first line of its own.
CHILD_PRELOAD = ("agentrt", "agentrt.scripted", "agentrt._model")


def crash(db: Path | str, mode: str, **env: str) -> str:
    """Run the child until it SIGKILLs itself; return the run id it left behind.

    The child is a real process, forked from one with the runtime already imported
    (`support/forkserver.py`): what it does from its first line on is its own.
    """
    proc = forkserver.run(
        [sys.executable, str(HERE / "crashing_child.py"), str(db), mode],
        preload=CHILD_PRELOAD,
        timeout=60,
        env={**os.environ, **env},
    )
    assert proc.returncode == -9, proc.stderr  # killed by SIGKILL, nothing else
    store = agentrt.open_existing(db, read_only=True)
    (run,) = store.list_runs()
    store.close()
    assert run.status == "RUNNING"
    return run.id


def resumer(
    store: agentrt.Store, db: Path | str, mode: str = "charge", reconcile: Any = None, **kw: Any
) -> agentrt.Driver:
    decisions = child.script(mode)
    if mode == "deciding":
        # The child's first entry died while deciding step 0: a ScriptedAgent offers
        # its entry 0 again in the next step, which here is the charge.
        decisions = child.script("charge")
    return agentrt.Driver(
        store=store,
        agent=ScriptedAgent(decisions),
        policy=child.policy(),
        tools=child.tools(db),
        reconcile=reconcile,
        lease_owner="restarted",
        **kw,
    )


def pretend_holder_is_on_another_host(db: Path | str) -> None:
    """Every run's lease holder names another host: only its expiry can free the lease."""
    execute(db, "UPDATE runs SET lease_holder = ?", (ANOTHER_HOST,))
