"""Tool names: only what every provider accepts (`^[a-zA-Z0-9_-]{1,64}$`) is registered."""

from __future__ import annotations

from datetime import timedelta

import pytest

from agentrt import ConfigError, SideEffect, ToolSpec, tool
from agentrt._errors import ToolNameError
from agentrt._tools import compile_tool, validate_tools


def spec(name: str) -> ToolSpec:
    return ToolSpec(
        name=name,
        description="a tool",
        input_schema={"type": "object"},
        side_effect=SideEffect.READ_ONLY,
        timeout=timedelta(seconds=1),
    )


@pytest.mark.parametrize("name", ["a", "read_file", "push-branch", "Z9", "x" * 64, "_-_"])
def test_a_name_of_ascii_letters_digits_underscore_and_dash_up_to_64_is_registered(
    name: str,
) -> None:
    assert compile_tool(spec(name)).spec.name == name


@pytest.mark.parametrize(
    "name",
    [
        "x" * 65,
        "read file",
        "fs.read",
        "ns:tool",
        "tool\n",
        "\ntool",
        "café",
        "ｔｏｏｌ",  # fullwidth letters are not ASCII
        "a/b",
        "٣",  # an Arabic-Indic digit is not an ASCII digit
    ],
)
def test_a_name_outside_the_provider_rule_is_refused_with_one_sentence_naming_it(
    name: str,
) -> None:
    with pytest.raises(ToolNameError) as caught:
        compile_tool(spec(name))
    assert str(caught.value) == (
        f"tool name {name!r} is refused: a tool name must be 1 to 64 ASCII letters, digits, "
        "'_' or '-' (^[a-zA-Z0-9_-]{1,64}$), which every provider accepts"
    )
    # A refused name is a configuration error like every other registration refusal.
    assert isinstance(caught.value, ConfigError)


def test_the_tool_decorator_refuses_a_bad_name_at_decoration() -> None:
    with pytest.raises(ToolNameError, match=r"tool name 'fs\.read' is refused"):

        @tool(side_effect="read_only", timeout=1, name="fs.read")
        def read(path: str) -> str:
            """Read a file."""
            return path


def test_registering_tools_refuses_a_bad_name_among_good_ones() -> None:
    class Named:
        def __init__(self, name: str) -> None:
            self.spec = spec(name)

        def call(self, call: object) -> None:
            return None

    with pytest.raises(ToolNameError, match="'has space' is refused"):
        validate_tools([Named("fine"), Named("has space")])
