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

The session's text reaches the judge as untrusted data it cannot break out
of, and the judge's answer must end with exactly one verdict (polar/rubric.py).

A judge call that fails (the gateway's error, a timeout, an answer that is not
exactly one verdict) is asked once more, with a fresh boundary. A unit that
fails both times is the session's doing or the judge's, and a control tells
which: the judge is asked once, with the same task and rubric and none of the
session's text. Where it grades the control, the failure came from what the
policy wrote (a verdict it planted and the judge quoted, text that blows the
judge's context, ...), and a policy must never gain by making its judge fail:
the session is a policy failure, reward 0 (every per-trace reward 0 too).
Where the control fails too, the judge itself is broken, and the outcome
reward stays as it was. A formula without a finite value, traces that do not
parse, or the evaluate budget running out also keep the outcome reward. The
report's `rubric.judge_error` and the detail say why.
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
from polar.session_keys import WORKER_ATTEMPT, SessionIdentity, mint_session_key
from polar.settings import WorkerSettings
from polar.tasks.spec import RubricSpec

JUDGE_ATTEMPT = WORKER_ATTEMPT
"""The attempt number of the judge's session key: the worker's own (harness runs count
from 1)."""
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


class AnswerRefused(JudgeError):
    """The judge answered, but not exactly one verdict ending its answer."""


class SessionFault(JudgeError):
    """The judge failed on the session's text but graded a control without it: the
    session's doing, a policy failure with reward 0."""


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
    calls: int = 1


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
        raise AnswerRefused(str(exc)) from None


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
Prompt = Callable[[bool], list[dict[str, str]]]
"""A judged unit's messages, each call's with a fresh boundary (True: after a refused
answer, the judge told so)."""
ASKS = 2
"""Calls per judged unit: a failed one is asked once more."""


async def _judged(ask: Ask, prompt: Prompt, gate: asyncio.Semaphore) -> Judged:
    """One judged unit: its answer, asked up to `ASKS` times; or why each call failed."""
    errors: list[str] = []
    refused = False
    async with gate:
        for _ in range(ASKS):
            try:
                return Judged(await ask(prompt(refused)), calls=len(errors) + 1)
            except JudgeError as exc:
                errors.append(str(exc))
                refused = isinstance(exc, AnswerRefused)
    return Judged(None, "; asked again: ".join(errors), calls=len(errors))


async def _control(ask: Ask, prompt: Prompt, failed: str, report: RubricReport) -> str:
    """After a judged unit failed (`failed`, why): SessionFault where the judge grades the
    control (the task and the rubric, none of the session's text), so the session's text
    made it fail; otherwise the note to add to each failure: the judge is at fault."""
    report.judge_calls += 1
    try:
        await ask(prompt(False))
    except JudgeError as exc:
        return f"(a control without the session's text failed too: {exc})"
    raise SessionFault(
        f"the judge failed on the session's text ({failed}) but graded a control without "
        "it: the session's doing"
    )


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _prompt_for(
    spec: RubricSpec, task: str | None, convs: list[list[dict[str, Any]]], unit_diff: str
) -> Prompt:
    """The messages of a unit judged on `convs` and `unit_diff` (each call's own boundary)."""

    def prompt(retry: bool) -> list[dict[str, str]]:
        return rubric_text.judge_messages(
            task=task,
            rubric=spec.rubric,
            diff=unit_diff,
            session=rubric_text.transcript_items(convs),
            max_chars=spec.max_input_chars,
            retry=retry,
        )

    return prompt


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
    outcome evaluator's per-trace rewards, combined with the session's score). A unit the
    judge fails twice is followed by a control: SessionFault where the judge grades it (any
    trace of `per_trace`), JudgeError where it does not and the judge gave no score."""
    assert report.outcome is not None
    outcome = report.outcome
    conversations = [conversation(t) for t in traces]
    task = instruction or None
    control = _prompt_for(spec, task, [], "")
    gate = asyncio.Semaphore(JUDGE_CONCURRENCY)
    if spec.per_trace and traces:
        prompts = [_prompt_for(spec, task, [c], diff) for c in conversations]
        trace_rewards = await _judge_traces(
            ask, spec, report, outcome_traces, traces, prompts, control, gate
        )
    else:
        whole = _prompt_for(spec, task, conversations, diff)
        trace_rewards = await _judge_whole(ask, spec, report, outcome_traces, whole, control, gate)
    assert report.score is not None  # each way of judging scores the session or raises
    report.reward = rubric_text.combine(spec.formula, outcome, report.score)
    return trace_rewards


async def _judge_traces(
    ask: Ask,
    spec: RubricSpec,
    report: RubricReport,
    outcome_traces: dict[str, float],
    traces: list[Trace],
    prompts: list[Prompt],
    control: Prompt,
    gate: asyncio.Semaphore,
) -> dict[str, float]:
    """`per_trace`: each trace judged on its own messages (`prompts`, in the traces' order),
    its reward the formula of its outcome and its score, or its outcome where the judge
    failed it; the session's score the mean of the traces' scores."""
    assert report.outcome is not None
    outcome = report.outcome
    trace_rewards: dict[str, float] = {}
    judged = await asyncio.gather(*(_judged(ask, prompt, gate) for prompt in prompts))
    report.judge_calls = sum(one.calls for one in judged)
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
    unjudged = [
        report.traces[t.trace_id]
        for t, one in zip(traces, judged, strict=True)
        if one.answer is None
    ]
    if unjudged:  # any trace: making the judge fail the bad ones must not lift the mean
        note = await _control(ask, control, str(unjudged[0].judge_error), report)
        for entry in unjudged:
            entry.judge_error = f"{entry.judge_error} {note}"
    if not scores:
        first = next((e.judge_error for e in report.traces.values() if e.judge_error), None)
        raise JudgeError(f"the judge scored none of the {len(traces)} traces: {first}")
    report.score = sum(scores) / len(scores)
    not_scored = len(traces) - len(scores)
    report.reason = (
        f"mean of {len(scores)} trace scores"
        + (f" ({not_scored} trace(s) not scored: their outcome reward kept)" if not_scored else "")
        + f"; first: {next(e.reason for e in report.traces.values() if e.reason)}"
    )
    return trace_rewards


async def _judge_whole(
    ask: Ask,
    spec: RubricSpec,
    report: RubricReport,
    outcome_traces: dict[str, float],
    prompt: Prompt,
    control: Prompt,
    gate: asyncio.Semaphore,
) -> dict[str, float]:
    """The session judged as one unit; the outcome evaluator's per-trace rewards, each
    combined with the session's score."""
    trace_rewards: dict[str, float] = {}
    one = await _judged(ask, prompt, gate)
    report.judge_calls = one.calls
    if one.answer is None:
        note = await _control(ask, control, str(one.error), report)
        raise JudgeError(f"{one.error} {note}")
    report.score, report.reason = one.answer.score, one.answer.reason
    for trace_id, own_outcome in outcome_traces.items():
        trace_rewards[trace_id] = rubric_text.combine(spec.formula, own_outcome, report.score)
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
    detail saying both. A judge that fails on the session's text but grades a control
    without it makes the reward 0, every per-trace reward too (the session's doing: see the
    module docstring); one that fails otherwise or runs past `budget_s` leaves the outcome
    reward and per-trace rewards as they were. The report and detail say why."""
    outcome = evaluation.reward
    started = time.monotonic()
    diff = evaluation.patch.decode("utf-8", errors="replace")
    report = RubricReport(model=spec.model, formula=spec.formula, outcome=outcome)
    session_fault = False
    trace_ids: list[str] = []
    async with httpx.AsyncClient(timeout=httpx.Timeout(spec.timeout_s)) as client:

        async def through_gateway(messages: list[dict[str, str]]) -> rubric_text.JudgeAnswer:
            return await ask_judge(client, access, spec, messages)

        try:
            async with asyncio.timeout(budget_s):
                loaded = load_traces(traces)
                trace_ids = [t.trace_id for t in loaded]
                trace_rewards = await judge_session(
                    ask or through_gateway,
                    spec,
                    report,
                    dict(evaluation.trace_rewards),
                    loaded,
                    diff,
                    instruction,
                )
        except TimeoutError:
            report.judge_error = (
                f"the judge did not finish within the evaluate budget ({budget_s or 0:.0f}s)"
            )
        except (JudgeError, rubric_text.FormulaError) as exc:
            report.judge_error = str(exc)
            session_fault = isinstance(exc, SessionFault)
    report.duration_s = round(time.monotonic() - started, 3)
    evaluation.report.rubric = report
    if session_fault:
        assert report.judge_error is not None
        report.score, report.reason, report.reward = None, None, 0.0
        for scored in report.traces.values():
            scored.reward = 0.0
        evaluation.reward = 0.0
        evaluation.trace_rewards = dict.fromkeys([*evaluation.trace_rewards, *trace_ids], 0.0)
        evaluation.detail += (
            "; rubric judge failed on the session's text but graded a control without it: "
            f"reward 0 (the session's doing): {report.judge_error[:300]}"
        )
        return evaluation
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
    settings: WorkerSettings,
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
