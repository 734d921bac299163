"""No model request starts once a time limit is reached (decision 0139).

Found by an attack: a model call was sent after the run's time budget was spent.

README point 3: limits, time included, are checked before the next action starts.
The accounting caller itself refuses to *retry* once a wait (even of zero) would pass
`max_active_time` or `max_elapsed_time` (`_passes_a_time_limit`), but a fresh
`generate` from the agent is checked only against calls, tokens and cost: within one
step, after a model call that used up the whole time budget, every further call the
agent makes is still dispatched and paid for. The time limits are judged only when
the next step begins, however many paid requests the current step sends first.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import agentrt
from agentrt import Decision, Limits, StepInput
from agentrt._model import ModelConfig
from conftest import FakeClock, Ids
from support.models import PRICE, REQUEST, FakeModel, reply

HOUR = timedelta(hours=1)


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        (Limits(max_elapsed_time=HOUR), "limit_elapsed_time"),
        (Limits(max_active_time=HOUR), "limit_active_time"),
    ],
    ids=["elapsed", "active"],
)
def test_no_model_call_is_sent_once_the_time_budget_is_spent(
    any_store: agentrt.Store, limits: Limits, reason: str
) -> None:
    store = any_store
    clock = FakeClock()

    def two_hours() -> object:
        clock.advance(2 * HOUR)  # the first request alone takes twice the budget
        return reply()

    model = FakeModel(two_hours, reply(), reply())

    async def decide(input: StepInput) -> Decision:
        for _ in range(3):
            await input.model.generate(REQUEST)
        return Decision.complete({"asked": 3})

    driver = agentrt.Driver(
        store=store,
        agent=decide,
        policy=agentrt.default_policy(),
        model=ModelConfig(model=model, prices=PRICE),
        now=clock,
        new_id=Ids(),
    )
    run = driver.start_sync("g", limits=limits)
    # The first request was within budget; the two after it started with the budget spent.
    assert len(model.requests) == 1, f"{len(model.requests)} requests sent"
    assert len(store.list_model_calls(run.id)) == 1
    assert (run.status, run.reason) == ("FAILED", reason)
