"""The gated ToolNode: every tool call of a LangGraph graph through an agentrt Gate.

`gated_tool_node` returns LangGraph's own `ToolNode` over the consumer's tools,
with its `wrap_tool_call`/`awrap_tool_call` hooks doing the Gate's work. Each
LangGraph thread is one agentrt run (its id derived from the thread id); each
tool call is one step of it, its decision recorded verbatim with the tool call
id as the decision's reason (`langgraph tool call <id>`), so a call LangGraph
issues again is found by that id.

Invariants (tests in tests/test_adapter_langgraph*.py):

- No tool runs except by `GateStep.execute`: the ToolNode's own executor is
  handed to the agentrt tool for that one step (`_Calls`), with the arguments
  the policy judged.
- A call whose step is recorded `done` or `failed` gets its recorded outcome
  back as the ToolMessage; it never runs again. This is what LangGraph's
  re-execution of a node from its top on resume (langgraph issue 7780) meets.
- A call that needs a person raises LangGraph's `interrupt()` with the
  approval and the hash of its exact request (`_protocol`). Every approval of
  a call's step is shown with `interrupt()` again on every re-execution, in
  order, so the resume values LangGraph matches by position keep answering
  the same approvals; each must name its approval's hash.
- A call cut off by a crash (its step `executing` in the record) is taken over
  by `Gate.attach` and pauses on `interrupted_side_effect`, shown with
  `interrupt()`; it runs again only after a person approves.
- The calls of one node run one at a time in the order the model made them
  (the async path by LangGraph's own order of scheduling, the sync path by
  position), so the interrupt positions are the same on every re-execution.
- A run that ended (a limit, a cancel, a rejection) raises `RunEndedError` out
  of the graph; no tool runs in it again.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Annotated, Any, cast

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, interrupt
from pydantic import BaseModel, BeforeValidator

from ..._canonical import to_text
from ..._clock import Clock, IdFactory
from ..._db import Store
from ..._errors import (
    AgentrtError,
    ApprovalChangedError,
    ApprovalExpiredError,
    ConfigError,
    NotFoundError,
    RunStateError,
)
from ..._events import Observer
from ..._gate import Gate, GateSession
from ..._operator import Operator
from ..._policy import Policy
from ..._records import (
    Approval,
    ApprovalStatus,
    Decision,
    Limits,
    Observation,
    ObservationKind,
    Run,
    RunStatus,
    Step,
    StepStatus,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from ..._session import run_sync
from ...approver import Local
from .._classify import Classification, classify, tool_spec
from ._protocol import MARK, check_resume

CALL_PREFIX = "langgraph tool call "
"""The recorded decision's reason: this prefix and LangGraph's tool call id."""


def run_id_for(thread_id: str) -> str:
    """The agentrt run id of a LangGraph thread: 32 hex characters derived from its id."""
    digest = hashlib.sha256(f"agentrt.adapters.langgraph\x00{thread_id}".encode())
    return digest.hexdigest()[:32]


class RunEndedError(AgentrtError):
    """The thread's agentrt run ended (a limit, a cancel, a rejection): no tool runs in it."""

    def __init__(self, run: Run) -> None:
        self.run = run
        detail = f": {run.reason_detail}" if run.reason_detail else ""
        super().__init__(
            f"the agentrt run {run.id} of this thread is {run.status} ({run.reason}{detail}); "
            "no tool call runs in it again"
        )


Executor = Callable[[ToolCallRequest], Any]


_Waiting = tuple[ToolCallRequest, Executor]


class _Calls:
    """The LangGraph executor waiting for each step's one execution, by (run, step).

    The executor is the ToolNode's own (injection of state and runtime, the
    run's config passed to the tool), so a tool sees what it sees under a plain
    ToolNode, though agentrt runs it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[tuple[str, str], _Waiting] = {}

    def put(self, run_id: str, step_id: str, request: ToolCallRequest, run: Executor) -> None:
        with self._lock:
            self._waiting[(run_id, step_id)] = (request, run)

    def take(self, run_id: str, step_id: str) -> _Waiting | None:
        with self._lock:
            return self._waiting.pop((run_id, step_id), None)


class _FrameworkTool:
    """The agentrt Tool for one LangChain tool: runs the ToolNode's executor, once."""

    def __init__(self, spec: ToolSpec, calls: _Calls) -> None:
        self.spec = spec
        self._calls = calls

    def call(self, call: ToolCall) -> Any:
        waiting = self._calls.take(call.run_id, call.step_id)
        if waiting is None:
            raise RuntimeError(
                f"no LangGraph tool call waits for step {call.step_id}; nothing was run"
            )
        request, execute = waiting
        args = call.args if isinstance(call.args, dict) else {}
        judged = request.override(tool_call={**request.tool_call, "args": args})
        outcome = execute(judged)
        if inspect.isawaitable(outcome):
            return _finish(outcome)
        return _result(outcome)


async def _finish(outcome: Awaitable[Any]) -> ToolResult:
    return _result(await outcome)


def _result(outcome: Any) -> ToolResult:
    """What the tool answered, as agentrt records it (the ToolMessage's content, verbatim)."""
    if isinstance(outcome, Command):
        raise TypeError("the tool returned a Command; a gated tool must answer with content")
    if not isinstance(outcome, ToolMessage):
        raise TypeError(f"the tool node returned {type(outcome).__name__}, not a ToolMessage")
    if outcome.status == "error":
        raise RuntimeError(_text(outcome.content))
    return ToolResult(content=cast(Any, outcome.content))


def _text(content: Any) -> str:
    return content if isinstance(content, str) else to_text(content)


def _schema(tool: BaseTool) -> dict[str, Any]:
    """The arguments the model gives (injected arguments left out), as JSON Schema."""
    schema = tool.tool_call_schema
    if isinstance(schema, dict):
        return dict(schema)
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return dict(schema.model_json_schema())
    raise ConfigError(
        f"tool {tool.name!r} has a pydantic v1 argument schema; agentrt reads pydantic v2 ones"
    )


def _call_id(step: Step) -> str | None:
    decision = step.decision
    if decision is None or not decision.reason.startswith(CALL_PREFIX):
        return None
    return decision.reason[len(CALL_PREFIX) :]


class _Turns:
    """The sync path: the calls of one AI message take turns in the order the model made them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._next: dict[tuple[str, tuple[str, ...]], int] = {}
        self._busy: set[str] = set()

    def wait(self, run_id: str, batch: tuple[str, ...], position: int) -> None:
        key = (run_id, batch)
        with self._cond:
            self._cond.wait_for(
                lambda: self._next.get(key, 0) == position and run_id not in self._busy
            )
            self._busy.add(run_id)

    def done(self, run_id: str, batch: tuple[str, ...]) -> None:
        key = (run_id, batch)
        with self._cond:
            self._busy.discard(run_id)
            self._next[key] = self._next.get(key, 0) + 1
            if self._next[key] >= len(batch):
                del self._next[key]
            self._cond.notify_all()


class GatedTools:
    """The consumer's LangChain tools behind one agentrt Gate (what `gated_tool_node` builds)."""

    def __init__(
        self,
        tools: Sequence[BaseTool | Callable[..., Any]],
        *,
        store: Store,
        policy: Policy,
        classifications: Mapping[str, Classification],
        limits: Limits | None = None,
        goal: str = "",
        observer: Observer | None = None,
        now: Clock | None = None,
        new_id: IdFactory | None = None,
        lease_ttl: timedelta = timedelta(seconds=30),
        lease_owner: str = "",
        messages_key: str = "messages",
    ) -> None:
        self.node = ToolNode(
            list(tools),
            handle_tool_errors=False,
            messages_key=messages_key,
            wrap_tool_call=self.wrap_tool_call,
            awrap_tool_call=self.awrap_tool_call,
        )
        offered = self.node.tools_by_name
        classes = classify(offered, classifications)
        self._calls = _Calls()
        specs = [
            tool_spec(name, tool.description, _schema(tool), classes[name])
            for name, tool in offered.items()
        ]
        self.gate = Gate(
            store=store,
            policy=policy,
            tools=[_FrameworkTool(spec, self._calls) for spec in specs],
            observer=observer,
            now=now,
            new_id=new_id,
            lease_ttl=lease_ttl,
            lease_owner=lease_owner,
        )
        self.store = store
        self.limits = limits
        self.goal = goal
        self._messages_key = messages_key
        self._operator = Operator(store, observer, now)
        self._turns = _Turns()
        self._locks: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = {}
        self._locks_guard = threading.Lock()

    # -- the ToolNode's hooks -----------------------------------------------

    async def awrap_tool_call(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> ToolMessage:
        """The async hook: one call through the Gate (the calls of a node one at a time)."""
        run_id = run_id_for(_thread_id(request))
        async with self._lock(run_id):
            return await self._handle(request, execute, run_id)

    def wrap_tool_call(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]
    ) -> ToolMessage:
        """The sync hook: the same, on an event loop of its own, in the model's order."""
        run_id = run_id_for(_thread_id(request))
        batch, position = self._position(request)
        self._turns.wait(run_id, batch, position)
        try:
            return run_sync(self._handle(request, execute, run_id))
        finally:
            self._turns.done(run_id, batch)

    # -- one call ---------------------------------------------------------------

    async def _handle(
        self, request: ToolCallRequest, execute: Executor, run_id: str
    ) -> ToolMessage:
        call = request.tool_call
        call_id = str(call.get("id") or "")
        if not call_id:
            raise ConfigError("a tool call without an id cannot be gated (LangGraph gives one)")
        shown = 0  # approvals of this call's step shown with interrupt() on this execution
        while True:
            run, step, approvals = await asyncio.to_thread(self._read, run_id, call_id)
            if step is not None:
                _same_call(step, call)
            if shown < len(approvals):
                for approval in approvals[shown:]:
                    answer = interrupt(
                        self._interrupt_value(approval, call),
                        response_schema=self._expected(approval),
                    )
                    shown += 1
                    await asyncio.to_thread(self._answer, approval, answer)
                continue  # read again: the answers may have decided the approvals
            if step is not None and step.status in (StepStatus.DONE, StepStatus.FAILED):
                return _message(step, call)  # recorded: never run a second time
            if run is not None and run.status in (
                RunStatus.COMPLETED,
                RunStatus.FAILED,
                RunStatus.CANCELLED,
            ):
                raise RunEndedError(run)
            if run is not None and run.status == RunStatus.WAITING_FOR_APPROVAL:
                if step is None or not approvals:
                    return _not_run(call, run)  # another call of this node waits for a person
                # This call's approval was decided (or ran out of time): attach judges it.
                message = await self._attach_and_run(run_id, request, execute)
            elif step is not None and step.status != StepStatus.INTERRUPTED:
                # Executing or deciding in the record: its process died. Attach takes
                # the run over; a side effect then waits for a person (shown above).
                await self._take_over(run_id)
                message = None
            else:
                message = await self._new_step(run, run_id, request, execute)
            if message is not None:
                return message

    def _read(self, run_id: str, call_id: str) -> tuple[Run | None, Step | None, list[Approval]]:
        try:
            run = self.store.get_run(run_id)
        except NotFoundError:
            return None, None, []
        steps = [s for s in self.store.list_steps(run_id, cap=None) if _call_id(s) == call_id]
        if not steps:
            return run, None, []
        step = steps[-1]
        approvals = [a for a in self.store.list_approvals(run_id, cap=None) if a.step_id == step.id]
        return run, step, approvals

    def _expected(self, approval: Approval) -> Any:
        """The resume LangGraph accepts for `approval`: one naming its approval and hash.

        Given to `interrupt()` as its `response_schema`, so a refused resume (a
        decision for another request, or `decided` while the approval is still
        pending) raises out of the graph before LangGraph saves it: the
        interrupt stays open and can be answered again.
        """

        def check(value: Any) -> dict[str, Any]:
            checked = check_resume(value, approval.run_id, approval.id, approval.hash)
            if checked["decision"] == "decided" and approval.status == ApprovalStatus.PENDING:
                current = self.store.get_approval(approval.run_id, approval.id)
                if current.status == ApprovalStatus.PENDING:
                    raise RunStateError(
                        f"approval {approval.id} is still pending: decide it "
                        f"(agentrt approve {approval.run_id}) before resuming with decided()"
                    )
            return checked

        return Annotated[dict[str, Any], BeforeValidator(check)]

    def _answer(self, approval: Approval, value: dict[str, Any]) -> None:
        """Apply a checked resume to `approval`, unless it was decided already."""
        if approval.status != ApprovalStatus.PENDING or value["decision"] == "decided":
            return  # shown again on a re-execution, or decided through agentrt approve
        by = str(value.get("by") or "")
        note = str(value.get("note") or "")
        current = self.store.get_approval(approval.run_id, approval.id)
        if current.status != ApprovalStatus.PENDING:
            return  # decided elsewhere meanwhile: what was decided there stands
        decide = self._operator.approve if value["decision"] == "approve" else self._operator.reject
        try:
            decide(approval.run_id, approval.id, by, note, shown_hash=approval.hash)
        except ApprovalExpiredError:
            return  # too late: attaching the run settles the expiry (the run is cancelled)

    def _interrupt_value(self, approval: Approval, call: Mapping[str, Any]) -> dict[str, Any]:
        text = ""
        if approval.status == ApprovalStatus.PENDING:
            text = Local(self.store).show(approval.run_id, approval.id).text
        return {
            "type": MARK,
            "run_id": approval.run_id,
            "approval_id": approval.id,
            "hash": approval.hash,
            "kind": str(approval.kind),
            "status": str(approval.status),
            "tool": str(call.get("name")),
            "tool_call_id": str(call.get("id")),
            "capability": approval.capability,
            "presentation": approval.presentation,
            "request": approval.request,
            "text": text,
        }

    async def _new_step(
        self, run: Run | None, run_id: str, request: ToolCallRequest, execute: Executor
    ) -> ToolMessage | None:
        """A call not yet recorded (or whose step never ran): a new step of the run."""
        if run is None:
            session = await self.gate.begin(
                self.goal or f"LangGraph thread {_thread_id(request)}", self.limits, run_id
            )
        else:
            session, verdict = await self.gate.attach(run_id)
            if verdict is not None:  # the takeover paused or ended the run: look again
                await session.close()
                return None
        async with session:
            step = await session.step()
            if step is None:
                raise RunEndedError(session.run)
            call = request.tool_call
            decision = Decision.tool_call(
                str(call["name"]), call.get("args"), reason=CALL_PREFIX + str(call["id"])
            )
            verdict = await step.propose(decision)
            if verdict.outcome == "allowed":
                return await self._execute(session, request, execute)
            if verdict.outcome == "ended":
                raise RunEndedError(verdict.run)
            return None  # denied (recorded) or pending (shown next): look again

    async def _attach_and_run(
        self, run_id: str, request: ToolCallRequest, execute: Executor
    ) -> ToolMessage | None:
        """The run waits on this call's approved request: attach, and run it if allowed."""
        session, verdict = await self.gate.attach(run_id)
        async with session:
            if verdict is not None and verdict.outcome == "allowed":
                return await self._execute(session, request, execute)
            if verdict is not None and verdict.outcome == "ended":
                raise RunEndedError(verdict.run)
            return None

    async def _take_over(self, run_id: str) -> None:
        session, verdict = await self.gate.attach(run_id)
        await session.close()
        if verdict is not None and verdict.outcome == "ended":
            raise RunEndedError(verdict.run)

    async def _execute(
        self, session: GateSession, request: ToolCallRequest, execute: Executor
    ) -> ToolMessage:
        step = session.current()
        assert step is not None  # an allowed verdict leaves its step open
        self._calls.put(session.run_id, step.id, request, execute)
        try:
            await step.execute()
        finally:
            self._calls.take(session.run_id, step.id)
        steps = self.store.list_steps(session.run_id, cap=None)
        (recorded,) = [s for s in steps if s.id == step.id]
        return _message(recorded, request.tool_call)

    # -- ordering ------------------------------------------------------------

    def _lock(self, run_id: str) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        with self._locks_guard:
            held = self._locks.get(run_id)
            if held is None or held[0] is not loop:
                held = (loop, asyncio.Lock())
                self._locks[run_id] = held
            return held[1]

    def _position(self, request: ToolCallRequest) -> tuple[tuple[str, ...], int]:
        call_id = str(request.tool_call.get("id") or "")
        state = request.state
        if isinstance(state, Mapping):
            messages = state.get(self._messages_key)
        elif isinstance(state, list):
            messages = state
        else:
            messages = getattr(state, self._messages_key, None)
        for message in reversed(messages or []):
            if isinstance(message, AIMessage):
                ids = tuple(str(c.get("id") or "") for c in message.tool_calls)
                if call_id in ids:
                    return ids, ids.index(call_id)
        return (call_id,), 0


def _same_call(step: Step, call: Mapping[str, Any]) -> None:
    """A call LangGraph issues again must be the call recorded under its id."""
    decision = step.decision
    assert decision is not None  # found by its decision's reason
    if decision.tool != call.get("name") or decision.args != call.get("args"):
        raise ApprovalChangedError(
            f"tool call {call.get('id')} was recorded as {decision.tool} with other arguments "
            f"(step {step.index} of run {step.run_id}); a changed call is refused, "
            "not run as the recorded one"
        )


def _thread_id(request: ToolCallRequest) -> str:
    runtime = request.runtime
    config = getattr(runtime, "config", None) or {}
    thread = (config.get("configurable") or {}).get("thread_id")
    if thread is None or thread == "":
        raise ConfigError(
            "a gated tool node runs in a thread: invoke the graph with a checkpointer and "
            "config={'configurable': {'thread_id': ...}}"
        )
    return str(thread)


def _message(step: Step, call: Mapping[str, Any]) -> ToolMessage:
    """The ToolMessage a recorded step gives the model, the same on every re-execution."""
    observation = step.observation or Observation(kind=ObservationKind.INTERRUPTED)
    content: Any = observation.content
    kind = observation.kind
    status = "success"
    if kind == ObservationKind.TOOL_RESULT:
        text = content if isinstance(content, str | list) else to_text(content)
    else:
        status = "error"
        detail = content if isinstance(content, dict) else {}
        if kind == ObservationKind.POLICY_DENIED:
            text = f"Denied by the policy: {detail.get('reason') or observation.summary}"
        elif kind == ObservationKind.INVALID_DECISION:
            text = f"Invalid call: {detail.get('error') or observation.summary}"
        elif kind == ObservationKind.TOOL_ERROR:
            text = f"Error: {detail.get('error') or observation.summary}"
        else:
            text = f"Not run: {observation.summary or kind}"
    return ToolMessage(
        content=text,
        name=call.get("name"),
        tool_call_id=call.get("id"),
        status=status,
        artifact={"run_id": step.run_id, "step_id": step.id, "observation": str(kind)},
    )


def _not_run(call: Mapping[str, Any], run: Run) -> ToolMessage:
    return ToolMessage(
        content=f"Not run: run {run.id} waits for a person on another call",
        name=call.get("name"),
        tool_call_id=call.get("id"),
        status="error",
    )


def gated_tool_node(
    tools: Sequence[BaseTool | Callable[..., Any]],
    *,
    store: Store,
    policy: Policy,
    classifications: Mapping[str, Classification],
    limits: Limits | None = None,
    goal: str = "",
    observer: Observer | None = None,
    now: Clock | None = None,
    new_id: IdFactory | None = None,
    lease_ttl: timedelta = timedelta(seconds=30),
    lease_owner: str = "",
    messages_key: str = "messages",
) -> ToolNode:
    """LangGraph's `ToolNode` over `tools`, every call through an agentrt Gate.

    `classifications` names each tool's side effect and timeout; a tool without
    one is refused here (`UnclassifiedToolError`). Each thread is one agentrt
    run (`run_id_for(thread_id)`), ended by `limits` like any run.
    """
    return GatedTools(
        tools,
        store=store,
        policy=policy,
        classifications=classifications,
        limits=limits,
        goal=goal,
        observer=observer,
        now=now,
        new_id=new_id,
        lease_ttl=lease_ttl,
        lease_owner=lease_owner,
        messages_key=messages_key,
    ).node
