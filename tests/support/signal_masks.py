"""A process's signal masks, as the kernel holds them (`/proc/PID/status`)."""

from __future__ import annotations

import re
from pathlib import Path


def signal_mask(pid: int, field: str) -> int:
    """Process `pid`'s mask `field` (`SigIgn`: ignored, `SigCgt`: caught, ...): a bit per
    signal, signal N at bit N - 1. `OSError` once the process is gone."""
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{field}:\s*([0-9a-f]+)$", status, re.MULTILINE)
    assert match, status
    return int(match[1], 16)
