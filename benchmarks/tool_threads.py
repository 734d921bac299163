"""What a plain-function tool call costs to hand off: a pool thread or a thread of its own.

Decision 0017 runs each plain-function tool on a daemon thread that runs
nothing else until the call returns (`agentrt._execute._on_own_thread`: an idle
one kept from an earlier call, else a new one, decision 0092), so that a tool
past its timeout never holds the process open at exit, nor a pool's thread. This measures, in
µs per call of a tool that returns at once, awaited through the event loop as
the driver awaits it:

- `ThreadPoolExecutor.submit` (the old way: an idle pool thread);
- `_on_own_thread` (an idle kept daemon thread, decision 0092);
- `agentrt._execute.invoke` as a whole (its task, the timeout, the observation).

    python benchmarks/tool_threads.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from agentrt import SideEffect, ToolCall, ToolResult, ToolSpec
from agentrt._execute import _on_own_thread, invoke

SPEC = ToolSpec(
    name="quick",
    description="returns at once",
    input_schema={"type": "object"},
    side_effect=SideEffect.READ_ONLY,
    timeout=timedelta(seconds=5),
)
CALL = ToolCall(run_id="r" * 32, step_id="s" * 32, args={}, lease_epoch=1)


class Quick:
    spec = SPEC

    def call(self, call: ToolCall) -> ToolResult:
        return ToolResult({"ok": True})


def per_call_us(one: Callable[[], Awaitable[Any]], calls: int) -> float:
    async def rounds() -> list[float]:
        out = []
        for _ in range(5):
            began = time.perf_counter()
            for _ in range(calls):
                await one()
            out.append((time.perf_counter() - began) / calls * 1e6)
        return out

    return statistics.median(asyncio.run(rounds()))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    tool = Quick()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=32)
    figures = {
        "pool thread (old)": lambda: asyncio.wrap_future(pool.submit(tool.call, CALL)),
        "kept daemon thread": lambda: asyncio.wrap_future(_on_own_thread(tool.call, CALL)),
        "invoke, whole": lambda: invoke(tool, SPEC, CALL),
    }
    for name, one in figures.items():
        print(f"{name:20} {per_call_us(one, args.calls):8.1f} µs/call")
    pool.shutdown()


if __name__ == "__main__":
    main()
