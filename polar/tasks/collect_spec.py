"""What a session's runtime gives up after the harness: commands that snapshot its state, and
the paths copied out of it into the session's stored artifacts (`RuntimeSpec.collect`, and a
step's own `TaskStep.collect`, added to it for that step).

After the harness ran and was reaped (nothing of its runs on), the run stage runs `commands`
in their service (None: the session's container, else a sidecar by name), each within its
`timeout_s`; a command that fails or times out is recorded and collection goes on. Then each
of `artifacts` is copied out of its service: regular files and folders only (a link is never
followed), within a bound on files and bytes, into S3 with a manifest of what was collected,
missing, skipped or left out (activities/artifact_collection.py). The evaluator's fresh
runtime gets them back at their `source` paths, as root-owned data
(activities/artifact_placement.py). Harbor tasks' `artifacts` and `[[verifier.collect]]` map
here (polar/tasks/harbor_artifacts.py).
"""

from __future__ import annotations

from pathlib import PurePosixPath

from pydantic import Field, field_validator, model_validator

from polar.tasks.strict import MAX_TIMEOUT_S, StrictModel

__all__ = ["MANIFEST", "ArtifactPath", "CollectCommand", "CollectSpec", "host_name"]

MANIFEST = "manifest.json"
"""The manifest's name beside the collected files (reserved: no artifact may land there)."""
MAX_ARTIFACTS = 64
MAX_COMMANDS = 32
SERVICE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
"""A service's name (a sidecar's, `Sidecar.name`); `main` is the session's own container."""
MAIN = "main"
USER_PATTERN = r"^(?:[0-9]{1,10}|[A-Za-z_][A-Za-z0-9_.-]{0,31})$"
"""A user as an engine's exec takes it: a name in the image's /etc/passwd, or a uid."""


def host_name(path: str) -> str:
    """Where a source (or a destination) lands among the collected files: its parts, no root
    (`/var/log/x` → `var/log/x`), as Harbor mirrors a source under its `artifacts/`."""
    parts = [p for p in PurePosixPath(path).parts if p not in ("", "/", ".", "..")]
    return "/".join(parts)


class ArtifactPath(StrictModel):
    """A path copied out of a service after the harness: `source` (absolute in that service;
    a file or a folder), kept under `destination` (a relative name; None: the source's own
    path), folder members matching an `exclude` pattern (fnmatch, against the member's path
    or any of its trailing parts, as tar's --exclude) left out."""

    source: str = Field(min_length=2, max_length=1024)
    destination: str | None = Field(default=None, min_length=1, max_length=512)
    exclude: list[str] = Field(default_factory=list, max_length=64)
    service: str | None = Field(default=None, pattern=SERVICE_PATTERN)
    """None or `main`: the session's own container; else a sidecar's name."""

    @field_validator("source")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/") or "\\" in v or any(ord(c) < 32 for c in v):
            raise ValueError(f"source {v!r:.80}: an absolute path with no control characters")
        if ".." in PurePosixPath(v).parts:
            raise ValueError(f"source {v!r:.80}: no '..' parts")
        if not host_name(v):
            raise ValueError("source '/': the whole file system is not an artifact")
        return v

    @field_validator("destination")
    @classmethod
    def _relative(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if v.startswith("/") or "\\" in v or ".." in PurePosixPath(v).parts or not host_name(v):
            raise ValueError(f"destination {v!r:.80}: a relative name, no '..' parts")
        return v

    @model_validator(mode="after")
    def _not_the_manifest(self) -> ArtifactPath:
        if self.kept_as == MANIFEST:
            raise ValueError(f"{self.source}: '{MANIFEST}' is the collection's manifest")
        return self

    @property
    def kept_as(self) -> str:
        """Its name among the collected files."""
        return host_name(self.destination or self.source)

    @property
    def on(self) -> str:
        """The service it is copied from (`main`: the session's container)."""
        return self.service or MAIN


class CollectCommand(StrictModel):
    """A command run in a service after the harness and before the copies (a snapshot of
    state into a file an artifact then copies): with the toolbox's bash in the session's
    workspace (`main`), with the sidecar's `sh` in a sidecar; as `user` (None: the image's)."""

    command: str = Field(min_length=1, max_length=16_384)
    service: str | None = Field(default=None, pattern=SERVICE_PATTERN)
    timeout_s: float = Field(default=60.0, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    user: str | None = Field(
        default=None, pattern=r"^(?:[0-9]{1,10}|[A-Za-z_][A-Za-z0-9_.-]{0,31})$"
    )

    @property
    def on(self) -> str:
        return self.service or MAIN


class CollectSpec(StrictModel):
    """The commands then the copies of one collection (see the module)."""

    commands: list[CollectCommand] = Field(default_factory=list, max_length=MAX_COMMANDS)
    artifacts: list[ArtifactPath] = Field(default_factory=list, max_length=MAX_ARTIFACTS)

    @property
    def empty(self) -> bool:
        return not self.commands and not self.artifacts

    def services(self) -> set[str]:
        """Every service it names besides `main`."""
        named = {c.on for c in self.commands} | {a.on for a in self.artifacts}
        return named - {MAIN}

    def plus(self, more: CollectSpec | None) -> CollectSpec:
        """This one with `more`'s commands and artifacts after its own (a step's, after the
        task's, as Harbor appends them)."""
        if more is None or more.empty:
            return self
        # each part was checked; together they may hold up to twice the most of one
        return CollectSpec.model_construct(
            commands=[*self.commands, *more.commands],
            artifacts=[*self.artifacts, *more.artifacts],
        )
