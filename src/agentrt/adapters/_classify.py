"""The consumer's classification of a framework's tools, shared by every adapter.

A framework defines its tools (`@agent.tool`, `@function_tool`, a LangChain
tool) without saying what they do to the world; agentrt's policy needs exactly
that. So the consumer classifies each tool by name, and the adapter refuses to
start when a tool the framework offers has no classification, or when a
classification names a tool the framework does not offer (a typo would
otherwise leave the real tool unclassified). Both refusals happen before any
run starts, in one sentence naming every tool concerned.

`tool_spec` turns a framework tool's name, description and JSON schema plus
its classification into the `ToolSpec` the Gate registers, hashes and shows to
the policy; it is checked and compiled like any of our own tools
(`compile_tool`), so a name or schema the runtime refuses is refused here too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from agentrt import (
    ConfigError,
    Run,
    RunFinishedError,
    SideEffect,
    ToolCall,
    ToolSpec,
    compile_tool,
)
from agentrt.lowlevel import tool_class


class UnclassifiedToolError(ConfigError):
    """A framework tool has no classification (side effect, timeout), so it is not run at all."""


class RunEndedError(RunFinishedError):
    """The agentrt run behind a framework run has ended: no tool call runs in it again.

    Each adapter raises its own subclass, which is also the framework's own
    exception for a run that must stop (Pydantic AI's `AgentRunError`, the
    Agents SDK's `AgentsException`), so both `except` clauses catch it. `run`
    is the run as recorded; `run.status` and `run.reason` say why it ended
    (a limit, an operator's cancel, a rejection, a policy abort).
    """

    run: Run


def ended_message(run: Run) -> str:
    """One sentence naming the run, how it ended and why."""
    detail = f": {run.reason_detail}" if run.reason_detail else ""
    return f"agentrt run {run.id} is {run.status} ({run.reason}{detail}); no tool call runs in it"


@dataclass(frozen=True, slots=True)
class Classification:
    """What one framework tool does to the world, and how long it may take.

    `side_effect` is one of `read_only`, `local_mutation`, `remote_mutation`,
    `destructive`; `timeout` a positive timedelta or number of seconds; a
    `terminal` tool ends the run when it succeeds. Both `side_effect` and
    `timeout` are required, as for `agentrt.tool`.

    `reconcile` is the tool's own reconciliation, as `agentrt.tool(...,
    reconcile=fn)` takes it (decision 0067, for adapters decision 0091): after
    a takeover of a run whose interrupted step was this tool's call, it is
    asked with the `ToolCall` as recorded and answers `found(result)`,
    `not_found(safe_to_repeat=True)`, `not_found()` or `unknown()`; a plain
    function or a coroutine function, bounded by `timeout`.
    """

    side_effect: SideEffect | str
    timeout: timedelta | float
    terminal: bool = False
    reconcile: Callable[[ToolCall], Any] | None = None

    def __post_init__(self) -> None:
        side_effect, timeout, _ = tool_class(self.side_effect, self.timeout, self.terminal)
        if timeout <= timedelta(0):
            raise ConfigError(f"timeout must be positive, got {timeout}")
        if self.reconcile is not None and not callable(self.reconcile):
            raise ConfigError(
                "reconcile must be a function taking the ToolCall, got "
                f"{type(self.reconcile).__name__}"
            )
        object.__setattr__(self, "side_effect", side_effect)
        object.__setattr__(self, "timeout", timeout)


def classify(
    offered: Iterable[str], classes: Mapping[str, Classification]
) -> dict[str, Classification]:
    """The classification of every offered tool, in the order offered.

    Raises UnclassifiedToolError when an offered tool has none, and ConfigError
    when a classification names a tool that is not offered or is not a
    `Classification`.
    """
    if not isinstance(classes, Mapping):
        raise ConfigError(
            f"classifications must be a mapping of tool name to Classification, "
            f"got {type(classes).__name__}"
        )
    names = list(dict.fromkeys(offered))
    for name, value in classes.items():
        if not isinstance(value, Classification):
            raise ConfigError(
                f"the classification of tool {name!r} must be a Classification, "
                f"got {type(value).__name__}"
            )
    missing = [name for name in names if name not in classes]
    if missing:
        listed = ", ".join(repr(name) for name in missing)
        raise UnclassifiedToolError(
            f"no classification for tool{'s' if len(missing) > 1 else ''} {listed}: "
            "say what each tool does to the world (side effect and timeout) before it can run"
        )
    unknown = [name for name in classes if name not in names]
    if unknown:
        listed = ", ".join(repr(name) for name in unknown)
        raise ConfigError(
            f"classification for {listed}, but the agent offers no such tool "
            f"(it offers {', '.join(repr(name) for name in names) or 'none'})"
        )
    return {name: classes[name] for name in names}


def tool_spec(
    name: str, description: str, input_schema: Mapping[str, Any], how: Classification
) -> ToolSpec:
    """The ToolSpec the Gate registers for one framework tool, checked like our own tools."""
    assert isinstance(how.timeout, timedelta)  # normalised by Classification
    spec = ToolSpec(
        name=name,
        description=description,
        input_schema=input_schema,
        side_effect=str(how.side_effect),
        timeout=how.timeout,
        terminal=how.terminal,
    )
    compile_tool(spec)
    return spec
