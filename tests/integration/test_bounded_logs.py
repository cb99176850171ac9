"""Logs are bounded (issue 21, "Bounded"): a harness that prints 100 MB ends normally, its stored
logs are cut to POLAR_MAX_LOG_BYTES (head and tail, with a `truncated` note), and the worker
never holds a whole log in memory.

On the real stack (Temporal, SeaweedFS, the suite's in-process worker) with the `local`
runtime: the harness writes 100 MB to stdout and 30 MB to stderr, the command evaluator 50 MB
to its stdout. The worker is this process, so its resident memory is sampled all along: it
must stay within a margin far below the logs' size (a whole-file read of any one of them
would pass it).
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from pathlib import Path

import pytest

from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.settings import Settings, get_settings
from polar.storage import Storage, artifact_key
from polar.tasks.spec import TaskSpec

MB = 1_000_000
LINE = "0123456789abcdefghijklmnopqrstuvwxyz"
HARNESS = (
    "echo HARNESS-START; "
    f"yes {LINE} | head -c {100 * MB}; echo; echo HARNESS-END; "
    f"yes ERR | head -c {30 * MB} >&2; echo HARNESS-ERR-END >&2"
)
EVALUATOR = f"echo EVAL-START; yes {LINE} | head -c {50 * MB}; echo; echo EVAL-END"
NOTE = re.compile(rb"\[polar: truncated: (\d+) bytes dropped \(the log had (\d+) bytes; [^]]*\]")
RSS_MARGIN = 48 << 20
"""Growth of the worker's resident memory allowed while the session runs (a 4 MiB cap, the
copies S3's client makes, the stack's own work); any whole log is at least 30 MB more."""


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


class PeakRss:
    """The highest resident memory of this process, sampled every 20 ms while open."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss())
            time.sleep(0.02)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _task(repo: Path, task_id: str, harness: str, evaluator: str) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "task_id": task_id,
            "instruction": "print a lot",
            "source": {"type": "dir", "path": str(repo)},
            "runtime": {"kind": "local"},
            "harness": {"kind": "command", "command": harness},
            "evaluator": {"kind": "command", "command": evaluator},
            "timeouts": {"harness_s": 300, "heartbeat_s": 30, "max_attempts": 1},
        }
    )


@pytest.mark.slow
async def test_a_harness_printing_100_mb_ends_normally_with_capped_logs(
    polar: PolarClient, storage: Storage, base_settings: Settings, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_text("nothing\n")
    # a small session first: the worker's imports and caches are warm before the baseline
    warm = await polar.wait(
        await polar.submit(_task(repo, f"logs-warm-{uuid.uuid4().hex[:6]}", "echo hi", "true")),
        timeout_s=600,
    )
    assert warm.sessions[0].status == SessionStatus.COMPLETED, warm.sessions[0]
    limit = base_settings.max_log_bytes
    assert limit == get_settings().max_log_bytes  # what the evaluator's run_in reads
    baseline = _rss()
    with PeakRss() as rss:
        result = await polar.wait(
            await polar.submit(_task(repo, f"logs-{uuid.uuid4().hex[:6]}", HARNESS, EVALUATOR)),
            timeout_s=900,
        )
    [session] = result.sessions
    sid = session.session_id
    assert session.status == SessionStatus.COMPLETED, session
    assert session.harness_exit_code == 0 and session.reward == 1.0, session

    stored = {
        name: storage.get_bytes(artifact_key(sid, name))
        for name in ("harness-attempt1.stdout", "harness-attempt1.stderr", "evaluate.stdout")
    }
    ends = {  # what each log starts and ends with, and its least size
        "harness-attempt1.stdout": (b"HARNESS-START\n", b"HARNESS-END\n", 100 * MB + 27),
        "harness-attempt1.stderr": (b"", b"HARNESS-ERR-END\n", 30 * MB + 16),
        "evaluate.stdout": (b"EVAL-START\n", b"EVAL-END\n", 50 * MB + 21),
    }
    for name, data in stored.items():
        head, tail, least = ends[name]
        assert data.startswith(head) and data.endswith(tail), (name, data[:80], data[-80:])
        cut = NOTE.search(data)
        assert cut is not None, (name, data[limit // 8 : limit // 8 + 200])
        dropped, size = int(cut[1]), int(cut[2])
        assert size >= least and dropped == size - limit, (name, cut[0])
        assert cut.start() == limit // 8 + 1  # the head, a newline, the note
        assert len(data) == limit + len(cut[0]) + 2, (name, len(data))  # the tail after it
    growth = rss.peak - baseline
    print(f"stored {[len(d) for d in stored.values()]} bytes; worker RSS +{growth >> 20} MiB")
    assert growth < RSS_MARGIN, f"the worker's RSS grew by {growth >> 20} MiB"
