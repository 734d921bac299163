"""The signing client for the other side of the webhook (a chat bot, an internal tool).

Every request gets a fresh timestamp and a fresh random nonce, and is signed
over the exact bytes sent: the request target as httpx will put it on the wire
(`URL.raw_path`, query included) and the body. Redirects are never followed (a
redirect would carry a signature made for another path). A refusal is a
`WebhookError` with the webhook's status, code and message.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .._errors import AgentrtError
from ._signing import signed_headers

if TYPE_CHECKING:
    import httpx


class WebhookError(AgentrtError):
    """The webhook refused a request; `status` and `code` say how (`approval_changed`, ...)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code
        super().__init__(f"{status} {code}: {message}")


def _own_client(timeout: float) -> httpx.Client:
    # httpx is imported here, when a client is made, not by `import agentrt.approver`
    # (decision 0061).
    import httpx

    return httpx.Client(timeout=timeout, follow_redirects=False)


def _segment(text: str) -> str:
    return quote(text, safe="")


class WebhookClient:
    """Signs and sends requests to an approval webhook at `base_url`.

    Pass `http` to use your own `httpx.Client` (a test passes Starlette's
    TestClient); `now` (Unix seconds) and `new_nonce` are injectable for tests.
    The secret is never part of `repr`.
    """

    def __init__(
        self,
        base_url: str,
        secret: str | bytes,
        *,
        http: httpx.Client | None = None,
        timeout: float = 10.0,
        now: Callable[[], float] | None = None,
        new_nonce: Callable[[], str] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._secret = secret
        signed_headers(secret, "GET", "/", b"", timestamp=0, nonce="x")  # refuse a short secret now
        self._owned = http is None
        self.http = http or _own_client(timeout)
        self.now = now or time.time
        self.new_nonce = new_nonce or (lambda: secrets.token_hex(16))

    def __repr__(self) -> str:
        return f"WebhookClient({self.base_url!r})"

    def close(self) -> None:
        if self._owned:
            self.http.close()

    def __enter__(self) -> WebhookClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- addresses --------------------------------------------------------------------------

    def approval_url(self, run_id: str, approval_id: str) -> str:
        """Where the approval is shown (GET; add `?format=text` for the plain rendering)."""
        return f"{self.base_url}/runs/{_segment(run_id)}/approvals/{_segment(approval_id)}"

    # --- requests ---------------------------------------------------------------------------

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        """Send one signed request; `path` is below `base_url`. Raises `WebhookError` unless 2xx."""
        # UTF-8, compact: escaped as \uXXXX, a note as long as a Decision allows would
        # outgrow the webhook's body cap.
        content = (
            b""
            if body is None
            else json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        )
        headers = {"Content-Type": "application/json"} if body is not None else {}
        request = self.http.build_request(method, self.base_url + path, content=content)
        target = request.url.raw_path.decode("ascii")
        headers |= signed_headers(
            self._secret,
            method,
            target,
            content,
            timestamp=int(self.now()),
            nonce=self.new_nonce(),
        )
        request.headers.update(headers)
        response = self.http.send(request, follow_redirects=False)
        if not 200 <= response.status_code < 300:
            try:
                detail = response.json()
                code, message = str(detail["code"]), str(detail["error"])
            except (ValueError, KeyError, TypeError):
                code, message = "http_error", response.text[:200]
            raise WebhookError(response.status_code, code, message)
        return response

    def pending(self, run_id: str, limit: int = 20) -> list[dict[str, Any]]:
        response = self.request("GET", f"/runs/{_segment(run_id)}/approvals?limit={int(limit)}")
        approvals: list[dict[str, Any]] = response.json()["approvals"]
        return approvals

    def show(self, run_id: str, approval_id: str) -> dict[str, Any]:
        shown: dict[str, Any] = self.request("GET", self._approval(run_id, approval_id)).json()
        return shown

    def show_text(self, run_id: str, approval_id: str) -> str:
        return self.request("GET", self._approval(run_id, approval_id) + "?format=text").text

    def approve(
        self, run_id: str, approval_id: str, hash: str, by: str, note: str = ""
    ) -> dict[str, Any]:
        """Approve exactly the approval whose hash was shown."""
        return self._decide("approve", run_id, approval_id, hash, by, note)

    def reject(
        self, run_id: str, approval_id: str, hash: str, by: str, note: str = ""
    ) -> dict[str, Any]:
        return self._decide("reject", run_id, approval_id, hash, by, note)

    def cancel(self, run_id: str, by: str, note: str = "") -> dict[str, Any]:
        body = {"by": by, "note": note}
        done: dict[str, Any] = self.request("POST", f"/runs/{_segment(run_id)}/cancel", body).json()
        return done

    def _approval(self, run_id: str, approval_id: str) -> str:
        return f"/runs/{_segment(run_id)}/approvals/{_segment(approval_id)}"

    def _decide(
        self, verb: str, run_id: str, approval_id: str, hash: str, by: str, note: str
    ) -> dict[str, Any]:
        body = {"hash": hash, "by": by, "note": note}
        path = f"{self._approval(run_id, approval_id)}/{verb}"
        done: dict[str, Any] = self.request("POST", path, body).json()
        return done
