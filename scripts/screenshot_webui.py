"""Take screenshots of the Temporal Web UI showing Polar sessions.

Starts a throwaway stack (Temporal dev server, SeaweedFS, an in-process worker)
on free ports, rolls out a small task whose sessions need no model, and
photographs the workflow list filtered by a Polar search attribute with
headless Chromium (Debian's `chromium`; installed with apt when missing).
With `--live DIR` it also runs a task whose sessions end at different times and,
while it runs, photographs the *User Metadata* tab of the task and of a running
session (their current details: stage, sessions done, mean reward, outcomes, the
console link) into DIR/webui-task-live.png and DIR/webui-session-live.png.

    .venv/bin/python scripts/screenshot_webui.py [--out docs/webui.png] [--live docs/console]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import tempfile
import time
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


def live_spec(repo: Path) -> TaskSpec:
    """Four sessions: two end at once (one graded 1, one 0), two run on for a minute."""
    return TaskSpec.model_validate(
        {
            "task_id": "webui-live",
            "num_sessions": 4,
            "source": {"type": "dir", "path": str(repo)},
            "harness": {
                "command": 'echo "$POLAR_SESSION_ID" > id.txt; case "$POLAR_SESSION_ID" in '
                "*s0|*s1) ;; *) sleep 60;; esac"
            },
            "evaluator": {"kind": "command", "command": "! grep -q s1 id.txt"},
        }
    )


def user_metadata_shot(url: str, out: Path) -> None:
    """`url`'s workflow page, its User Metadata tab open and its current details loaded."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    from tests.support.browser import headless_chromium

    with headless_chromium((1400, 760)) as driver:
        driver.get(url)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            links = driver.find_elements(By.CSS_SELECTOR, "a,button")
            tabs = [e for e in links if e.text.strip() == "User Metadata"]
            if tabs:
                tabs[0].click()
                break
            time.sleep(0.5)
        while time.monotonic() < deadline:
            if (
                "Polar console"
                in driver.find_element(By.TAG_NAME, "body").text.split("Current Details", 1)[-1]
            ):
                break
            ActionChains(driver).send_keys("r").perform()  # the Web UI's refresh key
            time.sleep(2)
        driver.save_screenshot(str(out))


async def live_details(settings: Settings, polar: PolarClient, repo: Path, folder: Path) -> None:
    """The task's and a running session's current details in the Web UI, photographed."""
    run = await polar.submit(live_spec(repo), console_url="http://127.0.0.1:8410")
    ui = f"http://127.0.0.1:{settings.temporal_ui_port}/namespaces/default/workflows"
    try:
        while True:  # until two sessions are done and two still run
            progress = await polar.status(run)
            done = [s for s in progress.sessions if s.status is not None]
            if len(done) >= 2:
                break
            await asyncio.sleep(1)
        running = next(s for s in progress.sessions if s.status is None)
        # the browser waits in a thread: this loop's in-process worker answers its queries
        await asyncio.to_thread(
            user_metadata_shot, f"{ui}/{run.workflow_id}", folder / "webui-task-live.png"
        )
        await asyncio.to_thread(
            user_metadata_shot, f"{ui}/{running.session_id}", folder / "webui-session-live.png"
        )
        print(f"live details → {folder}/webui-task-live.png, webui-session-live.png")
    finally:
        await polar.cancel(run)


async def run(out: Path, live: Path | None = None) -> None:
    from activities.worker import running_workers

    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # the local sandbox's user must reach the repo
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
                if live is not None:
                    await live_details(settings, polar, repo, live)
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
    parser.add_argument("--live", type=Path, help="also photograph live current details here")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    asyncio.run(run(args.out, args.live))


if __name__ == "__main__":
    main()
