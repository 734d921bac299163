"""A lease length past a hundred years is refused when the Driver or Gate is made.

The expiry is the lease clock's time plus the length; one past the last date a
timestamp can hold raised `OverflowError` from inside the run's first transaction,
at `start`, long after the configuration that caused it. Durations are bounded as
limits are (`MAX_DURATION_LIMIT`, about a hundred years): the longest allowed lease
still runs.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import agentrt
from agentrt import ConfigError, Decision, SideEffect
from agentrt._records import MAX_DURATION_LIMIT
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool


def make(kind: str, store: agentrt.Store, ttl: timedelta) -> object:
    tools = [RecordingTool("lookup", SideEffect.READ_ONLY)]
    if kind == "gate":
        return agentrt.Gate(store, agentrt.default_policy(), tools, lease_ttl=ttl)
    return agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.complete({"ok": True})]),
        policy=agentrt.default_policy(),
        tools=tools,
        now=FakeClock(),
        new_id=Ids(),
        lease_ttl=ttl,
    )


@pytest.mark.parametrize("kind", ["driver", "gate"])
@pytest.mark.parametrize(
    "ttl",
    [MAX_DURATION_LIMIT + timedelta(microseconds=1), timedelta(days=4_000_000), timedelta.max],
    ids=["just-past", "past-year-9999", "max"],
)
def test_a_lease_ttl_past_a_hundred_years_is_refused_when_made(
    any_store: agentrt.Store, kind: str, ttl: timedelta
) -> None:
    with pytest.raises(ConfigError, match="lease_ttl"):
        make(kind, any_store, ttl)
    assert any_store.list_runs() == []


def test_the_longest_lease_ttl_allowed_still_runs_a_run(any_store: agentrt.Store) -> None:
    driver = make("driver", any_store, MAX_DURATION_LIMIT)
    assert isinstance(driver, agentrt.Driver)
    run = driver.start_sync("goal")
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
