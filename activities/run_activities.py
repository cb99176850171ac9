"""The run pool's activity: run a session's harness in its prepared runtime."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import activity

from activities.artifact_collection import collect
from activities.harness_launch import HarnessLaunch
from activities.harnesses import check_harness
from activities.heartbeat import heartbeat
from activities.pool_activities import PoolActivities
from activities.runtimes import InvalidRuntime, PrepareFailed
from activities.runtimes.actions import run_in_place
from polar.contracts import HarnessRequest, HarnessResult, invalid_input


class RunActivities(PoolActivities):
    """The run pool (`{queue}-run`, and this host's `-run` queue: at most `max_run`)."""

    @activity.defn(name="run_harness")
    async def run_harness(self, request: HarnessRequest) -> HarnessResult:
        """Run the harness in its sandbox, its only door the session's gateway channel; then
        kill every process it left (reap) before its logs and work are read
        (activities/harness_launch.py)."""
        # first: an unknown kind, an invalid config or a CLI's empty instruction fails at
        # once, not retried
        _check_harness(request)
        request = await self.specs.with_instruction(request)
        _check_harness(request, request.instruction)
        self._check_host(request.runtime, "run_harness")
        tries = activity.info().attempt
        # a re-issued run stage (another placement) counts on from its own base
        attempt = request.attempt_base + tries
        launch = HarnessLaunch(
            request, attempt, self._runtime(request.runtime.kind), self.settings, self.storage
        )
        command = await launch.configure()
        heartbeat(step="harness starting", attempt=attempt, sealed=bool(launch.channel))
        if tries > 1:
            await launch.reap_leftovers()
        if request.before:  # a step's actions, in the runtime the earlier steps left
            try:
                await run_in_place(
                    launch.runtime, request.runtime, request.before, (self.settings.data_dir,)
                )
            except (PrepareFailed, InvalidRuntime) as exc:
                raise invalid_input(f"step {request.step}: {exc}", "PrepareFailed") from None
        try:
            run = await launch.run(command)
        except InvalidRuntime as exc:
            if request.step is None:
                raise
            # the step's harness user, checked at prepare, gone from the runtime an earlier
            # step's harness had (its /etc/passwd rewritten): that step's doing, as a failed
            # step action is (workflows/session_steps.py: the step scores 0)
            raise invalid_input(f"step {request.step}: {exc}", "PrepareFailed") from None
        log_keys = await launch.upload_logs()
        run.check_reaped()
        artifacts = await launch.upload_artifacts()
        result = launch.result(run, log_keys, artifacts)
        if request.collect is not None and not request.collect.empty:  # after the reap
            result.collected = await collect(
                launch.runtime, request.runtime, request.collect, self.storage, attempt
            )
        return result

    def all(self) -> list[Callable[..., Any]]:
        return [self.run_harness]


def _check_harness(request: HarnessRequest, instruction: str | None = None) -> None:
    """`check_harness` (the instruction too, when given); a non-retryable InvalidTaskSpec."""
    try:
        check_harness(request.harness, instruction)
    except ValueError as exc:  # UnknownHarness, InvalidKindConfig
        raise invalid_input(str(exc), "InvalidTaskSpec") from None
