"""Which kind of program began a run (`runs.origin`, docs/decisions/0049).

A Driver recovers and resumes only runs a Driver or a plain Gate began; a run an
integration began (a framework adapter, the MCP proxy) belongs to that program,
even when a Driver registers tools of the same names.

The tests that take `any_store` run on SQLite and on PostgreSQL (issue 21 item 5;
decision 0105); the one that empties the column through `sqlite3` and the one that runs
the command line on the file stay on SQLite for now.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import agentrt
from agentrt import ConfigError, Decision, ForeignRunError, RecoverAction
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool
from support.gates import make_gate, open_step
from support.rows import snapshot
from support.tools import read_tool


def abandoned_run(store: agentrt.Store, read: RecordingTool, clock: FakeClock, **kw: str) -> str:
    """A run left RUNNING with no lease after an allowed verdict, as a crashed loop leaves it."""
    session, step = open_step(make_gate(store, read, clock=clock, **kw), "read it")
    assert step.propose_sync(Decision.tool_call("read", {"x": 1})).outcome == "allowed"
    session.close_sync()
    assert store.get_run(session.run.id).status == "RUNNING"
    assert store.lease(session.run.id).owner == ""
    return session.run.id


def driver_with(store: agentrt.Store, read: RecordingTool, clock: FakeClock) -> agentrt.Driver:
    return agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("read", {"x": 2}), Decision.complete("mine")]),
        policy=agentrt.default_policy(),
        tools=[read],
        now=clock,
        new_id=Ids("b"),
    )


def test_a_drivers_recover_skips_a_run_an_adapter_began_and_changes_no_row(
    any_store: agentrt.Store, database: str
) -> None:
    store, db_path = any_store, database
    read = read_tool()
    clock = FakeClock()
    run_id = abandoned_run(store, read, clock, origin="adapter:langgraph")
    before = snapshot(db_path)
    (recovered,) = driver_with(store, read, clock).recover_sync()
    assert (recovered.run_id, recovered.action, recovered.run) == (
        run_id,
        RecoverAction.SKIPPED,
        None,
    )
    assert recovered.why == (
        "it was begun by 'adapter:langgraph', not by a Driver or a plain Gate; "
        "the program that began it continues it"
    )
    assert snapshot(db_path) == before
    assert read.calls == []


def test_a_drivers_recover_skips_a_run_whose_origin_was_emptied_and_changes_no_row(
    store: agentrt.Store, db_path: Path
) -> None:
    """`''` is no origin any program writes (the column's default is 'driver'): a row
    edited to it is foreign to a Driver's recovery, as it always was."""
    read = read_tool()
    clock = FakeClock()
    run_id = abandoned_run(store, read, clock)
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("UPDATE runs SET origin = '' WHERE id = ?", (run_id,))
    finally:
        conn.close()
    before = snapshot(db_path)
    (recovered,) = driver_with(store, read, clock).recover_sync()
    assert (recovered.run_id, recovered.action) == (run_id, RecoverAction.SKIPPED)
    assert recovered.why == (
        "it was begun by '', not by a Driver or a plain Gate; "
        "the program that began it continues it"
    )
    assert snapshot(db_path) == before
    assert read.calls == []


def test_a_drivers_recover_still_resumes_a_run_a_plain_gate_began(any_store: agentrt.Store) -> None:
    store = any_store
    read = read_tool()
    clock = FakeClock()
    run_id = abandoned_run(store, read, clock)
    assert store.get_run(run_id).origin == "gate"
    (recovered,) = driver_with(store, read, clock).recover_sync()
    assert (recovered.run_id, recovered.action) == (run_id, RecoverAction.RESUMED)
    run = store.get_run(run_id)
    assert (run.status, run.result, run.origin) == ("COMPLETED", "mine", "gate")
    assert [c.args for c in read.calls] == [{"x": 2}]


def test_driver_resume_refuses_a_run_the_mcp_proxy_began_and_changes_no_row(
    any_store: agentrt.Store, database: str
) -> None:
    store, db_path = any_store, database
    read = read_tool()
    clock = FakeClock()
    run_id = abandoned_run(store, read, clock, origin="mcp-proxy")
    before = snapshot(db_path)
    with pytest.raises(ForeignRunError) as caught:
        driver_with(store, read, clock).resume_sync(run_id)
    assert str(caught.value) == (
        f"run {run_id} was begun by 'mcp-proxy', not by a Driver or a plain Gate, so a "
        "Driver does not resume it: the program that began it continues it"
    )
    assert (caught.value.run_id, caught.value.origin) == (run_id, "mcp-proxy")
    assert isinstance(caught.value, agentrt.RunStateError)
    assert snapshot(db_path) == before
    assert read.calls == []


def test_the_integration_that_began_a_run_attaches_it_as_before(any_store: agentrt.Store) -> None:
    store = any_store
    read = read_tool()
    clock = FakeClock()
    run_id = abandoned_run(store, read, clock, origin="adapter:openai-agents")
    gate = make_gate(store, read, clock=clock, origin="adapter:openai-agents")
    session, _ = gate.attach_sync(run_id)
    assert session.run.status == "RUNNING" and store.lease(run_id).owner == gate.lease_owner
    session.close_sync()


def test_each_kind_of_program_records_its_origin_on_the_runs_it_begins(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    read = read_tool()
    clock = FakeClock()
    gate_run = abandoned_run(store, read, clock)
    adapter_run = abandoned_run(store, read, clock, origin="adapter:pydantic-ai", ids=Ids("c"))
    driver_run = driver_with(store, read, clock).start_sync("drive it").id
    assert [(r.id, r.origin) for r in store.list_runs()] == [
        (driver_run, "driver"),
        (adapter_run, "adapter:pydantic-ai"),
        (gate_run, "gate"),
    ]


@pytest.mark.parametrize(
    "bad",
    ["", "Adapter:LangGraph", "adapter langgraph", "adapter:lang\ngraph", "é", "x" * 65, ":x", 5],
)
def test_an_origin_that_is_not_a_short_ascii_label_is_refused(
    any_store: agentrt.Store, database: str, bad: object
) -> None:
    store, db_path = any_store, database
    before = snapshot(db_path)
    with pytest.raises(ConfigError) as caught:
        make_gate(store, read_tool(), origin=bad)
    assert str(caught.value) == (
        "origin must be a short label of lowercase ASCII letters, digits and ':._-' "
        f"(at most 64 characters, such as 'adapter:langgraph'), got {bad!r:.80}"
    )
    assert snapshot(db_path) == before


def test_runs_and_show_print_the_origin_of_a_run(store: agentrt.Store, db_path: Path) -> None:
    run_id = abandoned_run(store, read_tool(), FakeClock(), origin="adapter:langgraph")

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "agentrt", "--db", str(db_path), *args],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    table = cli("runs").splitlines()
    assert table[0].split()[:4] == ["RUN", "STATUS", "LEASE", "ORIGIN"]
    assert table[1].split()[:4] == [run_id, "RUNNING", "none", "adapter:langgraph"]
    (listed,) = json.loads(cli("runs", "--json"))["runs"]
    assert listed["origin"] == "adapter:langgraph"
    assert "origin    adapter:langgraph" in cli("show", run_id).splitlines()
    assert json.loads(cli("show", run_id, "--json"))["run"]["origin"] == "adapter:langgraph"
