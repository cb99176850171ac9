"""One launch of a harness in its runtime, step by step (the run pool's `run_harness`).

The session's key (valid for this run's budget, closed when it ends), the harness's
context and config (its adapter), the sealed channel and its relay (the harness's only
door to the gateway), the run itself heartbeating with its call count, the reap (nothing
the harness started outlives it), then the uploads: its stdout and stderr, its native
logs and what it left under $POLAR_ARTIFACTS_DIR. What the run's outcome class needs
(polar/outcomes.py) comes back with it: whether the harness really started (the
started marker, activities/runtimes/started_marker.py) and how many of its calls the
gateway could not serve (the relay's count; an unsealed run's failed records).
A task whose network the worker admitted (RuntimeHandle.network) gets its egress proxy
beside the channel (activities/runtimes/network/egress.py), its attempts kept as `egress.jsonl`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from activities import safe_files
from activities.harnesses import HarnessContext, HarnessNotInstalled, get_adapter
from activities.harnesses.artifacts import ARTIFACTS_SUBDIR, collect_artifacts
from activities.harnesses.base import Launch
from activities.heartbeat import heartbeat, heartbeating
from activities.runtimes import Runtime, started_marker
from activities.runtimes.network.channel import (
    PLACEHOLDER_KEY,
    SANDBOX_GATEWAY_URL,
    GatewayRelay,
    with_forwarder,
)
from activities.runtimes.network.egress import EGRESS_LOG, EgressDoor, EgressRefused, open_egress
from activities.runtimes.network.guard import ChannelLimits
from activities.shell_command import ProcessOutcome
from polar.contracts import HarnessRequest, HarnessResult, invalid_input
from polar.outcomes import count_unserved
from polar.session_keys import EXPIRY_MARGIN_S, SessionIdentity, mint_session_key
from polar.settings import WorkerSettings
from polar.storage import Storage, artifact_key
from polar.tasks.spec import NetworkSpec

CALL_COUNT_EVERY_S = 15.0
"""How often a running harness's heartbeat re-counts its recorded calls in S3."""


def session_key(request: HarnessRequest, attempt: int, settings: WorkerSettings) -> str:
    """The gateway key of this run: valid for its budget, closed when it ends; with
    `unknown_models: refuse`, it names the one model the session may call."""
    refuse = request.harness.unknown_models == "refuse"
    return mint_session_key(
        SessionIdentity(
            request.session_id,
            request.task_id,
            attempt,
            only_model=request.harness.model if refuse else None,
        ),
        settings.session_secret,
        ttl_s=request.budget_s + EXPIRY_MARGIN_S,
    )


def _home_in_runtime(runtime: Runtime, request: HarnessRequest) -> str | None:
    """HOME as a harness inside `runtime` sees it, when it differs from `runtime.home`."""
    view = getattr(runtime, "home_in_runtime", None)
    return view(request.runtime) if callable(view) else None


def _read_own_file(top: Path, path: Path, limit: int) -> bytes | None:
    """The log `path` under `top` (a dir the sandbox's user owned), read no-follow, head and
    tail within `limit` bytes; None where it is a link or gone."""
    try:
        return safe_files.read_log(top, path.relative_to(top), limit=limit)
    except (OSError, ValueError):
        return None


@dataclass
class HarnessRun:
    """How the harness's run ended, and whether everything it started was reaped."""

    outcome: ProcessOutcome
    reap_error: BaseException | None
    relayed_calls: int | None
    """Requests the sealed channel sent on (None: an unsealed runtime)."""
    started: bool = True
    """The started marker was seen: the sandbox reached the harness command."""
    unserved_calls: int = 0
    """Calls of this run the gateway could not serve."""
    unserved_by_gateway: int = 0
    """Of those, the calls the gateway itself failed (unreachable, or could not record)."""

    def check_reaped(self) -> None:
        """Its work cannot be trusted if a process may still run: the attempt fails."""
        if self.reap_error is not None:
            raise RuntimeError(f"reaping the harness failed: {self.reap_error}") from (
                self.reap_error
            )

    @property
    def status(self) -> Literal["completed", "failed", "timeout"]:
        if self.outcome.timed_out:
            return "timeout"
        if self.outcome.limit_exceeded:
            return "failed"  # past a resource limit: its work is not a completed run
        return "completed" if self.outcome.exit_code == 0 else "failed"


class HarnessLaunch:
    """One attempt of a session's harness in its prepared runtime."""

    def __init__(
        self,
        request: HarnessRequest,
        attempt: int,
        runtime: Runtime,
        settings: WorkerSettings,
        storage: Storage,
    ) -> None:
        self.request = request
        self.handle = request.runtime
        self.attempt = attempt
        self.runtime = runtime
        self.settings = settings
        self.storage = storage
        self.key = session_key(request, attempt, settings)
        self.home = runtime.home(self.handle)
        # sealed: the harness sees the gateway on its own loopback and holds no real key
        self.channel = runtime.channel_in_sandbox(self.handle)
        self.adapter = get_adapter(request.harness.kind)
        self.log_name = f"harness-attempt{attempt}"
        self.egress: EgressDoor | None = None
        """The run's egress (its proxy's log), where the task's network asked for one."""

    def context(self) -> HarnessContext:
        """What the harness's adapter writes its config from."""
        sealed = bool(self.channel)
        # host-run CLIs come from harness_bin_dir; a container runtime has them on its PATH
        local = self.handle.kind == "local"
        return HarnessContext(
            spec=self.request.harness,
            instruction=self.request.instruction,
            gateway_url=SANDBOX_GATEWAY_URL if sealed else self.settings.gateway_base_url,
            api_key=PLACEHOLDER_KEY if sealed else self.key,
            session_id=self.request.session_id,
            task_id=self.request.task_id,
            bin_dir=self.settings.harness_bin_dir if local else None,
            home_in_runtime=None if local else _home_in_runtime(self.runtime, self.request),
            step=self.request.step,
        )

    async def configure(self) -> Launch:
        """The harness's config written under its HOME; the command and env to run."""
        try:
            return await asyncio.to_thread(
                self.adapter.prepare, self.home, self.handle.workdir, self.context()
            )
        except (HarnessNotInstalled, ValueError) as exc:
            raise invalid_input(str(exc), "InvalidHarness") from exc

    async def reap_leftovers(self) -> None:
        """What the last attempt started (its worker may have died without reaping) may still
        run here, calling through this session's channel and holding the forwarder's port:
        it must not be recorded as this attempt's."""
        await heartbeating(self.runtime.reap(self.handle), step="reaping the last attempt")

    async def run(self, launch: Launch) -> HarnessRun:
        """Run the harness behind its channel within its budget; then, whatever happened
        (cancellation too, shielded), reap what it started and close this run's key."""
        relay: GatewayRelay | None = None
        nonce = started_marker.new_nonce()
        stderr = self.runtime.log_paths(self.handle, self.log_name)[1]
        pipe: started_marker.Pipe | None = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                # the marker line comes first inside the sandbox (after its forwarder): by a
                # pipe of the worker's where it starts the sandbox itself, which the harness
                # cannot truncate as it can its stderr log; else on stderr (the engine's)
                if self.runtime.passes_fds:
                    pipe = started_marker.Pipe(nonce)
                    command = pipe.wrap(launch.command)
                else:
                    command = started_marker.with_marker(launch.command, nonce)
                if self.channel:  # served from the sandbox's own loopback, or by its forwarder
                    listener = await stack.enter_async_context(
                        self.runtime.open_channel(self.handle)
                    )
                    if listener is None:
                        command = with_forwarder(command, self.channel)
                    relay = GatewayRelay(
                        self.runtime.channel_dir(self.handle),
                        self.settings.gateway_base_url,
                        self.key,
                        listener=listener,
                        limits=ChannelLimits.from_settings(self.settings),
                    )
                    await stack.enter_async_context(relay)
                env = launch.env
                self.egress = await stack.enter_async_context(self._open_egress())
                if self.egress is not None:  # its forwarder outermost: it starts first
                    command = self.egress.wrap(command)
                    env = {**env, **self.egress.env}
                running = self.runtime.run(
                    self.handle,
                    command,
                    env=env,
                    log_name=self.log_name,
                    timeout_s=self.request.budget_s,
                    on_tick=CallCounter(self.storage, self.request.session_id).tick,
                    pass_fds=pipe.fds if pipe is not None else (),
                    user=self.handle.harness_user,
                )
                if self.egress is not None:  # so is one past its egress socket's caps
                    running = self.egress.proxy.run_guarded(running, stderr)
                # a session past its channel's caps is ended there, its neighbours untouched
                outcome = await (
                    relay.run_guarded(running, stderr) if relay is not None else running
                )
        finally:
            piped = pipe.close() if pipe is not None else None
            reap_error = await self._reap_and_close()
        relayed = relay.forwarded if relay is not None else None
        if piped is None:
            started = await asyncio.to_thread(started_marker.seen, stderr, nonce)
        else:
            started = piped
        run = HarnessRun(outcome, reap_error, relayed, started)
        if relay is not None:
            run.unserved_calls = relay.unserved
            run.unserved_by_gateway = relay.unserved_by_gateway
        elif run.status != "completed":  # unsealed: the gateway's failed records of this run
            run.unserved_calls = await self._unserved_in_records()
        return run

    @contextlib.asynccontextmanager
    async def _open_egress(self) -> AsyncIterator[EgressDoor | None]:
        """The egress proxy the task's admitted network gets (None: sealed); a runtime that
        cannot give it refuses the task (non-retryable InvalidTaskSpec)."""
        network = self.handle.network or NetworkSpec()
        try:
            async with open_egress(self.runtime, self.handle, network, self.settings) as door:
                yield door
        except EgressRefused as exc:
            raise invalid_input(str(exc), "InvalidTaskSpec") from exc

    async def upload_egress_log(self) -> list[str]:
        """The run's egress attempts (`egress.jsonl`), where it had egress: its key."""
        if self.egress is None:
            return []
        key = artifact_key(self.request.session_id, f"{self.log_name}/{EGRESS_LOG}")
        data = self.egress.proxy.log.jsonl()
        await asyncio.to_thread(self.storage.put_bytes, key, data, "application/x-ndjson")
        return [key]

    async def _unserved_in_records(self) -> int:
        """This attempt's recorded calls the gateway could not serve (0 if S3 cannot say)."""
        try:
            records = await asyncio.to_thread(
                self.storage.list_completions, self.request.session_id
            )
        except Exception:  # noqa: BLE001 - any S3 failure: the count is not known
            return 0
        return count_unserved(records, self.attempt)

    async def _reap_and_close(self) -> BaseException | None:
        """Nothing the harness started outlives it: reaped before its work is read, also on
        cancellation (shielded), heartbeating all the while; then this run's key is done (a
        process that outlived it can no longer record calls). The reap's error, if any: the
        logs are kept first, then the attempt fails."""
        reap_error: BaseException | None = None
        try:
            await asyncio.shield(
                heartbeating(self.runtime.reap(self.handle), step="reaping the harness")
            )
        except Exception as exc:  # noqa: BLE001 - the logs are kept first, then it fails
            reap_error = exc
        await asyncio.shield(
            asyncio.to_thread(self.storage.mark_closed, self.request.session_id, self.attempt)
        )
        return reap_error

    async def upload_logs(self) -> tuple[str, str]:
        """The command's stdout and stderr side by side (each within max_log_bytes, head
        and tail); their keys."""

        def upload(path: Path) -> str:
            key = artifact_key(self.handle.session_id, path.name)
            data = safe_files.read_log_file(path, limit=self.settings.max_log_bytes)
            self.storage.put_bytes(key, data, "text/plain")
            return key

        stdout, stderr = self.runtime.log_paths(self.handle, self.log_name)
        out, err = await asyncio.gather(
            asyncio.to_thread(upload, stdout), asyncio.to_thread(upload, stderr)
        )
        return out, err

    async def upload_artifacts(self) -> tuple[list[str], list[str]]:
        """The harness's native logs and what it wrote under $POLAR_ARTIFACTS_DIR (bounded,
        symlinks not followed): their keys, and what was skipped."""
        keys = []
        session_id = self.request.session_id
        for name, path in await asyncio.to_thread(self.adapter.native_logs, self.home):
            key = artifact_key(session_id, f"{self.log_name}/{name}")
            # HOME was the harness's: read no-follow (a link it left is skipped)
            data = await asyncio.to_thread(
                _read_own_file, self.home, path, self.settings.max_log_bytes
            )
            if data is None:
                continue
            await asyncio.to_thread(self.storage.put_bytes, key, data, "text/plain")
            keys.append(key)
        kept = await asyncio.to_thread(collect_artifacts, self.home / ARTIFACTS_SUBDIR)
        for name, data in kept.files:
            key = artifact_key(session_id, f"{self.log_name}/artifacts/{name}")
            await asyncio.to_thread(self.storage.put_bytes, key, data)
            keys.append(key)
        keys += await self.upload_egress_log()
        return keys, kept.notes()

    def result(
        self,
        run: HarnessRun,
        log_keys: tuple[str, str],
        artifacts: tuple[list[str], list[str]],
    ) -> HarnessResult:
        """The stage's result: how the run ended and the keys of what it left in S3."""
        return HarnessResult(
            status=run.status,
            exit_code=run.outcome.exit_code,
            duration_s=round(run.outcome.duration_s, 3),
            stdout_key=log_keys[0],
            stderr_key=log_keys[1],
            attempt=self.attempt,
            artifact_keys=artifacts[0],
            artifacts_skipped=artifacts[1],
            detail=run.outcome.limit_exceeded,
            # the channel was this run's only door to the gateway: what it forwarded bounds
            # what this attempt can have recorded
            relayed_calls=run.relayed_calls,
            harness_started=run.started,
            unserved_calls=run.unserved_calls,
            unserved_by_gateway=run.unserved_by_gateway,
        )


class CallCounter:
    """The running harness's heartbeat: every tick, with the session's recorded calls
    re-counted in S3 only every CALL_COUNT_EVERY_S (the count is informative, and thousands
    of sessions list S3 too). S3 being unreachable for a while must not kill the harness
    (its calls get 503 recording_failed and retry): a failed count heartbeats without it."""

    def __init__(self, storage: Storage, session_id: str) -> None:
        self.storage = storage
        self.session_id = session_id
        self.counted_at = -CALL_COUNT_EVERY_S
        self.calls: int | None = None

    async def tick(self, elapsed: float) -> None:
        if elapsed - self.counted_at >= CALL_COUNT_EVERY_S:
            self.counted_at = elapsed
            try:
                self.calls = await asyncio.to_thread(
                    self.storage.count_completions, self.session_id
                )
            except Exception:  # noqa: BLE001 - any S3 failure
                self.calls = None
        heartbeat(step="harness running", elapsed_s=round(elapsed, 1), model_calls=self.calls)
