"""A hand-written loop over a Gate that dies inside `execute`: run as a child process.

    python tests/gate_child.py DB

The loop proposes `charge` (remote_mutation, allowed by the crash tests' policy)
and executes it; the tool SIGKILLs the process after writing its journal line,
so the run is left RUNNING with its step `executing` and the lease held.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from pathlib import Path

import agentrt
import crashing_child as child
from agentrt import Decision


async def loop(db: Path) -> None:
    store = agentrt.open_store(db)
    gate = agentrt.Gate(
        store=store,
        policy=child.policy(),
        tools=child.tools(db, die="charge"),
        lease_owner="gate-child",
        lease_ttl=timedelta(seconds=30),
    )
    session = await gate.begin("charge the card")
    step = await session.step()
    assert step is not None
    verdict = await step.propose(Decision.tool_call("charge", {"amount": 5}))
    assert verdict.outcome == agentrt.VerdictOutcome.ALLOWED
    await step.execute()  # dies inside the tool
    raise AssertionError("the child should have died")


if __name__ == "__main__":
    asyncio.run(loop(Path(sys.argv[1])))
