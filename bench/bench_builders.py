"""Trajectory-builder benchmark: rebuild time of a 200-call session, build time of drifting
sessions against their length, trace counts on harness runs.

    .venv/bin/python bench/bench_builders.py            # all parts; sessions from bench/data
    .venv/bin/python -m tests.support.record_harness_sessions   # re-record the four CLIs
    .venv/bin/python bench/bench_builders.py --runs 9 --calls 200
    .venv/bin/python bench/bench_builders.py --drift-calls 50 200 300 1000 --out X.json \\
        --compare bench/results/builders-before.json   # plot against an earlier run

(a) A 200-call session rendered by the tiny Qwen3-style tokenizer's chat
template (bench/tiny_backend.TinyBackend): multi-turn tool use with
reasoning and growing prompts, two sub-agents, a follow-up user turn (the
template drops earlier `<think>` blocks), two compactions. Each builder
rebuilds it `--runs` times after one warm-up; the median and the minimum are
reported, with the token counts.

(b) Drifting sessions (bench/drifting_sessions.py): one agent whose harness
changes every answer it sends back, so every turn breaks the chain:
`think_dropped` (reasoning not sent back: the template renders the turn
without its `<think>`) and `tool_args_reordered` (tool-call argument keys
re-serialised in reverse order); compacted every 250 calls. prefix_merging
builds each at `--drift-calls` sizes: the median of up to `--drift-runs` runs
(one run once a run takes over 5 s); a size whose time, extrapolated as the
cube of the calls from the previous size, would pass `--drift-cap` seconds is
skipped and marked so.

(c) Real harness sessions: Codex, Claude Code, Qwen Code and Pi driven through
the gateway by the agent backend of tests/system/test_harness_clis.py (list, read,
edit, check, answer), their CompletionRecords as the gateway stored them in S3,
kept xz-compressed in bench/data/{harness}.jsonl.xz (re-recorded by
`python -m tests.support.record_harness_sessions`, test machinery the benchmark
does not import; it needs infra/harnesses/install.sh). Reports traces per
builder per harness and the pooled per_request / prefix_merging ratio.

Prints markdown tables; writes bench/results/builders.json and, beside it,
builders.png (build time against calls, one line per drift variant; dashed:
the `--compare` run).
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import platform
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.drifting_sessions import DRIFT_VARIANTS, drifting_session  # noqa: E402
from bench.tiny_backend import (  # noqa: E402
    SYSTEM,
    TINY_MODEL,
    TOOLS,
    TinyBackend,
    assistant_text,
    tool_result,
)
from polar.builders import BuildContext, BuildOutput, get_builder  # noqa: E402
from polar.records import CompletionRecord  # noqa: E402

DATA = REPO / "bench" / "data"
RESULTS = REPO / "bench" / "results" / "builders.json"
DRIFT_CALLS = (50, 200, 300, 1000)
BUILDERS = ("per_request", "prefix_merging")


# --------------------------------------------------------------------------- (a) long session


def _file(rng: random.Random, name: str) -> str:
    """A plausible source file of 10-40 lines."""
    lines = [f"# {name}"]
    for i in range(rng.randint(10, 40)):
        lines.append(f"def {name.replace('.', '_')}_{i}(x):\n    return x * {rng.randint(1, 99)}")
    return "\n".join(lines) + "\n"


def long_session(tokenizer_dir: Path, calls: int = 200, seed: int = 0) -> list[CompletionRecord]:
    """`calls` model calls of one agent session, rendered by the tiny tokenizer's template.

    Main agent: tool calls with reasoning, tool results of 10-40 lines. At 30
    and 100 calls it runs a 5-call sub-agent (its own context); at 120 the user
    adds a request (earlier reasoning dropped from the prompt); at 70 and 150
    the context is compacted into a summary. The last call answers.
    """
    from polar.tokenization import load_tokenizer

    rng = random.Random(seed)
    backend = TinyBackend(load_tokenizer(str(tokenizer_dir)))
    task = {"role": "user", "content": "The test suite fails; find and fix the bug."}
    main: list[dict[str, Any]] = [SYSTEM, task]
    events = {30: "sub", 100: "sub", 120: "user", 70: "compact", 150: "compact"}
    step = 0
    while len(backend.records) < calls:
        event = events.pop(len(backend.records), None)
        if event == "compact":
            summary = f"Summary of the work so far ({len(backend.records)} calls): bug narrowed."
            main = [SYSTEM, {"role": "user", "content": summary}]
        elif event == "user":
            main.append({"role": "user", "content": "Also add a regression test."})
        elif event == "sub":
            ask = f"Find the callers of parse() in package p{len(backend.records)}."
            sub = [
                {"role": "system", "content": "You are a sub-agent."},
                {"role": "user", "content": ask},
            ]
            for k in range(min(5, calls - len(backend.records))):
                last = k == 4 or len(backend.records) == calls - 1
                calls_ = [] if last else [("bash", {"command": f"grep -rn parse src/m{k}.py"})]
                text = assistant_text("Found 3 callers." if last else "", f"Sub {k}.", calls_)
                answer = backend.call(sub, text, tools=TOOLS)
                sub.append(answer)
                if not last:
                    sub.append(tool_result(answer, _file(rng, f"m{k}.py")))
            continue
        last = len(backend.records) == calls - 1
        name = f"src/f{step}.py"
        tool_calls = [] if last else [("bash", {"command": f"cat {name}"})]
        words = " ".join(rng.choice(("check", "read", "test", "the", "bug")) for _ in range(8))
        reasoning = f"Step {step}: {words}."
        text = assistant_text("The bug is fixed." if last else "", reasoning, tool_calls)
        answer = backend.call(main, text, tools=TOOLS)
        main.append(answer)
        if not last:
            main.append(tool_result(answer, _file(rng, name)))
        step += 1
    return backend.records


def run_builder(builder: str, records: list[CompletionRecord], tokenizer_dir: Path) -> BuildOutput:
    ctx = BuildContext(
        session_id=records[0].session_id if records else "s",
        task_id=records[0].task_id if records else "t",
        harness="bench",
        builder=builder,
        config={"tokenizer": str(tokenizer_dir)},
    )
    return get_builder(builder)(records, ctx)


def token_counts(out: BuildOutput) -> dict[str, int]:
    return {
        "traces": len(out.traces),
        "trace_tokens": sum(len(t.prompt_ids) + len(t.response_ids) for t in out.traces),
        "sampled_tokens": sum(sum(t.loss_mask) for t in out.traces),
    }


def bench_rebuild(tokenizer_dir: Path, calls: int, runs: int) -> dict[str, Any]:
    records = long_session(tokenizer_dir, calls)
    prompts = [len(r.prompt_token_ids or []) for r in records]
    result: dict[str, Any] = {
        "calls": len(records),
        "runs": runs,
        "prompt_tokens_total": sum(prompts),
        "prompt_tokens_max": max(prompts),
        "sampled_tokens": sum(len(r.response_token_ids or []) for r in records),
        "builders": {},
    }
    for builder in BUILDERS:
        out = run_builder(builder, records, tokenizer_dir)  # warm-up (tokenizer load, imports)
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            out = run_builder(builder, records, tokenizer_dir)
            times.append(time.perf_counter() - started)
        result["builders"][builder] = {
            "median_s": statistics.median(times),
            "min_s": min(times),
            **token_counts(out),
            "breaks": out.breaks,
        }
    return result


# --------------------------------------------------------------------------- (b) drifting sessions


def bench_drift(tokenizer_dir: Path, sizes: list[int], runs: int, cap_s: float) -> dict[str, Any]:
    """prefix_merging build time of each drift variant at each size (see the module docstring)."""
    from polar.tokenization import load_tokenizer

    tokenizer = load_tokenizer(str(tokenizer_dir))
    variants: dict[str, list[dict[str, Any]]] = {}
    for variant in DRIFT_VARIANTS:
        rows: list[dict[str, Any]] = []
        previous: tuple[int, float] | None = None
        for calls in sorted(sizes):
            row: dict[str, Any] = {"calls": calls}
            rows.append(row)
            if previous is not None:
                estimate = previous[1] * (calls / previous[0]) ** 3
                if estimate > cap_s:
                    row["skipped"] = f"estimated {estimate:.0f} s (cube of calls) > {cap_s:.0f} s"
                    continue  # the larger sizes are compared with the same smaller one
            records = drifting_session(TinyBackend(tokenizer), calls, variant)
            prompts = [len(r.prompt_token_ids or []) for r in records]
            times: list[float] = []
            while len(times) < runs and sum(times) < 5.0:
                started = time.perf_counter()
                out = run_builder("prefix_merging", records, tokenizer_dir)
                times.append(time.perf_counter() - started)
            row.update(
                prompt_tokens_total=sum(prompts),
                prompt_tokens_max=max(prompts),
                runs=len(times),
                median_s=statistics.median(times),
                min_s=min(times),
                **token_counts(out),
                breaks=out.breaks,
            )
            previous = (calls, min(times))
            print(f"  {variant} {calls} calls: {row['median_s']:.3f} s", file=sys.stderr)
        variants[variant] = rows
    return {"variants": variants, "cap_s": cap_s}


def plot_drift(result: dict[str, Any], path: Path, compare: dict[str, Any] | None) -> None:
    """Build time against calls, one line per drift variant (dashed: the compared run)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    runs = [("after" if compare else "", result, "-")]
    if compare is not None and "drift" in compare:
        runs.append(("before", compare, "--"))
    for label, run, style in runs:
        for i, (variant, rows) in enumerate(run["drift"]["variants"].items()):
            done = [r for r in rows if "median_s" in r]
            ax.plot(
                [r["calls"] for r in done],
                [r["median_s"] for r in done],
                style,
                marker="o",
                color=f"C{i}",
                label=f"{variant} {label}".strip(),
            )
    ax.set_xlabel("calls in the session")
    ax.set_ylabel("prefix_merging build time (s)")
    ax.set_yscale("log")
    ax.set_title("Drifting sessions: every turn breaks the chain")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- (c) harness sessions


def slim(record: CompletionRecord) -> dict[str, Any]:
    """A record with what builders read: token data, messages, the answer (not tools, raw body)."""
    data = record.model_dump(mode="json")
    data["request"] = {}
    data["normalized_request"] = {"messages": record.normalized_request.get("messages") or []}
    choices = (record.response or {}).get("choices") or [{}]
    data["response"] = {
        "choices": [{"message": choices[0].get("message"), "finish_reason": record.finish_reason}],
        "usage": (record.response or {}).get("usage"),
    }
    return data


def load_sessions(data_dir: Path) -> dict[str, list[list[CompletionRecord]]]:
    """Recorded sessions by harness: `{harness}.jsonl[.xz]`, one or more sessions each."""
    sessions: dict[str, list[list[CompletionRecord]]] = {}
    for path in sorted([*data_dir.glob("*.jsonl"), *data_dir.glob("*.jsonl.xz")]):
        data = path.read_bytes()
        text = (lzma.decompress(data) if path.suffix == ".xz" else data).decode()
        by_session: dict[str, list[CompletionRecord]] = defaultdict(list)
        for line in text.splitlines():
            if line.strip():
                record = CompletionRecord.model_validate_json(line)
                by_session[record.session_id].append(record)
        sessions[path.name.split(".")[0]] = list(by_session.values())
    return sessions


def bench_ratio(data_dir: Path, tokenizer_dir: Path) -> dict[str, Any]:
    harnesses: dict[str, Any] = {}
    totals = dict.fromkeys(BUILDERS, 0)
    for harness, sessions in load_sessions(data_dir).items():
        row: dict[str, Any] = {"sessions": len(sessions), "calls": sum(map(len, sessions))}
        breaks: dict[str, int] = defaultdict(int)
        for builder in BUILDERS:
            n = 0
            for records in sessions:
                out = run_builder(builder, records, tokenizer_dir)
                n += len(out.traces)
                for kind, count in out.breaks.items():
                    breaks[kind] += count
            row[builder] = n
            totals[builder] += n
        row["ratio"] = row["per_request"] / row["prefix_merging"] if row["prefix_merging"] else None
        row["breaks"] = dict(breaks)
        harnesses[harness] = row
    merged = totals["prefix_merging"]
    return {
        "harnesses": harnesses,
        "pooled": {**totals, "ratio": totals["per_request"] / merged if merged else None},
    }


# --------------------------------------------------------------------------- report


def markdown(result: dict[str, Any]) -> str:
    a = result["rebuild"]
    lines = [
        f"### Rebuild of a {a['calls']}-call session (median of {a['runs']} runs)",
        "",
        f"{a['prompt_tokens_total']:,} prompt tokens over all calls (largest prompt "
        f"{a['prompt_tokens_max']:,}), {a['sampled_tokens']:,} sampled tokens.",
        "",
        "| builder | median | min | traces | tokens in traces | sampled (mask 1) | breaks |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, b in a["builders"].items():
        breaks = ", ".join(f"{k} {v}" for k, v in sorted(b["breaks"].items())) or "-"
        lines.append(
            f"| {name} | {b['median_s'] * 1000:.1f} ms | {b['min_s'] * 1000:.1f} ms | "
            f"{b['traces']} | {b['trace_tokens']:,} | {b['sampled_tokens']:,} | {breaks} |"
        )
    d = result["drift"]["variants"]
    lines += [
        "",
        "### prefix_merging on drifting sessions (every turn breaks the chain)",
        "",
        "| variant | calls | build (median / min) | runs | traces | prompt tokens | breaks |",
        "|---|---|---|---|---|---|---|",
    ]
    for variant, rows in d.items():
        for row in rows:
            if "skipped" in row:
                lines.append(f"| {variant} | {row['calls']} | skipped: {row['skipped']} | | | | |")
                continue
            breaks = ", ".join(f"{k} {v}" for k, v in sorted(row["breaks"].items())) or "-"
            lines.append(
                f"| {variant} | {row['calls']} | {row['median_s']:.3f} / {row['min_s']:.3f} s | "
                f"{row['runs']} | "
                f"{row['traces']} | {row['prompt_tokens_total']:,} | {breaks} |"
            )
    r = result["ratio"]
    lines += [
        "",
        "### Traces per builder on recorded harness sessions",
        "",
        "| harness | sessions | calls | per_request | prefix_merging | ratio | breaks |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, h in r["harnesses"].items():
        breaks = ", ".join(f"{k} {v}" for k, v in sorted(h["breaks"].items())) or "-"
        ratio = "-" if h["ratio"] is None else f"{h['ratio']:.2f}"
        lines.append(
            f"| {name} | {h['sessions']} | {h['calls']} | {h['per_request']} | "
            f"{h['prefix_merging']} | {ratio} | {breaks} |"
        )
    p = r["pooled"]
    ratio = "-" if p["ratio"] is None else f"{p['ratio']:.2f}"
    lines.append(f"| **pooled** | | | {p['per_request']} | {p['prefix_merging']} | {ratio} | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls in the long session")
    parser.add_argument("--runs", type=int, default=5, help="timed rebuilds per builder")
    parser.add_argument(
        "--drift-calls",
        type=int,
        nargs="+",
        default=list(DRIFT_CALLS),
        help="sizes of the drifting sessions",
    )
    parser.add_argument("--drift-runs", type=int, default=3, help="timed builds per drift size")
    parser.add_argument(
        "--drift-cap",
        type=float,
        default=180.0,
        help="skip a drift size whose extrapolated build time passes this many seconds",
    )
    parser.add_argument("--compare", type=Path, help="an earlier results JSON to plot against")
    parser.add_argument("--data", type=Path, default=DATA, help="recorded sessions (*.jsonl)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results JSON")
    args = parser.parse_args()
    if not (TINY_MODEL / ".complete").exists():
        sys.exit(f"no tiny model at {TINY_MODEL}: run `polar dev model` (or infra/setup.sh)")
    result: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "date": time.strftime("%Y-%m-%d"),
        "rebuild": bench_rebuild(TINY_MODEL, args.calls, args.runs),
        "drift": bench_drift(TINY_MODEL, args.drift_calls, args.drift_runs, args.drift_cap),
        "ratio": bench_ratio(args.data, TINY_MODEL),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    compare = json.loads(args.compare.read_text()) if args.compare else None
    plot = args.out.with_suffix(".png")
    plot_drift(result, plot, compare)
    print(markdown(result))
    print(f"\nresults: {args.out}, plot: {plot}")


if __name__ == "__main__":
    main()
