"""What every builder receives and returns, the built-ins' config, and record preparation."""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from polar.records import CompletionRecord, ReconstructionStats, Trace, TraceProvenance
from polar.tasks.spec import StrictModel

RewardPolicy = Literal["broadcast", "session_normalized"]
UnseenReason = Literal["client_disconnected", "untrainable", "resent", "earlier_placement"]


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
    breaks: dict[str, int] = field(default_factory=dict)
    """chain breaks by `BreakKind` value (prefix_merging); empty for other builders."""


class BuilderConfig(StrictModel):
    """Config keys every built-in builder understands (`TaskSpec.builder.config`)."""

    tokenizer: str | None = Field(
        default=None,
        description="local tokenizer dir (or cached hub id) used to rebuild missing prompt ids "
        "and to learn the end-of-turn ids",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="the server's default chat-template kwargs; a request's own win",
    )
    eos_token_ids: list[int] | None = Field(
        default=None, description="end-of-turn ids; default: the tokenizer's, if one is given"
    )
    reward: RewardPolicy = Field(
        default="broadcast",
        description="broadcast: every trace gets the session's reward; session_normalized: "
        "the reward divided by the session's trace count",
    )


@dataclass(frozen=True)
class Prepared:
    """One usable sampled choice of a record with the token ids a builder needs.

    A record of `n` choices gives `n` of these: same prompt ids, each its own
    response ids and logprobs.
    """

    record: CompletionRecord
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    prompt_rebuilt: bool = False
    choice: int = 0
    finish_reason: str | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.record.normalized_request.get("messages") or [])

    @property
    def key(self) -> str:
        """The record id, with the choice for a choice other than the first."""
        return self.record.record_id + (f"-choice{self.choice}" if self.choice else "")

    @property
    def response_message(self) -> dict[str, Any] | None:
        return response_message(self.record, self.choice)


def usable(record: CompletionRecord) -> str | None:
    """Why a record's response cannot be trained on, or None when it can.

    Prompt ids are not checked here: `prepare_records` rebuilds missing ones.
    """
    if record.error is not None:
        return f"{record.record_id}: failed call ({record.error})"
    for choice in record.sampled():
        where = record.record_id + (f" choice {choice.index}" if choice.index else "")
        ids, logprobs = choice.response_token_ids, choice.response_logprobs
        if ids is None or logprobs is None:
            return f"{where}: upstream returned no response token ids or logprobs"
        if len(ids) != len(logprobs):
            return f"{where}: {len(ids)} response ids but {len(logprobs)} logprobs"
    return None


def prepare_records(
    records: list[CompletionRecord], config: BuilderConfig
) -> tuple[list[Prepared], list[str]]:
    """Usable choices in call order (a record's choices in index order) with their ids,
    and the reasons for the unusable records (a record is used whole or not at all).

    A record without prompt ids gets them from `polar.tokenization` when
    `config.tokenizer` is set and the rebuild agrees with the backend's count;
    otherwise it is unusable. Sampled ids are never rebuilt.
    """
    prepared: list[Prepared] = []
    unusable: list[str] = []
    for record in sorted(records, key=lambda r: (r.seq, r.record_id)):
        problem = usable(record)
        if problem is not None:
            unusable.append(problem)
            continue
        prompt_ids = record.prompt_token_ids
        rebuilt = False
        if prompt_ids is None:
            if config.tokenizer is None:
                unusable.append(
                    f"{record.record_id}: upstream returned no prompt ids and the builder has "
                    "no 'tokenizer' to rebuild them"
                )
                continue
            from polar.tokenization import load_tokenizer, rebuild_prompt_ids

            result = rebuild_prompt_ids(
                record, load_tokenizer(config.tokenizer), config.chat_template_kwargs
            )
            if result.ids is None:
                unusable.append(f"{record.record_id}: {result.problem}")
                continue
            prompt_ids, rebuilt = result.ids, True
        prepared.extend(
            Prepared(
                record=record,
                prompt_ids=list(prompt_ids),
                response_ids=list(choice.response_token_ids or []),
                logprobs=[float(x) for x in choice.response_logprobs or []],
                prompt_rebuilt=rebuilt,
                choice=choice.index,
                finish_reason=choice.finish_reason,
            )
            for choice in record.sampled()
        )
    return prepared, unusable


def end_of_turn_ids(config: BuilderConfig) -> frozenset[int]:
    """The configured end-of-turn ids, else the tokenizer's, else none known."""
    if config.eos_token_ids is not None:
        return frozenset(config.eos_token_ids)
    if config.tokenizer is not None:
        from polar.tokenization import end_of_turn_ids as tokenizer_eos

        return frozenset(tokenizer_eos(config.tokenizer))
    return frozenset()


def response_message(record: CompletionRecord, choice: int = 0) -> dict[str, Any] | None:
    """The assistant message the upstream answered with (in choice `choice`)."""
    choices = (record.response or {}).get("choices") or []
    found = choices[choice] if 0 <= choice < len(choices) else None
    return found.get("message") if isinstance(found, dict) else None


def provenance(
    ctx: BuildContext, members: list[Prepared], stats: ReconstructionStats, reward: RewardPolicy
) -> TraceProvenance:
    """Provenance of a trace made of `members` (in chain order)."""
    return TraceProvenance(
        session_id=ctx.session_id,
        task_id=ctx.task_id,
        harness=ctx.harness,
        builder=ctx.builder,
        model=members[0].record.model,
        completion_seqs=[m.record.seq for m in members],
        record_ids=[m.record.record_id for m in members],
        reward_policy=reward,
        reconstruction=stats,
    )


def _request_digest(record: CompletionRecord) -> str:
    body = json.dumps(record.request, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(body.encode(), digest_size=16).hexdigest()


def joined_runs(records: list[CompletionRecord], attempts: list[int]) -> list[CompletionRecord]:
    """`records` with the runs of `attempts` as one (the first's number): a multi-step
    session's steps, each its own run, whose chains may go on from one step to the next
    (builders never chain across runs)."""
    if not attempts:
        return records
    first, joined = min(attempts), set(attempts)
    return [r.model_copy(update={"attempt": first}) if r.attempt in joined else r for r in records]


def unseen_records(records: list[CompletionRecord]) -> dict[str, UnseenReason]:
    """Records left out of training, by record id, with the reason: their answer never reached
    the harness, or their sample is not the policy's own.

    * `client_disconnected`: the caller hung up before the gateway answered.
    * `untrainable`: the call used sampling controls that make its sample off-policy
      (recorded under POLAR_OFF_POLICY=record_untrainable); a later call's prompt still
      holds its tokens, as mask-0 context.
    * `resent`: the same attempt sent the identical request (same body, same prompt ids)
      again right after this one finished, with no other call of the session started in
      between: its answer never arrived (e.g. the gateway died after writing the record,
      and the SDK retried).
      Of a run of identical requests only the last is kept.
    """
    ordered = sorted(records, key=lambda r: (r.seq, r.record_id))
    unseen: dict[str, UnseenReason] = {}
    for r in ordered:
        if r.client_disconnected:
            unseen[r.record_id] = "client_disconnected"
        elif r.untrainable:
            unseen[r.record_id] = "untrainable"
    digests = {r.record_id: _request_digest(r) for r in ordered}
    starts = [r.started_at for r in ordered]
    for i, record in enumerate(ordered):
        if record.record_id in unseen or record.error is not None:
            continue
        # the first call of the same attempt started once this one's record was written
        j = bisect.bisect_left(starts, record.finished_at, lo=i + 1)
        after = next(
            (r for r in itertools.islice(ordered, j, None) if r.attempt == record.attempt), None
        )
        if (
            after is not None
            and digests[after.record_id] == digests[record.record_id]
            and after.prompt_token_ids == record.prompt_token_ids
        ):
            unseen[record.record_id] = "resent"
    return unseen


def count_unseen(unseen: dict[str, UnseenReason]) -> dict[str, int]:
    """How many records were left out, by reason (the build stats)."""
    counts: dict[str, int] = {}
    for reason in unseen.values():
        counts[reason] = counts.get(reason, 0) + 1
    return counts
