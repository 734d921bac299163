"""An int subclass is recorded, shown and passed as its own value (decision 0138).

Found by an attack, on the old code: an int subclass's own `__int__` decides the number recorded:

`_canonical` reads a str subclass with `str.__str__` and a float subclass with
`float.__repr__` (the value itself, never the subclass's methods), but an int subclass
with `int(value)`, which calls the subclass's `__int__`. An agent's `Lie(5)` (an int
equal to 5, printing 5) is recorded, shown to the policy and passed to the tool as 0:
the decision is not recorded verbatim, and nothing says it was changed.
"""

from __future__ import annotations

import agentrt
from agentrt import Decision, PolicyDecision, SideEffect
from conftest import RecordingTool
from support.gates import make_gate, open_step
from support.policies import FixedPolicy


class Lie(int):
    def __int__(self) -> int:
        return 0


def test_an_int_subclass_is_recorded_as_its_own_value(any_store: agentrt.Store) -> None:
    amount = Lie(5)
    assert amount == 5 and repr(amount) == "5"
    pay = RecordingTool("pay", SideEffect.LOCAL_MUTATION, schema={"type": "object"})
    gate = make_gate(any_store, pay, policy=FixedPolicy(PolicyDecision.allow()))
    session, step = open_step(gate, "pay five")
    verdict = step.propose_sync(Decision.tool_call("pay", {"amount": amount}))
    if verdict.outcome == "allowed":
        step.execute_sync()
    session.close_sync()
    [stored] = any_store.list_steps(session.run.id)
    assert stored.decision is not None
    # Either kept as 5, or refused as unusable; never silently 0.
    assert stored.decision.args != {"amount": 0}, "recorded 0 for the agent's 5"
    assert all(call.args != {"amount": 0} for call in pay.calls), "the tool was paid 0"
