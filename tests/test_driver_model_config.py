"""`Driver(model=...)` takes a `Model` or a `ModelConfig` carrying it: one place to configure.

models.md: `ModelConfig(model, prices=None, call_timeout=..., max_retries=0, ...)`;
`model` is the `Model` itself, and `Driver(model=...)` takes a `Model` or a
`ModelConfig` (docs/decisions/0020).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import ConfigError, Decision, ModelConfig, StepInput
from agentrt._model import Price
from conftest import FakeClock, Ids
from support.models import TINY_REQUEST, Replies


async def ask(input: StepInput) -> Decision:
    assert input.model is not None
    await input.model.generate(TINY_REQUEST)
    return Decision.complete({"asked": input.model.name})


def driver(store: agentrt.Store, model: Any, ids: str = "a") -> agentrt.Driver:
    return agentrt.Driver(
        store=store,
        agent=ask,
        policy=agentrt.default_policy(),
        model=model,
        now=FakeClock(),
        new_id=Ids(ids),
    )


def test_a_driver_given_a_model_config_uses_its_model_prices_and_retries(
    store: agentrt.Store,
) -> None:
    model = Replies(failures=1)
    config = ModelConfig(
        model=model, prices=Price(2_000_000, 0), max_retries=1, backoff=timedelta(0)
    )
    run = driver(store, config).start_sync("g")
    assert (run.status, run.result) == ("COMPLETED", {"asked": "local:tiny"})
    assert model.requests == 2  # the one retry the config allows
    calls = [(c.attempt, c.status, c.model) for c in store.list_model_calls(run.id)]
    assert calls == [(1, "error", "local:tiny"), (2, "ok", "local:tiny")]
    assert run.estimated_cost_micros == 2_000_000  # the config's price, by the model's name


def test_a_driver_given_a_bare_model_records_it_unpriced_with_no_retries(
    store: agentrt.Store,
) -> None:
    model = Replies()
    run = driver(store, model).start_sync("g")
    assert run.status == "COMPLETED"
    assert [(c.status, c.cost_micros) for c in store.list_model_calls(run.id)] == [("ok", 0)]
    failing = Replies(failures=1)
    run = driver(store, failing, ids="b").start_sync("g2")
    assert (run.status, run.reason) == ("FAILED", "model_unavailable")
    assert failing.requests == 1  # the default config retries nothing


def test_a_model_config_given_a_model_name_instead_of_the_model_is_refused() -> None:
    with pytest.raises(ConfigError, match="takes the Model itself"):
        ModelConfig(model="local:tiny")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_retries", -1, "max_retries"),
        ("max_retries", True, "max_retries"),
        ("call_timeout", timedelta(0), "call_timeout"),
        ("backoff", timedelta(seconds=-1), "backoff"),
        ("prices", {"local:tiny": 1}, "prices"),
    ],
)
def test_a_model_config_with_an_unusable_setting_is_refused_naming_it(
    field: str, value: Any, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        ModelConfig(model=Replies(), **{field: value})


def test_a_driver_refuses_a_model_that_is_neither_a_model_nor_a_model_config(
    store: agentrt.Store,
) -> None:
    with pytest.raises(ConfigError, match=r"Model .* or a ModelConfig"):
        driver(store, "local:tiny")


def test_the_old_separate_model_config_parameter_is_gone(store: agentrt.Store) -> None:
    model = Replies()
    with pytest.raises(TypeError, match="model_config"):
        agentrt.Driver(  # type: ignore[call-arg]
            store=store,
            agent=ask,
            policy=agentrt.default_policy(),
            model=model,
            model_config=ModelConfig(model=model),
        )
