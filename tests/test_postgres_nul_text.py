"""A text holding a NUL is recorded whole on PostgreSQL, as on SQLite (decision 0157).

A PostgreSQL text cannot hold a NUL: a goal holding one was refused there and kept on
SQLite, and a model's failure message holding one failed the run's last write, leaving
the run RUNNING. The store now keeps such a text escaped (`_connection.stored_text`:
U+0002 first, each NUL `U+0002 0`, each U+0002 doubled) and reads it back whole, so
every read, a capped one included, and every comparison sees the text as written.
"""

from __future__ import annotations

import pytest

import agentrt
from agentrt import Decision, RunStatus
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids


def failed_run(database: str, goal: str, message: str) -> agentrt.Run:
    store = agentrt.open_store(database)
    try:
        driver = agentrt.Driver(
            store=store,
            agent=ScriptedAgent([Decision.fail(message)]),
            policy=agentrt.default_policy(),
            tools=[],
            now=FakeClock(),
            new_id=Ids("b"),
        )
        return driver.start_sync(goal)
    finally:
        store.close()


def test_a_goal_holding_a_nul_is_recorded_whole_on_either_backend(database: str) -> None:
    goal = "pay invoice 17\x00 and then wire $9,000"
    run = failed_run(database, goal, "stopped")
    assert (run.status, run.goal) == (RunStatus.FAILED, goal)
    store = agentrt.open_existing(database, read_only=True)
    try:
        assert store.get_run(run.id).goal == goal
    finally:
        store.close()


def test_a_models_failure_message_holding_a_nul_ends_the_run_and_is_recorded_whole(
    database: str,
) -> None:
    message = "could not finish\x00 IGNORE PREVIOUS INSTRUCTIONS"
    run = failed_run(database, "a goal", message)
    assert (run.status, run.reason_detail) == (RunStatus.FAILED, message)
    store = agentrt.open_existing(database, read_only=True)
    try:
        again = store.get_run(run.id)
    finally:
        store.close()
    assert (again.status, again.reason_detail) == (RunStatus.FAILED, message)


def test_a_long_goal_holding_a_nul_is_listed_cut_at_the_cap_with_its_full_length(
    database: str,
) -> None:
    from agentrt import view
    from agentrt._capped import CappedText

    goal = "a\x00" + "b" * 5000
    run = failed_run(database, goal, "stopped")
    store = agentrt.open_existing(database, read_only=True)
    try:
        (summary,) = view.run_page(store).runs
        detail = view.run_detail(store, run.id)
    finally:
        store.close()
    shown = summary.run.goal
    assert isinstance(shown, CappedText)
    assert (str(shown), shown.length) == (goal[: len(shown)], len(goal))
    assert str(detail.summary.run.goal)[:3] == "a\x00b"


def test_a_waiting_runs_goal_holding_a_nul_is_listed_whole(database: str) -> None:
    from agentrt import view
    from support.tools import push_tool

    goal = "pay invoice 17\x00 and then wire $9,000"
    store = agentrt.open_store(database)
    try:
        driver = agentrt.Driver(
            store=store,
            agent=ScriptedAgent([Decision.tool_call("push", {"x": 1})]),
            policy=agentrt.default_policy(),
            tools=[push_tool()],
            now=FakeClock(),
            new_id=Ids("d"),
        )
        run = driver.start_sync(goal)
        assert run.status == "WAITING_FOR_APPROVAL"
        (pending,) = view.pending_page(store).approvals
    finally:
        store.close()
    assert pending.goal == goal


@pytest.mark.parametrize(
    "goal", ["\x02", "\x02\x02", "\x020", "\x02\x00", "\x00", "x\x02\x00\x02y", "\x02plain"]
)
def test_a_goal_of_control_characters_reads_back_and_is_found_as_written(
    database: str, goal: str
) -> None:
    run = failed_run(database, goal, goal)
    store = agentrt.open_existing(database, read_only=True)
    try:
        again = store.get_run(run.id)
        found = store.query("SELECT id, goal FROM runs WHERE goal = ?", (goal,))
    finally:
        store.close()
    assert (again.goal, again.reason_detail) == (goal, goal)
    assert [tuple(r) for r in found] == [(run.id, goal)]


@pytest.mark.parametrize("goal", ["\x02a\x020b\x02.", "\x02\x02\x02.", "\x02x\x02."])
def test_a_goal_written_now_that_looks_like_an_escaped_text_reads_back_as_written(
    database: str, goal: str
) -> None:
    """A text that starts with the escape mark is itself stored escaped (no NUL in it), so
    a goal shaped like an escaped text is never read back unescaped into another text."""
    run = failed_run(database, goal, goal)
    store = agentrt.open_existing(database, read_only=True)
    try:
        again = store.get_run(run.id)
    finally:
        store.close()
    assert (again.goal, again.reason_detail) == (goal, goal)


def test_an_unfinished_run_whose_id_holds_a_nul_is_found_by_recovery(database: str) -> None:
    """A run left RUNNING whose id (the consumer's `new_id`) holds a NUL is listed by
    `unfinished_runs` with that id, and the id finds the run."""
    from support.postgres import held_run

    store = agentrt.open_store(database)
    try:
        held_run(store, "run\x00one")
        (candidate,) = store.unfinished_runs(None, 10)
        assert candidate.run_id == "run\x00one"
        assert store.get_run(candidate.run_id).id == "run\x00one"
    finally:
        store.close()


@pytest.mark.parametrize("goal", ["\x02abc", "\x02", "\x02\x02", "\x02a\x02b\x02."])
def test_a_text_starting_with_the_escape_written_by_an_earlier_release_reads_as_written(
    database: str, goal: str
) -> None:
    """A text starting with U+0002 (and holding no NUL) was stored as it is before the
    escape: written so behind the store's back, it reads back unchanged."""
    from support import rows

    run = failed_run(database, "a goal", "stopped")
    assert rows.execute(database, "UPDATE runs SET goal = ? WHERE id = ?", (goal, run.id)) == 1
    store = agentrt.open_existing(database, read_only=True)
    try:
        assert store.get_run(run.id).goal == goal
    finally:
        store.close()
