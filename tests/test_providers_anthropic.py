"""The Anthropic adapter, through the official SDK, against a local server playing the API.

Covers request mapping (tools, results, parallel calls off, output cap),
reply mapping (stop reasons, tool use, usage with cache writes folded in at
their billed multiple), the raw assistant turn replayed with its signed
thinking blocks, strict tools, the dated price table, the SDK held to the
rules (retries off, only ANTHROPIC_API_KEY, only the configured origin), and
every transport rule: statuses, Retry-After, redirect, cut-off body, hang,
20 MiB body. Skipped, with the reason, when the `anthropic` extra is absent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

pytest.importorskip(
    "anthropic", reason="the anthropic extra is not installed (pip install 'agentrt[anthropic]')"
)

from agentrt._canonical import canonical_json
from agentrt._errors import ConfigError, ServedModelError, TransientModelError
from agentrt._model import (
    Message,
    ModelRequest,
    ModelResponse,
    Price,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnpricedModelError,
)
from agentrt._records import ToolSpec
from agentrt.providers import anthropic as adapter
from agentrt.providers._http import (
    AmbiguousModelError,
    BodyTooLargeError,
    ModelTimeoutError,
    ProviderError,
    RedirectRefusedError,
)
from agentrt.providers.anthropic import (
    PRICES,
    PRICES_PUBLISHED,
    AnthropicModel,
    parse_response,
    strict_schema,
)
from support.providers import (
    MIB,
    STALL_DEADLINE,
    STALL_ENDS_WITHIN,
    FakeServer,
    anthropic_error,
    anthropic_message,
    close_delimited,
    cut_off,
    hang,
    huge,
    json_reply,
    redirect,
    stall_body,
    unused_port,
)

KEY = "sk-ant-api03-test-0123456789abcdef"

SEARCH = ToolSpec(
    name="search",
    description="Search the documents.",
    input_schema={
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
        "additionalProperties": False,
    },
    side_effect="read_only",
    timeout=timedelta(seconds=5),
)

THINKING = {
    "type": "thinking",
    "thinking": "The user wants refunds; search first.",
    "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds3mXuunbLymCxSjxpW8p",
}


def tool_turn(text: str = "Searching.", query: str = "refund policy") -> list[dict[str, Any]]:
    return [
        THINKING,
        {"type": "text", "text": text, "citations": None},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "search",
            "input": {"query": query, "limit": 5},
            "caller": None,
        },
    ]


FIRST = ModelRequest(
    system="You are a support agent.",
    messages=(Message("user", (TextBlock("What is the refund policy?"),)),),
    tools=(SEARCH,),
    max_output_tokens=1024,
)


def model(server: FakeServer, **kwargs: Any) -> AnthropicModel:
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("timeout", timedelta(seconds=5))
    return AnthropicModel("claude-sonnet-4-6", base_url=server.url, **kwargs)


def generate(m: AnthropicModel, request: ModelRequest = FIRST) -> ModelResponse:
    return asyncio.run(m.generate(request))


def follow_up(response: ModelResponse, synthesized_id: str = "toolu_s1_0") -> ModelRequest:
    """The next request as the renderer builds it: its own tool-use ids, the reply's words."""
    (use,) = response.tool_uses
    return ModelRequest(
        system=FIRST.system,
        messages=(
            *FIRST.messages,
            Message(
                "assistant",
                (TextBlock(response.text), ToolUseBlock(synthesized_id, use.name, use.input)),
            ),
            Message("user", (ToolResultBlock(synthesized_id, "Refunds within 30 days."),)),
        ),
        tools=FIRST.tools,
        max_output_tokens=1024,
    )


# --------------------------------------------------------------------------- request mapping


def test_request_maps_system_tools_results_and_turns_parallel_calls_off() -> None:
    request = ModelRequest(
        system="Be exact.",
        messages=(
            Message("user", (TextBlock("Find it."),)),
            Message("assistant", (TextBlock(""), ToolUseBlock("t1", "search", {"query": "a"}))),
            Message(
                "user",
                (TextBlock("and hurry"), ToolResultBlock("t1", "timeout", is_error=True)),
            ),
        ),
        tools=(SEARCH,),
        max_output_tokens=300,
    )
    with FakeServer(json_reply(anthropic_message())) as server:
        generate(model(server), request)
    (seen,) = server.requests
    assert (seen.method, seen.path) == ("POST", "/v1/messages")
    assert seen.headers["x-api-key"] == KEY
    assert "authorization" not in seen.headers
    assert seen.headers["anthropic-version"]
    assert seen.headers["x-stainless-retry-count"] == "0"
    assert seen.json() == {
        "model": "claude-sonnet-4-6",
        "max_tokens": 300,
        "system": "Be exact.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Find it."}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "search", "input": {"query": "a"}}
                ],
            },
            {
                "role": "user",
                # Tool results first, as the API requires; empty text left out.
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": "timeout",
                        "is_error": True,
                    },
                    {"type": "text", "text": "and hurry"},
                ],
            },
        ],
        "tools": [
            {
                "name": "search",
                "description": "Search the documents.",
                "input_schema": SEARCH.input_schema,
            }
        ],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    }


def test_without_tools_no_tool_choice_and_the_default_cap() -> None:
    request = ModelRequest(system="", messages=(Message("user", (TextBlock("hi"),)),))
    with FakeServer(json_reply(anthropic_message())) as server:
        generate(model(server, default_max_tokens=777), request)
    body = server.requests[0].json()
    assert body == {
        "model": "claude-sonnet-4-6",
        "max_tokens": 777,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }


def test_thinking_option_is_sent() -> None:
    with FakeServer(json_reply(anthropic_message())) as server:
        generate(model(server, thinking={"type": "enabled", "budget_tokens": 2048}))
    assert server.requests[0].json()["thinking"] == {"type": "enabled", "budget_tokens": 2048}


# --------------------------------------------------------------------------- reply mapping


def test_reply_maps_tool_use_and_keeps_raw_bytes_and_literals() -> None:
    raw = json.dumps(anthropic_message(content=tool_turn(), stop_reason="tool_use")).encode()
    raw = raw.replace(b'"limit": 5', b'"limit": 5.0e0')
    with FakeServer(json_reply(raw)) as server:
        response = generate(model(server))
    assert response.raw == raw
    assert response.text == "Searching."
    assert response.stop_reason == "tool_use"
    (use,) = response.tool_uses
    assert (use.id, use.name) == ("toolu_01A09q90qw90lq917835lq9", "search")
    assert canonical_json(use.input) == b'{"limit":5.0e0,"query":"refund policy"}'
    assert response.usage.to_json() == {
        "input_tokens": 2095,
        "output_tokens": 503,
        "cached_input_tokens": 0,
    }


@pytest.mark.parametrize(
    ("stop", "uses"),
    [
        ("tool_use", 1),
        ("end_turn", 1),
        ("max_tokens", 0),
        ("refusal", 0),
        ("model_context_window_exceeded", 0),
        ("pause_turn", 1),  # others passed through
        ("stop_sequence", 1),
    ],
)
def test_stop_reasons_and_no_tool_use_when_truncated_or_refused(stop: str, uses: int) -> None:
    response = parse_response(
        json.dumps(anthropic_message(content=tool_turn(), stop_reason=stop)).encode()
    )
    assert response.stop_reason == stop
    assert len(response.tool_uses) == uses
    assert response.usage.output_tokens == 503  # usage kept whatever the stop


def usage_of(**counts: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"input_tokens": 100, "output_tokens": 50}
    return {**base, **counts}


@pytest.mark.parametrize(
    ("usage", "folded_input", "cached"),
    [
        (usage_of(), 100, 0),
        (usage_of(cache_read_input_tokens=1000), 1100, 1000),
        # Five-minute writes bill at 1.25x input, one-hour writes at 2x.
        (
            usage_of(
                cache_creation_input_tokens=400,
                cache_creation={"ephemeral_5m_input_tokens": 400, "ephemeral_1h_input_tokens": 0},
            ),
            600,
            0,
        ),
        (
            usage_of(
                cache_creation_input_tokens=400,
                cache_creation={"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 400},
            ),
            900,
            0,
        ),
        # 3 x 1.25 = 3.75, rounded up: spend is never under-counted.
        (
            usage_of(
                cache_creation_input_tokens=3,
                cache_creation={"ephemeral_5m_input_tokens": 3, "ephemeral_1h_input_tokens": 0},
            ),
            104,
            0,
        ),
        # Writes the reply does not attribute to a TTL are billed at the higher 2x.
        (usage_of(cache_creation_input_tokens=400), 900, 0),
        (
            usage_of(
                cache_read_input_tokens=1000,
                cache_creation_input_tokens=500,
                cache_creation={"ephemeral_5m_input_tokens": 400, "ephemeral_1h_input_tokens": 100},
            ),
            100 + 1000 + 500 + 200,
            1000,
        ),
    ],
)
def test_usage_folds_cache_writes_at_their_billed_multiple(
    usage: dict[str, Any], folded_input: int, cached: int
) -> None:
    response = parse_response(json.dumps(anthropic_message(usage=usage)).encode())
    assert response.usage.to_json() == {
        "input_tokens": folded_input,
        "output_tokens": 50,
        "cached_input_tokens": cached,
    }
    assert response.usage.plausible


def test_folded_usage_costs_what_anthropic_bills() -> None:
    usage = usage_of(
        output_tokens=0,
        cache_read_input_tokens=1000,
        cache_creation_input_tokens=400,
        cache_creation={"ephemeral_5m_input_tokens": 400, "ephemeral_1h_input_tokens": 0},
    )
    response = parse_response(json.dumps(anthropic_message(usage=usage)).encode())
    price = PRICES.lookup("anthropic:claude-sonnet-4-5")
    # 100 input at $3/M + 1000 cache reads at $0.30/M + 400 5-minute writes at $3.75/M.
    assert price.cost_micros(response.usage) == 300 + 300 + 1500


@pytest.mark.parametrize(
    "usage",
    [
        usage_of(input_tokens=-1),
        usage_of(output_tokens=-5),
        usage_of(input_tokens=1.5),
        usage_of(cache_read_input_tokens="10"),
        usage_of(cache_creation_input_tokens=-4),
        usage_of(
            cache_creation_input_tokens=4,
            cache_creation={"ephemeral_5m_input_tokens": True, "ephemeral_1h_input_tokens": 0},
        ),
        {"output_tokens": 5},
    ],
)
def test_unusable_usage_is_passed_through_for_the_caller_to_refuse(usage: dict[str, Any]) -> None:
    response = parse_response(json.dumps(anthropic_message(usage=usage)).encode())
    assert not response.usage.plausible


def test_missing_usage_is_not_plausible() -> None:
    reply = anthropic_message()
    del reply["usage"]
    assert not parse_response(json.dumps(reply).encode()).usage.plausible


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"content": "text", "stop_reason": "end_turn"}',
        b'{"content": [], "stop_reason": null}',
        # A tool use without an id; one whose input is not an object.
        b'{"content": [{"type": "tool_use", "name": "s", "input": {}}], "stop_reason": "tool_use"}',
        b'{"content": [{"type": "tool_use", "id": "t", "name": "s", "input": 3}], '
        b'"stop_reason": "tool_use"}',
    ],
)
def test_unusable_reply_is_a_served_error(body: bytes) -> None:
    with FakeServer(json_reply(body)) as server, pytest.raises(ServedModelError):
        generate(model(server))


# --------------------------------------------------------------------------- raw turn replay


def test_raw_assistant_turn_is_replayed_so_thinking_survives() -> None:
    first = anthropic_message(content=tool_turn(), stop_reason="tool_use")
    with FakeServer(json_reply(first), json_reply(anthropic_message())) as server:
        m = model(server)
        response = generate(m)
        generate(m, follow_up(response))
    assistant = server.requests[1].json()["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": [
            THINKING,  # signature and all, byte for byte
            {"type": "text", "text": "Searching."},  # null fields left out
            # The renderer's id, which the tool result names.
            {
                "type": "tool_use",
                "id": "toolu_s1_0",
                "name": "search",
                "input": {"query": "refund policy", "limit": 5},
            },
        ],
    }
    assert server.requests[1].json()["messages"][2]["content"][0]["tool_use_id"] == "toolu_s1_0"


def test_a_tool_turn_is_found_by_its_calls_whatever_the_renderer_did_to_its_text() -> None:
    """render.decide strips and caps the text around a call; the thinking block must
    still go back with the call, or the API refuses the turn."""
    first = anthropic_message(content=tool_turn(), stop_reason="tool_use")
    with FakeServer(json_reply(first), json_reply(anthropic_message())) as server:
        m = model(server)
        response = generate(m)
        restated = ModelResponse(
            text="Searching, as the renderer kept it",
            tool_uses=response.tool_uses,
            stop_reason="tool_use",
            usage=response.usage,
        )
        generate(m, follow_up(restated))
    content = server.requests[1].json()["messages"][1]["content"]
    assert content[0] == THINKING
    assert [block["type"] for block in content] == ["thinking", "text", "tool_use"]


def test_a_turn_with_other_calls_is_sent_as_rendered() -> None:
    first = anthropic_message(content=tool_turn(), stop_reason="tool_use")
    with FakeServer(json_reply(first), json_reply(anthropic_message())) as server:
        m = model(server)
        response = generate(m)
        changed = ModelResponse(
            text="Searching.",
            tool_uses=[
                ToolUseBlock(u.id, u.name, {"query": "something else"}) for u in response.tool_uses
            ],
            stop_reason="tool_use",
            usage=response.usage,
        )
        generate(m, follow_up(changed))
    content = server.requests[1].json()["messages"][1]["content"]
    assert [block["type"] for block in content] == ["text", "tool_use"]


def test_a_resumed_process_replays_remembered_raw_bytes() -> None:
    raw = json.dumps(anthropic_message(content=tool_turn(), stop_reason="tool_use")).encode()
    response = parse_response(raw)
    with FakeServer(json_reply(anthropic_message())) as server:
        fresh = model(server)
        assert fresh.remember(raw, FIRST)
        generate(fresh, follow_up(response))
    assert server.requests[0].json()["messages"][1]["content"][0] == THINKING
    assert not fresh.remember(b"not json", FIRST)
    assert not fresh.remember(b'{"content": 1}', FIRST)


def test_remembered_turns_are_bounded() -> None:
    m = AnthropicModel("claude-sonnet-4-6", api_key=KEY, remember_turns=1)
    old = json.dumps(anthropic_message(content=tool_turn(query="a"), stop_reason="tool_use"))
    new = json.dumps(anthropic_message(content=tool_turn(query="b"), stop_reason="tool_use"))
    m.remember(old.encode(), FIRST)
    m.remember(new.encode(), FIRST)
    replayed = m.request_params(follow_up(parse_response(new.encode())))
    forgotten = m.request_params(follow_up(parse_response(old.encode())))
    assert replayed["messages"][1]["content"][0] == THINKING
    assert forgotten["messages"][1]["content"][0]["type"] == "text"


# --------------------------------------------------------------------------- strict tools


PYDANTIC_LIKE = {
    "type": "object",
    "title": "Args",
    "additionalProperties": False,
    "properties": {
        "query": {"type": "string", "title": "Query", "minLength": 3, "pattern": "^[a-z]+$"},
        "when": {"type": "string", "format": "date-time"},
        "color": {"type": "string", "format": "color-hex"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 9},
        "filter": {"$ref": "#/$defs/Filter"},
        "mode": {"oneOf": [{"const": "fast"}, {"const": "exact"}]},
    },
    "required": ["query"],
    "$defs": {
        "Filter": {
            "type": "object",
            "title": "Filter",
            "properties": {"field": {"type": "string"}},
        }
    },
}


def test_strict_schema_projects_to_the_enforceable_subset() -> None:
    assert strict_schema(PYDANTIC_LIKE) == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "query": {"type": "string"},
            "when": {"type": "string", "format": "date-time"},
            "color": {"type": "string"},
            "limit": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "filter": {"$ref": "#/$defs/Filter"},
            "mode": {"anyOf": [{"const": "fast"}, {"const": "exact"}]},
        },
        "required": ["query"],
        "$defs": {
            "Filter": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"field": {"type": "string"}},
            }
        },
    }


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        (
            {
                "type": "object",
                "properties": {"node": {"$ref": "#/$defs/Node"}},
                "$defs": {
                    "Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}
                },
            },
            "recursive",
        ),
        ({"type": "object", "properties": {"x": {"$ref": "https://x/s.json"}}}, "local"),
        ({"type": "object", "properties": {"x": {"$ref": "#/$defs/Nope"}}}, "names no"),
        ({"type": "object", "additionalProperties": {"type": "string"}}, "map"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}, "list"),
        ({"type": "object", "properties": {"anything": {}}}, "any value"),
        ({"type": "object", "properties": {"x": {"description": "?"}}}, "any value"),
        ({"type": "array", "items": [{"type": "string"}]}, "one schema"),
    ],
)
def test_strict_schema_refuses_what_it_cannot_express(schema: dict[str, Any], why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        strict_schema(schema)


def test_strict_tools_are_sent_strict_with_the_projection() -> None:
    tool = ToolSpec("lookup", "Look up.", PYDANTIC_LIKE, "read_only", timedelta(seconds=1))
    request = ModelRequest("", (Message("user", (TextBlock("go"),)),), tools=(tool,))
    with FakeServer(json_reply(anthropic_message())) as server:
        generate(model(server, strict_tools=True), request)
    (sent,) = server.requests[0].json()["tools"]
    assert sent == {
        "name": "lookup",
        "description": "Look up.",
        "input_schema": strict_schema(PYDANTIC_LIKE),
        "strict": True,
    }


# --------------------------------------------------------------------------- prices


def test_price_table_is_dated_keyed_by_adapter_name_and_refuses_the_unknown() -> None:
    with open(adapter.__file__, encoding="utf-8") as file:
        source = file.read()
    docstring = source[source.index("PRICES: PriceTable") :].split('"""')[1]
    assert PRICES_PUBLISHED.isoformat() in docstring
    assert PRICES.lookup("anthropic:claude-sonnet-4-5") == Price.per_million("3", "15", "0.30")
    assert PRICES.lookup("anthropic:claude-opus-4-5-20251101") == Price.per_million(
        "5", "25", "0.50"
    )
    assert PRICES.lookup("anthropic:claude-haiku-4-5") == Price.per_million("1", "5", "0.10")
    assert all(name.startswith("anthropic:") for name in PRICES.prices)
    for price in PRICES.prices.values():
        assert price.cached_input_micros is not None
        assert 0 < price.cached_input_micros < price.input_micros < price.output_micros
    with pytest.raises(UnpricedModelError):
        PRICES.lookup("anthropic:claude-some-future-model")
    with pytest.raises(UnpricedModelError):
        PRICES.lookup("claude-sonnet-4-5")  # not the adapter's name


# --------------------------------------------------------------------------- statuses


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503, 529])
def test_transient_statuses_are_not_retried_by_the_sdk(status: int) -> None:
    error = anthropic_error("overloaded_error", "Overloaded")
    action = json_reply(error, status, {"Retry-After": "11", "x-should-retry": "true"})
    with FakeServer(action) as server, pytest.raises(TransientModelError) as caught:
        generate(model(server))
    assert len(server.requests) == 1  # the SDK's own retries are off
    assert caught.value.retry_after == timedelta(seconds=11)
    assert "Overloaded" in str(caught.value)


def test_retry_after_as_http_date() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=40), usegmt=True)
    action = json_reply(anthropic_error("rate_limit_error", "slow"), 429, {"retry-after": when})
    with FakeServer(action) as server, pytest.raises(TransientModelError) as caught:
        generate(model(server))
    assert timedelta(seconds=35) < caught.value.retry_after <= timedelta(seconds=40)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413])
def test_other_statuses_are_permanent_with_a_bounded_redacted_excerpt(status: int) -> None:
    body = anthropic_error("authentication_error", f"invalid x-api-key {KEY}")
    with FakeServer(json_reply(body, status)) as server, pytest.raises(ProviderError) as caught:
        generate(model(server))
    assert caught.value.status == status
    assert "invalid x-api-key [redacted]" in caught.value.excerpt
    assert KEY not in str(caught.value)
    assert len(server.requests) == 1


def test_a_20_mib_error_body_is_cut_to_an_excerpt_before_the_sdk_reads_it() -> None:
    action = huge(20 * MIB, then_stall_at=17 * MIB, status=500)
    with FakeServer(action) as server, pytest.raises(TransientModelError):
        started = time.monotonic()
        generate(model(server, timeout=timedelta(seconds=20)))
    assert time.monotonic() - started < 5


def test_redirect_is_not_followed() -> None:
    with (
        FakeServer(json_reply(anthropic_message())) as elsewhere,
        FakeServer(redirect(f"{elsewhere.url}/v1/messages", 308)) as server,
        pytest.raises(RedirectRefusedError) as caught,
    ):
        generate(model(server))
    assert elsewhere.requests == []
    assert caught.value.status == 308


# --------------------------------------------------------------------------- transport


def test_body_cut_off_mid_read_is_ambiguous() -> None:
    body = json.dumps(anthropic_message(content=tool_turn(), stop_reason="tool_use")).encode()
    with (
        FakeServer(cut_off(body[:60], len(body))) as server,
        pytest.raises(AmbiguousModelError) as caught,
    ):
        generate(model(server))
    assert isinstance(caught.value, ConnectionError)


def test_error_status_with_a_cut_off_body_is_still_classified_by_status() -> None:
    body = json.dumps(anthropic_error("overloaded_error", "Overloaded")).encode()
    with (
        FakeServer(cut_off(body[:30], len(body), status=503)) as server,
        pytest.raises(TransientModelError) as caught,
    ):
        generate(model(server))
    assert "503" in str(caught.value)


@pytest.mark.parametrize("cut", [True, False])
def test_body_framed_only_by_the_close_is_ambiguous_when_cut(cut: bool) -> None:
    body = json.dumps(anthropic_message()).encode()
    with FakeServer(close_delimited(body[:70] if cut else body)) as server:
        if cut:
            with pytest.raises(AmbiguousModelError, match="cut off"):
                generate(model(server))
        else:
            assert generate(model(server)).text == "Hi!"


def test_connection_that_hangs_past_the_timeout_is_ambiguous() -> None:
    with FakeServer(hang()) as server, pytest.raises(ModelTimeoutError) as caught:
        started = time.monotonic()
        generate(model(server, timeout=STALL_DEADLINE))
    assert isinstance(caught.value, TimeoutError)
    assert time.monotonic() - started < STALL_ENDS_WITHIN


def test_body_that_stalls_mid_read_is_ambiguous() -> None:
    action = stall_body(200, b'{"id": "msg_01", "type": "mess', 4000)
    with FakeServer(action) as server, pytest.raises(ModelTimeoutError):
        generate(model(server, timeout=STALL_DEADLINE))


@pytest.mark.parametrize("chunked", [False, True])
def test_20_mib_body_is_refused_without_reading_it_all(chunked: bool) -> None:
    action = huge(20 * MIB, chunked=chunked, then_stall_at=17 * MIB)
    with FakeServer(action) as server, pytest.raises(BodyTooLargeError):
        started = time.monotonic()
        generate(model(server, timeout=timedelta(seconds=20)))
    assert time.monotonic() - started < 5


def test_nothing_listening_is_transient() -> None:
    m = AnthropicModel(
        "claude-sonnet-4-6",
        api_key=KEY,
        base_url=f"http://127.0.0.1:{unused_port()}",
        timeout=timedelta(seconds=2),
    )
    with pytest.raises(TransientModelError, match="could not be reached"):
        generate(m)


# --------------------------------------------------------------------------- keys and environment


def test_only_anthropic_api_key_is_read_and_only_the_configured_origin_is_contacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with (
        FakeServer(json_reply(anthropic_message())) as decoy,
        FakeServer(json_reply(anthropic_message())) as server,
    ):
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env-000000")
        monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "token-from-env")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", decoy.url)
        monkeypatch.setenv("ANTHROPIC_CUSTOM_HEADERS", "Authorization: Bearer leaked\nX-Extra: 1")
        for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
            monkeypatch.setenv(proxy, decoy.url)
        m = AnthropicModel("claude-haiku-4-5", base_url=server.url, timeout=timedelta(seconds=5))
        generate(m)
    assert decoy.requests == []
    headers = server.requests[0].headers
    assert headers["x-api-key"] == "sk-ant-from-env-000000"
    assert "authorization" not in headers
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        AnthropicModel("claude-haiku-4-5")


def test_key_over_plain_http_only_to_loopback() -> None:
    with pytest.raises(ConfigError, match="plain http"):
        AnthropicModel("m", api_key=KEY, base_url="http://proxy.internal:8080")
    assert AnthropicModel("m", api_key=KEY, base_url="http://localhost:9").base_url


def test_key_is_redacted_in_repr_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    body = anthropic_error("authentication_error", f"bad key {KEY}")
    with FakeServer(json_reply(anthropic_message()), json_reply(body, 401)) as server:
        m = model(server)
        generate(m)
        with pytest.raises(ProviderError) as caught:
            generate(m)
    assert KEY not in repr(m) and "[redacted]" in repr(m)
    assert caplog.records  # the SDK and httpx logged at DEBUG
    assert KEY not in caplog.text
    assert KEY not in str(caught.value) and KEY not in repr(caught.value)


def test_name_is_provider_and_model_unless_overridden() -> None:
    assert AnthropicModel("claude-opus-4-5", api_key=KEY).name == "anthropic:claude-opus-4-5"
    assert AnthropicModel("claude-opus-4-5", api_key=KEY, name="opus").name == "opus"


def test_without_the_extra_the_import_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['anthropic'] = None\n"
        "try:\n"
        "    import agentrt.providers.anthropic\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "pip install 'agentrt[anthropic]'" in result.stdout, result.stderr
