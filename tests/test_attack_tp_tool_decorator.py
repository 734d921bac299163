"""Attack campaign (tp): declaring tools with `@agentrt.tool` as a consumer does.

api.md: `@tool` turns a typed function into a Tool; "the function receives validated,
typed arguments". `tool()`'s docstring: "Refusals raise ConfigError at decoration."
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import pydantic
import pytest

import agentrt
from agentrt import Decision, PolicyDecision, RunView, ToolCall, ToolRequest
from agentrt._errors import ConfigError
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids


def set_password(password: Annotated[str, pydantic.Field(pattern=r"^(?=.*\d).{8,}$")]) -> str:
    """Set the password (a lookahead: at least one digit)."""
    return "ok"


def rename(name: Annotated[str, pydantic.Field(max_length=-1)]) -> str:
    """Rename the thing (an author's slip: a negative length)."""
    return name


@pytest.mark.parametrize("fn", [set_password, rename], ids=["lookahead-pattern", "max-length"])
def test_a_field_pydantic_cannot_build_is_a_config_error(fn: object) -> None:
    """A tool author writes a `Field(...)` constraint pydantic cannot build a validator
    for. `@tool` lets pydantic_core's `SchemaError` ("Error building "model" validator
    ...") escape from decoration: a traceback through pydantic internals, not the
    ConfigError naming the tool that every other refusal is."""
    name = fn.__name__  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=name):
        agentrt.tool(side_effect="local_mutation", timeout=1)(fn)  # type: ignore[call-overload]


def test_a_generator_function_is_refused_at_decoration() -> None:
    """`@tool` over a generator function registers; each call returns a generator object
    whose body never runs, recorded as `invalid_content` with the object's repr (a memory
    address). Nothing the function says it does happens. It should be refused with a
    ConfigError at decoration, as `*args` and positional-only parameters are."""

    def write_lines(n: int) -> Iterator[int]:
        """Write n lines, yielding each line number."""
        yield from range(n)

    with pytest.raises(ConfigError, match="write_lines"):
        agentrt.tool(side_effect="local_mutation", timeout=1)(write_lines)


class Transfer:
    """Send an amount to the configured account."""

    amount: str = "0"  # the last amount sent, as text

    def __call__(self, amount: int) -> str:
        return f"sent {amount!r}"


def test_a_callable_instance_gets_its_types_from_its_call_method() -> None:
    """`@tool` over an instance of a class with `__call__` reads type hints from the
    instance, so it gets the class's attribute annotations, not `__call__`'s: the schema
    says `amount` is a string and the function annotated `amount: int` receives "12".
    The schema should come from `__call__` (or callable instances be refused)."""
    try:
        made = agentrt.tool(side_effect="remote_mutation", timeout=1, name="transfer")(Transfer())
    except ConfigError:
        return
    assert made.spec.input_schema["properties"]["amount"]["type"] == "integer"
    result = made.call(ToolCall(run_id="r", step_id="s", args={"amount": 12}, lease_epoch=1))
    assert result.content == "sent 12"


def _logged(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A consumer's ordinary logging decorator (sync wrapper, `functools.wraps`)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


NOTIFIED: list[str] = []


@agentrt.tool(side_effect="local_mutation", timeout=5)
@_logged
async def notify(message: str) -> str:
    """Send a notification."""
    NOTIFIED.append(message)
    return "sent"


def test_an_async_tool_under_a_sync_wrapping_decorator_is_run(store: agentrt.Store) -> None:
    """`@tool` over an `async def` wrapped by a plain `functools.wraps` decorator (logging,
    retry) makes a FunctionTool whose `call` wraps the returned coroutine in a ToolResult
    unawaited: the body never runs, and the step fails `invalid_content` with
    "<coroutine object notify at 0x...>". The coroutine should be awaited and its result
    recorded, as the executor does for any plain `call` returning an awaitable."""
    NOTIFIED.clear()
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("notify", {"message": "hi"}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[notify],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("notify")
    assert run.status == "COMPLETED"
    first = store.list_steps(run.id)[0]
    assert first.observation is not None
    assert first.observation.kind == "tool_result", first.observation
    assert first.observation.content == "sent"
    assert NOTIFIED == ["hi"]


class Payee(pydantic.BaseModel):
    """A payee; its account number is read from `details.account` of what is sent."""

    account: str = pydantic.Field(validation_alias=pydantic.AliasPath("details", "account"))


PAID: list[str] = []


def pay(payee: Payee) -> str:
    """Pay the payee."""
    PAID.append(payee.account)
    return "paid"


class AllowlistPolicy:
    """Allows payments to account "A" only, reading the request's arguments."""

    policy_id = "allowlist"

    def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        if request.args["payee"].get("account") == "A":
            return PolicyDecision.allow()
        return PolicyDecision.deny("only account A may be paid")


def test_the_tool_receives_the_argument_the_schema_and_the_policy_saw(
    store: agentrt.Store,
) -> None:
    """A nested model reads a field through `AliasPath("details", "account")`; pydantic's
    schema says the property is `account`. The model sends `{"account": "A", "details":
    {"account": "EVIL"}}`: the schema accepts it, the policy allows account "A", the
    record shows "A", and the function pays "EVIL". A call should run with what was
    checked and allowed (or such a signature be refused at decoration)."""
    PAID.clear()
    args = {"payee": {"account": "A", "details": {"account": "EVIL"}}}
    try:
        tool = agentrt.tool(side_effect="remote_mutation", timeout=5)(pay)
    except ConfigError:
        return
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("pay", args), Decision.complete()]),
        policy=AllowlistPolicy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
    )
    driver.start_sync("pay A")
    assert "EVIL" not in PAID
