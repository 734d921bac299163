"""`agentrt-proxy`: the cap on pending approvals holds across proxies on one database.

Two proxies, each with its own connection to the file, its own Gate and its
own connection to a real upstream (`tests/mcp_shop_server.py`), share
`max_pending_approvals = 1`. Proxy A's call is held after its key was claimed
and before its approval exists (its policy waits), the moment a count of
pending approvals alone misses; proxy B's call then must be `BLOCKED`: the
claim counts, in its own transaction, the calls on their way to a person too.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from tests.support.mcp_proxy import Shop

from agentrt import Gate, open_existing
from agentrt._clock import wall_clock
from agentrt._policy import PolicyDecision
from agentrt._records import RunView, ToolRequest
from agentrt.mcp._proxy import Answer, Proxy, _load, _open, build_policy
from agentrt.mcp.proxy import read_proxy_config

pytestmark = pytest.mark.slow

CHARGE = {"account": "acme", "cents": 1200}
OTHER = {"account": "bolt", "cents": 300}


class HeldPolicy:
    """The proxy's policy, asked only once the test lets it go."""

    def __init__(self, policy: Any, reached: asyncio.Event, release: asyncio.Event) -> None:
        self.policy = policy
        self.policy_id = policy.policy_id
        self.reached = reached
        self.release = release

    async def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        self.reached.set()
        await self.release.wait()
        decision: PolicyDecision = self.policy.evaluate(request, view)
        return decision


async def two_proxies_calling(shop: Shop) -> tuple[Answer, Answer, Answer]:
    config = read_proxy_config(shop.config)
    reached, release = asyncio.Event(), asyncio.Event()
    async with contextlib.AsyncExitStack() as stack:
        proxies = []
        for held in (True, False):
            store = _open(config, wall_clock)
            stack.callback(store.close)
            tools, unavailable = await _load(config, stack)
            policy: Any = build_policy(config.policy)
            if held:
                policy = HeldPolicy(policy, reached, release)
            gate = Gate(
                store=store,
                policy=policy,
                tools=tools,
                lease_ttl=config.lease_ttl,
                lease_owner="agentrt-proxy",
            )
            specs = {tool.spec.name: tool.spec for tool in tools}
            proxies.append(Proxy(config, store, gate, specs, unavailable))
        a, b = proxies
        first = asyncio.create_task(a.call("shop_charge", CHARGE))
        await asyncio.wait_for(reached.wait(), 60)
        blocked = await b.call("shop_charge", OTHER)
        release.set()
        waiting = await first
        again = await b.call("shop_charge", OTHER)
        return waiting, blocked, again


def test_two_proxies_on_one_database_never_exceed_the_cap_on_pending_approvals(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path, max_pending_approvals=1)
    waiting, blocked, again = asyncio.run(two_proxies_calling(shop))
    assert (waiting.word, waiting.is_error) == ("PENDING_APPROVAL", True)
    assert (blocked.word, blocked.is_error) == ("BLOCKED", True)
    assert blocked.text.startswith("BLOCKED: 1 calls already wait for a person's decision")
    assert (again.word, again.text) == (blocked.word, blocked.text)
    (pending,) = shop.pending()
    assert pending["tool"] == "shop_charge"
    store = open_existing(shop.db, read_only=True)
    try:
        assert len(store.list_runs()) == 1  # a blocked call is not recorded
    finally:
        store.close()
    assert shop.effects() == []
