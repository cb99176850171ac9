"""A run's collection (`RuntimeSpec.collect`, plus a step's): after the harness was reaped,
its commands, then its paths copied out of the runtime into S3, with a manifest.

As Harbor's trial does it (harbor 0.25, trial.py `_collect_artifacts_phased` and
artifact_handler.py), in two passes: the session's container first (its commands, then its
artifacts), then the sidecars (theirs). A command's failure, timeout or error is recorded
and collection goes on (Harbor's hooks are best-effort: they never fail the trial); an
artifact that is missing or cannot be copied is recorded `failed` and the rest go on; one
whose place among the collected files overlaps one kept before it is `skipped` (Harbor keeps
the first claimant).

What the harness left is hostile: nothing collected is run on the worker, only read as
bytes from the engine's archive stream (activities/artifact_archive.py: regular files and
folders, never a link, within MAX_FILES files and MAX_BYTES bytes for the whole collection,
each left-out file named in the manifest and `limit_hit` set). In the session's container a
source reached through a link (its own or a folder's above it) is refused, checked with the
toolbox's `realpath` while nothing of the session runs there.

The manifest (`manifest.json` beside the files, under `collected-attempt{n}/`) has
Harbor's entry fields (`source`, `destination` as `artifacts/{name}`, `type`, `status`,
`service`, `exclude`) plus Polar's (`files`, `bytes`, `notes`), the commands' outcomes,
the limits and whether one was hit.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from activities import safe_files
from activities.artifact_archive import Budget, ChunkStream, StreamTooLong, read_artifact
from activities.heartbeat import Heartbeater
from activities.shell_command import ProcessOutcome
from polar.contracts import CollectedArtifacts, RuntimeHandle
from polar.storage import Storage, artifact_key
from polar.tasks.collect_spec import MAIN, MANIFEST, ArtifactPath, CollectCommand, CollectSpec

__all__ = ["ServiceRuntime", "collect", "collection_folder"]

OUTPUT_TAIL = 1500
"""The end of a command's output kept in the manifest."""


@runtime_checkable
class ServiceRuntime(Protocol):
    """A runtime that can run commands in its services and stream paths out of them
    (activities/runtimes/kinds/container_services.py: docker, podman)."""

    async def service_exec(
        self,
        handle: RuntimeHandle,
        service: str,
        command: str,
        *,
        timeout_s: float,
        user: str | None,
        log_name: str,
    ) -> ProcessOutcome: ...

    def archive_stream(
        self, handle: RuntimeHandle, service: str, path: str
    ) -> contextlib.AbstractContextManager[Any]: ...

    def resolved_path(self, handle: RuntimeHandle, path: str) -> str | None: ...

    def log_paths(self, handle: RuntimeHandle, log_name: str) -> tuple[Path, Path]: ...

    async def put_artifact(self, handle: RuntimeHandle, src: Path, target: str) -> None: ...


def collection_folder(attempt: int) -> str:
    """The artifacts folder of a run attempt's collection (`collected-attempt{n}`)."""
    return f"collected-attempt{attempt}"


async def collect(
    runtime: object,
    handle: RuntimeHandle,
    spec: CollectSpec,
    storage: Storage,
    attempt: int,
) -> CollectedArtifacts:
    """Run `spec` in the reaped runtime; its files and manifest in S3, and their summary."""
    prefix = artifact_key(handle.session_id, collection_folder(attempt) + "/x")[:-1]
    run = _Collection(runtime, handle, storage, prefix)
    async with Heartbeater(step="collecting artifacts", artifacts=len(spec.artifacts)):
        for sidecars in (False, True):  # the session's container first, then its sidecars
            for index, command in enumerate(spec.commands):
                if (command.on != MAIN) == sidecars:
                    await run.command(index, command)
            for artifact in spec.artifacts:
                if (artifact.on != MAIN) == sidecars:
                    await run.artifact(artifact)
    manifest = {
        "entries": run.entries,
        "commands": run.commands,
        "limits": run.budget.limits,
        "limit_hit": run.budget.limit_hit,
    }
    key = prefix + MANIFEST
    await asyncio.to_thread(storage.put_json, key, manifest)
    return CollectedArtifacts(
        prefix=prefix,
        manifest_key=key,
        files=sum(len(e["files"]) for e in run.entries),
        bytes=sum(e["bytes"] for e in run.entries),
        missing=sum(e["status"] == "failed" for e in run.entries),
        limit_hit=run.budget.limit_hit,
    )


class _Collection:
    def __init__(self, runtime: object, handle: RuntimeHandle, storage: Storage, prefix: str):
        self.runtime = runtime if isinstance(runtime, ServiceRuntime) else None
        self.kind = getattr(runtime, "kind", "?")
        self.handle, self.storage, self.prefix = handle, storage, prefix
        self.budget = Budget()
        self.entries: list[dict[str, Any]] = []
        self.commands: list[dict[str, Any]] = []
        self.claimed: list[str] = []

    async def command(self, index: int, command: CollectCommand) -> None:
        record: dict[str, Any] = {
            "command": command.command,
            "service": command.on,
            "user": command.user,
            "timeout_s": command.timeout_s,
        }
        self.commands.append(record)
        if self.runtime is None:
            record["error"] = f"the {self.kind} runtime cannot run collect commands"
            return
        log_name = f"collect-{index}"
        try:
            outcome = await self.runtime.service_exec(
                self.handle,
                command.on,
                command.command,
                timeout_s=command.timeout_s,
                user=command.user,
                log_name=log_name,
            )
        except Exception as exc:  # noqa: BLE001 - recorded; collection goes on (Harbor's)
            record["error"] = f"{type(exc).__name__}: {exc}"[:OUTPUT_TAIL]
            return
        record["exit_code"], record["timed_out"] = outcome.exit_code, outcome.timed_out
        if outcome.limit_exceeded:
            record["error"] = outcome.limit_exceeded
        text = b"".join(
            safe_files.read_log_file(p, limit=4 * OUTPUT_TAIL)
            for p in self.runtime.log_paths(self.handle, log_name)
        )
        record["output"] = text.decode(errors="replace")[-OUTPUT_TAIL:]

    async def artifact(self, artifact: ArtifactPath) -> None:
        name = artifact.kept_as
        entry: dict[str, Any] = {
            "source": artifact.source,
            "destination": f"artifacts/{name}",
            "type": None,
            "status": "failed",
            "service": artifact.service,
            "exclude": list(artifact.exclude),
            "files": [],
            "bytes": 0,
            "notes": [],
        }
        self.entries.append(entry)
        overlap = next((c for c in self.claimed if _nested(c, name)), None)
        if overlap is not None:
            entry["status"] = "skipped"
            entry["notes"].append(f"its place overlaps artifacts/{overlap}, kept first")
            return
        self.claimed.append(name)
        if self.runtime is None:
            entry["notes"].append(f"the {self.kind} runtime cannot copy artifacts out")
            return
        problem = await self._through_a_link(artifact)
        if problem is not None:
            entry["notes"].append(problem)
            return
        try:
            got = await asyncio.to_thread(self._read, artifact)
        except FileNotFoundError:
            entry["notes"].append(f"missing: no such path in {artifact.on}")
            return
        except Exception as exc:  # noqa: BLE001 - recorded; the rest go on
            entry["notes"].append(f"not copied: {type(exc).__name__}: {exc}"[:500])
            return
        entry["type"], entry["notes"] = got.type, entry["notes"] + got.notes
        if got.left_out > len(got.notes):
            entry["notes"].append(f"... and {got.left_out - len(got.notes)} more left out")
        if got.type not in ("file", "directory"):
            return
        for rel, data in got.files:
            key = self.prefix + (f"{name}/{rel}" if rel else name)
            await asyncio.to_thread(self.storage.put_bytes, key, data)
            entry["files"].append(rel)
            entry["bytes"] += len(data)
        entry["status"] = "ok"

    async def _through_a_link(self, artifact: ArtifactPath) -> str | None:
        """Why a source in the session's container may not be copied: reached through a
        link (nothing of the session runs there now, so the answer holds while we copy)."""
        if artifact.on != MAIN or self.runtime is None:
            return None
        try:
            real = await asyncio.to_thread(self.runtime.resolved_path, self.handle, artifact.source)
        except Exception as exc:  # noqa: BLE001 - cannot tell: not copied
            return f"not copied: its path could not be checked ({type(exc).__name__}: {exc})"
        if real is None:
            return f"missing: no such path in {MAIN}"
        if real != posixpath.normpath(artifact.source):
            return f"its path goes through a link (to {real[:200]}): not followed"
        return None

    def _read(self, artifact: ArtifactPath) -> Any:
        assert self.runtime is not None
        with self.runtime.archive_stream(self.handle, artifact.on, artifact.source) as chunks:
            try:
                return read_artifact(
                    ChunkStream(_chunks(chunks), self.budget), artifact.exclude, self.budget
                )
            except StreamTooLong as exc:
                got = exc.partial  # type: ignore[attr-defined]
                got.leave_out("", f"{exc}: the rest of it was not read")
                return got


def _chunks(chunks: Any) -> Iterator[bytes]:
    yield from chunks


def _nested(a: str, b: str) -> bool:
    """Whether two names among the collected files are the same or one holds the other."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")
