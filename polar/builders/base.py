"""What every builder receives and returns, the built-ins' config, and record preparation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from polar.models import CompletionRecord, ReconstructionStats, StrictModel, Trace, TraceProvenance

RewardPolicy = Literal["broadcast", "session_normalized"]


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
    """A usable record with the token ids a builder needs."""

    record: CompletionRecord
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    prompt_rebuilt: bool = False

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.record.normalized_request.get("messages") or [])


def usable(record: CompletionRecord) -> str | None:
    """Why a record's response cannot be trained on, or None when it can.

    Prompt ids are not checked here: `prepare_records` rebuilds missing ones.
    """
    if record.error is not None:
        return f"{record.record_id}: failed call ({record.error})"
    if record.response_token_ids is None or record.response_logprobs is None:
        return f"{record.record_id}: upstream returned no response token ids or logprobs"
    if len(record.response_token_ids) != len(record.response_logprobs):
        return (
            f"{record.record_id}: {len(record.response_token_ids)} response ids but "
            f"{len(record.response_logprobs)} logprobs"
        )
    return None


def prepare_records(
    records: list[CompletionRecord], config: BuilderConfig
) -> tuple[list[Prepared], list[str]]:
    """Usable records in call order with their ids, and the reasons for the others.

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
        assert record.response_token_ids is not None and record.response_logprobs is not None
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
        prepared.append(
            Prepared(
                record=record,
                prompt_ids=list(prompt_ids),
                response_ids=list(record.response_token_ids),
                logprobs=[float(x) for x in record.response_logprobs],
                prompt_rebuilt=rebuilt,
            )
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


def response_message(record: CompletionRecord) -> dict[str, Any] | None:
    """The assistant message the upstream answered with."""
    choices = (record.response or {}).get("choices") or []
    return choices[0].get("message") if choices else None


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
