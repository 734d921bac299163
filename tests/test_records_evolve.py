"""`evolve`: `dataclasses.replace` for a Run or a Step without a second `__init__`."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from agentrt import Decision, Limits, Run, Step
from agentrt._records import evolve

AT = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
RUN = Run("r1", "g", "RUNNING", "", "", Limits(), 3, AT, AT, None, {"x": [1]})
STEP = Step("s1", "r1", 0, "deciding", None, None, None, AT, None)


def test_evolve_gives_what_dataclasses_replace_gives() -> None:
    for record, changes in (
        (RUN, {"step_count": 4, "status": "COMPLETED"}),
        (STEP, {"decision": Decision.complete({"a": 1}), "status": "done"}),
        (STEP, {}),
    ):
        new = evolve(record, **changes)
        assert type(new) is type(record) and new is not record
        assert repr(new) == repr(dataclasses.replace(record, **changes))  # type: ignore[arg-type]
    assert repr(RUN) == repr(
        Run("r1", "g", "RUNNING", "", "", Limits(), 3, AT, AT, None, {"x": [1]})
    )


def test_evolve_refuses_a_name_that_is_not_a_field_and_runs_init_for_other_records() -> None:
    with pytest.raises(TypeError):
        evolve(STEP, nope=1)
    from agentrt._errors import ConfigError

    with pytest.raises(ConfigError):  # Limits checks its fields in __post_init__
        evolve(Limits(), max_steps=0)
