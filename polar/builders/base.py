"""What every builder receives and returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from polar.models import CompletionRecord, Trace


@dataclass(frozen=True)
class BuildContext:
    session_id: str
    task_id: str
    harness: str
    builder: str
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class BuildOutput:
    traces: list[Trace]
    unusable: list[str] = field(default_factory=list)
    """record ids that could not be used (failed call, no token ids), with the reason."""


def usable(record: CompletionRecord) -> str | None:
    """Why a record cannot become a trace, or None when it can."""
    if record.error is not None:
        return f"{record.record_id}: failed call ({record.error})"
    if not record.has_token_ids or record.prompt_token_ids is None:
        return f"{record.record_id}: upstream returned no token ids"
    if record.response_token_ids is None or record.response_logprobs is None:
        return f"{record.record_id}: no response token ids or logprobs"
    if len(record.response_token_ids) != len(record.response_logprobs):
        return (
            f"{record.record_id}: {len(record.response_token_ids)} response ids but "
            f"{len(record.response_logprobs)} logprobs"
        )
    return None


def response_message(record: CompletionRecord) -> dict[str, Any] | None:
    """The assistant message the upstream answered with."""
    choices = (record.response or {}).get("choices") or []
    return choices[0].get("message") if choices else None
