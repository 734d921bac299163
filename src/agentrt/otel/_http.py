"""The OTLP/HTTP span exporter `exporter_from_env` makes: the SDK's, noting the status the
collector answered, so that a refusal that cannot change is told from one that may pass.

The SDK's exporter says only that a batch failed. A collector's 400 (the request is
malformed), 401/403 (the credentials), 404 (the endpoint) or 413 (the batch is too large)
answers the same page the same way every time, while a 429, a 5xx or no answer at all may
pass later. The status is noted by a response hook on the `requests.Session` handed to
the SDK (both public interfaces). When a credential provider gives the SDK its session
(`OTEL_PYTHON_EXPORTER_OTLP_HTTP_*CREDENTIAL_PROVIDER`), that session is left alone and
no status is noted: every failure is then one that may pass, as before.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

CREDENTIAL_PROVIDERS = (
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER",
)


class StatusNotingExporter(OTLPSpanExporter):
    """`OTLPSpanExporter` configured by the environment, which notes in `last_status` the
    HTTP status of the last answer to the batch being exported (None: no answer)."""

    def __init__(self) -> None:
        self.last_status: int | None = None
        session = None
        if not any(os.environ.get(name) for name in CREDENTIAL_PROVIDERS):
            import requests

            session = requests.Session()
            session.hooks["response"].append(self._note)
        super().__init__(session=session)

    def _note(self, response: Any, *args: Any, **kwargs: Any) -> None:
        self.last_status = int(response.status_code)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.last_status = None
        return super().export(spans)


__all__ = ["CREDENTIAL_PROVIDERS", "StatusNotingExporter"]
