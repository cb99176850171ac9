"""Gym's shapes of a Polar session, as plain JSON (no `nemo_gym` import: `servers.py` validates
them with nemo-gym's own pydantic classes).

A dataset row names its task one of three ways, in this order: `polar_task` (TaskSpec fields over
the agent's template), `swe_instance` (a SWE-bench-style instance, graded by its tests with the
template's harness), or only `responses_create_params.input` (the template with the last user
message as its instruction). The answer's `response` is a Responses-API response whose `output`
holds one assistant message per model call Polar trained on, in the order of the session's chains
and their calls, each carrying that call's `prompt_token_ids`, `generation_token_ids` and
`generation_log_probs` exactly as the gateway recorded them (nemo-gym's
`NeMoGymResponseOutputMessageForTraining`), and `metadata` naming the Polar session.

A row with no trainable session is a failure row (`failure_row`): Gym's failure class
`polar_untrainable`, the outcome label and reason of each try under `polar`; `scored_rows`
leaves such rows out of what Gym aggregates, and `row_unscored` reads their reason back.
"""

from __future__ import annotations

import time
from typing import Any

from polar.records import CompletionRecord
from polar.tasks.spec import TaskSpec
from polar.tasks.swe import SweInstance, instance_to_task
from polar.trainers._sessions import SessionRun, Unscored, chains, row_task, task_with

POLAR_KEY = "polar"
"""The key of Polar's provenance in a Gym answer (and of its reference in `response.metadata`)."""
FAILURE_CLASS = "polar_untrainable"
"""Gym's `_ng_failure_class` of a row with no trainable session."""
FAILURE_KEY = "_ng_failure_class"
"""Gym's key (nemo_gym.rollout_collection.NG_FAILURE_CLASS_KEY) routing a row to its failures
file, and here out of its aggregate."""


def task_for_row(
    template: dict[str, Any] | None, row: dict[str, Any], *, version: int | None
) -> TaskSpec:
    """One session's task for a Gym dataset row (see the module docstring)."""
    params = row.get("responses_create_params") or {}
    version = row.get("policy_version", version)
    fields: dict[str, Any] = {
        "num_sessions": 1,
        "policy_version": None if version is None else int(version),
    }
    if row.get("swe_instance"):
        base = dict(template or {})
        if "harness" not in base:
            raise ValueError(
                "a swe_instance row needs the agent's `task` template to name a harness"
            )
        instance = SweInstance.model_validate(row["swe_instance"])
        extra = {k: v for k, v in base.items() if k in ("builder", "timeouts", "runtime")}
        spec = instance_to_task(instance, harness=base["harness"], **extra)
        return task_with(spec, **fields)
    where = "`task` in the Polar agent's Gym config or a row's `polar_task`"
    spec_data = row_task(template, row.get("polar_task"), params.get("input"), where=where)
    return task_with(spec_data, **fields)


def call_text(record: CompletionRecord) -> str:
    """The text choice 0 of a model call answered ("" for a tool call only)."""
    choices = (record.response or {}).get("choices") or [{}]
    content = (choices[0].get("message") or {}).get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def trained_calls(run: SessionRun, records: list[CompletionRecord]) -> list[CompletionRecord]:
    """The model calls the session's traces train on, chain by chain, in call order."""
    by_id = {r.record_id: r for r in records}
    out: list[CompletionRecord] = []
    for trace in chains(run.traces):
        members = [by_id[rid] for rid in trace.provenance.record_ids]
        out += sorted(members, key=lambda r: r.seq)
    return out


def call_item(record: CompletionRecord) -> dict[str, Any]:
    """One model call as a Responses-API assistant message with its token ids (for training)."""
    if record.prompt_token_ids is None or record.response_token_ids is None:
        raise ValueError(f"model call {record.record_id} has no token ids")
    return {
        "id": f"msg_{record.record_id}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": call_text(record), "annotations": []}],
        "prompt_token_ids": list(record.prompt_token_ids),
        "generation_token_ids": list(record.response_token_ids),
        "generation_log_probs": list(record.response_logprobs or []),
    }


def polar_fields(run: SessionRun) -> dict[str, Any]:
    """What the answer says about the Polar session (and what /verify reads the grade by)."""
    session = run.session
    ordered = chains(run.traces)
    return {
        "workflow_id": run.workflow_id,
        "task_id": session.task_id,
        "session_id": session.session_id,
        "status": session.status.value,
        "reward": session.reward,
        "policy_version": run.task.policy_version,
        "traces_key": session.traces_key,
        "trace_ids": [t.trace_id for t in ordered],
        "stage_seconds": dict(session.stage_seconds),
    }


def response(
    run: SessionRun, records: list[CompletionRecord], params: dict[str, Any]
) -> dict[str, Any]:
    """The session as a Responses-API response (nemo-gym's `NeMoGymResponse`)."""
    calls = trained_calls(run, records)
    items = [call_item(r) for r in calls]
    return {
        "id": f"resp_{run.session.session_id}",
        "object": "response",
        "created_at": float(calls[0].started_at if calls else time.time()),
        "model": (calls[0].model if calls else None) or params.get("model") or "policy",
        "output": items,
        "parallel_tool_calls": bool(params.get("parallel_tool_calls", True)),
        "tool_choice": params.get("tool_choice", "auto"),
        "tools": list(params.get("tools") or []),
        "metadata": {
            f"{POLAR_KEY}_workflow_id": run.workflow_id,
            f"{POLAR_KEY}_session_id": run.session.session_id,
        },
    }


def failure_row(
    row: dict[str, Any], tries: list[tuple[str, Unscored]], model: str
) -> dict[str, Any]:
    """Gym's answer for a row with no trainable session after its `tries` (session id, why):
    routed to Gym's failures file, its `polar` naming the last try's outcome label and reason
    and every try's. `reward` is 0.0 only because Gym's schema wants a float: `scored_rows`
    keeps the row out of Gym's aggregate."""
    last = tries[-1][1] if tries else Unscored("no session ran")
    empty = {
        "id": "resp_polar_untrainable",
        "object": "response",
        "created_at": 0.0,
        "model": model,
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    return row | {
        "response": empty,
        "reward": 0.0,
        FAILURE_KEY: FAILURE_CLASS,
        POLAR_KEY: {
            "outcome": last.label,
            "left_out": str(last),
            "reasons": [f"{sid}: {why}" for sid, why in tries],
        },
    }


def row_unscored(row: dict[str, Any]) -> Unscored | None:
    """Why a verify response Gym collected is not a scored row (None: it is)."""
    failure = row.get(FAILURE_KEY)
    if failure is None:
        return None
    polar = row.get(POLAR_KEY) or {}
    label = polar.get("outcome") or str(failure)
    left_out = str(polar.get("left_out") or label)
    return Unscored(label, left_out.removeprefix(f"{label}: ") if left_out != label else "")


def scored_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows Gym's aggregate may count: those not routed to its failures file."""
    return [row for row in rows if row.get(FAILURE_KEY) is None]
