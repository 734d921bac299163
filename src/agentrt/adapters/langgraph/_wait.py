"""A turn of a gated graph, waiting for a person where one is asked: the short path.

`invoke_and_wait(graph, input, config, tools_node)` is `graph.invoke(input,
config)` for a program that would rather wait than stop and resume: while the
graph stops on an agentrt approval (the gated node's `interrupt()`), it reads
the store every `poll_interval` seconds until a person decides from any process
(`agentrt approve`, the console, the webhook), then resumes the graph with
`Command(resume=decided(interrupt))`, as often as a person is asked. When the
graph stops without an interrupt, it completes the turn's run as
`turn_end_node` does (a graph with the end node is left as that node left it),
so no turn's run is left RUNNING. An interrupt of the graph's own (not
agentrt's) is handed back as `graph.invoke` would hand it back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

from agentrt import Approval, ApprovalStatus, ConfigError, RunStateError, RunStatus
from agentrt.adapters._wait import POLL_INTERVAL, until_decided, until_decided_sync
from agentrt.adapters._wait import poll_interval as _interval
from agentrt.lowlevel import run_sync

from ._node import GatedTools
from ._protocol import MARK, decided


def _gated(tools_node: ToolNode) -> GatedTools:
    gated = getattr(tools_node, "agentrt_gate", None)
    if not isinstance(gated, GatedTools):
        raise ConfigError("invoke_and_wait takes the tool node that gated_tool_node returned")
    return gated


def _ours(graph: Any, config: RunnableConfig) -> tuple[list[Any], bool]:
    """The graph's pending interrupts that are agentrt's approvals; and whether any is not."""
    pending = list(graph.get_state(config).interrupts)
    ours = [
        i
        for i in pending
        if isinstance(getattr(i, "value", None), dict) and i.value.get("type") == MARK
    ]
    return ours, len(ours) != len(pending)


def _expire_if_lapsed(gated: GatedTools, approval: Approval) -> None:
    """A lapsed approval (still pending) is recorded expired by `attach`; the run is cancelled."""
    if approval.status != ApprovalStatus.PENDING:
        return
    if gated.store.get_run(approval.run_id).status != RunStatus.WAITING_FOR_APPROVAL:
        return

    async def expire() -> None:
        with contextlib.suppress(RunStateError):
            session, _ = await gated.gate.attach(approval.run_id)
            await session.close()

    run_sync(expire())


def _clock(gated: GatedTools) -> Callable[[], datetime]:
    return gated._operator.now


def invoke_and_wait(
    graph: Any,
    input: Any,
    config: RunnableConfig,
    tools_node: ToolNode,
    *,
    poll_interval: float = POLL_INTERVAL,
) -> Any:
    """`graph.invoke(input, config)`, waiting for a person on each agentrt approval; the end.

    Returns what the last `graph.invoke` returned. A rejection, or an
    approval that lapsed unanswered (recorded expired), reaches the model as
    the gated node's error `ToolMessage`; the call never runs.
    """
    gated, every = _gated(tools_node), _interval(poll_interval)
    out = graph.invoke(input, config)
    while True:
        ours, foreign = _ours(graph, config)
        if not ours or foreign:
            break
        value = ours[0].value
        approval = until_decided_sync(
            gated.store, value["run_id"], value["approval_id"], every=every, clock=_clock(gated)
        )
        _expire_if_lapsed(gated, approval)
        out = graph.invoke(Command(resume=decided(value)), config)
    if not _ours(graph, config)[0] and not graph.get_state(config).next:
        gated.end_turn_sync(graph.get_state(config).values, config)
    return out


async def ainvoke_and_wait(
    graph: Any,
    input: Any,
    config: RunnableConfig,
    tools_node: ToolNode,
    *,
    poll_interval: float = POLL_INTERVAL,
) -> Any:
    """`invoke_and_wait` on the async path (`graph.ainvoke`)."""
    gated, every = _gated(tools_node), _interval(poll_interval)
    out = await graph.ainvoke(input, config)
    while True:
        state = await graph.aget_state(config)
        pending = list(state.interrupts)
        ours = [
            i
            for i in pending
            if isinstance(getattr(i, "value", None), dict) and i.value.get("type") == MARK
        ]
        if not ours or len(ours) != len(pending):
            break
        value = ours[0].value
        approval = await until_decided(
            gated.store, value["run_id"], value["approval_id"], every=every, clock=_clock(gated)
        )
        if approval.status == ApprovalStatus.PENDING:
            run = gated.store.get_run(approval.run_id)
            if run.status == RunStatus.WAITING_FOR_APPROVAL:
                with contextlib.suppress(RunStateError):
                    session, _ = await gated.gate.attach(approval.run_id)
                    await session.close()
        out = await graph.ainvoke(Command(resume=decided(value)), config)
    state = await graph.aget_state(config)
    if not state.interrupts and not state.next:
        await gated.end_turn(state.values, config)
    return out
