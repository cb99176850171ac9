"""The provider APIs by name, and detection of a call's API from its path and headers."""

from __future__ import annotations

from collections.abc import Mapping

from polar.providers.anthropic_messages import AnthropicMessages
from polar.providers.base import ProviderAPI
from polar.providers.google_generate import GoogleGenerate
from polar.providers.openai_chat import OpenAIChat
from polar.providers.openai_responses import OpenAIResponses
from polar.registry import Registry, UnknownKind


class UnknownProvider(UnknownKind):
    """No provider API has this name."""


OPENAI_CHAT = OpenAIChat()
PROVIDERS: Registry[ProviderAPI] = Registry(
    "provider API",
    {p.name: p for p in (OPENAI_CHAT, OpenAIResponses(), AnthropicMessages(), GoogleGenerate())},
    UnknownProvider,
)
"""Every provider API the gateway speaks, by name (polar/registry.py)."""
# most specific first: a model listing is Anthropic's or Google's only by its headers
DETECTION_ORDER = ("google_generate", "anthropic_messages", "openai_responses", "openai_chat")


def get_provider(name: str) -> ProviderAPI:
    """The provider API registered as `name` (UnknownProvider, naming the known, otherwise)."""
    return PROVIDERS.get(name)


def detect(path: str, headers: Mapping[str, str]) -> ProviderAPI:
    """The API a call to `path` speaks; OpenAI Chat Completions when nothing else matches."""
    for name in DETECTION_ORDER:
        if PROVIDERS[name].detect(path, headers):
            return PROVIDERS[name]
    lowered = {k.lower() for k in headers}
    if "anthropic-version" in lowered:
        return PROVIDERS["anthropic_messages"]
    if "x-goog-api-key" in lowered:
        return PROVIDERS["google_generate"]
    return OPENAI_CHAT
