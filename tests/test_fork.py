"""A process forked while another of its threads held one of agentrt's module locks.

A lock held at the fork stays held in the child, where no thread will ever release it:
the child's first use of that lock would wait for ever. agentrt's process-wide caches
give the child new locks (`os.register_at_fork`); the threads and committers a child
needs are its own too (decision 0125, tested in `test_group_commit.py`).
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest


def run_script(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`script` in a Python process of its own (forking a pytest worker, which has threads
    of its own, would fork them beside it), its output captured."""
    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120
    )


def held_by_another_thread(*locks: Any) -> Any:
    """`locks` taken by a daemon thread of this process until the returned event is set
    (whatever held them at a fork stays held in the child). Also pasted into the scripts
    below (`HELD`), which run in processes of their own."""
    import contextlib
    import threading

    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with contextlib.ExitStack() as taken:
            for lock in locks:
                taken.enter_context(lock)
            held.set()
            release.wait()

    threading.Thread(target=hold, daemon=True).start()
    held.wait()
    return release


HELD = "from typing import Any\n\n" + textwrap.dedent(inspect.getsource(held_by_another_thread))


CHILD = textwrap.dedent(
    """
    import os, signal, sys, threading
    from datetime import timedelta
    import agentrt
    from agentrt import _patterns, _tools

    {HELD}
    release = held_by_another_thread(getattr(sys.modules[sys.argv[1]], "_cache_lock"))
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)  # a child that waits for the lock for ever dies of it
        if sys.argv[1] == "agentrt._patterns":
            _patterns.compile_pattern("^[a-z]+$")
        else:
            spec = agentrt.ToolSpec(
                name="t", description="d", input_schema={"type": "object"},
                side_effect="read_only", timeout=timedelta(seconds=1),
            )
            _tools.compile_tool(spec)
        print("child compiled", flush=True)
        os._exit(0)
    release.set()
    _, status = os.waitpid(pid, 0)
    print("child ended", os.waitstatus_to_exitcode(status), flush=True)
    """
).replace("{HELD}", HELD)


@pytest.mark.parametrize("module", ["agentrt._patterns", "agentrt._tools"])
def test_a_child_forked_while_a_cache_lock_was_held_gets_a_lock_of_its_own(module: str) -> None:
    done = run_script(CHILD, module)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["child compiled", "child ended 0"], done.stderr


# What the scripts below share: a read-only tool, an agent that calls it once and
# completes, and `run_on(store, goal)` driving one such run to its end.
RUN_ON = textwrap.dedent(
    """
    @agentrt.tool(side_effect=agentrt.SideEffect.READ_ONLY, timeout=30)
    def look(page: int) -> agentrt.ToolResult:
        "Look at one page."
        return agentrt.ToolResult({"page": page}, summary="looked")

    class Agent:
        def decide(self, input):
            if len(input.steps) > 1:
                return agentrt.Decision.complete({"done": True})
            return agentrt.Decision.tool_call("look", {"page": 1})

    def run_on(store, goal):
        driver = agentrt.Driver(store=store, agent=Agent(), policy=agentrt.default_policy(),
                                tools=[look])
        return driver.start_sync(goal)
    """
)


# A store opened before a fork is the parent's (decision 0127). The script runs in a
# process of its own (a pytest worker has threads of its own to fork beside): the parent
# opens the store, records a run, renews a lease on the heartbeat's connection, and
# forks. The child tries each use of the parent's store and of its renewer, prints what
# each said, closes both, opens a store of its own and completes a run on it, then exits
# the way a program does (finalizers run). The parent, after the child, reads and writes
# through its own store and renewer.
PARENTS_STORE = (
    textwrap.dedent(
        """
    import os, signal, sys, threading
    from datetime import UTC, datetime, timedelta
    import agentrt

    {RUN_ON}
    {HELD}
    where = sys.argv[1]
    from agentrt import _fork

    _fork.FORK_WAIT_S = 0.2  # the thread below holds the lock until after the fork
    store = agentrt.open_store(where)
    first = run_on(store, "parent before")
    renewer = store.renewer(lambda: datetime.now(UTC))
    renewer.renew(first.id, "nobody", timedelta(seconds=5))  # opens its connection
    # Another thread of the parent holds the store's lock at the fork.
    release = held_by_another_thread(store._lock)
    pid = os.fork()
    if pid == 0:
        signal.alarm(60)  # a use that waited on the held lock would die of this
        uses = {
            "list_runs": lambda: store.list_runs(),
            "get_run": lambda: store.get_run(first.id),
            "transaction": lambda: store.transaction().__enter__(),
            "snapshot": lambda: store.snapshot().__enter__(),
            "renewer": lambda: store.renewer(lambda: datetime.now(UTC)),
            "renew": lambda: renewer.renew(first.id, "nobody", timedelta(seconds=5)),
            "verify": lambda: store.verify_events(),
            "driver": lambda: run_on(store, "child on the parent's store"),
        }
        for name, use in uses.items():
            try:
                use()
            except agentrt.StoreError as e:
                print(name, type(e).__name__, str(e).replace(str(os.getppid()), "PARENT"))
            else:
                print(name, "was not refused")
        store.close()
        renewer.close()
        own = agentrt.open_store(where)
        print("child's own store:", run_on(own, "child").status)
        own.close()
        sys.exit(0)  # a program's exit: the finalizers run
    release.set()
    _, status = os.waitpid(pid, 0)
    print("child ended", os.waitstatus_to_exitcode(status))
    print("parent's renewal:", renewer.renew(first.id, "nobody", timedelta(seconds=5)))
    print("parent after:", run_on(store, "parent after").status)
    print("parent reads:", sorted(r.goal for r in store.list_runs()))
    store.close()
    """
    )
    .replace("{RUN_ON}", RUN_ON)
    .replace("{HELD}", HELD)
)

REFUSED = (
    "StoreError this {what} was opened by process PARENT before it forked this one; a forked "
    "process must open a store of its own (agentrt.open_store) and leave its parent's alone"
)


def test_a_store_opened_before_a_fork_is_refused_in_the_child_and_left_to_the_parent(
    database: str,
) -> None:
    """Every use of the parent's store and heartbeat connection in a forked child is one
    sentence, never a statement on the parent's connection (nor a wait on a lock another
    thread held at the fork); the child's close and exit leave the parent's connections
    alone (on PostgreSQL a close there ended the parent's session: its next read failed
    "server closed the connection unexpectedly"); a store the child opens is its own."""
    done = run_script(PARENTS_STORE, database)
    assert done.returncode == 0, done.stderr
    store = REFUSED.format(what="store")
    heartbeat = REFUSED.format(what="heartbeat's connection")
    assert done.stdout.splitlines() == [
        f"list_runs {store}",
        f"get_run {store}",
        f"transaction {store}",
        f"snapshot {store}",
        f"renewer {store}",
        f"renew {heartbeat}",
        f"verify {store}",
        f"driver {store}",
        "child's own store: COMPLETED",
        "child ended 0",
        "parent's renewal: False",
        "parent after: COMPLETED",
        "parent reads: ['child', 'parent after', 'parent before']",
    ], done.stderr


CLOSED_IN_THE_CHILD = textwrap.dedent(
    """
    import os, sys
    import agentrt

    store = agentrt.open_store(sys.argv[1])
    print("parent before:", store.count_runs())
    pid = os.fork()
    if pid == 0:
        with store:  # a worker tidying up what it was handed: closes it on the way out
            pass
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    print("child ended", os.waitstatus_to_exitcode(status))
    print("parent after:", store.count_runs())
    store.close()
    """
)


def test_a_child_closing_its_parents_store_leaves_the_parents_connection_alone(
    database: str,
) -> None:
    """Before decision 0127 the child's close of a PostgreSQL store sent the end of the
    session on the socket it shares with its parent: the parent's next read failed."""
    done = run_script(CLOSED_IN_THE_CHILD, database)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["parent before: 0", "child ended 0", "parent after: 0"]


# A fork inside the forking thread's own transaction: the child that uses it, or leaves its
# block (falling through it, or a program's exit raising through it), is refused, and
# neither commits nor rolls back on the parent's connection; the parent's transaction
# stays whole: here it is rolled back after the child ended, and nothing of it remains.
FORKED_IN_A_TRANSACTION = textwrap.dedent(
    """
    import os, signal, sys
    import agentrt

    class Agent:
        def decide(self, input):
            return agentrt.Decision.complete({"done": True})

    store = agentrt.open_store(sys.argv[1])
    driver = agentrt.Driver(store=store, agent=Agent(), policy=agentrt.default_policy())
    run = driver.start_sync("as it was")

    def refused(e):
        return "refused" if "before it forked" in str(e) else repr(e)

    class Undone(Exception):
        pass

    for leaving in ("falls through", "exits"):
        try:
            with store.transaction() as tx:
                tx.execute("UPDATE runs SET goal = ? WHERE id = ?", ("half", run.id))
                pid = os.fork()
                if pid == 0:
                    signal.alarm(20)
                    try:
                        tx.execute("UPDATE runs SET goal = ? WHERE id = ?", ("child", run.id))
                    except agentrt.StoreError as e:
                        print(leaving, "child's statement:", refused(e), flush=True)
                    if leaving == "exits":
                        sys.exit(0)  # raises through the block: no ROLLBACK sent for the parent
                else:
                    _, status = os.waitpid(pid, 0)
                    print(leaving, "child ended", os.waitstatus_to_exitcode(status), flush=True)
                    raise Undone
            if pid == 0:
                print(leaving, "child's block: committed", flush=True)
                os._exit(0)
        except agentrt.StoreError as e:
            if pid != 0:
                raise
            print(leaving, "child's block:", refused(e), flush=True)
            os._exit(0)
        except Undone:
            pass
        print(leaving, "parent's run:", store.get_run(run.id).goal, flush=True)
    store.close()
    """
)


def test_a_transaction_open_in_the_forking_thread_is_refused_in_the_child_and_stays_whole(
    database: str,
) -> None:
    """Before, the child's end of the block committed the parent's half-done transaction
    on the parent's connection (or, leaving by `sys.exit`, rolled it back under the
    parent, whose next statement then ran outside any transaction)."""
    done = run_script(FORKED_IN_A_TRANSACTION, database)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "falls through child's statement: refused",
        "falls through child's block: refused",
        "falls through child ended 0",
        "falls through parent's run: as it was",
        "exits child's statement: refused",
        "exits child ended 0",
        "exits parent's run: as it was",
    ], done.stderr


# Another thread of the parent is inside a write transaction when the main thread forks
# (a group commit under way, say). The fork waits for it to end (`_fork.FORK_WAIT_S`, set
# high here so that a slow machine cannot make it give up), so the child's own store on the
# same file can write: SQLite's record of the write lock, copied into the child, would
# otherwise say the lock is held for as long as the child lives.
FORKED_DURING_A_WRITE = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    import agentrt
    from agentrt import _fork

    _fork.FORK_WAIT_S = 60.0

    {RUN_ON}
    where = sys.argv[1]
    store = agentrt.open_store(where)
    inside = threading.Event()

    def write():
        with store.transaction() as tx:  # the write lock taken (BEGIN IMMEDIATE on SQLite)
            tx.lock_run("no such run")
            inside.set()
            time.sleep(0.3)

    writer = threading.Thread(target=write)
    writer.start()
    inside.wait()
    pid = os.fork()
    if pid == 0:
        signal.alarm(60)
        own = agentrt.open_store(where)
        print("child's own store:", run_on(own, "child").status)
        own.close()
        os._exit(0)
    writer.join()
    _, status = os.waitpid(pid, 0)
    print("child ended", os.waitstatus_to_exitcode(status))
    print("parent after:", run_on(store, "parent").status)
    print("runs:", sorted(r.goal for r in store.list_runs()))
    store.close()
    """
).replace("{RUN_ON}", RUN_ON)


def test_a_fork_waits_for_another_threads_transaction_so_the_child_can_write_the_file(
    database: str,
) -> None:
    done = run_script(FORKED_DURING_A_WRITE, database)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "child's own store: COMPLETED",
        "child ended 0",
        "parent after: COMPLETED",
        "runs: ['child', 'parent']",
    ], done.stderr


# A Gate's or a Driver's own lock (its set of live runs) held by another thread at the fork:
# the child is refused by the store, not left waiting on that lock for ever.
GATE_LOCK_HELD = textwrap.dedent(
    """
    import os, signal, sys, threading
    import agentrt

    class Agent:
        def decide(self, input):
            return agentrt.Decision.complete({})

    store = agentrt.open_store(sys.argv[1])
    gate = agentrt.Gate(store=store, policy=agentrt.default_policy())
    driver = agentrt.Driver(store=store, agent=Agent(), policy=agentrt.default_policy())
    {HELD}
    release = held_by_another_thread(gate._lock, driver._active_lock)
    pid = os.fork()
    if pid == 0:
        signal.alarm(30)  # a child that waited on either lock would die of this
        for name, use in (("gate", gate.begin_sync), ("driver", driver.start_sync)):
            try:
                use("child")
            except agentrt.StoreError as e:
                print(name, "refused:", "opened by process" in str(e))
        os._exit(0)
    release.set()
    _, status = os.waitpid(pid, 0)
    print("child ended", os.waitstatus_to_exitcode(status))
    store.close()
    """
).replace("{HELD}", HELD)


def test_a_gate_or_driver_lock_held_at_the_fork_never_holds_the_child(database: str) -> None:
    done = run_script(GATE_LOCK_HELD, database)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "gate refused: True",
        "driver refused: True",
        "child ended 0",
    ], done.stderr


def test_a_store_sent_to_another_process_is_refused_in_one_sentence(database: str) -> None:
    """Pickled for `multiprocessing` (the spawn start method, a process pool) a store, or a
    Driver holding it, is refused naming what to do, not the driver's connection type."""
    import pickle

    import agentrt

    store = agentrt.open_store(database)
    try:
        driver = agentrt.Driver(
            store=store,
            agent=lambda _: agentrt.Decision.complete({}),
            policy=agentrt.default_policy(),
        )
        for what in (store, driver):
            with pytest.raises(TypeError) as refused:
                pickle.dumps(what)
            assert str(refused.value) == (
                f"{type(store).__name__} cannot be sent to another process: open a store "
                "there (agentrt.open_store with the same path or URL)"
            )
        assert store.count_runs() == 0  # still usable here
    finally:
        store.close()


# Threads forking at once, while other threads take the stores' locks: each fork gives back
# only the locks its own thread took, so none is left held after (nor released by a thread
# that does not hold it, which raises in the at-fork hook and leaves the lock held for ever).
CONCURRENT_FORKS = textwrap.dedent(
    """
    import os, sys, threading
    import agentrt
    from agentrt import _fork

    _fork.FORK_WAIT_S = 0.2
    sys.setswitchinterval(1e-6)  # the threads interleave inside the at-fork hooks
    stores = [agentrt.open_store(os.path.join(sys.argv[1], f"{i}.db")) for i in range(3)]
    stop = threading.Event()

    def busy(store):
        while not stop.is_set():
            with store._lock:
                pass

    def forker():
        for _ in range(40):
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)

    busies = [threading.Thread(target=busy, args=(s,), daemon=True) for s in stores]
    forkers = [threading.Thread(target=forker, daemon=True) for _ in range(3)]
    for t in busies + forkers:
        t.start()
    for t in forkers:
        t.join(timeout=60)
    stop.set()
    for t in busies:
        t.join(timeout=5)
    sys.setswitchinterval(0.005)

    def free(store):
        took = []
        def take():
            took.append(store._lock.acquire(timeout=1))
            if took[0]:
                store._lock.release()
        t = threading.Thread(target=take)
        t.start()
        t.join()
        return took[0]

    print("stuck:", sum(t.is_alive() for t in busies + forkers))
    print("free:", [free(s) for s in stores], "held:", _fork._held)
    os._exit(0)
    """
)


def test_threads_forking_at_once_each_give_back_only_their_own_locks(tmp_path) -> None:
    done = run_script(CONCURRENT_FORKS, str(tmp_path))
    assert "cannot release" not in done.stderr, done.stderr
    assert done.stdout.splitlines() == ["stuck: 0", "free: [True, True, True] held: {}"], (
        done.stderr
    )


def test_a_fork_from_inside_a_transaction_waits_for_no_other_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forking thread's own open transaction keeps its write lock through the fork
    whatever the others do: waiting for another thread (a renewal waiting for that very
    lock) would help no child and hold the fork its whole budget. The hook, called as a
    fork calls it, takes nothing and waits for nobody."""
    import threading

    import agentrt
    from agentrt import _fork

    monkeypatch.setattr(_fork, "FORK_WAIT_S", 5.0)
    mine = agentrt.open_store(tmp_path / "mine.db")
    other = agentrt.open_store(tmp_path / "other.db")
    release = held_by_another_thread(other._lock)  # as a waiting renewal holds its own
    try:
        with mine.transaction():
            _fork._before_a_fork()
            try:
                assert _fork._held.get(threading.get_ident()) == []  # nothing taken
            finally:
                _fork._after_a_fork_in_the_parent()
        assert threading.get_ident() not in _fork._held
    finally:
        release.set()
        mine.close()
        other.close()


def test_a_copy_of_a_store_is_the_same_store(any_store: object) -> None:
    import copy

    assert copy.copy(any_store) is any_store
    assert copy.deepcopy({"store": any_store})["store"] is any_store
