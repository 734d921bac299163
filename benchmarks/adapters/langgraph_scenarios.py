"""Issue 11's three scenarios on LangGraph, alone and with the agentrt gate, measured.

Each scenario runs twice: once with LangGraph alone (a plain `ToolNode`, human
in the loop with LangGraph's own `interrupt()` inside the tool, as its
documentation shows) and once with `agentrt.adapters.langgraph.gated_tool_node`.
The model is LangChain's `GenericFakeChatModel` on a script; the tools are real
LangChain tools that append one line to a file each time they really run, and
the counts below are those lines.

1. approval: the model asks for a local note and a push in one message; the
   push needs a person, who approves it.
2. crash: the model asks for a local note; the process is SIGKILLed inside the
   tool, after its effect; a new process goes on through LangGraph's own path
   (`graph.invoke(None, config)` on the SQLite checkpointer).
3. tamper: a person is shown the push of `feature/login`; before the approval
   reaches execution the pending call in the graph's state is changed to push
   `main` (`graph.update_state`); the person approves what they were shown.

    python benchmarks/adapters/langgraph_scenarios.py

Prints a markdown table. No network.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _children
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt

import agentrt
from agentrt.adapters.langgraph import Classification, approve, gated_tool_node

CONFIG: Any = {"configurable": {"thread_id": "scenario"}}
CLASSES = {
    "write_note": Classification("local_mutation", timeout=150),
    "push_branch": Classification("remote_mutation", timeout=150),
}


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id}


SCRIPTS = {
    "approval": [
        AIMessage(
            "",
            tool_calls=[
                call("write_note", "c1", text="before push"),
                call("push_branch", "c2", branch="feature/login"),
            ],
        ),
        AIMessage("done"),
    ],
    "crash": [
        AIMessage("", tool_calls=[call("write_note", "c1", text="hello")]),
        AIMessage("done"),
    ],
    "tamper": [
        AIMessage("", tool_calls=[call("push_branch", "c1", branch="feature/login")]),
        AIMessage("done"),
    ],
}


def make_tools(workdir: Path, gated: bool) -> list[BaseTool]:
    effects = workdir / "effects.log"

    def effect(line: str) -> None:
        with effects.open("a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        if os.environ.get("HANG_IN_TOOL") == "1":
            print("IN_TOOL", flush=True)
            time.sleep(120)

    @tool
    def write_note(text: str) -> str:
        """Append a note to the local notes file."""
        effect(f"note {text}")
        return f"noted {text}"

    @tool
    def push_branch(branch: str) -> str:
        """Push a branch to the remote."""
        if not gated:  # LangGraph alone: its own human in the loop, in the tool
            answer = interrupt({"action": "push_branch", "args": {"branch": branch}})
            if answer != "approve":
                return "the person said no"
        effect(f"push {branch}")
        return f"pushed {branch}"

    return [write_note, push_branch]


def build(workdir: Path, scenario: str, gated: bool) -> tuple[Any, sqlite3.Connection]:
    script = SCRIPTS[scenario]
    tools = make_tools(workdir, gated)
    node: Any
    if gated:
        store = agentrt.open_store(workdir / "runs.db")
        node = gated_tool_node(
            tools, store=store, policy=agentrt.default_policy(), classifications=CLASSES
        )
    else:
        node = ToolNode(tools)

    def agent(state: MessagesState) -> dict[str, Any]:
        answered = sum(isinstance(m, ToolMessage) for m in state["messages"])
        turn = 0 if answered == 0 else 1
        model = GenericFakeChatModel(messages=iter([script[turn]]))
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    conn = sqlite3.connect(workdir / "checkpoints.db", check_same_thread=False)
    return builder.compile(checkpointer=SqliteSaver(conn)), conn


def effects(workdir: Path) -> list[str]:
    path = workdir / "effects.log"
    return path.read_text().splitlines() if path.exists() else []


def answer_for(pending: Any, gated: bool) -> Any:
    return approve(pending, by="operator") if gated else "approve"


# -- the scenarios ------------------------------------------------------------------


def approval(workdir: Path, gated: bool) -> dict[str, Any]:
    graph, conn = build(workdir, "approval", gated)
    out = graph.invoke({"messages": [HumanMessage("publish the login branch")]}, CONFIG)
    (pending,) = out["__interrupt__"]
    graph.invoke(Command(resume=answer_for(pending, gated)), CONFIG)
    conn.close()
    done = effects(workdir)
    notes, pushes = done.count("note before push"), done.count("push feature/login")
    return {
        "executions": f"note {notes}x, push {pushes}x",
        "unasked": (notes - 1) + max(pushes - 1, 0),
        "outcome": "push approved and run; the note ran again on resume"
        if notes > 1
        else "push approved and run; the note's recorded result given back on resume",
    }


def crash(workdir: Path, gated: bool) -> dict[str, Any]:
    me = [sys.executable, __file__, "--child", str(workdir), "gated" if gated else "alone"]
    proc = _children.popen([*me, "start"], capture=True, env={**os.environ, "HANG_IN_TOOL": "1"})
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "IN_TOOL":
        raise SystemExit(f"the child never reached the tool: {proc.communicate()[1]}")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    before = len(effects(workdir))
    again = child(me, "continue")
    unasked = len(effects(workdir)) - before
    if again["interrupts"]:
        kind = again["interrupts"][0]["kind"]
        child(me, "approve")
        outcome = (
            f"paused on {kind}; ran once more only when a person approved"
            f" ({len(effects(workdir))} executions in all)"
        )
    else:
        outcome = "LangGraph ran the tool node again: the note was written twice"
    return {
        "executions": f"note {len(effects(workdir))}x",
        "unasked": unasked,
        "outcome": outcome,
    }


def tamper(workdir: Path, gated: bool) -> dict[str, Any]:
    graph, conn = build(workdir, "tamper", gated)
    out = graph.invoke({"messages": [HumanMessage("publish the login branch")]}, CONFIG)
    (pending,) = out["__interrupt__"]
    ai = graph.get_state(CONFIG).values["messages"][-1]
    changed = ai.model_copy(update={"tool_calls": [call("push_branch", "c1", branch="main")]})
    graph.update_state(CONFIG, {"messages": [changed]}, as_node="agent")
    try:
        graph.invoke(Command(resume=answer_for(pending, gated)), CONFIG)
        outcome = "the approval ran the changed call"
    except agentrt.ApprovalChangedError as exc:
        outcome = f"refused ({type(exc).__name__}): not the call approved; nothing ran"
    conn.close()
    done = effects(workdir)
    return {
        "executions": f"push main {done.count('push main')}x, "
        f"push feature/login {done.count('push feature/login')}x",
        "unasked": done.count("push main"),
        "outcome": outcome,
    }


SCENARIOS = {
    "approval (remote change)": approval,
    "crash mid-call (SIGKILL)": crash,
    "tampered approval": tamper,
}


# -- the child of the crash scenario -------------------------------------------------


def child(me: list[str], mode: str) -> dict[str, Any]:
    done = _children.run([*me, mode], timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"child {mode} failed: {done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run_child(workdir: Path, variant: str, mode: str) -> None:
    gated = variant == "gated"
    graph, conn = build(workdir, "crash", gated)
    if mode == "start":
        out = graph.invoke({"messages": [HumanMessage("write the note")]}, CONFIG)
    elif mode == "continue":
        out = graph.invoke(None, CONFIG)
    else:
        (pending,) = graph.get_state(CONFIG).interrupts
        out = graph.invoke(Command(resume=answer_for(pending, gated)), CONFIG)
    conn.close()
    interrupts = [i.value for i in out.get("__interrupt__", [])]
    print(json.dumps({"interrupts": interrupts}, default=str))


def main() -> None:
    rows = [
        "| scenario | setup | real executions "
        "| executions nobody approved or asked for again | what happened |",
        "|---|---|---|---|---|",
    ]
    for name, scenario in SCENARIOS.items():
        for gated in (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                got = scenario(Path(tmp), gated)
            setup = "LangGraph + agentrt gate" if gated else "LangGraph alone"
            rows.append(
                f"| {name} | {setup} | {got['executions']} | {got['unasked']} | {got['outcome']} |"
            )
    print("\n".join(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=3, metavar=("WORKDIR", "VARIANT", "MODE"))
    args = parser.parse_args()
    if args.child:
        run_child(Path(args.child[0]), args.child[1], args.child[2])
    else:
        main()
