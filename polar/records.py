"""Records and traces: what the gateway stores per model call and what builders make of it."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    model_validator,
)


class SessionStatus(StrEnum):
    """Terminal status of a session."""

    COMPLETED = "completed"  # harness exited 0
    HARNESS_FAILED = "harness_failed"  # harness exited non-zero
    TIMEOUT = "timeout"  # harness ran past its time budget
    ERROR = "error"  # a stage failed after its retries
    CANCELLED = "cancelled"


class OutcomeClass(StrEnum):
    """What a session's end says about the policy (polar/outcomes.py classifies it)."""

    OK = "ok"  # the harness ran and completed; its grade (if any) is above the worst
    POLICY_FAILURE = "policy_failure"  # the harness ran and failed, or its work failed the grade
    TIMEOUT = "timeout"  # the harness ran past its time budget
    INFRA_ERROR = "infra_error"  # the stack failed the session: no verdict, no reward, retried
    TASK_ERROR = "task_error"  # the task itself cannot run (a bad spec): no verdict, not retried


class InfraReason(StrEnum):
    """Which part of the stack an `infra_error` session was failed by."""

    SANDBOX_START = "sandbox_start"  # the sandbox never got to the harness (no started marker)
    IMAGE = "image"  # the image is missing or lacks what the sandbox needs
    ENGINE = "engine"  # the container engine or the host's runtime failed a stage
    STORAGE = "storage"  # S3 failed a stage (records, traces, logs)
    GATEWAY = "gateway"  # the gateway could not record or route the session's calls
    INFERENCE_BACKEND = "inference_backend"  # the harness failed after calls nobody served
    EVALUATOR_HOST = "evaluator_host"  # the evaluator failed on the worker's side
    LOST_HOST = "lost_host"  # the host holding the runtime stopped answering


class SampledChoice(BaseModel):
    """One choice of an answer with `n > 1`: what the upstream sampled for it."""

    index: int
    response_token_ids: list[int] | None = None
    response_logprobs: list[float] | None = None
    finish_reason: str | None = None


class CompletionRecord(BaseModel):
    """One model call as the gateway saw it, stored before the caller gets its answer.

    The top-level response fields are choice 0's. An answer of several
    choices (`n`, `candidateCount`) also lists every choice in `choices`
    (choice 0 included); a single-choice answer leaves it empty.
    """

    session_id: str
    task_id: str
    seq: int = Field(description="gateway start time in ns; orders calls across gateways")
    record_id: str
    attempt: int = 1
    provider: str = "openai_chat"
    request: dict[str, Any]
    normalized_request: dict[str, Any]
    response: dict[str, Any] | None = None
    status_code: int = 200
    error: str | None = None
    model: str | None = None
    prompt_token_ids: list[int] | None = None
    response_token_ids: list[int] | None = None
    response_logprobs: list[float] | None = None
    finish_reason: str | None = None
    has_token_ids: bool = False
    choices: list[SampledChoice] = Field(default_factory=list)
    started_at: float
    finished_at: float
    gateway_id: str = ""
    client_disconnected: bool = Field(
        default=False,
        description="the caller hung up before its answer was sent: the harness never saw "
        "this sample, so no builder trains on it",
    )
    untrainable: str | None = Field(
        default=None,
        description="why this sample is not the policy's own (off-policy sampling controls, "
        "POLAR_OFF_POLICY=record_untrainable): recorded, but no builder trains on it",
    )
    upstream_url: str | None = Field(
        default=None,
        description="the replica (upstream base URL) that answered, or that failed; None: no "
        "replica was reached",
    )
    policy_version: int | None = Field(
        default=None,
        description="the weight version the gateway served when it admitted the call: the "
        "version the last weight sync resumed it with (POST /admin/resume?policy_version=N); "
        "None: no sync has named one to this gateway",
    )

    def sampled(self) -> list[SampledChoice]:
        """Every choice the upstream sampled: `choices`, or choice 0 from the top-level fields."""
        if self.choices:
            return list(self.choices)
        return [
            SampledChoice(
                index=0,
                response_token_ids=self.response_token_ids,
                response_logprobs=self.response_logprobs,
                finish_reason=self.finish_reason,
            )
        ]

    def json_fields(self) -> dict[str, Any]:
        """The record's JSON dict, `model_dump(mode="json")` without its copy of every value:
        the fields in order, sharing their values with the record, `choices` dumped. The
        gateway's fast path (proxy/recorder.py builds records with `model_construct` from
        JSON it parsed); valid for any record whose fields hold JSON values, which validated
        ones do (a test checks the two dumps agree)."""
        fields = dict(self.__dict__)
        fields["choices"] = [choice.model_dump() for choice in self.choices]
        return fields


class BreakKind(StrEnum):
    """Why a completion could not continue an existing chain (see polar/builders/README.md)."""

    NEW_CONTEXT = "new_context"  # differs inside the chain's first prompt: compaction, sub-agent
    HISTORY_CHANGED = "history_changed"  # differs in later non-sampled history (tool output, glue)
    BRANCH = "branch"  # same context again or another turn after it: parallel call, retry
    THINK_DROPPED = "think_dropped"  # a sampled turn came back without its <think> block
    TOOL_CALL_RERENDERED = "tool_call_rerendered"  # a sampled tool call came back re-serialised
    TRUNCATED_TURN = "truncated_turn"  # a turn cut by length came back re-rendered
    RESPONSE_RETOKENIZED = "response_retokenized"  # a sampled turn came back as other tokens


class ChainBreak(BaseModel):
    """One place where a completion's prompt diverged from a chain's tokens."""

    kind: BreakKind
    record_id: str = Field(description="the completion whose prompt diverged")
    seq: int
    chain: str | None = Field(default=None, description="trace id of the chain compared against")
    position: int = Field(description="index in the completion's prompt ids of the first change")
    repaired: bool = False
    detail: str = ""


class ReconstructionStats(BaseModel):
    """How a builder made one trace, and the session-wide picture it belongs to."""

    chains: int = Field(description="traces the builder made for the session")
    members: int = Field(description="completions merged into this trace")
    started_by: ChainBreak | None = Field(
        default=None,
        description="why this chain could not continue an earlier one; None: first context",
    )
    repairs: list[ChainBreak] = Field(
        default_factory=list, description="drift repaired inside this chain (opt-in)"
    )
    session_breaks: dict[str, int] = Field(
        default_factory=dict, description="chains split off, by break kind, over the session"
    )
    session_repairs: dict[str, int] = Field(
        default_factory=dict, description="breaks repaired in place, by kind, over the session"
    )
    sampled_tokens: int = Field(default=0, description="mask-1 tokens")
    interstitial_tokens: int = Field(default=0, description="mask-0 tokens after the prompt")
    sampled_eos: int = Field(default=0, description="turns ended by a sampled end token (mask 1)")
    template_eos: int = Field(
        default=0, description="end tokens only the chat template wrote (mask 0): cut by length"
    )
    prompt_ids_rebuilt: list[str] = Field(
        default_factory=list, description="record ids whose prompt ids the tokenizer rebuilt"
    )
    unusable: int = Field(default=0, description="the session's completions no builder could use")


class TraceProvenance(BaseModel):
    """Where a trace came from: its session, task, harness, builder and model calls."""

    session_id: str = Field(description="the session whose model calls the trace is made of")
    task_id: str = Field(description="the task (one GRPO group) the session belongs to")
    harness: str = Field(description="the harness that made the calls (`codex`, `command`, ...)")
    builder: str = Field(description="the builder that made the trace (`prefix_merging`, ...)")
    model: str | None = Field(description="the model name the first call asked the gateway for")
    completion_seqs: list[int] = Field(
        description="each member call's `CompletionRecord.seq` (gateway start time, ns), "
        "in chain order"
    )
    record_ids: list[str] = Field(
        description="each member call's `CompletionRecord.record_id`, in chain order: "
        "one for a `per_request` trace, the merged calls for a `prefix_merging` one"
    )
    reward_policy: Literal["broadcast", "session_normalized"] = Field(
        default="broadcast",
        description="how the session's reward reached the trace: `broadcast` (every trace "
        "gets it) or `session_normalized` (split over the session's traces)",
    )
    reconstruction: ReconstructionStats | None = Field(
        default=None, description="how the builder made the trace (chains, breaks, repairs)"
    )
    policy_version: int | None = Field(
        default=None,
        description="the policy (weights) version the task was submitted with; None: not given",
    )


class Trace(BaseModel):
    """One trainer-facing sequence: prompt, response with loss mask and logprobs, reward.

    The sequence is `prompt_ids + response_ids`. `loss_mask` and `response_logprobs` are
    aligned with `response_ids`, one value per response token: that is what `loss_mask`
    means everywhere in Polar (every export and trainer bridge). A mask over the whole
    sequence is `[0] * len(prompt_ids) + loss_mask`, and goes by another name where a format
    has one (TRL's `completion_mask`, NeMo RL's `token_mask`).
    """

    trace_id: str = Field(
        description="`{session_id}/...`, unique among the session's traces (one per chain, "
        "or per call and choice)"
    )
    prompt_ids: list[int] = Field(
        description="token ids of the first call's prompt, as the backend reported them (or "
        "rebuilt by the tokenizer: `reconstruction.prompt_ids_rebuilt`)"
    )
    response_ids: list[int] = Field(
        description="every token after the prompt: the sampled tokens of each member call, "
        "and (for a merged trace) the context between them (tool results, the next user "
        "turn, chat-template tokens)"
    )
    loss_mask: list[int] = Field(
        description="aligned with `response_ids`: 1 = sampled by the policy (train on it), "
        "0 = context the policy did not sample (interstitial tokens, a template-written end "
        "token). Never covers the prompt"
    )
    response_logprobs: list[float] = Field(
        description="aligned with `response_ids`: the backend's logprob of each sampled token, "
        "exactly as reported; 0.0 where `loss_mask` is 0"
    )
    prompt_messages: list[dict[str, Any]] = Field(
        default_factory=list, description="the first call's request messages (chat format)"
    )
    response_message: dict[str, Any] | None = Field(
        default=None,
        description="the assistant message (this trace's choice) the last call answered",
    )
    tools: list[dict[str, Any]] | None = Field(
        default=None, description="the tool (function) schemas of the first call's request"
    )
    reward: float | None = Field(
        default=None,
        description="the trace's reward under `provenance.reward_policy`; None: not evaluated "
        "(never read as 0)",
    )
    status: SessionStatus | None = Field(
        default=None, description="the session's terminal status; None: not yet scored"
    )
    provenance: TraceProvenance = Field(
        description="where the trace came from (session, task, builder, calls)"
    )

    @model_validator(mode="after")
    def _aligned(self) -> Trace:
        n = len(self.response_ids)
        if len(self.loss_mask) != n or len(self.response_logprobs) != n:
            raise ValueError(
                f"trace {self.trace_id}: response_ids ({n}), loss_mask ({len(self.loss_mask)}) "
                f"and response_logprobs ({len(self.response_logprobs)}) must align"
            )
        return self
