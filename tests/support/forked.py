"""`python tests/support/forked.py ADDRESS SCRIPT ARGS...`: SCRIPT forked from a prepared process.

For a program the code under test starts itself with a command (an MCP server
that `agentrt-proxy` or `agentrt.mcp` starts, the proxy an MCP host starts), so
that the code under test still starts, signals, waits on and kills a real
process of its own, in a process group of its own, while the program's imports
are paid once per test process instead of once per start.

This process is the stand-in: it asks the fork server at ADDRESS
(`tests/support/forkserver.py`) for `python SCRIPT ARGS...` on its own standard
streams, its working directory and its environment, lets go of the streams (the
child alone holds them, so an end of file is the child's), and then stands for
the child:

- a signal sent to it (the group's SIGTERM, a SIGINT) is passed on to the child;
- if it dies first (a SIGKILL of its group), the fork server SIGKILLs the child;
- it ends as the child ended: the same exit code, or killed by the same signal.

The child reads the pid of whoever started this stand-in (its parent as a fresh
interpreter would see it) from `AGENTRT_FORKSERVER_STARTED_BY`.

Only the start-up is shared: a test that judges the interpreter's start, or
that names the child's command line in /proc, starts the program fresh.
"""

from __future__ import annotations

import os
import signal
import sys

import forkserver  # this file's folder is sys.path[0]

PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)


def main() -> None:
    address, *argv = sys.argv[1:]
    child = forkserver.spawn_at(
        address,
        [sys.executable, *argv],
        stdin=0,
        stdout=1,
        stderr=2,
        tied=True,
        started_by=os.getppid(),
    )
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    for sig in PASSED_ON:
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    code = child.wait()
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


if __name__ == "__main__":
    main()
