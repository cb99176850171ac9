"""A prompt aligned with a prefix_merging chain: where it differs, why (BreakKind), and the
end of a re-rendered sampled turn that a `response_span` repair needs."""

from __future__ import annotations

import contextlib
import json
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

from polar.builders.base import Prepared
from polar.builders.prefix_chains import Chain, Segment, common_prefix
from polar.records import BreakKind, ChainBreak

__all__ = ["Match", "align", "same_turn"]


@dataclass
class Match:
    """A prompt walked along one chain's segments."""

    chain: Chain
    first_change: int = -1
    """position in the prompt of the first difference from the chain (its end if none)"""
    walked: int | None = None
    """prompt tokens the chain accounts for, when the walk went through every segment"""
    drifts: list[ChainBreak] = field(default_factory=list)
    """sampled turns met re-rendered (each the same turn, its end located)"""
    stop: ChainBreak | None = None
    """what stopped the walk before the chain's end"""
    consumed: list[Segment] = field(default_factory=list)
    """the segments walked, with the prompt's tokens as view"""
    shared: int = 0
    """how many of `consumed` are the chain's own segments as they are, from its start"""
    repaired_views: dict[int, list[int]] = field(default_factory=dict)

    def extends(self, repair: bool) -> bool:
        return self.walked is not None and (repair or not self.drifts)

    @property
    def brk(self) -> ChainBreak | None:
        """Why the prompt does not continue the chain as it is."""
        return self.drifts[0] if self.drifts else self.stop


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):
        return "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _visible(message: dict[str, Any]) -> str:
    """The message's content without a leading reasoning block, stripped."""
    text = _text(message.get("content"))
    return text.split("</think>")[-1].strip()


def _has_reasoning(message: dict[str, Any]) -> bool:
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    return bool(reasoning) or "</think>" in _text(message.get("content"))


def _tool_calls(message: dict[str, Any]) -> list[tuple[Any, Any]]:
    """(name, parsed arguments) of each tool call: serialisation differences do not count."""
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", call) if isinstance(call, dict) else {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments) if arguments else {}
        calls.append((function.get("name"), arguments))
    return calls


def same_turn(sampled: dict[str, Any], sent: dict[str, Any]) -> bool:
    """Whether `sent` (a later request's assistant message) is the turn `sampled` answered."""
    return (
        sent.get("role") == "assistant"
        and _visible(sampled) == _visible(sent)
        and _tool_calls(sampled) == _tool_calls(sent)
    )


def _classify(member: Prepared, item: Prepared, at_start: bool) -> tuple[BreakKind, bool | None]:
    """Why `item`'s prompt differs inside `member`'s sampled span; and whether it is the same turn.

    Same turn: True/False when the messages tell (the next request's message
    right after `member`'s own messages against `member`'s answer), None when
    they cannot.
    """
    sampled = member.response_message
    index = len(member.messages)
    sent = item.messages[index] if index < len(item.messages) else None
    same = None if sampled is None or sent is None else same_turn(sampled, sent)
    if same is False:
        return BreakKind.BRANCH, same
    if member.finish_reason == "length":
        return BreakKind.TRUNCATED_TURN, same
    reasoning = sampled is not None and _has_reasoning(sampled)
    if reasoning and at_start:
        return BreakKind.THINK_DROPPED, same
    if sampled is not None and _tool_calls(sampled):
        return BreakKind.TOOL_CALL_RERENDERED, same
    if reasoning:
        return BreakKind.THINK_DROPPED, same
    return BreakKind.RESPONSE_RETOKENIZED, same


def _rerendered_end(
    prompt: list[int], start: int, sampled: list[int], eos: frozenset[int]
) -> tuple[int | None, str]:
    """Where the re-rendered form of `sampled` (starting at `start`) ends in `prompt`."""
    if not eos:
        return None, "no end-of-turn ids known (set 'eos_token_ids' or 'tokenizer')"
    if any(t in eos for t in sampled[:-1]):
        return None, "the sampled turn holds an end-of-turn token before its end"
    end = next((i for i in range(start, len(prompt)) if prompt[i] in eos), None)
    if end is None:
        return None, "no end-of-turn token follows the re-rendered turn"
    return (end + 1 if sampled and sampled[-1] in eos else end), ""


def align(chain: Chain, item: Prepared, eos: frozenset[int], common: int = 0) -> Match:
    """Walk `item`'s prompt along the chain's segments, locating re-rendered sampled turns.

    The walk stops at the first difference it cannot explain as the same
    sampled turn re-rendered (other context, another turn, the prompt's end,
    or a turn whose re-rendered end cannot be located). `common`: a number of
    leading tokens the prompt is known to share with the chain's view; the
    segments inside them are taken as they are, without comparing.
    """
    prompt = item.prompt_ids
    record = item.record
    match = Match(chain=chain)

    def brk(kind: BreakKind, at: int, detail: str) -> ChainBreak:
        return ChainBreak(
            kind=kind,
            record_id=record.record_id,
            seq=record.seq,
            chain=chain.trace_id,
            position=at,
            detail=detail,
        )

    start = bisect_right(chain.ends, common)  # the segments wholly inside `common`
    match.consumed = chain.segments[:start]
    match.shared = start
    j = chain.ends[start - 1] if start else 0
    for index in range(start, len(chain.segments)):
        segment = chain.segments[index]
        view = segment.view
        if prompt[j : j + len(view)] == view:
            match.consumed.append(segment)
            j += len(view)
            continue
        at = j + common_prefix(prompt, j, view)
        if match.first_change < 0:
            match.first_change = at
        member = segment.sampled_by
        if at >= len(prompt):
            match.stop = brk(BreakKind.BRANCH, at, "the prompt ends inside this chain")
            return match
        if member is None:
            kind = BreakKind.NEW_CONTEXT if index == 0 else BreakKind.HISTORY_CHANGED
            match.stop = brk(kind, at, "non-sampled tokens differ")
            return match
        kind, same = _classify(member, item, at_start=at == j)
        what = f"inside the response of {member.key}"
        if kind is BreakKind.BRANCH:
            match.stop = brk(kind, at, f"another assistant turn follows where {what} was")
            return match
        if same is None:
            end, why = None, "the messages cannot confirm it is the same turn"
        else:
            end, why = _rerendered_end(prompt, j, member.response_ids, eos)
        if end is None:
            match.stop = brk(kind, at, f"{what}; cannot be repaired: {why}")
            return match
        match.drifts.append(brk(kind, at, what))
        match.repaired_views[index] = prompt[j:end]
        match.consumed.append(Segment(prompt[j:end], member))
        j = end
    match.walked = j
    if match.first_change < 0:
        match.first_change = j
    return match
