"""Attack: an error status whose body stalls, under an adapter timeout shorter than the
excerpt's 5 s wait.

`_http` promises that "a server that sends an error status and then stalls its body
must not turn a clean refusal into a timeout" (decision 0010: "a stalled error body
does not turn a clean 503 into a timeout"). The excerpt's own 5 s wait runs inside the
exchange's deadline, so when less than 5 s is left the deadline fires first and the
503 becomes an ambiguous timeout, charged the full estimate. Real Driver, SQLite file,
local server on 127.0.0.1.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import agentrt
from agentrt import ModelConfig, Price, SideEffect
from agentrt.model_agent import ModelAgent
from agentrt.providers.openai_compat import OpenAICompatModel
from agentrt.render import RenderOptions
from conftest import FakeClock, Ids, RecordingTool
from support.providers import FakeServer, stall_body


def test_a_503_with_a_stalled_body_is_transient_not_an_ambiguous_timeout(
    tmp_path: Path,
) -> None:
    """A user sets a 2 s timeout on a local OpenAI-compatible server, which answers 503
    and then stalls its error body; today the attempt is recorded `ambiguous` ("may still
    be served") and charged the whole estimate. The status was received: it should be a
    transient `error` charged nothing."""
    store = agentrt.open_store(tmp_path / "runs.db")
    try:
        with FakeServer(stall_body(503, b'{"error": {"message": "overloaded', 10_000)) as server:
            model = OpenAICompatModel(
                "m", base_url=f"{server.url}/v1", timeout=timedelta(seconds=2)
            )
            driver = agentrt.Driver(
                store=store,
                agent=ModelAgent(RenderOptions(max_output_tokens=1000)),
                policy=agentrt.default_policy(),
                tools=[RecordingTool("finish", SideEffect.READ_ONLY, terminal=True)],
                model=ModelConfig(model=model, prices=Price(3_000_000, 15_000_000)),
                now=FakeClock(),
                new_id=Ids(),
            )
            run = driver.start_sync("g")
        assert (run.status, run.reason) == ("FAILED", "model_unavailable")
        (attempt,) = store.list_model_calls(run.id)
        assert attempt.status == "error"
        assert "503" in attempt.error
        assert (attempt.input_tokens, attempt.output_tokens, attempt.cost_micros) == (0, 0, 0)
        assert store.get_run(run.id).estimated_cost_micros == 0
    finally:
        store.close()
