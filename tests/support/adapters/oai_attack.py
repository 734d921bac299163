"""Helpers of the attack tests on the Agents SDK adapter (tests/test_attack_oai_*.py)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

from agents import function_tool

from agentrt.adapters.openai_agents import Classification

CLASSES = {
    "list_branches": Classification("read_only", 5),
    "delete_branch": Classification("destructive", 5),
    "push_branch": Classification("remote_mutation", 5),
    "write_note": Classification("local_mutation", 5),
}


class Remote:
    """Real tools over a list of what they did; `done` counts real executions."""

    def __init__(self) -> None:
        self.done: list[tuple[str, str]] = []

        @function_tool
        def list_branches() -> list[str]:
            """List the branches."""
            self.done.append(("list_branches", ""))
            return ["main", "feature/login"]

        @function_tool
        def delete_branch(branch: str) -> str:
            """Delete a branch."""
            self.done.append(("delete_branch", branch))
            return f"deleted {branch}"

        @function_tool
        def push_branch(branch: str) -> str:
            """Push a branch."""
            self.done.append(("push_branch", branch))
            return f"pushed {branch}"

        @function_tool
        def write_note(text: str) -> str:
            """Write a note in the local work tree."""
            self.done.append(("write_note", text))
            return f"noted {text}"

        self.tools = [list_branches, delete_branch, push_branch, write_note]


def sync(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test body on its own event loop (the suite has no async plugin)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def outputs(result: Any) -> list[Any]:
    return [item.output for item in result.new_items if type(item).__name__ == "ToolCallOutputItem"]
