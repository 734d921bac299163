"""The proxy's runs re-check like any other: its own policy the same, a stricter table not."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.support.mcp_proxy import Shop

import agentrt
from agentrt.mcp._proxy import build_policy
from agentrt.mcp.proxy import read_proxy_config

pytestmark = pytest.mark.slow

CHARGE = {"account": "acme", "cents": 1200}


def test_a_proxy_run_rechecks_the_same_with_its_table_and_differs_with_a_stricter_one(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path)

    async def call() -> str:
        async with shop.host() as host:
            return (await host.call("shop_charge", CHARGE)).word

    assert asyncio.run(call()) == "PENDING_APPROVAL"
    shop.decide_only_pending("approve")
    asyncio.run(call())  # collected: carried out, exactly what was approved
    (run_id,) = shop.run_ids()
    table = dict(read_proxy_config(shop.config).policy)
    store = agentrt.open_store(shop.db)
    try:
        assert store.get_run(run_id).origin == "mcp-proxy"
        same = agentrt.recheck(store, run_id, build_policy(table))
        assert [(e.tool, e.verdict) for e in same.evaluations] == [
            ("shop_charge", "same"),  # the pause
            ("shop_charge", "same"),  # asked again when the approved call was collected
        ]
        assert not same.policy_changed and same.ended
        stricter = agentrt.recheck(
            store, run_id, build_policy({**table, "remote_mutation": "deny"})
        )
        assert [e.verdict for e in stricter.evaluations] == ["different", "different"]
        assert stricter.policy_changed
        assert [e.now.outcome if e.now else "" for e in stricter.evaluations] == ["deny", "deny"]
    finally:
        store.close()
