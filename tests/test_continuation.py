"""`_continuation.judge`, one rule per test: each refusal and each way of continuing.

The judgement reads nothing itself: the run's facts, who asks, the two clocks,
the latest approval and the run's tool names are handed to it, the clocks and
reads as callables called only when a rule needs them (a test asserts which).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentrt import _lease
from agentrt._continuation import (
    EXECUTING,
    Continuable,
    Continuer,
    How,
    Refusal,
    RunFacts,
    judge,
)
from agentrt._errors import ForeignRunError, RunLeasedError, RunStateError
from agentrt._store._records import ApprovalState, LeaseState, RunCandidate, RunCursor

RUN = "a" * 32
ME = "me/000000000000"
OTHER = "other/111111111111"
T0 = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
DRIVER = Continuer(ME, frozenset({"driver", "gate"}), frozenset({"lookup"}))


def lease(owner: str = "", expires_at: datetime | None = None, **kw: Any) -> LeaseState:
    status = kw.pop("status", "RUNNING")
    return LeaseState(RUN, status, owner, expires_at, **kw)


def running(owner: str = "", expires_at: datetime | None = None, **kw: Any) -> RunFacts:
    return RunFacts(RUN, "RUNNING", kw.pop("origin", "driver"), lease(owner, expires_at, **kw))


def waiting(owner: str = "", expires_at: datetime | None = None, **kw: Any) -> RunFacts:
    held = lease(owner, expires_at, status="WAITING_FOR_APPROVAL", **kw)
    return RunFacts(RUN, "WAITING_FOR_APPROVAL", "driver", held)


class Reads:
    """The clocks and reads a judgement may call, counting what it called."""

    def __init__(
        self,
        *,
        lease_now: datetime = T0,
        now: datetime = T0,
        approval: ApprovalState | None = None,
        tools: Sequence[str | None] = ("lookup",),
    ) -> None:
        self.called: list[str] = []
        self._values: dict[str, Any] = {
            "lease_now": lease_now,
            "now": now,
            "approval": approval,
            "tools": tools,
        }

    def __call__(self, name: str) -> Callable[[], Any]:
        def read() -> Any:
            self.called.append(name)
            return self._values[name]

        return read

    def judge(self, facts: Any, me: Continuer = DRIVER, *, asks_tools: bool = True) -> Any:
        return judge(
            facts,
            me,
            lease_now=self("lease_now"),
            now=self("now"),
            approval=self("approval"),
            tools=self("tools") if asks_tools else None,
        )


# -- refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["COMPLETED", "FAILED", "CANCELLED"])
def test_continuation_a_finished_run_is_refused_with_the_callers_sentence(status: str) -> None:
    facts = RunFacts(RUN, status, "driver")
    reads = Reads()
    judged = judge(
        facts,
        DRIVER,
        lease_now=reads("lease_now"),
        now=reads("now"),
        nothing="there is nothing to attach to",
    )
    assert isinstance(judged, Refusal)
    assert type(judged.error) is RunStateError
    assert str(judged.error) == f"run {RUN} is {status}; there is nothing to attach to"
    assert judged.skipped == f"it changed meanwhile: it is now {status}"
    assert reads.called == []


def test_continuation_a_run_of_a_foreign_origin_is_refused_for_a_driver() -> None:
    reads = Reads()
    judged = reads.judge(running(origin="mcp-proxy"))
    assert isinstance(judged, Refusal)
    assert isinstance(judged.error, ForeignRunError)
    assert (judged.error.run_id, judged.error.origin) == (RUN, "mcp-proxy")
    assert judged.skipped == (
        "it was begun by 'mcp-proxy', not by a Driver or a plain Gate; "
        "the program that began it continues it"
    )
    assert reads.called == []


def test_continuation_a_plain_gate_continues_any_origin() -> None:
    gate = Continuer(ME)
    judged = Reads().judge(running(origin="mcp-proxy"), gate)
    assert judged == Continuable(How.TAKE_OVER, "RUNNING with no lease", {"by": "no lease"})


def test_continuation_an_unreadable_origin_is_left_to_the_decode_error_path() -> None:
    judged = Reads().judge(running(origin=""))
    assert judged == Continuable(How.TAKE_OVER, "RUNNING with no lease", {"by": "no lease"})


def test_continuation_a_running_run_the_asker_executes_is_refused_before_its_lease() -> None:
    me = Continuer(ME, None, None, executing=lambda run_id: run_id == RUN)
    reads = Reads()
    judged = reads.judge(running(), me)
    assert isinstance(judged, Refusal)
    assert type(judged.error) is RunStateError
    assert str(judged.error) == (
        f"this driver is already executing run {RUN}; a second concurrent call is refused"
    )
    assert judged.skipped == EXECUTING == "this driver is executing it now"
    assert reads.called == []


def test_continuation_a_live_lease_of_another_owner_is_refused() -> None:
    until = T0 + timedelta(seconds=1)
    reads = Reads()
    judged = reads.judge(running(OTHER, until, holder='{"host": "elsewhere"}'))
    assert isinstance(judged, Refusal)
    assert isinstance(judged.error, RunLeasedError)
    assert (judged.error.owner, judged.error.expires_at) == (OTHER, until)
    assert judged.skipped == (
        f"RUNNING under a live lease held by {OTHER} until 2030-01-02 03:04:06+00:00; not taken"
    )
    assert reads.called == ["lease_now"]


def test_continuation_an_expiry_nobody_can_read_is_never_judged_expired() -> None:
    unreadable = running(OTHER, None, expiry_readable=False, stored=(OTHER, "soon"))
    judged = Reads(lease_now=T0 + timedelta(days=365)).judge(unreadable)
    assert isinstance(judged, Refusal)
    assert isinstance(judged.error, RunLeasedError)
    assert judged.skipped == f"RUNNING under a live lease held by {OTHER} until None; not taken"


def test_continuation_a_pending_approval_is_refused_until_it_expires() -> None:
    pending = ApprovalState("ap1", "pending", T0 + timedelta(minutes=5))
    reads = Reads(approval=pending, now=T0 + timedelta(minutes=5) - timedelta(microseconds=1))
    judged = reads.judge(waiting())
    assert isinstance(judged, Refusal)
    assert type(judged.error) is RunStateError
    assert str(judged.error) == f"run {RUN} is waiting for approval ap1, which is still pending"
    assert judged.skipped == "WAITING for approval ap1, which is still pending"
    assert reads.called == ["approval", "now"]


def test_continuation_a_pending_approval_without_expiry_reads_no_clock() -> None:
    reads = Reads(approval=ApprovalState("ap1", "pending", None))
    judged = reads.judge(waiting())
    assert isinstance(judged, Refusal)
    assert reads.called == ["approval"]


def test_continuation_an_approved_run_held_by_another_live_attach_is_refused() -> None:
    held = waiting(OTHER, T0 + timedelta(seconds=30), holder='{"host": "elsewhere"}')
    reads = Reads(approval=ApprovalState("ap1", "approved", None))
    judged = reads.judge(held)
    assert isinstance(judged, Refusal)
    assert isinstance(judged.error, RunLeasedError)
    assert reads.called == ["approval", "lease_now"]


def test_continuation_a_run_started_with_a_tool_the_asker_lacks_is_refused() -> None:
    reads = Reads(tools=["lookup", "wire_money", None])
    judged = reads.judge(running())
    said = (
        "it was started with tools this driver does not register (?, wire_money); "
        "it belongs to another program"
    )
    assert isinstance(judged, Refusal)
    assert type(judged.error) is RunStateError
    assert str(judged.error) == f"run {RUN}: {said}"
    assert judged.skipped == said
    assert reads.called == ["lease_now", "tools"]


def test_continuation_the_tools_are_read_only_of_a_run_otherwise_continuable() -> None:
    reads = Reads(tools=["wire_money"])
    judged = reads.judge(running(OTHER, T0 + timedelta(seconds=1), holder=""))
    assert isinstance(judged, Refusal) and isinstance(judged.error, RunLeasedError)
    assert reads.called == ["lease_now"]


# -- ways of continuing ----------------------------------------------------------------------


def test_continuation_a_running_run_with_no_lease_is_taken_over() -> None:
    assert Reads().judge(running()) == Continuable(
        How.TAKE_OVER, "RUNNING with no lease", {"by": "no lease"}
    )


def test_continuation_the_askers_own_stopped_lease_is_taken_over() -> None:
    live_for_an_hour = running(ME, T0 + timedelta(hours=1))
    assert Reads().judge(live_for_an_hour) == Continuable(
        How.TAKE_OVER,
        "RUNNING under this driver's own lease; its loop had stopped",
        {"by": "this driver's own lease"},
    )


def test_continuation_an_expired_lease_is_taken_over_by_the_lease_clock() -> None:
    expiry = T0 + timedelta(seconds=30)
    facts = running(OTHER, expiry, holder='{"host": "elsewhere"}')
    # The asker's own clock says nothing about a lease: only the lease clock does.
    live = Reads(lease_now=expiry - timedelta(microseconds=1), now=expiry + timedelta(days=1))
    assert isinstance(live.judge(facts), Refusal)
    assert Reads(lease_now=expiry).judge(facts) == Continuable(
        How.TAKE_OVER,
        "RUNNING and its lease expired at 2030-01-02T03:04:35.000000Z",
        {"by": "lease expired"},
    )


def test_continuation_a_holder_provably_dead_on_this_host_is_taken_over() -> None:
    dead_pid = 2**22 + 12345  # beyond pid_max: no such process here
    record = _lease.holder_record()
    holder = json.dumps({**record, "pid": dead_pid, "start": "1"})
    facts = running(OTHER, T0 + timedelta(hours=1), holder=holder)
    judged = Reads().judge(facts)
    assert judged == Continuable(
        How.TAKE_OVER,
        f"RUNNING and its owner's process is gone (pid {dead_pid}: no such process)",
        {
            "by": "owner process gone",
            "host": record["host"],
            "pid": dead_pid,
            "start": "1",
            "proof": "no such process",
        },
    )


def test_continuation_a_snapshot_without_the_lease_leaves_it_to_the_takeover() -> None:
    reads = Reads()
    judged = reads.judge(RunFacts(RUN, "RUNNING", "driver"), asks_tools=False)
    assert judged == Continuable(How.TAKE_OVER, "RUNNING; its lease is judged as it is taken")
    assert reads.called == []


def test_continuation_a_waiting_run_with_no_approval_on_record_is_resumed() -> None:
    assert Reads(approval=None).judge(waiting()) == Continuable(
        How.RESUME_WAITING, "WAITING, with no approval on record"
    )


def test_continuation_an_approved_run_is_resumed_under_the_lease_rule() -> None:
    reads = Reads(approval=ApprovalState("ap1", "approved", None))
    assert reads.judge(waiting()) == Continuable(
        How.RESUME_WAITING, "WAITING and its approval ap1 was approved", {"by": "no lease"}
    )
    assert reads.called == ["approval", "lease_now", "tools"]


def test_continuation_an_approval_decided_otherwise_is_resumed_without_its_lease() -> None:
    # The resume says what is wrong with such a run; its lease is not the question.
    held = waiting(OTHER, T0 + timedelta(hours=1), holder="")
    reads = Reads(approval=ApprovalState("ap1", "rejected", None))
    assert reads.judge(held) == Continuable(
        How.RESUME_WAITING, "WAITING and its approval ap1 was rejected"
    )
    assert reads.called == ["approval", "tools"]


def test_continuation_a_pending_approval_past_its_expiry_is_settled_as_expired() -> None:
    expiry = T0 + timedelta(minutes=5)
    reads = Reads(approval=ApprovalState("ap1", "pending", expiry), now=expiry)
    assert reads.judge(waiting()) == Continuable(
        How.SETTLE_EXPIRED,
        "WAITING and its approval ap1 expired undecided at 2030-01-02T03:09:05.000000Z",
    )


def test_continuation_a_snapshot_without_the_approval_leaves_it_to_the_resume() -> None:
    reads = Reads()
    judged = judge(waiting(), DRIVER, lease_now=reads("lease_now"), now=reads("now"))
    assert judged == Continuable(
        How.RESUME_WAITING, "WAITING; its approval is judged as it is read"
    )
    assert reads.called == []


def test_continuation_recoverys_candidates_are_judged_as_they_are() -> None:
    candidate = RunCandidate(RunCursor(7), RUN, "RUNNING", lease(), "gate")
    assert Reads().judge(candidate) == Continuable(
        How.TAKE_OVER, "RUNNING with no lease", {"by": "no lease"}
    )
