"""An example program run as `python EXAMPLE ARGS...`, forked from a prepared process.

The tests of what an example says when its arguments are wrong (a --db that is not
a database, a folder that is missing, a --dir already used) judge its exit status,
its two streams and the files it left: not the interpreter's start. Each paid a
fresh interpreter and its imports for an answer given before any work, up to
2.8 s of CPU for the Agents SDK's example. Here each is forked from the server
that has imported what it imports (tests/support/forkserver.py), the same server
as the adapter's own process tests. The examples' full runs as a new user runs
them (tests/test_examples.py's first two tests, the adapters' example tests)
still start a fresh interpreter or say why not.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from . import forkserver

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# What an example imports, by file name: the preload of its adapter's tests.
PRELOAD = {
    "openai_agents_example.py": forkserver.OPENAI_AGENTS,
    "pydantic_ai_example.py": forkserver.PYDANTIC_AI,
    "langgraph_example.py": forkserver.LANGGRAPH,
}


def run_example(
    script: Path,
    *args: str,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    umask: int | None = None,
    timeout: float = 120,
) -> forkserver.Done:
    """`subprocess.run([python, script, *args], capture_output=True, text=True)`, forked;
    stdin is /dev/null."""
    return forkserver.run(
        [sys.executable, str(script), *args],
        preload=PRELOAD.get(script.name, forkserver.CLI),
        cwd=cwd,
        env=env,
        umask=umask,
        timeout=timeout,
    )
