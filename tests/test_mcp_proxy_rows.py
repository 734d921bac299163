"""`agentrt-proxy`: the rows of issue 25, each against a real MCP server over stdio.

The host is the SDK's `ClientSession` over stdio; the proxy a real child process
(`tests/proxy_child.py`); its upstream `tests/mcp_shop_server.py`, written with
the SDK, which logs every effect before it answers. Operators decide with the
real `agentrt` command. One test per rule, named for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import mcp.client.stdio
import mcp_types
import pytest
from tests.support.mcp_proxy import Shop, kill_quietly, pending_now, write_owner_only

from agentrt import ConfigError, Gate, open_existing
from agentrt._clock import wall_clock
from agentrt._store.sqlite._filesafety import SIDECAR_SUFFIXES
from agentrt.mcp._proxy import (
    ASKED_AGAIN_NOTICE,
    HOLD_MESSAGE,
    UNRECORDED_RESULT,
    Answer,
    Proxy,
    _load,
    _open,
    build_policy,
)
from agentrt.mcp.proxy import read_proxy_config

pytestmark = pytest.mark.slow

CHARGE = {"account": "acme", "cents": 1200}
SEND = {"to": "bob", "text": "the parcel left"}
SMALL = {"account": "acme", "cents": 99}
OTHER = {"account": "acme", "cents": 7}


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
# 2. a call approved while the host still waits answers in the same call


def test_a_call_approved_within_the_hold_runs_and_answers_in_the_same_call_with_progress(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path, approval_hold="10m")
    progress: list[tuple[float, Any, Any]] = []
    heard: list[Any] = []  # every notification the host's session was sent

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async def on_message(message: Any) -> None:
        heard.append(message)

    async def asked(n: int) -> None:
        await until(lambda: len(pending_now(shop)) == n, f"{n} approval(s) asked")

    async def scenario() -> list[Any]:
        async with shop.host(message_handler=on_message) as host:
            # with a progress token: approved while the host waits
            call = asyncio.create_task(
                host.call("shop_charge", CHARGE, progress_callback=on_progress)
            )
            await until(lambda: len(progress) >= 2, "the hold's progress notifications")
            await asyncio.to_thread(shop.decide_only_pending, "approve")
            approved = await call
            # without one: rejected while the host waits
            call = asyncio.create_task(host.call("shop_charge", SMALL))
            await asked(1)
            await asyncio.to_thread(shop.decide_only_pending, "reject")
            rejected = await call
            # nobody decides within the hold: PENDING_APPROVAL, collected by the re-call
            call = asyncio.create_task(host.call("shop_charge", OTHER))
            await asked(1)
            shop.advance(timedelta(minutes=11))
            pending = await call
            shop.decide_only_pending("approve")
            collected = await host.call("shop_charge", OTHER)
            return [approved, rejected, pending, collected]

    approved, rejected, pending, collected = run(scenario())
    assert (approved.is_error, approved.structured) == (False, {"charged": "acme", "cents": 1200})
    assert (rejected.is_error, rejected.word) == (True, "REJECTED")
    assert (pending.is_error, pending.word) == (True, "PENDING_APPROVAL")
    assert collected.structured == {"charged": "acme", "cents": 7}
    assert shop.effects() == [{"tool": "charge", **CHARGE}, {"tool": "charge", **OTHER}]
    # the held call told its host why it waited, about once a second, counting up
    assert {message for _, _, message in progress} == {HOLD_MESSAGE}
    assert [done for done, _, _ in progress] == sorted({done for done, _, _ in progress})
    assert progress[0][:2] == (0.0, None)
    # ... and only to the request that carried a progress token
    assert {type(m).__name__ for m in heard} == {"ProgressNotification"}
    assert len({m.params.progress_token for m in heard}) == 1
    assert len(heard) == len(progress)
    assert len(run_statuses(shop)) == 3  # one run per call, nobody asked twice


def test_the_hold_counts_from_the_calls_arrival_so_time_moved_while_it_asks_still_ends_it(
    tmp_path: Path,
) -> None:
    """An operator sets `approval_hold` to 10 minutes; a call waits for approval, and the
    proxy's clock moves 11 minutes on between the approval being asked for and the proxy
    starting to hold (the proxy descheduled in that gap; here in-process, deterministically).
    The hold, counted from the call's arrival, has run out: the call is answered
    `PENDING_APPROVAL` at its first look, not held another 10 minutes."""
    shop = Shop(tmp_path, approval_hold="10m")
    clock = [datetime.now(UTC)]
    looks: list[int] = []

    async def still_waiting(look: int) -> bool:
        looks.append(look)
        return look < 40  # a host that gives up after ten seconds

    async def go() -> Answer:
        config = read_proxy_config(shop.config)
        async with contextlib.AsyncExitStack() as stack:
            store = _open(config, wall_clock)
            stack.callback(store.close)
            tools, unavailable = await _load(config, stack)
            now = lambda: clock[0]  # noqa: E731
            gate = Gate(store=store, policy=build_policy(config.policy), tools=tools, now=now)
            specs = {tool.spec.name: tool.spec for tool in tools}
            proxy = Proxy(config, store, gate, specs, unavailable, now=now)
            handle = proxy._handle

            async def handle_then_time_moves(spec: Any, key: str, args: Any) -> Answer:
                answer = await handle(spec, key, args)
                clock[0] += timedelta(minutes=11)
                return answer

            proxy._handle = handle_then_time_moves  # type: ignore[method-assign]
            return await proxy.call("shop_charge", CHARGE, still_waiting)

    said = asyncio.run(go())
    assert (said.is_error, said.word) == (True, "PENDING_APPROVAL")
    assert looks == [0]
    assert shop.effects() == []


def test_approval_hold_is_off_unless_set_and_a_negative_one_is_refused(tmp_path: Path) -> None:
    base = {
        "format": "agentrt.mcp.proxy/1",
        "database": "runs.db",
        "servers": {"s": {"command": ["x"], "manifest": "m.json", "rules": "r.json"}},
    }
    path = tmp_path / "proxy.json"
    write_owner_only(path, base)
    assert read_proxy_config(path).approval_hold == timedelta(0)
    for value, seconds in ((0, 0), ("0s", 0), ("45s", 45), ("2m", 120)):
        write_owner_only(path, {**base, "approval_hold": value})
        assert read_proxy_config(path).approval_hold == timedelta(seconds=seconds)
    for bad in ("-5s", -1, "soon", True, None):
        write_owner_only(path, {**base, "approval_hold": bad})
        with pytest.raises(ConfigError, match="approval_hold must be a duration"):
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


# ---------------------------------------------------------------------------
# 6. a stdio server pointed at the proxy's own files is refused at start-up


def test_a_server_whose_arguments_reach_the_proxys_own_files_is_refused_at_start_up(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path)
    config = json.loads(shop.config.read_text())
    entry = config["servers"]["shop"]
    entry["command"] = [*entry["command"], f"--root={tmp_path}"]  # the folder holding runs.db
    write_owner_only(shop.config, config)

    async def host_starts_it() -> None:
        with anyio.fail_after(60):
            async with shop.host():
                pass

    with pytest.raises(Exception):  # noqa: B017 - the proxy exits before the handshake
        run(host_starts_it())
    said = (tmp_path / "proxy.stderr").read_text()
    assert f"its argument '--root={tmp_path}' reaches" in said
    assert "skip_path_check" in said
    assert not shop.db.exists()  # refused before the database was opened

    entry["skip_path_check"] = True
    write_owner_only(shop.config, config)

    async def call() -> Any:
        async with shop.host() as host:
            return await host.call("shop_price", {"item": "tea"})

    assert run(call()).structured == {"item": "tea", "cents": 250}


def test_the_path_check_sees_the_usual_spellings_of_the_proxys_own_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    ops = home / "ops"
    ops.mkdir(parents=True)
    (tmp_path / "link").symlink_to(ops)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    path = ops / "proxy.json"

    def entry(*args: str, **more: Any) -> dict[str, Any]:
        return {"command": ["srv", *args], "manifest": "m.json", "rules": "r.json", **more}

    def config(server: dict[str, Any]) -> Any:
        write_owner_only(
            path,
            {"format": "agentrt.mcp.proxy/1", "database": "runs.db", "servers": {"fs": server}},
        )
        return read_proxy_config(path)

    reaching = [
        str(ops / "runs.db"),  # the database
        str(ops / "runs.db-wal"),  # its journal
        str(ops / "m.json"),  # a manifest
        str(ops / "r.json"),  # a rules file
        str(path),  # the config
        f"{ops}/",  # a folder holding them, with a trailing slash
        str(home),  # ... or further up
        "/",
        str(tmp_path / "link"),  # through a link
        str(tmp_path / "link" / "runs.db"),
        "link/runs.db",  # relative to the working directory
        "runs.db",  # relative to the config's folder
        "../ops/./",
        f"--root={ops}",
        f"-r{ops}",
        f"root={ops}",
        f"file://{ops}/runs.db",
        f"file://{ops}",
        "~",
        "~/ops",
        f"{tmp_path},{ops}",
    ]
    for argument in reaching:
        with pytest.raises(ConfigError, match=r"reaches .* skip_path_check"):
            config(entry("--flag", argument))
    for harmless in (
        str(ops / "server.py"),
        str(tmp_path / "data"),
        "--local-timezone",
        "UTC",
        "-v",
        "data",
        f"--root={tmp_path / 'data'}",
    ):
        config(entry(harmless))
    assert config(entry(str(ops), skip_path_check=True)).servers[0].skip_path_check
    with pytest.raises(ConfigError, match="skip_path_check must be true or false"):
        config(entry(skip_path_check="yes"))


@pytest.mark.parametrize("suffix", SIDECAR_SUFFIXES)
def test_the_path_check_refuses_each_of_the_databases_sidecar_files(
    tmp_path: Path, suffix: str
) -> None:
    """Every file the store keeps beside the database (SQLite's journals and shared
    memory, the writers' `-lock`), named alone, is the database's: a server given one
    could change it or block the proxy's writers."""
    path = tmp_path / "proxy.json"
    sidecar = tmp_path / f"runs.db{suffix}"
    server = {"command": ["srv", str(sidecar)], "manifest": "m.json", "rules": "r.json"}
    write_owner_only(
        path, {"format": "agentrt.mcp.proxy/1", "database": "runs.db", "servers": {"fs": server}}
    )
    with pytest.raises(ConfigError) as refused:
        read_proxy_config(path)
    assert str(refused.value) == (
        f"proxy config, server 'fs': its argument {str(sidecar)!r} reaches the database "
        f"({os.path.realpath(sidecar)}), which a tool call could then change; point the "
        "server elsewhere, or set skip_path_check in its entry if this is intended"
    )


# ---------------------------------------------------------------------------
# 7. a server asking for the user's input mid-call is refused, not passed on


def test_an_upstream_elicitation_or_input_required_is_refused_with_a_clear_error(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path)
    reached_the_host: list[Any] = []

    async def elicitation(context: Any, params: Any) -> Any:
        reached_the_host.append(params)
        return mcp_types.ElicitResult(action="accept", content={"sure": True})

    async def calls() -> list[Any]:
        async with shop.host(elicitation_callback=elicitation) as host:
            return [
                await host.call("shop_confirm", {"order": "A-1"}),
                await host.call("shop_confirm_later", {"order": "A-1"}),
            ]

    asked, asked_later = run(calls())
    assert (asked.is_error, asked.word) == (True, "FAILED")
    assert "asked for the user's input during the call to 'confirm'" in asked.text
    assert "an elicitation: 'Really cancel A-1?'" in asked.text
    assert "refused, never passed on, so the call did not complete" in asked.text
    assert (asked_later.is_error, asked_later.word) == (True, "FAILED")
    assert "during the call to 'confirm_later' (an input_required result" in asked_later.text
    assert reached_the_host == []  # the host was never asked
    store = open_existing(shop.db, read_only=True)
    try:  # recorded: each call's run ended on the tool's error, which says why
        for run_ in store.list_runs():
            assert run_.status == "FAILED"
            (call, _end) = store.list_steps(run_.id)
            assert call.observation is not None
            assert call.observation.content["error"].startswith("MCPInputRequired: ")
    finally:
        store.close()


# ---------------------------------------------------------------------------
# 3. a host that cancels a call, or closes the session, does not stop it


async def until(done: Any, what: str) -> None:
    for _ in range(2400):
        if done():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def said_by_the_proxy(shop: Shop, line: str) -> bool:
    log = shop.root / "proxy.stderr"
    return log.exists() and line in log.read_text()


def test_a_call_the_host_cancels_goes_on_is_recorded_and_its_identical_call_is_duplicate(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path)
    (shop.folder / "hold").touch()  # the server writes its effect, then waits to answer

    async def scenario() -> list[Any]:
        async with shop.host() as host:
            call = asyncio.create_task(host.call("shop_send", SEND))
            await until(shop.effects, "the call reached the server")
            call.cancel()  # the SDK sends notifications/cancelled
            with contextlib.suppress(asyncio.CancelledError):
                await call
            await until(lambda: said_by_the_proxy(shop, "the host cancelled"), "the cancel")
            meanwhile = await host.call("shop_send", SEND)
            (shop.folder / "hold").unlink()
            await until(lambda: said_by_the_proxy(shop, "had cancelled it"), "the call's end")
            return [meanwhile, await host.call("shop_send", SEND)]

    meanwhile, again = run(scenario())
    assert meanwhile.word == "IN_PROGRESS"
    assert (again.is_error, again.word) == (True, "DUPLICATE")
    assert '{"result": "sent to bob"}' in again.text  # the result the host never got
    assert shop.effects() == [{"tool": "send", **SEND}]
    assert run_statuses(shop) == ["COMPLETED"]


def test_a_host_closing_stdin_mid_call_lets_the_call_finish_recorded_not_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK's host waits 2 s for a server to exit after closing its stdin, then
    # kills it: this host waits as long as the call takes.
    monkeypatch.setattr(mcp.client.stdio, "PROCESS_TERMINATION_TIMEOUT", 120.0)
    shop = Shop(tmp_path)
    (shop.folder / "hold").touch()

    async def scenario() -> Any:
        async def host_leaves() -> None:
            async with shop.host() as host:
                call = asyncio.create_task(host.call("shop_send", SEND))
                await until(shop.effects, "the call reached the server")
            with contextlib.suppress(BaseException):
                await call

        leaving = asyncio.create_task(host_leaves())  # closes the proxy's stdin mid-call
        await until(lambda: said_by_the_proxy(shop, "the host closed the session"), "EOF")
        (shop.folder / "hold").unlink()
        await leaving  # the proxy finished the call, then exited by itself
        async with shop.host() as host:
            return await host.call("shop_send", SEND)

    again = run(scenario())
    assert (again.word, '{"result": "sent to bob"}' in again.text) == ("DUPLICATE", True)
    assert shop.effects() == [{"tool": "send", **SEND}]
    assert run_statuses(shop) == ["COMPLETED"]


def run_statuses(shop: Shop) -> list[str]:
    store = open_existing(shop.db, read_only=True)
    try:
        return [run_.status for run_ in store.list_runs()]
    finally:
        store.close()


# ---------------------------------------------------------------------------
# 4. after an unknown outcome, the tool's other mutating calls are BLOCKED


def test_after_an_unknown_outcome_other_mutating_calls_of_the_tool_are_blocked_until_decided(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path)
    (shop.folder / "hang").touch()
    hung = shop.folder / "hung.json"
    other = {**SEND, "to": "carol"}

    async def cut_off() -> list[Any]:
        async with shop.host() as host:
            call = asyncio.create_task(host.call("shop_send", SEND))
            await until(hung.exists, "the call reached the server")
            kill_quietly(json.loads(hung.read_text())["pid"])  # SIGKILL, after its effect
            return [await call, await host.call("shop_send", other)]

    lost, blocked_at_once = run(cut_off())
    (shop.folder / "hang").unlink()
    assert (lost.word, blocked_at_once.word) == ("UNKNOWN_OUTCOME", "BLOCKED")
    (waiting,) = shop.pending()
    assert waiting["kind"] == "interrupted_side_effect"

    async def calls() -> list[Any]:
        async with shop.host() as host:  # a new proxy, whose server would answer
            return [
                await host.call("shop_send", other),
                await host.call("shop_price", {"item": "tea"}),
                await host.call("shop_send", SEND),
            ]

    blocked, read, same = run(calls())
    assert (blocked.is_error, blocked.word) == (True, "BLOCKED")
    assert "not recorded and has not run" in blocked.text
    assert read.structured == {"item": "tea", "cents": 250}  # reads still work
    assert same.word == "UNKNOWN_OUTCOME"
    assert len(run_statuses(shop)) == 2  # the blocked calls made no run
    shop.decide("reject", waiting["run_id"])
    done, _, rejected = run(calls())
    assert done.structured == {"result": "sent to carol"}  # a rejection unblocks the tool
    assert rejected.word == "REJECTED"
    assert shop.effects() == [{"tool": "send", **SEND}, {"tool": "send", **other}]


def test_an_unknown_outcome_left_with_nothing_waiting_keeps_the_tool_blocked_and_asks_again(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path, approval_ttl="5m", repeat_window="1h")
    (shop.folder / "hang").touch()
    hung = shop.folder / "hung.json"
    other = {**SEND, "to": "carol"}

    async def killed_mid_call() -> None:
        async with shop.host(fresh=True) as host:  # its command line is named below
            call = asyncio.create_task(host.call("shop_send", SEND))
            await until(hung.exists, "the call reached the server")
            seen = json.loads(hung.read_text())
            assert b"proxy_child.py" in Path(f"/proc/{seen['proxy_pid']}/cmdline").read_bytes()
            kill_quietly(seen["proxy_pid"])  # SIGKILL the proxy, before any question
            kill_quietly(seen["pid"])  # and its orphaned upstream, asleep in the tool
            with contextlib.suppress(Exception):
                await call

    with contextlib.suppress(Exception, BaseExceptionGroup):
        run(killed_mid_call())
    (shop.folder / "hang").unlink()
    assert shop.effects() == [{"tool": "send", **SEND}]
    assert pending_now(shop) == []  # a crash before the question: nothing waits

    async def calls() -> list[Any]:
        async with shop.host() as host:  # a new proxy
            return [
                await host.call("shop_send", other),
                await host.call("shop_price", {"item": "tea"}),
                await host.call("shop_send", SEND),
                await host.call("gate_status", {"tool": "shop_send", "arguments": SEND}),
            ]

    # the other call finds the dead run, takes it over (a person is asked), is BLOCKED
    blocked, read, same, status = run(calls())
    assert (blocked.is_error, blocked.word) == (True, "BLOCKED")
    assert read.structured == {"item": "tea", "cents": 250}
    assert (same.word, status.word) == ("UNKNOWN_OUTCOME", "UNKNOWN_OUTCOME")
    (asked,) = pending_now(shop)
    assert asked.kind == "interrupted_side_effect"

    # the question expires with nobody deciding: the next call asks again at once
    shop.advance(timedelta(minutes=6))
    blocked, read, same, status = run(calls())
    assert (blocked.word, same.word, status.word) == (
        "BLOCKED",
        "UNKNOWN_OUTCOME",
        "UNKNOWN_OUTCOME",
    )
    (again,) = pending_now(shop)
    assert (again.kind, again.status) == ("interrupted_side_effect", "pending")
    assert again.run_id != asked.run_id  # a new question, in a new run of the same call
    assert again.presentation["notice"] == ASKED_AGAIN_NOTICE
    assert "nobody decided on it in time, so a person has been asked again" in same.text
    assert [w["run_id"] for w in shop.pending()] == [again.run_id]  # the operator sees it

    # it expires again before the identical call comes: that call asks again itself
    shop.advance(timedelta(minutes=6))

    async def identical() -> Any:
        async with shop.host() as host:
            return await host.call("shop_send", SEND)

    assert run(identical()).word == "UNKNOWN_OUTCOME"
    (third,) = pending_now(shop)
    assert third.run_id not in (asked.run_id, again.run_id)
    assert shop.effects() == [{"tool": "send", **SEND}]  # never run again on its own say

    shop.decide("reject", third.run_id)  # a person decides: the tool is unblocked
    done, _, rejected, _ = run(calls())
    assert done.structured == {"result": "sent to carol"}
    assert rejected.word == "REJECTED"
    assert pending_now(shop) == []
    assert shop.effects() == [{"tool": "send", **SEND}, {"tool": "send", **other}]
