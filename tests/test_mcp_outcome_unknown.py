"""`agentrt.mcp`: a server lost after a call was sent is an unknown outcome (decision 0054).

The server is `tests/mcp_ledger_server.py` (the official SDK), a real process
that appends and fsyncs its ledger line and then exits in the middle of the
call. A mutating tool's run then waits on an `interrupted_side_effect`
approval saying the connection was lost after the call was sent; a read-only
tool's is an ordinary error; a call that fails before its request leaves (the
connection already gone, a refused connection, a server that never started)
is an ordinary error too. Only the server's answer to the call (`result` or
`error`) ends its unknown outcome: a message of the server's own that carries
the call's id (a request, junk) does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from tests.support.mcp_proxy import forked

import agentrt
from agentrt import Decision, OutcomeUnknown, ToolCall, mcp
from agentrt._errors import MCPServerError, MCPToolError
from agentrt.mcp._transport import RawCapture
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids

pytestmark = pytest.mark.slow  # every test starts a server process

LEDGER_SERVER = Path(__file__).parent / "mcp_ledger_server.py"
RULES = {"append": mcp.Rule("local_mutation"), "peek": mcp.Rule("read_only")}
LOST_APPEND = (
    "the connection to MCP server 'ledger' was lost after the call to 'append' was sent "
    "(Connection closed)"
)


class Ledger:
    def __init__(self, root: Path) -> None:
        self.folder = root / "ledger"
        self.folder.mkdir()

    def server(self) -> mcp.Server:
        return mcp.Server("ledger", command=forked(LEDGER_SERVER, str(self.folder)))

    def die_mid_call(self) -> None:
        (self.folder / "die").touch()

    def lines(self, name: str = "ledger.log") -> list[Any]:
        log = self.folder / name
        return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path)


def drive(store: agentrt.Store, server: mcp.Server, decisions: list[Any]) -> agentrt.Run:
    async def main() -> agentrt.Run:
        manifest = await mcp.pin(server)
        async with mcp.load(server, manifest, RULES) as (tools, report):
            assert sorted(dict(report.registered)) == ["append", "peek"]
            driver = agentrt.Driver(
                store=store,
                agent=ScriptedAgent(decisions),
                policy=agentrt.default_policy(),
                tools=tools,
                now=FakeClock(),
                new_id=Ids(),
            )
            return await driver.start("keep the ledger")

    return asyncio.run(main())


def test_a_mutating_call_whose_server_exits_after_its_write_waits_for_a_person_and_ran_once(
    ledger: Ledger, any_store: agentrt.Store
) -> None:
    store = any_store
    server = ledger.server()
    ledger.die_mid_call()
    run = drive(store, server, [Decision.tool_call("ledger_append", {"entry": "rent"})])
    assert (run.status, run.reason) == ("WAITING_FOR_APPROVAL", "")
    assert ledger.lines() == [{"entry": "rent"}]  # appended and fsynced, then the server died
    (step,) = store.list_steps(run.id)
    assert step.status == "awaiting_approval" and step.observation is not None
    assert step.observation.content == {
        "previous_status": "executing",
        "failure": "outcome_unknown",
        "error": LOST_APPEND,
    }
    (approval,) = store.pending_approvals(run.id)
    assert approval.kind == "interrupted_side_effect"
    assert approval.capability == {"tool": "ledger_append", "args": {"entry": "rent"}}
    assert approval.presentation == {
        "tool": "ledger_append",
        "args": {"entry": "rent"},
        "side_effect": "local_mutation",
        "notice": (
            f"This call started, and its tool could not tell whether it took effect: "
            f"{LOST_APPEND}. Approving runs it again with these arguments; rejecting ends "
            "the run."
        ),
    }
    types = [e.type for e in store.list_events(run_id=run.id)]
    assert types[5:] == [
        "step.tool_started",
        "step.tool_finished",
        "step.policy",
        "approval.requested",
    ]

    # A person approves; the program restarts with a new server: it runs once more.
    agentrt.approve(store, run.id, approval.id, by="ops", shown_hash=approval.hash)
    (ledger.folder / "die").unlink()

    async def resume() -> agentrt.Run:
        async with mcp.load(server, await mcp.pin(server), RULES) as (tools, _):
            driver = agentrt.Driver(
                store=store,
                agent=ScriptedAgent([Decision.tool_call("ledger_append", {"entry": "rent"})]),
                policy=agentrt.default_policy(),
                tools=tools,
                now=FakeClock(),
                new_id=Ids("b"),
            )
            return await driver.resume(run.id)

    asyncio.run(resume())
    assert ledger.lines() == [{"entry": "rent"}, {"entry": "rent"}]
    assert store.list_steps(run.id)[0].status == "done"


def test_a_read_only_call_whose_server_exits_is_an_ordinary_error_and_the_next_call_fails_at_once(
    ledger: Ledger, store: agentrt.Store
) -> None:
    ledger.die_mid_call()
    decisions = [
        Decision.tool_call("ledger_peek", {}),
        Decision.tool_call("ledger_append", {"entry": "rent"}),
        Decision.complete(),
    ]
    run = drive(store, ledger.server(), decisions)
    assert run.status == "COMPLETED"
    assert store.list_approvals(run.id) == []
    peek, append, _ = store.list_steps(run.id)
    assert peek.observation is not None and append.observation is not None
    assert (peek.status, peek.observation.content) == (
        "failed",
        {
            "tool": "ledger_peek",
            "error": (
                "OutcomeUnknown: the connection to MCP server 'ledger' was lost after the call "
                "to 'peek' was sent (Connection closed)"
            ),
            "failure": "error",
        },
    )
    # The server is gone: the append never left, so it is an ordinary error, not a pause.
    assert (append.status, append.observation.content) == (
        "failed",
        {
            "tool": "ledger_append",
            "error": "MCPToolError: the call to 'append' failed: Connection closed",
            "failure": "error",
        },
    )
    assert ledger.lines("reads.log") == [{"peek": True}] and ledger.lines() == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def http_ledger(ledger: Ledger) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = _free_port()
    process = subprocess.Popen(
        forked(LEDGER_SERVER, str(ledger.folder), "--http", str(port)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline and process.poll() is None, "server did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(timeout=10)


def test_an_http_call_whose_connection_is_refused_never_left_and_is_an_ordinary_error(
    ledger: Ledger,
) -> None:
    with http_ledger(ledger) as (url, process):
        server = mcp.Server("ledger", url=url)

        seen: list[Any] = []

        async def main() -> None:
            # Closing a session whose server is gone fails too (MCPServerError), after the call.
            with contextlib.suppress(MCPServerError):
                async with mcp.load(server, await mcp.pin(server), RULES) as (tools, _):
                    append = next(t for t in tools if t.spec.name == "ledger_append")
                    call = ToolCall(run_id="r", step_id="s", args={"entry": "a"}, lease_epoch=1)
                    seen.append((await append.call(call)).content)
                    process.terminate()
                    process.wait(timeout=10)
                    try:
                        await asyncio.wait_for(append.call(call), 30)
                    except Exception as exc:
                        seen.append(exc)

        asyncio.run(main())
    first, refused = seen
    assert first == {"result": "appended a"}
    assert type(refused) is MCPToolError and not isinstance(refused, OutcomeUnknown)
    assert str(refused).startswith("the call to 'append' failed: could not be reached: ")
    assert str(refused).endswith("; the call was not sent")
    assert ledger.lines() == [{"entry": "a"}]


def test_an_http_server_that_exits_mid_call_is_an_unknown_outcome(ledger: Ledger) -> None:
    with http_ledger(ledger) as (url, _process):
        server = mcp.Server("ledger", url=url)

        async def main() -> None:
            async with mcp.load(server, await mcp.pin(server), RULES) as (tools, _):
                append = next(t for t in tools if t.spec.name == "ledger_append")
                call = ToolCall(run_id="r", step_id="s", args={"entry": "a"}, lease_epoch=1)
                ledger.die_mid_call()
                with pytest.raises(OutcomeUnknown) as raised:
                    await asyncio.wait_for(append.call(call), 30)
                assert raised.value.detail.startswith(
                    "the connection to MCP server 'ledger' was lost after the call to 'append' "
                    "was sent ("
                )

        asyncio.run(main())
    assert ledger.lines() == [{"entry": "a"}]


def call_append_as_the_server_says(ledger: Ledger, say: str) -> BaseException:
    """Call `append` over stdio; the server writes `say` (with the call's id) and exits."""
    server = ledger.server()
    raised: list[BaseException] = []

    async def main() -> None:
        async with mcp.load(server, await mcp.pin(server), RULES) as (tools, _):
            append = next(t for t in tools if t.spec.name == "ledger_append")
            call = ToolCall(run_id="r", step_id="s", args={"entry": "a"}, lease_epoch=1)
            ledger.die_mid_call()
            (ledger.folder / "say").write_text(say)
            try:
                await asyncio.wait_for(append.call(call), 30)
            except Exception as exc:
                raised.append(exc)

    asyncio.run(main())
    assert ledger.lines() == [{"entry": "a"}]
    (exc,) = raised
    return exc


@pytest.mark.parametrize(
    "say",
    [
        # A request of the server's own that agentrt cannot read (a repeated key) but the
        # SDK can: the SDK answers it, with the same id, to a server on its way out.
        '{"jsonrpc": "2.0", "id": {id}, "method": "ping", "params": {"_meta": {"k": 1, "k": 2}}}',
        # A request of the server's own that neither can read (a lone surrogate).
        '{"jsonrpc": "2.0", "id": {id}, "method": "ping", "params": {"_meta": {"k": "\\ud800"}}}',
        # Junk carrying the id: neither a request nor an answer.
        '{"jsonrpc": "2.0", "id": {id}, "junk": "\\ud800"}',
    ],
    ids=["request-sdk-answers", "request-unreadable", "junk"],
)
def test_only_an_answer_to_the_call_ends_its_unknown_outcome_not_a_server_message_with_its_id(
    ledger: Ledger, say: str
) -> None:
    exc = call_append_as_the_server_says(ledger, say)
    assert isinstance(exc, OutcomeUnknown), repr(exc)
    assert exc.detail == LOST_APPEND


def test_an_answer_to_the_call_agentrt_cannot_read_is_still_its_answer_not_an_unknown_outcome(
    ledger: Ledger,
) -> None:
    # A repeated key: agentrt refuses the line, the SDK reads it and raises the error.
    error = '{"code": -32000, "message": "no", "message": "full"}'
    say = '{"jsonrpc": "2.0", "id": {id}, "error": ' + error + "}"
    exc = call_append_as_the_server_says(ledger, say)
    assert type(exc) is MCPToolError and not isinstance(exc, OutcomeUnknown)
    assert str(exc) == "the call to 'append' failed: full"


def test_the_clients_answer_to_a_server_request_that_fails_to_leave_keeps_the_calls_mark() -> None:
    """The client's answer to a server's request may carry the id of a call in flight
    (another id space); its failed write says nothing of that call (decision 0054)."""
    capture = RawCapture()
    call = mcp_types.JSONRPCRequest(
        jsonrpc="2.0", id=3, method="tools/call", params={"name": "append", "arguments": {}}
    )
    capture.sent(call)
    answer = mcp_types.JSONRPCResponse(jsonrpc="2.0", id=3, result={})
    capture.sent(answer)
    capture.not_sent(answer)  # the server is gone: the write of the ping's answer failed
    assert capture.unanswered(3)
    capture.not_sent(call)  # the call's own failed write: it never left
    assert not capture.unanswered(3)


def test_a_server_that_cannot_start_is_an_ordinary_error_before_any_call(tmp_path: Path) -> None:
    missing = mcp.Server("ledger", command=[str(tmp_path / "no-such-server")])

    async def main() -> None:
        async with mcp.connect(missing):
            pass

    with pytest.raises(MCPServerError, match="cannot start") as raised:
        asyncio.run(main())
    assert not isinstance(raised.value, OutcomeUnknown)
