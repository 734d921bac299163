"""The OpenAI Agents SDK behind the Gate: `agentrt.adapters.openai_agents`.

    gated = gate_agent(agent, store=store, policy=policy, classifications={...})
    result = await Runner.run(gated.agent, "publish the login branch")

Every function-tool call of the agent is recorded verbatim, checked against
its schema and put to the policy; `require_approval` surfaces as the SDK's own
interruption (`result.interruptions`, `RunState.approve`), bound by hash to the
request; a call cut off by a crash waits for a person. Installed by
`agentrt[openai-agents]`; see docs/adapters.md and decision 0042.
"""

from __future__ import annotations

from .._classify import Classification, UnclassifiedToolError
from ._errors import (
    ApprovalPendingError,
    InterruptedSideEffectError,
    RequestChangedError,
    RunEndedError,
)
from ._gated import GatedAgent, gate_agent

__all__ = [
    "ApprovalPendingError",
    "Classification",
    "GatedAgent",
    "InterruptedSideEffectError",
    "RequestChangedError",
    "RunEndedError",
    "UnclassifiedToolError",
    "gate_agent",
]

for _name in (
    "ApprovalPendingError",
    "RunEndedError",
    "GatedAgent",
    "InterruptedSideEffectError",
    "RequestChangedError",
    "gate_agent",
):
    globals()[_name].__module__ = __name__
