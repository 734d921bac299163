"""The provider adapters against servers and settings that would leak a key or misclassify.

What a user sees when a server echoes their key in a *served* (2xx) error, when a
connect never completes, when an error status is followed by a body that stalls,
when a configured URL carries a password, when an error reply has a header byte
beyond ASCII, and when two conversations share one `AnthropicModel` (as every run
of a Driver does). Real adapters (the Anthropic one through its SDK), real Drivers
on SQLite files where accounting is the point, local servers on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import ModelConfig, Price, SideEffect
from agentrt._errors import ConfigError, TransientModelError
from agentrt._model import (
    Message,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agentrt._records import ToolSpec
from agentrt.model_agent import ModelAgent
from agentrt.providers._http import check_endpoint
from agentrt.providers.ollama import OllamaModel
from agentrt.providers.openai_compat import OpenAICompatModel
from agentrt.render import RenderOptions
from conftest import FakeClock, Ids, RecordingTool
from support.providers import (
    Action,
    FakeServer,
    anthropic_error,
    anthropic_message,
    json_reply,
    stall_body,
)

KEY = "sk-local-test-0123456789abcdef"
PASSWORD = "hunter2-s3cret-pw"


def driver_for(store: agentrt.Store, model: Any, **config: Any) -> agentrt.Driver:
    return agentrt.Driver(
        store=store,
        agent=ModelAgent(RenderOptions(max_output_tokens=1000)),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("finish", SideEffect.READ_ONLY, terminal=True)],
        model=ModelConfig(model=model, prices=Price(3_000_000, 15_000_000), **config),
        now=FakeClock(),
        new_id=Ids(),
    )


def recorded_text(store: agentrt.Store, run: agentrt.Run) -> str:
    final = store.get_run(run.id)
    parts = [final.reason_detail]
    parts += [c.error for c in store.list_model_calls(run.id)]
    parts += [repr(e.payload) for e in store.list_events(run_id=run.id)]
    return "\n".join(parts)


def anthropic_model(url: str, **kwargs: Any) -> Any:
    pytest.importorskip("anthropic")
    from agentrt.providers.anthropic import AnthropicModel

    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("timeout", timedelta(seconds=5))
    return AnthropicModel("claude-sonnet-4-5", base_url=url, **kwargs)


# --------------------------------------------------------------------------- served errors


def test_a_key_ollama_echoes_in_a_served_error_is_redacted_in_the_record(tmp_path: Path) -> None:
    """An Ollama behind an authenticating proxy answers 200 `{"error": "... <key>"}`: the
    run fails `model_unavailable`, and model_calls.error, model.failed and the run's
    reason_detail quote the error with the key redacted, as a non-2xx excerpt is."""
    body = {"error": f"unauthorized: key {KEY} is not allowed"}
    store = agentrt.open_store(tmp_path / "runs.db")
    try:
        with FakeServer(json_reply(body)) as server:
            model = OllamaModel("llama3.2", host=server.url, api_key=KEY)
            run = driver_for(store, model).start_sync("g")
        assert (run.status, run.reason) == ("FAILED", "model_unavailable")
        text = recorded_text(store, run)
        assert "unauthorized: key [redacted]" in text
        assert KEY not in text
    finally:
        store.close()


def test_a_key_a_gateway_echoes_in_a_served_anthropic_error_is_redacted(tmp_path: Path) -> None:
    """A gateway in front of Anthropic answers 200 with an error object quoting the key:
    the record quotes it with the key redacted, as a 401 body with the same text is."""
    body = anthropic_error("authentication_error", f"invalid x-api-key {KEY}")
    store = agentrt.open_store(tmp_path / "runs.db")
    try:
        with FakeServer(json_reply(body)) as server:
            run = driver_for(store, anthropic_model(server.url)).start_sync("g")
        assert (run.status, run.reason) == ("FAILED", "model_unavailable")
        text = recorded_text(store, run)
        assert "invalid x-api-key [redacted]" in text
        assert KEY not in text
    finally:
        store.close()


def test_an_openai_compatible_served_error_is_quoted_with_the_key_redacted(
    tmp_path: Path,
) -> None:
    """A gateway speaking the chat-completions protocol answers 200 `{"error": ...}` with no
    choices: the record says so and quotes the error (it said only "no choices", the
    server's reason lost), the key redacted."""
    body = {"error": {"message": f"quota exceeded for key {KEY}", "type": "insufficient_quota"}}
    store = agentrt.open_store(tmp_path / "runs.db")
    try:
        with FakeServer(json_reply(body)) as server:
            model = OpenAICompatModel("gpt-test", base_url=server.url + "/v1", api_key=KEY)
            run = driver_for(store, model).start_sync("g")
        assert (run.status, run.reason) == ("FAILED", "model_unavailable")
        text = recorded_text(store, run)
        assert "no choices but an error:" in text
        assert "quota exceeded for key [redacted]" in text
        assert KEY not in text
    finally:
        store.close()


@pytest.mark.parametrize("key", ["sk-caf\u00e9", "sk-\u201ckey\u201d", "sk-a\u00a0b", "sk-a\tb"])
def test_an_api_key_that_is_not_printable_ascii_is_refused_when_the_model_is_made(
    key: str,
) -> None:
    """A key pasted with a smart quote, an accent, a non-breaking space or a tab cannot be
    sent as a header: refused when the model is made, in one sentence that does not quote
    it (it failed at the first request with a bare UnicodeEncodeError)."""
    with pytest.raises(ConfigError, match=r"^an API key must be printable ASCII characters$"):
        OpenAICompatModel("gpt-test", base_url="http://127.0.0.1:9/v1", api_key=key)


# --------------------------------------------------------------------------- connect


@pytest.fixture
def unconnectable() -> Iterator[int]:
    """A loopback port whose listen backlog is full: connects to it hang in SYN_SENT."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = int(server.getsockname()[1])
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.2)
    with socket.socket() as probe:
        probe.settimeout(0.5)
        try:
            probe.connect(("127.0.0.1", port))
        except (TimeoutError, OSError):
            pass
        else:
            pytest.skip("this kernel accepted a connect past a full backlog")
    try:
        yield port
    finally:
        for filler in fillers:
            filler.close()
        server.close()


def test_a_connect_that_times_out_is_transient_and_charged_nothing(
    tmp_path: Path, unconnectable: int
) -> None:
    """A user points the OpenAI-compatible adapter at a server that cannot take the
    connection, and the adapter's deadline fires while connecting: nothing was sent, so
    the attempt is a transient `error` charged nothing, saying the server could not be
    reached (decision 0010)."""
    model = OpenAICompatModel(
        "m", base_url=f"http://127.0.0.1:{unconnectable}/v1", timeout=timedelta(seconds=1)
    )
    store = agentrt.open_store(tmp_path / "runs.db")
    try:
        run = driver_for(store, model).start_sync("g")
        assert (run.status, run.reason) == ("FAILED", "model_unavailable")
        (attempt,) = store.list_model_calls(run.id)
        assert attempt.status == "error"
        assert (attempt.input_tokens, attempt.output_tokens, attempt.cost_micros) == (0, 0, 0)
        assert "could not be reached" in attempt.error
        final = store.get_run(run.id)
        assert (final.input_tokens, final.output_tokens, final.estimated_cost_micros) == (0, 0, 0)
    finally:
        store.close()


def test_an_anthropic_connect_that_times_out_is_transient(unconnectable: int) -> None:
    """The same through the Anthropic SDK: the deadline fired before the request left,
    so the adapter raises a transient error, not an ambiguous timeout."""
    model = anthropic_model(f"http://127.0.0.1:{unconnectable}", timeout=timedelta(seconds=1))
    with pytest.raises(TransientModelError, match="could not be reached"):
        asyncio.run(model.generate(first("g")))


# --------------------------------------------------------------------------- stalled error body


def test_a_503_whose_body_stalls_is_transient_not_an_ambiguous_timeout(tmp_path: Path) -> None:
    """A user sets a 2 s timeout on a local OpenAI-compatible server, which answers 503
    and then stalls its error body: the status was received, so the attempt is a
    transient `error` naming the 503, charged nothing."""
    store = agentrt.open_store(tmp_path / "runs.db")
    try:
        with FakeServer(stall_body(503, b'{"error": {"message": "overloaded', 10_000)) as server:
            model = OpenAICompatModel(
                "m", base_url=f"{server.url}/v1", timeout=timedelta(seconds=2)
            )
            run = driver_for(store, model).start_sync("g")
        assert (run.status, run.reason) == ("FAILED", "model_unavailable")
        (attempt,) = store.list_model_calls(run.id)
        assert attempt.status == "error"
        assert "503" in attempt.error
        assert (attempt.input_tokens, attempt.output_tokens, attempt.cost_micros) == (0, 0, 0)
        assert store.get_run(run.id).estimated_cost_micros == 0
    finally:
        store.close()


def test_an_anthropic_529_whose_body_stalls_is_transient_within_the_timeout() -> None:
    """The same through the Anthropic SDK with a 1 s timeout: a 529 whose body stalls is
    a transient error naming the status, raised within about the timeout."""
    with FakeServer(stall_body(529, b'{"type": "error", "error": {"type": "overl', 10_000)) as s:
        model = anthropic_model(s.url, timeout=timedelta(seconds=1))
        started = time.monotonic()
        with pytest.raises(TransientModelError, match="529"):
            asyncio.run(model.generate(first("g")))
        assert time.monotonic() - started < 3


# --------------------------------------------------------------------------- credentials in URLs


@pytest.mark.parametrize(
    "host",
    [
        f"https://admin:{PASSWORD}@ollama.example.com",
        f"http://admin:{PASSWORD}@127.0.0.1:11434",
        f"admin:{PASSWORD}@127.0.0.1:11434",
    ],
)
def test_ollama_host_with_credentials_is_refused_without_echoing_them(
    host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user sets OLLAMA_HOST to their proxied Ollama with user:password in it: the
    ConfigError says credentials belong in api_key, without repeating them (and without
    complaining of a port)."""
    monkeypatch.setenv("OLLAMA_HOST", host)
    with pytest.raises(ConfigError) as caught:
        OllamaModel("llama3.2")
    message = str(caught.value)
    assert PASSWORD not in message
    assert "credentials" in message and "port" not in message


@pytest.mark.parametrize(
    "url",
    [
        f"https://admin:{PASSWORD}@api.example.com:99999",  # credentials, then a bad port
        f"https://admin:{PASSWORD}/x@api.example.com",  # a '/' makes the password a "port"
        f"https://admin:{PASSWORD}@[::1/v1",  # a URL urllib cannot split
    ],
)
def test_a_refused_base_url_never_quotes_its_password(url: str) -> None:
    """Whatever else is wrong with a base URL, its refusal quotes no user or password."""
    with pytest.raises(ConfigError) as caught:
        check_endpoint(url, key=None, what="OpenAICompatModel")
    assert PASSWORD not in str(caught.value)


# --------------------------------------------------------------------------- non-ASCII headers


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
    """A gateway in front of Anthropic answers 401 with a header `X-Message: café`: one
    `error` attempt, charged nothing and not retried, saying the provider answered 401."""
    store = agentrt.open_store(tmp_path / "runs.db")
    try:
        with FakeServer(refused_with_header("X-Message: café".encode())) as server:
            driver = driver_for(
                store, anthropic_model(server.url), max_retries=2, backoff=timedelta(0)
            )
            run = driver.start_sync("g")
        assert (run.status, run.reason) == ("FAILED", "model_unavailable")
        attempts = store.list_model_calls(run.id)
        assert [(a.status, a.cost_micros) for a in attempts] == [("error", 0)]
        assert "answered 401" in attempts[0].error
        assert store.get_run(run.id).estimated_cost_micros == 0
    finally:
        store.close()


# --------------------------------------------------------------------------- remembered turns


LOOKUP = ToolSpec(
    name="lookup_order",
    description="Look an order up.",
    input_schema={
        "type": "object",
        "properties": {"order": {"type": "integer"}},
        "required": ["order"],
        "additionalProperties": False,
    },
    side_effect="read_only",
    timeout=timedelta(seconds=5),
)


def turn(thinking: str, text: str, order: int = 1) -> list[dict[str, Any]]:
    return [
        {"type": "thinking", "thinking": thinking, "signature": "EqQBCgIYAhIM" + "A" * 40},
        {"type": "text", "text": text},
        {"type": "tool_use", "id": "toolu_01", "name": "lookup_order", "input": {"order": order}},
    ]


def first(goal: str) -> ModelRequest:
    return ModelRequest(
        system="You are a support agent.",
        messages=(Message("user", (TextBlock(goal),)),),
        tools=(LOOKUP,),
        max_output_tokens=1024,
    )


def continued(
    request: ModelRequest, response: ModelResponse, use_id: str, result: str
) -> ModelRequest:
    """The next request of the same conversation, as the renderer builds it."""
    (use,) = response.tool_uses
    return ModelRequest(
        system=request.system,
        messages=(
            *request.messages,
            Message(
                "assistant",
                (TextBlock(response.text), ToolUseBlock(use_id, use.name, use.input)),
            ),
            Message("user", (ToolResultBlock(use_id, result),)),
        ),
        tools=request.tools,
        max_output_tokens=request.max_output_tokens,
    )


def test_one_conversations_turn_is_not_replayed_into_anothers_request() -> None:
    """Two runs share one AnthropicModel; Bob's run and then Alice's run both call
    lookup_order(1). Bob's next request carries Bob's own thinking and words as his
    assistant turn, nothing of Alice's."""
    bob_turn = turn("Bob asked about his order.", "Let me look up your order, Bob.")
    alice_turn = turn("Alice's card ends in 4242; she is upset.", "Checking, Alice.")
    with FakeServer(
        json_reply(anthropic_message(content=bob_turn, stop_reason="tool_use")),
        json_reply(anthropic_message(content=alice_turn, stop_reason="tool_use")),
        json_reply(anthropic_message()),
    ) as server:
        model = anthropic_model(server.url)

        async def conversations() -> None:
            bob_first = first("Where is my order? - Bob")
            bob = await model.generate(bob_first)
            await model.generate(first("Where is my order? - Alice"))
            await model.generate(continued(bob_first, bob, "toolu_s1_0", "order 1: shipped"))

        asyncio.run(conversations())
    sent = server.requests[2].json()["messages"][1]
    assert sent["role"] == "assistant"
    words = repr(sent["content"])
    assert "Alice" not in words and "4242" not in words
    assert "Let me look up your order, Bob." in words
    assert sent["content"][0]["type"] == "thinking"


def test_a_turn_is_replayed_after_the_results_before_it_are_summarized() -> None:
    """A long run: by the time the second call's turn is sent back, the renderer shows
    the first call's result only by its summary. The turn still goes back with its
    thinking block, since the conversation is the same run's."""
    one = turn("Look up order 1 first.", "Order 1.", order=1)
    two = turn("Now order 2.", "Order 2.", order=2)
    with FakeServer(
        json_reply(anthropic_message(content=one, stop_reason="tool_use")),
        json_reply(anthropic_message(content=two, stop_reason="tool_use")),
        json_reply(anthropic_message()),
    ) as server:
        model = anthropic_model(server.url)

        async def conversation() -> None:
            start = first("Where are orders 1 and 2?")
            reply_one = await model.generate(start)
            second = continued(start, reply_one, "toolu_a1", "order 1: shipped on Monday")
            reply_two = await model.generate(second)
            summarized = ModelRequest(
                system=second.system,
                messages=(
                    *second.messages[:2],
                    Message("user", (ToolResultBlock("toolu_a1", "[earlier result]"),)),
                ),
                tools=second.tools,
                max_output_tokens=second.max_output_tokens,
            )
            await model.generate(continued(summarized, reply_two, "toolu_a2", "order 2: lost"))

        asyncio.run(conversation())
    messages = server.requests[2].json()["messages"]
    assert messages[2]["content"][0]["tool_use_id"] == "toolu_a1"
    assert messages[1]["content"][0] == one[0]
    assert messages[3]["content"][0] == two[0]
