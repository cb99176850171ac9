"""Traces exported for trainers: RL rows (JSONL and a Hugging Face dataset) and an SFT view.

`polar export` writes, under `--out`:

* `traces.jsonl`: one RL row per trace (`rl_row`).
* `dataset/`: the same rows as a `datasets.Dataset` (`save_to_disk`; reload
  with `datasets.load_from_disk`). Ids are int32, masks int8, logprobs float64
  (so they round-trip exactly as the backend reported them).
* `sft.jsonl`: the SFT view (`sft_rows`): one conversation (`messages`,
  `tools`) per distinct conversation of a resolved session.
* `verl.parquet`, `trl.jsonl`, `slime.jsonl`: trainer-native layouts
  (polar/client/layouts.py).
* `manifest.json`: where the traces came from, what was written, the counts.

Every format is streamed: `export_traces` reads its traces once, a session at
a time, and writes rows as it goes. A call of `n > 1` choices gives one trace
per choice (the builders), hence one row per choice in every format; the SFT
and TRL views render each trace's own choice.

RL row columns: `trace_id`; `input_ids` (= prompt ids + response ids);
`loss_mask` aligned with `input_ids` (0 over the prompt and interstitial
tokens, 1 on sampled tokens); `response_logprobs` aligned with the response
part (`input_ids[prompt_length:]`, 0.0 where the mask is 0); `prompt_length`,
`response_length`; `reward` (None: not evaluated, never 0); `status` (the
session's terminal status); provenance flattened: `session_id`, `task_id`,
`harness`, `builder`, `model`, `reward_policy`, `record_ids`,
`completion_seqs`, `policy_version`. Every trace is exported whatever its status or reward: a
trainer filters on `status` and `reward`.

How trainers read the columns (`p = prompt_length`):

| trainer | its field | from this row |
|---|---|---|
| verl (`AgentLoopOutput`) | `prompt_ids` / `response_ids` | `input_ids[:p]` / `input_ids[p:]` |
| | `response_mask` | `loss_mask[p:]` |
| | `response_logprobs` (rollout logprobs) | `response_logprobs` |
| | `reward_score` | `reward` |
| NeMo RL (GRPO `train_data`) | `input_ids`, `input_lengths` | `input_ids`, `len(input_ids)` |
| | `token_mask` | `loss_mask` |
| | `generation_logprobs` (whole sequence) | `[0.0] * p + response_logprobs` |
| | `sample_mask` | `status == "completed" and reward is not None` |
| slime (`Sample`) | `tokens` | `input_ids` |
| | `response_length` | `response_length` |
| | `loss_mask` (response part only) | `loss_mask[p:]` |
| | `rollout_log_probs` | `response_logprobs` |
| | `reward`, `metadata` | `reward`, provenance columns |
| | `status` | `completed` → COMPLETED, `harness_failed`/`timeout` → FAILED, others → ABORTED |

SFT view: a session is resolved when its reward is at least `min_reward`
(default 1.0) and its status is `completed`. Each of its traces gives the
conversation of its last call: that call's request messages plus the
assistant message it answered (None-valued fields dropped), and that call's
tools. A conversation that a later call of the same session continues (its
messages then the same assistant turn, compared by visible text and parsed
tool calls) is dropped, so `per_request` traces yield each conversation once,
not every prefix of it. A merged trace's last call is only known from its
CompletionRecord: without `records`, such a trace is skipped and counted.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from polar.builders.base import response_message
from polar.client import layouts as lay
from polar.records import CompletionRecord, OutcomeClass, SessionStatus, Trace

if TYPE_CHECKING:
    from datasets import Dataset, Features

    from polar.client.sdk import PolarClient
    from polar.storage import Storage

RL_JSONL = "traces.jsonl"
HF_DIR = "dataset"
SFT_JSONL = "sft.jsonl"
MANIFEST = "manifest.json"
RecordIndex = Mapping[tuple[str, str], CompletionRecord]
REWARD_TOLERANCE = 1e-9
"""session_normalized rewards times the trace count may miss the threshold by rounding."""


class ExportFormat(StrEnum):
    JSONL = "jsonl"
    HF = "hf"
    SFT = "sft"
    VERL = "verl"
    TRL = "trl"
    SLIME = "slime"
    ALL = "all"


FORMAT_ORDER = [f for f in ExportFormat if f != ExportFormat.ALL]
NEEDS_RECORDS = {ExportFormat.SFT, ExportFormat.TRL}
"""Formats that read merged traces' CompletionRecords (their last call's messages)."""


# --------------------------------------------------------------------------- RL rows


def rl_row(trace: Trace) -> dict[str, Any]:
    """One trainer row: `input_ids`, `loss_mask` aligned with it, logprobs, reward, provenance."""
    p = len(trace.prompt_ids)
    prov = trace.provenance
    return {
        "trace_id": trace.trace_id,
        "input_ids": [*trace.prompt_ids, *trace.response_ids],
        "loss_mask": [0] * p + list(trace.loss_mask),
        "response_logprobs": list(trace.response_logprobs),
        "prompt_length": p,
        "response_length": len(trace.response_ids),
        "reward": trace.reward,
        "status": None if trace.status is None else trace.status.value,
        "session_id": prov.session_id,
        "task_id": prov.task_id,
        "harness": prov.harness,
        "builder": prov.builder,
        "model": prov.model,
        "reward_policy": prov.reward_policy,
        "record_ids": list(prov.record_ids),
        "completion_seqs": list(prov.completion_seqs),
        "policy_version": prov.policy_version,
    }


def rl_features() -> Features:
    """The Arrow schema of RL rows (explicit, so that an empty export has it too)."""
    from datasets import Features, List, Value

    text = Value("string")
    return Features(
        {
            "trace_id": text,
            "input_ids": List(Value("int32")),
            "loss_mask": List(Value("int8")),
            "response_logprobs": List(Value("float64")),
            "prompt_length": Value("int32"),
            "response_length": Value("int32"),
            "reward": Value("float64"),
            "status": text,
            "session_id": text,
            "task_id": text,
            "harness": text,
            "builder": text,
            "model": text,
            "reward_policy": text,
            "record_ids": List(text),
            "completion_seqs": List(Value("int64")),
            "policy_version": Value("int64"),
        }
    )


def rl_dataset(rows: Sequence[dict[str, Any]]) -> Dataset:
    """RL rows as a `datasets.Dataset` with the `rl_features` schema."""
    from datasets import Dataset

    features = rl_features()
    columns = {name: [row[name] for row in rows] for name in features}
    return Dataset.from_dict(columns, features=features)


def save_dataset(dataset: Dataset, path: Path) -> None:
    """`save_to_disk` quietly, in at least one shard (an empty one with none cannot be loaded)."""
    import datasets

    shown = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        dataset.save_to_disk(str(path), num_shards=1 if len(dataset) == 0 else None)
    finally:
        if shown:
            datasets.enable_progress_bars()


# --------------------------------------------------------------------------- SFT view


def session_rewards(traces: Iterable[Trace]) -> dict[str, float | None]:
    """Each session's outcome reward, recovered from its traces' rewards and reward policy."""
    rewards: dict[str, float | None] = {}
    for trace in traces:
        sid = trace.provenance.session_id
        if trace.reward is None:
            rewards.setdefault(sid, None)
            continue
        reward = trace.reward
        if trace.provenance.reward_policy == "session_normalized":
            stats = trace.provenance.reconstruction
            reward *= stats.chains if stats is not None else 1
        rewards[sid] = reward
    return rewards


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def _turn_key(message: Mapping[str, Any]) -> tuple[Any, ...]:
    """An assistant turn as visible text and parsed tool calls (serialisation ignored)."""
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        arguments = fn.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments) if arguments else {}
        calls.append((fn.get("name"), json.dumps(arguments, sort_keys=True)))
    visible = _text(message.get("content")).split("</think>")[-1].strip()
    return message.get("role"), visible, tuple(calls)


def clean_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message without None-valued or empty fields (`role` and `content` always kept)."""
    return {
        k: v
        for k, v in message.items()
        if k in ("role", "content") or (v is not None and v != [] and v != {})
    }


@dataclass
class _Conversation:
    trace: Trace
    prompt: list[dict[str, Any]]
    answer: dict[str, Any]
    tools: list[dict[str, Any]] | None
    keys: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.keys = [json.dumps(m, sort_keys=True, default=str) for m in self.prompt]

    def continued_by(self, other: _Conversation) -> bool:
        """Whether `other`'s prompt is this prompt followed by this same assistant turn."""
        n = len(self.keys)
        return (
            len(other.keys) > n
            and other.keys[:n] == self.keys
            and _turn_key(other.prompt[n]) == _turn_key(self.answer)
        )


def last_call(
    trace: Trace, records: RecordIndex | None
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]] | None] | None:
    """(request messages, answer, tools) of the trace's last call, or None when unknown.

    The answer is the trace's own (`trace.response_message`: the sampled choice
    the trace holds, so each choice of an `n > 1` call gives its own answer).
    """
    prov = trace.provenance
    last = (prov.session_id, prov.record_ids[-1]) if prov.record_ids else None
    record = records.get(last) if records is not None and last is not None else None
    if record is not None:
        answer = trace.response_message or response_message(record)
        if answer is None:
            return None
        request = record.normalized_request
        return list(request.get("messages") or []), clean_message(answer), request.get("tools")
    if len(prov.record_ids) == 1 and trace.response_message is not None:
        return list(trace.prompt_messages), clean_message(trace.response_message), trace.tools
    return None


def _conversation(trace: Trace, records: RecordIndex | None) -> _Conversation | None:
    """The conversation of the trace's last call, or None when it cannot be known."""
    call = last_call(trace, records)
    return None if call is None else _Conversation(trace, *call)


def prompt_completion(
    trace: Trace, records: RecordIndex | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """(prompt, completion) messages: the first call's messages, then everything after them
    up to the last answer; None when the last call is unknown or does not extend the first."""
    call = last_call(trace, records)
    if call is None:
        return None
    messages, answer, _ = call
    prompt = list(trace.prompt_messages)
    if len(trace.provenance.record_ids) == 1:
        return messages, [answer]
    key = [json.dumps(m, sort_keys=True, default=str) for m in prompt]
    if [json.dumps(m, sort_keys=True, default=str) for m in messages[: len(prompt)]] != key:
        return None
    return prompt, [*(clean_message(m) for m in messages[len(prompt) :]), answer]


@dataclass
class SFTView:
    rows: list[dict[str, Any]]
    resolved_sessions: list[str]
    skipped: list[str] = field(default_factory=list)
    """trace ids of resolved sessions whose conversation is unknown (merged, no records)"""


def sft_rows(
    traces: Sequence[Trace],
    *,
    min_reward: float = 1.0,
    rewards: Mapping[str, float | None] | None = None,
    statuses: Collection[str] = (SessionStatus.COMPLETED.value,),
    records: RecordIndex | None = None,
) -> SFTView:
    """The SFT view of resolved sessions' traces (see the module docstring).

    `rewards`: each session's reward (default: recovered from the traces);
    `statuses`: the session statuses that count as resolved; `records`:
    CompletionRecords by (session id, record id) (`index_records`), needed
    for merged traces.
    """
    rewards = dict(session_rewards(traces)) | dict(rewards or {})
    by_session: dict[str, list[Trace]] = defaultdict(list)
    for trace in traces:
        by_session[trace.provenance.session_id].append(trace)
    view = SFTView(rows=[], resolved_sessions=[])
    for sid, group in by_session.items():
        reward = rewards.get(sid)
        status = group[0].status
        resolved = (
            reward is not None
            and math.isfinite(reward)
            and reward >= min_reward - REWARD_TOLERANCE
            and status is not None
            and status.value in statuses
        )
        if not resolved:
            continue
        view.resolved_sessions.append(sid)
        conversations = []
        for trace in group:
            conversation = _conversation(trace, records)
            if conversation is None:
                view.skipped.append(trace.trace_id)
            else:
                conversations.append(conversation)
        seen: set[str] = set()
        for conv in conversations:
            if any(conv.continued_by(other) for other in conversations if other is not conv):
                continue
            messages = [*conv.prompt, conv.answer]
            fingerprint = json.dumps([messages, conv.tools], sort_keys=True, default=str)
            if fingerprint in seen:
                continue
            seen.add(fingerprint)
            prov = conv.trace.provenance
            view.rows.append(
                {
                    "messages": messages,
                    "tools": conv.tools,
                    "trace_id": conv.trace.trace_id,
                    "session_id": sid,
                    "task_id": prov.task_id,
                    "harness": prov.harness,
                    "model": prov.model,
                    "reward": reward,
                }
            )
    return view


# --------------------------------------------------------------------------- writing


def write_jsonl(rows: Iterable[dict[str, Any]], path: Path) -> int:
    """Write `rows` as JSON lines (floats exactly as Python repr's them); the row count."""
    n = 0
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


@dataclass
class ExportSummary:
    out: str
    formats: list[str]
    traces: int
    sessions: int
    rl_rows: int = 0
    sft_rows: int = 0
    resolved_sessions: int = 0
    sft_skipped: int = 0
    files: dict[str, str] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def expand_formats(formats: Iterable[ExportFormat | str]) -> list[ExportFormat]:
    """The chosen formats, in a fixed order (`all`: every one; `a,b`: several)."""
    names = [n.strip() for f in formats for n in str(f).split(",") if n.strip()]
    chosen = {ExportFormat(n) for n in names}
    if ExportFormat.ALL in chosen:
        return list(FORMAT_ORDER)
    return [f for f in FORMAT_ORDER if f in chosen]


def by_session(traces: Iterable[Trace]) -> Iterator[list[Trace]]:
    """Consecutive traces of one session, one session at a time.

    A session whose traces are not consecutive is refused (its SFT view and
    slime rollout id need them together).
    """
    done: set[str] = set()
    group: list[Trace] = []
    for trace in traces:
        sid = trace.provenance.session_id
        if group and group[0].provenance.session_id != sid:
            done.add(group[0].provenance.session_id)
            yield group
            group = []
        if sid in done:
            raise ValueError(f"traces of session {sid} are not consecutive: group them by session")
        group.append(trace)
    if group:
        yield group


class _Sinks:
    """The open writers of the chosen formats, fed one session's traces at a time."""

    def __init__(self, chosen: list[ExportFormat], out: Path, records: RecordIndex | None):
        self.records = records
        self.sinks: dict[ExportFormat, lay.RowSink] = {}
        self.files: dict[str, str] = {}
        self._group, self._rollout = lay.Ordinals(), lay.Ordinals()
        self._index = 0
        self._hf_tmp = out / f".{HF_DIR}.arrow"
        paths = {
            ExportFormat.JSONL: out / RL_JSONL,
            ExportFormat.SFT: out / SFT_JSONL,
            ExportFormat.TRL: out / lay.TRL_JSONL,
            ExportFormat.SLIME: out / lay.SLIME_JSONL,
        }
        for fmt in chosen:
            if fmt in paths:
                self.sinks[fmt] = lay.JsonlSink(paths[fmt])
                self.files[fmt.value] = str(paths[fmt])
            elif fmt == ExportFormat.VERL:
                self.sinks[fmt] = lay.ParquetSink(out / lay.VERL_PARQUET, lay.verl_schema())
                self.files[fmt.value] = str(out / lay.VERL_PARQUET)
            elif fmt == ExportFormat.HF:
                self.sinks[fmt] = lay.ArrowSink(self._hf_tmp, rl_features())
                self.files[fmt.value] = str(out / HF_DIR)

    def write(self, trace: Trace) -> None:
        for fmt, sink in self.sinks.items():
            if fmt in (ExportFormat.JSONL, ExportFormat.HF):
                sink.write(rl_row(trace))
            elif fmt == ExportFormat.VERL:
                sink.write(lay.verl_row(trace))
            elif fmt == ExportFormat.TRL:
                sink.write(lay.trl_row(trace, prompt_completion(trace, self.records)))
            elif fmt == ExportFormat.SLIME:
                prov = trace.provenance
                single = len(prov.record_ids) == 1 and trace.response_message is not None
                text = _text((trace.response_message or {}).get("content")) if single else ""
                sink.write(
                    lay.slime_row(
                        trace,
                        index=self._index,
                        group_index=self._group(prov.task_id),
                        rollout_id=self._rollout(prov.session_id),
                        response_text=text,
                    )
                )
        self._index += 1

    def close(self, out: Path) -> None:
        for sink in self.sinks.values():
            sink.close()
        if ExportFormat.HF in self.sinks:
            from datasets import Dataset

            target = out / HF_DIR
            if target.exists():
                shutil.rmtree(target)
            save_dataset(Dataset.from_file(str(self._hf_tmp)), target)  # memory-mapped
            self._hf_tmp.unlink()


def export_traces(
    traces: Iterable[Trace],
    out: Path,
    formats: Iterable[ExportFormat | str] = (ExportFormat.ALL,),
    *,
    min_reward: float = 1.0,
    rewards: Mapping[str, float | None] | None = None,
    records: RecordIndex | None = None,
    source: Mapping[str, Any] | None = None,
) -> ExportSummary:
    """Write `traces` under `out` in the chosen formats and a manifest; what was written.

    Streams: `traces` (any iterable, each session's traces consecutive) is read
    once, a session at a time, and every format is written as it goes.
    Overwrites this module's files under `out` (`traces.jsonl`, `dataset/`,
    `sft.jsonl`, `verl.parquet`, `trl.jsonl`, `slime.jsonl`, `manifest.json`),
    nothing else.
    """
    chosen = expand_formats(formats)
    out.mkdir(parents=True, exist_ok=True)
    summary = ExportSummary(
        out=str(out),
        formats=[f.value for f in chosen],
        traces=0,
        sessions=0,
        source=dict(source or {}),
    )
    sessions: set[str] = set(rewards or {})
    sinks = _Sinks(chosen, out, records)
    try:
        for group in by_session(traces):
            sessions.add(group[0].provenance.session_id)
            for trace in group:
                sinks.write(trace)
            summary.traces += len(group)
            sft = sinks.sinks.get(ExportFormat.SFT)
            if sft is not None:
                view = sft_rows(group, min_reward=min_reward, rewards=rewards, records=records)
                for row in view.rows:
                    sft.write(row)
                summary.sft_rows += len(view.rows)
                summary.resolved_sessions += len(view.resolved_sessions)
                summary.sft_skipped += len(view.skipped)
    finally:
        sinks.close(out)
    summary.sessions = len(sessions)
    if ExportFormat.JSONL in chosen or ExportFormat.HF in chosen:
        summary.rl_rows = summary.traces
    summary.files = sinks.files
    (out / MANIFEST).write_text(json.dumps(summary.as_dict(), indent=2) + "\n")
    return summary


# --------------------------------------------------------------------------- sources


@dataclass
class Collected:
    """Traces gathered for an export, with what the SFT view needs besides them.

    Streamed: `traces` yields one session's traces at a time (read from S3 or a file as
    the export reaches them) and `records` reads a session's CompletionRecords when a
    trace of it first needs one, keeping only that session's: memory holds one session,
    not a task."""

    traces: Iterable[Trace]
    rewards: dict[str, float | None] = field(default_factory=dict)
    records: RecordIndex = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)


class SessionRecords(Mapping[tuple[str, str], CompletionRecord]):
    """CompletionRecords by (session id, record id), read from S3 one session at a time
    (an export reaches sessions in turn): only the current session's are held."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.loaded: str | None = None
        self.index: dict[str, CompletionRecord] = {}
        self.reads = 0

    def _load(self, session_id: str) -> dict[str, CompletionRecord]:
        if session_id != self.loaded:
            self.index = {r.record_id: r for r in self.storage.list_completions(session_id)}
            self.loaded, self.reads = session_id, self.reads + 1
        return self.index

    def __getitem__(self, key: tuple[str, str]) -> CompletionRecord:
        session_id, record_id = key
        return self._load(session_id)[record_id]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return ((self.loaded or "", rid) for rid in self.index)

    def __len__(self) -> int:
        return len(self.index)


async def collect_workflow(
    polar: PolarClient, workflow_id: str, *, timeout_s: float | None = None, with_records: bool
) -> Collected:
    """Wait for a task's result; its sessions' traces (and records) are then read from S3
    as the export reaches them. Sessions that ended `infra_error` (polar/outcomes.py) are
    left out, named in the manifest's source (`left_out`): the stack failed them, so
    their traces are no data on the policy."""
    result = await polar.wait(workflow_id, timeout_s=timeout_s)
    left_out = {
        s.session_id: f"{s.outcome.label}: {s.outcome.detail}"
        for s in result.sessions
        if s.outcome is not None and s.outcome.outcome == OutcomeClass.INFRA_ERROR
    }
    kept = [s for s in result.sessions if s.session_id not in left_out]
    source: dict[str, Any] = {"workflow_id": workflow_id, "task_id": result.task_id}
    if left_out:
        source["left_out"] = left_out
    return Collected(
        traces=(t for s in kept for t in polar.load_traces(s)),
        rewards={s.session_id: s.reward for s in kept},
        records=SessionRecords(polar.storage) if with_records else {},
        source=source,
    )


def collect_files(
    sources: Sequence[str], storage: Storage | None, *, with_records: bool
) -> Collected:
    """Traces from local JSONL files (read line by line), or S3 keys
    (`sessions/…/traces/….jsonl`, `s3://b/k`: one session's traces each, rewarded as
    `load_traces` reads them)."""
    for source in sources:  # fail before writing anything
        if not Path(source).exists() and storage is None:
            raise FileNotFoundError(f"{source}: no such file, and no S3 storage to read it from")

    def traces() -> Iterator[Trace]:
        for source in sources:
            path = Path(source)
            if path.exists():
                with path.open() as lines:
                    yield from (Trace.model_validate_json(x) for x in lines if x.strip())
                continue
            assert storage is not None
            key = source.removeprefix(f"s3://{storage.bucket}/")
            yield from storage.iter_traces(key)  # its rewards sidecar joined

    records: RecordIndex = SessionRecords(storage) if with_records and storage else {}
    return Collected(traces=traces(), records=records, source={"traces": list(sources)})


def index_records(records: Iterable[CompletionRecord]) -> RecordIndex:
    """CompletionRecords by (session id, record id), as `sft_rows` takes them."""
    return {(r.session_id, r.record_id): r for r in records}
