"""The compare page's data: sessions of one task (one group) side by side.

Per session: its row (status, outcome, reward, advantage), its lengths (calls, the final
context's tokens, sampled and trained tokens, the patch's files and lines) and its patch;
and where its conversation leaves the first session's: the first call whose request (the
conversation sent: messages, input or contents, as normalised) or response (the answer's
text and tool calls) differs, with both sides of that call.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from app.console.calls import answer_of, last_message, sent_last
from app.console.session_objects import SessionObjects
from app.console.views import SessionRow
from polar.contracts import Stage

MAX_COMPARED = 8
"""The most sessions one compare page shows."""
CACHE_SIZE = 64
"""Finished sessions whose conversations the compare page keeps."""
CONVERSATION_KEYS = ("messages", "input", "contents", "system", "tools")
"""The request fields that are the conversation (what a harness sent, not sampling knobs)."""


class CompareError(ValueError):
    """A selection the compare page refuses (shown to the user)."""


@dataclass(frozen=True)
class CallSide:
    """One session's side of a call: the request's newest message and the answer."""

    request: str
    response: str


@dataclass
class Divergence:
    """Where a session's conversation leaves the reference's (None `call`: it never does)."""

    call: int | None
    part: str
    """`request`, `response`, `length` (one has more calls) or `` (the same)."""
    mine: CallSide | None = None
    theirs: CallSide | None = None


@dataclass
class Compared:
    """One session on the compare page."""

    row: SessionRow
    calls: int = 0
    context_tokens: int = 0
    sampled_tokens: int = 0
    patches: dict[str, str] = field(default_factory=dict)
    files_changed: int = 0
    lines_added: int = 0
    lines_removed: int = 0
    divergence: Divergence | None = None
    """None for the reference (the first session)."""


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def request_digest(record: dict[str, Any]) -> str:
    """The conversation a call sent (normalised when the gateway normalised it)."""
    request = record.get("normalized_request") or record.get("request") or {}
    if not isinstance(request, dict):
        return digest(request)
    return digest({k: request[k] for k in CONVERSATION_KEYS if k in request})


def response_digest(record: dict[str, Any]) -> str:
    """What a call answered, in full: its text, reasoning and tool calls' names and arguments
    (not their ids, drawn anew each time), or its error."""
    response = record.get("response")
    choices = response.get("choices") if isinstance(response, dict) else None
    message = choices[0].get("message") if isinstance(choices, list) and choices else None
    if not isinstance(message, dict):
        return digest([None, record.get("error")])
    calls = [
        [c["function"].get("name"), c["function"].get("arguments")]
        for c in message.get("tool_calls") or []
        if isinstance(c, dict) and isinstance(c.get("function"), dict)
    ]
    said = [message.get(k) for k in ("content", "reasoning_content", "reasoning")]
    return digest([said, calls, record.get("error")])


def call_side(record: dict[str, Any]) -> CallSide:
    text, tools = answer_of(record.get("response"))
    normalized = record.get("normalized_request")
    request = last_message(normalized) if isinstance(normalized, dict) else ""
    answer = "\n".join([text, *tools]) if tools else text
    return CallSide(
        request or sent_last(record.get("request")), answer or record.get("error") or ""
    )


@dataclass(frozen=True)
class Conversation:
    """What the compare page keeps of a session's records: each call's request and response
    digests and its two sides, and the session's token lengths."""

    digests: list[tuple[str, str]]
    sides: list[CallSide]
    context_tokens: int = 0
    sampled_tokens: int = 0


def conversation(records: list[dict[str, Any]]) -> Conversation:
    """A session's conversation from its completion records, in call order."""
    digests = [(request_digest(r), response_digest(r)) for r in records]
    last = records[-1] if records else {}
    context = len(last.get("prompt_token_ids") or ()) + len(last.get("response_token_ids") or ())
    sampled = sum(len(r.get("response_token_ids") or ()) for r in records)
    return Conversation(digests, [call_side(r) for r in records], context, sampled)


def divergence(mine: Conversation, theirs: Conversation) -> Divergence:
    """The first call at which conversation `mine` leaves `theirs`."""
    for n, (a, b) in enumerate(zip(mine.digests, theirs.digests, strict=False)):
        for part, k in (("request", 0), ("response", 1)):
            if a[k] != b[k]:
                return Divergence(n, part, mine.sides[n], theirs.sides[n])
    if len(mine.digests) != len(theirs.digests):
        n = min(len(mine.digests), len(theirs.digests))
        return Divergence(
            n,
            "length",
            mine.sides[n] if n < len(mine.sides) else None,
            theirs.sides[n] if n < len(theirs.sides) else None,
        )
    return Divergence(None, "")


def patch_sizes(patches: dict[str, str]) -> tuple[int, int, int]:
    """Files changed, lines added and lines removed in unified diffs."""
    files = added = removed = 0
    for text in patches.values():
        for line in text.splitlines():
            if line.startswith("+++ "):
                files += 1
            elif line.startswith("+") and not line.startswith("+++"):
                added += 1
            elif line.startswith("-") and not line.startswith("---"):
                removed += 1
    return files, added, removed


class ClosedConversations:
    """A bounded cache of finished sessions' conversations and patches (they never change)."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self._items: OrderedDict[str, tuple[Conversation, dict[str, str]]] = OrderedDict()
        self._size = size

    def get(self, session_id: str) -> tuple[Conversation, dict[str, str]] | None:
        found = self._items.get(session_id)
        if found is not None:
            self._items.move_to_end(session_id)
        return found

    def put(self, session_id: str, value: tuple[Conversation, dict[str, str]]) -> None:
        self._items[session_id] = value
        while len(self._items) > self._size:
            self._items.popitem(last=False)


async def session_parts(
    objects: SessionObjects, row: SessionRow, cache: ClosedConversations
) -> tuple[Conversation, dict[str, str]]:
    """A session's conversation and patches: from S3, or the cache once it has finished."""
    cached = cache.get(row.session_id)
    if cached is not None:
        return cached
    records, artifacts = await asyncio.gather(
        objects.records(row.session_id), objects.artifacts(row.session_id)
    )
    texts = await asyncio.gather(*(objects.text(k) for k in artifacts.patches))
    patches = {k: t for k, (t, _) in zip(artifacts.patches, texts, strict=True)}
    parts = (await asyncio.to_thread(conversation, records), patches)
    if row.stage == Stage.DONE.value:  # a result: the session has ended
        cache.put(row.session_id, parts)
    return parts


async def compared(
    objects: SessionObjects, row: SessionRow, cache: ClosedConversations
) -> tuple[Compared, Conversation]:
    """One session's figures and patches, and its conversation (for the divergence)."""
    talk, patches = await session_parts(objects, row, cache)
    item = Compared(row, len(talk.digests), talk.context_tokens, talk.sampled_tokens, patches)
    item.files_changed, item.lines_added, item.lines_removed = patch_sizes(patches)
    return item, talk


def selected(rows: list[SessionRow], wanted: list[str]) -> list[SessionRow]:
    """The rows `wanted` names, in its order (none named: every row, if not too many)."""
    if not wanted:
        if len(rows) > MAX_COMPARED:
            raise CompareError(f"the task has {len(rows)} sessions: select at most {MAX_COMPARED}")
        picked = rows
    else:
        by_id = {r.session_id: r for r in rows}
        unknown = [w for w in wanted if w not in by_id]
        if unknown:
            raise CompareError(f"not a session of this task: {unknown[0]}")
        picked = [by_id[w] for w in dict.fromkeys(wanted)]
    if not 2 <= len(picked) <= MAX_COMPARED:
        raise CompareError(f"select 2 to {MAX_COMPARED} sessions of the task to compare")
    return picked


async def compare_sessions(
    objects: SessionObjects, rows: list[SessionRow], cache: ClosedConversations
) -> list[Compared]:
    """The sessions `rows` side by side, each diverging from the first."""
    found = await asyncio.gather(*(compared(objects, r, cache) for r in rows))
    reference = found[0][1]
    for item, talk in found[1:]:
        item.divergence = divergence(talk, reference)
    return [item for item, _ in found]
