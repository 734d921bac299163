"""`agentrt-proxy`: the runtime's controls for an MCP host that has its own loop.

A host (a desktop assistant, an IDE agent) starts `agentrt-proxy --config FILE`
(or `python -m agentrt.mcp.proxy --config FILE`) in place of its MCP servers.
The proxy offers the tools the operator pinned and classified, and every call
is its own run through the Gate: recorded, checked, put to the policy, paused
for a person when the policy says so, executed once. See docs/mcp.md.

- `main(argv)`: the command.
- `serve(config, now=None)`: run the proxy over this process's stdin and stdout.
- `read_proxy_config(path)` -> `ProxyConfig`, `ProxiedServer`: the config file.
- `request_key(tool, args)`: the key that ties an identical re-call to its run.
- `Proxy`, `Answer`: the rules over a Gate, for code that serves them itself.

Needs the MCP SDK (`pip install 'agentrt[mcp]'`).
"""

from __future__ import annotations

from ._proxy import Answer, Proxy, main, request_key, serve
from ._proxy_config import ProxiedServer, ProxyConfig, read_proxy_config

__all__ = [
    "Answer",
    "ProxiedServer",
    "Proxy",
    "ProxyConfig",
    "main",
    "read_proxy_config",
    "request_key",
    "serve",
]

for _name in __all__:
    globals()[_name].__module__ = __name__

if __name__ == "__main__":
    raise SystemExit(main())
