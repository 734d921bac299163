"""What a framework tool call costs through each adapter, at the start and the end of a long run.

Before every call an adapter looks up the call's recorded step by the
framework's call id (a call already settled gets its recorded outcome, never a
second execution; docs/decisions/0060). This measures whether that look-up,
and anything else the adapter does per call, grows with the run.

For each framework: one run of `--calls` tool calls (2,000 by default), one
read-only call per model turn, the framework's own test model playing the
script (LangChain's `GenericFakeChatModel`, Pydantic AI's `FunctionModel`,
the Agents SDK's `ScriptedModel`), a real store in a temporary directory. The
run is made twice: the framework alone, then behind the agentrt adapter. The
tool notes the time each call reaches it; a call's cost is the time since the
previous call reached it (the model's turn, the framework, the adapter, the
four fsynced commits of the step). Printed: the median cost of the first 100
calls and of the last 100, their ratio (the end over the start), and the
adapter's share (the gated cost less the framework's alone) at both ends
with its ratio. Then, on the gated run's finished store, one look-up of its
last call both ways: reading every step, as the adapters did before decision
0060, and through the index (`steps_with_reasons`), with the first over the
second: what the look-up alone costs a call at the end of the run.

    python benchmarks/adapter_lookup.py [--calls 2000] [--only langgraph] [--dir DIR]

Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import agentrt
from agentrt.lowlevel import steps_with_reasons

FRAMEWORKS = ("langgraph", "pydantic-ai", "openai-agents")
WINDOW = 100
"""Calls at each end of the run whose median cost is reported."""


def limits(calls: int) -> agentrt.Limits:
    return agentrt.Limits(max_steps=calls + 10)


# -- LangGraph ---------------------------------------------------------------------


def langgraph_run(calls: int, workdir: Path, gated: bool) -> list[float]:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from agentrt.adapters.langgraph import Classification, gated_tool_node

    stamps: list[float] = []

    @tool
    def look(q: str) -> str:
        """Look something up."""
        stamps.append(time.perf_counter())
        return q

    script = [
        AIMessage("", tool_calls=[{"name": "look", "args": {"q": f"q{i}"}, "id": f"c{i}"}])
        for i in range(calls)
    ] + [AIMessage("done")]
    model = GenericFakeChatModel(messages=iter(script))

    def agent(state: MessagesState) -> dict[str, Any]:
        # The fake model ignores what it is given; handing it the whole history
        # would only measure LangChain converting every message on every turn.
        return {"messages": [model.invoke(state["messages"][-1:])]}

    store = agentrt.open_store(workdir / "langgraph.db") if gated else None
    node: Any = ToolNode([look])
    if store is not None:
        node = gated_tool_node(
            [look],
            store=store,
            policy=agentrt.default_policy(),
            classifications={"look": Classification("read_only", timeout=5)},
            limits=limits(calls),
        )
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile()
    config: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": 2 * calls + 10}
    try:
        out = graph.invoke({"messages": [HumanMessage("look things up")]}, config)
    finally:
        if store is not None:
            store.close()
    assert out["messages"][-1].content == "done"
    return stamps


# -- Pydantic AI -------------------------------------------------------------------


def pydantic_ai_run(calls: int, workdir: Path, gated: bool) -> list[float]:
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.toolsets import FunctionToolset
    from pydantic_ai.usage import UsageLimits

    from agentrt.adapters.pydantic_ai import AgentrtGate, Classification

    stamps: list[float] = []
    toolset: FunctionToolset[Any] = FunctionToolset()

    @toolset.tool_plain
    def look(q: str) -> str:
        """Look something up."""
        stamps.append(time.perf_counter())
        return q

    turns = itertools.count()

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        i = next(turns)
        if i >= calls:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("look", {"q": f"q{i}"}, tool_call_id=f"c{i}")])

    store = agentrt.open_store(workdir / "pydantic_ai.db") if gated else None
    capabilities: list[Any] = []
    metadata = None
    if store is not None:
        gate = AgentrtGate(
            store=store,
            policy=agentrt.default_policy(),
            classifications={"look": Classification("read_only", timeout=5)},
            limits=limits(calls),
        )
        capabilities = [gate]
        metadata = gate.run_metadata()
    agent: Agent[None, Any] = Agent(
        FunctionModel(answer),
        output_type=[str, DeferredToolRequests],
        toolsets=[toolset],
        capabilities=capabilities,
    )
    try:
        result = agent.run_sync(
            "look things up", metadata=metadata, usage_limits=UsageLimits(request_limit=None)
        )
    finally:
        if store is not None:
            store.close()
    assert result.output == "done"
    return stamps


# -- the OpenAI Agents SDK ---------------------------------------------------------


def openai_agents_run(calls: int, workdir: Path, gated: bool) -> list[float]:
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    from agentrt.adapters.openai_agents import Classification, gate_agent

    set_tracing_disabled(True)
    stamps: list[float] = []

    @function_tool
    def look(q: str) -> str:
        """Look something up."""
        stamps.append(time.perf_counter())
        return q

    script: list[Any] = [
        [function_call("look", {"q": f"q{i}"}, call_id=f"c{i}")] for i in range(calls)
    ] + [[assistant_message("done")]]
    agent = Agent(name="looker", model=ScriptedModel(script), tools=[look])
    store = agentrt.open_store(workdir / "openai_agents.db") if gated else None
    try:
        if store is not None:
            gated_agent = gate_agent(
                agent,
                store=store,
                policy=agentrt.default_policy(),
                classifications={"look": Classification("read_only", timeout=5)},
                limits=limits(calls),
            )
            agent = gated_agent.new_run().agent
        result = asyncio.run(Runner.run(agent, "look things up", max_turns=calls + 10))
    finally:
        if store is not None:
            store.close()
    assert result.final_output == "done"
    return stamps


def lookup_us(db: Path) -> tuple[float, float]:
    """µs per look-up of the run's last call on the gated run's finished store, read both ways.

    The adapters before decision 0060 read every step of the run and compared
    reasons in Python; `steps_with_reasons` reads through the index. Median of 5.
    """
    store = agentrt.open_existing(db, read_only=True)
    try:
        (run,) = store.list_runs()
        steps = [s for s in store.list_steps(run.id, cap=None) if s.decision is not None]
        last = steps[-2].decision  # the very last is the run's `complete`
        assert last is not None and last.reason

        def every_step() -> list[agentrt.Step]:
            return [
                s
                for s in store.list_steps(run.id, cap=None)
                if s.decision is not None and s.decision.reason == last.reason
            ]

        def indexed() -> list[agentrt.Step]:
            return steps_with_reasons(store, run.id, [last.reason])

        out = []
        for read in (every_step, indexed):
            times = []
            for _ in range(5):
                began = time.perf_counter()
                if len(read()) != 1:
                    raise SystemExit(f"the look-up did not find the call {last.reason!r} once")
                times.append((time.perf_counter() - began) * 1e6)
            out.append(statistics.median(times))
        return out[0], out[1]
    finally:
        store.close()


RUNS: dict[str, Callable[[int, Path, bool], list[float]]] = {
    "langgraph": langgraph_run,
    "pydantic-ai": pydantic_ai_run,
    "openai-agents": openai_agents_run,
}


# -- the table ---------------------------------------------------------------------


def ends(stamps: Sequence[float], calls: int) -> tuple[float, float]:
    """Median cost in µs of the first and the last `WINDOW` calls (each: since the previous)."""
    if len(stamps) != calls:
        raise SystemExit(f"the tool ran {len(stamps)} times, not {calls}")
    costs = [(b - a) * 1e6 for a, b in itertools.pairwise(stamps)]
    window = min(WINDOW, max(len(costs) // 2, 1))
    return statistics.median(costs[:window]), statistics.median(costs[-window:])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--only", choices=FRAMEWORKS, action="append")
    parser.add_argument("--dir", type=Path, help="where the stores go (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.calls < 4:
        parser.error("--calls must be at least 4")
    began = time.monotonic()
    print(
        f"{args.calls} calls per run; cost per call in µs, median of the first and the last "
        f"{min(WINDOW, (args.calls - 1) // 2)} calls"
    )
    print()
    header = f"{'framework':<14} {'side':<10} {'start':>9} {'end':>9} {'end/start':>9}"
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for name in args.only or FRAMEWORKS:
            work = Path(tmp) / name
            work.mkdir()
            measured = {}
            for side, gated in (("alone", False), ("gated", True)):
                start, end = ends(RUNS[name](args.calls, work, gated), args.calls)
                measured[side] = (start, end)
                print(f"{name:<14} {side:<10} {start:>9.0f} {end:>9.0f} {end / start:>8.2f}x")
            start = measured["gated"][0] - measured["alone"][0]
            end = measured["gated"][1] - measured["alone"][1]
            ratio = f"{end / start:>8.2f}x" if start > 0 else "       -"
            print(f"{name:<14} {'adapter':<10} {start:>9.0f} {end:>9.0f} {ratio}")
            every, indexed = lookup_us(next(work.glob("*.db")))
            ratio = f"{every / indexed:>8.2f}x"
            print(f"{name:<14} {'look-up':<10} {every:>9.0f} {indexed:>9.0f} {ratio}")
            sys.stdout.flush()
    print()
    print("adapter: what the gated run adds per call over the framework alone")
    print(
        "look-up: one look-up of the last call on the gated run's finished store, in µs\n"
        "  (median of 5): reading every step as the adapters did before decision 0060,\n"
        "  then through the index (steps_with_reasons), and the first over the second"
    )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"(took {time.monotonic() - began:.0f} s)")


if __name__ == "__main__":
    main()
