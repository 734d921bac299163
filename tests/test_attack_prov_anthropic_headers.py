"""Attack: an Anthropic error reply with a non-ASCII byte in one of its headers.

`_GuardedTransport` rebuilds every non-2xx response from its decoded header strings;
a header value with a byte beyond ASCII (a gateway's localized message, a latin-1
server name) makes that rebuild raise `UnicodeEncodeError`, which the SDK wraps as a
connection error: a clean 401 becomes "connection lost ... after sending", ambiguous,
charged the full estimate and retried. Real SDK, real Driver, SQLite file, local server.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

pytest.importorskip("anthropic")

import agentrt
from agentrt import ModelConfig, Price, SideEffect
from agentrt.model_agent import ModelAgent
from agentrt.providers.anthropic import AnthropicModel
from agentrt.render import RenderOptions
from conftest import FakeClock, Ids, RecordingTool
from support.providers import Action, FakeServer, anthropic_error

KEY = "sk-ant-api03-test-0123456789abcdef"


def refused_with_header(header: bytes) -> Action:
    body = json.dumps(anthropic_error("authentication_error", "invalid x-api-key")).encode()

    def act(handler, outcome) -> None:  # type: ignore[no-untyped-def]
        head = (
            b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n"
            + header
            + b"\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
        )
        handler.write(head + body, outcome)

    return act


def test_a_401_with_a_non_ascii_header_is_a_permanent_refusal(tmp_path: Path) -> None:
    """A gateway in front of Anthropic answers 401 with a header `X-Message: café`; today
    the adapter reports a lost connection, so each of the 3 attempts is recorded
    `ambiguous` and charged the full estimate. It should be one `error` attempt, charged
    nothing and not retried, saying the provider answered 401."""
    store = agentrt.open_store(tmp_path / "runs.db")
    try:
        with FakeServer(refused_with_header("X-Message: café".encode())) as server:
            model = AnthropicModel(
                "claude-sonnet-4-5", api_key=KEY, base_url=server.url, timeout=timedelta(seconds=5)
            )
            driver = agentrt.Driver(
                store=store,
                agent=ModelAgent(RenderOptions(max_output_tokens=1000)),
                policy=agentrt.default_policy(),
                tools=[RecordingTool("finish", SideEffect.READ_ONLY, terminal=True)],
                model=ModelConfig(
                    model=model,
                    prices=Price(3_000_000, 15_000_000),
                    max_retries=2,
                    backoff=timedelta(0),
                ),
                now=FakeClock(),
                new_id=Ids(),
            )
            run = driver.start_sync("g")
        assert (run.status, run.reason) == ("FAILED", "model_unavailable")
        attempts = store.list_model_calls(run.id)
        assert [(a.status, a.cost_micros) for a in attempts] == [("error", 0)]
        assert "answered 401" in attempts[0].error
        assert store.get_run(run.id).estimated_cost_micros == 0
    finally:
        store.close()
