"""What a policy received, as the record keeps it, and that input rebuilt from the record.

Every `step.policy` written for a policy's own answer carries `input`
(decision 0072): the run as the policy saw it (its row's columns, less the id,
the goal and the limits, which `run.created` holds), how many of the run's
steps and approvals the view held, and the SHA-256 of each part of the input:

    "input": {"v": 1, "run": {<runs columns>}, "steps": n, "approvals": m,
              "hashes": {"request": h, "run": h, "steps": h, "approvals": h}}

The steps and approvals themselves are not copied: they are in the record
already, and a copy per evaluation would grow with the square of a run's
length. The view's steps are the run's first `n` steps other than the one
judged, its approvals the run's first `m`; their hashes prove that what a
re-check reads back is what the policy was given. A part that no longer hashes
the same (a row changed since, a policy that edited its copy of a spec) makes
the evaluation not re-checkable, never a wrong answer.

Invariant: a part's hash is over the canonical JSON of a complete, reversible
form of the record (every field of the `Run`, `Step` or `Approval`, times in
their stored form, durations in microseconds), computed the same way when the
policy is asked and when a re-check rebuilds its input: equal hashes mean
equal input. Recording never fails a run: a value that will not hash leaves
the evaluation without `input` (not re-checkable).
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ._canonical import content_hash, to_text
from ._clock import duration_to_ms, format_time
from ._history import StepLog, StepsView
from ._records import Approval, Limits, Run, RunView, Step, ToolRequest
from ._store import run_from_columns

INPUT_VERSION = 1

_RUN_KEPT_ELSEWHERE = ("id", "goal", "limits_json")
_MICROSECOND = timedelta(microseconds=1)


_last_limits: tuple[Limits | None, str] = (None, "")


def _limits_text(limits: Limits) -> str:
    """A run's limits as `limits_json` holds them, remembered for the last `Limits` object
    (by identity: equal limits may still differ in how a number is written; a session's
    run keeps one object, the store decoding each text once)."""
    global _last_limits
    last = _last_limits
    if last[0] is limits:
        return last[1]
    text = to_text(limits.to_json())
    _last_limits = (limits, text)
    return text


def run_columns(run: Run) -> dict[str, Any]:
    """The run as its `runs` row holds it (the columns `run_from_row` decodes)."""
    return {
        "id": run.id,
        "goal": run.goal,
        "status": str(run.status),
        "reason": str(run.reason),
        "reason_detail": run.reason_detail,
        "limits_json": _limits_text(run.limits),
        "step_count": run.step_count,
        "created_at": format_time(run.created_at),
        "started_at": format_time(run.started_at),
        "finished_at": format_time(run.finished_at),
        "result_json": "" if run.result is None else to_text(run.result),
        "model_calls": run.model_calls,
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "cached_input_tokens": run.cached_input_tokens,
        "estimated_cost_micros": run.estimated_cost_micros,
        "active_ms": duration_to_ms(run.active_time),
        "origin": run.origin,
    }


def _run_form(run: Run, columns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`run_columns` (given, or computed) and what they may not carry exactly
    (sub-millisecond time, a decode error)."""
    return {
        **(run_columns(run) if columns is None else columns),
        "active_us": run.active_time // _MICROSECOND,
        "decode_error": run.decode_error,
    }


def _step_form(step: Step) -> dict[str, Any]:
    return {
        "id": step.id,
        "run_id": step.run_id,
        "index": step.index,
        "status": str(step.status),
        "decision": None if step.decision is None else step.decision.to_json(),
        "policy": None if step.policy is None else step.policy.to_json(),
        "observation": None if step.observation is None else step.observation.to_json(),
        "started_at": format_time(step.started_at),
        "finished_at": format_time(step.finished_at),
        "spec_hash": step.spec_hash,
        "policy_id": step.policy_id,
        "decode_error": step.decode_error,
    }


def _approval_form(approval: Approval) -> dict[str, Any]:
    return {
        "id": approval.id,
        "run_id": approval.run_id,
        "step_id": approval.step_id,
        "kind": approval.kind,
        "capability": approval.capability,
        "presentation": approval.presentation,
        "request": approval.request,
        "hash": approval.hash,
        "status": str(approval.status),
        "created_at": format_time(approval.created_at),
        "expires_at": format_time(approval.expires_at),
        "decided_at": format_time(approval.decided_at),
        "decided_by": approval.decided_by,
        "note": approval.note,
        "decode_error": approval.decode_error,
    }


def _request_form(request: ToolRequest) -> dict[str, Any]:
    return {
        "run_id": request.run_id,
        "step_id": request.step_id,
        "spec": request.spec.to_json(),
        "args": request.args,
    }


def step_hash(step: Step) -> str:
    """The hash of one step in a policy's input."""
    return content_hash(_step_form(step))


def _joined(digests: Sequence[str]) -> bytes:
    return b",".join(b'"' + d.encode("ascii") + b'"' for d in digests)


_LISTED = "policy input: listed step hashes"
"""The key in a `SettledPrefix.shared` of (how many of the run's first steps, their hashes,
the list's hash state over them): made by a session that listed them, so that the next
session of the run lists only the steps after them (decision 0130)."""


class InputHashes:
    """Each step's and approval's hash, kept while the record is unchanged.

    A session holds one: a step is hashed once however many later views hold it
    (its copy is replaced, never changed, when it is written, so the object's
    identity says whether the hash still holds). A session's views of its
    `StepLog` (decision 0098) keep each step's hash with the log, which lets old
    steps go: this then keeps only the list's hashes, and takes again those of
    the positions the log says were replaced since the last view.
    """

    def __init__(self) -> None:
        self._steps: dict[str, tuple[Step, str]] = {}
        self._approvals: dict[str, tuple[Approval, str]] = {}
        # The approvals of the last view, and the hash of their list.
        self._approvals_listed: tuple[tuple[Approval, ...], str] = ((), "")
        # The list of steps' hashes as canonical JSON is hashed as it grows: the steps
        # already in it (the same objects) and the SHA-256 of its text without the
        # closing bracket. A view that extends the last one costs its new steps only.
        self._listed: list[Step] = []
        self._list_hash = hashlib.sha256(b"[")
        # For views of a `StepLog`: the log, the hashes listed, the replacements seen.
        self._log: StepLog | None = None
        self._log_listed: list[str] = []
        self._log_seen = 0

    def steps(self, steps: Sequence[Step]) -> str:
        """`content_hash` of the list of each step's hash (`step`), grown incrementally."""
        if isinstance(steps, StepsView):
            return self._log_steps(steps)
        listed = self._listed
        if len(steps) < len(listed) or not all(map(operator.is_, listed, steps)):
            listed.clear()
            self._list_hash = hashlib.sha256(b"[")
        for step in steps[len(listed) :]:
            # A hex digest needs no escaping: its JSON is itself in quotes.
            comma = b"," if listed else b""
            self._list_hash.update(comma + b'"' + self.step(step).encode("ascii") + b'"')
            listed.append(step)
        whole = self._list_hash.copy()
        whole.update(b"]")
        return whole.hexdigest()

    def _log_steps(self, view: StepsView) -> str:
        log, listed = view.log, self._log_listed
        if log is not self._log:
            self._log, self._log_seen = log, 0
            listed.clear()
            self._list_hash = hashlib.sha256(b"[")
            # A log that starts from the steps an earlier load of the run read (decision
            # 0130): the first of them listed as an earlier session listed them.
            start = log.built_from
            known = None if start is None else start.shared.get(_LISTED)
            if start is not None and known is not None and known[0] <= min(len(start), len(view)):
                listed.extend(known[1])
                self._list_hash = known[2].copy()
        changed = log.replaced[self._log_seen :]
        self._log_seen = len(log.replaced)
        first = min((p for p in changed if p < len(listed)), default=len(listed))
        first = min(first, len(view))
        if first < len(listed):  # a listed step was written again (rare): hash from there
            del listed[first:]
            self._list_hash = hashlib.sha256(b"[" + _joined(listed))
        # The steps the log's load found settled: listed for the next session of the run.
        kept = log.kept
        keep = -1 if kept is None else len(kept)
        if kept is not None and kept.shared.get(_LISTED, (-1,))[0] >= keep:
            keep = -1  # listed that far already
        if kept is not None and keep == len(listed):
            kept.shared[_LISTED] = (keep, tuple(listed), self._list_hash.copy())
        for position in range(len(listed), len(view)):
            digest = view.digest(position, step_hash)
            comma = b"," if listed else b""
            self._list_hash.update(comma + b'"' + digest.encode("ascii") + b'"')
            listed.append(digest)
            if kept is not None and position + 1 == keep:
                kept.shared[_LISTED] = (keep, tuple(listed), self._list_hash.copy())
        whole = self._list_hash.copy()
        whole.update(b"]")
        return whole.hexdigest()

    def step(self, step: Step) -> str:
        kept = self._steps.get(step.id)
        if kept is not None and kept[0] is step:
            return kept[1]
        digest = step_hash(step)
        self._steps[step.id] = (step, digest)
        return digest

    def approvals(self, approvals: Sequence[Approval]) -> str:
        """`content_hash` of the list of each approval's hash (`approval`), kept while the
        view holds the same approval objects as the last one (none, in most runs)."""
        listed, digest = self._approvals_listed
        if digest and len(listed) == len(approvals) and all(map(operator.is_, listed, approvals)):
            return digest
        digest = content_hash([self.approval(a) for a in approvals])
        self._approvals_listed = (tuple(approvals), digest)
        return digest

    def approval(self, approval: Approval) -> str:
        kept = self._approvals.get(approval.id)
        if kept is not None and kept[0] is approval:
            return kept[1]
        digest = content_hash(_approval_form(approval))
        self._approvals[approval.id] = (approval, digest)
        return digest


def input_hashes(
    request: ToolRequest,
    view: RunView,
    hashes: InputHashes | None = None,
    columns: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The hash of each part of a policy's input (see the module docstring); `columns`,
    when given, are `run_columns(view.run)` already computed."""
    kept = InputHashes() if hashes is None else hashes
    return {
        "request": content_hash(_request_form(request)),
        "run": content_hash(_run_form(view.run, columns)),
        "steps": kept.steps(view.steps),
        "approvals": kept.approvals(view.approvals),
    }


def input_record(
    request: ToolRequest, view: RunView, hashes: InputHashes | None = None
) -> dict[str, Any] | None:
    """The `input` of a `step.policy` payload; None when the input will not hash."""
    try:
        columns = run_columns(view.run)
        return {
            "v": INPUT_VERSION,
            "run": {k: v for k, v in columns.items() if k not in _RUN_KEPT_ELSEWHERE},
            "steps": len(view.steps),
            "approvals": len(view.approvals),
            "hashes": input_hashes(request, view, hashes, columns),
        }
    except Exception:  # never fail a run over its re-check record (module invariant)
        return None


def input_text(request: ToolRequest, view: RunView) -> bytes:
    """The whole input of one evaluation as canonical JSON: what a test compares byte for byte."""
    return to_text(
        {
            "request": _request_form(request),
            "run": _run_form(view.run),
            "steps": [_step_form(step) for step in view.steps],
            "approvals": [_approval_form(a) for a in view.approvals],
        }
    ).encode("utf-8")


@dataclass(frozen=True)
class Rebuilt:
    """A policy's input rebuilt from the record, or why it could not be."""

    request: ToolRequest | None
    view: RunView | None
    problem: str = ""


def rebuild_run(recorded: Mapping[str, Any], run_id: str, created: Mapping[str, Any]) -> Run:
    """The run the policy saw: the recorded columns, and the id, goal and limits of
    `run.created`, decoded as a read of the row would decode them."""
    columns: dict[str, Any] = dict(recorded)
    columns["id"] = run_id
    columns["goal"] = created.get("goal", "")
    columns["limits_json"] = to_text(created.get("limits", {}))
    return run_from_columns(columns)


def rebuild(
    record: Mapping[str, Any],
    request: ToolRequest,
    run: Run,
    steps: Sequence[Step],
    approvals: Sequence[Approval],
    hashes: InputHashes | None = None,
) -> Rebuilt:
    """The view from the run's rows (`steps` other than the judged one, in order, and
    `approvals` in order), checked part by part against the recorded hashes; `hashes`
    keeps each step's hash between the evaluations of one re-check."""
    n_steps, n_approvals = record.get("steps"), record.get("approvals")
    if not isinstance(n_steps, int) or not isinstance(n_approvals, int):
        return Rebuilt(None, None, "the recorded input does not say how many steps it held")
    prior = [s for s in steps if s.id != request.step_id][:n_steps]
    held = list(approvals)[:n_approvals]
    if len(prior) != n_steps or len(held) != n_approvals:
        return Rebuilt(None, None, "the record no longer holds every step and approval seen")
    view = RunView(run=run, steps=tuple(prior), approvals=tuple(held))
    recorded = record.get("hashes")
    if not isinstance(recorded, Mapping):
        return Rebuilt(None, None, "the recorded input has no hashes")
    now = input_hashes(request, view, hashes)
    parts = ("request", "run", "steps", "approvals")
    changed = [part for part in parts if recorded.get(part) != now[part]]
    if changed:
        return Rebuilt(
            None,
            None,
            "what the record holds now does not hash as the policy's input did: "
            + ", ".join(changed),
        )
    return Rebuilt(request, view)
