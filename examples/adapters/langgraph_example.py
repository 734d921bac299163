"""Your LangGraph graph, with every tool call through the agentrt gate.

A ReAct graph (LangGraph's StateGraph, a `ToolNode`, `tools_condition`, the
SQLite checkpointer) whose model is LangChain's `GenericFakeChatModel` on a
script, so it runs offline. The one change from a plain graph is the tool
node: `gated_tool_node(...)` instead of `ToolNode(...)`, and the end of the
graph routed through `turn_end_node(...)` (`{END: "agentrt_end"}`), so the
model's final answer completes the turn's agentrt run.

1. The model lists the branches (read only): allowed, run.
2. It deletes `main` (destructive): denied; the model hears why.
3. It writes a local note and pushes `feature/login` in one message: the note
   runs; the push needs a person, and the graph pauses with LangGraph's
   `interrupt()`, whose value shows the request and its hash.
4. A *second process* approves exactly that request (`agentrt approve RUN --db
   DB --yes`); the graph resumes with `Command(resume=decided(interrupt))`.
   LangGraph runs the tool node again from its top: the note is not written a
   second time (its recorded result is given back), and the push runs once.
5. The model answers; the end node completes the turn's run with that answer.

    python examples/adapters/langgraph_example.py [--dir PATH]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import Command

import agentrt
from agentrt.adapters.langgraph import Classification, decided, gated_tool_node, turn_end_node


def make_tools(workdir: Path) -> list[BaseTool]:
    """Four LangChain tools over a local stand-in for a git remote (a JSON file)."""
    remote = workdir / "remote.json"
    notes = workdir / "notes.txt"

    def load() -> dict[str, Any]:
        if remote.exists():
            return dict(json.loads(remote.read_text()))
        return {"branches": ["main", "feature/login"], "pushed": []}

    @tool
    def list_branches() -> str:
        """List the branches and what the remote has received."""
        return json.dumps(load())

    @tool
    def delete_branch(branch: str) -> str:
        """Delete a branch."""
        state = load()
        state["branches"].remove(branch)
        remote.write_text(json.dumps(state))
        return f"deleted {branch}"

    @tool
    def write_note(text: str) -> str:
        """Append a line to the local notes file."""
        with notes.open("a") as f:
            f.write(text + "\n")
        return f"noted: {text}"

    @tool
    def push_branch(branch: str) -> str:
        """Push a branch to the remote."""
        state = load()
        state["pushed"].append(branch)
        remote.write_text(json.dumps(state))
        return f"pushed {branch}"

    return [list_branches, delete_branch, write_note, push_branch]


CLASSIFICATIONS = {
    "list_branches": Classification("read_only", timeout=5),
    "delete_branch": Classification("destructive", timeout=5),
    "write_note": Classification("local_mutation", timeout=5),
    "push_branch": Classification("remote_mutation", timeout=5),
}

SCRIPT = [
    AIMessage("", tool_calls=[{"name": "list_branches", "args": {}, "id": "call-1"}]),
    AIMessage(
        "", tool_calls=[{"name": "delete_branch", "args": {"branch": "main"}, "id": "call-2"}]
    ),
    AIMessage(
        "",
        tool_calls=[
            {"name": "write_note", "args": {"text": "pushing feature/login"}, "id": "call-3"},
            {"name": "push_branch", "args": {"branch": "feature/login"}, "id": "call-4"},
        ],
    ),
    AIMessage("feature/login is on the remote."),
]


def build_graph(workdir: Path) -> tuple[Any, agentrt.Store, sqlite3.Connection]:
    store = agentrt.open_store(workdir / "runs.db")
    tools_node = gated_tool_node(
        make_tools(workdir),
        store=store,
        policy=agentrt.default_policy(),
        classifications=CLASSIFICATIONS,
    )

    def agent(state: MessagesState) -> dict[str, Any]:
        turn = sum(isinstance(m, AIMessage) for m in state["messages"])
        model = GenericFakeChatModel(messages=iter([SCRIPT[turn]]))
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools_node)
    builder.add_node("agentrt_end", turn_end_node(tools_node))  # completes the turn's run
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: "agentrt_end"})
    builder.add_edge("tools", "agent")
    conn = sqlite3.connect(workdir / "checkpoints.db", check_same_thread=False)
    return builder.compile(checkpointer=SqliteSaver(conn)), store, conn


def show(out: dict[str, Any], already: int) -> int:
    messages = out["messages"]
    for m in messages[already:]:
        if isinstance(m, ToolMessage):
            print(f"  tool {m.name} [{m.status}]: {m.content}")
        elif isinstance(m, AIMessage) and not m.tool_calls:
            print(f"  model: {m.content}")
    return len(messages)


def main(workdir: Path) -> None:
    graph, store, conn = build_graph(workdir)
    config: Any = {"configurable": {"thread_id": "publish-login"}}
    out = graph.invoke({"messages": [HumanMessage("publish the login branch")]}, config)
    seen = show(out, 0)
    (pending,) = out["__interrupt__"]
    value = pending.value
    print(f"interrupt: {value['tool']} {json.dumps(value['request']['args'])} needs a person")
    print(f"  approval {value['approval_id'][:8]}, hash {value['hash'][:16]}...")
    print(f"  notes so far: {(workdir / 'notes.txt').read_text().splitlines()}")

    run_id = value["run_id"]  # the run of this turn of the thread
    cmd = [sys.executable, "-m", "agentrt", "approve", run_id, "--db", str(workdir / "runs.db")]
    cmd += ["--yes", "--by", "example-operator", "--note", "push is fine"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SystemExit(f"approve failed: {done.stderr}")
    print("[process 2] agentrt approve ... --yes: approved")

    out = graph.invoke(Command(resume=decided(pending)), config)
    show(out, seen)
    notes = (workdir / "notes.txt").read_text().splitlines()
    remote = json.loads((workdir / "remote.json").read_text())
    print(f"notes written: {len(notes)} (once, though LangGraph ran the tool node twice)")
    print(f"remote received: {remote['pushed']}")
    for step in store.list_steps(run_id):
        assert step.decision is not None
        what = step.decision.tool or f"{step.decision.kind} {json.dumps(step.decision.result)}"
        kind = f" ({step.observation.kind})" if step.observation is not None else ""
        print(f"  step {step.index}: {what} -> {step.status}{kind}")
    run = store.get_run(run_id)
    print(f"run: {run.status} ({run.reason})")
    report = store.verify_events()
    print(f"event chain: {report.checked} events, {'intact' if report.intact else 'BROKEN'}")
    conn.close()
    store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    if args.dir is None:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp))
    else:
        if args.dir.exists() and not args.dir.is_dir():
            parser.exit(2, f"{parser.prog}: --dir {args.dir}: it exists and is not a directory\n")
        args.dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # owner-only, as the store wants
        if (args.dir / "runs.db").exists() or (args.dir / "checkpoints.db").exists():
            # Its thread's checkpoints would go on from where the first run ended.
            parser.exit(
                2,
                f"{parser.prog}: --dir {args.dir} holds a run of this example already;"
                " give another --dir\n",
            )
        main(args.dir)
