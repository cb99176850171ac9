"""The `local` runtime's adversary at the sandbox's edges (issue 32): a harness that erases its
started marker, and one that writes where the disk watchdog did not look.

Stdlib only (it runs in the session). Copied into the task repo's `tools/` by `make_repo`;
`ATTACK_ONLY` (a comma list) picks the attacks; the fix itself is wrong unless
`ATTACK_FIX=1`. What it did is printed as one `ATTACK-REPORT ` JSON line on stdout; it then
exits `ATTACK_EXIT` (default 0).

- `erase_marker`: truncates its stderr log through the descriptor it holds (`ftruncate(2)`)
  and by reopening it (`/proc/self/fd/2`, O_TRUNC), where the started marker was written;
- `fill_tmp`: writes `ATTACK_TMP_MB` MB into `/tmp`, and half that into `/var/tmp` and
  `/dev/shm` (8 MB files under `polar-io-{session}/`), outside the session's dirs; the MB
  each took are reported;
- `use_tmp`: the honest use of them (a temp file, a POSIX semaphore in /dev/shm).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

REPORT: dict[str, object] = {}
FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
CHUNK = 1 << 20


def _wanted(name: str) -> bool:
    return name in os.environ.get("ATTACK_ONLY", "").split(",")


def tag() -> str:
    return f"polar-io-{os.environ.get('POLAR_SESSION_ID', 'none')}"


def erase_marker() -> None:
    sys.stderr.write("noise before the erasure\n")
    sys.stderr.flush()
    done = []
    try:
        os.ftruncate(2, 0)
        done.append("ftruncate")
    except OSError as exc:
        REPORT["ftruncate_error"] = exc.strerror
    try:
        os.close(os.open("/proc/self/fd/2", os.O_WRONLY | os.O_TRUNC))
        done.append("reopen")
    except OSError as exc:
        REPORT["reopen_error"] = exc.strerror
    REPORT["erased"] = done


def _fill(top: str, megabytes: int) -> int:
    """MB written under `top`/tag() before it refused (or all of them)."""
    written = 0
    try:
        folder = Path(top) / tag()
        folder.mkdir()
        for i in range(megabytes // 8):
            with open(folder / f"f{i}", "wb") as out:
                for _ in range(8):
                    out.write(b"\0" * CHUNK)
                    written += 1
            _progress(top, written)
            time.sleep(0.05)
    except OSError as exc:
        REPORT.setdefault("fill_errors", {})[top] = exc.strerror  # type: ignore[index]
    return written


def _progress(top: str, written: int) -> None:
    """The report so far (a harness killed for its disk use still says what it wrote)."""
    REPORT.setdefault("written_mb", {})[top] = written  # type: ignore[index]
    print("ATTACK-REPORT " + json.dumps(REPORT), flush=True)


def fill_tmp() -> None:
    megabytes = int(os.environ.get("ATTACK_TMP_MB", "300"))
    for top, share in (
        ("/tmp", megabytes),
        ("/var/tmp", megabytes // 2),
        ("/dev/shm", megabytes // 2),
    ):
        _progress(top, _fill(top, share))


def use_tmp() -> None:
    with tempfile.NamedTemporaryFile(dir="/tmp") as scratch:
        scratch.write(b"x" * CHUNK)
        scratch.flush()
        REPORT["tmp_file"] = os.path.getsize(scratch.name)
    lock = multiprocessing.Lock()  # sem_open: a file in /dev/shm
    with lock:
        REPORT["semaphore"] = True


def main() -> None:
    for name, attack in (
        ("erase_marker", erase_marker),
        ("fill_tmp", fill_tmp),
        ("use_tmp", use_tmp),
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
    sys.exit(int(os.environ.get("ATTACK_EXIT", "0")))


if __name__ == "__main__":
    main()
