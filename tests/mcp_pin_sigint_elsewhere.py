"""`agentrt mcp pin ARGS...` in a process whose SIGINT reaches a thread other than the main one.

The kernel gives a signal sent to a process to any of its threads that does not
block it; CPython then runs the Python handler in the main thread, but only once
that thread runs Python code again. Here the main thread blocks SIGINT (as do the
threads it starts, the event loop's child watcher among them), so a Ctrl-C always
lands on a thread started for that alone, as it lands on the child watcher's
thread when that thread happens to be running while the loop waits in `select`.
The handshake's timeout is set far away, so only the signal can end the wait.
"""

from __future__ import annotations

import signal
import sys
import threading

from agentrt.mcp import _client

_client.HANDSHAKE_TIMEOUT = 600.0
never = threading.Event()
threading.Thread(target=never.wait, name="takes-sigint", daemon=True).start()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

from agentrt.cli import main  # noqa: E402 - after the mask, as a program's first lines

sys.exit(main(["mcp", "pin", *sys.argv[1:]]))
