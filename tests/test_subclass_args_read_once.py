"""A decision's args are read by the base types, once (decision 0138).

Found by an attack, on the old code: a decision's args read again for encoding can hang `propose`:

`record` checks the args (`check_json`: `items()` read) and `to_text` checks them again
and then writes them with `_write`, which reads `items()` a third time and trusts what it
gets: an item that is neither a dict nor a scalar is iterated as a list. A dict
subclass whose third `items()` hands back an endless iterable keeps `propose` (on the
consumer's event loop) writing forever: the module promises that a dict subclass that
misbehaves never stops `record`, yet here it never returns.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import agentrt
from agentrt import Decision, PolicyDecision, SideEffect
from conftest import RecordingTool
from support.gates import make_gate, open_step
from support.policies import FixedPolicy


class _Endless:
    def __bool__(self) -> bool:
        return True

    def __iter__(self) -> Iterator[int]:
        while True:
            time.sleep(0.001)  # slowly, so the test does not exhaust memory
            yield 1


class _Turning(dict):  # type: ignore[type-arg]
    reads = 0

    def items(self) -> Any:
        type(self).reads += 1
        return {"n": 1 if type(self).reads <= 2 else _Endless()}.items()


class _Alarm(Exception):
    pass


def test_propose_returns_whatever_a_dict_subclass_does_when_read(
    any_store: agentrt.Store,
) -> None:
    class Turning(_Turning):
        reads = 0

    tool = RecordingTool("t", SideEffect.READ_ONLY, schema={"type": "object"})
    gate = make_gate(any_store, tool, policy=FixedPolicy(PolicyDecision.allow()))
    session, step = open_step(gate, "g")

    def ring(*_: object) -> None:
        raise _Alarm("propose did not return within 5 seconds")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(5)
    started = time.monotonic()
    try:
        verdict = step.propose_sync(Decision.tool_call("t", Turning(n=1)))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    elapsed = time.monotonic() - started
    session.close_sync()
    # `record` swallows the alarm's exception, so a hang shows as a late verdict.
    assert elapsed < 4, f"propose took {elapsed:.1f}s (stopped by the alarm): {verdict}"
