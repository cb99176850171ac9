"""polar.processes: a child started `dying_with_parent` gets SIGKILL when its parent dies.

The parent is a real Python process that starts `sleep` and is then SIGKILLed; no
code runs between fork and exec (no `preexec_fn`, which can deadlock a threaded
process), so the parent here starts a few busy threads first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from polar.processes import dying_with_parent
from tests.support.polling import wait_until

PARENT = """
import subprocess, sys, threading, time
from polar.processes import dying_with_parent
for _ in range(4):  # a threaded parent, as a worker is
    threading.Thread(target=lambda: [time.sleep(0.001) for _ in iter(int, 1)], daemon=True).start()
child = subprocess.Popen(dying_with_parent(["sleep", "300"]), start_new_session=True)
print(child.pid, flush=True)
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_child_dies_with_its_killed_parent() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, cwd=Path.cwd()
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    # setpriv's own argv holds "sleep" too: wait for the exec (after its prctl), or the parent
    # dies before the death signal is set (about one run in five failed that way)
    wait_until(
        lambda: Path(f"/proc/{child}/cmdline").read_text().startswith("sleep\0"), 10, "sleep ran"
    )
    assert _alive(child)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    wait_until(lambda: not _alive(child), 10, "the child killed with its parent")


def test_the_command_is_unchanged_after_the_prefix() -> None:
    argv = dying_with_parent(["bash", "-c", "exit 3"])
    assert argv[-3:] == ["bash", "-c", "exit 3"]
    assert subprocess.run(argv).returncode == 3
