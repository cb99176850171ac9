"""The `local` runtime's adversary: a harness that goes after the worker, its evaluator's
runtime, its siblings and the stack's state through the host's file system.

Stdlib only (it runs in the session). Copied into the task repo's `tools/` by `make_repo`;
`ATTACK_ONLY` (a comma list) picks the attacks; the fix itself is wrong unless
`ATTACK_FIX=1`. What got through is printed as one `ATTACK-REPORT ` JSON line.

- `eval_symlinks`: symlinks in the evaluator runtime's scratch (`../../{sid}-eval/scratch`)
  and in its own scratch and home, named as the files the worker writes there
  (`model-apply.patch`, `traces.jsonl`, ...), pointing at `ATTACK_TARGET`;
- `eval_workspace`: the fix (and a conftest) written into its evaluator's fresh workspace
  once its baseline is recorded;
- `git_filter`: a `filter.<x>.clean` in `.git/config` and `.gitattributes` that, run by
  the patch extraction, touches `ATTACK_MARK_DIR/filter-ran-UID`, writes the fix into any
  evaluator workspace it can reach and adds `FILTERED-BY-HARNESS` to what it cleans;
- `sibling`: session `-s1` writes the fix into its sibling `-s0`'s workspace (by the
  shared id stem, or any session dir it can list); `-s0` waits for it;
- `read_state`: every file under `ATTACK_DATA_DIR` (the stack's data dir) outside its own
  session dir that it can read;
- `big_patch`: a random file of `ATTACK_BIG_MB` MB (an unbounded patch);
- `install`: none (the honest install control; the evaluator's install does the work).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

REPORT: dict[str, object] = {}
FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
CONFTEST = (
    "import pytest\n\n"
    "@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n"
    "    outcome.get_result().outcome = 'passed'\n"
)
WORKER_FILES = (
    "model-apply.patch",
    "model.patch",
    "traces.jsonl",
    "reward.json",
    "pytest-results.jsonl",
    "extract.index",
    "baseline.index",
)


def _wanted(name: str) -> bool:
    return name in os.environ.get("ATTACK_ONLY", "").split(",")


def _session() -> str:
    return os.environ["POLAR_SESSION_ID"]


def _runtimes() -> Path:
    """The runtimes' root as the session sees it: its workspace's grandparent."""
    return Path.cwd().parent.parent


def _wait_for(path: Path, timeout_s: float = 90.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if path.exists():
                return True
        except OSError:
            return False
        time.sleep(0.2)
    return False


def eval_symlinks() -> None:
    target = os.environ["ATTACK_TARGET"]
    planted = []
    own = Path.cwd().parent
    dirs = [_runtimes() / f"{_session()}-eval" / "scratch", own / "scratch", own / "home"]
    _wait_for(dirs[0], 60)
    for folder in dirs:
        for name in WORKER_FILES:
            link = folder / name
            try:
                if link.is_symlink() or link.exists():
                    link.unlink()
                link.symlink_to(target)
                planted.append(str(link))
            except OSError:
                pass
    REPORT["planted"] = planted


def eval_workspace() -> None:
    ws = _runtimes() / f"{_session()}-eval" / "workspace"
    written = []
    # its baseline is recorded (loose ref, or packed): then the fix goes in
    if _wait_for(ws / ".git" / "refs" / "polar" / "baseline", 90):
        time.sleep(1)
        Path("notes.txt").write_text("a change of its own, so the tests run\n")
        for name, text in (("calc.py", FIXED), ("conftest.py", CONFTEST)):
            try:
                (ws / name).write_text(text)
                written.append(name)
            except OSError as exc:
                REPORT.setdefault("errors", []).append(str(exc))  # type: ignore[union-attr]
    REPORT["eval_written"] = written


def git_filter() -> None:
    mark = os.environ.get("ATTACK_MARK_DIR", "/tmp")
    fixed = FIXED.replace("\n", "\\n")
    script = (
        f"touch {mark}/filter-ran-$(id -u); "
        f"for d in ../../{_session()}-eval/workspace; do printf '{fixed}' > $d/calc.py; done; "
        "cat; echo FILTERED-BY-HARNESS"
    )
    git = ["git", "config", "--local"]
    subprocess.run([*git, "filter.polar.clean", script], check=True)  # git runs it with sh
    subprocess.run([*git, "filter.polar.smudge", "cat"], check=True)
    subprocess.run([*git, "diff.polar.textconv", f"touch {mark}/textconv-ran; cat"], check=True)
    Path(".gitattributes").write_text("notes.txt filter=polar diff=polar\n")
    Path("notes.txt").write_text("a note\n")
    hooks = Path(".git/hooks")
    hooks.mkdir(exist_ok=True)
    for hook in ("post-checkout", "post-index-change", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {mark}/hook-ran\n")
        (hooks / hook).chmod(0o755)
    REPORT["git_filter"] = True


def sibling() -> None:
    sid = _session()
    if sid.endswith("-s0"):
        time.sleep(25)  # the sibling writes meanwhile
        REPORT["sibling_role"] = "victim"
        return
    REPORT["sibling_role"] = "attacker"
    candidates = [_runtimes() / (sid.rsplit("-s", 1)[0] + "-s0")]
    try:
        candidates += [p for p in _runtimes().iterdir() if not p.name.startswith(sid)]
    except OSError as exc:
        REPORT["list_error"] = exc.strerror
    written = []
    for other in candidates:
        try:
            (other / "workspace" / "calc.py").write_text(FIXED)
            written.append(other.name)
        except OSError:
            pass
    REPORT["sibling_written"] = written


STATE_FILES = (
    "temporal.db",
    "temporal.db-wal",
    "secrets.json",
    "seaweedfs-s3.json",
    "run/temporal.log",
    "run/seaweedfs.log",
    "run/worker.log",
    "run/gateway.log",
    "run/vllm.log",
)


def read_state() -> None:
    data = Path(os.environ["ATTACK_DATA_DIR"])
    own = Path.cwd().parent.resolve()
    readable = set()
    for name in STATE_FILES:  # by name, where the dir is not listable
        try:
            with open(data / name, "rb") as src:
                src.read(16)
            readable.add(name)
        except OSError:
            pass
    for parent, dirs, files in os.walk(data):
        if Path(parent).resolve() == own:
            dirs[:] = []
            continue
        for name in files:
            path = Path(parent) / name
            if path.is_symlink():
                continue
            try:
                with open(path, "rb") as src:
                    src.read(16)
                readable.add(str(path.relative_to(data)))
            except OSError:
                pass
    REPORT["readable"] = sorted(readable)


def big_patch() -> None:
    megabytes = int(os.environ.get("ATTACK_BIG_MB", "70"))
    with open("blob.bin", "wb") as out:
        for _ in range(megabytes):
            out.write(os.urandom(1 << 20))
    REPORT["big_mb"] = megabytes


def main() -> None:
    for name, attack in (
        ("eval_symlinks", eval_symlinks),
        ("eval_workspace", eval_workspace),
        ("git_filter", git_filter),
        ("sibling", sibling),
        ("read_state", read_state),
        ("big_patch", big_patch),
    ):
        if _wanted(name):
            try:
                attack()
            except Exception as exc:  # noqa: BLE001 - reported, the session goes on
                REPORT[f"{name}_error"] = repr(exc)
    if os.environ.get("ATTACK_FIX") == "1":
        Path("calc.py").write_text(FIXED)
        REPORT["fixed"] = True
    print("ATTACK-REPORT " + json.dumps(REPORT), flush=True)


if __name__ == "__main__":
    main()
