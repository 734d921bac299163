"""`agentrt-proxy`: the answer for each request-key rule, in order, to a host over stdio.

The host is the SDK's `ClientSession` over stdio; the proxy a real child
process (`tests/proxy_child.py`: the command's `main` with a clock the test
writes to a file); its upstream `tests/mcp_shop_server.py`, written with the
SDK, which logs every effect before it answers. Operators decide with the real
`agentrt` command. The crash case is in `test_mcp_proxy_crash.py`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from tests.support import forkserver
from tests.support.mcp_proxy import (
    PRELOAD,
    START,
    Host,
    Shop,
    agentrt,
    kill_quietly,
    write_owner_only,
)

from agentrt import ConfigError, InsecureModeError, open_store
from agentrt._canonical import canonical_json
from agentrt._store.postgres._migrations import PROXY_MIGRATIONS as POSTGRES_PROXY_MIGRATIONS
from agentrt._store.sqlite._migrations import PROXY_MIGRATIONS
from agentrt.mcp.proxy import read_proxy_config, request_key

pytestmark = pytest.mark.slow

CHARGE = {"account": "acme", "cents": 1200}
SEND = {"to": "bob", "text": "the parcel left"}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# ---------------------------------------------------------------------------
# Rule 1: a decided approval is collected by the identical re-call


def test_rule_1_an_approved_call_is_carried_out_by_the_identical_re_call(tmp_path: Path) -> None:
    shop = Shop(tmp_path)

    async def before() -> list[str]:
        async with shop.host() as host:
            first = await host.call("shop_charge", CHARGE)
            second = await host.call("shop_charge", CHARGE)
            return [first.word, second.word]

    assert run(before()) == ["PENDING_APPROVAL", "PENDING_APPROVAL"]
    assert shop.effects() == []
    waiting = shop.decide_only_pending("approve")
    assert waiting["tool"] == "shop_charge"

    async def after() -> tuple[Any, Any]:
        async with shop.host() as host:
            return await host.call("shop_charge", CHARGE), await host.call("shop_charge", CHARGE)

    collected, again = run(after())
    assert (collected.is_error, collected.structured) == (
        False,
        {"charged": "acme", "cents": 1200},
    )
    assert again.word == "DUPLICATE"
    assert shop.effects() == [{"tool": "charge", "account": "acme", "cents": 1200}]


def test_rule_1_a_rejected_call_is_answered_rejected_and_never_runs(tmp_path: Path) -> None:
    shop = Shop(tmp_path)

    async def call() -> Any:
        async with shop.host() as host:
            return await host.call("shop_charge", CHARGE)

    assert run(call()).word == "PENDING_APPROVAL"
    shop.decide_only_pending("reject")
    said = run(call())
    assert (said.is_error, said.word) == (True, "REJECTED")
    assert shop.effects() == []


def test_rule_1_an_approval_nobody_decided_in_time_is_answered_expired(tmp_path: Path) -> None:
    shop = Shop(tmp_path, approval_ttl="1h")

    async def call() -> str:
        async with shop.host() as host:
            return (await host.call("shop_charge", CHARGE)).word

    assert run(call()) == "PENDING_APPROVAL"
    shop.advance(timedelta(minutes=59))
    assert run(call()) == "PENDING_APPROVAL"
    shop.advance(timedelta(minutes=2))
    assert run(call()) == "EXPIRED"
    assert shop.pending() == []
    assert shop.effects() == []


# ---------------------------------------------------------------------------
# Rule 2: an identical call while the first one runs


def test_rule_2_an_identical_call_while_the_first_runs_is_answered_in_progress(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path)
    (shop.folder / "hang").touch()
    hung = shop.folder / "hung.json"

    async def scenario() -> tuple[str, str, str, Any]:
        async with shop.host() as host, shop.host() as other_host:
            first = asyncio.create_task(host.call("shop_send", SEND))
            for _ in range(600):
                if hung.exists():
                    break
                await asyncio.sleep(0.05)
            same_process = (await host.call("shop_send", SEND)).word
            # another host's proxy, on the same database: the run's lease is live
            other_process = (await other_host.call("shop_send", SEND)).word
            status = (await host.call("gate_status", {"tool": "shop_send", "arguments": SEND})).word
            kill_quietly(json.loads(hung.read_text())["pid"])  # the tool's server gives up
            return same_process, other_process, status, await first

    same_process, other_process, status, first = run(scenario())
    assert (same_process, other_process, status) == ("IN_PROGRESS", "IN_PROGRESS", "IN_PROGRESS")
    assert first.is_error
    assert len(shop.effects()) == 1


# ---------------------------------------------------------------------------
# Rule 3 (takeover of a dead owner): tests/test_mcp_proxy_crash.py


# ---------------------------------------------------------------------------
# Rule 4: rejected or expired within the repeat window


def test_rule_4_a_rejected_call_is_rejected_again_within_the_window_and_new_after_it(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path, repeat_window="10m")

    async def call() -> str:
        async with shop.host() as host:
            return (await host.call("shop_charge", CHARGE)).word

    assert run(call()) == "PENDING_APPROVAL"
    shop.decide_only_pending("reject")
    shop.advance(timedelta(minutes=9))
    assert run(call()) == "REJECTED"
    shop.advance(timedelta(minutes=2))
    assert run(call()) == "PENDING_APPROVAL"  # a new run, a new approval for a person
    assert len(shop.pending()) == 1
    assert shop.effects() == []


def test_rule_4_an_expired_call_is_expired_again_within_the_window(tmp_path: Path) -> None:
    shop = Shop(tmp_path, approval_ttl="1m", repeat_window="10m")

    async def call() -> str:
        async with shop.host() as host:
            return (await host.call("shop_charge", CHARGE)).word

    assert run(call()) == "PENDING_APPROVAL"
    shop.advance(timedelta(minutes=2))
    assert run(call()) == "EXPIRED"
    shop.advance(timedelta(minutes=5))
    assert run(call()) == "EXPIRED"
    shop.advance(timedelta(minutes=10))
    assert run(call()) == "PENDING_APPROVAL"


# ---------------------------------------------------------------------------
# Rule 5: a mutating call already carried out


def test_rule_5_a_mutating_call_carried_out_is_a_duplicate_within_the_window_only(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path, repeat_window="5m")

    async def call(tool: str, args: dict[str, Any]) -> Any:
        async with shop.host() as host:
            return await host.call(tool, args)

    first = run(call("shop_send", SEND))
    assert (first.is_error, first.structured) == (False, {"result": "sent to bob"})
    shop.advance(timedelta(minutes=4))
    duplicate = run(call("shop_send", SEND))
    assert (duplicate.is_error, duplicate.word) == (True, "DUPLICATE")
    assert "sent to bob" in duplicate.text  # the model learns what the first call returned
    assert len(shop.effects()) == 1
    shop.advance(timedelta(minutes=2))
    assert run(call("shop_send", SEND)).structured == {"result": "sent to bob"}
    assert len(shop.effects()) == 2
    # a read is no duplicate: it runs every time
    assert run(call("shop_price", {"item": "tea"})).structured == {"item": "tea", "cents": 250}
    assert run(call("shop_price", {"item": "tea"})).structured == {"item": "tea", "cents": 250}


# ---------------------------------------------------------------------------
# Rule 6: waiting for a person


def test_rule_6_a_call_still_waiting_for_a_person_is_pending_with_one_approval(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path)

    async def calls() -> list[str]:
        async with shop.host() as host:
            return [(await host.call("shop_charge", CHARGE)).word for _ in range(3)]

    assert run(calls()) == ["PENDING_APPROVAL"] * 3
    assert len(shop.pending()) == 1  # re-calls collect; they ask nobody twice


# ---------------------------------------------------------------------------
# Rule 7: otherwise a new run; and the answers of a new run


def test_rule_7_a_new_call_is_its_own_run_of_a_few_steps(tmp_path: Path) -> None:
    shop = Shop(tmp_path)

    async def calls() -> list[Any]:
        async with shop.host() as host:
            return [
                await host.call("shop_price", {"item": "tea"}),
                await host.call("shop_send", SEND),
                await host.call("shop_send", {**SEND, "to": "carol"}),
            ]

    price, send, other = run(calls())
    assert [price.is_error, send.is_error, other.is_error] == [False, False, False]
    store = open_store(shop.db)
    try:
        runs = store.list_runs()
        assert len(runs) == 3
        assert {r.status for r in runs} == {"COMPLETED"}
        assert {r.limits.max_steps for r in runs} == {8}
        assert sorted(r.goal.split(",")[0] for r in runs) == [
            "shop_price",
            "shop_send",
            "shop_send",
        ]
        keys = store.query("SELECT request_key, run_id FROM proxy_requests ORDER BY seq")
        assert [row[0] for row in keys] == [
            request_key("shop_price", {"item": "tea"}),
            request_key("shop_send", SEND),
            request_key("shop_send", {**SEND, "to": "carol"}),
        ]
        assert {row[1] for row in keys} == {r.id for r in runs}
    finally:
        store.close()


def test_a_denied_an_invalid_and_a_failing_call_answer_in_plain_words(tmp_path: Path) -> None:
    shop = Shop(tmp_path)

    async def calls() -> list[Any]:
        async with shop.host() as host:
            return [
                await host.call("shop_wipe"),
                await host.call("shop_send", {"to": "bob"}),
                await host.call("shop_send", {**SEND, "to": 3}),
                await host.call("shop_jam"),
                await host.call("shop_nothing"),
            ]

    wipe, missing, extra, jam, nothing = run(calls())
    assert (wipe.is_error, wipe.word) == (True, "DENIED")
    assert "destructive" in wipe.text
    assert (missing.word, extra.word) == ("INVALID", "INVALID")
    assert "'text' is a required property" in missing.text
    assert (jam.is_error, jam.text) == (
        True,
        "FAILED: Error executing tool jam: the printer is jammed",
    )
    assert nothing.word == "INVALID"
    assert shop.effects() == []


def test_the_cap_on_pending_approvals_blocks_a_new_call_that_needs_a_person(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path, max_pending_approvals=2)

    def charge(cents: int) -> dict[str, Any]:
        return {"account": "acme", "cents": cents}

    async def calls() -> list[str]:
        async with shop.host() as host:
            return [
                (await host.call("shop_charge", charge(1))).word,
                (await host.call("shop_charge", charge(2))).word,
                (await host.call("shop_charge", charge(3))).word,
                (await host.call("shop_charge", charge(1))).word,  # a re-call is no new call
                "error" if (await host.call("shop_send", SEND)).is_error else "result",
            ]

    assert run(calls()) == [
        "PENDING_APPROVAL",
        "PENDING_APPROVAL",
        "BLOCKED",
        "PENDING_APPROVAL",
        "result",
    ]
    assert len(shop.pending()) == 2
    assert len(shop.run_ids()) == 3  # the blocked call made no run
    shop.decide("reject", shop.pending()[0]["run_id"])

    async def again() -> str:
        async with shop.host() as host:
            return (await host.call("shop_charge", charge(3))).word

    assert run(again()) == "PENDING_APPROVAL"


def test_a_server_that_cannot_be_started_leaves_its_tools_unavailable_and_the_others_served(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path)
    config = json.loads(shop.config.read_text())
    config["servers"]["gone"] = {
        "command": [str(tmp_path / "no-such-server")],
        "manifest": "shop.manifest.json",
        "rules": "shop.rules.json",
    }
    write_owner_only(shop.config, config)

    async def calls() -> tuple[list[str], Any, Any]:
        async with shop.host() as host:
            names = [tool.name for tool in await host.tools()]
            return (
                names,
                await host.call("gone_price", {"item": "tea"}),
                await host.call("shop_price", {"item": "tea"}),
            )

    names, gone, price = run(calls())
    assert "gone_price" not in names and "shop_price" in names
    assert (gone.is_error, gone.word) == (True, "UNAVAILABLE")
    assert price.structured == {"item": "tea", "cents": 250}
    assert "server gone is unavailable" in (tmp_path / "proxy.stderr").read_text()


def test_gate_status_answers_where_an_earlier_call_stands_without_acting(tmp_path: Path) -> None:
    shop = Shop(tmp_path)

    async def status(host: Host, tool: str, args: dict[str, Any]) -> Any:
        return await host.call("gate_status", {"tool": tool, "arguments": args})

    async def first() -> list[Any]:
        async with shop.host() as host:
            before = await status(host, "shop_charge", CHARGE)
            await host.call("shop_charge", CHARGE)
            pending = await status(host, "shop_charge", CHARGE)
            return [before, pending]

    before, pending = run(first())
    assert (before.is_error, before.word) == (False, "NOT_FOUND")
    assert (pending.is_error, pending.word) == (False, "PENDING_APPROVAL")
    shop.decide_only_pending("approve")

    async def second() -> list[Any]:
        async with shop.host() as host:
            approved = await status(host, "shop_charge", CHARGE)
            await host.call("shop_charge", CHARGE)
            done = await status(host, "shop_charge", CHARGE)
            return [approved, done]

    approved, done = run(second())
    assert approved.word == "APPROVED"
    assert done.word == "DONE"
    assert '"charged": "acme"' in done.text
    assert len(shop.effects()) == 1  # asking carried out nothing


def test_nothing_the_model_sees_names_the_runtime_the_database_the_config_or_a_run_id(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path, name="shop-tools")
    (shop.folder / "hang").touch()
    hung = shop.folder / "hung.json"

    async def everything() -> list[str]:
        seen: list[str] = []
        async with shop.host() as host:
            seen.append(json.dumps(host.info.model_dump(mode="json", by_alias=True)))
            await host.tools()
            (shop.folder / "hang").unlink()
            await host.call("shop_price", {"item": "tea"})
            await host.call("shop_send", SEND)
            await host.call("shop_send", SEND)
            await host.call("shop_charge", CHARGE)
            await host.call("shop_charge", CHARGE)
            await host.call("gate_status", {"tool": "shop_charge", "arguments": CHARGE})
            await host.call("gate_status", {"tool": "shop_send", "arguments": {}})
            await host.call("gate_status", {"tool": "nope"})
            await host.call("shop_wipe")
            await host.call("shop_jam")
            await host.call("shop_send", {"to": 3})
            await host.call("shop_nothing")
            (shop.folder / "hang").touch()
            task = asyncio.create_task(host.call("shop_send", {**SEND, "to": "dan"}))
            while not hung.exists():
                await asyncio.sleep(0.05)
            await host.call("shop_send", {**SEND, "to": "dan"})
            kill_quietly(json.loads(hung.read_text())["pid"])
            await task
            seen += host.seen
        return seen

    seen = run(everything())
    # the send cut off by the kill waits for a person too (decision 0054): reject the charge
    (charge,) = [waiting for waiting in shop.pending() if waiting["tool"] == "shop_charge"]
    shop.decide("reject", charge["run_id"])

    async def rejected() -> list[str]:
        async with shop.host() as host:
            await host.call("shop_charge", CHARGE)
            return host.seen

    seen += run(rejected())
    words = {text.split(":", 1)[0] for text in seen}
    assert {"PENDING_APPROVAL", "DUPLICATE", "DENIED", "INVALID", "FAILED", "IN_PROGRESS"} <= words
    assert "REJECTED" in words
    forbidden = [
        "agentrt",
        str(shop.db),
        "runs.db",
        str(shop.config),
        "proxy.json",
        "run id",
        "run_id",
        "sqlite",
        *shop.run_ids(),
    ]
    leaks = [(bad, text) for text in seen for bad in forbidden if bad.lower() in text.lower()]
    assert leaks == []


def test_the_proxy_in_front_of_mcp_server_time_answers_a_call(tmp_path: Path) -> None:
    command = shutil.which("mcp-server-time", path=str(Path(sys.executable).parent))
    assert command is not None, "mcp-server-time is in the test extra"
    pinned = agentrt(
        "mcp",
        "pin",
        "time",
        "--out",
        str(tmp_path / "time.manifest.json"),
        "--",
        command,
        "--local-timezone",
        "UTC",
    )
    assert pinned.returncode == 0, pinned.stderr
    write_owner_only(
        tmp_path / "time.rules.json",
        {
            "format": "agentrt.mcp.rules/1",
            "tools": {
                "get_current_time": {"side_effect": "read_only"},
                "convert_time": {"side_effect": "read_only"},
            },
        },
    )
    write_owner_only(
        tmp_path / "proxy.json",
        {
            "format": "agentrt.mcp.proxy/1",
            "database": "runs.db",
            "servers": {
                "time": {
                    "command": [command, "--local-timezone", "UTC"],
                    "manifest": "time.manifest.json",
                    "rules": "time.rules.json",
                }
            },
        },
    )

    async def call() -> tuple[list[str], Any]:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "agentrt.mcp.proxy", "--config", str(tmp_path / "proxy.json")],
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = [tool.name for tool in (await session.list_tools()).tools]
            result = await session.call_tool(
                "time_convert_time",
                {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
            )
            return tools, result

    tools, result = run(call())
    assert tools == ["time_convert_time", "time_get_current_time", "gate_status"]
    assert not result.is_error
    assert result.structured_content["target"]["timezone"] == "Asia/Tokyo"
    assert result.structured_content["target"]["datetime"].endswith("T21:00:00+09:00")


def test_the_example_config_fronts_mcp_server_time_and_the_example_host_calls_through_it(
    tmp_path: Path,
) -> None:
    examples = Path(__file__).resolve().parent.parent / "examples" / "mcp"
    for name in ("proxy.json", "time.rules.json"):
        shutil.copy(examples / name, tmp_path / name)
        (tmp_path / name).chmod(0o600)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    # The operator's command and the example host are forked from the process that has
    # imported the CLI and the MCP SDK (tests/support/mcp_proxy.py); what they start,
    # `agentrt-proxy` and `mcp-server-time` found on PATH, are fresh interpreters.
    pinned = forkserver.run(
        [
            *(sys.executable, "-m", "agentrt", "mcp", "pin", "time"),
            *("--out", "time.manifest.json", "--", "mcp-server-time", "--local-timezone", "UTC"),
        ],
        preload=PRELOAD,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert pinned.returncode == 0, pinned.stderr
    host = forkserver.run(
        [
            *(sys.executable, str(examples / "call_through_proxy.py")),
            *(str(tmp_path / "proxy.json"), "time_convert_time"),
            '{"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}',
        ],
        preload=PRELOAD,
        env=env,
        timeout=120,
    )
    assert host.returncode == 0, host.stderr
    tools, answer = host.stdout.splitlines()
    assert tools == "tools: time_convert_time, time_get_current_time, gate_status"
    assert json.loads(answer)["target"]["datetime"].endswith("T21:00:00+09:00")
    assert (tmp_path / "proxy.db").exists()  # the database named relative to the config


# ---------------------------------------------------------------------------
# In process: the key, the config file, the proxy's tables


def test_the_request_key_is_sha256_of_the_tool_a_nul_byte_and_the_canonical_arguments() -> None:
    args = {"b": [1, 2], "a": "ü"}
    expected = hashlib.sha256(b"shop_send\x00" + canonical_json(args)).hexdigest()
    assert request_key("shop_send", args) == expected
    assert request_key("shop_send", {"a": "ü", "b": [1, 2]}) == expected
    assert request_key("shop_sen", {"d": 1}) != request_key("shop_send", {"d": 1})


# Released proxy migrations are never edited: a failure here means one changed
# (revert it and add a new one). 2: the look-ups' indexes (decision 0115).
PROXY_PINNED_SHA256 = {
    1: "f882c298f69562978ce1d724cd643de9d4fd217de157dbc04b1558ebad469ed3",
    2: "e47e39e60e7fb3ecef370b7d409e02de75a49101e22018b23d931dcc3cb89d1e",
}
POSTGRES_PROXY_PINNED_SHA256 = {
    1: "8be6a17a62f3ccd8613abe857de06d160b597a4dd675ba1bdc0a3192ef80514e",
    2: "6918bf1435a137cff168b62b94594ebf53b45ced96d8dda93f9ff20b01cd1285",
}


def test_the_proxy_tables_are_migrated_once_and_their_texts_pinned_by_sha256(
    tmp_path: Path,
) -> None:
    texts = {m.version: hashlib.sha256(m.sql.encode("utf-8")).hexdigest() for m in PROXY_MIGRATIONS}
    assert texts == PROXY_PINNED_SHA256
    postgres = {
        v: hashlib.sha256(sql.encode("utf-8")).hexdigest() for v, sql in POSTGRES_PROXY_MIGRATIONS
    }
    assert postgres == POSTGRES_PROXY_PINNED_SHA256
    store = open_store(tmp_path / "p.db")
    try:
        assert "proxy_requests" not in {r[0] for r in store.query("SELECT name FROM sqlite_master")}
        assert store.migrate_proxy(START) == 2
        assert store.migrate_proxy(START) == 2
        assert store.proxy_versions() == [1, 2]
    finally:
        store.close()
    assert agentrt("runs", "--db", str(tmp_path / "p.db")).returncode == 0


def test_the_proxy_config_refuses_unknown_fields_a_writable_file_and_a_bad_policy(
    tmp_path: Path,
) -> None:
    base = {
        "format": "agentrt.mcp.proxy/1",
        "database": "runs.db",
        "servers": {"s": {"command": ["x"], "manifest": "m.json", "rules": "r.json"}},
    }
    path = tmp_path / "proxy.json"
    write_owner_only(path, base)
    config = read_proxy_config(path)
    assert config.database == tmp_path / "runs.db"
    assert config.servers[0].manifest == tmp_path / "m.json"
    assert config.policy == {
        "read_only": "allow",
        "local_mutation": "allow",
        "remote_mutation": "approve",
        "destructive": "deny",
    }
    for bad, message in [
        ({**base, "extra": 1}, "unknown field 'extra'"),
        (
            {**base, "servers": {"s": {**base["servers"]["s"], "cwd": "/"}}},  # type: ignore[dict-item]
            "unknown field 'cwd'",
        ),
        ({**base, "policy": {"read_only": "maybe"}}, "must be one of allow, approve, deny"),
        ({**base, "policy": {"writes": "allow"}}, "'writes', which is not one of"),
        ({**base, "max_pending_approvals": 0}, "positive integer"),
    ]:
        write_owner_only(path, bad)
        with pytest.raises(ConfigError, match=message):
            read_proxy_config(path)
    write_owner_only(path, base)
    os.chmod(path, 0o666)
    with pytest.raises(InsecureModeError):
        read_proxy_config(path)


def test_the_proxy_command_exits_1_saying_why_on_a_bad_config(tmp_path: Path) -> None:
    path = tmp_path / "proxy.json"
    write_owner_only(path, {"format": "agentrt.mcp.proxy/1", "database": "x.db", "servers": {}})
    started = time.monotonic()
    done = agentrt_proxy("--config", str(path))
    assert done.returncode == 1
    assert done.stderr == (
        "agentrt-proxy: proxy config: servers must be an object naming at least one server\n"
    )
    assert time.monotonic() - started < 30


def agentrt_proxy(*args: str) -> Any:
    command = shutil.which("agentrt-proxy", path=str(Path(sys.executable).parent))
    assert command is not None, "the console script is installed with the package"
    return subprocess.run([command, *args], capture_output=True, text=True, timeout=60)
