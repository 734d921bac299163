"""Settling an interrupted card charge without waking a person.

A fake payment provider listens on 127.0.0.1 (a thread of this program). It
deduplicates charges by `Idempotency-Key` and can answer "did a charge happen
under this key?". The `charge` tool sends `ToolCall.operation_id` as that key,
and its reconciliation looks the charge up by it.

1. A worker process starts the run; the charge reaches the provider, and the
   worker is killed with SIGKILL before the outcome is recorded.
2. This program, restarted, calls `driver.recover_sync()`: the runtime takes the
   run over and asks the tool's reconciliation, which finds the charge. The step
   completes with the provider's answer and the run completes: charged once,
   nobody asked.
3. The same again with the provider's lookup failing (503): the reconciliation
   cannot tell, so the run waits for a person, the approval saying why.

    python examples/payments.py [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import agentrt
from agentrt import Decision, Reconciled, SideEffect, ToolCall
from agentrt.scripted import ScriptedAgent

# --- the fake provider ------------------------------------------------------------------------


class Provider:
    """Charges by Idempotency-Key (a repeated key gets the first charge back); looks them up."""

    def __init__(self) -> None:
        self.charges: dict[str, dict[str, Any]] = {}
        self.lookup_fails = False
        self.lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                key = self.headers["Idempotency-Key"]
                with provider.lock:
                    charge = provider.charges.setdefault(
                        key, {"id": f"ch_{len(provider.charges) + 1}", **body}
                    )
                self.reply(200, charge)

            def do_GET(self) -> None:
                if provider.lookup_fails:
                    self.reply(503, {"error": "lookups are down"})
                    return
                with provider.lock:
                    charge = provider.charges.get(self.path.rsplit("/", 1)[-1])
                self.reply(200 if charge else 404, charge or {"error": "no such charge"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


# --- the tool and its reconciliation --------------------------------------------------------------


def look_up(call: ToolCall) -> Reconciled:
    """Did the interrupted charge happen? Ask the provider under the key it was sent with."""
    url = f"{os.environ['PROVIDER_URL']}/charges/{call.operation_id}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return Reconciled.found(json.loads(response.read()), "the provider has the charge")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            # The provider deduplicates by this key: sending it again cannot charge twice.
            return Reconciled.not_found("no charge under this key", safe_to_repeat=True)
        return Reconciled.unknown(f"the provider's lookup answered {exc.code}")


@agentrt.tool(
    side_effect=SideEffect.REMOTE_MUTATION, timeout=timedelta(seconds=10), reconcile=look_up
)
def charge(order: int, amount_cents: int, call: ToolCall) -> dict[str, Any]:
    """Charge the customer's card for an order."""
    request = urllib.request.Request(
        f"{os.environ['PROVIDER_URL']}/charges",
        data=json.dumps({"order": order, "amount_cents": amount_cents}).encode(),
        headers={"Idempotency-Key": call.operation_id, "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        charged: dict[str, Any] = json.loads(response.read())
    marker = os.environ.get("CHARGED_MARKER")
    if marker:  # the worker: tell the parent the charge is out, then wait to be killed
        Path(marker).write_text(charged["id"])
        time.sleep(60)
    return charged


def make_driver(db: Path) -> agentrt.Driver:
    allow = agentrt.PolicyDecision.allow()
    return agentrt.Driver(
        store=agentrt.open_store(db),
        agent=ScriptedAgent(
            [Decision.tool_call("charge", {"order": 17, "amount_cents": 1250}), Decision.complete()]
        ),
        policy=agentrt.SideEffectPolicy({SideEffect.REMOTE_MUTATION: allow}, policy_id="pay/1"),
        tools=[charge],
        lease_ttl=timedelta(seconds=30),
    )


# --- the story ---------------------------------------------------------------------------------


def crash_mid_charge(db: Path, provider: Provider) -> None:
    """Start the run in a worker; SIGKILL it once its charge reached the provider."""
    marker = db.with_suffix(".charged")
    env = {**os.environ, "PROVIDER_URL": provider.url, "CHARGED_MARKER": str(marker)}
    worker = subprocess.Popen([sys.executable, __file__, "--worker", str(db)], env=env)
    deadline = time.monotonic() + 60
    while not marker.exists():
        if worker.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the worker never charged")
        time.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    print(f"  worker killed by SIGKILL after charge {marker.read_text()} reached the provider")


def story(workdir: Path, provider: Provider, lookup_fails: bool) -> agentrt.Run:
    db = workdir / ("lookup-fails.db" if lookup_fails else "payments.db")
    provider.lookup_fails = lookup_fails
    os.environ["PROVIDER_URL"] = provider.url
    crash_mid_charge(db, provider)
    driver = make_driver(db)
    (recovered,) = driver.recover_sync()
    run = recovered.run
    assert run is not None
    with agentrt.open_existing(db, read_only=True) as store:
        for event in store.list_events(run_id=run.id):
            if event.type == "step.reconciled":
                said = event.payload
                print(f"  the tool's reconciliation answered {said['answer']}: {said['detail']}")
        pending = store.pending_approvals(run.id)
    print(f"  run {run.status}; charges at the provider so far: {len(provider.charges)}")
    for approval in pending:
        print(f"  waiting for a person: {approval.presentation['notice']}")
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        make_driver(args.worker).start_sync("charge order 17")
        return 1  # not reached: the parent kills this process mid-charge
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="agentrt-payments-"))
    if workdir.exists() and not workdir.is_dir():
        parser.exit(2, f"{parser.prog}: --dir {workdir}: it exists and is not a directory\n")
    workdir.mkdir(mode=0o700, parents=True, exist_ok=True)  # owner-only, as the store wants
    if (workdir / "payments.db").exists() or (workdir / "lookup-fails.db").exists():
        parser.exit(
            2,
            f"{parser.prog}: --dir {workdir} holds a run of this example already;"
            " give another --dir\n",
        )
    provider = Provider()
    print("1. the provider can tell:")
    first = story(workdir, provider, lookup_fails=False)
    print("2. the provider's lookup fails:")
    second = story(workdir, provider, lookup_fails=True)
    ok = first.status == "COMPLETED" and second.status == "WAITING_FOR_APPROVAL"
    return 0 if ok and len(provider.charges) == 2 else 1


if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()  # here, not at exit: a reader gone away is met below
    except BrokenPipeError:  # `| head -1`: end quietly, with status 1 as Python's docs do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)
