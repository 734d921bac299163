"""`agentrt-proxy ARGS...` in a process whose SIGINT reaches a thread other than the main one.

As `tests/mcp_pin_sigint_elsewhere.py` for `agentrt mcp pin` (decision 0213): the
main thread blocks SIGINT (as do the threads it starts, the event loop's child
watcher and the SDK's worker threads among them), so a Ctrl-C always lands on a
thread started for that alone. The handshake's timeout is set far away, so only
the signal can end a wait for a server that never answers.
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

from agentrt.mcp.proxy import main  # noqa: E402 - after the mask, as a program's first lines

sys.exit(main(sys.argv[1:]))
