"""Three edges of a Gate session and its Driver left open by decision 0209 (decision 0216).

- A claim (`step()`) whose event loop was closed under it while its task stays referenced:
  nothing will ever resume it, and its mark must not refuse a claim from a live loop for
  the session's life; nor may the abandoned claim, closed later, take back another's mark.
- A step's first model call cancelled (not closed) while its dispatch commit, which carries
  the step's kept claim, was queued or refused: the session must not go on believing in a
  step the record does not hold (a model call recorded and charged under it).
- A Driver cancelled, its loop closed while the cancel gave its lease back, the loop's
  coroutine closed (as the collector closes it): `then` is told, so the run is not left
  this driver's for good.

Every race is ordered by events or made by hand (a loop closed, a commit held), no clock.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from typing import Any

import pytest

import agentrt
from agentrt import Decision, Limits, SideEffect, _session, _step
from conftest import FakeClock, Ids, RecordingTool, event_types
from support.abandoned import end_abandoned, end_abandoned_on
from support.gates import collected_while_held, hold_next_group, make_gate
from support.models import TINY_REQUEST, Replies
from support.tools import read_tool


def change_tool() -> RecordingTool:
    return RecordingTool("change", SideEffect.LOCAL_MUTATION)


def _read_held(monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[Any]]:
    """Patch the claim's status read: each read in flight is listed (`reached`, the loop's
    future set once it is) and waits on a future of its loop (`answers`), answered only if
    the test sets it."""
    reached: list[Any] = []
    answers: list[Any] = []
    real = _step.run_io

    async def read_held(fn: Any) -> Any:
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        answers.append(answer)
        reached.append(loop)
        await answer
        return await real(fn)

    monkeypatch.setattr(_step, "run_io", read_held)
    return reached, answers


def _run_until(loop: asyncio.AbstractEventLoop, done: Any) -> None:
    """Run `loop` one callback round at a time until `done()`, for a state the loop reaches
    in a few rounds with no I/O awaited (bounded)."""
    for _ in range(1000):
        if done():
            return
        loop.run_until_complete(asyncio.sleep(0))
    raise AssertionError("never reached")


def test_a_claim_whose_loop_was_closed_while_its_task_is_kept_does_not_refuse_a_live_claim(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The consumer's loop is closed under a `step()`'s status read, its task kept
    referenced (never collected): the claim can never complete. A claim from a live loop
    is then made (before: refused "being claimed by another call" until a close); the
    abandoned claim, closed later, changes nothing of the step claimed since; the step is
    recorded once, its call run once."""
    store = any_store
    read = read_tool()
    gate = make_gate(store, read)
    session = gate.begin_sync("its loop closed under a claim, its task kept")
    run_id = session.run_id
    reached, _ = _read_held(monkeypatch)
    theirs = asyncio.new_event_loop()
    claiming = theirs.create_task(session.step())
    _run_until(theirs, lambda: reached)
    theirs.close()  # the consumer's loop, closed under the claim's status read
    monkeypatch.undo()
    assert not claiming.done()  # kept referenced: nothing closes its coroutine
    step = session.step_sync()
    assert step is not None and step.index == 0
    end_abandoned(claiming)  # the abandoned claim, closed at last: nothing changes
    assert session.current() is step
    with pytest.raises(agentrt.RunStateError, match=r"step 0 of run .* is still open"):
        session.step_sync()
    verdict = step.propose_sync(Decision.tool_call("read", {"x": 1}))
    assert verdict.outcome == "allowed"
    step.execute_sync()
    session.close_sync()
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "done")]
    assert [c.args for c in read.calls] == [{"x": 1}]
    assert store.lease(run_id).owner == ""
    assert store.verify_events().intact


def test_two_claims_never_proceed_together_past_a_claim_whose_loop_was_closed(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claim A's loop is closed under its read (task kept); claim B, from a live loop, takes
    the mark and waits in its own read; a third claim is refused while B claims, and still
    after A's coroutine is closed (A takes back only its own mark, never B's). B then opens
    step 0, and the record holds one step."""
    store = any_store
    gate = make_gate(store, change_tool())
    session = gate.begin_sync("two claims past an abandoned one")
    run_id = session.run_id
    reached, answers = _read_held(monkeypatch)
    loop_a = asyncio.new_event_loop()
    claim_a = loop_a.create_task(session.step())
    _run_until(loop_a, lambda: len(reached) == 1)
    loop_a.close()
    loop_b = asyncio.new_event_loop()
    try:
        claim_b = loop_b.create_task(session.step())
        _run_until(loop_b, lambda: len(reached) == 2)
        with pytest.raises(agentrt.RunStateError, match="being claimed by another call"):
            session.step_sync()
        end_abandoned(claim_a)  # the abandoned claim ends: B's mark stays
        with pytest.raises(agentrt.RunStateError, match="being claimed by another call"):
            session.step_sync()
        answers[1].set_result(None)
        step = loop_b.run_until_complete(claim_b)
    finally:
        loop_b.close()
    monkeypatch.undo()
    assert step is not None and step.index == 0 and session.current() is step
    with pytest.raises(agentrt.RunStateError, match="is still open"):
        session.step_sync()
    session.close_sync()
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "deciding")]
    assert store.verify_events().intact


@pytest.mark.parametrize("when", ["refused", "queued"])
def test_a_first_model_call_cancelled_while_its_dispatch_commit_was_not_made_keeps_the_claim(
    any_store: agentrt.Store, when: str
) -> None:
    """A step's first model call carries the step's kept claim in its dispatch commit. The
    call is cancelled while that commit is held in the store and then refused (`refused`,
    nothing written), or while it waits in the committer's queue behind another group
    (`queued`). Before: the claim went with the commit, the session went on believing in
    step 0, and the step's next model call was recorded and charged under a step the
    record did not hold. Now the cancelled dispatch ends as an uncancelled one would
    (refused: the claim kept for the next commit; made: recorded) before the cancel goes
    on, and the session stays usable."""
    store = any_store
    gate = make_gate(store, change_tool(), model=Replies())
    session = gate.begin_sync("a first model call cancelled in its dispatch")
    run_id = session.run_id
    step = session.step_sync()
    assert step is not None and step.model is not None
    committer = _session.committer_for(store)
    entered, go = hold_next_group(store, commit="never" if when == "refused" else "before")
    if when == "queued":
        ahead = threading.Thread(target=lambda: committer.submit(lambda tx: None).result(30))
        ahead.start()  # another group, held in the store: the dispatch queues behind it
        assert entered.wait(30)
    loop = asyncio.new_event_loop()
    try:
        asking = loop.create_task(step.model.generate(TINY_REQUEST))
        if when == "refused":  # the dispatch's own group, held in the store
            assert loop.run_until_complete(loop.run_in_executor(None, entered.wait, 30))
        else:
            _run_until(loop, lambda: _held(committer, 1))
        asking.cancel()
        go.set()
        loop.run_until_complete(asyncio.wait([asking]))
        assert asking.cancelled()
    finally:
        loop.close()
    if when == "queued":
        ahead.join(30)
    committer.submit(lambda tx: None).result(30)  # every commit before it ended
    if when == "refused":
        assert (store.list_steps(run_id), store.list_model_calls(run_id)) == ([], [])
    else:
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "deciding")]
    answer = asyncio.run(step.model.generate(TINY_REQUEST))
    assert answer.text == "ok"
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "deciding")]
    calls = [(c.step_id, c.status) for c in store.list_model_calls(run_id)]
    if when == "refused":
        assert calls == [(step.id, "ok")]
    else:  # the cancelled attempt was dispatched, never sent: left as a crash leaves it
        assert calls == [(step.id, "dispatched"), (step.id, "ok")]
    verdict = step.propose_sync(Decision.complete("done"))
    assert verdict.outcome == "ended"
    session.close_sync()
    assert store.get_run(run_id).status == "COMPLETED"
    assert store.verify_events().intact


def test_a_first_model_call_cancelled_while_its_dispatch_is_rolled_back_breaks_the_session(
    any_store: agentrt.Store,
) -> None:
    """The dispatch's transaction ran (the session's copy charged the attempt), then the
    commit was refused (a `StoreError` inside the transaction, rolled back whole), the call
    cancelled meanwhile. As for a refusal not cancelled (`RunSession._broke`): the copy is
    ahead of the rows, so the session is not used again (before: usable, its copy charged
    for an attempt the record does not hold); nothing was written, and the close records
    the kept claim as a refusal not cancelled leaves it, then gives the lease back."""
    store = any_store
    inside, go = threading.Event(), threading.Event()

    def probe_in_tx(point: str, session: Any) -> None:
        if point == "model.dispatched" and not inside.is_set():
            inside.set()
            assert go.wait(30)
            raise agentrt.StoreError("refused (test) inside the transaction")

    gate = make_gate(store, change_tool(), model=Replies(), probe_in_tx=probe_in_tx)
    session = gate.begin_sync("a first model call cancelled, its dispatch rolled back")
    run_id = session.run_id
    step = session.step_sync()
    assert step is not None and step.model is not None
    loop = asyncio.new_event_loop()
    try:
        asking = loop.create_task(step.model.generate(TINY_REQUEST))
        assert loop.run_until_complete(loop.run_in_executor(None, inside.wait, 30))
        asking.cancel()
        go.set()
        loop.run_until_complete(asyncio.wait([asking]))
        assert asking.cancelled()
    finally:
        loop.close()
    with pytest.raises(agentrt.RunStateError, match="can no longer be used") as refused:
        asyncio.run(step.model.generate(TINY_REQUEST))
    assert f"the model dispatched commit of run {run_id} failed" in str(refused.value)
    assert (store.list_steps(run_id), store.list_model_calls(run_id)) == ([], [])
    session.close_sync()
    assert store.lease(run_id).owner == ""
    # The claim, kept for the next commit as after a refusal not cancelled, is the close's
    # (`LEFT_OPEN`): step 0 left deciding, no model call.
    steps = [(s.index, s.status) for s in store.list_steps(run_id)]
    assert (steps, store.list_model_calls(run_id)) == ([(0, "deciding")], [])
    assert store.get_run(run_id).status == "RUNNING"
    assert store.verify_events().intact


def _held(committer: Any, queued: int) -> bool:
    """Whether `queued` works wait in the committer's queue (its drain held in the store)."""
    with committer._lock:
        return len(committer._queue) == queued


def test_a_driver_cancelled_whose_loop_is_closed_while_it_gives_its_lease_back_is_told(
    any_store: agentrt.Store,
) -> None:
    """A Driver's loop is cancelled while its agent decides step 0; the cancel commits the
    step's kept claim (`LEFT_OPEN`) before giving the lease back, and the consumer's loop is
    closed under that commit (refused); the loop's coroutine is then closed, as the
    collector closes it. `then` is told (before: never, the letting go's task being on a
    closed loop, and the driver refused the run as "already executing" for the process's
    life): the driver's resume takes the run over, as after a crash, and completes it."""
    store = any_store
    deciding = threading.Event()
    asked: list[int] = []

    async def agent(step_input: agentrt.StepInput) -> Any:
        asked.append(len(step_input.steps))
        if len(asked) == 1:
            deciding.set()
            await asyncio.get_running_loop().create_future()  # never answers
        return Decision.complete("done")

    driver = agentrt.Driver(
        store=store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[change_tool()],
        now=FakeClock(),
        new_id=Ids(),
    )
    loop = asyncio.new_event_loop()
    run_id = "b" * 32
    goal = "cancelled, its loop closed as it lets go"
    driving = loop.create_task(driver.start(goal, None, run_id))
    assert loop.run_until_complete(loop.run_in_executor(None, deciding.wait, 30))
    entered, go = hold_next_group(store, commit="never")
    driving.cancel()
    assert loop.run_until_complete(loop.run_in_executor(None, entered.wait, 30))
    loop.close()  # the consumer's loop, closed under the cancel's LEFT_OPEN commit
    go.set()
    _session.committer_for(store).submit(lambda tx: None).result(30)
    end_abandoned(driving)  # closed from outside, as the collector closes it
    assert not driver._is_executing(run_id)
    assert store.list_steps(run_id) == []  # the refused commit wrote nothing
    run = driver.resume_sync(run_id)
    assert (run.status, asked) == ("COMPLETED", [1, 1])  # step 0 asked twice
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "done")]
    assert store.lease(run_id).owner == ""
    assert store.verify_events().intact
    end_abandoned_on(loop)  # the tasks the runtime started on it, ended here (it is gone)


def test_a_driver_loop_abandoned_mid_release_collected_under_the_drivers_lock_is_not_a_deadlock(
    any_store: agentrt.Store,
) -> None:
    """As above, but the abandoned loop's coroutine is closed by the cycle collector on a
    thread that holds the driver's own lock (`_active_lock`, under which `_exclusive`
    builds its refusal): telling `then` and leaving `_exclusive` from there must not wait
    for that lock, held by their own thread."""
    store = any_store
    deciding = threading.Event()

    async def agent(step_input: agentrt.StepInput) -> Any:
        if not deciding.is_set():
            deciding.set()
            await asyncio.get_running_loop().create_future()  # never answers
        return Decision.complete("done")

    driver = agentrt.Driver(
        store=store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[change_tool()],
        now=FakeClock(),
        new_id=Ids(),
    )
    run_id = "c" * 32
    gc.disable()  # the collection comes where the test makes it, not before
    try:
        loop = asyncio.new_event_loop()
        driving = loop.create_task(driver.start("collected under the driver's lock", None, run_id))
        assert loop.run_until_complete(loop.run_in_executor(None, deciding.wait, 30))
        entered, go = hold_next_group(store, commit="never")
        driving.cancel()
        assert loop.run_until_complete(loop.run_in_executor(None, entered.wait, 30))
        loop.close()
        go.set()
        _session.committer_for(store).submit(lambda tx: None).result(30)
        task = weakref.ref(driving)
        del driving, loop
        collected_while_held(driver._active_lock, task, "driver loop")
    finally:
        gc.enable()
    assert not driver._is_executing(run_id)
    assert driver.resume_sync(run_id).status == "COMPLETED"
    assert store.lease(run_id).owner == ""


@pytest.mark.parametrize("commit", ["before", "after", "never"])
def test_a_claim_whose_loop_was_closed_under_a_limits_commit_leaves_one_end_and_no_step(
    any_store: agentrt.Store, commit: str
) -> None:
    """A claim's loop is closed under the commit of the limit it reached (its task kept):
    that commit made before the loop closed (`before`), made after a claim from a live
    loop judged the run again (`after`), or refused (`never`). A claim from a live loop
    is refused as the session's run ended (the copy ended by that commit's transaction) or
    returns None (the limit reached again, its commit made or finding the run ended under
    the lock): no step is claimed past the limit, and the record ends the run once."""
    store = any_store
    read = read_tool()
    gate = make_gate(store, read)
    session = gate.begin_sync("a limit's commit under a closed loop", limits=Limits(max_steps=1))
    run_id = session.run_id
    step = session.step_sync()
    assert step is not None
    step.propose_sync(Decision.tool_call("read", {"x": 1}))
    step.execute_sync()
    entered, go = hold_next_group(store, commit=commit)
    theirs = asyncio.new_event_loop()
    claiming = theirs.create_task(session.step())
    assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
    theirs.close()  # the consumer's loop, closed under the limit's commit
    claimed: list[Any] = []

    def claim_live() -> None:
        try:
            claimed.append(session.step_sync())
        except agentrt.RunStateError as refused:  # the copy already ended: refused, unclaimed
            claimed.append(str(refused))

    live = threading.Thread(target=claim_live)
    if commit == "after":
        live.start()  # judged while the first commit is held in the store
        go.set()
    else:
        go.set()
        _session.committer_for(store).submit(lambda tx: None).result(30)
        live.start()
    live.join(30)
    ended = f"run {run_id} is FAILED; this session takes no more steps"
    if commit == "before":
        assert claimed == [ended]
    elif commit == "never":
        assert claimed == [None]
    else:  # judged before or after the held commit was made, as the threads went
        assert claimed in ([None], [ended])
    assert not claiming.done()
    session.close_sync()
    run = store.get_run(run_id)
    assert (run.status, run.reason) == ("FAILED", "limit_steps")
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "done")]
    types = event_types(store, run_id)
    assert (types.count("limit.exceeded"), types.count("run.finished")) == (1, 1)
    assert [c.args for c in read.calls] == [{"x": 1}]
    assert store.verify_events().intact
    end_abandoned_on(theirs)  # the abandoned claim, ended here (its loop is gone)
