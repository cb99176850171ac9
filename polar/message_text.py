"""A chat message's content as plain text, whatever shape its provider gave it."""

from __future__ import annotations

import json
from typing import Any


def content_text(content: Any) -> str:
    """A message content as text: a string as it is; a list of parts as their texts, a line
    each (a part with no text as `[its type]`); anything else as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                text = part.get("text") or part.get("content")
                parts.append(text if isinstance(text, str) else f"[{part.get('type', 'part')}]")
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return json.dumps(content, default=str)
