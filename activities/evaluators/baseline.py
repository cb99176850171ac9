"""The baseline of a prepared workspace: the git commit its later changes are diffed against.

Right after prepare (source in place, prepare actions done), the workspace's
state is recorded as a commit, through `Runtime.run` in the local runtime (the host's git),
and by the worker's own git on a copy of a container's workspace, what it wrote put back
(activities/evaluators/worker_git.py: a task's image needs no git):

* a workspace that is not a git work tree (no `.git`: a `dir` source, no source)
  gets `git init` (without git's template files) and its files committed as
  HEAD (the harness sees a clean repo), in three git calls (init, add, commit;
  the baseline ref is written into `packed-refs`): a session's prepare waits
  for them;
* an empty workspace on the worker's own disk (the local runtime, no source and
  no prepare action that wrote there) gets the same repository and commit
  written by the worker itself (`write_empty_repo`: the empty tree, the commit,
  HEAD, config, refs), with no process at all;
* a git work tree keeps its HEAD; if prepare left changes (a built file, an
  upload), they go into a commit on top of HEAD that HEAD does not move to.

Author, committer and dates are fixed, so the same source prepared twice (the
session's runtime and the evaluator's fresh one) has the same baseline id.
The id goes into `RuntimeHandle.baseline`; the commit is also kept under
`refs/polar/baseline` so git never prunes it. The evaluator diffs against the
recorded id, never a ref, so a harness that moves refs or commits changes
nothing. Junk (caches, virtualenvs, node_modules) stays out of the commit.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import zlib
from datetime import datetime
from pathlib import Path

from activities.evaluators.base import GIT, NO_GIT_ABOVE, Tick, run_in
from activities.evaluators.patches import junk_excludes
from activities.evaluators.worker_git import WorkerGitFailed, baseline_on_worker, uses_worker_git
from activities.runtimes.base import Runtime
from polar.contracts import RuntimeHandle

BASELINE_REF = "refs/polar/baseline"
MESSAGE = "polar: workspace after prepare"
IDENTITY = {
    "GIT_AUTHOR_NAME": "Polar",
    "GIT_AUTHOR_EMAIL": "polar@polar.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "Polar",
    "GIT_COMMITTER_EMAIL": "polar@polar.invalid",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+00:00",
}
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
GIT_INIT_CONFIG = (
    "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
    "\tlogallrefupdates = true\n"
)
"""What `git init` writes to `.git/config` (a non-bare repository, SHA-1 objects)."""
_MARK = re.compile(r"^polar-baseline=([0-9a-f]{40,64})$", re.MULTILINE)


def baseline_script(index: str) -> str:
    """The shell script that makes (if needed) and prints the baseline commit."""
    return f"""set -eu
{NO_GIT_ABOVE}
if [ ! -e .git ]; then
  {GIT} -c init.defaultBranch=main init -q --template= .
  {GIT} add -A -- . {junk_excludes()}
  {GIT} -c commit.gpgsign=false commit -q --no-verify --allow-empty -m "{MESSAGE}"
  read -r commit < .git/refs/heads/main
  printf '# pack-refs with: peeled fully-peeled sorted \\n%s {BASELINE_REF}\\n' "$commit" \\
    > .git/packed-refs
  echo "polar-baseline=$commit"
  exit 0
fi
idx={shlex.quote(index)}; rm -f "$idx"
src=$({GIT} rev-parse --git-path index)
# -p: the copy keeps the index's mtime, which git's racy-entry check compares files with
# (git compares whole seconds: a fresh mtime would hide a same-size edit of that second)
if [ -f "$src" ]; then cp -p "$src" "$idx"; fi
export GIT_INDEX_FILE="$idx"
parent=$({GIT} rev-parse -q --verify 'HEAD^{{commit}}' || true)
if [ -n "$parent" ] && [ ! -f "$src" ]; then {GIT} read-tree "$parent"; fi
{GIT} add -A -- . {junk_excludes()}
tree=$({GIT} write-tree)
if [ -n "$parent" ] && [ "$tree" = "$({GIT} rev-parse "$parent^{{tree}}")" ]; then
  commit=$parent
elif [ -n "$parent" ]; then
  commit=$({GIT} commit-tree -m "{MESSAGE}" "$tree" -p "$parent")
else
  commit=$({GIT} commit-tree -m "{MESSAGE}" "$tree")
fi
rm -f "$idx"
unset GIT_INDEX_FILE
{GIT} update-ref {BASELINE_REF} "$commit"
echo "polar-baseline=$commit"
"""


def _git_object(kind: str, body: bytes) -> tuple[str, bytes]:
    """(id, loose-object file content) of a git object."""
    raw = f"{kind} {len(body)}\0".encode() + body
    return hashlib.sha1(raw, usedforsecurity=False).hexdigest(), zlib.compress(raw)


def empty_baseline_commit() -> tuple[str, bytes]:
    """(id, loose object) of the baseline commit of an empty workspace, byte for byte what
    the script's `git commit` makes (IDENTITY's names and dates, MESSAGE)."""

    def who(role: str) -> str:
        when = int(datetime.fromisoformat(IDENTITY[f"GIT_{role}_DATE"]).timestamp())
        return f"{IDENTITY[f'GIT_{role}_NAME']} <{IDENTITY[f'GIT_{role}_EMAIL']}> {when} +0000"

    body = f"tree {EMPTY_TREE}\nauthor {who('AUTHOR')}\ncommitter {who('COMMITTER')}\n\n{MESSAGE}\n"
    return _git_object("commit", body.encode())


def write_empty_repo(workspace: Path) -> str:
    """Make the empty directory `workspace` the repository the baseline script would: `git
    init` (no template) on branch main, HEAD the empty tree's baseline commit, also under
    BASELINE_REF; its commit id. Only what git needs is written (HEAD, config, the two
    objects, both refs in `packed-refs`): git makes `objects/pack`, `refs/heads` and the
    rest when it first writes there. The worker's own files: the caller gives them to the
    sandbox's user."""
    if any(os.scandir(workspace)):
        raise ValueError(f"{workspace} is not empty")
    commit_id, commit = empty_baseline_commit()
    git = workspace / ".git"
    for sub in ("", "objects", "refs"):
        (git / sub).mkdir()
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_text(GIT_INIT_CONFIG)
    for oid, data in (_git_object("tree", b""), (commit_id, commit)):
        (git / "objects" / oid[:2]).mkdir()
        (git / "objects" / oid[:2] / oid[2:]).write_bytes(data)
    (git / "packed-refs").write_text(
        "# pack-refs with: peeled fully-peeled sorted \n"  # sorted by name: heads < polar
        f"{commit_id} refs/heads/main\n{commit_id} {BASELINE_REF}\n"
    )
    return commit_id


async def record_baseline(
    runtime: Runtime, handle: RuntimeHandle, *, timeout_s: float = 600, on_tick: Tick = None
) -> RuntimeHandle:
    """`handle` with its `baseline` set. `BaselineFailed` where it cannot be recorded: the git
    is the host's (the local runtime's, checked at prepare: activities/runtimes/sandboxes/
    needs.py) or the worker's own (a container's, on a copy: worker_git.py), so a failure is
    the host's (a full disk, the engine), never the task's; prepare fails and is retried
    rather than leaving a workspace its evaluator would blame on the task."""
    made = await runtime.init_empty_workspace(handle, write_empty_repo)
    if made is not None:
        return handle.model_copy(update={"baseline": made})
    if uses_worker_git(runtime):  # a container: the worker's git on a copy (worker_git.py)
        try:
            code, output = await baseline_on_worker(
                runtime, handle, baseline_script, IDENTITY, timeout_s, on_tick
            )
        except WorkerGitFailed as exc:
            raise BaselineFailed(f"recording the workspace baseline failed: {exc}") from None
    else:
        index = str(runtime.scratch(handle) / "baseline.index")
        code, _, output = await run_in(
            runtime, handle, baseline_script(index), "baseline", timeout_s, on_tick, env=IDENTITY
        )
    found = _MARK.search(output)
    if code != 0 or found is None:
        raise BaselineFailed(
            f"recording the workspace baseline of {handle.session_id} failed (exit {code}): "
            f"{output.strip()[-500:]}"
        )
    return handle.model_copy(update={"baseline": found.group(1)})


class BaselineFailed(RuntimeError):
    """The workspace's baseline commit could not be made (infra: the host or engine)."""
