"""The Pydantic AI capability that puts every tool call of an agent through the Gate.

`AgentrtGate` is a Pydantic AI capability (`Agent(..., capabilities=[gate])`):
for each framework run it wraps the agent's assembled toolset (its
`@agent.tool` functions and every toolset passed to it; output tools are the
framework's own) in `GatedToolset`, a `WrapperToolset` whose `call_tool` goes
through one agentrt `GateSession`, and it ties that session's life to the
framework run (`wrap_run`, which Pydantic AI runs around every entry point:
`run`, `run_stream`, `iter`, `run_stream_events`, all built on `iter`). Its
`before_node_run` refuses a `ToolApproved(override_args=...)` before any call
runs and records a `ToolDenied` of the waiting call (which Pydantic AI
answers without calling the toolset) as agentrt's rejection;
`before_model_request` keeps the model from being asked while a call of the
history waits for a person; `after_node_run` ends the agentrt run at the node
that ends the framework run (decision 0059). The user keeps their Agent,
model and tools.

Invariants:

- No framework tool runs unclassified: the first listing of the tools, before
  the model is first asked, classifies every offered tool or raises
  `UnclassifiedToolError`, and no agentrt run is created.
- A framework run without `metadata={"agentrt_run_id": ...}` is refused before
  anything is recorded: the id is what a resume from another process names.
- The gated toolset runs nothing outside a framework run it belongs to
  (`for_run` made it): used as a plain toolset it refuses (`ConfigError`).
- No output function runs: Pydantic AI would call it outside the toolset,
  ungated. An agent built with one is refused at `for_run`, before the model
  is asked or a run recorded; one given to a single run, before it runs.
- The output ends the agentrt run when it is produced, on every entry point,
  with or without a context manager: not when Pydantic AI closes the run,
  which without `with` is garbage collection.
- No call waits for a person where nothing can carry the decision out: with
  `wait_for_person` the call waits inside the run; otherwise a framework run
  that cannot end with `DeferredToolRequests` (Pydantic AI's `UserError`)
  cancels the waiting agentrt run at once, with a note (decision 0058).
- No native tool reaches the model: Pydantic AI's native tools (web search,
  code execution, a provider-side MCP server, ...) run at the model's
  provider, never through the toolset. A run offering one, from the agent's
  capabilities, the run's or `agent.override(native_tools=...)`, is refused
  in `wrap_run` before its handler runs: before the model is asked or a run
  recorded. Tool search is let through: it only finds the agent's own
  deferred tools, whose calls then go through the Gate.
- No external tool is offered: Pydantic AI hands an external tool's call
  (`ExternalToolset`, a tool of kind `external`) back to the program in
  `DeferredToolRequests.calls`, never through the toolset. A listing that
  holds one is refused (`ConfigError`); at the first listing, before the
  model is asked or a run recorded.
"""

from __future__ import annotations

import functools
import inspect
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from pydantic_ai import DeferredToolRequests, ModelRequestContext, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.abstract import AgentNode, WrapRunHandler
from pydantic_ai.exceptions import UserError
from pydantic_ai.native_tools import AbstractNativeTool
from pydantic_ai.output import OutputContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset
from pydantic_graph import End

import agentrt
from agentrt.adapters import Classification
from agentrt.adapters._wait import POLL_INTERVAL, poll_interval

from ._run import (
    RUN_ID_KEY,
    FrameworkRun,
    Settings,
    goal_of,
    refuse_override_args,
    tools_seen,
)

_ID = re.compile(r"[0-9a-f]{32}")
_DEFERRAL_REFUSED = "`DeferredToolRequests` is not among output types"


@dataclass
class GatedToolset(WrapperToolset[Any]):
    """The agent's toolset with every call put through the framework run's Gate session."""

    run: FrameworkRun | None = None

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        run = _framework_run(self.run)
        tools = await self.wrapped.get_tools(ctx)
        external = [name for name, tool in tools.items() if tool.tool_def.kind == "external"]
        if external:
            raise agentrt.ConfigError(_EXTERNAL_TOOLS.format(", ".join(sorted(external))))
        run.wrapped = self.wrapped
        run.originals = tools
        if run.gate is None:
            await run.start(tools)
        return tools_seen(tools)

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        run = _framework_run(self.run)
        return await run.call(name, tool_args, ctx, run.originals.get(name, tool))


_EXTERNAL_TOOLS = (
    "external tools ({}) are handed back to the program to run, outside agentrt's Gate, with "
    "no record, policy or approval behind their calls, so AgentrtGate refuses them: give the "
    "agent a function tool that does the same job"
)

_OUTPUT_FUNCTIONS = (
    "output functions ({}) run outside agentrt's Gate, ungated and unrecorded, so AgentrtGate "
    "refuses them: give output_type plain types and make the function a tool of the agent"
)


def _output_functions(spec: Any) -> list[str]:
    """The names of the functions in an `output_type` spec (Pydantic AI's output functions)."""
    if spec is None or isinstance(spec, type | str):
        return []
    if inspect.isroutine(spec) or isinstance(spec, functools.partial):
        return [getattr(spec, "__name__", repr(spec))]
    if isinstance(spec, Sequence):
        return [name for item in spec for name in _output_functions(item)]
    for inner in ("output", "outputs", "output_function"):
        if hasattr(spec, inner) and type(spec).__module__.startswith("pydantic_ai"):
            return _output_functions(getattr(spec, inner))
    return []


_NO_DEFERRAL = (
    "agentrt cancelled run {run_id}: a call waited for a person, but this framework run "
    "cannot stop for one (its output types do not include DeferredToolRequests), so nothing "
    "could carry out the decision; the call did not run. Build the agent with "
    "output_type=[str, DeferredToolRequests] and continue with approved(...), or give "
    "AgentrtGate wait_for_person=True to wait for the person inside the run"
)


_NATIVE_TOOLS = (
    "native tools ({}) run at the model's provider, outside agentrt's Gate, with no record, "
    "policy or approval behind their calls, so AgentrtGate refuses them: give the agent a "
    "function tool that does the same job"
)

# Pydantic AI's own tool search (its `ToolSearch` capability, on every agent)
# only finds the agent's deferred tools for the model; their calls come back
# as function calls and go through the Gate.
_TOOL_SEARCH = "tool_search"
_OPENAI_SETTING = "openai_native_tools"


def _native_tools(ctx: RunContext[Any]) -> list[str]:
    """The native tools a framework run would offer its model, named; tool search left out.

    The run's composed capabilities (the agent's and the run's) give their
    native tools; `agent.override(native_tools=...)` lives in the agent's
    context variable (a Pydantic AI internal, read if present). A native tool
    function decides per request, so it is named and refused too. The OpenAI
    models also send the raw tools of the `openai_native_tools` setting, here
    from the agent's and the model's settings (a run's own settings are seen
    only at its first request: `_requested_native_tools`).
    """
    found: list[Any] = []
    root = ctx.root_capability
    if root is not None:
        found.extend(root.get_native_tools())
    override = getattr(getattr(ctx.agent, "_override_native_tools", None), "get", None)
    chosen = override() if callable(override) else None
    if chosen is not None:
        found.extend(getattr(chosen, "value", None) or ())
    settings = [getattr(ctx.agent, "model_settings", None), getattr(ctx.model, "settings", None)]
    return _named(found, settings)


def _requested_native_tools(request: ModelRequestContext) -> list[str]:
    """The native tools of one model request, as the hooks before ours left it; no tool search."""
    settings = [request.model_settings, getattr(request.model, "settings", None)]
    return _named(list(request.model_request_parameters.native_tools), settings)


def _named(found: list[Any], settings: list[Any]) -> list[str]:
    for each in settings:
        raw = each.get(_OPENAI_SETTING) if isinstance(each, Mapping) else None
        for tool in raw or ():
            kind = tool.get("type", "?") if isinstance(tool, Mapping) else type(tool).__name__
            found.append(f"{kind} in {_OPENAI_SETTING}")
    names: list[str] = []
    for tool in found:
        if isinstance(tool, str):
            name = tool
        elif isinstance(tool, AbstractNativeTool):
            if tool.kind == _TOOL_SEARCH:
                continue
            name = tool.unique_id
        else:
            name = f"a native tool function {getattr(tool, '__name__', repr(tool))}"
        if name not in names:
            names.append(name)
    return names


async def _cancel_if_undeliverable(run: FrameworkRun, error: BaseException) -> None:
    """Pydantic AI's refusal to end a run with `DeferredToolRequests`: the waiting run ends.

    Seen by the node hook when the node that ran the calls raised it, else
    (a streamed node, whose errors skip the node hooks) when the framework
    run ends; the run is cancelled once, and the error says so once.
    """
    if (
        isinstance(error, UserError)
        and _DEFERRAL_REFUSED in str(error)
        and await run.cancel_undeliverable()
    ):
        error.add_note(_NO_DEFERRAL.format(run_id=run.run_id))


def _framework_run(run: FrameworkRun | None) -> FrameworkRun:
    """The framework run this toolset belongs to; none: it was used outside a run of the agent."""
    if run is None:
        raise agentrt.ConfigError(
            "AgentrtGate's toolset was used outside a run of the agent it was given to as a "
            "capability (Agent(..., capabilities=[gate])); no call runs ungated"
        )
    return run


@dataclass
class AgentrtGate(AbstractCapability[Any]):
    """Every tool call of the agent through agentrt's Gate: record, schema, policy, approval, lease.

    `classifications` names every tool the agent offers with its
    `Classification` (side effect, timeout). Each framework run names its
    agentrt run: `agent.run(..., metadata=gate.run_metadata(run_id))`; pass
    the same metadata, with the message history and any `DeferredToolResults`,
    to continue it (from any process). `limits`, `now`, `new_id`, `lease_ttl`
    are as for `agentrt.Gate`. With `wait_for_person=True` a call the policy
    sends to a person waits inside the framework run, the store read every
    `poll_interval` seconds, until the person decides from any process
    (decision 0058); the agent then needs no `DeferredToolRequests`.
    """

    store: agentrt.Store
    policy: agentrt.Policy
    classifications: Mapping[str, Classification]
    limits: agentrt.Limits | None = None
    now: Any = None
    new_id: Any = None
    lease_ttl: timedelta = timedelta(seconds=30)
    wait_for_person: bool = False
    poll_interval: float = POLL_INTERVAL
    _run: FrameworkRun | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.store, agentrt.Store):
            raise agentrt.ConfigError("AgentrtGate needs a store (agentrt.open_store(path))")
        if not isinstance(self.classifications, Mapping):
            raise agentrt.ConfigError(
                "classifications must be a mapping of tool name to Classification"
            )
        if not isinstance(self.wait_for_person, bool):
            raise agentrt.ConfigError("wait_for_person must be True or False")
        self.poll_interval = poll_interval(self.poll_interval)

    def run_metadata(self, run_id: str | None = None) -> dict[str, str]:
        """The run metadata naming an agentrt run: a new id, or `run_id` to continue one."""
        rid = run_id if run_id is not None else uuid.uuid4().hex
        if not isinstance(rid, str) or not _ID.fullmatch(rid):
            raise agentrt.ConfigError(f"run id {rid!r} is not 32 lowercase hex characters")
        return {RUN_ID_KEY: rid}

    async def for_run(self, ctx: RunContext[Any]) -> AgentrtGate:
        meta = ctx.metadata if isinstance(ctx.metadata, Mapping) else {}
        run_id = meta.get(RUN_ID_KEY)
        if not isinstance(run_id, str) or not _ID.fullmatch(run_id):
            raise agentrt.ConfigError(
                "a run behind AgentrtGate names its agentrt run: pass "
                "metadata=gate.run_metadata() to a new run, and the same metadata to continue it"
            )
        agent = ctx.agent
        functions = _output_functions(agent.output_type if agent is not None else None)
        if functions:
            raise agentrt.ConfigError(_OUTPUT_FUNCTIONS.format(", ".join(functions)))
        settings = Settings(
            store=self.store,
            policy=self.policy,
            classifications=self.classifications,
            limits=self.limits,
            now=self.now,
            new_id=self.new_id,
            lease_ttl=self.lease_ttl,
            wait_for_person=self.wait_for_person,
            poll_interval=self.poll_interval,
        )
        run = FrameworkRun(
            settings=settings,
            run_id=run_id,
            goal=goal_of(ctx.prompt),
            continuing=ctx.prompt is None,
        )
        return replace(self, _run=run)

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        return GatedToolset(wrapped=toolset, run=self._run)

    async def before_node_run(
        self, ctx: RunContext[Any], *, node: AgentNode[Any]
    ) -> AgentNode[Any]:
        # A resumed run's tool calls, with the `DeferredToolResults` given for
        # them: an approval with other arguments is refused before any call
        # runs or any return is written; a call denied the framework's way is
        # answered by Pydantic AI itself, so the calls held behind it learn of
        # the denial here.
        run = self._run
        results = getattr(node, "tool_call_results", None)
        if run is not None and isinstance(results, Mapping):
            refuse_override_args(results)
            run.settle_denied(results, ctx.messages)
        return node

    async def after_node_run(
        self, ctx: RunContext[Any], *, node: AgentNode[Any], result: Any
    ) -> Any:
        # The node that ends the framework run carries its output: the agentrt
        # run ends here, when the output is produced (the stream read to its
        # end, the last node iterated), not when the framework closes the run
        # (a `run_stream_sync` result used without `with` closes only when it
        # is garbage-collected).
        run = self._run
        if run is not None and isinstance(result, End):
            output = getattr(result.data, "output", None)
            await run.finish(output, isinstance(output, DeferredToolRequests))
            await run.close()
        return result

    async def on_node_run_error(
        self, ctx: RunContext[Any], *, node: AgentNode[Any], error: Exception
    ) -> Any:
        # Pydantic AI refuses to end a run with DeferredToolRequests its output
        # types do not allow (raised by the node that ran the calls, whatever
        # the entry point): the call waiting for a person could then never be
        # carried out, so the agentrt run is cancelled now, saying why, instead
        # of being left waiting for ever.
        if self._run is not None:
            await _cancel_if_undeliverable(self._run, error)
        raise error

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        # The model is never asked while a call of the run waits for a person.
        if self._run is not None:
            self._run.refuse_model_while_waiting([*ctx.messages, *request_context.messages])
            # A native tool seen only now (a run's own `model_settings=`, or
            # one another capability's hook added before this one) is
            # refused before the model is asked; the agentrt run fails.
            native = _requested_native_tools(request_context)
            if native:
                raise agentrt.ConfigError(_NATIVE_TOOLS.format(", ".join(native)))
        return request_context

    async def before_output_process(
        self, ctx: RunContext[Any], *, output_context: OutputContext, output: Any
    ) -> Any:
        # An output function (one given to this run's `output_type=` alone
        # escapes the check at start-up) would run outside the Gate: refused
        # before it runs.
        if output_context.has_function:
            name = output_context.function_name or "an output function"
            raise agentrt.ConfigError(_OUTPUT_FUNCTIONS.format(name))
        return output

    async def wrap_run(
        self, ctx: RunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        run = self._run
        if run is None:
            return await handler()
        native = _native_tools(ctx)
        if native:
            raise agentrt.ConfigError(_NATIVE_TOOLS.format(", ".join(native)))
        try:
            try:
                result = await handler()
            except Exception as exc:
                await run.failed(exc)
                await _cancel_if_undeliverable(run, exc)
                raise
            output = result.output
            deferred = isinstance(output, DeferredToolRequests)
            await run.finish(output, deferred)  # once: after_node_run may have ended it
            return result
        finally:
            await run.close()
