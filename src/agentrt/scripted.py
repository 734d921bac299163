"""`ScriptedAgent`: an agent that plays back a fixed list of decisions.

Decision *i* is returned for step *i* (the step's index, not the number of
calls), so a run resumed after a pause or a crash picks up where the script
says, and a test or an example reads like the run it produces. Running past
the end of the script is an agent error, which ends the run `agent_error`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .records import Decision, StepInput

ScriptEntry = Decision | Callable[[StepInput], Decision]


class ScriptedAgent:
    """Returns `decisions[i]` for step `i`; an entry may be a function of the input."""

    def __init__(self, decisions: Sequence[ScriptEntry]) -> None:
        self.decisions = list(decisions)
        # Only the last input is kept: each holds every step so far, so keeping
        # them all would grow with the square of the run's length.
        self.last_input: StepInput | None = None
        self.calls = 0

    def decide(self, input: StepInput) -> Decision:
        self.last_input = input
        self.calls += 1
        index = input.steps[-1].index if input.steps else -1
        if index < 0 or index >= len(self.decisions):
            raise IndexError(
                f"the script has {len(self.decisions)} decisions; step {index} has none"
            )
        entry = self.decisions[index]
        return entry(input) if callable(entry) else entry
