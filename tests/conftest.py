"""One embedded stack for the whole suite: real Temporal dev server and real SeaweedFS.

Ports are picked free at start so the suite never collides with a developer's
own `polar dev up`. Heavier parts (vLLM, gateway, workers) have their own
session fixtures, started only by the tests that need them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from polar.devstack import DevStack, free_port
from polar.sdk import PolarClient
from polar.settings import Settings
from polar.storage import Storage


@pytest.fixture(scope="session")
def base_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    data_dir = Path(os.environ.get("POLAR_TEST_DATA_DIR") or tmp_path_factory.mktemp("polar"))
    temporal_port = free_port(span=21)
    s3_port = free_port(span=8)
    return Settings(
        data_dir=data_dir,
        temporal_address=f"127.0.0.1:{temporal_port}",
        temporal_ui_port=free_port(),
        s3_endpoint=f"http://127.0.0.1:{s3_port}",
        s3_bucket="polar-test",
        gateway_port=free_port(),
        vllm_port=free_port(),
        session_secret="test-secret",
    )


@pytest.fixture(scope="session")
def devstack(base_settings: Settings) -> Iterator[DevStack]:
    stack = DevStack(base_settings, with_model=False, workers=0)
    stack.start(stack.temporal())
    stack.start(stack.seaweedfs())
    Storage(base_settings).ensure_bucket()
    yield stack
    for name in ("temporal", "seaweedfs"):
        stack.stop(name, quiet=True)


@pytest.fixture(scope="session")
def storage(devstack: DevStack) -> Storage:
    return Storage(devstack.settings)


@pytest.fixture(scope="session")
async def worker(devstack: DevStack) -> AsyncIterator[None]:
    """An in-process worker serving every queue of the suite's task queue."""
    from activities.worker import build_workers
    from polar.temporal_client import connect

    client = await connect(devstack.settings)
    async with contextlib.AsyncExitStack() as stack:
        for w in build_workers(client, devstack.settings):
            await stack.enter_async_context(w)
        yield


@pytest.fixture(scope="session")
async def polar(devstack: DevStack, worker: None) -> PolarClient:
    return await PolarClient.connect(devstack.settings)
