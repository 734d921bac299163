"""Be the host: start `agentrt-proxy` over stdio with the SDK's client, list its tools, call one.

What a desktop assistant or an IDE agent does with the proxy, in twenty lines,
so an operator can try a config before giving it to a host:

    python examples/mcp/call_through_proxy.py ~/mcp-proxy/proxy.json \
        time_get_current_time '{"timezone": "Europe/Paris"}'

Prints the tools the proxy offers, then the answer: the tool's result, or a
line starting with one word (PENDING_APPROVAL, DENIED, DUPLICATE, ...).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def main(config: str, tool: str, args: dict[str, object]) -> int:
    command = shutil.which("agentrt-proxy", path=str(Path(sys.executable).parent))
    params = StdioServerParameters(command=command or "agentrt-proxy", args=["--config", config])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = (await session.list_tools()).tools
        print("tools:", ", ".join(tool.name for tool in tools))
        result = await session.call_tool(tool, args)
        for block in result.content:
            print(getattr(block, "text", block))
        return 1 if result.is_error else 0


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    arguments = json.loads(sys.argv[3]) if len(sys.argv) == 4 else {}
    raise SystemExit(asyncio.run(main(sys.argv[1], sys.argv[2], arguments)))
