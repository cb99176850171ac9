"""A whole rollout stack on the suite's Temporal and S3, with a scripted model behind it.

A scripted vLLM-shaped backend and the gateway run in threads; a worker serves
its own task queue, with its harnesses pointed at that gateway. Sessions made on
it run for real (runtimes, harness commands, the gateway's records in S3, the
builders and evaluators); only the model is a script. `settings` is what a
`polar` process needs to reach this stack (`env()` gives it as `POLAR_*`).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from polar.client.sdk import PolarClient
from polar.settings import Settings
from polar.storage import Storage
from proxy.app import create_app
from tests.support.scripted_backend import (
    ScriptedBackend,
    ScriptedReply,
    scripted_backend,
    serve_app,
)

ENV_FIELDS = (
    "data_dir",
    "temporal_address",
    "temporal_namespace",
    "task_queue",
    "s3_endpoint",
    "s3_bucket",
    "s3_region",
    "s3_access_key",
    "s3_secret_key",
    "session_secret",
    "gateway_url",
    "upstream_urls",
    "source_roots",
)


@dataclass
class ScriptedStack:
    polar: PolarClient
    settings: Settings
    backend: ScriptedBackend

    def env(self) -> dict[str, str]:
        """The `POLAR_*` variables that point a `polar` command at this stack."""
        values = {name: getattr(self.settings, name) for name in ENV_FIELDS}
        return {f"POLAR_{k.upper()}": str(v) for k, v in values.items() if v is not None}


@contextlib.asynccontextmanager
async def running_scripted_stack(
    base: Settings, replies: list[ScriptedReply]
) -> AsyncIterator[ScriptedStack]:
    """Backend and gateway in threads, a worker on a queue of its own pointed at them."""
    from activities.worker import build_workers
    from polar import search_attributes
    from polar.temporal_client import connect

    with contextlib.ExitStack() as threads:
        backend = threads.enter_context(scripted_backend(replies))
        gw_settings = base.model_copy(update={"upstream_urls": backend.url})
        gateway = threads.enter_context(serve_app(create_app(gw_settings, Storage(gw_settings))))
        settings = base.model_copy(
            update={
                "task_queue": f"polar-scripted-{uuid.uuid4().hex[:8]}",
                "gateway_url": gateway,
                "upstream_urls": backend.url,
            }
        )
        client = await connect(settings)
        await search_attributes.ensure_registered(client, settings.temporal_namespace)
        async with contextlib.AsyncExitStack() as workers:
            for worker in build_workers(client, settings):
                await workers.enter_async_context(worker)
            yield ScriptedStack(PolarClient(client, settings), settings, backend)
