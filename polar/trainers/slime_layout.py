"""slime's row layout of `polar export` (`slime.jsonl`), beside its rollout function (slime.py).

One `slime.utils.types.Sample.to_dict()` per line (`Sample.from_dict(json.loads(line))`
reloads it): `tokens`, `response_length`, `loss_mask` (response part), `rollout_log_probs`
(exact), `reward` (None: not evaluated), `weight_versions` (`[policy_version]`), `status`,
`group_index` (the task), `rollout_id` (the session: slime averages a rollout's samples
together), `index`, `session_id`, `metadata` (provenance).
"""

from __future__ import annotations

from typing import Any

from polar.client.sft import message_text
from polar.records import SessionStatus, Trace
from polar.trainers.provenance import provenance_fields

SLIME_JSONL = "slime.jsonl"

SLIME_SAMPLE_FIELDS = frozenset(
    {
        "group_index",
        "index",
        "rollout_id",
        "prompt",
        "tokens",
        "multimodal_inputs",
        "multimodal_train_inputs",
        "multimodal_train_input_id",
        "apply_chat_template_kwargs",
        "response",
        "response_length",
        "label",
        "reward",
        "loss_mask",
        "weight_versions",
        "rollout_log_probs",
        "rollout_top_p_token_ids",
        "rollout_top_p_token_offsets",
        "rollout_routed_experts",
        "remove_sample",
        "teacher_log_probs",
        "status",
        "metadata",
        "generate_function_path",
        "custom_rm_path",
        "train_metadata",
        "session_id",
        "non_generation_time",
        "spec_info",
        "prefix_cache_info",
    }
)
"""slime's documented `Sample` fields (THUDM/slime 624b824a, slime/utils/types.py), which a
slime row may use: slime is not on PyPI (the name there is another project), so exports are
checked against this schema (tests/integration/test_export.py, scripts/check_trainer_layouts.py)."""
SLIME_STATUSES = frozenset({"pending", "completed", "truncated", "aborted", "failed"})
"""slime's `Sample.Status` values at the same commit."""

SLIME_STATUS = {
    SessionStatus.COMPLETED: "completed",
    SessionStatus.HARNESS_FAILED: "failed",
    SessionStatus.TIMEOUT: "failed",
    SessionStatus.ERROR: "aborted",
    SessionStatus.CANCELLED: "aborted",
}
"""Session status → slime `Sample.Status`: a failed or timed-out harness left real output
(slime's FAILED: "may still contain partial valid output"); no evaluation → ABORTED."""


class Ordinals:
    """Small integers for string keys, in order of first appearance (slime's int ids)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}

    def __call__(self, key: str) -> int:
        return self._ids.setdefault(key, len(self._ids))


def slime_row(
    trace: Trace, *, index: int, group_index: int, rollout_id: int, response_text: str
) -> dict[str, Any]:
    """The trace as slime's `Sample.to_dict()` (see the module docstring)."""
    p = len(trace.prompt_ids)
    prov = trace.provenance
    return {
        "group_index": group_index,
        "index": index,
        "rollout_id": rollout_id,
        "prompt": list(trace.prompt_messages),
        "tokens": [*trace.prompt_ids, *trace.response_ids],
        "response": response_text,
        "response_length": len(trace.response_ids),
        "label": None,
        "reward": trace.reward,
        "loss_mask": list(trace.loss_mask),
        "weight_versions": [] if prov.policy_version is None else [str(prov.policy_version)],
        "rollout_log_probs": list(trace.response_logprobs),
        "remove_sample": False,
        "status": SLIME_STATUS.get(trace.status, "pending") if trace.status else "pending",
        "metadata": {**provenance_fields(trace), "prompt_length": p},
        "session_id": prov.session_id,
    }


class SlimeRows:
    """An export's slime rows, trace by trace: `index` counts the traces, `group_index` and
    `rollout_id` number tasks and sessions in order of first appearance."""

    def __init__(self) -> None:
        self._index = 0
        self._group, self._rollout = Ordinals(), Ordinals()

    def __call__(self, trace: Trace) -> dict[str, Any]:
        prov = trace.provenance
        single = len(prov.record_ids) == 1 and trace.response_message is not None
        text = message_text((trace.response_message or {}).get("content")) if single else ""
        row = slime_row(
            trace,
            index=self._index,
            group_index=self._group(prov.task_id),
            rollout_id=self._rollout(prov.session_id),
            response_text=text,
        )
        self._index += 1
        return row
