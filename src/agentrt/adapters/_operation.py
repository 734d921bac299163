"""What a framework's tool function is told about the call agentrt runs, shared by every adapter.

agentrt runs a framework's tool inside its Gate (`GateStep.execute`), through
the agentrt tool each adapter registers for it. That tool receives the
`ToolCall`, whose `operation_id` is the stable id of the step's request
(decision 0067): the same for every execution of that request on that step
(a re-run a person approved, or one the tool's reconciliation vouched for),
another on every other step. A framework's tool function is called by the
framework, with the framework's own arguments, so it is told the id the one
way that works the same in all three frameworks (decision 0091): a context
variable agentrt sets while the framework tool runs, read with
`current_operation_id()`.

Invariants: the variable is set only around one gated execution, in the
context the framework tool runs in (the frameworks copy the context into
the thread a plain-function tool runs on), and reset after it; outside a
gated call `current_operation_id()` raises `LookupError`, never answers an
id that is not this call's. A tool's reconciliation is not a gated execution:
it gets the `ToolCall` itself.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from agentrt import ToolCall

_CALL: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar(
    "agentrt_adapters_gated_call", default=None
)


def current_operation_id() -> str:
    """The operation id of the gated call running now, inside a framework's tool function.

    Equal to `agentrt.operation_id(run_id, step_id)` of the step running the
    call: send it as an `Idempotency-Key` header, or stamp it on what the tool
    creates, and give the tool's `Classification` a `reconcile` that looks the
    effect up by it. Raises `LookupError` when no gated call runs in this
    context (the function called outside a gated framework run).
    """
    call = _CALL.get()
    if call is None:
        raise LookupError(
            "no agentrt-gated tool call runs here: current_operation_id() answers only "
            "inside a framework tool that an agentrt adapter runs"
        )
    return call.operation_id


@contextlib.contextmanager
def running(call: ToolCall) -> Iterator[None]:
    """Within the block, `current_operation_id()` answers `call`'s operation id."""
    token = _CALL.set(call)
    try:
        yield
    finally:
        _CALL.reset(token)


def with_reconcile(tool: Any, reconcile: Any) -> Any:
    """`tool` (an adapter's agentrt tool) given the classification's `reconcile`, if any.

    The takeover asks a registered tool's `reconcile` attribute (decision
    0067); an adapter's tool has one only when its `Classification` gives one.
    """
    if reconcile is not None:
        tool.reconcile = reconcile
    return tool
