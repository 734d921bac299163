"""Provider adapters: each implements `agentrt.Model` for one kind of model server.

- `agentrt.providers.openai_compat.OpenAICompatModel`: OpenAI-compatible chat
  completions over `httpx` (OpenAI and most local servers).
- `agentrt.providers.ollama.OllamaModel`: Ollama's native chat over `httpx`.
- `agentrt.providers.anthropic.AnthropicModel`: Anthropic's Messages API through
  the official SDK (the `anthropic` extra).

This package imports none of them, and the core never imports this package, so
`import agentrt` works without any provider's dependencies; import the adapter
module you use. The transport rules they share are in `_http`.
"""
