"""A session's changes as a patch: extract it from one runtime, filter it, apply it in another.

* `extract_patch`: `git diff` of the workspace against a base commit through a
  temporary index (`git add -A`), so new files, deletions, commits the harness
  made and binary files are all in it; junk (caches, `__pycache__`, harness
  config folders, `node_modules`, `*.pyc`) is left out, at `git add` and again
  on the diff. It runs on the worker, over a copy of the workspace the runtime made
  without running anything in the sandbox, with the worker's own git and a `PATH` of the
  worker's system dirs only (the trusted base: the harness may have replaced the
  sandbox's git, bash or python). Git runs there with nothing the repository controls: a git dir
  of the extraction's own (the workspace's objects read through `alternates`,
  the workspace its work tree), no system, global or repository config, no
  hooks, no attributes file, no external diff or textconv, so a `filter.<x>.clean`,
  a hook or an `attr` the harness left never runs. A patch over
  `POLAR_MAX_PATCH_BYTES` is refused, measured before the worker reads any of it.
* `drop_protected`: the harness's changes to task-owned paths (globs) are taken
  out of the patch, so the fresh runtime keeps its own copy of them (and files
  the harness added there never appear).
* `apply_patch`: `git apply`, `git apply --3way`, `git apply --reject`,
  `patch --fuzz=5`, the workspace reset to its baseline between tries.
"""

from __future__ import annotations

import asyncio
import codecs
import fnmatch
import functools
import re
import shlex
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from activities import safe_files
from activities.evaluators.base import GIT, EvaluatorError, Tick, run_in
from activities.heartbeat import heartbeating
from activities.runtimes.base import Runtime
from activities.shell_command import run_shell
from polar.contracts import RuntimeHandle, invalid_input
from polar.settings import WorkerSettings, get_settings

# path components that are never part of a fix
JUNK_DIRS = frozenset(
    {
        "__pycache__",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".hypothesis",
        ".tox",
        ".nox",
        ".eggs",
        ".ipynb_checkpoints",
        "node_modules",
        ".venv",
        ".cache",
        ".codex",
        ".claude",
        ".qwen",
        ".pi",
        ".gemini",
        ".polar",
        ".git",
    }
)
JUNK_FILES = ("*.pyc", "*.pyo", "*.egg-info", ".coverage", ".coverage.*", ".DS_Store")

# (name, command): tried in order until one exits 0; the workspace is reset between them
APPLY_STRATEGIES = (
    ("git apply", "git apply --verbose --whitespace=nowarn {patch}"),
    ("git apply --3way", "git apply --verbose --3way --whitespace=nowarn {patch}"),
    ("git apply --reject", "git apply --verbose --reject --whitespace=nowarn {patch}"),
    ("patch --fuzz", "patch --batch --forward --no-backup-if-mismatch --fuzz=5 -p1 -i {patch}"),
)


class ExtractionFailed(EvaluatorError):
    """The session's changes cannot be read from its workspace (its git is gone or broken)."""


# --------------------------------------------------------------------------- paths


def is_junk(path: str, extra: Sequence[str] = ()) -> bool:
    """Whether a changed path is junk (caches, harness config, build output)."""
    parts = path.strip("/").split("/")
    if any(part in JUNK_DIRS or fnmatch.fnmatch(part, "*.egg-info") for part in parts):
        return True
    name = parts[-1]
    if any(fnmatch.fnmatch(name, pattern) for pattern in JUNK_FILES):
        return True
    return any(fnmatch.fnmatch(path, pattern) for pattern in extra)


@functools.lru_cache(maxsize=512)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end].replace("\\", "\\\\")
            out, i = out + "[" + ("^" + body[1:] if body.startswith("!") else body) + "]", end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def glob_match(path: str, pattern: str) -> bool:
    """Whether repo-relative `path` matches `pattern`: `*` and `?` stay within one name,
    `**/` is any number of folders (none included), `**` anything."""
    return _glob_regex(pattern.lstrip("/")).match(path.strip("/")) is not None


def _exclude_pathspecs(extra: Sequence[str]) -> list[str]:
    specs = [f":(exclude,glob)**/{d}/**" for d in sorted(JUNK_DIRS - {".git"})]
    specs += [f":(exclude,glob)**/{p}{tail}" for p in JUNK_FILES for tail in ("", "/**")]
    specs += [f":(exclude,glob){p}" for p in extra]
    return specs


def junk_excludes(extra: Sequence[str] = ()) -> str:
    """The junk as `git add` pathspecs, shell-quoted."""
    return " ".join(shlex.quote(s) for s in _exclude_pathspecs(extra))


def _clean_keeps_junk() -> str:
    """`git clean` arguments that leave junk folders (a venv, node_modules) in place."""
    names = sorted(JUNK_DIRS - {".git"}) + list(JUNK_FILES)
    return " ".join(f"-e {shlex.quote(n)}" for n in names)


# --------------------------------------------------------------------------- git revisions


def checked_base_commit(base_commit: str) -> str:
    """`base_commit` unchanged; a non-retryable EvaluatorError where git could read it as an
    option (empty, or starting with '-'). The TaskSpec refuses such a commit at submit; this
    is the worker's own check, before any git call sees it."""
    if not base_commit or base_commit.startswith("-"):
        raise invalid_input(
            f"base commit {base_commit!r:.80} is empty or starts with '-': git would read it "
            "as an option",
            "EvaluatorError",
        )
    return base_commit


def revision(rev: str, suffix: str = "") -> str:
    """`rev` as a git revision argument of a shell command line: after `--end-of-options`
    (git >= 2.24), so git never reads it as an option, and shell-quoted. `suffix` (such as
    `^{commit}`, or `:` and a quoted path) is appended as given."""
    return f"--end-of-options {shlex.quote(rev)}{suffix}"


def resolve_commit(rev: str, var: str = "commit") -> str:
    """A shell line that sets `$var` to the full hash of commit `rev`, or exits 1 with git's
    message. For git commands that take no `--end-of-options` before their revision in
    git < 2.44 (checkout, rev-parse): they get the hash, which cannot read as an option."""
    return f"{var}=$({GIT} rev-list -n 1 {revision(rev, '^{commit}')} --) || exit 1"


EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
CLEAN_GIT = (
    f"{GIT} -c core.attributesFile=/dev/null -c core.excludesFile=/dev/null "
    f"-c attr.tree={EMPTY_TREE} -c core.sparseCheckout=false -c core.untrackedCache=false "
    "-c core.splitIndex=false -c diff.external= -c submodule.recurse=false"
)
"""Git on the harness's work: on top of GIT, no attributes file nor (git >= 2.42) the work
tree's `.gitattributes`, no sparse checkout, untracked cache or split index."""
CLEAN_GIT_ENV = """unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_COMMON_DIR \
  GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_CONFIG GIT_CONFIG_PARAMETERS GIT_CONFIG_COUNT \
  GIT_ATTR_SOURCE GIT_NAMESPACE GIT_EXTERNAL_DIFF XDG_CONFIG_HOME
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_SYSTEM=/dev/null GIT_CONFIG_GLOBAL=/dev/null \
  GIT_ATTR_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0"""
"""No system or global config, nor any git variable the environment may carry."""


def extract_command(base: str, gitdir: str, out: str, exclude: Sequence[str] = ()) -> str:
    """The shell script that writes the workspace's changes against `base` to `out`: a git
    diff through a git dir of its own (`gitdir`, made afresh, removed after) whose objects
    are the workspace's (`alternates`), with the work tree's own index copied as its stat
    cache. Nothing of the workspace's `.git` but its objects
    and index is read: its config (filters, textconv, fsmonitor), hooks and info files
    never are."""
    return f"""set -eu
ws=$(pwd -P)
[ -d "$ws/.git/objects" ] || {{ echo "fatal: the workspace has no .git directory" >&2; exit 1; }}
{CLEAN_GIT_ENV}
gd={shlex.quote(gitdir)}; rm -rf "$gd"; mkdir -p "$gd/objects/info" "$gd/refs"
printf 'ref: refs/heads/polar-extract\n' > "$gd/HEAD"
printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n' > "$gd/config"
printf '%s/.git/objects\n' "$ws" > "$gd/objects/info/alternates"
export GIT_DIR="$gd" GIT_WORK_TREE="$ws" GIT_INDEX_FILE="$gd/index"
{CLEAN_GIT} cat-file -e {revision(base, "^{commit}")}
src="$ws/.git/index"
# -p: the copy keeps the index's mtime, which git's racy-entry check compares files with
# (git compares whole seconds: a fresh mtime would hide a same-size edit of that second)
if [ -f "$src" ] && [ ! -L "$src" ]; then cp -p "$src" "$GIT_INDEX_FILE"; fi
if [ ! -f "$GIT_INDEX_FILE" ] || ! {CLEAN_GIT} ls-files -s >/dev/null 2>&1; then
  rm -f "$GIT_INDEX_FILE"; {CLEAN_GIT} read-tree {revision(base)}
fi
{CLEAN_GIT} add -A -- . {junk_excludes(exclude)}
{CLEAN_GIT} diff --cached --binary --full-index --no-renames --no-ext-diff --no-textconv \\
  {revision(base)} > {shlex.quote(out)}
rm -rf "$gd"
"""


# --------------------------------------------------------------------------- patch text


def _unquote(path: bytes) -> str:
    if path.startswith(b'"') and path.endswith(b'"'):
        raw = codecs.escape_decode(path[1:-1])[0]
        assert isinstance(raw, bytes)
        return raw.decode("utf-8", "surrogateescape")
    return path.decode("utf-8", "surrogateescape")


def _header_path(header: bytes) -> str:
    """The path of a `diff --git a/X b/X` header (renames off, so both sides agree)."""
    rest = header[len(b"diff --git ") :].rstrip(b"\r\n")
    if rest.startswith(b'"'):
        end = rest.index(b'"', 1)
        while rest[end - 1 : end] == b"\\":
            end = rest.index(b'"', end + 1)
        first = _unquote(rest[: end + 1])
    else:
        first = rest[: (len(rest) - 1) // 2].decode("utf-8", "surrogateescape")
    return first[2:] if first.startswith(("a/", "b/")) else first


def split_patch(patch: bytes) -> list[tuple[str, bytes]]:
    """A git diff split into (path, chunk) per file; text before the first file is dropped."""
    chunks: list[tuple[str, bytes]] = []
    current: list[bytes] = []
    for line in patch.splitlines(keepends=True):
        if line.startswith(b"diff --git "):
            if current:
                chunks.append((_header_path(current[0]), b"".join(current)))
            current = [line]
        elif current:
            current.append(line)
    if current:
        chunks.append((_header_path(current[0]), b"".join(current)))
    return chunks


def _partition(patch: bytes, drop: Any) -> tuple[bytes, list[str], list[str]]:
    kept, kept_paths, dropped = [], [], []
    for path, chunk in split_patch(patch):
        if drop(path):
            dropped.append(path)
        else:
            kept.append(chunk)
            kept_paths.append(path)
    return b"".join(kept), kept_paths, dropped


def filter_patch(patch: bytes, extra: Sequence[str] = ()) -> tuple[bytes, list[str], list[str]]:
    """(patch without junk files, kept paths, dropped paths)."""
    return _partition(patch, lambda path: is_junk(path, extra))


def drop_protected(patch: bytes, protected: Sequence[str]) -> tuple[bytes, list[str], list[str]]:
    """(patch without the files matching a `protected` glob, kept paths, dropped paths)."""
    return _partition(patch, lambda path: any(glob_match(path, g) for g in protected))


def patch_files(patch: str) -> list[str]:
    """The paths a (text) patch touches."""
    return [path for path, _ in split_patch(patch.encode())]


# --------------------------------------------------------------------------- runtime steps


TRUSTED_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
"""The PATH of what the worker runs over a session's work: the worker host's own system dirs,
never a dir of the session's (its venv, its HOME, its image)."""


def trusted_env(home: Path) -> dict[str, str]:
    """The whole environment of a worker-side command over a session's work."""
    return {"PATH": TRUSTED_PATH, "HOME": str(home), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


async def extract_patch(
    runtime: Runtime,
    handle: RuntimeHandle,
    base_commit: str,
    *,
    timeout_s: float = 300,
    exclude: Sequence[str] = (),
    on_tick: Tick = None,
) -> tuple[bytes, list[str], list[str]]:
    """(patch, files, dropped junk files): the workspace against `base_commit`, binary-safe.

    Nothing runs in the session's runtime, whose binaries, venv and PATH the harness could
    have replaced: the runtime copies its workspace out to the worker (`copy_workspace`, no
    process in the sandbox), and the worker's own git diffs the copy, with `TRUSTED_PATH`
    and an environment of its own, in a folder of the worker's that no sandbox can reach.
    Raises ExtractionFailed when the copy's git cannot produce the patch, and the
    non-retryable EvaluatorError for a `base_commit` git would read as an option."""
    checked_base_commit(base_commit)
    settings = get_settings(WorkerSettings)
    limit = settings.max_patch_bytes
    parent = settings.data_dir / "extract"
    parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{handle.session_id}-", dir=parent))  # 0700
    try:
        copy = folder / "workspace"
        copy.mkdir()
        await heartbeating(
            runtime.copy_workspace(handle, copy, JUNK_DIRS - {".git"}),
            step="copying the workspace out",
        )
        out, gitdir = folder / "model.patch", folder / "extract.git"
        logs = folder / "extract.stdout", folder / "extract.stderr"
        outcome = await run_shell(
            extract_command(base_commit, str(gitdir), str(out), exclude),
            cwd=copy,
            env=trusted_env(folder),
            stdout=logs[0],
            stderr=logs[1],
            timeout_s=timeout_s,
            on_tick=on_tick,
        )
        if outcome.timed_out or outcome.exit_code != 0:
            why = "timed out" if outcome.timed_out else f"exited {outcome.exit_code}"
            log = b"".join(safe_files.read_log_file(p, limit=4000) for p in logs)
            raise ExtractionFailed(
                f"extracting the patch {why}: {log.decode(errors='replace').strip()[-2000:]}"
            )
        size = out.stat().st_size
        if size > limit:
            raise ExtractionFailed(
                f"the session's patch is larger than the limit of {limit} bytes "
                f"(POLAR_MAX_PATCH_BYTES): not graded ({size} bytes)"
            )
        patch = out.read_bytes()
    finally:
        await asyncio.to_thread(shutil.rmtree, folder, True)
    return filter_patch(patch, exclude)


async def apply_patch(
    runtime: Runtime,
    handle: RuntimeHandle,
    patch: bytes,
    *,
    name: str = "model",
    timeout_s: float = 300,
    strategies: Sequence[tuple[str, str]] = APPLY_STRATEGIES,
    reset_to: str = "HEAD",
    on_tick: Tick = None,
) -> tuple[str | None, list[dict[str, Any]]]:
    """Apply `patch` in the workspace: (strategy that worked or None, attempts). Between
    tries, and after the last failed one, the workspace goes back to commit `reset_to`."""
    scratch = runtime.scratch(handle)
    path = scratch / f"{name}-apply.patch"
    safe_files.write_bytes(scratch, path.name, patch)  # never through a link planted there
    reset = (
        f"{GIT} read-tree --reset -u {revision(reset_to)} && {GIT} clean -fdq {_clean_keeps_junk()}"
    )
    attempts: list[dict[str, Any]] = []
    for i, (strategy, template) in enumerate(strategies):
        if i:
            await run_in(runtime, handle, reset, f"apply-{name}-reset{i}", timeout_s)
        command = template.format(patch=shlex.quote(str(path)))
        code, timed_out, log = await run_in(
            runtime, handle, command, f"apply-{name}-{i}", timeout_s, on_tick
        )
        attempts.append({"strategy": strategy, "exit_code": code, "log": log[-2000:]})
        if code == 0 and not timed_out:
            return strategy, attempts
    await run_in(runtime, handle, reset, f"apply-{name}-reset", timeout_s)
    return None, attempts
