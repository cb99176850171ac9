"""Write one CompletionRecord per model call to S3, before the caller gets its answer.

`seq` is the wall-clock ns at request start, so calls of one session order
across gateways; `record_id` (`{seq:020d}-{gateway_id}-{n}`) stays unique
even when two calls start in the same ns. A failed write becomes a 503 for
the caller (its SDK retries later): no answer ever leaves unrecorded.

The record is a `CompletionRecord` (polar/records.py, the one home of its shape), built
on the hot path with `model_construct`: every value is JSON the gateway parsed or made, so
nothing is validated or copied (tests validate what it builds). `CompletionRecord.json_fields`
gives its JSON dict without pydantic's serializer walking the request and answer, and the
storage encodes it (`polar.record_codec`) and writes it with its async client: no thread
(bench/bench_recorder.py measures it against validating and `model_dump`). A storage
without `encode_completion` (a test double) gets the record validated, from a thread. The
encoded record is checked against the record size limit and the session's quota
(`proxy.quota`) before it is written: past them the call is refused in the caller's shape
and nothing is written.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

from polar.providers import APIError
from polar.record_codec import encode_record
from polar.records import CompletionRecord
from polar.session_keys import SessionIdentity
from polar.storage import Storage
from proxy.quota import RecordLimits
from proxy.training_fields import Extracted

log = logging.getLogger("polar.gateway")


@dataclass(frozen=True)
class PendingCall:
    """What is known of a call when it arrives: who, what, and when."""

    identity: SessionIdentity
    provider: str
    request: dict[str, Any]
    seq: int
    record_id: str
    started_at: float
    policy_version: int | None = None
    """the gateway's weight version when it admitted the call"""


class Recorder:
    """Builds and stores completion records for one gateway process."""

    def __init__(
        self,
        storage: Storage,
        gateway_id: str | None = None,
        limits: RecordLimits | None = None,
    ) -> None:
        self.storage = storage
        self.gateway_id = gateway_id or secrets.token_hex(4)
        self.limits = limits or RecordLimits(storage, 0, 0)
        self._counter = itertools.count(1)

    def start(
        self,
        identity: SessionIdentity,
        request: dict[str, Any],
        provider: str = "openai_chat",
        policy_version: int | None = None,
    ) -> PendingCall:
        """Stamp a call at its arrival (request as the caller sent it; the weight version the
        gateway serves)."""
        seq = time.time_ns()
        return PendingCall(
            identity=identity,
            provider=provider,
            request=request,
            seq=seq,
            record_id=f"{seq:020d}-{self.gateway_id}-{next(self._counter)}",
            started_at=seq / 1e9,
            policy_version=policy_version,
        )

    def build(
        self,
        call: PendingCall,
        normalized: dict[str, Any],
        *,
        response: dict[str, Any] | None,
        extracted: Extracted | None = None,
        status_code: int = 200,
        error: str | None = None,
        client_disconnected: bool = False,
        untrainable: str | None = None,
        upstream_url: str | None = None,
    ) -> CompletionRecord:
        """The call's record, built through the model unvalidated (see the module docstring)."""
        ex = extracted or Extracted()
        model = ex.model or normalized.get("model")
        return CompletionRecord.model_construct(
            session_id=call.identity.session_id,
            task_id=call.identity.task_id,
            seq=call.seq,
            record_id=call.record_id,
            attempt=call.identity.attempt,
            provider=call.provider,
            request=call.request,
            normalized_request=normalized,
            response=response,
            status_code=status_code,
            error=error,
            model=model if isinstance(model, str) else None,
            prompt_token_ids=ex.prompt_token_ids,
            response_token_ids=ex.response_token_ids,
            response_logprobs=ex.response_logprobs,
            finish_reason=ex.finish_reason,
            has_token_ids=ex.has_token_ids,
            choices=list(ex.choices),
            started_at=call.started_at,
            finished_at=time.time(),
            gateway_id=self.gateway_id,
            client_disconnected=client_disconnected,
            untrainable=untrainable,
            upstream_url=upstream_url,
            policy_version=call.policy_version,
        )

    async def write(self, record: CompletionRecord) -> str:
        """Store `record`; its key. Raises a 413 / 403 APIError past the record limits
        (nothing written), a 503 one if the write fails."""
        session_id = record.session_id
        fields = record.json_fields()
        encode = getattr(self.storage, "encode_completion", None)
        key, data = encode(fields) if encode is not None else ("", encode_record(fields))
        await self.limits.check(session_id, len(data))
        try:
            if encode is not None:
                await self.storage.put_encoded_async(key, data)
            else:
                validated = CompletionRecord.model_validate(fields)
                key = await asyncio.to_thread(self.storage.put_completion, validated)
        except Exception as exc:
            log.error("could not record %s of session %s: %s", record.record_id, session_id, exc)
            raise APIError(
                503,
                "the gateway could not record this completion; retry later",
                type="server_error",
                code="recording_failed",
            ) from exc
        self.limits.stored(session_id, len(data))
        return key

    async def record(
        self,
        call: PendingCall,
        normalized: dict[str, Any],
        *,
        response: dict[str, Any] | None,
        extracted: Extracted | None = None,
        status_code: int = 200,
        error: str | None = None,
        client_disconnected: bool = False,
        untrainable: str | None = None,
        upstream_url: str | None = None,
    ) -> CompletionRecord:
        """Build and store the record of a finished (or failed) call; the record."""
        record = self.build(
            call,
            normalized,
            response=response,
            extracted=extracted,
            status_code=status_code,
            error=error,
            client_disconnected=client_disconnected,
            untrainable=untrainable,
            upstream_url=upstream_url,
        )
        await self.write(record)
        return record
