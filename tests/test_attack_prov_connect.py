"""Attack: a connect that never completes (nothing was sent) is charged as ambiguous.

Decision 0010: "Nothing sent is not ambiguous. A refused or timed-out *connect* means
the request never left, so it is transient and charged nothing." A loopback listener
whose accept queue is full drops new SYNs, so a connect to it hangs: the request
never leaves. Driven through a real Driver on a SQLite file.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import agentrt
from agentrt import ModelConfig, Price, SideEffect
from agentrt.model_agent import ModelAgent
from agentrt.providers.openai_compat import OpenAICompatModel
from agentrt.render import RenderOptions
from conftest import FakeClock, Ids, RecordingTool


@pytest.fixture
def unconnectable() -> Iterator[int]:
    """A loopback port whose listen backlog is full: connects to it hang in SYN_SENT."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = int(server.getsockname()[1])
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.2)
    with socket.socket() as probe:
        probe.settimeout(0.5)
        try:
            probe.connect(("127.0.0.1", port))
        except (TimeoutError, OSError):
            pass
        else:
            pytest.skip("this kernel accepted a connect past a full backlog")
    try:
        yield port
    finally:
        for filler in fillers:
            filler.close()
        server.close()


def test_a_connect_that_times_out_is_transient_and_charged_nothing(
    tmp_path: Path, unconnectable: int
) -> None:
    """A user points the OpenAI-compatible adapter at a local server that cannot take the
    connection; the adapter's own deadline fires during the connect and today the attempt
    is recorded `ambiguous` and charged the full estimate ("it may still be served"). It
    should be a transient error, recorded `error` and charged nothing."""
    model = OpenAICompatModel(
        "m", base_url=f"http://127.0.0.1:{unconnectable}/v1", timeout=timedelta(seconds=1)
    )
    store = agentrt.open_store(tmp_path / "runs.db")
    driver = agentrt.Driver(
        store=store,
        agent=ModelAgent(RenderOptions(max_output_tokens=1000)),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("finish", SideEffect.READ_ONLY, terminal=True)],
        model=ModelConfig(model=model, prices=Price(3_000_000, 15_000_000)),
        now=FakeClock(),
        new_id=Ids(),
    )
    try:
        run = driver.start_sync("g")
        assert (run.status, run.reason) == ("FAILED", "model_unavailable")
        (attempt,) = store.list_model_calls(run.id)
        assert attempt.status == "error"
        assert (attempt.input_tokens, attempt.output_tokens, attempt.cost_micros) == (0, 0, 0)
        assert "could not be reached" in attempt.error
        final = store.get_run(run.id)
        assert (final.input_tokens, final.output_tokens, final.estimated_cost_micros) == (0, 0, 0)
    finally:
        store.close()
