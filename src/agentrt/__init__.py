"""agentrt: a durable runtime for AI agents that take real actions.

The model proposes; the runtime decides, records and enforces. Everything it
knows lives in one SQLite file; every state change and its audit event commit
in one fsynced transaction; an approval is bound by hash to the exact request;
a running run is leased to one process; and an interrupted side effect is
never run again on the runtime's own say.

The public surface is re-exported here; submodules own one concept each.
Every name in `__all__` is imported the first time it is used (`agentrt.Run`,
`from agentrt import Run`), not by `import agentrt`, so a process pays for the
parts it touches (docs/decisions/0090). The documented submodules
(`agentrt.scripted`, `agentrt.testkit`, `agentrt.replay`, `agentrt.export`,
`agentrt.trace`, ...) are reachable as attributes the same way
(docs/decisions/0020). `dir(agentrt)` lists the public names and those
submodules, nothing internal.

Invariant (docs/decisions/0034): a public class or function defined in a
private module says `agentrt` in its `__module__`, whichever import reached its
module first: the module that defines it claims it as soon as it has run
(`_ClaimingLoader`), not when `agentrt.X` is first read.
"""

from __future__ import annotations

import importlib as _importlib
import sys as _sys
from importlib.machinery import SourceFileLoader as _SourceFileLoader

# `typing` is not imported at run time (it costs more than this whole module):
# type checkers treat a name `TYPE_CHECKING` as true, the interpreter sees False.
TYPE_CHECKING = False
if TYPE_CHECKING:  # what `_EXPORTS` imports at first use, for type checkers and editors
    from collections.abc import Sequence
    from types import ModuleType
    from typing import Any

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
    from ._gate import Gate, GateSession, GateStep, Verdict
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
    from ._policy import (
        Policy,
        SideEffectPolicy,
        decode_presentation,
        default_policy,
        need_approval,
    )
    from ._recheck import (
        RecheckedEvaluation,
        RecheckReport,
        RecheckVerdict,
        recheck,
        recheck_async,
    )
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
    from ._session import VerdictOutcome
    from ._store import RUNTIME_VERSION, open_existing, open_store
    from ._store._base import Store
    from ._tools import Tool, check_args, compile_tool, tool
    from .model_agent import ModelAgent
    from .recover import RecoverAction, Recovered

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


_FROM: dict[str, tuple[str, ...]] = {
    "._approval": ("approval_hash", "approval_request"),
    "._canonical": ("canonical_json", "check_json", "content_hash", "policy_json"),
    "._driver": ("Agent", "Driver"),
    "._errors": (
        "AbortRun",
        "AgentrtError",
        "AmbiguousRunIdError",
        "ApprovalChangedError",
        "ApprovalExpiredError",
        "ApprovalHashError",
        "ConfigError",
        "ForeignRunError",
        "HardLinkError",
        "InsecureDirectoryError",
        "InsecureModeError",
        "JSONValueError",
        "LeaseLostError",
        "LimitExceeded",
        "MCPAnswerRefused",
        "MCPInputRequired",
        "MCPServerError",
        "MCPToolError",
        "ModelUnavailableError",
        "NotFoundError",
        "NotPendingError",
        "OutcomeUnknown",
        "RunFinishedError",
        "RunLeasedError",
        "RunStateError",
        "SchemaVersionError",
        "ServedModelError",
        "SessionClosedError",
        "StoreBusyError",
        "StoreDamagedError",
        "StoreError",
        "SymlinkError",
        "ToolNameError",
        "TransientModelError",
        "UnreadableSchemaError",
        "UnsafePatternError",
        "UnsafeSchemaError",
    ),
    "._gate": ("Gate", "GateSession", "GateStep", "Verdict"),
    "._model": (
        "ContentBlock",
        "Message",
        "Model",
        "ModelConfig",
        "ModelRequest",
        "ModelResponse",
        "Price",
        "PriceTable",
        "TextBlock",
        "ToolResultBlock",
        "ToolUseBlock",
        "UnpricedModelError",
        "Usage",
        "parse_dollars",
    ),
    "._operator": ("Operator", "approve", "cancel", "reject"),
    "._policy": (
        "Policy",
        "SideEffectPolicy",
        "decode_presentation",
        "default_policy",
        "need_approval",
    ),
    "._recheck": (
        "RecheckReport",
        "RecheckVerdict",
        "RecheckedEvaluation",
        "recheck",
        "recheck_async",
    ),
    "._records": (
        "Approval",
        "ApprovalStatus",
        "ChainBreak",
        "Decision",
        "DecisionKind",
        "DecisionOrigin",
        "Event",
        "FileCheck",
        "Lease",
        "Limits",
        "ModelCallRecord",
        "ModelCallStatus",
        "Observation",
        "ObservationKind",
        "PolicyDecision",
        "PolicyOutcome",
        "ReconcileAnswer",
        "ReconcileOutcome",
        "Reconciled",
        "Reconciliation",
        "Run",
        "RunStatus",
        "RunView",
        "SideEffect",
        "Step",
        "StepInput",
        "StepStatus",
        "TerminalReason",
        "ToolCall",
        "ToolRequest",
        "ToolResult",
        "ToolSpec",
        "VerifyReport",
        "operation_id",
    ),
    "._session": ("VerdictOutcome",),
    "._store": ("open_existing", "open_store"),
    "._store._base": ("Store",),
    "._tools": ("Tool", "check_args", "compile_tool", "tool"),
    ".model_agent": ("ModelAgent",),
    ".recover": ("RecoverAction", "Recovered"),
}
"""Where each name of `__all__` is defined, as the `TYPE_CHECKING` imports above say (a test
keeps the two and `__all__` equal). A name is imported from its module the first time it
is used, so `import agentrt` loads none of these modules (decision 0090)."""

_EXPORTS = {name: module for module, names in _FROM.items() for name in names}

_VERSION_NAMES = ("RUNTIME_VERSION", "__version__")
"""Reachable, not listed: the runtime version the file format records, read at first use."""

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


def _claim(names: Sequence[str], namespace: dict[str, Any]) -> None:
    # httpx style: a public class or function says it lives in `agentrt`, not in
    # the private module that defines it, so reprs, tracebacks and pickles name
    # the door users import from (docs/decisions/0034). Type aliases such as
    # `ContentBlock` are neither a class nor a function and are left alone.
    for name in names:
        value = namespace.get(name)
        if (isinstance(value, type) or type(value) is _FunctionType) and getattr(
            value, "__module__", ""
        ).startswith(f"{__name__}._"):
            value.__module__ = __name__


def _function() -> None: ...


_FunctionType = type(_function)  # `types.FunctionType`, without importing `types`
del _function


_CLAIMED_BY = {f"{__name__}{module}": names for module, names in _FROM.items() if "._" in module}
"""The private modules that define public names, by full name."""


class _ClaimingLoader(_SourceFileLoader):
    """Runs a private module that defines public names, then claims them (decision 0034)."""

    def exec_module(self, module: ModuleType) -> None:
        super().exec_module(module)
        _claim(_CLAIMED_BY[module.__name__], vars(module))


class _ClaimingFinder:
    """Finds a module of `_CLAIMED_BY` the way the finders after it would, and hands it to a
    `_ClaimingLoader` when it is loaded from source; any other module it leaves alone.

    It sits first in `sys.meta_path`, installed by `import agentrt`, which every import of
    a submodule runs first: so the module that defines `Run` claims it whether `agentrt.Run`
    or `agentrt.testkit` (through `agentrt._records`) reached it first. A module loaded some
    other way (bytecode only, a zip) is claimed when `agentrt.X` is first read. What it uses
    is held on the class, so it keeps working while the interpreter tears modules down."""

    agentrt_claims = True
    """Marks the finder in `sys.meta_path`: a reload of `agentrt` replaces it, never stacks."""
    claimed = _CLAIMED_BY
    sys = _sys
    source_loader = _SourceFileLoader
    claiming_loader = _ClaimingLoader

    @classmethod
    def find_spec(
        cls, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        if fullname not in cls.claimed:
            return None
        for finder in cls.sys.meta_path:
            if getattr(finder, "agentrt_claims", False) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            if type(spec.loader) is cls.source_loader:
                spec.loader = cls.claiming_loader(spec.loader.name, spec.loader.path)
            return spec
        return None


_sys.meta_path[:] = [
    _ClaimingFinder,
    *(finder for finder in _sys.meta_path if not getattr(finder, "agentrt_claims", False)),
]


def __getattr__(name: str) -> Any:
    # PEP 562: reached only for names the module does not already hold; each is then
    # stored here, so it is looked up once.
    if name in _EXPORTS:
        module = _importlib.import_module(_EXPORTS[name], __name__)
        value = vars(module)[name]
        _claim((name,), vars(module))
        globals()[name] = value
        return value
    if name in _VERSION_NAMES:
        from ._store import RUNTIME_VERSION

        globals().update(dict.fromkeys(_VERSION_NAMES, RUNTIME_VERSION))
        return RUNTIME_VERSION
    if name in _SUBMODULES or (name.startswith("_") and not name.startswith("__")):
        # A documented submodule, or (undocumented, for tests and maintainers) a private
        # one: reachable as an attribute, imported at first use as before (decision 0020).
        try:
            return _importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*__all__, *_SUBMODULES, "__version__"})
