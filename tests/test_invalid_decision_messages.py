"""An invalid decision's error is bounded and escaped (decision 0138).

Found by an attack, on the old code: an invalid decision's error echoes unbounded, unescaped text:

The error is the `invalid_decision` observation the model is shown. It quotes the
decision's tool name, kind or origin whole (`{value!r}`, 2 MB in, 2 MB out), schema
errors carry `error.json_path` unclipped and unescaped (a raw ESC from a property
name reaches the message), and every schema error is joined into one message (100,000
of them: about 4 MB; the 1,000 sent here, about 40 KB). Messages should be bounded and
escape control characters.
"""

from __future__ import annotations

import pytest

import agentrt
from agentrt import Decision, PolicyDecision, SideEffect
from conftest import RecordingTool
from support.gates import make_gate
from support.policies import FixedPolicy

_LIMIT = 8_192  # generous: one clear sentence is far shorter

CASES = {
    "huge_tool_name": Decision.tool_call("x" * 2_000_000, {}),
    "huge_kind": Decision(kind="k" * 2_000_000),
    "huge_origin": Decision(kind="complete", origin="o" * 2_000_000),
    "control_char_key": Decision.tool_call("t", {"\x1b[2J" + "K" * 100: "s"}),
    "huge_key": Decision.tool_call("t", {"K" * 2_000_000: "s"}),
    # 1,000 errors joined whole are about 40,000 characters, five times `_LIMIT`: as many
    # as it takes to show they are not all joined (100,000 cost seconds, proving no more).
    "many_errors": Decision.tool_call("t", {f"k{i}": "s" for i in range(1_000)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_invalid_decision_error_is_bounded_and_escaped(any_store: agentrt.Store, case: str) -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    tool = RecordingTool("t", SideEffect.READ_ONLY, schema=schema)
    gate = make_gate(any_store, tool, policy=FixedPolicy(PolicyDecision.allow()))
    session = gate.begin_sync("g")
    step = session.step_sync()
    assert step is not None
    verdict = step.propose_sync(CASES[case])
    session.close_sync()
    assert verdict.outcome == "denied" and verdict.observation is not None
    error = verdict.observation.content["error"]
    assert len(error) <= _LIMIT, f"{case}: error of {len(error)} characters: {error[:100]!r}"
    assert not any(ord(c) < 0x20 for c in error), f"{case}: raw control character: {error!r}"
