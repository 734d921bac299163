"""`agentrt-proxy`: the rows of issue 25, each against a real MCP server over stdio.

The host is the SDK's `ClientSession` over stdio; the proxy a real child process
(`tests/proxy_child.py`); its upstream `tests/mcp_shop_server.py`, written with
the SDK, which logs every effect before it answers. Operators decide with the
real `agentrt` command. One test per rule, named for it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.support.mcp_proxy import Shop, write_owner_only

from agentrt import ConfigError, open_existing
from agentrt.mcp._proxy import UNRECORDED_RESULT
from agentrt.mcp.proxy import read_proxy_config

pytestmark = pytest.mark.slow

CHARGE = {"account": "acme", "cents": 1200}
SEND = {"to": "bob", "text": "the parcel left"}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# ---------------------------------------------------------------------------
# 1. repeat_window 0 turns the window off


def test_repeat_window_0_is_off_and_an_identical_call_after_an_executed_one_asks_again(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path, repeat_window="0s")

    async def calls(n: int) -> list[Any]:
        async with shop.host() as host:
            return [await host.call("shop_charge", CHARGE) for _ in range(n)]

    assert [said.word for said in run(calls(1))] == ["PENDING_APPROVAL"]
    first = shop.decide_only_pending("approve")
    collected, again = run(calls(2))
    assert (collected.is_error, collected.structured) == (False, {"charged": "acme", "cents": 1200})
    assert (again.is_error, again.word) == (True, "PENDING_APPROVAL")  # not DUPLICATE
    (second,) = shop.pending()
    assert second["run_id"] != first["run_id"]  # a new approval, for a person to decide
    assert shop.effects() == [{"tool": "charge", **CHARGE}]


def test_repeat_window_0_in_any_spelling_is_off_and_a_negative_one_is_refused(
    tmp_path: Path,
) -> None:
    base = {
        "format": "agentrt.mcp.proxy/1",
        "database": "runs.db",
        "servers": {"s": {"command": ["x"], "manifest": "m.json", "rules": "r.json"}},
    }
    path = tmp_path / "proxy.json"
    for off in (0, "0", "0s", "0ms", "0.0m"):
        write_owner_only(path, {**base, "repeat_window": off})
        assert read_proxy_config(path).repeat_window.total_seconds() == 0
    write_owner_only(path, {**base, "repeat_window": "90s"})
    assert read_proxy_config(path).repeat_window.total_seconds() == 90
    for bad in ("-5s", -1, -0.5, "soon", True, None):
        write_owner_only(path, {**base, "repeat_window": bad})
        with pytest.raises(ConfigError, match="repeat_window must be a duration"):
            read_proxy_config(path)


# ---------------------------------------------------------------------------
# 5. UNRECORDED: carried out, its answer refused


def test_unrecorded_a_mutating_call_whose_answer_is_refused_was_carried_out_and_is_no_failure(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path)
    answer = shop.folder / "answer"

    async def calls() -> list[Any]:
        async with shop.host() as host:
            said = []
            for mode, order in (("unusable", "A-1"), ("huge", "B-2")):
                answer.write_text(mode)
                said.append(await host.call("shop_receipt", {"order": order}))
                said.append(await host.call("shop_receipt", {"order": order}))
            return said

    unusable, unusable_again, huge, huge_again = run(calls())
    assert (unusable.is_error, unusable.word) == (True, "UNRECORDED")
    assert "not usable JSON" in unusable.text
    assert (huge.is_error, huge.word) == (True, "UNRECORDED")
    assert "longer than 8388608 bytes" in huge.text
    for again in (unusable_again, huge_again):
        assert (again.is_error, again.word) == (True, "DUPLICATE")
        assert "the server's answer was not recorded" in again.text
    assert shop.effects() == [
        {"tool": "receipt", "order": "A-1"},
        {"tool": "receipt", "order": "B-2"},
    ]  # each carried out once, never again
    assert shop.pending() == []  # nobody was asked
    store = open_existing(shop.db, read_only=True)
    try:
        runs = store.list_runs()
        assert [r.status for r in runs] == ["COMPLETED", "COMPLETED"]  # not failed
        assert {str(r.result).split(" (")[0] for r in runs} == {UNRECORDED_RESULT}
    finally:
        store.close()
