"""The signed approval webhook: every status it answers, every way a signature can be wrong.

Real runs paused on real approvals in a real store; the app is driven through
Starlette's TestClient (and, where the body's arrival matters, by raw ASGI
messages).

Every test whose answer depends on the record (the routes, 404, 409, 410, the
concurrent decisions, the client) takes `any_store` and runs on SQLite and on
PostgreSQL. The signature, replay, body-size, rate-limit and malformed-body tests stay
on SQLite: the app refuses those before it asks the store anything. So does the chat
example, which keeps a file of its own.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette", reason="the webhook extra is not installed")

from starlette.testclient import TestClient

import agentrt
from agentrt import ConfigError, Limits, SideEffect
from agentrt._clock import format_time
from agentrt.approver import (
    MAX_BODY,
    Decision,
    Local,
    NonceCache,
    RateLimiter,
    WebhookClient,
    WebhookError,
    sign,
    signed_headers,
    webhook_app,
)
from conftest import FakeClock, RecordingTool
from support.approvals import paused_run, push_with_schema, restarted, tamper
from support.rows import execute, snapshot

SECRET = "0123456789abcdef0123456789abcdef-webhook"
NOW = 1_800_000_000


class WallClock:
    """Unix seconds the test sets."""

    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Hook:
    """A webhook over one store and a client that signs what it sends."""

    def __init__(self, store: agentrt.Store, clock: FakeClock, **options: Any) -> None:
        self.wall = WallClock()
        self.local = Local(store, now=clock)
        self.app = webhook_app(self.local, secret=SECRET, now=self.wall, **options)
        self.http = TestClient(self.app, base_url="http://hook.test")
        self.nonces = iter(range(1, 1_000_000))

    def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        secret: str = SECRET,
        ts: int | None = None,
        nonce: str | None = None,
        signed_path: str | None = None,
        signed_body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        raw = (
            b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
        )
        sig = signed_headers(
            secret,
            method,
            signed_path or httpx.URL(f"http://hook.test{path}").raw_path.decode("ascii"),
            raw if signed_body is None else signed_body,
            timestamp=NOW if ts is None else ts,
            nonce=nonce or f"nonce-{next(self.nonces)}",
        )
        return self.http.request(method, path, content=raw, headers={**sig, **(headers or {})})


def waiting(
    store: agentrt.Store, clock: FakeClock, **kwargs: Any
) -> tuple[agentrt.Driver, agentrt.Run, RecordingTool, agentrt.Approval]:
    driver, run, push = paused_run(store, clock, tool=push_with_schema(), **kwargs)
    (approval,) = store.pending_approvals(run.id)
    return driver, run, push, approval


def error(response: Any) -> tuple[int, str]:
    body = response.json()
    assert set(body) == {"error", "code"}
    return response.status_code, body["code"]


# --- 200 / 202: the routes ----------------------------------------------------------------------


def test_the_pending_approvals_of_a_run_are_listed_with_what_each_asks(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock, args={"x": 3})
    hook = Hook(store, clock)
    response = hook.send("GET", f"/runs/{run.id}/approvals")
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["run_id"] == run.id
    (item,) = body["approvals"]
    assert (item["approval_id"], item["hash"], item["kind"], item["tool"], item["expired"]) == (
        approval.id,
        approval.hash,
        "remote_mutation",
        "push",
        False,
    )
    assert item["reason"] == "tool 'push' changes a remote system; a person must approve it"
    assert {"path": "request.args.x", "value": "3"} in item["fields"]


def test_one_approval_is_shown_as_json_and_as_text_ending_with_the_end_line(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    hook = Hook(store, clock)
    shown = hook.send("GET", f"/runs/{run.id}/approvals/{approval.id}")
    assert shown.status_code == 200
    assert shown.json()["hash"] == approval.hash
    text = hook.send("GET", f"/runs/{run.id}/approvals/{approval.id}?format=text")
    assert text.status_code == 200
    assert text.headers["content-type"] == "text/plain; charset=utf-8"
    assert text.text.endswith(f"----- end of approval {approval.id} for tool push -----\n")
    assert f"hash  {approval.hash}\n" in text.text
    assert error(hook.send("GET", f"/runs/{run.id}/approvals/{approval.id}?format=html")) == (
        400,
        "bad_request",
    )


def test_approve_answers_202_and_the_programs_resume_executes_exactly_the_approved_request(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    clock = FakeClock()
    driver, run, push, approval = waiting(store, clock, args={"x": 41, "branch": "main"})
    hook = Hook(store, clock)
    response = hook.send(
        "POST",
        f"/runs/{run.id}/approvals/{approval.id}/approve",
        {"hash": approval.hash, "by": "alice@chat", "note": "looks right"},
    )
    assert response.status_code == 202
    body = response.json()
    assert body["approval"]["status"] == "approved"
    assert (body["approval"]["decided_by"], body["approval"]["note"]) == (
        "alice@chat",
        "looks right",
    )
    assert body["run"] == {"id": run.id, "status": "WAITING_FOR_APPROVAL"}
    assert push.calls == []  # approving executes nothing
    assert driver.resume_sync(run.id).status == "COMPLETED"
    assert [c.args for c in push.calls] == [{"x": 41, "branch": "main"}]
    started = [e for e in store.list_events(run_id=run.id) if e.type == "step.tool_started"]
    assert started[0].payload["approval_id"] == approval.id


def test_reject_answers_200_and_the_run_is_cancelled_without_the_call(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    clock = FakeClock()
    _driver, run, push, approval = waiting(store, clock)
    hook = Hook(store, clock)
    response = hook.send(
        "POST",
        f"/runs/{run.id}/approvals/{approval.id}/reject",
        {"hash": approval.hash, "by": "bob", "note": "wrong branch"},
    )
    assert response.status_code == 200
    assert response.json()["run"] == {
        "id": run.id,
        "status": "CANCELLED",
        "reason": "approval_rejected",
    }
    got = store.get_run(run.id)
    assert (got.status, got.reason, got.reason_detail) == (
        "CANCELLED",
        "approval_rejected",
        "wrong branch",
    )
    assert push.calls == []


def test_cancel_answers_200_with_the_cancelled_run(any_store: agentrt.Store) -> None:
    store = any_store
    clock = FakeClock()
    _driver, run, push, _approval = waiting(store, clock)
    hook = Hook(store, clock)
    response = hook.send("POST", f"/runs/{run.id}/cancel", {"by": "carol", "note": "stop"})
    assert response.status_code == 200
    assert response.json()["run"]["status"] == "CANCELLED"
    assert response.json()["run"]["reason"] == "operator_cancelled"
    finished = [e for e in store.list_events(run_id=run.id) if e.type == "run.finished"]
    assert finished[-1].payload["reason"] == "operator_cancelled"
    assert push.calls == []


# --- 400 / 404 ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"by": "a", "hash": "h", "extra": 1}', "unknown field(s) extra"),
        (b'{"hash": "h"}', "by is required"),
        (b'{"by": 7, "hash": "h"}', "by must be a string"),
        (b'{"by": "a", "hash": 7}', "hash must be a string"),
        (b'{"by": "a\\nb", "hash": "h"}', "one line of visible characters"),
        (b"\xff\xfe", "not JSON"),
        (b"[" * 8000 + b"]" * 8000, "nested too deeply"),
        # One level deeper than a recorded value may go (257: the object and 256 lists),
        # which every interpreter parses.
        (b'{"by": ' + b"[" * 256 + b"]" * 256 + b', "hash": "h"}', "nested too deeply"),
        (b'{"by": "a", "hash": "h", "by": "b"}', "repeats a key: ['by']"),
    ],
)
def test_a_malformed_decision_body_is_a_bad_request_and_changes_nothing(
    store: agentrt.Store, db_path: Path, body: bytes, problem: str
) -> None:
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    hook = Hook(store, clock)
    before = snapshot(db_path)
    response = hook.send("POST", f"/runs/{run.id}/approvals/{approval.id}/approve", body)
    assert error(response) == (400, "bad_request")
    assert problem in response.json()["error"]
    assert snapshot(db_path) == before


def test_a_deep_body_cut_inside_a_string_of_escaped_quotes_is_refused_at_once(
    store: agentrt.Store, db_path: Path
) -> None:
    # Its nesting is judged on the event loop before it is parsed (decision 0238): a signed
    # body of 64 KiB whose last string never ends, each `\\"` in it a string's possible
    # start, took seconds of CPU there. Bounded by this process's CPU time, not the clock's.
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    hook = Hook(store, clock)
    before = snapshot(db_path)
    body = b"[" * 257 + b'"' + b'\\"' * 32_000
    began = time.process_time()
    response = hook.send("POST", f"/runs/{run.id}/approvals/{approval.id}/approve", body)
    assert time.process_time() - began < 1
    assert error(response) == (400, "bad_request")
    assert response.json()["error"] == "the body is not JSON: nested too deeply"
    assert snapshot(db_path) == before


def test_a_bad_limit_is_a_bad_request(store: agentrt.Store) -> None:
    clock = FakeClock()
    _driver, run, _push, _approval = waiting(store, clock)
    hook = Hook(store, clock)
    for limit in ("0", "101", "-1", "x", "\u00b2", "1" * 40):
        response = hook.send("GET", f"/runs/{run.id}/approvals?limit={limit}")
        assert error(response) == (400, "bad_request")


def test_unknown_runs_approvals_and_routes_are_not_found_and_nothing_lists_all_runs(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    hook = Hook(store, clock)
    assert error(hook.send("GET", "/runs/nope/approvals")) == (404, "not_found")
    assert error(hook.send("GET", f"/runs/{run.id}/approvals/nope")) == (404, "not_found")
    body = {"hash": approval.hash, "by": "a"}
    assert error(hook.send("POST", f"/runs/nope/approvals/{approval.id}/approve", body)) == (
        404,
        "not_found",
    )
    assert error(hook.send("POST", "/runs/nope/cancel", {"by": "a"})) == (404, "not_found")
    for path in ("/runs", "/runs/", "/", "/approvals"):
        assert error(hook.send("GET", path)) == (404, "not_found")


def test_a_route_asked_with_another_method_is_405_naming_the_allowed_one(
    store: agentrt.Store, db_path: Path
) -> None:
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    hook = Hook(store, clock)
    before = snapshot(db_path)
    response = hook.send("GET", f"/runs/{run.id}/approvals/{approval.id}/approve")
    assert error(response) == (405, "method_not_allowed")
    assert response.headers["allow"] == "POST"
    assert error(hook.send("DELETE", f"/runs/{run.id}/approvals")) == (405, "method_not_allowed")
    assert snapshot(db_path) == before


# --- 409 / 410 ----------------------------------------------------------------------------------


def test_a_stale_hash_is_409_approval_changed_and_the_new_request_is_not_decided(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    clock = FakeClock()
    driver, run, push, shown = waiting(store, clock)
    hook = Hook(store, clock)
    path = f"/runs/{run.id}/approvals/{shown.id}/approve"
    assert hook.send("POST", path, {"hash": shown.hash, "by": "bob"}).status_code == 202
    # The tool changed before the program resumed: the run waits again on a new request.
    changed = RecordingTool("push", SideEffect.REMOTE_MUTATION, description="force-pushes")
    restarted(store, driver.agent, changed, clock).resume_sync(run.id)
    (current,) = store.pending_approvals(run.id)
    before = snapshot(database)
    response = hook.send(
        "POST",
        f"/runs/{run.id}/approvals/{current.id}/approve",
        {"hash": shown.hash, "by": "alice"},
    )
    assert error(response) == (409, "approval_changed")
    assert snapshot(database) == before
    assert changed.calls == [] and push.calls == []


def test_a_decision_without_a_hash_is_409_approval_changed(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    hook = Hook(store, clock)
    before = snapshot(database)
    path = f"/runs/{run.id}/approvals/{approval.id}/approve"
    for body in ({"by": "alice"}, {"by": "alice", "hash": ""}):
        assert error(hook.send("POST", path, body)) == (409, "approval_changed")
    assert snapshot(database) == before


def test_deciding_an_approval_twice_is_409_not_pending(any_store: agentrt.Store) -> None:
    store = any_store
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    hook = Hook(store, clock)
    body = {"hash": approval.hash, "by": "alice"}
    path = f"/runs/{run.id}/approvals/{approval.id}"
    assert hook.send("POST", f"{path}/approve", body).status_code == 202
    assert error(hook.send("POST", f"{path}/approve", body)) == (409, "not_pending")
    assert error(hook.send("POST", f"{path}/reject", body)) == (409, "not_pending")
    assert error(hook.send("GET", path)) == (409, "not_pending")
    # The answer says who decided, how and when.
    decided = store.get_approval(run.id, approval.id)
    assert hook.send("POST", f"{path}/reject", body).json()["error"] == (
        f"approval {approval.id} was already approved by alice at {format_time(decided.decided_at)}"
    )


def test_a_pending_approval_of_a_run_that_is_not_waiting_is_409_run_not_waiting(
    any_store: agentrt.Store, database: str
) -> None:
    """No path of this runtime leaves a pending approval on a RUNNING run; a record that
    says so (an older runtime, a hand edit) must still be refused, not decided."""
    store = any_store
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    execute(database, "UPDATE runs SET status = 'RUNNING' WHERE id = ?", (run.id,))
    hook = Hook(store, clock)
    before = snapshot(database)
    response = hook.send(
        "POST",
        f"/runs/{run.id}/approvals/{approval.id}/approve",
        {"hash": approval.hash, "by": "alice"},
    )
    assert error(response) == (409, "run_not_waiting")
    assert snapshot(database) == before


def test_cancelling_a_finished_run_is_409_run_finished(any_store: agentrt.Store) -> None:
    store = any_store
    clock = FakeClock()
    driver, run, _push, approval = waiting(store, clock)
    driver.approve(run.id, approval.id, by="alice")
    assert driver.resume_sync(run.id).status == "COMPLETED"
    hook = Hook(store, clock)
    response = hook.send("POST", f"/runs/{run.id}/cancel", {"by": "bob"})
    assert error(response) == (409, "run_finished")


def test_an_approval_altered_in_the_file_is_409_approval_hash_and_never_shown(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    clock = FakeClock()
    _driver, run, push, approval = waiting(store, clock)
    tamper(database, approval.id)
    hook = Hook(store, clock)
    path = f"/runs/{run.id}/approvals/{approval.id}"
    assert error(hook.send("GET", path)) == (409, "approval_hash")
    assert error(hook.send("GET", f"/runs/{run.id}/approvals")) == (409, "approval_hash")
    before = snapshot(database)
    response = hook.send("POST", f"{path}/approve", {"hash": approval.hash, "by": "alice"})
    assert error(response) == (409, "approval_hash")
    assert snapshot(database) == before
    assert push.calls == []


def test_an_approval_past_its_ttl_is_410_expired_and_nothing_changes(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    clock = FakeClock()
    _driver, run, _push, approval = waiting(
        store, clock, limits=Limits(approval_ttl=timedelta(minutes=10))
    )
    clock.advance(timedelta(minutes=11))
    hook = Hook(store, clock)
    shown = hook.send("GET", f"/runs/{run.id}/approvals/{approval.id}")
    assert shown.status_code == 200 and shown.json()["expired"] is True
    before = snapshot(database)
    response = hook.send(
        "POST",
        f"/runs/{run.id}/approvals/{approval.id}/approve",
        {"hash": approval.hash, "by": "late"},
    )
    assert error(response) == (410, "expired")
    assert snapshot(database) == before


def test_the_approval_of_a_cancelled_run_is_410_expired(any_store: agentrt.Store) -> None:
    store = any_store
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    hook = Hook(store, clock)
    assert hook.send("POST", f"/runs/{run.id}/cancel", {"by": "carol"}).status_code == 200
    path = f"/runs/{run.id}/approvals/{approval.id}"
    assert error(hook.send("GET", path)) == (410, "expired")
    body = {"hash": approval.hash, "by": "alice"}
    assert error(hook.send("POST", f"{path}/approve", body)) == (410, "expired")


# --- 401: signatures ----------------------------------------------------------------------------


@pytest.fixture
def hook_and_path(store: agentrt.Store) -> tuple[Hook, str, agentrt.Approval]:
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    return Hook(store, clock), f"/runs/{run.id}/approvals/{approval.id}", approval


def test_a_correctly_signed_request_is_served(hook_and_path: Any) -> None:
    hook, path, _approval = hook_and_path
    assert hook.send("GET", path).status_code == 200


@pytest.mark.parametrize(
    "how",
    [
        "unsigned",
        "wrong secret",
        "tampered body",
        "tampered path",
        "tampered query",
        "other method",
        "timestamp too old",
        "timestamp too new",
        "timestamp not a number",
        "nonce too long",
        "empty nonce",
        "signature not hex",
        "signature other scheme",
        "signature upper case",
    ],
)
def test_a_request_not_signed_as_required_is_401_and_changes_nothing(
    hook_and_path: Any, db_path: Path, how: str
) -> None:
    hook, path, approval = hook_and_path
    body = json.dumps({"hash": approval.hash, "by": "alice"}).encode()
    post = f"{path}/approve"
    before = snapshot(db_path)
    if how == "unsigned":
        response = hook.http.post(post, content=body)
    elif how == "wrong secret":
        response = hook.send("POST", post, body, secret="x" * 40)
    elif how == "tampered body":
        response = hook.send("POST", post, body, signed_body=body.replace(b"alice", b"alicf"))
    elif how == "tampered path":
        response = hook.send("POST", post, body, signed_path=f"{path}/reject")
    elif how == "tampered query":
        response = hook.send("GET", f"{path}?format=text", signed_path=path)
    elif how == "other method":
        headers = signed_headers(SECRET, "GET", post, body, timestamp=NOW, nonce="n-method")
        response = hook.http.post(post, content=body, headers=headers)
    elif how == "timestamp too old":
        response = hook.send("POST", post, body, ts=NOW - 301)
    elif how == "timestamp too new":
        response = hook.send("POST", post, body, ts=NOW + 301)
    else:
        headers = signed_headers(SECRET, "POST", post, body, timestamp=NOW, nonce="n-headers")
        if how == "timestamp not a number":
            headers["X-Approval-Timestamp"] = f"{NOW}.0"
        elif how == "nonce too long":
            headers = signed_headers(SECRET, "POST", post, body, timestamp=NOW, nonce="n" * 64)
            headers["X-Approval-Nonce"] = "n" * 65
            headers["X-Approval-Signature"] = sign(SECRET, NOW, "n" * 65, "POST", post, body)
        elif how == "empty nonce":
            headers["X-Approval-Nonce"] = ""
            headers["X-Approval-Signature"] = sign(SECRET, NOW, "", "POST", post, body)
        elif how == "signature not hex":
            headers["X-Approval-Signature"] = "v1=" + "z" * 64
        elif how == "signature other scheme":
            headers["X-Approval-Signature"] = headers["X-Approval-Signature"].replace("v1=", "v2=")
        elif how == "signature upper case":
            headers["X-Approval-Signature"] = "v1=" + headers["X-Approval-Signature"][3:].upper()
        response = hook.http.post(post, content=body, headers=headers)
    assert error(response) == (401, "unauthorized")
    # The refusal names no route, run or approval to an unauthenticated caller.
    assert response.json()["error"] == "the request is not signed as required"
    assert snapshot(db_path) == before


def test_timestamps_at_the_edges_of_the_window_and_a_64_character_nonce_are_accepted(
    hook_and_path: Any,
) -> None:
    hook, path, _approval = hook_and_path
    assert hook.send("GET", path, ts=NOW - 300).status_code == 200
    assert hook.send("GET", path, ts=NOW + 300).status_code == 200
    assert hook.send("GET", path, nonce="n" * 64).status_code == 200


def test_a_replayed_request_is_refused_and_so_is_a_reused_nonce(
    hook_and_path: Any, db_path: Path
) -> None:
    hook, path, approval = hook_and_path
    body = json.dumps({"hash": approval.hash, "by": "alice"}).encode()
    headers = signed_headers(SECRET, "POST", f"{path}/reject", body, timestamp=NOW, nonce="once")
    first = hook.http.post(f"{path}/reject", content=body, headers=headers)
    assert first.status_code == 200
    after_first = snapshot(db_path)
    again = hook.http.post(f"{path}/reject", content=body, headers=headers)
    assert error(again) == (401, "unauthorized")
    # The same nonce signing another request is a replay too.
    assert error(hook.send("GET", path, nonce="once")) == (401, "unauthorized")
    assert snapshot(db_path) == after_first


def test_a_secret_shorter_than_32_bytes_is_refused_at_construction(store: agentrt.Store) -> None:
    local = Local(store)
    for secret in ("s" * 31, b"s" * 31, "é" * 15, ""):
        with pytest.raises(ConfigError, match="at least 32 bytes"):
            webhook_app(local, secret=secret)
        with pytest.raises(ConfigError, match="at least 32 bytes"):
            WebhookClient("http://hook.test", secret)
    assert webhook_app(local, secret="é" * 16) is not None  # 32 bytes of UTF-8
    assert "s" * 32 not in repr(webhook_app(local, secret="s" * 32))


def test_the_documented_signature_example_is_pinned() -> None:
    # docs/approvals.md computes this value in Python and with openssl.
    assert (
        sign(
            "an-example-secret-of-at-least-32-bytes",
            1767225600,
            "3f2a9c4e1b7d4a60",
            "POST",
            "/runs/r1/approvals/a1/approve",
            b'{"hash":"9b1d","by":"alice","note":""}',
        )
        == "v1=23cf49fab7deefff250b130746442ad3dd0d401f2a281dfcf76541f8dc8d1a2c"
    )


# --- 413 / 429: before the body --------------------------------------------------------------


def http_scope(
    method: str, path: str, headers: dict[str, str], client: str = "127.0.0.1"
) -> dict[str, Any]:
    """The ASGI scope of one request to the webhook."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": (client, 50000),
        "server": ("hook.test", 80),
    }


def asgi(
    app: Any,
    method: str,
    path: str,
    headers: dict[str, str],
    chunks: list[bytes],
    client: str = "127.0.0.1",
) -> tuple[int, dict[str, Any], int]:
    """One request by raw ASGI messages: (status, JSON body, chunks the app read)."""
    read = 0

    async def main() -> tuple[int, dict[str, Any]]:
        nonlocal read
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            nonlocal read
            if read < len(chunks):
                read += 1
                return {
                    "type": "http.request",
                    "body": chunks[read - 1],
                    "more_body": read < len(chunks),
                }
            await asyncio.sleep(3600)  # nothing more is coming
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app(http_scope(method, path, headers, client), receive, send)
        start = next(m for m in sent if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return start["status"], json.loads(body)

    status, body = asyncio.run(main())
    return status, body, read


def test_a_body_over_16_kib_is_413_while_it_streams_whatever_content_length_says(
    hook_and_path: Any, db_path: Path
) -> None:
    hook, path, approval = hook_and_path
    post = f"{path}/approve"
    padding = "p" * 2 * MAX_BODY
    body = json.dumps({"hash": approval.hash, "by": "alice", "note": padding}).encode()
    chunks = [body[i : i + 1024] for i in range(0, len(body), 1024)]
    before = snapshot(db_path)
    # Content-Length claims a small body; the stream goes on: refused at the first byte over.
    headers = signed_headers(SECRET, "POST", post, body, timestamp=NOW, nonce="big-1")
    headers["Content-Length"] = "100"
    status, reply, read = asgi(hook.app, "POST", post, headers, chunks)
    assert (status, reply["code"]) == (413, "body_too_large")
    assert read == MAX_BODY // 1024 + 1 < len(chunks)
    # No Content-Length at all (chunked): the same.
    headers = signed_headers(SECRET, "POST", post, body, timestamp=NOW, nonce="big-2")
    status, reply, read = asgi(hook.app, "POST", post, headers, chunks)
    assert (status, reply["code"], read) == (413, "body_too_large", MAX_BODY // 1024 + 1)
    # An honest Content-Length over the cap: refused before any byte is read.
    headers = signed_headers(SECRET, "POST", post, body, timestamp=NOW, nonce="big-3")
    headers["Content-Length"] = str(len(body))
    status, reply, read = asgi(hook.app, "POST", post, headers, chunks)
    assert (status, reply["code"], read) == (413, "body_too_large", 0)
    # Through a real client too.
    response = hook.send("POST", post, body)
    assert error(response) == (413, "body_too_large")
    assert snapshot(db_path) == before


def test_a_body_of_exactly_16_kib_is_read(hook_and_path: Any) -> None:
    hook, path, approval = hook_and_path
    body = json.dumps({"hash": approval.hash, "by": "alice", "note": ""}).encode()
    body = body[:-1] + b" " * (MAX_BODY - len(body)) + b"}"
    assert len(body) == MAX_BODY
    # Padded with whitespace to the byte: the cap is inclusive.
    assert hook.send("POST", f"{path}/approve", body).status_code == 202


def test_the_rate_limit_refuses_with_429_before_reading_the_body_and_refills(
    store: agentrt.Store,
) -> None:
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    hook = Hook(store, clock, rate_limit=RateLimiter(burst=2, per_second=0.5))
    path = f"/runs/{run.id}/approvals/{approval.id}"
    assert hook.send("GET", path).status_code == 200
    assert hook.send("GET", path).status_code == 200
    body = json.dumps({"hash": approval.hash, "by": "alice"}).encode()
    headers = signed_headers(SECRET, "POST", f"{path}/approve", body, timestamp=NOW, nonce="r")
    status, reply, read = asgi(hook.app, "POST", f"{path}/approve", headers, [body], "testclient")
    assert (status, reply["code"], read) == (429, "rate_limited", 0)
    limited = hook.send("GET", path)
    assert error(limited) == (429, "rate_limited")
    assert limited.headers["retry-after"] == "2"
    # Unsigned requests spend the bucket too: the limit comes first.
    assert error(hook.http.get(path)) == (429, "rate_limited")
    # Another client has its own bucket.
    status, _reply, _read = asgi(hook.app, "GET", path, {}, [b""], "10.0.0.2")
    assert status == 401
    hook.wall.t += 2
    assert hook.send("GET", path).status_code == 200
    assert store.get_approval(run.id, approval.id).status == "pending"


def test_the_rate_limiter_keeps_a_bounded_number_of_clients() -> None:
    limiter = RateLimiter(burst=1, per_second=1.0, max_keys=3)
    for key in ("a", "b", "c"):
        assert limiter.take(key, 0.0) == 0.0
    # The table is full of clients that spent their token: a new client shares one overflow.
    assert limiter.take("d", 0.0) == 0.0
    assert limiter.take("e", 0.0) == 1.0
    # Once the first three have refilled (idle), they make room for new clients.
    assert limiter.take("f", 5.0) == 0.0
    assert len(limiter._buckets) <= 3


def test_the_nonce_cache_forgets_nonces_past_the_window_and_refuses_when_full() -> None:
    cache = NonceCache(skew=300, max_entries=2)
    assert cache.add("a", NOW, NOW) is True
    assert cache.add("a", NOW, NOW) is False
    assert cache.add("b", NOW + 10, NOW + 10) is True
    from agentrt.approver._signing import CacheFull

    with pytest.raises(CacheFull):
        cache.add("c", NOW + 10, NOW + 10)
    # Past a's window (its timestamp would be refused anyway), it is forgotten.
    assert cache.add("c", NOW + 305, NOW + 301) is True
    assert len(cache) == 2


def test_a_full_nonce_cache_is_429_not_a_forgotten_nonce(hook_and_path: Any, store: Any) -> None:
    _hook, path, _approval = hook_and_path
    full = Hook(store, FakeClock(), nonces=NonceCache(max_entries=1))
    assert full.send("GET", path).status_code == 200
    assert error(full.send("GET", path)) == (429, "rate_limited")


# --- the event loop, the client -----------------------------------------------------------------


def test_store_calls_run_in_a_worker_thread_not_on_the_event_loop(store: agentrt.Store) -> None:
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    seen: list[str] = []

    class Watching(Local):
        def show(self, run_id: str, approval_id: str) -> Any:
            try:
                asyncio.get_running_loop()
                seen.append("on the event loop")
            except RuntimeError:
                seen.append(threading.current_thread().name)
            return super().show(run_id, approval_id)

    app = webhook_app(Watching(store, now=clock), secret=SECRET, now=lambda: NOW)
    http = TestClient(app)
    path = f"/runs/{run.id}/approvals/{approval.id}"
    headers = signed_headers(SECRET, "GET", path, b"", timestamp=NOW, nonce="thread")
    assert http.get(path, headers=headers).status_code == 200
    assert len(seen) == 1 and seen[0] != "on the event loop"


def test_concurrent_decisions_on_one_approval_decide_it_exactly_once(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    clock = FakeClock()
    driver, run, push, approval = waiting(store, clock)
    app = webhook_app(Local(store, now=clock), secret=SECRET, now=lambda: NOW)
    path = f"/runs/{run.id}/approvals/{approval.id}"

    async def main() -> list[tuple[int, str]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://hook.test") as http:

            async def decide(i: int) -> tuple[int, str]:
                verb = "approve" if i % 2 == 0 else "reject"
                body = json.dumps({"hash": approval.hash, "by": f"person-{i}"}).encode()
                headers = signed_headers(
                    SECRET, "POST", f"{path}/{verb}", body, timestamp=NOW, nonce=f"c-{i}"
                )
                response = await http.post(f"{path}/{verb}", content=body, headers=headers)
                return response.status_code, verb

            return await asyncio.gather(*(decide(i) for i in range(8)))

    results = asyncio.run(main())
    won = [verb for status, verb in results if status in (200, 202)]
    assert len(won) == 1
    assert sorted(status for status, _ in results).count(409) == 7
    decided = [e for e in store.list_events(run_id=run.id) if e.type == "approval.decided"]
    status = {"approve": "approved", "reject": "rejected"}[won[0]]
    assert len(decided) == 1 and decided[0].payload["status"] == status
    if won[0] == "approve":
        assert driver.resume_sync(run.id).status == "COMPLETED"
        assert len(push.calls) == 1
    else:
        assert store.get_run(run.id).status == "CANCELLED" and push.calls == []


def test_an_unexpected_failure_is_500_without_its_detail(store: agentrt.Store) -> None:
    clock = FakeClock()
    _driver, run, _push, _approval = waiting(store, clock)

    class Broken(Local):
        def pending(self, run_id: str, limit: int = 20) -> Any:
            raise RuntimeError("/srv/secret/path.db is on fire")

    app = webhook_app(Broken(store, now=clock), secret=SECRET, now=lambda: NOW)
    path = f"/runs/{run.id}/approvals"
    headers = signed_headers(SECRET, "GET", path, b"", timestamp=NOW, nonce="boom")
    response = TestClient(app).get(path, headers=headers)
    assert error(response) == (500, "internal_error")
    assert "secret" not in response.text


def test_the_client_signs_shows_approves_and_reports_refusals_by_code(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    clock = FakeClock()
    driver, run, push, approval = waiting(store, clock, args={"x": 5})
    hook = Hook(store, clock)
    client = WebhookClient("http://hook.test", SECRET, http=hook.http, now=hook.wall)
    assert "abcdef" not in repr(client)
    (item,) = client.pending(run.id)
    assert item["approval_id"] == approval.id
    assert client.show(run.id, approval.id)["hash"] == approval.hash
    assert client.show_text(run.id, approval.id).endswith("for tool push -----\n")
    assert client.approval_url(run.id, approval.id) == (
        f"http://hook.test/runs/{run.id}/approvals/{approval.id}"
    )
    with pytest.raises(WebhookError) as stale:
        client.approve(run.id, approval.id, "0" * 64, "alice")
    assert (stale.value.status, stale.value.code) == (409, "approval_changed")
    done = client.approve(run.id, approval.id, item["hash"], "alice", "ok")
    assert done["approval"]["status"] == "approved"
    with pytest.raises(WebhookError) as twice:
        client.reject(run.id, approval.id, item["hash"], "alice")
    assert twice.value.code == "not_pending"
    assert driver.resume_sync(run.id).status == "COMPLETED"
    assert [c.args for c in push.calls] == [{"x": 5}]
    with pytest.raises(WebhookError) as finished:
        client.cancel(run.id, "bob")
    assert finished.value.code == "run_finished"


def test_ids_with_reserved_characters_are_signed_as_sent(store: agentrt.Store) -> None:
    clock = FakeClock()
    hook = Hook(store, clock)
    client = WebhookClient("http://hook.test", SECRET, http=hook.http, now=hook.wall)
    with pytest.raises(WebhookError) as missing:
        client.pending("a run/with ?odd #chars%")
    assert (missing.value.status, missing.value.code) == (404, "not_found")


def test_decision_is_importable_as_documented() -> None:
    assert Decision.__module__ == "agentrt.approver"


@pytest.mark.slow
def test_the_chat_example_posts_the_link_approves_through_the_client_and_the_run_completes(
    tmp_path: Path,
) -> None:
    pytest.importorskip("uvicorn", reason="the example serves the webhook with uvicorn")
    import subprocess
    import sys

    db = tmp_path / "chat.db"
    example = Path(__file__).resolve().parent.parent / "examples" / "webhook_chat.py"
    result = subprocess.run(
        [sys.executable, str(example), "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].endswith("stopped: WAITING_FOR_APPROVAL")
    assert lines[1].startswith("[chat] Approval needed: http://127.0.0.1:")
    assert lines[2].startswith("[chat] ... ----- end of approval ")
    assert lines[2].endswith(" for tool push_branch -----")
    assert lines[3] == "[bot] a decision on another hash: 409 approval_changed"
    assert lines[5] == "[program] resumed: COMPLETED goal_completed; pushed ['feature/login']"
    assert lines[6] == "event chain: 14 events, intact"
    store = agentrt.open_existing(db, read_only=True)
    (run,) = store.list_runs()
    (approval,) = store.list_approvals(run.id)
    assert (approval.status, approval.decided_by, approval.note) == (
        "approved",
        "alice@chat",
        "ship it",
    )
    store.close()


def test_a_replay_whose_body_trickles_in_past_the_window_is_refused(
    hook_and_path: Any, db_path: Path
) -> None:
    # A captured request is replayed inside the window, its body held back until the
    # original's nonce has left the cache: the window is judged again once the body is in.
    hook, path, approval = hook_and_path
    post = f"{path}/reject"
    body = json.dumps({"hash": approval.hash, "by": "alice"}).encode()
    headers = signed_headers(SECRET, "POST", post, body, timestamp=NOW, nonce="captured")
    assert hook.http.post(post, content=body, headers=headers).status_code == 200
    after = snapshot(db_path)

    async def main() -> int:
        sent: list[dict[str, Any]] = []
        hook.wall.t = NOW + 299

        async def receive() -> dict[str, Any]:
            # While the replay's body is "in flight", time passes and another signed
            # request prunes the cache.
            hook.wall.t = NOW + 400
            other = signed_headers(SECRET, "GET", path, b"", timestamp=NOW + 400, nonce="later")
            await asyncio.to_thread(hook.http.get, path, headers=other)
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await hook.app(http_scope("POST", post, headers), receive, send)
        start = next(m for m in sent if m["type"] == "http.response.start")
        return int(start["status"])

    assert asyncio.run(main()) == 401
    assert snapshot(db_path) == after


def test_the_client_fits_the_longest_note_a_decision_allows_in_the_body_cap(
    store: agentrt.Store,
) -> None:
    # 4,000 characters outside ASCII: escaped as \uXXXX (or surrogate pairs) they
    # would be 24,000 to 48,000 bytes and refused as too large; as UTF-8 they fit.
    clock = FakeClock()
    _driver, run, _push, approval = waiting(store, clock)
    hook = Hook(store, clock)
    client = WebhookClient("http://hook.test", SECRET, http=hook.http, now=hook.wall)
    note = "\U0001f44d" * 4000
    done = client.approve(run.id, approval.id, approval.hash, "alice", note)
    assert done["approval"]["note"] == note
    assert store.get_approval(run.id, approval.id).note == note
