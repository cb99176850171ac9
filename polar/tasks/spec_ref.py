"""Large TaskSpec fields by reference: stored once per task in S3, not in every history.

A SWE-bench task's instruction and test patch can be tens of kilobytes; every
Session child's input and every run and evaluate call would carry them. Above
`SPEC_INLINE_LIMIT` (the spec's JSON size) the RolloutTask stores the full spec
in S3 once (`tasks/{task_id}/spec-{sha256}.json`, an activity), and hands its
children a slim copy (`slim_spec`: no instruction, no test patch, no metadata)
plus a `SpecRef`. The activities that need the large fields (`run_harness`:
the instruction; `evaluate`: the evaluator's test patch) load the spec back
and check its digest (`load_spec`).
"""

from __future__ import annotations

import hashlib

from polar.contracts import SpecRef
from polar.tasks.spec import TaskSpec

SPEC_INLINE_LIMIT = 16 * 1024
"""Specs whose JSON is larger than this many bytes go by reference."""


class SpecDigestMismatch(RuntimeError):
    """The stored spec is not the one the task referenced."""


def spec_json(task: TaskSpec) -> bytes:
    """The spec's canonical JSON: what is stored, hashed and measured."""
    return task.model_dump_json().encode()


def spec_key(task_id: str, sha256: str) -> str:
    """One key per task and content: a resubmitted task with other fields gets its own."""
    return f"tasks/{task_id}/spec-{sha256}.json"


def spec_ref(task: TaskSpec) -> tuple[SpecRef, bytes]:
    """The reference of `task` and the bytes to store under it."""
    data = spec_json(task)
    digest = hashlib.sha256(data).hexdigest()
    return SpecRef(key=spec_key(task.task_id, digest), sha256=digest, size=len(data)), data


def slim_spec(task: TaskSpec) -> TaskSpec:
    """`task` without its large fields: what Session children and stage calls carry."""
    evaluator = task.evaluator
    if evaluator.swebench is not None and evaluator.swebench.get("test_patch"):
        evaluator = evaluator.model_copy(
            update={"swebench": {**evaluator.swebench, "test_patch": ""}}
        )
    steps = [  # their instructions too; the activities read a step's by its name
        step.model_copy(update={"instruction": "-"}) for step in task.steps
    ]
    return task.model_copy(
        update={"instruction": "", "evaluator": evaluator, "metadata": {}, "steps": steps}
    )


def parse_spec(ref: SpecRef, data: bytes) -> TaskSpec:
    """The stored spec, checked against its reference's digest."""
    digest = hashlib.sha256(data).hexdigest()
    if digest != ref.sha256:
        raise SpecDigestMismatch(
            f"task spec at {ref.key} has sha256 {digest}, the task referenced {ref.sha256}"
        )
    return TaskSpec.model_validate_json(data)
