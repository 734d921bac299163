"""One Pydantic AI run behind one agentrt Gate session: identity, each call, the end.

A framework run names its agentrt run in its run metadata
(`metadata={"agentrt_run_id": id}`); the same id passed to a later framework
run (the message history plus `DeferredToolResults`, in this process or
another) continues the same agentrt run. The run starts, or is found, before
the model is first asked: a new id begins a run; a RUNNING run whose owner
died is taken over (an interrupted side effect pauses on
`interrupted_side_effect`); a waiting run is continued call by call; an ended
run is refused, unless it ended while a call waited for a person and the
framework run brings no new prompt: its calls are then answered with the
run's end, so the model is told, and nothing runs or is recorded.

Invariants:

- Every call the framework makes goes through the session, one at a time
  and in the order the model made them (the Gate has one open step; every
  gated tool is offered to Pydantic AI as `sequential`, a barrier, so the
  framework itself runs a response's calls one after another): recorded
  verbatim (the model's arguments as sent, unparsed JSON included), checked
  against the tool's schema, put to the policy; only an allowed call runs,
  once, with the arguments judged.
- A call made after one that waits for a person, in the same response, is
  held (decision 0051): deferred beside it as `ApprovalRequired` marked
  `held_behind` that call, recorded nothing; when the framework continues the
  run, it goes through the session in its turn like any call. When the
  person denied the waiting call the framework's way (`ToolDenied`), agentrt
  records the rejection before any call of the resumed framework run, and
  the held call never runs: it comes back as a failed tool return naming the
  run's end. A framework run continuing a run that ended while a call waited
  (`agentrt reject`) tells the model so the same way, and records nothing.
- A call the record knows is never run twice: issued again under its id, or
  made again under a new id by a model whose history lost it (a program
  killed before it saved the history, retried from its prompt), it gets its
  recorded outcome; made again while it waits for a person or for its
  vouched rerun, it is that call, run only as the person or the
  reconciliation said (`_remade`: the record's calls after the last one the
  history holds, matched one to one by tool and canonical arguments).
- The model is not asked while a call the history holds waits for a person
  (`refuse_model_while_waiting`): an approved call is never dropped.
- A call waiting for a person runs only after agentrt's approval of the hash
  the person was shown (`agentrt approve`, or `DeferredToolResults` built by
  `approved`), and only with exactly the arguments recorded; a framework
  approval by call id alone decides nothing, and one with `override_args`
  is refused before any call of the framework run runs
  (`refuse_override_args`).
- The run's end follows the framework run's: its output completes the agentrt
  run; an error fails it (a tool's `BaseException` too, recorded before it
  leaves the event loop); deferred requests leave it waiting; a crash or a
  cancellation leaves it as a crash would.
- Nothing runs beside the Gate: a tool's own `ApprovalRequired` or
  `CallDeferred` is refused as its outcome (approvals are agentrt's policy's),
  and output functions are refused (`_capability`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import pydantic_core
from pydantic_ai import RunContext, ToolApproved, ToolDenied
from pydantic_ai.exceptions import (
    AgentRunError,
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    ToolFailed,
    UsageLimitExceeded,
)
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool

import agentrt
from agentrt.adapters import Classification, classify, ended_message, tool_spec
from agentrt.adapters import RunEndedError as _RunEnded
from agentrt.adapters._calls import SETTLED, CallMarker
from agentrt.adapters._operation import running, with_reconcile
from agentrt.adapters._wait import POLL_INTERVAL, attach_unless_ended, until_decided
from agentrt.lowlevel import step_of_run

from ._approvals import decision_of, held_presentation, presentation

RUN_ID_KEY = "agentrt_run_id"
"""The run metadata key naming the agentrt run a framework run belongs to."""

_UNPARSED = "\x00agentrt-unparsed"
_log = logging.getLogger("agentrt.adapters.pydantic_ai")
_CALLS = CallMarker("pydantic-ai tool call ")
_KNOWN_WINDOW = 2
"""Calls of the history looked up at first, newest first, to find where the record stands."""


class RunEndedError(AgentRunError, _RunEnded):
    """The agentrt run ended (a policy abort, an operator's cancel): the framework run stops.

    Both a Pydantic AI `AgentRunError` and an `agentrt.adapters.RunEndedError`.
    """

    def __init__(self, message: str, run: agentrt.Run) -> None:
        AgentRunError.__init__(self, message)
        self.run = run


class GateLimitExceeded(UsageLimitExceeded, RunEndedError):
    """An agentrt limit ended the run: no tool runs; the framework run stops as for its own.

    A Pydantic AI `UsageLimitExceeded` and a `RunEndedError`.
    """

    def __init__(self, message: str, run: agentrt.Run) -> None:
        # Not UsageLimitExceeded's own __init__: its hint points at Pydantic AI's limits.
        AgentRunError.__init__(self, message)
        self.run = run


@dataclass(frozen=True)
class Settings:
    """What the capability was configured with, shared by every framework run."""

    store: agentrt.Store
    policy: agentrt.Policy
    classifications: Mapping[str, Classification]
    limits: agentrt.Limits | None
    now: Any
    new_id: Any
    lease_ttl: timedelta
    wait_for_person: bool = False
    """A call that waits for a person waits inside the framework run (no deferral)."""
    poll_interval: float = POLL_INTERVAL
    """Seconds between two looks at the store while a call waits for a person."""


class Verbatim:
    """An arguments "validator" that keeps what the model sent, so the Gate records it as sent.

    The tool's own validator runs later, on the arguments the Gate judged,
    just before the tool itself. Arguments that are not a JSON object (text
    that does not parse, nested past the parser's depth, or a list) travel
    wrapped under `_UNPARSED`, and so does an object the model wrote under
    that key itself: what the Gate records is always exactly what was sent.
    """

    def validate_json(self, input: str | bytes | bytearray, **_: Any) -> Any:
        text = input.decode("utf-8", "replace") if isinstance(input, bytes | bytearray) else input
        try:
            value = json.loads(text or "{}")
        except (ValueError, RecursionError):
            return {_UNPARSED: text}
        return _wrapped(value)

    def validate_python(self, input: Any, **_: Any) -> Any:
        return _wrapped(dict(input) if isinstance(input, Mapping) else input)


def _wrapped(value: Any) -> dict[str, Any]:
    """The arguments as the framework carries them: an object as it is, anything else wrapped."""
    if isinstance(value, dict) and _UNPARSED not in value:
        return value
    return {_UNPARSED: value}


@dataclass
class _Current:
    """The framework call the Gate is executing now (calls run one at a time)."""

    ctx: RunContext[Any]
    tool: ToolsetTool[Any]
    result: Any = None
    error: BaseException | None = None


class _FrameworkTool:
    """A framework tool as the Gate registers it: its spec, and a call back into the framework."""

    def __init__(self, spec: agentrt.ToolSpec, run: FrameworkRun) -> None:
        self.spec = spec
        self._run = run

    async def call(self, call: agentrt.ToolCall) -> agentrt.ToolResult:
        with running(call):  # the framework tool's `current_operation_id()`
            return await self._run.run_tool(self.spec.name, call)


@dataclass
class FrameworkRun:
    """The agentrt side of one framework run."""

    settings: Settings
    run_id: str
    goal: str
    wrapped: AbstractToolset[Any] | None = None
    originals: Mapping[str, ToolsetTool[Any]] = field(default_factory=dict)
    gate: agentrt.Gate | None = None
    session: agentrt.GateSession | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    current: _Current | None = None
    continuing: bool = False
    """The framework run brings no new prompt: it continues the history it was given."""
    finished: bool = False
    """The framework run's output was seen (`finish`): the agentrt run ended or waits."""
    vouched: agentrt.GateStep | None = None
    """A call cut off by a crash whose tool's reconciliation vouched it may run again
    (decision 0091): the takeover holds it allowed until the framework issues it."""

    # -- start-up -----------------------------------------------------------

    async def start(self, tools: Mapping[str, ToolsetTool[Any]]) -> None:
        """Classify the offered tools and begin, take over or find the agentrt run."""
        s = self.settings
        classes = classify(list(tools), s.classifications)
        specs = [
            tool_spec(
                name,
                tools[name].tool_def.description or "",
                tools[name].tool_def.parameters_json_schema,
                how,
            )
            for name, how in classes.items()
        ]
        self.gate = agentrt.Gate(
            store=s.store,
            policy=s.policy,
            tools=[
                with_reconcile(_FrameworkTool(spec, self), classes[spec.name].reconcile)
                for spec in specs
            ],
            now=s.now,
            new_id=s.new_id,
            lease_ttl=s.lease_ttl,
            origin="adapter:pydantic-ai",
        )
        try:
            run = s.store.get_run(self.run_id)
        except agentrt.NotFoundError:
            self.session = await self.gate.begin(self.goal, s.limits, run_id=self.run_id)
            return
        if run.status == agentrt.RunStatus.RUNNING:
            session, verdict = await self.gate.attach(self.run_id)
            self.session = session
            if verdict is not None and verdict.outcome == "allowed":
                # The tool's reconciliation vouched the cut-off call may run again,
                # and the policy allowed it: it runs when the framework issues it.
                self.vouched = session.current()
            if session.done:
                await self._let_go()  # paused on an interrupted side effect, or ended
            if (
                verdict is not None
                and verdict.outcome == "ended"
                and verdict.run.status != agentrt.RunStatus.COMPLETED
            ):
                raise RunEndedError(ended_message(verdict.run), verdict.run)
            # COMPLETED by the takeover: a terminal tool's cut-off call its reconciliation
            # found (decision 0091); the framework's call gets the recovered result
            # (`_recorded`), any other call the run's end, as after the tool's own return.
            return
        if run.status == agentrt.RunStatus.WAITING_FOR_APPROVAL:
            return
        if self.continuing and self._ended_on() is not None:
            return  # answered call by call: the run's end, nothing runs or is recorded
        if run.status != agentrt.RunStatus.WAITING_FOR_APPROVAL:
            raise agentrt.RunStateError(
                f"agentrt run {self.run_id} is {run.status} ({run.reason}); a framework run cannot "
                "continue it: give a new framework run a new agentrt_run_id"
            )

    # -- each call ------------------------------------------------------------

    async def call(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        async with self.lock:
            args = tool_args.get(_UNPARSED, tool_args)
            call_id = ctx.tool_call_id
            if ctx.tool_call_approved and call_id is not None:
                _refuse_changed_approval(ctx.messages, call_id, args)
            recorded = self._recorded(call_id) if call_id is not None else None
            remade = None
            if recorded is None and call_id is not None:
                remade = self._remade(ctx.messages, call_id)
                if remade is not None and remade.status in SETTLED:
                    recorded = remade
            if recorded is not None and call_id is not None:
                # A call agentrt already settled, issued again by a framework run
                # resumed from a history saved before its return, or made again
                # under a new id by a model whose history lost it: never run twice.
                return _replay(recorded, name, args, call_id)
            stands_for = _CALLS.call_id(remade.decision) if remade is not None else None
            session = self.session
            if self.vouched is not None:
                return await self._run_vouched(self.vouched, name, args, ctx, tool, stands_for)
            if session is not None and not session.done:
                return await self._propose(session, name, args, ctx, tool)
            run = self.settings.store.get_run(self.run_id)
            if run.status == agentrt.RunStatus.WAITING_FOR_APPROVAL:
                return await self._waiting(name, args, ctx, tool, stands_for)
            ended_on = self._ended_on()
            if ended_on is not None and call_id is not None:
                if ended_on in (call_id, stands_for):
                    raise ToolFailed(f"not run: {ended_message(run)}")
                if _made_after(ctx.messages, ended_on, call_id):
                    raise ToolFailed(_held_ended(run, call_id, ended_on))
            raise _end_of(run)

    def _recorded(self, call_id: str) -> agentrt.Step | None:
        """The step that settled tool call `call_id` in this run (done or failed), if any.

        Read before a step is claimed, under the run's lease when a session
        holds it; a settled step never changes, so the read is also safe while
        the run waits for a person.
        """
        return _CALLS.settled(self.settings.store, self.run_id, call_id)

    def _remade(self, messages: Sequence[Any], call_id: str) -> agentrt.Step | None:
        """The recorded call that call `call_id`, unknown to the record, makes again, if any.

        A history saved before some of the run's calls were recorded (a program
        killed before it saved it, retried from its prompt), or one carrying a
        cut-off call no more, leaves those calls out, and the model makes them
        again under new ids (providers name every call afresh). The record's
        calls after the last one the history holds are matched one to one, in
        order, to the calls the history makes after it that the record does not
        know, by request (tool and canonical arguments): the first such call
        making a recorded call's request is that call made again. It gets the
        recorded outcome when the call settled, or stands for it when it waits
        for a person or for its vouched rerun; nothing runs twice on a match.
        """
        return self._matched(messages, call_id).get(call_id)

    def _matched(self, messages: Sequence[Any], call_id: str | None) -> dict[str, agentrt.Step]:
        """The recorded calls the history's unknown calls make again (`_remade`), by the id
        the history gives each; none when the record knows `call_id` itself."""
        made = _calls_made(messages)
        store = self.settings.store
        known = self._last_known(made, call_id)
        if known is None:
            return {}
        position, last = known
        # One indexed read of the record's tail (decision 0060): in a run whose history
        # is whole, the last call it holds is the run's last step, and the tail is empty.
        count = store.get_run(self.run_id).step_count
        later = store.steps_from(self.run_id, last + 1, count + 1)
        lost = [step for step in later if _CALLS.call_id(step.decision) is not None]
        matched: dict[str, agentrt.Step] = {}
        for made_id, tool, args in made[position + 1 :]:
            if not lost:
                break
            found = next(
                (
                    step
                    for step in lost
                    if step.decision is not None
                    and step.decision.tool == tool
                    and _canonical(step.decision.args) == _canonical(args)
                ),
                None,
            )
            if found is not None:
                lost.remove(found)
                matched[made_id] = found
        return matched

    def _last_known(
        self, made: Sequence[tuple[str, str, Any]], call_id: str | None
    ) -> tuple[int, int] | None:
        """Where the history's last call the record knows stands in `made`, and its step's
        index ((-1, -1) when it knows none); None when the record knows `call_id` itself.

        The history is read backwards in windows that double, so a history whose
        newest calls are recorded (a whole one) costs one look-up of a few calls,
        whatever the run's length, not one of every call it ever made.
        """
        end, size = len(made), _KNOWN_WINDOW
        asked = set() if call_id is None else {call_id}
        while True:
            start = max(0, end - size)
            asked.update(made_id for made_id, _, _ in made[start:end])
            found = _CALLS.latest(self.settings.store, self.run_id, asked)
            if call_id is not None and call_id in found:
                return None
            for position in range(end - 1, start - 1, -1):
                if made[position][0] in found:
                    return position, max(step.index for step in found.values())
            if start == 0:
                return -1, -1
            end, size, asked = start, size * 2, set()

    async def _propose(
        self,
        session: agentrt.GateSession,
        name: str,
        args: Any,
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
    ) -> Any:
        step = await session.step()
        if step is None:
            raise _end_of(session.run)
        decision = agentrt.Decision.tool_call(
            name, args, reason=_CALLS.reason(str(ctx.tool_call_id))
        )
        verdict = await step.propose(decision)
        if verdict.outcome == "allowed":
            return await self._execute(step, ctx, tool)
        if verdict.outcome == "denied":
            assert verdict.observation is not None
            summary = verdict.observation.summary
            if verdict.observation.kind == agentrt.ObservationKind.INVALID_DECISION:
                raise ModelRetry(summary)
            raise ToolFailed(summary)
        if verdict.outcome == "pending":
            assert verdict.approval is not None
            await self._let_go()
            if self.settings.wait_for_person:
                return await self._waiting(name, args, ctx, tool)
            raise ApprovalRequired(
                presentation(self.settings.store, self.run_id, verdict.approval.id)
            )
        raise _end_of(verdict.run)

    async def _run_vouched(
        self,
        vouched: agentrt.GateStep,
        name: str,
        args: Any,
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
        stands_for: str | None,
    ) -> Any:
        """The call the tool's reconciliation vouched for, run once more when the framework
        issues it again (same call id, or made again under a new id, `_remade`; same tool
        and arguments); any other call meanwhile is refused, unrecorded, and the vouched
        call stays open (decision 0091)."""
        decision = vouched.step.decision
        assert decision is not None
        waits_for = _CALLS.call_id(decision)
        if (
            waits_for in (ctx.tool_call_id, stands_for)
            and decision.tool == name
            and _canonical(decision.args) == _canonical(args)
        ):
            self.vouched = None
            return await self._execute(vouched, ctx, tool)
        raise ToolFailed(
            f"not run and not recorded: agentrt run {self.run_id} first runs again the call "
            f"{waits_for} ({decision.tool}) cut off by a crash, which its reconciliation "
            "vouched is safe to repeat; it runs when a framework run continuing the history "
            "that holds it issues it"
        )

    async def _wait_for_person(self, approval: agentrt.Approval) -> agentrt.Approval:
        """Look at the store until a person decides `approval`, the run ends, or it lapses.

        The lease is let go while waiting: a person decides from any process
        (`agentrt approve`, the console, the webhook). A lapsed approval is
        returned still pending, for `attach` to record the expiry.
        """
        return await until_decided(
            self.settings.store,
            self.run_id,
            approval.id,
            every=self.settings.poll_interval,
            clock=self.settings.now,
        )

    async def _waited(self, approval: agentrt.Approval) -> None:
        """After a wait: a decided approval goes on; an ended run or a lapsed one refuses the call.

        A lapsed approval is recorded expired by `attach` (the run is cancelled
        `approval_expired`). The call did not run; the model gets a failed tool
        return saying how the run ended, and later calls meet the run's end.
        """
        store = self.settings.store
        if approval.status == agentrt.ApprovalStatus.PENDING:
            run = store.get_run(self.run_id)
            if run.status == agentrt.RunStatus.WAITING_FOR_APPROVAL:
                assert self.gate is not None
                with contextlib.suppress(agentrt.RunStateError):  # leased elsewhere: theirs
                    session, _ = await self.gate.attach(self.run_id)  # records the expiry
                    await session.close()
        run = store.get_run(self.run_id)
        if run.status != agentrt.RunStatus.WAITING_FOR_APPROVAL:
            raise ToolFailed(f"not run: {ended_message(run)}")

    async def _waiting(
        self,
        name: str,
        args: Any,
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
        stands_for: str | None = None,
    ) -> Any:
        """A call while the run waits for a person: the waiting call, or one held behind it.

        The waiting call is the one recorded, or the call that makes it again
        under a new id (`stands_for` names the recorded one, `_remade`).
        """
        store = self.settings.store
        approval = store.list_approvals(self.run_id)[-1]
        step = step_of_run(store, self.run_id, approval.step_id)
        assert step is not None and step.decision is not None
        waiting_for = step.decision.reason.removeprefix(_CALLS.prefix)
        if stands_for == waiting_for and ctx.tool_call_id is not None:
            waiting_for = ctx.tool_call_id
        elif ctx.tool_call_id != waiting_for:
            behind = self._made_again(ctx.messages, step, waiting_for)
            self._hold(name, str(ctx.tool_call_id), step.decision.tool or "", behind)
        if step.decision.tool != name or _canonical(step.decision.args) != _canonical(args):
            raise ToolFailed(
                f"refused: the call {waiting_for} to run now is not the request recorded "
                f"(and shown for approval with hash {approval.hash}); nothing ran"
            )
        if approval.status == agentrt.ApprovalStatus.PENDING and self.settings.wait_for_person:
            approval = await self._wait_for_person(approval)
            await self._waited(approval)
        elif approval.status != agentrt.ApprovalStatus.PENDING:
            # Decided before this call looked (a person quicker than the framework): a
            # rejection or an expiry ended the run, which the model is told, as after a wait.
            await self._waited(approval)
        if approval.status == agentrt.ApprovalStatus.PENDING:
            decided = decision_of(ctx.tool_call_metadata) if ctx.tool_call_approved else None
            if decided is None or decided["approval_id"] != approval.id:
                raise ApprovalRequired(presentation(store, self.run_id, approval.id))
            try:
                agentrt.approve(
                    store,
                    self.run_id,
                    approval.id,
                    by=decided["by"],
                    note=decided["note"],
                    shown_hash=decided["hash"],
                )
            except agentrt.ApprovalChangedError as exc:
                raise ApprovalRequired(
                    presentation(store, self.run_id, approval.id, why=str(exc))
                ) from exc
            except agentrt.NotPendingError as exc:
                # Decided since it was read above (a person approved or rejected it, or
                # cancelled the run): that decision stands, told as when it came before
                # this call looked (decision 0118). One still pending has merely lapsed.
                approval = self._decided_since(approval, exc)
                await self._waited(approval)
        assert self.gate is not None
        attached = await attach_unless_ended(self.gate, store, self.run_id)
        if attached is None:
            # Ended since it was read just above (an operator's cancel): told as any end.
            raise ToolFailed(f"not run: {ended_message(store.get_run(self.run_id))}")
        session, verdict = attached
        self.session = session
        assert verdict is not None
        if verdict.outcome == "allowed":
            open_step = session.current()
            assert open_step is not None
            return await self._execute(open_step, ctx, tool)
        if verdict.outcome == "pending":
            assert verdict.approval is not None
            await self._let_go()
            if self.settings.wait_for_person:
                return await self._waiting(name, args, ctx, tool)
            raise ApprovalRequired(presentation(store, self.run_id, verdict.approval.id))
        if verdict.outcome == "denied":
            assert verdict.observation is not None
            raise ToolFailed(verdict.observation.summary)
        raise _end_of(verdict.run)

    def _made_again(self, messages: Sequence[Any], step: agentrt.Step, call_id: str) -> str:
        """The id the history knows the waiting call `call_id` by: its own, or a new one's."""
        if any(made_id == call_id for made_id, _, _ in _calls_made(messages)):
            return call_id
        matched = self._matched(messages, None)
        return next((made_id for made_id, s in matched.items() if s.id == step.id), call_id)

    def _hold(self, name: str, call_id: str, waiting_tool: str, waiting_for: str) -> None:
        """A call made beside the waiting one: held behind it, nothing recorded.

        It is deferred again, marked `held_behind` the waiting call, until the
        framework continues the run after that call's decision. (A `ToolDenied`
        of the waiting call was recorded as its rejection before any call of
        the resumed framework run: the held call then meets the run's end.)
        """
        raise ApprovalRequired(
            held_presentation(self.run_id, name, call_id, waiting_tool, waiting_for)
        )

    async def _execute(
        self, step: agentrt.GateStep, ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        current = self.current = _Current(ctx, tool)
        try:
            observation = await step.execute()
        finally:
            self.current = None
        error = current.error
        if error is not None:
            if not isinstance(error, Exception):
                # SystemExit, KeyboardInterrupt, a BaseException of the tool's own:
                # recorded as the tool's outcome (decision 0017); the framework run
                # stops with it, so the agentrt run ends as on any error, now,
                # before it leaves the event loop (asyncio re-raises the first two
                # out of the loop, past `wrap_run`).
                await self.failed(error)
            raise error
        if observation.kind != agentrt.ObservationKind.TOOL_RESULT:
            raise ToolFailed(observation.summary)
        return current.result

    async def run_tool(self, name: str, call: agentrt.ToolCall) -> agentrt.ToolResult:
        """Run the framework's tool on the arguments the Gate judged (called by `execute`)."""
        current = self.current
        assert current is not None and self.wrapped is not None
        try:
            args = current.tool.args_validator.validate_python(
                call.args if call.args is not None else {},
                context=current.ctx.validation_context,
            )
            check = current.tool.args_validator_func
            if check is not None:
                checked = check(current.ctx, **args)
                if inspect.isawaitable(checked):
                    await checked
            result = await self.wrapped.call_tool(name, args, current.ctx, current.tool)
        except (ApprovalRequired, CallDeferred) as exc:
            refused = ToolFailed(_deferral_refused(name, exc))
            current.error = refused
            raise refused from exc
        except asyncio.CancelledError:
            # The Gate's timeout, the caller's cancel, or the tool's own raise: the
            # Gate tells them apart. A timeout and the tool's own raise are the step's
            # `tool_error`, a failed return the run goes on from (`_execute`); the
            # caller's cancel leaves `step.execute` itself, as a crash would leave it.
            raise
        except BaseException as exc:
            current.error = exc
            raise
        current.result = result
        content = pydantic_core.to_jsonable_python(result, fallback=repr)
        return agentrt.ToolResult(content=content)

    # -- the end ----------------------------------------------------------------

    async def finish(self, output: Any, deferred: bool) -> None:
        """The framework run returned: its output completes the agentrt run (deferred: it waits).

        An ended run records nothing more (a framework run that continued it
        after a rejection answered its calls with the run's end).
        """
        if self.finished:
            return
        self.finished = True
        session = self.session
        if deferred:
            return
        if self.vouched is not None:
            # The vouched call was never issued: the run is left as the crash left it
            # (the step `interrupted`); the next takeover asks the reconciliation again.
            self.vouched = None
            await self._let_go()
            return
        if session is None or session.done:
            self._warn_if_waiting()
            return
        step = await session.step()
        if step is None:
            return
        content = _recordable(pydantic_core.to_jsonable_python(output, fallback=repr))
        verdict = await step.propose(agentrt.Decision.complete(content))
        if verdict.outcome == "denied" and verdict.observation is not None:
            # Still not storable (nested past any reader's depth, say): the step says
            # why, and the run ends on a plain note, never left RUNNING with no owner.
            step = await session.step()
            if step is not None:
                note = f"the framework run's output was not recorded: {verdict.observation.summary}"
                await step.propose(agentrt.Decision.complete(note))

    def waiting_on(self) -> tuple[agentrt.Approval, agentrt.Step, str] | None:
        """The approval the run waits on (pending, or approved and not run), its step, its call."""
        store = self.settings.store
        if store.get_run(self.run_id).status != agentrt.RunStatus.WAITING_FOR_APPROVAL:
            return None
        approvals = store.list_approvals(self.run_id)
        if not approvals:
            return None
        approval = approvals[-1]
        step = step_of_run(store, self.run_id, approval.step_id)
        assert step is not None and step.decision is not None
        return approval, step, step.decision.reason.removeprefix(_CALLS.prefix)

    def settle_denied(self, results: Mapping[Any, Any], messages: Sequence[Any]) -> None:
        """A resumed framework run's `ToolDenied` of the waiting call: agentrt's rejection, now.

        Pydantic AI answers a denied call itself, without calling the toolset,
        so the denial is recorded here, before any call of the framework run
        and before the model hears of it: a call made later meets the run's
        end, and a framework run that raises leaves the record settled.
        """
        waiting = self.waiting_on()
        if waiting is None:
            return
        approval, step, call_id = waiting
        denied = results.get(self._made_again(messages, step, call_id))
        if not isinstance(denied, ToolDenied) or approval.status != agentrt.ApprovalStatus.PENDING:
            return
        self._reject(approval, denied.message)

    def _reject(self, approval: agentrt.Approval, note: str) -> bool:
        """The framework's denial, recorded as agentrt's rejection of `approval` (True).

        False when a person decided it (or cancelled the run) since it was read:
        that decision stands and the denial is not carried (decision 0118).
        """
        try:
            agentrt.reject(
                self.settings.store,
                self.run_id,
                approval.id,
                by="pydantic-ai ToolDenied",
                note=note,
                shown_hash=approval.hash,
            )
        except agentrt.NotPendingError as exc:
            self._decided_since(approval, exc)
            return False
        return True

    def _decided_since(
        self, approval: agentrt.Approval, refused: agentrt.NotPendingError
    ) -> agentrt.Approval:
        """`approval` as decided since it was read pending, after a decision `refused` it.

        A person's approval, rejection or cancel came between the read and the
        decision. An approval still pending was refused for its own sake (it
        lapsed): no race, and `refused` is raised.
        """
        current = self.settings.store.get_approval(self.run_id, approval.id)
        if current.status == agentrt.ApprovalStatus.PENDING:
            raise refused
        return current

    def refuse_model_while_waiting(self, messages: Sequence[Any]) -> None:
        """The model is about to be asked while a call of the history waits for a person: refused.

        A framework run that reaches the model while a call it made waits
        would send the model a return for a call that never ran (Pydantic AI
        fills one in when the history ends with other calls' returns and no
        `DeferredToolResults` names the waiting call): an approved call would
        be dropped without a trace. (A waiting call the history does not hold,
        one cut off before the history was saved, is met when the model makes
        it again; a call it makes meanwhile is held behind it.)
        """
        waiting = self.waiting_on()
        if waiting is None:
            return
        approval, step, call_id = waiting
        call_id = self._made_again(messages, step, call_id)
        parts = [
            (getattr(message, "kind", ""), part)
            for message in messages
            for part in getattr(message, "parts", ())
            if getattr(part, "tool_call_id", None) == call_id
        ]
        denied = [
            part
            for kind, part in parts
            if kind == "request" and getattr(part, "outcome", None) == "denied"
        ]
        if denied and approval.status == agentrt.ApprovalStatus.PENDING:
            # Denied inline (a `HandleDeferredToolCalls` handler's `ToolDenied`),
            # within the framework run, where no resumed node carried it.
            if not self._reject(approval, str(getattr(denied[-1], "content", ""))):
                # Decided by a person since the look above: looked at again, as if
                # they had decided first (decision 0118).
                self.refuse_model_while_waiting(messages)
            return
        if not any(kind == "response" for kind, _ in parts):
            return
        assert step.decision is not None
        if any(kind == "request" for kind, _ in parts):
            # The history answers the call (a return written without its run):
            # Pydantic AI refuses results naming it, so this history cannot run it.
            raise agentrt.RunStateError(
                f"agentrt run {self.run_id} waits on call {call_id} ({step.decision.tool}, "
                f"approval {approval.id}, {approval.status}), which has not run, and this "
                "message history already answers it, so it can no longer run from this history "
                "and the model is not asked: continue from the history saved before that answer "
                f"with deferred_tool_results naming the call (approved(requests, {call_id!r}, "
                "by=...)), or end the wait with `agentrt reject` or `agentrt cancel`"
            )
        raise agentrt.RunStateError(
            f"agentrt run {self.run_id} waits on call {call_id} ({step.decision.tool}, approval "
            f"{approval.id}, {approval.status}), which has not run, so the model is not asked: "
            f"continue with deferred_tool_results naming that call (approved(requests, "
            f"{call_id!r}, by=...), or DeferredToolResults(approvals={{{call_id!r}: "
            "ToolApproved()}) after `agentrt approve`)"
        )

    def _ended_on(self) -> str | None:
        """The framework call id of the call the run waited on when it ended, if it ended so.

        A run rejected (`agentrt reject`, `ToolDenied`), expired or cancelled
        while it waited for a person: its last step is the waiting call, which
        never ran.
        """
        store = self.settings.store
        run = store.get_run(self.run_id)
        if run.status in (agentrt.RunStatus.RUNNING, agentrt.RunStatus.WAITING_FOR_APPROVAL):
            return None
        approvals = store.list_approvals(self.run_id)
        recorded = store.list_steps(self.run_id, cap=None)
        if not approvals or not recorded:
            return None
        last = recorded[-1]
        if approvals[-1].step_id != last.id or last.status == agentrt.StepStatus.DONE:
            return None
        if last.decision is None or not last.decision.reason.startswith(_CALLS.prefix):
            return None
        return last.decision.reason.removeprefix(_CALLS.prefix)

    def _warn_if_waiting(self) -> None:
        """The framework run returned an output while the agentrt run waits for a person.

        Pydantic AI's `run_stream` takes a text streamed beside tool calls as
        the run's output and drops the deferral of a call that waits: the
        output is then not the run's result, and the run keeps waiting on the
        call (still without a return in the history).
        """
        store = self.settings.store
        if store.get_run(self.run_id).status != agentrt.RunStatus.WAITING_FOR_APPROVAL:
            return
        pending = store.pending_approvals(self.run_id)
        if not pending:
            return
        _log.warning(
            "the framework run returned an output while agentrt run %s waits for a person "
            "(approval %s): the output is not recorded as the run's result; continue the "
            "framework run with the same metadata and its message history to get the "
            "DeferredToolRequests",
            self.run_id,
            pending[-1].id,
        )

    async def failed(self, error: BaseException) -> None:
        """The framework run raised: the agentrt run ends as the Driver ends it on an error."""
        session = self.session
        if isinstance(error, RunEndedError | OverrideArgsRefused):
            return  # the run is left as it was
        if session is None or session.done:
            return
        if session.current() is not None:
            return  # a call was cut off mid-way: left as a crash would leave it
        step = await session.step()
        if step is not None:
            await step.fail(error)

    async def cancel_undeliverable(self) -> bool:
        """The framework run cannot stop for a person: the waiting run is cancelled (True).

        Pydantic AI refuses to end a run with `DeferredToolRequests` that its
        output types do not allow (the agent's or the run's own), so the call
        waiting for a person could never be carried out or its decision
        delivered. The call did not run; the run is cancelled with a note
        saying why, instead of waiting for ever.
        """
        await self._let_go()
        store = self.settings.store
        if store.get_run(self.run_id).status != agentrt.RunStatus.WAITING_FOR_APPROVAL:
            return False
        agentrt.Operator(store, now=self.settings.now).cancel(
            self.run_id,
            by="adapter:pydantic-ai",
            note=(
                "the framework run could not stop for a person (DeferredToolRequests is not "
                "among its output types, Pydantic AI's UserError); the waiting call did not run"
            ),
        )
        return True

    async def close(self) -> None:
        await self._let_go()

    async def _let_go(self) -> None:
        self.vouched = None  # held by the session given up: the next takeover asks again
        if self.session is not None:
            await self.session.close()
            self.session = None


def tools_seen(tools: Mapping[str, ToolsetTool[Any]]) -> dict[str, ToolsetTool[Any]]:
    """The tools as the framework sees them: arguments kept verbatim for the Gate; sequential.

    `sequential=True` makes each call a barrier in Pydantic AI: the calls of
    one response run one at a time, in the order the model made them, so the
    call that waits for a person is settled before any call held behind it.
    """
    return {
        name: replace(
            tool,
            tool_def=replace(tool.tool_def, sequential=True),
            args_validator=Verbatim(),
            args_validator_func=None,
        )
        for name, tool in tools.items()
    }


def goal_of(prompt: str | Sequence[Any] | None) -> str:
    if isinstance(prompt, str) and prompt:
        return prompt
    return "a Pydantic AI run"


_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _recordable(value: Any) -> Any:
    """The framework run's output as strict JSON can hold it, for the run's completion.

    The program gets the output as the framework made it; the record holds a
    float that is not finite as its name (Pydantic's "NaN", "Infinity") and a
    lone surrogate escaped (`\\ud800`), as agentrt stores any foreign text.
    """
    try:
        return _strict(value)
    except RecursionError:
        return value  # refused as it is, and told so, by `finish`


def _strict(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return _NON_FINITE[repr(value)]
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_strict(key): _strict(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_strict(item) for item in value]
    return value


def _canonical(value: Any) -> bytes:
    try:
        return agentrt.canonical_json(value)
    except Exception:
        return repr(value).encode()


def _replay(step: agentrt.Step, name: str, args: Any, call_id: str) -> Any:
    """What the framework gets for a call agentrt settled before: its recorded outcome.

    The same return the model saw (the tool's result as recorded), or the
    same failure: a denial or a timeout as `ToolFailed`, invalid arguments or
    the tool's own `ModelRetry` as `ModelRetry`. A call issued again under the
    same id with another tool or other arguments is refused; nothing runs.
    """
    decision = step.decision
    assert decision is not None  # found by its decision's reason
    if decision.tool != name or _canonical(decision.args) != _canonical(args):
        raise ToolFailed(
            f"refused: the call {call_id} was recorded (step {step.index} of run {step.run_id}) "
            f"as {decision.tool} with other arguments; a changed call is not run as the "
            "recorded one; nothing ran"
        )
    observation = step.observation
    if observation is None:
        raise ToolFailed(
            f"not run again: the call {call_id} ended with no recorded outcome "
            f"(step {step.index} of run {step.run_id})"
        )
    if observation.kind == agentrt.ObservationKind.TOOL_RESULT:
        return observation.content
    if observation.kind == agentrt.ObservationKind.INVALID_DECISION:
        raise ModelRetry(observation.summary)
    if observation.kind == agentrt.ObservationKind.TOOL_ERROR:
        content = observation.content if isinstance(observation.content, dict) else {}
        error = str(content.get("error") or observation.summary)
        for kind in (ModelRetry, ToolFailed):
            prefix = f"{kind.__name__}: "
            if error.startswith(prefix):
                raise kind(error.removeprefix(prefix))
    raise ToolFailed(observation.summary)


class OverrideArgsRefused(agentrt.ConfigError):
    """A framework approval with `override_args`: refused before any call of the run runs."""


def refuse_override_args(results: Mapping[Any, Any]) -> None:
    """A resumed run's `ToolApproved(override_args=...)`: refused, before anything runs.

    Every approval a framework run behind the Gate is given answers a gated
    call (one that waits, or one held behind it), and agentrt approves the
    exact request the person was shown, by its hash. Raised from the
    capability's `before_node_run`, before Pydantic AI calls a tool or writes
    a return into the history, so the saved history stays the one to
    continue from; the agentrt run is left as it was.
    """
    for call_id, result in results.items():
        if isinstance(result, ToolApproved) and result.override_args is not None:
            raise OverrideArgsRefused(_override_refused(call_id))


def _made_args(sent: Any) -> Any:
    """The arguments of a call the history holds, as the Gate records them."""
    made = (
        Verbatim().validate_json(sent)
        if isinstance(sent, str | bytes | bytearray)
        else Verbatim().validate_python(sent if sent is not None else {})
    )
    return made.get(_UNPARSED, made)


def _calls_made(messages: Sequence[Any]) -> list[tuple[str, str, Any]]:
    """Every tool call the history's model responses make, in order: id, tool, arguments."""
    return [
        (part.tool_call_id, part.tool_name, _made_args(part.args))
        for message in messages
        if getattr(message, "kind", "") == "response"
        for part in getattr(message, "parts", ())
        if getattr(part, "part_kind", "") == "tool-call" and isinstance(part.tool_call_id, str)
    ]


def _refuse_changed_approval(messages: Sequence[Any], call_id: str, args: Any) -> None:
    """A framework-approved call must carry the arguments the model made it with.

    `refuse_override_args` refuses `override_args` in the results a framework
    run is resumed with; an answer given inline, during the run (a
    `HandleDeferredToolCalls` capability), reaches the toolset already
    applied, so the approved call's arguments are compared here with the
    model's call in the history, before anything is recorded or run.
    """
    for message in reversed(messages):
        if getattr(message, "kind", "") != "response":
            continue
        for part in getattr(message, "parts", ()):
            if getattr(part, "tool_call_id", None) != call_id or not hasattr(part, "args"):
                continue
            if _canonical(_made_args(part.args)) != _canonical(args):
                raise OverrideArgsRefused(_override_refused(call_id))
            return


def _override_refused(call_id: object) -> str:
    return (
        f"ToolApproved(override_args=...) for call {call_id} is refused and nothing "
        "ran: agentrt approves the exact request the person saw (its hash), so to run "
        "other arguments, reject the call and let the model ask again"
    )


def _made_after(messages: Sequence[Any], first: str, call_id: str) -> bool:
    """Whether call `call_id` was made after call `first`, in the same model response."""
    for message in reversed(messages):
        ids = [getattr(part, "tool_call_id", None) for part in getattr(message, "parts", ())]
        if getattr(message, "kind", "") == "response" and first in ids:
            return call_id in ids[ids.index(first) + 1 :]
    return False


def _deferral_refused(name: str, exc: BaseException) -> str:
    kind = type(exc).__name__
    return (
        f"refused: the tool {name} raised Pydantic AI's {kind} itself, and behind AgentrtGate "
        "a call waits for a person only where agentrt's policy asks (the tool's "
        "Classification), so the call ends here as failed"
    )


def _held_ended(run: agentrt.Run, call_id: str, waiting_for: str) -> str:
    return (
        f"not run and not recorded: the call {call_id} was held behind call {waiting_for}, "
        f"and {ended_message(run)}"
    )


def _end_of(run: agentrt.Run) -> AgentRunError:
    message = ended_message(run)
    if run.reason.startswith("limit_") or run.reason in ("loop_detected", "repeated_tool_failures"):
        return GateLimitExceeded(message, run)
    return RunEndedError(message, run)
