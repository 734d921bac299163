"""`gate_agent`: an Agents SDK agent whose every function-tool call goes through the Gate.

The consumer keeps its `Agent`, its model and its `@function_tool`s. `gate_agent`
returns a `GatedAgent`, built once; each framework run names its agentrt run
through a `GatedRun` (`new_run()`, `resume(run_id)`) whose `agent` is a clone
with each function tool wrapped in a `FunctionTool` that keeps every setting
of the consumer's (name, description, schema, ...) but three, the Gate's: its
timeout (enforced by agentrt's execution, then answered as the SDK answers a
timeout) and its two SDK extension points:

- `needs_approval` (a callable, evaluated by the SDK right before it would
  invoke the tool): claims a step, records the model's call verbatim (its
  argument text as the model wrote it, captured by the agent's `on_llm_end`
  hook, and its call id), checks it against the schema and asks the policy.
  It answers True only when the policy (or the tool's own `needs_approval`,
  decision 0052) asks for a person, so `require_approval` surfaces as the
  SDK's own interruption (`RunResult.interruptions`, `RunState.approve/reject`).
- `on_invoke_tool`: runs what the Gate allowed, once, through `step.execute()`
  (the original tool runs inside the agentrt tool, with the recorded
  arguments); a denial or an invalid call comes back to the model as a tool
  error string (the SDK's convention for a tool error the model should see);
  an ended run raises `RunEndedError` out of `Runner.run`.

Invariants:

- Only what `gate_agent` gated is offered: the agent is checked again at each
  `new_run()`/`resume()`, and the run's agent at each framework run's start,
  so a handoff, an MCP server or a tool added later is refused, never run
  ungated. A run id agentrt cannot hold is refused before the model is asked.
- One agentrt run per framework run: `GatedRun.run_id`, kept by the consumer
  beside the serialized `RunState`, names it in every process. A framework run
  that names none, a resume naming a run the store never recorded, and a run
  state holding calls the named run never recorded are refused: nothing starts
  a new run in the place of one it cannot find. A framework run that does not
  hold the call the run waits on (a new input after a call was cut off) is
  refused in `on_start`, before the model is asked: nothing would carry that
  call out, and its calls would be held behind it for ever.
- The SDK's approval is by call id; agentrt's is by hash. An SDK approval
  (`state.approve`) reaches the tool only through agentrt's decision, bound to
  the hash of the request rebuilt from the arguments the SDK is about to run:
  changed arguments are refused (`RequestChangedError`), never run. An
  `interrupted_side_effect` approval is never decided by an SDK approval
  (`InterruptedSideEffectError`): a person decides it through agentrt.
- A call made while the run waits on another call of the same response is
  held (an SDK interruption agentrt does not record, `GatedRun.held`); once
  the SDK goes on with it, the Gate judges it in its turn, after the waiting
  call. Calls take their turns in the model's order (`on_tool_start`), one at
  a time: the run has one open step (decision 0052).
- A call the Gate did not allow never reaches the original tool; a call cut off
  by a crash is not run again on anyone's say but a person's; a call agentrt
  already settled, issued again by a run state saved before its outcome, gets
  the recorded outcome back and never runs a second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import inspect
import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from agents import Agent, FunctionTool, Runner, RunResult, RunResultStreaming, RunState
from agents.exceptions import ToolTimeoutError
from agents.items import ModelResponse, ToolApprovalItem
from agents.lifecycle import AgentHooks
from agents.run_context import RunContextWrapper
from agents.tool import default_tool_timeout_error_message
from agents.tool_context import ToolContext
from openai.types.responses import ResponseFunctionToolCall
from pydantic import BaseModel

from agentrt import (
    Approval,
    ApprovalChangedError,
    ApprovalStatus,
    ConfigError,
    Decision,
    Gate,
    GateSession,
    GateStep,
    JSONValueError,
    Limits,
    NotFoundError,
    NotPendingError,
    Observation,
    ObservationKind,
    Operator,
    Policy,
    PolicyDecision,
    PolicyOutcome,
    Run,
    RunStateError,
    RunStatus,
    RunView,
    StepStatus,
    Store,
    ToolCall,
    ToolRequest,
    ToolResult,
    ToolSpec,
    Verdict,
    approval_hash,
    canonical_json,
    check_json,
    need_approval,
)
from agentrt.adapters import Classification, classify, ended_message, tool_spec
from agentrt.adapters._calls import CallMarker
from agentrt.adapters._operation import running, with_reconcile
from agentrt.adapters._wait import POLL_INTERVAL, attach_unless_ended, until_decided
from agentrt.adapters._wait import poll_interval as check_poll_interval
from agentrt.lowlevel import (
    INTERRUPTED_SIDE_EFFECT,
    Clock,
    IdFactory,
    evaluate,
    parse_json,
    policy_id_of,
    step_of_run,
)

from ._errors import (
    AgentChangedError,
    ApprovalPendingError,
    InterruptedSideEffectError,
    RequestChangedError,
    RunEndedError,
    RunMismatchError,
    RunNotNamedError,
)

__all__ = ["GatedAgent", "GatedRun", "HeldCall", "gate_agent"]

CALL_REASON_PREFIX = "openai-agents call_id "
"""A recorded decision's `reason` names the SDK call id it came from (how a resume finds it)."""

HELD_REASON_PREFIX = "openai-agents held call_id "
"""The reason of a call held behind a waiting one, then judged in its turn (decision 0052)."""

_REFUSALS = (
    AgentChangedError,
    ApprovalPendingError,
    InterruptedSideEffectError,
    RequestChangedError,
    RunEndedError,
    RunMismatchError,
    RunNotNamedError,
)
"""The adapter's own refusals: the run is left as the refusal says, never failed for them."""

_TOOL_CONTEXT: contextvars.ContextVar[ToolContext[Any] | None] = contextvars.ContextVar(
    "agentrt_openai_agents_tool_context", default=None
)


TOOL_APPROVAL_KIND = "tool_needs_approval"
"""The kind of approval asked because the tool's own `needs_approval` asks for a person."""

_TOOL_ASKS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "agentrt_openai_agents_tool_asks", default=False
)
"""What a tool's own callable `needs_approval` answered for the call being proposed now."""

_RUN_ID = re.compile(r"[0-9a-f]{32}")
"""What a run id is (store.md): anything else is refused before the model is asked."""

_CALLS = CallMarker(CALL_REASON_PREFIX)
_HELD = CallMarker(HELD_REASON_PREFIX)


@dataclass(frozen=True)
class HeldCall:
    """An SDK interruption held behind a call that waits for a person (decision 0052).

    agentrt has not recorded it and asks nobody about it: there is nothing for a
    person to decide. `behind` is the call id the run waits on (None once that
    call is settled). `state.approve(item)` only lets the SDK go on with it;
    the Gate judges it in its turn when the framework run resumes.
    """

    item: ToolApprovalItem
    call_id: str
    tool: str
    behind: str | None


@dataclass
class _Judged:
    """What the Gate made of one SDK call in this process: its verdict and, if allowed, its step."""

    outcome: str
    step: GateStep | None = None
    observation: Observation | None = None
    call_id: str | None = None  # allowed: the SDK call id the step recorded
    args: Any = None  # allowed: the arguments the step recorded (and the policy judged)
    tool: str | None = None  # allowed: the tool the step recorded


class _GatedTool:
    """The agentrt side of one SDK function tool: runs the original tool with the recorded args."""

    def __init__(self, spec: ToolSpec, original: FunctionTool, owner: GatedAgent) -> None:
        self.spec = spec
        self._original = original
        self._owner = owner

    async def call(self, call: ToolCall) -> ToolResult:
        context = _TOOL_CONTEXT.get()
        if context is None:  # only `execute()` inside `on_invoke_tool` calls a gated tool
            raise RuntimeError(f"tool {self.spec.name!r} was called outside the Agents SDK")
        arguments = canonical_json(call.args if call.args is not None else {}).decode("utf-8")
        try:
            with running(call):  # the original tool's `current_operation_id()`
                output = await self._original.on_invoke_tool(context, arguments)
        except Exception as exc:
            self._owner._raised[call.step_id] = exc
            raise
        self._owner._outputs[call.step_id] = output
        return ToolResult(content=_as_json(output))


class _ToolAsksToo:
    """The consumer's policy and each tool's own `needs_approval`: either may ask for a person.

    A call the policy allows is sent to a person (`tool_needs_approval`,
    bound by hash like any approval) when its tool was made with
    `needs_approval=True`, or with a callable that answered True for the call
    (`_TOOL_ASKS`, set around the proposal). The policy's deny, abort or own
    approval stands as it is. Asked again when a waiting run resumes, a
    callable tool's answer is not known there: the policy's allow stands, and
    the person already approved.
    """

    def __init__(self, policy: Policy, always: frozenset[str], by_call: frozenset[str]) -> None:
        self._policy = policy
        self._always = always
        self._by_call = by_call
        inner = policy_id_of(policy)
        self.policy_id = f"{inner} + openai-agents needs_approval" if inner else ""

    async def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        decision = await evaluate(self._policy, request, view)
        name = request.spec.name
        asks = name in self._always or (name in self._by_call and _TOOL_ASKS.get())
        if decision.outcome != PolicyOutcome.ALLOW or not asks:
            return decision
        shown = {"tool": name, "args": request.args}
        return need_approval(
            TOOL_APPROVAL_KIND,
            f"tool {name!r} asks for a person before each call it makes (its needs_approval)",
            capability=shown,
            presentation=shown,
        )


async def _tool_asks(
    tool: FunctionTool, context: RunContextWrapper[Any], params: dict[str, Any], call_id: str
) -> bool:
    """What the tool's own `needs_approval` answers for this call (as the SDK would ask it)."""
    setting = tool.needs_approval
    if isinstance(setting, bool):
        return setting
    answer: Any = setting(context, params, call_id)
    if inspect.isawaitable(answer):
        answer = await answer
    return bool(answer)


def _as_json(value: Any) -> Any:
    """What agentrt records of a tool's output: the value when it is JSON, else its text.

    A pydantic model is recorded as its JSON dump, or as its text when that
    dump is not JSON either (a float that is `inf` or `nan`). In the text, a
    lone surrogate is written `\\udXXX`, so what is recorded is always text.
    """
    dumped = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    try:
        check_json(dumped)
    except JSONValueError:
        return str(value).encode("utf-8", "backslashreplace").decode("utf-8")
    return dumped


class _Hooks(AgentHooks[Any]):
    """The agent's hooks, and the adapter's: the model's argument text, and the run's end."""

    def __init__(self, owner: GatedRun | None, inner: Any) -> None:
        self._owner = owner  # None: the agent of `GatedAgent.agent`, which names no run
        self._inner = inner

    def _run(self) -> GatedRun:
        if self._owner is None:
            raise RunNotNamedError(NOT_NAMED)
        return self._owner

    async def on_start(self, context: Any, agent: Any) -> None:
        # A new framework run: nothing of an earlier one of this run is in flight.
        run = self._run()
        run._refuse_if_changed(agent)
        await run._drop_unstarted()
        # The SDK reaches this hook after it settled the interruptions of a resumed
        # state and before it asks the model: a call the run still waits on is
        # one this framework run does not carry (decision 0052).
        await run._refuse_if_waiting_elsewhere(context)
        if self._inner is not None:
            await self._inner.on_start(context, agent)

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        if self._inner is not None:
            await self._inner.on_end(context, agent, output)
        await self._run()._complete(context, output)

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        if self._inner is not None:
            await self._inner.on_handoff(context, agent, source)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        call_id = getattr(context, "tool_call_id", None)
        if isinstance(call_id, str) and isinstance(tool, FunctionTool):
            # The SDK starts the tasks of one batch in the model's order and reaches
            # this hook in that order: the call takes its turn here, before any
            # hook of the consumer can make a later call overtake it.
            await self._run()._take_turn(call_id)
        if self._inner is not None:
            try:
                await self._inner.on_tool_start(context, agent, tool)
            except BaseException:
                if self._owner is not None and self._owner._holder == call_id:
                    self._owner._end_turn()  # the SDK will not invoke the call
                raise

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        if self._inner is not None:
            await self._inner.on_tool_end(context, agent, tool, result)

    async def on_llm_start(self, context: Any, agent: Any, *args: Any) -> None:
        if self._inner is not None:
            await self._inner.on_llm_start(context, agent, *args)

    async def on_llm_end(self, context: Any, agent: Any, response: ModelResponse) -> None:
        run = self._run()
        unusable = False
        for item in response.output:
            if isinstance(item, ResponseFunctionToolCall):
                run._arguments[item.call_id] = item.arguments
                unusable = unusable or not isinstance(_loads_or_none(item.arguments), dict)
        if unusable:
            # The SDK holds such a call for a person before any tool hook runs:
            # the agentrt run must exist for `resume(run_id)` to find it later.
            await run._recorded_run()
        if self._inner is not None:
            await self._inner.on_llm_end(context, agent, response)


NOT_NAMED = (
    "this framework run names no agentrt run: run `gated.new_run().agent` for a new one, "
    "or `gated.resume(run_id).agent` with the run id saved beside the run state"
)


class GatedAgent:
    """An Agents SDK agent whose function-tool calls go through the Gate; built once, run often.

    Each framework run names its agentrt run: `new_run()` for a new one,
    `resume(run_id)` (the id saved beside the serialized `RunState`) to go on
    with one. Give `Runner.run` that `GatedRun`'s `agent` (or call its `run`).
    `agent` here names no run: a framework run of it is refused
    (`RunNotNamedError`) before the model is asked.
    """

    def __init__(
        self,
        agent: Agent[Any],
        *,
        store: Store,
        policy: Policy,
        classifications: Mapping[str, Classification],
        limits: Limits | None = None,
        goal: str | None = None,
        approved_by: str = "openai-agents state.approve",
        now: Clock | None = None,
        new_id: IdFactory | None = None,
        lease_ttl: timedelta = timedelta(seconds=30),
    ) -> None:
        if not isinstance(agent, Agent):
            raise ConfigError(f"gate_agent needs an agents.Agent, got {type(agent).__name__}")
        tools = _function_tools(agent)
        classes = _classify_tools(tools, classifications)
        gated = [
            with_reconcile(
                _GatedTool(
                    tool_spec(t.name, t.description, t.params_json_schema, classes[t.name]),
                    t,
                    self,
                ),
                classes[t.name].reconcile,
            )
            for t in tools
        ]
        own = {t.name: t.needs_approval for t in tools if t.needs_approval is not False}
        if own:
            always = frozenset(n for n, v in own.items() if v is True)
            policy = _ToolAsksToo(policy, always, frozenset(own) - always)
        self._tools = {t.name: t for t in tools}
        self._timeouts = {n: c.timeout for n, c in classes.items()}
        self.gate = Gate(
            store=store,
            policy=policy,
            tools=gated,
            now=now,
            new_id=new_id,
            lease_ttl=lease_ttl,
            origin="adapter:openai-agents",
        )
        self.store = store
        self.limits = limits or Limits()
        self.goal = goal if goal is not None else f"OpenAI Agents SDK run of agent {agent.name!r}"
        self.approved_by = approved_by
        self._operator = Operator(store, now=now)
        self._now = now
        self._new_id: IdFactory = new_id or _new_run_id
        self._source = agent
        # Keyed by agentrt step id (unique across runs): what the original tool gave.
        self._outputs: dict[str, Any] = {}
        self._raised: dict[str, BaseException] = {}
        self.agent: Agent[Any] = self._bound(None)

    def new_run(self, run_id: str | None = None) -> GatedRun:
        """A new agentrt run for a new framework run (`run_id` made when not given; keep it).

        An id agentrt cannot hold (not 32 lowercase hex characters) is refused
        here (`ConfigError`), before any model is asked.
        """
        run_id = _checked_run_id(run_id if run_id is not None else self._new_id())
        try:
            self.store.get_run(run_id)
        except NotFoundError:
            return GatedRun(self, run_id)
        raise RunMismatchError(
            f"agentrt run {run_id} exists already; go on with it through resume({run_id!r})"
        )

    def resume(self, run_id: str) -> GatedRun:
        """The agentrt run `run_id` (saved beside the run state), for a resumed framework run.

        Refused (`RunMismatchError`) when this store never recorded that run:
        a resume never starts a new run in its place.
        """
        if not isinstance(run_id, str) or not run_id:
            raise RunNotNamedError(NOT_NAMED)
        _checked_run_id(run_id)
        try:
            self.store.get_run(run_id)
        except NotFoundError:
            raise RunMismatchError(
                f"agentrt run {run_id} was never recorded in this store; a resume names the "
                "run its state was saved with (nothing was started in its place)"
            ) from None
        return GatedRun(self, run_id)

    def _bound(self, run: GatedRun | None) -> Agent[Any]:
        """A clone of the agent whose wrapped tools and hooks belong to `run`.

        The agent is checked again as it is now: a handoff, an MCP server or a
        tool added to it after `gate_agent` is refused (`ConfigError`), never
        offered ungated. The clone's lists are its own.
        """
        source = self._source
        tools = _function_tools(source)
        added = [t.name for t in tools if self._tools.get(t.name) is not t]
        if added:
            raise ConfigError(
                f"agent {source.name!r} offers tools added or replaced after gate_agent "
                f"({', '.join(repr(n) for n in added)}), which the Gate has not classified; "
                "call gate_agent again with the agent as it is now"
            )
        return source.clone(
            tools=[_wrap(t, run) for t in tools],
            handoffs=[],
            mcp_servers=[],
            hooks=_Hooks(run, source.hooks),
        )


class GatedRun:
    """One framework run of a `GatedAgent` and the agentrt run it names (`run_id`).

    `agent` is what you give `Runner.run`; `run_agent(...)` calls it for you and,
    like `async with`, ends the agentrt run with `agent_error` when the
    framework run raises (a model error, `MaxTurnsExceeded`) and lets go of
    the run's lease at the end. `run_agent_streamed` and `run_agent_sync` are
    the same for `Runner.run_streamed` and a program without an event loop.
    """

    def __init__(self, owner: GatedAgent, run_id: str) -> None:
        self._owner = owner
        self.run_id = run_id
        self.gate = owner.gate
        self.store = owner.store
        self.limits = owner.limits
        self.goal = owner.goal
        self.approved_by = owner.approved_by
        self._operator = owner._operator
        self._session: GateSession | None = None
        self._judged: dict[str, _Judged] = {}
        self._arguments: dict[str, str] = {}
        self._locks: dict[int, asyncio.Lock] = {}  # per event loop: one call judged at a time
        self._holder: str | None = None  # the SDK call id holding the lock
        self._watchers: set[asyncio.Task[None]] = set()
        self._in_flight: asyncio.Task[Any] | None = None  # the task running a tool now
        # A call cut off by a crash whose tool's reconciliation vouched it may run
        # again, held allowed by the takeover until the SDK invokes it (decision 0091).
        self._vouched: _Judged | None = None
        self.agent: Agent[Any] = owner._bound(self)
        self._offered = tuple(self.agent.tools)  # the wrapped tools, as `new_run` made them

    # -- what the consumer calls ---------------------------------------------

    async def run_agent(
        self,
        input: Any,
        *,
        wait_for_person: bool = False,
        poll_interval: float = POLL_INTERVAL,
        **runner_kwargs: Any,
    ) -> RunResult:
        """`Runner.run(self.agent, input, ...)`; an exception out of it ends the agentrt run.

        With `wait_for_person=True`, a run that stops on interruptions because
        agentrt waits for a person is not handed back: the store is read every
        `poll_interval` seconds (lease let go) until the person decides from
        any process (`agentrt approve`, the console, the webhook), the
        decision is carried into the run state (`apply_decisions`) and the run
        goes on, as often as a person is asked. A rejection, an expiry or a
        cancel is told to the model as the SDK's rejection of the call; the
        call never runs. Interruptions agentrt has no approval for are handed
        back in the result, as without it.
        """
        if not isinstance(wait_for_person, bool):
            raise ConfigError("wait_for_person must be True or False")
        every = check_poll_interval(poll_interval)
        if not wait_for_person:
            async with self:
                return await Runner.run(self.agent, input, **runner_kwargs)
        answered: set[str] = set()
        saved: str | None = None  # the run state the last interruptions were saved in
        given: Any = input
        while True:
            try:
                async with self:
                    result = await Runner.run(self.agent, given, **runner_kwargs)
            except ApprovalPendingError:
                # A held call the policy sent to a person (decision 0052): wait on
                # its approval, then go on from the state saved before, where the
                # call ahead of it gets its recorded outcome and this one runs once.
                if saved is None:
                    raise
                state = await self.load_state(saved)
                if not await self._wait_for_person(state, every, set()):
                    raise
                given = await self.load_state(saved)
                continue
            if not result.interruptions:
                return result
            state = result.to_state()
            saved = state.to_string()
            if not await self._wait_for_person(state, every, answered):
                return result
            given = state

    def run_agent_sync(
        self,
        input: Any,
        *,
        wait_for_person: bool = False,
        poll_interval: float = POLL_INTERVAL,
        **runner_kwargs: Any,
    ) -> RunResult:
        """`run_agent` on an event loop of its own, for a program without one (as `run_sync`)."""
        return asyncio.run(
            self.run_agent(
                input, wait_for_person=wait_for_person, poll_interval=poll_interval, **runner_kwargs
            )
        )

    async def _wait_for_person(
        self, state: RunState[Any, Agent[Any]], every: float, answered: set[str]
    ) -> bool:
        """Wait until the interruptions of `state` are decided in agentrt; carry the decisions in.

        False when there is nothing of agentrt's to wait for (an interruption
        it has no approval for, or one already answered): the result is then
        handed back as it is.
        """
        items = [i for i in state.get_interruptions() if i.call_id not in answered]
        if not items:
            return False
        pending = self.pending()
        if not pending and not any(self._approval_for(i) for i in items):
            return False  # interruptions the SDK raised itself: no approval of agentrt's
        if pending:
            approval = await until_decided(
                self.store, self.run_id, pending[-1].id, every=every, clock=self._owner._now
            )
            lapsed = approval.status == ApprovalStatus.PENDING
            if lapsed and self.run.status == RunStatus.WAITING_FOR_APPROVAL:
                with contextlib.suppress(RunStateError):  # attach records the expiry
                    session, _ = await self.gate.attach(self.run_id)
                    await session.close()
        # Expired or cancelled while waiting: the SDK tells the model the call was not run.
        await self.apply_decisions(state)
        answered.update(i.call_id for i in items if i.call_id is not None)
        return True

    def run_agent_streamed(self, input: Any, **runner_kwargs: Any) -> RunResultStreaming:
        """`Runner.run_streamed(self.agent, input, ...)`, with `run_agent`'s ending when it stops.

        The same Gate: an allowed call runs once, `require_approval` ends the
        stream with `result.interruptions`, the final output completes the
        agentrt run when the stream is consumed to its end. When the run loop
        raises (a model error), the agentrt run fails with `agent_error`; an
        error the SDK raises only from `stream_events()` (`MaxTurnsExceeded`)
        is seen by `async with run:` around the consuming loop. A cancelled
        stream (`result.cancel()`) leaves a call cut off mid-way as a crash
        leaves it. When the run loop stops, this process lets go of the run's
        lease (`close()` and the exit of `async with run:` wait for that, so the
        failure `async with` records is made after it, never beside it).
        """
        result = Runner.run_streamed(self.agent, input, **runner_kwargs)
        task = result.run_loop_task
        if task is not None:
            task.add_done_callback(lambda _: self._stream_stopped(result))
        return result

    def _stream_stopped(self, result: RunResultStreaming) -> None:
        watcher = asyncio.get_running_loop().create_task(self._after_stream(result))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def _after_stream(self, result: RunResultStreaming) -> None:
        try:
            error = result.run_loop_exception  # None when it completed or was cancelled
            if isinstance(error, Exception) and not isinstance(error, _REFUSALS):
                await self._failed(error)
        finally:
            await self._release()

    def held(self, source: Any) -> list[HeldCall]:
        """The interruptions of `source` (a result or a run state) held behind a waiting call.

        `pending()` lists what a person decides; these are the other
        interruptions of the same model response, which agentrt has not
        recorded yet. Each is judged by the Gate in its turn after the waiting
        call is settled; an SDK approval of one only lets the SDK go on with it.
        """
        if isinstance(source, RunState):
            items = source.get_interruptions()
        else:
            items = [i for i in source.interruptions if isinstance(i, ToolApprovalItem)]
        behind = self._waiting_call()
        return [
            HeldCall(item, item.call_id, item.tool_name or "?", behind)
            for item in items
            if item.call_id is not None and self._is_held(item.call_id, item.arguments)
        ]

    @property
    def run(self) -> Run:
        """The agentrt run as recorded now."""
        return self.store.get_run(self.run_id)

    def pending(self) -> list[Approval]:
        """The agentrt approvals this run waits on (show them, with `agentrt approve`'s text)."""
        try:
            return self.store.pending_approvals(self.run_id, cap=None)
        except NotFoundError:
            return []

    async def load_state(self, state_json: str | Mapping[str, Any]) -> RunState[Any, Agent[Any]]:
        """`RunState.from_json` for this agent, with agentrt's decisions carried into it."""
        if isinstance(state_json, str):
            state = await RunState.from_string(self.agent, state_json)
        else:
            state = await RunState.from_json(self.agent, dict(state_json))
        items = state.get_interruptions()
        unknown = [
            item.call_id
            for item in items
            if item.call_id is None or not self._knows(item.call_id, item.arguments)
        ]
        if unknown and len(unknown) < len(items) and None not in unknown:
            unknown = []  # held beside a call this run recorded (decision 0052)
        if unknown:
            raise RunMismatchError(
                f"the run state holds tool calls agentrt run {self.run_id} never recorded "
                f"({', '.join(repr(c) for c in unknown)}): it was saved with another run; "
                "resume the run it names"
            )
        await self.apply_decisions(state)
        return state

    async def apply_decisions(self, state: RunState[Any, Agent[Any]]) -> None:
        """Carry agentrt's decisions (`agentrt approve`/`reject`) into the SDK's run state.

        A run whose owner died is taken over first, so a call cut off by the
        crash waits on an `interrupted_side_effect` approval before anyone is
        asked. An approved request becomes `state.approve(item)`, a rejected
        one `state.reject(item)`; a pending one stays an interruption. Once the
        run has ended otherwise (an approval expired, or `agentrt cancel`), a
        call its approval did not decide becomes the SDK's rejection, telling
        the model it was not run (as `run_agent(wait_for_person=True)` tells
        it): an interruption nobody can decide any more is not handed back. So
        does a call beside it that agentrt has no approval for (one the SDK held
        itself); a call cut off mid-way (`interrupted_side_effect`) is told it is
        not run again and that whether it took effect is unknown.
        """
        await self._take_over_if_orphaned()
        undecided: list[tuple[ToolApprovalItem, Approval | None]] = []
        for item in state.get_interruptions():
            approval = self._approval_for(item)
            if approval is None:
                # One the SDK held itself (arguments not a JSON object) or one held
                # behind the waiting call: not run either once the run has ended.
                undecided.append((item, None))
                continue
            if approval.status == ApprovalStatus.APPROVED:
                state.approve(item)
            elif approval.status == ApprovalStatus.REJECTED:
                state.reject(item, rejection_message=_rejection_text(approval))
            else:
                undecided.append((item, approval))
        run = self._run_or_none() if any(a is not None for _, a in undecided) else None
        if _has_ended(run):
            assert run is not None
            for item, approval in undecided:
                state.reject(item, rejection_message=_not_run_text(run, approval))
        self._release_held(state)

    def _release_held(self, state: RunState[Any, Agent[Any]]) -> None:
        """Calls held behind a decided one: let the SDK go on with them, or answer the run's end.

        Once nothing waits for a person, a held call is approved in the SDK
        state only so that the SDK continues it: the Gate judges it in its turn.
        When the run has ended (the waiting call rejected), the SDK answers the
        model that it was not run; agentrt records nothing for it.
        """
        held = self.held(state)
        if not held or self.pending():
            return
        run = self._run_or_none()
        ended = _has_ended(run)
        for call in held:
            if ended:
                assert run is not None
                state.reject(call.item, rejection_message=f"not run: {ended_message(run)}")
            else:
                state.approve(call.item)

    async def approve(
        self, state: RunState[Any, Agent[Any]], item: ToolApprovalItem, *, by: str, note: str = ""
    ) -> Approval:
        """Approve `item` in agentrt (bound to the hash of its arguments) and in the SDK state.

        For an `interrupted_side_effect` approval, show `pending()` first: the
        person must know the call may already have taken effect.
        """
        if await self._take_over_if_orphaned():
            approval = self._approval_for(item)
            if approval is not None and approval.kind == INTERRUPTED_SIDE_EFFECT:
                raise InterruptedSideEffectError(self.run_id, approval.id, approval_tool(approval))
        approval = self._pending_for(item)
        decided = self._decide(approval, item.arguments or "", approved=True, by=by, note=note)
        state.approve(item)
        self._release_held(state)
        return decided

    async def reject(
        self, state: RunState[Any, Agent[Any]], item: ToolApprovalItem, *, by: str, note: str = ""
    ) -> Approval:
        """Reject `item` in agentrt (the run is cancelled) and in the SDK state."""
        approval = self._pending_for(item)
        decided = self._decide(approval, item.arguments or "", approved=False, by=by, note=note)
        state.reject(item, rejection_message=_rejection_text(decided))
        self._release_held(state)
        return decided

    async def close(self) -> None:
        """Release this process's lease on the run (an open step is left as a crash leaves it)."""
        await self._streams_ended()
        await self._release()

    async def _streams_ended(self) -> None:
        """Wait until what a stopped stream does (`_after_stream`) has been done.

        A streamed run's ending fails the run or lets go of its session in a
        task of its own: nothing else uses the session until that is over, so a
        failure recorded by `async with` never races the stream's letting go.
        """
        current = asyncio.current_task()
        watchers = [w for w in self._watchers if w is not current]
        if watchers:
            await asyncio.gather(*watchers, return_exceptions=True)

    async def _release(self) -> None:
        in_flight = self._in_flight
        if in_flight is not None and in_flight is not asyncio.current_task():
            # A call cut off mid-way (a cancelled stream) is recorded before we let go.
            await asyncio.wait([in_flight])
        session, self._session = self._session, None
        self._vouched = None  # held by the session given up: the next takeover asks again
        # A call cut off mid-way (a cancelled run) may still hold its turn.
        self._locks, self._holder = {}, None
        if session is not None:
            await session.close()

    async def __aenter__(self) -> GatedRun:
        return self

    async def __aexit__(self, kind: object, error: BaseException | None, tb: object) -> None:
        try:
            # The stream's own ending first (`MaxTurnsExceeded` leaves the run loop with
            # no error of its own: the stream lets go, then this fails the run).
            await self._streams_ended()
            if isinstance(error, Exception) and not isinstance(error, _REFUSALS):
                await self._failed(error)
        finally:
            await self.close()

    async def _failed(self, error: BaseException) -> None:
        """The framework run raised: the agentrt run ends as the Driver ends it on an error.

        A call cut off mid-way is left as a crash would leave it; a run that
        waits on a person, or has ended, is left as it is.
        """
        await self._drop_unstarted()  # an allowed call never invoked is no cut-off call
        if self._session is None:
            run = self._run_or_none()
            if run is None or run.status != RunStatus.RUNNING:
                return
            _, verdict = await self._open()
            if verdict is not None:
                return
        session = self._session
        if session is None or session.done or session.current() is not None:
            return
        step = await session.step()
        if step is not None:
            await step.fail(error)

    def _refuse_if_changed(self, agent: Any) -> None:
        """Refuse a framework run whose agent offers what `new_run` did not gate.

        A handoff, an MCP server or a tool put on `run.agent` after it was
        made would run its tools ungated: the framework run is refused at its
        start, before the model is asked, and nothing is recorded.
        """
        tools = getattr(agent, "tools", None) or []
        ungated = [t for t in tools if not any(t is g for g in self._offered)]
        if getattr(agent, "handoffs", None) or getattr(agent, "mcp_servers", None) or ungated:
            raise AgentChangedError(
                f"agent {getattr(agent, 'name', '?')!r} of agentrt run {self.run_id} offers "
                "handoffs, MCP servers or tools added after it was gated, which would bypass "
                "the Gate; nothing was asked of the model and nothing ran"
            )

    # -- the wrapped tools ---------------------------------------------------

    def _lock(self) -> asyncio.Lock:
        loop = id(asyncio.get_running_loop())
        lock = self._locks.get(loop)
        if lock is None:
            self._locks = {loop: (lock := asyncio.Lock())}
        return lock

    async def _take_turn(self, call_id: str) -> None:
        """The call `call_id` is about to be invoked: it waits for the calls before it."""
        if self._holder == call_id:
            return  # an allowed call holds its turn since `needs_approval`
        await self._lock().acquire()
        self._holder = call_id

    async def _drop_unstarted(self) -> None:
        """Forget a call the Gate allowed that the SDK never invoked, and any turn still held.

        A consumer's `on_tool_start` hook (the agent's or the run's) that raises
        stops the SDK before it invokes the call: the call's turn stays taken and
        its allowed step open, its tool never started. When the framework run
        has ended (a new one starts, or `run_agent` ends on the error), this
        process lets go of the session; the step stays deciding, which the next
        attach continues past (nothing ran).
        """
        if self._in_flight is not None:
            return  # a tool runs: its step is cut off mid-way, not unstarted
        self._locks, self._holder = {}, None
        session = self._session
        step = session.current() if session is not None else None
        if step is None:
            return
        # Not recorded yet: its claim and decision wait for the step's next commit, which
        # closing the session makes (the step left deciding; decision 0088).
        recorded = step_of_run(self.store, self.run_id, step.id)
        if recorded is None or recorded.status == StepStatus.DECIDING:
            self._judged = {k: v for k, v in self._judged.items() if v.step is not step}
            await self._let_go()

    def _end_turn(self) -> None:
        lock = self._lock()
        self._holder = None
        if lock.locked():
            lock.release()

    async def _needs_approval(
        self, name: str, context: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        judged = self._judged.get(call_id)
        if judged is not None:
            return judged.outcome == "pending"
        # One call at a time, from its judging to the end of its execution: the
        # run has one open step. An allowed call keeps the lock until `_invoke`.
        await self._take_turn(call_id)
        try:
            judged = await self._judge(name, context, params, call_id)
        except BaseException:
            self._end_turn()
            raise
        self._judged[call_id] = judged
        if judged.outcome != "allowed":
            self._end_turn()
        return judged.outcome == "pending"

    async def _judge(
        self,
        name: str,
        context: RunContextWrapper[Any],
        params: dict[str, Any],
        call_id: str,
        *,
        held: bool = False,
    ) -> _Judged:
        session, verdict = await self._open(context)
        if self._vouched is not None and verdict is None:
            return await self._take_vouched(call_id)
        if session is None and verdict is None and self._still_waits():
            # The run waits on another call of this response: this one is held
            # (an SDK interruption agentrt does not record), judged in its turn.
            return _Judged("pending")
        if verdict is not None:
            if self._held_behind_decided(verdict, call_id):
                # A person decided the call ahead of this one in the moment between the
                # SDK's two judgements: this call stays held behind it, as if the person
                # had been slower; the next attach gives the decided call its verdict.
                await self._let_go()
                return _Judged("pending")
            return self._judged_from(verdict, session, call_id)
        if session is None:
            return _Judged("ended")
        text = self._arguments.get(call_id)
        if text is None:
            text = canonical_json(params).decode("utf-8")
        settled = self._settled_call(call_id, name, text)
        if settled is not None:
            # A call agentrt already settled, issued again by a resumed run state
            # that predates its outcome: the model gets the recorded outcome.
            return settled
        # The tool's own callable `needs_approval`, asked before a step is claimed:
        # if it raises, nothing is recorded for the call.
        tool = self._owner._tools.get(name)
        asks = (
            tool is not None
            and callable(tool.needs_approval)
            and await _tool_asks(tool, context, params, call_id)
        )
        step = await session.step()
        if step is None:
            await self._let_go()
            return _Judged("ended")
        text = self._arguments.get(call_id)
        args: Any = text.encode("utf-8") if text is not None else params
        marker = _HELD if held else _CALLS
        token = _TOOL_ASKS.set(asks)
        try:
            decision = Decision.tool_call(name, args, reason=marker.reason(call_id))
            verdict = await step.propose(decision)
        finally:
            _TOOL_ASKS.reset(token)
        if verdict.outcome == "allowed":
            assert verdict.request is not None
            return _Judged(
                "allowed", step, None, call_id, verdict.request.args, verdict.request.spec.name
            )
        if session.done:
            await self._let_go()
        return _Judged(str(verdict.outcome), None, verdict.observation)

    async def _take_vouched(self, call_id: str) -> _Judged:
        """The call the tool's reconciliation vouched for, when the SDK invokes it again.

        Any other call meanwhile is refused (`RequestChangedError`), nothing
        recorded or run, and this process lets go of the run: the vouched step
        stays `interrupted`, so the next takeover asks the reconciliation again.
        """
        vouched, self._vouched = self._vouched, None
        assert vouched is not None
        if vouched.call_id != call_id:
            await self._let_go()
            raise RequestChangedError(
                f"agentrt run {self.run_id} first runs again call {vouched.call_id!r}, cut off "
                "by a crash, which its tool's reconciliation vouched is safe to repeat; the "
                f"call {call_id!r} is not it, and nothing ran: resume the run state that holds "
                "that call"
            )
        return vouched

    def _held_behind_decided(self, verdict: Verdict, call_id: str) -> bool:
        """`attach` allowed a call of this very response, judged pending a moment ago.

        The SDK judges a response's calls one by one; a person may approve the
        first between its judgement and the next one's. The run then no longer
        waits on a pending approval, and attaching judges the approved call: a
        verdict for another call than `call_id`, which is held behind it.
        """
        if str(verdict.outcome) != "allowed" or verdict.request is None:
            return False
        recorded = _call_id_of(self._decision_of(verdict.request.step_id))
        ahead = self._judged.get(recorded) if recorded is not None else None
        return recorded != call_id and ahead is not None and ahead.outcome == "pending"

    def _judged_from(self, verdict: Verdict, session: GateSession | None, call_id: str) -> _Judged:
        """The verdict `attach` gave, for the call being judged now."""
        outcome = str(verdict.outcome)
        if outcome == "allowed":
            assert session is not None and verdict.request is not None
            step = session.current()
            recorded = _call_id_of(self._decision_of(verdict.request.step_id))
            if step is None or recorded != call_id:
                raise RequestChangedError(
                    f"agentrt run {self.run_id} waits on another call than {call_id!r}; nothing ran"
                )
            return _Judged(
                "allowed", step, None, recorded, verdict.request.args, verdict.request.spec.name
            )
        return _Judged(outcome, None, verdict.observation)

    async def _invoke(self, name: str, context: ToolContext[Any], arguments: str) -> Any:
        call_id = context.tool_call_id
        judged = self._judged.pop(call_id, None)
        await self._take_turn(call_id)  # taken in `on_tool_start` (or `needs_approval`)
        try:
            if (
                judged is None
                and context.is_tool_approved(name, call_id) is True
                and not self._knows(call_id, arguments)
                and not self._beside_a_recorded_call(context)
            ):
                # A call approved in a run state this run never recorded: not this run's.
                raise RunMismatchError(
                    f"the call {call_id!r} of {name!r} was approved in a run state, but agentrt "
                    f"run {self.run_id} never recorded it; nothing ran"
                )
            if judged is None or judged.outcome == "pending":
                # The SDK runs this call on an approval of its own (`state.approve`):
                # it counts only as agentrt's hash-bound decision.
                judged = await self._judge_sdk_approved(name, context, call_id, arguments)
            return await self._settle(name, context, call_id, arguments, judged)
        finally:
            self._end_turn()

    async def _settle(
        self, name: str, context: ToolContext[Any], call_id: str, arguments: str, judged: _Judged
    ) -> Any:
        if judged.outcome == "allowed":
            assert judged.step is not None
            try:
                self._check_same_call(judged, name, call_id, arguments)
            except RequestChangedError:
                await self._let_go()  # the open step stays never run, as after a crash
                raise
            return await self._execute(name, judged.step, context)
        if judged.outcome == "recorded":
            observation = judged.observation
            assert observation is not None
            if observation.kind == ObservationKind.TOOL_RESULT:
                return observation.content
            return f"{observation.kind}: {observation.summary}"
        if judged.outcome in ("denied", "reused"):
            observation = judged.observation
            kind = observation.kind if observation is not None else "denied"
            summary = observation.summary if observation is not None else ""
            return f"{kind}: {summary}"
        if judged.outcome == "pending":
            waiting = self._approval_of_call(call_id)
            if waiting is not None and _HELD.call_id(self._decision_of(waiting.step_id)):
                raise ApprovalPendingError(
                    f"the call {call_id!r} of {name!r} was held behind another and, judged in "
                    f"its turn, waits for a person on approval {waiting.id} (hash "
                    f"{waiting.hash}) in agentrt run {self.run_id}; the SDK cannot pause a call "
                    f"it has begun, so nothing ran: decide it with `agentrt approve "
                    f"{self.run_id}` (or GatedRun.approve) and resume the run state saved "
                    "before this framework run",
                    run_id=self.run_id,
                    approval_id=waiting.id,
                    approval_hash=waiting.hash,
                )
            raise ApprovalPendingError(
                f"the call {call_id!r} of {name!r} waits for a person in agentrt run "
                f"{self.run_id}; nothing ran"
            )
        raise RunEndedError(self.store.get_run(self.run_id))

    async def _execute(self, name: str, step: GateStep, context: ToolContext[Any]) -> Any:
        token = _TOOL_CONTEXT.set(context)
        self._in_flight = asyncio.current_task()
        try:
            observation = await step.execute()
        finally:
            self._in_flight = None
            _TOOL_CONTEXT.reset(token)
        if self._session is not None and self._session.done:
            await self._let_go()
        raised = self._owner._raised.pop(step.id, None)
        if raised is not None:
            raise raised
        if step.id in self._owner._outputs:
            return self._owner._outputs.pop(step.id)
        tool = self._owner._tools.get(name)
        if tool is not None and tool.timeout_seconds is not None and _timed_out(observation):
            return await _timeout_answer(tool, context, self._owner._timeouts[name])
        return f"{observation.kind}: {observation.summary}"

    async def _judge_sdk_approved(
        self, name: str, context: ToolContext[Any], call_id: str, arguments: str
    ) -> _Judged:
        settled = self._settled_call(call_id, name, arguments)
        if settled is not None:
            return settled
        run = self._run_or_none()
        if run is not None and run.status == RunStatus.WAITING_FOR_APPROVAL:
            # A waiting call the SDK rejected ends the run before a call held behind it.
            self._carry_sdk_rejections(context)
            for approval in self.pending():
                decision = self._decision_of(approval.step_id)
                waits_on = _call_id_of(decision)
                if waits_on != call_id:
                    raise ApprovalPendingError(
                        f"the call {call_id!r} of {name!r} is held behind call {waits_on!r}, "
                        f"which waits for a person on approval {approval.id} in agentrt run "
                        f"{self.run_id}; nothing ran",
                        run_id=self.run_id,
                        approval_id=approval.id,
                        approval_hash=approval.hash,
                    )
                if approval.kind == INTERRUPTED_SIDE_EFFECT:
                    raise InterruptedSideEffectError(self.run_id, approval.id, name)
                if _HELD.call_id(decision) is not None:
                    # The SDK approved this call while it was held, before agentrt
                    # asked anyone about it: that approval decides nothing.
                    raise ApprovalPendingError(
                        f"the call {call_id!r} of {name!r} was held, then judged in its turn; "
                        f"it waits on approval {approval.id} (hash {approval.hash}), which an "
                        f"approval the SDK gave while it was held cannot decide: agentrt "
                        f"approve {self.run_id} (or GatedRun.approve), then resume; nothing ran",
                        run_id=self.run_id,
                        approval_id=approval.id,
                        approval_hash=approval.hash,
                    )
                with contextlib.suppress(NotPendingError):
                    # Decided elsewhere since `pending()` read it: that decision stands.
                    self._decide(
                        approval,
                        arguments,
                        approved=True,
                        by=self.approved_by,
                        note="approved through the Agents SDK (RunState.approve)",
                    )
        session, verdict = await self._open(context)
        if verdict is None:
            if session is None:
                # Ended meanwhile (a cancel after the look above): its recorded outcome.
                settled = self._settled_call(call_id, name, arguments)
                if settled is not None:
                    return settled
                return _Judged("pending" if self._waiting() else "ended")
            # Nothing waits any more: a call held behind the settled one is judged
            # now, in its turn, recorded verbatim (the model's argument text).
            self._arguments[call_id] = arguments
            held = isinstance(_loads_or_none(arguments), dict)
            return await self._judge(name, context, _loads(arguments), call_id, held=held)
        waiting = verdict.approval
        if (
            str(verdict.outcome) == "pending"
            and waiting
            and waiting.kind == INTERRUPTED_SIDE_EFFECT
        ):
            raise InterruptedSideEffectError(self.run_id, waiting.id, name)
        return self._judged_from(verdict, session, call_id)

    def _check_same_call(self, judged: _Judged, name: str, call_id: str, arguments: str) -> None:
        """The SDK is about to run exactly the call agentrt recorded (a resumed state may not):
        the same call id, tool and arguments."""
        if judged.call_id != call_id:
            raise RequestChangedError(f"the call {call_id!r} is not the one agentrt recorded")
        if judged.tool != name:
            raise RequestChangedError(
                f"the call {call_id!r} is of {name!r}, but agentrt recorded and judged a call "
                f"of {judged.tool!r}; nothing ran"
            )
        recorded = {} if judged.args is None else judged.args
        try:
            same = canonical_json(parse_json(arguments)) == canonical_json(recorded)
        except JSONValueError:
            same = False
        if not same:
            raise RequestChangedError(
                f"the arguments of call {call_id!r} are not the ones agentrt recorded and "
                "judged; nothing ran"
            )

    # -- the run's session -----------------------------------------------------

    async def _open(
        self, context: RunContextWrapper[Any] | None = None
    ) -> tuple[GateSession | None, Verdict | None]:
        """This process's session on the run: (session, None), or what `attach` judged.

        (None, None) when the run has ended, or waits on an approval nobody
        decided yet (`_waiting()`); a verdict when attaching judged something
        (a waiting run's decided approval, a takeover's pause).
        """
        if self._session is not None and not self._session.done:
            return self._session, None
        if self._watchers and asyncio.current_task() not in self._watchers:
            # A stream that stopped lets go of its session in a task of its own: a new
            # session of this gate waits for that release (a second live session is
            # refused, decision 0176). Not from such a task itself: two stopping streams
            # would each wait for the other.
            await self._streams_ended()
            if self._session is not None and not self._session.done:
                return self._session, None
        run = self._run_or_none()
        if run is None:
            self._session = await self.gate.begin(self.goal, self.limits, run_id=self.run_id)
            return self._session, None
        if run.status == RunStatus.WAITING_FOR_APPROVAL and self.pending():
            if context is not None:
                self._carry_sdk_rejections(context)
            return None, None
        if run.status not in (RunStatus.RUNNING, RunStatus.WAITING_FOR_APPROVAL):
            return None, None
        attached = await attach_unless_ended(self.gate, self.store, self.run_id)
        if attached is None:
            return None, None  # ended since it was read just above (a person's cancel)
        session, verdict = attached
        self._session = session
        if session.done and (verdict is None or str(verdict.outcome) != "allowed"):
            await self._let_go()
        return self._session, verdict

    async def _recorded_run(self) -> None:
        """The agentrt run is recorded (begun now if it was not); this process holds no lease."""
        if self._run_or_none() is None:
            await self._open()
            await self._let_go()

    async def _refuse_if_waiting_elsewhere(self, context: RunContextWrapper[Any]) -> None:
        """Refuse a framework run that starts while the run waits on a call it does not carry.

        At `on_start` the SDK has settled the interruptions of a resumed state
        (an approved call ran, a rejected one was answered) and has not asked
        the model yet. A run that still waits on a call then (pending for a
        person, or approved and never carried out) waits on a call this
        framework run does not hold: a fresh input, or another state. Its
        calls would be held behind one that nothing can bring back, so it is
        refused here, before the model is asked: nothing is recorded, nothing
        is held. A run whose owner died is taken over first, so a call cut off
        by the crash is the call waited on.
        """
        await self._take_over_if_orphaned()
        vouched = self._vouched
        if vouched is not None and vouched.step is not None and vouched.call_id is not None:
            decision = vouched.step.step.decision
            tool = decision.tool if decision is not None else None
            if tool and context.is_tool_approved(tool, vouched.call_id) is None:
                # A re-run the tool's reconciliation vouched for waits on a call this
                # framework run does not hold (decision 0091): refused likewise.
                await self._let_go()
                raise RunMismatchError(
                    f"agentrt run {self.run_id} waits to run again call {vouched.call_id!r} of "
                    f"{tool!r}, cut off by a crash, which its tool's reconciliation vouched is "
                    "safe to repeat; this framework run does not hold that call, so it was "
                    "refused before the model was asked and nothing of it was recorded: resume "
                    "the saved RunState that holds that call (GatedRun.load_state), or end the "
                    f"run with `agentrt cancel {self.run_id}` and start a new one",
                    run_id=self.run_id,
                )
        run = self._run_or_none()
        if run is None or run.status != RunStatus.WAITING_FOR_APPROVAL:
            return
        self._carry_sdk_rejections(context)  # the state's own rejection ends the run
        run = self._run_or_none()
        if run is None or run.status != RunStatus.WAITING_FOR_APPROVAL:
            return
        steps = self.store.list_steps(self.run_id, cap=None)
        if not steps or steps[-1].status != StepStatus.AWAITING_APPROVAL:
            return
        step = steps[-1]
        mine = [a for a in self.store.list_approvals(self.run_id, cap=None) if a.step_id == step.id]
        if not mine or mine[-1].status not in (ApprovalStatus.PENDING, ApprovalStatus.APPROVED):
            return
        approval, call_id = mine[-1], _call_id_of(step.decision)
        if (
            approval.kind == INTERRUPTED_SIDE_EFFECT
            and approval.status == ApprovalStatus.PENDING
            and call_id is not None
            and context.is_tool_approved(approval_tool(approval), call_id) is not None
        ):
            # The state holds the call, decided the SDK's way: that decides no
            # interrupted side effect (decision 0043), a person does, through agentrt.
            raise InterruptedSideEffectError(self.run_id, approval.id, approval_tool(approval))
        if (
            approval.status == ApprovalStatus.APPROVED
            and call_id is not None
            and context.is_tool_approved(approval_tool(approval), call_id) is False
        ):
            # The state rejected the call the SDK's way, a person approved it through
            # agentrt first (or while the rejection was being carried): the recorded
            # decision stands (decision 0115), and the consumer is told so.
            raise _rejection_not_carried(self.run_id, approval, call_id)
        raise _waiting_elsewhere(self.run_id, approval, call_id)

    def _waiting(self) -> bool:
        """The run waits on an approval nobody has decided."""
        run = self._run_or_none()
        return (
            run is not None
            and run.status == RunStatus.WAITING_FOR_APPROVAL
            and bool(self.pending())
        )

    def _still_waits(self) -> bool:
        """The run still waits on a call for a person, after `_open` found it waiting.

        A person may approve the waiting call between `_open`'s read of what is
        pending and this look (decision 0118): the run then waits on the approved
        call, not yet carried out, and a call judged now is held behind it, as if
        the person had been a moment slower. A rejection or a cancel ended it.
        """
        run = self._run_or_none()
        return run is not None and run.status == RunStatus.WAITING_FOR_APPROVAL

    def _carry_sdk_rejections(self, context: RunContextWrapper[Any]) -> None:
        """A call the SDK rejected (`state.reject`) is rejected in agentrt: the run is cancelled."""
        for approval in self.pending():
            call_id = _call_id_of(self._decision_of(approval.step_id))
            if call_id is None or approval.kind == INTERRUPTED_SIDE_EFFECT:
                continue
            if context.is_tool_approved(approval_tool(approval), call_id) is not False:
                continue
            try:
                self._operator.reject(
                    self.run_id,
                    approval.id,
                    "openai-agents state.reject",
                    "rejected through the Agents SDK (RunState.reject)",
                    shown_hash=approval.hash,
                )
            except NotPendingError:
                # Decided since `pending()` read it: a person approved or rejected it,
                # or a cancel expired it. That recorded decision stands and the SDK's
                # rejection is not carried (decision 0115); the caller reads the run
                # again and tells what follows. One still pending has merely timed out.
                if self._approval_status(approval.id) == ApprovalStatus.PENDING:
                    raise

    def _approval_status(self, approval_id: str) -> ApprovalStatus | str | None:
        """The approval's status as recorded now (None when the run is gone)."""
        try:
            return self.store.get_approval(self.run_id, approval_id).status
        except NotFoundError:
            return None

    async def _take_over_if_orphaned(self) -> bool:
        """Attach a RUNNING run whose owner died; True when that paused it for a person."""
        if self._session is not None:
            return False
        run = self._run_or_none()
        if run is None or run.status != RunStatus.RUNNING:
            return False
        session, verdict = await self._open()
        if verdict is not None and str(verdict.outcome) == "allowed" and session is not None:
            # The tool's reconciliation vouched the cut-off call may run again and
            # the policy allowed it: it runs when the SDK invokes that call.
            step = session.current()
            assert step is not None and verdict.request is not None
            call_id = _call_id_of(step.step.decision)
            self._vouched = _Judged(
                "allowed", step, None, call_id, verdict.request.args, verdict.request.spec.name
            )
        return verdict is not None and str(verdict.outcome) == "pending"

    async def _let_go(self) -> None:
        session, self._session = self._session, None
        self._vouched = None
        if session is not None:
            await session.close()

    async def _complete(self, context: RunContextWrapper[Any], output: Any) -> None:
        """The framework run produced its final output: the agentrt run completes with it."""
        session, verdict = await self._open(context)
        if session is None or verdict is not None or session.done:
            await self._let_go()
            return
        step = await session.step()
        if step is not None:
            await step.propose(Decision.complete(_as_json(output)))
        await self._let_go()

    # -- approvals -----------------------------------------------------------

    def _decide(
        self, approval: Approval, arguments: str, *, approved: bool, by: str, note: str
    ) -> Approval:
        """Decide `approval`, bound to the hash of the request rebuilt from the SDK's arguments."""
        try:
            args = parse_json(arguments)
        except JSONValueError as exc:
            raise RequestChangedError(
                f"the arguments the SDK holds for approval {approval.id} are not usable JSON; "
                "nothing was decided"
            ) from exc
        request = dict(approval.request) if isinstance(approval.request, Mapping) else {}
        request["args"] = {} if args is None else args
        shown = approval_hash(approval.kind, approval.capability, approval.presentation, request)
        decide = self._operator.approve if approved else self._operator.reject
        try:
            return decide(self.run_id, approval.id, by, note, shown_hash=shown)
        except ApprovalChangedError as exc:
            raise RequestChangedError(
                f"the request the SDK holds for approval {approval.id} is not the one agentrt "
                f"recorded (its hash differs); nothing was decided and nothing ran"
            ) from exc

    def _pending_for(self, item: ToolApprovalItem) -> Approval:
        approval = self._approval_for(item)
        if approval is None or approval.status != ApprovalStatus.PENDING:
            raise ApprovalPendingError(
                f"agentrt run {self.run_id} has no pending approval for call {item.call_id!r}"
            )
        return approval

    def _approval_for(self, item: ToolApprovalItem) -> Approval | None:
        """The latest agentrt approval of the step that recorded `item`'s call."""
        call_id = item.call_id
        if call_id is None:
            return None
        try:
            approvals = self.store.list_approvals(self.run_id, cap=None)
        except NotFoundError:
            return None
        for approval in reversed(approvals):
            if _call_id_of(self._decision_of(approval.step_id)) == call_id:
                return approval
        return None

    def _settled_call(self, call_id: str, name: str, arguments: str) -> _Judged | None:
        """What agentrt recorded for `call_id` if a step settled it (done or failed), else None.

        The same call issued again gets its recorded outcome. Another call under
        a reused id (another tool, other arguments: a model that repeats ids
        across framework runs) is refused and not recorded: the recorded
        outcome is not its outcome, and its id cannot name a second step.
        """
        step = _CALLS.settled(self.store, self.run_id, call_id) or _HELD.settled(
            self.store, self.run_id, call_id
        )
        if step is None or step.observation is None:
            return None
        if _same_call(step.decision, name, arguments):
            return _Judged("recorded", None, step.observation)
        return _Judged(
            "reused",
            None,
            Observation.invalid_decision(
                f"call id {call_id!r} names an earlier call agentrt recorded (step {step.index}) "
                "with another tool or other arguments; a changed call is not run as the recorded "
                "one, and nothing ran"
            ),
        )

    def _is_held(self, call_id: str, arguments: str | None) -> bool:
        """An interruption agentrt never recorded, made while the run waited on another call."""
        if not isinstance(_loads_or_none(arguments), dict):
            return False  # held by the SDK itself, not behind a waiting call
        try:
            return not _CALLS.steps(self.store, self.run_id, call_id) and not _HELD.steps(
                self.store, self.run_id, call_id
            )
        except NotFoundError:
            return False

    def _beside_a_recorded_call(self, context: RunContextWrapper[Any]) -> bool:
        """The SDK run state also decides the call this run last asked a person about.

        A call agentrt never recorded, in a run state that holds a decision on
        the call the run waited on, was held beside it in the same response.
        """
        try:
            approvals = self.store.list_approvals(self.run_id, cap=None)
        except NotFoundError:
            return False
        if not approvals:
            return False
        last = approvals[-1]
        waited_on = _call_id_of(self._decision_of(last.step_id))
        return waited_on is not None and (
            context.is_tool_approved(approval_tool(last), waited_on) is not None
        )

    def _waiting_call(self) -> str | None:
        """The SDK call id the run waits on for a person, if any."""
        for approval in self.pending():
            return _call_id_of(self._decision_of(approval.step_id))
        return None

    def _approval_of_call(self, call_id: str) -> Approval | None:
        for approval in reversed(self.store.list_approvals(self.run_id, cap=None)):
            if _call_id_of(self._decision_of(approval.step_id)) == call_id:
                return approval
        return None

    def _knows(self, call_id: str, arguments: str | None) -> bool:
        """This agentrt run recorded a step for the SDK call `call_id`, or had no chance to.

        The SDK holds a call whose arguments are not a JSON object for a person
        itself, before any tool hook runs: agentrt first sees it when approved.
        """
        if not isinstance(_loads_or_none(arguments), dict):
            return True
        try:
            return bool(
                _CALLS.steps(self.store, self.run_id, call_id)
                or _HELD.steps(self.store, self.run_id, call_id)
            )
        except NotFoundError:
            return False

    def _decision_of(self, step_id: str) -> Decision | None:
        step = step_of_run(self.store, self.run_id, step_id)
        return step.decision if step is not None else None

    def _run_or_none(self) -> Run | None:
        try:
            return self.store.get_run(self.run_id)
        except NotFoundError:
            return None


def _wrap(tool: Any, run: GatedRun | None) -> Any:
    """`tool` as a function tool of the same name and schema whose calls go through `run`."""
    if not isinstance(tool, FunctionTool):
        return tool  # refused before: only function tools reach here
    name = tool.name

    def bound() -> GatedRun:
        if run is None:
            raise RunNotNamedError(NOT_NAMED)
        return run

    async def needs_approval(
        context: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        return await bound()._needs_approval(name, context, params, call_id)

    async def on_invoke_tool(context: ToolContext[Any], arguments: str) -> Any:
        return await bound()._invoke(name, context, arguments)

    # Everything the consumer set on the tool is kept but what the Gate takes over:
    # its approval, its invocation and its timeout (agentrt's execution bounds it).
    return dataclasses.replace(
        tool, on_invoke_tool=on_invoke_tool, needs_approval=needs_approval, timeout_seconds=None
    )


def gate_agent(
    agent: Agent[Any],
    *,
    store: Store,
    policy: Policy,
    classifications: Mapping[str, Classification],
    limits: Limits | None = None,
    goal: str | None = None,
    approved_by: str = "openai-agents state.approve",
    now: Clock | None = None,
    new_id: IdFactory | None = None,
    lease_ttl: timedelta = timedelta(seconds=30),
) -> GatedAgent:
    """Put every function-tool call of `agent` through the Gate; one agentrt run per framework run.

    `classifications` maps each function tool's name to its `Classification` (side
    effect, timeout); a tool without one is refused here
    (`UnclassifiedToolError`), as is a tool the Gate cannot stand behind
    (hosted tools, MCP servers, handoffs, agents offered as tools). A tool's
    own `needs_approval` is honoured: a person is asked, through agentrt, when
    it or the policy asks. Build it once; each framework run
    names its agentrt run through `new_run()` or `resume(run_id)`, which check
    the agent again (a handoff added since is refused there).
    """
    return GatedAgent(
        agent,
        store=store,
        policy=policy,
        classifications=classifications,
        limits=limits,
        goal=goal,
        approved_by=approved_by,
        now=now,
        new_id=new_id,
        lease_ttl=lease_ttl,
    )


def approval_tool(approval: Approval) -> str:
    request = approval.request
    if isinstance(request, Mapping):
        spec = request.get("spec")
        if isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
            return str(spec["name"])
    return "?"


def _function_tools(agent: Agent[Any]) -> list[FunctionTool]:
    others = [t for t in agent.tools if not isinstance(t, FunctionTool)]
    if others:
        listed = ", ".join(f"{getattr(t, 'name', '?')!r} ({type(t).__name__})" for t in others)
        raise ConfigError(
            f"agent {agent.name!r} offers tools the Gate cannot stand behind: {listed}; "
            "only function tools can be gated"
        )
    agents = [
        t.name
        for t in agent.tools
        if isinstance(t, FunctionTool)
        and (getattr(t, "_is_agent_tool", False) or getattr(t, "_is_codex_tool", False))
    ]
    if agents:
        raise ConfigError(
            f"agent {agent.name!r} offers agents as tools ({', '.join(repr(n) for n in agents)}; "
            "Agent.as_tool), whose own tool calls would bypass the Gate and the record; gate "
            "each with a gate_agent of its own and call its run_agent from a function tool"
        )
    guarded = [
        t.name for t in agent.tools if isinstance(t, FunctionTool) and t.tool_input_guardrails
    ]
    if guarded:
        raise ConfigError(
            f"tool input guardrails on {', '.join(repr(n) for n in guarded)} would run after the "
            "Gate allowed the call and could leave it unrun; put that check in the policy"
        )
    if agent.mcp_servers:
        raise ConfigError(
            f"agent {agent.name!r} has MCP servers, whose tools would bypass the Gate; "
            "put them behind agentrt.mcp instead"
        )
    if agent.handoffs:
        raise ConfigError(
            f"agent {agent.name!r} has handoffs, whose agents' tools would bypass the Gate; "
            "gate each agent's tools as a tool of this agent instead"
        )
    return list(agent.tools)  # type: ignore[arg-type]


def _classify_tools(
    tools: Sequence[FunctionTool], classes: Mapping[str, Classification]
) -> dict[str, Classification]:
    """Each tool's classification, its timeout no longer than the tool's own `timeout_seconds`.

    The SDK's timeout is enforced by agentrt's execution (the call cut off and
    recorded as a timeout), then answered to the model as the SDK answers it.
    """
    found = classify([t.name for t in tools], classes)
    own = {t.name: t.timeout_seconds for t in tools if t.timeout_seconds is not None}
    for name, seconds in own.items():
        how = found[name]
        limit = timedelta(seconds=seconds)
        if isinstance(how.timeout, timedelta) and limit < how.timeout:
            found[name] = dataclasses.replace(how, timeout=limit)
    return found


def _checked_run_id(run_id: Any) -> str:
    """`run_id` when agentrt can hold it (32 lowercase hex characters), else `ConfigError`."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise ConfigError(f"run id {run_id!r} is not 32 lowercase hex characters")
    return run_id


def _timed_out(observation: Observation) -> bool:
    """agentrt cut the call off at its timeout (recorded `tool_error`, failure `timeout`)."""
    content = observation.content
    return (
        observation.kind == ObservationKind.TOOL_ERROR
        and isinstance(content, Mapping)
        and content.get("failure") == "timeout"
    )


async def _timeout_answer(
    tool: FunctionTool, context: ToolContext[Any], timeout: timedelta | float
) -> Any:
    """What the SDK answers for `tool` cut off at its timeout: its `timeout_behavior`, kept."""
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    error = ToolTimeoutError(tool_name=tool.name, timeout_seconds=seconds)
    if tool.timeout_behavior == "raise_exception":
        raise error
    if tool.timeout_error_function is None:
        return default_tool_timeout_error_message(tool_name=tool.name, timeout_seconds=seconds)
    answer = tool.timeout_error_function(context, error)
    if inspect.isawaitable(answer):
        answer = await answer
    return answer


def _call_id_of(decision: Decision | None) -> str | None:
    return _CALLS.call_id(decision) or _HELD.call_id(decision)


def _same_call(decision: Decision | None, name: str, arguments: str) -> bool:
    """The recorded decision is the call of `name` with `arguments` (the SDK's text)."""
    if decision is None or decision.tool != name:
        return False
    if decision.invalid_args is not None:
        return decision.invalid_args == arguments
    try:
        args = parse_json(arguments)
    except JSONValueError:
        return False
    recorded = {} if decision.args is None else decision.args
    return canonical_json({} if args is None else args) == canonical_json(recorded)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads(arguments: str) -> dict[str, Any]:
    value = _loads_or_none(arguments)
    return value if isinstance(value, dict) else {}


def _loads_or_none(arguments: str | None) -> Any:
    """The model's argument text read as the SDK reads it: None when it is not JSON.

    NaN, Infinity and -Infinity are refused as the SDK's own parser refuses
    them: such a call is one the SDK holds for a person itself.
    """
    try:
        if arguments is None:
            return None
        return json.loads(arguments, parse_constant=_no_constant)
    except ValueError:
        return None


def _waiting_elsewhere(run_id: str, approval: Approval, call_id: str | None) -> RunMismatchError:
    """The refusal of a framework run that does not carry the call the run waits on."""
    tool = approval_tool(approval)
    call = f"call {call_id!r} of {tool!r}" if call_id is not None else f"a call of {tool!r}"
    if approval.status == ApprovalStatus.APPROVED:
        message = (
            f"agentrt run {run_id} waits to carry out {call}, approved by "
            f"{approval.decided_by or 'a person'} on approval {approval.id} ({approval.kind}), "
            "which this framework run does not hold and so cannot carry out; it was refused "
            "before the model was asked and nothing of it was recorded: resume the saved RunState "
            f"that holds that call (GatedRun.load_state), or, if none does, end the run with "
            f"`agentrt cancel {run_id}` and start a new one (gated.new_run())"
        )
    else:
        message = (
            f"agentrt run {run_id} waits on {call}, pending on approval {approval.id} "
            f"({approval.kind}), which this framework run does not carry; it was refused "
            "before the model was asked and nothing of it was recorded: resume the saved RunState "
            "that holds that call (GatedRun.load_state) and decide it, or end the run with "
            f"`agentrt reject {run_id}` (or `agentrt cancel {run_id}`) and start a new one "
            "(gated.new_run())"
        )
    return RunMismatchError(
        message, run_id=run_id, approval_id=approval.id, approval_hash=approval.hash
    )


def _rejection_not_carried(run_id: str, approval: Approval, call_id: str) -> RunMismatchError:
    """The refusal of a run state that rejects a call a person approved through agentrt."""
    tool = approval_tool(approval)
    note = (
        f" (note: {json.dumps(approval.note[:200], ensure_ascii=False)})" if approval.note else ""
    )
    return RunMismatchError(
        f"the run state rejected call {call_id!r} of {tool!r} (RunState.reject), but approval "
        f"{approval.id} of agentrt run {run_id} was approved by {approval.decided_by or 'a person'}"
        f"{note} before that rejection reached agentrt: the person's decision stands and the "
        "SDK's rejection was not carried; nothing ran, the model was not asked and nothing of "
        "this framework run was recorded: resume the saved RunState through "
        f"GatedRun.load_state (it carries the approval; the call runs once), or end the run "
        f"with `agentrt cancel {run_id}`",
        run_id=run_id,
        approval_id=approval.id,
        approval_hash=approval.hash,
    )


def _has_ended(run: Run | None) -> bool:
    """Whether `run` is there and neither running nor waiting for a person: no call of
    its runs any more."""
    return run is not None and run.status not in (
        RunStatus.RUNNING,
        RunStatus.WAITING_FOR_APPROVAL,
    )


def _not_run_text(run: Run, approval: Approval | None) -> str:
    """What the model is told of a call its approval did not decide once the run has ended.

    A call cut off mid-way (its approval `interrupted_side_effect`) may have taken
    effect: it is not run again, and the model is not told that it did not run.
    """
    if approval is not None and approval.kind == INTERRUPTED_SIDE_EFFECT:
        return (
            f"not run again: {ended_message(run)}. The call was cut off mid-way before: "
            "whether it took effect is unknown"
        )
    return f"not run: {ended_message(run)}"


def _rejection_text(approval: Approval) -> str:
    note = f": {approval.note}" if approval.note else ""
    return f"policy_denied: rejected by {approval.decided_by or 'a person'}{note}"


def _new_run_id() -> str:
    return secrets.token_hex(16)
