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
radix tree (`ChainIndex`, prefix_chains.py). A prompt is walked down it once;
the chains whose view it starts with lie on its path, and the others hang off
the path at the length of their common prefix with it, so they are met latest
first difference first and only the few that decide are walked segment by
segment.
A session whose every turn breaks the chain builds in time about linear in
its tokens, not in the cube of its calls; the choice is the one a comparison
with every chain would make (tests/unit/polar/builders/test_builders_drift.py).
A prompt is aligned with a chain, its breaks classified, in prefix_drift.py.

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

from itertools import accumulate
from typing import Literal

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
from polar.builders.prefix_chains import Chain, ChainIndex, Segment, Walk
from polar.builders.prefix_drift import Match, align, same_turn
from polar.builders.progress import report_progress
from polar.records import CompletionRecord, ReconstructionStats, Trace


class PrefixMergingConfig(BuilderConfig):
    """Config of `prefix_merging` (see the module docstring for what each option trains on)."""

    repair: Literal["none", "response_span"] = Field(
        default="none",
        description="none: split on every break; response_span: repair drift confined to "
        "sampled responses when safe",
    )


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
    chains: list[Chain] = []
    indexes: dict[int, ChainIndex] = {}
    for step, item in enumerate(prepared):
        report_progress(step, len(prepared))
        index = indexes.setdefault(item.record.attempt, ChainIndex())
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
            started_by, segments = None, [Segment(list(item.prompt_ids))]
            ends = [len(item.prompt_ids)]
            if closest is not None:  # the chain it came closest to continuing says why not
                started_by = closest.brk
                segments, ends = _first_segments(item.prompt_ids, closest)
            chain = Chain(
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
    index: ChainIndex, walk: Walk, item: Prepared, eos: frozenset[int], repair: bool
) -> tuple[Match | None, Match | None]:
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
            return align(chain, item, eos, common=node.depth), None
    deepest: list[Match] = []
    for depth, group in index.groups(walk):
        matches = [align(c, item, eos, common=depth) for c in group]
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
        and same_turn(message, sent)
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


def _first_segments(prompt: list[int], closest: Match) -> tuple[list[Segment], list[int]]:
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
        segments.append(Segment(prompt[shared:]))
        ends.append(len(prompt))
    return segments, ends


def _output(
    chains: list[Chain],
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
