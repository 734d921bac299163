"""agentrt for LangGraph: every tool call of your graph through the Gate (`agentrt[langgraph]`).

    from agentrt.adapters.langgraph import Classification, gated_tool_node, turn_end_node

    tools_node = gated_tool_node(
        [search, push_branch],
        store=agentrt.open_store("runs.db"),
        policy=agentrt.default_policy(),
        classifications={
            "search": Classification("read_only", timeout=10),
            "push_branch": Classification("remote_mutation", timeout=30),
        },
    )
    builder.add_node("tools", tools_node)      # LangGraph's own ToolNode, gated
    builder.add_node("agentrt_end", turn_end_node(tools_node))
    builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: "agentrt_end"})

You keep your graph, your model, your tools and your checkpointer. Each turn of
a thread (from one input message to the graph stopping) is one agentrt run
(`run_id_for(thread_id, turn)`, the turn named by the id of the message that
opened it; a gated node in a sub-graph has a run of its own, `run_id_for(thread_id,
turn, subgraph)`), so `limits` count a turn, and the model's answer completes it
(`turn_end_node`). The calls of one message go through the Gate in the model's
order, also when the graph sends each as a task of its own (the prebuilt
agents); one behind a call that waits for a person is held until that call is
decided. A call the policy sends to a person pauses the graph with
`interrupt()`, whose value shows the request and its hash; answer with
`Command(resume=approve(interrupt, by=...))`, `reject`, or `decided` after
`agentrt approve`; or run the turn with `invoke_and_wait(graph, input, config,
tools_node)`, which waits for the person, resumes, and ends the turn's run
(decision 0058). A gated tool may not call `interrupt()` itself
(`InterruptRefusedError`). See docs/adapters.md.
"""

from __future__ import annotations

try:
    import langchain_core  # noqa: F401
    import langgraph.prebuilt  # noqa: F401
except ImportError as exc:
    raise ImportError(
        "agentrt.adapters.langgraph needs LangGraph: pip install 'agentrt[langgraph]'"
    ) from exc

from agentrt.adapters import Classification, UnclassifiedToolError

from ._node import (
    EarlierTurnWaitsError,
    InterruptRefusedError,
    RunEndedError,
    gated_tool_node,
    turn_end_node,
)
from ._protocol import approve, decided, reject
from ._turn import run_id_for
from ._wait import ainvoke_and_wait, invoke_and_wait

__all__ = [
    "Classification",
    "EarlierTurnWaitsError",
    "InterruptRefusedError",
    "RunEndedError",
    "UnclassifiedToolError",
    "ainvoke_and_wait",
    "approve",
    "decided",
    "gated_tool_node",
    "invoke_and_wait",
    "reject",
    "run_id_for",
    "turn_end_node",
]

for _name in sorted(set(__all__) - {"Classification", "UnclassifiedToolError"}):
    globals()[_name].__module__ = __name__
