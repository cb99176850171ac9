"""A 'refactor' of Session that skips straight to trajectory building: not replay-safe.

Kept in its own module with workflow-safe imports, as workflow code must be.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import polar.builders  # noqa: F401  (TaskSpec validation looks builders up)
    from polar.contracts import SessionResult, SessionSpec


@workflow.defn(name="Session")
class ReorderedSession:
    @workflow.run
    async def run(self, spec: SessionSpec) -> SessionResult:
        await workflow.execute_activity(
            "build_trajectory", spec.session_id, start_to_close_timeout=timedelta(seconds=5)
        )
        raise AssertionError("unreachable in replay")
