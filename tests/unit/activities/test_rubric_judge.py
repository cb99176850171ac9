"""How the rubric judge's answers become rewards (activities/evaluators/rubric.py), with
the judge's calls answered in process (tests/integration/test_rubric_judge.py has them
through the real gateway): per-trace scores with a trace the judge failed, a formula
without a value, a judge past the evaluate budget."""

from __future__ import annotations

import asyncio

import pytest

from activities.evaluators.base import Evaluation
from activities.evaluators.rubric import JudgeAccess, JudgeError, apply_rubric
from polar.evaluation_reports import CommandReport
from polar.records import Trace, TraceProvenance
from polar.rubric import JudgeAnswer
from polar.tasks.spec import RubricSpec

ACCESS = JudgeAccess("http://127.0.0.1:9", "unused: the judge is answered in process", "s", "t")


def trace(trace_id: str, said: str) -> Trace:
    return Trace(
        trace_id=trace_id,
        prompt_ids=[1],
        response_ids=[2],
        loss_mask=[1],
        response_logprobs=[-0.1],
        prompt_messages=[{"role": "user", "content": "Fix add()"}],
        response_message={"role": "assistant", "content": said},
        provenance=TraceProvenance(
            session_id="s",
            task_id="t",
            harness="command",
            builder="per_request",
            model="policy",
            completion_seqs=[1],
            record_ids=[trace_id],
        ),
    )


TRACES = [trace("a", "good step"), trace("b", "bad step"), trace("c", "unjudgeable")]
JSONL = "".join(t.model_dump_json() + "\n" for t in TRACES).encode()


async def by_step(messages: list[dict[str, str]]) -> JudgeAnswer:
    user = messages[1]["content"]
    if "unjudgeable" in user:
        raise JudgeError("the gateway answered 500: judge OOM")
    return JudgeAnswer(1.0 if "good step" in user else 0.0, "by step")


def outcome(reward: float) -> Evaluation:
    return Evaluation(reward, "evaluator exited 0", report=CommandReport(), patch=b"+x\n")


async def test_per_trace_a_trace_the_judge_failed_keeps_its_outcome() -> None:
    spec = RubricSpec(rubric="r", formula="outcome + rubric", per_trace=True)
    evaluation = outcome(0.5)
    evaluation.trace_rewards = {"b": 0.25}  # the outcome evaluator's own reward for b
    await apply_rubric(evaluation, spec, ACCESS, traces=JSONL, ask=by_step)
    assert evaluation.trace_rewards == {"a": 1.5, "b": 0.25, "c": 0.5}
    report = evaluation.report.rubric
    assert report is not None and report.judge_error is None and report.judge_calls == 3
    assert report.score == 0.5  # the mean of the two traces scored
    assert evaluation.reward == report.reward == 1.0
    assert report.traces["c"].judge_error == "the gateway answered 500: judge OOM"
    assert report.traces["c"].score is None and report.traces["c"].reward == 0.5
    assert report.reason is not None and "1 trace(s) not scored" in report.reason


async def test_per_trace_with_no_trace_scored_keeps_every_outcome() -> None:
    async def failing(messages: list[dict[str, str]]) -> JudgeAnswer:
        raise JudgeError("the judge did not answer within 1s")

    spec = RubricSpec(rubric="r", per_trace=True)
    evaluation = await apply_rubric(outcome(1.0), spec, ACCESS, traces=JSONL, ask=failing)
    assert (evaluation.reward, evaluation.trace_rewards) == (1.0, {})
    report = evaluation.report.rubric
    assert report is not None and report.judge_calls == 3
    assert report.judge_error == (
        "the judge scored none of the 3 traces: the judge did not answer within 1s"
    )
    assert "rubric judge failed, outcome reward 1 kept" in evaluation.detail


@pytest.mark.parametrize(
    ("formula", "score", "reward", "why"),
    [
        ("outcome / rubric", 0.0, 1.0, "divides by zero"),
        ("outcome + 0.2 * rubric", 0.5, 1.1, None),
    ],
)
async def test_the_formula_combines_or_its_failure_keeps_the_outcome(
    formula: str, score: float, reward: float, why: str | None
) -> None:
    async def judge(messages: list[dict[str, str]]) -> JudgeAnswer:
        return JudgeAnswer(score, "fine")

    evaluation = outcome(1.0)
    evaluation.trace_rewards = {"a": 0.0}
    spec = RubricSpec(rubric="r", formula=formula)
    await apply_rubric(evaluation, spec, ACCESS, traces=JSONL, ask=judge)
    assert evaluation.reward == pytest.approx(reward)
    report = evaluation.report.rubric
    assert report is not None
    if why is None:  # the outcome's own per-trace rewards get the session's score too
        assert evaluation.trace_rewards == {"a": pytest.approx(0.1)}
        assert report.judge_error is None
    else:
        assert evaluation.trace_rewards == {"a": 0.0}
        assert why in str(report.judge_error)


async def test_a_judge_past_the_budget_keeps_the_outcome() -> None:
    async def slow(messages: list[dict[str, str]]) -> JudgeAnswer:
        await asyncio.sleep(30)
        return JudgeAnswer(1.0, "too late")

    spec = RubricSpec(rubric="r", per_trace=True)
    evaluation = await apply_rubric(
        outcome(0.0), spec, ACCESS, traces=JSONL, ask=slow, budget_s=0.2
    )
    assert (evaluation.reward, evaluation.trace_rewards) == (0.0, {})
    assert evaluation.report.rubric is not None
    assert "within the evaluate budget" in str(evaluation.report.rubric.judge_error)


async def test_traces_that_do_not_parse_are_a_judge_failure() -> None:
    async def judge(messages: list[dict[str, str]]) -> JudgeAnswer:
        return JudgeAnswer(1.0, "never asked")

    evaluation = await apply_rubric(
        outcome(1.0), RubricSpec(rubric="r"), ACCESS, traces=b'{"trace_id": 1}\n', ask=judge
    )
    assert evaluation.reward == 1.0 and evaluation.report.rubric is not None
    assert "traces do not parse" in str(evaluation.report.rubric.judge_error)
