"""The accounting caller: the agent's only handle on the model.

Invariants this module owns (models.md, "The accounting caller"):

- **Reserve before dispatch.** Before every attempt the lease and the limits
  are checked against the run's recorded totals, plus the attempts in flight in
  this step, plus a projection of this request (serialized request bytes ÷ 3 + 1
  input tokens, plus the output cap). The reservation is taken inside the same
  transaction that records the attempt, so concurrent calls in one step cannot
  all pass the check. Over a limit: `LimitExceeded`, nothing sent.
- **Record before sending.** A `model_calls` row `dispatched` and
  `model.dispatched` commit, under a lease held and unexpired by the wall
  clock, before the request leaves. The row carries the conservative estimate,
  so a process that dies during the request can be charged it at takeover.
- **Charge what it cannot see.** The outcome and its charge commit together:
  reported usage on success; the estimate for implausible usage (negative,
  not an integer, cached above input, or output above the request's cap plus
  a margin: `usage_problem`); the estimate
  with the full output cap for an ambiguous attempt (timeout, lost
  connection, cut-off body, caller cancelled); nothing for a transient refusal.
  Recorded even if the caller was cancelled.
- **The model's failure is the attempt's outcome.** The request runs in a task
  of its own that never ends raising: whatever the model raises, a
  `BaseException` included, is recorded and ends as the table says; one that
  swallows its cancellation (at the call timeout or the caller's cancel) gets
  `CANCEL_GRACE_S` and is then left running, its attempt `ambiguous`, its reply
  discarded. A reply whose fields are not of their types is unusable as
  implausible usage is (`reply_problem`).
- **Retries** back off exponentially and honour `Retry-After`, but give up at
  once, without sleeping, when a wait would pass `max_retry_after` or a time
  limit of the run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, cast

from . import _commit_plan as plan
from ._canonical import canonical_json
from ._clock import duration_to_ms
from ._errors import (
    ConfigError,
    LimitExceeded,
    ModelUnavailableError,
    ServedModelError,
    TransientModelError,
)
from ._execute import CANCEL_GRACE_S, cancel_within_grace
from ._foreign import exception_text, type_name
from ._limits import time_limit_hit
from ._model import (
    Model,
    ModelConfig,
    ModelRequest,
    ModelResponse,
    Price,
    ToolUseBlock,
    UnpricedModelError,
    Usage,
)
from ._records import ModelCallStatus, Run, Step, TerminalReason
from ._session import RunSession, cancelled_by_caller, through_cancels, unusable
from ._store import Tx

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class Projection:
    """What one attempt may cost at most, reserved before it is sent."""

    input_tokens: int
    output_tokens: int
    cost_micros: int | None  # None: the model is unpriced

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass
class _Attempt:
    call_id: str
    attempt: int
    model: str
    projection: Projection
    dispatched_at: datetime


def project(request: ModelRequest, output_cap: int, price: Price | None) -> Projection:
    """The conservative estimate of an attempt: bytes ÷ 3 + 1 input tokens, the whole cap out."""
    input_tokens = len(canonical_json(request.to_json())) // 3 + 1
    usage = Usage(input_tokens=input_tokens, output_tokens=output_cap)
    return Projection(input_tokens, output_cap, None if price is None else price.cost_micros(usage))


class AccountingCaller:
    """`StepInput.model`: records, limits and charges every attempt of one step."""

    def __init__(
        self,
        session: RunSession,
        step: Step,
        model: Model,
        config: ModelConfig,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._session = session
        self._step = step
        self._model = model
        self._config = config
        self._sleep = sleep
        # The run's requests in flight, shared by every step's caller of the session: a
        # handle an agent kept from an earlier step reserves against the same limits.
        self._in_flight: dict[str, Projection] = session.models_in_flight
        self.name = model.name

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Send `request` to the model, with retries; every attempt is a recorded row."""
        limits = self._session.run.limits
        cap = request.max_output_tokens
        if cap is None:
            # An adapter that sends a default cap of its own (Anthropic's API needs
            # one) says so; projecting with it is what the attempt can really cost.
            default = getattr(self._model, "default_max_output_tokens", None)
            if isinstance(default, int) and not isinstance(default, bool) and default > 0:
                cap = default
        if limits.max_output_tokens_per_call is not None:
            cap = (
                limits.max_output_tokens_per_call
                if cap is None
                else min(cap, limits.max_output_tokens_per_call)
            )
        if cap is None and (
            limits.max_total_tokens is not None or limits.max_estimated_cost_micros is not None
        ):
            raise LimitExceeded(
                TerminalReason.LIMIT_TOKENS
                if limits.max_total_tokens is not None
                else TerminalReason.LIMIT_COST,
                "a request with no output cap cannot be held to a token or cost limit",
            )
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0):
            # A zero or negative cap would project less than nothing, and some
            # servers read it as "unlimited": it cannot be held to any limit.
            raise ConfigError(f"max_output_tokens must be a positive integer, got {cap!r}")
        request = replace(request, max_output_tokens=cap)
        try:
            price = self._config.price(self._model.name)
        except UnpricedModelError as exc:
            raise ModelUnavailableError(str(exc)) from None
        projection = project(request, cap or 0, price)
        attempt = 0
        while True:
            attempt += 1
            record = await self._dispatch(attempt, projection, price)
            try:
                outcome = await self._send(request, record)
            except asyncio.CancelledError:
                await through_cancels(
                    self._settle(
                        record,
                        ModelCallStatus.AMBIGUOUS,
                        projection_usage(projection),
                        price,
                        "cancelled by the caller; outcome unknown",
                    )
                )
                raise
            if outcome.response is not None:
                return outcome.response
            wait = self._retry_wait(outcome, attempt)
            if wait is None:
                raise ModelUnavailableError(outcome.error)
            await self._sleep(wait.total_seconds())

    # -- one attempt -------------------------------------------------------

    async def _dispatch(
        self, attempt: int, projection: Projection, price: Price | None
    ) -> _Attempt:
        session = self._session
        config = session.config

        def tx_dispatch(tx: Tx) -> _Attempt:
            run = session.require_lease(tx, side_effect=True)
            now = config.clock()
            self._check_limits(run, projection, now)
            call_id = config.new_id()
            session.run = tx.dispatch_model_call(
                session.run_id,
                self._step.id,
                call_id,
                attempt,
                self._model.name,
                projection_usage(projection),
                projection.cost_micros or 0,
                now,
            )
            self._in_flight[call_id] = projection
            return _Attempt(call_id, attempt, self._model.name, projection, now)

        if session.broken is not None:
            # Not used again (decision 0136): a dispatch would record, and charge, a call
            # under a step the record may not hold.
            raise unusable(session.broken)
        carried = session.has_deferred  # the step's kept claim (its first commit)
        try:
            # Its commit ends before a cancel goes on: cut short, one left queued never ran
            # and one refused was not told, and the step's kept claim went with it, the session
            # believing in a step the record does not hold (its next call recorded and charged
            # under it). Ended, a refusal keeps the claim for the next commit (decision 0216).
            return await session.write(plan.MODEL_DISPATCHED, tx_dispatch, kept_through_cancel=True)
        except GeneratorExit:
            # Closed from outside (its loop gone, the coroutine collected): the commit was
            # made or not, as its group went, and the step's kept claim went with it
            # (decision 0206). Whether the step is in the record is unknown: the session is
            # not used again, as after a failure cut short in its commit (0206's review).
            # Only an attribute set: the collector may close this on any thread (0195).
            if carried and session.broken is None:
                session.broken = (
                    f"the model call of step {self._step.index} of run {session.run_id} was "
                    "closed from outside before its dispatch commit returned: whether the "
                    "step's claim is in the record is unknown to this session"
                )
            raise

    def _check_limits(self, run: Run, projection: Projection, now: datetime) -> None:
        limits = run.limits
        in_flight = list(self._in_flight.values())
        # Time first: a request is an action, and none starts once a time limit is
        # reached (however long the step's earlier attempts took).
        timed = time_limit_hit(run, now, self._session.active_time_at(now))
        if timed is not None:
            raise LimitExceeded(timed.reason, timed.detail)
        if limits.max_model_calls is not None and run.model_calls + 1 > limits.max_model_calls:
            raise LimitExceeded(
                TerminalReason.LIMIT_MODEL_CALLS,
                f"{run.model_calls} model calls recorded; max_model_calls is "
                f"{limits.max_model_calls}",
            )
        if limits.max_total_tokens is not None:
            used = run.input_tokens + run.output_tokens
            reserved = sum(p.tokens for p in in_flight)
            if used + reserved + projection.tokens > limits.max_total_tokens:
                raise LimitExceeded(
                    TerminalReason.LIMIT_TOKENS,
                    f"{used} tokens used, {reserved} reserved in flight, this request may take "
                    f"{projection.tokens}: over max_total_tokens {limits.max_total_tokens}",
                )
        if limits.max_estimated_cost_micros is not None:
            if projection.cost_micros is None:
                raise LimitExceeded(
                    TerminalReason.LIMIT_COST,
                    f"model {self._model.name!r} is unpriced, so a cost limit cannot be kept",
                )
            spent = run.estimated_cost_micros
            reserved = sum(p.cost_micros or 0 for p in in_flight)
            if spent + reserved + projection.cost_micros > limits.max_estimated_cost_micros:
                raise LimitExceeded(
                    TerminalReason.LIMIT_COST,
                    f"{spent} micro-dollars spent, {reserved} reserved in flight, this request "
                    f"may cost {projection.cost_micros}: over max_estimated_cost_micros "
                    f"{limits.max_estimated_cost_micros}",
                )

    async def _send(self, request: ModelRequest, record: _Attempt) -> _Outcome:
        price = self._config.price(self._model.name)  # looked up (and refused) before dispatch
        # The request runs in a task of its own that never ends raising (`_generate`): a
        # `SystemExit` or `KeyboardInterrupt` escaping a task would stop the event loop.
        task = asyncio.ensure_future(_generate(self._model, request))
        task.add_done_callback(_retrieve)
        try:
            done = await _done_within(task, self._config.call_timeout.total_seconds())
        except asyncio.CancelledError:
            # The caller's cancel: the request is cancelled too, and given the grace to
            # unwind; `generate` settles the attempt as ambiguous.
            await cancel_within_grace(task)
            raise
        if not done and not await cancel_within_grace(task):
            # A model that swallows its cancellation cannot be stopped: it is left
            # running, and whatever it returns later is discarded.
            stuck = (
                f"TimeoutError: the model did not stop within {CANCEL_GRACE_S:g}s of its "
                "cancellation at the call timeout; it was left running and its reply is "
                "discarded"
            )
            return await self._ambiguous(record, price, stuck)
        if task.cancelled():  # cancelled at the call timeout, as `asyncio.wait_for` says it
            return await self._ambiguous(record, price, exception_text(TimeoutError()))
        ok, value = task.result()
        if not ok and not done:
            # Cancelled at the call timeout, the client raised an error of its own: the
            # request was sent and may have been served, so it is the timeout's (ambiguous),
            # in the timeout's words (a recording replays it as `TimeoutError`).
            return await self._ambiguous(record, price, exception_text(TimeoutError()))
        if not ok:
            return await self._failed(record, price, request, value)
        response = value
        why = reply_problem(response, request.max_output_tokens)
        if why is not None:
            await self._settle(
                record, ModelCallStatus.ERROR, projection_usage(record.projection), price, why
            )
            return _Outcome(None, why, retryable=False)
        await self._settle(record, ModelCallStatus.OK, response.usage, price, "")
        return _Outcome(response, "", retryable=False)

    async def _ambiguous(self, record: _Attempt, price: Price | None, error: str) -> _Outcome:
        usage = projection_usage(record.projection)
        await self._settle(record, ModelCallStatus.AMBIGUOUS, usage, price, error)
        return _Outcome(None, error, retryable=True)

    async def _failed(
        self, record: _Attempt, price: Price | None, request: ModelRequest, exc: BaseException
    ) -> _Outcome:
        """The outcome of an attempt whose model raised `exc` (never the caller's cancel)."""
        text = exception_text(exc)
        if isinstance(exc, TransientModelError):
            await self._settle(record, ModelCallStatus.ERROR, Usage(), price, text, charge=False)
            return _Outcome(None, text, retryable=True, retry_after=exc.retry_after)
        if isinstance(exc, ServedModelError):
            usage = (
                exc.usage
                if isinstance(exc.usage, Usage)
                and usage_problem(exc.usage, request.max_output_tokens) is None
                else (projection_usage(record.projection))
            )
            await self._settle(record, ModelCallStatus.ERROR, usage, price, text)
            return _Outcome(None, text, retryable=False)
        if isinstance(exc, TimeoutError | ConnectionError):
            return await self._ambiguous(record, price, text)
        # Anything else, a `BaseException` included (a library's `sys.exit()`, the model's
        # own `CancelledError`): the model's failure, not the runtime's, and not retried.
        await self._settle(record, ModelCallStatus.ERROR, Usage(), price, text, charge=False)
        return _Outcome(None, text, retryable=False)

    async def _settle(
        self,
        record: _Attempt,
        status: str,
        usage: Usage,
        price: Price | None,
        error: str,
        *,
        charge: bool = True,
    ) -> None:
        """Record the attempt's outcome and charge the run, in one transaction."""
        session = self._session
        config = session.config
        cost = None if price is None else price.cost_micros(usage)
        if not charge:
            usage, cost = Usage(), (None if price is None else 0)

        def tx_settle(tx: Tx) -> None:
            now = config.clock()
            latency = max(0, duration_to_ms(now - record.dispatched_at))
            settled = tx.settle_model_call(
                session.run_id,
                self._step.id,
                record.call_id,
                record.attempt,
                record.model,
                status=str(status),
                usage=usage,
                cost_micros=cost,
                latency_ms=latency,
                error=error[:4096],
                now=now,
            )
            if settled is None:
                # A takeover (or a cancel) already settled this attempt at its
                # estimate: charging it again would count the spend twice. Only
                # what the real reply cost beyond that estimate is added.
                self._in_flight.pop(record.call_id, None)
                if charge:
                    tx.charge_beyond_estimate(
                        session.run_id,
                        record.call_id,
                        record.attempt,
                        record.model,
                        usage,
                        cost or 0,
                        now,
                    )
                return
            self._in_flight.pop(record.call_id, None)
            session.run = settled

        # Settling is bookkeeping of what already happened: it does not need the
        # lease (a takeover charges a dispatched row only if it is still dispatched),
        # and, its outcome being known, it waits out a busy database (decision 0012).
        await session.write_outcome(plan.MODEL_SETTLED, tx_settle)

    def _retry_wait(self, outcome: _Outcome, attempt: int) -> timedelta | None:
        """How long to wait before the next attempt, or None to give up now."""
        config = self._config
        if not outcome.retryable or attempt > config.max_retries:
            return None
        try:
            wait: timedelta = config.backoff * (2 ** (attempt - 1))
        except OverflowError:  # a backoff past any date: no attempt would ever come
            return None
        retry_after = _as_timedelta(outcome.retry_after)
        if retry_after is not None:
            if retry_after > config.max_retry_after:
                return None
            wait = max(wait, retry_after)
        if self._passes_a_time_limit(wait):
            return None
        return wait

    def _passes_a_time_limit(self, wait: timedelta) -> bool:
        """Would sleeping `wait` run past the run's active or elapsed time limit?"""
        session = self._session
        run = session.run
        limits = run.limits
        if limits.max_active_time is None and limits.max_elapsed_time is None:
            return False
        now = session.config.clock()
        active = limits.max_active_time
        elapsed = limits.max_elapsed_time
        try:
            if active is not None and session.active_time_at(now) + wait >= active:
                return True
            return (
                elapsed is not None
                and run.created_at is not None
                and now + wait >= run.created_at + elapsed
            )
        except OverflowError:  # a wait past any date passes every limit
            return True


async def _generate(model: Model, request: ModelRequest) -> tuple[bool, Any]:
    """(True, the reply) or (False, what the model raised); only our own cancel propagates."""
    try:
        return True, await model.generate(request)
    except asyncio.CancelledError as exc:
        if cancelled_by_caller():  # this task was cancelled: at the timeout, or by the caller
            raise
        return False, exc  # the model's own (its client awaited something cancelled)
    except BaseException as exc:
        return False, exc


def _retrieve(task: asyncio.Future[Any]) -> None:
    # A request left running past its grace ends unobserved: never a warning about it.
    if not task.cancelled():
        task.exception()


async def _done_within(task: asyncio.Future[Any], timeout: float) -> bool:
    """Whether `task` is done within `timeout` seconds; the task is never cancelled here."""
    done, _ = await asyncio.wait({task}, timeout=timeout)
    return task in done


@dataclass(frozen=True)
class _Outcome:
    response: ModelResponse | None
    error: str
    retryable: bool
    retry_after: Any = None


def projection_usage(projection: Projection) -> Usage:
    return Usage(input_tokens=projection.input_tokens, output_tokens=projection.output_tokens)


# Providers stop generating at the output cap the request sent; a server may
# count an end-of-sequence token or two past it. Usage beyond the cap plus this
# margin cannot be what the request produced (decision 0017).
OUTPUT_MARGIN_TOKENS = 64
OUTPUT_MARGIN_DIVISOR = 10  # and a tenth of the cap, for large caps


def output_ceiling(cap: int) -> int:
    """The most output tokens a reply to a request capped at `cap` is believed to use."""
    return cap + max(OUTPUT_MARGIN_TOKENS, cap // OUTPUT_MARGIN_DIVISOR)


_UNUSABLE = "the model's reply is not a usable ModelResponse: "


def reply_problem(response: object, cap: int | None) -> str | None:
    """Why a reply cannot be used as it is, or None when it can.

    A reply that is not a `ModelResponse`, or one whose fields are not of their types (a
    hand-written adapter), is unusable as implausible usage is: it was served, so it is
    charged the estimate, and the run ends `model_unavailable`.
    """
    if not isinstance(response, ModelResponse):
        return "the model returned something other than a ModelResponse"
    for name in ("text", "stop_reason"):
        value = getattr(response, name)
        if not isinstance(value, str):
            return f"{_UNUSABLE}its {name} is a {type_name(value)}, not a str"
    uses = response.tool_uses
    if not isinstance(uses, list | tuple):
        return (
            f"{_UNUSABLE}its tool_uses is a {type_name(uses)}, not a list or tuple of ToolUseBlock"
        )
    for index, use in enumerate(uses):
        if not isinstance(use, ToolUseBlock):
            return f"{_UNUSABLE}its tool_uses[{index}] is a {type_name(use)}, not a ToolUseBlock"
        for name in ("id", "name"):
            value = getattr(use, name)
            if not isinstance(value, str):
                return (
                    f"{_UNUSABLE}its tool_uses[{index}].{name} is a {type_name(value)}, not a str"
                )
    return usage_problem(response.usage, cap)


def usage_problem(usage: Usage, cap: int | None) -> str | None:
    """Why reported usage cannot be charged as reported, or None when it can.

    Implausible usage (not a `Usage`, negative, not an integer, cached above input, or
    output above what the request's cap allows) is charged the conservative estimate.
    """
    if not isinstance(cast(object, usage), Usage):
        return f"the reported usage is a {type_name(usage)}, not a Usage"
    if not usage.plausible:
        return f"the reported usage is not plausible: {usage}"
    if cap is not None and usage.output_tokens > output_ceiling(cap):
        return (
            f"the reported usage is not plausible: {usage.output_tokens} output tokens "
            f"for a request capped at {cap}"
        )
    return None


def _as_timedelta(value: Any) -> timedelta | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value != value:  # NaN: no wait at all is said
            return None
        try:
            return timedelta(seconds=value)
        except OverflowError:  # infinite or beyond any date: longer than any wait allowed
            return timedelta.max
    return None
