"""An MCP server written with the official SDK, for tests/test_mcp.py: a small note store.

Run as `python tests/mcp_notes_server.py CONFIG.json` (stdio) or with
`--http PORT` (streamable HTTP on 127.0.0.1). CONFIG names the notes folder,
which tools to offer, and overrides of their descriptions and annotations,
so a test can make the server grow a tool, drop one or rewrite a description
between two runs. With `grandchild_pidfile` the server starts a long-lived
child process and writes its pid there.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ImageContent, TextContent, ToolAnnotations


def main() -> None:
    config = json.loads(pathlib.Path(sys.argv[1]).read_text())
    notes = pathlib.Path(config["notes_dir"])
    server: MCPServer[Any] = MCPServer("notes")

    def read_note(name: str) -> str:
        return (notes / name).read_text()

    def write_note(name: str, text: str, folder: str = "inbox") -> str:
        target = notes / folder
        target.mkdir(exist_ok=True)
        (target / name).write_text(text)
        with open(notes / "writes.log", "a") as log:
            log.write(json.dumps({"name": name, "text": text, "folder": folder}) + "\n")
        return f"wrote {folder}/{name}"

    def delete_note(name: str) -> str:
        (notes / name).unlink()
        return f"deleted {name}"

    def read_note_v2(name: str, encoding: str = "utf-8") -> str:
        return (notes / name).read_text(encoding=encoding)

    def environment() -> str:
        return json.dumps(dict(os.environ), sort_keys=True)

    def count_notes() -> dict[str, int]:
        return {"count": len(list(notes.iterdir()))}

    def flood(size: int) -> str:
        return "x" * size

    def picture() -> list[Any]:
        return [
            TextContent(type="text", text="before"),
            ImageContent(type="image", data="iVBORw0K", mime_type="image/png"),
            TextContent(type="text", text="after"),
        ]

    async def slow(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "done"

    def die() -> str:
        os._exit(3)

    def broken() -> str:
        raise ToolError("the disk is on fire")

    catalogue = {
        "read_note": (read_note, "Read a note by name.", ToolAnnotations(read_only_hint=True)),
        "write_note": (write_note, "Write a note into a folder.", None),
        "delete_note": (
            delete_note,
            "Delete a note.",
            ToolAnnotations(read_only_hint=False, destructive_hint=True),
        ),
        "count_notes": (count_notes, "Count the notes.", None),
        "flood": (flood, "Return a lot of text.", None),
        "picture": (picture, "Return text and a picture.", None),
        "broken": (broken, "Always fails.", None),
        "slow": (slow, "Take your time.", None),
        "die": (die, "Exit the server mid-call.", None),
        "read_note_v2": (
            read_note_v2,
            "Read a note by name.",
            ToolAnnotations(read_only_hint=True),
        ),
        "environment": (environment, "Show the environment.", None),
    }
    for entry in config["tools"]:
        # "read_note_v2 as read_note" offers a function under another tool's name.
        source, _, name = entry.partition(" as ")
        name = name or source
        fn, description, annotations = catalogue[source]
        description = config.get("descriptions", {}).get(name, description)
        if name in config.get("annotations", {}):
            annotations = ToolAnnotations(**config["annotations"][name])
        server.add_tool(
            fn,
            name=name,
            description=description,
            annotations=annotations,
            structured_output=source not in ("picture", "flood"),
        )

    if "grandchild_pidfile" in config:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        pathlib.Path(config["grandchild_pidfile"]).write_text(str(child.pid))

    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()
    os._exit(0)  # leave the grandchild behind, as a careless server would


if __name__ == "__main__":
    main()
