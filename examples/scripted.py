"""A scripted run over three tools, decided across two processes.

The agent is scripted (no model), so the run is the same every time:

0. `list_branches` (read only): allowed, runs.
1. `push_branch` with a number for a branch name: a malformed request; the
   runtime records it and refuses it against the tool's schema.
2. `delete_branch` of `main` (destructive): the policy denies it.
3. `push_branch` of `feature/login` (a remote change): the policy requires a
   person's approval; the run pauses, durably, and this process exits the loop.
4. A *second process* (this script again, with `--approve-and-resume`) approves
   the exact request it was shown (bound by hash) and resumes the run: the push
   executes once and the agent completes.

Then the first process prints the audit trail and verifies the event chain.

    python examples/scripted.py [--db PATH]
    python examples/scripted.py --db 'postgresql://USER@HOST/DB?schema=NAME'   (docs/postgres.md)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import agentrt
from agentrt import Decision, SideEffect
from agentrt.lowlevel import refuse_other_url
from agentrt.scripted import ScriptedAgent


def make_tools(workdir: Path) -> list[agentrt.Tool]:
    """Three tools over a local stand-in for a git remote (a JSON file)."""
    remote = workdir / "remote.json"

    def load() -> dict[str, Any]:
        if remote.exists():
            return dict(json.loads(remote.read_text()))
        return {"branches": ["main", "feature/login"], "pushed": []}

    @agentrt.tool(side_effect=SideEffect.READ_ONLY, timeout=timedelta(seconds=5))
    def list_branches() -> dict[str, Any]:
        """List the local branches and what the remote has received."""
        return load()

    @agentrt.tool(side_effect=SideEffect.REMOTE_MUTATION, timeout=timedelta(seconds=5))
    def push_branch(branch: str) -> dict[str, Any]:
        """Push a branch to the remote."""
        state = load()
        state["pushed"].append(branch)
        remote.write_text(json.dumps(state))
        return {"pushed": branch}

    @agentrt.tool(side_effect=SideEffect.DESTRUCTIVE, timeout=timedelta(seconds=5))
    def delete_branch(branch: str) -> dict[str, Any]:
        """Delete a branch, locally and on the remote."""
        raise AssertionError("the default policy denies destructive tools: never called")

    return [list_branches, push_branch, delete_branch]


SCRIPT = [
    Decision.tool_call("list_branches", {}, reason="see what there is"),
    Decision.tool_call("push_branch", {"branch": 42}, reason="a malformed request"),
    Decision.tool_call("delete_branch", {"branch": "main"}, reason="a destructive request"),
    Decision.tool_call("push_branch", {"branch": "feature/login"}, reason="ship it"),
    Decision.complete({"pushed": "feature/login"}),
]


def make_driver(store: agentrt.Store, workdir: Path, name: str) -> agentrt.Driver:
    return agentrt.Driver(
        store=store,
        agent=ScriptedAgent(SCRIPT),
        policy=agentrt.default_policy(),
        tools=make_tools(workdir),
        lease_owner=name,
    )


def is_url(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


def approve_and_resume(db: str, workdir: Path, run_id: str) -> int:
    """The second process: an operator approves what it was shown, then the run resumes."""
    store = agentrt.open_existing(db)
    (approval,) = store.pending_approvals(run_id)
    print(f"[process 2] approval {approval.id[:12]}… of kind {approval.kind}")
    print(f"[process 2]   request: {json.dumps(approval.presentation, sort_keys=True)}")
    print(f"[process 2]   hash:    {approval.hash}")
    agentrt.approve(store, run_id, approval.id, by="example-operator", shown_hash=approval.hash)
    run = make_driver(store, workdir, "process-2").resume_sync(run_id)
    print(f"[process 2] resumed: {run.status} {run.reason}")
    store.close()
    return 0


def print_audit_trail(store: agentrt.Store, run_id: str) -> None:
    steps = {s.id: s.index for s in store.list_steps(run_id)}
    print("\naudit trail")
    for event in store.list_events(run_id=run_id, limit=1000):
        step = f"step {steps[event.step_id]}" if event.step_id in steps else ""
        payload = json.dumps(event.payload, sort_keys=True)
        if len(payload) > 90:
            payload = payload[:87] + "..."
        print(f"{event.seq:>4}  {event.type:<19} {step:<7} {payload}")
    report = store.verify_events()
    state = "intact" if report.intact else f"BROKEN at {report.first_break}"
    print(f"\nevent chain: {report.checked} events, {state}, head {report.head_hash[:16]}…")


def database_name(text: str) -> str:
    """`--db` as given; a URL of another scheme or libpq's keyword string is refused here,
    its password hidden (taken for a path, it would be printed back, or made a file)."""
    try:
        refuse_other_url(text)
    except agentrt.StoreError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db",
        type=database_name,
        help="database file (default: a new temp dir), or a postgresql:// URL",
    )
    parser.add_argument("--approve-and-resume", metavar="RUN_ID", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    url = args.db is not None and is_url(args.db)
    if args.db is not None and not url and not Path(args.db).parent.is_dir():  # one sentence
        parser.exit(
            2,
            f"{parser.prog}: --db {args.db}: {Path(args.db).parent} is not an existing directory\n",
        )
    if args.approve_and_resume:
        return approve_and_resume(os.environ["AGENTRT_DB"], args.workdir, args.approve_and_resume)

    # The tools' stand-in remote is a file beside a database file; beside nothing for a URL.
    if args.db is None:
        workdir = Path(tempfile.mkdtemp(prefix="agentrt-example-"))
        db = str(workdir / "runs.db")
    elif url:
        workdir, db = Path(tempfile.mkdtemp(prefix="agentrt-example-")), args.db
    else:
        workdir, db = Path(args.db).parent, args.db
    try:
        store = agentrt.open_store(db)
    except agentrt.StoreError as exc:  # a file that is not a database: one sentence
        # A URL may hold a password: not printed back (the store's sentence hides it).
        parser.exit(2, f"{parser.prog}: --db {'<your URL>' if url else args.db}: {exc}\n")
    run = make_driver(store, workdir, "process-1").start_sync("ship the login branch")
    print(f"[process 1] run {run.id[:12]}… stopped: {run.status}")
    for step in store.list_steps(run.id):
        obs = step.observation  # shown as `agentrt show` shows it: its kind and what it says
        outcome = agentrt.view.observation_summary(obs) if obs else step.status
        tool = step.decision.tool if step.decision else ""
        print(f"[process 1]   step {step.index} {tool:<14} {outcome}")
    if run.status != agentrt.RunStatus.WAITING_FOR_APPROVAL:
        print("expected the run to wait for an approval", file=sys.stderr)
        return 1
    # The database reaches the second process in its environment, not its command line
    # (which any user of the host may list, and a URL may hold a password).
    again = ["--workdir", str(workdir), "--approve-and-resume", run.id]
    sys.stdout.flush()  # piped, this process's lines would come out after the second's
    second = subprocess.run(
        [sys.executable, __file__, *again], env={**os.environ, "AGENTRT_DB": db}, check=False
    )
    if second.returncode != 0:
        return second.returncode
    run = store.get_run(run.id)
    print(f"[process 1] the run is now {run.status} ({run.reason}); result {run.result}")
    print_audit_trail(store, run.id)
    # A URL may hold a password: it is not printed back.
    shown = "'<your URL>'" if url else shlex.quote(db)
    print(f"\ndatabase: {'the PostgreSQL URL given' if url else db}")
    print(f"inspect it: agentrt --db {shown} show {run.id}")
    store.close()
    return 0 if run.status == agentrt.RunStatus.COMPLETED else 1


if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()  # here, not at exit: a reader gone away is met below
    except BrokenPipeError:  # `| head -1`: end quietly, with status 1 as Python's docs do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)
