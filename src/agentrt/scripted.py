"""`ScriptedAgent`: an agent that plays back a fixed list of decisions.

It answers by what was actually carried out, not by the step's index: its
position in the list is the number of recorded steps that *settled* their
entry (docs/decisions/0018-scripted-agent-replays-what-was-carried-out.md).
Every step settles its entry except one the runtime interrupted before the
decision was carried out: a step interrupted while `deciding`, or while
executing a tool declared `read_only` (the runtime continues such a run
without running the call again, so the entry is offered again in the next
step). A step interrupted while executing anything else settles its entry:
its outcome is unknown and a scripted agent must not be what runs a side
effect a second time (the runtime asks a person for that, on the same step).

So a run resumed after a pause or a crash picks up where the script says, and
a test or an example reads like the run it produces. Running past the end of
the script is an agent error, which ends the run `agent_error`.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping, Sequence

from ._errors import ConfigError
from ._records import (
    Decision,
    ObservationKind,
    SideEffect,
    Step,
    StepInput,
    StepStatus,
)

ScriptEntry = Decision | Callable[[StepInput], Decision]


def _script(decisions: object) -> list[ScriptEntry]:
    """The script as a list; ConfigError for one Decision, a string, a mapping or a number."""
    if isinstance(decisions, Decision):
        raise ConfigError(
            "ScriptedAgent plays a list of Decisions, got one Decision: put it in a list,"
            " [Decision...]"
        )
    if isinstance(decisions, str | bytes | Mapping) or not isinstance(decisions, Iterable):
        raise ConfigError(
            f"ScriptedAgent plays a list of Decisions, got {type(decisions).__name__}"
        )
    # An entry that is not a Decision is played as it is: a script may stand for an agent
    # that misbehaves, and the driver records what it returned as an invalid decision.
    return list(decisions)


class ScriptedAgent:
    """Plays `decisions` in order, one per step that carries its entry out; an entry may be a
    function of the input."""

    def __init__(self, decisions: Sequence[ScriptEntry]) -> None:
        self.decisions = _script(decisions)
        # Only the last input is kept: each holds every step so far, so keeping
        # them all would grow with the square of the run's length.
        self.last_input: StepInput | None = None
        self.calls = 0
        self._settled = _SettledPrefix()

    def decide(self, input: StepInput) -> Decision:
        self.last_input = input
        self.calls += 1
        position = self._settled.position(input)
        if position >= len(self.decisions):
            index = input.steps[-1].index if input.steps else -1
            raise IndexError(
                f"the script has {len(self.decisions)} decisions, all carried out; "
                f"step {index} has none"
            )
        entry = self.decisions[position]
        return entry(input) if callable(entry) else entry


_FINAL = (StepStatus.DONE, StepStatus.FAILED)
"""Step statuses no later write changes (an interrupted step may still be reconciled)."""


class _SettledPrefix:
    """`script_position` at O(1) amortized per decision over one run's inputs.

    Remembers how many entries the run's leading steps in a final status (`done`,
    `failed`: no write moves a step out of them) settled; those never change, so
    a later input of the same run only judges the steps after them. The prefix is
    trusted only when the input is of the same run and its step at the prefix's
    end is the same step (ids are unique); otherwise it is rebuilt from scratch.
    """

    def __init__(self) -> None:
        self.run_id = ""
        self.length = 0  # leading steps remembered
        self.last_id = ""  # the id of the last of them
        self.settled = 0  # how many of them settled their entry

    def position(self, input: StepInput) -> int:
        steps = input.steps
        end = len(steps)
        if end and steps[-1].status == StepStatus.DECIDING:
            end -= 1
        if not (
            self.run_id == input.run.id
            and self.length <= end
            and (self.length == 0 or steps[self.length - 1].id == self.last_id)
        ):
            self.run_id, self.length, self.last_id, self.settled = input.run.id, 0, "", 0
        read_only = {t.name for t in input.tools if t.side_effect == SideEffect.READ_ONLY}
        settled = self.settled
        final = True
        for index in range(self.length, end):
            step = steps[index]
            if settles_its_entry(step, read_only):
                settled += 1
            if final and step.status in _FINAL and step.index == index:
                self.length, self.last_id, self.settled = index + 1, step.id, settled
            else:
                final = False
        return settled


def script_position(input: StepInput) -> int:
    """How many entries of a script the recorded steps have settled: the index of the entry
    to offer for the step being decided (the last one, still `deciding`)."""
    steps = list(input.steps)
    if steps and steps[-1].status == StepStatus.DECIDING:
        steps = steps[:-1]
    read_only = {t.name for t in input.tools if t.side_effect == SideEffect.READ_ONLY}
    return sum(1 for step in steps if settles_its_entry(step, read_only))


def settles_its_entry(step: Step, read_only_tools: Container[str]) -> bool:
    """Whether `step` used up the script entry it was offered.

    False only for a step interrupted before its decision was carried out: while
    deciding, or while executing a tool whose name is in `read_only_tools`. Done,
    tool_error, denied, invalid, rejected by a person, interrupted during a side
    effect, and every ending settle it; an approved re-run happens on the same
    step, so that step settles its entry once.
    """
    if step.status != StepStatus.INTERRUPTED:
        return True
    observation = step.observation
    if observation is None or observation.kind != ObservationKind.INTERRUPTED:
        return True
    content = observation.content
    previous = content.get("previous_status") if isinstance(content, dict) else None
    if previous == StepStatus.DECIDING:
        return False
    if previous != StepStatus.EXECUTING or step.decision is None:
        return True
    return step.decision.tool not in read_only_tools
