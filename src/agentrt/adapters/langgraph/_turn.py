"""Which agentrt run a LangGraph tool call belongs to: its thread, its turn, its sub-graph.

A turn of a thread is one agentrt run. Its id (`run_id_for`) is made of the
thread id, the turn (the id of the message that opened it, `turn_of`) and the
sub-graph the gated node runs in (`subgraph_of`, read from LangGraph's
`checkpoint_ns`): the gated nodes of two sub-graphs run in one turn (two
prebuilt agents one after the other, each ending its own turn with
`turn_end_node`) are two runs, and a graph's own nodes keep the id they always
had.

Invariant: once a call's turn has a run, the graph's state edited since
(`update_state`, a `RemoveMessage` of the turn's first message) never moves the
call to another run. The turn is read from the state only when the node
execution carries no answer of a person; one that does (`Command(resume=...)`
resuming an agentrt interrupt) names its run, and that run is the turn's when
it recorded a call of the call's AI message (`answered_runs`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage

from agentrt import ConfigError

from ._protocol import MARK

_NS_SEP, _NS_END = "|", ":"  # LangGraph's separators in a checkpoint_ns


def run_id_for(thread_id: str, turn: str = "", subgraph: str = "") -> str:
    """The agentrt run id of one turn of a LangGraph thread: 32 hex characters.

    `turn` is the id of the message that opened the turn (the input the graph
    was invoked with, usually a `HumanMessage`; LangGraph's `add_messages`
    gives every message an id). `subgraph` is the path of the sub-graph the
    gated node runs in (`"researcher"`, `"team|writer"`: LangGraph's
    `checkpoint_ns` without its task ids), "" for a node of the graph invoked.
    The run of the turn is named in every ToolMessage's artifact and every
    approval interrupt.
    """
    if subgraph:
        key = "agentrt.adapters.langgraph.subgraph\x00" + json.dumps([thread_id, turn, subgraph])
        return hashlib.sha256(key.encode()).hexdigest()[:32]
    key = f"agentrt.adapters.langgraph\x00{thread_id}"
    if turn:
        key += f"\x00{turn}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def turn_of(state: Any, call_id: str, messages_key: str = "messages") -> str:
    """The turn a tool call belongs to: the id of the message that opened it.

    Walks back from the AI message that made the call over the AI and tool
    messages of the turn to the message before them (the turn's input). That
    message's id, or `#<position>` when it has none; "" when the state holds
    no such message (then the thread is one turn).
    """
    messages = messages_of(state, messages_key)
    return opener(messages, _maker(messages, call_id))


def _maker(messages: Sequence[Any], call_id: str) -> int:
    """The index of the latest AI message making the call `call_id`; len(messages) if none."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AIMessage) and any(
            c.get("id") == call_id for c in message.tool_calls
        ):
            return index
    return len(messages)


def calls_beside(state: Any, call_id: str, messages_key: str = "messages") -> list[dict[str, Any]]:
    """The tool calls of the AI message making the call `call_id` (itself included); [] if none."""
    messages = messages_of(state, messages_key)
    at = _maker(messages, call_id)
    return list(messages[at].tool_calls) if at < len(messages) else []


def opener(messages: Sequence[Any], at: int) -> str:
    """The turn of the message at `at`: the id (or `#<position>`) of the message opening it."""
    at -= 1
    while at >= 0 and isinstance(messages[at], AIMessage | ToolMessage):
        at -= 1
    if at < 0:
        return ""
    first = messages[at]
    first_id = getattr(first, "id", None)
    return str(first_id) if first_id else f"#{at}"


def messages_of(state: Any, messages_key: str) -> list[Any]:
    """The messages of a ToolNode's input (a list, a dict or an object holding them)."""
    if isinstance(state, list):
        messages: Any = state
    elif isinstance(state, Mapping):
        messages = state.get(messages_key)
    else:
        messages = getattr(state, messages_key, None)
    return messages if isinstance(messages, list) else []


def earlier_runs(
    messages: Sequence[Any], thread: str, current: str, subgraph: str = ""
) -> Iterator[str]:
    """The runs of the thread's turns other than `current`, latest first (one per opener)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AIMessage | ToolMessage):
            continue
        opener_id = getattr(message, "id", None)
        turn = str(opener_id) if opener_id else f"#{index}"
        if turn != current:
            yield run_id_for(thread, turn, subgraph)


def thread_of(config: Any) -> str:
    """The thread id a node runs in; `ConfigError` when the graph was invoked without one."""
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    if thread is None or thread == "":
        raise ConfigError(
            "a gated tool node runs in a thread: invoke the graph with a checkpointer and "
            "config={'configurable': {'thread_id': ...}}"
        )
    return str(thread)


def subgraph_of(config: Any) -> str:
    """The path of the sub-graph a node runs in: its `checkpoint_ns` but for the node's own
    part, without task ids ("" for a node of the graph invoked, or outside any graph)."""
    ns = ((config or {}).get("configurable") or {}).get("checkpoint_ns")
    if not isinstance(ns, str) or not ns:
        return ""
    return _NS_SEP.join(part.split(_NS_END, 1)[0] for part in ns.split(_NS_SEP)[:-1])


def answered_runs(config: Any) -> list[str]:
    """The runs named by the agentrt answers the node execution was resumed with, in order.

    LangGraph keeps a task's answers in its scratchpad (those given on earlier
    resumes), and the graph's `Command(resume=...)` not yet taken by an
    interrupt; read, never taken, here. [] when LangGraph does not say.
    """
    scratchpad = ((config or {}).get("configurable") or {}).get("__pregel_scratchpad")
    if scratchpad is None:
        return []
    values = list(getattr(scratchpad, "resume", None) or [])
    peek = getattr(scratchpad, "get_null_resume", None)
    if callable(peek):
        with contextlib.suppress(Exception):  # another LangGraph: it does not say
            values.append(peek(False))
    runs: list[str] = []
    for value in values:
        if isinstance(value, Mapping) and value.get("type") == MARK:
            run_id = value.get("run_id")
            if isinstance(run_id, str) and run_id not in runs:
                runs.append(run_id)
    return runs
