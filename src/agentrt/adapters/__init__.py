"""Framework adapters: put every tool call of an agent framework through the Gate.

One subpackage per framework, each installed by its own extra and imported
only when used: `agentrt.adapters.pydantic_ai` (`agentrt[pydantic-ai]`),
`agentrt.adapters.openai_agents` (`agentrt[openai-agents]`),
`agentrt.adapters.langgraph` (`agentrt[langgraph]`). `import agentrt` and
`import agentrt.adapters` import no framework.

What every adapter shares lives here: the consumer's classification of each
framework tool (`Classification`: its side effect and timeout, as `agentrt.tool`
asks of our own tools, and optionally the tool's own reconciliation) and
`classify`, which refuses a tool nobody classified
(`UnclassifiedToolError`) and a classification that names no tool. A
framework's tool is never run behind the Gate on a guessed side effect.
When the agentrt run behind a framework run has ended (a limit, a cancel, a
rejection), every adapter raises a subclass of `RunEndedError`, which is also
that framework's own exception for a run that must stop. A framework tool
function reads the stable operation id of the call it runs for with
`current_operation_id()` (decision 0091).
See docs/adapters.md.
"""

from __future__ import annotations

from ._classify import (
    Classification,
    RunEndedError,
    UnclassifiedToolError,
    classify,
    ended_message,
    tool_spec,
)
from ._operation import current_operation_id

__all__ = [
    "Classification",
    "RunEndedError",
    "UnclassifiedToolError",
    "classify",
    "current_operation_id",
    "ended_message",
    "tool_spec",
]

for _name in __all__:
    _value = globals()[_name]
    if isinstance(_value, type) or callable(_value):
        _value.__module__ = __name__
