"""The bytes of a stored CompletionRecord: compact zstd-compressed JSON, each part once.

A record as the gateway writes it (format 2, `RECORD_SUFFIX` keys) is the
record's JSON with what it would otherwise hold twice replaced by references,
then zstd-compressed:

* the normalised request keeps only what differs from the caller's request:
  top-level fields equal to the caller's are listed in `_codec.request_keys`,
  and `messages` entries equal to the caller's message at the same index are
  `null` with their indices in `_codec.request_messages`;
* the upstream answer's `prompt_token_ids` (vLLM: top level; SGLang: in
  `choices[0]`), when equal to the record's `prompt_token_ids`, are left out
  and flagged in `_codec.response_prompt_ids`.

`decode_record` takes either that or a plain (format 1, uncompressed) JSON
record and gives the full record dict back, so every record reads on its own.
"""

from __future__ import annotations

import threading
from typing import Any

import zstandard

from polar import fastjson

RECORD_SUFFIX = ".json.zst"
"""The key suffix of a format-2 record (format-1 records end in `.json`)."""
CONTENT_TYPE = "application/zstd"
CODEC_FIELD = "_codec"
FORMAT = 2
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ZSTD_LEVEL = 3
"""zstd's default level: a few hundred MB/s on one core, ~5x smaller record JSON."""

# python-zstandard's (de)compressor objects are not thread-safe, and records are encoded and
# decoded from several threads at once (asyncio.to_thread, the gateway's writers): one each
# per thread
_local = threading.local()


def _zstd() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    pair = getattr(_local, "pair", None)
    if pair is None:
        pair = _local.pair = (
            zstandard.ZstdCompressor(level=ZSTD_LEVEL),
            zstandard.ZstdDecompressor(),
        )
    return pair


class RecordDecodeError(ValueError):
    """Stored record bytes that are neither a format-1 nor a format-2 record."""


def _compact_normalized(
    request: dict[str, Any], normalized: dict[str, Any], codec: dict[str, Any]
) -> dict[str, Any]:
    """`normalized` less what equals `request` (references noted in `codec`)."""
    same_keys = [
        k for k, v in normalized.items() if k != "messages" and k in request and request[k] == v
    ]
    compact = {k: v for k, v in normalized.items() if k not in same_keys}
    if same_keys:
        codec["request_keys"] = same_keys
    messages, asked = normalized.get("messages"), request.get("messages")
    if isinstance(messages, list) and isinstance(asked, list):
        if messages == asked:
            compact.pop("messages")
            codec["request_keys"] = [*same_keys, "messages"]
        else:
            same = [i for i, m in enumerate(messages[: len(asked)]) if m == asked[i]]
            if same:
                kept = list(messages)
                for i in same:
                    kept[i] = None
                compact["messages"] = kept
                codec["request_messages"] = same
    return compact


def _restore_normalized(
    request: dict[str, Any], compact: dict[str, Any], codec: dict[str, Any]
) -> dict[str, Any]:
    out = dict(compact)
    for key in codec.get("request_keys", ()):
        out[key] = request[key]
    same = codec.get("request_messages")
    if same:
        messages = list(out["messages"])
        asked = request["messages"]
        for i in same:
            messages[i] = asked[i]
        out["messages"] = messages
    return out


def _without_prompt_ids(
    response: dict[str, Any], prompt_ids: list[int] | None, codec: dict[str, Any]
) -> dict[str, Any]:
    """The upstream answer less its copy of the record's prompt ids."""
    if not prompt_ids:
        return response
    out = response
    if response.get("prompt_token_ids") == prompt_ids:
        out = {k: v for k, v in response.items() if k != "prompt_token_ids"}
        codec["response_prompt_ids"] = "top"
    else:
        choices = response.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        if (
            isinstance(choices, list)
            and isinstance(first, dict)
            and first.get("prompt_token_ids") == prompt_ids
        ):
            first = {k: v for k, v in first.items() if k != "prompt_token_ids"}
            out = {**response, "choices": [first, *choices[1:]]}
            codec["response_prompt_ids"] = "choice0"
    return out


def _restore_prompt_ids(
    response: dict[str, Any], prompt_ids: list[int] | None, where: str
) -> dict[str, Any]:
    if where == "top":
        return {**response, "prompt_token_ids": prompt_ids}
    first, *rest = response["choices"]
    return {**response, "choices": [{**first, "prompt_token_ids": prompt_ids}, *rest]}


def compact_record(record: dict[str, Any]) -> dict[str, Any]:
    """The record dict with its duplicated parts replaced by references (`_codec`)."""
    codec: dict[str, Any] = {"format": FORMAT}
    out = dict(record)
    request, normalized = record.get("request"), record.get("normalized_request")
    if isinstance(request, dict) and isinstance(normalized, dict):
        out["normalized_request"] = _compact_normalized(request, normalized, codec)
    response = record.get("response")
    if isinstance(response, dict):
        out["response"] = _without_prompt_ids(response, record.get("prompt_token_ids"), codec)
    out[CODEC_FIELD] = codec
    return out


def expand_record(doc: dict[str, Any]) -> dict[str, Any]:
    """The full record dict of a compacted one (a plain record is returned as it is)."""
    codec = doc.get(CODEC_FIELD)
    if not isinstance(codec, dict):
        return doc
    out = {k: v for k, v in doc.items() if k != CODEC_FIELD}
    if "request_keys" in codec or "request_messages" in codec:
        out["normalized_request"] = _restore_normalized(
            out["request"], out["normalized_request"], codec
        )
    where = codec.get("response_prompt_ids")
    if where and isinstance(out.get("response"), dict):
        out["response"] = _restore_prompt_ids(out["response"], out.get("prompt_token_ids"), where)
    return out


def encode_record(record: dict[str, Any]) -> bytes:
    """A record dict (CompletionRecord's JSON fields) as format-2 bytes."""
    return _zstd()[0].compress(fastjson.dumps(compact_record(record)))


def decode_record(data: bytes) -> dict[str, Any]:
    """The full record dict of stored bytes, format 2 (zstd) or format 1 (plain JSON)."""
    try:
        if data[:4] == ZSTD_MAGIC:
            data = _zstd()[1].decompress(data)
        doc = fastjson.loads(data)
    except (zstandard.ZstdError, ValueError) as exc:
        raise RecordDecodeError(f"not a completion record: {exc}") from exc
    if not isinstance(doc, dict):
        raise RecordDecodeError("not a completion record: not a JSON object")
    return expand_record(doc)
