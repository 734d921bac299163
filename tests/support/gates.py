"""A Gate over the test's store, and a session opened on its first step.

`make_gate` builds a Gate with the default policy, a fresh `FakeClock` and
`Ids("a")` unless the test passes its own; `open_step` begins a session and
claims its first step, which must exist (no limit has ended the run yet).
"""

from __future__ import annotations

from typing import Any

import agentrt
from agentrt import Gate, GateSession, GateStep
from conftest import FakeClock, Ids, RecordingTool


def make_gate(
    store: agentrt.Store,
    *tool_list: RecordingTool,
    clock: FakeClock | None = None,
    ids: Ids | None = None,
    **kw: Any,
) -> Gate:
    return Gate(
        store=store,
        policy=kw.pop("policy", agentrt.default_policy()),
        tools=list(tool_list),
        now=clock or FakeClock(),
        new_id=ids or Ids(),
        **kw,
    )


def open_step(gate: Gate, goal: str) -> tuple[GateSession, GateStep]:
    """Begin a session for `goal` and claim its first step."""
    session = gate.begin_sync(goal)
    step = session.step_sync()
    assert step is not None
    return session, step


def collected_while_held(lock: Any, task: Any, what: str) -> None:
    """Collect the cycle holding the only reference to a closed loop's task (`task`, a
    `weakref.ref`) on a thread that holds `lock` meanwhile, as the cycle collector may on
    any thread: whatever the collected coroutine does on its way out must not wait for that
    lock (its own thread holds it). `what` names it in the failure. Call with `gc` disabled."""
    import gc
    import threading

    assert task() is not None  # not collected yet
    collected = threading.Event()

    def collect() -> None:
        with lock:
            gc.collect()
        collected.set()

    threading.Thread(target=collect, daemon=True).start()
    assert collected.wait(10), f"the collected {what} waited for a lock its own thread held"
    assert task() is None  # collected there


def hold_next_group(store: Any, *, commit: str) -> tuple[Any, Any]:
    """Hold the store's next group commit until `go` is set, `entered` once it is held; its
    transaction made `"before"` the hold, `"after"` it (held on its way in), or `"never"`
    (refused after the hold, nothing written). Later groups go through as they are."""
    import threading

    from agentrt import StoreError

    assert commit in ("before", "after", "never"), commit
    entered, go = threading.Event(), threading.Event()
    real = store.transactions
    armed = [True]

    def transactions(works: Any) -> Any:
        if not armed[0]:
            return real(works)
        armed[0] = False
        out = real(works) if commit == "before" else None
        entered.set()
        assert go.wait(30)
        if commit == "never":
            raise StoreError("refused (test), nothing was written")
        return out if commit == "before" else real(works)

    store.transactions = transactions
    return entered, go
