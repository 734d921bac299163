"""The steps a running session holds in memory, and those it reads back (decision 0098).

A `RunSession` once held every step of its run, each with its arguments and
observation: a run of 10,000 steps of 8 KiB values held 160 MiB. `StepLog` is
the session's steps now: a `Sequence[Step]` of every step of the run, in order,
that *holds* only some of them:

- the last `MIN_HELD` steps always, and older ones while the held steps weigh
  at most `HELD_BYTES` (a step's weight: `STEP_WEIGHT` plus the characters of its
  JSON values, the arguments, result, verdict's capability and presentation and
  observation);
- never a step that is not settled in a final status (`done`, `failed`): only a
  step no later write changes is let go, so what the store gives back for it is
  what the session last wrote (decision 0011's mirror invariant, which
  `tests/test_session_mirror.py` checks).

An item it does not hold is read back from the store (`Store.steps_from`: a
page of `PAGE` steps in one read), the last `PAGES_KEPT` pages kept; a page is
dropped when one of its steps is written again (it may hold a step still held,
as it then was). So a reader of the newest steps (the limits, the scripted
agent, the step being judged) never reads the store, and one that walks the
whole history reads a page per `PAGE` old steps it touches.

Views handed out (`StepsView` to a policy or a reconciliation, `ShownSteps` to
an agent) are snapshots of the log's length and held steps when made; an item
read back is an independent copy (`shown_step`) of the store's record, so what
their holder does to it changes nothing the session or a later view holds.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast, overload

from ._errors import RunStateError
from ._fork import left_to_the_parent
from ._records import Decision, Observation, PolicyDecision, Step, StepStatus
from ._shown import shown_step

HELD_BYTES = 16 * 2**20
"""The weight of old steps a session holds before it lets the oldest settled ones go."""

MIN_HELD = 16
"""The newest steps always held, whatever they weigh."""

STEP_WEIGHT = 2048
"""What a step weighs besides its JSON values (its records, times, ids, a shown copy)."""

PAGE = 32
"""Steps read back in one read of the store."""

PAGES_KEPT = 4
"""Pages of read-back steps kept (least recently used let go first)."""

FINAL = (StepStatus.DONE, StepStatus.FAILED)
"""Step statuses no later write changes: only such a step is let go. (An `interrupted`
step is changed only while it is its run's last: the takeover that found it may pause it
for a person or settle it. Once a later step exists it is never written again, which a
settled prefix relies on: decision 0133.)"""

ReadSteps = Callable[[int, int], list[Step]]
"""`(first_index, limit)`: the run's steps from that index, whole, in index order."""


def json_weight(value: Any) -> int:
    """About how many characters `value` takes as JSON (strings by their length)."""
    if value is None:
        return 8  # as the walk below counts it
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) + 2
        elif isinstance(item, dict):
            total += 2 + len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            total += 2 + len(item)
            stack.extend(item)
        else:
            total += 8
    return total


def step_weight(step: Step) -> int:
    """`STEP_WEIGHT` plus the weight of the step's JSON values."""
    return (
        STEP_WEIGHT
        + _decision_weight(step.decision)
        + _policy_weight(step.policy)
        + _observation_weight(step.observation)
    )


def _decision_weight(decision: Decision | None) -> int:
    return 0 if decision is None else json_weight(decision.args) + json_weight(decision.result)


def _policy_weight(policy: PolicyDecision | None) -> int:
    if policy is None:
        return 0
    return json_weight(policy.capability) + json_weight(policy.presentation)


def _observation_weight(observation: Observation | None) -> int:
    return 0 if observation is None else json_weight(observation.content)


def rewritten_weight(old: Step, old_weight: int, new: Step) -> int:
    """`step_weight(new)`, given `old_weight`, `step_weight(old)`: only the records `new`
    does not share with `old` are weighed (a write replaces one; the others are the
    same objects, which are never changed)."""
    weight = old_weight
    if new.decision is not old.decision:
        weight += _decision_weight(new.decision) - _decision_weight(old.decision)
    if new.policy is not old.policy:
        weight += _policy_weight(new.policy) - _policy_weight(old.policy)
    if new.observation is not old.observation:
        weight += _observation_weight(new.observation) - _observation_weight(old.observation)
    return weight


@dataclass(frozen=True, slots=True, eq=False)
class SettledPrefix:
    """A run's first steps up to its last one settled in a final status before any step
    still open, as a load of the run left them in its log (`StepLog.settled_prefix`): the
    steps held (None for one let go), their ids, indexes, weights and digests. Its last step
    is `done` or `failed`; a step before it may be `interrupted` (decision 0133).

    No write changes a step settled in a final status, nor an interrupted step once a later
    step exists, and no step is ever deleted, so a later load of the same run may start from
    it and read only the steps after it (decision 0130). Immutable but for `shared`: the
    `Step` records are shared, never changed. Equal only to itself.
    """

    entries: tuple[Step | None, ...]
    ids: tuple[str, ...]
    indexes: array[int]
    weights: array[int]
    digests: tuple[tuple[Step, str] | str, ...]
    held_weight: int
    cursor: int
    shared: dict[str, Any]
    """What readers of the run's settled steps made of them, to hand to the next session
    (the policy input's list of step hashes, `_policy_input.InputHashes`): one dict for
    every prefix of the run grown from this one. What is kept in it must hold for the
    steps it names whatever steps follow them (those steps never change)."""

    def __len__(self) -> int:
        return len(self.ids)

    def head(self, end: int) -> SettledPrefix:
        """Its first `end` positions."""
        if end == len(self.ids):
            return self
        weights = self.weights[:end]
        return SettledPrefix(
            entries=self.entries[:end],
            ids=self.ids[:end],
            indexes=self.indexes[:end],
            weights=weights,
            digests=self.digests[:end],
            held_weight=sum(weights),
            cursor=min(self.cursor, end),
            shared=self.shared,
        )


KNOWN_POSITION_WEIGHT = 256
"""What a prefix keeps of each of its steps besides a held step's weight: its id, index
and digest (about 250 bytes)."""


def _known_weight(prefix: SettledPrefix) -> int:
    return prefix.held_weight + KNOWN_POSITION_WEIGHT * len(prefix.ids)


class KnownPrefixes:
    """The settled prefixes of the runs loaded last by one Gate (or Driver), by run id.

    Bounded as a session's log is: together they weigh at most `budget` (the steps they
    hold, and `KNOWN_POSITION_WEIGHT` a step for the rest; the prefix kept last is kept
    whatever it weighs) and at most `runs` are kept; the least recently used go first.
    Safe to use from any thread.
    """

    def __init__(self, budget: int = HELD_BYTES, runs: int = 64) -> None:
        self._budget = budget
        self._runs = runs
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, SettledPrefix] = OrderedDict()
        self._weight = 0
        left_to_the_parent(self)

    def _leave(self, parent: int) -> None:
        """In a forked child: a new lock (another thread may have held the parent's at the
        fork) and nothing kept (the child's store is refused anyway: decision 0127)."""
        self._lock = threading.Lock()
        self._kept = OrderedDict()
        self._weight = 0

    def get(self, run_id: str) -> SettledPrefix | None:
        with self._lock:
            prefix = self._kept.get(run_id)
            if prefix is not None:
                self._kept.move_to_end(run_id)
            return prefix

    def keep(self, run_id: str, prefix: SettledPrefix) -> None:
        with self._lock:
            old = self._kept.pop(run_id, None)
            if old is not None:
                self._weight -= _known_weight(old)
            if not prefix.ids:
                return
            self._kept[run_id] = prefix
            self._weight += _known_weight(prefix)
            while len(self._kept) > 1 and (
                self._weight > self._budget or len(self._kept) > self._runs
            ):
                _, dropped = self._kept.popitem(last=False)
                self._weight -= _known_weight(dropped)

    def forget(self, run_id: str) -> None:
        with self._lock:
            old = self._kept.pop(run_id, None)
            if old is not None:
                self._weight -= _known_weight(old)


class StepLog(Sequence[Step]):
    """Every step of a session's run, in order; the newest and unsettled ones held."""

    def __init__(
        self,
        steps: Sequence[Step],
        read: ReadSteps,
        held_bytes: int | None = None,
        *,
        digest: Callable[[Step], str] | None = None,
        prefix: SettledPrefix | None = None,
    ) -> None:
        self._read = read
        # The digest `digest()` is asked for (the policy input's `step_hash`): made of a
        # step as it is let go, when not made yet, so that no digest ever needs a step read
        # back (a resumed session's first policy input would otherwise read the run).
        self._make_digest = digest
        self._budget = HELD_BYTES if held_bytes is None else held_bytes
        # Per position: the step (None: let go, read back when asked for), its id, its
        # index in the run, its weight while held, and its digest (`digest`), with the
        # step it was made of while that is held. What stays of a step let go is its id,
        # index and digest: about 250 bytes.
        self._entries: list[Step | None] = []
        self._ids: list[str] = []
        self._indexes = array("q")
        self._weights = array("q")
        self._held_weight = 0
        self._cursor = 0  # every position below it was let go, or is held as unsettled
        self._digests: list[tuple[Step, str] | str | None] = []
        self._pages: OrderedDict[int, dict[str, Step]] = OrderedDict()
        # The position of every step replaced in place, in order (appends are not
        # listed), and of every step let go: what a reader that keeps copies must copy
        # again or let go too (`GateSession.input`, `InputHashes`).
        self.replaced = array("q")
        self.dropped = array("q")
        # How many of the first positions came from `prefix` (none of them written again,
        # so `settled_prefix` need not look at them again).
        self._settled = 0
        self.built_from = prefix
        """The prefix this log started from (None: from its first step)."""
        self.kept: SettledPrefix | None = None
        """What `settled_prefix` gave last: the next load of the run starts from it."""
        if prefix is not None:
            self._entries = list(prefix.entries)
            self._ids = list(prefix.ids)
            self._indexes = array("q", prefix.indexes)
            self._weights = array("q", prefix.weights)
            self._digests = list(prefix.digests)
            self._held_weight = prefix.held_weight
            self._cursor = prefix.cursor
            self._settled = len(prefix.ids)
        for step in steps:
            self.append(step)

    # -- the sequence ------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, index: int) -> Step: ...

    @overload
    def __getitem__(self, index: slice) -> list[Step]: ...

    def __getitem__(self, index: int | slice) -> Step | list[Step]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        entry = self._entries[index]  # IndexError as a list gives it
        if entry is not None:
            return entry
        return self.read_back(index % len(self._entries))

    def __iter__(self) -> Iterator[Step]:
        for i in range(len(self._entries)):
            yield self[i]

    def held(self, position: int) -> Step | None:
        """The step at `position` if it is held, else None (never reads the store)."""
        return self._entries[position]

    @property
    def held_weight(self) -> int:
        """The weight of the steps held now (see `step_weight`)."""
        return self._held_weight

    def held_count(self) -> int:
        return sum(entry is not None for entry in self._entries)

    def position_of(self, step_id: str) -> int | None:
        """The position of the step `step_id` (the newest first: the usual one is last)."""
        ids = self._ids
        for i in range(len(ids) - 1, -1, -1):
            if ids[i] == step_id:
                return i
        return None

    # -- writes ------------------------------------------------------------

    def append(self, step: Step) -> None:
        """Add `step` as the newest (a new id)."""
        self._entries.append(step)
        self._ids.append(step.id)
        self._indexes.append(step.index)
        weight = step_weight(step)
        self._weights.append(weight)
        self._digests.append(None)
        self._held_weight += weight
        self._let_go()

    def put(self, step: Step) -> None:
        """Replace the step with `step`'s id, or add it as the newest."""
        position = self.position_of(step.id)
        if position is None:
            self.append(step)
            return
        held = self._entries[position]
        weight = (
            step_weight(step)
            if held is None
            else rewritten_weight(held, self._weights[position], step)
        )
        self._held_weight += weight - self._weights[position]
        self._entries[position] = step
        self._weights[position] = weight
        self._indexes[position] = step.index
        self._digests[position] = None
        self.replaced.append(position)
        # A page read before this write holds the step as it was: read it again.
        self._pages.pop(step.index - step.index % PAGE, None)
        self._let_go()

    def _let_go(self) -> None:
        """Let the oldest settled steps go while the held ones weigh more than the budget."""
        last = len(self._entries) - MIN_HELD
        while self._held_weight > self._budget and self._cursor < last:
            position = self._cursor
            self._cursor += 1
            entry = self._entries[position]
            if entry is None or entry.status not in FINAL:
                continue  # let go already, or unsettled: held (rare; see the docstring)
            self._entries[position] = None
            self._held_weight -= self._weights[position]
            self._weights[position] = 0
            digest = self._digests[position]
            if isinstance(digest, tuple):  # the digest stays; the step it was made of does not
                self._digests[position] = digest[1]
            elif digest is None and self._make_digest is not None:
                self._digests[position] = self._make_digest(entry)
            self.dropped.append(position)

    # -- the settled prefix ------------------------------------------------

    def settled_prefix(self) -> SettledPrefix:
        """The log's first positions up to its last step settled in a final status before
        any step still open (interrupted steps before that one included), each with its
        digest (made now where it was not made yet): what a later load of the run may start
        from (`SettledPrefix`, decisions 0130, 0133). Needs the log's `digest`."""
        make = self._make_digest
        assert make is not None, "a settled prefix keeps each step's digest"
        entries, digests = self._entries, self._digests
        end = scan = self._settled
        while scan < len(entries):
            entry = entries[scan]
            if entry is not None:
                if entry.status not in FINAL and entry.status != StepStatus.INTERRUPTED:
                    break
                kept = digests[scan]
                if not (isinstance(kept, tuple) and kept[0] is entry):
                    digests[scan] = (entry, make(entry))
                if entry.status != StepStatus.INTERRUPTED:
                    end = scan + 1
            elif digests[scan] is None:  # let go without a digest: only a log without one
                break
            else:
                end = scan + 1  # let go: settled in a final status
            scan += 1
        self._settled = end
        if self.built_from is not None and end == len(self.built_from):
            # Nothing settled since the prefix it started from (a takeover's load right
            # after the attach's look, say): that prefix again, not a copy of it.
            self.kept = self.built_from
            return self.kept
        self.kept = SettledPrefix(
            entries=tuple(entries[:end]),
            ids=tuple(self._ids[:end]),
            indexes=self._indexes[:end],
            weights=self._weights[:end],
            digests=tuple(cast("list[tuple[Step, str] | str]", digests[:end])),
            held_weight=sum(self._weights[:end]),
            cursor=min(self._cursor, end),
            shared={} if self.built_from is None else self.built_from.shared,
        )
        return self.kept

    # -- reading back ------------------------------------------------------

    def read_back(self, position: int) -> Step:
        """The step at `position` as the store holds it (one read per `PAGE` steps).

        Internal: the object may be handed to the next caller too; views copy it.
        """
        step_id = self._ids[position]
        index = self._indexes[position]
        first = index - index % PAGE
        page = self._pages.get(first)
        if page is None or step_id not in page:
            page = {step.id: step for step in self._read(first, PAGE)}
            self._pages[first] = page
            while len(self._pages) > PAGES_KEPT:
                self._pages.popitem(last=False)
        else:
            self._pages.move_to_end(first)
        found = page.get(step_id)
        if found is None:
            raise RunStateError(f"step {step_id} (index {index}) is no longer in the store")
        return found

    def digest(self, position: int, entry: Step | None, make: Callable[[Step], str]) -> str:
        """`make(step)` for the step at `position` as `entry` shows it (None: let go),
        kept with the step so that each version of a step is digested once."""
        kept = self._digests[position]
        if isinstance(kept, str) and entry is None:
            return kept
        if isinstance(kept, tuple) and kept[0] is entry:
            return kept[1]
        if entry is None:
            entry = self.read_back(position)
        digest = make(entry)
        current = self._entries[position]
        if current is entry:
            self._digests[position] = (entry, digest)
        elif current is None:  # let go: it no longer changes
            self._digests[position] = digest
        return digest

    # -- views -------------------------------------------------------------

    def view(self, end: int | None = None) -> StepsView:
        """The first `end` steps (all by default) as they stand now, for consumer code."""
        n = len(self._entries) if end is None else end
        return StepsView(self, tuple(self._entries[:n]))


class StepsLikeATuple(Sequence[Step]):
    """What a sequence of steps shown in place of a tuple of them answers as that tuple
    would: equality with any sequence of equal steps, `+` giving a tuple, a tuple's `repr`
    (every step read: a repr is asked for), and no hash (a view's steps may still grow)."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: tuple[Step, ...]) -> tuple[Step, ...]:
        return tuple(self) + other

    def __radd__(self, other: tuple[Step, ...]) -> tuple[Step, ...]:
        return other + tuple(self)

    def __repr__(self) -> str:
        return repr(tuple(self))


class StepsView(StepsLikeATuple):
    """A snapshot of a `StepLog`'s first steps, for consumer code (a policy, a
    reconciliation): each step an independent copy (`shown_step`), of the held one as it
    was or of the one read back, made when asked for. The held steps are never handed
    out: a Gate's later sessions of the run share them (decision 0130), so what a
    consumer does to what it is shown must not reach them."""

    _copies = True  # a held entry is copied when handed out (`ShownSteps` holds copies)

    def __init__(self, log: StepLog, entries: tuple[Step | None, ...]) -> None:
        self.log = log
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, index: int) -> Step: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Step, ...]: ...

    def __getitem__(self, index: int | slice) -> Step | tuple[Step, ...]:
        # A slice is a tuple, as of the tuple this view replaced (decision 0098).
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        entry = self._entries[index]
        if entry is not None:
            return shown_step(entry) if self._copies else entry
        return shown_step(self.log.read_back(index % len(self._entries)))

    def originals(self) -> StepsView:
        """The same steps, the held ones as the log holds them (not copies): for the
        runtime's own reads, never for consumer code."""
        view = StepsView(self.log, self._entries)
        view._copies = False
        return view

    def __iter__(self) -> Iterator[Step]:
        for i in range(len(self._entries)):
            yield self[i]

    def entry(self, position: int) -> Step | None:
        """The held step at `position` as the view shows it, or None (read back when asked)."""
        return self._entries[position]

    def digest(self, position: int, make: Callable[[Step], str]) -> str:
        """`make` of the step at `position`, kept by the log (see `StepLog.digest`)."""
        return self.log.digest(position, self._entries[position], make)


class ShownSteps(StepsView):
    """What an agent is shown of its run's steps (`StepInput.steps`): the copies made for
    the held steps when the input was made, and copies of the others read back."""

    _copies = False  # its entries are the copies (`GateSession._steps_shown`)
