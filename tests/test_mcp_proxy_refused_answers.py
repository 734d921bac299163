"""`agentrt-proxy`: a server that carries a call out and answers with what cannot be taken.

The host is the SDK's `ClientSession` over stdio; the proxy a real child process
(`tests/proxy_child.py`). Over stdio the upstream is `tests/mcp_tampered_server.py`,
the SDK's own server whose answers are tampered after the tool did its work; over
streamable HTTP a small server in this process that speaks MCP's JSON-RPC over
POST, records each `tools/call` as its effect, then answers it with more than
8 MiB (as JSON or as one SSE event) or with a redirect.
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

import mcp.client.streamable_http
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from tests.support.mcp_proxy import PROXY_CHILD, TESTS, Host, agentrt, forked, write_owner_only

from agentrt import Gate
from agentrt._clock import wall_clock
from agentrt.mcp._proxy import Proxy, _load, _open, build_policy
from agentrt.mcp.proxy import read_proxy_config

pytestmark = pytest.mark.slow

TAMPERED = TESTS / "mcp_tampered_server.py"
RULES = {
    "format": "agentrt.mcp.rules/1",
    "tools": {"book": {"side_effect": "local_mutation"}, "look": {"side_effect": "read_only"}},
}
HTTP_RULES = {"format": "agentrt.mcp.rules/1", "tools": {"book": {"side_effect": "local_mutation"}}}
BOOK = {"slot": "9am"}


@contextlib.asynccontextmanager
async def host(root: Path, config: Path) -> AsyncIterator[Host]:
    """A host session with a proxy (a real child process) run on `config`."""
    clock = root / "clock.txt"
    clock.write_text(datetime.now(UTC).isoformat())
    command = forked(PROXY_CHILD, str(clock), "--config", str(config))
    params = StdioServerParameters(command=command[0], args=command[1:], cwd=str(TESTS.parent))
    with open(root / "proxy.stderr", "a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            info = await session.initialize()
            yield Host(session, info)


def proxy_config(root: Path, name: str, server: dict[str, Any], rules: Any = RULES) -> Path:
    """The operator's files for one server: its pin (by the real command), rules, config."""
    where = ["--url", server["url"]] if "url" in server else ["--", *server["command"]]
    pinned = agentrt("mcp", "pin", name, "--out", str(root / "m.json"), *where)
    assert pinned.returncode == 0, pinned.stderr
    write_owner_only(root / "r.json", rules)
    config = root / "proxy.json"
    servers = {name: {**server, "manifest": "m.json", "rules": "r.json"}}
    write_owner_only(
        config, {"format": "agentrt.mcp.proxy/1", "database": "runs.db", "servers": servers}
    )
    return config


# ---------------------------------------------------------------------------
# over stdio: a result the MCP SDK refuses


@pytest.mark.parametrize("tamper", ["schema", "shape"])
def test_a_mutating_call_whose_result_the_sdk_refuses_is_unrecorded_and_never_run_twice(
    tmp_path: Path, tamper: str
) -> None:
    """A server books the slot, then answers with a result the MCP SDK refuses: structured
    content that does not fit the tool's declared output schema, or no `CallToolResult` at
    all. The call was carried out: the host is answered `UNRECORDED` (saying why the
    answer is refused), and the identical re-call `DUPLICATE`, never booking twice."""
    folder = tmp_path / "tampered"
    folder.mkdir()
    (folder / "answer").write_text(tamper)
    config = proxy_config(tmp_path, "tampered", {"command": forked(TAMPERED, str(folder))})

    async def calls() -> list[Any]:
        async with host(tmp_path, config) as h:
            return [await h.call("tampered_book", BOOK) for _ in range(2)]

    first, again = asyncio.run(calls())
    effects = (folder / "effects.log").read_text().splitlines()
    assert [json.loads(line) for line in effects] == [{"tool": "book", **BOOK}]
    assert (first.is_error, first.word) == (True, "UNRECORDED"), first.text
    said = {
        "schema": "its structured content does not fit the tool's output schema",
        "shape": "the MCP SDK refused it",
    }
    assert said[tamper] in first.text
    assert (again.is_error, again.word) == (True, "DUPLICATE"), again.text


# ---------------------------------------------------------------------------
# over streamable HTTP: an answer past the bound, or a redirect


def hostile_http(mode: str, effects: list[Any]) -> http.server.ThreadingHTTPServer:
    """An MCP server over HTTP whose `tools/call` is recorded in `effects`, then answered
    as `mode` says: `huge` (a JSON body over 8 MiB), `huge-sse` (one SSE event over
    8 MiB) or `redirect` (a 307 elsewhere)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _empty(self, code: int, **headers: str) -> None:
            self.send_response(code)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _body(self, kind: str, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(body)

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
                if mode == "huge-sse":
                    self._body("text/event-stream", b"event: message\ndata: " + body + b"\n\n")
                else:
                    self._body("application/json", body)
                return
            else:
                result = {}
            body = json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode()
            self._body("application/json", body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@contextlib.contextmanager
def http_proxy(root: Path, mode: str, effects: list[Any]) -> Any:
    """The hostile HTTP server running, pinned, and a proxy config naming it."""
    server = hostile_http(mode, effects)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/mcp"
        yield proxy_config(root, "h", {"url": url}, HTTP_RULES)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("mode", ["huge", "huge-sse", "redirect"])
def test_an_http_servers_refused_answer_to_a_call_is_that_calls_and_the_proxy_goes_on(
    tmp_path: Path, mode: str
) -> None:
    """A host calls a mutating tool of an HTTP server that books the slot and answers with
    more than 8 MiB (a JSON body or one SSE event), or with a redirect. The proxy answers
    that call and keeps serving: an over-long answer is `UNRECORDED` (carried out, as over
    stdio) and its re-call `DUPLICATE`; a redirect is no answer, so the outcome is
    `UNKNOWN_OUTCOME`, and so is the re-call. Either way the slot is booked once."""
    effects: list[Any] = []
    with http_proxy(tmp_path, mode, effects) as config:

        async def calls() -> list[Any]:
            async with host(tmp_path, config) as h:
                return [await asyncio.wait_for(h.call("h_book", BOOK), 30) for _ in range(2)]

        first, again = asyncio.run(calls())
    assert effects == [BOOK]
    if mode == "redirect":
        assert (first.is_error, first.word, again.word) == (
            True,
            "UNKNOWN_OUTCOME",
            "UNKNOWN_OUTCOME",
        )
    else:
        assert (first.is_error, first.word) == (True, "UNRECORDED"), first.text
        assert "longer than 8388608 bytes" in first.text
        assert (again.is_error, again.word) == (True, "DUPLICATE"), again.text


def test_a_server_whose_connection_fails_outright_ends_only_its_own_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever ends one server's connection under the SDK (here the SDK's own reading of
    an answer fails with an error nobody expected) ends that connection only: the call in
    flight is an unknown outcome, a later call of its tools is answered (`BLOCKED` behind
    that unknown outcome), and the proxy's own serving (this task) goes on."""
    effects: list[Any] = []

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the SDK broke")

    async def go() -> list[str]:
        config = read_proxy_config(config_path)
        async with contextlib.AsyncExitStack() as stack:
            store = _open(config, wall_clock)
            stack.callback(store.close)
            tools, unavailable = await _load(config, stack)
            gate = Gate(store=store, policy=build_policy(config.policy), tools=tools)
            specs = {tool.spec.name: tool.spec for tool in tools}
            proxy = Proxy(config, store, gate, specs, unavailable)
            transport = mcp.client.streamable_http.StreamableHTTPTransport
            monkeypatch.setattr(transport, "_handle_json_response", broken)
            said = [await asyncio.wait_for(proxy.call("h_book", BOOK), 30)]
            said.append(await asyncio.wait_for(proxy.call("h_book", {"slot": "10am"}), 30))
            return [answer.word for answer in said]

    with http_proxy(tmp_path, "huge", effects) as config_path:
        words = asyncio.run(go())
    assert words == ["UNKNOWN_OUTCOME", "BLOCKED"]
    assert effects == [BOOK]
