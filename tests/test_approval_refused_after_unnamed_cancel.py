"""Review of decision 0161: a decision refused because the run was cancelled says so.

`expired_words` took a cancel for a lapse when the cancel recorded no name (`by=""`, which
`agentrt.cancel` accepted until decision 0162, so records made before it may hold one): the
refusal said the approval "expired at" its expiry, a time still to come, though nothing ran
out: an operator cancelled the run.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import agentrt
from agentrt import Decision, Limits, SideEffect
from agentrt.scripted import ScriptedAgent
from conftest import RecordingTool


def test_a_decision_refused_after_an_unnamed_cancel_says_the_run_was_cancelled(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("push", {"x": 1})]),
        policy=agentrt.default_policy(),
        tools=[push],
    )
    run = driver.start_sync("push it", Limits(approval_ttl=timedelta(days=1)))
    (approval,) = store.pending_approvals(run.id)
    assert approval.expires_at is not None
    # No name given, as `agentrt.cancel` allowed before decision 0162: the record keeps none.
    with store.transaction() as tx:
        tx.cancel_run(run.id, "", "", datetime.now(UTC))
    for decide in (agentrt.approve, agentrt.reject):
        with pytest.raises(agentrt.ApprovalExpiredError) as refused:
            decide(store, run.id, approval.id, "ann", shown_hash=approval.hash)
        message = str(refused.value)
        assert "cancelled" in message, message
        assert "expired at" not in message, message  # its time has not run out
    assert push.calls == []
