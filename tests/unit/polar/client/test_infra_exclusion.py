"""Infra errors never train (issue 22): a session the stack failed is out of its group's
baseline and advantages, out of the trainer bridges, and its group follows the task's rule."""

from __future__ import annotations

import pytest

from polar.advantages import EPS, group_rewards, trace_advantages
from polar.client.export import collect_workflow
from polar.contracts import SessionResult, TaskResult
from polar.records import SessionStatus, Trace
from polar.trainers._sessions import absent_reason, left_out, trainable
from polar.trainers.trl import GroupRun, PolarRolloutFunc
from tests.support.session_results import session_result
from tests.unit.polar.builders.test_builders_rewards import scored_group
from tests.unit.polar.trainers.trl import test_trainers_trl as trl_tests

# the harness of "starved" failed after 4 calls the gateway could not serve (a dead replica):
# its evaluator graded the nothing it left 0.0, which must not reach the group
GROUP: list[tuple[str, SessionStatus, float | None, int]] = [
    ("ok", SessionStatus.COMPLETED, 1.0, 2),
    ("wrong", SessionStatus.HARNESS_FAILED, 0.0, 1),
    ("starved", SessionStatus.HARNESS_FAILED, 0.0, 3),
]


def session(
    sid: str, status: SessionStatus, reward: float | None, **fields: object
) -> SessionResult:
    always = {"harness_started": True, "traces_key": f"sessions/{sid}/traces.jsonl"}
    return session_result(sid, status, reward, **(always | fields))


def results() -> list[SessionResult]:
    return [
        session("ok", SessionStatus.COMPLETED, 1.0),
        session("wrong", SessionStatus.HARNESS_FAILED, 0.0),
        session("starved", SessionStatus.HARNESS_FAILED, 0.0, unserved_calls=4),
    ]


@pytest.mark.parametrize("policy", ["broadcast", "session_normalized"])
def test_an_infra_error_session_is_out_of_the_baseline(policy: str) -> None:
    traces = scored_group(policy, GROUP)
    rewards = group_rewards(results(), "shrink")
    assert rewards == {"ok": 1.0, "wrong": 0.0, "starved": None}
    got = trace_advantages(traces, rewards)
    # baseline over ok and wrong only: mean 0.5, std 0.5 (with starved's 0 it would be 1/3)
    for trace in traces:
        sid = trace.provenance.session_id
        if sid == "starved":
            assert got[trace.trace_id] is None
            continue
        sign = 1 if sid == "ok" else -1
        share = 2 if (policy == "session_normalized" and sid == "ok") else 1
        assert got[trace.trace_id] == pytest.approx(sign * 0.5 / (0.5 + EPS) / share, rel=1e-12)


def test_drop_leaves_the_whole_group_untrained() -> None:
    assert set(group_rewards(results(), "drop").values()) == {None}
    why = left_out(results(), "drop")
    assert why["ok"] is not None and "group dropped" in why["ok"]
    assert why["starved"] is not None and why["starved"].startswith("infra_error:inference_backend")
    # without an infra error, drop changes nothing
    clean = results()[:2]
    assert group_rewards(clean, "drop") == {"ok": 1.0, "wrong": 0.0}
    assert left_out(clean, "drop") == {"ok": None, "wrong": None}


def test_the_trainer_bridges_never_train_an_infra_error() -> None:
    ok, wrong, starved = results()
    assert trainable(ok) and trainable(wrong)
    assert not trainable(starved)  # a graded status and a reward, but the stack failed it
    assert absent_reason(starved) == "infra_error:inference_backend"
    never_started = session("x", SessionStatus.HARNESS_FAILED, 0.0, harness_started=False)
    assert not trainable(never_started)
    assert absent_reason(never_started) == "infra_error:sandbox_start"
    assert left_out(results(), "shrink") == {
        "ok": None,
        "wrong": None,
        "starved": absent_reason(starved),
    }


class _FinishedTask:
    """A PolarClient's `wait` and `load_traces` for one finished task (the export reads
    nothing else of it here)."""

    storage = None

    def __init__(self, sessions: list[SessionResult]) -> None:
        self.result = TaskResult(task_id="t", sessions=sessions)
        self.loaded: list[str] = []

    async def wait(self, workflow_id: str, timeout_s: float | None = None) -> TaskResult:
        return self.result

    def load_traces(self, session: SessionResult) -> list[Trace]:
        self.loaded.append(session.session_id)
        return [
            t
            for t in scored_group("broadcast", GROUP)
            if t.provenance.session_id == session.session_id
        ]


async def test_an_export_leaves_infra_error_sessions_out() -> None:
    polar = _FinishedTask(results())
    collected = await collect_workflow(polar, "wf", with_records=False)  # type: ignore[arg-type]
    sessions = {t.provenance.session_id for t in collected.traces}
    assert sessions == {"ok", "wrong"}
    assert polar.loaded == ["ok", "wrong"]  # starved's traces are never read
    assert set(collected.rewards) == {"ok", "wrong"}
    assert collected.source["left_out"]["starved"].startswith("infra_error:inference_backend")


def test_the_trl_bridge_masks_an_infra_error_and_names_a_dropped_group() -> None:
    rollout = PolarRolloutFunc(trl_tests.TEMPLATE, prefetch=False)
    ok = trl_tests.session("s0", 0, SessionStatus.COMPLETED, 1.0)
    starved = trl_tests.session("s1", 1, SessionStatus.HARNESS_FAILED, 0.0)
    starved.harness_started, starved.unserved_calls = True, 2
    group = GroupRun("wf", TaskResult(task_id="digits-1", sessions=[ok, starved]))
    group.sessions = [
        (ok, [trl_tests.trace("t0", "s0", 0, 100)]),
        (starved, [trl_tests.trace("t1", "s1", 0, 200)]),  # traces, a 0: never trained
    ]
    rows = rollout.rows([group], trl_tests.fake_trainer())
    assert rows["polar_trace_id"] == ["t0", None]
    assert rows["polar_reward"] == [1.0, None]
    assert rollout.stats.unscored_reasons == {"infra_error:inference_backend": 1}
    # under `drop`, the group's other session is left out by name too
    dropped = GroupRun("wf", group.result, [(ok, []), (starved, [])])
    dropped.left_out = {k: v for k, v in left_out([ok, starved], "drop").items() if v}
    rollout.rows([dropped], trl_tests.fake_trainer())
    reasons = rollout.stats.unscored_reasons
    assert reasons["infra_error:inference_backend"] == 2
    assert [r for r in reasons if r.startswith("group dropped")] != []
