"""The Ollama adapter against a real local server playing Ollama's `/api/chat`.

Covers request mapping (tools, results by tool name, temperature, num_ctx,
num_predict), reply mapping (counts, done_reason, decoded arguments), where
the host comes from, and every transport rule: statuses, Retry-After, redirect,
cut-off body, hang, 20 MiB body, keys only to loopback over plain http.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from agentrt._canonical import canonical_json
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
from agentrt.providers._http import (
    AmbiguousModelError,
    BodyTooLargeError,
    ModelTimeoutError,
    ProviderError,
    RedirectRefusedError,
    is_loopback,
)
from agentrt.providers.ollama import DEFAULT_HOST, OllamaModel, parse_host, parse_response
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
    ollama_chat,
    redirect,
    unused_port,
)

LIST_FILES = ToolSpec(
    name="list_files",
    description="List the files in a directory.",
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
    side_effect="read_only",
    timeout=timedelta(seconds=5),
)

REQUEST = ModelRequest(
    system="Be brief.",
    messages=(
        Message("user", (TextBlock("What is in /tmp?"),)),
        Message("assistant", (ToolUseBlock("toolu_s1_0", "list_files", {"path": "/tmp"}),)),
        Message("user", (ToolResultBlock("toolu_s1_0", '["a.txt"]'),)),
        Message(
            "assistant",
            (TextBlock("Again."), ToolUseBlock("toolu_s2_0", "list_files", {"path": "/nope"})),
        ),
        Message("user", (ToolResultBlock("toolu_s2_0", "no such directory", is_error=True),)),
    ),
    tools=(LIST_FILES,),
    max_output_tokens=128,
)


def model(server: FakeServer, **kwargs: Any) -> OllamaModel:
    kwargs.setdefault("timeout", timedelta(seconds=5))
    return OllamaModel("llama3.2", host=server.url, **kwargs)


def generate(m: OllamaModel, request: ModelRequest = REQUEST) -> ModelResponse:
    return asyncio.run(m.generate(request))


def test_request_maps_tools_results_and_options() -> None:
    reply = ollama_chat(
        tool_calls=[{"function": {"name": "list_files", "arguments": {"path": "/tmp", "n": 1.0}}}]
    )
    with FakeServer(json_reply(reply)) as server:
        response = generate(model(server, num_ctx=8192))
    (seen,) = server.requests
    assert (seen.method, seen.path) == ("POST", "/api/chat")
    assert "authorization" not in seen.headers
    assert seen.json() == {
        "model": "llama3.2",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is in /tmp?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "list_files", "arguments": {"path": "/tmp"}}}],
            },
            {"role": "tool", "content": '["a.txt"]', "tool_name": "list_files"},
            {
                "role": "assistant",
                "content": "Again.",
                "tool_calls": [
                    {"function": {"name": "list_files", "arguments": {"path": "/nope"}}}
                ],
            },
            {"role": "tool", "content": "error: no such directory", "tool_name": "list_files"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "list_files",
                    "description": "List the files in a directory.",
                    "parameters": LIST_FILES.input_schema,
                },
            }
        ],
        "stream": False,
        "options": {"temperature": 0, "num_ctx": 8192, "num_predict": 128},
    }
    assert response.stop_reason == "tool_use"  # Ollama says "stop" after a call
    (use,) = response.tool_uses
    assert use.id == "call_0" and use.name == "list_files"
    assert canonical_json(use.input) == b'{"n":1.0,"path":"/tmp"}'
    assert response.usage.to_json() == {
        "input_tokens": 26,
        "output_tokens": 298,
        "cached_input_tokens": 0,
    }
    assert response.raw == json.dumps(reply).encode()


def test_no_tools_no_num_ctx_no_cap() -> None:
    with FakeServer(json_reply(ollama_chat(content="hello"))) as server:
        response = generate(model(server), ModelRequest("", (Message("user", (TextBlock("hi"),)),)))
    body = server.requests[0].json()
    assert "tools" not in body
    assert body["options"] == {"temperature": 0}
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert (response.text, response.stop_reason, response.tool_uses) == ("hello", "end_turn", ())


@pytest.mark.parametrize(
    ("done_reason", "stop", "uses"),
    [
        ("stop", "tool_use", 1),
        (None, "tool_use", 1),
        ("length", "max_tokens", 0),
        ("load", "load", 1),
    ],
)
def test_done_reason_normalized(done_reason: str | None, stop: str, uses: int) -> None:
    calls = [{"id": "call_x", "function": {"name": "f", "arguments": {}}}]
    response = parse_response(
        json.dumps(ollama_chat(tool_calls=calls, done_reason=done_reason)).encode()
    )
    assert response.stop_reason == stop
    assert [u.id for u in response.tool_uses] == ["call_x"] * uses
    assert response.usage.output_tokens == 298  # a truncated reply keeps its usage


def test_an_absent_prompt_count_is_zero_as_ollama_omits_it() -> None:
    reply = ollama_chat(content="cached", prompt_eval_count=None, eval_count=7)
    usage = parse_response(json.dumps(reply).encode()).usage
    assert usage.to_json() == {"input_tokens": 0, "output_tokens": 7, "cached_input_tokens": 0}
    assert usage.plausible


def test_a_reply_with_content_but_no_output_count_is_unusable_usage() -> None:
    reply = ollama_chat(content="a long answer", prompt_eval_count=12, eval_count=None)
    usage = parse_response(json.dumps(reply).encode()).usage
    assert not usage.plausible  # the caller charges the estimate and ends the run


@pytest.mark.parametrize("counts", [(-1, 5), (3.5, 5), (3, "5"), (3, True)])
def test_unusable_counts_are_passed_through(counts: tuple[Any, Any]) -> None:
    reply = ollama_chat(content="x", prompt_eval_count=counts[0], eval_count=counts[1])
    assert not parse_response(json.dumps(reply).encode()).usage.plausible


def test_arguments_as_a_json_string_are_parsed_and_bad_ones_refused() -> None:
    good = [{"function": {"name": "f", "arguments": '{"a": 1e2}'}}]
    response = parse_response(json.dumps(ollama_chat(tool_calls=good)).encode())
    assert canonical_json(response.tool_uses[0].input) == b'{"a":1e2}'
    bad = [{"function": {"name": "f", "arguments": '{"a": '}}]
    with pytest.raises(ServedModelError) as caught:
        parse_response(json.dumps(ollama_chat(tool_calls=bad)).encode())
    assert caught.value.usage.input_tokens == 26


def test_an_error_reply_is_a_served_error() -> None:
    with pytest.raises(ServedModelError, match="out of memory"):
        parse_response(b'{"error": "model runner ran out of memory"}')


# --------------------------------------------------------------------------- host


@pytest.mark.parametrize(
    ("value", "url"),
    [
        ("", DEFAULT_HOST),
        ("127.0.0.1", "http://127.0.0.1:11434"),
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("0.0.0.0:8080", "http://127.0.0.1:8080"),
        ("gpu-box:11435", "http://gpu-box:11435"),
        (":9000", "http://127.0.0.1:9000"),
        ("::1", "http://[::1]:11434"),
        ("[::]:7000", "http://[::1]:7000"),
        ("http://ollama.internal", "http://ollama.internal:80"),
        ("https://ollama.example.com/prefix/", "https://ollama.example.com:443/prefix"),
    ],
)
def test_host_is_read_the_way_ollama_reads_it(value: str, url: str) -> None:
    assert parse_host(value) == url


@pytest.mark.parametrize(
    "value",
    # int() reads a superscript as an error and other scripts' digits as a port
    [
        "ftp://x",
        "host:port",
        "host:70000",
        "[::1",
        "host:\u00b2",
        "host:\u0661\u0662",
        "[::1]:\u00b9",
    ],
)
def test_unusable_hosts_are_refused(value: str) -> None:
    with pytest.raises(ConfigError):
        parse_host(value)


def test_host_from_argument_then_ollama_host_then_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    assert OllamaModel("m").base_url == DEFAULT_HOST
    monkeypatch.setenv("OLLAMA_HOST", "0.0.0.0:9999")
    assert OllamaModel("m").base_url == "http://127.0.0.1:9999"
    assert OllamaModel("m", host="localhost:1").base_url == "http://localhost:1"
    with FakeServer(json_reply(ollama_chat(content="via env"))) as server:
        monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{server.port}")
        assert generate(OllamaModel("m")).text == "via env"
    assert len(server.requests) == 1


def test_num_ctx_must_be_positive() -> None:
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ConfigError):
            OllamaModel("m", num_ctx=bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- transport


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 503, 529])
def test_transient_statuses(status: int) -> None:
    action = json_reply({"error": "server busy"}, status, {"Retry-After": "3"})
    with FakeServer(action) as server, pytest.raises(TransientModelError) as caught:
        generate(model(server))
    assert caught.value.retry_after == timedelta(seconds=3)


def test_model_not_found_is_permanent() -> None:
    body = {"error": 'model "llama9" not found, try pulling it first'}
    with FakeServer(json_reply(body, 404)) as server, pytest.raises(ProviderError) as caught:
        generate(model(server))
    assert caught.value.status == 404 and "try pulling it first" in caught.value.excerpt


def test_redirect_is_not_followed() -> None:
    with FakeServer(json_reply(ollama_chat(content="x"))) as elsewhere:
        action = redirect(f"{elsewhere.url}/api/chat", 302)
        with FakeServer(action) as server, pytest.raises(RedirectRefusedError):
            generate(model(server, api_key="proxy-key-123456"))
    assert elsewhere.requests == []


def test_body_cut_off_is_ambiguous() -> None:
    body = json.dumps(ollama_chat(content="long")).encode()
    with FakeServer(cut_off(body[:25], len(body))) as server, pytest.raises(AmbiguousModelError):
        generate(model(server))


def test_close_delimited_body_cut_short_is_ambiguous() -> None:
    body = json.dumps(ollama_chat(content="long")).encode()
    with FakeServer(close_delimited(body[:30])) as server, pytest.raises(AmbiguousModelError):
        generate(model(server))


def test_hang_past_the_timeout_is_ambiguous() -> None:
    with FakeServer(hang()) as server, pytest.raises(ModelTimeoutError):
        started = time.monotonic()
        generate(model(server, timeout=STALL_DEADLINE))
    assert time.monotonic() - started < STALL_ENDS_WITHIN


@pytest.mark.parametrize("chunked", [False, True])
def test_20_mib_body_is_refused(chunked: bool) -> None:
    action = huge(20 * MIB, chunked=chunked, then_stall_at=17 * MIB)
    with FakeServer(action) as server, pytest.raises(BodyTooLargeError):
        started = time.monotonic()
        generate(model(server, timeout=timedelta(seconds=20)))
    assert time.monotonic() - started < 5


def test_nothing_listening_is_transient() -> None:
    m = OllamaModel("m", host=f"127.0.0.1:{unused_port()}", timeout=timedelta(seconds=2))
    with pytest.raises(TransientModelError):
        generate(m)


# --------------------------------------------------------------------------- keys and names


def test_key_goes_only_to_loopback_over_plain_http_and_is_redacted() -> None:
    with pytest.raises(ConfigError, match="plain http"):
        OllamaModel("m", host="gpu-box:11434", api_key="proxy-key-123456")
    assert OllamaModel("m", host="https://gpu-box", api_key="proxy-key-123456")
    with FakeServer(json_reply(ollama_chat(content="x"))) as server:
        m = model(server, api_key="proxy-key-123456")
        generate(m)
    assert server.requests[0].headers["authorization"] == "Bearer proxy-key-123456"
    assert "proxy-key-123456" not in repr(m) and "[redacted]" in repr(m)


def test_name_is_provider_and_model_unless_overridden() -> None:
    assert OllamaModel("qwen2.5:7b", host="127.0.0.1").name == "ollama:qwen2.5:7b"
    assert OllamaModel("qwen2.5:7b", host="127.0.0.1", name="local").name == "local"


# --------------------------------------------------------------------------- live


def live_model() -> OllamaModel:
    """An Ollama on this machine (OLLAMA_HOST or the default), or a skip saying why."""
    model = OllamaModel(os.environ.get("AGENTRT_LIVE_OLLAMA_MODEL") or "-", timeout=LIVE_TIMEOUT)
    if not is_loopback(urlsplit(model.base_url).hostname or ""):
        pytest.skip("live tests talk only to an Ollama on this machine")
    try:
        tags = httpx.get(f"{model.base_url}/api/tags", timeout=1, trust_env=False).json()
    except (httpx.HTTPError, ValueError):
        pytest.skip(f"no Ollama answers at {model.base_url} (start one: ollama serve)")
    if model.model == "-":
        names = [m.get("name") for m in tags.get("models", []) if isinstance(m, dict)]
        if not names:
            pytest.skip("the local Ollama has no model (ollama pull llama3.2)")
        model = OllamaModel(str(names[0]), timeout=LIVE_TIMEOUT)
    return model


LIVE_TIMEOUT = timedelta(minutes=5)


def test_live_ollama_answers_with_plausible_usage() -> None:
    m = live_model()
    response = generate(m, REQUEST)
    assert response.usage.plausible and response.usage.output_tokens > 0
    assert all(use.name == "list_files" for use in response.tool_uses)
    assert isinstance(response.stop_reason, str) and response.stop_reason
