"""The `vllm` fixture's choice: the lane's shared server once `up` noted it, none (start one
of its own) once `up` failed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.support.suite_vllm import FAILED_FILE, URL_FILE, shared_url


def test_waits_for_the_url_or_gives_up_on_a_failure(tmp_path: Path) -> None:
    def note_later() -> None:
        time.sleep(1.5)
        (tmp_path / URL_FILE).write_text("http://127.0.0.1:9/v1\n")

    threading.Thread(target=note_later).start()
    assert shared_url(tmp_path, timeout_s=30) == "http://127.0.0.1:9/v1"
    failed = tmp_path / "failed"
    failed.mkdir()
    (failed / FAILED_FILE).write_text("vllm exited with 1")
    assert shared_url(failed, timeout_s=30) is None
    assert shared_url(tmp_path / "never", timeout_s=1.5) is None
