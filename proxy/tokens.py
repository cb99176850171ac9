"""Token counting for the side calls harnesses make (`/v1/messages/count_tokens`, ...).

A `TokenCounter` counts the prompt tokens of a normalised Chat request. With
the model's tokenizer (`settings.model_dir`) the count is exact: the prompt
is rendered as vLLM renders it (`polar.tokenization.render_prompt_ids`).
Without one the gateway answers an approximation and says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from polar.providers import approximate_tokens

log = logging.getLogger("polar.gateway")

TokenCounter = Callable[[dict[str, Any]], int]


def chat_template_counter(model_dir: Path) -> TokenCounter:
    """A counter rendering requests with the chat template of the model in `model_dir`."""

    def count(chat: dict[str, Any]) -> int:
        from polar.tokenization import load_tokenizer, render_prompt_ids

        return len(render_prompt_ids(load_tokenizer(str(model_dir)), chat))

    return count


def count_tokens(chat: dict[str, Any], counter: TokenCounter | None) -> tuple[int, bool]:
    """(count, approximate): exact with a counter, else approximate (also if the counter fails)."""
    if counter is not None:
        try:
            return counter(chat), False
        except Exception as exc:
            log.warning("token counter failed, answering an approximation: %s", exc)
    return approximate_tokens(chat), True
