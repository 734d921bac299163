"""Your own agent loop, with the runtime's controls on every action: the Gate.

A plain async loop over a scripted "model" (a list of the tool calls a model
would propose, each answered by what the loop observed). The runtime records,
checks, judges and executes; the loop decides what to do with each verdict:

0. `list_branches` (read only): allowed; the loop calls `execute()`.
1. `delete_branch` of `main` (destructive): denied by the policy; the loop tells
   the model why and goes on.
2. `push_branch` of `feature/login` (a remote change): pending, the run waits for
   a person. A *second process* approves the exact request it is shown
   (`agentrt approve RUN --db DB --yes`); the loop then calls
   `gate.attach(run_id)`, whose verdict is `allowed`, and `execute()` pushes once.
3. The model completes.

    python examples/own_loop.py [--db PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import agentrt
from agentrt import Decision, GateSession, SideEffect, StepInput
from agentrt.lowlevel import refuse_other_url


def make_tools(workdir: Path) -> list[agentrt.Tool]:
    """Three tools over a local stand-in for a git remote (a JSON file)."""
    remote = workdir / "remote.json"

    def load() -> dict[str, Any]:
        if remote.exists():
            return dict(json.loads(remote.read_text()))
        return {"branches": ["main", "feature/login"], "pushed": []}

    @agentrt.tool(side_effect=SideEffect.READ_ONLY, timeout=timedelta(seconds=5))
    def list_branches() -> dict[str, Any]:
        """List the branches and what the remote has received."""
        return load()

    @agentrt.tool(side_effect=SideEffect.DESTRUCTIVE, timeout=timedelta(seconds=5))
    def delete_branch(branch: str) -> dict[str, Any]:
        """Delete a branch."""
        state = load()
        state["branches"].remove(branch)
        remote.write_text(json.dumps(state))
        return {"deleted": branch}

    @agentrt.tool(side_effect=SideEffect.REMOTE_MUTATION, timeout=timedelta(seconds=5))
    def push_branch(branch: str) -> dict[str, Any]:
        """Push a branch to the remote."""
        state = load()
        state["pushed"].append(branch)
        remote.write_text(json.dumps(state))
        return {"pushed": branch}

    return [list_branches, delete_branch, push_branch]


class ScriptedModel:
    """Stands in for your model: proposes the next decision, hears what happened."""

    def __init__(self) -> None:
        self.script = [
            Decision.tool_call("list_branches", {}),
            Decision.tool_call("delete_branch", {"branch": "main"}),
            Decision.tool_call("push_branch", {"branch": "feature/login"}),
            Decision.complete({"pushed": "feature/login"}),
        ]
        self.heard: list[str] = []

    def propose(self, shown: StepInput) -> Decision:
        return self.script[len(shown.steps) - 1]  # the open step is the last one shown

    def tell(self, text: str) -> None:
        self.heard.append(text)
        print(f"  model hears: {text}")


async def drive(session: GateSession, model: ScriptedModel) -> None:
    """The loop: the model proposes, the gate judges, the runtime executes."""
    while True:
        step = await session.step()
        if step is None:  # a limit (or an operator's cancel) ended the run
            return
        decision = model.propose(session.input())
        verdict = await step.propose(decision)
        print(f"step {step.index}: {decision.kind} {decision.tool or ''} -> {verdict.outcome}")
        if verdict.outcome == "allowed":
            observation = await step.execute()
            model.tell(f"{observation.kind}: {json.dumps(observation.content)}")
            if session.done:
                return
        elif verdict.outcome == "denied":
            assert verdict.observation is not None
            model.tell(f"{verdict.observation.kind}: {verdict.observation.summary}")
        else:  # pending or ended: the run is no longer ours to step
            return


def approve_from_another_process(db: Path, run_id: str) -> None:
    """What a person does: `agentrt approve`, in a process of its own."""
    cmd = [sys.executable, "-m", "agentrt", "approve", run_id, "--db", str(db)]
    cmd += ["--yes", "--by", "example-operator", "--note", "push is fine"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SystemExit(f"approve failed: {done.stderr}")
    print(f"[process 2] agentrt approve {run_id[:8]}... --yes: approved")


async def main(db: Path) -> None:
    store = agentrt.open_store(db)
    gate = agentrt.Gate(store=store, policy=agentrt.default_policy(), tools=make_tools(db.parent))
    model = ScriptedModel()
    async with await gate.begin(goal="publish the login branch") as session:
        await drive(session, model)
        run_id = session.run.id
        print(f"stopped: {session.run.status}")
    (pending,) = store.pending_approvals(run_id)
    print(f"waiting on {pending.kind} approval {pending.id[:8]} for {pending.capability}")

    approve_from_another_process(db, run_id)

    session, verdict = await gate.attach(run_id)
    async with session:
        assert verdict is not None
        print(f"attach: {verdict.outcome}")
        step = session.current()
        if verdict.outcome == "allowed" and step is not None:
            observation = await step.execute()
            model.tell(f"{observation.kind}: {json.dumps(observation.content)}")
            await drive(session, model)
        run = session.run
    print(f"finished: {run.status} {run.reason} result={json.dumps(run.result)}")
    report = store.verify_events()
    print(f"event chain: {report.checked} events, {'intact' if report.intact else 'BROKEN'}")
    store.close()


def sqlite_path(text: str) -> Path:
    """`--db` as a SQLite file's path; a URL of another scheme or libpq's keyword string is
    refused first, its password hidden (as a `Path`, a URL's `//` folds and no open sees it)."""
    try:
        refuse_other_url(text)
    except agentrt.StoreError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return Path(text)


def cli() -> int:
    """The example from the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=sqlite_path, default=None)
    args = parser.parse_args()
    if args.db is not None and str(args.db).startswith(("postgresql:", "postgres:")):
        # Not printed back: a URL may hold a password.
        parser.exit(2, f"{parser.prog}: --db takes a SQLite file's path here, not a URL\n")
    if args.db is not None and not Path(args.db).parent.is_dir():  # one sentence, no traceback
        parser.exit(
            2,
            f"{parser.prog}: --db {args.db}: {Path(args.db).parent} is not an existing directory\n",
        )
    if args.db is None:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(main(Path(tmp) / "own_loop.db"))
        return 0
    try:  # a file that is not a database: one sentence, no traceback
        agentrt.open_store(args.db).close()
    except agentrt.StoreError as exc:
        parser.exit(2, f"{parser.prog}: --db {args.db}: {exc}\n")
    asyncio.run(main(args.db))
    return 0


if __name__ == "__main__":
    try:
        code = cli()
        sys.stdout.flush()  # here, not at exit: a reader gone away is met below
    except BrokenPipeError:  # `| head -1`: end quietly, with status 1 as Python's docs do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)
