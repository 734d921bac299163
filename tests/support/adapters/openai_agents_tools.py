"""The Agents SDK adapter's tests' tools: four real function tools over a list of what they did.

`CLASSES` classifies them as the tests' story does (a read, a destructive delete, a remote
push that asks a person, a local note); `Remote().done` counts real executions.
"""

from __future__ import annotations

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
