"""`polar export`: traces from the real builders to JSONL, an HF dataset and an SFT view."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from app.cli import app
from polar.builders import BuildContext, get_builder
from polar.builders.base import response_message
from polar.builders.reward_policies import assign_rewards
from polar.client import export as ex
from polar.client.rl_rows import rl_features, rl_row
from polar.client.sdk import PolarClient
from polar.client.sft import clean_message, session_rewards, sft_rows
from polar.client.sinks import ParquetSink
from polar.records import CompletionRecord, SessionStatus, Trace
from polar.settings import Settings, get_settings
from polar.storage import Storage, traces_key
from polar.tasks.spec import TaskSpec
from polar.trainers.slime_layout import SLIME_JSONL, SLIME_SAMPLE_FIELDS, SLIME_STATUSES
from polar.trainers.trl.layout import TRL_JSONL
from polar.trainers.verl_layout import VERL_PARQUET, verl_row, verl_schema
from tests.support.builders import (
    SYSTEM,
    TOOLS,
    TinyBackend,
    assistant_text,
    tokenizer_dir_fixture,  # noqa: F401  (the tokenizer_dir fixture)
    tool_result,
)
from tests.support.builders import (
    record as make_record,
)
from tests.unit.polar.builders.test_builders_choices import several

# (session, reward, status): resolved, failed evaluation, harness failed, not evaluated
SESSIONS = [
    ("s1", 1.0, SessionStatus.COMPLETED),
    ("s2", 0.0, SessionStatus.COMPLETED),
    ("s3", 1.0, SessionStatus.HARNESS_FAILED),
    ("s4", None, SessionStatus.ERROR),
]


POLICY_VERSION = 7


def agent_steps(backend: TinyBackend, messages: list[dict[str, Any]], steps: int, tag: str) -> None:
    """`steps` calls of one agent with reasoning and tool calls, then an answer."""
    for i in range(steps):
        last = i == steps - 1
        calls = [] if last else [("bash", {"command": f"cat {tag}{i}.py"})]
        text = assistant_text(
            f"{tag}: done." if last else "", reasoning=f"{tag} step {i}.", calls=calls
        )
        answer = backend.call(messages, text, tools=TOOLS)
        messages.append(answer)
        if not last:
            messages.append(tool_result(answer, f"def {tag}{i}():\n    return {i}\n"))


def realistic_records(tokenizer_dir: Path) -> list[CompletionRecord]:
    """One realistic session: tool use, a sub-agent, a follow-up user turn, a compaction.

    Conversations, by the record that ends each: 5 (sub-agent), 7 (main, whose
    record 3 the follow-up continues), 9 (after compaction).
    """
    from polar.tokenization import load_tokenizer

    backend = TinyBackend(load_tokenizer(str(tokenizer_dir)))
    main = [SYSTEM, {"role": "user", "content": "Fix the failing test."}]
    agent_steps(backend, main, 2, "main")  # 0, 1
    sub = [{"role": "system", "content": "You are a sub-agent."}, {"role": "user", "content": "Go"}]
    agent_steps(backend, main, 2, "more")  # 2, 3
    agent_steps(backend, sub, 2, "sub")  # 4, 5
    main.append({"role": "user", "content": "Also add a test."})  # drops earlier <think>
    agent_steps(backend, main, 2, "test")  # 6, 7
    compacted = [SYSTEM, {"role": "user", "content": "Summary: fixed f0 and added a test."}]
    agent_steps(backend, compacted, 2, "final")  # 8, 9
    return backend.records


@pytest.fixture(scope="module")
def records(tokenizer_dir: Path) -> list[CompletionRecord]:
    """`realistic_records` (also what scripts/check_trainer_layouts.py --sample exports)."""
    return realistic_records(tokenizer_dir)


def session_records(records: list[CompletionRecord], session_id: str) -> list[CompletionRecord]:
    return [r.model_copy(update={"session_id": session_id}) for r in records]


def build(
    records: list[CompletionRecord],
    builder: str,
    tokenizer_dir: Path,
    sessions: list[tuple[str, float | None, SessionStatus]] = SESSIONS,
    **config: Any,
) -> list[Trace]:
    """Every session's traces, built by `builder` and scored."""
    traces: list[Trace] = []
    for sid, reward, status in sessions:
        ctx = BuildContext(
            session_id=sid,
            task_id="t1",
            harness="command",
            builder=builder,
            config={"tokenizer": str(tokenizer_dir), **config},
        )
        out = get_builder(builder)(session_records(records, sid), ctx)
        assign_rewards(out.traces, reward, status)
        for trace in out.traces:
            trace.provenance.policy_version = POLICY_VERSION
        traces += out.traces
    return traces


def all_records(records: list[CompletionRecord]) -> ex.RecordIndex:
    return ex.index_records(r for sid, *_ in SESSIONS for r in session_records(records, sid))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def conversation(record: CompletionRecord) -> list[dict[str, Any]]:
    answer = response_message(record)
    assert answer is not None
    return [*record.normalized_request["messages"], clean_message(answer)]


# --------------------------------------------------------------------------- RL rows


@pytest.mark.parametrize("builder", ["per_request", "prefix_merging"])
def test_rl_rows_round_trip_exactly_through_jsonl_and_datasets(
    builder: str, records: list[CompletionRecord], tokenizer_dir: Path, tmp_path: Path
) -> None:
    traces = build(records, builder, tokenizer_dir)
    summary = ex.export_traces(traces, tmp_path, ["jsonl", "hf"])
    assert (summary.traces, summary.rl_rows, summary.sessions) == (len(traces), len(traces), 4)
    rows = read_jsonl(tmp_path / ex.RL_JSONL)
    dataset = datasets.load_from_disk(str(tmp_path / ex.HF_DIR))
    assert dataset.features == rl_features()
    assert [dict(r) for r in dataset] == rows
    by_id = {
        (r.session_id, r.record_id): r
        for sid, *_ in SESSIONS
        for r in session_records(records, sid)
    }
    for trace, row in zip(traces, rows, strict=True):
        p = len(trace.prompt_ids)
        prov = trace.provenance
        assert row["trace_id"] == trace.trace_id
        assert row["input_ids"] == trace.prompt_ids + trace.response_ids
        assert row["loss_mask"] == trace.loss_mask  # over the response, as in the SDK
        assert row["response_logprobs"] == trace.response_logprobs  # exact floats
        assert (row["prompt_length"], row["response_length"]) == (p, len(trace.response_ids))
        assert row["reward"] == trace.reward
        assert row["status"] == (trace.status.value if trace.status else None)
        assert (row["session_id"], row["task_id"], row["harness"], row["builder"]) == (
            prov.session_id,
            "t1",
            "command",
            builder,
        )
        assert row["model"] == "policy" and row["reward_policy"] == "broadcast"
        assert row["policy_version"] == POLICY_VERSION
        assert row["record_ids"] == prov.record_ids
        assert row["completion_seqs"] == prov.completion_seqs
        # every mask-1 token is a token the backend sampled, in order, with its logprob
        trained = [
            (row["input_ids"][p + i], row["response_logprobs"][i])
            for i, m in enumerate(row["loss_mask"])
            if m == 1
        ]
        members = [by_id[(prov.session_id, rid)] for rid in prov.record_ids]
        sampled = [
            (t, lp)
            for r in members
            for t, lp in zip(r.response_token_ids or [], r.response_logprobs or [], strict=True)
        ]
        assert trained == sampled
    if builder == "prefix_merging":
        assert len(traces) < len(records) * len(SESSIONS)  # chains were merged
    else:
        assert len(traces) == len(records) * len(SESSIONS)
    assert [r["reward"] for r in rows if r["session_id"] == "s4"] == [None] * (len(rows) // 4)


def test_an_empty_export_still_has_the_schema(tmp_path: Path) -> None:
    summary = ex.export_traces([], tmp_path, ["all"], rewards={"s0": 1.0})
    assert (summary.traces, summary.rl_rows, summary.sft_rows, summary.sessions) == (0, 0, 0, 1)
    assert (tmp_path / ex.RL_JSONL).read_text() == ""
    assert (tmp_path / ex.SFT_JSONL).read_text() == ""
    dataset = datasets.load_from_disk(str(tmp_path / ex.HF_DIR))
    assert len(dataset) == 0 and dataset.features == rl_features()


# --------------------------------------------------------------------------- n > 1 calls


@pytest.fixture
def three_choices(tokenizer_dir: Path) -> list[CompletionRecord]:
    """A call answered with n=3 choices between two plain calls; the next call carries on
    with choice 1 ("Banana.")."""
    from polar.tokenization import load_tokenizer

    backend = TinyBackend(load_tokenizer(str(tokenizer_dir)))
    question = [SYSTEM, {"role": "user", "content": "Name a fruit."}]
    backend.call(question, "Let me think.")
    history = [
        *question,
        {"role": "assistant", "content": "Let me think."},
        {"role": "user", "content": "Go on."},
    ]
    several(backend, history, ["Apple.", "Banana.", "Cherry."])
    carried = [{"role": "assistant", "content": "Banana."}, {"role": "user", "content": "Why?"}]
    backend.call(history + carried, "It is yellow.")
    assert [len(r.sampled()) for r in backend.records] == [1, 3, 1]
    return backend.records


@pytest.mark.parametrize("builder", ["per_request", "prefix_merging"])
def test_every_choice_of_an_n3_call_is_exported_in_every_format(
    builder: str, three_choices: list[CompletionRecord], tokenizer_dir: Path, tmp_path: Path
) -> None:
    sessions = [("s1", 1.0, SessionStatus.COMPLETED)]
    traces = build(three_choices, builder, tokenizer_dir, sessions)
    index = ex.index_records(session_records(three_choices, "s1"))
    summary = ex.export_traces(traces, tmp_path, ["all"], records=index)
    assert summary.traces == len(traces) == (5 if builder == "per_request" else 3)
    n3 = three_choices[1]
    choice_spans = [(c.response_token_ids, c.response_logprobs) for c in n3.sampled()]
    # token formats: each choice's sampled ids and logprobs are trained in exactly one row
    rl = read_jsonl(tmp_path / ex.RL_JSONL)
    verl = pq.read_table(tmp_path / VERL_PARQUET).to_pylist()
    trl = read_jsonl(tmp_path / TRL_JSONL)
    slime = read_jsonl(tmp_path / SLIME_JSONL)
    for rows, ids, mask, logprobs in (
        (
            [
                (
                    r["input_ids"][r["prompt_length"] :],
                    r["loss_mask"],
                    r["response_logprobs"],
                )
                for r in rl
            ],
            0,
            1,
            2,
        ),
        ([(r["response_ids"], r["response_mask"], r["response_logprobs"]) for r in verl], 0, 1, 2),
        ([(r["input_ids"], r["completion_mask"], r["rollout_logprobs"]) for r in trl], 0, 1, 2),
        (
            [
                (
                    r["tokens"][len(r["tokens"]) - r["response_length"] :],
                    r["loss_mask"],
                    r["rollout_log_probs"],
                )
                for r in slime
            ],
            0,
            1,
            2,
        ),
    ):
        trained = [
            [(t, lp) for t, m, lp in zip(row[ids], row[mask], row[logprobs], strict=True) if m]
            for row in rows
        ]
        for span_ids, span_logprobs in choice_spans:
            span = list(zip(span_ids or [], span_logprobs or [], strict=True))
            holders = [
                t for t in trained if any(t[i : i + len(span)] == span for i in range(len(t)))
            ]
            assert len(holders) == 1, (builder, span_ids)
    # message formats: each choice is its own answer, not choice 0 repeated
    answers = {"Apple.", "Banana.", "Cherry."}
    sft = read_jsonl(tmp_path / ex.SFT_JSONL)
    last = {r["messages"][-1]["content"] for r in sft}
    assert last == {"Apple.", "Cherry.", "It is yellow."}  # Banana is carried on, not dropped
    carried_on = next(r for r in sft if r["messages"][-1]["content"] == "It is yellow.")
    assert {"role": "assistant", "content": "Banana."} in carried_on["messages"]
    completions = [[m["content"] for m in r["completion"] if m["role"] == "assistant"] for r in trl]
    assert all(c is not None for c in completions)
    assert {c[-1] for c in completions if c[-1] in answers} >= {"Apple.", "Cherry."}
    assert sum("Banana." in c for c in completions) == 1
    n3_rows = [r for r in trl if r["record_ids"] == [n3.record_id]]
    expected_n3 = 3 if builder == "per_request" else 2  # merged: Banana continues a chain
    assert len(n3_rows) == expected_n3
    assert all(r["prompt"] == n3.normalized_request["messages"] for r in n3_rows)


# --------------------------------------------------------------------------- trainer layouts

VERL_AGENT_LOOP_OUTPUT = {
    "prompt_ids",
    "response_ids",
    "response_mask",
    "response_logprobs",
    "reward_score",
    "num_turns",
    "extra_fields",
}
"""Fields of verl 0.9.1 `verl.experimental.agent_loop.agent_loop.AgentLoopOutput` we fill
(its others: `routed_experts`, multi-modal ones, `metrics`, all optional or defaulted)."""
TRL_PROMPT_COMPLETION = {"prompt", "completion", "tools"}
"""TRL 1.16.0's conversational prompt–completion columns (message lists; `tools` its function
schemas, as `apply_chat_template` takes them)."""
TRL_PRE_TOKENIZED = {"input_ids", "completion_mask"}
"""What `SFTTrainer` 1.16.0 reads of a processed row (`"input_ids" in column_names` skips its
tokenization; `completion_mask` becomes the labels under `completion_only_loss=True`)."""
TRL_POLAR_COLUMNS = {
    "rollout_logprobs",
    "reward",
    "trace_id",
    "session_id",
    "task_id",
    "status",
    "policy_version",
    "reward_policy",
    "builder",
    "harness",
    "model",
    "record_ids",
    "completion_seqs",
}
"""Polar's extra columns (TRL drops unused columns before collating)."""
CHAT_ROLES = {"system", "user", "assistant", "tool"}


def check_trl_structure(row: dict[str, Any]) -> None:
    """A trl.jsonl row is TRL's conversational prompt–completion row, pre-tokenized."""
    assert set(row) == TRL_PROMPT_COMPLETION | TRL_PRE_TOKENIZED | TRL_POLAR_COLUMNS
    for key in ("prompt", "completion"):
        assert isinstance(row[key], list) and row[key], key
        assert all(isinstance(m, dict) and m["role"] in CHAT_ROLES for m in row[key]), key
    assert row["completion"][0]["role"] == "assistant"  # the completion starts with a sample
    assert row["completion"][-1]["role"] == "assistant"
    assert row["prompt"][-1]["role"] in {"user", "tool"}
    for message in (m for m in row["prompt"] + row["completion"] if m["role"] == "assistant"):
        for call in message.get("tool_calls") or []:
            assert call["type"] == "function" and isinstance(call["function"]["name"], str)
    assert all(t["type"] == "function" and "name" in t["function"] for t in row["tools"] or [])
    n = len(row["input_ids"])
    assert len(row["completion_mask"]) == len(row["rollout_logprobs"]) == n
    assert all(isinstance(t, int) for t in row["input_ids"])
    assert set(row["completion_mask"]) <= {0, 1} and row["completion_mask"][0] == 0
    assert all(isinstance(lp, float) for lp in row["rollout_logprobs"])
    pairs = zip(row["rollout_logprobs"], row["completion_mask"], strict=True)
    assert all(lp == 0.0 for lp, m in pairs if not m)


def test_trainer_layouts_keep_ids_masks_logprobs_reward_and_version(
    records: list[CompletionRecord], tokenizer_dir: Path, tmp_path: Path
) -> None:
    traces = build(records, "prefix_merging", tokenizer_dir)
    ex.export_traces(traces, tmp_path, ["verl,trl,slime"], records=all_records(records))
    assert not (tmp_path / ex.RL_JSONL).exists()  # only what was asked for
    verl_file = pq.ParquetFile(tmp_path / VERL_PARQUET)
    assert verl_file.schema_arrow == verl_schema()
    verl = verl_file.read().to_pylist()
    trl = read_jsonl(tmp_path / TRL_JSONL)
    slime = read_jsonl(tmp_path / SLIME_JSONL)
    assert len(verl) == len(trl) == len(slime) == len(traces)
    sessions = [t.provenance.session_id for t in traces]
    for trace, v, t, s in zip(traces, verl, trl, slime, strict=True):
        p = len(trace.prompt_ids)
        full = trace.prompt_ids + trace.response_ids
        assert set(v) == VERL_AGENT_LOOP_OUTPUT
        assert (v["prompt_ids"], v["response_ids"]) == (trace.prompt_ids, trace.response_ids)
        assert v["response_mask"] == trace.loss_mask
        assert v["response_logprobs"] == trace.response_logprobs  # exact float64
        assert v["reward_score"] == trace.reward
        assert v["extra_fields"]["policy_version"] == POLICY_VERSION
        assert v["extra_fields"]["status"] == trace.status
        check_trl_structure(t)
        assert (t["input_ids"], t["completion_mask"]) == (full, [0] * p + trace.loss_mask)
        assert t["rollout_logprobs"] == [0.0] * p + trace.response_logprobs
        assert (t["reward"], t["policy_version"]) == (trace.reward, POLICY_VERSION)
        assert t["prompt"] == trace.prompt_messages and t["completion"] is not None
        assert t["completion"][-1] == clean_message(trace.response_message or {})
        assert set(s) <= SLIME_SAMPLE_FIELDS and s["status"] in SLIME_STATUSES
        assert (s["tokens"], s["response_length"]) == (full, len(trace.response_ids))
        assert s["loss_mask"] == trace.loss_mask
        assert s["rollout_log_probs"] == trace.response_logprobs
        assert (s["reward"], s["weight_versions"]) == (trace.reward, [str(POLICY_VERSION)])
        assert s["rollout_id"] == sorted(set(sessions), key=sessions.index).index(
            trace.provenance.session_id
        )  # a session's samples share a rollout id, as slime averages them together
        assert s["group_index"] == 0  # one task: one group
    assert [s["status"] for s in slime if s["session_id"] != "s1"] == [
        {"s2": "completed", "s3": "failed", "s4": "aborted"}[sid] for sid in sessions if sid != "s1"
    ]
    assert [s["index"] for s in slime] == list(range(len(traces)))


def test_parquet_is_written_in_row_groups_and_sessions_must_be_consecutive(
    records: list[CompletionRecord], tokenizer_dir: Path, tmp_path: Path
) -> None:
    traces = build(records, "per_request", tokenizer_dir)
    sink = ParquetSink(tmp_path / "x.parquet", verl_schema(), row_group=8)
    for trace in traces:
        sink.write(verl_row(trace))
    sink.close()
    meta = pq.ParquetFile(tmp_path / "x.parquet").metadata
    assert meta.num_rows == len(traces) and meta.num_row_groups == -(-len(traces) // 8)
    shuffled = [traces[0], traces[-1], traces[1]]  # s1, s4, s1
    with pytest.raises(ValueError, match="session s1 are not consecutive"):
        ex.export_traces(iter(shuffled), tmp_path / "bad", ["jsonl"])
    # a generator is read once, session by session
    summary = ex.export_traces((t for t in traces), tmp_path / "gen", ["all"])
    assert (summary.traces, summary.sessions) == (len(traces), 4)


# --------------------------------------------------------------------------- SFT view


def test_sft_view_holds_each_conversation_of_resolved_sessions_once(
    records: list[CompletionRecord], tokenizer_dir: Path, tmp_path: Path
) -> None:
    expected = [conversation(records[i]) for i in (5, 7, 9)]
    merged = build(records, "prefix_merging", tokenizer_dir)
    summary = ex.export_traces(merged, tmp_path, ["sft"], records=all_records(records))
    rows = read_jsonl(tmp_path / ex.SFT_JSONL)
    assert {r["session_id"] for r in rows} == {"s1"}  # s2 failed, s3 harness failed, s4 unscored
    assert (summary.resolved_sessions, summary.sft_skipped) == (1, 0)
    assert sorted(map(json.dumps, (r["messages"] for r in rows))) == sorted(
        map(json.dumps, expected)
    )
    assert all(r["tools"] == TOOLS and r["reward"] == 1.0 for r in rows)
    final = next(r["messages"][-1] for r in rows if r["messages"] == expected[-1])
    assert final == {
        "role": "assistant",
        "content": "final: done.",
        "reasoning_content": "final step 1.",
    }
    # per_request traces give the same view without records: every prefix folded into its leaf
    per_request = build(records, "per_request", tokenizer_dir)
    view = sft_rows(per_request)
    assert [r["messages"] for r in view.rows] == [r["messages"] for r in rows]
    # without records a merged trace's last conversation is unknown: skipped, and said so
    blind = sft_rows(merged)
    assert len(blind.skipped) == sum(
        1 for t in merged if t.provenance.session_id == "s1" and len(t.provenance.record_ids) > 1
    )
    assert len(blind.skipped) > 0
    # the threshold is configurable; the status rule stays
    lenient = sft_rows(merged, min_reward=0.0, records=all_records(records))
    assert sorted({r["session_id"] for r in lenient.rows}) == ["s1", "s2"]


def test_session_normalized_rewards_still_resolve_the_session(
    records: list[CompletionRecord], tokenizer_dir: Path
) -> None:
    sessions = [("s1", 1.0, SessionStatus.COMPLETED)]
    traces = build(records, "per_request", tokenizer_dir, sessions, reward="session_normalized")
    assert all(t.reward == pytest.approx(1 / len(records)) for t in traces)
    assert session_rewards(traces) == {"s1": pytest.approx(1.0)}
    assert len(sft_rows(traces).rows) == 3
    assert {r["reward"] for r in map(rl_row, traces)} == {1 / len(records)}


# --------------------------------------------------------------------------- the CLI


def polar_env(settings: Settings) -> dict[str, str]:
    """The POLAR_* environment that makes the CLI's settings equal `settings`."""
    return settings.as_env()


def invoke(args: list[str], env: dict[str, str] | None = None) -> Any:
    try:
        return CliRunner().invoke(app, args, env=env, catch_exceptions=False)
    finally:
        get_settings.cache_clear()


def test_cli_exports_a_local_traces_file(
    records: list[CompletionRecord], tokenizer_dir: Path, tmp_path: Path
) -> None:
    traces = build(records, "prefix_merging", tokenizer_dir, SESSIONS[:1])
    source = tmp_path / "prefix_merging.jsonl"
    source.write_text("".join(t.model_dump_json() + "\n" for t in traces))
    out = tmp_path / "out"
    result = invoke(["export", "--traces", str(source), "--out", str(out), "--format", "all"])
    assert result.exit_code == 0, result.output
    assert f"{len(traces)} traces from 1 sessions" in result.output
    assert "left out of the SFT view" in result.output  # merged traces, no records offline
    assert len(read_jsonl(out / ex.RL_JSONL)) == len(traces)
    assert len(datasets.load_from_disk(str(out / ex.HF_DIR))) == len(traces)
    manifest = json.loads((out / ex.MANIFEST).read_text())
    assert manifest["source"] == {"traces": [str(source)]} and manifest["rl_rows"] == len(traces)
    bad = invoke(["export", "--traces", str(source), "--out", str(out), "--format", "csv"])
    assert bad.exit_code == 2
    assert invoke(["export", "--out", str(out)]).exit_code == 2


def test_cli_reads_traces_and_records_from_s3(
    records: list[CompletionRecord],
    tokenizer_dir: Path,
    tmp_path: Path,
    storage: Storage,
    base_settings: Settings,
) -> None:
    sid = f"export-{uuid.uuid4().hex[:8]}"
    traces = build(records, "prefix_merging", tokenizer_dir, [(sid, 1.0, SessionStatus.COMPLETED)])
    for record in session_records(records, sid):
        storage.put_completion(record)
    key = traces_key(sid, "prefix_merging")
    storage.put_traces(key, traces)
    out = tmp_path / "out"
    env = polar_env(base_settings)
    result = invoke(["export", "--traces", f"s3://{storage.bucket}/{key}", "--out", str(out)], env)
    assert result.exit_code == 0, result.output
    rows = read_jsonl(out / ex.SFT_JSONL)
    assert [r["messages"] for r in rows] == [conversation(records[i]) for i in (5, 7, 9)]
    assert "left out" not in result.output


@pytest.mark.slow
async def test_cli_exports_a_finished_workflow_end_to_end(
    polar: PolarClient, tmp_path: Path
) -> None:
    """A command harness that calls no model: the task exports zero traces cleanly."""
    spec = TaskSpec.model_validate(
        {
            "task_id": "export-empty",
            "num_sessions": 2,
            "harness": {"kind": "command", "command": "echo hi > out.txt"},
            "evaluator": {"kind": "command", "command": "test -f out.txt"},
        }
    )
    run = await polar.submit(spec)
    result = await polar.wait(run, timeout_s=120)
    assert [s.reward for s in result.sessions] == [1.0, 1.0]
    out = tmp_path / "out"
    args = ["export", run.workflow_id, "--out", str(out), "--timeout", "60"]
    cli = await asyncio.to_thread(invoke, args, polar_env(polar.settings))
    assert cli.exit_code == 0, cli.output
    assert "0 traces from 2 sessions" in cli.output
    assert (out / ex.RL_JSONL).read_text() == "" and (out / ex.SFT_JSONL).read_text() == ""
    assert len(datasets.load_from_disk(str(out / ex.HF_DIR))) == 0
    manifest = json.loads((out / ex.MANIFEST).read_text())
    assert manifest["source"] == {"workflow_id": run.workflow_id, "task_id": "export-empty"}
    assert (manifest["sessions"], manifest["traces"]) == (2, 0)


def test_collection_streams_one_session_at_a_time(storage: Storage, tmp_path: Path) -> None:
    """Traces are read as the export reaches them, and records a session at a time: memory
    holds one session's records, never a whole task's."""
    sessions = [f"s-stream-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    lines = []
    for sid in sessions:
        records = [
            make_record(i, [1, 2, 3 + i], [7, 2]).model_copy(update={"session_id": sid})
            for i in range(2)
        ]
        for r in records:
            storage.put_completion(r)
        out = get_builder("per_request")(records, BuildContext(sid, "t", "command", "per_request"))
        lines += [t.model_dump_json() for t in out.traces]
    traces_file = tmp_path / "traces.jsonl"
    traces_file.write_text("\n".join(lines) + "\n")
    got = ex.collect_files([str(traces_file)], storage, with_records=True)
    assert not isinstance(got.traces, list)  # a generator: nothing read yet
    index = got.records
    assert isinstance(index, ex.SessionRecords) and index.reads == 0
    held = []
    for trace in got.traces:
        sid, rid = trace.provenance.session_id, trace.provenance.record_ids[-1]
        assert index[(sid, rid)].record_id == rid
        held.append(sorted(key[0] for key in index))
    assert index.reads == 3  # each session's records read once, in turn
    assert all(len(set(h)) == 1 for h in held)  # only the current session's are held
    summary = ex.export_traces(
        ex.collect_files([str(traces_file)], storage, with_records=True).traces,
        tmp_path / "out",
        ["jsonl"],
    )
    assert summary.traces == 6 and summary.sessions == 3
