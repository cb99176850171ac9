"""The trainer SDK: submit tasks, follow them, fetch their traces from S3.

    async with await PolarClient.connect() as polar:
        run = await polar.submit(TaskSpec(...))
        result = await polar.wait(run)
        for session in result.sessions:
            traces = polar.load_traces(session)

Asynchronous RL: submit many tasks, then consume each group as it finishes,
dropping groups sampled by a policy older than the trainer accepts:

    runs = [await polar.submit(spec) for spec in specs]
    async for group in polar.iter_groups(runs, load_traces=True,
                                         min_policy_version=lambda: version - 1):
        train_on(group.traces)

Results carry S3 keys and small summaries; traces are read from S3 directly,
never through Temporal history.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import Priority
from temporalio.service import RPCError

from polar.advantages import group_rewards
from polar.builders import check_builder
from polar.client.submit_checks import (
    NoSourceWarning,
    check_gpu_workers,
    checked_workflow_id,
    missing_source,
)
from polar.console_links import console_memo, task_link
from polar.contracts import SessionProgress, SessionResult, Stage, TaskResult
from polar.dev_console import dev_console_url
from polar.records import OutcomeClass, SessionStatus, Trace
from polar.search_attributes import STAGE, STATUS
from polar.settings import ClientSettings, get_settings
from polar.tasks.spec import TaskSpec
from polar.temporal_client import connect

if TYPE_CHECKING:
    from polar.storage import Storage


@dataclass(frozen=True)
class TaskRun:
    """One submission of a task: its RolloutTask workflow."""

    task_id: str
    workflow_id: str


@dataclass
class Group:
    """One finished task (a GRPO group), as `PolarClient.iter_groups` yields it.

    `result` is None when the task's workflow failed or was cancelled (`error`
    says why). `traces` holds every session's traces when they were loaded
    (stale ones filtered out), in session order, but for sessions that ended
    `infra_error` (polar/outcomes.py): the stack failed them, they are no verdict
    on the policy, and `left_out` names them with their outcome.
    """

    run: TaskRun
    result: TaskResult | None
    error: str | None = None
    traces: list[Trace] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)
    """Sessions whose traces were not loaded: session id → outcome label and detail."""

    @property
    def policy_version(self) -> int | None:
        return self.result.policy_version if self.result else None

    def rewards(self, rule: str = "shrink") -> dict[str, float | None]:
        """Each session's reward for the group's advantages (`polar.advantages.
        trace_advantages(group.traces, group.rewards(rule))`) under the task's
        `infra_errors.group` rule: infra and task errors None, all None under `drop`."""
        return group_rewards(self.result.sessions, rule) if self.result else {}


log = logging.getLogger("polar.client.sdk")


@dataclass
class TaskStatus:
    workflow_id: str
    status: str
    total: int
    done: int
    sessions: list[SessionProgress]


class PolarClient:
    """Submit rollout tasks and collect their results."""

    def __init__(
        self, client: Client, settings: ClientSettings, storage: Storage | None = None
    ) -> None:
        self.client = client
        self.settings = settings
        self._storage = storage

    @property
    def storage(self) -> Storage:
        """The S3 storage of records and traces, opened on first use (a command that only
        talks to Temporal never imports the S3 client)."""
        if self._storage is None:
            from polar.storage import Storage

            self._storage = Storage(self.settings)
        return self._storage

    @storage.setter
    def storage(self, storage: Storage) -> None:
        self._storage = storage

    @classmethod
    async def connect(cls, settings: ClientSettings | None = None) -> PolarClient:
        settings = settings or get_settings(ClientSettings)
        return cls(await connect(settings), settings)

    async def __aenter__(self) -> PolarClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    # ------------------------------------------------------------------ submit
    async def submit(
        self,
        spec: TaskSpec | dict[str, Any],
        workflow_id: str | None = None,
        *,
        resolve_builder: bool = True,
        console_url: str | None = None,
    ) -> TaskRun:
        """Validate `spec` here (raising pydantic's ValidationError) and start its workflow.

        The builder must resolve here with a valid config (`check_builder`: UnknownBuilder
        naming `builder.name`, or a ValueError naming `builder.config`);
        `resolve_builder=False` leaves that to the workers (the build stage then fails the
        session, non-retryably). `console_url` (default: the `console_public_url` setting, else
        the console a dev stack of the same data dir runs: polar.dev_console): the console the
        task's and its sessions' Web UI summaries link to; none: no link.
        A `workflow_id` must be a valid id (polar.ids: InvalidId, a ValueError, otherwise); a
        task naming no source on the default image warns (`NoSourceWarning`); a task asking
        for GPUs that no worker of the deployment declares is refused (`NoGpuWorkers`, a
        ValueError naming why)."""
        task = spec if isinstance(spec, TaskSpec) else TaskSpec.model_validate(spec)
        if workflow_id is not None:
            checked_workflow_id(workflow_id)
        if resolve_builder:
            check_builder(task.builder)
        if (note := missing_source(task)) is not None:
            warnings.warn(note, NoSourceWarning, stacklevel=2)
        # GPUs no worker of the deployment declares: refused here, naming why (polar/gpus.py)
        await check_gpu_workers(
            self.client, self.settings.temporal_namespace, self.settings.task_queue, task
        )
        workflow_id = workflow_id or f"task-{task.task_id}-{uuid.uuid4().hex[:8]}"
        console = (
            console_url
            or self.settings.console_public_url
            or dev_console_url(self.settings.data_dir)
        )
        await self.client.start_workflow(
            "RolloutTask",
            task.model_dump(mode="json"),
            id=workflow_id,
            task_queue=self.settings.task_queue,
            static_summary=f"{task.task_id}: {task.num_sessions} × {task.harness.kind}",
            static_details=task_link(console, workflow_id),
            memo=console_memo(console),
            priority=Priority(priority_key=task.priority) if task.priority else Priority.default,
        )
        return TaskRun(task.task_id, workflow_id)

    def handle(self, run: TaskRun | str) -> WorkflowHandle[Any, TaskResult]:
        """The task's workflow handle; a workflow id that is not a valid id is InvalidId."""
        workflow_id = run.workflow_id if isinstance(run, TaskRun) else checked_workflow_id(run)
        return self.client.get_workflow_handle(workflow_id, result_type=TaskResult)

    # ------------------------------------------------------------------ follow
    async def status(self, run: TaskRun | str) -> TaskStatus:
        """The task's workflow status and each session's stage, read live."""
        handle = self.handle(run)
        desc = await handle.describe()
        progress: dict[str, Any] = {"total": 0, "done": 0}
        sessions: list[SessionProgress] = []
        with contextlib.suppress(RPCError):  # closed workflows without a worker can't answer
            progress = await handle.query("progress")
        # the task's sessions, whether it started them or its SessionBatch children did
        async for execution in self.client.list_workflows(
            f"RootWorkflowId = '{handle.id}' AND WorkflowType = 'Session'", limit=10_000
        ):
            stage = execution.typed_search_attributes.get(STAGE, Stage.PENDING)
            state = execution.typed_search_attributes.get(STATUS)
            sessions.append(
                SessionProgress(
                    session_id=execution.id,
                    stage=Stage(stage),
                    status=SessionStatus(state) if state is not None else None,
                )
            )
        status = desc.status.name.lower() if desc.status else "unknown"
        return TaskStatus(
            workflow_id=handle.id,
            status=status,
            total=int(progress.get("total", 0)),
            done=int(progress.get("done", 0)),
            sessions=sorted(sessions, key=lambda s: s.session_id),
        )

    async def wait(self, run: TaskRun | str, timeout_s: float | None = None) -> TaskResult:
        """Block until the task finishes; raises the workflow's failure if it failed."""
        result = self.handle(run).result()
        return await (asyncio.wait_for(result, timeout_s) if timeout_s else result)

    async def follow(self, run: TaskRun | str, every_s: float = 1.0) -> AsyncIterator[TaskStatus]:
        """Yield the task's status every `every_s` seconds until it closes."""
        while True:
            status = await self.status(run)
            yield status
            if status.status != WorkflowExecutionStatus.RUNNING.name.lower():
                return
            await asyncio.sleep(every_s)

    async def cancel(self, run: TaskRun | str) -> None:
        await self.handle(run).cancel()

    async def iter_groups(
        self,
        runs: Iterable[TaskRun],
        *,
        load_traces: bool = False,
        min_policy_version: int | Callable[[], int | None] | None = None,
        include_failed: bool = False,
        timeout_s: float | None = None,
    ) -> AsyncIterator[Group]:
        """Yield each task's group as soon as its workflow finishes, in finish order.

        Tasks run concurrently in Temporal; this only waits on their results, so
        a slow task never holds back a fast one (asynchronous RL).
        `min_policy_version` (an int, or a callable read at each yield so a
        trainer can raise it as it updates its weights) drops groups whose
        policy version is older, and with `load_traces` drops older traces too;
        groups without a version are kept. Failed or cancelled tasks are skipped
        (logged) unless `include_failed`. `timeout_s` bounds the whole iteration.
        """
        pending: dict[asyncio.Future[TaskResult], TaskRun] = {
            asyncio.ensure_future(self.handle(run).result()): run for run in runs
        }
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s if timeout_s is not None else None
        try:
            while pending:
                left = None if deadline is None else max(0.0, deadline - loop.time())
                done, _ = await asyncio.wait(
                    pending, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    raise TimeoutError(f"{len(pending)} tasks still running after {timeout_s}s")
                for fut in sorted(done, key=lambda f: pending[f].workflow_id):
                    run = pending.pop(fut)
                    group = await self._group(run, fut, load_traces, min_policy_version)
                    if group is not None and (group.result is not None or include_failed):
                        yield group
        finally:
            for fut in pending:
                fut.cancel()

    async def _group(
        self,
        run: TaskRun,
        fut: asyncio.Future[TaskResult],
        load_traces: bool,
        min_policy_version: int | Callable[[], int | None] | None,
    ) -> Group | None:
        try:
            result = fut.result()
        except (WorkflowFailureError, RPCError) as exc:
            cause = getattr(exc, "cause", None)
            log.warning("task %s ended without a result: %s", run.workflow_id, cause or exc)
            return Group(run, None, error=str(cause or exc))
        floor = min_policy_version() if callable(min_policy_version) else min_policy_version
        version = result.policy_version
        if floor is not None and version is not None and version < floor:
            log.info("dropping stale group %s (policy %s < %s)", run.workflow_id, version, floor)
            return None
        group = Group(run, result)
        if load_traces:
            for session in result.sessions:
                outcome = session.outcome
                if outcome is not None and outcome.outcome == OutcomeClass.INFRA_ERROR:
                    group.left_out[session.session_id] = f"{outcome.label}: {outcome.detail}"
                    continue
                traces = await asyncio.to_thread(self.load_traces, session)
                group.traces.extend(t for t in traces if _fresh(t, floor))
        return group

    # ------------------------------------------------------------------ traces
    def load_traces(self, session: SessionResult) -> list[Trace]:
        """The traces of one session, read from S3."""
        if not session.traces_key:
            return []
        return self.storage.load_traces(session.traces_key)

    def traces_url(self, session: SessionResult) -> str | None:
        return self.storage.url(session.traces_key) if session.traces_key else None

    def web_ui_url(self, run: TaskRun | str) -> str:
        workflow_id = run.workflow_id if isinstance(run, TaskRun) else run
        host = self.settings.temporal_address.rsplit(":", 1)[0]
        return (
            f"http://{host}:{self.settings.temporal_ui_port}/namespaces/"
            f"{self.settings.temporal_namespace}/workflows/{workflow_id}"
        )


def _fresh(trace: Trace, floor: int | None) -> bool:
    """Whether `trace` was sampled by a policy at least `floor` (unversioned traces are kept)."""
    version = trace.provenance.policy_version
    return floor is None or version is None or version >= floor
