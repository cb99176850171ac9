"""Task specs by reference: store a large spec once (RolloutTask), read it back (stages).

See polar/tasks/spec_ref.py. `store_task_spec` runs on the shared init queue; the
stages that need the large fields call `with_instruction` / `with_evaluator`
on their request before they use it.
"""

from __future__ import annotations

import asyncio
import functools

from temporalio import activity

from polar.contracts import EvaluateRequest, HarnessRequest, SpecRef
from polar.storage import Storage
from polar.tasks.spec import TaskSpec
from polar.tasks.spec_ref import parse_spec, spec_ref


class TaskSpecActivities:
    """Store and load task specs in the worker's S3 bucket."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    @activity.defn(name="store_task_spec")
    async def store_task_spec(self, task: TaskSpec) -> SpecRef:
        """Store the full spec (idempotent: the key names its digest); return its reference."""
        ref, data = spec_ref(task)
        await asyncio.to_thread(self.storage.put_bytes, ref.key, data, "application/json")
        return ref

    async def load(self, ref: SpecRef) -> TaskSpec:
        """The stored spec of `ref`, digest checked (cached: one task's stages share it)."""
        return await asyncio.to_thread(_load, self.storage, ref.key, ref.sha256, ref.size)

    async def with_instruction(self, request: HarnessRequest) -> HarnessRequest:
        """`request` with the instruction it left in S3 (unchanged without a reference)."""
        if request.spec_ref is None:
            return request
        task = await self.load(request.spec_ref)
        instruction = task.step(request.step).instruction if request.step else task.instruction
        return request.model_copy(update={"instruction": instruction, "spec_ref": None})

    async def with_evaluator(self, request: EvaluateRequest) -> EvaluateRequest:
        """`request` with the full evaluator (test patch) it left in S3."""
        if request.spec_ref is None:
            return request
        task = await self.load(request.spec_ref)
        evaluator = task.evaluator
        if request.step:  # a step's own evaluator, else the task's
            evaluator = task.step(request.step).evaluator or evaluator
        instruction = task.instruction if evaluator.rubric is not None else None
        return request.model_copy(
            update={"evaluator": evaluator, "instruction": instruction, "spec_ref": None}
        )


@functools.lru_cache(maxsize=64)
def _load_cached(storage: Storage, key: str, sha256: str, size: int) -> TaskSpec:
    ref = SpecRef(key=key, sha256=sha256, size=size)
    return parse_spec(ref, storage.get_bytes(key))


def _load(storage: Storage, key: str, sha256: str, size: int) -> TaskSpec:
    # a copy: callers may not change the cached spec
    return _load_cached(storage, key, sha256, size).model_copy(deep=True)
