"""Stored completion records: compact (format 2) and plain (format 1) both read back whole.

The gateway builds each record through the model unvalidated (`model_construct`) and
writes its JSON dict (`json_fields`) compact: the normalised request as a diff against the
caller's, the answer without its copy of the prompt ids, zstd. These tests check that the
record is a valid CompletionRecord whose bytes are those of the validated model's dump,
that every compaction undoes exactly, and that records of either format read on their own
from real S3.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from polar.record_codec import (
    CODEC_FIELD,
    RECORD_SUFFIX,
    ZSTD_MAGIC,
    RecordDecodeError,
    compact_record,
    decode_record,
    encode_record,
)
from polar.records import CompletionRecord, SampledChoice
from polar.session_keys import SessionIdentity
from polar.storage import Storage, completion_key, legacy_completion_key
from proxy.recorder import Recorder
from proxy.training_fields import Extracted, normalize

PROMPT = list(range(100, 164))
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": [{"type": "text", "text": "Fix the bug."}]},
    {"role": "assistant", "content": "Reading.", "tool_calls": []},
]


def gateway_record(
    session_id: str = "s-codec", **extra: Any
) -> tuple[Recorder, CompletionRecord, dict[str, Any]]:
    """A record as the gateway builds it, for a call whose normalised request changed one
    message (content parts flattened) and added the training fields."""
    recorder = Recorder(storage=None)  # type: ignore[arg-type]  # build() never touches it
    request = {"model": "harness", "messages": MESSAGES, "stream": True, "max_tokens": 64}
    chat = request | {"messages": [MESSAGES[0], {"role": "user", "content": "Fix the bug."}]}
    chat["messages"].append(MESSAGES[2])
    normalized = normalize(chat, "vllm", "policy")
    answer = {
        "id": "chatcmpl-1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "token_ids": [7, 8],
                "finish_reason": "stop",
            }
        ],
        "prompt_token_ids": PROMPT,
    }
    pending = recorder.start(SessionIdentity(session_id, "t-codec", attempt=2), request)
    extracted = Extracted(
        prompt_token_ids=PROMPT,
        response_token_ids=[7, 8],
        response_logprobs=[-0.5, -0.25],
        finish_reason="stop",
        model="policy",
        **extra,
    )
    record = recorder.build(pending, normalized, response=answer, extracted=extracted)
    return recorder, record, normalized


def record_dict(session_id: str = "s-codec", **extra: Any) -> dict[str, Any]:
    """The JSON dict the gateway encodes of `gateway_record`'s record."""
    return gateway_record(session_id, **extra)[1].json_fields()


def test_the_gateway_record_is_valid_and_dumps_as_the_validated_model() -> None:
    _, record, normalized = gateway_record()
    doc = record.json_fields()
    validated = CompletionRecord.model_validate(doc)
    assert validated == record  # built unvalidated, but nothing validation would change
    assert validated.model_dump(mode="json") == doc == record.model_dump(mode="json")
    assert list(doc) == list(CompletionRecord.model_fields)  # every field, in the model's order
    # byte-compatible: what the gateway writes is what the validated model's dump encodes to
    assert encode_record(doc) == encode_record(validated.model_dump(mode="json"))
    assert validated.normalized_request == normalized and validated.attempt == 2
    assert record.has_token_ids and record.prompt_token_ids == PROMPT and record.choices == []


def test_several_choices_are_recorded_as_the_model_dumps_them() -> None:
    choices = [SampledChoice(index=i, response_token_ids=[i], finish_reason="stop") for i in (0, 1)]
    doc = record_dict(choices=choices)
    assert CompletionRecord.model_validate(doc).choices == choices
    assert doc["choices"] == [c.model_dump() for c in choices]
    assert doc == CompletionRecord.model_validate(doc).model_dump(mode="json")


def test_compact_record_stores_each_part_once_and_decodes_exactly() -> None:
    doc = record_dict()
    compact = compact_record(doc)
    codec = compact[CODEC_FIELD]
    # equal top-level fields and equal messages are references to the caller's request
    assert set(codec["request_keys"]) == {"max_tokens"}
    assert codec["request_messages"] == [0, 2]
    assert compact["normalized_request"]["messages"] == [
        None,
        {"role": "user", "content": "Fix the bug."},
        None,
    ]
    assert compact["normalized_request"]["model"] == "policy"  # differs: kept
    assert "prompt_token_ids" not in compact["response"] and codec["response_prompt_ids"] == "top"
    data = encode_record(doc)
    assert data[:4] == ZSTD_MAGIC
    assert decode_record(data) == doc


def test_sglang_choice_prompt_ids_and_identical_messages() -> None:
    doc = record_dict()
    doc["normalized_request"] = doc["request"] | {"logprobs": True}  # messages unchanged
    doc["response"] = {"choices": [{"index": 0, "prompt_token_ids": PROMPT}, {"index": 1}]}
    compact = compact_record(doc)
    assert "messages" not in compact["normalized_request"]
    assert "messages" in compact[CODEC_FIELD]["request_keys"]
    assert compact[CODEC_FIELD]["response_prompt_ids"] == "choice0"
    assert "prompt_token_ids" not in compact["response"]["choices"][0]
    assert decode_record(encode_record(doc)) == doc


def test_nothing_to_share_and_odd_json_still_round_trip() -> None:
    doc = record_dict()
    doc |= {"response": None, "prompt_token_ids": None, "has_token_ids": False}
    doc["request"] = {"messages": "not a list", "n": 10**30, "t": float("nan"), "s": "\ud800"}
    doc["normalized_request"] = {"messages": [], "n": 10**30}
    back = decode_record(encode_record(doc))
    assert back["request"]["t"] is None  # NaN is written as null, as pydantic writes it
    assert (
        back["request"]["n"] == 10**30 and back["normalized_request"] == doc["normalized_request"]
    )
    assert back["request"]["s"] == "\ud800"


def test_plain_json_records_decode_and_garbage_does_not() -> None:
    doc = record_dict()
    legacy = CompletionRecord.model_validate(doc).model_dump_json().encode()
    assert decode_record(legacy) == doc
    for bad in (b"", b"[1, 2]", ZSTD_MAGIC + b"broken", b"\x00\x01"):
        with pytest.raises(RecordDecodeError):
            decode_record(bad)


async def test_both_formats_read_back_through_storage(storage: Storage) -> None:
    session = f"s-codec-{secrets.token_hex(3)}"
    recorder, record, _ = gateway_record(session)
    doc = record.json_fields()
    recorder.storage = storage
    new = await recorder.write(record)  # the gateway's path: its JSON dict, compact, obstore
    assert new == completion_key(session, doc["record_id"]) and new.endswith(RECORD_SUFFIX)
    assert storage.get_bytes(new)[:4] == ZSTD_MAGIC
    old = CompletionRecord.model_validate(doc).model_copy(update={"record_id": "0-old-1", "seq": 0})
    storage.put_bytes(
        legacy_completion_key(session, old.record_id), old.model_dump_json().encode(), "x/json"
    )
    records = storage.list_completions(session)
    assert [r.record_id for r in records] == ["0-old-1", doc["record_id"]]
    assert records[0] == old and records[1] == CompletionRecord.model_validate(doc)
    assert storage.get_completion(session, "0-old-1") == old
    assert storage.get_completion(session, doc["record_id"]) == records[1]
    assert storage.count_completions(session) == 2
    with pytest.raises(KeyError):
        storage.get_completion(session, "1-none-1")


def test_records_encode_and_decode_from_many_threads_at_once() -> None:
    """The build activity and the gateway (de)code records in threads concurrently: a shared
    zstd object corrupted data ("Data corruption detected") in a real GRPO run."""
    from concurrent.futures import ThreadPoolExecutor

    records = [record_dict(f"s-thread-{i}") for i in range(8)]
    for i, doc in enumerate(records):  # of different sizes, so frames differ
        doc["request"]["messages"] = MESSAGES * (1 + 20 * i)
    blobs = [encode_record(r) for r in records]

    def roundtrip(i: int) -> bool:
        for _ in range(30):
            assert decode_record(encode_record(records[i % 8])) == records[i % 8]
            assert decode_record(blobs[i % 8]) == records[i % 8]
        return True

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(roundtrip, range(16)))
