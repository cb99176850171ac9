"""Take a screenshot of the Temporal Web UI showing Polar sessions (docs/webui.png).

Starts a throwaway stack (Temporal dev server, SeaweedFS, an in-process worker)
on free ports, rolls out a small task whose sessions need no model, and
photographs the workflow list filtered by a Polar search attribute with
headless Chromium (Debian's `chromium`; installed with apt when missing).

    .venv/bin/python scripts/screenshot_webui.py [--out docs/webui.png]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import tempfile
import urllib.parse
from pathlib import Path

from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.settings import Settings
from polar.tasks.spec import TaskSpec
from tests.support.ports import free_port

REPO = Path(__file__).resolve().parent.parent
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1500,900",
    "--virtual-time-budget=15000",
]


def chromium() -> str:
    found = shutil.which("chromium")
    if not found:
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True)
        found = shutil.which("chromium")
    assert found, "chromium is not installable here"
    return found


def demo_spec(repo: Path) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "task_id": "webui-demo",
            "num_sessions": 6,
            "source": {"type": "dir", "path": str(repo)},
            "harness": {
                "command": "sleep $((RANDOM % 3)); echo ok > out.txt; exit $((RANDOM % 4 == 0))"
            },
            "evaluator": {
                "kind": "command",
                "command": "test -f out.txt && [ $((RANDOM % 2)) = 0 ]",
            },
        }
    )


async def run(out: Path) -> None:
    from activities.worker import running_workers

    with tempfile.TemporaryDirectory() as tmp:
        base = free_port(span=48)
        settings = Settings(
            data_dir=Path(tmp) / "data",
            temporal_address=f"127.0.0.1:{base}",
            temporal_ui_port=base + 1,
            s3_endpoint=f"http://127.0.0.1:{base + 30}",
            source_roots=tmp,  # the demo repo is made in this temp dir
        )
        stack = DevStack(settings, with_model=False, workers=0, die_with_parent=True)
        settings = stack.settings  # with the stack's generated secrets
        stack.start(stack.temporal())
        stack.start(stack.seaweedfs())
        from polar.storage import Storage

        Storage(settings).ensure_bucket()
        repo = Path(tmp) / "repo"
        repo.mkdir()
        try:
            async with running_workers(settings):
                polar = await PolarClient.connect(settings)
                result = await polar.wait(await polar.submit(demo_spec(repo)), timeout_s=120)
                print(f"task done: {[s.status.value for s in result.sessions]}")
            query = urllib.parse.quote("PolarTaskId = 'webui-demo'")
            url = (
                f"http://127.0.0.1:{settings.temporal_ui_port}/namespaces/default/workflows"
                f"?query={query}"
            )
            profile = Path(tmp) / "chromium"
            subprocess.run(
                [
                    chromium(),
                    *CHROMIUM_FLAGS,
                    f"--user-data-dir={profile}",
                    f"--screenshot={out.resolve()}",
                    url,
                ],
                check=True,
                capture_output=True,
                timeout=120,
            )
            print(f"screenshot of {url} → {out}")
        finally:
            stack.stop("seaweedfs", quiet=True)
            stack.stop("temporal", quiet=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "webui.png")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    asyncio.run(run(args.out))


if __name__ == "__main__":
    main()
