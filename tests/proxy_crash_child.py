"""A proxy's run left behind at a chosen moment, for tests/test_mcp_proxy_crash.py.

Run as `python tests/proxy_crash_child.py CONFIG MODE READY_FILE`: does what
`agentrt-proxy` does for one `shop_send` call (the key claimed, the run begun
through a Gate over the real server, the call proposed and allowed), then, with
MODE `allowed`, stops before the tool starts, or with MODE `finished`, right
after the tool's outcome was recorded and before the run was ended. It writes
READY_FILE and sleeps, for the test to SIGKILL it there.
"""

from __future__ import annotations

import asyncio
import pathlib
import sys

from agentrt import Decision, Gate, Limits, open_store
from agentrt._clock import new_id, wall_clock
from agentrt.mcp import connect, read_manifest, read_rules
from agentrt.mcp._proxy import build_policy
from agentrt.mcp.proxy import read_proxy_config, request_key

SEND = {"to": "bob", "text": "the parcel left"}


async def main(config_path: str, mode: str, ready: pathlib.Path) -> None:
    config = read_proxy_config(config_path)
    store = open_store(config.database)
    store.migrate_proxy(wall_clock())
    (proxied,) = config.servers
    async with connect(proxied.server) as connection:
        tools, _ = await connection.load(read_manifest(proxied.manifest), read_rules(proxied.rules))
        gate = Gate(store, build_policy(config.policy), tools, lease_owner="agentrt-proxy")
        run_id = new_id()
        key = request_key("shop_send", SEND)
        assert store.claim_request(
            key, None, run_id, "shop_send", "local_mutation", wall_clock()
        ).claimed
        session = await gate.begin("shop_send", Limits(max_steps=4), run_id=run_id)
        step = await session.step()
        assert step is not None
        verdict = await step.propose(Decision.tool_call("shop_send", SEND))
        assert verdict.outcome == "allowed"
        if mode == "finished":
            await step.execute()
        ready.write_text(run_id)
        await asyncio.sleep(600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])))
