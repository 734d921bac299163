"""Attack: a downstream server whose answer to a mutating call the MCP SDK refuses.

The host is the SDK's `ClientSession` over stdio; the proxy a real child process
(`tests/proxy_child.py`); its upstream `tests/mcp_attack_mcp_server.py`, the SDK's
own server whose stdout is tampered after the tool did its work.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from tests.support.mcp_proxy import PROXY_CHILD, TESTS, Host, agentrt, forked, write_owner_only

from agentrt import open_existing

pytestmark = pytest.mark.slow

HOSTILE = TESTS / "mcp_attack_mcp_server.py"
RULES = {
    "format": "agentrt.mcp.rules/1",
    "tools": {"book": {"side_effect": "local_mutation"}, "look": {"side_effect": "read_only"}},
}


class Hostile:
    """One folder as an operator keeps it: the pinned hostile server, its rules, the config."""

    def __init__(self, root: Path, **config: Any) -> None:
        self.root = root
        self.folder = root / "hostile"
        self.folder.mkdir()
        self.db = root / "runs.db"
        self.clock_file = root / "clock.txt"
        self.clock_file.write_text(datetime.now(UTC).isoformat())
        command = forked(HOSTILE, str(self.folder))
        pinned = agentrt("mcp", "pin", "hostile", "--out", str(root / "m.json"), "--", *command)
        assert pinned.returncode == 0, pinned.stderr
        write_owner_only(root / "r.json", RULES)
        self.config = root / "proxy.json"
        write_owner_only(
            self.config,
            {
                "format": "agentrt.mcp.proxy/1",
                "database": "runs.db",
                "servers": {
                    "hostile": {"command": command, "manifest": "m.json", "rules": "r.json"}
                },
                **config,
            },
        )

    def answer(self, mode: str) -> None:
        (self.folder / "answer").write_text(mode)

    def effects(self) -> list[Any]:
        log = self.folder / "effects.log"
        return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []

    @contextlib.asynccontextmanager
    async def host(self) -> AsyncIterator[Host]:
        args = [str(self.clock_file), "--config", str(self.config)]
        command = forked(PROXY_CHILD, *args)
        params = StdioServerParameters(command=command[0], args=command[1:], cwd=str(TESTS.parent))
        with open(self.root / "proxy.stderr", "a") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                info = await session.initialize()
                yield Host(session, info)

    def runs(self) -> list[tuple[str, str | None]]:
        store = open_existing(self.db, read_only=True)
        try:
            return [(r.status, r.reason) for r in store.list_runs()]
        finally:
            store.close()


@pytest.mark.parametrize("mode", ["schema", "shape"])
def test_a_mutating_call_whose_answer_the_sdk_refuses_is_unrecorded_and_never_run_twice(
    tmp_path: Path, mode: str
) -> None:
    """A server books the slot, then answers with a result the MCP SDK refuses (structured
    content that does not fit the tool's output schema, or no CallToolResult at all). Today
    the proxy says FAILED and the identical re-call books the slot a second time; the call
    was carried out, so it should be UNRECORDED and the re-call DUPLICATE, as for an answer
    agentrt itself refuses."""
    hostile = Hostile(tmp_path)
    hostile.answer(mode)

    async def calls() -> list[Any]:
        async with hostile.host() as host:
            return [await host.call("hostile_book", {"slot": "9am"}) for _ in range(2)]

    first, again = asyncio.run(calls())
    assert len(hostile.effects()) == 1, (first.text, again.text)
    assert (first.is_error, first.word) == (True, "UNRECORDED"), first.text
    assert again.word == "DUPLICATE", again.text
