"""A graded run's collected artifacts (activities/artifact_collection.py) put back at their
source paths in the evaluator's fresh runtime, as Harbor's separate verifier gets them
(harbor 0.25, artifact_handler.py `upload_artifacts`: every collected entry at its original
`source`, a folder emptied first, parents made).

Only what the manifest records as collected (`ok`) comes back, read from S3 (the worker
wrote it there: regular files with checked names) into a worker folder, then put into the
runtime as data: root-owned, files 0644 and folders 0755 (no exec or set-id bit), never run.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path, PurePosixPath
from typing import Any

from activities.artifact_collection import ServiceRuntime
from polar.contracts import CollectedArtifacts, RuntimeHandle
from polar.storage import Storage

__all__ = ["artifacts_putter", "place_artifacts", "stage_artifacts"]


def stage_artifacts(
    storage: Storage, collected: CollectedArtifacts, dest: Path
) -> list[tuple[str, Path]]:
    """The collected entries read from S3 into `dest` (an empty worker dir): (source path in
    the runtime, its staged file or folder), in the manifest's order."""
    manifest: Any = storage.get_json(collected.manifest_key)
    staged: list[tuple[str, Path]] = []
    for index, entry in enumerate(manifest.get("entries", [])):
        if entry.get("status") != "ok" or entry.get("type") not in ("file", "directory"):
            continue
        name = str(entry["destination"]).removeprefix("artifacts/")
        local = dest / str(index)
        if entry["type"] == "file":
            _write(local, storage.get_bytes(collected.prefix + name))
        else:
            local.mkdir(mode=0o755)
            for rel in entry.get("files", []):
                if not _safe_rel(rel):
                    continue
                _write(local / rel, storage.get_bytes(f"{collected.prefix}{name}/{rel}"))
        staged.append((str(entry["source"]), local))
    return staged


async def place_artifacts(
    runtime: object, handle: RuntimeHandle, staged: list[tuple[str, Path]]
) -> None:
    """Put each staged entry at its source path in the runtime (as root, replacing what is
    there); ValueError where the runtime cannot."""
    if not staged:
        return
    if not isinstance(runtime, ServiceRuntime):
        raise ValueError(f"the {getattr(runtime, 'kind', '?')} runtime cannot take artifacts")
    for source, local in staged:
        await runtime.put_artifact(handle, local, source)


def _safe_rel(rel: Any) -> bool:
    if not isinstance(rel, str) or not rel or rel.startswith("/"):
        return False
    return all(part not in ("", ".", "..") for part in PurePosixPath(rel).parts)


def _write(path: Path, data: bytes) -> None:
    for parent in reversed(path.parents):
        if not parent.exists():
            parent.mkdir(mode=0o755)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(path, 0o644)


def artifacts_putter(
    storage: Storage,
    collected: CollectedArtifacts | None,
    runtime: object,
    handle: RuntimeHandle,
) -> Callable[[], Awaitable[int]] | None:
    """What an evaluator calls to put the graded run's collected artifacts into its fresh
    runtime (`EvaluationJob.put_artifacts`): how many entries it put; None: there are none."""
    if collected is None:
        return None

    async def put() -> int:
        with tempfile.TemporaryDirectory(prefix="polar-artifacts-") as tmp:
            staged = await asyncio.to_thread(stage_artifacts, storage, collected, Path(tmp))
            await place_artifacts(runtime, handle, staged)
            return len(staged)

    return put
