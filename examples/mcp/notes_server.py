"""An MCP server over a folder of notes, written with the official `mcp` SDK (stdio).

It stands for "someone else's server": agentrt does not trust its names,
descriptions or annotations, it pins them. The folder is `$NOTES_DIR`
(the operator passes it: a stdio server sees only PATH, HOME, TMPDIR and the
variables it is given).

    NOTES_DIR=/tmp/notes python examples/mcp/notes_server.py
"""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

server: MCPServer[object] = MCPServer("notes")


def _folder() -> Path:
    folder = Path(os.environ.get("NOTES_DIR", "notes"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _note(folder: Path, name: str) -> Path:
    if not name or "/" in name or name.startswith("."):
        raise ToolError(f"{name!r} is not a note name")
    return folder / name


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def list_notes() -> list[str]:
    """List the names of the notes, including those in shelves (shelf/name)."""
    root = _folder()
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_note(name: str) -> str:
    """Read the note called `name`."""
    path = _note(_folder(), name)
    if not path.is_file():
        raise ToolError(f"there is no note {name!r}")
    return path.read_text()


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def write_note(name: str, text: str, shelf: str = "inbox") -> str:
    """Write `text` to the note `name` on a shelf (a subfolder)."""
    folder = _folder() / shelf
    folder.mkdir(exist_ok=True)
    _note(folder, name).write_text(text)
    return f"wrote {shelf}/{name}"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def delete_note(name: str) -> str:
    """Delete the note called `name`."""
    _note(_folder(), name).unlink()
    return f"deleted {name}"


if __name__ == "__main__":
    server.run()
