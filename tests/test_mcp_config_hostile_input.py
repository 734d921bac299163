"""`agentrt.mcp`'s configuration and `agentrt mcp`: hostile values, paths and interruptions.

A server that cannot be reached as written is refused when it is described
(`Server(...)`, a `ConfigError` in one sentence), never by a traceback from deep
inside a connection; `pin` never replaces a manifest it did not see before
without `--force`; the proxy's path guard reads the spellings docs/mcp.md names.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.support import forkserver
from tests.support.mcp_proxy import PRELOAD

from agentrt import mcp
from agentrt._errors import ConfigError
from agentrt.mcp import _cli
from agentrt.mcp._path_guard import check_server_paths, protected_files

HOSTILE = Path(__file__).parent / "mcp_hostile_server.py"
SIGINT_ELSEWHERE = Path(__file__).parent / "mcp_pin_sigint_elsewhere.py"
PROXY_SIGINT_ELSEWHERE = Path(__file__).parent / "proxy_sigint_elsewhere.py"
PAY = {"name": "pay", "description": "Pay.", "inputSchema": {"type": "object"}}


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = _cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------
# A server that cannot be reached as written is refused when it is described


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:99999/mcp", "port"),
        ("http://127.0.0.1:-1/mcp", "port"),
        ("http://", "host"),
        ("https://:443/mcp", "host"),
        ("http://127.0.0.1:1/mcp\r\nX-Injected: 1", "control"),
        ("http://127.0.0.1:1/\x00", "control"),
        ("http://[::1/mcp", "host"),
        ("http://exa mple.com/mcp", "control"),
    ],
    ids=[
        "port-too-big",
        "port-negative",
        "no-host",
        "empty-host",
        "crlf",
        "nul",
        "bad-ipv6",
        "space",
    ],
)
def test_a_url_that_cannot_be_reached_as_written_is_a_config_error_naming_why(
    url: str, why: str
) -> None:
    with pytest.raises(ConfigError, match=rf"server 'api': url .*{why}"):
        mcp.Server("api", url=url)


def test_a_url_whose_port_is_zero_is_a_config_error_naming_the_port() -> None:
    """Port 0 reads as a number (unlike 99999 or -1), yet no connection can be made to it:
    refused when described, as any other port outside 1 to 65535."""
    with pytest.raises(ConfigError, match=r"server 'api': url its port is not a number from 1"):
        mcp.Server("api", url="http://127.0.0.1:0/mcp")


def test_a_refused_url_is_not_quoted_so_a_token_in_it_is_never_printed() -> None:
    """Errors never print a credential: the refusal of a URL says what is wrong with
    it without quoting it, so a token in its query never reaches a terminal or a log."""
    with pytest.raises(ConfigError) as refused:
        mcp.Server("api", url="http://127.0.0.1:99999/mcp?x=1&token=s3cr3t-T0KEN")
    assert "s3cr3t-T0KEN" not in str(refused.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"command": ["server"], "env": {"TOKEN": "a\x00b"}},
        {"command": ["server"], "env": {"TOKEN": "\ud800"}},
        {"command": ["server", "\ud800"]},
    ],
    ids=["env-nul", "env-lone-surrogate", "command-lone-surrogate"],
)
def test_an_env_value_or_command_part_no_process_can_be_given_is_a_config_error(
    kwargs: dict[str, Any],
) -> None:
    """A NUL or a lone surrogate cannot reach a process's environment or arguments: the
    server is refused when described, and the env value is not quoted in the error."""
    with pytest.raises(ConfigError, match=r"server 'notes': ") as refused:
        mcp.Server("notes", **kwargs)
    assert "a\x00b" not in str(refused.value)


def test_agentrt_mcp_pin_with_a_port_out_of_range_exits_2_with_one_line_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "api.manifest.json"
    code, stdout, err = cli(
        ["pin", "api", "--out", str(out), "--url", "http://alice:pw@127.0.0.1:99999/mcp"], capsys
    )
    assert (code, stdout) == (2, "")
    assert err.startswith("agentrt mcp: server 'api': url "), err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "pw@" not in err
    assert not out.exists()


# ---------------------------------------------------------------------------
# pin never replaces a manifest without --force


def test_pin_does_not_replace_a_manifest_that_appeared_while_it_listed_the_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The manifest is what was reviewed: one that appears at --out while the pin talks
    to the server (another pin, an editor, the server itself) is not replaced without
    --force. The pin exits 1 and the file is as it was written."""
    out = tmp_path / "pay.manifest.json"
    config = tmp_path / "hostile.json"
    config.write_text(json.dumps({"tools": [PAY], "list_writes": {str(out): "reviewed\n"}}))
    command = ["--", sys.executable, str(HOSTILE), str(config)]
    code, _, err = cli(["pin", "pay", "--out", str(out), *command], capsys)
    assert code == 1
    assert "exists" in err and "--force" in err, err
    assert out.read_text() == "reviewed\n"
    assert sorted(os.listdir(tmp_path)) == ["hostile.json", "pay.manifest.json"]


def test_pin_that_cannot_put_its_manifest_in_place_leaves_no_temporary_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--out names a folder: the write fails with one line (exit 1), and nothing of the
    attempt is left beside it."""
    out = tmp_path / "manifest"
    out.mkdir()
    config = tmp_path / "hostile.json"
    config.write_text(json.dumps({"tools": [PAY]}))
    command = ["--", sys.executable, str(HOSTILE), str(config)]
    code, _, err = cli(["pin", "pay", "--out", str(out), "--force", *command], capsys)
    assert code == 1
    assert err.startswith("agentrt mcp: ") and err.count("\n") == 1, err
    assert sorted(os.listdir(tmp_path)) == ["hostile.json", "manifest"]
    assert os.listdir(out) == []


# ---------------------------------------------------------------------------
# `main(argv, stdout, stderr)` writes to the streams it is given, help and usage too


@pytest.mark.parametrize("argv", [["--help"], ["pin", "--help"], ["check", "-h"]])
def test_agentrt_mcp_help_goes_to_the_stdout_main_was_given(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Help went to `sys.stdout` (argparse's own), whatever `stdout` was given (decision
    0215)."""
    out, err = io.StringIO(), io.StringIO()
    assert _cli.main(argv, stdout=out, stderr=err) == 0
    assert capsys.readouterr() == ("", "")
    assert out.getvalue().startswith("usage: agentrt mcp"), out.getvalue()
    assert err.getvalue() == ""


def test_agentrt_mcp_usage_error_goes_to_the_stderr_main_was_given(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert _cli.main(["pin", "x"], stdout=out, stderr=err) == 2
    assert capsys.readouterr() == ("", "")
    assert out.getvalue() == ""
    said = err.getvalue().splitlines()
    assert said[0].startswith("usage: agentrt mcp pin ")
    assert said[-1] == "agentrt mcp pin: error: the following arguments are required: --out"


# ---------------------------------------------------------------------------
# An interrupted command says so in one line


def test_agentrt_mcp_pin_interrupted_while_the_server_is_silent_exits_1_in_one_line(
    tmp_path: Path,
) -> None:
    """Ctrl-C while the server never answers the handshake: `agentrt mcp: interrupted`,
    exit 1 (as every other `agentrt` command), no traceback, and the server is gone."""
    started = tmp_path / "started"
    pidfile = tmp_path / "server.pid"
    silent = (
        "import os, time, pathlib; "
        f"pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid())); "
        f"pathlib.Path({str(started)!r}).touch(); time.sleep(60)"
    )
    out = tmp_path / "x.manifest.json"
    argv = [sys.executable, "-m", "agentrt", "mcp", "pin", "x", "--out", str(out)]
    child = forkserver.server(*PRELOAD).spawn(
        [*argv, "--", sys.executable, "-c", silent], capture=True
    )
    deadline = time.monotonic() + 30
    while not started.exists():
        assert time.monotonic() < deadline and child.poll() is None
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGINT)
    stdout, stderr = child.communicate(timeout=30)
    assert (child.returncode, stdout) == (1, ""), stderr
    assert stderr == "agentrt mcp: interrupted\n"
    server = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(server, 0)
    assert not out.exists()


def _silent_server(tmp_path: Path) -> list[str]:
    """A server's command that never answers the handshake: it notes its pid in
    `server.pid`, touches `started`, and sleeps."""
    return [
        sys.executable,
        "-c",
        "import os, time, pathlib; "
        f"pathlib.Path({str(tmp_path / 'server.pid')!r}).write_text(str(os.getpid())); "
        f"pathlib.Path({str(tmp_path / 'started')!r}).touch(); time.sleep(600)",
    ]


def _interrupted_once_started(command: list[str], tmp_path: Path) -> tuple[int, str, str]:
    """`command` run until its silent server started, then sent one SIGINT: its exit status,
    stdout and stderr. A fresh interpreter, not one forked from the test's prepared
    process: there, the command ended at once under plain `asyncio.run` too, so these tests
    could not fail. The handshake waits 600 s: only the signal ends the command before."""
    child = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists():
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGINT)
        stdout, stderr = child.communicate(timeout=60)
    finally:
        if child.returncode is None:
            child.kill()
            child.wait(30)
            with contextlib.suppress(ProcessLookupError, ValueError, FileNotFoundError):
                os.kill(int((tmp_path / "server.pid").read_text()), signal.SIGKILL)
    return child.returncode, stdout, stderr


def test_agentrt_mcp_pin_interrupted_while_another_thread_takes_the_signal_exits_1(
    tmp_path: Path,
) -> None:
    """The kernel may hand a Ctrl-C to any thread of the process (the event loop's child
    watcher, when it runs at that instant) while the main thread waits in `select`:
    the wait still ends at once, `agentrt mcp: interrupted`, exit 1, the server gone,
    no manifest. Here only a thread of its own can take the SIGINT, every time."""
    silent = _silent_server(tmp_path)
    out = tmp_path / "x.manifest.json"
    argv = [sys.executable, str(SIGINT_ELSEWHERE), "x", "--out", str(out)]
    code, stdout, stderr = _interrupted_once_started([*argv, "--", *silent], tmp_path)
    assert (code, stdout) == (1, ""), stderr
    assert stderr == "agentrt mcp: interrupted\n"
    with pytest.raises(ProcessLookupError):
        os.kill(int((tmp_path / "server.pid").read_text()), 0)
    assert not out.exists()


@pytest.mark.parametrize("check", [True, False], ids=["check", "serving"])
def test_agentrt_proxy_interrupted_while_another_thread_takes_the_signal_exits_130(
    tmp_path: Path, check: bool
) -> None:
    """`agentrt-proxy`, `--check` or serving, sent a Ctrl-C while it waits for a server
    that never answers the handshake, and only a thread of its own can take the signal
    (as `agentrt mcp pin` above, decision 0213): it ends at once, exit 130 as for any
    Ctrl-C, nothing on stdout or stderr, the server gone. Before, it waited for the
    handshake's timeout (600 s here)."""
    silent = _silent_server(tmp_path)
    owner_only = {
        "x.manifest.json": {"format": "agentrt.mcp.manifest/1", "server": "x", "tools": {}},
        "x.rules.json": {"format": "agentrt.mcp.rules/1", "tools": {}},
        "proxy.json": {
            "format": "agentrt.mcp.proxy/1",
            "database": "runs.db",
            "servers": {
                "x": {
                    "command": silent,
                    "manifest": "x.manifest.json",
                    "rules": "x.rules.json",
                }
            },
        },
    }
    for name, data in owner_only.items():
        (tmp_path / name).write_text(json.dumps(data))
        (tmp_path / name).chmod(0o600)
    argv = [sys.executable, str(PROXY_SIGINT_ELSEWHERE), "--config", str(tmp_path / "proxy.json")]
    command = [*argv, *(["--check"] if check else [])]
    assert _interrupted_once_started(command, tmp_path) == (130, "", "")
    with pytest.raises(ProcessLookupError):
        os.kill(int((tmp_path / "server.pid").read_text()), 0)


IGNORING_SIGINT = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "from agentrt.mcp.proxy import main; sys.exit(main(sys.argv[1:]))"
)


def test_agentrt_proxy_started_with_sigint_ignored_keeps_ignoring_it(tmp_path: Path) -> None:
    """A host may start the proxy with SIGINT ignored (a shell's `&`, a host keeping a
    Ctrl-C in its terminal for itself): `asyncio.run` then leaves SIGINT alone, and so did
    the proxy before decision 0215. Its Ctrl-C handler was installed whatever it found, so
    a Ctrl-C sent to the host's process group ended the proxy (exit 130) and the host's
    session with it. Here the proxy (`--check`) waits for a server's handshake, is sent
    SIGINT, and then the server ends: the proxy says so and exits 1, as without the signal."""
    started, go = tmp_path / "started", tmp_path / "go"
    ends_when_told = (
        "import time, pathlib; "
        f"pathlib.Path({str(started)!r}).touch(); go = pathlib.Path({str(go)!r}); "
        "deadline = time.monotonic() + 60\n"
        "while not go.exists() and time.monotonic() < deadline: time.sleep(0.02)"
    )
    files = {
        "x.manifest.json": {"format": "agentrt.mcp.manifest/1", "server": "x", "tools": {}},
        "x.rules.json": {"format": "agentrt.mcp.rules/1", "tools": {}},
        "proxy.json": {
            "format": "agentrt.mcp.proxy/1",
            "database": "runs.db",
            "servers": {
                "x": {
                    "command": [sys.executable, "-c", ends_when_told],
                    "manifest": "x.manifest.json",
                    "rules": "x.rules.json",
                }
            },
        },
    }
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))
        (tmp_path / name).chmod(0o600)
    argv = [sys.executable, "-c", IGNORING_SIGINT, "--config", str(tmp_path / "proxy.json")]
    child = subprocess.Popen(
        [*argv, "--check"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGINT)
        go.touch()
        stdout, stderr = child.communicate(timeout=60)
    finally:
        if child.returncode is None:
            child.kill()
            child.communicate(timeout=30)
    assert (child.returncode, stdout) == (1, ""), stderr
    unavailable = (
        "agentrt-proxy: server x is unavailable: server 'x': the MCP handshake failed: "
        "Connection closed"
    )
    assert unavailable in stderr.splitlines(), stderr


# ---------------------------------------------------------------------------
# The proxy's path guard reads `key=PATH` inside a comma-separated list


@pytest.fixture
def kept(tmp_path: Path) -> tuple[Path, dict[Path, str]]:
    folder = tmp_path / "mcp-proxy"
    folder.mkdir()
    (folder / "proxy.json").write_text("{}")
    return folder, protected_files(folder / "proxy.json", folder / "proxy.db", [], [])


@pytest.mark.parametrize(
    "spelling",
    [
        ["docker", "run", "-i", "--rm", "--mount", "type=bind,src={d},dst=/projects", "img"],
        ["docker", "run", "--mount=type=bind,source={d},target=/projects", "img"],
        ["docker", "run", "-v", "{d}:/projects", "img", "/projects"],
        ["docker", "run", "--volume={d}:/projects:ro", "img"],
    ],
    ids=["mount-src", "mount-source-equals", "volume", "volume-equals"],
)
def test_a_docker_mount_of_the_proxys_folder_is_refused_as_any_other_spelling(
    kept: tuple[Path, dict[Path, str]], spelling: list[str]
) -> None:
    """The official filesystem server runs in Docker with `--mount type=bind,src=PATH,...`
    (a comma-separated list of `key=PATH`, both spellings docs/mcp.md names) or
    `-v PATH:/dir`: mounting the proxy's own folder is refused like `--root=PATH`."""
    folder, protected = kept
    command = [part.replace("{d}", str(folder)) for part in spelling]
    with pytest.raises(ConfigError, match=r"reaches the proxy's config"):
        check_server_paths("fs", command, protected, [Path.cwd()])
