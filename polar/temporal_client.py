"""Connecting to Temporal with the pydantic data converter every Polar process uses."""

from __future__ import annotations

import atexit
import gc

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime

from polar.settings import TemporalSettings


def collect_before_finalising() -> None:
    """Collect the garbage (the SDK's clients and futures in reference cycles) while the
    interpreter is whole, at exit: left to the collection during finalisation, their Rust
    side takes the GIL from a runtime thread as Python tears it down, and the process dies
    with `Fatal Python error: PyGILState_Release` or SIGSEGV after the script's work is done
    (temporalio/sdk-python#300; here 7 to 11 of 40 connect-and-return runs, 0 of 40 with
    this). Registered once, by the first `connect`."""
    gc.collect()


async def connect(settings: TemporalSettings, runtime: Runtime | None = None) -> Client:
    """A client for `settings.temporal_address`, converting payloads with pydantic; the
    process exits cleanly after it (`collect_before_finalising`).

    `runtime`: a Temporal core runtime with telemetry (worker metrics); default the SDK's.
    """
    atexit.unregister(collect_before_finalising)  # once, however many clients
    atexit.register(collect_before_finalising)
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=pydantic_data_converter,
        runtime=runtime,
    )
