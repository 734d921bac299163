"""A hand-written stdio MCP server that misbehaves exactly as a test's config says.

Run as `python tests/mcp_hostile_server.py CONFIG.json`. CONFIG is read again at
every message, so a test may change it between two calls of one session:

- `tools`: the raw `tools` list a `tools/list` answers with;
- `list_lines`: raw lines written before the `tools/list` answer;
- `list_writes`: `{path: text}` files the server writes before it answers `tools/list`;
- `calls`: per tool name, what a `tools/call` does: first it appends one JSON line
  to `effects` (fsynced: the side effect), then writes each of `lines` (raw text,
  `{id}` replaced by the call's request id as JSON), then `then`: `answer` (a text
  result, `answer` overrides the whole result object), `exit` (the process ends at
  once, no answer), or `hang` (no answer; the server goes on reading).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys


def send(text: str) -> None:
    sys.stdout.buffer.write(text.encode("utf-8", "surrogatepass") + b"\n")
    sys.stdout.buffer.flush()


def main() -> None:
    path = pathlib.Path(sys.argv[1])
    for line in sys.stdin:
        config = json.loads(path.read_text())
        message = json.loads(line)
        ident, method = message.get("id"), message.get("method")
        if ident is None or "method" not in message:
            continue
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"},
            }
            send(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}))
        elif method == "tools/list":
            for target, text in config.get("list_writes", {}).items():
                pathlib.Path(target).write_text(text)
            for raw in config.get("list_lines", []):
                send(raw.replace("{id}", json.dumps(ident)))
            send(json.dumps({"jsonrpc": "2.0", "id": ident, "result": {"tools": config["tools"]}}))
        elif method == "tools/call":
            name = message["params"]["name"]
            behaviour = config.get("calls", {}).get(name, {})
            if behaviour.get("effects"):
                with open(behaviour["effects"], "a") as log:
                    log.write(json.dumps(message["params"].get("arguments")) + "\n")
                    log.flush()
                    os.fsync(log.fileno())
            for raw in behaviour.get("lines", []):
                send(raw.replace("{id}", json.dumps(ident)))
            then = behaviour.get("then", "answer")
            if then == "exit":
                os._exit(3)
            if then == "answer":
                result = behaviour.get("answer", {"content": [{"type": "text", "text": "done"}]})
                send(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}))
        else:
            error = {"code": -32601, "message": "no such method"}
            send(json.dumps({"jsonrpc": "2.0", "id": ident, "error": error}))


if __name__ == "__main__":
    main()
