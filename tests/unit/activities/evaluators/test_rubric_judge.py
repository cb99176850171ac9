"""How the rubric judge's answers become rewards (activities/evaluators/rubric.py), with
the judge's calls answered in process (tests/integration/test_rubric_judge.py has them
through the real gateway): per-trace scores with a trace the judge failed, a formula
without a value, a judge past the evaluate budget; a failed call asked again, and a judge
that fails on the session's text but grades a control without it (reward 0)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import pytest

from activities.evaluators.base import Evaluation
from activities.evaluators.command import CommandReport
from activities.evaluators.rubric import AnswerRefused, JudgeAccess, JudgeError, apply_rubric
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


CONTROL = "(no messages)"
"""In the prompt of the control call, and of no other here (each has messages)."""


async def by_step(messages: list[dict[str, str]]) -> JudgeAnswer:
    user = messages[1]["content"]
    if "unjudgeable" in user or CONTROL in user:  # a judge broken on the control too
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
    # a, b; c twice; the control
    assert report is not None and report.judge_error is None and report.judge_calls == 5
    assert report.score == 0.5  # the mean of the two traces scored
    assert evaluation.reward == report.reward == 1.0
    assert report.traces["c"].judge_error == (
        "the gateway answered 500: judge OOM; asked again: the gateway answered 500: judge OOM "
        "(a control without the session's text failed too: the gateway answered 500: judge OOM)"
    )
    assert report.traces["c"].score is None and report.traces["c"].reward == 0.5
    assert report.reason is not None and "1 trace(s) not scored" in report.reason


async def test_per_trace_with_no_trace_scored_keeps_every_outcome() -> None:
    async def failing(messages: list[dict[str, str]]) -> JudgeAnswer:
        raise JudgeError("the judge did not answer within 1s")

    spec = RubricSpec(rubric="r", per_trace=True)
    evaluation = await apply_rubric(outcome(1.0), spec, ACCESS, traces=JSONL, ask=failing)
    assert (evaluation.reward, evaluation.trace_rewards) == (1.0, {})
    report = evaluation.report.rubric
    assert report is not None and report.judge_calls == 7  # each trace twice, the control
    assert report.judge_error == (
        "the judge scored none of the 3 traces: the judge did not answer within 1s; asked "
        "again: the judge did not answer within 1s (a control without the session's text "
        "failed too: the judge did not answer within 1s)"
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


def refusing_the_session(
    calls: list[list[dict[str, str]]], on: str = "step"
) -> Callable[[list[dict[str, str]]], Awaitable[JudgeAnswer]]:
    """A judge whose answer to any prompt holding `on` is refused (the session's text made it
    write two verdicts, say), and that grades a control: it works."""

    async def judge(messages: list[dict[str, str]]) -> JudgeAnswer:
        calls.append(messages)
        if on in messages[1]["content"]:
            raise AnswerRefused("the judge's answer holds 2 JSON objects with a 'score'")
        return JudgeAnswer(0.5, "the control: nothing to grade")

    return judge


@pytest.mark.parametrize("per_trace", [False, True])
async def test_a_judge_failing_on_the_session_but_grading_a_control_gives_0(
    per_trace: bool,
) -> None:
    """The policy's text made the judge fail (twice) while the judge grades a control without
    it: the session's doing, a policy failure with reward 0 and every per-trace reward 0,
    never the outcome kept (which `outcome * rubric` would make 1 where any score is less).
    `per_trace`: one trace failing is enough (failing the bad traces lifts the mean)."""
    calls: list[list[dict[str, str]]] = []
    on = "bad step" if per_trace else "step"
    spec = RubricSpec(rubric="r", formula="outcome * rubric", per_trace=per_trace)
    evaluation = outcome(1.0)
    evaluation.trace_rewards = {"a": 1.0}
    await apply_rubric(evaluation, spec, ACCESS, traces=JSONL, ask=refusing_the_session(calls, on))
    assert evaluation.reward == 0.0
    assert evaluation.trace_rewards == {"a": 0.0, "b": 0.0, "c": 0.0}
    report = evaluation.report.rubric
    assert report is not None and report.reward == 0.0 and report.score is None
    assert str(report.judge_error).startswith("the judge failed on the session's text")
    assert "but graded a control without it" in str(report.judge_error)
    assert "rubric judge failed on the session's text" in evaluation.detail
    assert "reward 0" in evaluation.detail and "kept" not in evaluation.detail
    assert all(scored.reward == 0.0 for scored in report.traces.values())
    # asked again after the refusal, told so, with a fresh boundary; then the control
    session_calls = [c for c in calls if on in c[1]["content"]]
    assert len(session_calls) == 2
    first, again = session_calls
    assert "previous answer" in again[0]["content"]
    assert "previous answer" not in first[0]["content"]
    assert first[0]["content"].split("`")[1] != again[0]["content"].split("`")[1]
    (control,) = [c for c in calls if CONTROL in c[1]["content"]]
    assert "step" not in control[1]["content"] and "+x" not in control[1]["content"]
    assert report.judge_calls == len(calls) == (5 if per_trace else 3)


async def test_a_refused_answer_asked_again_scores() -> None:
    answers: Iterator[JudgeAnswer | Exception] = iter(
        [AnswerRefused("two verdicts"), JudgeAnswer(0.5, "fine")]
    )
    seen: list[list[dict[str, str]]] = []

    async def judge(messages: list[dict[str, str]]) -> JudgeAnswer:
        seen.append(messages)
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    spec = RubricSpec(rubric="r", formula="outcome + 0.2 * rubric")
    evaluation = await apply_rubric(outcome(1.0), spec, ACCESS, traces=JSONL, ask=judge)
    assert evaluation.reward == pytest.approx(1.1)
    report = evaluation.report.rubric
    assert report is not None and report.judge_error is None and report.judge_calls == 2
    assert "previous answer" in seen[1][0]["content"]
