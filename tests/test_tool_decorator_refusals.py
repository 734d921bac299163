"""`@agentrt.tool` over what consumers write: refused at decoration, or run as declared.

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
from agentrt import Decision, ToolCall
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
    for. `@tool` refuses it with a ConfigError naming the tool and saying why in one line
    (pydantic_core's last line), as every other refusal at decoration."""
    name = fn.__name__  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=name) as raised:
        agentrt.tool(side_effect="local_mutation", timeout=1)(fn)  # type: ignore[call-overload]
    assert "\n" not in str(raised.value)


def test_a_generator_function_is_refused_at_decoration() -> None:
    """`@tool` over a generator function (whose body would never run: a call returns a
    generator object) is refused with a ConfigError at decoration, as `*args` and
    positional-only parameters are."""

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
    """`@tool` over an instance of a class with `__call__` (and an annotated class
    attribute of the same name as a parameter) takes the schema from `__call__`'s hints:
    `amount: int` is an integer, and the call receives 12."""
    made = agentrt.tool(side_effect="remote_mutation", timeout=1, name="transfer")(Transfer())
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
    retry): the tool is async, the coroutine the wrapper returns is awaited, the body runs
    and its result is recorded."""
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


def pay(payee: Payee) -> str:
    """Pay the payee."""
    return payee.account


def test_a_field_read_through_a_path_the_schema_does_not_show_is_refused() -> None:
    """A nested model reads a field through `AliasPath("details", "account")`; pydantic's
    schema says the property is `account`, so a model could send `{"account": "A",
    "details": {"account": "EVIL"}}`: checked and allowed as "A", paid to "EVIL". `@tool`
    refuses such a signature at decoration with a ConfigError naming the field."""
    with pytest.raises(ConfigError, match="field 'account' is read through a path or choices"):
        agentrt.tool(side_effect="remote_mutation", timeout=5)(pay)


class ByName(pydantic.BaseModel):
    """A payee read by its alias or, as well, by its field name."""

    model_config = pydantic.ConfigDict(populate_by_name=True)
    account: str = pydantic.Field("none", alias="acct")


def pay_by_name(payee: ByName) -> str:
    """Pay the payee."""
    return payee.account


def test_a_field_read_by_name_beside_its_alias_is_refused() -> None:
    """A model that reads a field by its alias and by its name (`populate_by_name`): the
    schema shows only `acct`, so `{"account": "EVIL"}` would pass it unseen. `@tool`
    refuses such a signature at decoration."""
    with pytest.raises(ConfigError, match="field 'account' is read through its name and its alias"):
        agentrt.tool(side_effect="remote_mutation", timeout=5)(pay_by_name)
