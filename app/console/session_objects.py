"""What the console reads from S3 for one session: records, traces, artifacts, reports.

Everything goes through `polar.storage.Storage` and its key builders; reads of many
objects run side by side (obstore's async API). A trace is read one at a time: the
session page only indexes them (ids, lengths, trained tokens), the trace page parses one.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import obstore

from app.console.calls import CallEntry, call_entry, unseen_reasons
from polar import fastjson
from polar.record_codec import RecordDecodeError, decode_record
from polar.records import Trace
from polar.storage import (
    Storage,
    artifact_key,
    completions_prefix,
    read_traces,
    rewards_key,
    session_prefix,
)

LOG_TAIL_BYTES = 64 * 1024
"""The end of a log the session page shows inline (the whole is a raw link away)."""
READS_AT_ONCE = 32


@dataclass
class TraceSummary:
    """One trace in the session page's list."""

    n: int
    trace_id: str
    prompt_tokens: int
    response_tokens: int
    trained_tokens: int
    reward: float | None
    record_ids: list[str]
    started_by: str | None
    policy_version: int | None


@dataclass
class Artifacts:
    """A session's artifacts, sorted into what the page shows."""

    keys: list[str]
    harness_logs: list[str] = field(default_factory=list)
    eval_logs: list[str] = field(default_factory=list)
    reports: list[str] = field(default_factory=list)
    patches: list[str] = field(default_factory=list)


def artifact_name(session_id: str, key: str) -> str:
    return key.removeprefix(artifact_key(session_id, "x")[:-1])


def sort_artifacts(session_id: str, keys: list[str]) -> Artifacts:
    """Harness logs, evaluator logs, reports and patches among a session's artifact keys."""
    out = Artifacts(keys=keys)
    for key in keys:
        name = artifact_name(session_id, key)
        if name.endswith("-report.json"):
            out.reports.append(key)
        elif name.endswith(".patch"):
            out.patches.append(key)
        elif name.startswith("harness-attempt") and name.endswith((".stdout", ".stderr")):
            out.harness_logs.append(key)
        elif "/" not in name and name.endswith((".stdout", ".stderr")):
            out.eval_logs.append(key)
    return out


def summarize_trace(n: int, line: dict[str, Any], rewards: dict[str, Any] | None) -> TraceSummary:
    """A trace's summary from its parsed JSON line (no validation: only counts are read)."""
    provenance = line.get("provenance") or {}
    stats = provenance.get("reconstruction") or {}
    started = stats.get("started_by") if isinstance(stats, dict) else None
    trace_id = str(line.get("trace_id", n))
    reward = line.get("reward")
    if rewards is not None and trace_id in rewards:
        reward = rewards[trace_id]
    return TraceSummary(
        n=n,
        trace_id=trace_id,
        prompt_tokens=len(line.get("prompt_ids") or ()),
        response_tokens=len(line.get("response_ids") or ()),
        trained_tokens=int(sum(line.get("loss_mask") or ())),
        reward=reward,
        record_ids=[str(r) for r in provenance.get("record_ids") or ()],
        started_by=started.get("kind") if isinstance(started, dict) else None,
        policy_version=provenance.get("policy_version"),
    )


class ClosedSessions:
    """What was read of recently seen closed sessions (their objects no longer change)."""

    def __init__(self, size: int = 16) -> None:
        self._items: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._size = size

    def get(self, session_id: str) -> dict[str, Any] | None:
        if session_id in self._items:
            self._items.move_to_end(session_id)
            return self._items[session_id]
        return None

    def put(self, session_id: str, parts: dict[str, Any]) -> None:
        self._items[session_id] = parts
        while len(self._items) > self._size:
            self._items.popitem(last=False)


class SessionObjects:
    """Reads of one bucket's session objects."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.closed = ClosedSessions()

    async def get(self, key: str) -> bytes:
        """An object's bytes; KeyError if there is none."""
        try:
            result = await obstore.get_async(self.storage.store, key)
            return bytes(await result.bytes_async())
        except (FileNotFoundError, obstore.exceptions.NotFoundError):
            raise KeyError(key) from None

    async def keys(self, prefix: str) -> list[str]:
        return await asyncio.to_thread(self.storage.list_keys, prefix)

    async def artifacts(self, session_id: str) -> Artifacts:
        keys = await self.keys(f"{session_prefix(session_id)}artifacts/")
        return sort_artifacts(session_id, keys)

    async def traces_keys(self, session_id: str) -> list[str]:
        keys = await self.keys(f"{session_prefix(session_id)}traces/")
        return [k for k in keys if k.endswith(".jsonl")]

    async def records(self, session_id: str) -> list[dict[str, Any]]:
        """Every completion record of the session (full dicts), in call order."""
        keys = await self.keys(completions_prefix(session_id))
        gate = asyncio.Semaphore(READS_AT_ONCE)

        async def one(key: str) -> dict[str, Any]:
            async with gate:
                data = await self.get(key)
            try:
                return await asyncio.to_thread(decode_record, data)
            except RecordDecodeError as exc:  # shown as a call that says so, never a crash
                return {"record_id": key.rsplit("/", 1)[-1], "error": str(exc), "seq": 0}

        records = await asyncio.gather(*(one(k) for k in keys))
        return sorted(records, key=lambda r: (r.get("seq", 0), str(r.get("record_id", ""))))

    async def calls(self, records: list[dict[str, Any]], trained: set[str]) -> list[CallEntry]:
        unseen = unseen_reasons(records, trained)
        return [call_entry(n, r, trained, unseen) for n, r in enumerate(records)]

    async def sidecar(self, traces_key: str) -> dict[str, Any] | None:
        """The rewards sidecar beside the traces at `traces_key` (status, rewards), if any."""
        try:
            sidecar = fastjson.loads(await self.get(rewards_key(traces_key)))
        except (KeyError, ValueError):
            return None
        return sidecar if isinstance(sidecar, dict) else None

    async def rewards(self, traces_key: str) -> dict[str, Any] | None:
        sidecar = await self.sidecar(traces_key)
        rewards = sidecar.get("rewards") if sidecar is not None else None
        return rewards if isinstance(rewards, dict) else None

    async def trace_index(self, traces_key: str) -> list[TraceSummary]:
        """The summaries of the traces at `traces_key` (empty if there are none)."""
        try:
            data = await self.get(traces_key)
        except KeyError:
            return []
        rewards = await self.rewards(traces_key)

        def index() -> list[TraceSummary]:
            lines = [line for line in data.split(b"\n") if line.strip()]
            parsed = (fastjson.loads(line) for line in lines)
            return [summarize_trace(n, doc, rewards) for n, doc in enumerate(parsed)]

        return await asyncio.to_thread(index)

    async def trace(self, traces_key: str, n: int) -> Trace | None:
        """Trace `n` at `traces_key` with its reward joined; None if there is no such trace."""
        try:
            data = await self.get(traces_key)
        except KeyError:
            return None
        lines = [line for line in data.split(b"\n") if line.strip()]
        if not 0 <= n < len(lines):
            return None
        (trace,) = list(read_traces(lines[n]))
        rewards = await self.rewards(traces_key)
        if rewards is not None and trace.trace_id in rewards:
            trace.reward = rewards[trace.trace_id]
        return trace

    async def text(self, key: str, tail: int = LOG_TAIL_BYTES) -> tuple[str, bool]:
        """The end of a text object (at most `tail` bytes) and whether it was cut."""
        try:
            data = await self.get(key)
        except KeyError:
            return "", False
        cut = len(data) > tail
        return data[-tail:].decode("utf-8", errors="replace"), cut
