"""The Anthropic adapter (`AnthropicModel`), through the official `anthropic` SDK.

This module owns the mapping between agentrt's provider-neutral request and
response and Anthropic's Messages API, and the ways the SDK is held so that the
rules of models.md ("Provider adapters") still hold through it:

- **Every attempt is the caller's.** `max_retries=0`: the SDK never retries on
  its own, so the accounting caller sees (and records) each attempt.
- **Only `ANTHROPIC_API_KEY`.** The key comes from `api_key` or that variable;
  the SDK is given the key, the base URL, its own HTTP client (`trust_env=False`)
  and `open_telemetry=False` explicitly, so none of its other sources of
  credentials, hosts, proxies or tracing applies. A guard on the transport
  sends requests only to the configured origin, strips any other credential
  header and sets `x-api-key` to this key.
- **Transport rules** are `_http`'s: no redirects, bodies bounded (the guard
  cuts an error body to an excerpt before the SDK reads it), failures classified.
- **Usage.** Cache reads are cached input; cache writes are folded into input
  at their billed multiple (×1.25 for the five-minute cache, ×2 for the
  one-hour one, ×2 when the reply does not say which), so the ordinary
  `Price` arithmetic bills them right.
- **The raw assistant turn is replayed.** Each reply's content blocks are
  remembered by the conversation it continued and what the assistant said
  (text and tool calls); when a later request's assistant turn says the same
  in the same conversation, the provider's own blocks are sent back, so signed
  thinking blocks survive (see `AnthropicModel.remember`). One model serves
  every run of a Driver: a turn is never replayed into another conversation.
- **Strict tools** (opt-in): each input schema projected to the subset the API
  can enforce (`strict_schema`).
- **Prices**: `PRICES`, a dated table; nothing is fetched.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import os
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, timedelta
from typing import Any
from urllib.parse import urlsplit

try:
    import anthropic
    import httpx2
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "agentrt.providers.anthropic needs the anthropic extra: pip install 'agentrt[anthropic]'"
    ) from exc

from .._canonical import canonical_json, content_hash, parse_json
from .._errors import AgentrtError, ConfigError, JSONValueError, TransientModelError
from .._model import (
    Message,
    ModelRequest,
    ModelResponse,
    Price,
    PriceTable,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from .._records import ToolSpec
from ._http import (
    CREDENTIAL_HEADERS,
    MAX_BODY_BYTES,
    AmbiguousModelError,
    BodyTooLargeError,
    ModelTimeoutError,
    ProviderError,
    Secret,
    SendWatch,
    check_endpoint,
    declared_too_large,
    encoded,
    excerpt,
    parse_reply,
    read_bounded,
    read_excerpt,
    read_framed,
    status_error,
    tool_arguments,
    unreached,
    unusable,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "PRICES",
    "PRICES_PUBLISHED",
    "AnthropicModel",
    "parse_response",
    "strict_schema",
]

DEFAULT_BASE_URL = "https://api.anthropic.com"

PROVIDER = "anthropic"

# Stop reasons after which no tool use is acted on: the output was cut short or withheld.
_NO_TOOL_USE = frozenset({"max_tokens", "refusal", "model_context_window_exceeded"})


def _prices() -> PriceTable:
    # (input, output, cache read) in dollars per million tokens; cache writes are
    # billed as input at ×1.25 / ×2 and are folded into input tokens by `_usage`.
    published = {
        ("claude-opus-4-5", "claude-opus-4-5-20251101"): ("5", "25", "0.50"),
        ("claude-opus-4-1", "claude-opus-4-1-20250805"): ("15", "75", "1.50"),
        ("claude-opus-4-0", "claude-opus-4-20250514"): ("15", "75", "1.50"),
        ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929"): ("3", "15", "0.30"),
        ("claude-sonnet-4-0", "claude-sonnet-4-20250514"): ("3", "15", "0.30"),
        ("claude-haiku-4-5", "claude-haiku-4-5-20251001"): ("1", "5", "0.10"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku-20241022"): ("0.80", "4", "0.08"),
        ("claude-3-haiku-20240307",): ("0.25", "1.25", "0.03"),
    }
    return PriceTable(
        {
            f"{PROVIDER}:{model}": Price.per_million(*price)
            for models, price in published.items()
            for model in models
        }
    )


PRICES_PUBLISHED = date(2025, 11, 24)
"""The day the prices in `PRICES` were taken from Anthropic's pricing page."""

PRICES: PriceTable = _prices()
"""Anthropic's list prices as published on 2025-11-24, keyed by adapter name
(`anthropic:<model>`): standard tier, prompts within the 200K-token window (the
adapter sends no long-context beta, so the long-context rates never apply).
Prices are not fetched: a model absent here is unpriced, which a price lookup
refuses, so a newer model is never silently free. Pass your own `PriceTable`
when the published prices change."""


class AnthropicModel:
    """A `Model` over Anthropic's Messages API, through the official SDK.

    `name` is `anthropic:<model>` unless given. The key is `api_key`, else the
    environment's `ANTHROPIC_API_KEY`; without either, construction is refused.
    `default_max_tokens` is sent when a request has no output cap (the API
    requires one). `strict_tools` sends every tool with `strict: true` and its
    schema projected by `strict_schema`. `thinking`, when given, is sent as the
    API's `thinking` option (e.g. `{"type": "adaptive"}`). `remember_turns`
    bounds the replayed assistant turns kept (for all conversations together).
    """

    name: str

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str = DEFAULT_BASE_URL,
        name: str | None = None,
        timeout: timedelta = timedelta(minutes=2),
        default_max_tokens: int = 4096,
        strict_tools: bool = False,
        thinking: Mapping[str, Any] | None = None,
        remember_turns: int = 256,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigError("AnthropicModel: the model name must be a non-empty string")
        if not isinstance(timeout, timedelta) or timeout <= timedelta(0):
            raise ConfigError("AnthropicModel: timeout must be a positive timedelta")
        for label, value in (
            ("default_max_tokens", default_max_tokens),
            ("remember_turns", remember_turns),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"AnthropicModel: {label} must be a positive integer")
        if api_key is None:
            api_key = os.environ.get("ANTHROPIC_API_KEY") or None
        if api_key is None:
            raise ConfigError("AnthropicModel: pass api_key or set ANTHROPIC_API_KEY")
        self._key = Secret(api_key)
        self._base_url = check_endpoint(base_url, key=self._key, what="AnthropicModel")
        parts = urlsplit(self._base_url)
        self._origin = _origin(parts.scheme, parts.hostname or "", parts.port)
        self.model = model
        self.name = name if name is not None else f"{PROVIDER}:{model}"
        self.timeout = timeout
        self.default_max_tokens = default_max_tokens
        # Read by the accounting caller: the cap an uncapped request really gets.
        self.default_max_output_tokens = default_max_tokens
        self.strict_tools = strict_tools
        self.thinking = None if thinking is None else dict(thinking)
        self._capacity = remember_turns
        self._turns: OrderedDict[str, list[Any]] = OrderedDict()

    @property
    def base_url(self) -> str:
        return self._base_url

    def __repr__(self) -> str:
        return (
            f"AnthropicModel(name={self.name!r}, model={self.model!r}, "
            f"base_url={self._base_url!r}, api_key='[redacted]')"
        )

    # ----------------------------------------------------------------- turns

    def remember(self, raw: bytes, request: ModelRequest) -> bool:
        """Keep a reply's content blocks to send back for the assistant turn it became.

        `request` is the request the reply answered: the blocks are sent back only
        in that conversation (`_contexts`). `generate` remembers every reply it
        returns. A process that resumes a run (the memory is per instance) can
        hand back recorded `ModelResponse.raw` bytes here with the request each
        answered (`render.messages` rebuilds it), so that the turns it replays
        keep their thinking blocks. Returns False for bytes that hold no usable
        content, or a request that is not usable JSON.
        """
        try:
            reply = parse_json(raw)
        except JSONValueError:
            return False
        content = reply.get("content") if isinstance(reply, dict) else None
        if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
            return False
        context = _contexts(request.system, request.messages)[-1]
        if context is None:
            return False
        text = "".join(
            b["text"] for b in content if b.get("type") == "text" and isinstance(b.get("text"), str)
        )
        uses = [(b.get("name"), b.get("input")) for b in content if b.get("type") == "tool_use"]
        try:
            key = context + _turn_key(text, uses)
        except JSONValueError:
            return False
        self._turns[key] = content
        self._turns.move_to_end(key)
        while len(self._turns) > self._capacity:
            self._turns.popitem(last=False)
        return True

    def _assistant_content(self, message: Message, context: str | None) -> list[Any]:
        texts = [b.text for b in message.content if isinstance(b, TextBlock)]
        uses = [b for b in message.content if isinstance(b, ToolUseBlock)]
        if any(isinstance(b, ToolResultBlock) for b in message.content):
            raise ConfigError("a tool result cannot be in an assistant message")
        raw = None
        if context is not None:
            try:
                said = _turn_key("".join(texts), [(u.name, u.input) for u in uses])
            except JSONValueError:
                pass  # an input that is not usable JSON matches no reply: send as rendered
            else:
                raw = self._turns.get(context + said)
        if raw is not None:
            return _replay(raw, [u.id for u in uses])
        blocks: list[Any] = [{"type": "text", "text": t} for t in texts if t]
        blocks.extend(
            {"type": "tool_use", "id": u.id, "name": u.name, "input": u.input} for u in uses
        )
        return blocks

    # ----------------------------------------------------------------- request

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The Messages API parameters for `request` (deterministic given the turns kept)."""
        messages: list[dict[str, Any]] = []
        contexts = _contexts(request.system, request.messages)
        for message, context in zip(request.messages, contexts, strict=False):
            if message.role == "assistant":
                content = self._assistant_content(message, context)
            else:
                content = _user_content(message)
            messages.append({"role": message.role, "content": content})
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": (
                request.max_output_tokens
                if request.max_output_tokens is not None
                else self.default_max_tokens
            ),
            "messages": messages,
        }
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = [self._tool(tool) for tool in request.tools]
            params["tool_choice"] = {"type": "auto", "disable_parallel_tool_use": True}
        # No temperature: the current Messages API (and SDK) no longer takes one.
        if self.thinking is not None:
            params["thinking"] = copy.deepcopy(self.thinking)
        return params

    def _tool(self, tool: ToolSpec) -> dict[str, Any]:
        out: dict[str, Any] = {"name": tool.name, "description": tool.description}
        if self.strict_tools:
            out["input_schema"] = strict_schema(tool.input_schema, tool=tool.name)
            out["strict"] = True
        else:
            out["input_schema"] = tool.input_schema
        return out

    # ----------------------------------------------------------------- exchange

    async def generate(self, request: ModelRequest) -> ModelResponse:
        raw = await self._exchange(self.request_params(request))
        response = parse_response(raw, provider=self.name, secrets=(self._key,))
        self.remember(raw, request)
        return response

    async def _exchange(self, params: dict[str, Any]) -> bytes:
        seconds = self.timeout.total_seconds()
        deadline = asyncio.timeout(seconds)
        transport = _GuardedTransport(
            httpx2.AsyncHTTPTransport(trust_env=False), self._origin, self._key, deadline
        )
        try:
            async with (
                deadline,
                httpx2.AsyncClient(
                    transport=transport,
                    follow_redirects=False,
                    trust_env=False,
                    timeout=httpx2.Timeout(seconds),
                ) as http,
            ):
                client = anthropic.AsyncAnthropic(
                    api_key=self._key.reveal(),
                    base_url=self._base_url,
                    max_retries=0,
                    timeout=httpx2.Timeout(seconds),
                    http_client=http,
                    open_telemetry=False,
                )
                async with client.messages.with_streaming_response.create(
                    **params, timeout=seconds
                ) as response:
                    reply = response.http_response
                    if encoded(reply.headers):
                        raise unusable(self.name, "a content-coded body although none was accepted")
                    if declared_too_large(reply.headers):
                        raise BodyTooLargeError(
                            f"{self.name} declared a reply body of "
                            f"{reply.headers['content-length']} bytes, over the {MAX_BODY_BYTES} "
                            "byte bound; refused without reading it"
                        )
                    check = read_framed(self.name, reply.headers)
                    return check(await read_bounded(reply.aiter_raw()))
        except AgentrtError:
            raise
        except anthropic.APIStatusError as exc:
            raise status_error(
                self.name, exc.status_code, exc.response.headers, _read(exc.response), (self._key,)
            ) from None
        except anthropic.APIConnectionError as exc:
            raise self._connection_error(exc, exc.__cause__, transport.watch.sent) from exc
        except (httpx2.TransportError, TimeoutError) as exc:
            raise self._connection_error(exc, exc, transport.watch.sent) from exc

    def _connection_error(
        self, exc: BaseException, cause: BaseException | None, sent: bool
    ) -> Exception:
        if isinstance(cause, AgentrtError):
            return cause  # the transport guard's own refusal, wrapped by the SDK
        if isinstance(cause, httpx2.ConnectError | httpx2.ConnectTimeout | httpx2.PoolTimeout):
            # No connection was made, so nothing was sent and nothing can be charged.
            return TransientModelError(f"{self.name} could not be reached at {self._base_url}")
        timed_out = isinstance(
            exc, anthropic.APITimeoutError | TimeoutError | httpx2.TimeoutException
        ) or isinstance(cause, httpx2.TimeoutException)
        if timed_out and not sent:
            # The deadline fired while connecting: none of the request left.
            return unreached(self.name, self._base_url, self.timeout.total_seconds())
        if timed_out:
            return ModelTimeoutError(
                f"{self.name} gave no complete reply within {self.timeout.total_seconds():g} s; "
                "it may still be served"
            )
        return AmbiguousModelError(
            f"{self.name} connection lost or reply cut off after sending: "
            f"{type(cause or exc).__name__}"
        )


def _read(response: httpx2.Response) -> bytes:
    try:
        return response.content
    except httpx2.ResponseNotRead:
        return b""


def _origin(scheme: str, host: str, port: int | None) -> tuple[str, str, int]:
    default = 443 if scheme == "https" else 80
    return scheme, host.strip("[]").lower(), port if port is not None else default


class _GuardedTransport(httpx2.AsyncBaseTransport):
    """The SDK's transport, held to this adapter's rules.

    Requests go only to the configured origin, with this key as the only
    credential and no content coding; `watch` tells whether any of the request
    was sent. An error reply's body is cut to an excerpt (under what is left of
    the exchange's `deadline`) before the SDK reads it, so a huge error body is
    never held and a stalled one never turns the status into a timeout; its
    headers are passed on as the bytes that came, whatever their encoding.
    """

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport,
        origin: tuple[str, str, int],
        key: Secret,
        deadline: asyncio.Timeout,
    ) -> None:
        self._inner = inner
        self._origin = origin
        self._key = key
        self._deadline = deadline
        self.watch = SendWatch()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        if _origin(url.scheme, url.host, url.port) != self._origin:
            raise ProviderError(
                f"refusing to send a request to {url.scheme}://{url.host}: "
                "not the configured endpoint"
            )
        for header in CREDENTIAL_HEADERS:
            if header in request.headers:
                del request.headers[header]
        request.headers["x-api-key"] = self._key.reveal()
        request.headers["accept-encoding"] = "identity"
        request.extensions["trace"] = self.watch
        response = await self._inner.handle_async_request(request)
        if 200 <= response.status_code <= 299:
            return response
        try:
            body = await read_excerpt(response.aiter_raw(), self._deadline)
        finally:
            await response.aclose()
        # The raw bytes: decoded header values (a latin-1 byte) cannot be encoded back.
        kept = [
            (name, value)
            for name, value in response.headers.raw
            if name.lower() not in (b"content-length", b"content-encoding", b"transfer-encoding")
        ]
        return httpx2.Response(
            response.status_code,
            headers=kept,
            content=body,
            request=request,
            extensions={k: v for k, v in response.extensions.items() if k != "network_stream"},
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


# --------------------------------------------------------------------------- request


def _user_content(message: Message) -> list[Any]:
    if any(isinstance(b, ToolUseBlock) for b in message.content):
        raise ConfigError("a tool use cannot be in a user message")
    # The API wants a turn's tool results before anything else in it.
    blocks: list[Any] = [
        {
            "type": "tool_result",
            "tool_use_id": b.tool_use_id,
            "content": b.content,
            "is_error": b.is_error,
        }
        for b in message.content
        if isinstance(b, ToolResultBlock)
    ]
    blocks.extend(
        {"type": "text", "text": b.text}
        for b in message.content
        if isinstance(b, TextBlock) and b.text
    )
    return blocks


def _contexts(system: str, messages: Sequence[Message]) -> list[str | None]:
    """What identifies the conversation before each message, and before the turn after them.

    The system prompt and the opening (every message before the first reply) as
    they are; each assistant turn as rendered (the renderer's tool-use ids come
    from the run's step ids, so from the second turn on no two runs share one);
    each later user turn only by the results it carries (ids and error flags),
    since the renderer summarizes older results as a run goes on and a turn
    must not lose its blocks for that. A turn is replayed only where all of
    this is the same as before the reply it came from. None from the first
    message that is not usable JSON on.
    """
    try:
        digest = hashlib.sha256(canonical_json({"system": system}))
    except JSONValueError:
        return [None] * (len(messages) + 1)
    contexts: list[str | None] = []
    replied = broken = False
    for message in messages:
        contexts.append(None if broken else digest.hexdigest())
        replied = replied or message.role == "assistant"
        if message.role == "user" and replied:
            piece: dict[str, Any] = {
                "role": "user",
                "results": [
                    [b.tool_use_id, b.is_error]
                    for b in message.content
                    if isinstance(b, ToolResultBlock)
                ],
            }
        else:
            piece = message.to_json()
        try:
            digest.update(canonical_json(piece))
        except JSONValueError:
            broken = True
    contexts.append(None if broken else digest.hexdigest())
    return contexts


def _turn_key(text: str, uses: Sequence[tuple[Any, Any]]) -> str:
    """What an assistant turn did, ids aside: how a rendered turn finds its reply
    within its conversation (`_contexts`).

    A turn with tool uses is known by them alone: the renderer keeps a call's
    name and input exactly, but strips and caps the text around it (a `reason`),
    and the API refuses a tool-use turn whose thinking block is missing. A turn
    without tool uses is known by its text, surrounding white space aside.
    """
    if uses:
        return content_hash({"tool_uses": [[name, value] for name, value in uses]})
    return content_hash({"text": text.strip()})


def _replay(raw: list[Any], ids: list[str]) -> list[Any]:
    """The provider's blocks, sent back as they came but with the rendered tool-use ids.

    The ids must be the rendered ones, which the following tool results name;
    null fields are left out, since the API reads null in a request as a value.
    """
    pending = iter(ids)
    blocks: list[Any] = []
    for block in raw:
        sent = {k: copy.deepcopy(v) for k, v in block.items() if v is not None}
        if sent.get("type") == "tool_use":
            sent["id"] = next(pending)
        blocks.append(sent)
    return blocks


# --------------------------------------------------------------------------- strict


_STRICT_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)


def strict_schema(schema: Mapping[str, Any], *, tool: str = "tool") -> dict[str, Any]:
    """`schema` projected to the subset strict tool use enforces.

    Kept: `type`, `description`, `enum`, `const`, `properties`, `required`,
    `items`, `anyOf` (`oneOf` becomes `anyOf`), `allOf`, local `$ref` with
    `$defs`/`definitions`, a listed `format`, `minItems` 0 or 1 (larger is
    lowered to 1). Every object gets `additionalProperties: false`. Everything
    else (titles, defaults, numeric and string bounds, patterns...) is dropped.

    Projection only narrows what the model may produce or drops a constraint,
    and the runtime still validates every call against the tool's full schema,
    so a call the model makes under the projection is never accepted wrongly.
    Refused with `ConfigError`: recursive or non-local references, a map
    (`additionalProperties` as a schema or true) or an object whose `required`
    names a key it does not list, and a schema that accepts anything.
    """
    _check_acyclic(schema, schema, (), tool)
    return _project(schema, f"{tool}: $", tool)


def _project(node: Any, path: str, tool: str) -> dict[str, Any]:
    if not isinstance(node, Mapping) or not node:
        raise ConfigError(f"strict tool {path} accepts any value, which strict mode cannot express")
    out: dict[str, Any] = {}
    for key in ("type", "description", "enum", "const"):
        if key in node:
            out[key] = copy.deepcopy(node[key])
    if node.get("format") in _STRICT_FORMATS:
        out["format"] = node["format"]
    ref = node.get("$ref")
    if ref is not None:
        out["$ref"] = ref
    for key in ("$defs", "definitions"):
        defs = node.get(key)
        if isinstance(defs, Mapping):
            out[key] = {
                name: _project(sub, f"{path}.{key}.{name}", tool) for name, sub in defs.items()
            }
    for key, target in (("anyOf", "anyOf"), ("oneOf", "anyOf"), ("allOf", "allOf")):
        options = node.get(key)
        if isinstance(options, list):
            out.setdefault(target, []).extend(
                _project(sub, f"{path}.{key}[{i}]", tool) for i, sub in enumerate(options)
            )
    items = node.get("items")
    if isinstance(items, Mapping):
        out["items"] = _project(items, f"{path}.items", tool)
    elif items is not None:
        raise ConfigError(f"strict tool {path}.items must be one schema")
    min_items = node.get("minItems")
    if isinstance(min_items, int) and not isinstance(min_items, bool) and min_items > 0:
        out["minItems"] = 1
    types = node.get("type")
    is_object = types == "object" or (isinstance(types, list) and "object" in types)
    if is_object or "properties" in node:
        extra = node.get("additionalProperties", False)
        properties = node.get("properties") or {}
        if extra is not False and not properties:
            raise ConfigError(
                f"strict tool {path} is a map of any keys, which strict mode cannot express"
            )
        out["properties"] = {
            name: _project(sub, f"{path}.properties.{name}", tool)
            for name, sub in properties.items()
        }
        required = node.get("required")
        if isinstance(required, list):
            missing = [name for name in required if name not in properties]
            if missing:
                raise ConfigError(
                    f"strict tool {path} requires {missing!r}, which it does not list"
                )
            out["required"] = list(required)
        out["additionalProperties"] = False
    if not out or set(out) <= {"description"}:
        raise ConfigError(f"strict tool {path} accepts any value, which strict mode cannot express")
    return out


def _check_acyclic(node: Any, root: Mapping[str, Any], stack: tuple[str, ...], tool: str) -> None:
    if isinstance(node, list):
        for item in node:
            _check_acyclic(item, root, stack, tool)
        return
    if not isinstance(node, Mapping):
        return
    ref = node.get("$ref")
    if ref is not None:
        if not isinstance(ref, str) or not ref.startswith(("#/$defs/", "#/definitions/")):
            raise ConfigError(f"strict tool {tool}: reference {ref!r} is not a local definition")
        if ref in stack:
            raise ConfigError(f"strict tool {tool}: {ref} is recursive, which strict mode refuses")
        section, _, name = ref[2:].partition("/")
        target = root.get(section, {}).get(name) if isinstance(root.get(section), Mapping) else None
        if target is None:
            raise ConfigError(f"strict tool {tool}: reference {ref!r} names no definition")
        _check_acyclic(target, root, (*stack, ref), tool)
    for key, value in node.items():
        if key not in ("$defs", "definitions", "enum", "const"):
            _check_acyclic(value, root, stack, tool)


# --------------------------------------------------------------------------- response


def _good(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _usage(usage: Any) -> Usage:
    """Anthropic's counts as agentrt's `Usage`, cache writes folded into input.

    input = input_tokens + cache reads + 5-minute writes × 1.25 (rounded up) +
    1-hour writes × 2 + writes the reply does not attribute × 2; cached = cache
    reads. An unusable count is passed through in the field it would have
    added to, so `Usage.plausible` is false and the caller refuses it.
    """
    if not isinstance(usage, dict):
        missing: Any = None
        return Usage(input_tokens=missing, output_tokens=missing, cached_input_tokens=0)

    def count(value: Any) -> Any:
        return 0 if value is None else value  # absent or null: none of that kind

    base: Any = usage.get("input_tokens")
    read = count(usage.get("cache_read_input_tokens"))
    written = count(usage.get("cache_creation_input_tokens"))
    creation = usage.get("cache_creation")
    if isinstance(creation, dict):
        short = count(creation.get("ephemeral_5m_input_tokens"))
        long = count(creation.get("ephemeral_1h_input_tokens"))
    else:
        short = long = 0
    output: Any = usage.get("output_tokens")
    bad = [value for value in (base, read, written, short, long) if not _good(value)]
    if bad:
        return Usage(input_tokens=bad[0], output_tokens=output, cached_input_tokens=read)
    unattributed = max(0, written - short - long)
    folded = base + read + -(-short * 5 // 4) + 2 * long + 2 * unattributed
    return Usage(input_tokens=folded, output_tokens=output, cached_input_tokens=read)


def parse_response(
    raw: bytes, *, provider: str = PROVIDER, secrets: Iterable[Secret | None] = ()
) -> ModelResponse:
    """A Messages API reply as a `ModelResponse` (raw bytes kept as they came).

    A served error is quoted as an error body is: bounded, with `secrets` redacted.
    """
    reply = parse_reply(raw, provider)
    usage = _usage(reply.get("usage"))
    if reply.get("type") == "error":
        quoted = excerpt(str(reply.get("error")).encode(), secrets)
        raise unusable(provider, f"an error: {quoted}", usage)
    content = reply.get("content")
    stop = reply.get("stop_reason")
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise unusable(provider, "content that is not a list of blocks", usage)
    if not isinstance(stop, str) or not stop:
        raise unusable(provider, "no stop_reason", usage)
    text_parts = []
    for block in content:
        if block.get("type") == "text":
            if not isinstance(block.get("text"), str):
                raise unusable(provider, "a text block without text", usage)
            text_parts.append(block["text"])
    text = "".join(text_parts)
    if stop in _NO_TOOL_USE:
        return ModelResponse(text=text, tool_uses=(), stop_reason=stop, usage=usage, raw=raw)
    uses: list[ToolUseBlock] = []
    for index, block in enumerate(b for b in content if b.get("type") == "tool_use"):
        if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
            raise unusable(provider, f"tool use {index} without an id or a name", usage)
        uses.append(
            ToolUseBlock(
                id=block["id"],
                name=block["name"],
                input=tool_arguments(block.get("input"), provider, usage),
            )
        )
    return ModelResponse(text=text, tool_uses=tuple(uses), stop_reason=stop, usage=usage, raw=raw)
