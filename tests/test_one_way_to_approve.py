"""Every public way to approve or reject is one implementation: `approval.decide`.

`agentrt.approve/reject`, `Operator`, `Driver.approve/reject` and the approver
channel `approver.Local` all decide through `agentrt._approval.decide`, so the
hash check, the shown-hash binding, the expiry and the events are the same
whichever door a person uses (decision 0029).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import agentrt
import agentrt._approval
from agentrt.approver import Decision as ApproverDecision
from agentrt.approver import Local
from support.approvals import paused_run

Door = Callable[[agentrt.Driver, agentrt.Store, agentrt.Run, agentrt.Approval, bool], Any]


def _function(
    d: agentrt.Driver, s: agentrt.Store, r: agentrt.Run, a: agentrt.Approval, ok: bool
) -> Any:
    act = agentrt.approve if ok else agentrt.reject
    return act(s, r.id, a.id, "alice", "n", shown_hash=a.hash)


def _operator(
    d: agentrt.Driver, s: agentrt.Store, r: agentrt.Run, a: agentrt.Approval, ok: bool
) -> Any:
    op = agentrt.Operator(s)
    return (op.approve if ok else op.reject)(r.id, a.id, "alice", "n", a.hash)


def _driver(
    d: agentrt.Driver, s: agentrt.Store, r: agentrt.Run, a: agentrt.Approval, ok: bool
) -> Any:
    return (d.approve if ok else d.reject)(r.id, a.id, "alice", "n", a.hash)


def _local(
    d: agentrt.Driver, s: agentrt.Store, r: agentrt.Run, a: agentrt.Approval, ok: bool
) -> Any:
    local = Local(s)
    decision = ApproverDecision(r.id, a.id, a.hash, "alice", "n")
    return (local.approve if ok else local.reject)(decision)


DOORS = {"agentrt.approve": _function, "Operator": _operator, "Driver": _driver, "Local": _local}


@pytest.mark.parametrize("approve", [True, False], ids=["approve", "reject"])
@pytest.mark.parametrize("door", list(DOORS))
def test_every_public_way_to_decide_goes_through_approval_decide_once(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch, door: str, approve: bool
) -> None:
    calls: list[tuple[str, str, bool]] = []
    real = agentrt._approval.decide

    def counted(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        approval = result[0]
        calls.append((approval.run_id, approval.id, approval.status == "approved"))
        return result

    # Patched where each door finds it: the one implementation is looked up by name.
    monkeypatch.setattr(agentrt._operator, "decide", counted)
    driver, run, _ = paused_run(any_store)
    (pending,) = any_store.pending_approvals(run.id)
    DOORS[door](driver, any_store, run, pending, approve)
    assert calls == [(run.id, pending.id, approve)]
    decided = any_store.get_approval(run.id, pending.id)
    assert (decided.status, decided.decided_by) == ("approved" if approve else "rejected", "alice")
