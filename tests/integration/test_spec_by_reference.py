"""Large TaskSpec fields by reference (polar/tasks/spec_ref.py): stored once in S3, not in
histories.

A task whose spec is larger than SPEC_INLINE_LIMIT runs on the real dev stack:
its Session children carry a slim spec and a reference, the harness still gets
the whole instruction (read back from S3 by `run_harness`), and a child's
history stays far smaller than the instruction.
"""

from __future__ import annotations

import hashlib
import json
import uuid

import pytest

from activities.spec_store import TaskSpecActivities
from polar.client.sdk import PolarClient
from polar.contracts import EvaluateRequest, HarnessRequest, RuntimeHandle, SpecRef
from polar.records import SessionStatus
from polar.storage import Storage
from polar.tasks.spec import TaskSpec
from polar.tasks.spec_ref import (
    SPEC_INLINE_LIMIT,
    SpecDigestMismatch,
    parse_spec,
    slim_spec,
    spec_json,
    spec_ref,
)

BIG = 40 * 1024  # an instruction the size of a long SWE-bench problem statement


def swe_task(test_patch: str = "diff --git a/t.py b/t.py\n" + "+x\n" * 20_000) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "task_id": f"swe-{uuid.uuid4().hex[:6]}",
            "instruction": "fix it " * 5000,
            "harness": {"command": "true"},
            "evaluator": {
                "kind": "swebench",
                "swebench": {
                    "instance_id": "x__y-1",
                    "base_commit": "abcdef1",
                    "test_patch": test_patch,
                    "fail_to_pass": ["t.py::test_x"],
                },
            },
            "metadata": {"problem": "p" * 10_000},
        }
    )


def test_slim_spec_drops_only_the_large_fields() -> None:
    task = swe_task()
    slim = slim_spec(task)
    assert slim.instruction == "" and slim.metadata == {}
    assert slim.evaluator.swebench is not None and slim.evaluator.swebench["test_patch"] == ""
    assert slim.evaluator.swebench["base_commit"] == "abcdef1"  # the prewarm still needs it
    assert slim.num_sessions == task.num_sessions and slim.harness == task.harness
    assert len(spec_json(slim)) < 2048 < SPEC_INLINE_LIMIT < len(spec_json(task))
    assert task.instruction  # the original is untouched


def test_reference_names_task_and_digest_and_rejects_other_bytes() -> None:
    task = swe_task()
    ref, data = spec_ref(task)
    assert ref.sha256 == hashlib.sha256(data).hexdigest() and ref.size == len(data)
    assert ref.key == f"tasks/{task.task_id}/spec-{ref.sha256}.json"
    assert parse_spec(ref, data) == task
    tampered = json.loads(data) | {"instruction": "something else"}
    with pytest.raises(SpecDigestMismatch, match=ref.sha256):
        parse_spec(ref, json.dumps(tampered).encode())


async def test_stages_read_the_large_fields_back_from_s3(storage: Storage) -> None:
    task = swe_task()
    specs = TaskSpecActivities(storage)
    ref = await specs.store_task_spec(task)
    assert storage.exists(ref.key)
    slim = slim_spec(task)
    handle = RuntimeHandle(kind="local", session_id="s", workdir="/w", host="h")
    harness = HarnessRequest(
        session_id="s",
        task_id=task.task_id,
        runtime=handle,
        harness=slim.harness,
        instruction=slim.instruction,
        budget_s=10,
        spec_ref=ref,
    )
    assert (await specs.with_instruction(harness)).instruction == task.instruction
    evaluate = EvaluateRequest(
        session_id="s",
        task_id=task.task_id,
        runtime=handle,
        evaluator=slim.evaluator,
        budget_s=10,
        spec_ref=ref,
    )
    full = await specs.with_evaluator(evaluate)
    assert full.evaluator == task.evaluator and full.spec_ref is None
    # no reference: the request is used as it came
    inline = harness.model_copy(update={"spec_ref": None, "instruction": "inline"})
    assert (await specs.with_instruction(inline)).instruction == "inline"
    # a reference whose object was replaced fails loudly rather than run another task
    bad = SpecRef(key=ref.key, sha256="0" * 64, size=ref.size)
    with pytest.raises(SpecDigestMismatch):
        await specs.with_instruction(harness.model_copy(update={"spec_ref": bad}))


@pytest.mark.slow
async def test_large_instruction_goes_by_reference_and_reaches_the_harness(
    polar: PolarClient, storage: Storage
) -> None:
    instruction = "".join(f"line {i:06d} of a long problem statement\n" for i in range(1100))
    assert len(instruction) > BIG
    task = TaskSpec.model_validate(
        {
            "task_id": f"bigspec-{uuid.uuid4().hex[:6]}",
            "instruction": instruction,
            "num_sessions": 2,
            "harness": {"command": 'printf %s "$POLAR_INSTRUCTION" | sha256sum > got.txt'},
            "evaluator": {
                "kind": "command",
                "command": f"grep -q {hashlib.sha256(instruction.encode()).hexdigest()} got.txt",
            },
        }
    )
    run = await polar.submit(task)
    result = await polar.wait(run, timeout_s=180)
    assert [s.status for s in result.sessions] == [SessionStatus.COMPLETED] * 2
    assert [s.reward for s in result.sessions] == [1.0, 1.0]  # the harness got it whole
    ref, _ = spec_ref(task)
    assert parse_spec(ref, storage.get_bytes(ref.key)) == task
    for session in result.sessions:
        desc = await polar.client.get_workflow_handle(session.session_id).describe()
        size = desc.raw_description.workflow_execution_info.history_size_bytes
        assert 0 < size < len(instruction) // 2, size  # the instruction is not in it
        history = await polar.client.get_workflow_handle(session.session_id).fetch_history()
        assert "line 000999" not in history.to_json()


@pytest.mark.slow
async def test_a_multi_step_tasks_instructions_go_by_reference_step_by_step(
    polar: PolarClient,
) -> None:
    """Each step's harness gets its own instruction (read back from S3 by its name) and is
    graded by its own evaluator: steps are not Harbor's alone."""
    padding = "".join(f"line {i:05d} of the step's long statement\n" for i in range(500))
    steps = [
        {
            "name": name,
            "instruction": f"step {name}\n{padding}",
            "evaluator": {"kind": "command", "command": f"grep -qx 'step {name}' got-{name}.txt"},
        }
        for name in ("first", "second")
    ]
    task = TaskSpec.model_validate(
        {
            "task_id": f"bigsteps-{uuid.uuid4().hex[:6]}",
            "harness": {
                "command": 'printf %s "$POLAR_INSTRUCTION" | head -n 1 > got-$POLAR_STEP.txt'
            },
            "evaluator": {"kind": "command", "command": "true"},
            "steps": steps,
        }
    )
    assert len(spec_json(task)) > SPEC_INLINE_LIMIT
    assert [s.instruction for s in slim_spec(task).steps] == ["-", "-"]
    result = await polar.wait(await polar.submit(task), timeout_s=180)
    (session,) = result.sessions
    assert session.status == SessionStatus.COMPLETED, session.error
    assert [(s.name, s.reward) for s in session.steps] == [("first", 1.0), ("second", 1.0)]
    assert session.reward == 1.0
    history = await polar.client.get_workflow_handle(session.session_id).fetch_history()
    assert "line 00499" not in history.to_json()
