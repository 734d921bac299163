"""What building spans costs per event, for a short run and a long one (agentrt.otel).

A run of N steps (each a model attempt and one tool call, seven events) is turned
into spans by `agentrt.otel.spans_of`, the mapping the exporter runs; the figure
is microseconds per event, and the ratio of the long run's to the short run's
(about 1 when the cost per event does not grow with the run).

    python benchmarks/otel_spans.py [--short 1000] [--long 10000]
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime, timedelta

from agentrt import Event
from agentrt.otel import spans_of


def events_of_a_run(steps: int) -> list[Event]:
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    out: list[Event] = []

    def add(step: str, type_: str, payload: dict[str, object]) -> None:
        seq = len(out) + 1
        at = t0 + timedelta(milliseconds=seq)
        out.append(Event(seq=seq, run_id="r", step_id=step, at=at, type=type_, payload=payload))

    add("", "run.created", {"goal": "g", "limits": {}, "tools": []})
    add("", "run.started", {})
    for i in range(steps):
        s = f"s{i}"
        usage = {"input_tokens": 10, "output_tokens": 5}
        add(s, "step.started", {"index": i})
        add(s, "model.dispatched", {"call_id": f"m{i}", "attempt": 1, "model": "m"})
        add(
            s,
            "model.completed",
            {"call_id": f"m{i}", "status": "ok", "usage": usage, "cost_micros": 3},
        )
        add(s, "step.decided", {"kind": "tool_call", "tool": "lookup", "args": {"x": i}})
        add(
            s, "step.policy", {"decision": {"outcome": "allow"}, "policy_id": "p", "spec_hash": "h"}
        )
        add(s, "step.tool_started", {"tool": "lookup", "args": {"x": i}})
        add(s, "step.tool_finished", {"tool": "lookup", "duration_ms": 1, "summary": "ok"})
    add("", "run.finished", {"status": "COMPLETED", "reason": "goal_completed", "steps": steps})
    return out


def per_event_us(steps: int) -> tuple[float, int]:
    events = events_of_a_run(steps)
    started = time.perf_counter()
    spans = spans_of(events)
    elapsed = time.perf_counter() - started
    return elapsed / len(events) * 1e6, len(spans)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", type=int, default=1000, help="steps of the short run")
    parser.add_argument("--long", type=int, default=10000, help="steps of the long run")
    args = parser.parse_args(argv)
    short, short_spans = per_event_us(args.short)
    long, long_spans = per_event_us(args.long)
    print(f"{args.short} steps: {short:.1f} us per event ({short_spans} spans)")
    print(f"{args.long} steps: {long:.1f} us per event ({long_spans} spans)")
    print(f"long / short, per event: {long / short:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
