"""A fake payment provider over HTTP on loopback, and the test kit scenarios that charge it.

The provider runs in the test process (a thread); every simulated or real child
process reaches it at the URL in `PAYMENTS_URL` (the kit passes the environment
on). It keeps every charge it made, so a test can count them per run:

- `POST /charges` with a JSON body `{"run_id", "order", "amount"}` and an
  `Idempotency-Key` header charges the card. A deduplicating provider answers a
  key it has seen with the first charge (not a new one); one that does not
  deduplicate charges again, whatever the key.
- `GET /charges/<key>` answers the charge made under that key (200) or 404. The
  provider that does not deduplicate does not keep keys: it always answers 404.

Scenarios (`support.payments:deduplicating`, `support.payments:not_deduplicating`):
an agent charges order 17 once the record shows no charge done, then completes;
the policy allows the charge; the `charge` tool sends `ToolCall.operation_id` as
the Idempotency-Key and its reconciliation looks the charge up by it.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from collections import Counter
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import agentrt
from agentrt import Decision, Reconciled, SideEffect, StepInput, StepStatus, ToolCall, ToolResult
from agentrt.testkit import Scenario, Verdict, always
from support.scenarios import Clock

URL_ENV = "PAYMENTS_URL"
LEASE = timedelta(seconds=2)  # long enough for a loaded machine
AMOUNT = 1250


class Provider:
    """The provider's books and its HTTP server on 127.0.0.1 (an ephemeral port)."""

    def __init__(self, deduplicates: bool) -> None:
        self.deduplicates = deduplicates
        self.lock = threading.Lock()
        self.by_key: dict[str, dict[str, Any]] = {}
        self.charged: Counter[str] = Counter()  # charges made, per run id
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                key = self.headers.get("Idempotency-Key", "")
                self._send(200, provider.charge(key, body))

            def do_GET(self) -> None:
                key = self.path.rsplit("/", 1)[-1]
                found = provider.look_up(key)
                self._send(200 if found else 404, found or {"error": "no such charge"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def charge(self, key: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if self.deduplicates and key in self.by_key:
                return self.by_key[key]
            self.charged[str(body["run_id"])] += 1
            made = {"id": f"ch_{sum(self.charged.values())}", "amount": body["amount"]}
            if self.deduplicates:
                self.by_key[key] = made
            return made

    def look_up(self, key: str) -> dict[str, Any] | None:
        with self.lock:
            return self.by_key.get(key)

    def __enter__(self) -> Provider:
        self.thread.start()
        os.environ[URL_ENV] = self.url
        return self

    def __exit__(self, *exc: object) -> None:
        os.environ.pop(URL_ENV, None)
        self.server.shutdown()
        self.server.server_close()


def _url() -> str:
    return os.environ[URL_ENV]


class Charge:
    """Charges the card at the provider, sending the operation id as the Idempotency-Key."""

    spec = agentrt.ToolSpec(
        name="charge",
        description="charge the customer's card",
        input_schema={
            "type": "object",
            "properties": {"order": {"type": "integer"}, "amount": {"type": "integer"}},
            "required": ["order", "amount"],
            "additionalProperties": False,
        },
        side_effect=SideEffect.REMOTE_MUTATION,
        timeout=timedelta(seconds=10),
    )

    def __init__(self, vouch: bool) -> None:
        self.vouch = vouch  # the provider deduplicates: a repeat under the key is safe

    def call(self, call: ToolCall) -> ToolResult:
        body = json.dumps({"run_id": call.run_id, **call.args}).encode()
        request = urllib.request.Request(
            f"{_url()}/charges",
            data=body,
            headers={"Idempotency-Key": call.operation_id, "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return ToolResult(json.loads(response.read()), "charged")

    def reconcile(self, call: ToolCall) -> Reconciled:
        """Look the charge up by the operation id the interrupted call sent."""
        try:
            with urllib.request.urlopen(f"{_url()}/charges/{call.operation_id}", timeout=5) as r:
                return Reconciled.found(json.loads(r.read()), "the provider has the charge")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
        if self.vouch:
            return Reconciled.not_found(
                "no charge under this key; the provider deduplicates by it", safe_to_repeat=True
            )
        return Reconciled.not_found("the provider has no charge under this key")


class ChargeOnce:
    """Charges until the record shows a charge done, then completes."""

    def decide(self, input: StepInput) -> Decision:
        if any(s.status == StepStatus.DONE for s in input.steps):
            return Decision.complete({"order": 17})
        return Decision.tool_call("charge", {"order": 17, "amount": AMOUNT})


def _scenario(name: str, vouch: bool) -> Scenario:
    allow = agentrt.PolicyDecision.allow()
    return Scenario(
        tools=[Charge(vouch)],
        policy=agentrt.SideEffectPolicy({SideEffect.REMOTE_MUTATION: allow}, policy_id="pay/1"),
        agent=ChargeOnce(),
        goal="charge order 17",
        operator=always(Verdict.APPROVE),
        now=Clock(),
        lease_ttl=LEASE,
        name=name,
    )


def deduplicating() -> Scenario:
    """The provider deduplicates by Idempotency-Key: not found is safe to repeat."""
    return _scenario("payments_deduplicating", vouch=True)


def not_deduplicating() -> Scenario:
    """The provider charges again on every request: not found, a person decides."""
    return _scenario("payments_not_deduplicating", vouch=False)
