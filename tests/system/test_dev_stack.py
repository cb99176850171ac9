"""`polar dev up | status | down` on their own ports: idempotent, and every part really serves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from polar.dev_console import dev_console_url
from tests.support.ports import free_port

pytestmark = pytest.mark.slow


def polar(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=os.environ | env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_dev_up_is_idempotent_and_down_stops_everything(tmp_path: Path) -> None:
    base = free_port(span=48)  # Temporal +0/+10/+20, UI +1, SeaweedFS +30..+37, gateway +40
    env = {
        "POLAR_DATA_DIR": str(tmp_path / "data"),
        "POLAR_TEMPORAL_ADDRESS": f"127.0.0.1:{base}",
        "POLAR_TEMPORAL_UI_PORT": str(base + 1),
        "POLAR_S3_ENDPOINT": f"http://127.0.0.1:{base + 30}",
        "POLAR_GATEWAY_PORT": str(base + 40),
        "POLAR_ADMIN_PORT": str(base + 42),
        "POLAR_CONSOLE_PORT": str(base + 43),
    }
    try:
        first = polar("dev", "up", "--no-model", env=env)
        assert first.returncode == 0, first.stdout + first.stderr
        for part in ("temporal", "seaweedfs", "gateway", "console", "worker"):
            assert f"{part}: started" in first.stdout
        console = f"http://127.0.0.1:{env['POLAR_CONSOLE_PORT']}"
        assert f"console: {console}" in first.stdout
        tasks = httpx.get(f"{console}/", timeout=10)  # the console reads the stack's Temporal
        assert tasks.status_code == 200 and 'id="task-list"' in tasks.text
        # noted for the clients of this data dir: their submissions link to it
        assert dev_console_url(tmp_path / "data") == console
        second = polar("dev", "up", "--no-model", env=env)
        assert second.returncode == 0, second.stdout + second.stderr
        for part in ("temporal", "seaweedfs", "gateway", "console", "worker"):
            assert f"{part}: already running" in second.stdout
        status = polar("dev", "status", env=env).stdout
        assert "gateway" in status and "running (pid" in status
        gateway = f"http://127.0.0.1:{env['POLAR_ADMIN_PORT']}"
        assert httpx.get(f"{gateway}/health").status_code == 200
        ui = httpx.get(f"http://127.0.0.1:{env['POLAR_TEMPORAL_UI_PORT']}/", timeout=10)
        assert ui.status_code == 200  # the Web UI is on
        assert (tmp_path / "data" / "temporal.db").exists()  # history survives a restart
    finally:
        down = polar("dev", "down", env=env)
    assert down.returncode == 0
    after = polar("dev", "status", env=env).stdout
    assert "running" not in after
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{gateway}/health", timeout=2)
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{console}/health", timeout=2)
    assert dev_console_url(tmp_path / "data") is None
