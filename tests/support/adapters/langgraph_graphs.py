"""LangGraph graphs and helpers the LangGraph adapter's tests share.

A ReAct graph (`build`, `build_ending` with its end routed through
`turn_end_node`, `build_prebuilt` with the prebuilt agent dispatching each call
with `Send`) driven by LangChain's fake chat model; LangChain tools that append
a line to a file when they really run (`make_tools`, read back with `lines`);
the child process of the crash tests (`child`, `kill_inside_the_tool`); a graph
that reads pages one call a turn (`read_pages`).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

import agentrt
from agentrt.adapters.langgraph import (
    Classification,
    gated_tool_node,
    run_id_for,
    turn_end_node,
)
from support import forkserver

ROOT = Path(__file__).resolve().parents[3]
CHILD = ROOT / "tests" / "support" / "adapters" / "langgraph_child.py"
CONFIG: Any = {"configurable": {"thread_id": "thread-1"}}
TURN = "turn-1"
"""The id of the message that opens the first turn (`ask`): its run is `RUN`."""
RUN = run_id_for("thread-1", TURN)

CLASSES = {
    "lookup": Classification("read_only", timeout=5),
    "write_note": Classification("local_mutation", timeout=5),
    "push_branch": Classification("remote_mutation", timeout=5),
    "delete_branch": Classification("destructive", timeout=5),
    "flaky": Classification("local_mutation", timeout=5),
}


def make_tools(effects: Path) -> list[BaseTool]:
    def effect(line: str) -> None:
        with effects.open("a") as f:
            f.write(line + "\n")

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        effect(f"lookup {q}")
        return f"found {q}"

    @tool
    def write_note(text: str) -> str:
        """Write a local note."""
        effect(f"note {text}")
        return f"noted {text}"

    @tool
    def push_branch(branch: str) -> str:
        """Push a branch to the remote."""
        effect(f"push {branch}")
        return f"pushed {branch}"

    @tool
    def delete_branch(branch: str) -> str:
        """Delete a branch."""
        effect(f"delete {branch}")
        return f"deleted {branch}"

    @tool
    def flaky(q: str) -> str:
        """Fail, after an effect."""
        effect(f"flaky {q}")
        raise ConnectionError(f"remote closed the connection for {q}")

    return [lookup, write_note, push_branch, delete_branch, flaky]


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id}


def build(
    tmp_path: Path,
    script: Sequence[AIMessage],
    node: Callable[[list[BaseTool]], Any] | None = None,
    saver: Any = "memory",
    database: str | None = None,
    **options: Any,
) -> tuple[Any, agentrt.Store, Path]:
    """A ReAct graph: the fake model answers from `script`, by how many tool answers it has.

    Its store is on `database` (the `database` fixture's) when given, else a file in
    `tmp_path`."""
    effects = tmp_path / "effects.log"
    effects.touch()
    store = agentrt.open_store(database or tmp_path / "runs.db")
    tools = make_tools(effects)
    if node is None:
        tools_node = gated_tool_node(
            tools,
            store=store,
            policy=options.pop("policy", agentrt.default_policy()),
            classifications=CLASSES,
            **options,
        )
    else:
        tools_node = node(tools)

    def agent(state: MessagesState) -> dict[str, Any]:
        turn = sum(isinstance(m, AIMessage) for m in state["messages"])
        model = GenericFakeChatModel(messages=iter([script[turn]]))
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools_node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    checkpointer = InMemorySaver() if saver == "memory" else saver
    return builder.compile(checkpointer=checkpointer), store, effects


def ask(graph: Any, what: Any = None) -> dict[str, Any]:
    inp = {"messages": [HumanMessage("go", id=TURN)]} if what is None else what
    return dict(asyncio.run(graph.ainvoke(inp, CONFIG)))


def tool_messages(out: dict[str, Any]) -> list[tuple[str, str, Any]]:
    return [
        (m.tool_call_id, m.status, m.content) for m in out["messages"] if isinstance(m, ToolMessage)
    ]


def lines(effects: Path) -> list[str]:
    return effects.read_text().splitlines()


def push_script() -> list[AIMessage]:
    return [
        AIMessage("", tool_calls=[call("push_branch", "c1", branch="feature/login")]),
        AIMessage("pushed"),
    ]


# The children are real processes forked from one that has imported LangGraph,
# LangChain and the adapter once (tests/support/forkserver.py).
PRELOAD = forkserver.LANGGRAPH


def child(workdir: Path, mode: str, tool_name: str) -> dict[str, Any]:
    done = forkserver.run(
        [sys.executable, str(CHILD), str(workdir), mode, tool_name], preload=PRELOAD, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def kill_inside_the_tool(workdir: Path, mode: str, tool_name: str) -> None:
    """Run the child until its tool has written its effect, then SIGKILL it."""
    read, write = os.pipe()
    try:
        proc = forkserver.server(*PRELOAD).spawn(
            [sys.executable, str(CHILD), str(workdir), mode, tool_name],
            env={**os.environ, "HANG_IN_TOOL": "1"},
            stdout=write,
        )
    finally:
        os.close(write)
    with open(read) as out:
        assert out.readline().strip() == "IN_TOOL"
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL


def build_ending(
    tmp_path: Path, script: Sequence[AIMessage], database: str | None = None, **options: Any
) -> tuple[Any, agentrt.Store, Path, Any]:
    """The ReAct graph of `build`, its end routed through `agentrt_end` (its store on
    `database` when given, as `build`'s)."""
    effects = tmp_path / "effects.log"
    effects.touch()
    store = agentrt.open_store(database or tmp_path / "runs.db")
    tools_node = gated_tool_node(
        make_tools(effects),
        store=store,
        policy=agentrt.default_policy(),
        classifications=CLASSES,
        **options,
    )

    def agent(state: MessagesState) -> dict[str, Any]:
        turn = sum(isinstance(m, AIMessage) for m in state["messages"])
        model = GenericFakeChatModel(messages=iter([script[turn]]))
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools_node)
    builder.add_node("agentrt_end", turn_end_node(tools_node))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: "agentrt_end"})
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=InMemorySaver())
    return graph, store, effects, tools_node


class ScriptedModel(GenericFakeChatModel):
    """LangChain's fake chat model, answering by how many AI messages the state holds."""

    script: list[AIMessage]

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        turn = sum(isinstance(m, AIMessage) for m in messages)
        self.messages = iter([self.script[turn]])
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kw)


def build_prebuilt(
    tmp_path: Path, script: Sequence[AIMessage], database: str | None = None, **options: Any
) -> tuple[Any, agentrt.Store, Path]:
    """LangGraph's prebuilt `create_react_agent` over the gated node (version v2: each
    call of a message is a `Send` task of its own; its store on `database` when given)."""
    from langgraph.prebuilt import create_react_agent

    effects = tmp_path / "effects.log"
    effects.touch()
    store = agentrt.open_store(database or tmp_path / "runs.db")
    tools_node = gated_tool_node(
        make_tools(effects),
        store=store,
        policy=options.pop("policy", agentrt.default_policy()),
        classifications=CLASSES,
        **options,
    )
    model = ScriptedModel(messages=iter([]), script=list(script))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in LangGraph 1.x
        graph = create_react_agent(model, tools=tools_node, checkpointer=InMemorySaver())
    return graph, store, effects


def send(graph: Any, what: Any, path: str, config: Any = CONFIG) -> dict[str, Any]:
    """Invoke the graph on the async or the blocking path."""
    if path == "async":
        return dict(asyncio.run(graph.ainvoke(what, config)))
    return dict(graph.invoke(what, config))


def go(turn: str = TURN, text: str = "look it up") -> dict[str, Any]:
    return {"messages": [HumanMessage(text, id=turn)]}


def read_pages(
    store: agentrt.Store, calls: int, on_call: Callable[[], object], **node: Any
) -> None:
    """Run a graph whose scripted model asks for `calls` read-only `page` calls, one a turn,
    through a gated node on `store` (`node`: more of `gated_tool_node`'s arguments), then
    ends; `on_call()` runs inside each call's tool."""

    @tool
    def page(q: str) -> str:
        """Read a page."""
        on_call()
        return q

    script = iter(
        [AIMessage("", tool_calls=[call("page", f"c{n}", q=f"q{n}")]) for n in range(calls)]
        + [AIMessage("done")]
    )
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [next(script)]})
    builder.add_node(
        "tools",
        gated_tool_node(
            [page],
            store=store,
            policy=agentrt.default_policy(),
            classifications={"page": Classification("read_only", timeout=5)},
            **node,
        ),
    )
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    builder.compile().invoke(
        {"messages": [HumanMessage("read")]}, {"configurable": {"thread_id": "t"}}
    )
