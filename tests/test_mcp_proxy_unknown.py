"""`agentrt-proxy`: an upstream server lost after a call was sent (decision 0054).

The upstream is `tests/mcp_ledger_server.py` (the SDK): `append` writes its
ledger line and fsyncs it, then, while FOLDER/die exists, the process exits
without answering. The mutating call had started, so it may have taken
effect: its run waits on an `interrupted_side_effect` approval, the call and
every identical re-call (even from a restarted proxy, whose new server would
answer) are `UNKNOWN_OUTCOME` and run nothing until an operator decides with
the `agentrt` command. A read lost that way is `FAILED` and may be called
again; a call made after the server is gone never left, and is an ordinary
`FAILED`. Every host is the SDK's client session in front of a real proxy
process (`tests/support/mcp_proxy.py`).
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.support.mcp_proxy import Said, Shop, agentrt, forked, write_owner_only

from agentrt import open_existing

pytestmark = pytest.mark.slow

LEDGER_SERVER = Path(__file__).resolve().parent / "mcp_ledger_server.py"
RULES = {
    "format": "agentrt.mcp.rules/1",
    "tools": {
        "append": {"side_effect": "local_mutation"},
        "peek": {"side_effect": "read_only"},
    },
}
RENT = {"entry": "rent"}
HELD = (
    "UNKNOWN_OUTCOME: the connection to the server was lost after this call was sent, so "
    "whether it took effect is unknown. It will not run again until a person decides. Tell "
    "the user; do not work around it with other arguments."
)
READ_LOST = (
    "FAILED: the connection to the server was lost before this call answered. It changes "
    "nothing; calling again makes a new attempt."
)
LOST = (
    "the connection to MCP server 'ledger' was lost after the call to 'append' was sent "
    "(Connection closed)"
)


class LedgerShop(Shop):
    """`Shop`'s folder layout and hosts, with the ledger server upstream; the record in
    `database` (a SQLite file's path or a PostgreSQL URL) when given, else `runs.db`."""

    def __init__(self, root: Path, database: str = "") -> None:
        self.root = root
        self.folder = root / "ledger"
        self.folder.mkdir()
        self.db: Path | str = database or root / "runs.db"
        self.clock_file = root / "clock.txt"
        self.set_time(datetime.now(UTC))
        command = forked(LEDGER_SERVER, str(self.folder))
        pinned = agentrt(
            "mcp", "pin", "ledger", "--out", str(root / "ledger.manifest.json"), "--", *command
        )
        assert pinned.returncode == 0, pinned.stderr
        write_owner_only(root / "ledger.rules.json", RULES)
        self.config = root / "proxy.json"
        write_owner_only(
            self.config,
            {
                "format": "agentrt.mcp.proxy/1",
                "database": database or "runs.db",
                "servers": {
                    "ledger": {
                        "command": command,
                        "manifest": "ledger.manifest.json",
                        "rules": "ledger.rules.json",
                    }
                },
            },
        )

    def lines(self, name: str = "ledger.log") -> list[Any]:
        log = self.folder / name
        return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def host_calls(shop: Shop, *calls: tuple[str, dict[str, Any]]) -> list[Said]:
    """One host (one proxy process, one upstream) making `calls` in order."""

    async def go() -> list[Said]:
        async with shop.host() as host:
            return [await host.call(tool, args) for tool, args in calls]

    return list(asyncio.run(go()))


def record(shop: Shop) -> list[tuple[str, str, list[str]]]:
    store = open_existing(shop.db, read_only=True)
    try:
        return [
            (run.status, run.reason, [step.status for step in store.list_steps(run.id)])
            for run in store.list_runs()
        ]
    finally:
        store.close()


def lose_an_append(shop: LedgerShop) -> None:
    """`append` writes its line and the server dies; re-calls from a restarted proxy run nothing."""
    (shop.folder / "die").touch()
    (lost,) = host_calls(shop, ("ledger_append", RENT))
    assert (lost.is_error, lost.text) == (True, HELD)
    assert shop.lines() == [RENT]  # it did take effect
    (shop.folder / "die").unlink()  # a new server would answer now: it must not be asked
    again, status = host_calls(
        shop, ("ledger_append", RENT), ("gate_status", {"tool": "ledger_append", "arguments": RENT})
    )
    (third,) = host_calls(shop, ("ledger_append", RENT))
    assert (again.is_error, again.text) == (True, HELD)
    assert (third.is_error, third.text) == (True, HELD)
    assert (status.is_error, status.text) == (False, HELD)
    assert shop.lines() == [RENT]  # one line: never run again on its own
    assert record(shop) == [("WAITING_FOR_APPROVAL", "", ["awaiting_approval"])]


def test_a_mutating_call_whose_server_exits_mid_call_is_held_for_a_person_across_a_restart(
    tmp_path: Path, database: str
) -> None:
    shop = LedgerShop(tmp_path, database)
    lose_an_append(shop)
    (waiting,) = shop.pending()
    assert (waiting["kind"], waiting["tool"]) == ("interrupted_side_effect", "ledger_append")
    store = open_existing(shop.db, read_only=True)
    try:
        (run,) = store.list_runs()
        (approval,) = store.list_approvals(run.id)
        assert approval.presentation == {
            "tool": "ledger_append",
            "args": RENT,
            "side_effect": "local_mutation",
            "notice": (
                f"This call started, and its tool could not tell whether it took effect: {LOST}. "
                "Approving runs it again with these arguments; rejecting ends the run."
            ),
        }
        events = [(e.type, e.payload) for e in store.list_events(run_id=run.id)]
        (step,) = store.list_steps(run.id)
        assert step.observation is not None
        assert step.observation.content == {
            "previous_status": "executing",
            "failure": "outcome_unknown",
            "error": LOST,
        }
    finally:
        store.close()
    assert [t for t, _ in events] == [
        "run.created",
        "run.started",
        "step.started",
        "step.decided",
        "step.policy",
        "step.tool_started",
        "step.tool_finished",
        "step.policy",
        "approval.requested",
    ]
    assert events[6][1]["error"] == LOST
    assert events[7][1]["policy_id"] == "agentrt:interrupted_side_effect"
    assert events[8][1]["reason"] == (
        "the tool could not tell whether the call took effect; outcome unknown"
    )

    shop.decide("approve", waiting["run_id"])
    appended, duplicate = host_calls(shop, ("ledger_append", RENT), ("ledger_append", RENT))
    assert (appended.is_error, appended.structured) == (False, {"result": "appended rent"})
    assert (duplicate.is_error, duplicate.word) == (True, "DUPLICATE")
    assert shop.lines() == [RENT, RENT]  # once more, because a person approved it
    assert record(shop) == [("COMPLETED", "goal_completed", ["done", "done"])]


def test_a_lost_mutating_call_rejected_by_the_operator_never_runs_again(tmp_path: Path) -> None:
    shop = LedgerShop(tmp_path)
    lose_an_append(shop)
    shop.decide_only_pending("reject")
    rejected, again = host_calls(shop, ("ledger_append", RENT), ("ledger_append", RENT))
    assert (rejected.is_error, rejected.word) == (True, "REJECTED")
    assert (again.is_error, again.word) == (True, "REJECTED")
    assert shop.lines() == [RENT]
    assert [status for status, _, _ in record(shop)] == ["CANCELLED"]


def test_a_lost_read_is_failed_and_a_call_after_the_server_is_gone_never_left(
    tmp_path: Path,
) -> None:
    shop = LedgerShop(tmp_path)
    (shop.folder / "die").touch()
    lost, after = host_calls(shop, ("ledger_peek", {}), ("ledger_append", RENT))
    assert (lost.is_error, lost.text) == (True, READ_LOST)
    # The server is gone: this request never left, so it is an ordinary failure, not held.
    assert (after.is_error, after.text) == (
        True,
        "FAILED: the call to 'append' failed: Connection closed",
    )
    assert shop.lines("reads.log") == [{"peek": True}] and shop.lines() == []
    assert shop.pending() == []
    assert [(status, steps) for status, _, steps in record(shop)] == [
        ("FAILED", ["failed", "done"]),
        ("FAILED", ["failed", "done"]),
    ]
    (shop.folder / "die").unlink()
    (again,) = host_calls(shop, ("ledger_peek", {}))  # a read may simply be asked again
    assert (again.is_error, again.structured) == (False, {"result": "0 lines"})
