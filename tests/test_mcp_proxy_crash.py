"""Rule 3 of `agentrt-proxy`: the proxy SIGKILLed during a mutating call, restarted.

A real proxy process (started by the SDK's stdio client, as a host starts it)
is killed with SIGKILL while its upstream is inside `send`, after the effect
was written and before the answer. The restarted proxy takes the dead owner's
run over: the identical re-call is answered `UNKNOWN_OUTCOME` until an
operator decides with the `agentrt` command; then the next identical call
proceeds as decided, and the call is never run again on the proxy's own say.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.support import forkserver
from tests.support.mcp_proxy import PRELOAD, Shop, kill_quietly

from agentrt import open_existing

pytestmark = pytest.mark.slow

SEND = {"to": "bob", "text": "the parcel left"}
CRASH_CHILD = Path(__file__).resolve().parent / "proxy_crash_child.py"


def kill_the_proxy_mid_call(shop: Shop) -> dict[str, Any]:
    """Start a host, call `send` with the server set to hang, SIGKILL the proxy inside it."""
    (shop.folder / "hang").touch()
    hung = shop.folder / "hung.json"
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        async with shop.host(fresh=True) as host:  # its command line is named below
            call = asyncio.create_task(host.call("shop_send", SEND))
            for _ in range(1200):
                if hung.exists():
                    break
                await asyncio.sleep(0.05)
            seen.update(json.loads(hung.read_text()))
            # The upstream's parent is the proxy this host started: name no other process.
            cmdline = Path(f"/proc/{seen['proxy_pid']}/cmdline").read_bytes()
            assert b"proxy_child.py" in cmdline
            os.kill(seen["proxy_pid"], signal.SIGKILL)
            kill_quietly(seen["pid"])  # the orphaned upstream, asleep in the tool
            with contextlib.suppress(Exception):
                seen["answer"] = await call

    with contextlib.suppress(Exception, BaseExceptionGroup):
        asyncio.run(scenario())
    (shop.folder / "hang").unlink()
    return seen


def run_record(shop: Shop) -> tuple[str, list[str]]:
    store = open_existing(shop.db, read_only=True)
    try:
        (run,) = store.list_runs()
        return run.status, [step.status for step in store.list_steps(run.id)]
    finally:
        store.close()


def calls(shop: Shop, n: int) -> list[Any]:
    async def go() -> list[Any]:
        async with shop.host() as host:
            return [await host.call("shop_send", SEND) for _ in range(n)] + [
                await host.call("gate_status", {"tool": "shop_send", "arguments": SEND})
            ]

    return list(asyncio.run(go()))


def test_rule_3_a_proxy_killed_mid_call_answers_unknown_outcome_until_an_operator_approves(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path)
    seen = kill_the_proxy_mid_call(shop)
    assert "answer" not in seen  # the host never got an answer
    assert shop.effects() == [{"tool": "send", **SEND}]  # it took effect; nobody knows
    assert run_record(shop) == ("RUNNING", ["executing"])  # an honest record of a crash

    first, second, status = calls(shop, 2)
    assert (first.is_error, first.word) == (True, "UNKNOWN_OUTCOME")
    assert (second.is_error, second.word) == (True, "UNKNOWN_OUTCOME")
    assert (status.is_error, status.word) == (False, "UNKNOWN_OUTCOME")
    assert len(shop.effects()) == 1  # never run again on the proxy's own say
    (waiting,) = shop.pending()
    assert waiting["kind"] == "interrupted_side_effect"

    shop.decide("approve", waiting["run_id"])
    approved, duplicate, done = calls(shop, 2)
    assert (approved.is_error, approved.structured) == (False, {"result": "sent to bob"})
    assert duplicate.word == "DUPLICATE"
    assert done.word == "DONE"
    assert shop.effects() == [{"tool": "send", **SEND}, {"tool": "send", **SEND}]
    assert run_record(shop) == ("COMPLETED", ["done", "done"])


def test_rule_3_a_proxy_killed_mid_call_rejected_by_the_operator_never_runs_it_again(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path)
    kill_the_proxy_mid_call(shop)
    first, status = calls(shop, 1)
    assert first.word == "UNKNOWN_OUTCOME"
    shop.decide_only_pending("reject")
    rejected, again, status = calls(shop, 2)
    assert (rejected.word, again.word, status.word) == ("REJECTED", "REJECTED", "REJECTED")
    assert shop.effects() == [{"tool": "send", **SEND}]
    assert run_record(shop)[0] == "CANCELLED"


def leave_a_run_behind(shop: Shop, mode: str) -> None:
    """A process doing the proxy's work for `shop_send`, SIGKILLed at `mode`."""
    ready = shop.root / "ready"
    # Forked from the prepared process (tests/support/forkserver.py): a real process
    # of its own, SIGKILLed by its pid.
    child = forkserver.server(*PRELOAD).spawn(
        [sys.executable, str(CRASH_CHILD), str(shop.config), mode, str(ready)],
        cwd=str(CRASH_CHILD.parent.parent),
        stdout=1,
        stderr=2,
    )
    try:
        for _ in range(1200):
            if ready.exists() or child.poll() is not None:
                break
            time.sleep(0.05)
        assert ready.exists(), "the child did not reach its point"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)


def test_rule_3_a_dead_run_whose_call_never_started_is_carried_out_by_the_re_call(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path)
    leave_a_run_behind(shop, "allowed")
    # Died between the verdict and the tool's start: the step's claim and decision were
    # kept for the commit that starts the tool (decision 0088), so nothing of it is here.
    assert run_record(shop) == ("RUNNING", [])
    assert shop.effects() == []
    sent, duplicate, status = calls(shop, 2)
    assert (sent.is_error, sent.structured) == (False, {"result": "sent to bob"})
    assert (duplicate.word, status.word) == ("DUPLICATE", "DONE")
    assert shop.effects() == [{"tool": "send", **SEND}]
    assert run_record(shop) == ("COMPLETED", ["done", "done"])


def test_rule_3_a_dead_run_whose_call_finished_is_settled_from_its_record_not_run_again(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path)
    leave_a_run_behind(shop, "finished")
    assert run_record(shop) == ("RUNNING", ["done"])
    assert len(shop.effects()) == 1
    settled, again, status = calls(shop, 2)
    assert (settled.is_error, settled.word) == (True, "DUPLICATE")
    assert "sent to bob" in settled.text  # the result the host never received
    assert (again.word, status.word) == ("DUPLICATE", "DONE")
    assert len(shop.effects()) == 1
    assert run_record(shop) == ("COMPLETED", ["done", "done"])
