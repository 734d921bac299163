"""A model's name is text the record can hold, checked when the model is configured
(attack on model accounting; decision 0159).

The name is recorded with every attempt (`model_calls.model`, `model.dispatched`) and is
part of every replay key. `ModelConfig` (and `Driver(model=...)`, which builds one) took
a model whose `name` was None, a number, empty or held a lone surrogate: the first
request then failed inside the dispatching transaction (`StoreError: ... NOT NULL
constraint failed: model_calls.model`, `... surrogates not allowed`; on PostgreSQL a NUL
too) and the run ended `agent_error`, or a number was stored where the record holds text.
"""

from __future__ import annotations

from typing import Any

import pytest

import agentrt
from agentrt import ConfigError, ModelConfig, ModelResponse, SideEffect, ToolUseBlock, Usage
from agentrt.model_agent import ModelAgent
from conftest import FakeClock, Ids, RecordingTool


class _Named:
    def __init__(self, name: Any) -> None:
        self.name = name

    async def generate(self, request: Any) -> ModelResponse:
        use = ToolUseBlock("t", "finish", {"x": 1})
        return ModelResponse("", (use,), "tool_use", Usage(1, 1, 0))


@pytest.mark.parametrize(
    "name",
    [None, 5, "", "a\ud800b", "n\x00ul", b"bytes"],
    ids=["none", "int", "empty", "surrogate", "nul", "bytes"],
)
def test_a_model_whose_name_is_not_usable_text_is_refused_when_configured(name: Any) -> None:
    with pytest.raises(ConfigError, match="name"):
        ModelConfig(model=_Named(name))


@pytest.mark.parametrize("name", [None, "a\ud800b"], ids=["none", "surrogate"])
def test_a_driver_given_a_model_whose_name_is_not_usable_text_refuses_it(
    any_store: agentrt.Store, name: Any
) -> None:
    with pytest.raises(ConfigError, match="name"):
        agentrt.Driver(
            store=any_store, agent=ModelAgent(), policy=agentrt.default_policy(), model=_Named(name)
        )


@pytest.mark.parametrize("name", ["local:llama3", "ü:modèle"], ids=["plain", "accents"])
def test_a_model_whose_name_is_text_is_recorded_with_each_attempt(
    any_store: agentrt.Store, name: str
) -> None:
    finish = RecordingTool("finish", SideEffect.READ_ONLY, terminal=True)
    driver = agentrt.Driver(
        store=any_store,
        agent=ModelAgent(),
        policy=agentrt.default_policy(),
        tools=[finish],
        model=ModelConfig(model=_Named(name), prices=agentrt.Price.free()),
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("g")
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed"), run
    assert [c.model for c in any_store.list_model_calls(run.id)] == [name]
