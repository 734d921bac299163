"""Which answers of a collector refuse a request for good (no SDK needed to tell)."""

from __future__ import annotations

MAY_PASS_LATER = frozenset({408, 429})
"""The 4xx answers that may change for the same request: a timeout, too many requests."""


def refused_for_good(status: int | None) -> bool:
    """Whether a collector's HTTP `status` refuses the request itself, so that sending the
    same page again gets the same answer: a 4xx other than 408 and 429. A 5xx (the
    collector's own trouble), a 429 or no answer at all may pass later."""
    return status is not None and 400 <= status <= 499 and status not in MAY_PASS_LATER


__all__ = ["MAY_PASS_LATER", "refused_for_good"]
