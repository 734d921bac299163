"""The Driver's marks of the runs it executes, read while another of its loops ends.

Decision 0219 made `Driver._active` a set of marks (`_Mark`) that `_is_executing` (recover's
judgement) and `_Exclusive.__enter__` iterate under `_active_lock`; decisions 0216/0218/0219
have `_Exclusive.__exit__` discard its mark without that lock (the cycle collector may
leave it on a thread holding the lock). A loop of the same driver ending on another thread
while the set is iterated changed its size mid-iteration: `RuntimeError: Set changed size
during iteration`. A thread switch may come at any bytecode of the iteration; here it is
placed by hand where the iteration calls out (the abandoned loop's `is_closed`), so the race
is made, not waited for (no clock).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import agentrt
from agentrt import Decision, SideEffect
from conftest import FakeClock, Ids, RecordingTool


class _PeekedLoop(asyncio.SelectorEventLoop):
    """A consumer's own event loop; `peeked`, once set, runs at the next `is_closed` look
    (where a thread switch may come), then is dropped."""

    peeked: Callable[[], None] | None = None

    def is_closed(self) -> bool:
        peek, self.peeked = self.peeked, None
        if peek is not None:
            peek()
        return super().is_closed()


def test_recover_judges_an_abandoned_run_while_another_loop_of_the_driver_ends(
    any_store: agentrt.Store,
) -> None:
    """Run X's loop is closed while its agent decides (task kept: its mark abandoned); run Y
    is driven by the same driver on another thread. `recover()` judges X (`_is_executing`,
    under the driver's lock) and, as it looks at X's mark, Y's loop ends on its thread (its
    mark discarded without the lock). Before: X FAILED with "Set changed size during
    iteration"; now X is taken over and completed, step 0 asked again."""
    store = any_store
    x_deciding, y_deciding, y_go = threading.Event(), threading.Event(), threading.Event()
    asked: list[str] = []

    async def agent(step_input: agentrt.StepInput) -> Any:
        goal = step_input.run.goal
        asked.append(goal)
        if goal == "x" and asked.count("x") == 1:
            x_deciding.set()
            await asyncio.get_running_loop().create_future()  # never answers
        if goal == "y":
            y_deciding.set()
            assert await asyncio.get_running_loop().run_in_executor(None, y_go.wait, 30)
        return Decision.complete("done")

    driver = agentrt.Driver(
        store=store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[RecordingTool("change", SideEffect.LOCAL_MUTATION)],
        now=FakeClock(),
        new_id=Ids(),
    )
    x, y = "1" * 32, "2" * 32
    theirs = _PeekedLoop()
    driving = theirs.create_task(driver.start("x", None, x))
    assert theirs.run_until_complete(theirs.run_in_executor(None, x_deciding.wait, 30))
    theirs.close()  # the consumer's loop, closed under X's agent; its task kept
    ended: list[agentrt.Run] = []
    other = threading.Thread(target=lambda: ended.append(driver.start_sync("y", None, y)))
    other.start()
    assert y_deciding.wait(30)

    def switch() -> None:  # Y's loop ends on its thread, here, mid-iteration
        y_go.set()
        other.join(30)
        assert not other.is_alive()

    theirs.peeked = switch
    recovered = {r.run_id: r for r in driver.recover_sync()}
    assert theirs.peeked is None  # the switch came
    assert [r.status for r in ended] == ["COMPLETED"]
    assert (recovered[x].action, recovered[x].error) == ("resumed", None)
    assert recovered[x].run is not None and recovered[x].run.status == "COMPLETED"
    assert asked.count("x") == 2  # step 0 asked again, as after a crash
    assert [(s.index, s.status) for s in store.list_steps(x)] == [(0, "done")]
    assert store.lease(x).owner == ""
    assert not driver._is_executing(x) and not driver._is_executing(y)
    assert store.verify_events().intact
    del driving
