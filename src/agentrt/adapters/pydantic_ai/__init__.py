"""Pydantic AI tool calls behind agentrt's Gate (`pip install 'agentrt[pydantic-ai]'`).

```python
gate = AgentrtGate(store=store, policy=agentrt.default_policy(), classifications={
    "list_branches": Classification("read_only", timeout=5),
    "push_branch": Classification("remote_mutation", timeout=30),
})
agent = Agent(model, output_type=[str, DeferredToolRequests], capabilities=[gate])
meta = gate.run_metadata()                      # keep it beside the message history
result = await agent.run("publish the branch", metadata=meta)
# result.output is DeferredToolRequests: a person approves the exact request
# (`agentrt approve RUN`, or `approved(result.output, call_id, by=...)`), then:
result = await agent.run(message_history=result.all_messages(),
                         deferred_tool_results=results, metadata=meta)
```

Or, for a program happy to wait: `AgentrtGate(..., wait_for_person=True)`
waits inside the run until a person decides (`agentrt approve` from any
process), with no `DeferredToolRequests` and no resume loop (decision 0058).

`agent.run_stream`, `run_stream_sync`, `iter` and `run_stream_events` go
through the same Gate; the output completes the agentrt run as soon as it is
read, with or without a context manager (decision 0059). A call the model
makes after one that waits for a person, in the same response, is held:
deferred beside it (metadata `held_behind`), judged in its turn when the run
continues. Output functions are refused (`ConfigError`): make them tools. So
are native tools (web search, code execution, ...), which run at the model's
provider, outside the Gate, and external tools (`ExternalToolset`), whose
calls Pydantic AI hands back to the program; Pydantic AI's tool search over
the agent's own tools is let through.

See docs/adapters.md ("Pydantic AI") and docs/decisions/0040, 0051, 0058, 0059.
"""

from __future__ import annotations

try:
    import pydantic_ai  # noqa: F401
except ImportError as exc:
    raise ImportError(
        "agentrt.adapters.pydantic_ai needs Pydantic AI: pip install 'agentrt[pydantic-ai]'"
    ) from exc

from agentrt.adapters import Classification, UnclassifiedToolError

from ._approvals import approved
from ._capability import AgentrtGate
from ._run import RUN_ID_KEY, GateLimitExceeded, RunEndedError

__all__ = [
    "RUN_ID_KEY",
    "AgentrtGate",
    "Classification",
    "GateLimitExceeded",
    "RunEndedError",
    "UnclassifiedToolError",
    "approved",
]

for _name in __all__:
    _value = globals()[_name]
    if getattr(_value, "__module__", "").startswith(f"{__name__}._"):
        _value.__module__ = __name__
