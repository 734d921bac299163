"""What a person is shown of a pending agentrt approval, and how their decision travels back.

A Pydantic AI run that needs a person ends with `DeferredToolRequests`; for a
call the Gate paused, `requests.metadata[tool_call_id]["agentrt"]` is the
agentrt approval as `agentrt approve` shows it: the run id, the approval id,
its kind (`tool_call` or `interrupted_side_effect`), the SHA-256 `hash` of the
exact request and its plain `text`. `approved(requests, tool_call_id, by=...)`
builds the `DeferredToolResults` that approve it the framework's way, carrying
that hash in `metadata`; the adapter then decides the approval through
`agentrt.approve(..., shown_hash=hash)`. An approval that carries no hash (a
bare `ToolApproved()` or `True`, by call id alone) decides nothing.

A call made in the same response after the one that waits is held
(decision 0051): its metadata is `{"agentrt": {"run_id", "tool",
"held_behind": <the waiting call's id>, "text"}}` (the model's call ids in
`text` escaped, `trace.sanitize`), with no approval id and no hash, since
there is nothing to decide about it in agentrt. `approved` answers the calls
held behind the approved one with a plain `ToolApproved`, which lets the
framework continue them; the Gate then judges each in its turn.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved

import agentrt
from agentrt.approver import Local
from agentrt.trace import sanitize

KEY = "agentrt"
"""The adapter's key in `DeferredToolRequests.metadata[call]` and in the results' metadata."""


def presentation(
    store: agentrt.Store, run_id: str, approval_id: str, why: str = ""
) -> dict[str, Any]:
    """The metadata a deferred approval carries: what the person decides on, and its hash."""
    shown = Local(store).show(run_id, approval_id)
    entry: dict[str, Any] = {
        "run_id": run_id,
        "approval_id": approval_id,
        "kind": shown.kind,
        "tool": shown.tool,
        "hash": shown.hash,
        "text": shown.text,
    }
    if shown.notice:
        entry["notice"] = shown.notice
    if why:
        entry["refused"] = why
    return {KEY: entry}


def held_presentation(
    run_id: str, tool: str, call_id: str, waiting_tool: str, waiting_for: str
) -> dict[str, Any]:
    """The metadata a held call carries: what it waits behind; nothing to decide.

    The call ids are the model's own text: shown escaped (`trace.sanitize`),
    as an approval shows what the model wrote.
    """
    call, tool_shown = sanitize(call_id), sanitize(tool)
    behind, waiting_shown = sanitize(waiting_for), sanitize(waiting_tool)
    text = (
        f"Call {call} ({tool_shown}) is held behind call {behind} ({waiting_shown}), which "
        f"waits for a person in agentrt run {run_id}. There is nothing to decide about it "
        "here: when the run continues after that call's decision, it goes through the Gate "
        "in its turn (recorded, checked against its schema, put to the policy). Nothing has "
        "been recorded or run for it yet.\n"
    )
    entry = {"run_id": run_id, "tool": tool, "held_behind": waiting_for, "text": text}
    return {KEY: entry}


def approved(
    requests: DeferredToolRequests, tool_call_id: str, *, by: str, note: str = ""
) -> DeferredToolResults:
    """Approve one call the Gate deferred, bound to the hash of the request it was shown with.

    The calls held behind it are answered too (a plain `ToolApproved`: the
    Gate judges each when the run continues). Raises KeyError when
    `tool_call_id` is not an agentrt approval in `requests` (a held call
    included: approve the call it is held behind). Merge several with
    `DeferredToolResults.update`.
    """
    entry = _entry(requests, tool_call_id)
    if entry is not None and entry.get("held_behind"):
        raise KeyError(
            f"tool call {tool_call_id!r} is held behind call {entry['held_behind']!r}: approve "
            "that call; the calls held behind it are answered with it"
        )
    if entry is None or not entry.get("hash"):
        raise KeyError(f"tool call {tool_call_id!r} is not waiting on an agentrt approval")
    decision = {"hash": entry["hash"], "approval_id": entry["approval_id"], "by": by, "note": note}
    results = DeferredToolResults(
        approvals={tool_call_id: ToolApproved()}, metadata={tool_call_id: {KEY: decision}}
    )
    for call in requests.approvals:
        held = _entry(requests, call.tool_call_id)
        if held is not None and held.get("held_behind") == tool_call_id:
            results.approvals[call.tool_call_id] = ToolApproved()
            results.metadata[call.tool_call_id] = {KEY: {"held_behind": tool_call_id}}
    return results


def _entry(requests: DeferredToolRequests, tool_call_id: str) -> dict[str, Any] | None:
    entry = (requests.metadata.get(tool_call_id) or {}).get(KEY)
    return entry if isinstance(entry, dict) else None


def decision_of(metadata: Any) -> dict[str, str] | None:
    """The agentrt decision carried by an approved call's metadata, or None (call id alone)."""
    if not isinstance(metadata, dict):
        return None
    entry = metadata.get(KEY)
    if not isinstance(entry, dict):
        return None
    fields = ("hash", "approval_id", "by", "note")
    if not all(isinstance(entry.get(name), str) for name in fields) or not entry["hash"]:
        return None
    return {name: entry[name] for name in fields}
