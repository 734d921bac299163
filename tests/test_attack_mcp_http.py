"""Attack: a streamable HTTP server behind the proxy whose answer to a call the transport refuses.

The host is the SDK's `ClientSession` over stdio, the proxy a real child process
(`tests/proxy_child.py`); the upstream a small HTTP server in this process (as in
tests/test_mcp.py) that speaks MCP's JSON-RPC over POST, records each `tools/call`
as its effect, then answers it with more than 8 MiB, or with a redirect.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from tests.support.mcp_proxy import PROXY_CHILD, TESTS, Host, agentrt, forked, write_owner_only

pytestmark = pytest.mark.slow


def hostile_http(mode: str, effects: list[Any]) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _empty(self, code: int, **headers: str) -> None:
            self.send_response(code)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            self._empty(405)

        def do_DELETE(self) -> None:
            self._empty(200)

        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            method, ident = message.get("method"), message.get("id")
            if ident is None:
                self._empty(202)
                return
            if method == "initialize":
                result: Any = {
                    "protocolVersion": message["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "h", "version": "1"},
                }
            elif method == "tools/list":
                schema = {"type": "object", "properties": {"slot": {"type": "string"}}}
                tool = {"name": "book", "description": "Book.", "inputSchema": schema}
                result = {"tools": [tool]}
            elif method == "tools/call":
                effects.append(message["params"]["arguments"])
                if mode == "redirect":
                    self._empty(307, Location="http://127.0.0.1:1/elsewhere")
                    return
                head = json.dumps({"jsonrpc": "2.0", "id": ident})[:-1].encode()
                body = head + b', "result": {"content": [{"type": "text", "text": "'
                body += b"x" * (9 << 20) + b'"}]}}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(body)
                return
            else:
                result = {}
            body = json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@contextlib.asynccontextmanager
async def host(root: Path, clock: Path, config: Path) -> AsyncIterator[Host]:
    command = forked(PROXY_CHILD, str(clock), "--config", str(config))
    params = StdioServerParameters(command=command[0], args=command[1:], cwd=str(TESTS.parent))
    with open(root / "proxy.stderr", "a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield Host(session, None)


@pytest.mark.parametrize("mode", ["huge", "redirect"])
def test_an_http_server_refused_answer_to_a_call_does_not_take_the_whole_proxy_down(
    tmp_path: Path, mode: str
) -> None:
    """A host calls a mutating tool of an HTTP server that books the slot and answers with
    more than 8 MiB (or a redirect). Today the transport's error cancels the proxy's whole
    serve: the proxy exits and the host's session is gone. The call should be answered
    (UNRECORDED for the over-long answer, as over stdio) and the proxy keep serving."""
    effects: list[Any] = []
    server = hostile_http(mode, effects)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/mcp"
        pinned = agentrt("mcp", "pin", "h", "--url", url, "--out", str(tmp_path / "m.json"))
        assert pinned.returncode == 0, pinned.stderr
        rules = {
            "format": "agentrt.mcp.rules/1",
            "tools": {"book": {"side_effect": "local_mutation"}},
        }
        write_owner_only(tmp_path / "r.json", rules)
        config = tmp_path / "proxy.json"
        write_owner_only(
            config,
            {
                "format": "agentrt.mcp.proxy/1",
                "database": "runs.db",
                "servers": {"h": {"url": url, "manifest": "m.json", "rules": "r.json"}},
            },
        )
        clock = tmp_path / "clock.txt"
        clock.write_text(datetime.now(UTC).isoformat())

        async def calls() -> list[Any]:
            said: list[Any] = []
            async with host(tmp_path, clock, config) as h:
                for _ in range(2):
                    try:
                        said.append(await asyncio.wait_for(h.call("h_book", {"slot": "9am"}), 20))
                    except Exception as exc:  # the proxy went away under the host
                        said.append(exc)
                        break
            return said

        with contextlib.suppress(Exception, BaseExceptionGroup):
            said = asyncio.run(calls())
    finally:
        server.shutdown()
        server.server_close()
    stderr = (tmp_path / "proxy.stderr").read_text()
    assert len(said) == 2 and all(hasattr(s, "word") for s in said), (said, stderr[-1500:])
    first, again = said
    assert len(effects) == 1, (first.text, again.text)
    if mode == "huge":
        assert (first.word, again.word) == ("UNRECORDED", "DUPLICATE"), (first.text, again.text)
    else:
        assert first.is_error and first.word in ("UNKNOWN_OUTCOME", "FAILED"), first.text
