"""Where a task's code comes from (a host dir or a git repository) and the actions that
prepare a runtime once it is in place."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from polar.host_paths import checked_host_path
from polar.tasks.strict import GIT_HELPER, MAX_TIMEOUT_S, StrictModel, git_arg


class DirSource(StrictModel):
    """Copy a directory of the worker host into the session's workspace: never `/` or a
    system directory (polar/host_paths.py)."""

    type: Literal["dir"] = "dir"
    path: str = Field(min_length=1)

    @field_validator("path")
    @classmethod
    def _allowed_path(cls, v: str) -> str:
        return checked_host_path(v, "source.path")


class GitSource(StrictModel):
    """Clone a git repository and check out `ref` (a branch, tag or commit).

    `url`: `https://`, `ssh://`, `git://`, `user@host:path`, or a local path
    (checked like `source.path`). Refused: a url or ref starting with '-' (git
    would read an option), remote helpers (`ext::`, `fd::`, any `<helper>::`,
    which run commands), and `file://` URLs (give the local path instead: one
    spelling for local repositories, checked one way).
    """

    type: Literal["git"] = "git"
    url: str
    ref: str | None = None

    @field_validator("url")
    @classmethod
    def _safe_url(cls, v: str) -> str:
        git_arg(v, "git url")
        if GIT_HELPER.match(v):
            raise ValueError(
                f"git url {v!r:.80} names a remote helper ('<transport>::', such as ext::), "
                "which runs commands: use https://, ssh://, git:// or a local path"
            )
        if v.lower().startswith("file:"):
            raise ValueError(
                f"git url {v!r:.80}: file:// URLs are refused, give the repository's local "
                "path instead (checked like source.path)"
            )
        return checked_host_path(v, "git url")

    @field_validator("ref")
    @classmethod
    def _safe_ref(cls, v: str | None) -> str | None:
        if v is not None and any(c.isspace() for c in git_arg(v, "git ref")):
            raise ValueError(f"git ref {v!r:.80} has blanks: not a branch, tag or commit")
        return v


Source = Annotated[DirSource | GitSource, Field(discriminator="type")]


class UploadAction(StrictModel):
    """Prepare action: copy a file or folder from the worker host into the runtime.

    A relative `dest` is relative to the workspace.
    """

    type: Literal["upload"] = "upload"
    src: str = Field(min_length=1, description="never / or a system directory (host_paths.py)")
    dest: str

    @field_validator("src")
    @classmethod
    def _allowed_src(cls, v: str) -> str:
        return checked_host_path(v, "upload src")


class CommandAction(StrictModel):
    """Prepare action: run a shell command in the workspace; retried on a non-zero exit."""

    type: Literal["run"] = "run"
    command: str = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=600, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    retries: int = Field(default=0, ge=0, le=10)


PrepareAction = Annotated[UploadAction | CommandAction, Field(discriminator="type")]
