"""A process that opens records and is killed (SIGKILL) at a chosen SQL statement of the open,
for tests/test_migration_attacks.py.

It imports agentrt once and then serves: each line on stdin is `PATH N`; it forks a child
that opens PATH with `open_store` and kills itself with SIGKILL as its N-th statement
(counted from 0 over every statement the open's connection runs: its settings, the schema
check, the WAL switch, `BEGIN IMMEDIATE`, each migration's statements, `COMMIT`) is about to
run, having written that statement to `PATH.killed-at`. It answers `killed` when the child
died so, `opened` when the open ran fewer than N + 1 statements and returned, or `failed:
<error>`. The server itself starts no thread, so its
forks are safe.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys


def open_killed_at(path: str, n: int) -> None:
    from agentrt._store.sqlite import _store

    connect = _store._connect
    seen = [0]

    def counted(target: str, *, uri: bool) -> sqlite3.Connection:
        conn = connect(target, uri=uri)

        def trace(statement: str) -> None:
            if seen[0] == n:
                with open(f"{path}.killed-at", "w", encoding="utf-8") as f:
                    f.write(statement)
                os.kill(os.getpid(), signal.SIGKILL)
            seen[0] += 1

        conn.set_trace_callback(trace)
        return conn

    _store._connect = counted  # type: ignore[assignment]
    _store.open_store(path).close()


def main() -> None:
    import agentrt._store.sqlite._store  # noqa: F401  (imported once, before any fork)

    for line in sys.stdin:
        path, n = line.rsplit(" ", 1)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                open_killed_at(path, int(n))
            except BaseException as e:
                print(f"failed: {type(e).__name__}: {e}", flush=True)
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            print("killed", flush=True)
        elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            print("opened", flush=True)
        elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3:
            pass  # said above
        else:
            print(f"failed: status {status}", flush=True)


if __name__ == "__main__":
    main()
