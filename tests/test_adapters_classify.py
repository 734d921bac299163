"""The classification every framework adapter shares: no framework tool runs unclassified."""

from __future__ import annotations

import importlib
import os
from datetime import timedelta

import pytest

import agentrt
from agentrt.adapters import Classification, UnclassifiedToolError, classify, tool_spec

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def test_a_classification_normalises_seconds_and_side_effect() -> None:
    c = Classification("remote_mutation", timeout=2.5)
    assert c.side_effect is agentrt.SideEffect.REMOTE_MUTATION
    assert c.timeout == timedelta(seconds=2.5)
    assert c.terminal is False


@pytest.mark.parametrize(
    ("side_effect", "timeout", "terminal", "message"),
    [
        ("writes", 1, False, "side_effect must be one of read_only, local_mutation"),
        (None, 1, False, "side_effect must be one of"),
        ("read_only", True, False, "timeout must be a timedelta or a number of seconds, got bool"),
        ("read_only", "5s", False, "timeout must be a timedelta or a number of seconds, got str"),
        ("read_only", float("nan"), False, "timeout must be a finite number of seconds"),
        ("read_only", 0, False, "timeout must be positive"),
        ("read_only", timedelta(seconds=-1), False, "timeout must be positive"),
        ("read_only", 1e300, False, "is too long"),
        ("read_only", 1, "yes", "terminal must be a bool, got str"),
    ],
)
def test_a_bad_classification_is_refused_in_one_sentence(
    side_effect: object, timeout: object, terminal: object, message: str
) -> None:
    with pytest.raises(agentrt.ConfigError, match=message):
        Classification(side_effect, timeout=timeout, terminal=terminal)  # type: ignore[arg-type]


def test_every_offered_tool_gets_its_classification_in_the_order_offered() -> None:
    read = Classification("read_only", timeout=1)
    charge = Classification("remote_mutation", timeout=5)
    got = classify(["lookup", "charge"], {"charge": charge, "lookup": read})
    assert list(got.items()) == [("lookup", read), ("charge", charge)]


def test_an_unclassified_tool_is_refused_naming_every_such_tool() -> None:
    with pytest.raises(UnclassifiedToolError) as err:
        classify(["lookup", "charge", "push"], {"lookup": Classification("read_only", timeout=1)})
    assert str(err.value) == (
        "no classification for tools 'charge', 'push': say what each tool does to the world "
        "(side effect and timeout) before it can run"
    )
    assert isinstance(err.value, agentrt.ConfigError)


def test_a_classification_naming_no_offered_tool_is_refused() -> None:
    with pytest.raises(agentrt.ConfigError, match=r"classification for 'lokup', but the agent"):
        classify(
            ["lookup"],
            {
                "lookup": Classification("read_only", timeout=1),
                "lokup": Classification("read_only", timeout=1),
            },
        )


def test_a_classification_that_is_not_a_classification_is_refused() -> None:
    with pytest.raises(agentrt.ConfigError, match="must be a Classification, got str"):
        classify(["lookup"], {"lookup": "read_only"})  # type: ignore[dict-item]
    with pytest.raises(agentrt.ConfigError, match="must be a mapping"):
        classify(["lookup"], [("lookup", Classification("read_only", timeout=1))])  # type: ignore[arg-type]


def test_tool_spec_builds_the_spec_the_gate_registers() -> None:
    spec = tool_spec("lookup", "Find a thing.", SCHEMA, Classification("read_only", timeout=3))
    assert spec.to_json() == {
        "name": "lookup",
        "description": "Find a thing.",
        "input_schema": SCHEMA,
        "side_effect": "read_only",
        "timeout": 3_000_000_000,
    }


def test_tool_spec_refuses_what_the_runtime_refuses_for_its_own_tools() -> None:
    with pytest.raises(agentrt.ToolNameError):
        tool_spec("look up", "", SCHEMA, Classification("read_only", timeout=3))
    with pytest.raises(agentrt.ConfigError, match="type"):
        tool_spec("lookup", "", {"type": "array"}, Classification("read_only", timeout=3))


def test_importing_the_adapters_imports_no_framework() -> None:
    import subprocess
    import sys

    code = (
        "import sys, agentrt.adapters; "
        "names = ('pydantic_ai', 'agents', 'langgraph', 'langchain_core'); "
        "print(sorted(m for m in names if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_adapters_ended_run_error_is_the_shared_one_and_its_frameworks_own() -> None:
    """One `except agentrt.adapters.RunEndedError` catches an ended run under any adapter."""
    from agentrt.adapters import RunEndedError

    found = []
    for module, framework_base in (
        ("agentrt.adapters.pydantic_ai", "pydantic_ai.exceptions:AgentRunError"),
        ("agentrt.adapters.openai_agents", "agents.exceptions:AgentsException"),
        ("agentrt.adapters.langgraph", None),
    ):
        if os.environ.get("CI"):
            adapter = importlib.import_module(module)  # CI installs every extra: never skip
        else:
            # The adapters raise a plain ImportError naming their extra, not ModuleNotFoundError.
            adapter = pytest.importorskip(
                module, reason=f"{module} needs its extra", exc_type=ImportError
            )
        error = adapter.RunEndedError
        assert issubclass(error, RunEndedError) and issubclass(error, agentrt.RunFinishedError)
        assert adapter.Classification is Classification
        assert adapter.UnclassifiedToolError is UnclassifiedToolError
        if framework_base is not None:
            name, _, attr = framework_base.partition(":")
            assert issubclass(error, getattr(__import__(name, fromlist=[attr]), attr))
        found.append(error.__module__)
    assert found == [
        "agentrt.adapters.pydantic_ai",
        "agentrt.adapters.openai_agents",
        "agentrt.adapters.langgraph",
    ]
    assert Classification.__module__ == "agentrt.adapters"


def test_a_classifications_reconcile_must_be_a_function() -> None:
    """`Classification(reconcile=...)` is checked as `agentrt.tool(reconcile=...)` is (0091)."""
    with pytest.raises(agentrt.ConfigError) as refused:
        Classification("remote_mutation", 5, reconcile="look_up")  # type: ignore[arg-type]
    assert str(refused.value) == "reconcile must be a function taking the ToolCall, got str"

    def look_up(call: agentrt.ToolCall) -> agentrt.Reconciled:
        return agentrt.Reconciled.unknown()

    assert Classification("remote_mutation", 5, reconcile=look_up).reconcile is look_up
    assert Classification("remote_mutation", 5).reconcile is None
