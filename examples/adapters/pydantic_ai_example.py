"""A Pydantic AI agent whose every tool call goes through agentrt's Gate.

The agent is plain Pydantic AI: its model is Pydantic AI's own `FunctionModel`
playing a script (no network), its tools are `@agent.tool_plain` functions
over a local stand-in for a git remote (a JSON file). One capability,
`AgentrtGate`, puts each call through the Gate:

1. `list_branches` (read only): allowed, runs.
2. `delete_branch("main")` (destructive): denied by the policy; the model is
   told, as Pydantic AI tells it of any failed tool.
3. `push_branch("feature/login")` (a remote change): the run ends with
   Pydantic AI's `DeferredToolRequests`; its metadata carries the agentrt
   approval, the exact request and its hash. A person approves that hash
   (`approved(...)`, or `agentrt approve RUN` from another process), and the
   run is resumed the Pydantic AI way: message history + DeferredToolResults,
   with the same run metadata. The push runs once.

    python examples/adapters/pydantic_ai_example.py [--db PATH]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import agentrt
from agentrt.adapters import Classification
from agentrt.adapters.pydantic_ai import AgentrtGate, approved

SCRIPT: list[tuple[str, dict[str, Any]] | str] = [
    ("list_branches", {}),
    ("delete_branch", {"branch": "main"}),
    ("push_branch", {"branch": "feature/login"}),
    "feature/login is published",
]


def scripted_model(script: list[tuple[str, dict[str, Any]] | str]) -> FunctionModel:
    """Stands in for your model: the n-th answer after n answers; prints what it hears."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        for part in getattr(messages[-1], "parts", []):
            if isinstance(part, ToolReturnPart):
                print(f"  model hears ({part.outcome}): {part.content}")
        n = sum(isinstance(m, ModelResponse) for m in messages)
        turn = script[n]
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(turn)])
        name, args = turn
        print(f"model calls {name}({json.dumps(args)})")
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call-{n}")])

    return FunctionModel(answer)


def make_agent(workdir: Path, gate: AgentrtGate) -> Agent[None, str | DeferredToolRequests]:
    """Your agent, as you would write it, plus `capabilities=[gate]`."""
    remote = workdir / "pydantic-ai-remote.json"
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        scripted_model(SCRIPT),
        output_type=[str, DeferredToolRequests],
        capabilities=[gate],
    )

    def load() -> dict[str, Any]:
        if remote.exists():
            return dict(json.loads(remote.read_text()))
        return {"branches": ["main", "feature/login"], "pushed": []}

    @agent.tool_plain
    def list_branches() -> dict[str, Any]:
        """List the branches and what the remote has received."""
        return load()

    @agent.tool_plain
    def delete_branch(branch: str) -> str:
        """Delete a branch."""
        state = load()
        state["branches"].remove(branch)
        remote.write_text(json.dumps(state))
        return f"deleted {branch}"

    @agent.tool_plain
    def push_branch(branch: str) -> str:
        """Push a branch to the remote."""
        state = load()
        state["pushed"].append(branch)
        remote.write_text(json.dumps(state))
        return f"pushed {branch}"

    return agent


def main(db: Path) -> None:
    store = agentrt.open_store(db)
    gate = AgentrtGate(
        store=store,
        policy=agentrt.default_policy(),
        classifications={
            "list_branches": Classification("read_only", timeout=5),
            "delete_branch": Classification("destructive", timeout=5),
            "push_branch": Classification("remote_mutation", timeout=30),
        },
    )
    agent = make_agent(db.parent, gate)
    meta = gate.run_metadata()  # keep it beside the message history
    result = agent.run_sync("publish the login branch", metadata=meta)
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    (call,) = requests.approvals
    shown = requests.metadata[call.tool_call_id]["agentrt"]
    print(f"run {shown['run_id'][:8]} waits: {shown['tool']} {json.dumps(call.args)}")
    print(f"  approval {shown['approval_id'][:8]}, request hash {shown['hash'][:16]}...")

    # The person approves the hash they were shown (or: agentrt approve RUN --db DB).
    results = approved(requests, call.tool_call_id, by="example-operator", note="push is fine")
    print("a person approves that hash; the run is resumed the Pydantic AI way")
    result = agent.run_sync(
        message_history=result.all_messages(), deferred_tool_results=results, metadata=meta
    )
    print(f"output: {result.output}")
    remote = json.loads((db.parent / "pydantic-ai-remote.json").read_text())
    print(f"remote: branches={remote['branches']} pushed={remote['pushed']}")
    run = store.get_run(meta["agentrt_run_id"])
    print(f"agentrt run: {run.status} {run.reason}, {run.step_count} steps")
    report = store.verify_events()
    print(f"event chain: {report.checked} events, {'intact' if report.intact else 'BROKEN'}")
    store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=None)
    args = parser.parse_args()
    if args.db is not None and str(args.db).startswith(("postgresql:", "postgres:")):
        # Not printed back: a URL may hold a password.
        parser.exit(2, f"{parser.prog}: --db takes a SQLite file's path here, not a URL\n")
    if args.db is not None and not Path(args.db).parent.is_dir():  # one sentence, no traceback
        parser.exit(
            2,
            f"{parser.prog}: --db {args.db}: {Path(args.db).parent} is not an existing directory\n",
        )
    if args.db is not None:
        try:  # a file that is not a database: one sentence, no traceback
            agentrt.open_store(args.db).close()
        except agentrt.StoreError as exc:
            parser.exit(2, f"{parser.prog}: --db {args.db}: {exc}\n")
    if args.db is None:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp) / "pydantic_ai.db")
    else:
        main(args.db)
