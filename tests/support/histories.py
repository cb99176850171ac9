"""Reading a workflow's history in tests: what its activities did, in order."""

from __future__ import annotations

from temporalio.client import Client


async def activity_order(client: Client, workflow_id: str) -> list[tuple[str, str]]:
    """(event, activity) of each activity scheduled or completed, in history order."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    names: dict[int, str] = {}
    order = []
    for e in history.events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
            order.append(("scheduled", names[e.event_id]))
        elif e.HasField("activity_task_completed_event_attributes"):
            sid = e.activity_task_completed_event_attributes.scheduled_event_id
            order.append(("completed", names[sid]))
    return order
