"""An MCP server written with the official SDK, for tests/test_mcp_proxy*.py: a small shop.

Run as `python tests/mcp_shop_server.py FOLDER` over stdio. Every tool that
changes something appends one JSON line to FOLDER/effects.log *before* it
answers, so a test counts what really happened. While FOLDER/hang exists,
`charge` and `send` write their effect, then FOLDER/hung.json (this server's
pid and its parent's, the proxy), then sleep: a call cut off mid-way.
`price` changes nothing; it appends a line to FOLDER/reads.log, and sleeps too
while FOLDER/hang exists (a read that does not answer in time).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations


def main() -> None:
    folder = pathlib.Path(sys.argv[1])
    server: MCPServer[object] = MCPServer("shop")

    def effect(tool: str, **args: object) -> None:
        with open(folder / "effects.log", "a") as log:
            log.write(json.dumps({"tool": tool, **args}, sort_keys=True) + "\n")
            log.flush()
            os.fsync(log.fileno())
        if (folder / "hang").exists():
            (folder / "hung.json").write_text(
                json.dumps({"pid": os.getpid(), "proxy_pid": os.getppid()})
            )
            time.sleep(600)

    def price(item: str) -> dict[str, object]:
        with open(folder / "reads.log", "a") as log:
            log.write(json.dumps({"tool": "price", "item": item}) + "\n")
        if (folder / "hang").exists():
            time.sleep(600)
        return {"item": item, "cents": 250}

    def send(to: str, text: str) -> str:
        effect("send", to=to, text=text)
        return f"sent to {to}"

    def charge(account: str, cents: int) -> dict[str, object]:
        effect("charge", account=account, cents=cents)
        return {"charged": account, "cents": cents}

    def wipe() -> str:
        effect("wipe")
        return "wiped"

    def jam() -> str:
        raise ToolError("the printer is jammed")

    server.add_tool(
        price,
        name="price",
        description="Look up an item's price.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    server.add_tool(send, name="send", description="Send a message.")
    server.add_tool(charge, name="charge", description="Charge an account.")
    server.add_tool(
        wipe,
        name="wipe",
        description="Delete everything.",
        annotations=ToolAnnotations(destructive_hint=True),
    )
    server.add_tool(jam, name="jam", description="Print a receipt.")
    server.run()


if __name__ == "__main__":
    main()
