"""Agent Skills for a harness: the task's skills dir copied where the harness reads skills.

A task's `harness.skills_dir` is a directory in the runtime (a Harbor task's
`[environment].skills_dir`, shipped in its image), one folder per skill with its
`SKILL.md`. As Harbor does, its contents are copied into the harness's own skills
folder (the adapter's `skills_folder`: `~/.claude/skills`, `~/.agents/skills`,
`~/.qwen/skills`) by the sandbox itself, as the harness's user, just before the
harness starts: a line of the same bash that runs it, inside the sealed box.
Nothing the worker trusts comes from it. A harness with no skills folder (`command`)
is told the directory in $POLAR_SKILLS_DIR instead.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from activities.harnesses.base import Launch

SKILLS_ENV = "POLAR_SKILLS_DIR"
"""Where a harness without a skills folder of its own finds the task's skills dir."""


def skills_copy(source: str, folder: str) -> str:
    """A bash line copying the contents of `source` into `folder` (made first); a source
    that is not a directory, or a copy that fails, is said on stderr and the harness runs."""
    src, dst = shlex.quote(source), shlex.quote(folder)
    return (
        f"if [ -d {src} ]; then mkdir -p {dst} && cp -R {src}/. {dst}/ || "
        f"printf 'polar: copying the skills in %s failed\\n' {src} >&2; "
        f"else printf 'polar: skills_dir %s is not a directory in the runtime\\n' {src} >&2; fi"
    )


def with_skills(launch: Launch, skills_dir: str | None, folder: str | None) -> Launch:
    """`launch` with the task's skills in place: copied into `folder` by a line before its
    command (its argv, no longer the whole command, dropped), or, where the harness has no
    skills folder (`folder` None), named in $POLAR_SKILLS_DIR. Unchanged without skills."""
    if not skills_dir:
        return launch
    if folder is None:
        return replace(launch, env={**launch.env, SKILLS_ENV: skills_dir})
    return replace(
        launch, command=f"{skills_copy(skills_dir, folder)}\n{launch.command}", argv=None
    )
