"""The copies of recorded records that a consumer is shown (an agent's `StepInput`).

Owns one invariant: nothing a consumer does to what it was shown changes what
the runtime recorded, judges or executes. The records are frozen dataclasses,
so the only parts a consumer could change are their JSON values (a decision's
`args` and `result`, a verdict's `capability` and `presentation`, an
observation's `content`, a run's `result`, an approval's `capability`,
`presentation` and `request`): those are copied (`copy_json`: new dicts and
lists, the immutable scalars shared). Everything else (strings, numbers, times,
enums, `Limits`) is immutable and shared, and a record none of whose JSON values
is a container is shown as itself.

This replaces `copy.deepcopy` of whole records, which walked every field
through the generic copier (about 130 µs a step and 160 µs a run here); the copy
is the same value (`==` and `repr`), only cheaper. A value that is not plain
JSON (none is, in what the store hands back) falls back to `copy.deepcopy`.
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar

from ._canonical import copy_json
from ._errors import JSONValueError
from ._records import Approval, Decision, Observation, PolicyDecision, Run, RunView, Step

_R = TypeVar("_R")


def _own(value: Any) -> Any:
    """`value` itself when it is immutable, else an independent copy."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    try:
        return copy_json(value)
    except JSONValueError:
        return copy.deepcopy(value)


def _with(record: _R, changed: dict[str, Any]) -> _R:
    """A copy of the frozen dataclass `record` with `changed` fields: the same class and
    the same field values otherwise, built without running `__init__` again (its
    fields were checked when `record` was made; `dataclasses.replace` would redo it)."""
    new: _R = object.__new__(type(record))
    fields = new.__dict__
    fields.update(record.__dict__)
    fields.update(changed)
    return new


def _json_fields(record: Any, names: tuple[str, ...]) -> Any:
    """`record` itself when none of its `names` holds a container, else a copy owning
    a copy of each that does."""
    changed = {}
    for name in names:
        value = getattr(record, name)
        owned = _own(value)
        if owned is not value:
            changed[name] = owned
    return _with(record, changed) if changed else record


def shown_run(run: Run) -> Run:
    """The run as a consumer may be shown it."""
    return _json_fields(run, ("result",))  # type: ignore[no-any-return]


def shown_approval(approval: Approval) -> Approval:
    """An approval as a consumer may be shown it."""
    return _json_fields(  # type: ignore[no-any-return]
        approval, ("capability", "presentation", "request")
    )


def shown_step(step: Step) -> Step:
    """A step as a consumer may be shown it: its decision, verdict and observation
    owning their JSON values."""
    changed: dict[str, Any] = {}
    decision = step.decision
    if decision is not None:
        owned: Decision | None = _json_fields(decision, ("args", "result"))
        if owned is not decision:
            changed["decision"] = owned
    policy = step.policy
    if policy is not None:
        verdict: PolicyDecision | None = _json_fields(policy, ("capability", "presentation"))
        if verdict is not policy:
            changed["policy"] = verdict
    observation = step.observation
    if observation is not None:
        seen: Observation | None = _json_fields(observation, ("content",))
        if seen is not observation:
            changed["observation"] = seen
    return _with(step, changed) if changed else step


def shown_view(view: RunView) -> RunView:
    """The view as a policy or a reconciliation is shown it: the run and approvals owning
    their JSON values (its steps are shown copies already), so nothing it edits reaches the
    record, the agent or another evaluation; the view itself when there is nothing to copy."""
    run = shown_run(view.run)
    if run is view.run and not view.approvals:
        return view
    return RunView(
        run=run, steps=view.steps, approvals=tuple(shown_approval(a) for a in view.approvals)
    )
