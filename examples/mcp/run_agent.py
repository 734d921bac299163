"""A Driver run whose tools come from an MCP server, behind the pin, the rules and the policy.

    python examples/mcp/run_agent.py [--db PATH] [--notes DIR]

1. Connects to `notes_server.py` (stdio; NOTES_DIR passed explicitly, nothing
   else of this environment but PATH, HOME and TMPDIR).
2. Loads its tools against `notes.manifest.json` (what the operator reviewed)
   and `notes.rules.json` (how the operator classified them), and prints the
   report: `delete_note` has no rule, so the agent never sees it.
3. Runs a scripted agent: `notes_list_notes` (read only) runs; then
   `notes_write_note`, classified remote_mutation, waits for a person.
4. Approves it, as an operator would with `agentrt approve`, and resumes: the
   write happens once, on the shelf the rules fixed (the model cannot choose it).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import agentrt
from agentrt import Decision, mcp
from agentrt.scripted import ScriptedAgent

HERE = Path(__file__).parent


async def main(db: Path, notes: Path) -> int:
    server = mcp.Server(
        "notes",
        command=[sys.executable, str(HERE / "notes_server.py")],
        env={"NOTES_DIR": str(notes)},
    )
    manifest = mcp.read_manifest(HERE / "notes.manifest.json")
    rules = mcp.read_rules(HERE / "notes.rules.json")
    async with mcp.connect(server) as connection:
        tools, report = await connection.load(manifest, rules)
        for line in report.lines():
            print("load:", line)
        agent = ScriptedAgent(
            [
                Decision.tool_call("notes_list_notes", {}),
                Decision.tool_call(
                    "notes_write_note", {"name": "hello", "text": "hi from the agent"}
                ),
                Decision.complete("wrote the note"),
            ]
        )
        store = agentrt.open_store(str(db))
        try:
            driver = agentrt.Driver(
                store=store, agent=agent, policy=agentrt.default_policy(), tools=tools
            )
            run = await driver.start("leave a note")
            print("run:", run.status)
            for approval in store.pending_approvals(run.id):
                print(
                    "approval:",
                    approval.kind,
                    approval.request["spec"]["name"],
                    approval.request["args"],
                )
                driver.approve(run.id, approval.id, by="example-operator")
            run = await driver.resume(run.id)
            print("run:", run.status)
        finally:
            store.close()
    written = notes / "agent" / "hello"
    print("note:", written.relative_to(notes), "=", written.read_text())
    return 0 if run.status == "COMPLETED" else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path)
    parser.add_argument("--notes", type=Path)
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
    work = Path(tempfile.mkdtemp(prefix="agentrt-mcp-"))
    sys.exit(asyncio.run(main(args.db or work / "runs.db", args.notes or work / "notes")))
