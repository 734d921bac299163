"""An MCP server (the official SDK) whose one tool answers with the `_meta` its call carried.

python tests/mcp_meta_server.py
"""

from __future__ import annotations

import json

from mcp.server.mcpserver import Context, MCPServer


def main() -> None:
    server: MCPServer[object] = MCPServer("meta")

    def stamp(entry: str, ctx: Context) -> str:
        meta = ctx.request_context.meta or {}
        return json.dumps({"entry": entry, "meta": dict(meta)}, sort_keys=True, default=str)

    server.add_tool(stamp, name="stamp", description="Stamp an entry; answer the call's _meta.")
    server.run()


if __name__ == "__main__":
    main()
