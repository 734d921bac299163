"""A host for tests of `agentrt-proxy`: the SDK's client session over stdio, the real proxy process.

`Shop` lays out what an operator keeps in one folder (the shop server's
manifest, pinned by the real `agentrt mcp pin`; the rules; the proxy's config,
0600; the database) and starts hosts against it. Every proxy is a real child
process (`python tests/proxy_child.py CLOCK --config FILE`, the command's own
`main` with a clock read from a file the test writes), and its upstream is
`tests/mcp_shop_server.py`, written with the SDK.

Both are started by command, the proxy by the SDK's `stdio_client` and the shop
by the proxy, as a real host and a real proxy do; the command is
`tests/support/forked.py`, which stands for the program forked from one process
per test process that has imported agentrt and the MCP SDK once (each fresh
start paid about 1.4 s of CPU for the SDK's imports alone). A host whose test
names the proxy's command line in /proc starts it fresh (`host(fresh=True)`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from tests.support import forkserver

from agentrt import open_existing

TESTS = Path(__file__).resolve().parent.parent
SHOP_SERVER = TESTS / "mcp_shop_server.py"
PROXY_CHILD = TESTS / "proxy_child.py"
FORKED = TESTS / "support" / "forked.py"
START = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)

RULES = {
    "format": "agentrt.mcp.rules/1",
    "tools": {
        "price": {"side_effect": "read_only"},
        "send": {"side_effect": "local_mutation"},
        "charge": {"side_effect": "remote_mutation"},
        "wipe": {"side_effect": "destructive"},
        "jam": {"side_effect": "local_mutation"},
        "receipt": {"side_effect": "local_mutation"},
        "confirm": {"side_effect": "local_mutation"},
        "confirm_later": {"side_effect": "local_mutation"},
    },
}


@dataclass
class Said:
    """One answer as the host received it."""

    is_error: bool
    text: str
    structured: Any = None

    @property
    def word(self) -> str:
        return self.text.split(":", 1)[0]


def write_owner_only(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2))
    path.chmod(0o600)


# The operator's commands, the proxies and the shop servers are real processes
# forked from one that has imported the command, the proxy and the MCP SDK's
# client and server once (tests/support/forkserver.py).
PRELOAD = (
    *forkserver.CLI,
    "agentrt.mcp.proxy",
    "mcp.client.stdio",
    "mcp.server.mcpserver",
    "mcp.server.stdio",
)


def forked(script: Path, *args: str) -> list[str]:
    """The command that runs `python SCRIPT ARGS...` forked from the prepared process."""
    address = forkserver.server(*PRELOAD).path
    return [sys.executable, str(FORKED), address, str(script), *args]


def agentrt(*args: str) -> forkserver.Done:
    """The operator's command, in a process of its own."""
    return forkserver.run([sys.executable, "-m", "agentrt", *args], preload=PRELOAD, timeout=60)


_pinned: list[tuple[str, int]] = []


def pin_shop(out: Path, command: list[str]) -> None:
    """`agentrt mcp pin shop`: run for real once per test process, its manifest reused.

    The shop server's tools do not depend on its folder, so every shop's manifest
    is the same text; pinning it again for each test only started two more
    processes.
    """
    if not _pinned:
        pinned = agentrt("mcp", "pin", "shop", "--out", str(out), "--", *command)
        assert pinned.returncode == 0, pinned.stderr
        _pinned.append((out.read_text(), out.stat().st_mode & 0o777))
        return
    text, mode = _pinned[0]
    out.write_text(text)
    out.chmod(mode)


class Shop:
    def __init__(self, root: Path, **config: Any) -> None:
        self.root = root
        self.folder = root / "shop"
        self.folder.mkdir()
        self.db = root / "runs.db"
        self.clock_file = root / "clock.txt"
        # Operators decide on the wall clock (`agentrt approve`): the proxy's clock
        # starts there, and the test moves it forward by minutes.
        self.set_time(datetime.now(UTC))
        command = forked(SHOP_SERVER, str(self.folder))
        pin_shop(root / "shop.manifest.json", command)
        write_owner_only(root / "shop.rules.json", RULES)
        self.config = root / "proxy.json"
        write_owner_only(
            self.config,
            {
                "format": "agentrt.mcp.proxy/1",
                "database": "runs.db",
                "servers": {
                    "shop": {
                        "command": command,
                        "manifest": "shop.manifest.json",
                        "rules": "shop.rules.json",
                    }
                },
                **config,
            },
        )

    def set_time(self, when: datetime) -> None:
        self.clock_file.write_text(when.isoformat())

    def advance(self, delta: timedelta) -> None:
        now = datetime.fromisoformat(self.clock_file.read_text().strip())
        self.set_time(now + delta)

    def effects(self) -> list[dict[str, Any]]:
        log = self.folder / "effects.log"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    def params(self, fresh: bool = False) -> StdioServerParameters:
        """How a host starts the proxy: forked, or (`fresh`) a fresh interpreter."""
        args = [str(self.clock_file), "--config", str(self.config)]
        command = [sys.executable, str(PROXY_CHILD), *args] if fresh else forked(PROXY_CHILD, *args)
        return StdioServerParameters(command=command[0], args=command[1:], cwd=str(TESTS.parent))

    @contextlib.asynccontextmanager
    async def host(self, fresh: bool = False, **session_options: Any) -> AsyncIterator[Host]:
        """A host session with the proxy; `session_options` go to the SDK's `ClientSession`
        (an `elicitation_callback`, a `message_handler`, ...). `fresh`: the proxy is a
        fresh interpreter, whose command line in /proc names `proxy_child.py`."""
        with open(self.root / "proxy.stderr", "a") as errlog:
            async with (
                stdio_client(self.params(fresh), errlog=errlog) as (read, write),
                ClientSession(read, write, **session_options) as session,
            ):
                info = await session.initialize()
                yield Host(session, info)

    def pending(self) -> list[dict[str, Any]]:
        """The approvals waiting, as `agentrt approvals --json` lists them."""
        listed = agentrt("approvals", "--db", str(self.db), "--json")
        assert listed.returncode == 0, listed.stderr
        return list(json.loads(listed.stdout)["approvals"])

    def decide(self, verb: str, run_id: str) -> None:
        done = agentrt(verb, run_id, "--db", str(self.db), "--yes", "--by", "operator")
        assert done.returncode == 0, done.stderr

    def decide_only_pending(self, verb: str) -> dict[str, Any]:
        (waiting,) = self.pending()
        self.decide(verb, waiting["run_id"])
        return waiting

    def run_ids(self) -> list[str]:
        listed = agentrt("runs", "--db", str(self.db), "--json", "--limit", "500")
        assert listed.returncode == 0, listed.stderr
        return [run["id"] for run in json.loads(listed.stdout)["runs"]]


class Host:
    """The host side: what a desktop assistant's MCP client sends and receives."""

    def __init__(self, session: ClientSession, info: Any) -> None:
        self.session = session
        self.info = info
        self.seen: list[str] = []

    async def call(self, tool: str, args: dict[str, Any] | None = None, **options: Any) -> Said:
        """`options` go to the SDK's `call_tool` (a `progress_callback`, ...)."""
        result = await self.session.call_tool(tool, args or {}, **options)
        texts = [getattr(block, "text", "") for block in result.content]
        said = Said(bool(result.is_error), "\n".join(texts), result.structured_content)
        self.seen.append(said.text)
        return said

    async def tools(self) -> list[Any]:
        listed = await self.session.list_tools()
        for tool in listed.tools:
            self.seen.append(json.dumps(tool.model_dump(mode="json", by_alias=True)))
        return list(listed.tools)


def pending_now(shop: Shop) -> list[Any]:
    """The approvals waiting, read from the database itself (no process started)."""
    if not shop.db.exists():
        return []
    store = open_existing(shop.db, read_only=True)
    try:
        return [
            a
            for run in store.list_runs()
            for a in store.list_approvals(run.id)
            if a.status == "pending"
        ]
    finally:
        store.close()


def kill_quietly(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)
