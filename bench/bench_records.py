"""Record storage benchmark: bytes written to S3 for a 200-call session, and the read cost.

    .venv/bin/python bench/bench_records.py               # about 30 s on 2 cores
    .venv/bin/python bench/bench_records.py --calls 400

The session is bench_builders.py's 200-call session (the tiny Qwen3-style
tokenizer's template, tool calls with reasoning, two sub-agents, two
compactions: `bench.bench_builders.long_session`), each call made a record as
the gateway makes it: the caller's request, the normalised request
(`openai_chat` to_chat + `proxy.training_fields.normalize`, vLLM kind), the upstream
answer in vLLM's shape with the prompt ids, sampled ids and logprobs.

Format 1 is what the gateway wrote before (`CompletionRecord.model_dump_json()`,
plain JSON, `.json`); format 2 is what it writes now (`polar.record_codec`:
normalised request as a diff, answer without its copy of the prompt ids,
zstd). Both are PUT into a fresh SeaweedFS (`DevStack.seaweedfs()`), then read
back with `Storage.list_completions` (median of `--runs`), which must give the
same records. Writes bench/results/records.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.devstack import DevStack  # noqa: E402
from bench.bench_builders import long_session  # noqa: E402
from bench.fake_vllm import vllm_answer  # noqa: E402
from polar.providers import CallContext, get_provider  # noqa: E402
from polar.record_codec import encode_record  # noqa: E402
from polar.records import CompletionRecord  # noqa: E402
from polar.settings import Settings  # noqa: E402
from polar.storage import Storage, legacy_completion_key  # noqa: E402
from proxy.training_fields import normalize  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

RESULTS = REPO / "bench" / "results" / "records.json"
TOKENIZER = REPO / ".polar" / "models" / "tiny-qwen3"


def gateway_records(calls: int, session_id: str) -> list[CompletionRecord]:
    """The builders' session as the gateway records it (see the module docstring)."""
    chat = get_provider("openai_chat")
    call = CallContext(path="/v1/chat/completions", headers={}, query={})
    out = []
    for n, rec in enumerate(long_session(TOKENIZER, calls)):
        request = {**rec.request, "stream": True}
        normalized = normalize(chat.to_chat(request, call), "vllm", "policy")
        message = (rec.response or {})["choices"][0]["message"]
        answer = vllm_answer(
            normalized,
            n,
            prompt_ids=rec.prompt_token_ids or [],
            response_ids=rec.response_token_ids or [],
            text=message.get("content") or "",
        )
        answer["choices"][0]["message"] = message
        out.append(
            rec.model_copy(
                update={
                    "session_id": session_id,
                    "request": request,
                    "normalized_request": normalized,
                    "response": answer,
                    "record_id": f"{rec.seq:020d}-bench-{n}",
                }
            )
        )
    return out


def _read(storage: Storage, session_id: str, runs: int) -> tuple[float, list[CompletionRecord]]:
    times, records = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        records = storage.list_completions(session_id)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3, help="timed reads of each session")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    started = time.monotonic()
    old_sid, new_sid = f"bench-v1-{secrets.token_hex(3)}", f"bench-v2-{secrets.token_hex(3)}"
    old = gateway_records(args.calls, old_sid)
    new = [r.model_copy(update={"session_id": new_sid}) for r in old]
    old_blobs = [r.model_dump_json().encode() for r in old]
    t0 = time.process_time()
    new_blobs = [encode_record(r.model_dump(mode="json")) for r in new]
    encode_ms = (time.process_time() - t0) * 1000 / len(new)

    with tempfile.TemporaryDirectory(prefix="polar-bench-rec-") as tmp:
        settings = Settings(
            data_dir=Path(tmp),
            s3_endpoint=f"http://127.0.0.1:{free_port(8)}",
            s3_bucket="polar-bench",
            session_secret=secrets.token_hex(16),
            model_dir=None,
        )
        stack = DevStack(settings, with_model=False, die_with_parent=True)
        stack.start(stack.seaweedfs(), log=lambda line: print(f"  {line}", file=sys.stderr))
        try:
            storage = Storage(stack.settings)
            storage.ensure_bucket()
            for r, blob in zip(old, old_blobs, strict=True):
                key = legacy_completion_key(r.session_id, r.record_id)
                storage.put_bytes(key, blob, "application/json")
            for r in new:
                storage.put_completion(r)
            old_read_s, old_back = _read(storage, old_sid, args.runs)
            new_read_s, new_back = _read(storage, new_sid, args.runs)
        finally:
            stack.stop("seaweedfs", quiet=True)
    same = [r.model_dump() for r in old_back] == [
        r.model_copy(update={"session_id": old_sid}).model_dump() for r in new_back
    ]
    largest = max(range(len(old)), key=lambda i: len(old_blobs[i]))
    result: dict[str, Any] = {
        "meta": {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "total_s": round(time.monotonic() - started, 1),
        },
        "calls": len(old),
        "prompt_tokens_last": len(old[-1].prompt_token_ids or []),
        "prompt_tokens_sum": sum(len(r.prompt_token_ids or []) for r in old),
        "format1_bytes": sum(map(len, old_blobs)),
        "format2_bytes": sum(map(len, new_blobs)),
        "largest_record_format1_bytes": len(old_blobs[largest]),
        "largest_record_format2_bytes": len(new_blobs[largest]),
        "encode_ms_per_record": round(encode_ms, 3),
        "read_session_s_format1": round(old_read_s, 3),
        "read_session_s_format2": round(new_read_s, 3),
        "records_read_back_equal": same,
    }
    result["ratio"] = round(result["format1_bytes"] / result["format2_bytes"], 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    kb = 1024
    print(
        "| format | bytes written for the session | largest record | list_completions |\n"
        "|---|---|---|---|\n"
        f"| 1: plain JSON (before) | {result['format1_bytes'] / kb:,.0f} KiB "
        f"| {result['largest_record_format1_bytes'] / kb:,.1f} KiB "
        f"| {result['read_session_s_format1'] * 1000:.0f} ms |\n"
        f"| 2: diff + zstd (now) | {result['format2_bytes'] / kb:,.0f} KiB "
        f"| {result['largest_record_format2_bytes'] / kb:,.1f} KiB "
        f"| {result['read_session_s_format2'] * 1000:.0f} ms |\n\n"
        f"* {result['calls']} calls, {result['prompt_tokens_sum']:,} prompt tokens in all "
        f"(last prompt {result['prompt_tokens_last']:,}); format 2 is {result['ratio']}x "
        f"smaller, encoding costs {result['encode_ms_per_record']:.2f} ms CPU a record; "
        f"records read back equal: {same}"
    )
    print(f"\nresults: {args.out}")
    if not same:
        sys.exit("the two formats did not read back the same records")


if __name__ == "__main__":
    main()
