"""`agentrt-proxy` with an injected clock, for tests/test_mcp_proxy*.py.

Run as `python tests/proxy_child.py CLOCK_FILE --config FILE`: the proxy's
clock (what its repeat window and approval expiry are judged by) reads an ISO
time from CLOCK_FILE at every reading, so a test moves time by writing the file.
The proxy is otherwise the real command, over this process's stdin and stdout.
`AGENTRT_TEST_PROXY_GIVE_UP` (seconds), when set, is how long the proxy waits after a
signal for a host that takes nothing (`GIVE_UP_SECONDS`): made long, a test's host that
reads again is never raced by that timer, however loaded the machine.
"""

from __future__ import annotations

import os
import pathlib
import sys
from datetime import datetime

from agentrt.mcp.proxy import main


def clock_from(path: pathlib.Path) -> datetime:
    return datetime.fromisoformat(path.read_text().strip())


if __name__ == "__main__":
    if "AGENTRT_TEST_PROXY_GIVE_UP" in os.environ:
        from agentrt.mcp import _host_stdout

        _host_stdout.GIVE_UP_SECONDS = float(os.environ["AGENTRT_TEST_PROXY_GIVE_UP"])
    clock_file = pathlib.Path(sys.argv[1])
    raise SystemExit(main(sys.argv[2:], now=lambda: clock_from(clock_file)))
