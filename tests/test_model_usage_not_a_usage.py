"""A reply whose `usage` is not a `Usage` is an implausible reply (decision 0139).

Found by an attack: it crashed the accounting caller.

models.md: implausible usage is recorded `error`, charged the conservative estimate,
not retried, and the run ends `model_unavailable`. `_send` already handles a reply
that is not a `ModelResponse` that way ("the model returned something other than a
ModelResponse"), but a `ModelResponse` whose `usage` is None, a dict or a number (a
hand-written adapter forgetting to build a `Usage`) makes `usage_problem` raise
AttributeError outside every handler. The attempt is left `dispatched` (charged only
later, by the run's ending, as "its outcome was never recorded" although the reply
arrived), and the run ends `agent_error` with "AttributeError: 'NoneType' object has
no attribute 'plausible'".
"""

from __future__ import annotations

from typing import Any

import pytest

import agentrt
from support.models import FakeModel, calls, drive, reply


@pytest.mark.parametrize(
    ("usage", "named"),
    [(None, "NoneType"), ({"input_tokens": 10, "output_tokens": 5}, "dict"), (15, "int")],
    ids=["none", "dict", "int"],
)
def test_a_reply_whose_usage_is_not_a_usage_is_an_implausible_reply(
    any_store: agentrt.Store, usage: Any, named: str
) -> None:
    store = any_store
    response = reply()
    object.__setattr__(response, "usage", usage)  # what a careless adapter builds
    model = FakeModel(response)
    run = drive(store, model)
    assert (run.status, run.reason) == ("FAILED", "model_unavailable"), run.reason_detail
    assert "AttributeError" not in run.reason_detail
    # The reply arrived: the attempt is an `error` charged at its estimate, settled by
    # the caller itself, not swept up as an outcome never recorded.
    (attempt,) = store.list_model_calls(run.id)
    assert attempt.status == "error"
    assert attempt.error == f"the reported usage is a {named}, not a Usage"
    assert calls(store, run.id)[0][4] == run.estimated_cost_micros > 0
