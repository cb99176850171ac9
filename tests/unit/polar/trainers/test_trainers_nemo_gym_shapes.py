"""What Polar's NeMo Gym servers answer (polar/trainers/nemo_gym/shapes.py), without nemo-gym.

The servers validate these shapes with nemo-gym's own classes in `.venv-gym`
(tests/system/test_nemo_gym.py runs them through Gym's rollout collection); here, the task a
dataset row names and the one-message-per-model-call response, token ids exact.
"""

from __future__ import annotations

from typing import Any

import pytest

from polar.contracts import SessionResult, TaskResult
from polar.records import CompletionRecord, SessionStatus, Trace, TraceProvenance
from polar.trainers._sessions import SessionRun, Unscored, UnscoredBatch, require_scored
from polar.trainers.nemo_gym.shapes import (
    FAILURE_CLASS,
    FAILURE_KEY,
    call_item,
    failure_row,
    polar_fields,
    response,
    row_unscored,
    scored_rows,
    task_for_row,
)

TEMPLATE: dict[str, Any] = {
    "task_id": "gym",
    "harness": {"kind": "command", "command": "python agent.py"},
    "builder": {"name": "prefix_merging"},
}
USER = {"role": "user", "content": "write a haiku"}


def record(seq: int, prompt: list[int], sampled: list[int], text: str) -> CompletionRecord:
    return CompletionRecord(
        session_id="gym-1-s0",
        task_id="gym-1",
        seq=seq,
        record_id=f"r{seq}",
        request={},
        normalized_request={},
        response={"choices": [{"message": {"role": "assistant", "content": text}}]},
        model="policy",
        prompt_token_ids=prompt,
        response_token_ids=sampled,
        response_logprobs=[-0.5 - i / 3 for i in range(len(sampled))],
        started_at=1000.0 + seq,
        finished_at=1000.5 + seq,
    )


def trace(trace_id: str, records: list[CompletionRecord]) -> Trace:
    first = records[0]
    response_ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    for r in records:
        response_ids += r.response_token_ids or []
        mask += [1] * len(r.response_token_ids or [])
        logprobs += r.response_logprobs or []
    return Trace(
        trace_id=trace_id,
        prompt_ids=list(first.prompt_token_ids or []),
        response_ids=response_ids,
        loss_mask=mask,
        response_logprobs=logprobs,
        reward=1.0,
        provenance=TraceProvenance(
            session_id="gym-1-s0",
            task_id="gym-1",
            harness="command",
            builder="prefix_merging",
            model="policy",
            completion_seqs=[r.seq for r in records],
            record_ids=[r.record_id for r in records],
            policy_version=4,
        ),
    )


def session_run(traces: list[Trace]) -> SessionRun:
    session = SessionResult(
        session_id="gym-1-s0",
        task_id="gym-1",
        index=0,
        status=SessionStatus.COMPLETED,
        reward=1.0,
        harness="command",
        traces_key="sessions/gym-1-s0/traces/prefix_merging.jsonl",
    )
    task = TaskResult(task_id="gym-1", sessions=[session], policy_version=4)
    return SessionRun(task, "polar-task-gym-1", session, traces)


def test_a_row_names_its_task_by_polar_task_swe_instance_or_its_user_message() -> None:
    row = {"responses_create_params": {"input": [USER]}}
    spec = task_for_row(TEMPLATE, row, version=3)
    assert spec.instruction == "write a haiku" and spec.num_sessions == 1
    assert spec.policy_version == 3 and spec.task_id.startswith("gym-")
    row_task = {"instruction": "only this"}
    spec = task_for_row(TEMPLATE, row | {"polar_task": row_task, "policy_version": 9}, version=3)
    assert spec.instruction == "only this" and spec.policy_version == 9
    swe = {
        "instance_id": "acme__textkit-1",
        "repo": "acme/textkit",
        "base_commit": "abc1234",
        "problem_statement": "fix the bug",
        "FAIL_TO_PASS": ["tests/test_a.py::test_a"],
    }
    spec = task_for_row(TEMPLATE, row | {"swe_instance": swe}, version=None)
    assert spec.instruction == "fix the bug" and spec.evaluator.kind == "swebench"
    assert spec.harness.command == "python agent.py" and spec.builder.name == "prefix_merging"
    assert spec.task_id.startswith("acme__textkit-1-")
    with pytest.raises(ValueError, match="harness"):
        task_for_row({}, row | {"swe_instance": swe}, version=None)
    with pytest.raises(ValueError, match="polar_task"):
        task_for_row(None, row, version=None)


def test_the_response_has_one_message_per_trained_call_with_its_token_ids_in_chain_order() -> None:
    a, b = record(10, [1, 2], [5, 6, 7], "first"), record(20, [1, 2, 5, 6, 7, 8], [9], "second")
    c = record(15, [3], [4, 4], "side")  # a second chain whose first call came between
    unseen = record(30, [3], [1], "never trained")
    run = session_run([trace("t-side", [c]), trace("t-root", [a, b])])
    answer = response(run, [unseen, b, c, a], {"model": "asked", "input": [USER]})
    ids = [item["id"] for item in answer["output"]]
    assert ids == ["msg_r10", "msg_r20", "msg_r15"]  # root chain first, calls in order
    for item, rec in zip(answer["output"], [a, b, c], strict=True):
        assert item["prompt_token_ids"] == rec.prompt_token_ids
        assert item["generation_token_ids"] == rec.response_token_ids
        assert item["generation_log_probs"] == rec.response_logprobs
        assert item["content"][0]["text"] == call_text_of(rec)
    assert answer["model"] == "policy" and answer["created_at"] == a.started_at
    assert answer["metadata"] == {
        "polar_workflow_id": "polar-task-gym-1",
        "polar_session_id": "gym-1-s0",
    }
    fields = polar_fields(run)
    assert fields["trace_ids"] == ["t-root", "t-side"] and fields["policy_version"] == 4
    with pytest.raises(ValueError, match="no token ids"):
        call_item(a.model_copy(update={"response_token_ids": None}))


def call_text_of(rec: CompletionRecord) -> str:
    return {"r10": "first", "r20": "second", "r15": "side"}[rec.record_id]


def test_a_failure_row_carries_its_outcome_and_stays_out_of_the_aggregate() -> None:
    row = {"responses_create_params": {"input": [USER]}, "_ng_task_index": 2}
    prepare = Unscored("task_error", "prepare: PrepareFailed: exit 3")
    failed = failure_row(row, [("s0", prepare)], "policy")
    assert failed[FAILURE_KEY] == FAILURE_CLASS and failed["response"]["output"] == []
    assert failed["polar"] == {
        "outcome": "task_error",
        "left_out": "task_error: prepare: PrepareFailed: exit 3",
        "reasons": ["s0: task_error: prepare: PrepareFailed: exit 3"],
    }
    assert row_unscored(failed) == prepare
    scored = {"_ng_task_index": 0, "reward": 1.0}
    rows = [scored, failed]
    assert scored_rows(rows) == [scored]  # Gym's aggregate never sees its reward 0.0
    assert [row_unscored(r) for r in rows] == [None, prepare]
    require_scored([row_unscored(r) for r in rows])
    with pytest.raises(UnscoredBatch, match="0 of 1 sessions scored .* 1 × task_error"):
        require_scored([row_unscored(failed)])
    # a row Gym itself routed to its failures file, without Polar's fields
    assert row_unscored({FAILURE_KEY: "timeout_exceeded"}) == Unscored("timeout_exceeded")
