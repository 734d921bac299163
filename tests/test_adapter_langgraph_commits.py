"""A LangGraph call gives its run's lease back in the commit recording its outcome (decision 0131).

The adapter attaches the turn's run for each tool call and closes the session once the
call is recorded, leaving the run RUNNING for the next call (LangGraph tells a node
nothing when the graph stops). The close gave the lease back in a commit of its own;
now the outcome's commit does it, and taking the free lease commits with `run.resumed`
(nothing is in doubt: decision 0152), so a call makes three commits (the take, the step's
two), not five, and a graph stopped after a call leaves the run free for any worker at
once, as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

import agentrt
from agentrt._session import run_sync


class Commits:
    """Counts the commits of `store`: each transaction, and each group of transactions."""

    def __init__(self, store: agentrt.Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made = 0
        lone, group = store.transaction, store.transactions

        @contextlib.contextmanager
        def transaction(*args: Any, **kwargs: Any) -> Iterator[Any]:
            with lone(*args, **kwargs) as tx:
                yield tx
            self.made += 1

        def transactions(works: Any) -> Any:
            outcomes = group(works)
            self.made += 1
            return outcomes

        monkeypatch.setattr(store, "transaction", transaction)
        monkeypatch.setattr(store, "transactions", transactions)

    def take(self) -> int:
        made, self.made = self.made, 0
        return made


def test_a_call_makes_three_commits_and_its_last_gives_the_lease_back(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = any_store
    pytest.importorskip("langgraph.prebuilt", reason="needs agentrt[langgraph]")
    from support.adapters.langgraph_graphs import read_pages

    calls = 5
    commits: list[int] = []
    counted = Commits(store, monkeypatch)
    leases: list[tuple[str, str]] = []

    def on_call() -> None:
        commits.append(counted.take())  # the commits before this call's tool ran
        (run,) = store.list_runs()
        lease = store.lease_state(run.id)
        assert lease is not None
        leases.append((lease.status, lease.owner))

    read_pages(store, calls, on_call, lease_owner="worker")
    commits.append(counted.take())
    # Before the first call's tool: the run created, the step's first commit. Before each
    # later call's: the last call's outcome (which gave the lease back), taking the lease
    # with `run.resumed`, and this step's first commit. After the last: its outcome alone.
    assert commits == [2] + [3] * (calls - 1) + [1]
    # Each call's tool ran under the lease; the graph over, the run is RUNNING and free.
    assert all(status == "RUNNING" and owner.startswith("worker/") for status, owner in leases)
    (run,) = store.list_runs()
    after = store.lease_state(run.id)
    assert after is not None and (after.status, after.owner) == ("RUNNING", "")
    # The events are those of a call whose close gave the lease back (a lease nobody
    # holds is taken without `lease.taken_over`): only their commits changed.
    events = [e.type for e in store.list_events(run.id, cap=None)]
    call = ["step.started", "step.decided", "step.policy", "step.tool_started"]
    call.append("step.tool_finished")
    assert events == ["run.created", "run.started", *call] + ["run.resumed", *call] * (calls - 1)


def test_a_session_that_gave_its_lease_back_with_an_outcome_claims_no_step(
    store: agentrt.Store,
) -> None:
    """`_execute_then_close` is for a caller that closes next: a step claimed after it is
    refused in one sentence, and nothing more is written."""

    @agentrt.tool(side_effect=agentrt.SideEffect.READ_ONLY, timeout=30)
    def look(n: int) -> dict[str, object]:
        """Look at page n."""
        return {"n": n}

    gate = agentrt.Gate(store=store, policy=agentrt.default_policy(), tools=[look])
    session = gate.begin_sync("look", agentrt.Limits(max_steps=5))
    step = session.step_sync()
    assert step is not None
    assert step.propose_sync(agentrt.Decision.tool_call("look", {"n": 1})).outcome == "allowed"
    run_sync(step._execute_then_close())
    lease = store.lease_state(session.run_id)
    assert lease is not None and (lease.status, lease.owner) == ("RUNNING", "")
    events = len(store.list_events(session.run_id, cap=None))
    with pytest.raises(agentrt.RunStateError, match="given back with the last call's outcome"):
        session.step_sync()
    session.close_sync()
    assert len(store.list_events(session.run_id, cap=None)) == events
    after = store.lease_state(session.run_id)
    assert after is not None and (after.status, after.owner) == ("RUNNING", "")
