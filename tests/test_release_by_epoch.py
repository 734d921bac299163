"""A late release gives up only the lease it was granted, never the same owner's newer one.

A lease is given back by its owner when a loop or a session stops (decision 0036), in a
transaction of its own, after the session decided to let go. One Gate (and a Driver, through
its Gate) has one owner string for all its sessions, so between that decision and the
release's commit the lease may lapse and be granted again to the same owner: the same gate
attaching again, or the same driver resuming. A release matching the owner alone then
cleared that newer lease (owner `''`): the newer session's next write met `LeaseLostError
... leased by ''` and its run was left to anybody's takeover under it.

Here each entry that gives a lease back (a Gate session's close, a Driver loop that stopped,
a takeover whose interruption contract was cut short, the resume of an approved waiting run
whose judgement failed, a Gate `begin` whose start failed) meets such a re-grant at its
release: the lease lapses (its stored expiry moved into the past, the one way on PostgreSQL,
whose server clock judges it) and the same owner is granted it again, epoch + 1, as its own
takeover or resume writes it. The release must then change nothing (decision 0187).

SQLite and PostgreSQL (`any_store`, `database`).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect, _gate, _resume_waiting, _session, _takeover
from agentrt._clock import wall_clock
from agentrt._errors import StoreError, commit_unknown
from agentrt._lease import holder_json
from agentrt._records import RunStatus
from agentrt.scripted import ScriptedAgent
from conftest import EPOCH, FakeClock, Ids, RecordingTool, event_types
from support.approvals import approved_run
from support.gates import make_gate
from support.leases import expire_lease

TTL = timedelta(hours=1)


class _Stop(BaseException):
    """What stops a loop or an attach half-way (as a Ctrl-C would, but not one)."""


class _Raises:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def decide(self, input: Any) -> Decision:
        raise self.error

    def evaluate(self, request: Any, view: Any) -> Any:
        raise self.error

    policy_id = "raising/1"


class _AllowAll:
    policy_id = "allow-all/1"

    def evaluate(self, request: Any, view: Any) -> Any:
        return agentrt.PolicyDecision.allow()


def lapse_and_regrant(store: Any, database: str, run_id: str, owner: str) -> tuple[int, datetime]:
    """The run's lease lapses, and `owner` is granted it again (epoch + 1): a RUNNING run as
    its own takeover takes it (`take_over`), a waiting one as its own resume holds it (the
    next epoch) and leaves waiting at that epoch (`hold_waiting`, `leave_waiting`). Returns
    the new epoch and expiry."""
    expire_lease(database, run_id, holder_elsewhere=False)
    with store.transaction() as tx:
        lease = tx.lock_lease(run_id)
        assert lease is not None and lease.held_by(owner)
        now = tx.lease_now(wall_clock)
        assert lease.expired_at(now)
        expires = now + TTL
        if lease.status == RunStatus.RUNNING:
            taken = tx.take_over(
                run_id,
                owner=owner,
                expires_at=expires,
                holder=holder_json(),
                previous=lease,
                proof={"by": "lease expired"},
                now=EPOCH,
            )
            return taken.epoch, expires
        assert lease.status == RunStatus.WAITING_FOR_APPROVAL
        held = tx.hold_waiting(
            run_id, owner=owner, expires_at=expires, holder=holder_json(), previous=lease
        )
        approval = tx.approvals_of_run(run_id)[-1]
        leased = tx.leave_waiting(
            run_id,
            approval.id,
            owner=owner,
            epoch=held.epoch,
            expires_at=expires,
            holder=holder_json(),
            now=EPOCH,
        )
        return leased.epoch, expires


def late(
    monkeypatch: pytest.MonkeyPatch, module: Any, store: Any, database: str
) -> list[tuple[str, int, datetime]]:
    """Make `module`'s `release_lease` meet a lapse and a re-grant to the releasing owner just
    before it runs; what was re-granted is listed (owner, epoch, expiry)."""
    release = module.release_lease
    granted: list[tuple[str, int, datetime]] = []

    def regranted_first(config: Any, run_id: str, *args: Any, **kw: Any) -> Any:
        epoch, expires = lapse_and_regrant(store, database, run_id, config.owner)
        granted.append((config.owner, epoch, expires))
        return release(config, run_id, *args, **kw)

    monkeypatch.setattr(module, "release_lease", regranted_first)
    return granted


def assert_still_leased(store: agentrt.Store, run_id: str, granted: list[Any]) -> None:
    """The newer lease stands as granted: same owner, its epoch, its expiry."""
    ((owner, epoch, expires),) = granted
    lease = store.lease(run_id)
    assert (lease.owner, lease.epoch, lease.expires_at) == (owner, epoch, expires)


def test_a_gate_sessions_late_close_leaves_the_same_gates_newer_lease(
    any_store: agentrt.Store, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = any_store
    gate = make_gate(store, RecordingTool("change", SideEffect.LOCAL_MUTATION))
    session = gate.begin_sync("closed late")
    granted = late(monkeypatch, _gate, store, database)
    session.close_sync()
    assert [(owner, epoch) for owner, epoch, _ in granted] == [(gate.lease_owner, 2)]
    assert_still_leased(store, session.run_id, granted)
    assert event_types(store, session.run_id) == ["run.created", "run.started", "lease.taken_over"]
    assert store.get_run(session.run_id).status == "RUNNING"


def test_a_driver_loop_that_stopped_leaves_the_same_drivers_newer_lease(
    any_store: agentrt.Store, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = any_store
    driver = agentrt.Driver(
        store=store, agent=_Raises(_Stop()), policy=_AllowAll(), now=FakeClock(), new_id=Ids()
    )
    granted = late(monkeypatch, _session, store, database)
    with pytest.raises(_Stop):
        driver.start_sync("stops at its first decision")
    (run,) = store.list_runs()
    assert [(owner, epoch) for owner, epoch, _ in granted] == [(driver.lease_owner, 2)]
    assert_still_leased(store, run.id, granted)
    assert event_types(store, run.id) == ["run.created", "run.started", "lease.taken_over"]


def test_a_takeover_cut_short_leaves_the_same_drivers_newer_lease(
    any_store: agentrt.Store, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = any_store
    tool = RecordingTool("note", SideEffect.LOCAL_MUTATION)

    def stop_at_start(event: Any) -> None:
        if event.type == "step.started":  # after the claim and the tool's start committed
            raise _Stop

    first = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("note", {"x": 1})]),
        policy=_AllowAll(),
        tools=[tool],
        observer=stop_at_start,
        now=FakeClock(),
        new_id=Ids("a"),
    )
    with pytest.raises(_Stop):
        first.start_sync("left executing")
    (run,) = store.list_runs()
    assert [s.status for s in store.list_steps(run.id)] == ["executing"]
    assert store.lease(run.id).owner == ""
    reconciling = asyncio.Event()

    async def reconcile(view: Any) -> Any:
        reconciling.set()
        await asyncio.Event().wait()  # until the caller gives up

    resumer = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.complete({})]),
        policy=_AllowAll(),
        tools=[tool],
        reconcile=reconcile,
        now=FakeClock(),
        new_id=Ids("b"),
        lease_ttl=TTL,
    )
    granted = late(monkeypatch, _takeover, store, database)

    async def give_up() -> None:
        resuming = asyncio.ensure_future(resumer.resume(run.id))
        await reconciling.wait()  # taken over (epoch 2), its reconcile asked
        resuming.cancel()
        with pytest.raises(asyncio.CancelledError):
            await resuming

    asyncio.run(give_up())
    assert [(owner, epoch) for owner, epoch, _ in granted] == [(resumer.lease_owner, 3)]
    assert_still_leased(store, run.id, granted)
    assert tool.calls == []
    # The resumer took a lease given back (no `lease.taken_over`), then was granted it again.
    assert event_types(store, run.id)[-2:] == ["step.interrupted", "lease.taken_over"]
    regrant = store.list_events(run_id=run.id, limit=1000)[-1].payload
    assert (regrant["previous_owner"], regrant["owner"], regrant["epoch"]) == (
        resumer.lease_owner,
        resumer.lease_owner,
        3,
    )


def test_a_resume_of_a_waiting_run_cut_short_leaves_the_same_gates_newer_lease(
    any_store: agentrt.Store, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = any_store
    _, run, push, _ = approved_run(store)
    gate = make_gate(store, push, policy=_Raises(_Stop()), ids=Ids("b"), lease_ttl=TTL)
    granted = late(monkeypatch, _resume_waiting, store, database)
    with pytest.raises(_Stop):
        gate.attach_sync(run.id)  # held (epoch 2), then its judgement raises
    assert [(owner, epoch) for owner, epoch, _ in granted] == [(gate.lease_owner, 3)]
    assert_still_leased(store, run.id, granted)
    assert store.get_run(run.id).status == "RUNNING"
    assert push.calls == []
    assert event_types(store, run.id)[-1] == "run.resumed"


def test_a_begin_that_failed_leaves_the_lease_its_gate_took_back_meanwhile(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No hand-made re-grant: a `begin` whose start failed frees the run for its gate, then
    gives the lease back; the same gate attaching the run meanwhile takes the lease over as
    its own (epoch 2), and must keep it."""
    store = any_store
    run_id = "c" * 32
    stops = [True]

    def stop_once(event: Any) -> None:
        if event.type == "run.created" and stops:
            stops.clear()
            raise _Stop

    gate = make_gate(store, RecordingTool("change", SideEffect.LOCAL_MUTATION), observer=stop_once)
    give_back = _gate.give_back_lease

    async def main() -> None:
        giving_back, attached = asyncio.Event(), asyncio.Event()

        async def held_give_back(*args: Any, **kw: Any) -> None:
            giving_back.set()
            await attached.wait()
            await give_back(*args, **kw)

        monkeypatch.setattr(_gate, "give_back_lease", held_give_back)
        beginning = asyncio.ensure_future(gate.begin("fails at its start", run_id=run_id))
        await giving_back.wait()
        session, verdict = await gate.attach(run_id)  # its own lease: taken over
        assert verdict is None
        attached.set()
        with pytest.raises(_Stop):
            await beginning
        lease = store.lease(run_id)
        assert (lease.owner, lease.epoch) == (gate.lease_owner, 2)
        step = await session.step()  # the session goes on under the lease it took
        assert step is not None and step.index == 0
        await session.close()

    asyncio.run(main())
    assert store.lease(run_id).owner == ""
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "deciding")]
    assert event_types(store, run_id) == [
        "run.created",
        "run.started",
        "lease.taken_over",
        "run.resumed",
        "step.started",
    ]


@pytest.mark.parametrize("unknown", [False, True], ids=["not-made", "outcome-unknown"])
def test_a_hold_whose_resume_commit_failed_is_given_back_by_the_epoch_it_holds(
    any_store: agentrt.Store, unknown: bool
) -> None:
    """The commit that leaves waiting fails: the session gives back the hold by the epoch the
    record holds: the hold's (the commit keeps it, decision 0204; before, the commit took a
    new one, rolled back with it), or, when the commit's outcome is unknown, the epoch the
    record shows under this owner."""
    store = any_store
    _, run, push, approval = approved_run(store)

    def failing(point: str, session: Any) -> None:
        if point == "run.resumed":
            raise commit_unknown("disk I/O error") if unknown else StoreError("disk I/O error")

    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.complete({})]),
        policy=agentrt.default_policy(),
        tools=[push],
        probe_in_tx=failing,
        now=FakeClock(),
        new_id=Ids("b"),
    )
    with pytest.raises(StoreError, match=r"^disk I/O error$"):
        driver.resume_sync(run.id)
    assert push.calls == []
    assert store.get_run(run.id).status == "WAITING_FOR_APPROVAL"
    assert store.get_approval(run.id, approval.id).status == "approved"
    lease = store.lease(run.id)
    assert (lease.owner, lease.expires_at, lease.epoch) == ("", None, 2)  # the hold's
