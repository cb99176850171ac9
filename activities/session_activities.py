"""The activities of a Session: every side effect of a rollout lives here.

Each activity heartbeats with details while it works, so a worker that dies is
noticed within the heartbeat timeout and the stage is retried elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from temporalio import activity

from activities.evaluators import (
    Evaluation,
    EvaluationJob,
    Evaluator,
    EvaluatorError,
    UnknownEvaluator,
    get_evaluator,
)
from activities.evaluators.baseline import record_baseline
from activities.evaluators.command import InvalidRewardFile
from activities.evaluators.fresh import eval_prepare_request, fresh_runtime
from activities.evaluators.reward_checks import InvalidReward, check_rewards
from activities.harnesses import HarnessContext, HarnessNotInstalled, get_adapter
from activities.harnesses.artifacts import ARTIFACTS_SUBDIR, collect_artifacts
from activities.heartbeat import Heartbeater, heartbeat, heartbeating
from activities.runtimes import (
    InvalidRuntime,
    InvalidSource,
    PrepareFailed,
    Runtime,
    get_runtime,
)
from activities.runtimes.channel import (
    PLACEHOLDER_KEY,
    SANDBOX_GATEWAY_URL,
    ChannelLimits,
    GatewayRelay,
    with_forwarder,
)
from activities.spec_store import TaskSpecActivities
from polar import safe_files
from polar.builders import BuildContext, UnknownBuilder, check_builder, reward_policy
from polar.builders.base import count_unseen, unseen_records
from polar.builders.progress import listening
from polar.builders.reward_policies import assign_rewards
from polar.contracts import (
    BuildRequest,
    BuildResult,
    EvaluateRequest,
    EvaluateResult,
    HarnessRequest,
    HarnessResult,
    PrepareRequest,
    RewardRequest,
    RuntimeHandle,
    TeardownResult,
    invalid_input,
)
from polar.host_paths import local_git_path, outside_roots, source_roots
from polar.session_keys import EXPIRY_MARGIN_S, SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage, artifact_key, traces_key
from polar.tasks.spec import DirSource, GitSource, UploadAction
from workflows.queues import host_queue_prefix

CALL_COUNT_EVERY_S = 15.0
"""How often a running harness's heartbeat re-counts its recorded calls in S3."""


def _home_in_runtime(runtime: Runtime, handle: RuntimeHandle) -> str | None:
    """HOME as a harness inside `runtime` sees it, when it differs from `runtime.home`."""
    view = getattr(runtime, "home_in_runtime", None)
    return view(handle) if callable(view) else None


def _read_own_file(top: Path, path: Path, limit: int) -> bytes | None:
    """The log `path` under `top` (a dir the sandbox's user owned), read no-follow, head and
    tail within `limit` bytes; None where it is a link or gone."""
    try:
        return safe_files.read_log(top, path.relative_to(top), limit=limit)
    except (OSError, ValueError):
        return None


def worker_runtime(kind: str, settings: Settings) -> Runtime:
    """The runtime of `kind` as this worker's settings make it: named by the deployment's
    task queue (one engine finds any worker's container), labelled with this host."""
    deployment = f"{settings.temporal_address}/{settings.temporal_namespace}/{settings.task_queue}"
    return get_runtime(
        kind,
        Path(settings.data_dir),
        namespace=settings.task_queue,
        host_id=settings.host_id,
        deployment=deployment,
    )


def check_source_roots(
    request: PrepareRequest, roots: tuple[Path, ...], data_dir: Path | None = None
) -> None:
    """Every host path the task reads (source.path, a local git url, upload srcs) lies,
    resolved, under a source root and never in the stack's `data_dir` (its database,
    secrets, every session's runtime), even where a root holds it (InvalidSource otherwise,
    naming the field)."""
    paths: list[tuple[str, Path]] = []
    if isinstance(request.source, DirSource):
        paths.append(("source.path", Path(request.source.path)))
    elif isinstance(request.source, GitSource):
        local = local_git_path(request.source.url)
        if local is not None:
            paths.append(("git url", local))
    for index, action in enumerate(request.runtime.prepare):
        if isinstance(action, UploadAction):
            paths.append((f"runtime.prepare[{index}].src", Path(action.src)))
    state = data_dir.resolve() if data_dir is not None else None
    for what, path in paths:
        problem = outside_roots(path, roots)
        if problem is not None:
            raise InvalidSource(f"{what} {path} {problem}")
        real = path.resolve()
        if state is not None and (real == state or real.is_relative_to(state)):
            raise InvalidSource(
                f"{what} {path} resolves to {real}, inside the data dir {state} (the stack's "
                "state and secrets): a task may not read it"
            )


class SessionActivities:
    """Activities bound to one worker's settings and S3 client."""

    def __init__(self, settings: Settings, storage: Storage) -> None:
        self.settings = settings
        self.storage = storage
        self.specs = TaskSpecActivities(storage)  # large TaskSpec fields by reference

    def _runtime(self, kind: str) -> Runtime:
        return worker_runtime(kind, self.settings)

    def _on_this_host(self, handle: RuntimeHandle) -> RuntimeHandle:
        """`handle` stamped with this host's id and queue prefix: where later stages go."""
        return handle.model_copy(
            update={
                "host_id": self.settings.host_id,
                "host_queue": host_queue_prefix(self.settings.task_queue, self.settings.host_id),
            }
        )

    def _check_host(self, handle: RuntimeHandle, stage: str) -> None:
        """A stage that touches a runtime runs on the host holding it, or fails loudly."""
        if handle.host_id is not None and handle.host_id != self.settings.host_id:
            raise invalid_input(
                f"{stage}: the runtime of {handle.session_id} is on host {handle.host_id!r}, "
                f"not on this one ({self.settings.host_id!r})",
                "WrongHost",
            )

    # ------------------------------------------------------------------ init queue
    @activity.defn(name="prepare_runtime")
    async def prepare_runtime(self, request: PrepareRequest) -> RuntimeHandle:
        runtime = self._runtime(request.runtime.kind)
        # a container start, a clone or a big copy must not look like a dead worker
        async with Heartbeater(step="preparing", runtime=request.runtime.kind) as hb:
            try:
                check_source_roots(
                    request,
                    source_roots(self.settings.source_roots),
                    Path(self.settings.data_dir),
                )
                handle = await runtime.prepare(request)
            except (InvalidSource, InvalidRuntime, PrepareFailed) as exc:
                raise invalid_input(str(exc), type(exc).__name__) from exc
            # the commit the session's changes are diffed against (git init for a plain folder)
            hb.update(step="recording the workspace baseline")
            handle = await record_baseline(runtime, handle)
        return self._on_this_host(handle)  # later stages come to this host's queues

    @activity.defn(name="prepare_eval_runtime")
    async def prepare_eval_runtime(self, request: PrepareRequest) -> RuntimeHandle:
        """The evaluator's fresh runtime, prepared while the harness runs (evaluator prewarm);
        the workflow passes it to `evaluate` and tears it down whatever happens."""
        return await self.prepare_runtime(request)

    @activity.defn(name="teardown")
    async def teardown(self, handle: RuntimeHandle) -> TeardownResult:
        """Close the session (the gateway refuses its keys from now on), then release its
        runtime. Only a session's final teardown: a runtime given up for a new attempt is
        released without closing the session (its attempt closed when its run ended)."""
        heartbeat(step="teardown")
        self._check_host(handle, "teardown")
        await asyncio.to_thread(self.storage.mark_closed, handle.session_id)
        return await self._remove_runtime(handle)

    @activity.defn(name="release_runtime")
    async def release_runtime(self, handle: RuntimeHandle) -> TeardownResult:
        """Remove a runtime the session gave up (its host was lost; it went on elsewhere),
        without closing the session; sent to that host's queue, it runs if the host returns."""
        heartbeat(step="releasing a given-up runtime")
        self._check_host(handle, "release_runtime")
        return await self._remove_runtime(handle)

    async def _remove_runtime(self, handle: RuntimeHandle) -> TeardownResult:
        """Tear `handle` down; a prepared runtime (it has a workdir) that is not here is a
        non-retryable `RuntimeNotFound`, never a quiet success."""
        try:
            found = await self._runtime(handle.kind).teardown(handle)
        except InvalidRuntime as exc:  # e.g. a session id that is not a safe path
            raise invalid_input(str(exc), "InvalidRuntime") from exc
        if not found and handle.workdir:
            raise invalid_input(
                f"teardown: no {handle.kind} runtime of {handle.session_id} on host "
                f"{self.settings.host_id!r} (prepared on {handle.host_id or handle.host!r}); "
                "nothing was removed",
                "RuntimeNotFound",
            )
        return TeardownResult(
            session_id=handle.session_id, host_id=self.settings.host_id, found=found
        )

    @activity.defn(name="host_alive")
    async def host_alive(self) -> str:
        """This host's id: answered from its probe queue, it shows the host is up."""
        return self.settings.host_id

    # ------------------------------------------------------------------ run queue
    @activity.defn(name="run_harness")
    async def run_harness(self, request: HarnessRequest) -> HarnessResult:
        """Run the harness in its sandbox, its only door the session's gateway channel; then
        kill every process it left (reap) before its logs and work are read."""
        request = await self.specs.with_instruction(request)
        info = activity.info()
        self._check_host(request.runtime, "run_harness")
        # a re-issued run stage (another placement) counts on from its own base
        attempt = request.attempt_base + info.attempt
        runtime = self._runtime(request.runtime.kind)
        key = mint_session_key(  # valid for this run's budget, and closed when it ends
            SessionIdentity(
                request.session_id,
                request.task_id,
                attempt,
                only_model=(
                    request.harness.model if request.harness.unknown_models == "refuse" else None
                ),
            ),
            self.settings.session_secret,
            ttl_s=request.budget_s + EXPIRY_MARGIN_S,
        )
        home = runtime.home(request.runtime)
        # sealed: the harness sees the gateway on its own loopback and holds no real key
        channel = runtime.channel_in_sandbox(request.runtime)
        # host-run CLIs come from harness_bin_dir; a container runtime has them on its PATH
        local = request.runtime.kind == "local"
        ctx = HarnessContext(
            spec=request.harness,
            instruction=request.instruction,
            gateway_url=SANDBOX_GATEWAY_URL if channel else self.settings.gateway_base_url,
            api_key=PLACEHOLDER_KEY if channel else key,
            session_id=request.session_id,
            task_id=request.task_id,
            bin_dir=self.settings.harness_bin_dir if local else None,
            home_in_runtime=None if local else _home_in_runtime(runtime, request.runtime),
        )
        adapter = get_adapter(request.harness.kind)
        try:
            launch = await asyncio.to_thread(adapter.prepare, home, request.runtime.workdir, ctx)
        except (HarnessNotInstalled, ValueError) as exc:
            raise invalid_input(str(exc), "InvalidHarness") from exc
        command, env = launch.command, launch.env
        log_name = f"harness-attempt{attempt}"

        counted: dict[str, Any] = {"at": -CALL_COUNT_EVERY_S, "calls": None}

        async def tick(elapsed: float) -> None:
            # heartbeats go out every tick; the S3 listing behind the call count only every
            # CALL_COUNT_EVERY_S (it is informative, and thousands of sessions list S3 too).
            # S3 being unreachable for a while must not kill the harness (its calls get 503
            # recording_failed and retry), so a failed count heartbeats without it.
            if elapsed - counted["at"] >= CALL_COUNT_EVERY_S:
                counted["at"] = elapsed
                try:
                    counted["calls"] = await asyncio.to_thread(
                        self.storage.count_completions, request.session_id
                    )
                except Exception:  # noqa: BLE001 - any S3 failure
                    counted["calls"] = None
            heartbeat(
                step="harness running", elapsed_s=round(elapsed, 1), model_calls=counted["calls"]
            )

        heartbeat(step="harness starting", attempt=attempt, sealed=bool(channel))
        if info.attempt > 1:  # the last attempt's worker may have died without reaping: what it
            # started may still run here (calling through this session's channel, holding the
            # forwarder's port), and must not be recorded as this attempt's
            await heartbeating(runtime.reap(request.runtime), step="reaping the last attempt")
        relay: GatewayRelay | None = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                if channel:  # served from the sandbox's own loopback, or by its forwarder
                    listener = await stack.enter_async_context(
                        runtime.open_channel(request.runtime)
                    )
                    if listener is None:
                        command = with_forwarder(command, channel)
                    relay = GatewayRelay(
                        runtime.channel_dir(request.runtime),
                        self.settings.gateway_base_url,
                        key,
                        listener=listener,
                        limits=ChannelLimits.from_settings(self.settings),
                    )
                    await stack.enter_async_context(relay)
                run = runtime.run(
                    request.runtime,
                    command,
                    env=env,
                    log_name=log_name,
                    timeout_s=request.budget_s,
                    on_tick=tick,
                )
                # a session past its channel's caps is ended there, its neighbours untouched
                stderr = runtime.log_paths(request.runtime, log_name)[1]
                outcome = await (relay.run_guarded(run, stderr) if relay is not None else run)
        finally:
            # nothing the harness started outlives it: reaped before its work is read, also
            # on cancellation (shielded), heartbeating all the while
            reaped: BaseException | None = None
            try:
                await asyncio.shield(
                    heartbeating(runtime.reap(request.runtime), step="reaping the harness")
                )
            except Exception as exc:  # noqa: BLE001 - the logs are kept first, then it fails
                reaped = exc
            # this run's key is done: a process that outlived it can no longer record calls
            await asyncio.shield(
                asyncio.to_thread(self.storage.mark_closed, request.session_id, attempt)
            )
        stdout_key, stderr_key = await self._upload_logs(runtime, request.runtime, log_name)
        if reaped is not None:  # its work cannot be trusted: the attempt fails and is retried
            raise RuntimeError(f"reaping the harness failed: {reaped}") from reaped
        artifact_keys = []
        for name, path in await asyncio.to_thread(adapter.native_logs, home):
            key = artifact_key(request.session_id, f"{log_name}/{name}")
            # HOME was the harness's: read no-follow (a link it left is skipped)
            data = await asyncio.to_thread(_read_own_file, home, path, self.settings.max_log_bytes)
            if data is None:
                continue
            await asyncio.to_thread(self.storage.put_bytes, key, data, "text/plain")
            artifact_keys.append(key)
        # what the harness wrote under $POLAR_ARTIFACTS_DIR (bounded, symlinks not followed)
        kept = await asyncio.to_thread(collect_artifacts, home / ARTIFACTS_SUBDIR)
        for name, data in kept.files:
            key = artifact_key(request.session_id, f"{log_name}/artifacts/{name}")
            await asyncio.to_thread(self.storage.put_bytes, key, data)
            artifact_keys.append(key)
        status: Literal["completed", "failed", "timeout"]
        if outcome.timed_out:
            status = "timeout"
        elif outcome.limit_exceeded:
            status = "failed"  # past a resource limit: its work is not a completed run
        else:
            status = "completed" if outcome.exit_code == 0 else "failed"
        return HarnessResult(
            status=status,
            exit_code=outcome.exit_code,
            duration_s=round(outcome.duration_s, 3),
            stdout_key=stdout_key,
            stderr_key=stderr_key,
            attempt=attempt,
            artifact_keys=artifact_keys,
            artifacts_skipped=kept.notes(),
            detail=outcome.limit_exceeded,
            # the channel was this run's only door to the gateway: what it forwarded bounds
            # what this attempt can have recorded
            relayed_calls=relay.forwarded if relay is not None else None,
        )

    async def _upload_logs(
        self, runtime: Runtime, handle: RuntimeHandle, log_name: str
    ) -> tuple[str, str]:
        """Upload the command's stdout and stderr side by side (each within max_log_bytes,
        head and tail); their keys."""

        def upload(path: Path) -> str:
            key = artifact_key(handle.session_id, path.name)
            data = safe_files.read_log_file(path, limit=self.settings.max_log_bytes)
            self.storage.put_bytes(key, data, "text/plain")
            return key

        stdout, stderr = runtime.log_paths(handle, log_name)
        out, err = await asyncio.gather(
            asyncio.to_thread(upload, stdout), asyncio.to_thread(upload, stderr)
        )
        return out, err

    # ------------------------------------------------------------------ postrun queue
    @activity.defn(name="build_trajectory")
    async def build_trajectory(self, request: BuildRequest) -> BuildResult:
        try:  # first: a builder that does not resolve fails at once, not retried
            builder = check_builder(request.builder)
            policy = reward_policy(request.builder.config)
        except (UnknownBuilder, ValueError) as exc:
            raise invalid_input(str(exc), "InvalidBuilder") from exc
        # the serial S3 listing and reads, then the build, run in threads, heartbeating
        # their progress (a long session must not look like a dead worker)
        async with Heartbeater(step="loading completions") as hb:

            def read(done: int, total: int) -> None:
                hb.update(records_read=done, records=total)

            def built(done: int, total: int) -> None:
                hb.update(calls_built=done, calls=total)

            records = await asyncio.to_thread(
                self.storage.list_completions, request.session_id, read
            )
            # a sample the harness never saw (caller hung up, or resent because its answer
            # never arrived) is no training data, whatever the builder
            unseen = unseen_records(records)
            seen = [r for r in records if r.record_id not in unseen]
            hb.update(step="building", completions=len(seen), unseen=len(unseen))
            ctx = BuildContext(
                session_id=request.session_id,
                task_id=request.task_id,
                harness=request.harness,
                builder=request.builder.name,
                config=request.builder.config,
            )
            with listening(built):  # asyncio.to_thread carries the listener into the thread
                output = await asyncio.to_thread(builder, seen, ctx)
        for trace in output.traces:  # score_traces applies it; custom builders need not
            trace.provenance.reward_policy = policy
            trace.provenance.policy_version = request.policy_version
        key = traces_key(request.session_id, request.builder.name)
        size = await asyncio.to_thread(self.storage.put_traces, key, output.traces)
        return BuildResult(
            traces_key=key,
            num_completions=len(records),
            num_traces=len(output.traces),
            num_response_tokens=sum(int(sum(t.loss_mask)) for t in output.traces),
            trace_bytes=size,
            unusable_completions=len(output.unusable),
            breaks=dict(output.breaks),
            unseen_completions=count_unseen(unseen),
        )

    @activity.defn(name="evaluate")
    async def evaluate(self, request: EvaluateRequest) -> EvaluateResult:
        """Grade the session with its evaluator (activities/evaluators, by kind): where its
        harness never was, a fresh runtime of the task's source plus the session's changes
        (prewarmed while the harness ran, or prepared here), torn down after. Rewards are
        checked (finite) and clamped to the task's range; the report, patch and logs go to
        S3 as artifacts. An evaluator error (the task cannot be graded) or an invalid reward
        fails the session instead of giving it a reward."""
        request = await self.specs.with_evaluator(request)
        kind = request.evaluator.kind
        try:
            evaluator = get_evaluator(kind)
        except UnknownEvaluator as exc:
            raise invalid_input(str(exc), "UnknownEvaluator") from None
        self._check_host(request.runtime, "evaluate")
        runtime = self._runtime(request.runtime.kind)
        traces = None
        if evaluator.needs_traces and request.traces_key:
            traces = await asyncio.to_thread(self.storage.get_bytes, request.traces_key)
        # the runtime prepared while the harness ran; a retry cannot trust it (it may hold
        # the patch of the failed attempt) and prepares a fresh one under the same id
        prewarmed = request.eval_runtime if activity.info().attempt == 1 else None
        started = time.monotonic()
        try:
            async with Heartbeater(step="evaluating", evaluator=kind) as hb:
                if evaluator.needs_fresh_runtime:
                    hb.update(step="preparing the evaluator runtime", prewarmed=bool(prewarmed))
                    evaluation, logs = await self._evaluate_in_fresh_runtime(
                        evaluator, request, runtime, prewarmed, traces, started
                    )
                else:
                    job = EvaluationJob(
                        runtime,
                        request.runtime,
                        None,
                        None,
                        request.evaluator,
                        timeout_s=request.budget_s,
                        traces=traces,
                    )
                    evaluation, logs = await self._graded(evaluator, job)
        except PrepareFailed as exc:  # the task's prepare actions or the instance's install
            raise invalid_input(
                f"preparing the evaluator's runtime failed: {exc}", "EvaluatorError"
            ) from None  # the session's error says this, not only the prepare action's
        except (InvalidSource, InvalidRuntime) as exc:
            raise invalid_input(str(exc), type(exc).__name__) from exc
        except InvalidRewardFile as exc:
            raise invalid_input(str(exc), "InvalidRewardFile") from exc
        if evaluator.needs_fresh_runtime:
            evaluation.report.eval_runtime = "prewarmed" if prewarmed else "fresh"
        failure = None
        if evaluation.report.evaluator_error:
            failure = ("EvaluatorError", evaluation.detail)
        else:
            try:
                check_rewards(evaluation, request.evaluator.reward_range)
            except InvalidReward as exc:
                evaluation.report.invalid_reward = str(exc)
                failure = ("InvalidReward", str(exc))
        log_keys = await self._upload_eval_logs(request.session_id, logs)
        report_key = await self._upload_evaluation(request.session_id, kind, evaluation)
        if failure is not None:
            error_type, message = failure
            raise invalid_input(f"{message} (report: {report_key})", error_type)
        return EvaluateResult(
            reward=evaluation.reward,
            detail=evaluation.detail,
            log_key=log_keys[0],
            trace_rewards=evaluation.trace_rewards,
            report_key=report_key,
        )

    async def _evaluate_in_fresh_runtime(
        self,
        evaluator: Evaluator,
        request: EvaluateRequest,
        runtime: Runtime,
        prewarmed: RuntimeHandle | None,
        traces: bytes | None,
        started: float,
    ) -> tuple[Evaluation, dict[str, bytes]]:
        """Grade in the evaluator's fresh runtime (the prewarmed one, or prepared now); its
        logs are read before it is torn down."""
        prepare = eval_prepare_request(
            request.session_id,
            request.task_id,
            request.source,
            request.runtime_spec,
            request.runtime.kind,
            request.evaluator,
        )
        eval_runtime = self._runtime(prepare.runtime.kind)
        async with fresh_runtime(eval_runtime, prepare, prewarmed) as eval_handle:
            job = EvaluationJob(
                runtime,
                request.runtime,
                eval_runtime,
                eval_handle,
                request.evaluator,
                # the budget covers preparing the fresh runtime too
                timeout_s=max(1.0, request.budget_s - (time.monotonic() - started)),
                traces=traces,
            )
            return await self._graded(evaluator, job)

    @staticmethod
    async def _graded(
        evaluator: Evaluator, job: EvaluationJob
    ) -> tuple[Evaluation, dict[str, bytes]]:
        """`evaluator`'s outcome (an EvaluatorError made one, with a zero reward) and logs."""
        try:
            evaluation = await heartbeating(evaluator.evaluate(job), step="evaluating")
        except EvaluatorError as exc:
            evaluation = Evaluation(
                0.0,
                f"evaluator error: {str(exc)[:500]}",
                report=evaluator.report_model(evaluator_error=str(exc)),
            )
        return evaluation, await asyncio.to_thread(evaluator.logs, job, evaluation)

    async def _upload_eval_logs(self, session_id: str, logs: dict[str, bytes]) -> list[str]:
        """The evaluator's logs, kept under the session's artifacts; their keys."""
        keys = []
        for name, data in logs.items():
            key = artifact_key(session_id, name)
            await asyncio.to_thread(self.storage.put_bytes, key, data, "text/plain")
            keys.append(key)
        return keys

    async def _upload_evaluation(self, session_id: str, kind: str, evaluation: Evaluation) -> str:
        """The evaluation's report and the patch it graded in S3; the report's key."""
        uploads = {
            f"{kind}-report.json": (evaluation.report.to_json(), "application/json"),
            f"{kind}-model.patch": (evaluation.patch, "text/x-diff"),
        }
        for name, (data, content_type) in uploads.items():
            await asyncio.to_thread(
                self.storage.put_bytes, artifact_key(session_id, name), data, content_type
            )
        return artifact_key(session_id, f"{kind}-report.json")

    @activity.defn(name="score_traces")
    async def score_traces(self, request: RewardRequest) -> BuildResult:
        """Write the session's reward and terminal status into every one of its traces.

        Policy (polar/builders/reward_policies.py): the outcome reward is broadcast to
        each trace, or divided across them (`reward: session_normalized` in
        the builder config); a session whose harness failed or timed out keeps
        the reward its evaluator gave (the evaluator still ran on what the
        harness left) and its masks, and its status is on each trace so a
        trainer can drop or mask it; no evaluation means reward None.
        """
        traces = await asyncio.to_thread(self.storage.load_traces, request.traces_key)
        assign_rewards(traces, request.reward, request.status, request.trace_rewards)
        size = await asyncio.to_thread(self.storage.put_traces, request.traces_key, traces)
        return BuildResult(
            traces_key=request.traces_key,
            num_completions=0,
            num_traces=len(traces),
            num_response_tokens=sum(int(sum(t.loss_mask)) for t in traces),
            trace_bytes=size,
        )

    def all(self) -> list[Callable[..., Any]]:
        """Every activity implementation; activities/worker.py serves each on the pool the
        stage table (workflows/stages.py) gives it."""
        return [
            self.prepare_runtime,
            self.prepare_eval_runtime,
            self.teardown,
            self.release_runtime,
            self.host_alive,
            self.specs.store_task_spec,
            self.run_harness,
            self.build_trajectory,
            self.evaluate,
            self.score_traces,
        ]
