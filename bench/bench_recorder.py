"""Recorder benchmark: the gateway's CPU per call to make a CompletionRecord and its bytes.

    .venv/bin/python bench/bench_recorder.py               # about 15 s on 2 cores
    .venv/bin/python bench/bench_recorder.py --root /tmp/before   # another checkout's recorder

The calls are bench_records.py's 200-call session (`gateway_records`: the caller's
request, the normalised request, a vLLM-shaped answer with prompt ids, sampled ids and
logprobs), turned back into what the recorder gets at the end of a call (`PendingCall`,
the normalised request, the answer, `Extracted`). For each call, CPU time
(`time.process_time`, per call, the median of `--runs` passes) of:

* `build`: `Recorder.build` (now a `CompletionRecord` made with `model_construct`;
  before issue 23 a JSON dict written field by field beside the model);
* `dump`: its JSON dict (`CompletionRecord.json_fields`; nothing for a dict);
* `encode`: `Storage.encode_completion` (the codec's diff, compact JSON, zstd).

What the gateway did not take, on the same records: `validate` (a validated build,
`CompletionRecord.model_validate` of the dict) and `model_dump` (pydantic's
`model_dump(mode="json")` instead of `json_fields`). The bytes of `json_fields` and of the
validated model's dump must be the same, so readers see no difference. `--root` imports
the recorder (proxy/, polar/) from another checkout, e.g. a `git archive` of the commit
before, for the before figures with the same script. In-process, no service. Writes
bench/results/recorder.json (or `--out`).
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
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ROOT = Path(sys.argv[sys.argv.index("--root") + 1]) if "--root" in sys.argv else REPO
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(ROOT.resolve()))  # first: its polar/ and proxy/ are the ones timed

from bench.bench_records import gateway_records  # noqa: E402
from polar.records import CompletionRecord  # noqa: E402
from polar.session_keys import SessionIdentity  # noqa: E402
from polar.storage import Storage  # noqa: E402
from proxy.recorder import PendingCall, Recorder  # noqa: E402
from proxy.training_fields import Extracted  # noqa: E402

RESULTS = REPO / "bench" / "results" / "recorder.json"

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


def fields_of(built: Any) -> dict[str, Any]:
    """The JSON dict of what `Recorder.build` gave: a record now, the dict itself before."""
    return built if isinstance(built, dict) else built.json_fields()


def time_calls(recorder: Recorder, calls: list[Call]) -> dict[str, float]:
    """CPU microseconds per call of each part, over one pass through `calls`."""
    clock = time.process_time
    t0 = clock()
    built = [recorder.build(p, n, response=r, extracted=x) for p, n, r, x in calls]
    t1 = clock()
    docs = [fields_of(b) for b in built]
    t2 = clock()
    for doc in docs:
        Storage.encode_completion(doc)
    t3 = clock()
    validated = [CompletionRecord.model_validate(doc) for doc in docs]
    t4 = clock()
    for record in validated:
        record.model_dump(mode="json")
    t5 = clock()
    per = 1e6 / len(calls)
    return {
        "build_us": (t1 - t0) * per,
        "dump_us": (t2 - t1) * per,
        "encode_us": (t3 - t2) * per,
        "validate_us": (t4 - t3) * per,
        "model_dump_us": (t5 - t4) * per,
    }


def same_bytes(recorder: Recorder, calls: list[Call]) -> bool:
    """Whether each record's stored bytes are those of the validated model's dump."""
    for p, n, r, x in calls:
        doc = fields_of(recorder.build(p, n, response=r, extracted=x))
        dumped = CompletionRecord.model_validate(doc).model_dump(mode="json")
        if Storage.encode_completion(doc) != Storage.encode_completion(dumped):
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--runs", type=int, default=9, help="timed passes over the calls")
    parser.add_argument("--root", type=Path, default=REPO, help="the checkout whose recorder")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    started = time.monotonic()
    load_before = os.getloadavg()[0]
    records = gateway_records(args.calls, "bench-recorder")
    calls = recorder_inputs(records)
    recorder = Recorder(storage=None, gateway_id="bench")  # type: ignore[arg-type]  # no I/O here
    same = same_bytes(recorder, calls)
    passes = [time_calls(recorder, calls) for _ in range(args.runs)]
    us = {part: round(statistics.median(p[part] for p in passes), 1) for part in passes[0]}
    us["recorder_us"] = round(us["build_us"] + us["dump_us"] + us["encode_us"], 1)
    built = recorder.build(*calls[0][:2], response=calls[0][2], extracted=calls[0][3])
    result: dict[str, Any] = {
        "meta": {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_avg_1m_before": round(load_before, 2),
            "load_avg_1m_after": round(os.getloadavg()[0], 2),
            "total_s": round(time.monotonic() - started, 1),
            "runs": args.runs,
            "root": str(args.root),
        },
        "recorder_builds": type(built).__name__,
        "calls": len(calls),
        "prompt_tokens_last": len(records[-1].prompt_token_ids or []),
        "same_bytes_as_validated_dump": same,
        "us_per_call": us,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        "| recorder builds | build | dump | encode | recorder (CPU µs per call) "
        "| validate | model_dump |\n|---|---|---|---|---|---|---|\n"
        f"| {result['recorder_builds']} | {us['build_us']:,.1f} | {us['dump_us']:,.1f} "
        f"| {us['encode_us']:,.1f} | {us['recorder_us']:,.1f} | {us['validate_us']:,.1f} "
        f"| {us['model_dump_us']:,.1f} |\n\n"
        f"{len(calls)} calls (last prompt {result['prompt_tokens_last']:,} tokens), median of "
        f"{args.runs} passes, load {load_before:.2f} -> {os.getloadavg()[0]:.2f}; "
        f"stored bytes those of the validated model's dump: {same}"
    )
    print(f"results: {args.out}")
    if not same:
        sys.exit("the recorder's bytes differ from the validated model's dump")


if __name__ == "__main__":
    main()
