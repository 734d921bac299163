"""An MCP server receives the step's operation id in the call's `_meta` (issue 24, decision 0067).

The server is `tests/mcp_meta_server.py` (the official SDK) in a real process;
its tool answers with the `_meta` its call carried.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.support.mcp_proxy import forked

import agentrt
from agentrt import Decision, mcp
from agentrt.scripted import ScriptedAgent

META_SERVER = Path(__file__).parent / "mcp_meta_server.py"


def test_an_mcp_tool_sends_the_steps_operation_id_in_the_calls_meta(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    server = mcp.Server("meta", command=forked(META_SERVER))

    async def main() -> agentrt.Run:
        manifest = await mcp.pin(server)
        rules = {"stamp": mcp.Rule("remote_mutation")}
        async with mcp.load(server, manifest, rules) as (tools, _):
            allow = agentrt.PolicyDecision.allow()
            driver = agentrt.Driver(
                store=store,
                agent=ScriptedAgent(
                    [
                        Decision.tool_call("meta_stamp", {"entry": "a"}),
                        Decision.tool_call("meta_stamp", {"entry": "a"}),
                        Decision.complete(),
                    ]
                ),
                policy=agentrt.SideEffectPolicy(
                    {agentrt.SideEffect.REMOTE_MUTATION: allow}, policy_id="allow/1"
                ),
                tools=tools,
            )
            return await driver.start("stamp twice")

    run = asyncio.run(main())
    assert run.status == "COMPLETED"
    steps = store.list_steps(run.id)[:2]
    seen = []
    for step in steps:
        assert step.observation is not None
        content = step.observation.content
        assert isinstance(content, dict)
        seen.append(json.loads(content["result"]))
    assert [s["entry"] for s in seen] == ["a", "a"]
    ops = [s["meta"].get("agentrt/operation_id") for s in seen]
    assert ops == [agentrt.operation_id(run.id, s.id) for s in steps]
    assert ops[0] != ops[1]
