"""Processes race on one PostgreSQL record after its owner is SIGKILLed mid-tool.

A child (`tests/postgres_child.py kill`) is killed by SIGKILL inside a remote
mutation, its lease left held. Four processes, released together, each resume
the run: exactly one takes it over, the interrupted side effect waits for a
person (an `interrupted_side_effect` approval), the tool is not run again, and
the others are refused, changing nothing (issue 21 item 6).

Two ways the owner is known gone: on this host by proof (its pid is dead), and
as another host would see it, by the lease's expiry on the server's clock (the
holder's record names another host, so no proof can decide). The variant with
processes in separate network namespaces, each reaching the server over its own
veth link, runs as root only and never under `CI` (decision 0087).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import agentrt
from agentrt._clock import format_time
from support.postgres import postgres_schema

HERE = Path(__file__).resolve().parent
RUN = "9c" * 16
ANOTHER_HOST = '{"host":"another-host","pid":1,"start":"1"}'


@pytest.fixture
def url() -> Any:
    with ExitStack() as stack:
        yield postgres_schema(stack, "the takeover race")


def child(mode: str, url: str, dir: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "postgres_child.py"), mode, url, RUN, "0", str(dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


@pytest.mark.parametrize("gone", ["owner process gone", "lease expired"])
def test_racers_after_a_sigkill_mid_tool_exactly_one_takes_over_and_a_person_is_asked(
    url: str, tmp_path: Path, gone: str
) -> None:
    agentrt.open_store(url).close()
    killed = child("kill", url, tmp_path)
    killed.communicate(timeout=120)
    assert killed.returncode == -9  # SIGKILL inside the remote mutation
    if gone == "lease expired":
        base, _, schema = url.rpartition("schema=")
        with psycopg.connect(base.rstrip("?&"), autocommit=True) as conn:
            conn.execute(f"SET search_path TO {schema}")
            row = conn.execute("SELECT clock_timestamp()").fetchone()
            assert row is not None
            conn.execute(
                "UPDATE runs SET lease_expires_at = %s, lease_holder = %s WHERE id = %s",
                (format_time(row[0] - timedelta(seconds=1)), ANOTHER_HOST, RUN),
            )

    go = tmp_path / "go"
    racers = [child("resume", url, tmp_path, GO_FILE=str(go)) for _ in range(4)]
    go.write_text("")
    outputs = [r.communicate(timeout=120) for r in racers]
    assert [r.returncode for r in racers] == [0, 0, 0, 0], outputs
    said = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    won = [s for s in said if "status" in s]
    lost = [s for s in said if "error" in s]
    assert won == [{"status": "WAITING_FOR_APPROVAL"}], said
    assert len(lost) == 3
    for refusal in lost:
        assert issubclass(getattr(agentrt, refusal["error"]), agentrt.RunStateError), refusal

    store = agentrt.open_existing(url, read_only=True)
    try:
        events = store.list_events(RUN)
        types = [e.type for e in events]
        assert types.count("lease.taken_over") == 1
        assert types.count("step.interrupted") == 1
        assert types.count("approval.requested") == 1
        (taken,) = [e for e in events if e.type == "lease.taken_over"]
        assert taken.payload["proof"]["by"] == gone
        assert store.get_run(RUN).status == "WAITING_FOR_APPROVAL"
        (approval,) = store.pending_approvals(RUN)
        assert approval.kind == "interrupted_side_effect"
        assert approval.capability == {"tool": "wait", "args": {}}
        assert store.verify_events().intact
    finally:
        store.close()
    journal = (tmp_path / "journal").read_text().splitlines()
    assert [line.split()[1] for line in journal] == ["wait"]  # never run again unasked


# ---------------------------------------------------------------------------------------------
# The same race from separate network namespaces (root only, never under CI)


class Forwarder:
    """TCP from the host side of each veth pair to the server on 127.0.0.1 (the test
    server listens there only): each namespace reaches the server over its own link."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listeners: list[socket.socket] = []
        self.stopped = threading.Event()

    def listen(self, address: str) -> int:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((address, 0))
        server.listen(64)
        server.settimeout(0.2)
        self.listeners.append(server)
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()
        return int(server.getsockname()[1])

    def _accept(self, server: socket.socket) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        self.stopped.set()
        for server in self.listeners:
            server.close()


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@pytest.fixture
def namespaces(url: str) -> Iterator[list[tuple[str, str]]]:
    """Three network namespaces, each with a URL reaching the test server over its veth."""
    if os.environ.get("CI"):
        pytest.skip("netns: the separate-namespace race never runs under CI (it needs root)")
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("netns: run as root with iproute2 to race from separate network namespaces")
    tag = uuid.uuid4().hex[:6]
    subnet = 64 + int(tag[:2], 16) % 128
    host, _, port_and_rest = url.partition("@")[2].partition(":")
    server_port = int(port_and_rest.split("/")[0])
    forwarder = Forwarder((host, server_port))
    made: list[str] = []
    found: list[tuple[str, str]] = []
    try:
        for n in range(3):
            ns, outside, inside = f"ar{tag}{n}", f"va{tag}{n}", f"vb{tag}{n}"
            ip("netns", "add", ns)
            made.append(ns)
            ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            ip("link", "set", inside, "netns", ns)
            near, far = f"10.{subnet}.{n}.1", f"10.{subnet}.{n}.2"
            ip("addr", "add", f"{near}/30", "dev", outside)
            ip("link", "set", outside, "up")
            ip("-n", ns, "addr", "add", f"{far}/30", "dev", inside)
            ip("-n", ns, "link", "set", inside, "up")
            ip("-n", ns, "link", "set", "lo", "up")
            port = forwarder.listen(near)
            found.append((ns, url.replace(f"@{host}:{server_port}/", f"@{near}:{port}/")))
        yield found
    finally:
        forwarder.stop()
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def test_from_separate_network_namespaces_one_racer_takes_over_and_a_person_is_asked(
    namespaces: list[tuple[str, str]], tmp_path: Path
) -> None:
    (killer_ns, killer_url), *others = namespaces
    agentrt.open_store(killer_url).close()

    def in_ns(ns: str, mode: str, ns_url: str, **env: str) -> subprocess.Popen[str]:
        command = [sys.executable, str(HERE / "postgres_child.py"), mode, ns_url, RUN, "0"]
        return subprocess.Popen(
            ["ip", "netns", "exec", ns, *command, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )

    killed = in_ns(killer_ns, "kill", killer_url)
    _, err = killed.communicate(timeout=120)
    assert killed.returncode == -9, err  # `ip netns exec` hands on the child's SIGKILL
    go = tmp_path / "go"
    racers = [in_ns(ns, "resume", u, GO_FILE=str(go)) for ns, u in others for _ in range(2)]
    go.write_text("")
    outputs = [r.communicate(timeout=120) for r in racers]
    said = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert [s for s in said if "status" in s] == [{"status": "WAITING_FOR_APPROVAL"}], said
    store = agentrt.open_existing(killer_url, read_only=True)
    try:
        types = [e.type for e in store.list_events(RUN)]
        assert types.count("lease.taken_over") == 1
        (approval,) = store.pending_approvals(RUN)
        assert approval.kind == "interrupted_side_effect"
        assert store.verify_events().intact
    finally:
        store.close()
    journal = (tmp_path / "journal").read_text().splitlines()
    assert [line.split()[1] for line in journal] == ["wait"]
