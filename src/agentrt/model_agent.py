"""`ModelAgent`: the agent made of parts, for a consumer with a model.

It owns nothing but the composition: render the run (`render.messages`), send
the request through the runtime's accounting caller (`StepInput.model`), and
turn the reply into a decision (`render.decide`). Everything else (recording,
limits, retries, validation, policy, approval) is the runtime's, so a consumer
with a model needs only tools and a policy:

    driver = agentrt.Driver(store=store, agent=ModelAgent(), policy=policy,
                            tools=tools, model=model)
"""

from __future__ import annotations

from ._errors import ModelUnavailableError
from ._records import Decision, StepInput
from .render import RenderOptions, decide, messages

__all__ = ["ModelAgent"]


class ModelAgent:
    """Decides each step by asking the configured model once."""

    def __init__(self, options: RenderOptions | None = None) -> None:
        self.options = options or RenderOptions()

    def __repr__(self) -> str:
        return f"ModelAgent({self.options!r})"

    async def decide(self, input: StepInput) -> Decision:
        model = input.model
        if model is None:
            # The driver ends the run `model_unavailable` with this message.
            raise ModelUnavailableError("no model configured")
        request = messages(input, self.options)
        response = await model.generate(request)
        return decide(response, max_reason=self.options.max_reason)
