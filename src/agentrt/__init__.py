"""agentrt: a durable runtime for AI agents that take real actions.

The model proposes; the runtime decides, records and enforces. Everything it
knows lives in one SQLite file; every state change and its audit event commit
in one fsynced transaction; an approval is bound by hash to the exact request;
a running run is leased to one process; and an interrupted side effect is
never run again on the runtime's own say.

The public surface is re-exported here; submodules own one concept each.
The documented submodules (`agentrt.scripted`, `agentrt.testkit`,
`agentrt.replay`, `agentrt.export`, `agentrt.trace`, ...) are reachable as
attributes after `import agentrt`; each is imported the first time it is used,
so `import agentrt` pays for none of them (docs/decisions/0020). `dir(agentrt)`
lists the public names and those submodules, nothing internal.
"""

from __future__ import annotations

import importlib as _importlib
from types import FunctionType as _FunctionType
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from ._approval import approval_hash, approval_request
from ._canonical import canonical_json, check_json, content_hash, policy_json
from ._driver import Agent, Driver
from ._errors import (
    AbortRun,
    AgentrtError,
    AmbiguousRunIdError,
    ApprovalChangedError,
    ApprovalExpiredError,
    ApprovalHashError,
    ConfigError,
    ForeignRunError,
    HardLinkError,
    InsecureDirectoryError,
    InsecureModeError,
    JSONValueError,
    LeaseLostError,
    LimitExceeded,
    MCPAnswerRefused,
    MCPInputRequired,
    MCPServerError,
    MCPToolError,
    ModelUnavailableError,
    NotFoundError,
    NotPendingError,
    OutcomeUnknown,
    RunFinishedError,
    RunLeasedError,
    RunStateError,
    SchemaVersionError,
    ServedModelError,
    SessionClosedError,
    StoreBusyError,
    StoreDamagedError,
    StoreError,
    SymlinkError,
    ToolNameError,
    TransientModelError,
    UnreadableSchemaError,
    UnsafePatternError,
    UnsafeSchemaError,
)
from ._gate import Gate, GateSession, GateStep, Verdict, VerdictOutcome
from ._model import (
    ContentBlock,
    Message,
    Model,
    ModelConfig,
    ModelRequest,
    ModelResponse,
    Price,
    PriceTable,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnpricedModelError,
    Usage,
    parse_dollars,
)
from ._operator import Operator, approve, cancel, reject
from ._policy import Policy, SideEffectPolicy, decode_presentation, default_policy, need_approval
from ._records import (
    Approval,
    ApprovalStatus,
    ChainBreak,
    Decision,
    DecisionKind,
    DecisionOrigin,
    Event,
    FileCheck,
    Lease,
    Limits,
    ModelCallRecord,
    ModelCallStatus,
    Observation,
    ObservationKind,
    PolicyDecision,
    PolicyOutcome,
    ReconcileAnswer,
    Reconciled,
    ReconcileOutcome,
    Reconciliation,
    Run,
    RunStatus,
    RunView,
    SideEffect,
    Step,
    StepInput,
    StepStatus,
    TerminalReason,
    ToolCall,
    ToolRequest,
    ToolResult,
    ToolSpec,
    VerifyReport,
    operation_id,
)
from ._store import RUNTIME_VERSION, Store, open_existing, open_store
from ._tools import Tool, check_args, compile_tool, tool
from .model_agent import ModelAgent
from .recover import RecoverAction, Recovered

if _TYPE_CHECKING:  # imported at first use (`_LAZY`); type checkers see them here
    from ._recheck import (
        RecheckedEvaluation,
        RecheckReport,
        RecheckVerdict,
        recheck,
        recheck_async,
    )

__version__ = RUNTIME_VERSION  # one version: the one the file format records

__all__ = [
    "AbortRun",
    "Agent",
    "AgentrtError",
    "AmbiguousRunIdError",
    "Approval",
    "ApprovalChangedError",
    "ApprovalExpiredError",
    "ApprovalHashError",
    "ApprovalStatus",
    "ChainBreak",
    "ConfigError",
    "ContentBlock",
    "Decision",
    "DecisionKind",
    "DecisionOrigin",
    "Driver",
    "Event",
    "FileCheck",
    "ForeignRunError",
    "Gate",
    "GateSession",
    "GateStep",
    "HardLinkError",
    "InsecureDirectoryError",
    "InsecureModeError",
    "JSONValueError",
    "Lease",
    "LeaseLostError",
    "LimitExceeded",
    "Limits",
    "MCPAnswerRefused",
    "MCPInputRequired",
    "MCPServerError",
    "MCPToolError",
    "Message",
    "Model",
    "ModelAgent",
    "ModelCallRecord",
    "ModelCallStatus",
    "ModelConfig",
    "ModelRequest",
    "ModelResponse",
    "ModelUnavailableError",
    "NotFoundError",
    "NotPendingError",
    "Observation",
    "ObservationKind",
    "Operator",
    "OutcomeUnknown",
    "Policy",
    "PolicyDecision",
    "PolicyOutcome",
    "Price",
    "PriceTable",
    "RecheckReport",
    "RecheckVerdict",
    "RecheckedEvaluation",
    "ReconcileAnswer",
    "ReconcileOutcome",
    "Reconciled",
    "Reconciliation",
    "RecoverAction",
    "Recovered",
    "Run",
    "RunFinishedError",
    "RunLeasedError",
    "RunStateError",
    "RunStatus",
    "RunView",
    "SchemaVersionError",
    "ServedModelError",
    "SessionClosedError",
    "SideEffect",
    "SideEffectPolicy",
    "Step",
    "StepInput",
    "StepStatus",
    "Store",
    "StoreBusyError",
    "StoreDamagedError",
    "StoreError",
    "SymlinkError",
    "TerminalReason",
    "TextBlock",
    "Tool",
    "ToolCall",
    "ToolNameError",
    "ToolRequest",
    "ToolResult",
    "ToolResultBlock",
    "ToolSpec",
    "ToolUseBlock",
    "TransientModelError",
    "UnpricedModelError",
    "UnreadableSchemaError",
    "UnsafePatternError",
    "UnsafeSchemaError",
    "Usage",
    "Verdict",
    "VerdictOutcome",
    "VerifyReport",
    "approval_hash",
    "approval_request",
    "approve",
    "cancel",
    "canonical_json",
    "check_args",
    "check_json",
    "compile_tool",
    "content_hash",
    "decode_presentation",
    "default_policy",
    "need_approval",
    "open_existing",
    "open_store",
    "operation_id",
    "parse_dollars",
    "policy_json",
    "recheck",
    "recheck_async",
    "reject",
    "tool",
]


_LAZY = {
    name: "._recheck"
    for name in (
        "RecheckReport",
        "RecheckVerdict",
        "RecheckedEvaluation",
        "recheck",
        "recheck_async",
    )
}
"""Public names imported the first time they are used: re-checking is no part of a run, so
`import agentrt` does not pay for it (issue 19's start-up budget)."""


def _claim_public_names() -> None:
    # httpx style: a public class or function says it lives in `agentrt`, not in
    # the private module that defines it, so reprs, tracebacks and pickles name
    # the door users import from (docs/decisions/0034).
    for name in __all__:
        if name in _LAZY:
            continue  # claimed when first used (`__getattr__`)
        value = globals()[name]
        if isinstance(value, type | _FunctionType) and value.__module__.startswith(f"{__name__}._"):
            value.__module__ = __name__


_claim_public_names()


_SUBMODULES = frozenset(
    {
        "export",
        "model_agent",
        "providers",
        "recover",
        "render",
        "replay",
        "scripted",
        "testkit",
        "trace",
        "view",
    }
)
"""Submodules with a documented public surface of their own."""


def __getattr__(name: str) -> _Any:
    # PEP 562: reached only for names the module does not already hold.
    if name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name], __name__), name)
        if isinstance(value, type | _FunctionType):
            value.__module__ = __name__
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*__all__, *_SUBMODULES, "__version__"})
