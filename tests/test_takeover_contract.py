"""The takeover and the interruption contract, pinned by the mutation campaign (docs/mutation.md).

Each test here kills mutants of `agentrt._takeover` (`resume.py` before issue 10)
that the recovery tests let live. The interruption is made in this one process:
while the first driver's tool is executing (or its agent deciding), its lease is
made expired an hour ago by the clock that judges it (`expire_lease`: the stored
expiry moved, since PostgreSQL's server clock cannot be), and a second driver
takes the run over, or runs `recover()`. That leaves exactly what a takeover of a
dead process's run sees (a step `executing`, a lease it may take), without
spawning one.

Every test takes `database` and runs on SQLite and on PostgreSQL (issue 21 item 5),
but those that say why they stay on a file.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect, ToolCall, ToolResult
from agentrt._clock import wall_clock
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, RecordingTool
from support.leases import expire_lease
from support.rows import execute
from support.testkit_children import kit_mode

Tamper = Callable[[str, str], None]
"""A change made behind the runtime's back while the call executes: (database, run id)."""

FIRST_TTL = timedelta(hours=1)
"""The first driver's lease: its heartbeat renews a third of it after the start, never
during a test, so only `expire_lease` ends it."""


@dataclass
class Interrupted:
    """What the takeover left: the run as the second driver returned it, and the store."""

    run: agentrt.Run
    store: agentrt.Store
    first_calls: int


def interrupt(
    database: str,
    side_effect: SideEffect,
    tamper: Tamper | None = None,
    other_tools: list[Any] | None = None,
    **other_kw: Any,
) -> Interrupted:
    """Run one `lookup` call; while it executes, expire its lease, tamper, then let another
    driver take over.

    The other driver registers `other_tools` (by default `lookup` as it was).
    """
    taken: list[agentrt.Run] = []

    def other_driver() -> agentrt.Driver:
        return agentrt.Driver(
            store=agentrt.open_store(database),
            # Whether a script is read by step index or by what was carried out,
            # the step after the interrupted one completes.
            agent=ScriptedAgent([Decision.complete({"after": "takeover"})] * 2),
            policy=agentrt.default_policy(),
            tools=[RecordingTool("lookup", side_effect)] if other_tools is None else other_tools,
            lease_owner="taker",
            **other_kw,
        )

    def take_over_mid_call(call: ToolCall) -> ToolResult:
        expire_lease(database, call.run_id)
        if tamper is not None:
            tamper(database, call.run_id)
        taken.append(other_driver().resume_sync(call.run_id))
        return ToolResult({"late": True})

    tool = RecordingTool("lookup", side_effect, result=take_over_mid_call)
    first = agentrt.Driver(
        store=agentrt.open_store(database),
        agent=ScriptedAgent([Decision.tool_call("lookup", {"x": 1}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[tool],
        lease_owner="first",
        lease_ttl=FIRST_TTL,
    )
    with pytest.raises(agentrt.LeaseLostError):
        first.start_sync("look it up")
    (run,) = taken
    return Interrupted(run, agentrt.open_existing(database), len(tool.calls))


def approval_kinds(store: agentrt.Store, run_id: str) -> list[str]:
    return [a.kind for a in store.list_approvals(run_id)]


# -- the read-only exemption follows the spec as recorded -----------------------------------------


def test_an_interrupted_read_only_call_continues_without_asking_anyone(database: str) -> None:
    result = interrupt(database, SideEffect.READ_ONLY)
    assert result.run.status == "COMPLETED"
    assert approval_kinds(result.store, result.run.id) == []
    assert result.first_calls == 1


def test_an_interrupted_read_only_call_whose_step_names_no_recorded_spec_waits_for_a_person(
    database: str,
) -> None:
    def forget_spec(database: str, run_id: str) -> None:
        execute(database, "UPDATE steps SET spec_hash = '' WHERE run_id = ?", (run_id,))

    result = interrupt(database, SideEffect.READ_ONLY, forget_spec)
    assert result.run.status == "WAITING_FOR_APPROVAL"
    assert approval_kinds(result.store, result.run.id) == ["interrupted_side_effect"]


def test_an_interrupted_read_only_call_whose_recorded_spec_will_not_decode_waits_for_a_person(
    database: str,
) -> None:
    def garble_spec(database: str, run_id: str) -> None:
        execute(database, 'UPDATE tool_specs SET spec_json = \'{"not": "a spec"}\'')

    result = interrupt(database, SideEffect.READ_ONLY, garble_spec)
    assert result.run.status == "WAITING_FOR_APPROVAL"
    assert approval_kinds(result.store, result.run.id) == ["interrupted_side_effect"]


# -- what a takeover records ----------------------------------------------------------------------


def test_an_interrupted_side_effect_pauses_with_a_step_policy_event_naming_its_decision(
    database: str,
) -> None:
    result = interrupt(database, SideEffect.LOCAL_MUTATION)
    assert result.run.status == "WAITING_FOR_APPROVAL"
    store, run_id = result.store, result.run.id
    step = store.list_steps(run_id)[0]
    (approval,) = store.list_approvals(run_id)
    (policy,) = [e for e in store.list_events(run_id=run_id) if e.type == "step.policy"][-1:]
    assert step.policy is not None and policy.step_id == step.id
    assert policy.payload == {
        "decision": step.policy.to_json(),
        "policy_id": "agentrt:interrupted_side_effect",
        "spec_hash": step.spec_hash,
        "view": {},  # no policy was asked: the runtime's own pause sees no counters
    }
    assert policy.payload["decision"]["kind"] == approval.kind == "interrupted_side_effect"
    assert policy.payload["decision"]["capability"] == {"tool": "lookup", "args": {"x": 1}}


def test_a_takeover_that_continues_records_run_resumed_at_its_own_time_on_no_step(
    database: str,
) -> None:
    clock = FakeClock()
    result = interrupt(database, SideEffect.READ_ONLY, now=clock)
    assert result.run.status == "COMPLETED"
    events = result.store.list_events(run_id=result.run.id)
    types = [e.type for e in events]
    taken = types.index("lease.taken_over")
    resumed = events[types.index("run.resumed", taken)]
    assert (resumed.step_id, resumed.payload) == ("", {"after": "interruption"})
    # Read from the taking driver's clock, after the takeover and before the next step.
    at, taken_at = resumed.at, events[taken].at
    assert at is not None and taken_at is not None
    assert taken_at < at <= clock.t
    later = [e.at for e in events[types.index("run.resumed", taken) + 1 :] if e.at is not None]
    assert later and all(at < then for then in later)


def test_reconcile_sees_the_run_its_steps_and_its_approvals(database: str) -> None:
    seen: list[agentrt.RunView] = []

    def reconcile(view: agentrt.RunView) -> agentrt.Reconciliation:
        seen.append(view)
        return agentrt.Reconciliation.continue_run(f"{len(view.approvals)} approvals seen")

    result = interrupt(database, SideEffect.LOCAL_MUTATION, reconcile=reconcile)
    assert result.run.status == "COMPLETED"
    (view,) = seen
    assert view.run.id == result.run.id
    assert [s.status for s in view.steps] == ["interrupted"]
    assert view.approvals == ()  # a tuple, like the steps: the run has asked for none
    (resumed,) = [
        e for e in result.store.list_events(run_id=result.run.id) if e.type == "run.resumed"
    ]
    assert resumed.payload == {
        "after": "interruption",
        "reconcile": "continue",
        "detail": "0 approvals seen",
    }


def test_a_crash_right_after_a_takeover_continues_is_a_crash_point_and_is_recovered(
    database: str,
) -> None:
    from agentrt.testkit import Crash, Point, run_sync

    crashes = (Crash(0, Point.AFTER_STEP_STARTED), Crash(0, Point.AFTER_RESUMED))
    with kit_mode(database) as mode:
        result = run_sync("support.scenarios:small", *crashes, mode=mode, db_path=database)
    assert [c.crash for c in result.crashes_reached] == list(crashes)
    assert result.run.status == "COMPLETED"
    assert len(result.calls("charge")) == 1


def test_a_reconcile_verdict_that_is_not_a_reconciliation_fails_the_run_naming_its_type(
    database: str,
) -> None:
    result = interrupt(database, SideEffect.LOCAL_MUTATION, reconcile=lambda view: "continue")
    run = result.run
    assert (run.status, run.reason) == ("FAILED", "internal_error")
    assert run.reason_detail == "reconcile returned str, not a Reconciliation"
    assert result.first_calls == 1


def test_a_reconcile_detail_that_is_not_text_is_recorded_as_its_repr(database: str) -> None:
    def reconcile(view: agentrt.RunView) -> agentrt.Reconciliation:
        return agentrt.Reconciliation(outcome="continue", detail={"ledger": 1})  # type: ignore[arg-type]

    result = interrupt(database, SideEffect.LOCAL_MUTATION, reconcile=reconcile)
    assert result.run.status == "COMPLETED"
    events = result.store.list_events(run_id=result.run.id)
    (resumed,) = [e for e in events if e.type == "run.resumed"]
    assert resumed.payload["detail"] == "{'ledger': 1}"


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def test_a_reconcile_result_nested_deeper_than_json_allows_fails_the_run(database: str) -> None:
    """A result may nest 256 deep, like any value a consumer hands in (not the store's deeper
    limit, which leaves room for agentrt's own envelopes)."""
    deep = _nested(257)
    result = interrupt(
        database,
        SideEffect.LOCAL_MUTATION,
        reconcile=lambda view: agentrt.Reconciliation.completed(deep),
    )
    run = result.run
    assert (run.status, run.reason) == ("FAILED", "internal_error")
    assert run.reason_detail.startswith("reconcile completed with a result that is not usable JSON")
    assert "nesting deeper than 256" in run.reason_detail
    assert run.result is None
    ok = interrupt(
        database,
        SideEffect.LOCAL_MUTATION,
        reconcile=lambda view: agentrt.Reconciliation.completed(_nested(256)),
    )
    assert (ok.run.status, ok.run.result) == ("COMPLETED", _nested(256))


class _ReadOnce(dict[str, Any]):
    """A mapping that can be read once (a view over something since closed)."""

    reads = 0

    def items(self) -> Any:
        type(self).reads += 1
        if type(self).reads > 1:
            raise ValueError("the ledger cursor is closed")
        return super().items()


def test_a_reconcile_result_read_once_is_recorded_as_read(database: str) -> None:
    """A mapping that can be read once: the result is read by the base type, once, into
    plain values (decision 0138), and recorded as it was then."""
    _ReadOnce.reads = 0
    result = interrupt(
        database,
        SideEffect.LOCAL_MUTATION,
        reconcile=lambda view: agentrt.Reconciliation.completed(_ReadOnce(charged=True)),
    )
    run = result.run
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    assert run.result == {"charged": True}
    assert _ReadOnce.reads == 0  # its own items() was never asked


def interrupt_deciding(database: str, **other_kw: Any) -> agentrt.Run:
    """While the first driver's agent decides step 0, another driver takes the run over."""
    taken: list[agentrt.Run] = []

    def take_over_while_deciding(input: agentrt.StepInput) -> Decision:
        other = agentrt.Driver(
            store=agentrt.open_store(database),
            agent=ScriptedAgent([Decision.complete({"after": "takeover"})] * 2),
            policy=agentrt.default_policy(),
            tools=[RecordingTool("lookup", SideEffect.LOCAL_MUTATION)],
            lease_owner="taker",
            **other_kw,
        )
        # The first driver's loop is blocked here, as a dead process's would be.
        expire_lease(database, input.run.id)
        thread = threading.Thread(target=lambda: taken.append(other.resume_sync(input.run.id)))
        thread.start()
        thread.join(30)
        return Decision.complete({"first": True})

    first = agentrt.Driver(
        store=agentrt.open_store(database),
        agent=take_over_while_deciding,
        policy=agentrt.default_policy(),
        tools=[RecordingTool("lookup", SideEffect.LOCAL_MUTATION)],
        lease_owner="first",
        lease_ttl=FIRST_TTL,
    )
    with contextlib.suppress(agentrt.LeaseLostError):
        first.start_sync("decide")  # finds the run taken (or already ended) by the other
    (run,) = taken
    return run


PAUSE = agentrt.PolicyDecision.require_approval(
    "ledger_unclear", "the ledger shows a pending entry", capability={"entry": 5}
)


def test_reconcile_asking_to_wait_when_no_call_was_executing_fails_as_a_conflict(
    database: str,
) -> None:
    run = interrupt_deciding(database, reconcile=lambda view: agentrt.Reconciliation.waiting(PAUSE))
    assert (run.status, run.reason) == ("FAILED", "reconcile_conflict")
    assert run.reason_detail == (
        "reconcile asked to wait, but no call was executing when the run was interrupted"
    )


def test_reconcile_asking_to_wait_on_a_call_whose_args_no_longer_fit_fails_as_a_conflict(
    database: str,
) -> None:
    retyped = RecordingTool(
        "lookup",
        SideEffect.LOCAL_MUTATION,
        schema={"type": "object", "properties": {"x": {"type": "string"}}},
    )
    result = interrupt(
        database,
        SideEffect.LOCAL_MUTATION,
        other_tools=[retyped],
        reconcile=lambda view: agentrt.Reconciliation.waiting(PAUSE),
    )
    run = result.run
    assert (run.status, run.reason) == ("FAILED", "reconcile_conflict")
    assert run.reason_detail == "the interrupted step's args no longer match the schema of 'lookup'"
    assert result.store.list_approvals(run.id) == []


def test_reconcile_asking_to_wait_on_an_unusable_pause_fails_the_run_saying_why(
    database: str,
) -> None:
    kindless = agentrt.PolicyDecision.require_approval("", "no kind given")
    result = interrupt(
        database,
        SideEffect.LOCAL_MUTATION,
        reconcile=lambda view: agentrt.Reconciliation.waiting(kindless),
    )
    run = result.run
    assert (run.status, run.reason) == ("FAILED", "internal_error")
    assert run.reason_detail == (
        "reconcile's pause is unusable: policy required an approval without naming its kind"
    )
    assert result.store.list_approvals(run.id) == []


def test_a_finished_call_whose_result_reads_like_an_interruption_is_not_asked_about_again(
    database: str,
) -> None:
    """Only a step marked interrupted is an interrupted call, whatever a done step's result says."""
    from agentrt.testkit import Crash, Point, run_sync

    crash = Crash(0, Point.AFTER_TOOL_FINISHED)
    with kit_mode(database) as mode:
        result = run_sync("support.scenarios:echo", crash, mode=mode, db_path=database)
    assert [c.crash for c in result.crashes_reached] == [crash]
    assert result.run.status == "COMPLETED"
    assert len(result.calls("note")) == 1
    assert list(result.approvals) == []


# -- records a takeover cannot read back ----------------------------------------------------------


def _damage(sql: str) -> Tamper:
    """Run `sql` (its one parameter the run's id) while the call executes."""

    def tamper(database: str, run_id: str) -> None:
        execute(database, sql, (run_id,))

    return tamper


# SQLite only: a PostgreSQL text column cannot hold bytes that are not UTF-8.
def test_a_run_whose_record_cannot_be_read_back_is_failed_by_the_takeover_not_continued(
    db_path: Path,
) -> None:
    database = str(db_path)
    damage = _damage("UPDATE runs SET goal = CAST(X'ff' AS TEXT) WHERE id = ?")
    result = interrupt(database, SideEffect.READ_ONLY, damage)
    run = result.run
    assert (run.status, run.reason) == ("FAILED", "internal_error")
    assert run.reason_detail == (
        "the run's record cannot be read back (goal: not valid UTF-8 text (invalid start "
        "byte: byte 0xff at offset 0 of 1)); it is not continued"
    )
    assert result.first_calls == 1


@pytest.mark.parametrize(
    ("column", "detail"),
    [
        ("decision_json", "decision_json: not valid UTF-8 text (invalid start byte: byte 0xff"),
        ("policy_id", "policy_id: not valid UTF-8 text (invalid start byte: byte 0xff"),
    ],
)
def test_an_interrupted_call_whose_step_cannot_be_read_back_ends_as_a_conflict(
    db_path: Path, column: str, detail: str
) -> None:
    """Whatever column is unreadable (the decision itself, or only its policy's id), what was
    executing is not known for sure: no approval is asked for, the run ends.

    SQLite only: a PostgreSQL text column cannot hold bytes that are not UTF-8."""
    database = str(db_path)
    damage = _damage(f"UPDATE steps SET {column} = CAST(X'ff' AS TEXT) WHERE run_id = ?")
    result = interrupt(database, SideEffect.LOCAL_MUTATION, damage)
    run = result.run
    assert (run.status, run.reason) == ("FAILED", "reconcile_conflict")
    assert run.reason_detail.startswith(
        f"the interrupted step's record cannot be read back ({detail}"
    )
    assert run.reason_detail.endswith("); what it was executing is unknown")
    assert result.store.list_approvals(run.id) == []


# -- how the previous owner is known to be gone ---------------------------------------------------


def recover_mid_call(
    database: str, tamper: Tamper | None = None, its_own: bool = False
) -> list[agentrt.Recovered]:
    """While the first driver's `lookup` executes, another driver runs `recover()`.

    `its_own`: the lease is first made that other driver's, as if its own loop had
    held the run and stopped (an error) without giving it back.
    """
    found: list[agentrt.Recovered] = []

    def recover_during(call: ToolCall) -> ToolResult:
        other = agentrt.Driver(
            store=agentrt.open_store(database),
            agent=ScriptedAgent([Decision.complete({"after": "recover"})] * 2),
            policy=agentrt.default_policy(),
            tools=[RecordingTool("lookup", SideEffect.READ_ONLY)],
            lease_owner="taker",
        )
        expire_lease(database, call.run_id)
        if tamper is not None:
            tamper(database, call.run_id)
        if its_own:
            execute(
                database,
                "UPDATE runs SET lease_owner = ? WHERE id = ?",
                (other.lease_owner, call.run_id),
            )
        found.extend(other.recover_sync())
        return ToolResult({"late": True})

    first = agentrt.Driver(
        store=agentrt.open_store(database),
        agent=ScriptedAgent([Decision.tool_call("lookup", {"x": 1}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("lookup", SideEffect.READ_ONLY, result=recover_during)],
        lease_owner="first",
        lease_ttl=FIRST_TTL,
    )
    with contextlib.suppress(agentrt.LeaseLostError):
        first.start_sync("look it up")
    return found


def test_recover_takes_a_running_run_with_no_lease_saying_so(database: str) -> None:
    no_lease = _damage("UPDATE runs SET lease_owner = '', lease_expires_at = '' WHERE id = ?")
    (found,) = recover_mid_call(database, no_lease)
    assert (found.action, found.why) == ("resumed", "RUNNING with no lease")
    assert found.run is not None and found.run.status == "COMPLETED"


def test_a_driver_takes_back_a_run_under_its_own_lease_and_records_why(database: str) -> None:
    (found,) = recover_mid_call(database, its_own=True)
    assert (found.action, found.why) == (
        "resumed",
        "RUNNING under this driver's own lease; its loop had stopped",
    )
    assert found.run is not None
    store = agentrt.open_existing(database)
    (taken,) = [e for e in store.list_events(run_id=found.run_id) if e.type == "lease.taken_over"]
    assert taken.payload["proof"] == {"by": "this driver's own lease"}
    assert taken.payload["previous_owner"] == taken.payload["owner"]


# SQLite only: the instant is set by the taker's wall clock; PostgreSQL's is the server's.
def test_a_lease_is_expired_at_the_very_instant_it_names(db_path: Path) -> None:
    database = str(db_path)
    taken: list[agentrt.Run] = []

    def take_at_the_expiry(call: ToolCall) -> ToolResult:
        lease = agentrt.open_existing(database).lease(call.run_id)
        assert lease is not None and lease.expires_at is not None
        expiry = lease.expires_at
        other = agentrt.Driver(
            store=agentrt.open_store(database),
            agent=ScriptedAgent([Decision.complete({"after": "takeover"})] * 2),
            policy=agentrt.default_policy(),
            tools=[RecordingTool("lookup", SideEffect.READ_ONLY)],
            lease_owner="taker",
            wall=lambda: expiry,
        )
        taken.append(other.resume_sync(call.run_id))
        return ToolResult({"late": True})

    first = agentrt.Driver(
        store=agentrt.open_store(database),
        agent=ScriptedAgent([Decision.tool_call("lookup", {"x": 1}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("lookup", SideEffect.READ_ONLY, result=take_at_the_expiry)],
        lease_owner="first",
        lease_ttl=timedelta(hours=1),  # no renewal moves the expiry during the test
    )
    with pytest.raises(agentrt.LeaseLostError):
        first.start_sync("look it up")
    (run,) = taken
    assert run.status == "COMPLETED"
    store = agentrt.open_existing(database)
    (event,) = [e for e in store.list_events(run_id=run.id) if e.type == "lease.taken_over"]
    assert event.payload["proof"] == {"by": "lease expired"}


def test_a_resume_under_a_live_lease_is_refused_naming_the_run_its_owner_and_expiry(
    database: str,
) -> None:
    refused: list[agentrt.RunLeasedError] = []

    def resume_while_held(call: ToolCall) -> ToolResult:
        other = agentrt.Driver(
            store=agentrt.open_store(database),
            agent=ScriptedAgent([Decision.complete({})]),
            policy=agentrt.default_policy(),
            tools=[RecordingTool("lookup", SideEffect.READ_ONLY)],
            lease_owner="taker",
        )
        try:
            other.resume_sync(call.run_id)
        except agentrt.RunLeasedError as exc:
            refused.append(exc)
        return ToolResult({"done": True})

    first = agentrt.Driver(
        store=agentrt.open_store(database),
        agent=ScriptedAgent([Decision.tool_call("lookup", {"x": 1}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("lookup", SideEffect.READ_ONLY, result=resume_while_held)],
        lease_owner="first",
        lease_ttl=timedelta(hours=1),
    )
    run = first.start_sync("look it up")
    assert run.status == "COMPLETED"  # the refused resume changed nothing
    (exc,) = refused
    assert (exc.run_id, exc.owner) == (run.id, first.lease_owner)
    assert exc.expires_at is not None
    assert str(exc) == f"run {run.id} is leased by {first.lease_owner!r} until " + (
        exc.expires_at.isoformat()
    )


def test_taking_over_a_run_that_is_no_longer_running_is_refused_naming_its_status(
    database: str,
) -> None:
    """`gate.attach` reads the run RUNNING, then takes it over; if the run ended in
    between, the takeover refuses, saying what the run is now."""
    import asyncio

    from agentrt._takeover import take_over

    driver = agentrt.Driver(
        store=agentrt.open_store(database),
        agent=ScriptedAgent([Decision.complete({})]),
        policy=agentrt.default_policy(),
    )
    run = driver.start_sync("done at once")
    assert run.status == "COMPLETED"
    with pytest.raises(agentrt.RunStateError) as info:
        asyncio.run(take_over(driver._config, run.id))
    assert str(info.value) == f"run {run.id} is COMPLETED; only a RUNNING run can be taken over"


def test_a_run_cancelled_between_the_takeovers_first_look_and_its_transaction_is_not_taken(
    database: str,
) -> None:
    """The takeover judges the lease once outside its transaction and again inside it;
    a run cancelled in between is refused there, saying so, and nothing is written."""
    refused: list[agentrt.RunStateError] = []

    def resume_racing_a_cancel(call: ToolCall) -> ToolResult:
        expire_lease(database, call.run_id)
        clock = FakeClock()

        def now() -> datetime:
            if clock.readings == 0:  # after the first look, before the transaction
                agentrt.cancel(agentrt.open_store(database), call.run_id, by="ops")
            return clock()

        other = agentrt.Driver(
            store=agentrt.open_store(database),
            agent=ScriptedAgent([Decision.complete({})]),
            policy=agentrt.default_policy(),
            tools=[RecordingTool("lookup", SideEffect.READ_ONLY)],
            lease_owner="taker",
            now=now,
        )
        try:
            other.resume_sync(call.run_id)
        except agentrt.RunStateError as exc:
            refused.append(exc)
        return ToolResult({"done": True})

    first = agentrt.Driver(
        store=agentrt.open_store(database),
        agent=ScriptedAgent([Decision.tool_call("lookup", {"x": 1}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("lookup", SideEffect.READ_ONLY, result=resume_racing_a_cancel)],
        lease_owner="first",
        lease_ttl=FIRST_TTL,
    )
    run = first.start_sync("look it up")
    (exc,) = refused
    assert type(exc) is agentrt.RunStateError
    assert str(exc) == (
        f"run {run.id} is CANCELLED: it ended while this resume was taking it over; "
        "nothing was resumed"
    )
    store = agentrt.open_existing(database)
    assert [e for e in store.list_events(run_id=run.id) if e.type == "lease.taken_over"] == []


def test_a_lease_renewed_between_the_first_look_and_the_transaction_is_refused_naming_the_run(
    database: str,
) -> None:
    """The first look finds the lease expired; the owner's heartbeat renews it before the
    takeover's transaction, which then refuses the live lease with `RunLeasedError`
    naming the run, the owner and the renewed expiry, and writes nothing."""
    refused: list[agentrt.RunStateError] = []
    renewed_to: list[datetime | None] = []

    def resume_racing_a_renewal(call: ToolCall) -> ToolResult:
        expire_lease(database, call.run_id, holder_elsewhere=False)
        clock = FakeClock()

        def now() -> datetime:
            if clock.readings == 0:  # after the first look, before the transaction: renew
                with agentrt.open_store(database) as store:
                    renewer = store.renewer(wall_clock)
                    assert renewer.renew(call.run_id, first.lease_owner, timedelta(hours=1))
                    renewer.close()
                    lease = store.lease(call.run_id)
                assert lease is not None
                renewed_to.append(lease.expires_at)
            return clock()

        other = agentrt.Driver(
            store=agentrt.open_store(database),
            agent=ScriptedAgent([Decision.complete({})]),
            policy=agentrt.default_policy(),
            tools=[RecordingTool("lookup", SideEffect.READ_ONLY)],
            lease_owner="taker",
            now=now,
        )
        try:
            other.resume_sync(call.run_id)
        except agentrt.RunStateError as exc:
            refused.append(exc)
        return ToolResult({"done": True})

    first = agentrt.Driver(
        store=agentrt.open_store(database),
        agent=ScriptedAgent([Decision.tool_call("lookup", {"x": 1}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("lookup", SideEffect.READ_ONLY, result=resume_racing_a_renewal)],
        lease_owner="first",
        lease_ttl=FIRST_TTL,
    )
    run = first.start_sync("look it up")
    assert run.status == "COMPLETED"  # the refused takeover took nothing from the owner
    (exc,) = refused
    assert type(exc) is agentrt.RunLeasedError
    (expires_at,) = renewed_to
    assert (exc.run_id, exc.owner, exc.expires_at) == (run.id, first.lease_owner, expires_at)
    assert expires_at is not None
    assert str(exc) == f"run {run.id} is leased by {first.lease_owner!r} until " + (
        expires_at.isoformat()
    )
    store = agentrt.open_existing(database)
    assert [e for e in store.list_events(run_id=run.id) if e.type == "lease.taken_over"] == []
    assert [s.status for s in store.list_steps(run.id)] == ["done", "done"]
