"""A standard output with no room left (`> /dev/full`) is said in one line (decision 0205).

`agentrt --db PATH migrate > /dev/full` created the record, then printed a bare
"[Errno 28] No space left on device" (unbuffered) or a traceback with exit status 120
(buffered, at the flush after the command). The line now says what was done and that
its report was lost, or that nothing was changed; exit status 1, as for a closed pipe
(decision 0196). Run with and without PYTHONUNBUFFERED: the first fails on a write inside
the command, the second on the flush after it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import agentrt
from agentrt import Decision
from agentrt._store.sqlite._migrations import SCHEMA_VERSION
from test_cli import clean_env, drive, pending, waiting_run

FULL = "No space left on device"
NOTHING_CHANGED = (
    f"agentrt: the standard output could not be written ({FULL}), so what was printed "
    "is incomplete; nothing was changed\n"
)


def full_stdout(argv: list[str], *, unbuffered: bool) -> subprocess.CompletedProcess[str]:
    """The real command with its standard output /dev/full."""
    env = {k: v for k, v in clean_env().items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    with open("/dev/full", "w") as full:
        return subprocess.run(
            [sys.executable, "-m", "agentrt", *argv],
            stdout=full,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=120,
            env=env,
        )


def raw_notes_server(directory: Path) -> list[str]:
    """The command of a server listing exactly the tools of the example notes server (its
    manifest's descriptions, schemas and annotations), spoken by `mcp_raw_server.py`. What
    the tests of a full or closed standard output look at is the `agentrt mcp` process, not
    the server, and the example's own server is an interpreter importing the MCP SDK, over
    a second of CPU each time. `agentrt mcp check` against this one says what it says
    against the example's server, line for line, with the same exit status."""
    examples = Path(__file__).resolve().parent.parent / "examples" / "mcp"
    manifest = json.loads((examples / "notes.manifest.json").read_text())
    tools = [
        {
            "name": name,
            "description": tool["description"],
            "inputSchema": tool["input_schema"],
            "annotations": tool["annotations"],
        }
        for name, tool in manifest["tools"].items()
    ]
    config = directory / "notes.json"
    config.write_text(json.dumps({"pages": [json.dumps({"tools": tools})]}))
    return [sys.executable, str(Path(__file__).parent / "mcp_raw_server.py"), str(config)]


@pytest.fixture(params=[False, True], ids=["buffered", "unbuffered"])
def unbuffered(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def test_a_migration_whose_report_cannot_be_written_says_it_was_done(
    tmp_path: Path, unbuffered: bool
) -> None:
    db = tmp_path / "runs.db"
    result = full_stdout(["--db", str(db), "migrate"], unbuffered=unbuffered)
    version = SCHEMA_VERSION
    assert (result.returncode, result.stderr) == (
        1,
        f"agentrt: the migration was done ({db}: created at schema version {version}), "
        f"but its report could not be written to the standard output ({FULL})\n",
    )
    with agentrt.open_existing(db, read_only=True) as store:  # the record is there
        assert store.list_runs() == []


def test_the_read_commands_say_their_output_is_incomplete_and_nothing_changed(
    db_path: Path, unbuffered: bool
) -> None:
    db = str(db_path)
    done = drive(db, [Decision.complete({"ok": True})], prefix="a", goal="first")
    commands = [
        ["runs"],
        ["--json", "runs"],
        ["approvals"],
        ["show", done.id],
        ["events", done.id],
        ["--json", "events"],
        ["verify"],
        ["--version"],
    ]
    for command in commands:
        result = full_stdout(["--db", db, *command], unbuffered=unbuffered)
        assert (command, result.returncode, result.stderr) == (command, 1, NOTHING_CHANGED)


def test_a_cursor_is_not_moved_past_events_that_could_not_be_written(
    db_path: Path, tmp_path: Path, unbuffered: bool
) -> None:
    db = str(db_path)
    drive(db, [Decision.complete({"ok": True})], prefix="a", goal="first")
    cursor = tmp_path / "cursor.json"
    result = full_stdout(["--db", db, "events", "--cursor", str(cursor)], unbuffered=unbuffered)
    assert (result.returncode, result.stderr) == (1, NOTHING_CHANGED)
    assert not cursor.exists() or json.loads(cursor.read_text())["heads"] in ([], [[0, None]])


def test_an_approval_decided_before_its_report_was_lost_says_it_was_decided(
    db_path: Path, unbuffered: bool
) -> None:
    db = str(db_path)
    run = waiting_run(db)
    approval = pending(db, run.id)
    result = full_stdout(
        ["--db", db, "--json", "approve", run.id, "--yes", "--by", "ops"], unbuffered=unbuffered
    )
    assert (result.returncode, result.stderr) == (
        1,
        f"agentrt: approval {approval.id} of run {run.id} was approved by ops, but its "
        f"report could not be written to the standard output ({FULL})\n",
    )
    assert pending(db, run.id).status == "approved"


# --- review (decision 0205, "Review") -----------------------------------------------------------


def test_help_on_a_full_stdout_is_said_in_one_line_not_exit_0(unbuffered: bool) -> None:
    # argparse's own print_help swallows a failed write: unbuffered, `--help > /dev/full`
    # printed nothing anywhere and exited 0.
    for command in (["--help"], ["runs", "--help"], ["bench", "compare", "--help"]):
        result = full_stdout(command, unbuffered=unbuffered)
        assert (command, result.returncode, result.stderr) == (command, 1, NOTHING_CHANGED)


def test_a_migration_with_nothing_to_do_does_not_say_it_was_done(
    db_path: Path, unbuffered: bool
) -> None:
    drive(str(db_path), [Decision.complete({"ok": True})], prefix="a")  # at the last version
    result = full_stdout(["--db", str(db_path), "migrate"], unbuffered=unbuffered)
    assert (result.returncode, result.stderr) == (1, NOTHING_CHANGED)


def test_a_plot_written_before_its_report_was_lost_says_it_was_written(
    tmp_path: Path, unbuffered: bool
) -> None:
    from agentrt.bench import Result, Taxonomy, Trial

    taxonomy = Taxonomy.of("t", ok="success", bad="unsafe")
    trials = (Trial(scenario="s", mode="v1", model="m", repeat=0, run_id="r0", outcome="ok"),)
    Result(taxonomy, "abc123", trials, created_at="2026-12-01T00:00:00+00:00").write(
        tmp_path / "a.json"
    )
    svg = tmp_path / "cmp.svg"
    result = full_stdout(
        ["bench", "compare", str(tmp_path / "a.json"), "--svg", str(svg)], unbuffered=unbuffered
    )
    assert (result.returncode, result.stderr) == (
        1,
        f"agentrt: the plot was written to {svg}, but its report could not be written to "
        f"the standard output ({FULL})\n",
    )
    assert svg.read_text().startswith("<svg")


def test_a_console_whose_address_cannot_be_printed_says_it_in_one_line(
    db_path: Path, unbuffered: bool
) -> None:
    pytest.importorskip("uvicorn")
    drive(str(db_path), [Decision.complete({"ok": True})], prefix="a")
    result = full_stdout(["--db", str(db_path), "console", "--port", "0"], unbuffered=unbuffered)
    assert (result.returncode, result.stderr) == (1, NOTHING_CHANGED)


def test_the_demo_on_a_full_stdout_says_it_in_one_line_and_not_that_nothing_changed(
    tmp_path: Path, unbuffered: bool
) -> None:
    # Its directory and database are made before it prints: they stay, and are not denied.
    workdir = tmp_path / "demo"
    result = full_stdout(["demo", "--dir", str(workdir)], unbuffered=unbuffered)
    assert (result.returncode, result.stderr) == (
        1,
        f"agentrt: the standard output could not be written ({FULL}), so what agentrt demo "
        "printed is incomplete; what it had done by then is not undone\n",
    )
    assert (workdir / "demo.db").exists()


def test_an_mcp_pin_whose_report_is_lost_at_the_exit_does_not_say_nothing_changed(
    tmp_path: Path,
) -> None:
    # Buffered, `mcp pin` returns having written its manifest, and its report is lost at the
    # flush after it: that said "nothing was changed". (Unbuffered, `agentrt mcp` says the
    # failed write itself, in its own line.)
    pytest.importorskip("mcp")
    manifest = tmp_path / "notes.manifest.json"
    result = full_stdout(
        ["mcp", "pin", "notes", "--out", str(manifest), "--", *raw_notes_server(tmp_path)],
        unbuffered=False,
    )
    assert (result.returncode, result.stderr) == (
        1,
        f"agentrt: the standard output could not be written ({FULL}), so what agentrt mcp "
        "printed is incomplete; what it had done by then is not undone\n",
    )
    example = Path(__file__).resolve().parent.parent / "examples" / "mcp" / "notes.manifest.json"
    assert json.loads(manifest.read_text()) == json.loads(example.read_text())


@pytest.mark.parametrize(
    ("words", "unchanged"),
    [
        (["check", "notes", "--manifest", "m", "--rules", "r", "--", "srv"], True),
        (["--help"], True),
        (["pin", "notes", "--out", "m", "-h"], True),
        (["pin", "notes", "--out", "m", "--", "srv", "check"], False),
        (["pin", "notes", "--out", "m", "--", "srv", "--help"], False),
        (["pin", "notes", "--he"], False),
        ([], True),
    ],
)
def test_agentrt_mcp_declares_only_what_surely_changes_nothing(
    words: list[str], unchanged: bool
) -> None:
    # `pin` writes its manifest; only `check`, help, and a line that runs no subcommand, do
    # not. A word after `--` is the server's (decision 0215).
    from agentrt.mcp._cli import changes_nothing

    assert changes_nothing(words) is unchanged
