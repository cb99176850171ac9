"""Provider API transformers: every API the gateway speaks, over Chat Completions.

Pure functions behind one interface (`ProviderAPI`): detect a call's API,
normalise its request to Chat Completions (with the noise that defeats
prefix merging removed), render the upstream's answer back in the caller's
shape, whole or as the synthetic stream its SDK expects, and render errors.
"""

from polar.providers.base import (
    CONTEXT_CODE,
    APIError,
    CallContext,
    ContextOverflow,
    ProviderAPI,
    approximate_tokens,
)
from polar.providers.detection import PROVIDERS, UnknownProvider, detect, get_provider

__all__ = [
    "CONTEXT_CODE",
    "PROVIDERS",
    "APIError",
    "CallContext",
    "ContextOverflow",
    "ProviderAPI",
    "UnknownProvider",
    "approximate_tokens",
    "detect",
    "get_provider",
]
