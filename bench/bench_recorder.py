"""Recorder benchmark: the gateway's CPU per call to make a CompletionRecord and its bytes.

    .venv/bin/python bench/bench_recorder.py               # about 1 min on 2 cores
    .venv/bin/python bench/bench_recorder.py --calls 400 --runs 9

The calls are bench_records.py's 200-call session (`gateway_records`: the caller's
request, the normalised request, a vLLM-shaped answer with prompt ids, sampled ids and
logprobs), turned back into what the recorder gets at the end of a call (`PendingCall`,
the normalised request, the answer, `Extracted`). Each way of making the stored bytes
builds every call's record, then encodes it (`Storage.encode_completion`: the codec's
diff, compact JSON, zstd):

* `dict`: a JSON dict built field by field, as proxy/recorder.py did before issue 23 (the
  record's shape written a second time beside the model);
* `validated`: `CompletionRecord(...)` validated, dumped with `model_dump(mode="json")`;
* `constructed`: `CompletionRecord.model_construct(...)`, dumped with `model_dump`;
* `recorder`: what the gateway does now (`Recorder.build`: `model_construct`;
  `CompletionRecord.json_fields`).

Every way must give the same bytes (with one `finished_at`, the only field the clock
sets), so readers see no difference. CPU time (`time.process_time`) per call, the median
of `--runs`; build and encode apart. In-process, no service. Writes
bench/results/recorder.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_records import gateway_records  # noqa: E402
from polar.records import CompletionRecord  # noqa: E402
from polar.session_keys import SessionIdentity  # noqa: E402
from polar.storage import Storage  # noqa: E402
from proxy.recorder import PendingCall, Recorder  # noqa: E402
from proxy.upstream import Extracted  # noqa: E402

RESULTS = REPO / "bench" / "results" / "recorder.json"
FINISHED_AT = 1_800_000_000.0

Call = tuple[PendingCall, dict[str, Any], dict[str, Any] | None, Extracted]


def recorder_inputs(records: list[CompletionRecord]) -> list[Call]:
    """What the recorder is handed at the end of each call that made `records`."""
    calls = []
    for r in records:
        identity = SessionIdentity(r.session_id, r.task_id, attempt=r.attempt)
        pending = PendingCall(identity, r.provider, r.request, r.seq, r.record_id, r.started_at)
        extracted = Extracted(
            prompt_token_ids=r.prompt_token_ids,
            response_token_ids=r.response_token_ids,
            response_logprobs=r.response_logprobs,
            finish_reason=r.finish_reason,
            model=r.model,
            choices=list(r.choices),
        )
        calls.append((pending, r.normalized_request, r.response, extracted))
    return calls


def _fields(recorder: Recorder, call: Call) -> dict[str, Any]:
    """Every field of the call's record, as keyword arguments of the model."""
    pending, normalized, response, ex = call
    model = ex.model or normalized.get("model")
    return {
        "session_id": pending.identity.session_id,
        "task_id": pending.identity.task_id,
        "seq": pending.seq,
        "record_id": pending.record_id,
        "attempt": pending.identity.attempt,
        "provider": pending.provider,
        "request": pending.request,
        "normalized_request": normalized,
        "response": response,
        "status_code": 200,
        "error": None,
        "model": model if isinstance(model, str) else None,
        "prompt_token_ids": ex.prompt_token_ids,
        "response_token_ids": ex.response_token_ids,
        "response_logprobs": ex.response_logprobs,
        "finish_reason": ex.finish_reason,
        "has_token_ids": ex.has_token_ids,
        "choices": list(ex.choices),
        "started_at": pending.started_at,
        "finished_at": time.time(),
        "gateway_id": recorder.gateway_id,
        "client_disconnected": False,
        "untrainable": None,
    }


def build_dict(recorder: Recorder, call: Call) -> dict[str, Any]:
    fields = _fields(recorder, call)
    fields["choices"] = [c.model_dump() for c in fields["choices"]]
    return fields


def build_validated(recorder: Recorder, call: Call) -> CompletionRecord:
    return CompletionRecord(**_fields(recorder, call))


def build_constructed(recorder: Recorder, call: Call) -> CompletionRecord:
    return CompletionRecord.model_construct(**_fields(recorder, call))


def build_recorder(recorder: Recorder, call: Call) -> CompletionRecord:
    pending, normalized, response, extracted = call
    return recorder.build(pending, normalized, response=response, extracted=extracted)


def dump_model(record: Any) -> dict[str, Any]:
    return record.model_dump(mode="json")


def dump_fields(record: Any) -> dict[str, Any]:
    return record.json_fields()


WAYS: dict[str, tuple[Callable[[Recorder, Call], Any], Callable[[Any], dict[str, Any]]]] = {
    "dict": (build_dict, dict),
    "validated": (build_validated, dump_model),
    "constructed": (build_constructed, dump_model),
    "recorder": (build_recorder, dump_fields),
}


def stored_bytes(recorder: Recorder, calls: list[Call], way: str) -> list[bytes]:
    """Each call's stored bytes, made `way`, with the one `finished_at`."""
    build, dump = WAYS[way]
    out = []
    for call in calls:
        doc = dump(build(recorder, call))
        out.append(Storage.encode_completion({**doc, "finished_at": FINISHED_AT})[1])
    return out


def time_way(recorder: Recorder, calls: list[Call], way: str) -> dict[str, float]:
    """CPU microseconds per call: build (the record), dump (its JSON dict) and encode."""
    build, dump = WAYS[way]
    t0 = time.process_time()
    built = [build(recorder, call) for call in calls]
    t1 = time.process_time()
    docs = [dump(b) for b in built]
    t2 = time.process_time()
    for doc in docs:
        Storage.encode_completion(doc)
    t3 = time.process_time()
    per = 1e6 / len(calls)
    return {"build_us": (t1 - t0) * per, "dump_us": (t2 - t1) * per, "encode_us": (t3 - t2) * per}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--runs", type=int, default=7, help="timed passes over the calls")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    started = time.monotonic()
    load_before = os.getloadavg()[0]
    records = gateway_records(args.calls, "bench-recorder")
    calls = recorder_inputs(records)
    recorder = Recorder(storage=None, gateway_id="bench")  # type: ignore[arg-type]  # no I/O here
    reference = stored_bytes(recorder, calls, "dict")
    same = {way: stored_bytes(recorder, calls, way) == reference for way in WAYS}
    passes: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    for _ in range(args.runs):  # interleaved, so load drifts alike over every way
        for way in WAYS:
            passes[way].append(time_way(recorder, calls, way))
    figures = {
        way: {part: round(statistics.median(p[part] for p in runs), 1) for part in runs[0]}
        for way, runs in passes.items()
    }
    for parts in figures.values():
        parts["total_us"] = round(sum(parts.values()), 1)
    result: dict[str, Any] = {
        "meta": {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_avg_1m_before": round(load_before, 2),
            "load_avg_1m_after": round(os.getloadavg()[0], 2),
            "total_s": round(time.monotonic() - started, 1),
            "runs": args.runs,
        },
        "calls": len(calls),
        "record_bytes_mean": round(sum(map(len, reference)) / len(reference)),
        "prompt_tokens_last": len(records[-1].prompt_token_ids or []),
        "same_bytes": same,
        "us_per_call": figures,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print("| way | build | dump | encode | total (CPU µs per call) | same bytes |")
    print("|---|---|---|---|---|---|")
    for way, parts in figures.items():
        print(
            f"| {way} | {parts['build_us']:,.1f} | {parts['dump_us']:,.1f} "
            f"| {parts['encode_us']:,.1f} | {parts['total_us']:,.1f} | {same[way]} |"
        )
    print(
        f"\n{len(calls)} calls, last prompt {result['prompt_tokens_last']:,} tokens, "
        f"{result['record_bytes_mean']:,} stored bytes a record on average; median of "
        f"{args.runs} runs; load {load_before:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    print(f"results: {args.out}")
    if not all(same.values()):
        sys.exit(f"the ways did not store the same bytes: {same}")


if __name__ == "__main__":
    main()
