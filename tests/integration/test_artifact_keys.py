"""An artifact S3 cannot take is left out and counted, never a storage fault (issue 32).

S3 takes object keys of at most 1,024 bytes. A harness that named a file under
`$POLAR_ARTIFACTS_DIR` deep enough made the run stage's upload fail on every attempt
(`infra_error:storage`: a sure zero kept out of its group's baseline). The reader
(activities/harnesses/artifacts.py) now leaves out any name past `MAX_NAME_BYTES`, the
room the longest artifact key leaves it, and says so in `artifacts_skipped`.

On the real SeaweedFS of the dev stack: the store's limit itself, the boundary of the
longest session id, and a whole `local` session whose harness writes such a file.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from activities.harnesses.artifacts import (
    ARTIFACTS_ENV,
    LONGEST_PREFIX,
    MAX_NAME_BYTES,
    S3_KEY_MAX_BYTES,
    SEGMENT_MAX_BYTES,
    SESSION_ID_MAX,
    collect_artifacts,
    unkeyable,
)
from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.storage import Storage, artifact_key, session_prefix
from polar.tasks.spec import TaskSpec
from tests.integration.test_command_harness import _harness_result

SEGMENT = "d" * 200
"""One directory name (a file system takes 255 bytes a name): five of them pass any key."""


def test_s3_refuses_a_key_past_1024_bytes(storage: Storage) -> None:
    """The store's own limits, the ones the reader keeps to: a key of 1,024 bytes is taken,
    1,025 not (KeyTooLongError); SeaweedFS also takes at most 255 bytes a path segment."""
    base = f"tests/key-limit-{uuid.uuid4().hex[:8]}/"
    fits = base + "/".join(["k" * 99] * 10)[: S3_KEY_MAX_BYTES - len(base)]
    assert len(fits.encode()) == S3_KEY_MAX_BYTES and not fits.endswith("/")
    storage.put_bytes(fits, b"fits")
    assert storage.get_bytes(fits) == b"fits"
    with pytest.raises(Exception, match="KeyTooLong"):
        storage.put_bytes(fits + "k", b"past")
    storage.put_bytes(base + "s" * SEGMENT_MAX_BYTES, b"fits")
    with pytest.raises(Exception, match="KeyTooLong"):
        storage.put_bytes(base + "s" * (SEGMENT_MAX_BYTES + 1), b"past")


def test_the_longest_name_fits_the_longest_session_and_one_byte_more_is_left_out(
    storage: Storage, tmp_path: Path
) -> None:
    """A name of MAX_NAME_BYTES under the longest session id and a 10-digit attempt is
    stored; one byte more is skipped and named, so no name the reader keeps can fail."""
    session_id = ("s" + uuid.uuid4().hex)[:12] + "x" * (SESSION_ID_MAX - 12)
    top = tmp_path / "artifacts"
    top.mkdir()
    longest = "/".join([SEGMENT] * 3) + "/" + "n" * (MAX_NAME_BYTES - 3 * 201)
    past = longest + "n"
    for name, data in ((longest, b"kept"), (past, b"too long")):
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_bytes(data)
    got = collect_artifacts(top)
    assert [name for name, _ in got.files] == [longest]
    assert got.skipped_count == 1 and "past the 768" in got.notes()[0]
    assert len(got.notes()[0]) < 300  # a long name is shown by its head and tail
    assert unkeyable(past) is not None and unkeyable(longest) is None
    assert unkeyable("a/" + "b" * 256) is not None and unkeyable("a/" + "b" * 255) is None
    key = artifact_key(session_id, f"harness-attempt{10**10 - 1}/artifacts/{longest}")
    assert len(key.encode()) == LONGEST_PREFIX + MAX_NAME_BYTES == S3_KEY_MAX_BYTES
    storage.put_bytes(key, got.files[0][1])
    assert storage.get_bytes(key) == b"kept"


# writes one file too deep for any S3 key, and one that is fine
DEEP_HARNESS = (
    f'set -e; seg={SEGMENT}; d="${ARTIFACTS_ENV}/$seg/$seg/$seg/$seg/$seg"; mkdir -p "$d"; '
    f'echo deep > "$d/report.txt"; echo fine > "${ARTIFACTS_ENV}/short.txt"; echo done'
)


@pytest.mark.slow
async def test_a_harness_naming_an_artifact_past_the_key_limit_still_completes(
    polar: PolarClient, storage: Storage, tmp_path: Path
) -> None:
    """Before: the run stage failed on each of its attempts and the session ended
    `infra_error` (storage). Now the session completes, the short artifact is in S3, and the
    deep one is named in `artifacts_skipped`."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_text("nothing\n")
    spec = TaskSpec.model_validate(
        {
            "task_id": f"artifact-key-{uuid.uuid4().hex[:6]}",
            "instruction": "write a deep artifact",
            "source": {"type": "dir", "path": str(repo)},
            "runtime": {"kind": "local"},
            "harness": {"kind": "command", "command": DEEP_HARNESS},
            "timeouts": {"harness_s": 120, "heartbeat_s": 20, "max_attempts": 1},
        }
    )
    result = await polar.wait(await polar.submit(spec), timeout_s=600)
    [session] = result.sessions
    assert session.status == SessionStatus.COMPLETED, session
    assert session.harness_exit_code == 0
    prefix = f"{session_prefix(session.session_id)}artifacts/harness-attempt1/artifacts/"
    assert storage.list_keys(prefix) == [f"{prefix}short.txt"]
    harness = await _harness_result(polar, session.session_id)
    [note] = harness.artifacts_skipped
    assert note.startswith(SEGMENT[:60]) and "report.txt: a name of 1015 bytes" in note, note


def test_a_native_log_no_s3_key_can_hold_is_left_out(tmp_path: Path) -> None:
    """The harness CLIs' own logs come from globs over its HOME, where the agent writes too:
    a log path past the key limit is left out (and logged) like an artifact."""
    from activities.harnesses.claude_code import ClaudeCodeAdapter

    home = tmp_path / "home"
    deep = home / ".claude" / "projects" / SEGMENT / SEGMENT / SEGMENT / SEGMENT
    deep.mkdir(parents=True)
    (deep / "session.jsonl").write_text("{}\n")
    (home / ".claude" / "projects" / "p").mkdir()
    (home / ".claude" / "projects" / "p" / "session.jsonl").write_text("{}\n")
    names = [name for name, _ in ClaudeCodeAdapter().native_logs(home)]
    assert names == ["claude/projects/p/session.jsonl"]
