"""The OpenAI-compatible adapter against a real local server playing the provider.

Covers request mapping, reply mapping, and every transport rule of models.md
"Provider adapters" (statuses, Retry-After, redirect, cut-off body, hang,
20 MiB body, keys), plus the shared pieces of `_http` (Retry-After parsing,
loopback, excerpts) that the other adapters reuse.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from agentrt._canonical import JSONFloat, canonical_json
from agentrt._errors import ConfigError, ServedModelError, TransientModelError
from agentrt._model import (
    Message,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agentrt._records import ToolSpec
from agentrt.providers import _http
from agentrt.providers._http import (
    AmbiguousModelError,
    BodyTooLargeError,
    ModelTimeoutError,
    ProviderError,
    RedirectRefusedError,
    Secret,
    excerpt,
    is_loopback,
    parse_retry_after,
)
from agentrt.providers.openai_compat import (
    DEFAULT_BASE_URL,
    OpenAICompatModel,
    parse_response,
    request_body,
)
from support.providers import (
    MIB,
    STALL_DEADLINE,
    STALL_ENDS_WITHIN,
    FakeServer,
    close_delimited,
    cut_off,
    hang,
    huge,
    json_reply,
    openai_completion,
    openai_error,
    openai_tool_call,
    redirect,
    stall_body,
    unused_port,
)

KEY = "sk-local-test-0123456789abcdef"

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    input_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    side_effect="read_only",
    timeout=timedelta(seconds=5),
)

CONVERSATION = ModelRequest(
    system="You are a careful agent.",
    messages=(
        Message("user", (TextBlock("What is the weather in Paris?"),)),
        Message(
            "assistant",
            (
                TextBlock("Let me look."),
                ToolUseBlock("toolu_s1_0", "get_weather", {"city": "Paris", "days": 1}),
            ),
        ),
        Message(
            "user",
            (
                ToolResultBlock("toolu_s1_0", "service down", is_error=True),
                TextBlock("Try again."),
            ),
        ),
    ),
    tools=(WEATHER,),
    max_output_tokens=256,
)


def model(server: FakeServer, **kwargs: Any) -> OpenAICompatModel:
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("timeout", timedelta(seconds=5))
    return OpenAICompatModel("gpt-test", base_url=f"{server.url}/v1", **kwargs)


def generate(m: OpenAICompatModel, request: ModelRequest = CONVERSATION) -> ModelResponse:
    return asyncio.run(m.generate(request))


# --------------------------------------------------------------------------- request mapping


def test_request_maps_system_calls_results_tools_and_options() -> None:
    reply = openai_completion(
        tool_calls=[openai_tool_call("call_9", "get_weather", '{"city": "Paris", "days": 1.50}')],
        finish_reason="tool_calls",
    )
    with FakeServer(json_reply(reply)) as server:
        generate(model(server))
    (seen,) = server.requests
    assert (seen.method, seen.path) == ("POST", "/v1/chat/completions")
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.headers["content-type"] == "application/json"
    assert seen.json() == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "You are a careful agent."},
            {"role": "user", "content": "What is the weather in Paris?"},
            {
                "role": "assistant",
                "content": "Let me look.",
                "tool_calls": [
                    {
                        "id": "toolu_s1_0",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"city":"Paris","days":1}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_s1_0", "content": "error: service down"},
            {"role": "user", "content": "Try again."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city.",
                    "parameters": WEATHER.input_schema,
                },
            }
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "temperature": 0,
        "max_tokens": 256,
        "stream": False,
    }


def test_without_tools_no_tool_choice_and_without_cap_no_max_tokens() -> None:
    request = ModelRequest(system="", messages=(Message("user", (TextBlock("hi"),)),))
    body = request_body("m", request)
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0,
        "stream": False,
    }


def test_request_body_is_byte_identical_and_keeps_number_literals() -> None:
    literal = JSONFloat("1.50")
    request = ModelRequest(
        system="s",
        messages=(
            Message("user", (TextBlock("go"),)),
            Message("assistant", (ToolUseBlock("t1", "f", {"x": literal}),)),
            Message("user", (ToolResultBlock("t1", "ok"),)),
        ),
    )
    first = canonical_json(request_body("m", request))
    assert first == canonical_json(request_body("m", request))
    call = request_body("m", request)["messages"][2]
    assert call == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"x":1.50}'}}
        ],
    }


def test_misplaced_blocks_are_refused() -> None:
    bad_assistant = ModelRequest("", (Message("assistant", (ToolResultBlock("t", "x"),)),))
    bad_user = ModelRequest("", (Message("user", (ToolUseBlock("t", "f", {}),)),))
    for request in (bad_assistant, bad_user):
        with pytest.raises(ConfigError):
            request_body("m", request)


# --------------------------------------------------------------------------- reply mapping


def test_reply_maps_tool_use_usage_and_keeps_raw_bytes() -> None:
    reply = openai_completion(
        content="Checking.",
        tool_calls=[openai_tool_call("call_9", "get_weather", '{"city": "Paris", "days": 1.50}')],
        finish_reason="tool_calls",
    )
    raw = json.dumps(reply, indent=1).encode()
    with FakeServer(json_reply(raw)) as server:
        response = generate(model(server))
    assert response.raw == raw
    assert response.text == "Checking."
    assert response.stop_reason == "tool_use"
    (use,) = response.tool_uses
    assert (use.id, use.name) == ("call_9", "get_weather")
    assert canonical_json(use.input) == b'{"city":"Paris","days":1.50}'
    assert response.usage.to_json() == {
        "input_tokens": 1117,
        "output_tokens": 46,
        "cached_input_tokens": 1024,
    }
    assert response.usage.plausible


CUT = '{"city": "Par'  # arguments cut off by the output cap
FULL = '{"city": "Paris"}'


@pytest.mark.parametrize(
    ("finish", "arguments", "refusal", "stop", "uses"),
    [
        ("stop", None, None, "end_turn", 0),
        ("stop", FULL, None, "tool_use", 1),  # local servers say "stop" after a call
        (None, FULL, None, "tool_use", 1),
        ("tool_calls", FULL, None, "tool_use", 1),
        ("function_call", FULL, None, "tool_use", 1),
        ("length", CUT, None, "max_tokens", 0),  # truncated: no tool use, args unparsed
        ("content_filter", None, None, "refusal", 0),
        ("stop", CUT, "I can't help with that.", "refusal", 0),  # refused: no tool use
        ("eos_token", None, None, "eos_token", 0),  # others passed through
    ],
)
def test_finish_reason_normalized(
    finish: str | None, arguments: str | None, refusal: str | None, stop: str, uses: int
) -> None:
    calls = None if arguments is None else [openai_tool_call("c1", "get_weather", arguments)]
    reply = openai_completion(
        content=None if calls else "text",
        tool_calls=calls,
        finish_reason=finish,
        refusal=refusal,
    )
    response = parse_response(json.dumps(reply).encode())
    assert response.stop_reason == stop
    assert len(response.tool_uses) == uses
    assert response.usage.input_tokens == 1117  # usage kept whatever the stop
    if refusal:
        assert response.text == refusal


@pytest.mark.parametrize(
    "arguments",
    ['{"city": "Paris"', '{"n": NaN}', '{"a": 1, "a": 2}', "[1, 2"],
)
def test_unusable_tool_arguments_are_a_served_error_with_usage(arguments: str) -> None:
    reply = openai_completion(
        tool_calls=[openai_tool_call("c1", "get_weather", arguments)], finish_reason="tool_calls"
    )
    with FakeServer(json_reply(reply)) as server, pytest.raises(ServedModelError) as caught:
        generate(model(server))
    assert "not usable JSON" in str(caught.value)
    assert caught.value.usage.input_tokens == 1117


def test_empty_arguments_mean_no_arguments() -> None:
    reply = openai_completion(
        tool_calls=[openai_tool_call("c1", "now", "")], finish_reason="tool_calls"
    )
    assert parse_response(json.dumps(reply).encode()).tool_uses[0].input == {}


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -3, "completion_tokens": 5},
        {"prompt_tokens": 10.5, "completion_tokens": 5},
        {"prompt_tokens": "10", "completion_tokens": 5},
        {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 11},
        },
        {"completion_tokens": 5},
    ],
)
def test_unusable_usage_is_passed_through_for_the_caller_to_refuse(
    usage: dict[str, Any],
) -> None:
    response = parse_response(json.dumps(openai_completion(content="x", usage=usage)).encode())
    assert not response.usage.plausible


def test_missing_usage_is_not_plausible() -> None:
    reply = openai_completion(content="x")
    del reply["usage"]
    assert not parse_response(json.dumps(reply).encode()).usage.plausible


@pytest.mark.parametrize(
    "body",
    [b"<html>gateway</html>", b"[]", b'{"choices": []}', b'{"choices": [{"message": 3}]}'],
)
def test_unusable_reply_is_a_served_error(body: bytes) -> None:
    with FakeServer(json_reply(body)) as server, pytest.raises(ServedModelError):
        generate(model(server))


def test_content_coded_reply_is_refused() -> None:
    body = json.dumps(openai_completion(content="x")).encode()
    with (
        FakeServer(json_reply(body, headers={"Content-Encoding": "gzip"})) as server,
        pytest.raises(ServedModelError, match="coded"),
    ):
        generate(model(server))
    assert server.requests[0].headers["accept-encoding"] == "identity"


# --------------------------------------------------------------------------- statuses


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503, 529])
def test_transient_statuses_with_retry_after_seconds(status: int) -> None:
    action = json_reply(openai_error("slow down"), status, {"Retry-After": "7"})
    with FakeServer(action) as server, pytest.raises(TransientModelError) as caught:
        generate(model(server))
    assert caught.value.retry_after == timedelta(seconds=7)
    assert str(status) in str(caught.value)


def test_retry_after_as_http_date() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    action = json_reply(openai_error("busy"), 503, {"Retry-After": when})
    with FakeServer(action) as server, pytest.raises(TransientModelError) as caught:
        generate(model(server))
    wait = caught.value.retry_after
    assert isinstance(wait, timedelta)
    assert timedelta(seconds=25) < wait <= timedelta(seconds=30)


def test_transient_without_retry_after_has_none() -> None:
    with (
        FakeServer(json_reply(openai_error("oops"), 500)) as server,
        pytest.raises(TransientModelError) as caught,
    ):
        generate(model(server))
    assert caught.value.retry_after is None


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_other_statuses_are_permanent_with_a_bounded_redacted_excerpt(status: int) -> None:
    # The server echoes the key, as some do in an auth error, inside a huge body.
    body = json.dumps(openai_error(f"Incorrect API key provided: {KEY}. " + "x" * 100_000))
    with (
        FakeServer(json_reply(body.encode(), status)) as server,
        pytest.raises(ProviderError) as caught,
    ):
        generate(model(server))
    error = caught.value
    assert error.status == status
    assert "Incorrect API key provided" in error.excerpt
    assert KEY not in str(error) and KEY[:12] not in str(error)
    assert len(error.excerpt) <= _http.EXCERPT_CHARS + 1
    assert not isinstance(error, TransientModelError | ConnectionError | TimeoutError)


def test_error_status_with_a_stalled_body_is_still_classified_by_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_http, "_EXCERPT_WAIT_SECONDS", 0.2)
    with (
        FakeServer(stall_body(503, b'{"error": {"message": "over', 10_000)) as server,
        pytest.raises(TransientModelError) as caught,
    ):
        generate(model(server))
    assert "over" in str(caught.value)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_redirect_is_not_followed(status: int) -> None:
    with FakeServer(json_reply(openai_completion(content="stolen"))) as elsewhere:
        target = f"{elsewhere.url}/v1/chat/completions"
        with (
            FakeServer(redirect(target, status)) as server,
            pytest.raises(RedirectRefusedError) as caught,
        ):
            generate(model(server))
    assert elsewhere.requests == []  # the key never went there
    assert caught.value.status == status
    assert target in str(caught.value)
    assert not isinstance(caught.value, TransientModelError | ConnectionError)


# --------------------------------------------------------------------------- transport


def test_body_cut_off_mid_read_is_ambiguous() -> None:
    body = json.dumps(openai_completion(content="a long answer")).encode()
    with (
        FakeServer(cut_off(body[:40], len(body))) as server,
        pytest.raises(AmbiguousModelError) as caught,
    ):
        generate(model(server))
    assert isinstance(caught.value, ConnectionError)
    assert not isinstance(caught.value, TransientModelError | ServedModelError)


def test_error_status_with_a_cut_off_body_is_still_classified_by_status() -> None:
    body = json.dumps(openai_error("overloaded")).encode()
    with (
        FakeServer(cut_off(body[:30], len(body), status=503)) as server,
        pytest.raises(TransientModelError) as caught,
    ):
        generate(model(server))
    assert "503" in str(caught.value)


@pytest.mark.parametrize("cut", [True, False])
def test_body_framed_only_by_the_close_is_ambiguous_when_cut(cut: bool) -> None:
    body = json.dumps(openai_completion(content="done")).encode()
    with FakeServer(close_delimited(body[:50] if cut else body)) as server:
        if cut:
            with pytest.raises(AmbiguousModelError, match="cut off"):
                generate(model(server))
        else:
            assert generate(model(server)).text == "done"


def test_connection_that_hangs_past_the_timeout_is_ambiguous() -> None:
    with FakeServer(hang()) as server:
        started = time.monotonic()
        with pytest.raises(ModelTimeoutError) as caught:
            generate(model(server, timeout=STALL_DEADLINE))
        elapsed = time.monotonic() - started
    assert isinstance(caught.value, TimeoutError)
    assert 0.9 * STALL_DEADLINE.total_seconds() <= elapsed < STALL_ENDS_WITHIN


def test_body_that_stalls_mid_read_times_out_as_ambiguous() -> None:
    action = stall_body(200, b'{"id": "chatcmpl-1", "choi', 5000)
    with FakeServer(action) as server, pytest.raises(ModelTimeoutError):
        generate(model(server, timeout=STALL_DEADLINE))


def test_20_mib_declared_body_is_refused_without_reading_it() -> None:
    with FakeServer(huge(20 * MIB)) as server:
        started = time.monotonic()
        with pytest.raises(BodyTooLargeError) as caught:
            generate(model(server, timeout=timedelta(seconds=20)))
        elapsed = time.monotonic() - started
    assert isinstance(caught.value, ServedModelError)
    assert elapsed < 5
    assert not server.outcomes[0].finished


def test_a_declared_length_is_read_only_from_ascii_digits() -> None:
    """A server's Content-Length in other digits (a latin-1 byte 0xB2 reads as a superscript
    two, which `str.isdigit` accepts and `int` refuses) declares nothing: the body is read
    to its bound instead."""
    big = str(20 * MIB)
    assert _http.declared_too_large({"content-length": big})
    assert _http.declared_too_large({"content-length": f" {big} "})
    for odd in ("\u00b2", "\u0662" * 9, "1_0000000000", "+" + big):
        assert not _http.declared_too_large({"content-length": odd})


def test_20_mib_chunked_body_is_refused_at_the_bound() -> None:
    # The server stalls after 17 MiB: reading on to the end would time out instead.
    action = huge(20 * MIB, chunked=True, then_stall_at=17 * MIB)
    with FakeServer(action) as server, pytest.raises(BodyTooLargeError):
        started = time.monotonic()
        generate(model(server, timeout=timedelta(seconds=20)))
    assert time.monotonic() - started < 5


def test_body_just_under_the_bound_is_read() -> None:
    body = json.dumps(openai_completion(content="x" * (15 * MIB))).encode()
    with FakeServer(json_reply(body)) as server:
        response = generate(model(server, timeout=timedelta(seconds=20)))
    assert len(response.text) == 15 * MIB


def test_nothing_listening_is_transient() -> None:
    m = OpenAICompatModel(
        "gpt-test", base_url=f"http://127.0.0.1:{unused_port()}/v1", timeout=timedelta(seconds=2)
    )
    with pytest.raises(TransientModelError, match="could not be reached"):
        generate(m)


# --------------------------------------------------------------------------- keys and endpoints


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/v1",
        "http://127.3.2.1/v1",
        "http://localhost:1234/v1",
        "http://[::1]:8000/v1",
        "https://example.com/v1",
    ],
)
def test_key_accepted_over_https_or_to_loopback(url: str) -> None:
    assert OpenAICompatModel("m", base_url=url, api_key=KEY).base_url == url


@pytest.mark.parametrize(
    "url",
    ["http://example.com/v1", "http://203.0.113.5:8000/v1", "http://localhost.example.com/v1"],
)
def test_key_over_plain_http_to_another_host_is_refused_at_construction(url: str) -> None:
    with pytest.raises(ConfigError, match="plain http"):
        OpenAICompatModel("m", base_url=url, api_key=KEY)
    # Without a key there is nothing to leak.
    assert OpenAICompatModel("m", base_url=url).base_url == url


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1/v1",
        "http://user:pass@127.0.0.1/v1",
        "http:///v1",
        "http://127.0.0.1/v1?x=1",
        "http://127.0.0.1:99999/v1",
    ],
)
def test_unusable_base_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigError):
        OpenAICompatModel("m", base_url=url)


def test_openai_api_key_is_read_only_for_the_default_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    default = OpenAICompatModel("gpt-4o")
    assert default.base_url == DEFAULT_BASE_URL
    assert default._headers() == {"authorization": "Bearer sk-from-env"}
    with FakeServer(json_reply(openai_completion(content="hi"))) as server:
        local = OpenAICompatModel("llama", base_url=f"{server.url}/v1")
        generate(local)
    assert "authorization" not in server.requests[0].headers
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAICompatModel("gpt-4o")


def test_key_is_redacted_in_repr_logs_and_json(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with FakeServer(
        json_reply(openai_completion(content="ok")),
        json_reply(openai_error(f"bad key {KEY}"), 401),
    ) as server:
        m = model(server)
        generate(m)
        with pytest.raises(ProviderError) as caught:
            generate(m)
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in repr(m) and "[redacted]" in repr(m)
    assert KEY not in caplog.text
    assert any("answered 200" in r.getMessage() for r in caplog.records)
    assert KEY not in str(caught.value) and KEY not in repr(caught.value)
    secret = Secret(KEY)
    assert KEY not in repr(secret) and KEY not in str(secret) and KEY not in f"{secret}"
    with pytest.raises(TypeError):
        json.dumps({"key": secret})


def test_name_is_provider_and_model_unless_overridden() -> None:
    assert OpenAICompatModel("qwen", base_url="http://127.0.0.1:1/v1").name == "openai:qwen"
    named = OpenAICompatModel("qwen", base_url="http://127.0.0.1:1/v1", name="llamacpp:qwen")
    assert named.name == "llamacpp:qwen"


def test_import_agentrt_imports_no_provider() -> None:
    code = (
        "import sys, agentrt; "
        "bad = [m for m in sys.modules if m.startswith('agentrt.providers') or m == 'anthropic']; "
        "assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------- shared rules


def test_parse_retry_after_forms() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after({"Retry-After": "120"}, now) == timedelta(seconds=120)
    assert parse_retry_after({"retry-after": " 1.5 "}, now) == timedelta(seconds=1.5)
    assert parse_retry_after({"Retry-After": "Thu, 01 Jan 2026 12:00:45 GMT"}, now) == timedelta(
        seconds=45
    )
    assert parse_retry_after({"Retry-After": "Wed, 31 Dec 2025 12:00:00 GMT"}, now) == timedelta(0)
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "9"}, now) == timedelta(
        milliseconds=250
    )
    for bad in ("soon", "-5", "", "1e3", "Thu, 99 Foo 2026"):
        assert parse_retry_after({"Retry-After": bad}, now) is None
    assert parse_retry_after({}, now) is None


def test_loopback_addresses() -> None:
    for host in ("localhost", "LOCALHOST", "127.0.0.1", "127.255.0.9", "::1", "[::1]"):
        assert is_loopback(host), host
    assert is_loopback("::ffff:127.0.0.1")
    for host in ("example.com", "10.0.0.1", "0.0.0.0", "localhost.evil.com", "::"):
        assert not is_loopback(host), host


def test_excerpts_are_bounded_one_line_and_redacted() -> None:
    secret = Secret(KEY)
    # An excerpt cut at a byte bound may end inside the key.
    assert secret.redact("auth failed for " + KEY[:10]) == "auth failed for [redacted]"
    assert secret.redact(f"{KEY} and {KEY}") == "[redacted] and [redacted]"
    assert secret.redact("no key here: sk") == "no key here: sk"
    quoted = excerpt(f"line one\n\n  key {KEY}\n".encode() + b"y" * 10_000, [secret, None])
    assert quoted.startswith("line one key [redacted] yyy")
    assert len(quoted) == _http.EXCERPT_CHARS + 1 and quoted.endswith("…")
    assert excerpt(b"\xff\xfebad utf-8") == "\ufffd\ufffdbad utf-8"


def test_secret_refuses_unusable_keys() -> None:
    for bad in ("", " sk", "sk\nX-Evil: 1"):
        with pytest.raises(ConfigError):
            Secret(bad)


# --------------------------------------------------------------------------- live


def test_live_openai_compatible_server_answers_with_plausible_usage() -> None:
    """Runs against AGENTRT_LIVE_OPENAI_BASE_URL (a server on this machine) when it answers."""
    base_url = os.environ.get("AGENTRT_LIVE_OPENAI_BASE_URL")
    name = os.environ.get("AGENTRT_LIVE_OPENAI_MODEL", "default")
    if not base_url:
        pytest.skip("set AGENTRT_LIVE_OPENAI_BASE_URL (e.g. http://127.0.0.1:8080/v1) to run")
    if not is_loopback(urlsplit(base_url).hostname or ""):
        pytest.skip("live tests talk only to a server on this machine")
    try:
        httpx.get(f"{base_url.rstrip('/')}/models", timeout=1, trust_env=False)
    except httpx.HTTPError:
        pytest.skip(f"no server answers at {base_url}")
    m = OpenAICompatModel(name, base_url=base_url, timeout=timedelta(minutes=5))
    response = generate(m)
    assert response.usage.plausible and response.usage.output_tokens > 0
    assert all(use.name == "get_weather" for use in response.tool_uses)
