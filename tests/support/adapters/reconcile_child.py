"""A framework agent whose `charge` tool has its own reconciliation, for the SIGKILL tests.

`python reconcile_child.py WORKDIR FRAMEWORK` (FRAMEWORK: `pydantic_ai`,
`openai_agents` or `langgraph`) runs one framework run behind that
framework's adapter (Pydantic AI and the Agents SDK: of agentrt run
`config.json`'s `run_id`, the SDK's first process asking, approving and
saving `WORKDIR/state.json` before it resumes the charge, a later one resuming
that state; LangGraph: thread "t", whose first turn's run is
`run_id_for("t", "pay")`, a process after the first going on with
`invoke(None, config)` from its SQLite checkpoint), with the scripted
model of that framework's other tests calling `charge(amount=5)` once (call
id `c1`). The charge appends the operation id it is given
(`agentrt.adapters.current_operation_id()`) to `WORKDIR/charges.log`, the
ledger the reconciliation reads; the first charge then writes
`WORKDIR/charged` and hangs, to be SIGKILLed there. The reconciliation
answers `found` when the ledger holds the call's operation id and `not_found`
otherwise. The last line of output is JSON: the run's output and the
operation ids the reconciliation was asked about. The store is `config.json`'s
`database` (a SQLite path or a PostgreSQL URL), `WORKDIR/runs.db` without one.

`Charges`, `reconciled_events` and `PAY` serve the in-process tests too
(tests/test_adapter_*_reconcile.py).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import agentrt
from agentrt.adapters import Classification, current_operation_id

PAY = agentrt.SideEffectPolicy(
    {agentrt.SideEffect.REMOTE_MUTATION: agentrt.PolicyDecision.allow()}, policy_id="pay/1"
)
"""Charges are allowed: what waits for a person here is only the contract's pause."""


class AskFirst:
    """A charge waits for a person once; a step a person approved goes on without asking.

    (The Agents SDK's saved `RunState` holds a call only once it was an
    interruption: its tests approve the charge first.)
    """

    policy_id = "ask-first/1"

    def evaluate(self, request: agentrt.ToolRequest, view: agentrt.RunView) -> Any:
        if any(a.step_id == request.step_id and a.status == "approved" for a in view.approvals):
            return agentrt.PolicyDecision.allow()
        return agentrt.need_approval("remote_mutation", "a charge waits for a person first")


class Charges:
    """For the in-process tests: each charge's operation id, and what the reconciliation got.

    `answer` is what the reconciliation answers (raised, when an exception);
    a tool using it hangs on its first charge while `hang_first` is set.
    """

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.seen: list[str] = []
        self.asked: list[agentrt.ToolCall] = []
        self.hang_first = True

    def reconcile(self, call: agentrt.ToolCall) -> agentrt.Reconciled:
        self.asked.append(call)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer  # type: ignore[no-any-return]


def reconciled_events(store: agentrt.Store, run_id: str) -> list[dict[str, Any]]:
    """The payloads of the run's `step.reconciled` events, in order."""
    return [e.payload for e in store.list_events(run_id) if e.type == "step.reconciled"]


class Ledger:
    """The child's charge tool and its reconciliation, over `WORKDIR/charges.log`."""

    def __init__(self, workdir: Path, terminal: bool = False) -> None:
        self.workdir = workdir
        self.asked: list[str] = []
        self.terminal = terminal  # `config.json`'s "terminal": the charge ends the run

    def charge(self, amount: int) -> dict[str, Any]:
        """Charge the card; the first charge hangs after it acted, to be killed there."""
        op = current_operation_id()
        with (self.workdir / "charges.log").open("a") as f:
            f.write(op + "\n")
        if not (self.workdir / "charged").exists():
            (self.workdir / "charged").write_text("1")
            while True:
                time.sleep(1)
        return {"charged": amount, "op": op}

    def reconcile(self, call: agentrt.ToolCall) -> agentrt.Reconciled:
        self.asked.append(call.operation_id)
        path = self.workdir / "charges.log"
        ops = path.read_text().splitlines() if path.exists() else []
        if call.operation_id in ops:
            amount = call.args["amount"] if isinstance(call.args, dict) else None
            return agentrt.Reconciled.found({"charged": amount, "op": call.operation_id})
        return agentrt.Reconciled.not_found("no charge with this operation id")

    def classes(self) -> dict[str, Classification]:
        return {
            "charge": Classification(
                "remote_mutation", timeout=30, terminal=self.terminal, reconcile=self.reconcile
            )
        }


def pydantic_ai(store: agentrt.Store, ledger: Ledger, run_id: str) -> Any:
    from pydantic_ai import Agent, DeferredToolRequests

    from agentrt.adapters.pydantic_ai import AgentrtGate
    from support.adapters.pydantic_ai_child import model

    gate = AgentrtGate(store=store, policy=PAY, classifications=ledger.classes())
    script: list[Any] = [[("charge", {"amount": 5}, "c1")], "done"]
    agent: Any = Agent(model(script), output_type=[str, DeferredToolRequests], capabilities=[gate])
    agent.tool_plain(ledger.charge)
    return agent.run_sync("pay", metadata=gate.run_metadata(run_id)).output


def langgraph(store: agentrt.Store, ledger: Ledger, run_id: str) -> Any:
    """The first process invokes thread "t"; a later one goes on with `invoke(None, config)`."""
    import sqlite3

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    from agentrt.adapters.langgraph import gated_tool_node

    calls = [{"name": "charge", "args": {"amount": 5}, "id": "c1"}]
    script = [AIMessage("", tool_calls=calls), AIMessage("done")]

    def agent(state: MessagesState) -> dict[str, Any]:
        answered = 1 if isinstance(state["messages"][-1], ToolMessage) else 0
        return {"messages": [GenericFakeChatModel(messages=iter([script[answered]])).invoke("")]}

    node = gated_tool_node(
        [tool(ledger.charge)], store=store, policy=PAY, classifications=ledger.classes()
    )
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    conn = sqlite3.connect(ledger.workdir / "checkpoints.db", check_same_thread=False)
    graph = builder.compile(checkpointer=SqliteSaver(conn))
    config: Any = {"configurable": {"thread_id": "t"}}
    first = (
        None
        if (ledger.workdir / "charged").exists()
        else {"messages": [HumanMessage("pay", id="pay")]}
    )
    out = graph.invoke(first, config)
    return [m.content for m in out["messages"] if isinstance(m, ToolMessage | AIMessage)]


def openai_agents(store: agentrt.Store, ledger: Ledger, run_id: str) -> Any:
    """The first process asks, approves (agentrt and the saved state) and resumes the charge;
    a later one resumes the saved `RunState` (`load_state` takes the run over)."""
    from agents import Agent, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    from agentrt.adapters.openai_agents import gate_agent

    set_tracing_disabled(True)  # nothing leaves the machine
    saved = ledger.workdir / "state.json"
    script: list[Any] = [[assistant_message("paid")]]
    if not saved.exists():
        script.insert(0, [function_call("charge", {"amount": 5}, call_id="c1")])
    agent = Agent(name="payer", model=ScriptedModel(script), tools=[function_tool(ledger.charge)])
    gated = gate_agent(agent, store=store, policy=AskFirst(), classifications=ledger.classes())

    async def go() -> Any:
        if not saved.exists():
            run = gated.new_run(run_id)
            state = (await run.run_agent("pay")).to_state()
            await run.approve(state, state.get_interruptions()[0], by="alice")
            saved.write_text(state.to_string())
            return (await run.run_agent(state)).final_output  # killed inside the charge
        again = gated.resume(run_id)
        return (await again.run_agent(await again.load_state(saved.read_text()))).final_output

    return asyncio.run(go())


def main(argv: list[str]) -> int:
    workdir, framework = Path(argv[0]), argv[1]
    config = json.loads((workdir / "config.json").read_text())
    run_id = config["run_id"]
    ledger = Ledger(workdir, terminal=bool(config.get("terminal", False)))
    with agentrt.open_store(config.get("database") or str(workdir / "runs.db")) as store:
        run = {"pydantic_ai": pydantic_ai, "langgraph": langgraph, "openai_agents": openai_agents}
        output = run[framework](store, ledger, run_id)
    print(json.dumps({"output": output, "asked": ledger.asked}))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main(sys.argv[1:]))
