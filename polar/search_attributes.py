"""Search attributes that make sessions filterable in the Temporal Web UI."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

TASK_ID = SearchAttributeKey.for_keyword("PolarTaskId")
HARNESS = SearchAttributeKey.for_keyword("PolarHarness")
STAGE = SearchAttributeKey.for_keyword("PolarStage")
STATUS = SearchAttributeKey.for_keyword("PolarStatus")
REWARD = SearchAttributeKey.for_float("PolarReward")

ALL = (TASK_ID, HARNESS, STAGE, STATUS, REWARD)
"""Every key, registered on the dev server at start (`--search-attribute NAME=TYPE`)."""

CLI_TYPES = {"KEYWORD": "Keyword", "DOUBLE": "Double"}


def dev_server_flags() -> list[str]:
    """`temporal server start-dev` flags that register every Polar search attribute."""
    flags: list[str] = []
    for key in ALL:
        flags += ["--search-attribute", f"{key.name}={CLI_TYPES[key.indexed_value_type.name]}"]
    return flags
