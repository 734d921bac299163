"""agentrt.otel keeps bounded state for a long run, and its benchmark script runs.

No timing is asserted (figures are for `benchmarks/otel_spans.py`); what is pinned
is that the span builder lets a step's events go once its span is built, so the
work and memory per event do not grow with the run.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path

from agentrt.otel import SPAN_RUN, SPAN_STEP, RunSpans

ROOT = Path(__file__).resolve().parent.parent


def load_benchmark() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        "otel_spans", ROOT / "benchmarks" / "otel_spans.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_long_run_keeps_only_the_current_steps_events_in_the_span_builder() -> None:
    events = load_benchmark().events_of_a_run(2000)
    builder = RunSpans("r")
    emitted = []
    for event in events[:-1]:  # everything but run.finished: the run is still going
        emitted += builder.add(event)
        assert len(builder._by_step) <= 1
        assert len(builder._times) <= 16
    assert [s.name for s in emitted].count(SPAN_STEP) == 1999
    emitted += builder.add(events[-1])
    assert emitted[-1].name == SPAN_RUN
    assert emitted[-1].attributes["agentrt.run.model_calls"] == 2000
    assert emitted[-1].attributes["agentrt.usage.input_tokens"] == 20_000


def test_the_span_benchmark_prints_both_figures_and_their_ratio() -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/otel_spans.py", "--short", "50", "--long", "200"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("50 steps: ") and "(101 spans)" in lines[0]
    assert lines[1].startswith("200 steps: ") and "(401 spans)" in lines[1]
    assert lines[2].startswith("long / short, per event: ")
