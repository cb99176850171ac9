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
(`_ng_failure_class: polar_untrainable`): Gym's rollout collection writes it to the failures
sidecar, not to the rollouts file, so it is never a zero-reward sample. Polar's stack is named by
the servers' `POLAR_*` environment. Entry points: `responses_api_agents/polar_agent/` and
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
from nemo_gym.config_types import ResourcesServerRef
from nemo_gym.openai_utils import NeMoGymResponse, NeMoGymResponseCreateParamsNonStreaming
from nemo_gym.server_utils import get_response_json, raise_for_status
from pydantic import ConfigDict

from polar.records import CompletionRecord
from polar.trainers._sessions import (
    SessionRun,
    absent_reason,
    load_template,
    run_task,
    shared_client,
)
from polar.trainers.nemo_gym import shapes

log = logging.getLogger("polar.trainers.nemo_gym")
FAILURE_CLASS = "polar_untrainable"


class PolarAgentConfig(BaseResponsesAPIAgentConfig):
    """The agent's entry of a Gym config (configs/polar.yaml)."""

    resources_server: ResourcesServerRef
    task: dict[str, Any] | str | None = None
    """A TaskSpec template: a dict, JSON text or a JSON file path."""
    policy_version: int | None = None
    """Stamped on the sessions (a row's `policy_version` wins)."""
    max_attempts: int = 2
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
    ) -> tuple[SessionRun | None, list[CompletionRecord], list[str]]:
        """The row's session, rerun while not trainable: (run or None, its records, reasons)."""
        polar = await shared_client()
        template = load_template(self.config.task)
        reasons: list[str] = []
        for _ in range(max(1, self.config.max_attempts)):
            spec = shapes.task_for_row(template, row, version=self.config.policy_version)
            (run,) = await run_task(polar, spec, timeout_s=self.config.timeout_s)
            if run.left_out is None:
                sid = run.session.session_id
                records = await asyncio.to_thread(polar.storage.list_completions, sid)
                return run, list(records), reasons
            reasons.append(f"{run.session.session_id}: {run.left_out}")
            log.warning("polar session not trainable: %s", reasons[-1])
        return None, [], reasons

    async def responses(
        self,
        request: Request,
        response: Response,
        body: NeMoGymResponseCreateParamsNonStreaming = Body(),  # noqa: B008  (FastAPI's way)
    ) -> NeMoGymResponse:
        params = body.model_dump(mode="json", exclude_none=True)
        run, records, reasons = await self.session({"responses_create_params": params})
        if run is None:
            detail = "no trainable Polar session: " + "; ".join(reasons)
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
        run, records, reasons = await self.session(row)
        if run is None:
            empty: dict[str, Any] = {
                "id": "resp_polar_untrainable",
                "object": "response",
                "created_at": 0.0,
                "model": params.get("model") or "policy",
                "output": [],
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
            }
            return PolarVerifyResponse.model_validate(
                row
                | {
                    "response": empty,
                    "reward": 0.0,  # Gym's schema wants a float; the row goes to the failures file
                    "_ng_failure_class": FAILURE_CLASS,
                    shapes.POLAR_KEY: {"reasons": reasons},
                }
            )
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
            detail = f"Polar session {session_id} has no grade: {absent_reason(session)}"
            raise HTTPException(status_code=409, detail=detail)
        data = body.model_dump(mode="json")
        data["reward"] = session.reward
        data[shapes.POLAR_KEY] = {
            **(data.get(shapes.POLAR_KEY) or {}),
            "graded_status": session.status.value,
            "evaluation": session.evaluation,
        }
        return PolarVerifyResponse.model_validate(data)
