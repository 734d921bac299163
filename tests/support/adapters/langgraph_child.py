"""A LangGraph graph with a gated tool node, run in a process of its own.

    python langgraph_child.py WORKDIR MODE TOOL

WORKDIR holds the agentrt store (runs.db, or the store named in WORKDIR/database: a
SQLite path or a PostgreSQL URL), LangGraph's SQLite checkpoints
(checkpoints.db) and the tool's effects (effects.log, one line per real
execution). TOOL is the tool the scripted model calls: `push_branch` (a remote
change: the default policy asks a person), `write_note` (a local change:
allowed) or `read_notes` (read only); `note_then_read` makes two calls in one
message, `write_note` (`call-1`) then `read_notes` (`call-2`); `push_then_note`
makes `push_branch` (`call-1`) then `write_note` (`call-2`) and runs LangGraph's
prebuilt `create_react_agent`, which sends each call as a task of its own
(`Send`). MODE:

- `start`: invoke the graph on thread "t" with a first message;
- `continue`: `graph.invoke(None, config)`, LangGraph's own way to go on from
  the last checkpoint (after a crash);
- `approve`/`decided`: resume the open interrupt with `Command(resume=...)`;
- `next`: a second turn on thread "t" (message id "next"), whose model reads
  the notes (`read_notes`, call id `call-2`) and answers; if its call is
  refused (`EarlierTurnWaitsError`), the last line is the refusal instead.

With `HANG_IN_TOOL=1` the tool, after writing its effect, prints `IN_TOOL` and
sleeps, so the parent can SIGKILL it mid-call. The last stdout line is JSON:
the interrupt values, the messages' contents and the run's status.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import create_react_agent, tools_condition
from langgraph.types import Command

import agentrt
from agentrt.adapters.langgraph import (
    Classification,
    EarlierTurnWaitsError,
    approve,
    decided,
    gated_tool_node,
    run_id_for,
)


def main(workdir: Path, mode: str, tool_name: str) -> None:
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
    def push_branch(branch: str) -> str:
        """Push a branch to the remote."""
        effect(f"push {branch}")
        return f"pushed {branch}"

    @tool
    def write_note(text: str) -> str:
        """Append a note to the local notes file."""
        effect(f"note {text}")
        return f"noted {text}"

    @tool
    def read_notes(text: str) -> str:
        """Read the notes that contain a text."""
        effect(f"read {text}")
        return f"read {text}"

    args = {"branch": "feature/login"} if tool_name == "push_branch" else {"text": "hello"}
    calls = [{"name": tool_name, "args": args, "id": "call-1"}]
    if tool_name == "note_then_read":
        calls = [
            {"name": "write_note", "args": args, "id": "call-1"},
            {"name": "read_notes", "args": args, "id": "call-2"},
        ]
    if tool_name == "push_then_note":
        calls = [
            {"name": "push_branch", "args": {"branch": "feature/login"}, "id": "call-1"},
            {"name": "write_note", "args": args, "id": "call-2"},
        ]
    script = [AIMessage(content="", tool_calls=calls), AIMessage(content="all done")]
    if mode == "next":
        read = {"name": "read_notes", "args": {"text": "hello"}, "id": "call-2"}
        script = [AIMessage(content="", tool_calls=[read]), AIMessage(content="next done")]

    def agent(state: MessagesState) -> dict[str, Any]:
        answered = 1 if isinstance(state["messages"][-1], ToolMessage) else 0
        model = GenericFakeChatModel(messages=iter([script[answered]]))
        return {"messages": [model.invoke(state["messages"])]}

    named = workdir / "database"
    store = agentrt.open_store(named.read_text() if named.exists() else workdir / "runs.db")
    node = gated_tool_node(
        [push_branch, write_note, read_notes],
        store=store,
        policy=agentrt.default_policy(),
        classifications={
            "push_branch": Classification("remote_mutation", timeout=150),
            "write_note": Classification("local_mutation", timeout=150),
            "read_notes": Classification("read_only", timeout=150),
        },
    )
    conn = sqlite3.connect(workdir / "checkpoints.db", check_same_thread=False)
    if tool_name == "push_then_note":

        class Scripted(GenericFakeChatModel):
            def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
                return self

            def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
                answered = 1 if isinstance(messages[-1], ToolMessage) else 0
                self.messages = iter([script[answered]])
                return super()._generate(messages, *args, **kwargs)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_react_agent is deprecated in LangGraph 1.x
            graph: Any = create_react_agent(
                Scripted(messages=iter([])), tools=node, checkpointer=SqliteSaver(conn)
            )
    else:
        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_node("tools", node)
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        graph = builder.compile(checkpointer=SqliteSaver(conn))
    config: Any = {"configurable": {"thread_id": "t"}}

    if mode == "start":
        out = graph.invoke(
            {"messages": [HumanMessage("publish the login branch", id="publish")]}, config
        )
    elif mode == "next":
        try:
            out = graph.invoke({"messages": [HumanMessage("read my notes", id="next")]}, config)
        except EarlierTurnWaitsError as exc:
            refused = {"type": type(exc).__name__, "run_id": exc.run_id}
            refused |= {"approval_id": exc.approval_id, "approval_hash": exc.approval_hash}
            print(json.dumps({"refused": refused, "message": str(exc)}))
            return
    elif mode == "continue":
        out = graph.invoke(None, config)
    else:
        (pending,) = graph.get_state(config).interrupts
        answer = approve(pending, by="child") if mode == "approve" else decided(pending)
        out = graph.invoke(Command(resume=answer), config)
    run = store.get_run(run_id_for("t", "publish"))
    print(
        json.dumps(
            {
                "interrupts": [i.value for i in out.get("__interrupt__", [])],
                "messages": [m.content for m in out["messages"]],
                "run": [run.id, run.status],
            }
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
