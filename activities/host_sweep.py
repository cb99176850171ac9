"""A host's sweep: remove its runtimes whose sessions are no longer running.

A session's runtime (container, work dir) lives on the host that prepared it.
If that host dies, the session goes on elsewhere (workflows/session.py) and the
runtime is left behind; a teardown sent to the host's queue while the session
still runs removes it when the host comes back (`release_runtime`). What is
left after that (the session closed while the host was away, or a worker killed
mid-prepare) is found here: at worker start and every `sweep_interval_s`, each
runtime of this host whose Session workflow is closed or unknown to Temporal is
torn down. Runtimes of running sessions are never touched.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from activities.pool_activities import worker_runtime
from activities.runtimes.selection import sweep_kinds
from polar.contracts import RuntimeHandle
from polar.settings import WorkerSettings

log = logging.getLogger("polar.worker")

FRESH_SUFFIXES = ("-eval", "-reward", "-control")
"""The id suffixes of a session's fresh runtimes (the evaluator's, a reward_command's, a
control grading's): each belongs to the session its id names without it."""


def owning_session(runtime_id: str) -> str:
    """The session a runtime id belongs to: its own id, `FRESH_SUFFIXES` off (a control's
    reward_command runtime is `{session}-control-reward`)."""
    while True:
        for suffix in FRESH_SUFFIXES:
            if runtime_id.endswith(suffix):
                runtime_id = runtime_id.removesuffix(suffix)
                break
        else:
            return runtime_id


@dataclass
class SweepReport:
    """What one sweep saw: session ids kept (running) and removed, by runtime kind."""

    kept: dict[str, list[str]] = field(default_factory=dict)
    removed: dict[str, list[str]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


async def session_running(client: Client, workflow_id: str) -> bool:
    """Whether the Session workflow `workflow_id` is running (unknown to Temporal: no)."""
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return description.status == WorkflowExecutionStatus.RUNNING


async def sweep_host(
    client: Client, settings: WorkerSettings, kinds: tuple[str, ...] | None = None
) -> SweepReport:
    """Tear down this host's runtimes of sessions that are not running; a kind whose
    engine does not answer is skipped (and said so in the report)."""

    async def closed(session_id: str) -> bool:
        return not await session_running(client, owning_session(session_id))

    report = await _remove_runtimes(settings, kinds, closed)
    if report.removed:
        log.warning(
            "sweep on host %s removed runtimes of closed sessions: %s",
            settings.host_id,
            report.removed,
        )
    return report


async def release_host(
    settings: WorkerSettings, kinds: tuple[str, ...] | None = None
) -> SweepReport:
    """Tear down every runtime of this host, running sessions' too: the host is going away
    (a Slurm job's end), and those sessions are re-placed elsewhere."""

    async def always(_session_id: str) -> bool:
        return True

    return await _remove_runtimes(settings, kinds, always)


async def _remove_runtimes(
    settings: WorkerSettings,
    kinds: tuple[str, ...] | None,
    removable: Callable[[str], Awaitable[bool]],
) -> SweepReport:
    report = SweepReport()
    for kind in kinds or sweep_kinds():
        runtime = worker_runtime(kind, settings)
        try:
            sessions = await runtime.list_sessions()
        except Exception as exc:  # noqa: BLE001 - no engine here: nothing of it to sweep
            report.skipped[kind] = f"{type(exc).__name__}: {exc}"
            continue
        for session_id in sorted(sessions):
            if not await removable(session_id):
                report.kept.setdefault(kind, []).append(session_id)
                continue
            bare = RuntimeHandle(
                kind=kind,
                session_id=session_id,
                workdir="",
                host=settings.host_id,
                host_id=settings.host_id,
            )
            try:
                await runtime.teardown(bare)
            except Exception as exc:  # noqa: BLE001 - the next sweep tries again
                log.warning("sweep: removing %s runtime %s failed: %s", kind, session_id, exc)
                continue
            report.removed.setdefault(kind, []).append(session_id)
    return report


async def sweep_forever(client: Client, settings: WorkerSettings) -> None:
    """Sweep now, then every `settings.sweep_interval_s` (0: only now)."""
    while True:
        try:
            await sweep_host(client, settings)
        except Exception as exc:  # noqa: BLE001 - Temporal unreachable for a while
            log.warning("sweep on host %s failed: %s", settings.host_id, exc)
        if settings.sweep_interval_s <= 0:
            return
        await asyncio.sleep(settings.sweep_interval_s)
