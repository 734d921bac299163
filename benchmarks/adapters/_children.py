"""How the scenario scripts start their program's processes: fresh, or forked under the tests.

Run by a person, `run` and `popen` are `subprocess.run` and `subprocess.Popen`:
every process of a scenario is a fresh interpreter. Run by the test suite, a
script is itself a child forked from the tests' prepared process
(`tests/support/forkserver.py`, whose address a child finds in
`AGENTRT_FORKSERVER`), and its children are forked from that process too: the
same argv, working directory, environment and streams, each a real process of
its own that the script waits on and SIGKILLs by pid, without paying the
framework's imports again (several seconds of CPU each on a shared core). What
a scenario counts, the lines its program wrote, is the same either way.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
ADDRESS = "AGENTRT_FORKSERVER"

_client: ModuleType | None = None


def _forkserver() -> ModuleType | None:
    """The tests' fork server client, when this script runs forked from one; else None."""
    global _client
    if not os.environ.get(ADDRESS):
        return None
    if _client is None:
        spec = importlib.util.spec_from_file_location(
            "_agentrt_forkserver_client", ROOT / "tests" / "support" / "forkserver.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        _client = module
    return _client


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(argv, capture_output=True, text=True, timeout=timeout, ...)`."""
    client = _forkserver()
    if client is None or argv[0] != sys.executable:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
        )
    child = client.spawn_at(os.environ[ADDRESS], argv, cwd=cwd, env=env, capture=True)
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise
    return subprocess.CompletedProcess(list(argv), child.returncode, out, err)


class _Forked:
    """A forked child as much of `subprocess.Popen` as the scripts use."""

    def __init__(self, child: Any, stdout: IO[str] | None, stderr: IO[bytes] | None) -> None:
        self._child = child
        self.pid: int = child.pid
        self.stdout = stdout
        self._stderr = stderr

    @property
    def returncode(self) -> int | None:
        return self._child.returncode  # type: ignore[no-any-return]

    def poll(self) -> int | None:
        return self._child.poll()  # type: ignore[no-any-return]

    def wait(self, timeout: float | None = None) -> int:
        return self._child.wait(timeout)  # type: ignore[no-any-return]

    def send_signal(self, sig: int) -> None:
        self._child.send_signal(sig)

    def communicate(self) -> tuple[str, str]:
        self.wait()
        out = self.stdout.read() if self.stdout is not None else ""
        err = ""
        if self._stderr is not None:
            self._stderr.seek(0)
            err = self._stderr.read().decode("utf-8", "replace")
        return out, err


def popen(
    argv: Sequence[str],
    *,
    capture: bool = False,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> Any:
    """`subprocess.Popen(argv, ...)`: stdout a text pipe and stderr kept if `capture`, else none."""
    client = _forkserver()
    if client is None or argv[0] != sys.executable:
        stream = subprocess.PIPE if capture else subprocess.DEVNULL
        return subprocess.Popen(
            list(argv), stdout=stream, stderr=stream, text=True, cwd=cwd, env=env
        )
    if not capture:
        child = client.spawn_at(os.environ[ADDRESS], argv, cwd=cwd, env=env)
        return _Forked(child, None, None)
    read, write = os.pipe()
    errors = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the process object
    try:
        child = client.spawn_at(
            os.environ[ADDRESS], argv, cwd=cwd, env=env, stdout=write, stderr=errors.fileno()
        )
    finally:
        os.close(write)
    return _Forked(child, open(read, encoding="utf-8"), errors)
