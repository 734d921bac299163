"""An MCP server written with the official SDK that can die in the middle of a call.

Run as `python tests/mcp_ledger_server.py FOLDER` over stdio (or with
`--http PORT`, streamable HTTP on 127.0.0.1). `append` writes
one JSON line to FOLDER/ledger.log and fsyncs it before it answers; `peek`
changes nothing and appends to FOLDER/reads.log. While FOLDER/die exists, a
tool does its work (the line is on disk), then the process exits at once
(`os._exit`, no answer sent): the connection is lost after the call was sent.
If FOLDER/say exists too, its text, with `{id}` replaced by the call's own
request id, is written to stdout as one line just before the exit: a message
of the server's own (a request, junk) that carries the id of the call in flight.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations


def main() -> None:
    folder = pathlib.Path(sys.argv[1])
    wire = os.dup(1)  # the SDK points fd 1 away from the client while it serves
    server: MCPServer[object] = MCPServer("ledger")

    def write(name: str, entry: dict[str, object], ctx: Context) -> None:
        with open(folder / name, "a") as log:
            log.write(json.dumps(entry, sort_keys=True) + "\n")
            log.flush()
            os.fsync(log.fileno())
        if (folder / "die").exists():
            say = folder / "say"
            if say.exists():
                ident = json.dumps(ctx.request_context.request_id)
                os.write(wire, say.read_bytes().replace(b"{id}", ident.encode()) + b"\n")
            os._exit(3)

    def append(entry: str, ctx: Context) -> str:
        write("ledger.log", {"entry": entry}, ctx)
        return f"appended {entry}"

    def peek(ctx: Context) -> str:
        write("reads.log", {"peek": True}, ctx)
        ledger = folder / "ledger.log"
        lines = ledger.read_text().splitlines() if ledger.exists() else []
        return f"{len(lines)} lines"

    server.add_tool(append, name="append", description="Append an entry to the ledger.")
    server.add_tool(
        peek,
        name="peek",
        description="Count the ledger's entries.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()


if __name__ == "__main__":
    main()
