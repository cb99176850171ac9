"""Workers add Polar's search attributes to a namespace that lacks them (a cluster that has
never seen Polar), on a real Temporal dev server started without them."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterator

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client

from activities.worker import running_workers
from app.devstack import DevStack, Service
from polar import search_attributes
from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.settings import Settings
from polar.temporal_client import connect
from tests.support.ports import free_port

# one fresh namespace per test besides `default` (the task's), so each starts without them
FRESH_NAMESPACE = "polar-fresh"
RACE_NAMESPACE = "polar-race"  # two workers register at once
CONFLICT_NAMESPACE = "polar-conflict"  # holds PolarReward as a Keyword
NAMESPACES = (FRESH_NAMESPACE, RACE_NAMESPACE, CONFLICT_NAMESPACE)
POLAR_NAMES = {key.name for key in search_attributes.ALL}


def without_search_attributes(service: Service, namespaces: tuple[str, ...]) -> Service:
    """The dev server's command without Polar's `--search-attribute` flags, creating
    `namespaces` besides `default`."""
    argv: list[str] = []
    flags = iter(service.argv)
    for arg in flags:
        if arg == "--search-attribute":
            next(flags)
            continue
        argv.append(arg)
    for namespace in namespaces:
        argv += ["--namespace", namespace]
    return dataclasses.replace(service, name="temporal-bare", argv=argv)


@pytest.fixture(scope="module")
def bare_settings(
    devstack: DevStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """The suite's settings (its S3) on a Temporal dev server of its own, started without
    Polar's search attributes."""
    port = free_port(span=21)  # the dev server takes +0 (gRPC), +1 (UI), +10 (HTTP), +20
    settings = devstack.settings.model_copy(
        update={
            "temporal_address": f"127.0.0.1:{port}",
            "temporal_ui_port": port + 1,
            "task_queue": "polar-sattr",
        }
    )
    server_dir = tmp_path_factory.mktemp("bare-temporal")
    stack = DevStack(
        settings.model_copy(update={"data_dir": server_dir}),
        with_model=False,
        workers=0,
        die_with_parent=True,
    )
    service = without_search_attributes(stack.temporal(), NAMESPACES)
    assert not POLAR_NAMES & {arg.split("=")[0] for arg in service.argv}
    stack.start(service, log=lambda _: None)
    yield settings
    stack.stop(service.name, quiet=True, grace_s=0)


async def custom_attributes(client: Client, namespace: str) -> dict[str, int]:
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    return dict(listed.custom_attributes)


def polar_types() -> dict[str, int]:
    return {key.name: search_attributes.indexed_value_type(key) for key in search_attributes.ALL}


async def test_registration_adds_the_missing_attributes_once(bare_settings: Settings) -> None:
    client = await connect(bare_settings)
    namespace = FRESH_NAMESPACE
    assert not POLAR_NAMES & set(await custom_attributes(client, namespace))

    assert await search_attributes.ensure_registered(client, namespace) == [
        key.name for key in search_attributes.ALL
    ]
    registered = await custom_attributes(client, namespace)
    assert {name: registered.get(name) for name in POLAR_NAMES} == polar_types()
    assert registered["PolarReward"] == IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE
    # a second worker's start: nothing to add, nothing changed
    assert await search_attributes.ensure_registered(client, namespace) == []
    assert await custom_attributes(client, namespace) == registered


async def test_two_workers_registering_at_once_both_succeed(bare_settings: Settings) -> None:
    first, second = await connect(bare_settings), await connect(bare_settings)
    assert not POLAR_NAMES & set(await custom_attributes(first, RACE_NAMESPACE))

    added = await asyncio.gather(
        search_attributes.ensure_registered(first, RACE_NAMESPACE),
        search_attributes.ensure_registered(second, RACE_NAMESPACE),
    )
    registered = await custom_attributes(first, RACE_NAMESPACE)
    assert {name: registered.get(name) for name in POLAR_NAMES} == polar_types()
    assert set(added[0]) | set(added[1]) <= POLAR_NAMES  # no error from either, nothing else


async def test_a_refusing_server_gets_a_warning_naming_the_commands(
    bare_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    client = await connect(bare_settings)
    with caplog.at_level(logging.WARNING, logger="polar.search_attributes"):
        assert await search_attributes.ensure_registered(client, "no-such-namespace") == []
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "refused to register" in warning
    assert all(name in warning for name in POLAR_NAMES)
    address, namespace = bare_settings.temporal_address, "no-such-namespace"
    assert (
        f"temporal operator search-attribute create --address {address} --namespace {namespace}"
        " --name PolarTaskId --name PolarHarness --name PolarStage --name PolarStatus"
        " --type Keyword"
    ) in warning
    assert "--name PolarReward --type Double" in warning


async def test_a_conflicting_type_is_a_clear_error(bare_settings: Settings) -> None:
    client = await connect(bare_settings)
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=CONFLICT_NAMESPACE,
            search_attributes={"PolarReward": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD},
        )
    )
    with pytest.raises(search_attributes.SearchAttributeConflict) as raised:
        await search_attributes.ensure_registered(client, CONFLICT_NAMESPACE)
    assert "PolarReward is INDEXED_VALUE_TYPE_KEYWORD" in str(raised.value)
    assert "Polar needs INDEXED_VALUE_TYPE_DOUBLE" in str(raised.value)


async def test_a_task_runs_on_a_server_its_worker_prepared(bare_settings: Settings) -> None:
    """RolloutTask starts its sessions with the search attributes and Session upserts them:
    both are accepted once the worker has registered them."""
    polar = await PolarClient.connect(bare_settings)
    namespace = bare_settings.temporal_namespace
    assert not POLAR_NAMES & set(await custom_attributes(polar.client, namespace))
    async with running_workers(bare_settings):
        run = await polar.submit({"task_id": "sattr", "harness": {"command": "true"}})
        result = await polar.wait(run, timeout_s=120)
    assert [s.status for s in result.sessions] == [SessionStatus.COMPLETED]
    registered = await custom_attributes(polar.client, namespace)
    assert {name: registered.get(name) for name in POLAR_NAMES} == polar_types()
