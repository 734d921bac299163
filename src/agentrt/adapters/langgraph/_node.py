"""The gated ToolNode: every tool call of a LangGraph graph through an agentrt Gate.

`gated_tool_node` returns LangGraph's own `ToolNode` over the consumer's tools
(a subclass that only marks each execution with its calls' order), with its
`wrap_tool_call`/`awrap_tool_call` hooks doing the Gate's work. Each turn of a
LangGraph thread is one agentrt run (of each sub-graph holding a gated node),
its id derived from the thread id, the id of the message that opened the turn
and the sub-graph (`_turn`), so limits and loop detection count one turn, and a
thread goes on for as many turns as it likes. Each tool call is one step of
its turn's run, its decision recorded verbatim with the tool call id as the
decision's reason (`langgraph tool call <id>`), so a call LangGraph issues
again is found by that id. A turn's run stays RUNNING (no lease held) between
its calls; `turn_end_node`, where the user routes the graph's end, completes it
with the model's answer, and the next turn that calls a tool completes it
otherwise.

Invariants (tests in tests/test_adapter_langgraph*.py):

- No tool runs except by `GateStep.execute`: the ToolNode's own executor is
  handed to the agentrt tool for that one step (`_Calls`), with the arguments
  the policy judged.
- A call whose step is recorded `done` or `failed` gets its recorded outcome
  back as the ToolMessage; it never runs again. This is what LangGraph's
  re-execution of a node from its top on resume (langgraph issue 7780) meets.
- A call that needs a person raises LangGraph's `interrupt()` with the
  approval and the hash of its exact request (`_protocol`); the answer must
  name that approval and hash, checked before LangGraph saves it. LangGraph
  hands saved answers back by position on every re-execution: an answer to an
  approval already decided is passed over, so which call asks first never
  matters.
- A call cut off by a crash (its step `executing` in the record) is taken over
  by `Gate.attach` and pauses on `interrupted_side_effect`, shown with
  `interrupt()`; it runs again only after a person approves, or when its
  tool's reconciliation (its `Classification`'s `reconcile`) found its effect
  (the recovered result is its ToolMessage) or vouched it safe to repeat (it
  runs again, on the same step, when LangGraph issues that call again).
- The calls of one run go through the Gate one at a time, whichever gated node
  of the process makes them (`_OneAtATime`), and
  the calls of one AI message in the message's order (`_Execution`), whether
  one ToolNode execution runs them or LangGraph runs each as a task of its own
  (`Send`; the tasks of one superstep share an `_Execution`, `_Supersteps`). A
  call behind one that interrupts is held: it is neither answered, recorded
  nor run until LangGraph runs it again on resume (decision 0050; a held task
  raises an interrupt with no value, so LangGraph saves nothing for it); if the
  run ended on the call ahead of it, it is told so, unrecorded.
- A sent call never waits for good: behind a task LangGraph cancelled it is
  held; when every thread (or `max_concurrency` slot) holds a call waiting for
  a task that has not started, they raise `ConfigError`, nothing recorded.
- A tool calling LangGraph's `interrupt()` is refused (`InterruptRefusedError`,
  recorded as the step's `tool_error`): LangGraph would run it again from its
  top on resume.
- Tool call ids are taken to be unique within a turn: a call reusing a settled
  call's id for another request is answered with an error, never run; so is a
  call sharing its id with another call of its message that was recorded
  (`Not run`, while that one waits for a person), never recorded.
- A run that ended (a limit, a cancel, a rejection) raises `RunEndedError` out
  of the graph; no tool runs in that turn again. The next turn is a new run.
- Whether a call is recorded is read again under the lease before a step is
  claimed for it: two workers going on with one turn never both run a call.
- A turn's run is completed only when it is RUNNING and `Gate.attach` takes it
  with nothing open: never one that waits for a person, is leased by a live
  process or was cut off in a side effect; completing it twice writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import threading
import weakref
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterator,
    Mapping,
    Sequence,
)
from datetime import timedelta
from typing import Annotated, Any, cast

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp, GraphInterrupt
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, interrupt
from pydantic import BaseModel, BeforeValidator

from agentrt import (
    Approval,
    ApprovalChangedError,
    ApprovalExpiredError,
    ApprovalStatus,
    ConfigError,
    Decision,
    Event,
    Gate,
    GateSession,
    Limits,
    NotFoundError,
    NotPendingError,
    Observation,
    ObservationKind,
    Operator,
    Policy,
    Run,
    RunStateError,
    RunStatus,
    Step,
    StepStatus,
    Store,
    ToolCall,
    ToolResult,
    ToolSpec,
    Verdict,
    policy_json,
)
from agentrt.adapters import Classification, classify, tool_spec
from agentrt.adapters import RunEndedError as _RunEnded
from agentrt.adapters._calls import CallMarker
from agentrt.adapters._operation import running, with_reconcile
from agentrt.adapters._wait import attach_unless_ended
from agentrt.approver import Local
from agentrt.lowlevel import Clock, IdFactory, run_sync, step_of_run

from ._protocol import MARK, check_resume
from ._turn import (
    answered_runs,
    calls_beside,
    earlier_runs,
    messages_of,
    opener,
    run_id_for,
    subgraph_of,
    thread_of,
    turn_of,
)

CALL_PREFIX = "langgraph tool call "
"""The recorded decision's reason: this prefix and LangGraph's tool call id."""
_CALLS = CallMarker(CALL_PREFIX)


class RunEndedError(_RunEnded):
    """The turn's agentrt run ended (a limit, a cancel, a rejection): no tool runs in it.

    An `agentrt.adapters.RunEndedError`, as every adapter raises for an ended run.
    """

    def __init__(self, run: Run) -> None:
        self.run = run
        detail = f": {run.reason_detail}" if run.reason_detail else ""
        super().__init__(
            f"the agentrt run {run.id} of this turn is {run.status} ({run.reason}{detail}); "
            "no tool call runs in it again (the thread's next turn is a new run)"
        )


class EarlierTurnWaitsError(RunStateError):
    """A new turn found the thread's earlier turn waiting for a person: refused.

    LangGraph drops a pending interrupt when the thread is sent a new message,
    so nothing would carry out the earlier turn's call once a person approved
    it. The new turn's tool call is refused before anything of it is recorded
    or run, and so is its end (`turn_end_node`, when the turn called no tool):
    nothing is written. `run_id`, `approval_id` and `approval_hash` name the
    earlier turn's run and the approval its call waits on (pending, or
    approved and not carried out). Answer that turn's interrupt with
    `Command(resume=...)` from a checkpoint that still holds it, or end that
    turn (`agentrt reject` / `agentrt cancel`) and invoke the graph again:
    `invoke(None)` runs the refused node again and the new turn goes on.
    """

    def __init__(self, message: str, *, run_id: str, approval_id: str, approval_hash: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.approval_id = approval_id
        self.approval_hash = approval_hash


def _earlier_turn_waits(
    run_id: str, approval: Approval, step: Step, refused: Mapping[str, Any] | None
) -> EarlierTurnWaitsError:
    """The refusal of a new turn's call (or, `refused` None, of its end) while the thread's
    earlier turn waits on `approval`."""
    tool = step.decision.tool if step.decision is not None else "?"
    waiting = f"call {_CALLS.call_id(step.decision)!r} of {tool!r}"
    named = f"approval {approval.id} ({approval.kind}, hash {approval.hash})"
    if refused is None:
        this, node = "this turn's end (the model's answer, no tool call)", "this end node"
    else:
        this = f"this turn's call {refused.get('id')!r} of {refused.get('name')!r}"
        node = "this tool node"
    again = (
        "it will not be run again"
        if approval.kind == "interrupted_side_effect"
        else "nothing of it runs"
    )
    if approval.status == ApprovalStatus.APPROVED:
        state = f"approved by {approval.decided_by or 'a person'} on {named} and not carried out"
        ways = (
            "resume that turn's interrupt with Command(resume=decided(...)) from a checkpoint "
            f"that still holds it, or end that turn with `agentrt cancel {run_id}` ({again}) "
            f"and invoke the graph again (invoke(None) runs {node} again)"
        )
    else:
        state = f"pending on {named}"
        ways = (
            "answer that turn's interrupt with Command(resume=...) from a checkpoint that still "
            f"holds it, or end that turn with `agentrt reject {run_id}` (or `agentrt cancel "
            f"{run_id}`; {again}) and invoke the graph again (invoke(None) runs {node} again)"
        )
    return EarlierTurnWaitsError(
        f"the thread's earlier turn (agentrt run {run_id}) waits on {waiting}, {state}; "
        f"{this} was refused before anything of it was recorded or run (LangGraph dropped that "
        f"turn's interrupt, so nothing would carry its call out): {ways}",
        run_id=run_id,
        approval_id=approval.id,
        approval_hash=approval.hash,
    )


Executor = Callable[[ToolCallRequest], Any]

Observer = Callable[[Event], Any]
"""What `gated_tool_node(observer=...)` is given: called with each audit event."""


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
        try:
            # The tool's `current_operation_id()`: a blocking tool runs here, on this
            # thread; an async one is awaited by `_finish`, which sets it again there.
            with running(call):
                outcome = execute(judged)
        except GraphBubbleUp as exc:
            raise InterruptRefusedError(self.spec.name, exc) from None
        if inspect.isawaitable(outcome):
            return _finish(self.spec.name, outcome, call)
        return _result(outcome)


async def _finish(tool: str, outcome: Awaitable[Any], call: ToolCall) -> ToolResult:
    try:
        with running(call):
            done = await outcome
    except GraphBubbleUp as exc:
        raise InterruptRefusedError(tool, exc) from None
    return _result(done)


class InterruptRefusedError(RuntimeError):
    """A gated tool called LangGraph's `interrupt()` (or raised another `GraphBubbleUp`).

    Refused, not passed on: LangGraph would run the tool again from its top on
    resume, repeating whatever it did before asking. The step is recorded
    failed (`tool_error`) with this message, which the model hears; asking a
    person is the agentrt policy's job (`require_approval`).
    """

    def __init__(self, tool: str, raised: GraphBubbleUp) -> None:
        what = (
            "called LangGraph's interrupt()"
            if isinstance(raised, GraphInterrupt)
            else (f"raised LangGraph's {type(raised).__name__}")
        )
        super().__init__(
            f"tool {tool} {what}, which a gated tool may not do (LangGraph would run it again "
            "from its top on resume): it ran once and was stopped there, and asking a person "
            "is the agentrt policy's job (require_approval)"
        )


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
    return content if isinstance(content, str) else _json_text(content)


def _json_text(value: Any) -> str:
    """A JSON value as the text agentrt stores (its policy JSON)."""
    return policy_json(value).decode("utf-8")


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


class _OneAtATime:
    """The calls of one run go through the Gate one at a time (a run has one open step).

    One for the process (`_ONE_AT_A_TIME`), keyed by the run: the gated nodes of
    one graph running calls of one turn at once (two branches of a superstep,
    each with its own node, on one database) wait for each other here, where
    each would otherwise find the run leased by the other and fail the graph
    (`RunLeasedError`). The blocking path's calls come from LangGraph's thread
    pool, the async path's from one event loop; an entry lives only while a
    call of its run holds or waits for it.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._threads: dict[str, list[Any]] = {}  # run id -> [threading.Lock, users]
        self._tasks: dict[
            tuple[int, str], list[Any]
        ] = {}  # (loop, run id) -> [asyncio.Lock, users]

    @contextlib.contextmanager
    def _entry(
        self, table: dict[Any, list[Any]], key: Any, make: Callable[[], Any]
    ) -> Iterator[Any]:
        """The lock of `key` in `table`, made for its first user and dropped after its last."""
        with self._guard:
            entry = table.setdefault(key, [make(), 0])
            entry[1] += 1
        try:
            yield entry[0]
        finally:
            with self._guard:
                entry[1] -= 1
                if entry[1] == 0:
                    del table[key]

    @contextlib.contextmanager
    def blocking(self, run_id: str) -> Iterator[None]:
        with self._entry(self._threads, run_id, threading.Lock) as lock, lock:
            yield

    @contextlib.asynccontextmanager
    async def waiting(self, run_id: str) -> AsyncIterator[None]:
        key = (id(asyncio.get_running_loop()), run_id)
        with self._entry(self._tasks, key, asyncio.Lock) as lock:
            async with lock:
                yield


_ONE_AT_A_TIME = _OneAtATime()


class _Execution:
    """The calls of one AI message going through the Gate together, in the model's order.

    The ToolNode runs the calls of one AI message together (a thread pool on
    the blocking path, tasks on the async path), or LangGraph runs one task per
    call when the graph dispatches them with `Send` (the prebuilt agents); they
    go through the Gate one at a time in this order (decision 0050). `skip`
    names the calls of the message that will not come (settled on an earlier
    execution, answered already, or not this node's). A call that interrupts (or
    raises) stops the execution: the calls behind it are held, they do nothing
    and raise (LangGraph discards the node's outcome and runs it again on
    resume), so none of them is answered, recorded or run before the waiting
    call is decided.
    """

    def __init__(
        self,
        ids: Sequence[str],
        skip: Collection[str] = (),
        superstep: object | None = None,
        threads: int | None = None,
    ) -> None:
        self.ids = tuple(ids)
        self.skip = frozenset(skip)
        self.sent = superstep is not None
        self._superstep = None if superstep is None else weakref.ref(superstep)
        self._threads = threads  # the threads of LangGraph's pool running the superstep
        self._waiting: set[str] = set()  # the sent calls waiting their turn in a thread
        self.next = 0
        self._advance()
        self.stopped: BaseException | None = None
        self._futures: dict[str, Any] = {}  # a sent call's id -> its task's future, once seen
        self._cond = threading.Condition()
        self._aconds: dict[int, asyncio.Condition] = {}

    def _advance(self) -> None:
        while self.next < len(self.ids) and self.ids[self.next] in self.skip:
            self.next += 1

    def index(self, call_id: str) -> int | None:
        """The call's place, or None when it is not one of this execution's calls."""
        if call_id not in self.ids or call_id in self.skip:
            return None
        return self.ids.index(call_id)

    def behind(self, index: int) -> list[str]:
        """The calls after `index` that wait their turn behind it."""
        return [i for i in self.ids[index + 1 :] if i not in self.skip]

    def _passed(self, index: int, error: BaseException | None) -> None:
        if error is not None and self.stopped is None:
            self.stopped = error
        if index == self.next:
            self.next += 1
            self._advance()

    def _held(self) -> BaseException:
        """What a call held behind a stopped execution raises."""
        assert self.stopped is not None
        if self.sent and isinstance(self.stopped, GraphBubbleUp):
            # A task of its own: an interrupt with no value records nothing for
            # it (no pending interrupt, no writes), so LangGraph runs it again on
            # resume and one Command(resume=...) still answers the graph.
            return GraphInterrupt(())
        return self.stopped

    def _turn_of(self, index: int) -> bool:
        """Whether the call at `index` may go on: its turn came, or the execution stopped.

        A sent call's execution also stops when the task of the call whose turn
        it is ended without going through: LangGraph cancelled it before it
        started (another task of the superstep failed), so it never comes.
        """
        if self.next == index or self.stopped is not None:
            return True
        if self._ended(self.ids[self.next]):
            self.stopped = GraphInterrupt(())  # held: LangGraph runs it again later
            return True
        if self._stuck():
            self.stopped = ConfigError(
                f"tool call {self.ids[index]} waits for tool call {self.ids[self.next]} of "
                "the same AI message, whose task cannot start: every task LangGraph runs at "
                "once (max_concurrency, or the threads of its pool) is a call of that message "
                "waiting its turn, as the graph sent the calls later call first; nothing was "
                "run or recorded; send a message's calls in its order"
            )
            return True
        return False

    def _stuck(self) -> bool:
        """Whether the task of the call whose turn it is can never start.

        It has not started, and every place LangGraph runs the superstep's tasks
        in (the threads of its pool; on the async path the slots of
        `max_concurrency`) holds a sent call of this execution waiting its turn:
        none of them lets go before that call passes, so its task never starts.
        """
        superstep = None if self._superstep is None else self._superstep()
        if self._threads is None or not isinstance(superstep, Mapping):
            return False
        ahead = self._future(self.ids[self.next])
        if ahead is None or ahead.done():
            return False
        if not callable(getattr(ahead, "running", None)):  # asyncio: each waiter holds a slot
            return len(self._waiting) >= self._threads
        if ahead.running():
            return False
        running = [f for f in list(superstep) if f.running()]
        waiting = {self._future(i) for i in self._waiting}
        return len(running) >= self._threads and all(f in waiting for f in running)

    def _ended(self, call_id: str) -> bool:
        """Whether the task of the sent call `call_id` ended (done or cancelled).

        A call passes its turn before its task's future is done, so a done
        future whose call has not passed never started it: LangGraph cancelled
        it. False while the task is not found.
        """
        future = self._future(call_id)
        return future is not None and bool(future.done())

    def _future(self, call_id: str) -> Any:
        """The future of the task sending `call_id`, once found; None before.

        The superstep is LangGraph's map of its futures to their tasks (1.x); a
        task is not found before it is submitted, nor when LangGraph does not say.
        """
        superstep = None if self._superstep is None else self._superstep()
        if call_id not in self._futures and isinstance(superstep, Mapping):
            for candidate, task in list(superstep.items()):
                arg = getattr(task, "input", None)
                if isinstance(arg, Mapping) and arg.get("__type") == "tool_call_with_context":
                    tool_call = arg.get("tool_call")
                    if (
                        isinstance(tool_call, Mapping)
                        and tool_call.get("id") is not None
                        and callable(getattr(candidate, "done", None))
                    ):
                        self._futures.setdefault(str(tool_call["id"]), candidate)
        return self._futures.get(call_id)

    @property
    def _look_again(self) -> float | None:
        """How often a sent call looks whether the task ahead still comes (seconds)."""
        return 0.05 if self.sent else None

    def _enter(self) -> None:
        if self.stopped is not None:
            raise self._held()  # held behind a call that interrupted: nothing done

    @contextlib.contextmanager
    def _going(self, index: int, guard: contextlib.AbstractContextManager[Any]) -> Iterator[None]:
        """The call at `index` goes through; whatever it raises stops the calls behind it."""
        error: BaseException | None = None
        try:
            yield
        except BaseException as exc:
            error = exc
            raise
        finally:
            with guard:
                self._passed(index, error)

    @contextlib.contextmanager
    def blocking(self, index: int) -> Iterator[None]:
        with self._cond:
            self._waiting.add(self.ids[index])
            try:
                while not self._turn_of(index):
                    self._cond.wait(self._look_again)
            finally:
                self._waiting.discard(self.ids[index])
            self._enter()
        try:
            with self._going(index, self._cond):
                yield
        finally:
            with self._cond:
                self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def waiting(self, index: int) -> AsyncIterator[None]:
        loop = id(asyncio.get_running_loop())
        cond = self._aconds.setdefault(loop, asyncio.Condition())
        async with cond:
            self._waiting.add(self.ids[index])
            try:
                while not self._turn_of(index):
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(cond.wait(), self._look_again)
            finally:
                self._waiting.discard(self.ids[index])
            self._enter()
        try:
            with self._going(index, contextlib.nullcontext()):
                yield
        finally:
            async with cond:
                cond.notify_all()


class _Supersteps:
    """The `Send` tasks of one LangGraph superstep that carry calls of one AI message.

    The prebuilt agents dispatch each call of a message as a task of its own;
    the tasks of one superstep run together in this process. They share one
    `_Execution`, found by the superstep (the runner's set of futures, which
    LangGraph hands every task of a superstep; gone, and the entry with it,
    when the superstep ends), the run and the message's calls.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[int, str, tuple[str, ...]], _Execution] = {}

    def join(
        self,
        superstep: object,
        run_id: str,
        ids: Sequence[str],
        skip: Collection[str],
        threads: int | None,
    ) -> _Execution:
        key = (id(superstep), run_id, tuple(ids))
        with self._lock:
            found = self._open.get(key)
            if found is None:
                found = self._open[key] = _Execution(ids, skip, superstep, threads)
                # The finalizer holds these supersteps weakly: it waits in a registry of
                # the interpreter's, and an execution stopped by an interrupt holds the
                # interrupt's frames, which reach the superstep, so a strong hold would
                # keep the node, its Gate and its store alive for good.
                weakref.finalize(superstep, _Supersteps._drop, weakref.ref(self), key)
            return found

    @staticmethod
    def _drop(supersteps: weakref.ref[_Supersteps], key: tuple[int, str, tuple[str, ...]]) -> None:
        held = supersteps()
        if held is not None:
            with held._lock:
                held._open.pop(key, None)


def _sent_ids(request: ToolCallRequest) -> set[str] | None:
    """The tool call ids the call's superstep sends to tool nodes, if LangGraph says (1.x).

    Read from the superstep's `Send` packets (the task's own read of LangGraph's
    tasks channel), so a call sent in another superstep, or never, is not waited
    for. None when LangGraph does not say.
    """
    config = getattr(request.runtime, "config", None) or {}
    read = (config.get("configurable") or {}).get("__pregel_read")
    if not callable(read):
        return None
    try:
        packets = read("__pregel_tasks", False)
    except Exception:  # an empty channel, or another LangGraph: it does not say
        return None
    if not isinstance(packets, Sequence):
        return None
    ids: set[str] = set()
    for packet in packets:
        arg = getattr(packet, "arg", None)
        if isinstance(arg, Mapping) and arg.get("__type") == "tool_call_with_context":
            tool_call = arg.get("tool_call")
            if isinstance(tool_call, Mapping):
                ids.add(str(tool_call.get("id") or ""))
    return ids


def _superstep(request: ToolCallRequest) -> object | None:
    """What the tasks of the call's LangGraph superstep share, if LangGraph says (1.x)."""
    config = getattr(request.runtime, "config", None) or {}
    caller = (config.get("configurable") or {}).get("__pregel_call")
    futures = getattr(caller, "keywords", {}).get("futures")
    found = futures() if callable(futures) else None
    return found


def _threads(request: ToolCallRequest) -> int | None:
    """How many tasks of the call's superstep LangGraph runs at once, if it says (1.x).

    The threads of its pool on the blocking path; `max_concurrency` on the async
    path (a semaphore around the tasks); None when unbounded or not said.
    """
    config = getattr(request.runtime, "config", None) or {}
    caller = (config.get("configurable") or {}).get("__pregel_call")
    submit = getattr(caller, "keywords", {}).get("submit")
    method = submit() if callable(submit) else None
    runner = getattr(method, "__self__", None)
    threads = getattr(getattr(runner, "executor", None), "_max_workers", None)
    if getattr(runner, "semaphore", None) is not None:
        threads = config.get("max_concurrency")
    return threads if isinstance(threads, int) and threads > 0 else None


_EXECUTION: contextvars.ContextVar[_Execution | None] = contextvars.ContextVar(
    "agentrt_langgraph_execution", default=None
)
"""The gated ToolNode's execution in progress (LangGraph copies the context into
the thread pool and the tasks that run its calls)."""


class _GatedToolNode(ToolNode):
    """LangGraph's ToolNode, marking each execution with its calls in the model's order.

    A call sent on its own (`Send`) is placed by its hook instead (`GatedTools._sent`).
    """

    def _execution(self, input: Any) -> _Execution | None:
        if isinstance(input, Mapping) and input.get("__type") == "tool_call_with_context":
            return None  # one call sent on its own: placed by its message (`_Supersteps`)
        try:
            calls, _ = self._parse_input(input)
        except Exception:  # the ToolNode itself raises it again, its own way
            return None
        ids = [str(c.get("id") or "") for c in calls]
        if "" in ids or len(set(ids)) != len(ids):
            return None  # calls it cannot tell apart: one at a time, in no set order
        return _Execution(ids)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        token = _EXECUTION.set(self._execution(input))
        try:
            return super().invoke(input, config, **kwargs)
        finally:
            _EXECUTION.reset(token)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        token = _EXECUTION.set(self._execution(input))
        try:
            return await super().ainvoke(input, config, **kwargs)
        finally:
            _EXECUTION.reset(token)


_Place = tuple[_Execution, int]
"""A call's execution and its index in it."""

_Sent = tuple[object, str, list[str], set[str], int | None]
"""A sent call's superstep, its id, its message's call ids, the calls not to wait for, and
the threads of the pool running the superstep (None when unknown)."""


def _place_of(request: ToolCallRequest) -> _Place | None:
    execution = _EXECUTION.get()
    if execution is None:
        return None
    index = execution.index(str(request.tool_call.get("id") or ""))
    return None if index is None else (execution, index)


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
        self.node: ToolNode = _GatedToolNode(
            list(tools),
            handle_tool_errors=False,
            messages_key=messages_key,
            wrap_tool_call=self.wrap_tool_call,
            awrap_tool_call=self.awrap_tool_call,
        )
        self.node.agentrt_gate = self  # type: ignore[attr-defined]
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
            tools=[
                with_reconcile(_FrameworkTool(spec, self._calls), classes[spec.name].reconcile)
                for spec in specs
            ],
            observer=observer,
            now=now,
            new_id=new_id,
            lease_ttl=lease_ttl,
            lease_owner=lease_owner,
            origin="adapter:langgraph",
        )
        self.store = store
        self.limits = limits
        self.goal = goal
        self._messages_key = messages_key
        self._operator = Operator(store, observer, now)
        self._subgraphs: set[str] = set()  # the sub-graphs this node's calls ran in
        self._supersteps = _Supersteps()

    # -- the ToolNode's hooks -----------------------------------------------

    async def awrap_tool_call(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> ToolMessage:
        """The async hook: one call through the Gate, in the model's order (one at a time)."""
        place = _place_of(request)
        async with contextlib.AsyncExitStack() as turn:
            if place is not None:  # first: whatever this call raises stops the calls behind
                await turn.enter_async_context(place[0].waiting(place[1]))
            run_id, answered = self._run_of(request)
            if answered:  # resumed with a person's answer naming another run: its turn's?
                run_id = await asyncio.to_thread(self._resumed_run, request, run_id, answered)
            if place is None and (sent := self._sent(request)) is not None:
                settled = await asyncio.to_thread(self._settled, run_id, sent[2])
                place = self._join(sent, run_id, settled)
                if place is not None:
                    await turn.enter_async_context(place[0].waiting(place[1]))
            async with _ONE_AT_A_TIME.waiting(run_id):
                return await self._handle(request, execute, run_id, place)

    def wrap_tool_call(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]
    ) -> ToolMessage:
        """The blocking hook: the same, on an event loop of its own."""
        place = _place_of(request)
        with contextlib.ExitStack() as turn:
            if place is not None:  # first: whatever this call raises stops the calls behind
                turn.enter_context(place[0].blocking(place[1]))
            run_id, answered = self._run_of(request)
            if answered:  # resumed with a person's answer naming another run: its turn's?
                run_id = self._resumed_run(request, run_id, answered)
            if place is None and (sent := self._sent(request)) is not None:
                place = self._join(sent, run_id, self._settled(run_id, sent[2]))
                if place is not None:
                    turn.enter_context(place[0].blocking(place[1]))
            with _ONE_AT_A_TIME.blocking(run_id):
                return run_sync(self._handle(request, execute, run_id, place))

    def _sent(self, request: ToolCallRequest) -> _Sent | None:
        """A call LangGraph runs as a task of its own (`Send`): its superstep and message.

        The message's calls this node will not be sent in the superstep are
        skipped: those the state answers already, and those naming no tool of
        this node (a structured-output call of `create_agent`).
        """
        if _EXECUTION.get() is not None:
            return None
        superstep = _superstep(request)
        call_id = str(request.tool_call.get("id") or "")
        if superstep is None or not call_id:
            return None
        messages = messages_of(request.state, self._messages_key)
        for message in reversed(messages):
            if isinstance(message, AIMessage) and any(
                c.get("id") == call_id for c in message.tool_calls
            ):
                break
        else:
            return None
        ids = [str(c.get("id") or "") for c in message.tool_calls]
        if "" in ids or len(set(ids)) != len(ids):
            return None  # calls it cannot tell apart: one at a time, in no set order
        answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
        mine = self.node.tools_by_name
        sent = _sent_ids(request)
        if sent is not None and call_id not in sent:
            sent = None  # not what it seems: rely on the message alone
        skip = {
            i
            for i, c in zip(ids, message.tool_calls, strict=True)
            if i != call_id
            and (i in answered or c.get("name") not in mine or (sent is not None and i not in sent))
        }
        return superstep, call_id, ids, skip, _threads(request)

    def _join(self, sent: _Sent, run_id: str, settled: set[str]) -> _Place | None:
        """The sent call's place among its message's calls in its superstep."""
        superstep, call_id, ids, skip, threads = sent
        execution = self._supersteps.join(
            superstep, run_id, ids, skip | (settled - {call_id}), threads
        )
        index = execution.index(call_id)
        return None if index is None else (execution, index)

    def _settled(self, run_id: str, ids: Sequence[str]) -> set[str]:
        """Those of the tool call ids `ids` whose latest step in the run is done or failed."""
        latest = _CALLS.latest(self.store, run_id, ids)
        return {i for i, s in latest.items() if s.status in (StepStatus.DONE, StepStatus.FAILED)}

    def _run_of(self, request: ToolCallRequest) -> tuple[str, list[str]]:
        """The agentrt run of the call's turn as the state tells it; and the other runs the
        node execution's answers name (`_resumed_run` looks whether one is the turn's)."""
        config = getattr(request.runtime, "config", None)
        subgraph = subgraph_of(config)
        if subgraph:
            self._subgraphs.add(subgraph)
        call_id = str(request.tool_call.get("id") or "")
        turn = turn_of(request.state, call_id, self._messages_key)
        run_id = run_id_for(thread_of(config), turn, subgraph)
        return run_id, [r for r in answered_runs(config) if r != run_id]

    def _resumed_run(self, request: ToolCallRequest, run_id: str, answered: Sequence[str]) -> str:
        """The run of the call's turn when the node execution carries a person's answer.

        An answer names the run whose interrupt it resumes. When `run_id` (the
        turn as the state tells it) recorded no call of the call's AI message,
        a run of those that did is that message's turn's run, whatever the state
        says since (its first message removed, say): a call recorded there is
        never recorded, or run, anew in another run. Otherwise `run_id`.
        """
        call_id = str(request.tool_call.get("id") or "")
        beside = calls_beside(request.state, call_id, self._messages_key)
        ids = [i for i in (str(c.get("id") or "") for c in beside) if i] or [call_id]
        if _CALLS.latest(self.store, run_id, ids):
            return run_id
        for candidate in answered:
            if _CALLS.latest(self.store, candidate, ids):
                return candidate
        return run_id

    # -- one call ---------------------------------------------------------------

    async def _handle(
        self,
        request: ToolCallRequest,
        execute: Executor,
        run_id: str,
        place: _Place | None = None,
    ) -> ToolMessage:
        call = request.tool_call
        call_id = str(call.get("id") or "")
        if not call_id:
            raise ConfigError("a tool call without an id cannot be gated (LangGraph gives one)")
        answered: set[str] = set()  # approvals answered on this execution of the node
        while True:
            run, step, approvals = await asyncio.to_thread(self._read, run_id, call_id)
            if step is not None and not _records(step, call):
                if _shares_id(step, call, request.state, self._messages_key):
                    # Another call of this message, with the same id, is the one recorded.
                    if run is not None and run.status == RunStatus.WAITING_FOR_APPROVAL:
                        return _not_run(call, run)
                    return _reused(step, call)
                if not _same_call(step, call, approvals):
                    return _reused(step, call)  # an id used again in the turn: not this call
            latest = approvals[-1] if approvals else None
            if (
                run is not None
                and run.status == RunStatus.WAITING_FOR_APPROVAL
                and latest is not None
                and latest.status == ApprovalStatus.PENDING
                and latest.id not in answered
            ):
                answer = self._ask(latest, call, place)  # raises GraphInterrupt until answered
                answered.add(latest.id)
                await asyncio.to_thread(self._answer, latest, answer)
                continue  # read again: the answer decided the approval
            if step is not None and step.status in (StepStatus.DONE, StepStatus.FAILED):
                return _message(step, call)  # recorded: never run a second time
            if run is not None and run.status in (
                RunStatus.COMPLETED,
                RunStatus.FAILED,
                RunStatus.CANCELLED,
            ):
                if step is None and place is not None:
                    before = place[0].ids[: place[1]]
                    if await asyncio.to_thread(self._ended_on, run_id, before):
                        return _ended_beside(call, run)  # held: the run ended meanwhile
                raise RunEndedError(run)
            if run is not None and run.status == RunStatus.WAITING_FOR_APPROVAL:
                if latest is None:
                    return _not_run(call, run)  # another call of this node waits for a person
                # This call's approval was decided (or ran out of time): attach judges it.
                message = await self._attach_and_run(run_id, request, execute)
            elif step is not None and step.status != StepStatus.INTERRUPTED:
                # Executing or deciding in the record: its process died. Attach takes
                # the run over; a side effect then waits for a person (asked above),
                # unless its tool's reconciliation settles it (decision 0091).
                message = await self._take_over(run_id, request, execute)
            else:
                seen = None if step is None else step.id
                message = await self._new_step(run, seen, run_id, request, execute)
            if message is not None:
                return message

    def _read(self, run_id: str, call_id: str) -> tuple[Run | None, Step | None, list[Approval]]:
        try:
            run = self.store.get_run(run_id)
        except NotFoundError:
            return None, None, []
        steps = _CALLS.steps(self.store, run_id, call_id)
        if not steps:
            return run, None, []
        step = steps[-1]
        approvals = [a for a in self.store.list_approvals(run_id, cap=None) if a.step_id == step.id]
        return run, step, approvals

    def _latest(self, run_id: str, call_id: str) -> tuple[str, str] | None:
        """The id and status of the run's latest step recording the call `call_id`, if any."""
        steps = _CALLS.steps(self.store, run_id, call_id)
        return (steps[-1].id, steps[-1].status) if steps else None

    def _exists(self, run_id: str) -> bool:
        try:
            self.store.get_run(run_id)
        except NotFoundError:
            return False
        return True

    def _ended_on(self, run_id: str, before: Sequence[str]) -> bool:
        """Whether the run ended on a call made before this one in its message.

        True when the run's last step records one of `before` (the calls ahead
        in the same AI message), failed, after waiting for a person: a rejected
        approval (or an interrupted side effect turned down). The calls held
        behind it are then told the run ended; they are never recorded.
        """
        steps = self.store.list_steps(run_id, cap=None)
        if not steps:
            return False
        last = steps[-1]
        if last.status != StepStatus.FAILED or _CALLS.call_id(last.decision) not in before:
            return False
        return any(a.step_id == last.id for a in self.store.list_approvals(run_id, cap=None))

    def _ask(
        self, approval: Approval, call: Mapping[str, Any], place: _Place | None = None
    ) -> dict[str, Any]:
        """The person's answer to `approval`, through LangGraph's `interrupt()`.

        LangGraph answers the interrupts of a node by position and gives the
        saved answers back on every re-execution; an answer to an approval of
        the run that is already decided is one of those (applied when it came),
        so it is passed over and the next position asked.
        """
        value = self._interrupt_value(approval, call)
        value["held"] = place[0].behind(place[1]) if place is not None else []
        schema = self._expected(approval)
        while True:
            answer: dict[str, Any] = interrupt(value, response_schema=schema)
            if answer["approval_id"] == approval.id:
                return answer

    def _expected(self, approval: Approval) -> Any:
        """What LangGraph may hand back for `approval`: its answer, or an earlier one.

        Given to `interrupt()` as its `response_schema`, so a refused resume (a
        decision for another request, or `decided` while the approval is still
        pending) raises out of the graph before LangGraph saves it: the
        interrupt stays open and can be answered again.

        The validator holds this node weakly: Python's typing keeps the `Annotated` types
        it is given in a cache of its own (the last 128), which would otherwise keep
        the node, its Gate and its store (a PostgreSQL connection) alive after the graph
        was dropped.
        """
        node = weakref.ref(self)

        def check(value: Any) -> dict[str, Any]:
            gated = node()
            if gated is None:
                raise RuntimeError("the gated tool node that asked for this answer is gone")
            named = value.get("approval_id") if isinstance(value, Mapping) else None
            earlier = gated._decided(approval.run_id, named) if named != approval.id else None
            if earlier is not None:
                return check_resume(value, earlier.run_id, earlier.id, earlier.hash)
            checked = check_resume(value, approval.run_id, approval.id, approval.hash)
            if checked["decision"] == "decided":
                current = gated.store.get_approval(approval.run_id, approval.id)
                if current.status == ApprovalStatus.PENDING:
                    raise RunStateError(
                        f"approval {approval.id} is still pending: decide it "
                        f"(agentrt approve {approval.run_id}) before resuming with decided()"
                    )
            return checked

        return Annotated[dict[str, Any], BeforeValidator(check)]

    def _decided(self, run_id: str, approval_id: object) -> Approval | None:
        """The run's approval `approval_id` if it was decided (an earlier answer names it)."""
        for approval in self.store.list_approvals(run_id, cap=None):
            if approval.id == approval_id and approval.status != ApprovalStatus.PENDING:
                return approval
        return None

    def _answer(self, approval: Approval, value: dict[str, Any]) -> None:
        """Apply a checked answer to `approval`, unless it was decided already."""
        if value["decision"] == "decided":
            return  # decided through agentrt approve, the console or the webhook
        current = self.store.get_approval(approval.run_id, approval.id)
        if current.status != ApprovalStatus.PENDING:
            return  # decided elsewhere meanwhile: what was decided there stands
        by = str(value.get("by") or "")
        note = str(value.get("note") or "")
        decide = self._operator.approve if value["decision"] == "approve" else self._operator.reject
        try:
            decide(approval.run_id, approval.id, by, note, shown_hash=approval.hash)
        except ApprovalExpiredError:
            return  # too late: attaching the run settles the expiry (the run is cancelled)
        except NotPendingError:
            return  # decided elsewhere since the look above: what was decided there stands

    def _interrupt_value(self, approval: Approval, call: Mapping[str, Any]) -> dict[str, Any]:
        text = ""
        if approval.status == ApprovalStatus.PENDING:
            # A person may decide (or it may expire) between the pause and this look:
            # then there is no pending request to show, and the resume settles it.
            with contextlib.suppress(NotPendingError, ApprovalExpiredError):
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
        self,
        run: Run | None,
        seen: str | None,
        run_id: str,
        request: ToolCallRequest,
        execute: Executor,
    ) -> ToolMessage | None:
        """A call not yet recorded (or whose step never ran): a new step of the run."""
        call = request.tool_call
        if run is None:
            await self._end_earlier_turn(request, run_id)
            try:
                session = await self.gate.begin(
                    self.goal or _goal_of(request, self._messages_key), self.limits, run_id
                )
            except RunStateError:
                if await asyncio.to_thread(self._exists, run_id):
                    return None  # another worker began the run meanwhile: look again
                raise
        else:
            attached = await attach_unless_ended(self.gate, self.store, run_id)
            if attached is None:
                return None  # ended since it was read: the next read tells the end
            session, verdict = attached
            if verdict is not None:  # the takeover paused, ended or vouched: look again
                async with session:
                    return await self._vouched(session, verdict, request, execute)
            # Read again under the lease: another worker may have recorded this
            # call between our read and our attach; it is never run a second time.
            latest = await asyncio.to_thread(self._latest, run_id, str(call["id"]))
            if (latest[0] if latest else None) != seen or (
                latest is not None and latest[1] in (StepStatus.DONE, StepStatus.FAILED)
            ):
                # Recorded meanwhile, or settled by the takeover (its tool's
                # reconciliation found the effect): look again, never run it twice.
                await session.close()
                return None
        async with session:
            step = await session.step()
            if step is None:
                raise RunEndedError(session.run)
            decision = Decision.tool_call(
                str(call["name"]), call.get("args"), reason=_CALLS.reason(str(call["id"]))
            )
            verdict = await step.propose(decision)
            if verdict.outcome == "allowed":
                return await self._execute(session, request, execute)
            if verdict.outcome == "ended":
                raise RunEndedError(verdict.run)
            if verdict.outcome == "denied" and not _utf8(str(call["id"])):
                # A call id that is not UTF-8 text (a lone surrogate): the decision
                # was refused and its reason is stored escaped, so no look-up by
                # this id finds the step again. Its refusal is this call's answer.
                refused = await asyncio.to_thread(step_of_run, self.store, run_id, step.id)
                if refused is not None:
                    return _message(refused, call)
            return None  # denied (recorded) or pending (shown next): look again

    async def _end_earlier_turn(self, request: ToolCallRequest, run_id: str) -> None:
        """Complete the thread's latest earlier turn's run, if it simply goes on.

        A turn's run is left RUNNING between its tool calls (LangGraph tells a
        node nothing when the graph stops); the next turn that calls a tool
        ends it, with the step `complete`. A run leased by another process, or
        ended, is left as it is. A run that waits for a person (its approval
        pending, or approved and not carried out), or that was cut off in a
        side effect (attach pauses it for a person), refuses this call with
        `EarlierTurnWaitsError`: nothing of this turn is recorded or run.
        """
        call_id = str(request.tool_call.get("id") or "")
        current = turn_of(request.state, call_id, self._messages_key)
        messages = messages_of(request.state, self._messages_key)
        config = getattr(request.runtime, "config", None)
        for earlier in earlier_runs(messages, thread_of(config), current, subgraph_of(config)):
            if earlier == run_id:
                continue
            try:
                run = await asyncio.to_thread(self.store.get_run, earlier)
            except NotFoundError:
                continue  # that turn called no tool: look further back
            if run.status == RunStatus.RUNNING:
                await self._complete(earlier, "the thread's next turn began")
                run = await asyncio.to_thread(self.store.get_run, earlier)
            if run.status == RunStatus.WAITING_FOR_APPROVAL:
                refusal = await asyncio.to_thread(self._waits, earlier, request.tool_call)
                if refusal is not None:
                    raise refusal
            return

    def _waits(
        self, run_id: str, refused: Mapping[str, Any] | None
    ) -> EarlierTurnWaitsError | None:
        """The refusal of `refused` (None: a turn's end) if run `run_id` waits on a call for a
        person, else None."""
        steps = self.store.list_steps(run_id, cap=None)
        for step in reversed(steps):
            if step.status != StepStatus.AWAITING_APPROVAL:
                continue
            mine = [a for a in self.store.list_approvals(run_id, cap=None) if a.step_id == step.id]
            if mine and mine[-1].status in (ApprovalStatus.PENDING, ApprovalStatus.APPROVED):
                return _earlier_turn_waits(run_id, mine[-1], step, refused)
        return None

    async def end_turn(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        """The turn end node's work: complete the turn's run when the model answered.

        The state's last message is the model's answer with no tool call: the
        run of its turn (if the turn called a tool) is completed, its `complete`
        step's result the answer's content. Anything else (a message with tool
        calls, a turn with no run, a run already ended) leaves the record as it is.
        While the thread's latest earlier turn with a run waits for a person,
        the end is refused with `EarlierTurnWaitsError` and nothing is written.

        The turn's run is the one of the sub-graph the end runs in (a prebuilt
        agent's `post_model_hook` ends its own agent's run, not another's of
        the same turn), and of the sub-graphs below it where this node's calls
        ran in this process (an end at the top, or `invoke_and_wait`, ends a
        sub-agent's run too).
        """
        messages = messages_of(state, self._messages_key)
        if not messages:
            return {}
        last = messages[-1]
        if not isinstance(last, AIMessage) or last.tool_calls:
            return {}
        thread, current = thread_of(config), opener(messages, len(messages) - 1)
        own = subgraph_of(config)
        below = sorted(p for p in set(self._subgraphs) if not own or p.startswith(own + "|"))
        subgraphs = [own, *(p for p in below if p != own)]
        for subgraph in subgraphs:
            await asyncio.to_thread(
                self._refuse_while_earlier_waits, messages, thread, current, subgraph
            )
        for subgraph in subgraphs:
            run_id = run_id_for(thread, current, subgraph)
            try:
                run = await asyncio.to_thread(self.store.get_run, run_id)
            except NotFoundError:
                continue  # no call of the turn ran there: it has no run, nothing is written
            if run.status == RunStatus.RUNNING:
                await self._complete(run_id, cast(Any, last.content))
        return {}

    def _refuse_while_earlier_waits(
        self, messages: Sequence[Any], thread: str, current: str, subgraph: str = ""
    ) -> None:
        """Raise `EarlierTurnWaitsError` if the latest earlier turn with a run waits for a person.

        LangGraph dropped that turn's interrupt when the new message came, so
        ending this turn would leave the earlier call's approval with nothing
        to carry it out. Reads only.
        """
        for earlier in earlier_runs(messages, thread, current, subgraph):
            try:
                run = self.store.get_run(earlier)
            except NotFoundError:
                continue  # that turn called no tool: look further back
            if run.status == RunStatus.WAITING_FOR_APPROVAL:
                refusal = self._waits(earlier, None)
                if refusal is not None:
                    raise refusal
            return

    def end_turn_sync(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        return run_sync(self.end_turn(state, config))

    async def _complete(self, run_id: str, result: Any) -> None:
        """Complete a RUNNING run whose calls are all settled; any other run is left as it is.

        `attach` refuses a run leased by a live process (or with a live session
        here), or one that moved on meanwhile (completed by another process, a
        replayed node); it pauses a run cut off in a side effect for a person
        (the interruption contract): none of those is completed.
        """
        try:
            session, verdict = await self.gate.attach(run_id)
        except RunStateError:
            return  # leased by a live process, or moved on meanwhile
        async with session:
            if verdict is None:
                step = await session.step()
                if step is not None:
                    await step.propose(Decision.complete(result))

    async def _attach_and_run(
        self, run_id: str, request: ToolCallRequest, execute: Executor
    ) -> ToolMessage | None:
        """The run waits on this call's approved request: attach, and run it if allowed."""
        attached = await attach_unless_ended(self.gate, self.store, run_id)
        if attached is None:
            return None  # ended since it was read: the next read tells the end
        session, verdict = attached
        async with session:
            if verdict is not None and verdict.outcome == "allowed":
                return await self._execute(session, request, execute)
            if verdict is not None and verdict.outcome == "ended":
                raise RunEndedError(verdict.run)
            return None

    async def _take_over(
        self, run_id: str, request: ToolCallRequest, execute: Executor
    ) -> ToolMessage | None:
        attached = await attach_unless_ended(self.gate, self.store, run_id)
        if attached is None:
            return None  # ended since it was read: the next read tells the end
        session, verdict = attached
        async with session:
            if verdict is not None and verdict.outcome == "allowed":
                return await self._vouched(session, verdict, request, execute)
        if (
            verdict is not None
            and verdict.outcome == "ended"
            and verdict.run.status != RunStatus.COMPLETED
        ):
            raise RunEndedError(verdict.run)
        # Look again; COMPLETED by the takeover: a terminal tool's cut-off call its
        # reconciliation found (decision 0091), whose recorded result is this call's.
        return None

    async def _vouched(
        self, session: GateSession, verdict: Verdict, request: ToolCallRequest, execute: Executor
    ) -> ToolMessage | None:
        """After a takeover: a cut-off call its tool's reconciliation vouched may run again.

        Run now when it is this call (the same tool call id: LangGraph issues
        the node's calls again on resume); for another call, this one is not
        run or recorded and is told so, and the session given up leaves the
        vouched step `interrupted`, asked about again at the next takeover.
        Any other verdict: None (look again).
        """
        if verdict.outcome != "allowed":
            return None
        open_step = session.current()
        assert open_step is not None  # an allowed verdict leaves its step open
        waits_for = _CALLS.call_id(open_step.step.decision)
        call = request.tool_call
        if waits_for == str(call.get("id") or ""):
            return await self._execute(session, request, execute)
        return ToolMessage(
            content=(
                f"Not run: run {session.run_id} first runs again call {waits_for}, cut off by "
                "a crash, which its tool's reconciliation vouched is safe to repeat"
            ),
            name=call.get("name"),
            tool_call_id=call.get("id"),
            status="error",
        )

    async def _execute(
        self, session: GateSession, request: ToolCallRequest, execute: Executor
    ) -> ToolMessage | None:
        step = session.current()
        assert step is not None  # an allowed verdict leaves its step open
        self._calls.put(session.run_id, step.id, request, execute)
        try:
            # The session is closed once the call is recorded: that commit gives the
            # lease back too (decision 0131), one commit a call fewer.
            await step._execute_then_close()
        finally:
            self._calls.take(session.run_id, step.id)
        if session.run.status == RunStatus.WAITING_FOR_APPROVAL:
            # The tool said its outcome is unknown (decision 0054): it waits for a
            # person, asked next with `interrupt()`, as after a crash. Look again.
            return None
        recorded = step_of_run(self.store, session.run_id, step.id)
        assert recorded is not None  # the step this session just executed
        return _message(recorded, request.tool_call)


def _records(step: Step, call: Mapping[str, Any]) -> bool:
    """Whether `step` records the call LangGraph issues: its tool and its arguments.

    Arguments that are not usable JSON (a NaN, say) were recorded as text
    (`invalid_args`) and the call answered `invalid_decision`, never run: the
    same tool given unusable arguments under that id is that call.
    """
    decision = step.decision
    assert decision is not None  # found by its decision's reason
    if decision.tool != call.get("name"):
        return False
    if decision.args == call.get("args"):
        return True
    return decision.args is None and decision.invalid_args is not None and not _usable(call)


def _usable(call: Mapping[str, Any]) -> bool:
    """Whether the call's arguments are usable JSON (as the record stores them)."""
    try:
        policy_json(call.get("args"))
    except Exception:  # JSONValueError, or a value that is no JSON at all
        return False
    return True


def _shares_id(step: Step, call: Mapping[str, Any], state: Any, messages_key: str) -> bool:
    """Whether the request `step` records is another call of the AI message making `call`,
    under the same id (the model gave two calls of one message one id)."""
    call_id = call.get("id")
    return any(
        other.get("id") == call_id and _records(step, other)
        for other in calls_beside(state, str(call_id), messages_key)
    )


def _same_call(step: Step, call: Mapping[str, Any], approvals: Sequence[Approval]) -> bool:
    """Whether the call LangGraph issues is the call recorded under its id.

    A changed call whose step waits on (or was granted) an approval is refused:
    the approval was given for the recorded request. A call whose id is
    already settled in the record under another request is an id the model
    used twice in one turn (tool call ids are taken to be unique within a
    turn): False, it is answered with an error and nothing else happens.
    """
    decision = step.decision
    assert decision is not None  # found by its decision's reason
    if _records(step, call):
        return True
    if step.status in (StepStatus.DONE, StepStatus.FAILED):
        return False
    recorded = f"step {step.index} of run {step.run_id}"
    if approvals:
        raise ApprovalChangedError(
            f"tool call {call.get('id')} was recorded as {decision.tool} with other arguments "
            f"({recorded}, approval {approvals[-1].id}); a changed call is refused, "
            "not run as the approved one"
        )
    raise ApprovalChangedError(
        f"tool call {call.get('id')} was recorded as {decision.tool} with other arguments "
        f"({recorded}, {step.status}); a changed call is refused, not run as the recorded one"
    )


def _reused(step: Step, call: Mapping[str, Any]) -> ToolMessage:
    """The answer to a tool call id used again in one turn for another request: not run."""
    decision = step.decision
    assert decision is not None
    return ToolMessage(
        content=(
            f"Not run: tool call id {call.get('id')} was already used in this turn by "
            f"{decision.tool} {_json_text(decision.args)} (step {step.index} of agentrt run "
            f"{step.run_id}); give each tool call of a turn an id of its own"
        ),
        name=call.get("name"),
        tool_call_id=call.get("id"),
        status="error",
        artifact={"run_id": step.run_id, "reused_by_step": step.id},
    )


def _goal_of(request: ToolCallRequest, messages_key: str) -> str:
    call_id = str(request.tool_call.get("id") or "")
    turn = turn_of(request.state, call_id, messages_key)
    config = getattr(request.runtime, "config", None)
    subgraph = subgraph_of(config)
    return (
        f"LangGraph thread {thread_of(config)}"
        + (f", turn {turn}" if turn else "")
        + (f", sub-graph {subgraph}" if subgraph else "")
    )


def _utf8(text: str) -> bool:
    """Whether `text` is valid UTF-8 text (holds no lone surrogate)."""
    try:
        str.encode(text, "utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _message(step: Step, call: Mapping[str, Any]) -> ToolMessage:
    """The ToolMessage a recorded step gives the model, the same on every re-execution."""
    observation = step.observation or Observation(kind=ObservationKind.INTERRUPTED)
    content: Any = observation.content
    kind = observation.kind
    status = "success"
    if kind == ObservationKind.TOOL_RESULT:
        text = content if isinstance(content, str | list) else _json_text(content)
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


def _ended_beside(call: Mapping[str, Any], run: Run) -> ToolMessage:
    """A held call's answer when the run ended before its turn: not run, not recorded."""
    detail = f": {run.reason_detail}" if run.reason_detail else ""
    return ToolMessage(
        content=(
            f"Not run: the agentrt run {run.id} ended ({run.status}, {run.reason}{detail}) "
            "on an earlier call of this message; no tool runs in this turn again"
        ),
        name=call.get("name"),
        tool_call_id=call.get("id"),
        status="error",
        artifact={"run_id": run.id, "ended": str(run.status), "reason": str(run.reason)},
    )


def turn_end_node(tools_node: ToolNode) -> Runnable[Any, dict[str, Any]]:
    """The node that completes a turn's run when the graph stops with the model's answer.

    Route the end of your graph through it, or give it to the prebuilt agent
    as its `post_model_hook`:

        builder.add_node("agentrt_end", turn_end_node(tools_node))
        builder.add_conditional_edges(
            "agent", tools_condition, {"tools": "tools", END: "agentrt_end"}
        )

    It writes no state. When the last message is the model's answer with no
    tool call, the turn's agentrt run is completed (a last step `complete`,
    its result the answer's content); a run that waits for a person, is leased
    by a live process, was cut off in a side effect or already ended is left as
    it is, and a turn that called no tool has no run. While the thread's
    earlier turn waits for a person, a new turn's end is refused with
    `EarlierTurnWaitsError` (nothing written). Without it, the thread's next
    turn that calls a tool completes the run instead.
    """
    gated = getattr(tools_node, "agentrt_gate", None)
    if not isinstance(gated, GatedTools):
        raise ConfigError("turn_end_node takes the tool node that gated_tool_node returned")
    # LangChain keeps what a RunnableLambda's functions read in a cache keyed by the
    # function (`get_function_nonlocals`, 256 of them): a bound method there would keep the
    # node, its Gate and its store (a PostgreSQL connection) alive once the graph is
    # dropped. The functions hold the node weakly; the returned node holds it.
    node = weakref.ref(gated)

    def end_turn_sync(state: Any, config: RunnableConfig) -> dict[str, Any]:
        return _still(node).end_turn_sync(state, config)

    async def end_turn(state: Any, config: RunnableConfig) -> dict[str, Any]:
        return await _still(node).end_turn(state, config)

    end = RunnableLambda(end_turn_sync, afunc=end_turn, name="agentrt_end")
    end.agentrt_gate = gated  # type: ignore[attr-defined]  # as long as the graph holds it
    return end


def _still(node: weakref.ref[GatedTools]) -> GatedTools:
    """The gated node a weak reference names, which the node that holds it keeps alive."""
    gated = node()
    if gated is None:
        raise RuntimeError("the gated tool node this end node was made for is gone")
    return gated


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
    one is refused here (`UnclassifiedToolError`). Each turn of a thread is one
    agentrt run (`run_id_for(thread_id, turn)`), ended by `limits` like any
    run: the limits count one turn, never the thread's whole life.
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
