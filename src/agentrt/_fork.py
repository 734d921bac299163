"""What a process made by `fork` must make again: process-wide objects tied to threads.

A forked child has only the thread that forked. A lock another thread held at that
moment stays held in the child, where nothing will release it, and an executor that
had idle threads believes they will take its next work. Each module holding such an
object names it here once (`renewed_in_children`), and the child gets a new one made by
the factory before any of its code runs (`os.register_at_fork`; decision 0125).

Invariant: the module reads the object through its global name at each use (never a
copy taken at import), so that the child's new one is the one used.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


def renewed_in_children(module: str, name: str, make: Callable[[], object]) -> None:
    """After a fork, the child's `module.name` is `make()`, not the parent's object."""
    if not hasattr(os, "register_at_fork"):
        return
    owner = sys.modules[module]

    def renew() -> None:
        setattr(owner, name, make())

    os.register_at_fork(after_in_child=renew)
