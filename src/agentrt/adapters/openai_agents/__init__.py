"""The OpenAI Agents SDK behind the Gate: `agentrt.adapters.openai_agents`.

    gated = gate_agent(agent, store=store, policy=policy, classifications={...})
    run = gated.new_run()                      # keep run.run_id beside the RunState
    result = await run.run_agent("publish the login branch")   # Runner.run(run.agent, ...)
    ...
    run = gated.resume(saved_run_id)           # in any process: the same agentrt run
    result = await run.run_agent(await run.load_state(saved_state))
    async for event in run.run_agent_streamed("...").stream_events(): ...   # streamed
    result = gated.new_run().run_agent_sync("...", wait_for_person=True)    # waits, then goes on

Every function-tool call of the agent is recorded verbatim, checked against
its schema and put to the policy; `require_approval` surfaces as the SDK's own
interruption (`result.interruptions`, `RunState.approve`), bound by hash to the
request; a call made beside one that waits is held (`run.held(result)`) and
judged in its turn; a call cut off by a crash waits for a person. Installed by
`agentrt[openai-agents]`; see docs/adapters.md and decision 0042.
"""

from __future__ import annotations

try:
    import agents  # noqa: F401
except ImportError as exc:
    raise ImportError(
        "agentrt.adapters.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'agentrt[openai-agents]'"
    ) from exc

from agentrt.adapters import Classification, UnclassifiedToolError

from ._errors import (
    ApprovalPendingError,
    InterruptedSideEffectError,
    RequestChangedError,
    RunEndedError,
    RunMismatchError,
    RunNotNamedError,
)
from ._gated import GatedAgent, GatedRun, HeldCall, gate_agent

__all__ = [
    "ApprovalPendingError",
    "Classification",
    "GatedAgent",
    "GatedRun",
    "HeldCall",
    "InterruptedSideEffectError",
    "RequestChangedError",
    "RunEndedError",
    "RunMismatchError",
    "RunNotNamedError",
    "UnclassifiedToolError",
    "gate_agent",
]

for _name in (
    "ApprovalPendingError",
    "RunEndedError",
    "GatedAgent",
    "GatedRun",
    "HeldCall",
    "InterruptedSideEffectError",
    "RequestChangedError",
    "RunMismatchError",
    "RunNotNamedError",
    "gate_agent",
):
    globals()[_name].__module__ = __name__
