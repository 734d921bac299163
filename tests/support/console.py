"""Runs for the console's tests, made by a real program: a Driver over the file, a scripted agent.

`Program` plays the consumer's program: it starts a run that pauses on an
approval and, when a test says so, resumes it (`resume`), exactly as a program
would after a person decided in the console.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import agentrt
from agentrt import Decision, PolicyDecision, SideEffect, ToolRequest
from agentrt._policy import need_approval
from agentrt._records import RunView
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool

MESSAGE_SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
    "additionalProperties": False,
}

HOSTILE = (
    '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
    "<style>body{display:none}</style>"
    "pay \u202eevil\u202c now\u200b\u2066x\u2069 & \"quoted\" 'single' \x1b[31mred"
)
"""A goal or argument a model might write to script, style or spoof the page."""


class InterruptedPolicy:
    """Asks a person about `send` as the runtime does after a crash mid-call."""

    id = "console-tests/interrupted"

    def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        if request.spec.name == "send":
            return need_approval(
                "interrupted_side_effect",
                "interrupted while executing; outcome unknown",
                {"tool": "send"},
                {"notice": "the call may have taken effect"},
            )
        return PolicyDecision.allow()


def send(to: str, body: str = "hello") -> Decision:
    return Decision.tool_call("send", {"to": to, "body": body})


class Program:
    """A consumer's program over `db`: a send tool (remote: a person approves) and a lookup."""

    def __init__(
        self,
        db: Path | str,
        decisions: Sequence[Decision],
        *,
        prefix: str = "a",
        policy: Any = None,
    ) -> None:
        self.send = RecordingTool("send", SideEffect.REMOTE_MUTATION, schema=MESSAGE_SCHEMA)
        self.lookup = RecordingTool("lookup", SideEffect.READ_ONLY)
        self.store = agentrt.open_store(db)
        self.driver = agentrt.Driver(
            store=self.store,
            agent=ScriptedAgent(list(decisions)),
            policy=policy or agentrt.default_policy(),
            tools=[self.lookup, self.send],
            now=FakeClock(),
            new_id=Ids(prefix),
        )

    def start(
        self, goal: str = "tell alice the build is green", limits: agentrt.Limits | None = None
    ) -> agentrt.Run:
        run: agentrt.Run = self.driver.start_sync(goal, limits=limits)
        return run

    def resume(self, run_id: str) -> agentrt.Run:
        run: agentrt.Run = self.driver.resume_sync(run_id)
        return run

    def pending(self, run_id: str) -> agentrt.Approval:
        (approval,) = self.store.pending_approvals(run_id)
        return approval

    def close(self) -> None:
        self.store.close()


__all__ = ["HOSTILE", "InterruptedPolicy", "Program", "send"]
