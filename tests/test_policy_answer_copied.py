"""A policy's allowed answer is recorded as it was given (decision 0138).

Found by an attack, on the old code: a policy's allowed answer is recorded from the
policy's own objects:

`ask_policy` validates the `PolicyDecision` and keeps `result.to_json()`, whose
`capability` and `presentation` are the policy's own objects, for the `step.policy`
written by `execute`, later. A policy that reuses one capability dict (shared by the
runs it judges, say) and changes it before `execute`:

- changes what `step.policy` records the policy answered (verbatim lost), and
- if the new value is not usable JSON, makes `execute` raise a bare `JSONValueError`
  with nothing run; the step stays `deciding` in the record (its decision written by
  nothing) while the same session goes on to claim and run step 1 beside it.
"""

from __future__ import annotations

import agentrt
from agentrt import Decision, PolicyDecision, SideEffect
from conftest import Ids, RecordingTool
from support.gates import make_gate, open_step
from support.policies import FixedPolicy


def test_step_policy_records_the_capability_the_policy_returned(
    any_store: agentrt.Store,
) -> None:
    capability = {"amount": 1}
    policy = FixedPolicy(PolicyDecision(outcome="allow", reason="ok", capability=capability))
    gate = make_gate(any_store, RecordingTool("read", SideEffect.READ_ONLY), policy=policy)
    session, step = open_step(gate, "read")
    assert step.propose_sync(Decision.tool_call("read", {"x": 1})).outcome == "allowed"
    capability["amount"] = 1000  # the policy's shared dict, changed for another run
    step.execute_sync()
    session.close_sync()
    [stored] = any_store.list_steps(session.run.id)
    assert stored.policy is not None
    assert stored.policy.capability == {"amount": 1}, stored.policy
    [event] = [e for e in any_store.list_events(session.run.id) if e.type == "step.policy"]
    assert event.payload["decision"]["capability"] == {"amount": 1}


def test_a_capability_soured_after_the_verdict_leaves_no_step_deciding_behind(
    any_store: agentrt.Store,
) -> None:
    capability: dict[str, object] = {"amount": 1}
    policy = FixedPolicy(PolicyDecision(outcome="allow", reason="ok", capability=capability))
    read = RecordingTool("read", SideEffect.READ_ONLY)
    gate = make_gate(any_store, read, policy=policy, ids=Ids("b"))
    session, step = open_step(gate, "read")
    assert step.propose_sync(Decision.tool_call("read", {"x": 1})).outcome == "allowed"
    capability["amount"] = float("nan")  # what was recorded at the verdict still runs
    step.execute_sync()
    capability["amount"] = 2
    nxt = session.step_sync()
    assert nxt is not None
    assert nxt.propose_sync(Decision.tool_call("read", {"x": 2})).outcome == "allowed"
    nxt.execute_sync()
    session.close_sync()
    statuses = [(s.index, str(s.status)) for s in any_store.list_steps(session.run.id)]
    assert statuses == [(0, "done"), (1, "done")]
    policies = [s.policy for s in any_store.list_steps(session.run.id)]
    assert [p.capability for p in policies if p is not None] == [{"amount": 1}, {"amount": 2}]
