"""The refusals the Agents SDK adapter raises out of `Runner.run`.

Each is an `agents.exceptions.AgentsException`, so the SDK lets it out of a
tool call as it is (anything else it wraps in a `UserError`), and each is also
the agentrt error a caller would catch for the same refusal outside the SDK.
Nothing ran when one of these is raised: the call that raised it is recorded
as agentrt left it (waiting, refused, or the run ended).
"""

from __future__ import annotations

from agents.exceptions import AgentsException

from agentrt import ApprovalChangedError, ConfigError, Run, RunStateError
from agentrt.adapters import RunEndedError as _RunEnded
from agentrt.adapters import ended_message


class RunEndedError(AgentsException, _RunEnded):
    """The agentrt run ended (a limit, an operator's cancel, a rejection): the framework run stops.

    `run` is the run as recorded; `run.reason` says why. Like the SDK's own
    `MaxTurnsExceeded`, it ends `Runner.run`; no tool ran for the call that met it.
    """

    def __init__(self, run: Run) -> None:
        super().__init__(ended_message(run))
        self.run = run


class InterruptedSideEffectError(AgentsException, RunStateError):
    """The call was cut off by a crash and waits for a person who knows it may have taken effect.

    An approval the SDK recorded (`state.approve`) before the crash cannot
    decide it: the person approved the request, not a second attempt at it.
    Decide with `agentrt approve RUN` (or `GatedRun.approve` after showing
    `GatedRun.pending()`), then resume the same state.
    """

    def __init__(self, run_id: str, approval_id: str, tool: str) -> None:
        super().__init__(
            f"the call of {tool!r} in agentrt run {run_id} was interrupted and may have "
            f"taken effect; it waits on approval {approval_id} (interrupted_side_effect), which "
            f"only a person shown that can decide: agentrt approve {run_id}"
        )
        self.run_id = run_id
        self.approval_id = approval_id


class RequestChangedError(AgentsException, ApprovalChangedError):
    """The call the SDK is about to run is not the request agentrt recorded and a person approved.

    Raised when the run state's arguments (or call) differ from the recorded
    request, for example a run state edited between the approval and the
    resume. Nothing ran; the run still waits on the request as recorded.
    """


class _NamesApproval(Exception):
    """An error that names, when there is one, the approval a call waits on (and its run)."""

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        approval_id: str | None = None,
        approval_hash: str | None = None,
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.approval_id = approval_id
        self.approval_hash = approval_hash


class ApprovalPendingError(_NamesApproval, AgentsException, RunStateError):
    """The SDK asked to run a call that agentrt still holds for a person's decision.

    `approval_id` and `approval_hash` name the approval it waits on when there
    is one (a held call the policy sent to a person, decision 0052): decide it
    through agentrt (`agentrt approve RUN`, showing that hash, or
    `GatedRun.approve`), then resume the run state saved before.
    """


class AgentChangedError(AgentsException, ConfigError):
    """The agent of a framework run offers what was not gated (a handoff added to `run.agent`).

    Raised at the framework run's start, before the model is asked; nothing
    was recorded and nothing ran. Catch it as `agentrt.ConfigError`.
    """


class RunNotNamedError(AgentsException, ConfigError):
    """A framework run of the agent names no agentrt run (`gated.agent` given to `Runner.run`).

    Give `Runner.run` the agent of `gated.new_run()` or `gated.resume(run_id)`;
    nothing was asked of the model and nothing ran.
    """


class RunMismatchError(_NamesApproval, AgentsException, RunStateError):
    """The agentrt run named does not fit the framework run: nothing was started in its place.

    A resume naming a run this store never recorded, a new run naming one that
    exists, a run state holding tool calls the named run never recorded, or a
    framework run started (a fresh input, another state) while the named run
    waits on a call it does not hold: then `approval_id` and `approval_hash`
    name the approval that call waits on (pending, or approved and never
    carried out), and nothing was asked of the model.
    """
