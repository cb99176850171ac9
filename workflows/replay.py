"""Replay-based debugging: run a recorded history against today's workflow code.

A workflow change that would break running sessions (non-determinism) shows
up here before it ships: `polar replay <workflow-id | history.json>` and the
CI test that replays stored histories both use this module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.rollout_task import RolloutTask, SessionBatch
from workflows.session import Session


@dataclass
class ReplayReport:
    workflow_id: str
    workflow_type: str
    events: int
    ok: bool
    explanation: str


def load_history(path: Path) -> WorkflowHistory:
    """A history saved as JSON (`temporal workflow show -o json` or `polar replay --save`)."""
    data = json.loads(path.read_text())
    workflow_id = data.get("workflowId") or path.stem
    return WorkflowHistory.from_json(workflow_id, data)


async def fetch_history(client: Client, workflow_id: str) -> WorkflowHistory:
    return await client.get_workflow_handle(workflow_id).fetch_history()


def save_history(history: WorkflowHistory, path: Path) -> None:
    data = json.loads(history.to_json())
    data["workflowId"] = history.workflow_id
    path.write_text(json.dumps(data, indent=1))


WORKFLOWS: list[type] = [RolloutTask, SessionBatch, Session]


async def replay(history: WorkflowHistory, workflows: list[type] | None = None) -> ReplayReport:
    """Replay one history; never raises for a replay failure, explains it instead."""
    replayer = Replayer(workflows=workflows or WORKFLOWS, data_converter=pydantic_data_converter)
    started = history.events[0].workflow_execution_started_event_attributes
    kind = started.workflow_type.name
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    if result.replay_failure is None:
        return ReplayReport(history.workflow_id, kind, len(history.events), True, "deterministic")
    failure = result.replay_failure
    explanation = f"{type(failure).__name__}: {failure}"
    if "Nondeterminism" in type(failure).__name__ or "nondetermin" in str(failure).lower():
        explanation += (
            "\nToday's workflow code issues different commands than the recorded run did at "
            "that event; guard the change with workflow.patched() or ship it under a new "
            "workflow type so running sessions keep their old code path."
        )
    return ReplayReport(history.workflow_id, kind, len(history.events), False, explanation)
