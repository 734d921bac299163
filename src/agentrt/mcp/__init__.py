"""MCP tools behind the policy: pin what the operator reviewed, classify it, refuse what changed.

- `Server(name, command=[...] | url=...)`: one MCP server (stdio or streamable HTTP).
- `pin(server) -> Manifest`, `write_manifest`, `read_manifest`: what the server
  offered when the operator reviewed it, hashed over the bytes it sent.
- `Rule`, `read_rules`: the operator's side-effect class and limits per tool.
- `connect(server)`: an async context manager around one live session;
  `await conn.load(manifest, rules) -> (tools, Report)` gives agentrt tools for
  a Driver running inside it. `load(server, manifest, rules)` is the same as
  one context manager; `check(...)` only reports.

The SDK (`agentrt[mcp]`) is imported when a connection is made, never by
`import agentrt` or `import agentrt.mcp`. See docs/mcp.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import MCPAnswerRefused, MCPInputRequired
from ._config import (
    REASON_DESCRIPTION_CHANGED,
    REASON_GONE,
    REASON_SCHEMA_CHANGED,
    Manifest,
    PinnedTool,
    Report,
    Rule,
    Server,
    manifest_text,
    read_manifest,
    read_rules,
    write_manifest,
)

if TYPE_CHECKING:
    from ._client import Connection, MCPTool, check, connect, load, pin

__all__ = [
    "REASON_DESCRIPTION_CHANGED",
    "REASON_GONE",
    "REASON_SCHEMA_CHANGED",
    "Connection",
    "MCPAnswerRefused",
    "MCPInputRequired",
    "MCPTool",
    "Manifest",
    "PinnedTool",
    "Report",
    "Rule",
    "Server",
    "check",
    "connect",
    "load",
    "manifest_text",
    "pin",
    "read_manifest",
    "read_rules",
    "write_manifest",
]

_LAZY = frozenset({"Connection", "MCPTool", "check", "connect", "load", "pin"})

for _name in ("Manifest", "PinnedTool", "Report", "Rule", "Server"):
    globals()[_name].__module__ = __name__


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        try:
            from . import _client
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                f"agentrt.mcp.{name} needs the MCP SDK: pip install 'agentrt[mcp]' ({exc})"
            ) from exc
        value = getattr(_client, name)
        if isinstance(value, type):
            value.__module__ = __name__
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
