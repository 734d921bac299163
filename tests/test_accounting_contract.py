"""Charging a late reply only beyond its estimate, pinned by the mutation campaign.

An attempt that was charged its estimate as `ambiguous` (a cancel, a takeover)
may still get its real reply. `_charge_beyond_estimate` then adds, to the row
and to the run, only what the reply cost beyond the estimate, column by column,
and records that excess as one `model.completed` event with status `late`. The
one end-to-end test of it (`test_accounting.py`) exercises a single shape; these
pin each column, each "nothing to add" case, and the event. See docs/mutation.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import agentrt
from agentrt.accounting import Projection, _Attempt, _charge_beyond_estimate
from agentrt.model import Usage

NOW = datetime(2026, 11, 30, 9, 30, tzinfo=UTC)
ESTIMATE = (100, 50, 0, 1_000)  # input, output, cached input tokens, cost in micros


@pytest.fixture
def store(tmp_path: Path) -> Iterator[agentrt.Store]:
    s = agentrt.open_store(tmp_path / "late.db")
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
    s.close()


def late(store: agentrt.Store, usage: Usage, cost: int, call_id: str = "c1") -> None:
    record = _Attempt(call_id, 2, "fake:model", Projection(100, 50, 1_000), NOW)
    with store.transaction() as tx:
        _charge_beyond_estimate(tx, "r", "s1", record, usage, cost, NOW)


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
    store: agentrt.Store,
) -> None:
    late(store, Usage(input_tokens=130, output_tokens=40, cached_input_tokens=7), cost=1_600)
    # Input and cached input beyond the estimate; output below it adds nothing.
    assert row(store) == ("ambiguous", 130, 50, 7, 1_600)
    assert totals(store) == (130, 50, 7, 1_600)
    (event,) = late_events(store)
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
    store: agentrt.Store,
) -> None:
    late(store, Usage(input_tokens=90, output_tokens=50, cached_input_tokens=0), cost=999)
    assert row(store) == ("ambiguous", *ESTIMATE)
    assert totals(store) == ESTIMATE
    assert late_events(store) == []


def test_a_late_reply_of_an_unpriced_model_still_adds_its_excess_tokens(
    store: agentrt.Store,
) -> None:
    late(store, Usage(input_tokens=100, output_tokens=80, cached_input_tokens=0), cost=0)
    assert row(store) == ("ambiguous", 100, 80, 0, 1_000)
    assert totals(store) == (100, 80, 0, 1_000)
    (event,) = late_events(store)
    assert event.payload["usage"] == {
        "input_tokens": 0,
        "output_tokens": 30,
        "cached_input_tokens": 0,
    }
    assert event.payload["cost_micros"] == 0


def test_a_late_reply_that_costs_more_for_the_same_tokens_adds_only_the_cost(
    store: agentrt.Store,
) -> None:
    late(store, Usage(input_tokens=100, output_tokens=50, cached_input_tokens=0), cost=1_250)
    assert row(store) == ("ambiguous", 100, 50, 0, 1_250)
    assert totals(store) == (100, 50, 0, 1_250)
    (event,) = late_events(store)
    assert event.payload["usage"] == {
        "input_tokens": 0,
        "output_tokens": 0,
        "cached_input_tokens": 0,
    }
    assert event.payload["cost_micros"] == 250


def test_cached_tokens_already_charged_are_subtracted_before_charging_a_late_reply(
    store: agentrt.Store,
) -> None:
    with store.transaction() as tx:
        tx.execute("UPDATE model_calls SET cached_input_tokens = 20 WHERE id = 'c1'")
    late(store, Usage(input_tokens=100, output_tokens=50, cached_input_tokens=15), cost=1_000)
    assert row(store) == ("ambiguous", 100, 50, 20, 1_000)
    assert late_events(store) == []


@pytest.mark.parametrize("status", ["ok", "error", "dispatched"])
def test_a_late_reply_to_an_attempt_not_settled_as_ambiguous_adds_nothing(
    store: agentrt.Store, status: str
) -> None:
    with store.transaction() as tx:
        tx.execute("UPDATE model_calls SET status = ? WHERE id = 'c1'", (status,))
    late(store, Usage(input_tokens=500, output_tokens=500, cached_input_tokens=0), cost=9_000)
    assert row(store) == (status, *ESTIMATE)
    assert totals(store) == ESTIMATE
    assert late_events(store) == []


def test_a_late_reply_to_an_attempt_with_no_row_adds_nothing(store: agentrt.Store) -> None:
    late(store, Usage(input_tokens=500, output_tokens=500), cost=9_000, call_id="gone")
    assert totals(store) == ESTIMATE
    assert late_events(store) == []
