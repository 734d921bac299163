"""Usage far above the request's output cap is implausible: the estimate is charged.

A provider stops at the output cap the request sent (a server may count an
end-of-sequence token or so past it); the runtime believes up to the cap plus
the larger of 64 tokens and a tenth of the cap (decision 0017). Every test takes
`any_store` and runs on SQLite and on PostgreSQL (issue 21 item 5; decision 0105).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import agentrt
from agentrt import Limits
from agentrt._accounting import output_ceiling, project, usage_problem
from agentrt._errors import ServedModelError
from agentrt._model import ModelConfig, Usage
from support.models import PRICE, REQUEST, FakeModel, calls, drive, model_agent, reply


def test_two_to_the_seventy_output_tokens_against_a_cap_of_100_is_charged_the_estimate(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    run = drive(store, FakeModel(reply(usage=Usage(10, 2**70, 0))))
    assert (run.status, run.reason) == ("FAILED", "model_unavailable")
    projected = project(REQUEST, 100, PRICE)
    assert calls(store, run.id) == [
        (1, "error", projected.input_tokens, 100, projected.cost_micros)
    ]
    assert (run.input_tokens, run.output_tokens, run.estimated_cost_micros) == (
        projected.input_tokens,
        100,
        projected.cost_micros,
    )
    assert "the reported usage is not plausible: 1180591620717411303424 output tokens " in (
        run.reason_detail
    )
    assert "for a request capped at 100" in run.reason_detail


def test_a_served_error_reporting_usage_above_the_cap_is_charged_the_estimate(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    model = FakeModel(ServedModelError("garbled", usage=Usage(50, 10**9, 0)))
    run = drive(store, model, config=ModelConfig(model=model, prices=PRICE))
    projected = project(REQUEST, 100, PRICE)
    assert calls(store, run.id) == [
        (1, "error", projected.input_tokens, 100, projected.cost_micros)
    ]


@pytest.mark.parametrize(
    ("output", "charged_as_reported"), [(100, True), (164, True), (165, False)]
)
def test_output_up_to_the_cap_plus_64_is_believed_and_one_more_is_not(
    any_store: agentrt.Store, output: int, charged_as_reported: bool
) -> None:
    store = any_store
    run = drive(store, FakeModel(reply(usage=Usage(10, output, 0))))
    status, output_charged = calls(store, run.id)[0][1], calls(store, run.id)[0][3]
    if charged_as_reported:
        assert (run.status, status, output_charged) == ("COMPLETED", "ok", output)
    else:
        assert (run.status, status, output_charged) == ("FAILED", "error", 100)


def test_the_ceiling_is_the_cap_plus_the_larger_of_64_and_a_tenth() -> None:
    assert [output_ceiling(cap) for cap in (1, 100, 640, 641, 10_000, 200_000)] == [
        65,
        164,
        704,
        705,
        11_000,
        220_000,
    ]
    assert usage_problem(Usage(1, 11_000, 0), 10_000) is None
    assert usage_problem(Usage(1, 11_001, 0), 10_000) == (
        "the reported usage is not plausible: 11001 output tokens for a request capped at 10000"
    )
    # Without a cap there is nothing to hold output to; other checks still apply.
    assert usage_problem(Usage(1, 2**70, 0), None) is None
    assert usage_problem(Usage(-1, 0, 0), None) is not None


def test_the_cap_judged_is_the_one_sent_after_clamping_to_the_per_call_limit(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    model = FakeModel(reply(usage=Usage(10, 120, 0)))
    run = drive(store, model, limits=Limits(max_output_tokens_per_call=50))
    assert model.requests[0].max_output_tokens == 50
    assert (run.status, calls(store, run.id)[0][1]) == ("FAILED", "error")
    assert calls(store, run.id)[0][3] == 50  # the estimate: the cap that was sent


def test_a_request_without_a_cap_is_not_judged_against_one(any_store: agentrt.Store) -> None:
    store = any_store
    uncapped = replace(REQUEST, max_output_tokens=None)
    run = drive(store, FakeModel(reply(usage=Usage(10, 5000, 0))), agent=model_agent(uncapped))
    assert (run.status, calls(store, run.id)[0][1:4]) == ("COMPLETED", ("ok", 10, 5000))
