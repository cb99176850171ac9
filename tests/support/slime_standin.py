"""slime's `Sample` and its data source's grouping, where slime itself does not import.

slime is not on PyPI (the name there is another project), so CI cannot import it. Where a slime
checkout is on PYTHONPATH (`slime.utils.types` imports), `slime_api()` hands out slime's own
`Sample`, `RolloutFnTrainOutput` and `validate_rollout_id_annotated`; elsewhere a stand-in whose
fields are exactly slime's documented ones (`polar.trainers.slime_layout.SLIME_SAMPLE_FIELDS`,
THUDM/slime 624b824a `slime/utils/types.py`) and whose statuses are `SLIME_STATUSES`. The
stand-in is a schema check, not slime: it has no behaviour beyond `to_dict` and `from_dict`.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from polar.trainers.slime_layout import SLIME_SAMPLE_FIELDS, SLIME_STATUSES


@dataclass
class StandInSample:
    """slime's `Sample` fields at 624b824a, with their defaults (no behaviour)."""

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    multimodal_inputs: dict[str, Any] | None = None
    multimodal_train_inputs: dict[str, Any] | None = None
    multimodal_train_input_id: str | None = None
    apply_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    rollout_top_p_token_ids: list[int] | None = None
    rollout_top_p_token_offsets: list[int] | None = None
    rollout_routed_experts: list[list[int]] | None = None
    remove_sample: bool = False
    teacher_log_probs: list[float] | None = None

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict[str, Any] = field(default_factory=dict)
    generate_function_path: str | None = None
    custom_rm_path: str | None = None
    train_metadata: dict[str, Any] | None = None
    session_id: str | None = None
    non_generation_time: float = 0.0
    spec_info: dict[str, Any] = field(default_factory=dict)
    prefix_cache_info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        value = dict(self.__dict__)
        value["status"] = self.status.value
        return value

    @staticmethod
    def from_dict(data: dict[str, Any]) -> StandInSample:
        data = dict(data)
        data["status"] = StandInSample.Status(data["status"])
        return StandInSample(**data)


assert {f.name for f in dataclasses.fields(StandInSample)} == SLIME_SAMPLE_FIELDS
assert {s.value for s in StandInSample.Status} == SLIME_STATUSES


@dataclass
class SlimeApi:
    """The slime names a rollout check uses: slime's own, or the stand-in's."""

    sample: Any
    validate_rollout_id_annotated: Callable[[Any], None] | None
    train_output: Any | None
    real: bool


def slime_api() -> SlimeApi:
    """slime's own classes where a slime checkout imports, else the stand-in."""
    try:
        from slime.observability.rollout_data_utils import validate_rollout_id_annotated
        from slime.rollout.base_types import RolloutFnTrainOutput
        from slime.utils.types import Sample
    except ImportError:
        return SlimeApi(StandInSample, None, None, real=False)
    return SlimeApi(Sample, validate_rollout_id_annotated, RolloutFnTrainOutput, real=True)


class GroupingSource:
    """slime's `RolloutDataSource.get_samples` grouping (624b824a) over in-memory prompts: each
    prompt copied `n_samples_per_prompt` times, `group_index` per prompt, `index` per sample."""

    def __init__(
        self,
        sample_class: Any,
        prompts: list[Any],
        n_samples_per_prompt: int,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.sample_class = sample_class
        self.prompts = prompts
        self.n = n_samples_per_prompt
        self.metadata = metadata or {}
        self.offset = self.group_index = self.index = 0

    def get_samples(self, num_samples: int) -> list[list[Any]]:
        groups = []
        for _ in range(num_samples):
            prompt = self.prompts[self.offset % len(self.prompts)]
            self.offset += 1
            base = self.sample_class(prompt=prompt, metadata=copy.deepcopy(self.metadata))
            group = []
            for _ in range(self.n):
                sample = copy.deepcopy(base)
                sample.group_index = self.group_index
                sample.index = self.index
                self.index += 1
                group.append(sample)
            self.group_index += 1
            groups.append(group)
        return groups
