"""An MCP server whose answers the SDK refuses, for tests/test_mcp_proxy_refused_answers.py.

Run as `python tests/mcp_tampered_server.py FOLDER` over stdio. Written with
the official SDK (`MCPServer`); what it writes to stdout passes through `Wire`,
which changes the answers the way FOLDER/answer says, after the tool did its work:

- `book(slot)` changes something: it appends one JSON line to FOLDER/effects.log
  (fsynced) before it answers. Its result has an output schema (`Booking`).
- `look()` changes nothing; it appends to FOLDER/reads.log.

FOLDER/answer (read at each answer):
- `schema`: the call's `structuredContent` no longer fits its declared output schema
  (`booked` becomes a number);
- `shape`: the call's result is no `CallToolResult` at all (`content` is a string);
- otherwise the SDK's own answer.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp_types import ToolAnnotations
from pydantic import BaseModel

MARK = "@@tamper@@"


class Booking(BaseModel):
    booked: str
    note: str


class Wire:
    def __init__(self, folder: pathlib.Path) -> None:
        self.folder = folder

    def write(self, text: str) -> int:
        if MARK in text:
            answer = self.folder / "answer"
            mode = answer.read_text().strip() if answer.exists() else ""
            message = json.loads(text)
            result = message.get("result") or {}
            if mode == "schema":
                result["structuredContent"] = {"booked": 5, "note": "tampered"}
            elif mode == "shape":
                message["result"] = {"content": "booked, but said oddly"}
            text = json.dumps(message).replace(MARK, "") + "\n"
        sys.stdout.buffer.write(text.encode("utf-8"))
        return len(text)

    def flush(self) -> None:
        sys.stdout.buffer.flush()


def main() -> None:
    folder = pathlib.Path(sys.argv[1])
    server: MCPServer[object] = MCPServer("hostile")

    def book(slot: str) -> Booking:
        with open(folder / "effects.log", "a") as log:
            log.write(json.dumps({"tool": "book", "slot": slot}) + "\n")
            log.flush()
            os.fsync(log.fileno())
        return Booking(booked=slot, note=MARK)

    def look() -> str:
        with open(folder / "reads.log", "a") as log:
            log.write("look\n")
        return "nothing booked"

    server.add_tool(book, name="book", description="Book a slot.")
    server.add_tool(
        look,
        name="look",
        description="Look at the bookings.",
        annotations=ToolAnnotations(read_only_hint=True),
    )

    async def serve() -> None:
        wire: Any = anyio.wrap_file(Wire(folder))  # type: ignore[arg-type]
        async with stdio_server(stdout=wire) as (read, write):
            lowlevel: Any = server._lowlevel_server
            await lowlevel.run(read, write, lowlevel.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    main()
