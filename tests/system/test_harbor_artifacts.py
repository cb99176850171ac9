"""Harbor's `artifacts` and `[[verifier.collect]]` run as real Polar sessions.

examples/harbor-features/artifact-report: the agent writes a report outside the workspace
(`/srv/report/summary.txt`, a declared artifact); after it, a collect hook snapshots state
into `/var/snapshot` (an artifact kept as `snapshot`, `*.tmp` excluded). The verifier runs in
a fresh container, which has neither unless the run's collection put them back at their
source paths. With the `command` harness: the oracle (solution/solve.sh) scores 1 on docker
and podman, a no-op 0 (its report missing, recorded, not an error); the files and the
manifest are in S3. An agent that makes its report a link to a file elsewhere and leaves a
70 MB file and a link to /etc/shadow in the snapshot gets neither link followed, the big
file left out with the limit recorded in the manifest, and 0. A compose sidecar's
files and a hook run in it are collected too, on docker and podman (compose-lookup with
artifacts added). A verifier kept running by a collected file alone (no change in the
workspace) is the session's 0 at once, as a timeout with its changes in place is.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from app.adversaries import oracle_command, steps_oracle_command
from polar.client.sdk import PolarClient
from polar.contracts import SessionResult
from polar.records import SessionStatus
from polar.storage import Storage
from polar.tasks.harbor_images import ensure_images
from tests.support.harbor_sessions import harbor_session
from tests.support.paths import REPO

pytestmark = pytest.mark.slow

FEATURES = REPO / "examples" / "harbor-features"
TASK = FEATURES / "artifact-report"
ORACLE = oracle_command(TASK / "solution")
HOSTILE = (
    "mkdir -p /srv/report /var/snapshot && "
    "printf 'count: 3\\ncherry\\nbanana\\napple\\n' > /tmp/real.txt && "
    "ln -s /tmp/real.txt /srv/report/summary.txt && "
    "head -c 70000000 /dev/zero > /var/snapshot/huge.bin && "
    "ln -s /etc/shadow /var/snapshot/shadow"
)

SLOW = "mkdir -p /srv/report && printf 'count: 100000\\n' > /srv/report/summary.txt"


async def _session(
    polar: PolarClient, task: Path, command: str, kind: str, name: str
) -> SessionResult:
    return await harbor_session(polar, task, command, kind, f"artifacts-{name}")


def _manifest(storage: Storage, session: SessionResult) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        storage.get_bytes(session.artifacts["artifacts/manifest.json"])
    )
    return data


def _entry(manifest: dict[str, Any], source: str) -> dict[str, Any]:
    return next(e for e in manifest["entries"] if e["source"] == source)


async def test_collected_artifacts_reach_the_verifier_and_s3(
    polar: PolarClient, storage: Storage, docker_image: str, tmp_path: Path
) -> None:
    (built,) = ensure_images(TASK)
    from activities.runtimes.kinds.podman import load_from_docker

    load_from_docker(built.image)
    sidecar_task = Path(shutil.copytree(FEATURES / "compose-lookup", tmp_path / "lookup"))
    toml = sidecar_task / "task.toml"
    toml.write_text(
        'artifacts = [{ source = "/srv", service = "lookup", exclude = ["*.py"] }]\n'
        + toml.read_text()
        + '\n[[verifier.collect]]\nservice = "lookup"\ncommand = "ls /srv > /srv/listing.txt"\n'
    )
    # a verifier that trusts the report's count: a session that left only a collected file
    # (no change in its workspace) can keep it running, and that is the session's 0
    slow_task = Path(shutil.copytree(TASK, tmp_path / "slow"))
    (slow_task / "tests" / "test.sh").write_text(
        "#!/bin/bash\nn=$(sed -n 's/^count: //p' /srv/report/summary.txt)\n"
        'for _ in $(seq 1 "$n"); do sleep 1; done\necho 1 > /logs/verifier/reward.txt\n'
    )
    slow_toml = slow_task / "task.toml"
    slow_toml.write_text(slow_toml.read_text().replace("timeout_sec = 60.0", "timeout_sec = 5.0"))
    ensure_images(slow_task)
    (built_sidecar_task,) = ensure_images(sidecar_task)
    load_from_docker(built_sidecar_task.image)
    sc_command = oracle_command(sidecar_task / "solution")
    oracle, noop, podman, hostile, sidecar, sidecar_podman, slow = await asyncio.gather(
        _session(polar, TASK, ORACLE, "docker", "oracle"),
        _session(polar, TASK, "true", "docker", "noop"),
        _session(polar, TASK, ORACLE, "podman", "podman-oracle"),
        _session(polar, TASK, HOSTILE, "docker", "hostile"),
        _session(polar, sidecar_task, sc_command, "docker", "sc"),
        _session(polar, sidecar_task, sc_command, "podman", "sc-podman"),
        _session(polar, slow_task, SLOW, "docker", "slow"),
    )
    assert (oracle.reward, noop.reward, podman.reward, hostile.reward) == (1.0, 0.0, 1.0, 0.0)
    assert sidecar.reward == sidecar_podman.reward == 1.0
    assert (slow.status, slow.reward) == (SessionStatus.COMPLETED, 0.0), slow.evaluation
    assert "ran past its 5 s timeout with the session's changes (or the files it left)" in (
        slow.evaluation or ""
    )

    for session in (oracle, podman):
        manifest = _manifest(storage, session)
        summary = _entry(manifest, "/srv/report/summary.txt")
        assert (summary["status"], summary["type"]) == ("ok", "file")
        assert summary["destination"] == "artifacts/srv/report/summary.txt"
        snapshot = _entry(manifest, "/var/snapshot")
        assert snapshot["destination"] == "artifacts/snapshot"
        assert snapshot["files"] == ["lines.txt"]  # junk.tmp excluded
        assert _entry(manifest, "/logs/artifacts")["status"] == "failed"  # nothing published
        (hook,) = manifest["commands"]
        assert (hook["exit_code"], hook["timed_out"]) == (0, False)
        assert not manifest["limit_hit"]
        prefix = session.artifacts["artifacts/"]
        assert storage.get_bytes(prefix + "snapshot/lines.txt") == b"4\n"
        assert storage.get_bytes(prefix + "srv/report/summary.txt").startswith(b"count: 3\n")
        report = json.loads(storage.get_bytes(session.artifacts["evaluation.report"]))
        assert report["artifacts_placed"] == 2

    manifest = _manifest(storage, noop)
    summary = _entry(manifest, "/srv/report/summary.txt")
    assert summary["status"] == "failed" and summary["notes"] == ["missing: no such path in main"]
    assert manifest["commands"][0]["exit_code"] != 0  # the hook failed: recorded, went on
    assert _entry(manifest, "/var/snapshot")["status"] == "ok"
    assert _entry(manifest, "/var/snapshot")["files"] == []  # its junk.tmp excluded

    manifest = _manifest(storage, hostile)
    summary = _entry(manifest, "/srv/report/summary.txt")
    assert summary["status"] == "failed" and "goes through a link" in summary["notes"][0]
    snapshot = _entry(manifest, "/var/snapshot")
    assert snapshot["status"] == "ok" and snapshot["files"] == ["lines.txt"]
    notes = " | ".join(snapshot["notes"])
    assert "huge.bin: 70000000 bytes, past the" in notes and "shadow: a symlink" in notes
    assert manifest["limit_hit"] and manifest["limits"]["max_bytes"] == 64 << 20

    for session in (sidecar, sidecar_podman):  # a sidecar's hook and folder, both engines
        manifest = _manifest(storage, session)
        srv = _entry(manifest, "/srv")
        assert (srv["status"], srv["service"]) == ("ok", "lookup"), (session.session_id, srv)
        assert sorted(srv["files"]) == ["listing.txt", "word.txt"]
        assert manifest["commands"][0]["service"] == "lookup"
        word = storage.get_bytes(session.artifacts["artifacts/"] + "srv/word.txt")
        assert word == b"sidecar-says-hello\n"


async def test_a_steps_artifacts_are_kept_under_its_folder(
    polar: PolarClient, storage: Storage, docker_image: str, tmp_path: Path
) -> None:
    """two-step-notes with an artifact and a hook of its `extend` step: each step's run
    collects the task's (here Harbor's convention dir) and its own, kept under
    `steps/{name}/artifacts/`, as Harbor keeps them."""
    task = Path(shutil.copytree(FEATURES / "two-step-notes", tmp_path / "steps"))
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            '[[steps]]\nname = "extend"',
            '[[steps]]\nname = "extend"\nartifacts = ["/var/tmp/extend"]\n\n'
            "[[steps.verifier.collect]]\n"
            'command = "mkdir -p /var/tmp/extend && wc -l < notes.txt > /var/tmp/extend/n"',
        )
    )
    ensure_images(task)
    oracle = steps_oracle_command(task, ["write", "extend"]) or ""
    session = await _session(polar, task, oracle, "docker", "steps")
    assert session.reward == 1.0
    write = json.loads(storage.get_bytes(session.artifacts["steps/write/artifacts/manifest.json"]))
    assert [e["source"] for e in write["entries"]] == ["/logs/artifacts"]
    extend = json.loads(
        storage.get_bytes(session.artifacts["steps/extend/artifacts/manifest.json"])
    )
    entry = _entry(extend, "/var/tmp/extend")
    assert (entry["status"], entry["files"]) == ("ok", ["n"])
    prefix = session.artifacts["steps/extend/artifacts/"]
    assert storage.get_bytes(prefix + "var/tmp/extend/n") == b"2\n"
