"""Whether an object is freed once what holds it is dropped, allowing threads to unwind.

A graph's blocking path runs its tasks on a thread pool: a worker sets its future's
outcome and only then lets go of the task it ran (CPython's `concurrent.futures` drops its
work item after `run` returns). On a loaded machine the test's thread can reach
`gc.collect()` inside that window and find the object still held by the worker's frame,
a reference that goes a moment later. `freed` collects until the object is gone or a
deadline passes, so a real leak still fails (the reference never goes) and a thread's
last instructions do not.
"""

from __future__ import annotations

import gc
import time
import weakref
from typing import Any


def freed(ref: weakref.ref[Any], within: float = 30.0) -> bool:
    """True once `ref`'s object is gone, collecting garbage between looks; False if it is
    still alive after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        gc.collect()
        if ref() is None:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
