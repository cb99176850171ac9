"""Reusable test helpers: a scripted vLLM-shaped backend and a threaded uvicorn runner.

Import as `from tests.support import ...`.
"""

from .scripted_backend import (
    END_OF_TURN,
    ScriptedBackend,
    ScriptedReply,
    error,
    logprob_of,
    prompt_ids,
    scripted_backend,
    serve_app,
    text,
    tool_call,
)

__all__ = [
    "END_OF_TURN",
    "ScriptedBackend",
    "ScriptedReply",
    "error",
    "logprob_of",
    "prompt_ids",
    "scripted_backend",
    "serve_app",
    "text",
    "tool_call",
]
