"""What a consumer gets back: `run.result` and a tool's result are JSON values, as stored.

A pydantic-typed tool's return value is stored as `model_dump(mode="json")`;
what comes back (the step's observation, a run's result) is plain JSON:
dicts, lists, str, int, float, bool, None. A typed value is one
`Model.model_validate(...)` away. An agent must complete with JSON too.
"""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pydantic

import agentrt
from agentrt import Decision, SideEffect, StepInput


class Invoice(pydantic.BaseModel):
    number: str
    due: date
    total: Decimal
    lines: list[str]


INVOICE = Invoice(number="F-1", due=date(2026, 12, 31), total=Decimal("12.50"), lines=["tea"])
AS_STORED = {"number": "F-1", "due": "2026-12-31", "total": "12.50", "lines": ["tea"]}


@agentrt.tool(side_effect=SideEffect.READ_ONLY, timeout=timedelta(seconds=5))
def fetch_invoice(number: str) -> Invoice:
    """Fetch one invoice by its number."""
    return INVOICE.model_copy(update={"number": number})


def fetch_then_complete_with_what_it_saw(input: StepInput) -> Decision:
    if len(input.steps) == 1:  # the step deciding now is the last one
        return Decision.tool_call("fetch_invoice", {"number": "F-1"})
    seen = input.steps[-2].observation
    assert seen is not None
    return Decision.complete(seen.content)


def test_a_pydantic_tools_result_comes_back_as_json_values_and_validates_to_the_model(
    store: agentrt.Store,
) -> None:
    driver = agentrt.Driver(
        store=store,
        agent=fetch_then_complete_with_what_it_saw,
        policy=agentrt.default_policy(),
        tools=[fetch_invoice],
    )
    run = driver.start_sync("settle invoice F-1")
    assert run.status == "COMPLETED"
    # Exactly what JSON holds: the date and the Decimal are strings, not date and Decimal.
    assert run.result == AS_STORED
    assert type(run.result) is dict
    assert [type(run.result[k]) for k in ("due", "total", "lines")] == [str, str, list]
    assert store.get_run(run.id).result == AS_STORED  # read back, the same
    assert store.list_steps(run.id)[0].observation.content == AS_STORED  # type: ignore[union-attr]
    # The typed value, when the consumer wants it:
    assert Invoice.model_validate(run.result) == INVOICE


def test_completing_with_a_pydantic_instance_is_an_invalid_decision_and_its_json_dump_is_not(
    store: agentrt.Store,
) -> None:
    def decide(input: StepInput) -> Decision:
        if len(input.steps) == 1:
            return Decision.complete(INVOICE)  # not JSON: refused, the loop goes on
        return Decision.complete(INVOICE.model_dump(mode="json"))

    run = agentrt.Driver(store=store, agent=decide, policy=agentrt.default_policy()).start_sync("g")
    first, second = store.list_steps(run.id)
    assert second.status == "done"
    assert first.observation is not None
    assert (first.status, first.observation.kind) == ("failed", "invalid_decision")
    assert "is not a JSON value" in first.observation.summary
    assert (run.status, run.result) == ("COMPLETED", AS_STORED)
    assert Invoice.model_validate(run.result) == INVOICE
