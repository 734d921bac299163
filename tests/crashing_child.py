"""A program that dies mid-run: run as a child process by the recovery tests.

    python tests/crashing_child.py DB MODE

DB is a SQLite file's path or a PostgreSQL schema's URL (the `database` fixture's).
The tools journal every call to `journal_path(DB)`: `CRASH_JOURNAL` when set (the
`crash_journal` fixture sets it to a file in the test's tmp_path), else `<DB>.journal`
(a file's path only).

MODE says where it dies, by SIGKILL to itself (no cleanup, no lease release,
exactly what the kernel's OOM killer or a power cut leaves):

- `charge`: inside the `charge` tool (remote_mutation), after writing its journal line;
- `lookup`: inside the `lookup` tool (read_only);
- `deciding`: inside the agent's decide, before any tool.
- `model`: inside a model request, after its `dispatched` row committed.

The same module gives the tests the tools, policy and script to resume with.
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import agentrt
from agentrt import Decision, PolicyDecision, SideEffect, SideEffectPolicy, ToolCall, ToolResult
from agentrt._model import Message, ModelConfig, ModelRequest, ModelResponse, Price, TextBlock
from agentrt.scripted import ScriptedAgent


def journal_path(db: Path | str) -> Path:
    """Where the tools of a run on `db` journal their calls (see the module's docstring)."""
    override = os.environ.get("CRASH_JOURNAL")
    if override:
        return Path(override)
    assert "://" not in str(db), "a database URL's journal needs CRASH_JOURNAL (crash_journal)"
    return Path(str(db) + ".journal")


class JournalTool:
    """Appends a line to `journal_path(db)` for every invocation, in whatever process."""

    def __init__(self, name: str, side_effect: SideEffect, journal: Path, die: bool) -> None:
        self.spec = agentrt.ToolSpec(
            name=name,
            description=f"the {name} tool",
            input_schema={
                "type": "object",
                "properties": {"amount": {"type": "integer"}},
                "additionalProperties": False,
            },
            side_effect=side_effect,
            timeout=timedelta(seconds=10),
        )
        self.journal = journal
        self.die = die

    def call(self, call: ToolCall) -> ToolResult:
        with open(self.journal, "a") as f:
            f.write(f"{os.getpid()} {self.spec.name} {call.step_id} epoch={call.lease_epoch}\n")
            f.flush()
            os.fsync(f.fileno())
        if self.die:
            os.kill(os.getpid(), signal.SIGKILL)
        return ToolResult({"tool": self.spec.name, "ok": True}, f"{self.spec.name} ok")


def policy() -> SideEffectPolicy:
    allow = PolicyDecision.allow()
    return SideEffectPolicy(
        {
            SideEffect.READ_ONLY: allow,
            SideEffect.LOCAL_MUTATION: allow,
            SideEffect.REMOTE_MUTATION: allow,
        },
        policy_id="crash-tests/1",
    )


def tools(db: Path | str, die: str = "") -> list[Any]:
    journal = journal_path(db)
    return [
        JournalTool("charge", SideEffect.REMOTE_MUTATION, journal, die == "charge"),
        JournalTool("lookup", SideEffect.READ_ONLY, journal, die == "lookup"),
    ]


def script(mode: str) -> list[Any]:
    first = "lookup" if mode == "lookup" else "charge"
    return [Decision.tool_call(first, {"amount": 5}), Decision.complete({"done": True})]


def journal_lines(db: Path | str) -> list[str]:
    path = journal_path(db)
    return path.read_text().splitlines() if path.exists() else []


REQUEST = ModelRequest(
    system="", messages=[Message("user", [TextBlock("charge?")])], max_output_tokens=1000
)
PRICE = Price(3_000_000, 15_000_000)


class DyingModel:
    name = "dying:model"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")


async def ask_the_model(input: agentrt.StepInput) -> Decision:
    await input.model.generate(REQUEST)
    return Decision.fail("unreachable")


def main() -> None:
    db, mode = sys.argv[1], sys.argv[2]
    decisions = script(mode)
    if mode == "deciding":

        def die(_: agentrt.StepInput) -> Decision:
            os.kill(os.getpid(), signal.SIGKILL)
            raise AssertionError("unreachable")

        decisions = [die, *decisions]
    model = None
    if mode == "model":
        model = DyingModel()
        decisions = [ask_the_model, *decisions]
    store = agentrt.open_store(db)
    driver = agentrt.Driver(
        model=None if model is None else ModelConfig(model, prices=PRICE),
        store=store,
        agent=ScriptedAgent(decisions),
        policy=policy(),
        tools=tools(db, die=mode),
        lease_owner="crashing-child",
        lease_ttl=timedelta(seconds=float(os.environ.get("LEASE_TTL", "30"))),
    )
    driver.start_sync("charge the card", run_id=os.environ.get("RUN_ID") or None)
    raise AssertionError("the child should have died")


if __name__ == "__main__":
    main()
