"""An MCP server written with the official SDK, for tests/test_mcp_proxy*.py: a small shop.

Run as `python tests/mcp_shop_server.py FOLDER` over stdio. Every tool that
changes something appends one JSON line to FOLDER/effects.log *before* it
answers, so a test counts what really happened. While FOLDER/hang exists,
`charge` and `send` write their effect, then FOLDER/hung.json (this server's
pid and the pid of the proxy that started it), then sleep: a call cut off mid-way.
While FOLDER/hold exists, they wait after writing their effect, until it is
removed, then answer. `price` changes nothing; it appends a line to FOLDER/reads.log, and sleeps too
while FOLDER/hang exists (a read that does not answer in time).
`receipt` writes its effect, then answers as FOLDER/answer says: `huge`, a text
past the client's 8 MiB bound on one line; `long`, a text of 256 KiB (more than
a pipe holds); `unusable`, a text whose JSON on the wire carries a lone surrogate
escape (written by this server's own stdout, the SDK would not write one);
otherwise a plain text.
`confirm` asks the user for input in the middle of the call: an
`elicitation/create` request to the client (`ctx.elicit`), then, whatever the
answer, an error; `confirm_later` answers an `input_required` result instead
(the 2026-07-28 flow, which this server's stdout writes: the SDK sends it only
to a client of that version). Neither changes anything.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp_types import ToolAnnotations
from pydantic import BaseModel

LONE_SURROGATE_MARK = "@@lone-surrogate@@"
INPUT_REQUIRED_MARK = "@@input-required@@"
INPUT_REQUIRED = {
    "resultType": "input_required",
    "inputRequests": {
        "sure": {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": "Really cancel the order?",
                "requestedSchema": {"type": "object", "properties": {"sure": {"type": "boolean"}}},
            },
        }
    },
    "requestState": "cancel",
}


class Wire:
    """The server's stdout: the SDK's JSON lines, the test's mark made a lone surrogate."""

    def write(self, text: str) -> int:
        if INPUT_REQUIRED_MARK in text:
            # The SDK sends `input_required` only to a 2026-07-28 client: say it anyway.
            message = json.loads(text)
            message["result"] = INPUT_REQUIRED
            text = json.dumps(message) + "\n"
        data = text.replace(LONE_SURROGATE_MARK, "\\ud800").encode("utf-8")
        sys.stdout.buffer.write(data)
        return len(text)

    def flush(self) -> None:
        sys.stdout.buffer.flush()


def started_by() -> int:
    """The process that started this server: its parent, or, forked through
    tests/support/forked.py, the parent of the stand-in it was started as."""
    return int(os.environ.get("AGENTRT_FORKSERVER_STARTED_BY") or os.getppid())


def main() -> None:
    folder = pathlib.Path(sys.argv[1])
    server: MCPServer[object] = MCPServer("shop")

    def effect(tool: str, **args: object) -> None:
        with open(folder / "effects.log", "a") as log:
            log.write(json.dumps({"tool": tool, **args}, sort_keys=True) + "\n")
            log.flush()
            os.fsync(log.fileno())
        while (folder / "hold").exists():  # done, not yet answered: the test lets it go
            time.sleep(0.02)
        if (folder / "hang").exists():
            (folder / "hung.json").write_text(
                json.dumps({"pid": os.getpid(), "proxy_pid": started_by()})
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

    class Confirmation(BaseModel):
        sure: bool

    async def confirm(order: str, ctx: Context) -> str:
        answered = await ctx.elicit(f"Really cancel {order}?", Confirmation)
        raise ToolError(f"cancelling {order} needs the user's word ({answered.action})")

    def confirm_later(order: str) -> str:
        return INPUT_REQUIRED_MARK  # answered as an `input_required` result (Wire)

    def receipt(order: str) -> str:
        effect("receipt", order=order)
        answer = folder / "answer"
        mode = answer.read_text().strip() if answer.exists() else ""
        if mode == "huge":
            return "x" * (9 * 1024 * 1024)
        if mode == "long":
            return "y" * (256 * 1024)
        if mode == "unusable":
            return f"receipt for {order} {LONE_SURROGATE_MARK}"
        return f"receipt for {order}"

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
    server.add_tool(receipt, name="receipt", description="Print an order's receipt.")
    server.add_tool(confirm, name="confirm", description="Cancel an order, asking first.")
    server.add_tool(
        confirm_later, name="confirm_later", description="Cancel an order, asking first."
    )

    async def serve() -> None:
        wire: Any = anyio.wrap_file(Wire())  # type: ignore[arg-type]
        async with stdio_server(stdout=wire) as (read, write):
            lowlevel: Any = server._lowlevel_server
            await lowlevel.run(read, write, lowlevel.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    main()
