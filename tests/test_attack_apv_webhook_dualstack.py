"""Attack on the webhook's rate-limit buckets when it is served on a dual-stack socket."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette", reason="the webhook extra is not installed")
pytest.importorskip("uvicorn", reason="uvicorn is not installed")

import uvicorn

import agentrt
from agentrt.approver import Local, RateLimiter, signed_headers, webhook_app
from conftest import FakeClock
from support.approvals import paused_run

SECRET = "0123456789abcdef0123456789abcdef-dualstack"
NOW = 1_800_000_000


@contextmanager
def served_dual_stack(app: Any) -> Iterator[str]:
    """`app` on a real uvicorn server bound to `::` with IPv4 accepted too (what
    `--host ::` gives on Linux); an IPv4 peer reaches the app as `::ffff:a.b.c.d`."""
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind(("::", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, host="::", port=port, log_level="warning", lifespan="off", proxy_headers=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()


def test_a_trusted_ipv4_proxy_is_recognised_when_the_webhook_listens_on_a_dual_stack_socket(
    store: agentrt.Store,
) -> None:
    """The operator names their proxy `trusted_proxies=["127.0.0.1"]` and serves on `::`;
    the proxy then arrives as `::ffff:127.0.0.1`, is not recognised, and every client behind
    it spends one shared bucket. The IPv4-mapped peer is that proxy: each client its own."""
    _driver, run, _push = paused_run(store, FakeClock())
    (approval,) = store.pending_approvals(run.id)
    path = f"/runs/{run.id}/approvals/{approval.id}"
    app = webhook_app(
        Local(store, now=FakeClock()),
        secret=SECRET,
        now=lambda: NOW,
        trusted_proxies=["127.0.0.1"],
        rate_limit=RateLimiter(burst=3),
    )
    count = iter(range(1_000))

    def get(http: httpx.Client, client: str) -> int:
        sig = signed_headers(SECRET, "GET", path, b"", timestamp=NOW, nonce=f"n-{next(count)}")
        return http.get(path, headers={**sig, "X-Forwarded-For": client}).status_code

    with served_dual_stack(app) as base, httpx.Client(base_url=base) as http:
        assert [get(http, "203.0.113.7") for _ in range(4)] == [200, 200, 200, 429]
        # Another client behind the same proxy has a bucket of its own.
        assert get(http, "198.51.100.9") == 200
