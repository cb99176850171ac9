"""The suite's vLLM, started once before the system lane and shared by its xdist workers.

    python -m tests.support.suite_vllm up RUN_DIR     # vLLM (CPU) serving the tiny model on a
                                                      # free port; RUN_DIR/vllm.url once it answers
    python -m tests.support.suite_vllm down RUN_DIR   # stop it

scripts/test.sh runs `up` in the background after the unit lane and hands the system lane
POLAR_TEST_VLLM_RUN_DIR; the `vllm` fixture (tests/conftest.py) then uses this one server
(waiting for `up` while it starts) instead of each worker starting its own. Where `up`
failed (RUN_DIR/vllm.failed), or without the variable (a hand run), a worker starts its own
as before. The server is the fixture's own configuration (`vllm_service`); tests reach it
through their own taps and gateways, so sharing it shares nothing else.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from app.devstack.stack import DevStack, StackError
from polar.settings import Settings
from tests.support.paths import REPO
from tests.support.ports import free_port

MODEL = REPO / ".polar" / "models" / "tiny-qwen3"
PYTHON = REPO / ".venv-vllm" / "bin" / "python"
URL_FILE, FAILED_FILE = "vllm.url", "vllm.failed"


def vllm_stack(run_dir: Path, port: int = 0) -> DevStack:
    """A stack of only vLLM, its pid file and log under `run_dir`."""
    settings = Settings(data_dir=run_dir, model_dir=MODEL, vllm_python=PYTHON, vllm_port=port)
    return DevStack(settings, workers=0, die_with_parent=False)


def up(run_dir: Path) -> int:
    """Start vLLM and note its /v1 URL (or why it failed); 0 once it answers."""
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    port = free_port()
    stack = vllm_stack(run_dir, port)
    try:
        stack.start(stack.vllm())
    except StackError as exc:
        (run_dir / FAILED_FILE).write_text(str(exc))
        print(f"suite vLLM: failed after {time.monotonic() - started:.0f} s: {exc}")
        return 1
    (run_dir / URL_FILE).write_text(f"http://127.0.0.1:{port}/v1\n")
    print(f"suite vLLM: up after {time.monotonic() - started:.0f} s on port {port}")
    return 0


def shared_url(run_dir: Path, timeout_s: float = 600.0) -> str | None:
    """The shared server's /v1 URL once `up` noted it; None when `up` failed or never
    finished within `timeout_s` (the caller then starts its own)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (run_dir / URL_FILE).exists():
            return (run_dir / URL_FILE).read_text().strip()
        if (run_dir / FAILED_FILE).exists():
            return None
        time.sleep(1)
    return None


def down(run_dir: Path) -> None:
    stack = vllm_stack(run_dir)
    if stack.pid("vllm") is not None:
        stack.stop("vllm", quiet=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("up", "down"):
        print(__doc__, file=sys.stderr)
        return 2
    run_dir = Path(argv[1])
    if argv[0] == "up":
        try:
            return up(run_dir)
        except BaseException as exc:  # the fixtures stop waiting and start their own
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / FAILED_FILE).write_text(f"{type(exc).__name__}: {exc}")
            raise
    down(run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
