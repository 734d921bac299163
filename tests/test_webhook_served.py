"""The webhook as it is served: a real uvicorn server on loopback, real forwarded headers.

Whose rate-limit bucket a request spends is the transport peer's; an address a
request names in `X-Forwarded-For` (or `Forwarded`, `X-Real-IP`) never picks a
bucket unless the peer is a proxy the operator named (`trusted_proxies=`).
uvicorn's defaults replace a loopback peer's address with the header's, so the
app must hold with them as well as with the line `docs/approvals.md` shows.
A database busy past its timeout is `503 busy` with `Retry-After`, not a fault.
"""

from __future__ import annotations

import ast
import json
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette", reason="the webhook extra is not installed")
pytest.importorskip("uvicorn", reason="uvicorn is not installed")

import uvicorn
from starlette.testclient import TestClient

import agentrt
import agentrt._store.sqlite._connection
from agentrt import ConfigError
from agentrt.approver import Local, RateLimiter, signed_headers, webhook_app
from conftest import FakeClock
from support.approvals import paused_run
from support.rows import snapshot

ROOT = Path(__file__).resolve().parent.parent
SECRET = "0123456789abcdef0123456789abcdef-served"
NOW = 1_800_000_000
BURST = 30


def documented_serving_options() -> dict[str, Any]:
    """The keyword arguments of the `uvicorn.run(app, ...)` line in docs/approvals.md."""
    text = (ROOT / "docs" / "approvals.md").read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("uvicorn.run(")]
    call = ast.parse(line.split("#")[0].strip()).body[0]
    assert isinstance(call, ast.Expr) and isinstance(call.value, ast.Call)
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.value.keywords if kw.arg}


SERVINGS = {
    # What docs/approvals.md showed when issue 18 was filed: uvicorn's defaults,
    # which take a loopback peer's address from X-Forwarded-For.
    "uvicorn-defaults": {"host": "127.0.0.1"},
    "as-documented": documented_serving_options(),
}


def dual_stack_socket() -> socket.socket:
    """A socket on `::` that takes IPv4 too (what `--host ::` gives on Linux): an IPv4 peer
    reaches the app as `::ffff:a.b.c.d`."""
    if not socket.has_ipv6:
        pytest.skip("this Python has no IPv6")
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", 0))
    except OSError as exc:
        sock.close()
        pytest.skip(f"no dual-stack socket here: {exc}")
    return sock


@contextmanager
def served(app: Any, *, dual_stack: bool = False, **options: Any) -> Iterator[str]:
    """`app` served by a real uvicorn server on a loopback port (with `dual_stack`, on `::`
    taking IPv4 too); yields its base URL, always reached over IPv4 loopback."""
    options = {k: v for k, v in options.items() if k != "port"}
    assert options.pop("host") == "127.0.0.1"
    if dual_stack:
        sock, host = dual_stack_socket(), "::"
    else:
        sock, host = socket.socket(socket.AF_INET, socket.SOCK_STREAM), "127.0.0.1"
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", lifespan="off", **options
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60  # a loaded machine; started is what we wait for
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()


class Caller:
    """Signs requests (a fresh nonce each) and sends them with the headers given."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http
        self.count = 0

    def get(self, path: str, *, signed: bool = True, **headers: str) -> httpx.Response:
        self.count += 1
        sig = (
            signed_headers(SECRET, "GET", path, b"", timestamp=NOW, nonce=f"n-{self.count}")
            if signed
            else {}
        )
        return self.http.get(path, headers={**sig, **headers})


@pytest.fixture
def waiting_path(store: agentrt.Store) -> str:
    _driver, run, _push = paused_run(store, FakeClock())
    (approval,) = store.pending_approvals(run.id)
    return f"/runs/{run.id}/approvals/{approval.id}"


def hook(store: agentrt.Store, **options: Any) -> Any:
    return webhook_app(Local(store, now=FakeClock()), secret=SECRET, now=lambda: NOW, **options)


def test_the_documented_serving_line_keeps_uvicorn_from_reading_forwarded_headers() -> None:
    options = documented_serving_options()
    assert options["host"] == "127.0.0.1"
    assert options["proxy_headers"] is False


@pytest.mark.slow
@pytest.mark.parametrize("serving", sorted(SERVINGS))
def test_forwarded_addresses_never_choose_a_rate_limit_bucket_on_a_real_server(
    store: agentrt.Store, waiting_path: str, serving: str
) -> None:
    app = hook(store)
    with served(app, **SERVINGS[serving]) as base, httpx.Client(base_url=base) as http:
        caller = Caller(http)
        # 40 signed requests, each naming another forwarded address: one bucket, burst 30.
        statuses = [
            caller.get(waiting_path, **{"X-Forwarded-For": f"10.0.{i}.7"}).status_code
            for i in range(40)
        ]
        assert statuses == [200] * BURST + [429] * (40 - BURST)
        # Other forwarding headers count in the same bucket.
        assert caller.get(waiting_path, Forwarded="for=10.9.9.9").status_code == 429
        assert caller.get(waiting_path, **{"X-Real-IP": "10.9.9.9"}).status_code == 429
        # The loopback peer itself, naming nothing, has its bucket untouched.
        assert caller.get(waiting_path).status_code == 200


@pytest.mark.slow
@pytest.mark.parametrize("serving", sorted(SERVINGS))
def test_an_unsigned_caller_cannot_drain_the_bucket_of_the_address_it_names(
    store: agentrt.Store, waiting_path: str, serving: str
) -> None:
    app = hook(store)
    with served(app, **SERVINGS[serving]) as base, httpx.Client(base_url=base) as http:
        caller = Caller(http)
        # The attacker names the victim's address (the loopback peer's own) 50 times, unsigned.
        for _ in range(50):
            refused = caller.get(waiting_path, signed=False, **{"X-Forwarded-For": "127.0.0.1"})
            assert refused.status_code in (401, 429)
        # The victim's own bucket is full: a whole burst of its signed requests is served.
        assert [caller.get(waiting_path).status_code for _ in range(BURST)] == [200] * BURST
        assert caller.get(waiting_path).status_code == 429


@pytest.mark.slow
def test_behind_a_trusted_proxy_the_client_is_the_address_the_proxy_appended(
    store: agentrt.Store, waiting_path: str
) -> None:
    app = hook(store, trusted_proxies=["127.0.0.1"], rate_limit=RateLimiter(burst=3))
    with served(app, **SERVINGS["as-documented"]) as base, httpx.Client(base_url=base) as http:
        caller = Caller(http)

        def through_proxy(client: str, claimed: str) -> int:
            # What a client sent (`claimed`), then what the proxy appended: the address it saw.
            forwarded = {"X-Forwarded-For": f"{claimed}, {client}"}
            return caller.get(waiting_path, **forwarded).status_code

        # 10.0.0.1 gets its burst whatever it claims further left; then it waits.
        assert [through_proxy("10.0.0.1", f"192.0.2.{i}") for i in range(4)] == [
            200, 200, 200, 429,
        ]  # fmt: skip
        # 10.0.0.2 has its own bucket, and so does the proxy's own traffic naming no client.
        assert through_proxy("10.0.0.2", "10.0.0.1") == 200
        assert caller.get(waiting_path).status_code == 200
        # A peer that is not the named proxy is counted as forwarding, whatever it names.
        other = ClientKeyProbe(app)
        assert other.key("10.0.0.9", {"X-Forwarded-For": "10.0.0.1"}) == other.shared
        assert other.key("10.0.0.9", {}) == "10.0.0.9"


@pytest.mark.slow
def test_a_client_inside_a_trusted_network_never_chooses_its_bucket_on_a_real_server(
    store: agentrt.Store, waiting_path: str
) -> None:
    # The proxy and its clients share the trusted network (review finding 3).
    app = hook(store, trusted_proxies=["127.0.0.0/8"])
    with served(app, **SERVINGS["as-documented"]) as base, httpx.Client(base_url=base) as http:
        caller = Caller(http)

        def through_proxy(client: str, claimed: str) -> int:
            # `claimed` is the client's own writing; the proxy appends the address it saw.
            forwarded = {"X-Forwarded-For": f"{claimed}, {client}"}
            return caller.get(waiting_path, **forwarded).status_code

        # 127.0.0.50 writes 40 left-most entries inside the trusted network: half of them a
        # fresh address each, half the address of another client (127.0.0.51).
        claims = [f"127.0.{i}.9" if i % 2 else "127.0.0.51" for i in range(40)]
        statuses = [through_proxy("127.0.0.50", claimed) for claimed in claims]
        assert statuses == [200] * BURST + [429] * (40 - BURST)
        # 127.0.0.51's bucket was not spent by what 127.0.0.50 wrote: a whole burst is served.
        victim = [through_proxy("127.0.0.51", "127.0.0.50") for _ in range(BURST + 1)]
        assert victim == [200] * BURST + [429]


class ClientKeyProbe:
    """The bucket key the app gives a request from `peer` with `headers` (no request sent)."""

    def __init__(self, app: Any) -> None:
        from agentrt.approver._peers import SHARED_FORWARDED

        self.app = app
        self.shared = SHARED_FORWARDED

    def key(self, peer: str, headers: dict[str, str]) -> str:
        scope = {
            "type": "http",
            "client": (peer, 40000),
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        }
        return str(self.app.client_key(scope))


def test_trusted_proxies_take_the_right_most_untrusted_entry_across_hops(
    store: agentrt.Store,
) -> None:
    probe = ClientKeyProbe(hook(store, trusted_proxies=["10.1.0.0/16", "::1"]))
    chain = {"X-Forwarded-For": "6.6.6.6, 203.0.113.9, 10.1.2.3"}
    assert probe.key("10.1.0.5", chain) == "203.0.113.9"
    assert probe.key("::1", {"X-Forwarded-For": "[2001:db8::1]:4711"}) == "2001:db8::1"
    assert probe.key("10.1.0.5", {"X-Forwarded-For": "203.0.113.9:5555"}) == "203.0.113.9"
    # The proxy wrote no usable address: the proxy itself is counted.
    assert probe.key("10.1.0.5", {"X-Forwarded-For": "6.6.6.6, garbage"}) == "10.1.0.5"
    # Every entry is in a trusted network: what the peer saw (the right-most) is the client;
    # entries further left may be a client's own writing and are never counted.
    assert probe.key("10.1.0.5", {"X-Forwarded-For": "10.1.9.9, 10.1.2.3"}) == "10.1.2.3"
    assert probe.key("10.1.0.5", {"X-Forwarded-For": "10.1.9.9, 10.1.8.8, ::1"}) == "::1"
    assert probe.key("10.1.0.5", {}) == "10.1.0.5"


def test_a_trusted_ipv4_proxy_is_recognised_when_the_webhook_listens_on_a_dual_stack_socket(
    store: agentrt.Store, waiting_path: str
) -> None:
    """The operator names their proxy `trusted_proxies=["127.0.0.1"]` and serves on `::`;
    the proxy arrives as `::ffff:127.0.0.1` and is that proxy: each client behind it spends
    its own bucket."""
    app = hook(store, trusted_proxies=["127.0.0.1"], rate_limit=RateLimiter(burst=3))
    options = documented_serving_options()
    with served(app, dual_stack=True, **options) as base, httpx.Client(base_url=base) as http:
        caller = Caller(http)

        def status(client: str) -> int:
            return caller.get(waiting_path, **{"X-Forwarded-For": client}).status_code

        assert [status("203.0.113.7") for _ in range(4)] == [200, 200, 200, 429]
        assert status("198.51.100.9") == 200  # another client behind the proxy: its own bucket


def test_trusted_proxies_must_be_addresses_and_exclude_a_client_key(store: agentrt.Store) -> None:
    for bad in (["not-an-address"], "127.0.0.1", ["10.0.0.0/33"]):
        with pytest.raises(ConfigError, match="trusted_proxies"):
            hook(store, trusted_proxies=bad)
    with pytest.raises(ConfigError, match="not both"):
        hook(store, trusted_proxies=["127.0.0.1"], client_key=lambda scope: "k")


# --- 503: a database busy past its timeout -------------------------------------------------------


@pytest.mark.slow
def test_a_database_busy_past_its_timeout_is_503_with_retry_after_and_changes_nothing(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        agentrt._store.sqlite._connection, "BUSY_TIMEOUT_MS", 100
    )  # before the store is opened
    with agentrt.open_store(db_path) as store:
        _driver, run, _push = paused_run(store, FakeClock())
        (approval,) = store.pending_approvals(run.id)
        http = TestClient(hook(store), base_url="http://hook.test")
        path = f"/runs/{run.id}/approvals/{approval.id}/approve"
        body = json.dumps({"hash": approval.hash, "by": "alice"}).encode()

        def approve(nonce: str) -> httpx.Response:
            headers = signed_headers(SECRET, "POST", path, body, timestamp=NOW, nonce=nonce)
            return http.post(path, content=body, headers=headers)

        holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")  # held until this test lets go
        before = snapshot(db_path)
        busy = approve("first")
        holder.execute("COMMIT")
        holder.close()
        assert (busy.status_code, busy.json()) == (
            503,
            {"error": "the database is busy; nothing was changed, try again", "code": "busy"},
        )
        assert busy.headers["retry-after"] == "1"
        assert snapshot(db_path) == before
        # The same decision, sent again once the lock is gone, is accepted.
        assert approve("second").status_code == 202
        assert store.get_approval(run.id, approval.id).status == "approved"
