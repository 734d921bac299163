"""Attacks on what a person is shown before deciding: model-written arguments built to
make the approval screen costly to show."""

from __future__ import annotations

import agentrt
from agentrt import SideEffect
from agentrt._canonical import to_text
from agentrt.approver import Local
from conftest import FakeClock, RecordingTool
from support.approvals import paused_run


def deep_and_wide(depth: int, leaves: int) -> dict[str, object]:
    """Objects nested `depth` deep under 68-character keys, `leaves` small members at the bottom."""
    args: dict[str, object] = {}
    node = args
    for level in range(depth):
        child: dict[str, object] = {}
        node[f"k{level:03d}" * 17] = child
        node = child
    for leaf in range(leaves):
        node[f"{leaf:x}"] = 0
    return args


def test_the_approval_shown_for_a_small_request_stays_proportionate_to_it(
    store: agentrt.Store,
) -> None:
    """A model proposes ~10 KB of arguments: 1,000 small members under 60 nested long keys.
    Every row of the full view repeats the whole path, three times over (capability,
    presentation, request), so `Local.pending` builds ~13 MB of text (and as much again in
    `fields`, and the webhook's JSON): over 1,000 times the request. It should stay within
    a small multiple of what the model wrote, as a flat request's does (about 15 times)."""
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION, schema={"type": "object"})
    args = deep_and_wide(depth=60, leaves=1_000)
    size = len(to_text(args))
    _driver, run, _push = paused_run(store, FakeClock(), tool=push, args=args)
    (item,) = Local(store).pending(run.id)
    assert "request.args" in item.text and len(item.fields) > 3_000  # every node is shown
    shown = len(item.text) + sum(len(path) + len(value) for path, value in item.fields)
    assert shown <= 200 * size, f"{shown:,} characters shown for {size:,} of arguments"


# Cyrillic letters that print as Latin ones in every common terminal font.
LOOK_ALIKE = str.maketrans(
    {"\u043e": "o", "\u0430": "a", "\u0435": "e", "\u0440": "p", "\u0441": "c"}
)


def test_two_argument_names_that_print_alike_are_told_apart(store: agentrt.Store) -> None:
    """A model calls a schemaless `push` with `to-account: alice` and `tо-account: mallory`
    (a Cyrillic о); the screen lists both names exactly alike, so a person cannot tell which one
    the tool reads. Names that print alike must be told apart (escaped, or a warning)."""
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION, schema={"type": "object"})
    args = {"to-account": "alice", "t\u043e-account": "mallory", "amount": 5}
    _driver, run, _push = paused_run(store, FakeClock(), tool=push, args=args)
    (item,) = Local(store).pending(run.id)
    names = [line.split()[0] for line in item.text.splitlines() if "account" in line]
    shown = [n for n in names if not n.startswith(("capability", "presentation", "request"))]
    assert len(shown) == 2, item.text
    warned = any(
        line.startswith("WARNING") and "account" in line for line in item.text.splitlines()
    )
    assert warned or shown[0].translate(LOOK_ALIKE) != shown[1].translate(LOOK_ALIKE), shown
    full = [(p, v) for p, v in item.fields if p.startswith("request.args") and "account" in p]
    assert warned or full[0][0].translate(LOOK_ALIKE) != full[1][0].translate(LOOK_ALIKE), full
