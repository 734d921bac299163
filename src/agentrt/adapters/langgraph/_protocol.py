"""What a LangGraph interrupt shows a person, and what a resume must carry back.

A call the policy sends to a person pauses the graph with LangGraph's own
`interrupt(value)`. The value is a plain JSON dict naming the agentrt run, the
approval and the SHA-256 hash of the exact request (`approval_request`), with
the plain rendering `agentrt approve` prints, so whoever answers sees what they
decide on. The answer comes back as `Command(resume=...)`, and a resume value
must name that approval and that hash: a decision for another request is
refused (`ApprovalChangedError`) before anything is written.

Three resume values, built by `approve`, `reject` and `decided` from the
interrupt's value: approve or reject here (the adapter decides through
`agentrt.approve`/`agentrt.reject` with the hash as shown), or go on after the
person decided elsewhere (`agentrt approve`, the console, the webhook).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentrt import ApprovalChangedError, ConfigError

MARK = "agentrt.approval"
"""The `type` of every interrupt value this adapter raises."""

DECISIONS = ("approve", "reject", "decided")


def _value_of(request: Any) -> Mapping[str, Any]:
    """The interrupt value, given the value itself or LangGraph's `Interrupt`."""
    value = getattr(request, "value", request)
    if not isinstance(value, Mapping) or value.get("type") != MARK:
        raise ConfigError(
            "not an agentrt approval: pass the interrupt (or its value) the gated tool node raised"
        )
    return value


def _resume(request: Any, decision: str, by: str, note: str) -> dict[str, Any]:
    value = _value_of(request)
    out: dict[str, Any] = {
        "type": MARK,
        "run_id": value["run_id"],
        "approval_id": value["approval_id"],
        "hash": value["hash"],
        "decision": decision,
    }
    if decision != "decided":
        out["by"] = by
        out["note"] = note
    return out


def approve(request: Any, by: str, note: str = "") -> dict[str, Any]:
    """The resume value that approves exactly the request an interrupt showed."""
    return _resume(request, "approve", by, note)


def reject(request: Any, by: str, note: str = "") -> dict[str, Any]:
    """The resume value that rejects exactly the request an interrupt showed."""
    return _resume(request, "reject", by, note)


def decided(request: Any) -> dict[str, Any]:
    """The resume value that goes on after a person decided through `agentrt approve`."""
    return _resume(request, "decided", "", "")


def check_resume(value: Any, run_id: str, approval_id: str, hash: str) -> dict[str, Any]:
    """The resume value, if it answers this approval of this request; refused otherwise."""
    if not isinstance(value, Mapping) or value.get("type") != MARK:
        raise ApprovalChangedError(
            f"the resume value does not answer approval {approval_id} (hash {hash[:12]}): "
            "resume with agentrt.adapters.langgraph.approve(interrupt, by=...), "
            "reject(...) or decided(...)"
        )
    if value.get("decision") not in DECISIONS:
        raise ApprovalChangedError(
            f"the resume value's decision {value.get('decision')!r} is not one of "
            f"{', '.join(DECISIONS)}"
        )
    if (
        value.get("run_id") != run_id
        or value.get("approval_id") != approval_id
        or value.get("hash") != hash
    ):
        raise ApprovalChangedError(
            f"the decision names approval {value.get('approval_id')!r} with hash "
            f"{str(value.get('hash'))[:12]!r}, but the run waits on approval {approval_id} "
            f"with hash {hash[:12]}: a decision for another request is refused"
        )
    return dict(value)
