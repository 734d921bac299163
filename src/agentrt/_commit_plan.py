"""A run's commit plan: every transaction the step machine makes, in one place.

Each `Commit` below is one fsynced transaction: what it is, when the machine
makes it, which of the store's named writes it makes, which audit events it may
append, and the test kit's crash point just after it commits (a probe also
runs just before its COMMIT, so a crash "at" a point can fall on either side).
The step machine names the commit it makes (`RunSession.write(plan.X, fn)`).
Outside the plan, on purpose: the heartbeat's renewals (a store's `Renewer`,
on a connection of its own, no event) and giving back the lease of a loop
that stopped early (`_session.release_lease`, no event); the operator's
decisions and cancels are not the step machine's. `docs/architecture.md` shows the
plan as a table, and `tests/test_commit_plan.py` keeps the two alike.

Invariants:
- Every transaction of the machine that appends an event is listed here, and appends only the events
  listed for it: with `AGENTRT_CHECK_COMMIT_PLAN` set (the test suite sets it,
  and its child processes inherit it), a transaction that appends an event its
  commit does not list raises `CommitPlanError` before its COMMIT, so it
  writes nothing.
- An allowed tool step makes two commits: the step's claim and its decision,
  kept in memory (`joins`), commit with the policy's verdict and
  `step.tool_started` before the tool is called; the outcome commits once the
  tool returned. A denial, an approval request, a completion or a failure is
  one commit; a model step adds one dispatch (which carries the claim on the
  first attempt) and one settle per attempt (decision 0088).
- `TOOL_STARTED` commits, with `step.tool_started` and the decision recorded
  verbatim in front of it, before the tool is called: the durability the seed
  promises for a side effect.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterable
from dataclasses import dataclass

from . import _events as ev
from ._errors import AgentrtError

CHECK_VARIABLE = "AGENTRT_CHECK_COMMIT_PLAN"
"""Set (to anything but empty) to refuse a transaction that appends an unplanned event."""


class CommitPlanError(AgentrtError):
    """A transaction appended an event its commit does not list: a defect of the runtime."""


@dataclass(frozen=True)
class Commit:
    """One transaction of the step machine."""

    name: str
    when: str
    writes: tuple[str, ...]
    events: frozenset[str]
    point: str | None = None
    """The crash point after it commits, where it has one of its own."""
    joins: bool = False
    """Its writes are kept in memory and commit with the step's next commit, in front of
    that commit's own (`RunSession.defer`): not a transaction of its own."""

    def joining(self, earlier: Iterable[Commit]) -> Commit:
        """This commit with `earlier` joining commits' writes and events in front of its own.

        The same commits joined give the same (frozen) commit: it is made once and kept
        (a step joins the same two to its first commit every time)."""
        ahead = tuple(earlier)
        key = (id(self), *map(id, ahead))
        kept = _JOINED.get(key)
        if kept is not None and kept[0] is self and all(map(operator.is_, kept[1], ahead)):
            return kept[2]
        joined = Commit(
            " + ".join([*(c.name for c in ahead), self.name]),
            self.when,
            tuple(w for c in (*ahead, self) for w in c.writes),
            self.events.union(*(c.events for c in ahead)),
            self.point,
        )
        if len(_JOINED) >= _JOINED_KEPT:
            _JOINED.clear()
        _JOINED[key] = (self, ahead, joined)  # the entry keeps its commits (and ids) alive
        return joined

    def check(self, appended: Iterable[str]) -> None:
        """Raise `CommitPlanError` if `appended` holds an event this commit does not list."""
        unplanned = sorted(set(appended) - self.events)
        if unplanned:
            raise CommitPlanError(
                f"the {self.name!r} transaction appended {', '.join(unplanned)}, which the "
                "commit plan does not list for it; nothing was written"
            )


# The commits `Commit.joining` made, by the ids of the commits joined; emptied when full.
_JOINED: dict[tuple[int, ...], tuple[Commit, tuple[Commit, ...], Commit]] = {}
_JOINED_KEPT = 64


def checking() -> bool:
    """Whether transactions are checked against the plan (`AGENTRT_CHECK_COMMIT_PLAN`)."""
    return bool(os.environ.get(CHECK_VARIABLE))


# Crash points the test kit can stop a process at (see `agentrt.testkit.Point`): each
# commit's own below, and those between commits (inside a tool call or a model call,
# and just before an allowed call runs).
POINT_STEP_STARTED = "step.started"
POINT_DECIDED = "step.decided"
POINT_ALLOWED = "policy.allowed"
POINT_TOOL_STARTED = "step.tool_started"
POINT_TOOL_EFFECT = "tool.effect"
POINT_TOOL_FINISHED = "step.tool_finished"
POINT_RESUMED = "run.resumed"
POINT_INTERRUPTED = "step.interrupted"
POINT_PAUSED = "run.paused"
POINT_MODEL_DISPATCHED = "model.dispatched"
POINT_ATTACH_ALLOWED = "attach.allowed"


def _events(*names: str) -> frozenset[str]:
    return frozenset(names)


def table() -> str:
    """The plan as the Markdown table `docs/architecture.md` shows."""
    lines = [
        "| Commit | When | Named writes | Events it may append | Crash point after it |",
        "|---|---|---|---|---|",
    ]
    for commit in PLAN:
        writes = ", ".join(f"`{w}`" for w in commit.writes) or "none of its own"
        events = ", ".join(f"`{e}`" for e in sorted(commit.events)) or "none"
        point = f"`{commit.point}`" if commit.point else "none of its own"
        if commit.joins:
            point += " (after the commit it joins)"
        name = f"{commit.name} (joins the next)" if commit.joins else commit.name
        lines.append(f"| {name} | {commit.when} | {writes} | {events} | {point} |")
    return "\n".join(lines)


_ENDED = (ev.RUN_FINISHED, ev.MODEL_FAILED)
"""A run's end: `run.finished`, and an attempt left dispatched settled as failed."""
_LIMIT = (ev.LIMIT_EXCEEDED, ev.LOOP_DETECTED)
_PAUSED = (ev.STEP_POLICY, ev.APPROVAL_REQUESTED)

# --- a run begins -------------------------------------------------------------------------------

RUN_CREATED = Commit(
    "run created",
    "Gate.begin / Driver.start: the run, its tool specs and its lease",
    ("create_run",),
    _events(ev.RUN_CREATED, ev.RUN_STARTED),
)

# --- an allowed tool step: two commits ----------------------------------------------------------

LIMIT_REACHED = Commit(
    "limit reached",
    "at a step's start: a limit reached (or a run whose record will not decode), the run "
    "ended instead of a step claimed",
    ("fail_at_limit", "end_run"),
    _events(*_LIMIT, *_ENDED),
)
STEP_STARTED = Commit(
    "step started",
    "each step: the limits checked in memory and the next step claimed; the claim commits "
    "with the step's next commit",
    ("claim_step",),
    _events(ev.STEP_STARTED),
    POINT_STEP_STARTED,
    joins=True,
)
DECIDED = Commit(
    "decided",
    "the agent's decision recorded verbatim, before anything judges it; it commits with the "
    "step's next commit, so before any tool starts",
    ("record_decision",),
    _events(ev.STEP_DECIDED),
    POINT_DECIDED,
    joins=True,
)
TOOL_STARTED = Commit(
    "tool started",
    "an allowed call: the step's claim and decision, the policy's verdict and "
    "`step.tool_started`, before the tool runs",
    ("start_tool",),
    _events(ev.STEP_POLICY, ev.STEP_TOOL_STARTED),
    POINT_TOOL_STARTED,
)
TOOL_FINISHED = Commit(
    "tool finished",
    "the tool's outcome (or its unknown outcome, pausing for a person), and a terminal "
    "tool's end of the run",
    ("finish_tool", "end_run", "leave_running", "add_active_time", "record_late_outcome"),
    _events(ev.STEP_TOOL_FINISHED, ev.STEP_FAILED, *_PAUSED, *_ENDED),
    POINT_TOOL_FINISHED,
)

# --- the other ends of a step: one commit each (the claim and the decision join it) ------------

STEP_ENDED = Commit(
    "step ended",
    "a denial, an invalid decision or call (the step fails, the run goes on), a completion "
    "or a failure (the run ends)",
    ("fail_and_go_on", "end_with_step", "end_waiting"),
    _events(ev.STEP_POLICY, ev.STEP_FAILED, *_ENDED),
)
PAUSED = Commit(
    "paused",
    "a call the policy sends to a person: the verdict and the approval request",
    ("pause_for_approval",),
    _events(*_PAUSED),
    POINT_PAUSED,
)
LEFT_OPEN = Commit(
    "left open",
    "a Gate session closed (or a Driver's loop cancelled) with its step claimed and not "
    "settled: the claim and any decision committed, the step left `deciding`",
    (),
    _events(),
)
RUN_ENDED = Commit(
    "run ended",
    "a running run ended without a step of its own (a record that will not decode, a "
    "reconciliation's failure)",
    ("end_run",),
    _events(*_ENDED),
)

# --- a model step: one dispatch and one settle per attempt --------------------------------------

MODEL_DISPATCHED = Commit(
    "model dispatched",
    "before each attempt of a model call: its estimate charged, within the limits (the "
    "step's claim joins the first attempt's)",
    ("dispatch_model_call",),
    _events(ev.MODEL_DISPATCHED),
    POINT_MODEL_DISPATCHED,
)
MODEL_SETTLED = Commit(
    "model settled",
    "after each attempt: its usage and cost, or its failure",
    ("settle_model_call", "charge_beyond_estimate"),
    _events(ev.MODEL_COMPLETED, ev.MODEL_FAILED),
)

# --- a waiting run --------------------------------------------------------------------------------

HELD = Commit(
    "held",
    "an attach to a waiting run holds its lease (compare-and-set on the lease judged free)",
    ("hold_waiting",),
    _events(),
)
RESUMED = Commit(
    "resumed",
    "an approved call judged again and allowed: the lease back, `run.resumed`, the "
    "verdict and `step.tool_started`, before the tool runs",
    ("leave_waiting", "start_tool"),
    _events(ev.RUN_RESUMED, ev.STEP_POLICY, ev.STEP_TOOL_STARTED),
    POINT_RESUMED,
)
RESUME_FAILED = Commit(
    "resume failed",
    "an approved call that no longer fits its tool, or that the policy now denies: the "
    "lease back and the step failed, the run goes on",
    ("leave_waiting", "fail_and_go_on"),
    _events(ev.RUN_RESUMED, ev.STEP_POLICY, ev.STEP_FAILED),
)
RE_PAUSED = Commit(
    "paused again",
    "an approved call the policy sends to a person again (a changed request)",
    ("leave_waiting", "pause_for_approval"),
    _events(ev.RUN_RESUMED, *_PAUSED),
    POINT_PAUSED,
)
WAIT_ENDED = Commit(
    "wait ended",
    "a rejection, an expired approval, or a waiting run whose record will not decode",
    ("end_waiting", "expire_waiting", "end_with_step"),
    _events(ev.STEP_POLICY, ev.STEP_FAILED, *_ENDED),
)

# --- a run taken over from a dead owner -----------------------------------------------------------

TAKEN_OVER = Commit(
    "taken over",
    "a RUNNING run whose owner is gone, with something in doubt: the exact lease judged "
    "gone replaced, attempts in flight charged, steps in flight interrupted",
    ("take_over",),
    _events(ev.LEASE_TAKEN_OVER, ev.STEP_INTERRUPTED, ev.MODEL_FAILED),
    POINT_INTERRUPTED,
)
TAKEN_OVER_GOING_ON = Commit(
    "taken over, going on",
    "a RUNNING run taken with nothing in doubt (no step was executing, no `reconcile` of "
    "the consumer's: a lease given back, or an owner gone while its step decided): the "
    "lease taken, steps in flight interrupted and `run.resumed`, together; its crash "
    "points `step.interrupted` and `run.resumed` coincide (decision 0152)",
    ("take_over", "go_on_after_interruption"),
    _events(ev.LEASE_TAKEN_OVER, ev.STEP_INTERRUPTED, ev.MODEL_FAILED, ev.RUN_RESUMED),
    POINT_RESUMED,
)
GONE_ON = Commit(
    "gone on",
    "after a takeover, once nothing is in doubt (a read-only call interrupted, the "
    "consumer's `reconcile` or a tool's reconciliation vouched): `run.resumed`",
    ("go_on_after_interruption", "record_reconciled"),
    _events(ev.RUN_RESUMED, ev.STEP_RECONCILED),
    POINT_RESUMED,
)
RECONCILED = Commit(
    "reconciled",
    "a tool's own reconciliation found the effect: the step done, the run goes on or ends",
    ("complete_reconciled", "go_on_after_interruption"),
    _events(ev.STEP_RECONCILED, ev.RUN_RESUMED, *_ENDED),
    POINT_RESUMED,
)
ASKED = Commit(
    "asked a person",
    "an interrupted side effect nobody could vouch for: the reconciliation's answer and an "
    "`interrupted_side_effect` approval",
    ("record_reconciled", "pause_for_approval"),
    _events(ev.STEP_RECONCILED, *_PAUSED),
    POINT_PAUSED,
)

PLAN: tuple[Commit, ...] = (
    RUN_CREATED,
    LIMIT_REACHED,
    STEP_STARTED,
    DECIDED,
    TOOL_STARTED,
    TOOL_FINISHED,
    STEP_ENDED,
    PAUSED,
    LEFT_OPEN,
    RUN_ENDED,
    MODEL_DISPATCHED,
    MODEL_SETTLED,
    HELD,
    RESUMED,
    RESUME_FAILED,
    RE_PAUSED,
    WAIT_ENDED,
    TAKEN_OVER,
    TAKEN_OVER_GOING_ON,
    GONE_ON,
    RECONCILED,
    ASKED,
)
"""Every transaction of the step machine, in the order a run meets them."""
