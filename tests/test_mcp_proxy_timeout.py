"""`agentrt-proxy`: a call whose tool does not answer in time (decision 0047).

A mutating call that timed out had started, so it may have taken effect: its
run pauses on an `interrupted_side_effect` approval instead of failing, the
identical re-call is answered `UNKNOWN_OUTCOME` and runs nothing until an
operator decides with the `agentrt` command (approve: it runs once more;
reject: never). A read-only call that timed out simply runs again.

The upstream is `tests/mcp_shop_server.py` (the SDK), set to sleep inside its
tools past the rule's timeout after logging what it did; every host is the
SDK's client session in front of a real proxy process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from tests.support.mcp_proxy import RULES, Said, Shop, write_owner_only

from agentrt import Gate, open_existing
from agentrt._clock import wall_clock
from agentrt.mcp._proxy import Answer, Proxy, _load, _open, build_policy
from agentrt.mcp.proxy import read_proxy_config

pytestmark = pytest.mark.slow

SEND = {"to": "bob", "text": "the parcel left"}
PRICE = {"item": "tea"}

TIMED_OUT = (
    "INTERRUPTED: the tool did not answer in time (timed out after 1s); whether it took "
    "effect is unknown. It will not run again until a person decides. Tell the user."
)
HELD = (
    "UNKNOWN_OUTCOME: this call started earlier and did not answer in time, so whether it "
    "took effect is unknown. It will not run again until a person decides. Tell the user; "
    "do not work around it with other arguments."
)
READ_TIMED_OUT = (
    "INTERRUPTED: the tool did not answer in time (timed out after 1s). It changes "
    "nothing; calling again makes a new attempt."
)


def slow_shop(tmp_path: Path) -> Shop:
    """The shop with a one-second timeout on `send` and `price`, and its tools hanging."""
    shop = Shop(tmp_path)
    rules: dict[str, Any] = json.loads(json.dumps(RULES))
    rules["tools"]["send"]["timeout"] = "1s"
    rules["tools"]["price"]["timeout"] = "1s"
    write_owner_only(tmp_path / "shop.rules.json", rules)
    (shop.folder / "hang").touch()
    return shop


def host_calls(shop: Shop, *calls: tuple[str, dict[str, Any]]) -> list[Said]:
    """One host (one proxy process, one upstream) making `calls` in order."""

    async def go() -> list[Said]:
        async with shop.host() as host:
            return [await host.call(tool, args) for tool, args in calls]

    return list(asyncio.run(go()))


def reads(shop: Shop) -> int:
    log = shop.folder / "reads.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def run_record(shop: Shop) -> list[tuple[str, list[str]]]:
    store = open_existing(shop.db, read_only=True)
    try:
        return [
            (run.status, [step.status for step in store.list_steps(run.id)])
            for run in store.list_runs()
        ]
    finally:
        store.close()


def time_out_a_send(shop: Shop) -> None:
    """`send` times out once; two identical re-calls (two hosts) run nothing."""
    (timed_out,) = host_calls(shop, ("shop_send", SEND))
    assert shop.effects() == [{"tool": "send", **SEND}]  # it did take effect
    (shop.folder / "hang").unlink()  # the upstream would answer now: it must not be asked
    again, status = host_calls(
        shop, ("shop_send", SEND), ("gate_status", {"tool": "shop_send", "arguments": SEND})
    )
    (third,) = host_calls(shop, ("shop_send", SEND))
    assert shop.effects() == [{"tool": "send", **SEND}]  # never run again on its own
    assert (timed_out.is_error, timed_out.text) == (True, TIMED_OUT)
    assert (again.is_error, again.text) == (True, HELD)
    assert (third.is_error, third.text) == (True, HELD)
    assert (status.is_error, status.text) == (False, HELD)
    assert shop.effects() == [{"tool": "send", **SEND}]
    assert run_record(shop) == [("WAITING_FOR_APPROVAL", ["failed", "awaiting_approval"])]


def test_a_timed_out_mutating_call_is_not_run_again_and_an_operator_approval_runs_it_once(
    tmp_path: Path,
) -> None:
    shop = slow_shop(tmp_path)
    time_out_a_send(shop)
    (waiting,) = shop.pending()
    assert (waiting["kind"], waiting["tool"]) == ("interrupted_side_effect", "shop_send")

    shop.decide("approve", waiting["run_id"])
    sent, duplicate = host_calls(shop, ("shop_send", SEND), ("shop_send", SEND))
    assert (sent.is_error, sent.structured) == (False, {"result": "sent to bob"})
    assert (duplicate.is_error, duplicate.word) == (True, "DUPLICATE")
    assert shop.effects() == [{"tool": "send", **SEND}, {"tool": "send", **SEND}]
    assert run_record(shop) == [("COMPLETED", ["failed", "done", "done"])]


def test_a_timed_out_mutating_call_rejected_by_the_operator_never_runs_again(
    tmp_path: Path,
) -> None:
    shop = slow_shop(tmp_path)
    time_out_a_send(shop)
    shop.decide_only_pending("reject")
    rejected, again = host_calls(shop, ("shop_send", SEND), ("shop_send", SEND))
    assert (rejected.is_error, rejected.word) == (True, "REJECTED")
    assert (again.is_error, again.word) == (True, "REJECTED")
    assert shop.effects() == [{"tool": "send", **SEND}]
    assert [status for status, _ in run_record(shop)] == ["CANCELLED"]


def test_a_timed_out_read_only_call_runs_again_on_the_identical_re_call(tmp_path: Path) -> None:
    shop = slow_shop(tmp_path)
    (first,) = host_calls(shop, ("shop_price", PRICE))
    (second,) = host_calls(shop, ("shop_price", PRICE))
    assert (first.is_error, first.text) == (True, READ_TIMED_OUT)
    assert (second.is_error, second.text) == (True, READ_TIMED_OUT)
    assert reads(shop) == 2
    (shop.folder / "hang").unlink()
    (answered,) = host_calls(shop, ("shop_price", PRICE))
    assert (answered.is_error, answered.structured) == (False, {"item": "tea", "cents": 250})
    assert reads(shop) == 3
    assert sorted(status for status, _ in run_record(shop)) == ["COMPLETED", "FAILED", "FAILED"]


def test_a_timed_out_mutating_call_with_no_steps_left_to_hold_it_is_asked_again_at_once(
    tmp_path: Path,
) -> None:
    """A run whose step limit leaves no room to hold the call ends, and the call is put to
    a person at once in a new run of its key (an in-process proxy, two-step runs): the tool
    is never left blocked with nothing for an operator to act on (issue 25 item 4)."""
    shop = slow_shop(tmp_path)

    async def go() -> list[Answer]:
        config = read_proxy_config(shop.config)
        async with contextlib.AsyncExitStack() as stack:
            store = _open(config, wall_clock)
            stack.callback(store.close)
            tools, unavailable = await _load(config, stack)
            gate = Gate(store=store, policy=build_policy(config.policy), tools=tools)
            proxy = Proxy(config, store, gate, {t.spec.name: t.spec for t in tools}, unavailable)
            proxy.limits = dataclasses.replace(proxy.limits, max_steps=2)
            first = await proxy.call("shop_send", SEND)
            (shop.folder / "hang").unlink()
            said = [first, await proxy.call("shop_send", SEND)]
            said.append(await proxy.call("shop_send", {**SEND, "to": "carol"}))
            await asyncio.to_thread(shop.decide_only_pending, "approve")
            said.append(await proxy.call("shop_send", SEND))
            return said

    first, again, blocked, approved = asyncio.run(go())
    assert (first.is_error, first.text) == (True, TIMED_OUT)
    assert (again.is_error, again.text) == (True, HELD)
    assert (blocked.is_error, blocked.word) == (True, "BLOCKED")
    assert (approved.is_error, approved.structured) == (False, {"result": "sent to bob"})
    assert shop.effects() == [{"tool": "send", **SEND}, {"tool": "send", **SEND}]
    assert sorted(run_record(shop)) == [
        ("COMPLETED", ["done", "done"]),  # asked again, approved, run once more
        ("FAILED", ["failed", "done"]),  # no step left to hold it
    ]
