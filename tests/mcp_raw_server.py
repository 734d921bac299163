"""A hand-written stdio MCP server that sends exactly the bytes a test gives it.

The official SDK cannot write a number beyond float64 or a misbehaving
listing, so this one speaks JSON-RPC itself: `python tests/mcp_raw_server.py
CONFIG.json`, where CONFIG holds `pages` (each the raw JSON text of one
`tools/list` result), `repeat_cursor` (every page points back to page 1) and
`flood_bytes` (after the handshake, one line of that many bytes).
"""

from __future__ import annotations

import json
import pathlib
import sys


def send(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main() -> None:
    config = json.loads(pathlib.Path(sys.argv[1]).read_text())
    pages: list[str] = config["pages"]
    for line in sys.stdin:
        message = json.loads(line)
        ident, method = message.get("id"), message.get("method")
        if ident is None:
            continue
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "1"},
            }
            send(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}))
        elif method == "tools/list":
            if config.get("flood_bytes"):
                send("x" * config["flood_bytes"])
                continue
            cursor = (message.get("params") or {}).get("cursor")
            index = int(cursor[1:]) if cursor else 0
            page = pages[index]
            following = "p1" if config.get("repeat_cursor") else f"p{index + 1}"
            if index + 1 < len(pages) or config.get("repeat_cursor"):
                page = page[: page.rindex("}")] + f', "nextCursor": "{following}"}}'
            send(f'{{"jsonrpc": "2.0", "id": {json.dumps(ident)}, "result": {page}}}')
        else:
            error = {"code": -32601, "message": "no such method"}
            send(json.dumps({"jsonrpc": "2.0", "id": ident, "error": error}))


if __name__ == "__main__":
    main()
