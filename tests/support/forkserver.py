"""Child programs forked from one prepared process instead of each paying its imports.

A child of an adapter's process test is `python SCRIPT ARGS...` (or `python -m
MODULE ARGS...`): a real, separate process the test reads, waits on and kills
with real signals. What each paid before doing anything was the interpreter's
start and its imports (the Agents SDK alone is several seconds of CPU on a
shared core). Here one server per set of modules imports them once, with no
thread running, and forks a child per request; the child takes the request's
argv, working directory, environment and standard streams and runs the script
as `__main__`, as `python` would, then exits through the interpreter's own
shutdown (atexit handlers, non-daemon threads joined, streams flushed).

Between the server and each child sits a small supervisor (a fork of the
server) that waits on the child and reports how it ended: its exit status, or
the signal that killed it (`returncode` -9 after SIGKILL, as `subprocess`
says). The test process signals the child by its pid.

Only programs whose test does not judge the interpreter's start itself go
through here: a test of what an import loads, or of a missing extra, runs a
fresh interpreter with `subprocess`.

One server per preload set per test process (each xdist worker has its own);
it exits when the test process's end of its stdin closes.

A child finds its server's address in `AGENTRT_FORKSERVER`: a program that
starts programs of its own (the scenario scripts of `benchmarks/adapters/`,
through their `_children.py`) forks them from the same prepared process with
`spawn_at`, instead of paying a fresh interpreter's imports for each.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import io
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
# The CLI with its commands: `import agentrt.cli` imports none of them (each is
# imported when its command runs, decision 0090), so a server that prepares the
# CLI for its children names every command's module.
CLI = (
    "agentrt.cli",
    "agentrt.cli._decide",
    "agentrt.cli._read",
    "agentrt.cli._verify",
    "agentrt.cli._export",
    "agentrt.cli._recheck",
    "agentrt.cli._launch",
)
# The preload of an adapter's children (and of the example that uses it): one name per
# set, so that every test of a process starting such a child shares one server.
OPENAI_AGENTS = ("agents", "agentrt.adapters.openai_agents", *CLI)
PYDANTIC_AI = ("pydantic_ai", "agentrt.adapters.pydantic_ai", *CLI)
LANGGRAPH = ("langgraph.graph", "langchain_core.messages", "agentrt.adapters.langgraph", *CLI)
# Imported by every server before its own preload: what nearly every child imports
# on its first tool or store (jsonschema compiles each tool's schema; the store
# opens through the backend a test names). Third-party modules and the runtime's
# own only, none that reads the environment when imported: a child's environment
# is the request's, not the server's.
EVERY_CHILD = (
    "jsonschema",
    "referencing.jsonschema",
    "agentrt._tools",
    "agentrt._store.sqlite",
    "psycopg",
    "agentrt._store.postgres",
)
# Set in each child: the address of the server it was forked from (see `spawn_at`).
ADDRESS = "AGENTRT_FORKSERVER"
# Set in a child started through `tests/support/forked.py`: the pid of the process
# that started that stand-in, which a fresh interpreter would have as its parent.
STARTED_BY = "AGENTRT_FORKSERVER_STARTED_BY"

# -- the wire: one length-prefixed JSON message at a time ---------------------------


def _send(sock: socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    data = json.dumps(message).encode()
    frame = struct.pack("!I", len(data)) + data
    if fds:
        socket.send_fds(sock, [frame], list(fds))
    else:
        sock.sendall(frame)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError("the fork server closed the connection")
        out += chunk
    return out


def _recv(sock: socket.socket, nfds: int = 0) -> tuple[dict[str, Any], list[int]]:
    fds: list[int] = []
    if nfds:
        head, fds, _, _ = socket.recv_fds(sock, 4, nfds)
        if len(head) < 4:
            head += _recv_exact(sock, 4 - len(head))
    else:
        head = _recv_exact(sock, 4)
    (size,) = struct.unpack("!I", head)
    return json.loads(_recv_exact(sock, size)), fds


# -- the server --------------------------------------------------------------------


def _serve(path: str, preload: Sequence[str]) -> int | None:
    """Import `preload`, then fork a child per request. Returns only in a child: its exit code."""
    for name in (*EVERY_CHILD, *preload):
        importlib.import_module(name)
    # What the imports made lives as long as the server: frozen out of the
    # collector's reach, a child's collections (its shutdown's included) walk only
    # what the child made, not every framework's classes again in every child.
    gc.collect()
    gc.freeze()
    if threading.active_count() != 1:
        names = [t.name for t in threading.enumerate()]
        print(f"not ready: threads running after the imports: {names}", flush=True)
        return 1
    base_path = [p for p in sys.path if p not in _pythonpath(os.environ)]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    # Supervisors are reaped by the kernel; each restores SIGCHLD to wait on its child.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in ready:
            return 0  # the test process is gone (or done): so is the server
        conn, _ = listener.accept()
        if os.fork() != 0:
            conn.close()
            continue
        # The supervisor of one request.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        listener.close()
        return _supervise(conn, base_path, path)


def _supervise(conn: socket.socket, base_path: list[str], path: str) -> int | None:
    request, fds = _recv(conn, 3)
    pid = os.fork()
    if pid == 0:
        conn.close()
        return _become(request, fds, base_path, path)
    for fd in fds:
        os.close(fd)
    _send(conn, {"pid": pid})
    if request.get("tied"):
        _end_with_the_requester(conn, pid)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)  # -N for a child killed by signal N
    with contextlib.suppress(OSError):
        _send(conn, {"returncode": code})
    os._exit(0)


def _end_with_the_requester(conn: socket.socket, pid: int) -> None:
    """Until the child ends: if the process that asked for it ends first, SIGKILL the child.

    The process that asked holds its end of `conn` for as long as it lives (the
    stand-in of `tests/support/forked.py`), so the kernel closing it is its death,
    by whatever signal: a kill of the stand-in's process group reaches the child.
    """
    child = os.pidfd_open(pid)
    try:
        while True:
            ready, _, _ = select.select([conn, child], [], [])
            if child in ready:
                return
            try:
                data = conn.recv(1)
            except OSError:
                data = b""
            if not data:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                return
    finally:
        os.close(child)


def _pythonpath(env: Mapping[str, str]) -> list[str]:
    return [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def _become(request: dict[str, Any], fds: list[int], base_path: list[str], path: str) -> int | None:
    """In the child: take the request's streams, place, environment and argv, and run it."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    # The streams as a fresh interpreter makes them over a file or a pipe.
    sys.stdin = sys.__stdin__ = _stream(0, "r", "strict")
    sys.stdout = sys.__stdout__ = _stream(1, "w", "strict")
    sys.stderr = sys.__stderr__ = _stream(2, "w", "backslashreplace")
    os.chdir(request["cwd"])
    if request.get("umask") is not None:
        os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    # Found again from the child's environment (TMPDIR) at its first use, as a fresh
    # interpreter finds it, not the one the server may have found for its own.
    tempfile.tempdir = None
    os.environ[ADDRESS] = path
    if request.get("started_by") is not None:
        os.environ[STARTED_BY] = str(request["started_by"])
    argv: list[str] = request["argv"]
    first = str(Path(argv[1]).resolve().parent) if request["module"] is None else os.getcwd()
    sys.path[:] = [first, *_pythonpath(request["env"]), *base_path]
    import runpy

    try:
        if request["module"] is None:
            sys.argv = list(argv[1:])
            runpy.run_path(argv[1], run_name="__main__")
        else:
            sys.argv = [request["module"], *argv[3:]]
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except BaseException:
        import traceback

        traceback.print_exc()
        return 1
    return 0


def _stream(fd: int, mode: str, errors: str) -> Any:
    raw = open(fd, mode + "b", buffering=0, closefd=False)  # noqa: SIM115 - the process's own
    buffered = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
    return io.TextIOWrapper(
        buffered, encoding="utf-8", errors=errors, line_buffering=fd == 2 or os.isatty(fd)
    )


def _server_main() -> None:
    path, *preload = sys.argv[1:]
    del sys.path[0]  # this file's folder: nothing a child or a preload should find there
    code = _serve(path, preload)
    # Here in a child (or a server that could not start): end as `python` ends, up
    # to tearing down the modules (half a second of CPU that writes nothing): wait
    # for the non-daemon threads, run the atexit handlers, finalize what is garbage
    # (a file object left unclosed is flushed there), flush the streams.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    gc.collect()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code or 0)


# -- the client --------------------------------------------------------------------


class ForkServer:
    """A server forking children with `preload` already imported."""

    def __init__(self, preload: Sequence[str]) -> None:
        self.preload = tuple(preload)
        self._dir = tempfile.mkdtemp(prefix="agentrt-forkserver-")
        self.path = os.path.join(self._dir, "s")
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE), self.path, *self.preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=str(HERE.parents[1]),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.proc.kill()
            raise RuntimeError(f"the fork server for {self.preload} did not start: {line!r}")

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self._dir)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        stdin: int | None = None,
        stdout: int | None = None,
        stderr: int | None = None,
        capture: bool = False,
        umask: int | None = None,
    ) -> Child:
        """Start `argv` (`[python, script, ...]` or `[python, "-m", module, ...]`) as a child.

        Streams left None are /dev/null; `capture` sends stdout and stderr to files
        that `Child.communicate` reads once the child has ended.
        """
        return spawn_at(
            self.path,
            argv,
            cwd=cwd,
            env=env,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            capture=capture,
            umask=umask,
        )


def spawn_at(
    path: str,
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdin: int | None = None,
    stdout: int | None = None,
    stderr: int | None = None,
    capture: bool = False,
    tied: bool = False,
    started_by: int | None = None,
    umask: int | None = None,
) -> Child:
    """`ForkServer.spawn` on the server listening at `path` (a child's `AGENTRT_FORKSERVER`).

    `tied`: the child is SIGKILLed if this process ends before it (see
    `_end_with_the_requester`); `started_by`: the pid the child reads from
    `STARTED_BY`; `umask`: the child's (else the server's, the test process's at its start),
    as a `preexec_fn` calling `os.umask` would set it.
    """
    argv = [str(a) for a in argv]
    files: tuple[Any, Any] | None = None
    if capture:
        files = (tempfile.TemporaryFile(), tempfile.TemporaryFile())  # noqa: SIM115
        stdout, stderr = files[0].fileno(), files[1].fileno()
    module = argv[2] if len(argv) > 2 and argv[1] == "-m" else None
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        fds = [devnull if fd is None else fd for fd in (stdin, stdout, stderr)]
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        request = {
            "argv": argv,
            "module": module,
            "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
            "env": dict(os.environ if env is None else env),
            "tied": tied,
            "started_by": started_by,
            "umask": umask,
        }
        _send(sock, request, fds)
    finally:
        os.close(devnull)
    reply, _ = _recv(sock)
    return Child(sock, int(reply["pid"]), argv, files)


@dataclass
class Done:
    """What `run` returns: as `subprocess.CompletedProcess` with text output."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


class Child:
    """A forked child, as much of `subprocess.Popen` as the tests use."""

    def __init__(
        self, sock: socket.socket, pid: int, args: list[str], files: tuple[Any, Any] | None
    ) -> None:
        self._sock = sock
        self._files = files
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the end; the captured stdout and stderr as text."""
        self.wait(timeout)
        assert self._files is not None, "spawned without capture"
        texts = []
        for f in self._files:
            f.seek(0)
            texts.append(f.read().decode("utf-8", "replace"))
            f.close()
        return texts[0], texts[1]

    def poll(self) -> int | None:
        if self.returncode is None:
            ready, _, _ = select.select([self._sock], [], [], 0)
            if ready:
                self._read_end()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            ready, _, _ = select.select([self._sock], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._read_end()
        assert self.returncode is not None
        return self.returncode

    def _read_end(self) -> None:
        try:
            reply, _ = _recv(self._sock)
            self.returncode = int(reply["returncode"])
        finally:
            self._sock.close()

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_servers: dict[tuple[str, ...], ForkServer] = {}
_lock = threading.Lock()


def server(*preload: str) -> ForkServer:
    """The (one, per test process) server with `preload` imported, started at first use."""
    key = tuple(preload)
    with _lock:
        found = _servers.get(key)
        if found is None or found.proc.poll() is not None:
            found = _servers[key] = ForkServer(key)
        return found


@atexit.register
def _close_all() -> None:
    for found in _servers.values():
        found.close()


def run(
    argv: Sequence[str],
    *,
    preload: Sequence[str],
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
    umask: int | None = None,
) -> Done:
    """`subprocess.run(argv, capture_output=True, text=True, timeout=...)`, forked."""
    child = server(*preload).spawn(argv, cwd=cwd, env=env, capture=True, umask=umask)
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise
    assert child.returncode is not None
    return Done(list(child.args), child.returncode, out, err)


if __name__ == "__main__":
    _server_main()
