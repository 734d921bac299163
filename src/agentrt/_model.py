"""The provider-neutral model interface: requests, responses, usage, prices.

An agent reaches a model only through the runtime's accounting caller
(`_accounting.py`); adapters (`agentrt.providers.*`) implement `Model`. Every
value here has a canonical JSON form (`to_json`), which is what replay keys and
recordings use, so a request renders to the same bytes every time.

Money is integer micro-dollars. A `Price` is micro-dollars per million tokens;
`Price.free()` marks a local model, and `None` (no price) marks an unpriced one,
so free and unpriced stay distinguishable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, Protocol, runtime_checkable

from ._errors import ConfigError
from ._records import ToolSpec

JSON = Any

_DOLLARS = re.compile(r"\$?[0-9]+(?:\.[0-9]+)?")

STOP_REASONS = ("tool_use", "end_turn", "max_tokens", "refusal", "model_context_window_exceeded")


@dataclass(frozen=True)
class TextBlock:
    """Text in a message."""

    text: str
    type: Literal["text"] = "text"

    def to_json(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


@dataclass(frozen=True)
class ToolUseBlock:
    """A model's request to call a tool: the call's `id`, the tool's `name` and its `input`."""

    id: str
    name: str
    input: JSON
    type: Literal["tool_use"] = "tool_use"

    def to_json(self) -> dict[str, Any]:
        return {"type": "tool_use", "id": self.id, "name": self.name, "input": self.input}


@dataclass(frozen=True)
class ToolResultBlock:
    """A tool's answer sent back to the model, naming the call it answers."""

    tool_use_id: str
    content: str
    is_error: bool = False
    type: Literal["tool_result"] = "tool_result"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "tool_result",
            "tool_use_id": self.tool_use_id,
            "content": self.content,
            "is_error": self.is_error,
        }


ContentBlock = TextBlock | ToolUseBlock | ToolResultBlock


def block_from_json(data: Mapping[str, Any]) -> ContentBlock:
    kind = data.get("type")
    if kind == "text":
        return TextBlock(str(data.get("text", "")))
    if kind == "tool_use":
        return ToolUseBlock(str(data["id"]), str(data["name"]), data.get("input"))
    if kind == "tool_result":
        return ToolResultBlock(
            str(data["tool_use_id"]), str(data.get("content", "")), bool(data.get("is_error"))
        )
    raise ValueError(f"unknown content block type {kind!r}")


@dataclass(frozen=True)
class Message:
    """One message of a conversation: a `user` or `assistant` role and its content blocks."""

    role: Literal["user", "assistant"]
    content: Sequence[ContentBlock]

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "content": [b.to_json() for b in self.content]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Message:
        role = data.get("role")
        if role not in ("user", "assistant"):
            raise ValueError(f"unknown message role {role!r}")
        return cls(role, tuple(block_from_json(b) for b in data.get("content", ())))


def _tool_json(spec: ToolSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "description": spec.description,
        "input_schema": spec.input_schema,
    }


@dataclass(frozen=True)
class ModelRequest:
    """One request to a model, provider-neutral."""

    system: str
    messages: Sequence[Message]
    tools: Sequence[ToolSpec] = ()
    max_output_tokens: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "messages": [m.to_json() for m in self.messages],
            "tools": [_tool_json(t) for t in self.tools],
            "max_output_tokens": self.max_output_tokens,
        }


@dataclass(frozen=True)
class Usage:
    """The tokens one model response used, as the provider reported them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
        }

    @property
    def plausible(self) -> bool:
        """Non-negative integers, cached no more than input: what a provider can mean."""
        values = (self.input_tokens, self.output_tokens, self.cached_input_tokens)
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in values):
            return False
        return self.cached_input_tokens <= self.input_tokens


@dataclass(frozen=True)
class ModelResponse:
    """What a model answered.

    Its text, the tools it asked to call, why it stopped, the tokens used, and the raw bytes when
    kept.
    """

    text: str
    tool_uses: Sequence[ToolUseBlock]
    stop_reason: str
    usage: Usage
    raw: bytes = b""

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tool_uses": [t.to_json() for t in self.tool_uses],
            "stop_reason": self.stop_reason,
            "usage": self.usage.to_json(),
        }


@runtime_checkable
class Model(Protocol):
    """What an adapter implements. `name` is recorded with every attempt."""

    name: str

    async def generate(self, request: ModelRequest) -> ModelResponse: ...


@dataclass(frozen=True)
class Price:
    """Micro-dollars per million tokens."""

    input_micros: int
    output_micros: int
    cached_input_micros: int | None = None  # None: cached tokens cost the input price

    def __post_init__(self) -> None:
        # Money is integer micro-dollars: a negative price would make spend negative (and a
        # cost limit meaningless), a float or text would make costs something else.
        for name in ("input_micros", "output_micros", "cached_input_micros"):
            value = getattr(self, name)
            if value is None and name == "cached_input_micros":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(
                    f"Price.{name} must be a non-negative integer of micro-dollars per million "
                    f"tokens, got {value!r}; Price.per_million takes dollars as text"
                )

    @staticmethod
    def free() -> Price:
        return Price(0, 0, 0)

    @staticmethod
    def per_million(input: str, output: str, cached_input: str | None = None) -> Price:
        """Prices in dollars per million tokens, as providers publish them."""
        return Price(
            parse_dollars(input),
            parse_dollars(output),
            None if cached_input is None else parse_dollars(cached_input),
        )

    def cost_micros(self, usage: Usage) -> int:
        cached_price = (
            self.input_micros if self.cached_input_micros is None else (self.cached_input_micros)
        )
        uncached = max(0, usage.input_tokens - usage.cached_input_tokens)
        total = (
            uncached * self.input_micros
            + usage.cached_input_tokens * cached_price
            + usage.output_tokens * self.output_micros
        )
        # Round up: an estimate of spend must never be below what was spent.
        return -(-total // 1_000_000)


class UnpricedModelError(ConfigError):
    """A paid model has no price: its spend could not be accounted."""


@dataclass(frozen=True)
class PriceTable:
    """Prices by model name. A model absent from the table is unpriced, not free."""

    prices: Mapping[str, Price] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.prices, Mapping):
            raise ConfigError(
                f"PriceTable takes a mapping of model names to prices, not "
                f"{type(self.prices).__name__}"
            )
        for name, price in self.prices.items():
            if not isinstance(name, str) or not isinstance(price, Price):
                raise ConfigError(
                    f"PriceTable maps model names (text) to Price values; got {name!r}: "
                    f"{type(price).__name__}"
                )

    def lookup(self, model: str) -> Price:
        price = self.prices.get(model)
        if price is None:
            raise UnpricedModelError(
                f"model {model!r} has no price: add it to the price table, or mark a local "
                "model Price.free()"
            )
        return price


@dataclass(frozen=True)
class ModelConfig:
    """A model and how the runtime calls it: the one place a model is configured.

    `model` is the `Model` itself (an adapter); `Driver(model=...)` takes either
    a bare `Model` (no prices, no retries, the default timeouts) or a
    `ModelConfig`. `prices` is one `Price` or a `PriceTable` looked up by the
    model's `name`; None records attempts as unpriced.
    """

    model: Model
    prices: Price | PriceTable | None = None
    call_timeout: timedelta = timedelta(minutes=2)
    max_retries: int = 0
    backoff: timedelta = timedelta(seconds=1)
    max_retry_after: timedelta = timedelta(minutes=1)

    def __post_init__(self) -> None:
        if isinstance(self.model, str) or not isinstance(self.model, Model):
            raise ConfigError(
                "ModelConfig(model=...) takes the Model itself (an object with a name and "
                f"async generate), not {type(self.model).__name__}"
            )
        problem = _name_problem(self.model.name)
        if problem:
            # Recorded with every attempt and part of every replay key: refused here, not
            # by the store inside the first request's transaction.
            raise ConfigError(
                f"the model's name must be non-empty text a store can keep: {problem}"
            )
        if self.prices is not None and not isinstance(self.prices, Price | PriceTable):
            raise ConfigError("ModelConfig prices must be a Price, a PriceTable or None")
        retries = self.max_retries
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigError(f"max_retries must be a non-negative integer, got {retries!r}")
        if not isinstance(self.call_timeout, timedelta) or self.call_timeout <= timedelta(0):
            raise ConfigError(
                f"call_timeout must be a positive timedelta, got {self.call_timeout!r}"
            )
        for name in ("backoff", "max_retry_after"):
            value = getattr(self, name)
            if not isinstance(value, timedelta) or value < timedelta(0):
                raise ConfigError(f"{name} must be a non-negative timedelta, got {value!r}")

    def price(self, model_name: str) -> Price | None:
        """The price of one attempt; None when no prices were given at all.

        A price table that lacks the model refuses (`UnpricedModelError`): the
        table says this is a paid model whose spend could not be accounted.
        """
        if self.prices is None:
            return None
        if isinstance(self.prices, Price):
            return self.prices
        return self.prices.lookup(model_name)


def _name_problem(name: object) -> str:
    """Why `name` cannot be a model's recorded name ("" when it can)."""
    if not isinstance(name, str):
        return f"it is a {type(name).__name__}, not a str"
    if not name:
        return "it is empty"
    if "\x00" in name:
        return f"it holds a NUL character at position {name.index(chr(0)) + 1}"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"it holds a lone surrogate at position {exc.start + 1}"
    return ""


def parse_dollars(text: str) -> int:
    """`"5"`, `"4.41"`, `"$0.50"` → integer micro-dollars (exact; sub-micro refused)."""
    if not isinstance(text, str):
        raise ConfigError(f"a dollar amount must be text, got {type(text).__name__}")
    cleaned = text.strip()
    # Only what people write for money: digits, one optional point, an optional
    # leading "$". Decimal alone would also take "1e3", "5_000" and other scripts' digits.
    if not _DOLLARS.fullmatch(cleaned):
        raise ConfigError(f"{text!r} is not a dollar amount like 5, 4.41 or $0.50")
    if cleaned.startswith("$"):
        cleaned = cleaned[1:]
    try:
        amount = Decimal(cleaned)
    except InvalidOperation:
        raise ConfigError(f"{text!r} is not a dollar amount") from None
    if not amount.is_finite() or amount < 0:
        raise ConfigError(f"{text!r} is not a non-negative dollar amount")
    micros = amount * 1_000_000
    if micros != micros.to_integral_value():
        raise ConfigError(f"{text!r} is finer than a micro-dollar")
    return int(micros)
