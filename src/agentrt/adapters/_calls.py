"""How an adapter finds the recorded step of a framework's tool call, shared by every adapter.

A framework names each tool call with its own id and may issue the same call
again on its own resume (a replayed node, an older history, a saved run
state). The adapter records the call's decision with `reason = prefix +
call_id`, and looks that reason up before it claims a step, so a call already
recorded gets its recorded outcome and never a second execution. Each adapter
keeps its own prefix: the reasons are stored, so they never change.

The look-up is one indexed read of the steps recording those reasons
(`agentrt.lowlevel.steps_with_reasons`, docs/decisions/0060), never a read
of the whole run: it costs the same at the run's 2,000th step as at its first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agentrt import Decision, Step, StepStatus, Store
from agentrt.lowlevel import steps_with_reasons

SETTLED = (StepStatus.DONE, StepStatus.FAILED)
"""A step in one of these has its outcome recorded and never changes again."""


@dataclass(frozen=True, slots=True)
class CallMarker:
    """The prefix one framework's recorded decisions carry before its tool call id."""

    prefix: str

    def reason(self, call_id: str) -> str:
        """The decision's reason for the framework's call `call_id`."""
        return self.prefix + call_id

    def call_id(self, decision: Decision | None) -> str | None:
        """The framework's call id a recorded decision names, or None."""
        if decision is None or not decision.reason.startswith(self.prefix):
            return None
        return decision.reason[len(self.prefix) :]

    def steps(self, store: Store, run_id: str, call_id: str) -> list[Step]:
        """Every step of the run that recorded the call `call_id`, oldest first (read whole)."""
        return steps_with_reasons(store, run_id, [self.reason(call_id)])

    def latest(self, store: Store, run_id: str, call_ids: Iterable[str]) -> dict[str, Step]:
        """The latest step recording each of `call_ids` that the run recorded, by call id."""
        reasons = {self.reason(c) for c in call_ids}
        if not reasons:
            return {}
        latest: dict[str, Step] = {}
        for step in steps_with_reasons(store, run_id, reasons):
            call_id = self.call_id(step.decision)
            if call_id is not None:
                latest[call_id] = step
        return latest

    def settled(self, store: Store, run_id: str, call_id: str) -> Step | None:
        """The step that settled the call `call_id` (done or failed), if any."""
        for step in self.steps(store, run_id, call_id):
            if step.status in SETTLED:
                return step
        return None
