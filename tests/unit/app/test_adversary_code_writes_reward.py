"""The audit's `code-writes-reward` adversary (app/adversaries/code-writes-reward.sh)
in a scratch workspace, its verifier dir a scratch folder: the modules it plants in still
import, and a verifier that imports one and writes its reward 0 ends with the forged 1, at
its exit and again whenever it writes after that (the forked writer). On the stack it
flags a Harbor task whose test.sh runs the agent's code as the verifier
(tests/system/test_harbor_forgery.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.adversaries import ADVERSARIES, adversary_command, describe

VERIFIER = """import sys
sys.path.insert(0, {ws!r})
import calc
ok = calc.add(2, 3) == 5
with open({out!r} + "/reward.txt", "w") as f:
    f.write("1\\n" if ok else "0\\n")
"""


def _writers(marker: str) -> list[int]:
    """This user's processes whose command line names `marker` or whose working directory is
    in it (the forged writer forks from a verifier run from there, and outlives it)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            named = marker.encode() in (proc / "cmdline").read_bytes()
            if named or os.readlink(proc / "cwd").startswith(marker):
                found.append(int(proc.name))
    return found


@pytest.fixture
def planted(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(workspace, verifier dir): the adversary run in a workspace holding a wrong calc.py,
    its /logs/verifier moved to a scratch folder; its forged writers killed after."""
    ws, out = tmp_path / "ws", tmp_path / "verifier"
    ws.mkdir()
    out.mkdir()
    (ws / "calc.py").write_text(
        "from __future__ import annotations\n\n\ndef add(a, b):\n    return a - b\n"
    )
    command = adversary_command("code-writes-reward").replace("/logs/verifier", str(out))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "POLAR_INSTRUCTION": "fix add"}
    proc = subprocess.run(["bash", "-c", command], cwd=ws, env=env, capture_output=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    yield ws, out
    for pid in _writers(str(tmp_path)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_it_is_an_adversary_with_its_hack_described() -> None:
    assert "code-writes-reward" in ADVERSARIES
    assert "from inside the verifier" in describe("code-writes-reward")


def test_the_modules_still_import_and_a_conftest_is_planted(
    planted: tuple[Path, Path],
) -> None:
    ws, out = planted
    assert "_polar_audit_forge()" in (ws / "calc.py").read_text()
    assert "_polar_audit_forge()" in (ws / "conftest.py").read_text()
    # where no verifier dir exists (the agent's own run) importing it writes nothing
    out.rmdir()
    check = subprocess.run(
        [sys.executable, "-c", "import calc; print(calc.add(2, 3))"],
        cwd=ws,
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
    )
    assert check.stdout == "-1\n", check.stderr
    assert not out.exists() and not _writers(str(ws))


def test_a_verifier_importing_it_ends_with_the_forged_reward(
    planted: tuple[Path, Path], tmp_path: Path
) -> None:
    ws, out = planted
    script = tmp_path / "verify.py"
    script.write_text(VERIFIER.format(ws=str(ws), out=str(out)))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # the verifier wrote 0 (calc is still wrong), its exit wrote 1 over it
    assert (out / "reward.txt").read_text() == "1\n"
    assert not (out / "reward.json").exists()  # only the file the verifier wrote
    # a writer forked at import rewrites it when a verifier's shell writes 0 after
    assert _writers(str(tmp_path)), "no forged writer"
    (out / "reward.txt").write_text("0\n")
    deadline = time.monotonic() + 10
    while (out / "reward.txt").read_text() != "1\n" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (out / "reward.txt").read_text() == "1\n"
