"""Attack: the Anthropic adapter's remembered turns cross from one conversation to another.

`AnthropicModel` remembers each reply's raw content blocks, keyed by the tool calls
alone (name and input, ids and text aside), and sends them back in place of any
later assistant turn with the same calls. One model instance serves every run of a
Driver, so a second conversation that makes the same call gets the first one's
blocks (its thinking and its words) in its own request. Real SDK, local server.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("anthropic")

from agentrt._model import (
    Message,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agentrt._records import ToolSpec
from agentrt.providers.anthropic import AnthropicModel
from support.providers import FakeServer, anthropic_message, json_reply

KEY = "sk-ant-api03-test-0123456789abcdef"

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


def turn(thinking: str, text: str) -> list[dict[str, Any]]:
    return [
        {"type": "thinking", "thinking": thinking, "signature": "EqQBCgIYAhIM" + "A" * 40},
        {"type": "text", "text": text},
        {"type": "tool_use", "id": "toolu_01", "name": "lookup_order", "input": {"order": 1}},
    ]


def first(goal: str) -> ModelRequest:
    return ModelRequest(
        system="You are a support agent.",
        messages=(Message("user", (TextBlock(goal),)),),
        tools=(LOOKUP,),
        max_output_tokens=1024,
    )


def follow_up(goal: str, response: ModelResponse) -> ModelRequest:
    """The next request of the same conversation, as the renderer builds it."""
    (use,) = response.tool_uses
    return ModelRequest(
        system="You are a support agent.",
        messages=(
            Message("user", (TextBlock(goal),)),
            Message(
                "assistant",
                (TextBlock(response.text), ToolUseBlock("toolu_s1_0", use.name, use.input)),
            ),
            Message("user", (ToolResultBlock("toolu_s1_0", "order 1: shipped"),)),
        ),
        tools=(LOOKUP,),
        max_output_tokens=1024,
    )


def test_one_conversations_turn_is_not_replayed_into_anothers_request() -> None:
    """Two runs share one AnthropicModel (as every run of a Driver does); Bob's run and
    then Alice's run both call lookup_order(1). Today Bob's next request sends Alice's
    thinking and words as Bob's own assistant turn. Each conversation's request should
    carry only its own turns."""
    bob_turn = turn("Bob asked about his order.", "Let me look up your order, Bob.")
    alice_turn = turn("Alice's card ends in 4242; she is upset.", "Checking, Alice.")
    with FakeServer(
        json_reply(anthropic_message(content=bob_turn, stop_reason="tool_use")),
        json_reply(anthropic_message(content=alice_turn, stop_reason="tool_use")),
        json_reply(anthropic_message()),
    ) as server:
        model = AnthropicModel(
            "claude-sonnet-4-5", api_key=KEY, base_url=server.url, timeout=timedelta(seconds=5)
        )

        async def conversations() -> None:
            bob = await model.generate(first("Where is my order? - Bob"))
            await model.generate(first("Where is my order? - Alice"))
            await model.generate(follow_up("Where is my order? - Bob", bob))

        asyncio.run(conversations())
    sent = server.requests[2].json()["messages"][1]
    assert sent["role"] == "assistant"
    words = repr(sent["content"])
    assert "Alice" not in words and "4242" not in words
    assert "Let me look up your order, Bob." in words
