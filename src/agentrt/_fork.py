"""What a process made by `fork` must make again, and what it must leave to its parent.

A forked child has only the thread that forked. A lock another thread held at that
moment stays held in the child, where nothing will release it, and an executor that
had idle threads believes they will take its next work. Each module holding such an
object names it here once (`renewed_in_children`), and the child gets a new one made by
the factory before any of its code runs (`os.register_at_fork`; decision 0125).

A database connection the parent opened is the parent's: the child shares its socket
or its file's locks, so a statement the child sent would interleave with the parent's,
and a PostgreSQL connection the child closed would end the parent's session. An object
holding one registers itself (`left_to_the_parent`); in a child, before any of the
child's code runs, it is told so (`_leave`), refuses every use from then on, and hands
its connections to `keep`, which holds them for the child's life so that nothing in the
child closes them (decision 0127).

Invariants: the module reads a renewed object through its global name at each use
(never a copy taken at import), so that the child's new one is the one used; a
registered object is told in every child forked while it is alive, and never closes
what it handed to `keep`.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable
from typing import Protocol


def renewed_in_children(module: str, name: str, make: Callable[[], object]) -> None:
    """After a fork, the child's `module.name` is `make()`, not the parent's object."""
    if not hasattr(os, "register_at_fork"):
        return
    owner = sys.modules[module]

    def renew() -> None:
        setattr(owner, name, make())

    os.register_at_fork(after_in_child=renew)


class _LeftToTheParent(Protocol):
    def _leave(self, parent: int) -> None:
        """In a forked child: refuse every use from now on; never close what the parent
        opened (hand it to `keep`). Must not raise."""


_LEFT: weakref.WeakSet[_LeftToTheParent] = weakref.WeakSet()

_KEPT: list[object] = []
"""A parent's connections, held in a child so that no finalizer of the child closes them."""


def left_to_the_parent(holder: _LeftToTheParent) -> None:
    """In a child forked while `holder` is alive, `holder._leave(parent_pid)` runs first."""
    _LEFT.add(holder)


def keep(*connections: object) -> None:
    """Hold a parent's connections for the rest of this (child) process."""
    _KEPT.extend(c for c in connections if c is not None)


def _leave_in_a_child() -> None:
    parent = os.getppid()
    for holder in list(_LEFT):
        holder._leave(parent)
    _LEFT.clear()  # the child's own opens register afresh


def refusal(what: str, parent: int) -> str:
    """The one sentence a holder left to its parent says at each use in the child."""
    return (
        f"this {what} was opened by process {parent} before it forked this one; a forked "
        "process must open a store of its own (agentrt.open_store) and leave its parent's alone"
    )


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_leave_in_a_child)
