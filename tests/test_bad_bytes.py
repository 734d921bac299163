"""Any bytes in any column: every read survives, names what is unreadable, and goes on.

Databases are made by real runs (Driver + ScriptedAgent), copied, and then
damaged through a second, plain sqlite3 connection, as someone with write access
to the file (or a bad disk) would: `CAST(X'ff' || ... AS TEXT)` puts bytes that are
not UTF-8 into a TEXT column, which SQLite accepts even in a STRICT table.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect
from agentrt._clock import parse_time
from agentrt._errors import StoreError, UnreadableSchemaError, UnsafeSchemaError
from agentrt._lease import check_live_lease
from agentrt._records import Event
from agentrt._store import Store, open_existing, open_store
from agentrt.cli import main
from agentrt.export import Follower
from agentrt.lowlevel import steps_with_reasons
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool

BAD = "X'ff'"  # a byte that never starts a UTF-8 character
LOOKUP_ARGS = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "note": {"type": "string"}},
    "additionalProperties": False,
}


def _drive(path: Path, decisions: list[Decision], prefix: str, goal: str) -> agentrt.Run:
    driver = agentrt.Driver(
        store=open_store(path),
        agent=ScriptedAgent(decisions),
        policy=agentrt.default_policy(),
        tools=[
            RecordingTool("lookup", SideEffect.READ_ONLY, schema=LOOKUP_ARGS),
            RecordingTool("send", SideEffect.REMOTE_MUTATION),
        ],
        now=FakeClock(),
        new_id=Ids(prefix),
    )
    try:
        run: agentrt.Run = driver.start_sync(goal)
        return run
    finally:
        driver.store.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A database with a finished run, then a run waiting on an approval, and a model call."""
    path = tmp_path_factory.mktemp("bad-bytes") / "template.db"
    done = _drive(
        path,
        # An argument large enough to be stored once, referred to (decision 0084).
        [
            Decision.tool_call("lookup", {"x": 1, "note": "n" * 2048}),
            Decision.complete({"ok": True}),
        ],
        "a",
        "the finished run",
    )
    waiting = _drive(
        path,
        [Decision.tool_call("lookup", {"x": 2}), Decision.tool_call("send", {"x": 3})],
        "b",
        "the waiting run",
    )
    assert waiting.status == agentrt.RunStatus.WAITING_FOR_APPROVAL
    with open_store(path) as store, store.transaction() as tx:
        tx.execute(
            "INSERT INTO model_calls (id, run_id, step_id, attempt, status, model, "
            "dispatched_at, completed_at) VALUES ('m1', ?, '', 1, 'ok', 'a-model', "
            "'2026-11-30T09:00:00.000000Z', '2026-11-30T09:00:01.000000Z')",
            (waiting.id,),
        )
    return path, done.id, waiting.id


def _text_columns(path: Path) -> list[tuple[str, str]]:
    """Every TEXT column of every table in the file (SQLite's own tables aside)."""
    conn = sqlite3.connect(path)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return [
            (table, row[1])
            for table in tables
            for row in conn.execute(f"PRAGMA table_info({table})")
            if row[2] == "TEXT"
        ]
    finally:
        conn.close()


# Every TEXT column of every agentrt table (checked against the file below).
COLUMNS = [
    *(
        ("runs", c)
        for c in [
            "id",
            "goal",
            "status",
            "reason",
            "reason_detail",
            "limits_json",
            "created_at",
            "started_at",
            "finished_at",
            "result_json",
            "lease_owner",
            "lease_expires_at",
            "lease_holder",
            "origin",
        ]
    ),
    *(
        ("steps", c)
        for c in [
            "id",
            "run_id",
            "status",
            "decision_json",
            "policy_json",
            "observation_json",
            "observation_hash",
            "started_at",
            "finished_at",
            "spec_hash",
            "policy_id",
            "reason_key",
        ]
    ),
    *(("events", c) for c in ["run_id", "step_id", "at", "type", "payload_json", "hash"]),
    *(
        ("approvals", c)
        for c in [
            "id",
            "run_id",
            "step_id",
            "kind",
            "capability_json",
            "presentation_json",
            "request_json",
            "hash",
            "status",
            "created_at",
            "expires_at",
            "decided_at",
            "decided_by",
            "note",
        ]
    ),
    *(
        ("model_calls", c)
        for c in [
            "id",
            "run_id",
            "step_id",
            "status",
            "model",
            "error",
            "dispatched_at",
            "completed_at",
        ]
    ),
    ("tool_specs", "hash"),
    ("tool_specs", "spec_json"),
    ("stored_values", "hash"),
    ("stored_values", "body"),
    ("chain_head", "hash"),
    ("agentrt_meta", "key"),
    ("agentrt_meta", "value"),
    ("schema_migrations", "applied_at"),
]


def test_the_damage_tests_cover_every_text_column_of_every_table(
    template: tuple[Path, str, str],
) -> None:
    assert sorted(COLUMNS) == sorted(_text_columns(template[0]))


def _damage(path: Path, sql: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = OFF")
        changed = conn.execute(sql).rowcount
        assert changed >= 1, sql
    finally:
        conn.close()


def _copy(template: tuple[Path, str, str], tmp_path: Path) -> Path:
    path = tmp_path / "damaged.db"
    shutil.copyfile(template[0], path)
    path.chmod(0o600)
    return path


def _bad(column: str) -> str:
    """SQL for the column's value with a byte that is not UTF-8 in front of it."""
    return f"CAST({BAD} || CAST({column} AS BLOB) AS TEXT)"


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _every_read(store: Store, done: str, waiting: str) -> dict[str, Any]:
    """Every read the store and the read models offer, on both runs; none may raise."""
    from agentrt import view

    out: dict[str, Any] = {}
    out["runs"] = store.list_runs()
    out["count"] = store.count_runs()
    for run_id in (done, waiting):
        try:
            out[f"run {run_id}"] = store.get_run(run_id)
        except agentrt.NotFoundError:  # its id is the damaged column
            out[f"run {run_id}"] = None
        out[f"steps {run_id}"] = store.list_steps(run_id, cap=None)
        out[f"calls {run_id}"] = steps_with_reasons(store, run_id, ["a framework's call"])
        out[f"approvals {run_id}"] = store.list_approvals(run_id)
        out[f"pending {run_id}"] = store.pending_approvals(run_id, cap=None)
        out[f"model calls {run_id}"] = store.list_model_calls(run_id)
        try:
            out[f"lease {run_id}"] = store.lease(run_id)
        except agentrt.NotFoundError:
            out[f"lease {run_id}"] = None
        try:
            out[f"detail {run_id}"] = view.run_detail(store, run_id)
        except agentrt.NotFoundError:
            out[f"detail {run_id}"] = None
    out["events"] = store.list_events(None, 0, 10_000, cap=None)
    out["head"] = store.chain_head()
    out["verify"] = store.verify_events()
    out["page"] = view.run_page(store)
    for step in out[f"steps {done}"]:
        if step.spec_hash:
            try:
                out[f"spec {step.spec_hash}"] = store.tool_spec(step.spec_hash)
            except StoreError as e:  # documented: a spec that will not decode is an error
                out[f"spec {step.spec_hash}"] = str(e)
    return out


@pytest.mark.parametrize(("table", "column"), COLUMNS, ids=[f"{t}.{c}" for t, c in COLUMNS])
def test_no_read_and_no_command_fails_on_bytes_that_are_not_utf8_in_any_text_column(
    template: tuple[Path, str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    table: str,
    column: str,
) -> None:
    _, done, waiting = template
    path = _copy(template, tmp_path)
    _damage(path, f"UPDATE {table} SET {column} = {_bad(column)}")
    if (table, column) == ("agentrt_meta", "key"):
        # No key reads as `chain_partitions` any more: the record's N is unknown, and every
        # open refuses it rather than guess (decision 0175), readers too; every command
        # answers with that one sentence (tests/test_chain_partitions_row_missing.py).
        with pytest.raises(StoreError, match="agentrt_meta has no chain_partitions row"):
            open_existing(path, read_only=True)
        for command in (("runs",), ("verify",), ("cancel", done)):
            code, out, err = _cli(capsys, "--db", str(path), *command)
            assert (code, out) == (1, ""), (command, err)
            assert err.startswith(f"agentrt: cannot open {path}: agentrt_meta has no ")
            assert len(err.strip().splitlines()) == 1, (command, err)
        return
    with open_existing(path, read_only=True) as store:
        reads = _every_read(store, done, waiting)
    # The undamaged rows still list, whatever column of which table was damaged.
    if (table, column) != ("runs", "id"):
        assert {r.id for r in reads["runs"]} == {done, waiting}
    assert reads["count"] == 2
    # The audit log is read whole: the follower and the list reach every event.
    assert [e.seq for e in reads["events"]] == list(range(1, len(reads["events"]) + 1))
    if table == "events":
        assert not reads["verify"].intact
        brk = reads["verify"].first_break
        assert brk.seq == 1
        assert column in brk.detail
        assert "not valid UTF-8" in brk.detail
    elif table == "stored_values":  # the events that refer to the value no longer match
        assert not reads["verify"].intact
        assert "payload_json" in reads["verify"].first_break.detail
        assert "stored value" in reads["verify"].first_break.detail
    else:
        assert reads["verify"].intact
    # Every command reads the file and answers in words: exit 0, or 1 with one line.
    commands = [
        ("runs",),
        ("runs", "--json"),
        ("show", done),
        ("show", waiting, "--json"),
        ("events",),
        ("events", "--json"),
        ("verify",),
        ("verify", "--json"),
    ]
    for command in commands:
        code, out, err = _cli(capsys, "--db", str(path), *command)
        assert code in (0, 1), (command, code, err)
        assert "Traceback" not in out + err
        assert len(err.strip().splitlines()) <= 1, (command, err)
    code, _, err = _cli(capsys, "--db", str(path), "verify")
    assert code == (1 if table in ("events", "stored_values") else 0), err
    # The commands that write read first; they too answer in words.
    for command in (("approve", waiting, "--yes"), ("cancel", done), ("cancel", waiting)):
        code, out, err = _cli(capsys, "--db", str(path), *command)
        assert code in (0, 1), (command, code, err)
        assert "Traceback" not in out + err
        assert len(err.strip().splitlines()) <= 1, (command, err)


def test_a_goal_that_is_not_utf8_reads_with_decode_error_and_every_other_run_still_lists(
    template: tuple[Path, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, done, waiting = template
    path = _copy(template, tmp_path)
    _damage(path, f"UPDATE runs SET goal = {_bad('goal')} WHERE id = '{done}'")
    with open_existing(path, read_only=True) as store:
        runs = {r.id: r for r in store.list_runs()}
        assert set(runs) == {done, waiting}
        assert runs[done].goal == ""
        assert runs[done].decode_error == (
            "goal: not valid UTF-8 text (invalid start byte: byte 0xff at offset 0 of 17)"
        )
        assert runs[waiting].goal == "the waiting run"
        assert runs[waiting].decode_error == ""
        assert store.get_run(done).decode_error == runs[done].decode_error
    code, out, err = _cli(capsys, "--db", str(path), "runs")
    assert code == 0, err
    assert "the waiting run" in out
    assert done in out
    code, out, err = _cli(capsys, "--db", str(path), "show", done)
    assert code == 0, err
    assert "unreadable  goal: not valid UTF-8 text" in out


@pytest.mark.parametrize(
    ("table", "column"),
    [("runs", "goal"), ("runs", "limits_json"), ("steps", "decision_json"), ("steps", "policy_id")],
)
def test_a_waiting_run_whose_record_is_not_utf8_is_failed_by_resume_never_continued(
    template: tuple[Path, str, str], tmp_path: Path, table: str, column: str
) -> None:
    _, _, waiting = template
    path = _copy(template, tmp_path)
    with open_store(path) as store:
        (approval,) = store.pending_approvals(waiting, cap=None)
        agentrt.approve(store, waiting, approval.id, "operator")
    _damage(
        path,
        f"UPDATE {table} SET {column} = {_bad(column)} WHERE run_id = '{waiting}'"
        if table == "steps"
        else f"UPDATE {table} SET {column} = {_bad(column)} WHERE id = '{waiting}'",
    )
    send = RecordingTool("send", SideEffect.REMOTE_MUTATION)
    driver = agentrt.Driver(
        store=open_store(path),
        agent=ScriptedAgent([Decision.complete({})] * 3),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("lookup", SideEffect.READ_ONLY), send],
        now=FakeClock(),
        new_id=Ids("c"),
    )
    try:
        run = driver.resume_sync(waiting)
    finally:
        driver.store.close()
    assert send.calls == []
    assert (run.status, run.reason) == (agentrt.RunStatus.FAILED, "internal_error")
    assert run.reason_detail.startswith(
        f"the run's record cannot be read back ({column}: not valid UTF-8 text (invalid start "
        "byte: byte 0xff at offset 0 of "
    )
    assert run.reason_detail.count(f"{column}:") == 1


def test_a_step_or_approval_that_is_not_utf8_reads_with_decode_error_naming_the_column(
    template: tuple[Path, str, str], tmp_path: Path
) -> None:
    _, _, waiting = template
    path = _copy(template, tmp_path)
    _damage(path, f"UPDATE steps SET decision_json = {_bad('decision_json')} WHERE idx = 0")
    _damage(path, f"UPDATE approvals SET request_json = {_bad('request_json')}")
    with open_existing(path, read_only=True) as store:
        first, second = store.list_steps(waiting)
        assert first.decision is None
        assert first.decode_error.startswith("decision_json: not valid UTF-8 text")
        assert second.decode_error == ""
        (approval,) = store.pending_approvals(waiting, cap=None)
        assert approval.request is None
        assert approval.decode_error.startswith("request_json: not valid UTF-8 text")


def test_an_unreadable_lease_expiry_or_owner_reads_as_held_never_as_free(
    template: tuple[Path, str, str], tmp_path: Path
) -> None:
    _, done, _ = template
    path = _copy(template, tmp_path)
    _damage(
        path,
        f"UPDATE runs SET lease_owner = CAST(X'ff' AS TEXT), "
        f"lease_expires_at = CAST(X'ff' AS TEXT) WHERE id = '{done}'",
    )
    with open_existing(path, read_only=True) as store:
        lease = store.lease(done)
    assert lease.owner == "\\xff"
    assert lease.expires_at is not None and lease.expires_at.year == 9999


def test_an_unreadable_owner_shown_as_my_own_name_is_never_my_lease(
    template: tuple[Path, str, str], tmp_path: Path
) -> None:
    """An owner that will not read is somebody, even when what can be shown of it is this
    very owner's name: the lease is never "this driver's own" to a resumer."""
    _, done, _ = template
    path = _copy(template, tmp_path)
    _damage(
        path,
        "UPDATE runs SET status = 'RUNNING', lease_owner = CAST(X'6d65ff' AS TEXT), "
        f"lease_expires_at = '2999-01-01T00:00:00.000000Z' WHERE id = '{done}'",
    )
    with open_existing(path, read_only=True) as store:
        lease = store.lease_state(done)
    assert lease is not None
    me = "me\\xff"  # what the unreadable owner shows as, spelled as an owner's name
    assert (lease.owner, lease.owner_readable, lease.held_by(me)) == (me, False, False)
    with pytest.raises(agentrt.RunLeasedError):
        check_live_lease(lease, me, parse_time("2026-11-30T09:00:00.000000Z"))


def test_a_lease_expiry_that_is_text_but_no_stored_time_is_held_never_expired(
    template: tuple[Path, str, str], tmp_path: Path
) -> None:
    """`'0'` sorts before any stored time, and was once judged expired by comparing
    text: a lease nobody can date is held."""
    _, done, _ = template
    path = _copy(template, tmp_path)
    _damage(
        path,
        "UPDATE runs SET status = 'RUNNING', lease_owner = 'someone', "
        f"lease_expires_at = '0' WHERE id = '{done}'",
    )
    with open_existing(path, read_only=True) as store:
        lease = store.lease_state(done)
    assert lease is not None
    assert (lease.expiry_readable, lease.expires_at, lease.shown_expiry()) == (False, None, "0")
    now = parse_time("2026-11-30T09:00:00.000000Z")
    assert lease.expired_at(now) is False and lease.live_at(now) is False
    with pytest.raises(agentrt.RunLeasedError):
        check_live_lease(lease, "me", now)


def test_a_lease_expiry_made_unreadable_mid_run_stops_the_loop_before_its_tool_starts(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agentrt.db"
    send = RecordingTool("send", SideEffect.READ_ONLY)

    def damage_the_lease(point: str, session: Any) -> None:
        if point == "policy.allowed":  # after the decision, before the tool-started write
            _damage(path, f"UPDATE runs SET lease_expires_at = {_bad('lease_expires_at')}")

    driver = agentrt.Driver(
        store=open_store(path),
        agent=ScriptedAgent([Decision.tool_call("send", {"x": 1}), Decision.complete({})]),
        policy=agentrt.default_policy(),
        tools=[send],
        now=FakeClock(),
        new_id=Ids("a"),
        probe=damage_the_lease,
    )
    try:
        with pytest.raises(agentrt.LeaseLostError, match="no side effect is started"):
            driver.start_sync("send one")
    finally:
        driver.store.close()
    assert send.calls == []


def test_verify_names_the_seq_and_column_of_an_event_that_is_not_utf8(
    template: tuple[Path, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _copy(template, tmp_path)
    _damage(path, f"UPDATE events SET payload_json = {_bad('payload_json')} WHERE seq = 3")
    with open_existing(path, read_only=True) as store:
        report = store.verify_events()
    assert (report.intact, report.checked, report.head_seq) == (False, 2, 2)
    assert report.first_break is not None
    assert report.first_break.seq == 3
    assert report.first_break.problem == "altered"
    assert report.first_break.detail.startswith(
        "payload_json is not valid UTF-8 text (invalid start byte: byte 0xff at offset 0"
    )
    code, out, _ = _cli(capsys, "--db", str(path), "verify")
    assert code == 1
    assert out.startswith("broken at seq 3: altered")
    assert "payload_json is not valid UTF-8 text" in out


def test_an_event_rehashed_over_bytes_that_are_not_utf8_is_still_a_break(
    template: tuple[Path, str, str], tmp_path: Path
) -> None:
    """The hash covers the bytes as stored, but the runtime never writes such bytes."""
    path = _copy(template, tmp_path)
    with open_existing(path, read_only=True) as store:
        events = store.list_events(None, 0, 10_000, cap=None)
    last = events[-1]
    prev = events[-2].hash
    _damage(path, f"UPDATE events SET type = CAST(X'ff' AS TEXT) WHERE seq = {last.seq}")
    # Recompute the last event's hash over exactly the stored bytes, as a forger would.
    import hashlib

    from agentrt._canonical import to_text
    from agentrt._chain import netstring
    from agentrt._clock import format_time

    parts: list[str | bytes] = [prev, str(last.seq), last.run_id, last.step_id]
    parts += [format_time(last.at), b"\xff", to_text(last.payload)]
    digest = hashlib.sha256(b"".join(map(netstring, parts))).hexdigest()
    _damage(path, f"UPDATE events SET hash = '{digest}' WHERE seq = {last.seq}")
    with open_existing(path, read_only=True) as store:
        report = store.verify_events()
    assert report.first_break is not None
    assert (report.first_break.seq, report.first_break.problem) == (last.seq, "unreadable")
    assert report.first_break.detail.startswith("type is not valid UTF-8 text")
    assert report.head_seq == last.seq - 1


def test_the_follower_delivers_an_event_that_is_not_utf8_and_moves_past_it(
    template: tuple[Path, str, str], tmp_path: Path
) -> None:
    path = _copy(template, tmp_path)
    _damage(path, f"UPDATE events SET payload_json = {_bad('payload_json')} WHERE seq = 2")
    delivered: list[Event] = []
    with Follower(path, cursor=tmp_path / "cursor.json") as follower:
        count = follower.run(delivered.append, follow=False)
        position = follower.position
    assert count == len(delivered) and count > 3
    assert position == delivered[-1].seq
    assert [e.seq for e in delivered] == list(range(1, count + 1))
    assert delivered[1].payload is None
    assert delivered[1].decode_error.startswith("payload_json: not valid UTF-8 text")
    assert all(e.decode_error == "" for e in delivered if e.seq != 2)


def test_a_model_call_that_is_not_utf8_reads_with_decode_error(
    template: tuple[Path, str, str], tmp_path: Path
) -> None:
    _, _, waiting = template
    path = _copy(template, tmp_path)
    _damage(path, f"UPDATE model_calls SET model = {_bad('model')}")
    with open_existing(path, read_only=True) as store:
        (call,) = store.list_model_calls(waiting)
    assert call.model == ""
    assert call.decode_error.startswith("model: not valid UTF-8 text")


@pytest.mark.parametrize("column", ["name", "type", "tbl_name", "sql"])
def test_a_schema_entry_that_is_not_utf8_is_refused_at_every_open_in_one_sentence(
    template: tuple[Path, str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    column: str,
) -> None:
    path = _copy(template, tmp_path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute(
            f"UPDATE sqlite_master SET {column} = {_bad(column)} WHERE name = 'tool_specs'"
        )
        conn.execute("PRAGMA writable_schema = OFF")
    finally:
        conn.close()
    shown = "\\xfftool_specs" if column == "name" else "tool_specs"
    openers: list[Callable[[], Store]] = [
        lambda: open_store(path),
        lambda: open_existing(path),
        lambda: open_existing(path, read_only=True),
    ]
    for opener in openers:
        with pytest.raises(UnreadableSchemaError) as caught:
            opener()
        assert str(caught.value) == (
            f"SQLite cannot load the schema of {path} (malformed database schema ({shown})): "
            "the database schema is damaged, and agentrt refuses a schema it cannot read"
        )
        assert isinstance(caught.value, UnsafeSchemaError)
    for command in (("runs",), ("verify",), ("approve", "x", "--yes")):
        code, out, err = _cli(capsys, "--db", str(path), *command)
        assert (code, out) == (1, ""), command
        assert err == (
            f"agentrt: refusing {path}: its schema (the list of its tables and indexes) is "
            "damaged or was edited by hand, so agentrt cannot check that it is safe to use\n"
        )


def test_schema_sql_that_sqlite_loads_but_is_not_utf8_is_refused_in_one_sentence(
    template: tuple[Path, str, str], tmp_path: Path
) -> None:
    path = _copy(template, tmp_path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("CREATE TABLE notes (body TEXT DEFAULT 'x')")  # a consumer's own table
        sql = b"CREATE TABLE notes (body TEXT DEFAULT '\xff')"
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute(
            f"UPDATE sqlite_master SET sql = CAST(X'{sql.hex()}' AS TEXT) WHERE name = 'notes'"
        )
        conn.execute("PRAGMA writable_schema = OFF")
    finally:
        conn.close()
    openers: list[Callable[[], Store]] = [
        lambda: open_store(path),
        lambda: open_existing(path, read_only=True),
    ]
    for opener in openers:
        with pytest.raises(UnreadableSchemaError) as caught:
            opener()
        assert str(caught.value) == (
            "schema entry 'notes' has SQL that is not valid UTF-8 text (invalid start byte: "
            f"byte 0xff at offset 39 of {len(sql)}): the database schema is damaged, and "
            "agentrt refuses a schema it cannot read"
        )
