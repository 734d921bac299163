"""The `agentrt` command and the export follower on a PostgreSQL store, given by URL.

Runs are made by a real Driver on the PostgreSQL store (a schema of its own per
test on the server named by `AGENTRT_TEST_POSTGRES_URL`, `support.postgres`);
the same script is also run on a SQLite file, and every read command must print
the same thing for both. A URL's password is never printed: not in a result, a
printed command, a refusal or an error (the test server trusts loopback, so a
password it ignores opens it; an unreachable port gives the error).
"""

from __future__ import annotations

import json
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path

import pytest

import agentrt
from agentrt import Decision
from agentrt.cli import main
from agentrt.export import Follower, JsonLinesSink, load_cursor
from agentrt.scripted import ScriptedAgent
from agentrt.trace import event_json
from conftest import FakeClock, Ids
from support.database import pooled_schema
from support.postgres import postgres_schema
from test_cli import clean_env, lookup_tool, send_tool

SECRET = "s3cret-Pw"
"""A password in the URL: the trusting test server ignores it; no output may hold it."""

SCRIPT = [
    Decision.tool_call("lookup", {"x": 1}),
    Decision.tool_call("send", {"to": "bob@example.com", "body": "hello"}),
    Decision.complete({"sent": True}),
]


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A schema on the test server exactly as a fresh migration leaves it (the pool's:
    decision 0105)."""
    with ExitStack() as stack:
        yield pooled_schema(stack, "the command line's tests")


@pytest.fixture
def unmade_pg_url() -> Iterator[str]:
    """A fresh schema on the test server, holding no store yet."""
    with ExitStack() as stack:
        yield postgres_schema(stack, "the command line's tests")


def with_password(url: str, password: str = SECRET) -> str:
    """`url` with `password` as its user's password."""
    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user}:{password}@{host}"


def waiting_run(db: str | Path, prefix: str = "a") -> agentrt.Run:
    """A run by a Driver: it looked something up, then asked to send: WAITING on one approval."""
    d = agentrt.Driver(
        store=agentrt.open_store(db),
        agent=ScriptedAgent(list(SCRIPT)),
        policy=agentrt.default_policy(),
        tools=[lookup_tool(), send_tool()],
        now=FakeClock(),
        new_id=Ids(prefix),
    )
    try:
        run: agentrt.Run = d.start_sync("send the report")
        return run
    finally:
        d.store.close()


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


READS: Sequence[Sequence[str]] = (
    ("runs",),
    ("--json", "runs"),
    ("show", "RUN"),
    ("--json", "show", "RUN"),
    ("events", "RUN"),
    ("--json", "events", "RUN"),
    ("events", "RUN", "--limit", "3"),
    ("approvals",),
    ("verify", "--quick"),
)


def test_runs_show_events_and_verify_read_a_driver_run_on_postgres_as_on_sqlite(
    unmade_pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pg_url = unmade_pg_url
    agentrt.open_store(pg_url, chain_partitions=1).close()  # one chain, as the SQLite file
    run = waiting_run(pg_url)
    sqlite_db = tmp_path / "same.db"
    assert waiting_run(sqlite_db).id == run.id
    for words in READS:
        args = [w.replace("RUN", run.id) for w in words]
        on_pg = cli(capsys, "--db", pg_url, *args)
        on_sqlite = cli(capsys, "--db", str(sqlite_db), *args)
        assert on_pg[0] == 0, on_pg
        if words[0] == "verify":  # the chain alike; the file is the server's to check
            assert on_pg[1].splitlines()[0] == on_sqlite[1].splitlines()[0]
            assert on_pg[1].splitlines()[1] == (
                "file: not checked here (a PostgreSQL server keeps and checks its own files)"
            )
            continue
        # The same, but for the database named in the commands printed for the operator.
        assert on_pg == (
            on_sqlite[0],
            on_sqlite[1].replace(str(sqlite_db), shlex.quote(pg_url)),
            on_sqlite[2].replace(str(sqlite_db), shlex.quote(pg_url)),
        ), words


def test_runs_show_events_and_verify_print_what_the_postgres_record_holds(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = waiting_run(pg_url)
    with agentrt.open_existing(pg_url, read_only=True) as store:
        stored = store.list_events(run.id, 0, 1000)
        (approval,) = store.list_approvals(run.id)
    code, out, err = cli(capsys, "--db", pg_url, "--json", "runs")
    assert (code, err) == (0, "")
    (summary,) = json.loads(out)["runs"]
    assert (summary["id"], summary["status"]) == (run.id, "WAITING_FOR_APPROVAL")
    assert [w["hash"] for w in summary["waiting"]] == [approval.hash]
    code, out, err = cli(capsys, "--db", pg_url, "--json", "events", run.id)
    assert (code, err) == (0, "")
    assert [json.loads(line) for line in out.splitlines()] == [
        json.loads(json.dumps(event_json(e))) for e in stored
    ]
    code, out, err = cli(capsys, "--db", pg_url, "--json", "show", run.id)
    assert (code, err) == (0, "")
    assert json.loads(out)["run"]["status"] == "WAITING_FOR_APPROVAL"
    code, out, err = cli(capsys, "--db", pg_url, "--json", "verify")
    assert (code, err) == (0, "")
    doc = json.loads(out)  # a new schema's chain is in 16 partitions, the run's in one
    heads = [(h["seq"], h["hash"]) for h in doc["heads"]]
    assert [h for h in heads if h[0]] == [(stored[-1].seq, stored[-1].hash)]
    assert doc["head"] == ",".join(f"{s}:{h}" for s, h in heads)
    code, out, err = cli(capsys, "--db", pg_url, "verify")
    assert (code, err) == (0, "")
    assert out.splitlines()[0].startswith(
        f"intact: {len(stored)} events checked in 16 partitions; head 16:{doc['head_hash']}"
    )
    code, out, err = cli(capsys, "--db", pg_url, "verify", "--head", doc["head"])
    assert (code, err) == (0, "")
    assert out.splitlines()[0].endswith("; the kept heads of 16 partitions match")


def test_agentrt_db_may_be_a_url(
    pg_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = waiting_run(pg_url)
    monkeypatch.setenv("AGENTRT_DB", pg_url)
    code, out, err = cli(capsys, "--json", "runs")
    assert (code, err) == (0, "")
    assert [r["id"] for r in json.loads(out)["runs"]] == [run.id]


def test_approve_by_url_lets_the_run_go_on(pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = waiting_run(pg_url)
    with agentrt.open_existing(pg_url, read_only=True) as store:
        (approval,) = store.list_approvals(run.id)
    code, out, err = cli(
        capsys, "--db", with_password(pg_url), "approve", run.id, "--yes", "--by", "alice"
    )
    assert (code, err) == (0, ""), err
    assert SECRET not in out
    with agentrt.open_existing(pg_url, read_only=True) as store:
        (decided,) = store.list_approvals(run.id)
    assert (decided.id, decided.status, decided.decided_by) == (approval.id, "approved", "alice")


def test_a_password_in_the_url_is_never_printed_by_any_command(
    pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = waiting_run(pg_url)
    url = with_password(pg_url)
    printed = []
    for words in (*READS, ("events", "RUN", "--limit", "2", "--cursor", str(tmp_path / "c"))):
        code, out, err = cli(capsys, "--db", url, *[w.replace("RUN", run.id) for w in words])
        assert code == 0, err
        printed.append(out + err)
    assert not [p for p in printed if SECRET in p]
    # The command printed for the operator carries the URL, its password `***`.
    (hint,) = [line for line in printed[6].splitlines() if line.startswith("more events")]
    shown = with_password(pg_url, "***")
    with agentrt.open_existing(pg_url, read_only=True) as store:
        third = store.list_events(run.id, 0, 3)[-1].seq
    assert hint == (
        f"more events after seq {third}: agentrt --db '{shown}' events {run.id} --after {third}"
    )


@pytest.mark.parametrize(
    "words",
    [
        ("show", "0" * 32),
        ("events", "12345678"),
        ("cancel", "0" * 32),
        ("approve", "RUN", "--approval", "nope", "--yes"),
    ],
)
def test_no_run_or_approval_on_postgres_names_the_url_its_password_hidden(
    pg_url: str, capsys: pytest.CaptureFixture[str], words: tuple[str, ...]
) -> None:
    run = waiting_run(pg_url)
    code, out, err = cli(
        capsys, "--db", with_password(pg_url), *[w.replace("RUN", run.id) for w in words]
    )
    assert (code, out) == (1, "")
    assert err.startswith(f"agentrt: {with_password(pg_url, '***')}: no "), err
    assert SECRET not in err


@pytest.mark.parametrize("where", ["user", "parameter"])
def test_a_server_that_cannot_be_reached_is_one_line_without_the_password(
    where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = (
        f"postgresql://root:{SECRET}@127.0.0.1:1/test"
        if where == "user"
        else f"postgresql://root@127.0.0.1:1/test?password={SECRET}"
    )
    shown = url.replace(SECRET, "***")
    for command in (("runs",), ("verify",), ("events",), ("approvals",)):
        code, out, err = cli(capsys, "--db", url, *command)
        assert (code, out) == (1, "")
        assert SECRET not in err
        assert err.startswith(f"agentrt: cannot open {shown}: connection failed: ")
        assert "Connection refused" in err
        assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (
            "postgresql://root@127.0.0.1:5432/test?schema=Not-A-Name",
            "agentrt: cannot open postgresql://root@127.0.0.1:5432/test?schema=Not-A-Name: "
            "schema 'Not-A-Name' is not a plain lower-case name (letters, digits, underscores)",
        ),
        (
            f"postgresql://root:{SECRET}@[127.0.0.1/test",
            "agentrt: cannot open postgresql://root:***@[127.0.0.1/test: it is not a usable "
            "URL (Invalid IPv6 URL)",
        ),
        (
            f"postgresql://root:{SECRET}@127.0.0.1:port/test",
            "agentrt: cannot open postgresql://root:***@127.0.0.1:port/test: connection is "
            'bad: invalid integer value "port" for connection option "port"',
        ),
    ],
)
def test_a_bad_url_is_one_clear_line_and_exit_1(
    url: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "--db", url, "runs") == (1, "", said + "\n")


def test_a_schema_with_no_store_is_refused_never_created(
    unmade_pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pg_url = unmade_pg_url
    url = with_password(pg_url)
    code, out, err = cli(capsys, "--db", url, "runs")
    assert (code, out) == (1, "")
    schema = pg_url.rpartition("schema=")[2]
    assert err == (  # not there at all: a misspelled `schema=`, most often
        f"agentrt: refusing {with_password(pg_url, '***')}: the database has no schema "
        f"{schema} (check the URL's database and schema=)\n"
    )
    with pytest.raises(agentrt.SchemaVersionError):  # still nothing there
        agentrt.open_existing(pg_url, read_only=True)
    import psycopg

    with psycopg.connect(pg_url.partition("?")[0], autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")  # there, and empty
    code, out, err = cli(capsys, "--db", url, "runs")
    assert (code, out) == (1, "")
    assert err == (
        f"agentrt: refusing {with_password(pg_url, '***')}: this schema holds no agentrt "
        "record (perhaps the URL is not the one you meant); to create one in a new or empty "
        "schema, its owner runs: agentrt --db OWNER_URL migrate\n"
    )


def test_the_follower_exports_a_postgres_record_once_across_a_restart_by_its_cursor_file(
    pg_url: str, tmp_path: Path
) -> None:
    run = waiting_run(pg_url)
    with agentrt.open_existing(pg_url, read_only=True) as store:
        stored = store.list_events(None, 0, 1000)
    cursor, out = tmp_path / "cursor", tmp_path / "events.jsonl"
    url = with_password(pg_url)
    with Follower(url, cursor=cursor, page_size=2) as follower, JsonLinesSink(out) as sink:
        assert follower.run(sink, follow=False, max_events=3) == 3
    assert load_cursor(cursor) is not None and load_cursor(cursor).seq == stored[2].seq
    assert cursor.stat().st_mode & 0o777 == 0o600
    with Follower(url, run_id=None, cursor=cursor) as follower, JsonLinesSink(out) as sink:
        assert follower.run(sink, follow=False) == len(stored) - 3
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines == [json.loads(json.dumps(event_json(e))) for e in stored]
    assert {e.run_id for e in stored} == {run.id}


def test_events_with_a_cursor_file_continues_where_it_stopped_on_postgres(
    pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = waiting_run(pg_url)
    with agentrt.open_existing(pg_url, read_only=True) as store:
        stored = store.list_events(run.id, 0, 1000)
    cursor = str(tmp_path / "cursor")
    seen = []
    for _ in range(3):
        code, out, err = cli(
            capsys, "--db", pg_url, "--json", "events", run.id, "--cursor", cursor, "--limit", "2"
        )
        assert code == 0, err
        seen += [json.loads(line)["seq"] for line in out.splitlines()]
    assert seen == [e.seq for e in stored][:6]


def test_events_follow_prints_each_commit_of_other_connections_as_it_commits_on_postgres(
    pg_url: str,
) -> None:
    # Two runs chained in different partitions, decided on two connections of their own
    # (as two hosts would), and one resumed by a Driver on a third: `--follow` polls the
    # record (decision 0096) and prints each commit's events before the next is made.
    first, second = waiting_run(pg_url, "a"), waiting_run(pg_url, "b")
    with agentrt.open_existing(pg_url, read_only=True) as store:
        assert len(store.chain_heads()) == 16
        before = store.list_events(None, 0, 1000)
    # A partition's seqs are one residue mod 16: the two runs are in different partitions.
    parts = [{e.seq % 16 for e in before if e.run_id == r.id} for r in (first, second)]
    assert len(parts[0]) == len(parts[1]) == 1 and parts[0] != parts[1]
    follower = subprocess.Popen(
        [sys.executable, "-m", "agentrt", "--db", with_password(pg_url), "--json", "events",
         "--follow", "--interval", "0.05", "--timeout", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in follower.stdout or ()])
    reader.start()
    printed: list[dict[str, object]] = []
    delivered: set[int] = set()

    def printed_up_to_now() -> list[agentrt.Event]:
        """The events committed since the last call (seq order is not commit order across
        partitions), once the follower has printed as many events as the record holds."""
        with agentrt.open_existing(pg_url, read_only=True) as store:
            held = store.list_events(None, 0, 1000)
        while len(printed) < len(held):
            printed.append(json.loads(lines.get(timeout=30)))
        fresh = [e for e in held if e.seq not in delivered]
        delivered.update(e.seq for e in fresh)
        return fresh

    writers = [agentrt.open_existing(pg_url), agentrt.open_existing(pg_url)]
    resumer = agentrt.Driver(
        store=agentrt.open_existing(pg_url),
        agent=ScriptedAgent(list(SCRIPT)),
        policy=agentrt.default_policy(),
        tools=[lookup_tool(), send_tool()],
        now=FakeClock(),
        new_id=Ids("r"),
    )
    commits = []
    try:
        commits.append(printed_up_to_now())
        for store, run in zip(writers, (first, second), strict=True):
            (approval,) = store.list_approvals(run.id)
            agentrt.approve(store, run.id, approval.id, by="ann", shown_hash=approval.hash)
            commits.append(printed_up_to_now())
        assert resumer.resume_sync(second.id).status == "COMPLETED"
        commits.append(printed_up_to_now())
    finally:
        for store in writers:
            store.close()
        resumer.store.close()
        follower.terminate()  # a clean stop, as Ctrl-C would be
        follower.wait(30)
        reader.join(30)
    assert follower.returncode == 0
    assert follower.stderr is not None and follower.stderr.read() == ""
    assert lines.empty()
    # Each commit's events were printed before the next commit was made, each once, in
    # the order they were committed, and as the record holds them.
    assert commits[0] == before
    assert [{e.run_id for e in events} for events in commits[1:]] == [
        {first.id},
        {second.id},
        {second.id},
    ]
    assert printed == [json.loads(json.dumps(event_json(e))) for events in commits for e in events]


def test_export_otel_once_sends_the_postgres_record_and_keeps_its_cursor_in_a_file(
    pg_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="agentrt export --otel needs the otel extra")
    from support.otlp import Receiver

    run = waiting_run(pg_url)
    with agentrt.open_existing(pg_url, read_only=True) as store:
        head = max(seq for seq, _ in store.chain_heads())
    cursor = tmp_path / "otel.cursor"
    with Receiver() as receiver:
        for name, value in {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint,
            "OTEL_SERVICE_NAME": "shop-agent",
        }.items():
            monkeypatch.setenv(name, value)
        code, out, err = cli(
            capsys,
            "--db",
            with_password(pg_url),
            "export",
            "--otel",
            "--once",
            "--cursor",
            str(cursor),
        )
        spans = receiver.snapshot()
    assert (code, out, err) == (0, "", "")
    # Only the finished lookup step is a whole span; the send waits for its approval.
    assert [(s.name, s.attributes["agentrt.run.id"]) for s in spans] == [("agentrt.step", run.id)]
    saved = load_cursor(cursor)
    assert saved is not None and saved.seq == head
    assert cursor.stat().st_mode & 0o777 == 0o600


# --- the console and the webhook's Local approver, by URL ----------------------------------------


def test_the_console_lists_and_decides_a_postgres_run_and_never_shows_the_password(
    pg_url: str,
) -> None:
    pytest.importorskip("starlette", reason="the console needs its extra")
    from starlette.testclient import TestClient

    from agentrt.console import ConsoleConfig, create_app

    run = waiting_run(pg_url)
    with agentrt.open_existing(pg_url, read_only=True) as store:
        (approval,) = store.list_approvals(run.id)
    config = ConsoleConfig(db_path=with_password(pg_url), by="alice")
    assert SECRET not in repr(config)
    assert repr(config).startswith(f"ConsoleConfig(db_path={with_password(pg_url, '***')!r}, ")
    base = "http://127.0.0.1:8765"
    with TestClient(create_app(config), base_url=base, follow_redirects=False) as c:
        index = c.get("/").text
        assert f'href="/runs/{run.id}"' in index and SECRET not in index
        page = c.get(f"/runs/{run.id}").text
        assert approval.hash in page and SECRET not in page
        response = c.post(
            f"/runs/{run.id}/approvals/{approval.id}/approve",
            data={"csrf": config.csrf, "note": "looks right", "hash": approval.hash},
            headers={"Origin": base},
        )
        assert response.status_code == 303
    with agentrt.open_existing(pg_url, read_only=True) as store:
        decided = store.get_approval(run.id, approval.id)
    assert (decided.status, decided.decided_by, decided.note) == (
        "approved",
        "alice",
        "looks right",
    )


@pytest.mark.slow
def test_agentrt_console_serves_a_url_and_prints_it_without_the_password(pg_url: str) -> None:
    pytest.importorskip("uvicorn", reason="the console needs its extra")
    run = waiting_run(pg_url)
    url = with_password(pg_url)
    command = [sys.executable, "-m", "agentrt", "--db", url, "console", "--port", "0"]
    command += ["--by", "alice"]
    served = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert served.stdout is not None
        first, second, third = (served.stdout.readline() for _ in range(3))
        shown = with_password(pg_url, "***")
        assert first == f"agentrt console: serving {shown}, deciding as alice\n"
        match = re.fullmatch(r"  open (http://127\.0\.0\.1:\d+/)\n", second)
        assert match, second
        assert third == "  Ctrl-C stops it.\n"
        # Served once it answers (and only then is Ctrl-C its own to handle).
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with direct.open(match[1], timeout=30) as response:
            index = response.read().decode()
        assert f'href="/runs/{run.id}"' in index and SECRET not in index
        served.send_signal(signal.SIGINT)
        rest, err = served.communicate(timeout=30)
        assert (served.returncode, rest) == (0, "agentrt console: stopped\n")
        assert SECRET not in err
    finally:
        if served.poll() is None:
            served.kill()
            served.wait()


def test_the_local_approver_opens_a_url_and_decides_on_the_postgres_record(pg_url: str) -> None:
    from agentrt.approver import Decision as ApproverDecision
    from agentrt.approver import Local

    run = waiting_run(pg_url)
    with Local.open(with_password(pg_url)) as local:
        assert SECRET not in repr(local)
        (item,) = local.pending(run.id)
        decided = local.approve(
            ApproverDecision(run.id, item.approval_id, item.hash, by="alice", note="ok")
        )
    assert (decided.status, decided.decided_by) == ("approved", "alice")
    with agentrt.open_existing(pg_url, read_only=True) as store:
        assert store.get_approval(run.id, item.approval_id).status == "approved"


# --- the store's own messages ---------------------------------------------------------------------


def test_the_store_hides_a_password_given_as_a_url_parameter_too(pg_url: str) -> None:
    waiting_run(pg_url)
    url = f"{pg_url}&password={SECRET}"
    with agentrt.open_existing(url, read_only=True) as store:
        assert SECRET not in repr(store) and SECRET not in str(store.path)
        schema = pg_url.rsplit("schema=", 1)[1]
        assert str(store.path).endswith(f"?password=***&schema={schema}")
    unreachable = f"postgresql://root@127.0.0.1:1/test?password={SECRET}"
    with pytest.raises(agentrt.StoreError) as refused:
        agentrt.open_existing(unreachable, read_only=True)
    said = str(refused.value)
    assert said.startswith("cannot open postgresql://root@127.0.0.1:1/test?password=***: ")
    assert SECRET not in said


def test_a_url_without_the_postgres_extra_names_the_pip_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if psycopg were not installed: the backend's modules are imported afresh and fail.
    for name in [m for m in sys.modules if m.startswith("agentrt._store.postgres")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)
    url = f"postgresql://root:{SECRET}@127.0.0.1:5432/test"
    assert cli(capsys, "--db", url, "runs") == (
        1,
        "",
        "agentrt: cannot open postgresql://root:***@127.0.0.1:5432/test: the PostgreSQL store "
        "needs its extra: pip install 'agentrt[postgres]'\n",
    )


def test_the_help_says_db_takes_a_url(capsys: pytest.CaptureFixture[str]) -> None:
    # Found by a new operator: `--db PATH  the database file` read as SQLite only.
    for words in (["--help"], ["runs", "--help"]):
        assert main(words) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "--db PATH the database file or postgresql:// URL (default: $AGENTRT_DB)" in out
