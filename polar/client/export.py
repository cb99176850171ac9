"""`polar export`: collect a workflow's (or files') traces and write them in every chosen format.

`polar export` writes, under `--out` (each format a module of its own):

* `traces.jsonl`: one RL row per trace (polar/client/rl_rows.py).
* `dataset/`: the same rows as a `datasets.Dataset` (`save_to_disk`; reload
  with `datasets.load_from_disk`; polar/client/rl_rows.py).
* `sft.jsonl`: the SFT view (polar/client/sft.py): one conversation (`messages`,
  `tools`) per distinct conversation of a resolved session.
* `verl.parquet`, `trl.jsonl`, `slime.jsonl`: trainer-native layouts, each beside
  its trainer's bridge (polar/trainers/verl_layout.py, polar/trainers/trl/layout.py,
  polar/trainers/slime_layout.py).
* `manifest.json`: where the traces came from, what was written, the counts.

Every format is streamed: `export_traces` reads its traces once, a session at
a time, and writes rows as it goes (polar/client/sinks.py). A call of `n > 1`
choices gives one trace per choice (the builders), hence one row per choice in
every format; the SFT and TRL views render each trace's own choice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from polar.client.rl_rows import DatasetSink, rl_row
from polar.client.sft import RecordIndex, sft_rows
from polar.client.sinks import JsonlSink, ParquetSink, RowSink
from polar.records import CompletionRecord, OutcomeClass, Trace
from polar.trainers.slime_layout import SLIME_JSONL, SlimeRows
from polar.trainers.trl.layout import TRL_JSONL, trl_rows
from polar.trainers.verl_layout import VERL_PARQUET, verl_row, verl_schema

if TYPE_CHECKING:
    from polar.client.sdk import PolarClient
    from polar.storage import Storage

RL_JSONL = "traces.jsonl"
HF_DIR = "dataset"
SFT_JSONL = "sft.jsonl"
MANIFEST = "manifest.json"


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

RowOf = Callable[[Trace], dict[str, Any]]


@dataclass(frozen=True)
class Format:
    """One export format: its file (or folder) under `out`, how it is written, its rows."""

    file: str
    sink: Callable[[Path], RowSink]
    rows: Callable[[RecordIndex | None], RowOf] | None
    """a trace's row, made once per export (it may count traces or read the records); None:
    the SFT view, written a session at a time (`sft_rows`)"""


FORMATS: dict[ExportFormat, Format] = {
    ExportFormat.JSONL: Format(RL_JSONL, JsonlSink, lambda records: rl_row),
    ExportFormat.HF: Format(HF_DIR, DatasetSink, lambda records: rl_row),
    ExportFormat.SFT: Format(SFT_JSONL, JsonlSink, None),
    ExportFormat.VERL: Format(
        VERL_PARQUET, lambda path: ParquetSink(path, verl_schema()), lambda records: verl_row
    ),
    ExportFormat.TRL: Format(TRL_JSONL, JsonlSink, trl_rows),
    ExportFormat.SLIME: Format(SLIME_JSONL, JsonlSink, lambda records: SlimeRows()),
}
"""Every format but `all`, by name."""

FORMAT_PACKAGES: dict[ExportFormat, str] = {
    ExportFormat.HF: "datasets",
    ExportFormat.VERL: "pyarrow",
}
"""The package a format writes with beyond the client install (the `export` extra)."""


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


class _Writers:
    """The open sinks of the chosen formats, fed one trace at a time."""

    def __init__(self, chosen: list[ExportFormat], out: Path, records: RecordIndex | None):
        self.sinks = {fmt: FORMATS[fmt].sink(out / FORMATS[fmt].file) for fmt in chosen}
        self.files = {fmt.value: str(out / FORMATS[fmt].file) for fmt in chosen}
        self.rows = {
            fmt: make(records) for fmt in chosen if (make := FORMATS[fmt].rows) is not None
        }

    def write(self, trace: Trace) -> None:
        for fmt, row_of in self.rows.items():
            self.sinks[fmt].write(row_of(trace))

    def close(self) -> None:
        for sink in self.sinks.values():
            sink.close()


def _write_sft(
    sink: RowSink,
    group: Sequence[Trace],
    summary: ExportSummary,
    *,
    min_reward: float,
    rewards: Mapping[str, float | None] | None,
    records: RecordIndex | None,
) -> None:
    """One session's SFT view into `sink`, counted in `summary`."""
    view = sft_rows(group, min_reward=min_reward, rewards=rewards, records=records)
    for row in view.rows:
        sink.write(row)
    summary.sft_rows += len(view.rows)
    summary.resolved_sessions += len(view.resolved_sessions)
    summary.sft_skipped += len(view.skipped)


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
    writers = _Writers(chosen, out, records)
    try:
        for group in by_session(traces):
            sessions.add(group[0].provenance.session_id)
            for trace in group:
                writers.write(trace)
            summary.traces += len(group)
            sft = writers.sinks.get(ExportFormat.SFT)
            if sft is not None:
                _write_sft(
                    sft, group, summary, min_reward=min_reward, rewards=rewards, records=records
                )
    finally:
        writers.close()
    summary.sessions = len(sessions)
    if ExportFormat.JSONL in chosen or ExportFormat.HF in chosen:
        summary.rl_rows = summary.traces
    summary.files = writers.files
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
