"""Whether a long run stays flat: per-step cost by tenth, memory and file growth.

One Driver run of `--steps` allowed steps of a read-only plain-function tool,
each call's arguments and observation `--size` bytes of text, then a completing
step, on a file-backed store (`agentrt.open_store` in a temp dir: WAL,
`synchronous=FULL`). The agent timestamps each decision it is asked for; a
step's cost is the time between two such requests. Printed, as ratios measured
in this one run (issue 20's target: the last tenth within 1.2x of the first,
resident memory growth at most 64 MiB, the file at most 1.5x the content):

- microseconds per step, mean of each tenth, and the last tenth over the first;
- resident memory (max RSS) growth from the first step to the last;
- the database's bytes (file and WAL) over the bytes of arguments and
  observations the run recorded.

With `--walk` the agent also reads every earlier step's arguments and
observation at every step, as `ModelAgent`'s rendering does: the cost of a
history the session no longer holds (decision 0098: old steps are read back
from the store) shows in the later tenths.

    python benchmarks/long_run.py [--steps N] [--size BYTES] [--dir PATH] [--walk]

Needs only the package. About 30 s for 3,000 steps of 8 KiB on this project's
machines; 10,000 steps take several minutes.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time

import agentrt
from agentrt import Decision, StepInput


class TimedAgent:
    """Asks for `steps` tool calls with `size`-character arguments, then completes;
    records when each decision was asked for."""

    def __init__(self, steps: int, size: int, walk: bool = False) -> None:
        self.steps = steps
        self.size = size
        self.walk = walk
        self.walked = 0  # characters of earlier steps' values read, with --walk
        self.asked: list[float] = []
        self.rss_kib: list[int] = []

    def decide(self, input: StepInput) -> Decision:
        self.asked.append(time.perf_counter())
        self.rss_kib.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        n = len(self.asked) - 1
        if self.walk:
            for step in input.steps:
                if step.decision is not None and isinstance(step.decision.args, dict):
                    self.walked += len(step.decision.args.get("pad", ""))
                if step.observation is not None and isinstance(step.observation.content, dict):
                    self.walked += len(str(step.observation.content.get("seen", "")))
        if n >= self.steps:
            return Decision.complete({"steps": n})
        pad = (str(n) * self.size)[: self.size]
        return Decision.tool_call("echo", {"n": n, "pad": pad})


def make_tool(size: int) -> agentrt.Tool:
    @agentrt.tool(side_effect=agentrt.SideEffect.READ_ONLY, timeout=30)
    def echo(n: int, pad: str) -> dict[str, object]:
        """Echo a step's number with an observation of its own."""
        return {"n": n, "seen": pad[::-1][:size]}

    return echo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--dir", default=None)
    parser.add_argument(
        "--walk", action="store_true", help="the agent reads every earlier step at each step"
    )
    args = parser.parse_args(argv)
    if args.steps < 10:
        parser.error("--steps must be at least 10 (ten tenths)")
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        path = os.path.join(directory, "long.db")
        agent = TimedAgent(args.steps, args.size, args.walk)
        driver = agentrt.Driver(
            store=agentrt.open_store(path),
            agent=agent,
            policy=agentrt.default_policy(),
            tools=[make_tool(args.size)],
        )
        try:
            run = driver.start_sync("a long run", agentrt.Limits(max_steps=args.steps + 10))
        finally:
            driver.store.close()
        if run.status != agentrt.RunStatus.COMPLETED:
            print(f"the run ended {run.status} ({run.reason}: {run.reason_detail})")
            return 1
        file_bytes = sum(
            os.path.getsize(path + suffix)
            for suffix in ("", "-wal")
            if os.path.exists(path + suffix)
        )
    per_step = [(b - a) * 1e6 for a, b in zip(agent.asked, agent.asked[1:], strict=False)]
    per_step = per_step[: args.steps]
    tenth = len(per_step) // 10
    means = [statistics.fmean(per_step[i * tenth : (i + 1) * tenth]) for i in range(10)]
    content = 2 * args.steps * args.size  # each step's arguments and its observation
    growth_mib = (agent.rss_kib[-1] - agent.rss_kib[0]) / 1024
    print(f"python {sys.version.split()[0]}, {args.steps} steps of {args.size} bytes")
    print("µs per step by tenth: " + " ".join(f"{m:,.0f}" for m in means))
    print(f"last tenth / first tenth: {means[-1] / means[0]:.2f}x (target <= 1.2x)")
    print(f"max RSS growth: {growth_mib:.1f} MiB (target <= 64 MiB)")
    print(
        f"database: {file_bytes / 2**20:.1f} MiB for {content / 2**20:.1f} MiB of arguments "
        f"and observations: {file_bytes / content:.2f}x (target <= 1.5x)"
    )
    if args.walk:
        print(f"the agent read {agent.walked / 2**20:,.0f} MiB of earlier steps' values")
    return 0


if __name__ == "__main__":
    sys.exit(main())
