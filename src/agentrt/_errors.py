"""The exception hierarchy: every error agentrt raises derives from `AgentrtError`.

Each class names one refusal the runtime makes, so callers can catch exactly the
case they handle. Messages say what was refused and why, in one sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any


class AgentrtError(Exception):
    """Base class of every error raised by agentrt."""


class NotFoundError(AgentrtError):
    """No such run, step or approval."""


class RunStateError(AgentrtError):
    """The run is not in a state that allows this operation."""


class RunFinishedError(RunStateError):
    """The run has already ended: nothing in it can be decided or cancelled any more."""


class RunLeasedError(RunStateError):
    """Another owner holds a live lease on the run; nothing was changed."""

    def __init__(self, run_id: str, owner: str, expires_at: datetime | None) -> None:
        self.run_id = run_id
        self.owner = owner
        self.expires_at = expires_at
        when = expires_at.isoformat() if expires_at else "unknown"
        super().__init__(f"run {run_id} is leased by {owner!r} until {when}")


class ForeignRunError(RunStateError):
    """The run was begun by an integration (an adapter, the MCP proxy), not a Driver or Gate."""

    def __init__(self, run_id: str, origin: str) -> None:
        self.run_id = run_id
        self.origin = origin
        super().__init__(
            f"run {run_id} was begun by {origin!r}, not by a Driver or a plain Gate, so a "
            "Driver does not resume it: the program that began it continues it"
        )


class LeaseLostError(AgentrtError):
    """This loop no longer holds its lease; it stopped before the next side effect."""


class NotPendingError(AgentrtError):
    """The approval was already decided."""


class ApprovalExpiredError(NotPendingError):
    """The approval or the grant it gave has expired.

    `cancelled_by` names who cancelled the run when a cancel expired the approval
    (empty when its time ran out).
    """

    cancelled_by: str = ""


class ApprovalHashError(AgentrtError):
    """The stored approval no longer matches its hash: it was altered after it was made."""


class ApprovalChangedError(AgentrtError):
    """The approval differs from the one the operator was shown."""


class StoreError(AgentrtError):
    """The database cannot be used as asked (too old SQLite, WAL refused, bad path).

    `commit_unknown` is True for a commit that failed in a way that leaves unknown
    whether it was made (an I/O error at SQLite's `COMMIT`, a PostgreSQL connection lost
    during it): the record, read again, says.
    """

    commit_unknown: bool = False


def commit_unknown(message: str) -> StoreError:
    """A `StoreError` for a commit whose outcome is unknown (`commit_unknown`)."""
    error = StoreError(message)
    error.commit_unknown = True
    return error


_ID_KINDS = {"runs": "run", "steps": "step", "approvals": "approval", "model_calls": "model call"}


def repeated_id(table: str, value: object) -> StoreError | None:
    """The error of a new row of `table` whose id is already one of its rows' (an id factory
    that repeats ids), naming the id; None for a table whose ids the runtime does not draw."""
    kind = _ID_KINDS.get(table)
    if kind is None:
        return None
    text = str(value)
    shown = text if text.isascii() and text.isprintable() and len(text) <= 100 else repr(text)
    if len(shown) > 100:
        shown = shown[:100] + "..."
    return StoreError(
        f"the id {shown} given by the id factory (`new_id`) for a new {kind} is already the "
        f"id of a {kind} in the record: `new_id` must return a new id at every call; "
        "nothing of this transaction was written"
    )


class StoreBusyError(StoreError):
    """Another connection held the write lock past the busy timeout; nothing was written."""

    # Set when the server ended the transaction for a deadlock (PostgreSQL's 40P01) rather
    # than a wait past the timeout: what a caller that retried says once it stops.
    _deadlock: bool = False


def deadlock_error(message: str) -> StoreBusyError:
    """A `StoreBusyError` for a transaction the server ended for a deadlock (`is_deadlock`)."""
    error = StoreBusyError(message)
    error._deadlock = True
    return error


def is_deadlock(error: StoreBusyError) -> bool:
    """Whether `error` was a deadlock the server ended, not a wait past the busy timeout."""
    return error._deadlock


class StoreDamagedError(StoreError):
    """The storage itself could not read what it holds (a damaged page, a failed read)."""


class SchemaVersionError(StoreError):
    """The database was written by a newer (or, for `open_existing`, another) schema."""


class UnsafeSchemaError(StoreError):
    """The database holds a trigger or a view, which could run code on our writes."""


class UnreadableSchemaError(UnsafeSchemaError):
    """An entry of the database's schema is not readable text, or is not what its type says."""


class InsecureModeError(StoreError):
    """The file or a sidecar is writable by group or others, or owned by someone else."""


class SymlinkError(StoreError):
    """`open_existing` was given a symlink."""


class HardLinkError(StoreError):
    """The database file (or a sidecar) has more than one name: another hard link to it."""


class InsecureDirectoryError(InsecureModeError):
    """The database's directory is writable by group or others, or owned by someone else."""


class SessionClosedError(AgentrtError):
    """A gate session was used after close."""


class ConfigError(AgentrtError, ValueError):
    """A driver, tool, policy or limit was configured in a way the runtime refuses."""


class ToolNameError(ConfigError):
    """A tool name is not 1 to 64 ASCII letters, digits, `_` or `-` (what providers accept)."""


class UnsafePatternError(ConfigError):
    """A tool schema's regular expression cannot be checked in linear time as ECMA-262 reads it."""


class JSONValueError(AgentrtError, ValueError):
    """A value is not usable JSON (see `check_json`)."""


class LimitExceeded(AgentrtError):
    """A model limit refused a call before dispatch."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


class ModelUnavailableError(AgentrtError):
    """The model could not be reached or served unusable output."""


class TransientModelError(AgentrtError):
    """Raised by model adapters: a failure worth retrying, maybe after `retry_after`."""

    def __init__(self, message: str = "", retry_after: Any = None) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class ServedModelError(AgentrtError):
    """Raised by model adapters: the model served a reply that cannot be used (charged)."""

    def __init__(self, message: str = "", usage: Any = None) -> None:
        self.usage = usage
        super().__init__(message)


class AmbiguousRunIdError(NotFoundError):
    """A shortened run id matches more than one run; `candidates` lists some of them."""

    def __init__(self, prefix: str, candidates: Sequence[str], more: bool = False) -> None:
        self.prefix = prefix
        self.candidates = tuple(candidates)
        among = "more than " if more else ""
        names = ", ".join(self.candidates)
        super().__init__(
            f"run id prefix {prefix} matches {among}{len(self.candidates)} runs ({names}); "
            "give more of the id"
        )


class AbortRun(Exception):
    """Raised by a tool to end the run as `tool_abort`."""

    def __init__(self, detail: str = "") -> None:
        self.detail = detail
        super().__init__(detail)


class OutcomeUnknown(Exception):
    """Raised by a tool whose call may have taken effect, and it cannot tell whether it did.

    For example, the connection to the service was lost after the request was
    sent. A tool that is not read-only pauses the run on an
    `interrupted_side_effect` approval, as after a crash: a person decides
    whether it runs again. A read-only tool's is an ordinary tool error.
    `detail` says what happened, in words a person reads.
    """

    def __init__(self, detail: str = "") -> None:
        self.detail = detail
        super().__init__(detail)


class MCPServerError(AgentrtError):
    """An MCP server could not be reached, broke the protocol, or went past a bound."""


class MCPToolError(AgentrtError):
    """An MCP server answered a tool call with `isError`, or the call could not be made."""


class MCPAnswerRefused(MCPToolError):
    """An MCP server answered a tool call, and agentrt refuses the answer: a message
    longer than the transport's bound, one that is not usable JSON, a result the MCP
    SDK refuses (no `CallToolResult`), or structured content against the tool's
    declared output schema (checked by agentrt's own validator).

    The call was carried out (the server answered it): its outcome is not unknown,
    only its result is not recorded. `agentrt-proxy` answers such a mutating call
    `UNRECORDED`.
    """


class MCPInputRequired(MCPToolError):
    """An MCP server asked for the user's input in the middle of a tool call (an
    `elicitation/create` request, or an `input_required` result), which agentrt
    refuses: such a request is never passed on to a host or a model unrecorded.
    """
