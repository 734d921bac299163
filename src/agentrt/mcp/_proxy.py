"""`agentrt-proxy`: an MCP server a host starts in place of its servers; every call via the Gate.

The host (a desktop assistant, an IDE agent) keeps its loop and its model; the
proxy offers it the tools of the operator's servers as pinned and classified
(`load`), and makes every call its own run through a `Gate`: recorded, checked
against the schema, put to the operator's policy, paused for a person when the
policy says so, executed once, and never run again after a crash on the
proxy's own say.

An identical re-call (same tool, same arguments) meets its predecessor's run
through the request key `sha256(tool || 0x00 || canonical_json(args))`
(`proxy_requests`, written before the run exists). The key's latest run is
judged in this order (docs/mcp.md, decision 0038):

1. its approval was decided (or lapsed): collect it; an approved request is
   executed, exactly what was approved;
2. it runs under a live lease: `IN_PROGRESS`;
3. its owner died: take it over; a side effect cut off mid-call waits for a
   person (`UNKNOWN_OUTCOME`), a call that never started or a read is carried
   out, a call that finished is settled from its record;
4. it was rejected, expired or cancelled within the repeat window: the same
   answer again;
5. it is a mutating call carried out within the window: `DUPLICATE`;
6. it waits for a person: `UNKNOWN_OUTCOME` (an interrupted side effect) or
   `PENDING_APPROVAL`;
7. otherwise a new run. A new mutating call is `BLOCKED` while another call
   of the same tool has an unknown outcome nobody decided; a new call the
   policy would send to a person is `BLOCKED` while `max_pending_approvals` of
   the proxy's calls wait already (counted in the key's claim transaction: one
   cap for the whole database).

A mutating call whose tool did not answer in time is held like one cut off by
a crash: the proxy proposes it again and `ProxyPolicy` pauses it on an
`interrupted_side_effect` approval, so rule 6 answers `UNKNOWN_OUTCOME` until
a person decides (decision 0047). A read that timed out simply runs again.
A mutating call whose server was lost after the call was sent (the tool raises
`OutcomeUnknown`) is paused by the Gate itself on the same kind of approval:
it, and every identical re-call, is answered `UNKNOWN_OUTCOME` until a person
decides (decision 0054); a read lost that way is `FAILED` and may be retried.
A mutating call whose server answered with what the runtime refuses (a message
too long, content that is not usable JSON, a result the MCP SDK refuses) was
carried out: its run completes noting that its result was not recorded, and the
call is answered `UNRECORDED` (nobody is asked; the identical re-call within the
window is `DUPLICATE`). Each server's connection is held in a task of its own,
so one that fails ends that server's calls only, never the proxy.

No unknown outcome is left with nothing for a person to act on: the first call
that meets one (the identical call, or another mutating call of the tool, then
`BLOCKED`) takes a dead run cut off mid-call over, which asks, and asks again,
in a new run of the same request key, about one whose question expired or
whose run had no step left to hold it (decision 0071). With `approval_hold`, a
call that would be `PENDING_APPROVAL` keeps the host waiting (with progress
notifications where asked for) and, decided meanwhile, is answered in the same
call.

Invariants:
- Nothing the model sees names the runtime, the database, the config or a run
  id: every answer is written here, in plain words, starting with one word the
  model can act on; errors are MCP `isError` results.
- In one process, one identical call at a time (`IN_PROGRESS` for the other);
  across processes the key's compare-and-set claim and the run's lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .._canonical import canonical_json
from .._clock import Clock, new_id, wall_clock
from .._errors import (
    AgentrtError,
    JSONValueError,
    LeaseLostError,
    MCPAnswerRefused,
    MCPInputRequired,
    MCPToolError,
    NotFoundError,
    OutcomeUnknown,
    RunStateError,
    StoreBusyError,
)
from .._gate import Gate, GateSession, Verdict, VerdictOutcome
from .._policy import (
    INTERRUPTED_SIDE_EFFECT,
    OUTCOME_UNKNOWN_NOTICE_START,
    SideEffectPolicy,
    need_approval,
)
from .._records import (
    MCP_PROXY_ORIGIN,
    Approval,
    ApprovalStatus,
    Decision,
    DecisionKind,
    Limits,
    Observation,
    ObservationKind,
    PolicyDecision,
    Run,
    RunStatus,
    RunView,
    SideEffect,
    Step,
    StepStatus,
    TerminalReason,
    ToolRequest,
    ToolSpec,
)
from .._store import Store, open_store
from .._store._records import RequestRow
from ._config import Server, read_manifest, read_rules
from ._proxy_config import STATUS_TOOL, ProxyConfig

if TYPE_CHECKING:
    import anyio

    from ._client import Connection

_log = logging.getLogger("agentrt.mcp.proxy")
_T = TypeVar("_T")

PENDING_APPROVAL = "PENDING_APPROVAL"
IN_PROGRESS = "IN_PROGRESS"
INTERRUPTED = "INTERRUPTED"
UNKNOWN_OUTCOME = "UNKNOWN_OUTCOME"
DENIED = "DENIED"
INVALID = "INVALID"
REJECTED = "REJECTED"
EXPIRED = "EXPIRED"
DUPLICATE = "DUPLICATE"
BLOCKED = "BLOCKED"
UNAVAILABLE = "UNAVAILABLE"
FAILED = "FAILED"
UNRECORDED = "UNRECORDED"
# gate_status only
APPROVED = "APPROVED"
DONE = "DONE"
NOT_FOUND = "NOT_FOUND"

PROXY_LIMITS_STEPS = 8
"""The call; a takeover's interrupted step; a pause after each timeout; `complete`/`fail`."""

_SENTENCES = {
    PENDING_APPROVAL: (
        "this call needs a person's approval and has not run. Call the tool again later "
        "with exactly the same arguments to collect the decision (an approved call runs "
        f"then), or ask {STATUS_TOOL}."
    ),
    IN_PROGRESS: (
        "this exact call is being handled right now. Do not repeat it; ask "
        f"{STATUS_TOOL} or call again later."
    ),
    UNKNOWN_OUTCOME: (
        "this call started earlier and was cut off before its outcome was recorded, so "
        "whether it took effect is unknown. It will not run again until a person decides. "
        "Tell the user; do not work around it with other arguments."
    ),
    REJECTED: "a person rejected this call; it was not carried out. Do not repeat it.",
    EXPIRED: "nobody decided on this call in time; it was not carried out.",
    INTERRUPTED: (
        "this call was stopped while it was being handled, and whether it took effect is "
        "unknown. Tell the user before trying again."
    ),
    UNAVAILABLE: "the server that provides this tool is not available now. Try again later.",
}
_TIMED_OUT_HELD = (
    "this call started earlier and did not answer in time, so whether it took effect is "
    "unknown. It will not run again until a person decides. Tell the user; do not work "
    "around it with other arguments."
)
_LOST_HELD = (
    "the connection to the server was lost after this call was sent, so whether it took "
    "effect is unknown. It will not run again until a person decides. Tell the user; do "
    "not work around it with other arguments."
)
_READ_LOST = (
    "the connection to the server was lost before this call answered. It changes nothing; "
    "calling again makes a new attempt."
)

_TOOL_BLOCKED = (
    "an earlier call of this tool was cut off, and whether it took effect is unknown. Until "
    "a person decides on it, no other call that changes something through this tool is "
    "carried out; this call was not recorded and has not run. Tell the user; reading "
    "tools still work."
)
_UNRECORDED = (
    "this call was carried out, but what the server answered could not be recorded "
    "({why}), so its result is not known. It did not fail; do not call it again to find "
    "out. Tell the user."
)
UNRECORDED_RESULT = "carried out; the server's answer was not recorded"
"""The result an `UNRECORDED` call's run completes with (and a `DUPLICATE` of it shows)."""

GIVEN_UP_DETAIL = (
    "the call did not answer in time and its run had no step left to hold it; outcome unknown"
)
"""How the run of a timed-out mutating call with no room to hold it ends (then asked again)."""
_LEFT_OPEN_ENDINGS: tuple[tuple[str, str | None], ...] = (
    (TerminalReason.APPROVAL_EXPIRED, None),
    (TerminalReason.LIMIT_STEPS, None),
    (TerminalReason.GOAL_FAILED, GIVEN_UP_DETAIL),
)
"""The endings of a run that may leave its call's outcome unknown with nothing waiting
(`Proxy._left_open` judges each from its record)."""
ASKED_AGAIN_TIMED_OUT = (
    "asked again: the call did not answer in time, and its run had no step left to hold it"
)
ASKED_AGAIN_EXPIRED = (
    "asked again: nobody decided in time whether the earlier attempt of this call took effect"
)
"""The reasons the proxy gives a call it proposes again, in a new run of the same request
key, so that an unknown outcome left with nothing waiting is put to a person at once."""
ASKED_AGAIN_NOTICE = (
    "An earlier attempt of this call had an unknown outcome, and nobody decided on it in time, "
    "so whether it took effect is still unknown. Approving runs it again with these "
    "arguments; rejecting ends it."
)
_ASKED_AGAIN_HELD = (
    "this call started earlier and whether it took effect is unknown; nobody decided on it in "
    "time, so a person has been asked again. It will not run again until a person decides. "
    "Tell the user; do not work around it with other arguments."
)
_LEFT_OPEN_STATUS = (
    "this call started earlier and whether it took effect is unknown; nobody is deciding on "
    "it now. Calling the tool again with exactly the same arguments asks a person again."
)

TIMED_OUT_REASON = "the call did not answer in time; outcome unknown"
TIMED_OUT_NOTICE = (
    "This call started and did not answer within its timeout, so whether it took effect "
    "is unknown (the server may even have finished it later). "
    "Approving runs it again with these arguments; rejecting ends the run."
)


HOLD_POLL_SECONDS = 0.25
"""How often (real time) a held call looks whether a person decided it."""
HOLD_MESSAGE = "waiting for a person's approval; the call runs as soon as it is approved"
"""The progress message a held call sends its host (nothing naming the runtime)."""

StillWaiting = Callable[[int], Awaitable[bool]]
"""Called at every look of a hold (0, 1, 2, ...): tells the host the call is held (a
progress notification where its request asked for them) and answers whether the host
still waits (False once it cancelled the call or closed the session)."""


def request_key(tool: str, args: Any) -> str:
    """Hex SHA-256 of the tool name, a NUL byte and the arguments' canonical JSON."""
    return hashlib.sha256(tool.encode("utf-8") + b"\x00" + canonical_json(args)).hexdigest()


@dataclasses.dataclass(frozen=True)
class Answer:
    """What the model is shown for one call: a word, plain text, and whether it is an error."""

    word: str
    text: str
    is_error: bool
    structured: dict[str, Any] | None = None

    @classmethod
    def of(cls, word: str, detail: str = "", *, is_error: bool = True) -> Answer:
        sentence = detail or _SENTENCES.get(word, "")
        return cls(word, f"{word}: {sentence}" if sentence else word, is_error)

    @classmethod
    def result(cls, content: Any) -> Answer:
        """A tool's own result, as the server answered it (through the content cap)."""
        if isinstance(content, str):
            return cls("", content, False)
        text = json.dumps(content, ensure_ascii=False)
        return cls("", text, False, content if isinstance(content, dict) else None)


def _timed_out(observation: Observation | None) -> bool:
    content = observation.content if observation is not None else None
    return (
        observation is not None
        and observation.kind == ObservationKind.TOOL_ERROR
        and isinstance(content, dict)
        and content.get("failure") == "timeout"
    )


def _refused_answer(observation: Observation | None) -> str | None:
    """Why the runtime refused what a tool that was carried out answered (a message too
    long, content that is not usable JSON), or None for any other observation."""
    if observation is None or observation.kind != ObservationKind.TOOL_ERROR:
        return None
    content = observation.content
    if not isinstance(content, dict):
        return None
    error = str(content.get("error") or "")
    if content.get("failure") == "invalid_content":
        return error or "its content is not usable JSON"
    prefix = f"{MCPAnswerRefused.__name__}: "
    if error.startswith(prefix):
        return error.removeprefix(prefix)
    return None


def _timed_out_just_before(request: ToolRequest, steps: Sequence[Step]) -> bool:
    """Is the step before `request`'s the same call, which did not answer in time?"""
    index = next((i for i, s in enumerate(steps) if s.id == request.step_id), len(steps))
    if index == 0:
        return False
    before = steps[index - 1].decision
    if (
        before is None
        or before.tool != request.spec.name
        or not _timed_out(steps[index - 1].observation)
    ):
        return False
    try:
        return canonical_json(before.args) == canonical_json(request.args)
    except (JSONValueError, TypeError, ValueError):
        return False


def _asked_again(run: Run) -> str | None:
    """The reason the proxy made `run` to ask again about an unknown outcome (its goal
    ends with it), or None for an ordinary call's run."""
    for reason in (ASKED_AGAIN_TIMED_OUT, ASKED_AGAIN_EXPIRED):
        if run.goal.endswith(f" ({reason})"):
            return reason
    return None


def _cut_off(steps: Sequence[Step]) -> bool:
    """Was a running run's call cut off: a step still executing, or its last call timed
    out (and was not yet held)?"""
    for step in reversed(steps):
        if step.status == StepStatus.EXECUTING:
            return True
        if step.observation is not None:
            return _timed_out(step.observation)
    return False


def timed_out_decision(request: ToolRequest, asked_again: str | None = None) -> PolicyDecision:
    """The pause for a mutating call that timed out, or that the proxy asks again about:
    an `interrupted_side_effect` approval (approving runs it once more; rejecting ends
    the run)."""
    args = request.args if isinstance(request.args, dict) else {}
    expired = asked_again == ASKED_AGAIN_EXPIRED
    return PolicyDecision.require_approval(
        kind=INTERRUPTED_SIDE_EFFECT,
        reason=asked_again or TIMED_OUT_REASON,
        capability={"tool": request.spec.name, "args": args},
        presentation={
            "tool": request.spec.name,
            "args": args,
            "side_effect": str(request.spec.side_effect),
            "notice": ASKED_AGAIN_NOTICE if expired else TIMED_OUT_NOTICE,
        },
    )


class ProxyPolicy:
    """The operator's table, and one rule before it: a mutating call proposed again
    right after the same call timed out waits for a person (decision 0047), and so
    does every call of a run the proxy made to ask again about an unknown outcome
    left with nothing waiting (its goal says so; decision 0071).

    Judged from the run's record alone (the step before), so every process, and
    a resume after the approval, judges it alike.
    """

    def __init__(self, table: SideEffectPolicy) -> None:
        self.table = table
        self.policy_id = table.policy_id

    def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
        if request.spec.side_effect != SideEffect.READ_ONLY:
            asked_again = _asked_again(view.run)
            if asked_again is not None or _timed_out_just_before(request, view.steps):
                return timed_out_decision(request, asked_again)
        return self.table.evaluate(request, view)


def build_policy(table: Mapping[str, str]) -> ProxyPolicy:
    """The operator's side effect -> allow | approve | deny table as a policy."""

    def approve(side_effect: str) -> Callable[[ToolRequest], PolicyDecision]:
        def entry(request: ToolRequest) -> PolicyDecision:
            shown = {"tool": request.spec.name, "args": request.args}
            return need_approval(
                side_effect,
                f"the operator has {side_effect} tools approved by a person",
                capability=shown,
                presentation=shown,
            )

        return entry

    entries: dict[str, Any] = {}
    for side_effect, mode in table.items():
        if mode == "allow":
            entries[side_effect] = PolicyDecision.allow()
        elif mode == "approve":
            entries[side_effect] = approve(side_effect)
        else:
            entries[side_effect] = PolicyDecision.deny(
                f"the operator does not allow {side_effect} tools"
            )
    policy_id = "agentrt.mcp.proxy/2:" + ",".join(f"{k}={v}" for k, v in sorted(table.items()))
    return ProxyPolicy(SideEffectPolicy(entries, policy_id=policy_id))


async def _io(work: Callable[..., _T], *args: Any) -> _T:
    return await asyncio.to_thread(work, *args)


class Proxy:
    """The request-key rules over a Gate: what one call (or `gate_status`) answers."""

    def __init__(
        self,
        config: ProxyConfig,
        store: Store,
        gate: Gate,
        specs: Mapping[str, ToolSpec],
        unavailable: Mapping[str, str],
        now: Clock | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.gate = gate
        self.specs = dict(specs)
        self.unavailable = dict(unavailable)
        self.now = now or wall_clock
        self.limits = Limits(
            max_steps=PROXY_LIMITS_STEPS,
            # each repeat of a timed-out call was approved by a person: not a loop
            max_consecutive_tool_failures=PROXY_LIMITS_STEPS,
            loop_threshold=PROXY_LIMITS_STEPS,
            approval_ttl=config.approval_ttl,
            grant_ttl=config.grant_ttl,
        )
        self._inflight: set[str] = set()

    # -- the two entry points ------------------------------------------------

    async def call(self, name: str, args: Any, waiting: StillWaiting | None = None) -> Answer:
        """One call's answer. Given `waiting` (the host waits for this answer), a call
        that would be answered `PENDING_APPROVAL` is held up to `approval_hold` on the
        proxy's clock, counted from the call's arrival: approved (or rejected, or expired)
        within it, it is collected and answered in the same call."""
        if name == STATUS_TOOL:
            return await self.status(args)
        spec = self.specs.get(name)
        if spec is None:
            if name in self.unavailable:
                return Answer.of(UNAVAILABLE)
            return Answer.of(INVALID, f"there is no tool named {name!r}.")
        args = {} if args is None else args
        try:
            key = request_key(name, args)
        except (JSONValueError, TypeError, ValueError):
            return Answer.of(INVALID, "the arguments are not usable JSON.")
        if key in self._inflight:
            return Answer.of(IN_PROGRESS)
        self._inflight.add(key)
        try:
            # Read before the approval is asked for: a clock read after it could
            # already stand past a decision's moment, and the hold would never end.
            arrived = self.now()
            answer = await self._handle(spec, key, args)
            if answer.word == PENDING_APPROVAL and waiting is not None:
                answer = await self._hold_for_person(spec, key, args, answer, waiting, arrived)
            return answer
        except StoreBusyError:
            _log.warning("the database stayed busy; call %s answered UNAVAILABLE", name)
            return Answer.of(UNAVAILABLE, "the call could not be recorded now. Try again later.")
        finally:
            self._inflight.discard(key)

    async def status(self, args: Any) -> Answer:
        """Where an earlier call stands (`gate_status`), without acting on it."""
        if not isinstance(args, dict) or not isinstance(args.get("tool"), str):
            return Answer.of(INVALID, "give the tool's name as `tool` and its arguments.")
        tool, arguments = args["tool"], args.get("arguments", {})
        if tool not in self.specs and tool not in self.unavailable:
            return Answer.of(INVALID, f"there is no tool named {tool!r}.")
        try:
            key = request_key(tool, {} if arguments is None else arguments)
        except (JSONValueError, TypeError, ValueError):
            return Answer.of(INVALID, "the arguments are not usable JSON.")
        row = await _io(self.store.latest_request, key)
        run = await self._run(row)
        if run is None:
            if key in self._inflight:
                return Answer.of(IN_PROGRESS, is_error=False)
            return Answer.of(
                NOT_FOUND,
                "no earlier call of this tool with these arguments is on record.",
                is_error=False,
            )
        return await self._describe(run, tool)

    async def _hold_for_person(
        self,
        spec: ToolSpec,
        key: str,
        args: Any,
        answer: Answer,
        waiting: StillWaiting,
        arrived: datetime,
    ) -> Answer:
        """Keep a call that waits for a person's approval until it is decided, the hold
        (from the call's arrival) runs out, or the host stops waiting; a decided call is
        collected (rule 1) and its answer given in this same call (decision 0071)."""
        hold = self.config.approval_hold
        if hold <= timedelta(0):
            return answer
        deadline = arrived + hold
        look = 0
        while answer.word == PENDING_APPROVAL and await waiting(look):
            if await self._decided(key):
                answer = await self._handle(spec, key, args)
                continue
            if self.now() >= deadline:
                break
            await asyncio.sleep(HOLD_POLL_SECONDS)
            look += 1
        return answer

    async def _decided(self, key: str) -> bool:
        """Has the key's latest run stopped waiting on an undecided approval?"""
        run = await self._run(await _io(self.store.latest_request, key))
        if run is None or run.status != RunStatus.WAITING_FOR_APPROVAL:
            return True
        approval = await self._latest_approval(run)
        return (
            approval is None or approval.status != ApprovalStatus.PENDING or self._lapsed(approval)
        )

    # -- the rules, in order -----------------------------------------------

    async def _handle(self, spec: ToolSpec, key: str, args: Any) -> Answer:
        row = await _io(self.store.latest_request, key)
        run = await self._run(row)
        if row is not None and run is None and self._claimed_recently(row):
            return Answer.of(IN_PROGRESS)  # another process claimed it and is creating the run
        if row is None or run is None:
            return await self._new_run(spec, key, args, row)
        approval = await self._latest_approval(run)
        # 1. a decided approval is collected; an approved request runs now
        if (
            run.status == RunStatus.WAITING_FOR_APPROVAL
            and approval is not None
            and (approval.status != ApprovalStatus.PENDING or self._lapsed(approval))
        ):
            answer = await self._attach(spec, run)
            if answer.word == EXPIRED and spec.side_effect != SideEffect.READ_ONLY:
                # an unknown outcome's question expired: put to a person again at once
                expired = await _io(self.store.get_run, run.id)
                why = await self._left_open(expired)
                if why is not None:
                    return await self._ask_again(spec, row, expired, why)
            return answer
        # 2. and 3. running: a live owner, or a dead one taken over
        if run.status == RunStatus.RUNNING:
            return await self._attach(spec, run, args)
        mutating = spec.side_effect != SideEffect.READ_ONLY
        # an unknown outcome left with nothing waiting (its question expired, or its run
        # had no step left to hold it) is put to a person again at once, in a new run
        why = await self._left_open(run) if mutating else None
        if why is not None:
            return await self._ask_again(spec, row, run, why)
        within = self._within_window(run)
        # 4. rejected, expired or cancelled within the repeat window
        if within and run.status != RunStatus.COMPLETED:
            repeated = self._ended_word(run)
            if repeated is not None:
                return repeated
        # 5. a mutating call carried out within the window
        if within and run.status == RunStatus.COMPLETED and mutating:
            return self._duplicate(run)
        # 6. waiting for a person
        if run.status == RunStatus.WAITING_FOR_APPROVAL:
            return self._waiting(approval)
        # 7. a new run
        return await self._new_run(spec, key, args, row)

    async def _new_run(
        self, spec: ToolSpec, key: str, args: Any, judged: RequestRow | None
    ) -> Answer:
        """Claim the key and make the call's run. A call the policy sends to a person is
        claimed only while fewer than `max_pending_approvals` of the proxy's calls wait
        for one (or are on their way to it), counted in the claim's own transaction, so
        the cap holds for every proxy on the database."""
        if spec.side_effect != SideEffect.READ_ONLY and await self._unknown_outcome_open(spec, key):
            return Answer.of(BLOCKED, _TOOL_BLOCKED)
        awaiting = [effect for effect, mode in self.config.policy.items() if mode == "approve"]
        needs_a_person = str(spec.side_effect) in awaiting
        run_id = new_id()
        now = self.now()
        claim = await _io(
            functools.partial(
                self.store.claim_request,
                key,
                None if judged is None else judged.seq,
                run_id,
                spec.name,
                str(spec.side_effect),
                now,
                cap=self.config.max_pending_approvals if needs_a_person else None,
                awaiting=awaiting,
                fresh_since=now - self.config.lease_ttl,
            )
        )
        if claim.full:
            return Answer.of(
                BLOCKED,
                f"{claim.waiting} calls already wait for a person's decision, the most this "
                "tool server accepts; this call was not recorded and has not run. "
                "Tell the user; call again after some are decided.",
            )
        if not claim.claimed:
            return Answer.of(IN_PROGRESS)
        session = await self.gate.begin(
            goal=f"{spec.name}, called by an MCP host through the proxy",
            limits=self.limits,
            run_id=run_id,
        )
        async with session:
            step = await session.step()
            if step is None:
                return self._ended(session.run)
            verdict = await step.propose(Decision.tool_call(spec.name, args))
            return await self._after(session, verdict, spec)

    # -- unknown outcomes: never left with nothing for a person to act on -------

    async def _unknown_outcome_open(self, spec: ToolSpec, key: str) -> bool:
        """Does another call of `spec`'s tool have an unknown outcome nobody has settled?
        Each one left with nothing waiting is put to a person at once: a dead run cut off
        mid-call is taken over (which asks), a question that expired or a run that had no
        step left to hold the call is asked again in a new run of its request key."""
        rows = await _io(self.store.unsettled_requests, spec.name, _LEFT_OPEN_ENDINGS)
        open_ = False
        for row in rows:
            if row.request_key == key or row.request_key in self._inflight:
                continue  # judged by this call, or being handled here now
            run = await self._run(row)
            if run is not None and await self._still_unknown(spec, row, run):
                open_ = True
        return open_

    async def _still_unknown(self, spec: ToolSpec, row: RequestRow, run: Run) -> bool:
        """Is `run`'s outcome unknown and undecided? Put to a person if nothing waits."""
        if run.status == RunStatus.WAITING_FOR_APPROVAL:
            approval = await self._latest_approval(run)
            if approval is None or approval.kind != INTERRUPTED_SIDE_EFFECT:
                return False
            if approval.status != ApprovalStatus.PENDING:
                return False  # a person decided; the identical call collects it
            if not self._lapsed(approval):
                return True
            await self._attach(spec, run)  # the question expired: settle it, ask again
            run = await _io(self.store.get_run, run.id)
        if run.status == RunStatus.RUNNING:
            if not _cut_off(await _io(self.store.list_steps, run.id)):
                return False  # not started, or finished: nothing unknown
            # taken over, it waits for a person (a live owner: IN_PROGRESS, not unknown)
            answer = await self._attach(spec, run)
            return answer.word in (UNKNOWN_OUTCOME, INTERRUPTED)
        why = await self._left_open(run)
        if why is None:
            return False
        await self._ask_again(spec, row, run, why)
        return True

    async def _left_open(self, run: Run) -> str | None:
        """Why an ended run of a mutating call leaves its outcome unknown with nothing for
        a person to act on (the reason it is asked again with), or None."""
        if not RunStatus(run.status).terminal or run.status == RunStatus.COMPLETED:
            return None
        if run.reason == TerminalReason.APPROVAL_EXPIRED:
            approval = await self._latest_approval(run)
            if approval is not None and approval.kind == INTERRUPTED_SIDE_EFFECT:
                return ASKED_AGAIN_EXPIRED
            return None
        if run.status == RunStatus.FAILED and await self._ended_timed_out(run):
            return ASKED_AGAIN_TIMED_OUT
        return None

    async def _ask_again(
        self, spec: ToolSpec, row: RequestRow | None, run: Run, why: str
    ) -> Answer:
        """Propose `run`'s call again in a new run of its request key, which `ProxyPolicy`
        pauses on an `interrupted_side_effect` approval: a person is asked at once."""
        if row is None or row.run_id != run.id:
            row = await _io(self.store.request_of_run, run.id)
            if row is None:  # pragma: no cover - every run of the proxy has its key row
                return Answer.of(UNKNOWN_OUTCOME)
        steps = await _io(self.store.list_steps, run.id)
        decision = next(
            (s.decision for s in steps if s.decision is not None and s.decision.tool), None
        )
        args = decision.args if decision is not None else {}
        run_id = new_id()
        claim = await _io(
            self.store.claim_request,
            row.request_key,
            row.seq,
            run_id,
            spec.name,
            str(spec.side_effect),
            self.now(),
        )
        if not claim.claimed:
            return Answer.of(IN_PROGRESS)  # another call is asking already
        _log.info("%s: an unknown outcome left with nothing waiting is asked again", spec.name)
        session = await self.gate.begin(
            goal=f"{spec.name}, called by an MCP host through the proxy ({why})",
            limits=self.limits,
            run_id=run_id,
        )
        async with session:
            step = await session.step()
            if step is None:  # pragma: no cover - a new run has all its steps
                return self._ended(session.run)
            verdict = await step.propose(Decision.tool_call(spec.name, args, reason=why))
            return await self._after(session, verdict, spec)

    async def _attach(self, spec: ToolSpec, run: Run, args: Any = None) -> Answer:
        try:
            session, verdict = await self.gate.attach(run.id)
        except RunStateError:  # a live lease (RunLeasedError), or our own session of it
            return Answer.of(IN_PROGRESS)
        async with session:
            if verdict is None:
                return await self._go_on(session, spec, run, args)
            return await self._after(session, verdict, spec)

    async def _go_on(self, session: GateSession, spec: ToolSpec, run: Run, args: Any) -> Answer:
        """A taken-over run goes on: settle a call that finished, or carry it out.

        The call carried out is the one its run recorded; a run that died before its
        step's first commit recorded none (decision 0088), and then it is `args`, the
        re-call's own: the request key the run was found by is over the same canonical
        arguments.
        """
        for recorded in reversed(session.input().steps):
            observation = recorded.observation
            if observation is None or observation.kind not in (
                ObservationKind.TOOL_RESULT,
                ObservationKind.TOOL_ERROR,
            ):
                continue
            if _timed_out(observation) and spec.side_effect != SideEffect.READ_ONLY:
                return await self._hold(session, spec)
            answer = await self._settle(session, spec, observation)
            if observation.kind == ObservationKind.TOOL_RESULT and (
                spec.side_effect != SideEffect.READ_ONLY
            ):
                return Answer.of(
                    DUPLICATE,
                    "this exact call was already carried out, and is not repeated. "
                    f"Its result: {answer.text}",
                )
            return answer
        decision = next((s.decision for s in session.input().steps if s.decision is not None), None)
        if decision is not None:
            args = decision.args
        elif args is None:
            args = {}
        step = await session.step()
        if step is None:
            return self._ended(session.run)
        verdict = await step.propose(Decision.tool_call(spec.name, args))
        return await self._after(session, verdict, spec)

    async def _after(self, session: GateSession, verdict: Verdict, spec: ToolSpec) -> Answer:
        """Act on a verdict: execute an allowed call, end a denied run, report the rest."""
        if verdict.outcome == VerdictOutcome.ALLOWED:
            step = session.current()
            if step is None:  # pragma: no cover - an allowed verdict always leaves a step open
                return self._ended(session.run)
            try:
                observation = await step.execute()
            except LeaseLostError:
                return Answer.of(INTERRUPTED)
            except RunStateError:
                # The run moved before the tool started: an operator cancelled it, or
                # another proxy collecting the same approval started the call first.
                moved = await _io(self.store.get_run, session.run_id)
                if RunStatus(moved.status).terminal:
                    return self._ended(moved)
                return Answer.of(IN_PROGRESS)
            if session.run.status in (RunStatus.CANCELLED, RunStatus.FAILED) and (
                observation.kind != ObservationKind.TOOL_RESULT
            ):
                return self._ended(session.run)
            if session.run.status == RunStatus.WAITING_FOR_APPROVAL:
                # the tool could not tell whether it took effect: the Gate holds it
                return self._waiting(await self._latest_approval(session.run))
            if _timed_out(observation) and spec.side_effect != SideEffect.READ_ONLY:
                return await self._hold(session, spec)
            return await self._settle(session, spec, observation)
        if verdict.outcome == VerdictOutcome.PENDING:
            return self._waiting(verdict.approval)
        if verdict.outcome == VerdictOutcome.ENDED:
            return self._ended(verdict.run)
        denial = verdict.observation
        answer = (
            self._observed(denial)
            if denial is not None
            else Answer.of(DENIED, "the call was refused.")
        )
        await self._end(session, denial)
        return answer

    async def _settle(
        self, session: GateSession, spec: ToolSpec, observation: Observation
    ) -> Answer:
        """The answer for what the call observed, and the run ended by it. A mutating call
        whose answer the runtime refused was carried out: its run completes, noting that
        its result was not recorded, and the call is `UNRECORDED` (no person is asked)."""
        refused = _refused_answer(observation)
        if refused is not None and spec.side_effect != SideEffect.READ_ONLY:
            if not session.done:
                step = await session.step()
                if step is not None:
                    await step.propose(Decision.complete(f"{UNRECORDED_RESULT} ({refused})"))
            return Answer.of(UNRECORDED, _UNRECORDED.format(why=refused))
        answer = self._observed(observation)
        await self._end(session, observation)
        return answer

    async def _hold(self, session: GateSession, spec: ToolSpec) -> Answer:
        """A mutating call timed out: propose it again, which `ProxyPolicy` pauses on an
        `interrupted_side_effect` approval, so it runs again only if a person approves."""
        last = session.input().steps[-1]
        args = last.decision.args if last.decision is not None else {}
        if session.run.step_count + 2 > self.limits.max_steps:
            # no room for the held call and the step that ends it: the run ends, and the
            # call is asked again at once in a new run of its key (never left unasked)
            timeout = self._timeout_text(session, -1)
            ending = await session.step()
            if ending is not None:
                await ending.propose(Decision.fail(GIVEN_UP_DETAIL))
            asked = await self._ask_again(spec, None, session.run, ASKED_AGAIN_TIMED_OUT)
            return self._held(timeout) if asked.word == UNKNOWN_OUTCOME else asked
        step = await session.step()
        if step is not None:
            verdict = await step.propose(Decision.tool_call(spec.name, args))
            if verdict.outcome == VerdictOutcome.PENDING:
                return self._held(self._timeout_text(session, -2))
        why = await self._left_open(session.run)
        if why is not None:  # a limit ended the run: asked again at once
            return await self._ask_again(spec, None, session.run, why)
        return self._ended(session.run)

    async def _ended_timed_out(self, run: Run) -> bool:
        """Did the run end with its last call of a tool timed out?"""
        steps = await _io(self.store.list_steps, run.id)
        called = [
            s
            for s in steps
            if s.decision is not None
            and s.decision.kind == DecisionKind.TOOL_CALL
            and s.observation is not None
        ]
        return bool(called) and _timed_out(called[-1].observation)

    def _held(self, timeout: str) -> Answer:
        """The answer of a mutating call that just timed out and now waits for a person."""
        return Answer.of(
            INTERRUPTED,
            f"the tool did not answer in time ({timeout}); whether it took effect is "
            "unknown. It will not run again until a person decides. Tell the user.",
        )

    def _timeout_text(self, session: GateSession, index: int) -> str:
        observation = session.input().steps[index].observation
        content = observation.content if observation is not None else None
        return str(content.get("error") if isinstance(content, dict) else "timed out")

    async def _end(self, session: GateSession, observation: Observation | None) -> None:
        """End the call's run from what the call observed: one more step, complete or fail."""
        if session.done:
            return
        step = await session.step()
        if step is None:
            return
        if observation is not None and observation.kind == ObservationKind.TOOL_RESULT:
            await step.propose(Decision.complete(observation.content))
        else:
            summary = observation.summary if observation is not None else "refused"
            await step.propose(Decision.fail(summary or "the call did not succeed"))

    # -- reading the record -------------------------------------------------

    async def _run(self, row: RequestRow | None) -> Run | None:
        if row is None:
            return None
        try:
            return await _io(self.store.get_run, row.run_id)
        except NotFoundError:
            return None

    async def _latest_approval(self, run: Run) -> Approval | None:
        approvals = await _io(self.store.list_approvals, run.id)
        return approvals[-1] if approvals else None

    def _claimed_recently(self, row: RequestRow) -> bool:
        created = row.created_at
        return created is not None and self.now() - created < self.config.lease_ttl

    def _lapsed(self, approval: Approval) -> bool:
        return approval.expires_at is not None and approval.expires_at <= self.now()

    def _within_window(self, run: Run) -> bool:
        """Did `run` end within the repeat window? Never, with the window off (zero)."""
        window = self.config.repeat_window
        finished = run.finished_at
        return window > timedelta(0) and finished is not None and self.now() - finished <= window

    def _ago(self, when: datetime | None) -> str:
        if when is None:
            return "earlier"
        seconds = max(0, int((self.now() - when) / timedelta(seconds=1)))
        return f"{seconds} seconds ago"

    # -- answers -------------------------------------------------------------

    def _observed(self, observation: Observation) -> Answer:
        content = observation.content
        kind = observation.kind
        if kind == ObservationKind.TOOL_RESULT:
            return Answer.result(content)
        if kind == ObservationKind.TOOL_ERROR:
            error = str(content.get("error") if isinstance(content, dict) else "")
            error = error.removeprefix(f"{MCPToolError.__name__}: ")
            error = error.removeprefix(f"{MCPAnswerRefused.__name__}: ")
            error = error.removeprefix(f"{MCPInputRequired.__name__}: ")
            if error.startswith(f"{OutcomeUnknown.__name__}: "):  # a read (a mutation waits)
                return Answer.of(FAILED, _READ_LOST)
            if _timed_out(observation):  # a read (a mutating call is held: `_hold`)
                return Answer.of(
                    INTERRUPTED,
                    f"the tool did not answer in time ({error}). It changes nothing; calling "
                    "again makes a new attempt.",
                )
            return Answer.of(FAILED, error or observation.summary or "the tool failed.")
        if kind == ObservationKind.INVALID_DECISION:
            problem = content.get("error") if isinstance(content, dict) else None
            return Answer.of(INVALID, f"{problem or observation.summary}. The call did not run.")
        if kind == ObservationKind.POLICY_DENIED:
            reason = content.get("reason") if isinstance(content, dict) else None
            text = str(reason or observation.summary)
            if text.startswith("approval rejected"):
                return Answer.of(REJECTED)
            return Answer.of(DENIED, f"{text}. The call did not run; do not retry it.")
        return Answer.of(INTERRUPTED)

    def _waiting(self, approval: Approval | None) -> Answer:
        if approval is not None and approval.kind == INTERRUPTED_SIDE_EFFECT:
            shown = approval.presentation
            if isinstance(shown, dict) and shown.get("notice") == TIMED_OUT_NOTICE:
                return Answer.of(UNKNOWN_OUTCOME, _TIMED_OUT_HELD)
            if isinstance(shown, dict) and shown.get("notice") == ASKED_AGAIN_NOTICE:
                return Answer.of(UNKNOWN_OUTCOME, _ASKED_AGAIN_HELD)
            if isinstance(shown, dict) and str(shown.get("notice")).startswith(
                OUTCOME_UNKNOWN_NOTICE_START
            ):
                return Answer.of(UNKNOWN_OUTCOME, _LOST_HELD)
            return Answer.of(UNKNOWN_OUTCOME)
        return Answer.of(PENDING_APPROVAL)

    def _ended_word(self, run: Run) -> Answer | None:
        reason = run.reason
        if reason == TerminalReason.APPROVAL_REJECTED:
            return Answer.of(REJECTED)
        if reason == TerminalReason.APPROVAL_EXPIRED:
            return Answer.of(EXPIRED)
        if reason == TerminalReason.OPERATOR_CANCELLED:
            return Answer.of(
                INTERRUPTED,
                "an operator stopped this call; if it had started, whether it took effect is "
                "unknown. Tell the user before trying again.",
            )
        return None

    def _ended(self, run: Run) -> Answer:
        """A run that ended without a result of its own call to show."""
        word = self._ended_word(run)
        if word is not None:
            return word
        if run.status == RunStatus.COMPLETED:
            return Answer.result(run.result)
        if run.reason == TerminalReason.POLICY_ABORT:
            return Answer.of(DENIED, "the operator's policy stopped this call. Do not retry it.")
        if run.reason == TerminalReason.RECONCILE_CONFLICT:
            return Answer.of(
                UNKNOWN_OUTCOME,
                "this call was cut off before its outcome was recorded, and it can no longer "
                "be checked or repeated. Tell the user.",
            )
        return Answer.of(UNAVAILABLE, "the call could not be carried out. Try again later.")

    def _duplicate(self, run: Run) -> Answer:
        result = Answer.result(run.result).text
        return Answer.of(
            DUPLICATE,
            f"this exact call was already carried out {self._ago(run.finished_at)}, and is "
            f"not repeated within {int(self.config.repeat_window.total_seconds())} seconds. "
            f"Its result: {result}",
        )

    async def _describe(self, run: Run, tool: str) -> Answer:
        status = run.status
        if status == RunStatus.WAITING_FOR_APPROVAL:
            approval = await self._latest_approval(run)
            if approval is not None and approval.status == ApprovalStatus.APPROVED:
                return Answer.of(
                    APPROVED,
                    "a person approved this call; call the tool again with exactly the same "
                    "arguments to carry it out.",
                    is_error=False,
                )
            if approval is not None and approval.status == ApprovalStatus.REJECTED:
                return Answer.of(REJECTED, is_error=False)
            waiting = self._waiting(approval)
            return dataclasses.replace(waiting, is_error=False)
        if status == RunStatus.RUNNING:
            lease = await _io(self.store.lease, run.id)
            live = getattr(lease, "expires_at", None)
            if live is not None and live > wall_clock():
                return Answer.of(IN_PROGRESS, is_error=False)
            return Answer.of(
                INTERRUPTED,
                "this call was cut off. Call the tool again with exactly the same arguments "
                "to find out what happens to it.",
                is_error=False,
            )
        if status == RunStatus.COMPLETED:
            result = Answer.result(run.result).text
            return Answer.of(
                DONE,
                f"this call was carried out {self._ago(run.finished_at)}. Its result: {result}",
                is_error=False,
            )
        spec = self.specs.get(tool)
        mutating = spec is not None and spec.side_effect != SideEffect.READ_ONLY
        if mutating and await self._left_open(run) is not None:
            return Answer.of(UNKNOWN_OUTCOME, _LEFT_OPEN_STATUS, is_error=False)
        word = self._ended_word(run)
        if word is not None:
            return dataclasses.replace(word, is_error=False)
        return Answer.of(
            FAILED,
            "this call was made and did not succeed (refused, invalid, or the tool failed). "
            "Calling again makes a new attempt.",
            is_error=False,
        )


# ---------------------------------------------------------------------------
# Serving


STATUS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tool": {"type": "string", "description": "the tool's name, as called"},
        "arguments": {
            "type": "object",
            "description": "exactly the arguments of the earlier call",
        },
    },
    "required": ["tool"],
    "additionalProperties": False,
}
STATUS_DESCRIPTION = (
    "Where an earlier call stands: give the tool's name and exactly the arguments of that "
    "call. Answers one word and a sentence: NOT_FOUND, PENDING_APPROVAL, APPROVED, "
    "IN_PROGRESS, UNKNOWN_OUTCOME, INTERRUPTED, DONE, REJECTED, EXPIRED or FAILED. "
    "Nothing is carried out."
)


async def _load(
    config: ProxyConfig, stack: contextlib.AsyncExitStack
) -> tuple[list[Any], dict[str, str]]:
    """Connect every server and load its tools; the tools of a server that fails are
    unavailable (their offered names kept, so a call says so)."""
    tools: list[Any] = []
    unavailable: dict[str, str] = {}
    for proxied in config.servers:
        manifest = read_manifest(proxied.manifest)
        rules = read_rules(proxied.rules)
        server = proxied.server
        try:
            connection = await _connected(server, stack)
            loaded, report = await connection.load(manifest, rules)
        except AgentrtError as exc:
            _log.error("server %s is unavailable: %s", server.name, exc)
            for name, rule in rules.items():
                unavailable[rule.rename or f"{server.name}_{name}"] = str(exc)
            continue
        for line in report.lines():
            level = logging.INFO if line.startswith("registered") else logging.WARNING
            _log.log(level, "server %s: %s", server.name, line)
        tools.extend(loaded)
    names = [tool.spec.name for tool in tools]
    if STATUS_TOOL in names:
        raise AgentrtError(f"a server tool is offered as {STATUS_TOOL!r}, the proxy's own tool")
    return tools, unavailable


async def _connected(server: Server, stack: contextlib.AsyncExitStack) -> Connection:
    """`server`'s connection, held open in a task of its own until `stack` closes.

    The SDK's and the transport's task groups live in that task: whatever ends one
    server's connection (its transport failing) ends that task only, never the
    proxy's serving; that server's calls then fail as on a closed connection.
    """
    from ._client import connect

    opened: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
    close = asyncio.Event()

    async def hold() -> None:
        try:
            async with connect(server) as connection:
                opened.set_result(connection)
                await close.wait()
        except Exception as exc:
            if not opened.done():
                opened.set_exception(exc)
            else:
                _log.error("server %s: the connection ended: %s", server.name, exc)
        finally:
            if not opened.done():
                opened.cancel()

    task = asyncio.create_task(hold())

    async def shut() -> None:
        close.set()
        await asyncio.gather(task, return_exceptions=True)

    try:
        connection = await asyncio.shield(opened)
    except BaseException:
        task.cancel()  # the handshake, if it still runs
        await asyncio.gather(task, return_exceptions=True)
        raise
    stack.push_async_callback(shut)
    return connection


def _log_done(name: str, task: asyncio.Task[Answer]) -> None:
    """Log how a call the host stopped waiting for ended (its answer reaches nobody)."""
    if task.cancelled():
        _log.warning("%s: the call the host cancelled was cancelled", name)
    elif task.exception() is not None:
        _log.warning("%s: the call the host cancelled failed: %s", name, task.exception())
    else:
        _log.info("%s -> %s (the host had cancelled it)", name, task.result().word or "result")


def _open(config: ProxyConfig, now: Clock) -> Store:
    store = open_store(config.database)
    try:
        store.migrate_proxy(now())
    except BaseException:
        store.close()
        raise
    return store


async def serve(
    config: ProxyConfig,
    *,
    now: Clock | None = None,
    streams: tuple[Any, Any] | None = None,
) -> None:
    """Run the proxy until the host closes its side: stdio by default, or given streams."""
    import mcp_types
    from mcp.server.lowlevel import Server as MCPServer
    from mcp.server.stdio import stdio_server

    from ._host_stdin import HostLines, claimed_stdin, stdin_open
    from ._host_stdout import StdoutClosed, claimed_stdout, host_closed_stdout, stdout_open

    if streams is None:
        stdin_open()  # before any server is started or the store opened (decision 0224)
        stdout_open()  # likewise (0227)
    clock = now or wall_clock
    store = _open(config, clock)
    try:
        async with contextlib.AsyncExitStack() as stack:
            tools, unavailable = await _load(config, stack)
            gate = Gate(
                store=store,
                policy=build_policy(config.policy),
                tools=tools,
                now=now,
                lease_ttl=config.lease_ttl,
                lease_owner="agentrt-proxy",
                origin=MCP_PROXY_ORIGIN,
            )
            proxy = Proxy(
                config, store, gate, {t.spec.name: t.spec for t in tools}, unavailable, now
            )
            listed = [
                mcp_types.Tool(
                    name=tool.spec.name,
                    description=tool.spec.description,
                    input_schema=dict(tool.spec.input_schema),
                )
                for tool in tools
            ]
            listed.append(
                mcp_types.Tool(
                    name=STATUS_TOOL, description=STATUS_DESCRIPTION, input_schema=STATUS_SCHEMA
                )
            )

            async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
                return mcp_types.ListToolsResult(tools=listed)

            running: set[asyncio.Task[Answer]] = set()
            closing = asyncio.Event()

            async def call_tool(ctx: Any, params: Any) -> mcp_types.CallToolResult:
                # The call is the proxy's, not the host's request's: a host that cancels
                # it, or closes the session, does not stop it; its outcome is recorded.
                # Only a hold for a person's approval ends when the host stops waiting.
                cancelled = asyncio.Event()

                async def still_waiting(look: int) -> bool:
                    if cancelled.is_set() or closing.is_set():
                        return False
                    if look % round(1 / HOLD_POLL_SECONDS) == 0:  # about once a second
                        with contextlib.suppress(Exception):  # a host gone says so next
                            held = look * HOLD_POLL_SECONDS  # seconds, as the host reads it
                            await ctx.session.report_progress(held, None, HOLD_MESSAGE)
                    return True

                task = asyncio.ensure_future(
                    proxy.call(params.name, params.arguments, still_waiting)
                )
                running.add(task)
                task.add_done_callback(running.discard)
                try:
                    answer = await asyncio.shield(task)
                except asyncio.CancelledError:
                    _log.info("%s: the host cancelled the call; it goes on", params.name)
                    cancelled.set()
                    task.add_done_callback(functools.partial(_log_done, params.name))
                    raise
                _log.info("%s -> %s", params.name, answer.word or "result")
                return mcp_types.CallToolResult(
                    content=[mcp_types.TextContent(type="text", text=answer.text)],
                    structured_content=answer.structured,
                    is_error=answer.is_error,
                )

            server: Any = MCPServer(config.name, on_list_tools=list_tools, on_call_tool=call_tool)
            ended_by = "the host closed the session"
            try:
                if streams is not None:
                    await server.run(streams[0], streams[1], server.create_initialization_options())
                else:
                    # The host's stdin read on the loop, not in the SDK's worker thread
                    # that a signal's cancellation would wait for (decision 0220); its
                    # stdout written by a thread the proxy can leave behind (0227).
                    with claimed_stdin() as fd, claimed_stdout() as out:
                        lines = HostLines(fd)

                        async def over_stdio() -> None:
                            stdin = cast("anyio.AsyncFile[str]", lines)
                            stdout = cast("anyio.AsyncFile[str]", out)
                            with host_closed_stdout():  # host gone: one line, exit 1 (0231, 0234)
                                async with stdio_server(stdin=stdin, stdout=stdout) as (
                                    read_stream,
                                    write_stream,
                                ):
                                    await server.run(
                                        read_stream,
                                        write_stream,
                                        server.create_initialization_options(),
                                    )

                        session = asyncio.ensure_future(over_stdio())
                        try:
                            await asyncio.shield(session)
                        except asyncio.CancelledError:
                            # A signal (decision 0220): the host's stdin ends here, and the
                            # session ends as when the host closes it, the SDK's own way.
                            ended_by = "a signal ended the session"
                            lines.stop()
                            out.stop()
                            try:
                                await session
                            except StdoutClosed as closed:  # the host went: the signal's exit
                                _log.warning("%s", closed)
                            raise
            finally:
                closing.set()  # nobody waits for a held call any more
                if running:  # the session ended: its calls finish and are recorded
                    _log.info("%s; %d call(s) go on to their end", ended_by, len(running))
                    await asyncio.gather(*running, return_exceptions=True)
    finally:
        store.close()


def _parser() -> Any:
    import argparse

    parser = argparse.ArgumentParser(
        prog="agentrt-proxy",
        description=(
            "An MCP server a host starts in place of its servers: every tool call goes "
            "through the policy as its own recorded run (docs/mcp.md)."
        ),
    )
    parser.add_argument("--config", required=True, metavar="FILE", help="the proxy's config")
    parser.add_argument(
        "--check",
        action="store_true",
        help="read the config, open the database and load every server, then exit",
    )
    return parser


def main(argv: Sequence[str] | None = None, *, now: Clock | None = None) -> int:
    """`agentrt-proxy --config FILE`: 0 after the host closed the session, 1 on an error.

    A Ctrl-C exits 130, heard whichever thread the kernel hands it to (decisions 0213,
    0215); a SIGTERM ends it the same way, exit 143 (decision 0220). Either ends it
    while its host keeps stdin open; a call in flight goes on to its end first.
    """
    from ._interrupt import Terminated, run_interruptible
    from ._proxy_config import read_proxy_config

    args = _parser().parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="agentrt-proxy: %(message)s")
    try:
        config = read_proxy_config(args.config)
        if args.check:
            return run_interruptible(_check(config, now or wall_clock), sigterm=True)
        run_interruptible(serve(config, now=now), sigterm=True)
    except (AgentrtError, OSError) as exc:
        sys.stderr.write(f"agentrt-proxy: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    except Terminated:
        return 128 + signal.SIGTERM
    return 0


async def _check(config: ProxyConfig, now: Clock) -> int:
    store = _open(config, now)
    try:
        async with contextlib.AsyncExitStack() as stack:
            tools, unavailable = await _load(config, stack)
    finally:
        store.close()
    for tool in tools:
        sys.stderr.write(f"agentrt-proxy: offers {tool.spec.name} ({tool.spec.side_effect})\n")
    for name in unavailable:
        sys.stderr.write(f"agentrt-proxy: {name} is unavailable\n")
    return 0 if tools and not unavailable else 1
