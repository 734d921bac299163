"""Reserving and charging what the accounting caller cannot see, pinned by mutation testing.

An attempt that was charged its estimate as `ambiguous` (a cancel, a takeover)
may still get its real reply. `charge_beyond_estimate` then adds, to the row
and to the run, only what the reply cost beyond the estimate, column by column,
and records that excess as one `model.completed` event with status `late`. The
one end-to-end test of it (`test_accounting.py`) exercises a single shape; these
pin each column, each "nothing to add" case, and the event. The reservation
for attempts in flight is pinned under a cost limit, as the existing test pins
it under a token limit. See docs/mutation.md.

Every test runs on SQLite and on PostgreSQL (issue 21 item 5; decision 0105): those
that take `any_store`, and those that change an attempt's row by hand (through the
store's own transaction, `?` placeholders on both) or crash a child (the crash test
kit's harness on SQLite, forked children killed with SIGKILL on PostgreSQL).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import agentrt
from agentrt import Decision, Limits, StepInput
from agentrt._accounting import project
from agentrt._errors import TransientModelError
from agentrt._model import ModelConfig, ModelResponse, Price, Usage
from conftest import FakeClock, Ids
from support.models import PRICE, REQUEST, FakeModel, calls, model_agent, reply
from support.testkit_children import kit_mode

NOW = datetime(2026, 11, 30, 9, 30, tzinfo=UTC)
ESTIMATE = (100, 50, 0, 1_000)  # input, output, cached input tokens, cost in micros


@pytest.fixture
def charged(any_store: agentrt.Store) -> Iterator[agentrt.Store]:
    s = any_store
    with s.transaction() as tx:
        tx.execute("INSERT INTO runs (id, status, limits_json) VALUES ('r', 'CANCELLED', '{}')")
        tx.execute(
            "INSERT INTO model_calls (id, run_id, step_id, attempt, status, model, "
            "input_tokens, output_tokens, cached_input_tokens, cost_micros) "
            "VALUES ('c1', 'r', 's1', 2, 'ambiguous', 'fake:model', ?, ?, ?, ?)",
            ESTIMATE,
        )
        tx.execute(
            "UPDATE runs SET input_tokens = ?, output_tokens = ?, cached_input_tokens = ?, "
            "estimated_cost_micros = ? WHERE id = 'r'",
            ESTIMATE,
        )
    yield s


def late(store: agentrt.Store, usage: Usage, cost: int, call_id: str = "c1") -> None:
    with store.transaction() as tx:
        tx.charge_beyond_estimate("r", call_id, 2, "fake:model", usage, cost, NOW)


def row(store: agentrt.Store) -> tuple[object, ...]:
    with store.transaction() as tx:
        return tuple(
            tx.execute(
                "SELECT status, input_tokens, output_tokens, cached_input_tokens, cost_micros "
                "FROM model_calls WHERE id = 'c1'"
            ).fetchone()
        )


def totals(store: agentrt.Store) -> tuple[int, int, int, int]:
    run = store.get_run("r")
    return (run.input_tokens, run.output_tokens, run.cached_input_tokens, run.estimated_cost_micros)


def late_events(store: agentrt.Store) -> list[agentrt.Event]:
    return [e for e in store.list_events(run_id="r") if e.type == "model.completed"]


def test_a_late_reply_adds_only_the_excess_of_each_column_and_records_it_as_one_late_event(
    charged: agentrt.Store,
) -> None:
    late(charged, Usage(input_tokens=130, output_tokens=40, cached_input_tokens=7), cost=1_600)
    # Input and cached input beyond the estimate; output below it adds nothing.
    assert row(charged) == ("ambiguous", 130, 50, 7, 1_600)
    assert totals(charged) == (130, 50, 7, 1_600)
    (event,) = late_events(charged)
    assert (event.step_id, event.at) == ("", NOW)
    assert event.payload == {
        "call_id": "c1",
        "attempt": 2,
        "status": "late",
        "model": "fake:model",
        "usage": {"input_tokens": 30, "output_tokens": 0, "cached_input_tokens": 7},
        "cost_micros": 600,
        "latency_ms": 0,
        "error": "a late reply cost more than the estimate charged for it",
    }


def test_a_late_reply_below_its_estimate_in_every_column_adds_nothing_and_records_nothing(
    charged: agentrt.Store,
) -> None:
    late(charged, Usage(input_tokens=90, output_tokens=50, cached_input_tokens=0), cost=999)
    assert row(charged) == ("ambiguous", *ESTIMATE)
    assert totals(charged) == ESTIMATE
    assert late_events(charged) == []


def test_a_late_reply_of_an_unpriced_model_still_adds_its_excess_tokens(
    charged: agentrt.Store,
) -> None:
    late(charged, Usage(input_tokens=100, output_tokens=80, cached_input_tokens=0), cost=0)
    assert row(charged) == ("ambiguous", 100, 80, 0, 1_000)
    assert totals(charged) == (100, 80, 0, 1_000)
    (event,) = late_events(charged)
    assert event.payload["usage"] == {
        "input_tokens": 0,
        "output_tokens": 30,
        "cached_input_tokens": 0,
    }
    assert event.payload["cost_micros"] == 0


def test_a_late_reply_that_costs_more_for_the_same_tokens_adds_only_the_cost(
    charged: agentrt.Store,
) -> None:
    late(charged, Usage(input_tokens=100, output_tokens=50, cached_input_tokens=0), cost=1_250)
    assert row(charged) == ("ambiguous", 100, 50, 0, 1_250)
    assert totals(charged) == (100, 50, 0, 1_250)
    (event,) = late_events(charged)
    assert event.payload["usage"] == {
        "input_tokens": 0,
        "output_tokens": 0,
        "cached_input_tokens": 0,
    }
    assert event.payload["cost_micros"] == 250


def test_cached_tokens_already_charged_are_subtracted_before_charging_a_late_reply(
    charged: agentrt.Store,
) -> None:
    with charged.transaction() as tx:
        tx.execute("UPDATE model_calls SET cached_input_tokens = 20 WHERE id = 'c1'")
    late(charged, Usage(input_tokens=100, output_tokens=50, cached_input_tokens=15), cost=1_000)
    assert row(charged) == ("ambiguous", 100, 50, 20, 1_000)
    assert late_events(charged) == []


@pytest.mark.parametrize("status", ["ok", "error", "dispatched"])
def test_a_late_reply_to_an_attempt_not_settled_as_ambiguous_adds_nothing(
    charged: agentrt.Store, status: str
) -> None:
    with charged.transaction() as tx:
        tx.execute("UPDATE model_calls SET status = ? WHERE id = 'c1'", (status,))
    late(charged, Usage(input_tokens=500, output_tokens=500, cached_input_tokens=0), cost=9_000)
    assert row(charged) == (status, *ESTIMATE)
    assert totals(charged) == ESTIMATE
    assert late_events(charged) == []


def test_a_late_reply_to_an_attempt_with_no_row_adds_nothing(charged: agentrt.Store) -> None:
    late(charged, Usage(input_tokens=500, output_tokens=500), cost=9_000, call_id="gone")
    assert totals(charged) == ESTIMATE
    assert late_events(charged) == []


# -- reserving for the attempts in flight ------------------------------------------------------


def concurrent_calls(store: agentrt.Store, price: Price, limits: Limits) -> dict[str, Any]:
    """Three attempts of one step in flight together; each is sent or refused before any returns."""
    gate = asyncio.Event()

    async def held() -> ModelResponse:
        await gate.wait()
        return ModelResponse("done", [], "end_turn", Usage(0, 0, 0), b"{}")

    model = FakeModel(held, held, held)

    async def decide(input: StepInput) -> Decision:
        tasks = [asyncio.create_task(input.model.generate(REQUEST)) for _ in range(3)]
        for _ in range(1000):
            if len(model.requests) + sum(t.done() for t in tasks) == 3:
                break
            await asyncio.sleep(0.005)
        gate.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        refused = [r.reason for r in results if isinstance(r, agentrt.LimitExceeded)]
        return Decision.complete({"sent": len(model.requests), "refused": refused})

    driver = agentrt.Driver(
        store=store,
        agent=decide,
        policy=agentrt.default_policy(),
        model=ModelConfig(model=model, prices=price),
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("g", limits=limits)
    assert isinstance(run.result, dict)
    return run.result


def test_the_cost_reserved_by_attempts_in_flight_counts_against_the_cost_limit(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    projected = project(REQUEST, 100, PRICE)
    assert projected.cost_micros is not None
    limits = Limits(max_estimated_cost_micros=2 * projected.cost_micros)
    assert concurrent_calls(store, PRICE, limits) == {"sent": 2, "refused": ["limit_cost"]}


def test_attempts_in_flight_of_a_free_model_reserve_no_cost(any_store: agentrt.Store) -> None:
    store = any_store
    free = Price(input_micros=0, output_micros=0)
    limits = Limits(max_estimated_cost_micros=0)
    assert concurrent_calls(store, free, limits) == {"sent": 3, "refused": []}


# -- what each attempt records ------------------------------------------------------------------


def run_model(
    store: agentrt.Store,
    *behaviours: Any,
    prices: Price | None = PRICE,
    limits: Limits | None = None,
    clock: FakeClock | None = None,
) -> agentrt.Run:
    model = FakeModel(*behaviours)
    config = ModelConfig(model=model, prices=prices, max_retries=3, backoff=timedelta(0))
    driver = agentrt.Driver(
        store=store,
        agent=model_agent(),
        policy=agentrt.default_policy(),
        model=config,
        now=clock or FakeClock(),
        new_id=Ids(),
    )
    return driver.start_sync("g", limits=limits)


def model_events(store: agentrt.Store, run_id: str) -> list[agentrt.Event]:
    return [e for e in store.list_events(run_id=run_id) if e.type.startswith("model.")]


def test_the_dispatched_row_holds_the_estimate_and_its_time_while_the_request_is_out(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    seen: list[Any] = []

    def look() -> ModelResponse:
        ((call, *_),) = [store.list_model_calls(r.id) for r in store.list_runs()]
        seen.append(call)
        return reply()

    run = run_model(store, look)
    projected = project(REQUEST, 100, PRICE)
    (call,) = seen
    assert (call.status, call.input_tokens, call.output_tokens, call.cost_micros) == (
        "dispatched",
        projected.input_tokens,
        projected.output_tokens,
        projected.cost_micros,
    )
    dispatched, completed = model_events(store, run.id)
    assert call.dispatched_at is not None
    assert dispatched.type == "model.dispatched"
    assert dispatched.at == call.dispatched_at
    (settled,) = store.list_model_calls(run.id)
    assert settled.completed_at is not None
    assert (completed.type, completed.at) == ("model.completed", settled.completed_at)


def test_an_unpriced_models_attempts_are_recorded_and_charged_with_no_cost(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    seen: list[int] = []

    def look_then_reply() -> ModelResponse:
        seen.append(store.list_model_calls(store.list_runs()[0].id)[-1].cost_micros)
        return reply(usage=Usage(10, 5, 0))

    run = run_model(store, TransientModelError("busy"), look_then_reply, prices=None)
    assert run.status == "COMPLETED"
    assert seen == [0]  # the dispatched row of the second attempt reserves no cost
    assert calls(store, run.id) == [(1, "error", 0, 0, 0), (2, "ok", 10, 5, 0)]
    assert (run.input_tokens, run.output_tokens, run.estimated_cost_micros) == (10, 5, 0)
    settled = [(e.type, e.payload["cost_micros"]) for e in model_events(store, run.id)[1::2]]
    assert settled == [("model.failed", None), ("model.completed", None)]


def test_a_priced_models_transient_error_is_recorded_as_failed_at_no_cost(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    run = run_model(store, TransientModelError("busy"), reply(usage=Usage(10, 5, 0)))
    assert run.status == "COMPLETED"
    settled = [(e.type, e.payload["cost_micros"]) for e in model_events(store, run.id)[1::2]]
    assert settled == [("model.failed", 0), ("model.completed", 105)]


def test_a_retry_reserves_nothing_for_the_attempt_that_failed_before_it(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    projected = project(REQUEST, 100, PRICE)
    limits = Limits(max_total_tokens=projected.tokens + projected.tokens // 2)
    run = run_model(store, TransientModelError("busy"), reply(usage=Usage(1, 1, 0)), limits=limits)
    assert run.status == "COMPLETED"
    assert [c[1] for c in calls(store, run.id)] == ["error", "ok"]


def test_an_attempt_settled_at_the_instant_it_was_dispatched_has_zero_latency(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    run = run_model(store, reply(), clock=FakeClock(tick=timedelta(0)))
    (call,) = store.list_model_calls(run.id)
    assert call.latency_ms == 0
    assert model_events(store, run.id)[1].payload["latency_ms"] == 0


def test_a_cost_limit_exactly_equal_to_the_projection_lets_the_call_through(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    projected = project(REQUEST, 100, PRICE)
    assert projected.cost_micros is not None
    limits = Limits(max_estimated_cost_micros=projected.cost_micros)
    run = run_model(store, reply(usage=Usage(1, 1, 0)), limits=limits)
    assert run.status == "COMPLETED"


def test_the_error_recorded_for_an_attempt_is_cut_at_4096_characters(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    run = run_model(store, reply(usage=Usage(-(10**4100), 5, 0)))
    assert (run.status, run.reason) == ("FAILED", "model_unavailable")
    (call,) = store.list_model_calls(run.id)
    assert call.error.startswith("the reported usage is not plausible")
    assert len(call.error) == 4096
    assert model_events(store, run.id)[1].payload["error"] == call.error


def test_a_crash_during_a_model_request_leaves_the_dispatched_attempt_recorded(
    database: str,
) -> None:
    """The dispatch's commit is the crash point the test kit names DURING_MODEL_REQUEST."""
    from agentrt._records import StepStatus
    from agentrt.testkit import Crash, Point, run_sync

    with kit_mode(database) as mode:
        result = run_sync(
            "support.scenarios:with_model",
            Crash(0, Point.DURING_MODEL_REQUEST),
            mode=mode,
            db_path=database,
        )
    assert [c.crash for c in result.crashes_reached] == [Crash(0, Point.DURING_MODEL_REQUEST)]
    first = result.model_calls[0]
    assert first.step_id == result.step(0).id and first.status == "ambiguous"
    assert result.step(0).status == StepStatus.INTERRUPTED
    assert result.run.status == "COMPLETED"


def test_a_late_reply_after_a_cancel_is_charged_through_the_settle_at_the_time_it_arrived(
    any_store: agentrt.Store,
) -> None:
    """The end-to-end path to `charge_beyond_estimate`: the cancel charged the estimate,
    the reply comes later; an unpriced model adds tokens and no cost."""
    store = any_store
    in_flight = threading.Event()
    release = asyncio.Event()
    loop_box: dict[str, Any] = {}

    async def late() -> ModelResponse:
        loop_box["loop"] = asyncio.get_running_loop()
        in_flight.set()
        await release.wait()
        return reply(usage=Usage(1000, 500, 0))

    clock = FakeClock()
    driver = agentrt.Driver(
        store=store,
        # A cap the reply's 500 output tokens stays plausible under (decision 0017).
        agent=model_agent(replace(REQUEST, max_output_tokens=450)),
        policy=agentrt.default_policy(),
        model=ModelConfig(model=FakeModel(late)),
        now=clock,
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
    last = store.list_events(run_id=run.id)[-1]
    assert (last.type, last.payload["status"], last.payload["cost_micros"]) == (
        "model.completed",
        "late",
        0,
    )
    (dispatched,) = [e for e in store.list_events(run_id=run.id) if e.type == "model.dispatched"]
    assert last.at is not None and dispatched.at is not None and last.at > dispatched.at
    final = store.get_run(run.id)
    assert (final.input_tokens, final.output_tokens, final.estimated_cost_micros) == (1000, 500, 0)


class _CancelInSettle(FakeClock):
    """Once armed, cancels a task from inside the next transaction that reads the clock.

    The reading comes from the store's committer thread, in the middle of the attempt's
    settlement: the cancel lands on the event loop while that transaction commits.
    """

    def __init__(self) -> None:
        super().__init__()
        self.target: tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None = None
        self.fired = False

    def __call__(self) -> datetime:
        target = self.target
        off_the_loop = threading.current_thread().name.startswith(("agentrt-commit", "agentrt-io"))
        if target is not None and off_the_loop:
            self.target = None
            self.fired = True
            loop, task = target
            loop.call_soon_threadsafe(task.cancel)
        return super().__call__()


def test_a_caller_cancelled_while_its_attempt_settles_gets_the_cancel_and_is_charged_once(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    clock = _CancelInSettle()
    box: dict[str, asyncio.Task[Any]] = {}

    def arm() -> ModelResponse:
        clock.target = (asyncio.get_running_loop(), box["task"])
        return reply(usage=Usage(10, 5, 0))

    async def decide(input: StepInput) -> Decision:
        box["task"] = asyncio.create_task(input.model.generate(REQUEST))
        try:
            await box["task"]
        except asyncio.CancelledError:
            return Decision.complete({"cancelled": True})
        return Decision.complete({"cancelled": False})

    driver = agentrt.Driver(
        store=store,
        agent=decide,
        policy=agentrt.default_policy(),
        model=ModelConfig(model=FakeModel(arm), prices=PRICE),
        now=clock,
        new_id=Ids(),
    )
    # Not start_sync: its store calls run inline, leaving no moment for a cancel to land.
    run = asyncio.run(driver.start("g"))
    assert clock.fired
    assert (run.status, run.result) == ("COMPLETED", {"cancelled": True})
    # The settlement that was committing when the cancel came stands; the cancel's own
    # settlement finds the attempt settled and charges nothing more.
    assert calls(store, run.id) == [(1, "ok", 10, 5, 105)]
    assert (run.input_tokens, run.output_tokens, run.estimated_cost_micros) == (10, 5, 105)
    events = model_events(store, run.id)
    assert [e.type for e in events] == ["model.dispatched", "model.completed"]
    assert events[1].payload["status"] == "ok"  # no late charge after it
