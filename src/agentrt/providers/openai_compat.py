"""The OpenAI-compatible chat-completions adapter (`OpenAICompatModel`).

This module owns the mapping between agentrt's provider-neutral request and
response and the chat-completions wire format that OpenAI and most local
servers (llama.cpp, vLLM, LM Studio, Ollama's `/v1`) speak: the system
message, assistant `tool_calls`, `tool` results by `tool_call_id`, functions
from input schemas, `tool_choice: "auto"` only when tools exist, parallel tool
calls off, temperature 0, `max_tokens`; and back: usage from `prompt_tokens`,
`completion_tokens` and cached prompt tokens, `finish_reason` normalized, tool
arguments (a JSON string) parsed as usable JSON. Transport rules are
`_http`'s. The key is optional; `OPENAI_API_KEY` is read only when the base URL
is OpenAI's own endpoint, so a key meant for OpenAI never reaches another server.
"""

from __future__ import annotations

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

__all__ = ["DEFAULT_BASE_URL", "OpenAICompatModel", "parse_response", "request_body"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
"""OpenAI's own endpoint: the only one for which `OPENAI_API_KEY` is read."""

PROVIDER = "openai"

# finish_reason → the normalized stop reason (models.md, "Interface").
_FINISH = {
    "length": "max_tokens",
    "content_filter": "refusal",
    "tool_calls": "tool_use",
    "function_call": "tool_use",  # the pre-tools name some servers still send
}


class OpenAICompatModel(JsonOverHttpModel):
    """A `Model` over OpenAI-compatible `POST {base_url}/chat/completions`.

    `name` is `openai:<model>` unless given. `timeout` bounds the whole exchange,
    the body included. `api_key` is sent as a bearer token; without one, the
    environment's `OPENAI_API_KEY` is used for the default endpoint only, and
    the default endpoint without any key is refused.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        name: str | None = None,
        timeout: timedelta = timedelta(minutes=2),
    ) -> None:
        check_model_name("OpenAICompatModel", model)
        check_timeout("OpenAICompatModel", timeout)
        base = check_endpoint(base_url, key=None, what="OpenAICompatModel")
        if api_key is None and base == DEFAULT_BASE_URL:
            api_key = os.environ.get("OPENAI_API_KEY") or None
            if api_key is None:
                raise ConfigError(
                    "OpenAICompatModel: OpenAI's endpoint needs a key: pass api_key or set "
                    "OPENAI_API_KEY"
                )
        key = None if api_key is None else Secret(api_key)
        checked = check_endpoint(base, key=key, what="OpenAICompatModel")
        self._set(model, name if name is not None else f"{PROVIDER}:{model}", timeout, key, checked)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        body = policy_json(request_body(self.model, request))
        raw = await self.post("/chat/completions", body)
        return parse_response(raw, provider=self.name, secrets=(self._key,))


# --------------------------------------------------------------------------- request


def _arguments(value: Any) -> str:
    # policy_json keeps number literals as the model wrote them and has no HTML escapes.
    return policy_json(value).decode("utf-8")


def _message(message: Message) -> list[dict[str, Any]]:
    texts = [b for b in message.content if isinstance(b, TextBlock)]
    uses = [b for b in message.content if isinstance(b, ToolUseBlock)]
    results = [b for b in message.content if isinstance(b, ToolResultBlock)]
    if message.role == "assistant":
        if results:
            raise ConfigError("a tool result cannot be in an assistant message")
        out: dict[str, Any] = {"role": "assistant", "content": joined_text(texts) or None}
        if uses:
            out["tool_calls"] = [
                {
                    "id": use.id,
                    "type": "function",
                    "function": {"name": use.name, "arguments": _arguments(use.input)},
                }
                for use in uses
            ]
        elif out["content"] is None:
            out["content"] = ""
        return [out]
    if uses:
        raise ConfigError("a tool use cannot be in a user message")
    # Tool results must directly follow the assistant turn that asked for them,
    # so they come before any text of the same user turn.
    messages: list[dict[str, Any]] = [
        {
            "role": "tool",
            "tool_call_id": result.tool_use_id,
            # The format has no error flag; the prefix keeps the signal for the model.
            "content": f"error: {result.content}" if result.is_error else result.content,
        }
        for result in results
    ]
    if texts or not results:
        messages.append({"role": "user", "content": joined_text(texts)})
    return messages


def request_body(model: str, request: ModelRequest) -> dict[str, Any]:
    """The chat-completions request body for `request` (deterministic)."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        messages.extend(_message(message))
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "temperature": 0,
        "stream": False,
    }
    if request.tools:
        body["tools"] = function_tools(request.tools)
        # Both are refused by OpenAI without tools, hence only here.
        body["tool_choice"] = "auto"
        body["parallel_tool_calls"] = False
    if request.max_output_tokens is not None:
        body["max_tokens"] = request.max_output_tokens
    return body


# --------------------------------------------------------------------------- response


def _usage(reply: dict[str, Any]) -> Usage:
    """Counts as sent, unusable ones included, so the caller can refuse them."""
    usage = reply.get("usage")
    if not isinstance(usage, dict):
        # No usage at all: None counts are not plausible, and the caller charges its estimate.
        missing: Any = None
        return Usage(input_tokens=missing, output_tokens=missing, cached_input_tokens=0)
    counts: dict[str, Any] = usage
    details = counts.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    prompt: Any = counts.get("prompt_tokens")
    completion: Any = counts.get("completion_tokens")
    return Usage(
        input_tokens=prompt,
        output_tokens=completion,
        # Servers without a prompt cache leave the details out, or null.
        cached_input_tokens=0 if cached is None else cached,
    )


def parse_response(
    raw: bytes, *, provider: str = PROVIDER, secrets: Iterable[Secret | None] = ()
) -> ModelResponse:
    """A chat-completions reply as a `ModelResponse` (raw bytes kept as they came).

    A served error with no choices (some gateways answer 200 `{"error": ...}`) is quoted
    as an error body is: bounded, with `secrets` redacted.
    """
    reply = parse_reply(raw, provider)
    usage = _usage(reply)
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        if "error" in reply:
            served = excerpt(str(reply["error"]).encode(), secrets)
            raise unusable(provider, f"no choices but an error: {served}", usage)
        raise unusable(provider, "no choices", usage)
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise unusable(provider, "a choice without a message", usage)
    content = message.get("content")
    refusal = message.get("refusal")
    calls = message.get("tool_calls") or []
    finish = choices[0].get("finish_reason")
    if content is not None and not isinstance(content, str):
        raise unusable(provider, "message content that is not a string", usage)
    if not isinstance(calls, list):
        raise unusable(provider, "tool_calls that is not a list", usage)
    if finish is not None and not isinstance(finish, str):
        raise unusable(provider, "a finish_reason that is not a string", usage)

    if isinstance(refusal, str) and refusal:
        stop = "refusal"
    elif finish in _FINISH:
        stop = _FINISH[finish]
    elif finish in (None, "", "stop"):
        # Several local servers say "stop" (or nothing) after a tool call.
        stop = "tool_use" if calls else "end_turn"
    else:
        stop = finish
    text = content or (refusal if isinstance(refusal, str) else "") or ""
    if stop in ("max_tokens", "refusal"):
        # A truncated call's arguments are cut off; a refused reply acts on nothing.
        return ModelResponse(text=text, tool_uses=(), stop_reason=stop, usage=usage, raw=raw)

    uses: list[ToolUseBlock] = []
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise unusable(provider, f"tool call {index} without a function name", usage)
        call_id = call.get("id")
        uses.append(
            ToolUseBlock(
                # Ids only correlate a result with its call; a server without them gets stable ones.
                id=call_id if isinstance(call_id, str) and call_id else f"call_{index}",
                name=function["name"],
                input=tool_arguments(function.get("arguments"), provider, usage),
            )
        )
    return ModelResponse(text=text, tool_uses=tuple(uses), stop_reason=stop, usage=usage, raw=raw)
