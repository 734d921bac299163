"""A retry wait that is not a number, infinite, or past any date gives up (decision 0139).

Found by an attack: the accounting caller's retry wait was arithmetic on values it does
not control.

models.md: a `TransientModelError` is retried up to `max_retries`, waiting
`backoff * 2^(attempt-1)` and at least the provider's `Retry-After`; a wait that cannot
be kept gives up at once, and exhausted retries end the run `model_unavailable`.

`_retry_wait` turns a float `retry_after` into a `timedelta` (`_as_timedelta`) and
multiplies the backoff by 2^(attempt-1) without bounds. A `retry_after` of NaN or
infinity (an adapter passing a parsed float through), or a long run of transient
errors under a generous `max_retries`, raises ValueError/OverflowError out of
`generate`: the run ends `agent_error` with a bare Python message such as
"ValueError: cannot convert float NaN to integer" instead of giving up (or retrying)
as a model failure.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import agentrt
from agentrt._errors import TransientModelError
from agentrt._model import ModelConfig
from support.models import PRICE, FakeModel, calls, drive, recorded_sleeps, reply


@pytest.mark.parametrize(
    ("retry_after", "reason", "sleeps"),
    [
        (float("nan"), "goal_completed", [0.0]),  # says no wait: the backoff's, and a retry
        (float("inf"), "model_unavailable", []),  # longer than max_retry_after: given up
        (1e300, "model_unavailable", []),  # past any date: the same
    ],
    ids=["nan", "inf", "past any date"],
)
def test_a_retry_after_that_is_no_time_at_all_is_ignored_or_given_up_on(
    any_store: agentrt.Store, retry_after: float, reason: str, sleeps: list[float]
) -> None:
    store = any_store
    model = FakeModel(TransientModelError("overloaded", retry_after=retry_after), reply())
    config = ModelConfig(model=model, prices=PRICE, max_retries=1, backoff=timedelta(0))
    with recorded_sleeps() as slept:
        run = drive(store, model, config=config)
    assert run.reason == reason, run.reason_detail
    assert slept == sleeps
    assert calls(store, run.id)[0][:2] == (1, "error")


def test_a_long_run_of_transient_errors_does_not_overflow_the_backoff(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    retries = 60
    model = FakeModel(*[TransientModelError("overloaded") for _ in range(retries)], reply())
    config = ModelConfig(
        model=model, prices=PRICE, max_retries=retries, backoff=timedelta(seconds=1)
    )
    with recorded_sleeps() as slept:
        run = drive(store, model, config=config)
    # The backoff doubles until it would pass any date: given up there, not crashed.
    assert run.reason == "model_unavailable", run.reason_detail
    assert 40 < len(slept) < retries and slept[:3] == [1.0, 2.0, 4.0]
    assert len(model.requests) == len(slept) + 1
