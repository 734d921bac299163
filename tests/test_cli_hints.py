"""The command's hints can be pasted, and a run may be named by a unique prefix of its id.

Every command the CLI prints for the operator to run carries the `--db` it was
given (by --db or AGENTRT_DB), quoted for a POSIX shell; every command taking
RUN accepts a prefix of at least 8 characters and refuses an ambiguous one,
naming the candidates.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from pathlib import Path

import pytest

import agentrt
from agentrt import Decision, SideEffect
from agentrt.cli import main
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, RecordingTool

AWKWARD = "it's my $HOME; db"  # a space, a quote, a dollar and a semicolon


def start(store: agentrt.Store, run_id: str, goal: str = "push it") -> agentrt.Run:
    """A run that looks something up, then waits on an approval to push."""
    # Ids begin like the run's and are unique to it: a run's records are recognisable.
    ids = iter(
        run_id[:8] + hashlib.sha256(f"{run_id}/{n}".encode()).hexdigest()[:24]
        for n in range(1, 100)
    )
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(
            [
                Decision.tool_call("look", {"x": 1}),
                Decision.tool_call("push", {"x": 2}),
                Decision.complete(),
            ]
        ),
        policy=agentrt.default_policy(),
        tools=[
            RecordingTool("look", SideEffect.READ_ONLY),
            RecordingTool("push", SideEffect.REMOTE_MUTATION),
        ],
        now=FakeClock(),
        new_id=lambda: next(ids),
    )
    return driver.start_sync(goal, run_id=run_id)


@pytest.fixture
def awkward_db(tmp_path: Path) -> Path:
    folder = tmp_path / AWKWARD
    folder.mkdir()
    return folder / "runs.db"


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def printed_commands(text: str) -> list[list[str]]:
    """Every `agentrt ...` command in `text`, split as a POSIX shell splits it."""
    found = []
    for line in text.splitlines():
        for part in line.split("   or   "):
            at = part.find("agentrt --db ")
            if at >= 0:
                found.append(shlex.split(part[at:].split(" [")[0]))
    return found


def test_every_printed_command_carries_the_db_quoted_for_a_shell(
    awkward_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with agentrt.open_store(awkward_db) as store:
        one = start(store, "a" * 32)
        start(store, "b" * 32)
    db = str(awkward_db)
    outputs = [
        cli(capsys, "--db", db, "runs", "--limit", "1"),  # next page
        cli(capsys, "--db", db, "show", one.id, "--limit", "1"),  # decide, other steps
        cli(capsys, "--db", db, "events", one.id, "--limit", "2"),  # more events
        cli(capsys, "--db", db, "events", "--limit", "2"),  # more events, every run
        cli(capsys, "--db", db, "approvals", "--limit", "1"),  # more approvals, decide one
    ]
    commands = [c for code, out, _ in outputs for c in printed_commands(out) if code == 0]
    assert [c[3] for c in commands] == [
        "runs",
        "approve",
        "reject",
        "show",
        "events",
        "events",
        "approvals",
        "approve",
        "reject",
    ]
    assert all(c[:3] == ["agentrt", "--db", db] for c in commands)
    # The ones that only read, pasted as printed (N and RUN/ID placeholders filled in):
    assert commands[0][3:] == ["runs", "--offset", "1", "--limit", "1"]
    assert commands[3][3:] == ["show", one.id, "--offset", "N"]
    assert commands[4][3:] == ["events", one.id, "--after", "2"]
    assert commands[5][3:] == ["events", "--after", "2"]
    for argv in (commands[0], commands[4], commands[5], commands[6]):
        assert cli(capsys, *argv[1:])[0] == 0, argv


def test_hints_name_the_database_given_by_agentrt_db(
    awkward_db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with agentrt.open_store(awkward_db) as store:
        run = start(store, "a" * 32)
    monkeypatch.setenv("AGENTRT_DB", str(awkward_db))
    code, out, _ = cli(capsys, "show", run.id)
    assert code == 0
    assert printed_commands(out)[0] == ["agentrt", "--db", str(awkward_db), "approve", run.id]
    assert f"agentrt --db {shlex.quote(str(awkward_db))} approve {run.id}" in out


@pytest.mark.parametrize("command", ["show", "events", "approve", "reject", "cancel"])
def test_every_command_taking_run_accepts_a_unique_prefix_of_8_characters(
    db_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    with agentrt.open_store(db_path) as store:
        run = start(store, "abcdef01" + "0" * 24)
        start(store, "abcdef02" + "0" * 24)
    extra = ["--yes"] if command in ("approve", "reject") else []
    code, out, err = cli(capsys, "--db", str(db_path), command, "abcdef01", *extra)
    assert (code, err) == (0, "")
    with agentrt.open_existing(db_path, read_only=True) as store:
        after = store.get_run(run.id)
        other = store.get_run("abcdef02" + "0" * 24)
        if command == "approve":
            assert store.list_approvals(run.id)[0].status == "approved"
        elif command in ("reject", "cancel"):
            assert after.status == "CANCELLED"
        else:  # this run's records (its step ids begin like it), never the other's
            assert "abcdef01" in out and "abcdef02" not in out
    assert other.status == "WAITING_FOR_APPROVAL"  # the other run is untouched


def test_an_ambiguous_prefix_is_refused_naming_the_candidates_and_changes_nothing(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with agentrt.open_store(db_path) as store:
        first = start(store, "abcdef01" + "0" * 24)
        second = start(store, "abcdef01" + "1" * 24)
    code, out, err = cli(capsys, "--db", str(db_path), "cancel", "abcdef01")
    assert (code, out) == (1, "")
    assert err == (
        f"agentrt: {db_path}: run id prefix abcdef01 matches 2 runs ({first.id}, {second.id}); "
        "give more of the id\n"
    )
    with agentrt.open_existing(db_path, read_only=True) as store:
        assert [r.status for r in store.list_runs()] == ["WAITING_FOR_APPROVAL"] * 2


def test_a_prefix_matching_many_runs_names_the_first_five(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with agentrt.open_store(db_path) as store:
        ids = [start(store, f"abcdef01{n:024x}").id for n in range(7)]
    code, _, err = cli(capsys, "--db", str(db_path), "show", "abcdef01")
    assert code == 1
    assert err == (
        f"agentrt: {db_path}: run id prefix abcdef01 matches more than 5 runs "
        f"({', '.join(ids[:5])}); give more of the id\n"
    )


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("abcdef0", "run id prefix abcdef0 is too short (7 characters): give at least 8 "
         "characters of the run id"),
        ("abcdef0*", "no run 'abcdef0*' (a run id may be shortened to a unique prefix of at "
         "least 8 of its hex characters)"),
        ("12345678", "no run id starts with 12345678"),
    ],
)  # fmt: skip
def test_a_prefix_too_short_not_hex_or_matching_nothing_is_not_found(
    db_path: Path, capsys: pytest.CaptureFixture[str], given: str, message: str
) -> None:
    with agentrt.open_store(db_path) as store:
        start(store, "abcdef01" + "0" * 24)
    assert cli(capsys, "--db", str(db_path), "show", given) == (
        1,
        "",
        f"agentrt: {db_path}: {message}\n",
    )


@pytest.mark.parametrize("command", ["show", "events", "approve", "reject", "cancel"])
def test_a_run_id_prefix_shorter_than_8_characters_is_refused_as_too_short(
    db_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    with agentrt.open_store(db_path) as store:
        run = start(store, "abcdef01" + "0" * 24)
    extra = ["--yes"] if command in ("approve", "reject") else []
    # It would match the one run: it is refused for its length, not as matching nothing.
    code, out, err = cli(capsys, "--db", str(db_path), command, "abc", *extra)
    assert (code, out) == (1, "")
    assert err == (
        f"agentrt: {db_path}: run id prefix abc is too short (3 characters): give at least 8 "
        "characters of the run id\n"
    )
    with agentrt.open_existing(db_path, read_only=True) as store:
        assert store.get_run(run.id).status == "WAITING_FOR_APPROVAL"


def test_a_whole_run_id_is_never_read_as_a_prefix(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with agentrt.open_store(db_path) as store:
        start(store, "abcdef01" + "0" * 24)
    longer = "abcdef01" + "0" * 24 + "0"
    assert cli(capsys, "--db", str(db_path), "show", longer) == (
        1,
        "",
        f"agentrt: {db_path}: no run {longer!r}\n",
    )
    assert os.path.exists(db_path)
