"""Rubric rewards: a judge model scores the finished session, its score joins the outcome's.

A task's evaluator (`command`, `swebench`, ...) may carry a `rubric`
(polar/tasks/spec.py `RubricSpec`). After the outcome evaluator has graded the
session, the `evaluate` activity calls `apply_rubric`: the judge reads the
task, the rubric, the session's final diff (the patch the outcome evaluator
graded) and the session's messages (its traces), and answers a score in [0, 1]
and a reason (polar/rubric.py parses it). The session reward becomes the
task's formula of `outcome` and `rubric` (clamped to `reward_range` by the
activity, as every reward). With `per_trace`, each trace is also judged on its
own messages and gets the formula of its outcome reward and its own score as
its per-trace reward; the session's score is the mean of the traces'.

The judge runs here, on the worker host, never in the sandbox, and is reached
through the gateway by the rubric's model name, which a named pool serves
(`POLAR_POOLS`, proxy/pools.py): the pool's upstream key stays on the
gateway's host. The worker signs a session key for the judge's calls: the
session's own id and task, attempt `JUDGE_ATTEMPT` (no harness run has it, so
the run's closing does not shut the judge out), and no policy model name (a
model no pool serves is answered 404, never quietly served by the policy). So
the judge's calls are recorded under the session, attributable to it, and
`untrainable` (a pool that is not the policy): no builder trains on them, and
the session's traces were built before the judge was called.

A judge that fails (the gateway's error, a timeout, an answer that is not the
score's JSON, a formula without a finite value) leaves the outcome reward as
it was; the report's `rubric.judge_error` and the detail say why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import ValidationError

from activities.evaluators.base import Evaluation
from polar import rubric as rubric_text
from polar.contracts import EvaluateRequest
from polar.evaluation_reports import RubricReport, RubricTraceScore
from polar.records import Trace
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.tasks.spec import RubricSpec

JUDGE_ATTEMPT = 0
"""The attempt number of the judge's session key: harness runs count from 1."""
JUDGE_CONCURRENCY = 4
"""Judge calls in flight at once for one session (`per_trace`)."""
KEY_MARGIN_S = 60.0
"""A judge key lives for the call's timeout plus this."""
CHAT_PATH = "/v1/chat/completions"
MIN_BUDGET_S = 30.0
"""The judge's time when the outcome evaluator used up `evaluate_s` (the evaluate stage's
timeout has a minute beyond it)."""


class JudgeError(RuntimeError):
    """The judge gave no usable score: the outcome reward stays."""


@dataclass(frozen=True)
class JudgeAccess:
    """How the worker reaches the judge: the gateway, and the session its calls belong to."""

    gateway_url: str
    session_secret: str | None
    session_id: str
    task_id: str

    def key(self, ttl_s: float) -> str:
        """A session key for the judge's calls: its own attempt, no policy model allowed."""
        identity = SessionIdentity(self.session_id, self.task_id, JUDGE_ATTEMPT, only_model="")
        try:
            return mint_session_key(identity, self.session_secret, ttl_s=ttl_s)
        except ValueError as exc:
            raise JudgeError(f"no key for the judge: {exc}") from None


@dataclass(frozen=True)
class Judged:
    """One judged unit (the session, or one trace): the judge's answer or why there is none."""

    answer: rubric_text.JudgeAnswer | None
    error: str | None = None


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code = f" ({error['code']})" if error.get("code") else ""
        return f"{str(error.get('message'))[:300]}{code}"
    return str(body)[:300]


def _content(body: Any) -> str | None:
    """The answer's text from a Chat Completions body (None where it has none)."""
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


async def ask_judge(
    client: httpx.AsyncClient,
    access: JudgeAccess,
    spec: RubricSpec,
    messages: list[dict[str, str]],
) -> rubric_text.JudgeAnswer:
    """One judge call through the gateway: its parsed answer, or JudgeError saying why not."""
    body = {
        "model": spec.model,
        "messages": messages,
        "temperature": 0,
        "max_tokens": spec.max_tokens,
    }
    headers = {"Authorization": f"Bearer {access.key(spec.timeout_s + KEY_MARGIN_S)}"}
    url = access.gateway_url.rstrip("/") + CHAT_PATH
    try:
        async with asyncio.timeout(spec.timeout_s):
            response = await client.post(url, json=body, headers=headers)
    except TimeoutError:
        raise JudgeError(f"the judge did not answer within {spec.timeout_s:g}s") from None
    except httpx.HTTPError as exc:
        raise JudgeError(f"the gateway could not be reached: {exc!r}") from None
    if response.status_code != 200:
        raise JudgeError(f"the gateway answered {response.status_code}: {_error_text(response)}")
    try:
        content = _content(response.json())
    except ValueError:
        content = None
    try:
        return rubric_text.parse_answer(content)
    except rubric_text.JudgeAnswerError as exc:
        raise JudgeError(str(exc)) from None


def load_traces(data: bytes | None) -> list[Trace]:
    """The session's traces from their JSONL (JudgeError where it does not parse)."""
    traces = []
    for line in (data or b"").decode(errors="replace").splitlines():
        if line.strip():
            try:
                traces.append(Trace.model_validate_json(line))
            except ValidationError as exc:
                raise JudgeError(f"the session's traces do not parse: {exc}") from None
    return traces


def conversation(trace: Trace) -> list[dict[str, Any]]:
    """A trace's messages: its prompt, then its answer."""
    answer = [trace.response_message] if trace.response_message else []
    return [*trace.prompt_messages, *answer]


Ask = Callable[[list[dict[str, str]]], Awaitable[rubric_text.JudgeAnswer]]


async def _judged(ask: Ask, messages: list[dict[str, str]], gate: asyncio.Semaphore) -> Judged:
    async with gate:
        try:
            return Judged(await ask(messages))
        except JudgeError as exc:
            return Judged(None, str(exc))


def _fmt(value: float) -> str:
    return f"{value:.4g}"


async def judge_session(
    ask: Ask,
    spec: RubricSpec,
    report: RubricReport,
    outcome_traces: dict[str, float],
    traces: list[Trace],
    diff: str,
    instruction: str | None,
) -> dict[str, float]:
    """Judge the session into `report` (its `outcome` set); the per-trace rewards it makes
    (`per_trace`: every trace's, a trace the judge failed keeping its outcome; otherwise the
    outcome evaluator's per-trace rewards, combined with the session's score). JudgeError
    where the judge gave no score."""
    assert report.outcome is not None
    outcome = report.outcome
    conversations = [conversation(t) for t in traces]
    task = instruction or None

    def messages_for(convs: list[list[dict[str, Any]]]) -> list[dict[str, str]]:
        return rubric_text.judge_messages(
            task=task,
            rubric=spec.rubric,
            diff=diff,
            session=rubric_text.transcript(convs),
            max_chars=spec.max_input_chars,
        )

    gate = asyncio.Semaphore(JUDGE_CONCURRENCY)
    trace_rewards: dict[str, float] = {}
    if spec.per_trace and traces:
        judged = await asyncio.gather(
            *(_judged(ask, messages_for([c]), gate) for c in conversations)
        )
        report.judge_calls = len(judged)
        scores = []
        for trace, one in zip(traces, judged, strict=True):
            own_outcome = outcome_traces.get(trace.trace_id, outcome)
            entry = RubricTraceScore(judge_error=one.error, reward=own_outcome)
            if one.answer is not None:
                entry.score, entry.reason = one.answer.score, one.answer.reason
                try:
                    entry.reward = rubric_text.combine(spec.formula, own_outcome, entry.score)
                    scores.append(entry.score)
                except rubric_text.FormulaError as exc:
                    entry.judge_error = str(exc)
            assert entry.reward is not None
            trace_rewards[trace.trace_id] = entry.reward
            report.traces[trace.trace_id] = entry
        if not scores:
            first = next((e.judge_error for e in report.traces.values() if e.judge_error), None)
            raise JudgeError(f"the judge scored none of the {len(traces)} traces: {first}")
        report.score = sum(scores) / len(scores)
        failed = len(traces) - len(scores)
        report.reason = (
            f"mean of {len(scores)} trace scores"
            + (f" ({failed} trace(s) not scored: their outcome reward kept)" if failed else "")
            + f"; first: {next(e.reason for e in report.traces.values() if e.reason)}"
        )
    else:
        one = await _judged(ask, messages_for(conversations), gate)
        report.judge_calls = 1
        if one.answer is None:
            raise JudgeError(one.error or "the judge gave no answer")
        report.score, report.reason = one.answer.score, one.answer.reason
        for trace_id, own_outcome in outcome_traces.items():
            trace_rewards[trace_id] = rubric_text.combine(spec.formula, own_outcome, report.score)
    report.reward = rubric_text.combine(spec.formula, outcome, report.score)
    return trace_rewards


async def apply_rubric(
    evaluation: Evaluation,
    spec: RubricSpec,
    access: JudgeAccess,
    *,
    traces: bytes | None,
    instruction: str | None = None,
    budget_s: float | None = None,
    ask: Ask | None = None,
) -> Evaluation:
    """`evaluation` (the outcome evaluator's) with the judge's part, in place: its reward the
    formula of the outcome and the judge's score, its report's `rubric` filled in and its
    detail saying both. A judge that fails or runs past `budget_s` leaves the outcome reward
    and per-trace rewards as they were, and the report and detail say why."""
    outcome = evaluation.reward
    started = time.monotonic()
    diff = evaluation.patch.decode("utf-8", errors="replace")
    report = RubricReport(model=spec.model, formula=spec.formula, outcome=outcome)
    async with httpx.AsyncClient(timeout=httpx.Timeout(spec.timeout_s)) as client:

        async def through_gateway(messages: list[dict[str, str]]) -> rubric_text.JudgeAnswer:
            return await ask_judge(client, access, spec, messages)

        try:
            async with asyncio.timeout(budget_s):
                trace_rewards = await judge_session(
                    ask or through_gateway,
                    spec,
                    report,
                    dict(evaluation.trace_rewards),
                    load_traces(traces),
                    diff,
                    instruction,
                )
        except TimeoutError:
            report.judge_error = (
                f"the judge did not finish within the evaluate budget ({budget_s or 0:.0f}s)"
            )
        except (JudgeError, rubric_text.FormulaError) as exc:
            report.judge_error = str(exc)
    report.duration_s = round(time.monotonic() - started, 3)
    evaluation.report.rubric = report
    if report.judge_error is not None:
        evaluation.detail += f"; rubric judge failed, outcome reward {_fmt(outcome)} kept: "
        evaluation.detail += report.judge_error[:300]
        return evaluation
    assert report.score is not None and report.reward is not None
    evaluation.reward = report.reward
    evaluation.trace_rewards.update(trace_rewards)
    evaluation.detail += (
        f"; outcome {_fmt(outcome)}, rubric {_fmt(report.score)} ({(report.reason or '')[:300]}), "
        f"reward {spec.formula} = {_fmt(report.reward)}"
    )
    return evaluation


async def judge_evaluation(
    settings: Settings,
    request: EvaluateRequest,
    evaluation: Evaluation,
    traces: bytes | None,
    elapsed_s: float,
) -> Evaluation:
    """The `evaluate` activity's rubric step: `apply_rubric` for the request's session with
    this worker's gateway and secret, within what is left of the evaluate budget."""
    assert request.evaluator.rubric is not None
    access = JudgeAccess(
        settings.gateway_base_url, settings.session_secret, request.session_id, request.task_id
    )
    return await apply_rubric(
        evaluation,
        request.evaluator.rubric,
        access,
        traces=traces,
        instruction=request.instruction,
        budget_s=max(MIN_BUDGET_S, request.budget_s - elapsed_s),
    )
