"""What the exported spans say about the record's values, and what a restart holds.

agentrt keeps number literals exactly as the model wrote them (`12.50`, `1e400`): they are
what is hashed, approved and shown by `agentrt events`. A span attribute carries a payload
value that is not a scalar as the record's own JSON text (it was re-encoded through floats:
`12.50` became `12.5`, `1e400` `Infinity`, not JSON at all), and a number an attribute
cannot carry as its literal. A sink that meets a run it has no memory of reads its history
a page at a time (decision 0143).
"""

from __future__ import annotations

from pathlib import Path

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

import agentrt
from agentrt import Decision, SideEffect
from agentrt.export import Follower
from agentrt.lowlevel import parse_json
from agentrt.otel import SPAN_STEP, OtelSink
from agentrt.otel._spans import attribute
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool
from support.otlp import Receiver

ARGS_TEXT = b'{"amount":12.50,"fee":1e2,"limit":1e400}'


def test_a_step_event_carries_the_arguments_with_their_number_literals_as_recorded(
    db_path: Path,
) -> None:
    """A model asks for `pay {"amount": 12.50, "fee": 1e2, "limit": 1e400}` and an operator
    exports the run to a collector with `OtelSink`: the `step.decided` span event carries the
    arguments as the record holds them (as `agentrt events` prints them)."""
    args = parse_json(ARGS_TEXT)
    schema = {"type": "object", "properties": {}, "additionalProperties": True}
    store = agentrt.open_store(db_path)
    try:
        driver = agentrt.Driver(
            store=store,
            agent=ScriptedAgent([Decision.tool_call("pay", args), Decision.complete("paid")]),
            policy=agentrt.default_policy(),
            tools=[RecordingTool("pay", SideEffect.READ_ONLY, schema=schema)],
            now=FakeClock(),
            new_id=Ids("a"),
        )
        run = driver.start_sync("pay the invoice")
        decided = next(e for e in store.list_events(run.id, 0, 100) if e.type == "step.decided")
    finally:
        store.close()
    assert run.status == "COMPLETED"
    recorded = agentrt.canonical_json(decided.payload["args"]).decode()
    assert recorded == ARGS_TEXT.decode()  # the record keeps the literals

    with Receiver() as receiver:
        exporter = OTLPSpanExporter(endpoint=receiver.endpoint, timeout=10)
        try:
            with OtelSink(db_path, exporter) as sink, Follower(db_path) as follower:
                follower.run(sink, follow=False)
        finally:
            exporter.shutdown()
        spans = receiver.snapshot()
    first_step = next(
        s for s in spans if s.name == SPAN_STEP and s.attributes["agentrt.step.index"] == 0
    )
    (event,) = [attrs for name, _, attrs in first_step.events if name == "step.decided"]
    assert event["agentrt.args"] == ARGS_TEXT.decode()


def test_a_restarted_sink_reads_a_long_runs_history_back_in_bounded_memory(
    db_path: Path,
) -> None:
    """`agentrt export --otel` is restarted from its cursor just before a long run ends (600
    steps, each writing a distinct 24 KB blob): the sink reads the run's history back a page
    at a time and the span builder lets each step go, so the peak stays near one page's
    payloads, about 7 MB (it held the whole history, 36 MB here, growing with the run: with
    `_history` made to return the whole list again, this test fails). The run is no longer
    than that takes: driving its steps is what this test's CPU goes on."""
    import tracemalloc

    from agentrt import Limits, ToolResult

    steps = 600
    schema = {
        "type": "object",
        "properties": {"blob": {"type": "string"}},
        "additionalProperties": False,
    }
    tool = RecordingTool(
        "write",
        SideEffect.READ_ONLY,
        schema=schema,
        result=lambda call: ToolResult(content={"ok": 1}, summary="ok"),
    )
    decisions = [
        Decision.tool_call("write", {"blob": f"{i:08d}" + "x" * 24_000}) for i in range(steps)
    ]
    store = agentrt.open_store(db_path)
    try:
        driver = agentrt.Driver(
            store=store,
            agent=ScriptedAgent([*decisions, Decision.complete("written")]),
            policy=agentrt.default_policy(),
            tools=[tool],
            now=FakeClock(),
            new_id=Ids("a"),
        )
        run = driver.start_sync("write the blobs", limits=Limits(max_steps=steps + 5))
        assert run.status == "COMPLETED"
        head_seq = store.chain_heads()[0][0]
        (finished,) = store.list_events(run.id, head_seq - 1, 1)
    finally:
        store.close()
    assert finished.type == "run.finished"

    with OtelSink(db_path, None) as sink:  # a fresh process: no memory of the run
        tracemalloc.start()
        try:
            sink(finished)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        spans = sink.take()
    assert [s.name for s in spans][-1] == "agentrt.run"
    assert peak < 15_000_000, f"rebuilding one run's spans peaked at {peak / 1e6:.0f} MB"


def test_a_number_an_attribute_cannot_carry_is_its_literal() -> None:
    """An integer past 64 bits or a literal past a double's range is its literal as text (an
    OTLP attribute is an int64 or a double); other scalars are attributes as they are."""
    args = parse_json(b'{"big":123456789012345678901234567890,"huge":1e400,"n":-7,"x":12.50}')
    assert attribute(args["big"]) == "123456789012345678901234567890"
    assert attribute(args["huge"]) == "1e400"
    assert attribute(args["n"]) == -7
    assert attribute(args["x"]) == 12.5
    assert attribute(True) is True
    assert attribute([args["x"], "é"]) == '[12.50,"é"]'
