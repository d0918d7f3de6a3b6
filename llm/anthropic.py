"""The anthropic model source: the official SDK under pydantic-ai's Anthropic model.

The client (key, base URL, timeout, retries off) is built once from settings, apart from
the model adapter, so tests and compatible servers only swap the client. Structured
answers come through one forced tool whose input schema is the role's answer schema; that
works on the Anthropic API and on compatible servers alike (LiteLLM, Ollama). Strict tool
input (constrained decoding) is asked for until the server rejects it once.
"""

from __future__ import annotations

import logging
import threading

import anthropic
from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
from pydantic_ai.providers.anthropic import AnthropicProvider

from loopworks.llm.base import ModelCall
from loopworks.schemas.settings import Settings

logger = logging.getLogger(__name__)

__all__ = ["AnthropicModels", "build_anthropic_client"]

# A connection that cannot be made in this long will not be made by waiting longer.
CONNECT_TIMEOUT_SECONDS = 10.0


def build_anthropic_client(settings: Settings) -> anthropic.AsyncAnthropic:
    """The SDK client for `settings`; its own retries are off so that Temporal retries and
    every attempt is visible in the run's event history."""
    client = anthropic.AsyncAnthropic(
        api_key=settings.anthropic_api_key,
        # None lets the SDK fall back to its own lookup (ANTHROPIC_BASE_URL, a profile).
        base_url=settings.anthropic_base_url,
        max_retries=0,
        timeout=anthropic.Timeout(
            settings.anthropic_timeout_seconds, connect=CONNECT_TIMEOUT_SECONDS
        ),
    )
    blank = not (client.api_key or "").strip() and not (client.auth_token or "").strip()
    if blank and client.credentials is None:
        # Fail at worker start, not at the first model call of the first run: a key left
        # blank (an env file's `ANTHROPIC_API_KEY=`, copied and not filled in) is none.
        raise ValueError(
            "LOOPS_LLM=anthropic needs a key: set ANTHROPIC_API_KEY (any value for a "
            "compatible server that ignores it), or LOOPS_LLM=offline for the offline model"
        )
    return client


class AnthropicModels:
    """A ModelSource over the Messages API: one pydantic-ai `AnthropicModel` per model id,
    all on one client."""

    def __init__(
        self, client: anthropic.AsyncAnthropic, max_tokens: int = 4096, strict: bool = True
    ) -> None:
        self.provider = AnthropicProvider(anthropic_client=client)
        self.max_tokens = max_tokens
        self._strict = strict
        self._models: dict[tuple[str, bool], AnthropicModel] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> AnthropicModels:
        return cls(
            build_anthropic_client(settings),
            max_tokens=settings.anthropic_max_tokens,
            strict=settings.anthropic_strict_output,
        )

    @property
    def strict_output(self) -> bool:
        return self._strict

    def strict_rejected(self) -> None:
        # For the worker's lifetime: a server that rejected the option once will again.
        self._strict = False

    def model(self, call: ModelCall) -> AnthropicModel:
        key = (call.model, self._strict)
        with self._lock:
            if key not in self._models:
                self._models[key] = AnthropicModel(
                    call.model,
                    provider=self.provider,
                    # Whether `strict` goes out on tools is ours to say, not the model
                    # name's: compatible servers serve models pydantic-ai does not know.
                    profile={"supports_json_schema_output": self._strict},
                    settings=AnthropicModelSettings(
                        # Above about 21k tokens the SDK refuses a non-streamed request,
                        # and pydantic-ai would then stream; settings keep it far below.
                        max_tokens=self.max_tokens,
                        # The agent definition is the whole system prompt: no framework
                        # text about `<system>` tags (the loop sends none mid-conversation).
                        framing_announcement="never",
                        # The agent's prompt and tools are the same on every call of a
                        # role, and each turn of an agent repeats the turns before it.
                        anthropic_cache_instructions=True,
                        anthropic_cache_tool_definitions=True,
                        anthropic_cache_messages=True,
                    ),
                )
            return self._models[key]
