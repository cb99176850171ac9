"""One activities class per stage pool, served by the worker exactly as the stage table says."""

from __future__ import annotations

import pytest

from activities.init_activities import InitActivities
from activities.pool_activities import HostProbeActivities
from activities.postrun_activities import PostrunActivities
from activities.run_activities import RunActivities
from activities.worker import POOL_ACTIVITIES, activities_by_pool, activity_name, check_pools
from polar.settings import Settings
from polar.storage import Storage
from workflows import stages
from workflows.stages import Pool


def grouped() -> dict[Pool | None, list[str]]:
    settings = Settings()
    served = activities_by_pool(settings, Storage(settings))  # no S3 call is made
    return {pool: sorted(activity_name(fn) for fn in fns) for pool, fns in served.items()}


def test_each_pool_serves_its_table_activities_from_its_own_class() -> None:
    assert {
        Pool.INIT: InitActivities,
        Pool.RUN: RunActivities,
        Pool.POSTRUN: PostrunActivities,
        None: HostProbeActivities,
    } == POOL_ACTIVITIES
    assert grouped() == {pool: sorted(stages.activities_of(pool)) for pool in POOL_ACTIVITIES}
    assert grouped()[None] == ["host_alive"]  # the probe queue serves only it


def test_the_activity_names_are_the_ones_the_workflow_calls() -> None:
    names = {name for fns in grouped().values() for name in fns}
    assert names == {
        "prepare_runtime",
        "place_gpu_session",
        "prepare_eval_runtime",
        "teardown",
        "release_runtime",
        "store_task_spec",
        "run_harness",
        "build_trajectory",
        "evaluate",
        "score_traces",
        "host_alive",
    }


def test_a_missing_or_misplaced_activity_is_refused() -> None:
    settings = Settings()
    served = activities_by_pool(settings, Storage(settings))
    without_score = {
        pool: [fn for fn in fns if activity_name(fn) != "score_traces"]
        for pool, fns in served.items()
    }
    with pytest.raises(RuntimeError, match=r"unimplemented \['score_traces'\]"):
        check_pools(without_score)
    moved = {**served, Pool.RUN: served[Pool.RUN] + served[Pool.POSTRUN], Pool.POSTRUN: []}
    with pytest.raises(RuntimeError, match=r"score_traces \(table: postrun, served: run\)"):
        check_pools(moved)
    extra = {**served, Pool.INIT: [*served[Pool.INIT], len]}
    with pytest.raises(TypeError, match="is not an @activity.defn"):
        check_pools(extra)
