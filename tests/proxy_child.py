"""`agentrt-proxy` with an injected clock, for tests/test_mcp_proxy*.py.

Run as `python tests/proxy_child.py CLOCK_FILE --config FILE`: the proxy's
clock (what its repeat window and approval expiry are judged by) reads an ISO
time from CLOCK_FILE at every reading, so a test moves time by writing the file.
The proxy is otherwise the real command, over this process's stdin and stdout.
"""

from __future__ import annotations

import pathlib
import sys
from datetime import datetime

from agentrt.mcp.proxy import main


def clock_from(path: pathlib.Path) -> datetime:
    return datetime.fromisoformat(path.read_text().strip())


if __name__ == "__main__":
    clock_file = pathlib.Path(sys.argv[1])
    raise SystemExit(main(sys.argv[2:], now=lambda: clock_from(clock_file)))
