"""A Gate session's close against what another task of the loop still does (decision 0176).

Found by a streamed OpenAI Agents run that failed once under load with `LeaseLostError:
run ... is now leased by ''`: the stream's ending closed the session in a task of its own
while `async with run:` attached the run again to fail it. The lease is given back by
owner, and one gate has one owner, so:

- A session being closed keeps its run this gate's until its lease is given back: a
  second `attach` meanwhile is refused (no row changes), never let take the lease over
  as its own and then lose it to that release under its next step.
- A step claimed while another task closes the session is refused with
  `SessionClosedError`, whether the close came before or after the claim read the run;
  nothing of the step is recorded.
- A close waits for a commit of the session in flight (a step's failure): the failure
  is recorded under the lease, never lost to the close's own letting go.

Each race is made at will: a thread or a write held at the point the race needs.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from typing import Any

import pytest

import agentrt
from agentrt import SideEffect, _gate, _session, _step
from conftest import RecordingTool, event_types
from support.abandoned import end_abandoned
from support.gates import collected_while_held, hold_next_group, make_gate
from support.models import TINY_REQUEST, Replies
from support.rows import snapshot
from support.tools import rm_tool


def change_tool() -> RecordingTool:
    return RecordingTool("change", SideEffect.LOCAL_MUTATION)


def test_a_closing_session_keeps_its_run_until_its_lease_is_given_back(
    any_store: agentrt.Store, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = any_store
    releasing, proceed = threading.Event(), threading.Event()
    give_back = _gate.release_lease

    def held_release(config: Any, run_id: str, epoch: int) -> None:
        releasing.set()
        assert proceed.wait(10)
        give_back(config, run_id, epoch)

    monkeypatch.setattr(_gate, "release_lease", held_release)

    async def main() -> str:
        gate = make_gate(store, change_tool())
        session = await gate.begin("closed, then attached again")
        run_id = session.run_id
        closing = asyncio.create_task(session.close())
        try:
            assert await asyncio.to_thread(releasing.wait, 10)  # the close gives it back now
            before = snapshot(database)
            with pytest.raises(agentrt.RunStateError) as refused:
                await gate.attach(run_id)
            assert str(refused.value) == (
                f"run {run_id} already has a live session; a second one is refused"
            )
            assert snapshot(database) == before
        finally:
            proceed.set()
        await closing
        assert store.lease(run_id).owner == ""
        # Once given back, the same gate attaches and goes on under a lease of its own.
        again, verdict = await gate.attach(run_id)
        assert verdict is None
        step = await again.step()
        assert step is not None and step.index == 0
        assert store.lease(run_id).owner == gate.lease_owner
        await again.close()
        return run_id

    run_id = asyncio.run(main())
    assert store.get_run(run_id).status == "RUNNING"
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "deciding")]
    assert store.lease(run_id).owner == ""


@pytest.mark.parametrize("closed", ["before the claim read the run", "after it read the run"])
def test_a_step_claimed_while_another_task_closes_the_session_says_so(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch, closed: str
) -> None:
    store = any_store
    reading, proceed = threading.Event(), threading.Event()
    read = _step._moved_since
    read_first = closed.startswith("after")

    def held_read(session: Any) -> Any:
        moved = read(session) if read_first else None
        reading.set()
        assert proceed.wait(10)
        return moved if read_first else read(session)

    monkeypatch.setattr(_step, "_moved_since", held_read)

    async def main() -> str:
        session = await make_gate(store, change_tool()).begin("closed mid-claim")
        claiming = asyncio.create_task(session.step())
        try:
            assert await asyncio.to_thread(reading.wait, 10)
            await session.close()  # another task of the loop closes it
        finally:
            proceed.set()
        with pytest.raises(agentrt.SessionClosedError) as refused:
            await claiming
        assert str(refused.value) == (
            f"the gate session of run {session.run_id} was closed while its next step was "
            "claimed; nothing of that step was recorded"
        )
        return session.run_id

    run_id = asyncio.run(main())
    assert store.list_steps(run_id) == []
    assert store.get_run(run_id).status == "RUNNING"
    assert store.lease(run_id).owner == ""
    assert "step.started" not in event_types(store, run_id)


def test_a_close_waits_for_a_failure_being_recorded(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = any_store
    order: list[str] = []
    give_back = _gate.release_lease
    through = _session.write_through
    settled = getattr(_session.RunSession, "writes_settled", None)  # (absent before decision 0176)

    async def main() -> str:
        loop = asyncio.get_running_loop()
        held, go, parked = asyncio.Event(), asyncio.Event(), asyncio.Event()
        holding = [False]

        def released(config: Any, run_id: str, epoch: int) -> None:
            give_back(config, run_id, epoch)
            order.append("lease given back")
            loop.call_soon_threadsafe(go.set)  # (a close that did not wait: the write goes on)

        async def held_write(config: Any, commit: Any, fn: Any, in_tx: Any = None) -> Any:
            if holding[0]:  # the failure's commit, before its transaction begins
                holding[0] = False
                held.set()
                await go.wait()
                out = await through(config, commit, fn, in_tx)
                order.append("failure recorded")
                return out
            return await through(config, commit, fn, in_tx)

        async def waiting(self: Any) -> None:
            parked.set()
            assert settled is not None
            await settled(self)

        monkeypatch.setattr(_gate, "release_lease", released)
        monkeypatch.setattr(_session, "write_through", held_write)
        monkeypatch.setattr(_session.RunSession, "writes_settled", waiting, raising=False)

        session = await make_gate(store, change_tool()).begin("closed mid-failure")
        step = await session.step()
        assert step is not None
        holding[0] = True
        failing = asyncio.create_task(step.fail(RuntimeError("the model is unreachable")))
        await held.wait()
        closing = asyncio.create_task(session.close())
        # The close waits for the failure's commit, or gives the lease back under it.
        await asyncio.wait(
            [asyncio.ensure_future(parked.wait()), asyncio.ensure_future(go.wait())],
            return_when=asyncio.FIRST_COMPLETED,
        )
        go.set()
        run = await failing
        await closing
        assert (run.status, run.reason) == ("FAILED", "agent_error")
        return session.run_id

    run_id = asyncio.run(main())
    # Nothing to give back after it: the failure ended the run, and its lease with it.
    assert order == ["failure recorded"]
    run = store.get_run(run_id)
    assert (run.status, run.reason) == ("FAILED", "agent_error")
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "failed")]
    assert store.lease(run_id).owner == ""


def test_a_close_made_inside_a_commit_of_the_session_does_not_wait_for_it(
    any_store: agentrt.Store,
) -> None:
    """A hook that runs inside a commit (an after-commit probe) and closes the session: the
    close cannot wait for that commit to end (it never would), so it goes on at once."""
    store = any_store
    sessions: list[agentrt.GateSession] = []
    closed_at: list[str] = []

    async def probe(point: str, rs: object) -> None:
        if point == "step.started" and not closed_at:  # the denial's commit, still in flight
            closed_at.append(point)
            await asyncio.wait_for(sessions[0].close(), 10)

    async def main() -> tuple[str, agentrt.Verdict]:
        gate = make_gate(store, change_tool(), rm_tool(), probe=probe)
        session = await gate.begin("closed from inside a commit")
        sessions.append(session)
        step = await session.step()
        assert step is not None
        verdict = await step.propose(agentrt.Decision.tool_call("rm", {"x": 1}))
        return session.run_id, verdict

    run_id, verdict = asyncio.run(main())
    assert closed_at == ["step.started"]
    assert verdict.outcome == "denied"
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "failed")]
    assert store.get_run(run_id).status == "RUNNING"
    assert store.lease(run_id).owner == ""


def test_a_close_cut_short_while_it_waits_for_a_commit_still_stops_renewing_and_frees_the_run(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop ends (`asyncio.run` returning, a second Ctrl-C) while a close waits for
    another task's commit: every task is cancelled, the close's own too. The session must
    not go on renewing the lease of a run nobody drives, nor keep the run this gate's for
    good: as a crash leaves it, the lease lapses and the same gate attaches it again."""
    store = any_store
    through = _session.write_through
    sessions: list[agentrt.GateSession] = []
    gates: list[agentrt.Gate] = []
    pending: list[asyncio.Task[Any]] = []

    async def main() -> str:
        held, parked, never = asyncio.Event(), asyncio.Event(), asyncio.Event()
        holding = [False]
        settled = _session.RunSession.writes_settled

        async def held_write(config: Any, commit: Any, fn: Any, in_tx: Any = None) -> Any:
            if holding[0]:  # the failure's commit, held until the loop ends
                holding[0] = False
                held.set()
                await never.wait()
            return await through(config, commit, fn, in_tx)

        async def waiting(self: Any) -> None:
            parked.set()
            await settled(self)

        monkeypatch.setattr(_session, "write_through", held_write)
        monkeypatch.setattr(_session.RunSession, "writes_settled", waiting)
        gate = make_gate(store, change_tool())
        gates.append(gate)
        session = await gate.begin("closed as the loop ends")
        sessions.append(session)
        step = await session.step()
        assert step is not None
        holding[0] = True
        pending.append(asyncio.create_task(step.fail(RuntimeError("the model is unreachable"))))
        await held.wait()
        pending.append(asyncio.create_task(session.close()))
        await parked.wait()
        return session.run_id  # asyncio.run now cancels the failure and the close

    run_id = asyncio.run(main())
    monkeypatch.undo()
    heartbeat = sessions[0]._rs.heartbeat
    assert heartbeat is not None and heartbeat._stop.is_set()  # no longer renewed

    async def again() -> tuple[str, int | None]:
        session, _ = await gates[0].attach(run_id)  # not "already has a live session"
        step = await session.step()
        await session.close()
        return session.run_id, None if step is None else step.index

    assert asyncio.run(again()) == (run_id, 0)
    assert store.get_run(run_id).status == "RUNNING"
    assert store.lease(run_id).owner == ""


def test_a_claim_refused_because_a_close_overtook_it_is_not_recorded_by_that_close(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim's read returns after `close()` marked the session closed but before the
    close gave the lease back (its own task, a loop turn later): the claim, kept in memory
    for the step's first commit, is refused, "nothing of that step was recorded". The close
    then commits what the session kept (`LEFT_OPEN`): it must not be that claim. Made
    deterministic with asyncio's FIFO: the read is parked on an event of the loop."""
    store = any_store
    read_gate = asyncio.Event()

    async def gated_run_io(fn: Any) -> Any:
        await read_gate.wait()
        return fn()  # the read, done by the time the claim's task resumes

    monkeypatch.setattr(_step, "run_io", gated_run_io)

    async def main() -> str:
        session = await make_gate(store, change_tool()).begin("closed as the claim returns")
        claiming = asyncio.create_task(session.step())
        await asyncio.sleep(0)  # the claim waits for its read
        closing = asyncio.create_task(session.close())  # marks closed first, then gives back
        read_gate.set()  # the claim's read returns after the close's first turn
        with pytest.raises(agentrt.SessionClosedError) as refused:
            await claiming
        assert str(refused.value) == (
            f"the gate session of run {session.run_id} was closed while its next step was "
            "claimed; nothing of that step was recorded"
        )
        await closing
        return session.run_id

    run_id = asyncio.run(main())
    assert store.list_steps(run_id) == []
    assert store.get_run(run_id).step_count == 0
    assert "step.started" not in event_types(store, run_id)
    assert store.lease(run_id).owner == ""


def test_a_close_from_another_thread_returns_once_a_commit_in_flight_there_ends(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocking code: one thread's `fail_sync` is committing (its own loop) when another
    thread's `close_sync` (a loop of its own) waits for that commit. The commit's end must
    wake the close on its loop: set on the other thread, the close's future was never seen
    by its loop, asleep with nothing else to do, and `close_sync` never returned."""
    store = any_store
    through = _session.write_through
    settled = _session.RunSession.writes_settled
    holding, held, go, parked = [False], threading.Event(), threading.Event(), threading.Event()

    async def held_write(config: Any, commit: Any, fn: Any, in_tx: Any = None) -> Any:
        if holding[0]:  # the failure's commit, before its transaction begins
            holding[0] = False
            held.set()
            assert go.wait(10)
        return await through(config, commit, fn, in_tx)

    async def waiting(self: Any) -> None:
        parked.set()
        await settled(self)

    monkeypatch.setattr(_session, "write_through", held_write)
    monkeypatch.setattr(_session.RunSession, "writes_settled", waiting)
    session = make_gate(store, change_tool()).begin_sync("closed from another thread")
    step = session.step_sync()
    assert step is not None
    holding[0] = True
    failed: list[agentrt.Run] = []
    failing = threading.Thread(
        target=lambda: failed.append(step.fail_sync(RuntimeError("the model is unreachable")))
    )
    failing.start()
    assert held.wait(10)
    closed = threading.Event()

    def close() -> None:
        session.close_sync()
        closed.set()

    closing = threading.Thread(target=close, daemon=True)
    closing.start()
    try:
        assert parked.wait(10)  # the close waits for the failure's commit
    finally:
        go.set()
    failing.join(10)
    assert closed.wait(10), "close_sync never returned"
    closing.join(10)
    assert [(r.status, r.reason) for r in failed] == [("FAILED", "agent_error")]
    run = store.get_run(session.run_id)
    assert (run.status, run.reason) == ("FAILED", "agent_error")
    assert [(s.index, s.status) for s in store.list_steps(session.run_id)] == [(0, "failed")]
    assert store.lease(session.run_id).owner == ""


def test_a_claim_on_one_thread_refused_for_a_close_on_another_is_not_recorded_by_that_close(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocking code: `step_sync` on one thread has kept its claim (in memory, for the step's
    first commit) when `close_sync` on another thread runs to its end, before the claim
    looks whether the session was closed. The claim is refused, "nothing of that step was
    recorded": the close must not have committed that claim (`LEFT_OPEN`), or the record
    holds step 0 `deciding` while the caller was told nothing was recorded."""
    store = any_store
    claim = _step.begin_step
    closes: list[threading.Thread] = []

    async def claimed_then_closed(rs: Any, *, read_first: bool) -> Any:
        step = await claim(rs, read_first=read_first)
        assert step is not None and rs.has_deferred  # the claim is kept, not yet checked
        closing = threading.Thread(target=session.close_sync)
        closes.append(closing)
        closing.start()
        closing.join(10)  # the other thread's close ran to its end meanwhile
        return step

    monkeypatch.setattr(_step, "begin_step", claimed_then_closed)
    session = make_gate(store, change_tool()).begin_sync("closed from another thread mid-claim")
    run_id = session.run_id
    with pytest.raises(agentrt.SessionClosedError) as refused:
        session.step_sync()
    assert str(refused.value) == (
        f"the gate session of run {run_id} was closed while its next step was claimed; "
        "nothing of that step was recorded"
    )
    [closing] = closes
    assert not closing.is_alive()
    assert store.list_steps(run_id) == []
    assert store.get_run(run_id).step_count == 0
    assert "step.started" not in event_types(store, run_id)
    assert store.get_run(run_id).status == "RUNNING"
    assert store.lease(run_id).owner == ""


def test_a_close_waits_for_a_model_attempts_outcome_waited_out_past_a_busy_store(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model attempt's outcome is known once the model answered: its write waits out a
    busy store while the lease is this session's (`write_outcome`, decision 0012). A close
    that comes between two tries of that write must wait for it, as for any write in
    flight: given back meanwhile, the lease is not this session's at the next busy
    refusal, and the outcome is dropped (`LeaseLostError`), the attempt left dispatched.
    The store is made busy for the first two tries (nothing written, as the store's
    contract says of `StoreBusyError`); the close comes while the first refusal is waited
    out."""
    store = any_store
    order: list[str] = []
    give_back = _gate.release_lease
    through = _session.write_through
    settled = _session.RunSession.writes_settled
    wait_out = _session.RunSession._wait_out_busy
    busy_left = [2]

    async def main() -> tuple[str, agentrt.ModelResponse]:
        loop = asyncio.get_running_loop()
        waited, go, parked, released = (asyncio.Event() for _ in range(4))
        returned = [False]

        def releasing(config: Any, run_id: str, epoch: int) -> None:
            give_back(config, run_id, epoch)
            order.append("lease given back")
            loop.call_soon_threadsafe(released.set)

        async def busy_write(config: Any, commit: Any, fn: Any, in_tx: Any = None) -> Any:
            if commit.name == "model settled" and busy_left[0]:
                busy_left[0] -= 1
                raise agentrt.StoreBusyError("the database is busy (test); nothing was written")
            out = await through(config, commit, fn, in_tx)
            if commit.name == "model settled":
                order.append("attempt settled")
            return out

        async def held_wait(self: Any, busy: Any, since: Any) -> None:
            await wait_out(self, busy, since)
            if not waited.is_set():  # the first refusal waited out: the retry is held
                waited.set()
                await go.wait()

        async def waiting(self: Any) -> None:
            parked.set()
            await settled(self)
            returned[0] = True

        monkeypatch.setattr(_gate, "release_lease", releasing)
        monkeypatch.setattr(_session, "write_through", busy_write)
        monkeypatch.setattr(_session.RunSession, "_wait_out_busy", held_wait)
        monkeypatch.setattr(_session.RunSession, "writes_settled", waiting)

        session = await make_gate(store, change_tool(), model=Replies()).begin("asked, closed")
        step = await session.step()
        assert step is not None and step.model is not None
        asking = asyncio.create_task(step.model.generate(TINY_REQUEST))
        await waited.wait()
        closing = asyncio.create_task(session.close())
        await parked.wait()
        if returned[0]:  # the close did not wait for the outcome: let it give the lease back
            await released.wait()
        go.set()
        reply = await asking
        await closing
        return session.run_id, reply

    run_id, reply = asyncio.run(main())
    assert reply.text == "ok"
    assert busy_left == [0]
    assert order == ["attempt settled", "lease given back"]
    [call] = store.list_model_calls(run_id)
    assert (call.attempt, call.status, call.input_tokens) == (1, "ok", 1_000_000)
    assert store.get_run(run_id).model_calls == 1
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "deciding")]
    assert store.lease(run_id).owner == ""


@pytest.mark.parametrize("gone", ["before the close", "while the close waits"])
def test_a_close_returns_though_a_write_of_the_session_was_abandoned_with_its_loop(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch, gone: str
) -> None:
    """The consumer's own event loop is closed while a write of the session is in flight
    there (a step's failure, its commit in the store's committer): nothing will ever resume
    that write, nor end its count. A close on another loop, made after that or waiting for
    the write already, must not wait for it for ever: the write's loop is gone, and the
    close goes on as after a crash of that loop (the commit, refused, wrote nothing; the
    lease is given back). A close that waits looks at the writes' loops now and then (a
    closed loop tells nobody): made often here, so the test does not sit out the default."""
    store = any_store
    settled = _session.RunSession.writes_settled
    parked = threading.Event()

    async def waiting(self: Any) -> None:
        parked.set()
        await settled(self)

    monkeypatch.setattr(_session.RunSession, "writes_settled", waiting)
    monkeypatch.setattr(_session, "_LOOPS_LOOKED_AT_S", 0.01)
    gate = make_gate(store, change_tool())
    session = gate.begin_sync("its loop closed under a write")
    run_id = session.run_id
    step = session.step_sync()
    assert step is not None
    entered, go = hold_next_group(store, commit="never")
    theirs = asyncio.new_event_loop()
    failing = theirs.create_task(step.fail(RuntimeError("the model is unreachable")))
    assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
    go.set()
    closed = threading.Event()

    def close() -> None:
        session.close_sync()
        closed.set()

    closing = threading.Thread(target=close, daemon=True)
    if gone == "before the close":
        theirs.close()  # the consumer's loop, closed under the failure's commit
        closing.start()
    else:
        closing.start()
        assert parked.wait(30)  # the close waits for the failure's commit
        theirs.close()
    assert not failing.done()
    try:
        assert closed.wait(30), "the close waited for a write whose loop is gone"
        assert store.lease(run_id).owner == ""
        assert store.get_run(run_id).status == "RUNNING"
        assert store.list_steps(run_id) == []
        # The run is free again: the same gate attaches it and claims step 0 afresh.
        again, verdict = gate.attach_sync(run_id)
        assert verdict is None
        nxt = again.step_sync()
        assert nxt is not None and nxt.index == 0
        again.close_sync()
        assert store.verify_events().intact
    finally:
        end_abandoned(failing)  # the abandoned write, ended here (its loop is gone)


def test_a_write_abandoned_with_its_loop_is_not_made_under_the_same_gates_newer_lease(
    any_store: agentrt.Store,
) -> None:
    """A close does not wait for a write whose loop was closed under it (decision 0188), so
    the run is this gate's to attach again while that write still waits in the store's
    committer. The attach takes the lease over as the same owner (epoch 2) and claims
    step 0 afresh; the abandoned write, made after, is the closed session's (epoch 1): it
    must not be recorded under the newer lease (step 0 failed by a session that let go),
    nor cost the newer session its claim."""
    store = any_store
    gate = make_gate(store, change_tool())
    session = gate.begin_sync("its loop closed under a write")
    run_id = session.run_id
    step = session.step_sync()
    assert step is not None
    entered, go = hold_next_group(store, commit="after")
    theirs = asyncio.new_event_loop()
    failing = theirs.create_task(step.fail(RuntimeError("the model is unreachable")))
    try:
        assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
        theirs.close()  # the consumer's loop, closed under the failure's commit
        session.close_sync()  # not waiting for the abandoned write: the lease given back
        assert store.lease(run_id).owner == ""
        again, verdict = gate.attach_sync(run_id)  # the same gate: epoch 2, same owner
        assert verdict is None
        assert (store.lease(run_id).owner, store.lease(run_id).epoch) == (gate.lease_owner, 2)
        written = event_types(store, run_id)
        claimed = again.step_sync()
        assert claimed is not None and claimed.index == 0
        go.set()  # the abandoned write reaches the store now
        committer = _session.committer_for(store)
        committer.submit(lambda tx: None).result(30)  # it has been made (or refused) by now
        assert event_types(store, run_id) == written
        assert store.list_steps(run_id) == []
        claimed.fail_sync(RuntimeError("the newer session's own failure"))
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "failed")]
        again.close_sync()
        assert store.verify_events().intact
    finally:
        go.set()
        end_abandoned(failing)  # the abandoned write, ended here (its loop is gone)


def test_a_write_abandoned_with_its_loop_collected_while_its_session_is_locked_is_not_a_deadlock(
    any_store: agentrt.Store,
) -> None:
    """The coroutine of a write abandoned with its loop is closed when the cycle collector
    finds it, on whatever thread allocates then: one that holds the session's `_settling`
    lock at that moment (a close looking at the writes in flight, a write counting itself)
    must not wait for that lock a second time, for ever. The collection is made here under
    the lock, as one may come at any allocation made under it."""
    store = any_store
    gate = make_gate(store, change_tool())
    session = gate.begin_sync("its loop closed under a write, then collected")
    rs = session._rs
    step = session.step_sync()
    assert step is not None
    gc.disable()  # the collection comes where the test makes it, not before
    try:
        entered, go = hold_next_group(store, commit="never")
        theirs = asyncio.new_event_loop()
        failing = theirs.create_task(step.fail(RuntimeError("the model is unreachable")))
        assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
        theirs.close()  # the consumer's loop, closed under the failure's commit
        go.set()
        _session.committer_for(store).submit(lambda tx: None).result(30)  # the refusal was given
        task = weakref.ref(failing)
        del failing, step
        collected_while_held(rs._settling, task, "write")
    finally:
        gc.enable()
    # The refused failure's kept claim went with its coroutine, closed (its commit's outcome
    # never learnt, as a cancel's): the close records nothing of the step, as a crash before
    # the step's first commit leaves it, and gives the lease back.
    session.close_sync()
    assert store.lease(session.run_id).owner == ""
    assert store.list_steps(session.run_id) == []


def test_two_claims_on_two_threads_at_once_one_is_refused(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocking code: `step_sync` on two threads of one session at once, both come to the
    session's lock before either took it. One step is open at a time: the
    second claim is refused, nothing changed; the first claims step 0 and goes on (two claims
    of step 0 kept for one commit would refuse every commit of the session after)."""
    store = any_store
    session = make_gate(store, change_tool()).begin_sync("claimed twice at once")
    claim = _step.begin_step
    second_ended = threading.Event()
    claimers: list[str] = []

    class BothAtTheLock:
        """The session's close lock, first taken by each claim once both have come to it."""

        def __init__(self, lock: Any) -> None:
            self.lock, self.met, self.come = lock, threading.Barrier(2, timeout=10), set()

        def __enter__(self) -> None:
            name = threading.current_thread().name
            if name in ("a", "b") and name not in self.come:
                self.come.add(name)
                self.met.wait()
            self.lock.acquire()

        def __exit__(self, *exc: object) -> None:
            self.lock.release()

    async def first_held(rs: Any, *, read_first: bool) -> Any:
        claimers.append(threading.current_thread().name)
        if len(claimers) == 1:  # the first claim is decided once the second has ended
            assert await asyncio.to_thread(second_ended.wait, 10)
        return await claim(rs, read_first=read_first)

    monkeypatch.setattr(session, "_close_lock", BothAtTheLock(session._close_lock))
    monkeypatch.setattr(_step, "begin_step", first_held)
    outcomes: dict[str, object] = {}

    def claiming() -> None:
        try:
            outcomes[threading.current_thread().name] = session.step_sync()
        except agentrt.RunStateError as refused:
            outcomes[threading.current_thread().name] = refused
            second_ended.set()
        else:
            if len(outcomes) == 1:
                second_ended.set()

    threads = [threading.Thread(target=claiming, name=name) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(claimers) == 1
    [first] = claimers
    [second] = {"a", "b"} - {first}
    refused, claimed = outcomes[second], outcomes[first]
    assert isinstance(refused, agentrt.RunStateError)
    assert str(refused) == (
        f"a step of run {session.run_id} is being claimed by another call; one open step at a time"
    )
    assert isinstance(claimed, agentrt.GateStep) and claimed.index == 0
    monkeypatch.undo()
    claimed.fail_sync(RuntimeError("the model is unreachable"))
    assert [(s.index, s.status) for s in store.list_steps(session.run_id)] == [(0, "failed")]
    session.close_sync()
