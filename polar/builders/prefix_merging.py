"""The `prefix_merging` builder: a session's calls merged into token-faithful chains.

Calls are taken in `seq` order. Each chain keeps its token sequence as
segments: context (mask 0: the first prompt, then the interstitial tokens
between turns) and sampled responses (mask 1), plus a *view*: the tokens a
prompt last showed for each segment. A call continues a chain when its
prompt ids start with the chain's whole view, that is the latest member's
prompt followed by the latest member's sampled response; the rest of its
prompt becomes the next interstitial (mask 0, logprob 0.0) and its response
is appended (mask 1, logprobs as returned). Among such chains the longest
view wins, then the most recently extended. Chains never span harness
attempts.

End of turn: a turn that stopped on the end-of-turn token has it as its last
sampled token (mask 1). A turn cut by length (or stopped by a stop string)
has none; the template writes one in the next prompt, and that token and the
glue after it (the newline after `<|im_end|>`) come from the next prompt,
mask 0. `ReconstructionStats.sampled_eos` / `template_eos` count both.

When the prompt does not extend a chain, the first changed position is
located in the chain and classified (`BreakKind`): inside the first prompt
(`new_context`: compaction, a sub-agent), in later non-sampled history
(`history_changed`), a prompt that ends inside the chain or carries another
assistant turn where this chain has its own (`branch`: parallel calls,
retries), or inside a sampled response that came back re-rendered
(`think_dropped`, `tool_call_rerendered`, `truncated_turn`,
`response_retokenized`). A drift kind needs the next request's message at
that place to be the same turn (same visible content and parsed tool calls);
another turn there is a `branch`. The chain the call came closest to
continuing (one it misses only by re-rendered turns first, then the latest
first difference) names the break in the new trace's `started_by`, and the
new chain keeps that chain's sampled-turn structure for its first prompt, so
that later drift there is still recognised.

Finding the chain: each attempt's chains are indexed by their views in a
radix tree (`_ChainIndex`). A prompt is walked down it once; the chains whose
view it starts with lie on its path, and the others hang off the path at the
length of their common prefix with it, so they are met latest first
difference first and only the few that decide are walked segment by segment.
A session whose every turn breaks the chain builds in time about linear in
its tokens, not in the cube of its calls; the choice is the one a comparison
with every chain would make (tests/unit/polar/builders/test_builders_drift.py).

Several choices of one call (`n > 1`): the choice the next call's prompt
carries is taken first and continues the chain; each other choice's prompt
then ends inside that chain, so it starts its own trace (`branch`). Every
sampled choice is in exactly one trace.

Options (`PrefixMergingConfig`, on top of `BuilderConfig`):

* `repair: "none"` (default): every break starts a new chain whose prompt is
  the call's own prompt ids. Each trace is exactly what the policy saw: every
  member's prompt is a prefix of the trace, every sampled token is in exactly
  one trace with mask 1, and no response is trained twice or altered.
* `repair: "response_span"`: a break that lies only inside earlier sampled
  responses of a chain (every context segment still matches) is repaired
  when it is safe: the end-of-turn ids are known, the sampled turn has no end
  token before its end, the next prompt has one after the re-rendered turn,
  and the next request's assistant message at that place is the same turn as
  the one sampled (same visible content and tool calls; reasoning may be
  gone). The chain then keeps the sampled tokens, mask 1 with their logprobs,
  and skips the re-rendered ones. What this trains on: every sampled token
  still exactly once with its own logprob, each under the exact context it
  was sampled in up to the first repaired turn; later turns are trained in a
  context that shows earlier turns as sampled (e.g. with their `<think>`)
  while the policy saw them re-rendered, so their recorded logprobs belong to
  a slightly different context (an off-policy gap the trainer's importance
  ratio absorbs). Repaired members' prompts are no longer prefixes of the
  trace; `ReconstructionStats.repairs` lists each repair.
"""

from __future__ import annotations

import contextlib
import json
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Literal

from pydantic import Field

from polar.builders.base import (
    BuildContext,
    BuilderConfig,
    BuildOutput,
    Prepared,
    end_of_turn_ids,
    prepare_records,
    provenance,
)
from polar.builders.progress import report_progress
from polar.records import BreakKind, ChainBreak, CompletionRecord, ReconstructionStats, Trace


class PrefixMergingConfig(BuilderConfig):
    """Config of `prefix_merging` (see the module docstring for what each option trains on)."""

    repair: Literal["none", "response_span"] = Field(
        default="none",
        description="none: split on every break; response_span: repair drift confined to "
        "sampled responses when safe",
    )


@dataclass(slots=True)
class _Segment:
    """Never changed once made (chains split from one another share them): a repair replaces
    the segment."""

    view: list[int]
    """the tokens a prompt last showed here (for a response: sampled, or as re-rendered)"""
    sampled_by: Prepared | None = None
    """the call whose sampled response is here (this chain's or, in the first prompt of a
    chain split from another, that chain's); None for context"""


@dataclass(eq=False)
class _Chain:
    trace_id: str
    attempt: int
    members: list[Prepared]
    segments: list[_Segment]
    prompt: list[int]
    response: list[int]
    mask: list[int]
    logprobs: list[float]
    started_by: ChainBreak | None
    last_used: int
    repairs: list[ChainBreak] = field(default_factory=list)
    template_eos: int = 0
    ends: list[int] = field(default_factory=list)
    """where each segment ends in the view (the running sum of the segments' lengths)"""
    node: _Node | None = None
    """where the view ends in the attempt's `_ChainIndex`"""

    def __post_init__(self) -> None:
        if len(self.ends) != len(self.segments):
            self.ends = list(accumulate(len(s.view) for s in self.segments))

    def append(self, item: Prepared, tail: list[int]) -> None:
        """Add `tail` (mask 0) and `item`'s sampled response (mask 1) to the chain."""
        if tail:
            self._add(_Segment(list(tail)))
            self.response += tail
            self.mask += [0] * len(tail)
            self.logprobs += [0.0] * len(tail)
        self.members.append(item)
        self._add(_Segment(list(item.response_ids), item))
        self.response += item.response_ids
        self.mask += [1] * len(item.response_ids)
        self.logprobs += item.logprobs

    def _add(self, segment: _Segment) -> None:
        self.ends.append((self.ends[-1] if self.ends else 0) + len(segment.view))
        self.segments.append(segment)

    def repair(self, views: dict[int, list[int]]) -> None:
        """Show the segments at `views`' indexes as re-rendered there."""
        for index, view in views.items():
            self.segments[index] = _Segment(view, self.segments[index].sampled_by)
        if views:
            first = min(views)
            start = self.ends[first - 1] if first else 0
            rest = accumulate((len(s.view) for s in self.segments[first:]), initial=start)
            self.ends[first:] = list(rest)[1:]


@dataclass(eq=False)
class _Node:
    """A node of a `_ChainIndex`: the tokens on the edge into it, the chains whose view ends
    here."""

    label: list[int]
    depth: int
    """the length of the views that end here"""
    parent: _Node | None
    children: dict[int, _Node] = field(default_factory=dict)
    chains: list[_Chain] = field(default_factory=list)


@dataclass
class _Walk:
    """A prompt walked down a `_ChainIndex` as far as it matches."""

    path: list[_Node]
    """the nodes whose views are prefixes of the prompt, from the root down"""
    partial: _Node | None
    """the child of the last path node whose edge the prompt left (or ended on) part-way"""
    depth: int
    """how far the prompt matches: the longest common prefix with any chain's view"""


class _ChainIndex:
    """The views of one attempt's chains in a radix tree (a trie with whole runs of tokens on
    its edges).

    A prompt is walked down once: the chains on its path are those it extends, and the
    chains hanging off the path at a depth share exactly that many leading tokens with it,
    so chains are met in the order of their common prefix with the prompt without comparing
    the prompt with each.
    """

    def __init__(self) -> None:
        self.root = _Node(label=[], depth=0, parent=None)

    def walk(self, prompt: list[int]) -> _Walk:
        node, depth, path = self.root, 0, [self.root]
        while depth < len(prompt):
            child = node.children.get(prompt[depth])
            if child is None:
                break
            label = child.label
            if prompt[depth : depth + len(label)] != label:
                return _Walk(path, child, depth + _common_prefix(prompt, depth, label))
            node, depth = child, depth + len(label)
            path.append(node)
        return _Walk(path, None, depth)

    def groups(self, walk: _Walk) -> Iterator[tuple[int, list[_Chain]]]:
        """Chains that do not end on the walk's path, grouped by their common prefix with the
        prompt, with its length: the longest first."""
        if walk.partial is not None:
            yield walk.depth, _chains_under([walk.partial])
        on_path = walk.partial
        for node in reversed(walk.path):
            yield node.depth, _chains_under([c for c in node.children.values() if c is not on_path])
            on_path = node

    def place(self, chain: _Chain, view: list[int], walk: _Walk) -> None:
        """Move `chain`'s mark to where `view` ends (`view` extends the walked prompt)."""
        node, depth = walk.path[-1], walk.path[-1].depth
        while depth < len(view):
            child = node.children.get(view[depth])
            if child is None:
                child = _Node(label=view[depth:], depth=len(view), parent=node)
                node.children[view[depth]] = child
                node, depth = child, len(view)
                break
            k = _common_prefix(view, depth, child.label)
            if k < len(child.label):
                child = self._split(child, k)
            node, depth = child, depth + k
        old = chain.node
        if old is node:
            return
        node.chains.append(chain)
        chain.node = node
        if old is not None:
            old.chains.remove(chain)
            self._tidy(old)

    def _split(self, node: _Node, at: int) -> _Node:
        """Put a node `at` tokens into `node`'s edge; return it."""
        parent = node.parent
        assert parent is not None
        middle = _Node(label=node.label[:at], depth=parent.depth + at, parent=parent)
        parent.children[middle.label[0]] = middle
        node.label = node.label[at:]
        node.parent = middle
        middle.children[node.label[0]] = node
        return middle

    def _tidy(self, node: _Node) -> None:
        """Drop a node no view ends at or below; fold a node into its only child."""
        parent = node.parent
        if parent is None or node.chains:
            return
        if not node.children:
            del parent.children[node.label[0]]
            self._tidy(parent)
        elif len(node.children) == 1:
            (child,) = node.children.values()
            child.label = node.label + child.label
            child.parent = parent
            parent.children[child.label[0]] = child


def _chains_under(nodes: list[_Node]) -> list[_Chain]:
    found: list[_Chain] = []
    while nodes:
        node = nodes.pop()
        found += node.chains
        nodes += node.children.values()
    return found


@dataclass
class _Match:
    """A prompt walked along one chain's segments."""

    chain: _Chain
    first_change: int = -1
    """position in the prompt of the first difference from the chain (its end if none)"""
    walked: int | None = None
    """prompt tokens the chain accounts for, when the walk went through every segment"""
    drifts: list[ChainBreak] = field(default_factory=list)
    """sampled turns met re-rendered (each the same turn, its end located)"""
    stop: ChainBreak | None = None
    """what stopped the walk before the chain's end"""
    consumed: list[_Segment] = field(default_factory=list)
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


def _common_prefix(prompt: list[int], start: int, view: list[int], chunk: int = 256) -> int:
    """How many leading tokens of `view` `prompt` repeats from `start` (compared a chunk at a
    time, then token by token inside the first chunk that differs)."""
    n = min(len(prompt) - start, len(view))
    if prompt[start : start + n] == view[:n]:
        return n
    i = 0
    while i + chunk < n and prompt[start + i : start + i + chunk] == view[i : i + chunk]:
        i += chunk
    while i < n and prompt[start + i] == view[i]:
        i += 1
    return i


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


def _same_turn(sampled: dict[str, Any], sent: dict[str, Any]) -> bool:
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
    same = None if sampled is None or sent is None else _same_turn(sampled, sent)
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


def _align(chain: _Chain, item: Prepared, eos: frozenset[int], common: int = 0) -> _Match:
    """Walk `item`'s prompt along the chain's segments, locating re-rendered sampled turns.

    The walk stops at the first difference it cannot explain as the same
    sampled turn re-rendered (other context, another turn, the prompt's end,
    or a turn whose re-rendered end cannot be located). `common`: a number of
    leading tokens the prompt is known to share with the chain's view; the
    segments inside them are taken as they are, without comparing.
    """
    prompt = item.prompt_ids
    record = item.record
    match = _Match(chain=chain)

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
        at = j + _common_prefix(prompt, j, view)
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
        match.consumed.append(_Segment(prompt[j:end], member))
        j = end
    match.walked = j
    if match.first_change < 0:
        match.first_change = j
    return match


def build_prefix_merging(records: list[CompletionRecord], ctx: BuildContext) -> BuildOutput:
    """Merge a session's calls into chains of prompt, sampled (mask 1) and interstitial tokens.

    Config: `PrefixMergingConfig`. See the module docstring for the rules and
    what each `repair` option trains on.
    """
    config = PrefixMergingConfig.model_validate(ctx.config)
    prepared, unusable = prepare_records(records, config)
    prepared = _followed_first(prepared)
    eos = end_of_turn_ids(config)
    repair = config.repair == "response_span"
    chains: list[_Chain] = []
    indexes: dict[int, _ChainIndex] = {}
    for step, item in enumerate(prepared):
        report_progress(step, len(prepared))
        index = indexes.setdefault(item.record.attempt, _ChainIndex())
        walk = index.walk(item.prompt_ids)
        best, closest = _choose(index, walk, item, eos, repair)
        if best is not None:
            chain = best.chain
            assert best.walked is not None
            chain.repair(best.repaired_views)
            chain.repairs += [d.model_copy(update={"repaired": True}) for d in best.drifts]
            tail = item.prompt_ids[best.walked :]
            previous = chain.members[-1].response_ids
            if eos and not (previous and previous[-1] in eos) and any(t in eos for t in tail):
                chain.template_eos += 1  # the turn had no sampled end: the template wrote it
            chain.append(item, tail)
            chain.last_used = step
        else:
            started_by, segments = None, [_Segment(list(item.prompt_ids))]
            ends = [len(item.prompt_ids)]
            if closest is not None:  # the chain it came closest to continuing says why not
                started_by = closest.brk
                segments, ends = _first_segments(item.prompt_ids, closest)
            chain = _Chain(
                trace_id=f"{ctx.session_id}/chain-{item.key}",
                attempt=item.record.attempt,
                members=[],
                segments=segments,
                prompt=list(item.prompt_ids),
                response=[],
                mask=[],
                logprobs=[],
                started_by=started_by,
                last_used=step,
                ends=ends,
            )
            chain.append(item, [])
            chains.append(chain)
        index.place(chain, item.prompt_ids + item.response_ids, walk)
    report_progress(len(prepared), len(prepared))
    return _output(chains, ctx, config, eos, unusable)


def _choose(
    index: _ChainIndex, walk: _Walk, item: Prepared, eos: frozenset[int], repair: bool
) -> tuple[_Match | None, _Match | None]:
    """The chain `item` continues (a match), else the one it came closest to continuing.

    Continued: of the chains whose view the prompt starts with, the longest, then the most
    recently extended; else, repairing, of the chains it walks through with re-rendered
    turns only, the one with the latest first difference, then the longest walk, then the
    most recently extended. Closest: a chain it walks through with re-rendered turns only
    before any other, then the latest first difference, then the most recently extended.
    The index meets chains by their first difference, latest first, so the search stops
    at the first group that holds a chain walked through.
    """
    for node in reversed(walk.path):
        if node.chains:
            chain = max(node.chains, key=lambda c: c.last_used)
            return _align(chain, item, eos, common=node.depth), None
    deepest: list[_Match] = []
    for depth, group in index.groups(walk):
        matches = [_align(c, item, eos, common=depth) for c in group]
        if not deepest:
            deepest = matches
        walked = [m for m in matches if m.walked is not None]
        if walked and repair:
            return max(walked, key=lambda m: (m.walked or 0, m.chain.last_used)), None
        if walked:
            return None, max(walked, key=lambda m: m.chain.last_used)
    return None, max(deepest, key=lambda m: m.chain.last_used) if deepest else None


def _follows(later: Prepared, choice: Prepared) -> bool:
    """Whether `later`'s prompt carries `choice`'s answer: its sampled ids, or (re-rendered)
    the same turn right after `choice`'s own messages."""
    if later.record.attempt != choice.record.attempt:
        return False
    sampled = choice.prompt_ids + choice.response_ids
    if later.prompt_ids[: len(sampled)] == sampled:
        return True
    message, index = choice.response_message, len(choice.messages)
    sent = later.messages[index] if index < len(later.messages) else None
    return (
        message is not None
        and isinstance(sent, dict)
        and later.prompt_ids[: len(choice.prompt_ids)] == choice.prompt_ids
        and _same_turn(message, sent)
    )


def _followed_first(prepared: list[Prepared]) -> list[Prepared]:
    """`prepared` with each record's followed choice first, the others after it.

    Of a call's several choices (`n > 1`) the harness carries on with one: the
    choice that the first later call's prompt carries. Taken first, it continues
    the chain; the other choices then branch off as their own traces.
    """
    out: list[Prepared] = []
    i = 0
    while i < len(prepared):
        j = i
        while j < len(prepared) and prepared[j].record is prepared[i].record:
            j += 1
        group, later = prepared[i:j], prepared[j:]
        followed = (
            next((c for item in later for c in group if _follows(item, c)), group[0])
            if len(group) > 1
            else group[0]
        )
        out += [followed] + [c for c in group if c is not followed]
        i = j
    return out


def _first_segments(prompt: list[int], closest: _Match) -> tuple[list[_Segment], list[int]]:
    """Segments of a split-off chain's first prompt (all mask 0 in its trace), with their ends.

    The part the prompt shares with the chain it split from keeps that chain's
    structure, so that a later drift inside a sampled response there is still
    recognised (and, opted in, repaired) in the new chain.
    """
    segments = list(closest.consumed)
    start = closest.chain.ends[closest.shared - 1] if closest.shared else 0
    rest = (len(s.view) for s in segments[closest.shared :])
    ends = closest.chain.ends[: closest.shared] + list(accumulate(rest, initial=start))[1:]
    shared = ends[-1] if ends else 0
    if shared < len(prompt):
        segments.append(_Segment(prompt[shared:]))
        ends.append(len(prompt))
    return segments, ends


def _output(
    chains: list[_Chain],
    ctx: BuildContext,
    config: PrefixMergingConfig,
    eos: frozenset[int],
    unusable: list[str],
) -> BuildOutput:
    splits: dict[str, int] = {}
    repaired: dict[str, int] = {}
    for chain in chains:
        if chain.started_by is not None:
            splits[chain.started_by.kind.value] = splits.get(chain.started_by.kind.value, 0) + 1
        for fix in chain.repairs:
            repaired[fix.kind.value] = repaired.get(fix.kind.value, 0) + 1
    out = BuildOutput(traces=[], unusable=unusable, breaks=splits)
    for chain in chains:
        sampled = sum(chain.mask)
        stats = ReconstructionStats(
            chains=len(chains),
            members=len(chain.members),
            started_by=chain.started_by,
            repairs=chain.repairs,
            session_breaks=splits,
            session_repairs=repaired,
            sampled_tokens=sampled,
            interstitial_tokens=len(chain.mask) - sampled,
            sampled_eos=sum(
                1 for m in chain.members if m.response_ids and m.response_ids[-1] in eos
            ),
            template_eos=chain.template_eos,
            prompt_ids_rebuilt=[m.record.record_id for m in chain.members if m.prompt_rebuilt],
            unusable=len(unusable),
        )
        first, last = chain.members[0], chain.members[-1]
        out.traces.append(
            Trace(
                trace_id=chain.trace_id,
                prompt_ids=chain.prompt,
                response_ids=chain.response,
                loss_mask=chain.mask,
                response_logprobs=chain.logprobs,
                prompt_messages=first.messages,
                response_message=last.response_message,
                tools=first.record.normalized_request.get("tools"),
                provenance=provenance(ctx, chain.members, stats, config.reward),
            )
        )
    return out
