"""A hand-written stdio MCP server whose tool listing changes in the middle of a session.

`python tests/mcp_changing_server.py CONFIG.json`, where CONFIG holds `listings` (two
lists of tool objects, as `tools/list` returns them), `journal` (a file each `tools/call`
is appended to, one JSON line, before it is answered) and `notify` (whether the change is
announced). A call to its tool `flip` switches to the second listing and, with `notify`,
sends `notifications/tools/list_changed` before answering (`announcement`, if given, is
the line it writes for it, verbatim).
"""

from __future__ import annotations

import json
import pathlib
import sys


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    config = json.loads(pathlib.Path(sys.argv[1]).read_text())
    listings: list[list[dict[str, object]]] = config["listings"]
    journal = pathlib.Path(config["journal"])
    current = 0
    for line in sys.stdin:
        message = json.loads(line)
        ident, method = message.get("id"), message.get("method")
        if ident is None:
            continue
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "changing", "version": "1"},
            }
            send({"jsonrpc": "2.0", "id": ident, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": listings[current]}})
        elif method == "tools/call":
            params = message["params"]
            with journal.open("a") as f:
                f.write(
                    json.dumps({"tool": params["name"], "args": params.get("arguments")}) + "\n"
                )
            if params["name"] == "flip":
                current = 1
                if config.get("notify") and config.get("announcement"):
                    sys.stdout.write(config["announcement"] + "\n")
                elif config.get("notify"):
                    send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            text = {"type": "text", "text": f"{params['name']} done"}
            send({"jsonrpc": "2.0", "id": ident, "result": {"content": [text]}})
        else:
            error = {"code": -32601, "message": "no such method"}
            send({"jsonrpc": "2.0", "id": ident, "error": error})


if __name__ == "__main__":
    main()
