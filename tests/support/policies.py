"""A policy that gives every request the same answer, for tests that need one outcome.

`FixedPolicy(answer)` returns `answer` for every request, or raises it when it
is an exception (a policy with a bug). Its `policy_id` is `fixed/1`.
"""

from __future__ import annotations

from typing import Any

from agentrt import RunView, ToolRequest


class FixedPolicy:
    """Answers every request with `answer` (raised, when it is an exception)."""

    policy_id = "fixed/1"

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def evaluate(self, request: ToolRequest, view: RunView) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer
