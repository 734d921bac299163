"""What `agentrt approve` and the console tell a person happens next, by who began the run.

A framework adapter's run, or the MCP proxy's, is not one a Driver resumes (it raises
`ForeignRunError`, decision 0049): naming `Driver.resume` for it sends the person to a call
that is refused. The line names what does continue the run. Both backends: the line is read
from the run's recorded origin, nothing about SQLite files.
"""

from __future__ import annotations

import html

import pytest

import agentrt
from agentrt import Decision
from support.gates import make_gate, open_step
from test_cli import agentrt_cmd, send_tool

STAYS = "The run stays WAITING_FOR_APPROVAL until "
OWN = "the program that owns it resumes it: Driver.resume (or Driver.recover) or Gate.attach."


@pytest.mark.parametrize(
    ("origin", "rest"),
    [
        ("driver", OWN),
        ("gate", OWN),
        (
            "adapter:langgraph",
            "the program that began it ('adapter:langgraph') continues that framework run "
            "(one waiting for a person goes on by itself); a Driver does not resume it.",
        ),
        (
            "adapter:pydantic-ai",
            "the program that began it ('adapter:pydantic-ai') continues that framework run "
            "(one waiting for a person goes on by itself); a Driver does not resume it.",
        ),
        (
            "mcp-proxy",
            "the MCP host makes the identical call again through agentrt-proxy; "
            "a Driver does not resume it.",
        ),
        (
            "my-loop",
            "the program that began it ('my-loop') continues it with Gate.attach; "
            "a Driver does not resume it.",
        ),
    ],
)
def test_after_approving_the_command_names_what_continues_a_run_of_that_origin(
    database: str, origin: str, rest: str
) -> None:
    run_id = waiting_run_begun_by(database, origin)
    result = agentrt_cmd("--db", database, "approve", run_id, "--yes", "--by", "ann")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == STAYS + rest


def test_the_console_says_the_same_of_an_approved_framework_run(database: str) -> None:
    pytest.importorskip("starlette")
    from test_console import client

    run_id = waiting_run_begun_by(database, "adapter:langgraph")
    with agentrt.open_existing(database) as store:
        (approval,) = store.pending_approvals(run_id)
        agentrt.approve(store, run_id, approval.id, by="ann", shown_hash=approval.hash)
    c, _ = client(database)
    page = html.unescape(c.get(f"/runs/{run_id}").text)
    assert (
        "The console never runs tools: the run goes on when the program that began it "
        "('adapter:langgraph') continues that framework run (one waiting for a person goes on "
        "by itself); a Driver does not resume it.</p>"
    ) in page


def waiting_run_begun_by(database: str, origin: str) -> str:
    """A run a Gate of `origin` began, waiting on one approval, its session closed."""
    store = agentrt.open_store(database)
    try:
        session, step = open_step(make_gate(store, send_tool(), origin=origin), "send it")
        verdict = step.propose_sync(Decision.tool_call("send", {"to": "bob", "body": "hi"}))
        assert verdict.outcome == "pending"
        session.close_sync()
        return session.run.id
    finally:
        store.close()
