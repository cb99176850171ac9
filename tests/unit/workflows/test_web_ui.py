"""The Markdown the Web UI shows of a task and a session, and the console links in it."""

from __future__ import annotations

from polar.console_links import console_memo, session_link, session_url, task_link, task_url
from workflows.web_ui import session_details, task_details

BASE = "https://console.example/"


def test_links_quote_ids_under_the_base() -> None:
    assert task_url(BASE, "task-a b") == "https://console.example/tasks/task-a%20b"
    assert session_url(BASE, "t-1-s0") == "https://console.example/sessions/t-1-s0"
    assert session_link(None, "t-1-s0") is None and task_link(None, "x") is None
    assert console_memo(None) is None
    assert console_memo(BASE) == {"polar_console_url": BASE}


def test_a_running_session_shows_its_stage_and_link() -> None:
    text = session_details("run", "running command harness on h1", BASE, "t-s0", ended={})
    assert text == (
        "**run**: running command harness on h1\n\n"
        "[Session in the Polar console](https://console.example/sessions/t-s0)"
    )


def test_an_ended_session_shows_status_reward_and_outcome() -> None:
    ended = {"status": "harness_failed", "reward": 0.0, "outcome": "policy_failure"}
    text = session_details("done", "ignored", None, "t-s0", ended=ended)
    assert text == "**done**: harness_failed · reward **0** · outcome **policy_failure**"
    no_reward = {"status": "error", "reward": None, "outcome": "infra_error:storage"}
    assert "reward **-** · outcome **infra_error:storage**" in session_details(
        "done", "", None, "t-s0", ended=no_reward
    )


def test_a_task_shows_done_of_total_mean_reward_and_outcome_counts() -> None:
    text = task_details("done", (3, 4), [1.0, 0.0, 0.5], {"policy_failure": 1, "ok": 2}, BASE, "w")
    assert text == (
        "**done**: 3/4 sessions done · mean reward **0.500** · outcomes ok 2, policy_failure 1"
        "\n\n[Task in the Polar console](https://console.example/tasks/w)"
    )
    assert task_details("running", (0, 2), [], {}, None, "w") == "**running**: 0/2 sessions done"
