"""Process mode: every process of a scenario is a real child Python process, SIGKILLed.

The parent (`run_in_children`) plays the scenario as a supervisor restarting a
dead program would: it starts child 1 to start the run; when a child is killed
at its crash point, it starts the next child at once to recover the run (that
child is refused while the dead child's lease is live and retries until it
expires, or takes over at once when the runtime can prove the owner dead). A
child that reached its crash point must have died of SIGKILL (return code -9);
any other exit is reported. A child is judged by its exit, not by its streams
(its stderr goes to a file): a helper process it started may outlive it.

The child (`python -m agentrt.testkit._process`, its plan in the environment variable
`AGENTRT_TESTKIT_PLAN`) rebuilds the scenario
from its factory reference, lives one `Life`, and at its crash point sends
itself SIGKILL: after the commit, in the driver's task; inside a transaction,
on the store's I/O thread before the COMMIT, so that transaction never reaches
the file (on PostgreSQL the child dies holding the transaction open on its
connection; the server sees the connection drop and rolls it back). Nothing
runs after the signal: no handler, no `finally`, no atexit.

The plan, the database's name included, reaches the child in its environment, not on
its command line: a PostgreSQL URL holding a password would show in the process list
(`ps`, `/proc/<pid>/cmdline`, readable by every user), where a process's environment is
readable by its own user only.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from ..lowlevel import RunSession
from ._harness import Crasher, Life, ProcessPlan, note_crash_checked
from ._journal import read_journal
from ._scenario import Crash, load_factory

# The environment variable holding a child's plan (JSON).
PLAN_VARIABLE = "AGENTRT_TESTKIT_PLAN"

# The exit status of a child whose scenario raised (distinct from a crash's -9).
_FAILED = 3
_STDERR_TAIL = 2000


class _Killer(Crasher):
    def after_commit(self, session: RunSession) -> None:
        _die()

    def inside_tx(self, session: RunSession) -> None:
        _die()


def _die() -> NoReturn:
    os.kill(os.getpid(), signal.SIGKILL)
    while True:  # SIGKILL cannot be caught; this only waits for it to land
        time.sleep(1)


def main(argv: Sequence[str] | None = None) -> int:
    """The child: one process of a scenario, named by its factory."""
    args = list(sys.argv[1:] if argv is None else argv)
    plan_text = os.environ.get(PLAN_VARIABLE)
    if args or plan_text is None:
        print(
            f"usage: {PLAN_VARIABLE}='<plan json>' python -m agentrt.testkit._process",
            file=sys.stderr,
        )
        return 2
    payload = json.loads(plan_text)
    try:
        scenario = load_factory(str(payload["factory"]))
        plan = ProcessPlan.from_json(payload["plan"])
        life = Life(scenario, plan, _Killer())
        asyncio.run(life.live())
    except BaseException:
        traceback.print_exc()
        return _FAILED
    return 0


def child_env() -> dict[str, str]:
    """The parent's environment, with the project directories on its import path.

    Directories on the parent's `sys.path` outside the interpreter's own prefixes
    (a tests/ directory pytest added, say) go on PYTHONPATH, so a factory the
    parent can import, the child can import.
    """
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    extra = [
        p
        for p in sys.path
        if p and os.path.isdir(p) and not any(p.startswith(prefix) for prefix in prefixes)
    ]
    env = dict(os.environ)
    current = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join([*extra, *([current] if current else [])])
    return env


def run_in_children(
    factory: str,
    crashes: Sequence[Crash],
    *,
    db_path: str | Path,
    run_id: str,
    journal_path: Path,
    timeout: float,
) -> tuple[list[str], list[int]]:
    """Play the scenario in child processes; return their errors and exit codes."""
    errors: list[str] = []
    codes: list[int] = []
    env = child_env()
    next_crash = 0
    process = 1
    while True:
        plan = ProcessPlan.nth(
            process,
            crashes,
            next_crash,
            db_path=db_path,
            journal_path=journal_path,
            run_id=run_id,
            fresh_process=True,
        )
        command = [sys.executable, "-m", "agentrt.testkit._process"]
        env[PLAN_VARIABLE] = json.dumps({"factory": factory, "plan": plan.to_json()})
        returncode, stderr = _child(command, env, timeout)
        if returncode is None:
            errors.append(f"process {process} did not finish within {timeout:g}s (killed)")
            break
        codes.append(returncode)
        fired = any(
            r["type"] == "crash" and r["process"] == process for r in read_journal(journal_path)
        )
        if fired:
            if returncode != -signal.SIGKILL:
                errors.append(
                    f"process {process} reached its crash point but exited with "
                    f"{returncode}, not -{int(signal.SIGKILL)} (SIGKILL)" + _tail(stderr)
                )
            note_crash_checked(journal_path, process, db_path)
            next_crash += 1
            process += 1
            continue
        if returncode == -signal.SIGKILL:
            errors.append(f"process {process} was killed without reaching a crash point")
        elif returncode != 0:
            errors.append(f"process {process} exited with {returncode}" + _tail(stderr))
        break
    return errors, codes


def _child(command: list[str], env: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """Run one child to its exit: its return code (None when it outlived `timeout` and was
    killed) and the tail of its stderr. The child is judged by its exit, not by its pipes:
    its output goes to a file, so a helper it started that inherited its streams (a daemon
    a tool launched) cannot keep the parent waiting for an end of file."""
    with tempfile.TemporaryFile() as stderr:
        try:
            done = subprocess.run(
                command,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=env,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:  # `run` killed the child and waited for it
            return None, ""
        size = stderr.seek(0, os.SEEK_END)
        stderr.seek(max(0, size - 4 * _STDERR_TAIL))  # only its tail is ever shown
        return done.returncode, stderr.read().decode("utf-8", errors="replace")


def _tail(stderr: str) -> str:
    text = stderr.strip()
    if not text:
        return ""
    return ":\n" + text[-_STDERR_TAIL:]


if __name__ == "__main__":
    sys.exit(main())
