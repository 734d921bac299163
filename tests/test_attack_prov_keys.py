"""Attack: an API key echoed by a provider in a *served* (2xx) error reply.

A non-2xx error body is quoted with the key redacted (`_http.excerpt`); the same
text in a 200 reply shaped as an error goes into `ServedModelError` unredacted,
and from there into the run's durable record (model_calls.error, model.failed,
run.finished, reason_detail). Driven through a real Driver on a SQLite file
against a local server on 127.0.0.1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import ModelConfig, Price, SideEffect
from agentrt.model_agent import ModelAgent
from agentrt.providers.ollama import OllamaModel
from agentrt.render import RenderOptions
from conftest import FakeClock, Ids, RecordingTool
from support.providers import FakeServer, anthropic_error, json_reply

KEY = "sk-local-test-0123456789abcdef"


def run_once(tmp_path: Path, model: Any) -> tuple[agentrt.Store, agentrt.Run]:
    store = agentrt.open_store(tmp_path / "runs.db")
    driver = agentrt.Driver(
        store=store,
        agent=ModelAgent(RenderOptions(max_output_tokens=100)),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("finish", SideEffect.READ_ONLY, terminal=True)],
        model=ModelConfig(model=model, prices=Price(3_000_000, 15_000_000)),
        now=FakeClock(),
        new_id=Ids(),
    )
    return store, driver.start_sync("g")


def recorded_text(store: agentrt.Store, run: agentrt.Run) -> str:
    final = store.get_run(run.id)
    parts = [final.reason_detail]
    parts += [c.error for c in store.list_model_calls(run.id)]
    parts += [repr(e.payload) for e in store.list_events(run_id=run.id)]
    return "\n".join(parts)


def test_ollama_key_echoed_in_a_200_error_is_redacted_in_the_record(tmp_path: Path) -> None:
    """An Ollama behind an authenticating proxy answers 200 `{"error": "... <key>"}`;
    today the key is written verbatim into model_calls.error, model.failed and the run's
    reason_detail. It should be redacted there, as it is in a non-2xx error excerpt."""
    body = {"error": f"unauthorized: key {KEY} is not allowed"}
    with FakeServer(json_reply(body)) as server:
        store, run = run_once(tmp_path, OllamaModel("llama3.2", host=server.url, api_key=KEY))
    try:
        assert (run.status, run.reason) == ("FAILED", "model_unavailable")
        text = recorded_text(store, run)
        assert "unauthorized: key [redacted]" in text
        assert KEY not in text
    finally:
        store.close()


def test_anthropic_key_echoed_in_a_200_error_is_redacted_in_the_record(tmp_path: Path) -> None:
    """A gateway in front of Anthropic answers 200 with an error object quoting the key;
    today the key is written verbatim into the run's record. It should be redacted, as a
    401 body with the same text is."""
    pytest.importorskip("anthropic")
    from agentrt.providers.anthropic import AnthropicModel

    body = anthropic_error("authentication_error", f"invalid x-api-key {KEY}")
    with FakeServer(json_reply(body)) as server:
        store, run = run_once(tmp_path, AnthropicModel("m", base_url=server.url, api_key=KEY))
    try:
        assert (run.status, run.reason) == ("FAILED", "model_unavailable")
        text = recorded_text(store, run)
        assert "invalid x-api-key [redacted]" in text
        assert KEY not in text
    finally:
        store.close()
