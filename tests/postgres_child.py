"""A driver on a PostgreSQL record whose host clock is skewed: run as a child process.

    python tests/postgres_child.py MODE URL RUN_ID SKEW_SECONDS DIR

The child's wall clock and event clock are the real time plus SKEW_SECONDS (a
host whose clock is fast or slow); the store judges leases by the server's clock.

- `hold`: start run RUN_ID; its first step calls `wait` (a remote mutation) which
  writes DIR/started and returns once DIR/release exists; then the run completes.
- `crash`: start run RUN_ID; its first step calls `lookup` (read only), which
  SIGKILLs this process after writing DIR/journal.
- `kill`: start run RUN_ID; its first step calls `wait` (a remote mutation), which
  SIGKILLs this process after writing DIR/journal.
- `lose-mid-tool`: as `lose`, but the server ends the connections inside `wait` (a
  remote mutation), which then returns: its outcome cannot be recorded.
- `resume`: resume RUN_ID (its decisions: `lookup`, then complete).
- `recover`: `recover_sync()` every unfinished run of the store.
- `lose`: start run RUN_ID; its first step calls `lookup`; while deciding its
  second step the server ends every connection of this process's
  `application_name` (`pg_terminate_backend`, what a server restart does to its
  clients), then the decision (complete) is to be recorded.

With `GO_FILE` set, the child opens its store and waits for that file before it acts
(racers released together). Every mode prints one JSON line: `{"status": ...}` or
`{"error": TYPE, "message": ...}`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg

import agentrt
from agentrt import Decision, PolicyDecision, SideEffect, SideEffectPolicy, ToolCall, ToolResult
from agentrt.scripted import ScriptedAgent

LEASE_TTL = timedelta(seconds=float(os.environ.get("LEASE_TTL", "15")))


class Tool:
    def __init__(self, name: str, side_effect: SideEffect, dir: Path, die: bool) -> None:
        self.spec = agentrt.ToolSpec(
            name=name,
            description=f"the {name} tool",
            input_schema={"type": "object"},
            side_effect=side_effect,
            timeout=timedelta(seconds=120),
        )
        self.dir = dir
        self.die = die
        self.lose_url = ""

    def call(self, call: ToolCall) -> ToolResult:
        with open(self.dir / "journal", "a") as f:
            f.write(f"{os.getpid()} {self.spec.name} {call.step_id} epoch={call.lease_epoch}\n")
            f.flush()
            os.fsync(f.fileno())
        if self.die:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.lose_url:
            terminate(self.lose_url)  # the side effect happened; its outcome is not recorded
            return ToolResult({"tool": self.spec.name, "ok": True}, f"{self.spec.name} ok")
        if self.spec.name == "wait":
            (self.dir / "started").write_text(str(os.getpid()))
            deadline = time.monotonic() + 120
            while not (self.dir / "release").exists():
                if time.monotonic() > deadline:
                    raise RuntimeError("never released")
                time.sleep(0.02)
        return ToolResult({"tool": self.spec.name, "ok": True}, f"{self.spec.name} ok")


def policy() -> SideEffectPolicy:
    allow = PolicyDecision.allow()
    return SideEffectPolicy(
        {
            SideEffect.READ_ONLY: allow,
            SideEffect.LOCAL_MUTATION: allow,
            SideEffect.REMOTE_MUTATION: allow,
        },
        policy_id="postgres-children/1",
    )


def terminate(url: str) -> None:
    """Have the server end every connection of `url`'s `application_name` (this process's
    store and heartbeat), noting how many in `TERMINATED_NOTE`."""
    name = parse_qs(urlsplit(url).query)["application_name"][0]
    with psycopg.connect(os.environ["TERMINATE_FROM"], autocommit=True) as conn:
        ended = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchone()
    (Path(os.environ["TERMINATED_NOTE"])).write_text(str(ended[0] if ended else 0))


def lose_connections(url: str) -> Any:
    """A decision that first has the server end this process's store connections."""

    def decide(_: agentrt.StepInput) -> Decision:
        terminate(url)
        return Decision.complete({"done": True})

    return decide


def driver(url: str, mode: str, skew: float, dir: Path) -> agentrt.Driver:
    def skewed() -> datetime:
        return datetime.now(UTC) + timedelta(seconds=skew)

    first = "lookup" if mode in ("crash", "resume", "recover", "lose") else "wait"
    decisions: list[Any] = [Decision.tool_call(first, {})]
    if mode == "lose":
        decisions.append(lose_connections(url))
    elif mode == "lose-mid-tool":
        decisions.append(Decision.complete({"done": True}))
    else:
        decisions.append(Decision.complete({"done": True}))
    wait = Tool("wait", SideEffect.REMOTE_MUTATION, dir, die=mode == "kill")
    if mode == "lose-mid-tool":
        wait.lose_url = url
    return agentrt.Driver(
        store=agentrt.open_store(url),
        agent=ScriptedAgent(decisions),
        policy=policy(),
        tools=[
            wait,
            Tool("lookup", SideEffect.READ_ONLY, dir, die=mode == "crash"),
        ],
        lease_owner=f"{mode}-{os.getpid()}",
        lease_ttl=LEASE_TTL,
        now=skewed,
        wall=skewed,
    )


def main() -> None:
    mode, url, run_id, skew, dir = sys.argv[1:6]
    d = driver(url, mode, float(skew), Path(dir))
    try:
        go = os.environ.get("GO_FILE")
        if go:
            deadline = time.monotonic() + 120
            while not os.path.exists(go) and time.monotonic() < deadline:
                time.sleep(0.005)
        if mode in ("hold", "crash", "lose", "kill", "lose-mid-tool"):
            run = d.start_sync("work on a shared record", run_id=run_id)
        elif mode == "resume":
            run = d.resume_sync(run_id)
        elif mode == "recover":
            found = d.recover_sync()
            said = {
                r.run_id: r.run.status if r.run is not None else f"{r.action}: {r.why}"
                for r in found
            }
            print(json.dumps({"status": said}), flush=True)
            return
        else:
            raise SystemExit(f"unknown mode {mode}")
    except agentrt.AgentrtError as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e)}), flush=True)
        return
    print(json.dumps({"status": run.status}), flush=True)


if __name__ == "__main__":
    main()
