"""Polar as a NeMo Gym 0.4.0 environment: nemo-gym's own server classes (runs in `.venv-gym`).

* `PolarAgent` (`SimpleResponsesAPIAgent`): `/run` takes a Gym dataset row, seeds the resources
  server's session, runs one Polar session for the row (again, up to `max_attempts`, while it is
  not trainable), and asks the resources server's `/verify` for the grade; the answer is Gym's
  verify response: the row, `response` (one assistant message per model call with its token ids
  and logprobs, `shapes.response`), `reward`, and `polar` (the session's provenance).
  `/v1/responses` runs one session for a bare Responses-API request and answers the response.
* `PolarResources` (`SimpleResourcesServer`): `/verify` returns Polar's grade of the session the
  response names (`response.metadata.polar_workflow_id` / `polar_session_id`), read from the
  session's result through Polar's SDK, never recomputed.

A row whose sessions never became trainable is answered with Gym's failure routing
(`_ng_failure_class: polar_untrainable`, and under `polar` the outcome label and reason of each
try): Gym's rollout collection writes it to the failures sidecar, not to the rollouts file, and
the agent's `/aggregate_metrics` leaves it out of Gym's aggregate, so it is never a zero-reward
sample. There, where Gym hands over the whole collection, a collection with no scored row (or
fewer than the share `min_scored` of the agent's config; None: never) is refused with
`UnscoredBatch`'s message (HTTP 422), and Gym's `ng_collect_rollouts` fails. Polar's stack is
named by the servers' `POLAR_*` environment. Entry points: `responses_api_agents/polar_agent/` and
`resources_servers/polar/` beside this file; config: `configs/polar.yaml`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import Body, HTTPException, Request, Response
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseRunRequest,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from nemo_gym.base_responses_api_agent import BaseResponsesAPIAgentConfig, SimpleResponsesAPIAgent
from nemo_gym.config_types import AggregateMetrics, AggregateMetricsRequest, ResourcesServerRef
from nemo_gym.openai_utils import NeMoGymResponse, NeMoGymResponseCreateParamsNonStreaming
from nemo_gym.reward_profile import compute_aggregate_metrics
from nemo_gym.server_utils import get_response_json, raise_for_status
from pydantic import ConfigDict

from polar.records import CompletionRecord
from polar.trainers._sessions import (
    SessionRun,
    Unscored,
    UnscoredBatch,
    absent_reason,
    check_min_scored,
    load_template,
    require_scored,
    run_task,
    shared_client,
    unscored,
)
from polar.trainers.nemo_gym import shapes

log = logging.getLogger("polar.trainers.nemo_gym")
FAILURE_CLASS = shapes.FAILURE_CLASS


class PolarAgentConfig(BaseResponsesAPIAgentConfig):
    """The agent's entry of a Gym config (configs/polar.yaml)."""

    resources_server: ResourcesServerRef
    task: dict[str, Any] | str | None = None
    """A TaskSpec template: a dict, JSON text or a JSON file path."""
    policy_version: int | None = None
    """Stamped on the sessions (a row's `policy_version` wins)."""
    max_attempts: int = 2
    min_scored: float | None = 0.0
    """The share of a collection's rows that must be scored (checked at /aggregate_metrics;
    0.0: refuse only when none was; None: never)."""
    timeout_s: float = 1800.0


class PolarRunRequest(BaseRunRequest):
    model_config = ConfigDict(extra="allow")


class PolarVerifyRequest(BaseVerifyRequest):
    model_config = ConfigDict(extra="allow")


class PolarVerifyResponse(BaseVerifyResponse):
    model_config = ConfigDict(extra="allow")


class PolarAgent(SimpleResponsesAPIAgent):
    """Runs one Polar session per Gym row (see the module docstring)."""

    config: PolarAgentConfig

    async def session(
        self, row: dict[str, Any]
    ) -> tuple[SessionRun | None, list[CompletionRecord], list[tuple[str, Unscored]]]:
        """The row's session, rerun while not trainable (a `task_error` is not: a rerun would
        end the same): (run or None, its records, each untrained try's session id and why)."""
        polar = await shared_client()
        template = load_template(self.config.task)
        tries: list[tuple[str, Unscored]] = []
        for _ in range(max(1, self.config.max_attempts)):
            spec = shapes.task_for_row(template, row, version=self.config.policy_version)
            (run,) = await run_task(polar, spec, timeout_s=self.config.timeout_s)
            why = run.unscored
            if why is None:
                sid = run.session.session_id
                records = await asyncio.to_thread(polar.storage.list_completions, sid)
                return run, list(records), tries
            tries.append((run.session.session_id, why))
            log.warning("polar session %s not trainable: %s", run.session.session_id, why)
            if why.label == "task_error":
                break
        return None, [], tries

    async def responses(
        self,
        request: Request,
        response: Response,
        body: NeMoGymResponseCreateParamsNonStreaming = Body(),  # noqa: B008  (FastAPI's way)
    ) -> NeMoGymResponse:
        params = body.model_dump(mode="json", exclude_none=True)
        run, records, tries = await self.session({"responses_create_params": params})
        if run is None:
            detail = "no trainable Polar session: " + "; ".join(f"{s}: {w}" for s, w in tries)
            raise HTTPException(status_code=503, detail=detail)
        return NeMoGymResponse.model_validate(shapes.response(run, records, params))

    async def run(self, request: Request, body: PolarRunRequest) -> PolarVerifyResponse:
        row = body.model_dump(mode="json", exclude_none=True)
        params = row["responses_create_params"]
        seeded = await self.server_client.post(
            server_name=self.config.resources_server.name,
            url_path="/seed_session",
            json=row,
            cookies=request.cookies,
        )
        await raise_for_status(seeded)
        run, records, tries = await self.session(row)
        if run is None:
            model = params.get("model") or "policy"
            return PolarVerifyResponse.model_validate(shapes.failure_row(row, tries, model))
        answer = shapes.response(run, records, params)
        verify_request = PolarVerifyRequest.model_validate(
            row | {"response": answer, shapes.POLAR_KEY: shapes.polar_fields(run)}
        )
        verified = await self.server_client.post(
            server_name=self.config.resources_server.name,
            url_path="/verify",
            json=verify_request.model_dump(mode="json"),
            cookies=seeded.cookies,
        )
        await raise_for_status(verified)
        return PolarVerifyResponse.model_validate(await get_response_json(verified))

    async def aggregate_metrics(
        self,
        body: AggregateMetricsRequest = Body(),  # noqa: B008  (FastAPI's way)
    ) -> AggregateMetrics:
        """Gym's aggregate of a collection's rows, failure rows left out (Gym hands them all
        over, its failures file's rows with `reward: 0.0`); a collection with too few scored
        rows (`min_scored`) is refused with `UnscoredBatch`'s message."""
        rows = body.verify_responses
        try:
            require_scored(
                [shapes.row_unscored(row) for row in rows],
                check_min_scored(self.config.min_scored),
                what="Gym rollout collection",
                note="The Polar agent's config sets the share (min_scored)",
            )
        except UnscoredBatch as exc:
            log.error("%s", exc)
            raise HTTPException(status_code=422, detail=str(exc)) from exc
        return compute_aggregate_metrics(
            shapes.scored_rows(rows),
            compute_metrics_fn=self.compute_metrics,
            get_key_metrics_fn=self.get_key_metrics,
        )


class PolarResources(SimpleResourcesServer):
    """`/verify`: Polar's grade of the session a response names (see the module docstring)."""

    config: BaseResourcesServerConfig

    async def verify(self, body: PolarVerifyRequest) -> PolarVerifyResponse:
        metadata = body.response.metadata or {}
        workflow_id = metadata.get(f"{shapes.POLAR_KEY}_workflow_id")
        session_id = metadata.get(f"{shapes.POLAR_KEY}_session_id")
        if not workflow_id or not session_id:
            detail = "the response names no Polar session (metadata.polar_workflow_id, _session_id)"
            raise HTTPException(status_code=422, detail=detail)
        polar = await shared_client()
        result = await polar.wait(workflow_id)
        found = [s for s in result.sessions if s.session_id == session_id]
        if not found:
            detail = f"no Polar session {session_id} in {workflow_id}"
            raise HTTPException(status_code=404, detail=detail)
        session = found[0]
        if session.reward is None:
            why = unscored(session, absent_reason(session))
            detail = f"Polar session {session_id} has no grade: {why}"
            raise HTTPException(status_code=409, detail=detail)
        data = body.model_dump(mode="json")
        data["reward"] = session.reward
        data[shapes.POLAR_KEY] = {
            **(data.get(shapes.POLAR_KEY) or {}),
            "graded_status": session.status.value,
            "evaluation": session.evaluation,
        }
        return PolarVerifyResponse.model_validate(data)
