"""Attack: credentials in a configured URL are echoed by the error that refuses it.

`check_endpoint` refuses a base URL with a user or password ("credentials go in
`api_key`, which is redacted") without quoting it; but the other refusals quote the
URL whole, and `OllamaModel` parses `OLLAMA_HOST` before that check, so the usual way
of writing an Ollama behind a basic-auth proxy is refused with the password in the
message (and from there in logs and tracebacks).
"""

from __future__ import annotations

import pytest

from agentrt._errors import ConfigError
from agentrt.providers.ollama import OllamaModel

PASSWORD = "hunter2-s3cret-pw"


@pytest.mark.parametrize(
    "host",
    [
        f"https://admin:{PASSWORD}@ollama.example.com",
        f"http://admin:{PASSWORD}@127.0.0.1:11434",
    ],
)
def test_ollama_host_with_credentials_is_refused_without_echoing_them(
    host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user sets OLLAMA_HOST to their proxied Ollama with user:password in it; today
    the ConfigError quotes the whole value, password included (and for a port, complains
    of a port '11434:80'). It should say that credentials belong in api_key, without
    repeating them."""
    monkeypatch.setenv("OLLAMA_HOST", host)
    with pytest.raises(ConfigError) as caught:
        OllamaModel("llama3.2")
    message = str(caught.value)
    assert PASSWORD not in message
    assert "credentials" in message
