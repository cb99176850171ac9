"""A harness symlink in any place the worker writes or reads back (the session's home and
scratch, its evaluator's scratch) is never followed: a real local session plants them as its
own user, then the worker extracts and applies the patch and writes a harness config."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from activities.evaluators.patches import apply_patch, extract_patch
from activities.harnesses.base import write_config
from activities.runtimes.kinds.local import LocalRuntime
from activities.safe_files import UnsafePath
from polar.contracts import PrepareRequest
from polar.tasks.spec import DirSource, RuntimeSpec

NAMES = ("model.patch", "model-apply.patch", "traces.jsonl", "extract.git", ".codex")


def _repo(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run([*git, *args], cwd=repo, check=True)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True
    )
    return repo, head.stdout.strip()


async def test_links_planted_where_the_worker_writes_are_never_followed(tmp_path: Path) -> None:
    repo, base = _repo(tmp_path)
    victims = tmp_path / "victims"
    victims.mkdir()
    victim = victims / "victim.txt"
    victim.write_text("root's\n")
    runtime = LocalRuntime(tmp_path / "runtimes")
    handle = await runtime.prepare(
        PrepareRequest(
            session_id=f"nf-{uuid.uuid4().hex[:8]}",
            task_id="nf",
            runtime=RuntimeSpec.model_validate({"kind": "local"}),
            source=DirSource(path=str(repo)),
        )
    )
    try:
        home, scratch = runtime.home(handle), runtime.scratch(handle)
        plant = " && ".join(
            f"ln -sfn {victim} {folder}/{name}" for folder in (home, scratch) for name in NAMES
        )
        outcome = await runtime.run(
            handle, f"{plant} && echo b > b.txt", env={}, log_name="plant", timeout_s=60
        )
        assert outcome.exit_code == 0
        patch, files, _ = await extract_patch(runtime, handle, base)
        assert files == ["b.txt"] and b"+b" in patch
        # the links are there again for the writes (as a harness's last run would leave them)
        await runtime.run(handle, plant, env={}, log_name="replant", timeout_s=60)
        await apply_patch(runtime, handle, patch, reset_to=base)
        with pytest.raises(UnsafePath):  # a folder on the way is a link: refused
            write_config(home, ".codex/config.toml", "x = 1\n", [])
        write_config(home, "traces.jsonl", "x = 1\n", [])  # a file link: replaced
        assert victim.read_text() == "root's\n"
        assert not (scratch / "model-apply.patch").is_symlink()
        assert (home / "traces.jsonl").read_text() == "x = 1\n"
    finally:
        await runtime.teardown(handle)
    assert victim.read_text() == "root's\n"
