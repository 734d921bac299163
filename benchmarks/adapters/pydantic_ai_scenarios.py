"""Pydantic AI alone and Pydantic AI behind agentrt, on the same three scenarios.

Each scenario runs the same program (tests/support/adapters/pydantic_ai_child.py:
a real Pydantic AI agent, its `FunctionModel` playing a script, a `push_branch`
tool that appends a line to a file when it acts) in child processes, once
with Pydantic AI's own human-in-the-loop (`requires_approval=True`, approvals
by tool call id) and once with `agentrt.adapters.pydantic_ai.AgentrtGate`
(approvals bound to the request's hash). It counts the lines, the real
executions, and prints one markdown table.

1. A remote change needing approval: the run pauses; a person approves; the
   run is resumed (message history + DeferredToolResults).
2. A crash mid-call: the approved push acts, and the process is SIGKILLed
   before its outcome is recorded; the program is restarted through
   Pydantic AI's own resume path (the saved history and the same
   DeferredToolResults), with nobody deciding again.
3. A tampered approval: a person approves pushing `feature/login`; before the
   resume, the saved history is changed to push `main`.

    python benchmarks/adapters/pydantic_ai_scenarios.py [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _children

ROOT = Path(__file__).resolve().parent.parent.parent
CHILD = ROOT / "tests" / "support" / "adapters" / "pydantic_ai_child.py"
RUN_ID = "0" * 31 + "7"
APPROVED = "push_branch feature/login"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    return env


class Program:
    """One working directory: the program's files, its runs, and the executions it made."""

    def __init__(self, workdir: Path, gated: bool) -> None:
        self.workdir = workdir
        self.gated = gated
        workdir.mkdir(parents=True)
        config = {"script": "push", "run_id": RUN_ID}
        (workdir / "config.json").write_text(json.dumps(config))

    @property
    def flags(self) -> list[str]:
        return [] if self.gated else ["--bare"]

    def run(self, mode: str) -> tuple[int, dict[str, Any]]:
        done = _children.run(
            [sys.executable, str(CHILD), str(self.workdir), mode, *self.flags],
            timeout=120,
            cwd=ROOT,
            env=_env(),
        )
        lines = done.stdout.strip().splitlines()
        if not lines:
            raise SystemExit(f"the program printed nothing: {done.stderr}")
        return done.returncode, json.loads(lines[-1])

    def executions(self) -> list[str]:
        path = self.workdir / "effects.log"
        return path.read_text().splitlines() if path.exists() else []

    def approve(self, by_call_id: bool = False) -> None:
        """A person approves the pending push the framework's way (by call id alone if asked)."""
        sys.path.insert(0, str(ROOT / "tests"))
        from pydantic_ai import DeferredToolResults

        from support.adapters.pydantic_ai_child import REQUESTS, RESULTS

        requests = REQUESTS.validate_json((self.workdir / "requests.json").read_bytes())
        (call,) = requests.approvals
        if self.gated and not by_call_id:
            from agentrt.adapters.pydantic_ai import approved

            results = approved(requests, call.tool_call_id, by="alice")
        else:
            results = DeferredToolResults(approvals={call.tool_call_id: True})
        (self.workdir / "results.json").write_bytes(RESULTS.dump_json(results))

    def killed_mid_call(self) -> int:
        """Resume with the push held after it acted, and SIGKILL the process there."""
        (self.workdir / "hold").write_text("1")
        proc = _children.popen(
            [sys.executable, str(CHILD), str(self.workdir), "resume", *self.flags],
            cwd=ROOT,
            env=_env(),
        )
        deadline = time.monotonic() + 60
        while not (self.workdir / "acted").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the program never reached the push")
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        (self.workdir / "hold").unlink()
        (self.workdir / "acted").unlink()
        return proc.returncode


def outcome(code: int, out: dict[str, Any]) -> str:
    if code == 2:
        return "paused for a person"
    if code == 0:
        return "finished"
    return f"error {out.get('error', '?')}"


def approval_scenario(program: Program) -> dict[str, str]:
    code, _ = program.run("start")
    paused = code == 2
    before = len(program.executions())
    program.approve(by_call_id=True)
    code, _ = program.run("resume")
    by_id = len(program.executions())
    row = {
        "paused for a person": "yes" if paused else "no",
        "executions before the approval": str(before),
        "executions after an approval naming the tool call id": str(by_id),
    }
    if code == 2:  # still waiting: approve the request's hash, as shown
        program.approve()
        program.run("resume")
        row["executions after an approval naming the request's hash"] = str(
            len(program.executions())
        )
    else:
        row["executions after an approval naming the request's hash"] = "(no such approval)"
    return row


def crash_scenario(program: Program) -> dict[str, str]:
    program.run("start")
    program.approve()
    program.killed_mid_call()
    at_crash = len(program.executions())
    code, out = program.run("resume")  # the framework's own resume path, nobody decides
    after = len(program.executions())
    row = {
        "executions when the process was killed": str(at_crash),
        "the framework's resume": outcome(code, out),
        "unapproved re-executions": str(after - at_crash),
    }
    if code == 2:  # waiting for a person: they approve the interrupted call
        program.approve()
        program.run("resume")
        row["executions after a person approves again"] = str(len(program.executions()))
    else:
        row["executions after a person approves again"] = "(nobody was asked)"
    return row


def tamper_scenario(program: Program) -> dict[str, str]:
    program.run("start")
    program.approve()
    history = program.workdir / "history.json"
    history.write_text(history.read_text().replace("feature/login", "main"))
    program.run("resume")
    ran = program.executions()
    changed = sum(1 for line in ran if line != APPROVED)
    return {
        "executions of the changed request": str(changed),
        "executions of the approved request": str(len(ran) - changed),
        "the changed request": "ran" if changed else "refused",
    }


SCENARIOS = [
    ("a remote change needing approval", approval_scenario),
    ("a crash mid-call (SIGKILL)", crash_scenario),
    ("a tampered approval", tamper_scenario),
]


def table(base: Path) -> list[str]:
    lines = [
        "| scenario | measured | Pydantic AI alone | with agentrt |",
        "|---|---|---|---|",
    ]
    for i, (name, scenario) in enumerate(SCENARIOS):
        alone = scenario(Program(base / f"{i}-alone", gated=False))
        gated = scenario(Program(base / f"{i}-agentrt", gated=True))
        for key in alone:
            lines.append(f"| {name} | {key} | {alone[key]} | {gated[key]} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    if args.dir is not None:
        print("\n".join(table(args.dir)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        print("\n".join(table(Path(tmp))))


if __name__ == "__main__":
    main()
