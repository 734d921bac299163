"""The accounting caller: every model attempt recorded before it is sent, limited, charged.

Every test that takes a store takes `database` or `any_store` and runs on SQLite and on
PostgreSQL (issue 21 item 5; decisions 0103, 0105): the attempts' rows, the run's totals
at 64 bits, concurrent reservations, a cancel, a lost lease, the limits checked before
dispatch, retries and their waits, a served error's charge, implausible usage. The few
that take no store judge the caller's own arithmetic (prices, dollars).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import Decision, Limits, SideEffect, StepInput
from agentrt._accounting import project
from agentrt._errors import (
    ConfigError,
    LeaseLostError,
    ServedModelError,
    TransientModelError,
)
from agentrt._model import (
    Message,
    ModelConfig,
    ModelRequest,
    ModelResponse,
    Price,
    PriceTable,
    TextBlock,
    Usage,
    parse_dollars,
)
from conftest import FakeClock, Ids, RecordingTool, event_types
from support.models import (
    PRICE,
    REQUEST,
    FakeModel,
    calls,
    drive,
    model_agent,
    recorded_sleeps,
    reply,
)
from support.rows import execute

# Replies that use more output than REQUEST's cap of 100 allows are not believed.
CAP_1000 = replace(REQUEST, max_output_tokens=1000)


def test_success_is_recorded_before_and_after_and_charged(any_store: agentrt.Store) -> None:
    store = any_store
    model = FakeModel(reply(usage=Usage(1000, 200, 100)))
    run = drive(store, model, agent=model_agent(CAP_1000))
    assert run.status == "COMPLETED"
    assert calls(store, run.id) == [(1, "ok", 1000, 200, 6000)]  # 900*3 + 100*3 + 200*15
    assert (run.model_calls, run.input_tokens, run.output_tokens, run.cached_input_tokens) == (
        1,
        1000,
        200,
        100,
    )
    assert run.estimated_cost_micros == 6000
    types = event_types(store, run.id)
    assert types[3:6] == ["model.dispatched", "model.completed", "step.decided"]
    events = store.list_events(run_id=run.id)
    dispatched, completed = events[3], events[4]
    assert dispatched.payload == {
        "call_id": dispatched.payload["call_id"],
        "attempt": 1,
        "model": "fake:model",
    }
    assert completed.payload == {
        "call_id": dispatched.payload["call_id"],
        "attempt": 1,
        "status": "ok",
        "model": "fake:model",
        "usage": {"input_tokens": 1000, "output_tokens": 200, "cached_input_tokens": 100},
        "cost_micros": 6000,
        "latency_ms": 1,
        "error": "",
    }


def test_the_call_limit_stops_before_dispatch(any_store: agentrt.Store) -> None:
    store = any_store
    model = FakeModel(reply(), reply(), reply())
    run = drive(store, model, agent=model_agent(calls=3), limits=Limits(max_model_calls=2))
    assert (run.status, run.reason) == ("FAILED", "limit_model_calls")
    assert len(model.requests) == 2  # the third was never sent
    assert len(store.list_model_calls(run.id)) == 2


def test_token_limit_uses_totals_plus_the_projection(any_store: agentrt.Store) -> None:
    store = any_store
    projected = project(REQUEST, 100, None)
    first = Usage(projected.input_tokens, 50, 0)
    used = first.input_tokens + first.output_tokens
    model = FakeModel(reply(usage=first), reply())
    # Room for what was used plus just less than one more projected request.
    limit = used + projected.tokens - 1
    run = drive(store, model, agent=model_agent(calls=2), limits=Limits(max_total_tokens=limit))
    assert (run.status, run.reason) == ("FAILED", "limit_tokens")
    assert len(model.requests) == 1
    assert "this request may take" in run.reason_detail


def test_cost_limit_uses_totals_plus_the_projection(any_store: agentrt.Store) -> None:
    store = any_store
    projected = project(REQUEST, 100, PRICE)
    assert projected.cost_micros is not None
    model = FakeModel(reply(usage=Usage(0, 0, 0)))
    run = drive(store, model, limits=Limits(max_estimated_cost_micros=projected.cost_micros - 1))
    assert (run.status, run.reason) == ("FAILED", "limit_cost")
    assert model.requests == []


def test_unpriced_model_cannot_be_held_to_a_cost_limit(any_store: agentrt.Store) -> None:
    store = any_store
    model = FakeModel(reply())
    run = drive(
        store,
        model,
        limits=Limits(max_estimated_cost_micros=1_000_000),
        config=ModelConfig(model=model),
    )
    assert (run.status, run.reason) == ("FAILED", "limit_cost")
    assert "unpriced" in run.reason_detail and model.requests == []


def test_no_output_cap_under_a_token_limit_is_refused(any_store: agentrt.Store) -> None:
    store = any_store
    uncapped = ModelRequest(system="", messages=[Message("user", [TextBlock("hi")])])
    model = FakeModel(reply())
    run = drive(store, model, agent=model_agent(uncapped), limits=Limits(max_total_tokens=10**6))
    assert (run.status, run.reason) == ("FAILED", "limit_tokens")
    assert "no output cap" in run.reason_detail


def test_output_cap_is_clamped_to_the_per_call_limit(any_store: agentrt.Store) -> None:
    store = any_store
    model = FakeModel(reply())
    drive(store, model, limits=Limits(max_output_tokens_per_call=7))
    assert model.requests[0].max_output_tokens == 7


def test_concurrent_calls_in_one_step_cannot_overrun_a_limit(any_store: agentrt.Store) -> None:
    store = any_store
    projected = project(REQUEST, 100, None)
    gate = asyncio.Event()

    async def slow() -> ModelResponse:
        await gate.wait()
        return reply(usage=Usage(1, 1, 0))

    model = FakeModel(slow, slow, slow)

    async def decide(input: StepInput) -> Decision:
        tasks = [asyncio.create_task(input.model.generate(REQUEST)) for _ in range(3)]
        await asyncio.sleep(0.2)
        gate.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        refused = [r for r in results if isinstance(r, agentrt.LimitExceeded)]
        return Decision.complete({"sent": len(model.requests), "refused": len(refused)})

    run = drive(store, model, agent=decide, limits=Limits(max_total_tokens=2 * projected.tokens))
    assert run.result == {"sent": 2, "refused": 1}


def test_transient_error_is_retried_then_succeeds_each_attempt_a_row(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    model = FakeModel(TransientModelError("busy"), TransientModelError("busy"), reply())
    config = ModelConfig(
        model=model, prices=PRICE, max_retries=3, backoff=timedelta(milliseconds=10)
    )
    driver = agentrt.Driver(
        store=store,
        agent=model_agent(),
        policy=agentrt.default_policy(),
        model=config,
        now=FakeClock(),
        new_id=Ids(),
    )
    with recorded_sleeps() as sleeps:
        run = driver.start_sync("g")
    assert run.status == "COMPLETED"
    assert [(a, s, cost) for a, s, _, _, cost in calls(store, run.id)] == [
        (1, "error", 0),
        (2, "error", 0),
        (3, "ok", 105),
    ]
    assert sleeps == [0.01, 0.02]  # backoff * 2^(attempt-1)
    assert run.model_calls == 3  # every attempt counts


def test_retry_after_beyond_the_maximum_gives_up_at_once(any_store: agentrt.Store) -> None:
    store = any_store
    model = FakeModel(TransientModelError("slow down", retry_after=timedelta(minutes=5)), reply())
    config = ModelConfig(
        model=model, prices=PRICE, max_retries=3, max_retry_after=timedelta(minutes=1)
    )
    run = drive(store, model, config=config)
    assert (run.status, run.reason) == ("FAILED", "model_unavailable")
    assert len(model.requests) == 1


def test_a_wait_that_would_pass_a_time_limit_gives_up(any_store: agentrt.Store) -> None:
    store = any_store
    model = FakeModel(TransientModelError("busy", retry_after=timedelta(seconds=30)), reply())
    config = ModelConfig(model=model, prices=PRICE, max_retries=3)
    run = drive(store, model, config=config, limits=Limits(max_active_time=timedelta(seconds=10)))
    assert (run.status, run.reason) == ("FAILED", "model_unavailable")
    assert len(model.requests) == 1


def test_non_transient_error_is_not_retried(any_store: agentrt.Store) -> None:
    store = any_store
    model = FakeModel(ValueError("bad request"), reply())
    config = ModelConfig(model=model, prices=PRICE, max_retries=3)
    run = drive(store, model, config=config)
    assert (run.status, run.reason) == ("FAILED", "model_unavailable")
    assert "ValueError: bad request" in run.reason_detail
    assert calls(store, run.id) == [(1, "error", 0, 0, 0)]


def test_exhausted_retries_end_the_run_model_unavailable(any_store: agentrt.Store) -> None:
    store = any_store
    model = FakeModel(*[TransientModelError("down")] * 3)
    config = ModelConfig(
        model=model, prices=PRICE, max_retries=2, backoff=timedelta(milliseconds=1)
    )
    run = drive(store, model, config=config)
    assert (run.status, run.reason) == ("FAILED", "model_unavailable")
    assert [c[1] for c in calls(store, run.id)] == ["error"] * 3


def test_served_error_is_charged_its_usage_and_not_retried(any_store: agentrt.Store) -> None:
    store = any_store
    model = FakeModel(ServedModelError("garbled", usage=Usage(50, 20, 0)), reply())
    config = ModelConfig(model=model, prices=PRICE, max_retries=3)
    run = drive(store, model, config=config)
    assert (run.status, run.reason) == ("FAILED", "model_unavailable")
    assert calls(store, run.id) == [(1, "error", 50, 20, 450)]
    assert (run.input_tokens, run.output_tokens, run.estimated_cost_micros) == (50, 20, 450)


def test_an_ambiguous_attempt_is_charged_the_full_output_cap(any_store: agentrt.Store) -> None:
    store = any_store
    model = FakeModel(TimeoutError("read timed out"))
    run = drive(store, model)
    projected = project(REQUEST, 100, PRICE)
    assert (run.status, run.reason) == ("FAILED", "model_unavailable")
    assert calls(store, run.id) == [
        (1, "ambiguous", projected.input_tokens, 100, projected.cost_micros)
    ]
    assert run.output_tokens == 100 and run.estimated_cost_micros == projected.cost_micros


def test_a_call_past_its_timeout_is_ambiguous(any_store: agentrt.Store) -> None:
    store = any_store

    async def hang() -> ModelResponse:
        await asyncio.sleep(60)
        return reply()

    model = FakeModel(hang)
    config = ModelConfig(model=model, prices=PRICE, call_timeout=timedelta(milliseconds=50))
    run = drive(store, model, config=config)
    assert calls(store, run.id)[0][1] == "ambiguous"


@pytest.mark.parametrize("usage", [Usage(-5, 10, 0), Usage(10, 10, 11)])
def test_implausible_usage_is_charged_the_estimate_and_ends_the_run(
    any_store: agentrt.Store, usage: Usage
) -> None:
    store = any_store
    model = FakeModel(reply(usage=usage))
    run = drive(store, model)
    assert (run.status, run.reason) == ("FAILED", "model_unavailable")
    projected = project(REQUEST, 100, PRICE)
    assert calls(store, run.id) == [
        (1, "error", projected.input_tokens, 100, projected.cost_micros)
    ]
    assert "not plausible" in run.reason_detail


def test_a_cancelled_caller_is_still_recorded(any_store: agentrt.Store) -> None:
    store = any_store
    started = asyncio.Event()

    async def hang() -> ModelResponse:
        started.set()
        await asyncio.sleep(60)
        return reply()

    model = FakeModel(hang)
    driver = agentrt.Driver(
        store=store,
        agent=model_agent(),
        policy=agentrt.default_policy(),
        model=ModelConfig(model=model, prices=PRICE),
        new_id=Ids(),
    )

    async def main() -> None:
        task = asyncio.create_task(driver.start("g"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    (run,) = store.list_runs()
    projected = project(REQUEST, 100, PRICE)
    assert calls(store, run.id) == [
        (1, "ambiguous", projected.input_tokens, 100, projected.cost_micros)
    ]
    assert store.list_model_calls(run.id)[0].error == "cancelled by the caller; outcome unknown"
    assert run.estimated_cost_micros == projected.cost_micros


def test_no_model_call_after_the_lease_is_lost(any_store: agentrt.Store, database: str) -> None:
    store = any_store
    model = FakeModel(reply(), reply())

    async def decide(input: StepInput) -> Decision:
        await input.model.generate(REQUEST)
        execute(database, "UPDATE runs SET lease_owner = 'thief'")
        await input.model.generate(REQUEST)
        return Decision.complete()

    with pytest.raises(LeaseLostError):
        drive(store, model, agent=decide)
    assert len(model.requests) == 1
    (run,) = store.list_runs()
    assert len(store.list_model_calls(run.id)) == 1


def test_a_model_driven_run_uses_tools(any_store: agentrt.Store) -> None:
    store = any_store
    read = RecordingTool("read", SideEffect.READ_ONLY)
    model = FakeModel(reply(tool="read"), reply("all done"))

    async def decide(input: StepInput) -> Decision:
        response = await input.model.generate(REQUEST)
        if response.tool_uses:
            use = response.tool_uses[0]
            return Decision.tool_call(use.name, use.input)
        return Decision.complete(response.text)

    run = drive(store, model, agent=decide, tools=[read])
    assert (run.status, run.result) == ("COMPLETED", "all done")
    assert len(read.calls) == 1
    assert [c.step_id for c in store.list_model_calls(run.id)] == [
        s.id for s in store.list_steps(run.id)
    ]


def test_totals_saturate_instead_of_overflowing(any_store: agentrt.Store) -> None:
    store = any_store
    big = 2**63 - 10
    model = FakeModel(reply(usage=Usage(big, big, 0)), reply(usage=Usage(big, big, 0)))
    run = drive(
        store,
        model,
        agent=model_agent(replace(REQUEST, max_output_tokens=big), calls=2),
        config=ModelConfig(model=model, prices=Price.free()),
    )
    assert run.status == "COMPLETED"
    assert (run.input_tokens, run.output_tokens) == (2**63 - 1, 2**63 - 1)


def test_parse_dollars() -> None:
    assert parse_dollars("5") == 5_000_000
    assert parse_dollars("4.41") == 4_410_000
    assert parse_dollars("$0.50") == 500_000
    for bad in ("five", "-1", "0.0000001", "nan", "$", "1e3", "5_000", "\u0665", " $ 5", "inf"):
        with pytest.raises(ConfigError):
            parse_dollars(bad)


def test_price_table_tells_free_from_unpriced() -> None:
    table = PriceTable({"local:llama": Price.free(), "paid:big": PRICE})
    assert table.lookup("local:llama").cost_micros(Usage(10**6, 10**6, 0)) == 0
    assert table.lookup("paid:big").cost_micros(Usage(10**6, 10**6, 0)) == 18_000_000
    with pytest.raises(ConfigError, match="has no price"):
        table.lookup("paid:unknown")
    with pytest.raises(ConfigError, match="has no price"):
        ModelConfig(model=FakeModel(), prices=table).price("paid:unknown")
    assert ModelConfig(model=FakeModel()).price("anything") is None  # no prices given: unpriced


def test_cached_tokens_use_the_cached_price() -> None:
    price = Price(3_000_000, 15_000_000, cached_input_micros=300_000)
    assert price.cost_micros(Usage(1_000_000, 0, 1_000_000)) == 300_000
    assert price.cost_micros(Usage(1, 0, 0)) == 3  # rounded up, never down


def test_a_late_model_result_after_a_cancel_is_charged_once_not_twice(
    any_store: agentrt.Store,
) -> None:
    """The operator cancels a run whose model request is in flight: the cancel charges the
    attempt at its estimate; the reply that arrives later changes nothing."""
    import threading

    store = any_store
    in_flight = threading.Event()
    release = asyncio.Event()
    loop_box: dict[str, Any] = {}

    async def late() -> ModelResponse:
        loop_box["loop"] = asyncio.get_running_loop()
        in_flight.set()
        await release.wait()
        return reply(usage=Usage(1000, 500, 0))

    model = FakeModel(late)
    driver = agentrt.Driver(
        store=store,
        # A cap below the reply's 500 output tokens (so the estimate is less than the
        # reply) but within the margin believed above it.
        agent=model_agent(replace(REQUEST, max_output_tokens=450)),
        policy=agentrt.default_policy(),
        model=ModelConfig(model=model, prices=PRICE),
        new_id=Ids(),
    )
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.setdefault("run", driver.start_sync("g")))
    thread.start()
    assert in_flight.wait(10)
    (run,) = store.list_runs()
    agentrt.cancel(store, run.id, by="ops")
    loop_box["loop"].call_soon_threadsafe(release.set)
    thread.join(10)
    assert box["run"].status == "CANCELLED"
    # Charged once: the estimate at the cancel, then only what the real reply cost
    # beyond it (1000 in, 500 out: $0.003 + $0.0075), never both in full.
    assert calls(store, run.id) == [(1, "ambiguous", 1000, 500, 10_500)]
    final = store.get_run(run.id)
    assert (final.input_tokens, final.output_tokens, final.estimated_cost_micros) == (
        1000,
        500,
        10_500,
    )
    late = store.list_events(run_id=run.id)[-1]
    assert (late.type, late.payload["status"]) == ("model.completed", "late")
    projected = project(replace(REQUEST, max_output_tokens=450), 450, PRICE)
    assert late.payload["usage"] == {
        "input_tokens": 1000 - projected.input_tokens,
        "output_tokens": 50,
        "cached_input_tokens": 0,
    }


def test_a_model_missing_from_its_price_table_is_refused_before_dispatch(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    model = FakeModel(reply(), name="paid:unknown")
    run = drive(store, model, config=ModelConfig(model=model, prices=PriceTable({})))
    assert (run.status, run.reason) == ("FAILED", "model_unavailable")
    assert "has no price" in run.reason_detail
    assert model.requests == [] and store.list_model_calls(run.id) == []


@pytest.mark.parametrize("cap", [0, -1])
def test_an_output_cap_that_is_not_positive_is_refused(any_store: agentrt.Store, cap: int) -> None:
    store = any_store
    bad = ModelRequest(
        system="", messages=[Message("user", [TextBlock("hi")])], max_output_tokens=cap
    )
    model = FakeModel(reply())
    run = drive(store, model, agent=model_agent(bad), limits=Limits(max_total_tokens=100))
    assert (run.status, run.reason) == ("FAILED", "agent_error")
    assert "positive integer" in run.reason_detail
    assert model.requests == []


def test_the_retry_waits_at_least_the_providers_retry_after(any_store: agentrt.Store) -> None:
    store = any_store
    model = FakeModel(TransientModelError("busy", retry_after=timedelta(seconds=3)), reply())
    config = ModelConfig(
        model=model, prices=PRICE, max_retries=2, backoff=timedelta(milliseconds=10)
    )
    with recorded_sleeps() as sleeps:
        run = drive(store, model, config=config)
    assert run.status == "COMPLETED"
    assert sleeps == [3.0]


def test_a_wait_past_the_elapsed_time_limit_gives_up(any_store: agentrt.Store) -> None:
    store = any_store
    model = FakeModel(TransientModelError("busy", retry_after=timedelta(minutes=30)), reply())
    config = ModelConfig(
        model=model, prices=PRICE, max_retries=3, max_retry_after=timedelta(hours=1)
    )
    run = drive(store, model, config=config, limits=Limits(max_elapsed_time=timedelta(minutes=10)))
    assert (run.status, run.reason) == ("FAILED", "model_unavailable")
    assert len(model.requests) == 1


def test_an_attempt_whose_outcome_was_never_recorded_is_charged_when_the_run_ends(
    any_store: agentrt.Store, database: str
) -> None:
    """A settle that never committed (the store was locked past its timeout, say) leaves
    the attempt `dispatched`; the run's ending charges it at its estimate."""
    store = any_store

    async def decide(input: StepInput) -> Decision:
        execute(
            database,
            "INSERT INTO model_calls (id, run_id, step_id, attempt, status, model, "
            "input_tokens, output_tokens, cost_micros) "
            "VALUES (?, ?, ?, 1, 'dispatched', 'fake:model', 40, 100, 1620)",
            ("c" + "0" * 30 + "1", input.run.id, input.steps[-1].id),
        )
        return Decision.complete()

    run = drive(store, FakeModel(), agent=decide)
    assert run.status == "COMPLETED"
    (attempt,) = store.list_model_calls(run.id)
    assert attempt.status == "ambiguous"
    final = store.get_run(run.id)
    assert (final.input_tokens, final.output_tokens, final.estimated_cost_micros) == (40, 100, 1620)
    types = event_types(store, run.id)
    assert types[-2:] == ["model.failed", "run.finished"]


def test_a_projection_beyond_64_bits_saturates_instead_of_crashing(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    huge = ModelRequest(
        system="", messages=[Message("user", [TextBlock("hi")])], max_output_tokens=10**20
    )
    model = FakeModel(TimeoutError("lost"))
    run = drive(store, model, agent=model_agent(huge))
    assert (run.status, run.reason) == ("FAILED", "model_unavailable")
    assert store.get_run(run.id).output_tokens == 2**63 - 1


def test_an_uncapped_request_is_projected_with_the_adapters_own_default_cap(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    uncapped = ModelRequest(system="", messages=[Message("user", [TextBlock("hi")])])
    model = FakeModel(TimeoutError("lost"))
    model.default_max_output_tokens = 4096  # type: ignore[attr-defined]
    run = drive(store, model, agent=model_agent(uncapped))
    assert run.status == "FAILED"
    assert model.requests[0].max_output_tokens == 4096
    assert store.list_model_calls(run.id)[0].output_tokens == 4096  # the full cap charged
