"""A process forked while another of its threads held one of agentrt's module locks.

A lock held at the fork stays held in the child, where no thread will ever release it:
the child's first use of that lock would wait for ever. agentrt's process-wide caches
give the child new locks (`os.register_at_fork`); the threads and committers a child
needs are its own too (decision 0125, tested in `test_group_commit.py`).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import os, signal, sys, threading
    from datetime import timedelta
    import agentrt
    from agentrt import _patterns, _tools

    held, release = threading.Event(), threading.Event()

    def hold(lock):
        with lock:
            held.set()
            release.wait()

    lock = getattr(sys.modules[sys.argv[1]], "_cache_lock")
    threading.Thread(target=hold, args=(lock,), daemon=True).start()
    held.wait()
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)  # a child that waits for the lock for ever dies of it
        if sys.argv[1] == "agentrt._patterns":
            _patterns.compile_pattern("^[a-z]+$")
        else:
            spec = agentrt.ToolSpec(
                name="t", description="d", input_schema={"type": "object"},
                side_effect="read_only", timeout=timedelta(seconds=1),
            )
            _tools.compile_tool(spec)
        print("child compiled", flush=True)
        os._exit(0)
    release.set()
    _, status = os.waitpid(pid, 0)
    print("child ended", os.waitstatus_to_exitcode(status), flush=True)
    """
)


@pytest.mark.parametrize("module", ["agentrt._patterns", "agentrt._tools"])
def test_a_child_forked_while_a_cache_lock_was_held_gets_a_lock_of_its_own(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, module], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["child compiled", "child ended 0"], done.stderr
