"""What a person is shown before deciding, when the model writes the arguments to make it
costly or misleading (`agentrt._render_approval`).

Every row of the full view is bounded, so what is shown grows with the number of nodes,
not with their depth times their number: a long path is its first keys, how many are left
out, its last keys (the node's own whole) and a hash of the whole path. A key holding
anything outside ASCII is shown escaped, so two names that print alike read differently,
and the summary warns about such argument names. Every value is still shown, in hash order,
and the decision stays bound to the hash.
"""

from __future__ import annotations

import re

import agentrt
from agentrt import SideEffect
from agentrt._canonical import to_text
from agentrt._render_approval import LONG_PATH, approval_fields
from agentrt.approver import Decision, Local
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


def schemaless_push() -> RecordingTool:
    return RecordingTool("push", SideEffect.REMOTE_MUTATION, schema={"type": "object"})


def test_the_approval_shown_for_a_deeply_nested_request_stays_proportionate_to_it(
    store: agentrt.Store,
) -> None:
    """A model proposes ~12 KB of arguments: 1,000 small members under 60 nested long keys.
    What `Local.pending` shows (its text and its fields) stays within a small multiple of
    what the model wrote, every node still a row, and approving the hash shown still works."""
    args = deep_and_wide(depth=60, leaves=1_000)
    size = len(to_text(args))
    _driver, run, _push = paused_run(store, FakeClock(), tool=schemaless_push(), args=args)
    local = Local(store)
    (item,) = local.pending(run.id)
    assert "request.args" in item.text and len(item.fields) > 3_000  # every node is shown
    shown = len(item.text) + sum(len(path) + len(value) for path, value in item.fields)
    assert shown <= 200 * size, f"{shown:,} characters shown for {size:,} of arguments"
    assert max(len(path) for path, _ in item.fields) < 3 * LONG_PATH
    local.approve(Decision(run.id, item.approval_id, item.hash, "alice"))
    assert store.get_approval(run.id, item.approval_id).status == "approved"


def without_hash(path: str) -> str:
    """A shortened path without the hash of the whole that ends it."""
    return re.sub(r" \(path sha256 [0-9a-f]{12}\)$", "", path)


def shown_key(key: str) -> str:
    """How `key` reads as the last key of a path."""
    ((path, _value),) = list(approval_fields({key: 0}))[1:]
    return path


def test_a_long_path_keeps_the_nodes_own_key_and_every_key_is_shown_in_its_own_row() -> None:
    """Nothing is hidden by shortening a path: each row ends with its node's own key, so
    every key left out of a deep row is the last key of the row of its own node above."""
    rows = list(approval_fields(deep_and_wide(depth=20, leaves=3)))
    assert len(rows) == 1 + 20 + 3
    for level, (path, value) in enumerate(rows[1:21]):
        assert without_hash(path).endswith(shown_key(f"k{level:03d}" * 17)), path
        assert value.startswith("{…} (object")
    for leaf, (path, value) in enumerate(rows[21:]):
        assert without_hash(path).endswith(f'["{leaf}"]') and value == "0"
    assert "…(19 keys)…" in rows[-1][0] and rows[-1][0] != without_hash(rows[-1][0])


def test_two_deep_nodes_differing_only_in_the_middle_of_their_paths_print_differently() -> None:
    """Two branches alike at the top and the bottom, different in between: each leaf's path
    carries a hash of its whole path, so no two rows print the same path."""
    mid_a = {"m" * 70: {"a" * 70: {"z" * 70: {"leaf": 1}}}}
    mid_b = {"m" * 70: {"b" * 70: {"z" * 70: {"leaf": 2}}}}
    rows = list(approval_fields({"x" * 70: {"p": mid_a, "q": mid_b}}))
    paths = [path for path, _ in rows]
    assert len(set(paths)) == len(paths)
    leaves = [(path, value) for path, value in rows if value in ("1", "2")]
    assert len(leaves) == 2 and leaves[0][0] != leaves[1][0]
    assert all(path.split("…")[-1].startswith(".leaf (path sha256 ") for path, _ in leaves)


def test_a_flat_request_is_shown_with_its_whole_paths() -> None:
    """Shortening is only for paths past `LONG_PATH`: a usual request reads as before."""
    rows = dict(approval_fields({"request": {"args": {"to": "bob", "amount": 5}}}))
    assert rows[".request.args.to"] == '"bob" (string, 3 chars)'
    assert rows[".request.args.amount"] == "5"


# Cyrillic letters that print as Latin ones in every common terminal font.
LOOK_ALIKE = str.maketrans(
    {"\u043e": "o", "\u0430": "a", "\u0435": "e", "\u0440": "p", "\u0441": "c"}
)


def test_two_argument_names_that_print_alike_are_told_apart_and_warned_about(
    store: agentrt.Store,
) -> None:
    """A model calls a schemaless `push` with `to-account: alice` and `tо-account: mallory`
    (a Cyrillic о): the summary, the full view and the fields show the second name escaped
    (`"t\\u043e-account"`), so they no longer read alike, and a warning says why."""
    args = {"to-account": "alice", "t\u043e-account": "mallory", "amount": 5}
    _driver, run, _push = paused_run(store, FakeClock(), tool=schemaless_push(), args=args)
    (item,) = Local(store).pending(run.id)
    names = [line.split()[0] for line in item.text.splitlines() if "account" in line]
    skip = ("capability", "presentation", "request", "WARNING")
    listed = [n for n in names if not n.startswith(skip)]
    assert listed == ['"to-account"', '"t\\u043e-account"'], item.text
    assert listed[0].translate(LOOK_ALIKE) != listed[1].translate(LOOK_ALIKE)
    full = [p for p, _ in item.fields if p.startswith("request.args") and "account" in p]
    assert full == ['request.args["to-account"]', 'request.args["t\\u043e-account"]']
    (warning,) = [line for line in item.text.splitlines() if line.startswith("WARNING")]
    assert '"t\\u043e-account" (reads "t\u043e-account")' in warning


def test_ascii_argument_names_are_shown_as_written_and_draw_no_warning(
    store: agentrt.Store,
) -> None:
    args = {"to-account": "alice", "amount": 5}
    _driver, run, _push = paused_run(store, FakeClock(), tool=schemaless_push(), args=args)
    (item,) = Local(store).pending(run.id)
    assert not [line for line in item.text.splitlines() if line.startswith("WARNING")]
    assert 'request.args["to-account"]' in dict(item.fields)


def test_many_names_outside_ascii_draw_one_warning_of_bounded_length(store: agentrt.Store) -> None:
    args = {f"n\u0430me{i:04d}": i for i in range(500)}
    _driver, run, _push = paused_run(store, FakeClock(), tool=schemaless_push(), args=args)
    (item,) = Local(store).pending(run.id)
    (warning,) = [line for line in item.text.splitlines() if line.startswith("WARNING")]
    assert "and 497 more" in warning and len(warning) < 600


def test_a_long_identifier_key_is_shown_as_head_tail_and_hash_like_any_long_key() -> None:
    """A 10,000-character identifier is no cheaper to show than any other long key: its
    row reads its head, its tail, its length and a hash of it."""
    shown = shown_key("a" * 10_000)
    assert len(shown) < 2 * LONG_PATH and "(10,000 chars, sha256 " in shown
