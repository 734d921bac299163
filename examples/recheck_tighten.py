"""Tighten a refund policy, and see which past runs it would have changed.

Last week's policy let an agent refund up to $100 on its own and sent larger
refunds to a person. Three runs happened under it: a $20 refund, an $80 one,
and a $250 one a person approved. The team wants to tighten the policy: refunds
over $50 should now wait for a person too. Before deploying it, they ask the
record: would the new policy have decided those runs' calls the same?

`agentrt.recheck` asks the new policy about every recorded policy evaluation,
from the record alone (the view each evaluation saw is kept with it), and says
`same` or `different` for each, comparing the outcome, the approval kind and
the approval hash, never the reason's wording. The same check from the command
line is `agentrt recheck --all --since T --policy module:attr`, run here too.

    python examples/recheck_tighten.py [--db PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import agentrt
from agentrt import Decision, PolicyDecision, RunView, SideEffect, ToolCall, ToolRequest, ToolResult
from agentrt.cli import main as agentrt_command
from agentrt.lowlevel import refuse_other_url
from agentrt.scripted import ScriptedAgent

START = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)


class Refund:
    spec = agentrt.ToolSpec(
        name="refund",
        description="refund an order, in cents",
        input_schema={
            "type": "object",
            "properties": {"order": {"type": "integer"}, "cents": {"type": "integer"}},
            "required": ["order", "cents"],
            "additionalProperties": False,
        },
        side_effect=SideEffect.REMOTE_MUTATION,
        timeout=timedelta(seconds=10),
    )

    def call(self, call: ToolCall) -> ToolResult:
        return ToolResult({"refunded": call.args["cents"]}, "refunded")


class RefundPolicy:
    """Refunds up to `limit_cents` are allowed; larger ones wait for a person."""

    def __init__(self, limit_cents: int, policy_id: str) -> None:
        self.limit_cents = limit_cents
        self.policy_id = policy_id

    def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        cents = request.args["cents"]
        if cents <= self.limit_cents:
            return PolicyDecision.allow()
        shown = {"order": request.args["order"], "refund": f"${cents / 100:.2f}"}
        return agentrt.need_approval(
            "large_refund",
            f"refunds over ${self.limit_cents / 100:.0f} need a person",
            capability=dict(request.args),
            presentation=shown,
        )


def last_weeks_policy() -> RefundPolicy:
    return RefundPolicy(10_000, "refunds/1 (up to $100)")


def tightened() -> RefundPolicy:
    return RefundPolicy(5_000, "refunds/2 (up to $50)")


class Clock:
    def __init__(self, start: datetime) -> None:
        self.t = start

    def __call__(self) -> datetime:
        self.t += timedelta(milliseconds=5)
        return self.t


def past_run(store: agentrt.Store, order: int, cents: int, day: int) -> agentrt.Run:
    """One run of last week, under last week's policy; a person approves what it asks."""
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(
            [Decision.tool_call("refund", {"order": order, "cents": cents}), Decision.complete({})]
        ),
        policy=last_weeks_policy(),
        tools=[Refund()],
        now=Clock(START + timedelta(days=day)),
    )
    run = driver.start_sync(f"refund order {order}")
    if run.status == agentrt.RunStatus.WAITING_FOR_APPROVAL:
        (waiting,) = store.pending_approvals(run.id)
        driver.approve(run.id, waiting.id, by="support-lead")
        run = driver.resume_sync(run.id)
    return run


def sqlite_path(text: str) -> Path:
    """`--db` as a SQLite file's path; a URL of another scheme or libpq's keyword string is
    refused first, its password hidden (as a `Path`, a URL's `//` folds and no open sees it)."""
    try:
        refuse_other_url(text)
    except agentrt.StoreError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return Path(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=sqlite_path, help="database file (default: a new temp dir)")
    args = parser.parse_args(argv)
    if args.db is not None and str(args.db).startswith(("postgresql:", "postgres:")):
        # Not printed back: a URL may hold a password.
        parser.exit(2, f"{parser.prog}: --db takes a SQLite file's path here, not a URL\n")
    if args.db is not None and not Path(args.db).parent.is_dir():  # one sentence, no traceback
        parser.exit(
            2,
            f"{parser.prog}: --db {args.db}: {Path(args.db).parent} is not an existing directory\n",
        )
    db = args.db or Path(tempfile.mkdtemp(prefix="agentrt-example-")) / "runs.db"
    try:
        store = agentrt.open_store(db)
    except agentrt.StoreError as exc:  # a file that is not a database: one sentence
        parser.exit(2, f"{parser.prog}: --db {args.db}: {exc}\n")
    runs = [
        past_run(store, 17, 2_000, 0),
        past_run(store, 23, 8_000, 1),
        past_run(store, 71, 25_000, 2),
    ]
    print("last week, under refunds/1 (up to $100):")
    for run in runs:
        print(f"  {run.goal}: {run.status}")

    print("\nwould refunds/2 (up to $50) have decided them the same?")
    changed = []
    for run in runs:
        report = agentrt.recheck(store, run.id, tightened())
        for e in report.evaluations:
            was = e.recorded.outcome if e.recorded else "?"
            now = e.now.outcome if e.now else "?"
            print(f"  {run.goal}: {e.verdict} (was {was}, now {now})")
        if report.differences:
            changed.append(run.goal)
    print(f"runs it would have changed: {', '.join(changed) or 'none'}")
    store.close()

    print("\nthe same from the command line (differences first, exit 1 when any differ):")
    since = START.strftime("%Y-%m-%d")
    command = ["--db", str(db), "recheck", "--all", "--since", since]
    # A reader gone away (`| head -1`) is met here, not by the command, whose exit 1 for
    # it could not be told from its exit 1 for a difference.
    sys.stdout.flush()
    code = agentrt_command([*command, "--policy", "__main__:tightened"])
    print(f"exit status {code}")
    return 0 if code == 1 and changed == ["refund order 23"] else 1


if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()  # here, not at exit: a reader gone away is met below
    except BrokenPipeError:  # `| head -1`: end quietly, with status 1 as Python's docs do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)
