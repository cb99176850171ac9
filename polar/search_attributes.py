"""Search attributes that make sessions filterable in the Temporal Web UI.

`RolloutTask` starts its sessions with them and `Session` upserts them, so they must
exist on the namespace before a task runs: the dev server registers them by flags at
start (`dev_server_flags`), and every worker ensures them on its namespace before it
polls (`ensure_registered`), for a cluster that has never seen Polar.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

if TYPE_CHECKING:
    from temporalio.client import Client

    from polar.outcomes import SessionOutcome

TASK_ID = SearchAttributeKey.for_keyword("PolarTaskId")
HARNESS = SearchAttributeKey.for_keyword("PolarHarness")
STAGE = SearchAttributeKey.for_keyword("PolarStage")
STATUS = SearchAttributeKey.for_keyword("PolarStatus")
REWARD = SearchAttributeKey.for_float("PolarReward")
OUTCOME = SearchAttributeKey.for_keyword_list("PolarOutcome")
"""The session's outcome class and, for `infra_error`, its label with the reason
(`["infra_error", "infra_error:storage"]`): `PolarOutcome = 'infra_error'` finds them all."""

ALL = (TASK_ID, HARNESS, STAGE, STATUS, REWARD, OUTCOME)
"""Every key: registered on the dev server by flags, and by every worker at its start."""

CLI_TYPES = {"KEYWORD": "Keyword", "DOUBLE": "Double", "KEYWORD_LIST": "KeywordList"}
RPC_TIMEOUT = timedelta(seconds=30)
log = logging.getLogger("polar.search_attributes")


class SearchAttributeConflict(RuntimeError):
    """A Polar search attribute exists on the namespace with another type."""


def dev_server_flags() -> list[str]:
    """`temporal server start-dev` flags that register every Polar search attribute."""
    flags: list[str] = []
    for key in ALL:
        flags += ["--search-attribute", f"{key.name}={cli_type(key)}"]
    return flags


def cli_type(key: SearchAttributeKey) -> str:
    """The `temporal` CLI's name of `key`'s type (`Keyword`, `Double`, `KeywordList`)."""
    return CLI_TYPES[key.indexed_value_type.name]


def indexed_value_type(key: SearchAttributeKey) -> IndexedValueType.ValueType:
    """`key`'s type as the operator service names it."""
    return IndexedValueType.ValueType(int(key.indexed_value_type))


async def ensure_registered(client: Client, namespace: str) -> list[str]:
    """Add the Polar search attributes missing on `namespace`; the names this call added.

    Idempotent: one another worker added meanwhile ("already exists") counts as present. A
    server that refuses (a managed namespace without operator rights, say) gets a warning
    naming the `temporal operator search-attribute create` commands to run, and no error:
    tasks fail until someone runs them. One that holds a Polar name with another type
    raises SearchAttributeConflict (no task could run).
    """
    operator = client.operator_service
    try:
        listed = await operator.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace), timeout=RPC_TIMEOUT
        )
    except RPCError as exc:
        _warn_refused(client, namespace, list(ALL), exc)
        return []
    existing = {**listed.system_attributes, **listed.custom_attributes}
    wrong = [
        f"{key.name} is {IndexedValueType.Name(existing[key.name])}, "
        f"Polar needs {IndexedValueType.Name(indexed_value_type(key))}"
        for key in ALL
        if key.name in existing and existing[key.name] != indexed_value_type(key)
    ]
    if wrong:
        raise SearchAttributeConflict(
            f"search attributes of namespace {namespace!r} conflict with Polar's: "
            + "; ".join(wrong)
        )
    missing = [key for key in ALL if key.name not in existing]
    added: list[str] = []
    for index, key in enumerate(missing):  # one by one: a concurrent add spoils no other name
        request = AddSearchAttributesRequest(
            namespace=namespace, search_attributes={key.name: indexed_value_type(key)}
        )
        try:
            await operator.add_search_attributes(request, timeout=RPC_TIMEOUT)
        except RPCError as exc:
            if exc.status == RPCStatusCode.ALREADY_EXISTS:
                continue
            _warn_refused(client, namespace, missing[index:], exc)
            return added
        added.append(key.name)
    if added:
        log.info("registered search attributes %s on namespace %r", ", ".join(added), namespace)
    return added


def create_commands(namespace: str, address: str, keys: list[SearchAttributeKey]) -> list[str]:
    """The `temporal operator search-attribute create` commands that add `keys` (one per type)."""
    by_type: dict[str, list[str]] = {}
    for key in keys:
        by_type.setdefault(cli_type(key), []).append(key.name)
    return [
        f"temporal operator search-attribute create --address {address} --namespace {namespace} "
        + " ".join(f"--name {name}" for name in names)
        + f" --type {type_name}"
        for type_name, names in by_type.items()
    ]


def _warn_refused(
    client: Client, namespace: str, keys: list[SearchAttributeKey], exc: RPCError
) -> None:
    address = client.service_client.config.target_host
    log.warning(
        "Temporal at %s refused to register Polar's search attributes %s on namespace %r "
        "(%s: %s); tasks fail until they exist. Create them: %s",
        address,
        ", ".join(key.name for key in keys),
        namespace,
        exc.status.name if exc.status else "error",
        exc.message,
        " && ".join(create_commands(namespace, address, keys)),
    )


def outcome_values(outcome: SessionOutcome | None) -> list[str]:
    """The PolarOutcome values of a session's outcome (none while it has none)."""
    if outcome is None:
        return []
    return [outcome.outcome.value, outcome.label] if outcome.reason else [outcome.outcome.value]
