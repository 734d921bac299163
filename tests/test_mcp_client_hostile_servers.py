"""`agentrt.mcp` as a client of MCP servers that misbehave on purpose.

The server is `tests/mcp_hostile_server.py`, a real process speaking JSON-RPC by
hand over stdio, so it can write what the official SDK never would: messages
whose id is no JSON-RPC id, a request of its own that reuses the id of the
client's request in flight, an output schema whose pattern Python's `re` cannot
match in linear time.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support import forkserver
from tests.support.mcp_proxy import PRELOAD

import agentrt
from agentrt import Decision, ToolCall, mcp
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids

pytestmark = pytest.mark.slow  # every test starts a server process

HOSTILE = Path(__file__).parent / "mcp_hostile_server.py"
PAY = {
    "name": "pay",
    "description": "Pay an invoice.",
    "inputSchema": {"type": "object", "properties": {"invoice": {"type": "string"}}},
}


class Hostile:
    """The hostile server's config (read again at each message it gets) and its effects."""

    def __init__(self, root: Path) -> None:
        self.config = root / "hostile.json"
        self.effects = root / "effects.log"

    def configure(self, tools: list[Any], **extra: Any) -> mcp.Server:
        self.config.write_text(json.dumps({"tools": tools, **extra}))
        return mcp.Server("hostile", command=[sys.executable, str(HOSTILE), str(self.config)])

    def paid(self) -> list[Any]:
        if not self.effects.exists():
            return []
        return [json.loads(line) for line in self.effects.read_text().splitlines()]


@pytest.fixture
def hostile(tmp_path: Path) -> Hostile:
    return Hostile(tmp_path)


def call(args: dict[str, Any]) -> ToolCall:
    return ToolCall(run_id="r", step_id="s", args=args, lease_epoch=1)


async def pin_load_call(server: mcp.Server, rules: dict[str, mcp.Rule], args: Any) -> Any:
    async with mcp.connect(server) as connection:
        manifest = await connection.pin()
        tools, report = await connection.load(manifest, rules)
        assert report.refused == [], report.refused
        (tool,) = tools
        return await tool.call(call(args))


# ---------------------------------------------------------------------------
# Messages whose id is no JSON-RPC id


@pytest.mark.parametrize(
    "junk",
    [
        '{"jsonrpc": "2.0", "id": [{id}], "result": {}}',
        '{"jsonrpc": "2.0", "id": {"of": {id}}, "error": {"code": 1, "message": "x"}}',
    ],
    ids=["list-id", "object-id"],
)
def test_a_message_whose_id_is_no_json_rpc_id_is_ignored_and_the_call_gets_its_answer(
    hostile: Hostile, junk: str
) -> None:
    """Before its answer, the server writes a message with an id that is a list or an
    object (no JSON-RPC id). The call still gets its own answer, once,
    and the connection closes cleanly: a junk line never ends the session with a
    TypeError or an AttributeError from agentrt's reader."""
    server = hostile.configure(
        [PAY], calls={"pay": {"effects": str(hostile.effects), "lines": [junk]}}
    )
    result = asyncio.run(
        pin_load_call(server, {"pay": mcp.Rule("remote_mutation")}, {"invoice": "A-1"})
    )
    assert result.content == "done"
    assert hostile.paid() == [{"invoice": "A-1"}]


@pytest.mark.parametrize(
    "junk",
    [
        '{"jsonrpc": "2.0", "id": [{id}], "result": {"tools": []}}',
        '["\\ud800"]',
        '{"jsonrpc": "2.0", "id": {id}, "x": "\\ud800"}',
    ],
    ids=["list-id", "array-with-a-lone-surrogate", "not-an-answer-with-the-same-id"],
)
def test_junk_written_before_a_tools_list_answer_does_not_stand_for_that_answer(
    hostile: Hostile, junk: str
) -> None:
    """Junk before the `tools/list` answer (an unusable id, an array, a message that is
    no answer but carries the listing's id) is not the listing: the pin reads the
    real answer that follows."""
    server = hostile.configure([PAY], list_lines=[junk])
    manifest = asyncio.run(mcp.pin(server))
    assert sorted(manifest.tools) == ["pay"]


@pytest.mark.parametrize("method", ["ping", "roots/list"])
def test_a_server_request_that_reuses_the_listing_request_id_is_not_taken_for_its_answer(
    hostile: Hostile, method: str
) -> None:
    """JSON-RPC ids are each side's own: a server may send a request of its own (a
    `ping`, a `roots/list`) whose id equals the id of the client's `tools/list` in
    flight. That request is not the listing's answer: the pin reads the answer."""
    request = '{"jsonrpc": "2.0", "id": {id}, "method": "' + method + '"}'
    server = hostile.configure([PAY], list_lines=[request])
    manifest = asyncio.run(mcp.pin(server))
    assert sorted(manifest.tools) == ["pay"]
    assert manifest.tools["pay"].description == "Pay an invoice."


# ---------------------------------------------------------------------------
# The server's output schema is never matched with a backtracking regex

# `^(a+)+$` against forty `a`s and a `!` takes Python's `re` hours (it is checked
# on the event loop, holding the GIL: no timeout can fire); RE2 answers at once.
CATASTROPHIC = "^(a+)+$"
LOOK = {
    "name": "look",
    "description": "Look at the invoices.",
    "inputSchema": {"type": "object"},
    "outputSchema": {
        "type": "object",
        "properties": {"who": {"type": "string", "pattern": CATASTROPHIC}},
    },
}


def test_a_result_checked_against_an_output_schema_with_a_catastrophic_pattern_returns_at_once(
    hostile: Hostile, tmp_path: Path
) -> None:
    """The server declares an output schema whose `pattern` is `^(a+)+$` and answers
    with structured content that nearly matches it. The check of that result never
    runs Python's backtracking `re` on the event loop (it would freeze the loop, its
    timeouts and the lease's heartbeat for hours): the call ends within its 2 s
    timeout, its answer refused because it does not fit the output schema."""
    answer = {
        "content": [{"type": "text", "text": "looked"}],
        "structuredContent": {"who": "a" * 40 + "!"},
    }
    hostile.configure([LOOK], calls={"look": {"answer": answer}})
    script = tmp_path / "look.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio, sys
            from datetime import timedelta
            from agentrt import ToolCall, mcp

            server = mcp.Server("hostile", command=[sys.executable, {str(HOSTILE)!r},
                                                    {str(hostile.config)!r}])

            async def main():
                async with mcp.connect(server) as connection:
                    manifest = await connection.pin()
                    rules = {{"look": mcp.Rule("read_only", timeout=timedelta(seconds=2))}}
                    (tool,), report = await connection.load(manifest, rules)
                    call = ToolCall(run_id="r", step_id="s", args={{}}, lease_epoch=1)
                    try:
                        await asyncio.wait_for(tool.call(call), 2)
                    except Exception as exc:
                        print(type(exc).__name__, exc)

            asyncio.run(main())
            """
        )
    )
    try:
        done = forkserver.run([sys.executable, str(script)], preload=PRELOAD, timeout=20)
    except forkserver.subprocess.TimeoutExpired:
        pytest.fail("the check of the result froze the event loop past its timeout")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("MCPAnswerRefused "), done.stdout
    assert "does not fit the tool's output schema" in done.stdout
    assert "$.who" in done.stdout


def test_a_tool_whose_output_schema_cannot_be_checked_in_linear_time_is_refused_at_load(
    hostile: Hostile,
) -> None:
    """An output schema with a pattern RE2 cannot match (a backreference) would be
    matched by Python's `re` on every result: the tool is refused at load, for that
    tool only, as for an input schema."""
    unsafe = dict(
        LOOK,
        outputSchema={
            "type": "object",
            "properties": {"who": {"type": "string", "pattern": "^(a)\\1$"}},
        },
    )
    server = hostile.configure([unsafe, PAY])

    async def main() -> mcp.Report:
        async with mcp.connect(server) as connection:
            manifest = await connection.pin()
            rules = {"look": mcp.Rule("read_only"), "pay": mcp.Rule("remote_mutation")}
            tools, report = await connection.load(manifest, rules)
            assert [tool.spec.name for tool in tools] == ["hostile_pay"]
            return report

    report = asyncio.run(main())
    ((name, reason),) = report.refused
    assert name == "look"
    assert reason.startswith("its output schema cannot be used: "), reason
    assert "backreference" in reason or "linear" in reason, reason


def test_in_a_driver_run_a_result_against_its_output_schema_is_a_tool_error_not_a_frozen_loop(
    hostile: Hostile, store: agentrt.Store
) -> None:
    """Through a Driver: a read-only tool whose structured content does not fit its
    (linear-time) output schema ends as a tool error saying so; the run goes on."""
    answer = {"content": [{"type": "text", "text": "x"}], "structuredContent": {"who": "b"}}
    tool = dict(
        LOOK,
        outputSchema={
            "type": "object",
            "properties": {"who": {"type": "string", "pattern": "^a+$"}},
        },
    )
    server = hostile.configure([tool], calls={"look": {"answer": answer}})

    async def main() -> agentrt.Run:
        async with mcp.connect(server) as connection:
            manifest = await connection.pin()
            tools, _ = await connection.load(manifest, {"look": mcp.Rule("read_only")})
            driver = agentrt.Driver(
                store=store,
                agent=ScriptedAgent(
                    [Decision.tool_call("hostile_look", {}), Decision.complete("ok")]
                ),
                policy=agentrt.default_policy(),
                tools=tools,
                now=FakeClock(),
                new_id=Ids(),
            )
            return await driver.start("look")

    run = asyncio.run(main())
    assert run.status == "COMPLETED"
    first = store.list_steps(run.id)[0]
    assert first.observation is not None
    assert first.observation.content["failure"] == "error"
    assert "does not fit the tool's output schema" in first.observation.content["error"]


def test_a_result_that_fits_its_output_schema_is_kept_as_its_structured_content(
    hostile: Hostile,
) -> None:
    """The check changes nothing for a result that fits: its structured content stands."""
    answer = {"content": [{"type": "text", "text": "x"}], "structuredContent": {"who": "aaa"}}
    server = hostile.configure([LOOK], calls={"look": {"answer": answer}})
    rules = {"look": mcp.Rule("read_only", timeout=timedelta(seconds=5))}
    result = asyncio.run(pin_load_call(server, rules, {}))
    assert result.content == {"who": "aaa"}


def test_a_result_without_structured_content_from_a_tool_with_an_output_schema_is_refused(
    hostile: Hostile,
) -> None:
    """A tool that declares an output schema and answers with text alone: its answer does
    not say what the schema promised, so it is refused (the call was carried out)."""
    look = {**LOOK, "outputSchema": {"type": "object", "properties": {"who": {"type": "string"}}}}
    server = hostile.configure([look], calls={"look": {"answer": {"content": []}}})

    async def main() -> BaseException | None:
        async with mcp.connect(server) as connection:
            manifest = await connection.pin()
            rules = {"look": mcp.Rule("read_only", timeout=timedelta(seconds=5))}
            (tool,), _ = await connection.load(manifest, rules)
            call = ToolCall(run_id="r", step_id="s", args={}, lease_epoch=1)
            try:
                await tool.call(call)
            except Exception as exc:
                return exc
        return None

    refused = asyncio.run(main())
    assert isinstance(refused, agentrt.MCPAnswerRefused), refused
    assert "has an output schema and its result no structured content" in str(refused)
