"""The Ollama adapter (`OllamaModel`), over Ollama's native `POST /api/chat`.

This module owns the mapping between agentrt's provider-neutral request and
response and Ollama's chat format: tools as functions, assistant `tool_calls`
with decoded arguments, `tool` results named by `tool_name` (Ollama correlates
results by name, so the name is looked up from the assistant turn that made the
call), options `temperature: 0`, `num_ctx` when configured and `num_predict`
from the output cap; and back: `prompt_eval_count` / `eval_count` as usage,
`done_reason` normalized. It also owns where the server is: the `host`
argument, else `OLLAMA_HOST` (read as Ollama itself reads it), else
`http://127.0.0.1:11434`. Transport rules are `_http`'s.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from .._canonical import policy_json
from .._errors import ConfigError
from .._model import (
    Message,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from ._http import (
    JsonOverHttpModel,
    Secret,
    check_endpoint,
    check_model_name,
    check_timeout,
    excerpt,
    function_tools,
    joined_text,
    parse_reply,
    tool_arguments,
    unusable,
)

__all__ = ["DEFAULT_HOST", "OllamaModel", "parse_host", "parse_response", "request_body"]

DEFAULT_HOST = "http://127.0.0.1:11434"

PROVIDER = "ollama"

_DEFAULT_PORT = {"http": 80, "https": 443}


class OllamaModel(JsonOverHttpModel):
    """A `Model` over an Ollama server's `/api/chat`.

    `name` is `ollama:<model>` unless given. `num_ctx` sets the context window
    Ollama allocates (its own default otherwise). `api_key`, for an Ollama behind
    an authenticating proxy, is sent as a bearer token; no environment variable
    supplies one. `timeout` bounds the whole exchange, the body included.
    """

    def __init__(
        self,
        model: str,
        *,
        host: str | None = None,
        num_ctx: int | None = None,
        api_key: str | None = None,
        name: str | None = None,
        timeout: timedelta = timedelta(minutes=2),
    ) -> None:
        check_model_name("OllamaModel", model)
        if num_ctx is not None and (
            isinstance(num_ctx, bool) or not isinstance(num_ctx, int) or num_ctx <= 0
        ):
            raise ConfigError("OllamaModel: num_ctx must be a positive integer")
        check_timeout("OllamaModel", timeout)
        if host is None:
            host = os.environ.get("OLLAMA_HOST") or DEFAULT_HOST
        key = None if api_key is None else Secret(api_key)
        base_url = check_endpoint(parse_host(host), key=key, what="OllamaModel")
        self.num_ctx = num_ctx
        self._set(
            model, name if name is not None else f"{PROVIDER}:{model}", timeout, key, base_url
        )

    def _repr_extra(self) -> str:
        return f"num_ctx={self.num_ctx!r}, "

    async def generate(self, request: ModelRequest) -> ModelResponse:
        body = policy_json(request_body(self.model, request, num_ctx=self.num_ctx))
        raw = await self.post("/api/chat", body)
        return parse_response(raw, provider=self.name, secrets=(self._key,))


def parse_host(value: str) -> str:
    """An `OLLAMA_HOST`-style value as a base URL, read the way Ollama reads it.

    `host`, `host:port`, `[v6]:port`, a bare IPv6 address, or a URL; no scheme
    means http and port 11434, an explicit http or https without a port means
    80 or 443; a path is kept (a proxy prefix). An unspecified address
    (`0.0.0.0`, `::`), which is what a server binds to, means this machine.
    A user or password is refused without being quoted: the key goes in `api_key`.
    """
    text = value.strip()
    if not text:
        return DEFAULT_HOST
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest, port = "http", text, 11434
    elif scheme in _DEFAULT_PORT:
        port = _DEFAULT_PORT[scheme]
    else:
        raise ConfigError(f"OllamaModel: host {value!r} must be http or https")
    hostport, slash, path = rest.partition("/")
    if "@" in hostport:
        # Refused before anything quotes the value: a password must not reach a message.
        raise ConfigError("OllamaModel: the host must not carry credentials; pass api_key instead")
    host = hostport
    if hostport.startswith("["):
        host, bracket, tail = hostport[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise ConfigError(f"OllamaModel: host {value!r} is not a usable address")
        if tail:
            port = _port(tail[1:], value)
    elif hostport.count(":") == 1:
        host, _, digits = hostport.partition(":")
        port = _port(digits, value)
    host = host or "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        if address.is_unspecified:
            host = "127.0.0.1" if address.version == 4 else "::1"
        if address.version == 6:
            host = f"[{host}]"
    return f"{scheme}://{host}:{port}" + (f"/{path}".rstrip("/") if slash else "")


def _port(digits: str, value: str) -> int:
    # ASCII digits only: str.isdigit() also takes "²" (which int() refuses) and "١٢" (12).
    if not (digits.isascii() and digits.isdigit()) or not 0 < int(digits) <= 65535:
        raise ConfigError(f"OllamaModel: host {value!r} has no usable port")
    return int(digits)


# --------------------------------------------------------------------------- request


def request_body(
    model: str, request: ModelRequest, *, num_ctx: int | None = None
) -> dict[str, Any]:
    """The `/api/chat` request body for `request` (deterministic, not streamed)."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    names: dict[str, str] = {}  # tool-use id → tool name, for the results that follow
    for message in request.messages:
        messages.extend(_message(message, names))
    options: dict[str, Any] = {"temperature": 0}
    if num_ctx is not None:
        options["num_ctx"] = num_ctx
    if request.max_output_tokens is not None:
        options["num_predict"] = request.max_output_tokens
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": False,
        "options": options,
    }
    if request.tools:
        body["tools"] = function_tools(request.tools)
    return body


def _message(message: Message, names: dict[str, str]) -> list[dict[str, Any]]:
    texts = [b for b in message.content if isinstance(b, TextBlock)]
    uses = [b for b in message.content if isinstance(b, ToolUseBlock)]
    results = [b for b in message.content if isinstance(b, ToolResultBlock)]
    if message.role == "assistant":
        if results:
            raise ConfigError("a tool result cannot be in an assistant message")
        out: dict[str, Any] = {"role": "assistant", "content": joined_text(texts)}
        if uses:
            for use in uses:
                names[use.id] = use.name
            # Ollama takes the arguments decoded, as an object.
            out["tool_calls"] = [
                {"function": {"name": use.name, "arguments": use.input}} for use in uses
            ]
        return [out]
    if uses:
        raise ConfigError("a tool use cannot be in a user message")
    messages: list[dict[str, Any]] = []
    for result in results:
        tool: dict[str, Any] = {
            "role": "tool",
            # The format has no error flag; the prefix keeps the signal for the model.
            "content": f"error: {result.content}" if result.is_error else result.content,
        }
        if result.tool_use_id in names:
            tool["tool_name"] = names[result.tool_use_id]
        messages.append(tool)
    if texts or not results:
        messages.append({"role": "user", "content": joined_text(texts)})
    return messages


# --------------------------------------------------------------------------- response


def _count(reply: dict[str, Any], key: str) -> Any:
    # Ollama's Go types mark the counts `omitempty`: an absent count is a zero.
    # A present one is passed through as sent, so the caller can refuse it.
    return reply.get(key, 0)


def parse_response(
    raw: bytes, *, provider: str = PROVIDER, secrets: Iterable[Secret | None] = ()
) -> ModelResponse:
    """An `/api/chat` reply as a `ModelResponse` (raw bytes kept as they came).

    A served error is quoted as an error body is: bounded, with `secrets` redacted.
    """
    reply = parse_reply(raw, provider)
    message_seen = reply.get("message")
    produced = isinstance(message_seen, dict) and bool(
        message_seen.get("content") or message_seen.get("tool_calls")
    )
    usage = Usage(
        input_tokens=_count(reply, "prompt_eval_count"),
        # A reply that says something cannot have cost no output: a missing
        # `eval_count` then is unusable usage (-1: charged the estimate), not a zero.
        output_tokens=reply.get("eval_count", -1) if produced else _count(reply, "eval_count"),
        cached_input_tokens=0,  # Ollama reports no prompt-cache hits
    )
    if "error" in reply:
        raise unusable(
            provider, f"an error: {excerpt(str(reply['error']).encode(), secrets)}", usage
        )
    message = reply.get("message")
    if not isinstance(message, dict):
        raise unusable(provider, "no message", usage)
    content = message.get("content", "")
    calls = message.get("tool_calls") or []
    reason = reply.get("done_reason")
    if not isinstance(content, str):
        raise unusable(provider, "message content that is not a string", usage)
    if not isinstance(calls, list):
        raise unusable(provider, "tool_calls that is not a list", usage)
    if reason is not None and not isinstance(reason, str):
        raise unusable(provider, "a done_reason that is not a string", usage)

    if reason == "length":
        stop = "max_tokens"
    elif reason in (None, "", "stop"):
        # Ollama says "stop" after a tool call too.
        stop = "tool_use" if calls else "end_turn"
    else:
        stop = reason
    if stop == "max_tokens":
        # A truncated reply carries no tool use: its last call may be cut off.
        return ModelResponse(text=content, tool_uses=(), stop_reason=stop, usage=usage, raw=raw)

    uses: list[ToolUseBlock] = []
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise unusable(provider, f"tool call {index} without a function name", usage)
        call_id = call.get("id")
        uses.append(
            ToolUseBlock(
                # Older Ollama sends no ids; a position-based one is stable for the reply.
                id=call_id if isinstance(call_id, str) and call_id else f"call_{index}",
                name=function["name"],
                input=tool_arguments(function.get("arguments", {}), provider, usage),
            )
        )
    return ModelResponse(
        text=content, tool_uses=tuple(uses), stop_reason=stop, usage=usage, raw=raw
    )
