"""A worker with `metrics_port` set: stage durations and Temporal SDK metrics on one endpoint,
and stage log lines carrying session and task ids. Real Temporal dev server, real S3."""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from activities.observability import WorkerMetrics, start_observability
from activities.worker import build_workers
from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.logs import ContextFilter, JsonFormatter
from polar.records import SessionStatus
from polar.tasks.spec import TaskSpec
from polar.temporal_client import connect
from tests.support.polling import wait_for
from tests.support.ports import free_port


async def test_worker_metrics_endpoint_after_a_real_task(
    devstack: DevStack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = devstack.settings.model_copy(
        update={"task_queue": "polar-metrics", "metrics_port": free_port()}
    )
    obs = start_observability(settings)
    assert obs is not None
    client = await connect(settings, runtime=obs.runtime)
    spec = TaskSpec.model_validate(
        {
            "task_id": "metrics",
            "num_sessions": 2,
            "harness": {"command": "echo hi"},
            "evaluator": {"kind": "command", "command": "true"},
        }
    )
    caplog.handler.addFilter(ContextFilter())
    try:
        async with contextlib.AsyncExitStack() as stack:
            for w in build_workers(client, settings, interceptors=(obs.interceptor,)):
                await stack.enter_async_context(w)
            polar = PolarClient(client, settings)
            with caplog.at_level(logging.INFO, logger="polar.worker"):
                result = await polar.wait(await polar.submit(spec), timeout_s=120)
            assert {s.status for s in result.sessions} == {SessionStatus.COMPLETED}
            scraped = httpx.get(obs.url, timeout=10)
    finally:
        obs.close()
    assert scraped.status_code == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(scraped.text)
        for s in family.samples
    }
    # 2 sessions; each also prepares and tears down its evaluator's fresh runtime
    for stage, count in (
        ("prepare_runtime", 2),
        ("prepare_eval_runtime", 2),
        ("run_harness", 2),
        ("build_trajectory", 2),
        ("evaluate", 2),
        ("teardown", 4),
    ):
        key = ("polar_stage_seconds_count", (("stage", stage), ("status", "ok")))
        assert samples[key] == count, stage
    assert samples[("polar_stage_in_progress", (("stage", "run_harness"),))] == 0
    # the sessions' outcome classes, from the Session workflows' metric meter (issue 22)
    outcomes = {k: v for k, v in samples.items() if "polar_session_outcomes" in k[0]}
    assert list(outcomes.values()) == [2], outcomes
    [(name, labels)] = outcomes
    assert name == "polar_session_outcomes_total"
    assert (dict(labels)["outcome"], dict(labels)["reason"]) == ("ok", "")
    temporal = {name for name, _ in samples if name.startswith("temporal_")}
    assert any("activity" in n for n in temporal), sorted(temporal)[:20]
    assert any("workflow" in n for n in temporal), sorted(temporal)[:20]
    # each stage's log line is JSON with the session and task ids
    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records]
    stage_lines = [line for line in lines if line["msg"].startswith("stage run_harness ok")]
    assert {line["session_id"] for line in stage_lines} == {s.session_id for s in result.sessions}
    assert {line["task_id"] for line in stage_lines} == {"metrics"}


def test_metrics_port_zero_means_off(devstack: DevStack) -> None:
    assert start_observability(devstack.settings.model_copy(update={"metrics_port": 0})) is None


@pytest.mark.slow
async def test_queue_depth_gauges_show_prepared_sessions_waiting_for_run_slots(
    devstack: DevStack,
) -> None:
    """No worker serves the run queue: prepared sessions pile up there (the READY buffer)."""
    settings = devstack.settings.model_copy(update={"task_queue": "polar-depth"})
    client = await connect(settings)
    metrics = WorkerMetrics()
    spec = TaskSpec.model_validate(
        {"task_id": "depth", "num_sessions": 3, "harness": {"command": "true"}}
    )
    async with contextlib.AsyncExitStack() as stack:
        for w in build_workers(client, settings, ("workflow", "init")):
            await stack.enter_async_context(w)
        polar = PolarClient(client, settings)
        run = await polar.submit(spec)
        depths: dict[str, int] = {}

        async def three_waiting() -> bool:
            depths.update(await metrics.refresh_queue_depths(client, settings))
            return depths["run"] == 3

        await wait_for(three_waiting, 20, "three sessions waiting for run slots")
        await polar.cancel(run)
    assert depths["run"] == 3 and depths["init"] == 0, depths
    # the run stage goes to the runtime's host queue (the shared one stays empty)
    host_run = f"polar-depth-host-{settings.host_id}-run"
    for queue, waiting in (("polar-depth-run", 0), (host_run, 3)):
        labels = {"stage": "run", "queue": queue}
        assert metrics.registry.get_sample_value("polar_queue_backlog", labels) == waiting
