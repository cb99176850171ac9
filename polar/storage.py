"""The S3 layout of Polar and a small client for it.

    sessions/{session_id}/completions/{seq:020d}-{gateway}-{n}.json.zst   CompletionRecord
        (compact zstd JSON, `polar.record_codec`; records written before it: `.json`, plain)
    sessions/{session_id}/traces/{builder}.jsonl                      Trace per line, as built
    sessions/{session_id}/traces/{builder}.rewards.json               TraceRewards (score)
    sessions/{session_id}/artifacts/{name}                            harness logs, eval logs
    sessions/{session_id}/closed/{attempt-N|session}                  its keys refused from then
    tasks/{task_id}/result.json                                       TaskResult

A session's traces are written once, by build; scoring writes their rewards and the
session's status into the small sidecar beside them, and `load_traces` joins the two (a
session scored before the sidecar has its rewards in the traces, and no sidecar).

Works against AWS S3 or any S3-compatible store (SeaweedFS in the dev stack). Every key
builder checks the ids it is given (`polar.ids.checked_id`) and an artifact name's parts,
so no id or name reaches outside its own prefix.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import boto3
import obstore
from botocore.config import Config
from botocore.exceptions import ClientError
from obstore.auth.boto3 import Boto3CredentialProvider
from obstore.exceptions import NotFoundError
from obstore.store import S3Store
from pydantic import BaseModel

from polar.ids import InvalidId, checked_id
from polar.record_codec import CONTENT_TYPE, RECORD_SUFFIX, decode_record, encode_record
from polar.records import CompletionRecord, SessionStatus, Trace
from polar.settings import StorageSettings, get_settings

if TYPE_CHECKING:  # a stub-only TypedDict, not importable at runtime
    from obstore.store import S3Config


def session_prefix(session_id: str) -> str:
    return f"sessions/{checked_id(session_id, 'session id')}/"


def completions_prefix(session_id: str) -> str:
    return f"{session_prefix(session_id)}completions/"


def completion_key(session_id: str, record_id: str) -> str:
    """Where a record is written (format 2, compact zstd JSON)."""
    return f"{completions_prefix(session_id)}{checked_id(record_id, 'record id')}{RECORD_SUFFIX}"


def legacy_completion_key(session_id: str, record_id: str) -> str:
    """Where a record written before format 2 is (plain JSON)."""
    return f"{completions_prefix(session_id)}{checked_id(record_id, 'record id')}.json"


def traces_key(session_id: str, builder: str) -> str:
    safe = builder.replace(":", "_").replace("/", "_")
    return f"{session_prefix(session_id)}traces/{safe}.jsonl"


def rewards_key(traces_key: str) -> str:
    """The rewards sidecar of the traces at `traces_key`: `{builder}.rewards.json` beside
    `{builder}.jsonl`."""
    return f"{traces_key.removesuffix('.jsonl')}.rewards.json"


class TraceRewards(BaseModel):
    """A session's rewards sidecar (score_traces): its terminal status and each trace's
    reward, joined to its traces on reading (`Storage.iter_traces`)."""

    status: SessionStatus
    rewards: dict[str, float | None]
    """Trace id → reward (None: not evaluated, never 0)."""

    @classmethod
    def of(cls, traces: list[Trace], status: SessionStatus) -> TraceRewards:
        """The sidecar of `traces` once rewarded (polar/builders/reward_policies.py)."""
        return cls(status=status, rewards={t.trace_id: t.reward for t in traces})

    def apply(self, trace: Trace) -> Trace:
        """`trace` with its reward and the session's status (a trace the sidecar does not
        name keeps the reward it was built with)."""
        if trace.trace_id in self.rewards:
            trace.reward = self.rewards[trace.trace_id]
        trace.status = self.status
        return trace


def read_traces(data: bytes) -> Iterator[Trace]:
    """The traces of a stored traces object (JSONL), as built: no sidecar joined."""
    for line in data.decode().splitlines():
        if line.strip():
            yield Trace.model_validate_json(line)


def artifact_key(session_id: str, name: str) -> str:
    """`name` may have folders (`harness-attempt1/session.jsonl`), never an empty, `.` or `..`
    part."""
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise InvalidId(f"invalid artifact name {name!r:.80}")
    return f"{session_prefix(session_id)}artifacts/{name}"


def closed_prefix(session_id: str) -> str:
    return f"{session_prefix(session_id)}closed/"


def closed_key(session_id: str, attempt: int | None = None) -> str:
    """The marker that closes one attempt's keys, or (attempt None) every key of the session."""
    return closed_prefix(session_id) + ("session" if attempt is None else f"attempt-{attempt}")


def task_result_key(task_id: str) -> str:
    return f"tasks/{checked_id(task_id, 'task id')}/result.json"


def _object_store(s: StorageSettings) -> S3Store:
    """An S3 client (obstore: Rust, its own IO threads), sync and async.

    Retries like the boto3 client: a few attempts with backoff on 5xx and connection
    errors, bounded, so a caller waits seconds, not minutes, for its 503 while S3 is down.
    """
    config: S3Config = {"region": s.s3_region, "virtual_hosted_style_request": False}
    if s.s3_endpoint:
        config["endpoint"] = s.s3_endpoint
    if s.s3_access_key:
        config["access_key_id"] = s.s3_access_key
    if s.s3_secret_key:
        config["secret_access_key"] = s.s3_secret_key
    return S3Store(
        s.s3_bucket,
        config=config,
        # no keys given: boto3's chain (environment, profiles, SSO, container or instance
        # role), refreshed by obstore; none found there: obstore's own (environment, role)
        credential_provider=None if s.s3_access_key else _boto3_credentials(),
        client_options={"allow_http": True, "connect_timeout": "5s", "timeout": "60s"},
        retry_config={
            "max_retries": 4,
            "retry_timeout": timedelta(seconds=30),
            "backoff": {
                "init_backoff": timedelta(milliseconds=50),
                "max_backoff": timedelta(seconds=2),
                "base": 2,
            },
        },
    )


_MISSING = (NotFoundError, FileNotFoundError)
"""What obstore raises for a key that does not exist (its reads raise the built-in one)."""


def _boto3_credentials() -> Boto3CredentialProvider | None:
    try:
        return Boto3CredentialProvider()
    except ValueError:  # boto3 found no credentials
        return None


class Storage:
    """Thin typed client of Polar's bucket. Reads, writes and listings go through obstore
    (Rust: signing and HTTP off the GIL, a few times less CPU per call than boto3, which
    matters on a worker that makes several calls per session); boto3 only makes the
    bucket (`ensure_bucket`)."""

    def __init__(self, settings: StorageSettings | None = None) -> None:
        s = settings or get_settings(StorageSettings)
        self.settings = s
        self.bucket = s.s3_bucket
        self.endpoint = s.s3_endpoint
        self._store: S3Store | None = None

    def boto_client(self) -> Any:
        """A boto3 client of the same store (bucket creation; benchmarks compare with it)."""
        return boto3.client(
            "s3",
            endpoint_url=self.settings.s3_endpoint,
            region_name=self.settings.s3_region,
            aws_access_key_id=self.settings.s3_access_key,
            aws_secret_access_key=self.settings.s3_secret_key,
            config=Config(
                retries={"max_attempts": 5, "mode": "standard"},
                connect_timeout=5,
                read_timeout=60,
                s3={"addressing_style": "path"},
            ),
        )

    def ensure_bucket(self) -> None:
        client = self.boto_client()
        try:
            client.head_bucket(Bucket=self.bucket)
        except ClientError:
            client.create_bucket(Bucket=self.bucket)

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    @property
    def store(self) -> S3Store:
        """The object store client (obstore), made on first use; thread-safe."""
        if self._store is None:
            self._store = _object_store(self.settings)
        return self._store

    # bytes ----------------------------------------------------------------
    def put_bytes(
        self, key: str, data: bytes, content_type: str = "application/octet-stream"
    ) -> int:
        obstore.put(
            self.store, key, data, attributes={"Content-Type": content_type}, use_multipart=False
        )
        return len(data)

    def get_bytes(self, key: str) -> bytes:
        """The object's bytes; `KeyError` if there is none."""
        try:
            return bytes(obstore.get(self.store, key).bytes())
        except _MISSING:
            raise KeyError(key) from None

    def exists(self, key: str) -> bool:
        try:
            obstore.head(self.store, key)
            return True
        except _MISSING:
            return False

    def list_keys(self, prefix: str) -> list[str]:
        """Every key starting with `prefix` (a plain string prefix), sorted."""
        # obstore lists by whole path segments: list the prefix's folder, then filter
        folder = prefix[: prefix.rfind("/") + 1]
        keys: list[str] = []
        for batch in obstore.list(self.store, folder or None, chunk_size=1000):
            keys.extend(meta["path"] for meta in batch if meta["path"].startswith(prefix))
        return sorted(keys)

    # json -----------------------------------------------------------------
    def put_json(self, key: str, value: Any) -> int:
        return self.put_bytes(key, json.dumps(value).encode(), "application/json")

    def get_json(self, key: str) -> Any:
        return json.loads(self.get_bytes(key))

    # completions ------------------------------------------------------------
    def put_completion(self, record: CompletionRecord) -> str:
        """Store `record` (compact, `polar.record_codec`); its key."""
        key = completion_key(record.session_id, record.record_id)
        self.put_bytes(key, encode_record(record.model_dump(mode="json")), CONTENT_TYPE)
        return key

    @staticmethod
    def encode_completion(record: dict[str, Any]) -> tuple[str, bytes]:
        """The key and stored bytes of a record given as its JSON dict (the gateway checks
        their size before `put_encoded_async` stores them)."""
        return completion_key(record["session_id"], record["record_id"]), encode_record(record)

    async def put_encoded_async(self, key: str, data: bytes) -> None:
        await obstore.put_async(self.store, key, data, attributes={"Content-Type": CONTENT_TYPE})

    def completion_bytes(self, session_id: str) -> int:
        """What a session's completion records take in storage, in bytes."""
        prefix = completions_prefix(session_id)
        folder = prefix[: prefix.rfind("/") + 1]
        total = 0
        for batch in obstore.list(self.store, folder or None, chunk_size=1000):
            total += sum(int(m["size"]) for m in batch if m["path"].startswith(prefix))
        return total

    @staticmethod
    def read_completion(data: bytes) -> CompletionRecord:
        """A record from its stored bytes, compact (format 2) or plain JSON (format 1)."""
        return CompletionRecord.model_validate(decode_record(data))

    def get_completion(self, session_id: str, record_id: str) -> CompletionRecord:
        """One record, whichever format it was stored in; KeyError if there is none."""
        for key in (
            completion_key(session_id, record_id),
            legacy_completion_key(session_id, record_id),
        ):
            try:
                return self.read_completion(self.get_bytes(key))
            except KeyError:
                pass
        raise KeyError(f"no completion {record_id!r} in session {session_id!r}")

    def list_completions(
        self, session_id: str, on_read: Callable[[int, int], None] | None = None
    ) -> list[CompletionRecord]:
        """All completion records of a session, in call order; `on_read(read, total)` is
        called after each record read (the build activity heartbeats with it)."""
        keys = self.list_keys(completions_prefix(session_id))
        records: list[CompletionRecord] = []
        for key in keys:
            records.append(self.read_completion(self.get_bytes(key)))
            if on_read is not None:
                on_read(len(records), len(keys))
        return sorted(records, key=lambda r: (r.seq, r.record_id))

    def mark_closed(self, session_id: str, attempt: int | None = None) -> None:
        """From now on the gateway refuses the keys of this attempt (None: of the session)."""
        self.put_bytes(closed_key(session_id, attempt), b"", "text/plain")

    def closed_markers(self, session_id: str) -> set[str]:
        """The closing markers of a session: `session` and/or `attempt-N` names."""
        prefix = closed_prefix(session_id)
        return {k[len(prefix) :] for k in self.list_keys(prefix)}

    def count_completions(self, session_id: str) -> int:
        return len(self.list_keys(completions_prefix(session_id)))

    def put_traces(self, key: str, traces: list[Trace]) -> int:
        body = "".join(t.model_dump_json() + "\n" for t in traces).encode()
        return self.put_bytes(key, body, "application/x-ndjson")

    def put_rewards(self, traces_key: str, rewards: TraceRewards) -> int:
        """Write the rewards sidecar of the traces at `traces_key`; its size."""
        data = rewards.model_dump_json().encode()
        return self.put_bytes(rewards_key(traces_key), data, "application/json")

    def get_rewards(self, traces_key: str) -> TraceRewards | None:
        """The rewards sidecar of the traces at `traces_key`; None: not scored (yet), or
        scored by older code (the rewards are in the traces)."""
        try:
            data = self.get_bytes(rewards_key(traces_key))
        except KeyError:
            return None
        return TraceRewards.model_validate_json(data)

    def iter_traces(self, key: str, *, rewarded: bool = True) -> Iterator[Trace]:
        """The traces at `key`, one at a time, with their rewards sidecar joined (`rewarded`
        False: as built, the sidecar left out); KeyError if there are none."""
        rewards = self.get_rewards(key) if rewarded else None
        for trace in read_traces(self.get_bytes(key)):
            yield rewards.apply(trace) if rewards is not None else trace

    def load_traces(self, key: str, *, rewarded: bool = True) -> list[Trace]:
        """The traces at `key`, rewarded (see `iter_traces`)."""
        return list(self.iter_traces(key, rewarded=rewarded))
