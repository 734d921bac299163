"""What a broken contract is reported as: `Violation` (one breach) and `InvariantError`.

Both the rules (`invariants`) and the record they read (`result`) name these,
so they live apart from either: a result raises the error, the rules produce
the violations, and neither module imports the other at run time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    """One breach of the contract: which rule, and what exactly was found."""

    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.detail}"


class InvariantError(AssertionError):
    """A scenario broke the recovery contract; `.violations` lists every breach."""

    def __init__(self, title: str, violations: Sequence[Violation], context: str = "") -> None:
        self.violations = tuple(violations)
        lines = [f"{title}: {len(self.violations)} invariant violation(s)"]
        lines += [f"  - {v}" for v in self.violations]
        if context:
            lines.append(context)
        super().__init__("\n".join(lines))


__all__ = ["InvariantError", "Violation"]
