"""The tasks page's filters: checked values, one visibility query, no injection."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.console.filters import BadFilter, TaskFilters

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def test_no_filter_lists_every_rollout_task() -> None:
    assert TaskFilters.parse().visibility_query(NOW) == "WorkflowType = 'RolloutTask'"


def test_each_filter_is_a_clause() -> None:
    filters = TaskFilters.parse(
        task="swe-1", harness="codex", runtime="docker", status="Running", since="24h", limit=999
    )
    query = filters.visibility_query(NOW)
    assert "(PolarTaskId STARTS_WITH 'swe-1' OR WorkflowId = 'swe-1')" in query
    assert "PolarHarness = 'codex'" in query
    assert "ExecutionStatus = 'Running'" in query
    assert "StartTime > '2026-02-29T12:00:00Z'" not in query  # 2026 is no leap year
    assert "StartTime > '2026-02-28T12:00:00Z'" in query
    assert "docker" not in query  # runtime is not indexed: filtered on the rows
    assert filters.limit == 200
    assert filters.matches_runtime("docker") and not filters.matches_runtime("local")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"task": "x' OR 1=1"},
        {"harness": 'a"b'},
        {"runtime": "a b"},
        {"status": "sleeping"},
        {"since": "1y"},
        {"task": "-leading-dash"},
        {"outcome": "great"},
    ],
)
def test_values_outside_their_set_are_refused(kwargs: dict[str, str]) -> None:
    with pytest.raises(BadFilter):
        TaskFilters.parse(**kwargs)


def test_blank_values_are_no_filter() -> None:
    assert TaskFilters.parse(task="  ", status="", since="") == TaskFilters()


def test_the_outcome_filter_keeps_tasks_with_a_session_of_that_class() -> None:
    filters = TaskFilters.parse(outcome="infra_error")
    assert filters.matches_outcomes({"ok": 3, "infra_error": 1, "infra_error:storage": 1})
    assert not filters.matches_outcomes({"ok": 4})
    assert TaskFilters.parse().matches_outcomes({})
    assert "infra_error" not in filters.visibility_query()  # tasks carry no outcome attribute
