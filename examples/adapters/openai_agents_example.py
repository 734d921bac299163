"""An OpenAI Agents SDK agent, its tools behind the Gate: `agentrt.adapters.openai_agents`.

The agent, its `@function_tool`s and its model stay the SDK's (the model here is
the SDK's own `agents.testing.ScriptedModel`, so this runs offline). One call,
`gate_agent(...)`, puts every tool call through agentrt; each framework run
names its agentrt run (`gated.new_run()`, later `gated.resume(run_id)`):

1. `list_branches` (read only): allowed, run once.
2. `delete_branch("main")` (destructive): denied by the policy; the model gets
   the denial as the tool's output and goes on.
3. `push_branch("feature/login")` (a remote change): the policy asks a person,
   which the SDK shows as an interruption (`result.interruptions`). The program
   saves the run state (`result.to_state().to_string()`) and the agentrt run id
   beside it, and stops.
4. A person approves the exact request in a *second process*
   (`agentrt approve RUN --db DB --yes`).
5. The program resumes through the SDK's own path (`RunState` from the saved
   JSON, via `run.load_state` on `gated.resume(saved_run_id)`, which carries
   the approval into it) and `Runner.run(run.agent, state)`: the push runs
   once, the run completes.

    python examples/adapters/openai_agents_example.py [--db PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

import agentrt
from agentrt.adapters.openai_agents import Classification, gate_agent

set_tracing_disabled(True)  # nothing leaves the machine


def make_agent(workdir: Path, model: ScriptedModel) -> Agent[Any]:
    """Your agent, as you wrote it: three tools over a stand-in for a git remote."""
    remote = workdir / "openai-agents-remote.json"

    def load() -> dict[str, Any]:
        if remote.exists():
            return dict(json.loads(remote.read_text()))
        return {"branches": ["main", "feature/login"], "pushed": []}

    @function_tool
    def list_branches() -> dict[str, Any]:
        """List the branches and what the remote has received."""
        return load()

    @function_tool
    def delete_branch(branch: str) -> str:
        """Delete a branch."""
        state = load()
        state["branches"].remove(branch)
        remote.write_text(json.dumps(state))
        return f"deleted {branch}"

    @function_tool
    def push_branch(branch: str) -> str:
        """Push a branch to the remote."""
        state = load()
        state["pushed"].append(branch)
        remote.write_text(json.dumps(state))
        return f"pushed {branch}"

    return Agent(
        name="publisher",
        instructions="Publish the branch you are asked to.",
        model=model,
        tools=[list_branches, delete_branch, push_branch],
    )


# What each tool does to the world: the adapter refuses a tool without one.
CLASSIFY = {
    "list_branches": Classification("read_only", timeout=5),
    "delete_branch": Classification("destructive", timeout=5),
    "push_branch": Classification("remote_mutation", timeout=30),
}


def approve_from_another_process(db: Path, run_id: str) -> None:
    cmd = [sys.executable, "-m", "agentrt", "approve", run_id, "--db", str(db)]
    cmd += ["--yes", "--by", "example-operator", "--note", "push is fine"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SystemExit(f"approve failed: {done.stderr}")
    print(f"[process 2] agentrt approve {run_id[:8]}... --yes: approved")


async def main(db: Path) -> None:
    workdir = db.parent
    store = agentrt.open_store(db)

    # Process 1: the framework run until it needs a person.
    model = ScriptedModel(
        [
            [function_call("list_branches", {}, call_id="call-1")],
            [function_call("delete_branch", {"branch": "main"}, call_id="call-2")],
            [function_call("push_branch", {"branch": "feature/login"}, call_id="call-3")],
        ]
    )
    gated = gate_agent(
        make_agent(workdir, model),
        store=store,
        policy=agentrt.default_policy(),
        classifications=CLASSIFY,
        goal="publish feature/login",
    ).new_run()
    result = await Runner.run(gated.agent, "Publish feature/login.")
    for item in result.new_items:
        if type(item).__name__ == "ToolCallOutputItem":
            print(f"tool output the model saw: {item.output}")
    for item in result.interruptions:
        print(f"interruption: {item.tool_name} {item.arguments} (call {item.call_id})")
    saved = {"agentrt_run_id": gated.run_id, "state": result.to_state().to_string()}
    (workdir / "openai-agents-run-state.json").write_text(json.dumps(saved))
    (pending,) = gated.pending()
    print(f"agentrt run {gated.run_id[:8]}... waits on {pending.kind} approval {pending.id[:8]}...")
    await gated.close()

    approve_from_another_process(db, gated.run_id)

    # The program again (a new process would do exactly this): the SDK's resume path.
    saved = json.loads((workdir / "openai-agents-run-state.json").read_text())
    model = ScriptedModel([[assistant_message("feature/login is published")]])
    gated = gate_agent(
        make_agent(workdir, model),
        store=store,
        policy=agentrt.default_policy(),
        classifications=CLASSIFY,
    ).resume(saved["agentrt_run_id"])
    state = await gated.load_state(saved["state"])
    result = await Runner.run(gated.agent, state)
    print(f"final output: {result.final_output}")
    await gated.close()

    remote = json.loads((workdir / "openai-agents-remote.json").read_text())
    print(f"remote: branches={remote['branches']} pushed={remote['pushed']}")
    run = gated.run
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
            asyncio.run(main(Path(tmp) / "openai_agents.db"))
    else:
        asyncio.run(main(args.db))
