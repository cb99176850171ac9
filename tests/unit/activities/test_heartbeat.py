"""The heartbeat helper (activities/heartbeat.py) and what long calls do with it.

Heartbeats are recorded by Temporal's ActivityEnvironment (`on_heartbeat`);
every wait is on an event the recorded heartbeats set, never on a clock. The
git source is fetched with real git from real servers on the loopback: a
repository that does not exist is the task's fault (not retried), a server
that refuses, errs (503) or never answers is not (retried), and a retry
against the same server, once it answers, clones.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import http.server
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities import heartbeat as heartbeats
from activities.heartbeat import Heartbeater, heartbeat, heartbeating, mark_activity_start
from activities.init_activities import InitActivities
from activities.runtimes import InvalidSource, SourceUnavailable
from activities.runtimes import workspace as workspace_module
from activities.runtimes.kinds.local import LocalRuntime
from activities.runtimes.workspace import is_transient_git_error, materialise_source
from polar.contracts import PrepareRequest
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import GitSource, RuntimeSpec
from tests.support.ports import refusing_port


class Beats:
    """Heartbeats an ActivityEnvironment records, and events set when they show something."""

    def __init__(self, env: ActivityEnvironment) -> None:
        self.details: list[dict[str, Any]] = []
        self._waits: list[tuple[Any, asyncio.Event]] = []
        env.on_heartbeat = self._record

    def _record(self, *details: Any) -> None:
        self.details.append(details[0])
        for predicate, event in self._waits:
            if predicate(self.details):
                event.set()

    def when(self, predicate: Any) -> asyncio.Event:
        """An event set once `predicate(details so far)` holds."""
        event = asyncio.Event()
        if predicate(self.details):
            event.set()
        self._waits.append((predicate, event))
        return event


async def test_it_beats_on_its_timer_with_the_latest_details() -> None:
    env = ActivityEnvironment()
    beats = Beats(env)

    async def activity() -> str:
        async with Heartbeater(every_s=0.01, step="loading completions") as hb:
            # one long await, during which only the timer can beat
            await beats.when(lambda d: len(d) >= 3).wait()
            # a worker thread reports progress (the S3 reader's on_read does)
            await asyncio.to_thread(hb.update, records_read=3, records=10)
            await beats.when(lambda d: d[-1].get("records_read") == 3).wait()
        return "done"

    assert await env.run(activity) == "done"
    first, last = beats.details[0], beats.details[-1]
    assert first["step"] == "loading completions" and "records_read" not in first
    assert {"step": "loading completions", "records_read": 3, "records": 10}.items() <= last.items()
    assert all(isinstance(d["elapsed_s"], float) for d in beats.details)
    assert len(beats.details) >= 4


async def test_an_activity_sends_nothing_in_its_quiet_start_then_its_latest_details(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stage that ends within its quiet start costs the server no heartbeat; one that
    outlasts it beats once the quiet time is over, with what it last reported."""
    monkeypatch.setattr(heartbeats, "QUIET_S", 0.3)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=30))
    beats = Beats(env)

    async def short() -> None:
        mark_activity_start()  # as the worker's interceptor does
        heartbeat(step="teardown")
        async with Heartbeater(every_s=10, step="building"):
            await asyncio.sleep(0.05)

    await env.run(short)
    assert beats.details == []

    async def long() -> float:
        mark_activity_start()
        started = time.monotonic()
        heartbeat(step="harness starting")  # held back
        async with Heartbeater(every_s=10, step="preparing") as hb:
            hb.update(step="recording the workspace baseline")
            await beats.when(lambda d: len(d) >= 1).wait()
        return time.monotonic() - started

    waited = await env.run(long)
    assert waited >= 0.3
    assert [d["step"] for d in beats.details] == ["recording the workspace baseline"]


async def test_the_quiet_start_is_at_most_a_quarter_of_the_heartbeat_timeout() -> None:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=2))

    async def quiet() -> float:
        mark_activity_start()
        return heartbeats.quiet_left()

    assert 0.4 < await env.run(quiet) <= 0.5
    assert ActivityEnvironment().run(heartbeats.quiet_left) == 0  # start not marked


async def test_a_nested_heartbeater_beats_with_its_parents_details_then_hands_back() -> None:
    env = ActivityEnvironment()
    beats = Beats(env)

    async def clone() -> str:
        await beats.when(lambda d: len(d) >= 2 and d[-1]["step"] == "cloning").wait()
        return "cloned"

    async def activity() -> None:
        async with Heartbeater(every_s=0.01, step="preparing", runtime="local"):
            assert await heartbeating(clone(), every_s=0.01, step="cloning") == "cloned"
            count = len(beats.details)
            await beats.when(lambda d: len(d) > count).wait()

    await env.run(activity)
    steps = [d["step"] for d in beats.details]
    first_clone, last_clone = steps.index("cloning"), len(steps) - 1 - steps[::-1].index("cloning")
    # the outer one is quiet while the inner one runs, and beats again after it
    assert set(steps[first_clone : last_clone + 1]) == {"cloning"}
    assert steps[0] == "preparing" and steps[-1] == "preparing"
    assert all(d["runtime"] == "local" for d in beats.details)


async def test_outside_an_activity_it_does_nothing_and_raises_nothing() -> None:
    heartbeat(step="nowhere")
    async with Heartbeater(every_s=0.001, step="idle") as hb:
        hb.update(done=1)
        await asyncio.sleep(0.01)
        assert hb.current_details()["done"] == 1
    assert await heartbeating(asyncio.sleep(0, result=7), step="x") == 7


async def test_an_exception_propagates_and_the_timer_stops() -> None:
    env = ActivityEnvironment()
    beats = Beats(env)
    made: list[Heartbeater] = []

    async def broken() -> None:
        await beats.when(lambda d: len(d) >= 2).wait()
        raise ValueError("the clone broke")

    async def activity() -> None:
        hb = Heartbeater(every_s=0.01, step="cloning")
        made.append(hb)
        async with hb:
            await broken()

    with pytest.raises(ValueError, match="the clone broke"):
        await env.run(activity)
    count = len(beats.details)
    await asyncio.sleep(0.05)  # five ticks: a timer left running would beat here
    assert len(beats.details) == count
    assert made[0]._timer is None


async def test_a_cancelled_await_stops_the_timer_too() -> None:
    env = ActivityEnvironment()
    beats = Beats(env)

    async def activity() -> None:
        await heartbeating(asyncio.Event().wait(), every_s=0.01, step="waiting")

    task = asyncio.ensure_future(env.run(activity))
    await beats.when(lambda d: len(d) >= 2).wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    count = len(beats.details)
    await asyncio.sleep(0.05)
    assert len(beats.details) == count


# --------------------------------------------------------------------------- git sources


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def bare_repo(tmp_path: Path) -> Path:
    """A bare repository (a.txt = one) that git's dumb HTTP protocol can serve."""
    work = tmp_path / "work"
    work.mkdir()
    _git(work, "init", "-q", "-b", "main")
    (work / "a.txt").write_text("one\n")
    _git(work, "add", "a.txt")
    _git(work, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "one")
    served = tmp_path / "served"
    served.mkdir()
    _git(tmp_path, "clone", "-q", "--bare", str(work), str(served / "repo.git"))
    _git(served / "repo.git", "update-server-info")
    return served / "repo.git"


class _FlakyHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a directory; answers 503 to the first `failures[0]` requests."""

    failures: list[int]

    def do_GET(self) -> None:
        if self.failures[0] > 0:
            self.failures[0] -= 1
            self.send_error(503, "busy")
            return
        super().do_GET()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _http_server(root: Path, failures: int) -> Iterator[str]:
    handler = functools.partial(
        type("Handler", (_FlakyHandler,), {"failures": [failures]}), directory=str(root)
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def _silent_server() -> Iterator[str]:
    """Accepts connections and never answers (a remote that hangs)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


def test_a_source_that_does_not_exist_is_invalid(tmp_path: Path, bare_repo: Path) -> None:
    with pytest.raises(InvalidSource, match="git clone failed: fatal: .*does not exist"):
        materialise_source(GitSource(url=f"{tmp_path}/missing.git"), tmp_path / "w1")
    with _http_server(bare_repo.parent, failures=0) as url:
        with pytest.raises(InvalidSource, match="not found"):
            materialise_source(GitSource(url=f"{url}/missing.git"), tmp_path / "w2")
        with pytest.raises(InvalidSource, match="invalid reference: no-such-ref"):
            materialise_source(GitSource(url=f"{url}/repo.git", ref="no-such-ref"), tmp_path / "w3")


def test_a_remote_that_refuses_or_errs_is_retried_and_a_retry_clones(
    tmp_path: Path, bare_repo: Path
) -> None:
    with refusing_port() as port, pytest.raises(SourceUnavailable, match="unable to access"):
        materialise_source(GitSource(url=f"http://127.0.0.1:{port}/repo.git"), tmp_path / "w1")
    with _http_server(bare_repo.parent, failures=1) as url:
        source = GitSource(url=f"{url}/repo.git")
        with pytest.raises(SourceUnavailable, match="returned error: 503"):
            materialise_source(source, tmp_path / "w2")
        assert not (tmp_path / "w2").exists()  # nothing half-cloned for the retry
        materialise_source(source, tmp_path / "w2")  # the same call, once the server answers
    assert (tmp_path / "w2" / "a.txt").read_text() == "one\n"


async def test_a_remote_that_never_answers_times_out_and_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workspace_module, "GIT_TIMEOUT_S", 1.0)
    with _silent_server() as url:
        source = GitSource(url=f"{url}/repo.git")
        clone = asyncio.to_thread(materialise_source, source, tmp_path / "w")
        with pytest.raises(SourceUnavailable, match="git clone timed out after 1s"):
            # git's transport helper is killed with it (else this would wait for ever)
            await asyncio.wait_for(clone, timeout=60)


def test_git_error_classification() -> None:
    transient = [
        "fatal: unable to access 'https://github.com/o/r/': Could not resolve host: github.com",
        "error: RPC failed; curl 56 GnuTLS recv error (-9)\nfatal: early EOF",
        "fatal: the remote end hung up unexpectedly",
        "fatal: unable to access 'https://h/r/': Failed to connect to h port 443: Connection "
        "timed out",
        "fatal: unable to access 'https://h/r/': The requested URL returned error: 502",
    ]
    invalid = [
        "fatal: repository 'https://github.com/o/missing/' not found",
        "fatal: invalid reference: v9",
        "fatal: transport 'ext' not allowed",
        "fatal: Authentication failed for 'https://h/r/'",
        "fatal: unable to access 'https://h/r/': The requested URL returned error: 403",
    ]
    assert all(is_transient_git_error(text) for text in transient)
    assert not any(is_transient_git_error(text) for text in invalid)


async def test_prepare_runtime_heartbeats_the_clone_and_classifies_its_failure(
    tmp_path: Path, bare_repo: Path
) -> None:
    settings = Settings(data_dir=str(tmp_path / "data"), source_roots=str(tmp_path))
    acts = InitActivities(settings, Storage(settings))
    env = ActivityEnvironment()
    beats = Beats(env)

    def request(session_id: str, url: str) -> PrepareRequest:
        return PrepareRequest(
            session_id=session_id, task_id="t", runtime=RuntimeSpec(), source=GitSource(url=url)
        )

    handle = await env.run(acts.prepare_runtime, request("s-clone", str(bare_repo)))
    try:
        assert (Path(handle.workdir) / "a.txt").read_text() == "one\n"
        cloning = [d for d in beats.details if d["step"] == "materialising the source"]
        assert cloning and all(d["runtime"] == "local" for d in cloning)
    finally:
        await LocalRuntime(tmp_path / "data" / "runtimes").teardown(handle)

    with pytest.raises(ApplicationError) as info:  # the task's fault: not retried
        await env.run(acts.prepare_runtime, request("s-missing", f"{tmp_path}/none.git"))
    assert info.value.type == "InvalidSource" and info.value.non_retryable
    with refusing_port() as port, pytest.raises(SourceUnavailable):  # Temporal retries it
        await env.run(acts.prepare_runtime, request("s-refused", f"http://127.0.0.1:{port}/r.git"))
