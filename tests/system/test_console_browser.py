"""The console in a real browser (issue 34, items 6 and 7): headless Chromium (Debian's, through
Selenium and chromedriver) on the console served over real sessions of the scripted stack.

Four tasks of one session each run first: one that passes, one its evaluator fails
(reward 0), one whose model calls the gateway cannot serve (`infra_error`), and one whose
harness plants the injection corpus (tests/support/injection_corpus.py) in its model
requests and replies, tool output, patch (file names and content), artifact names, stdout,
stderr and evaluator output. The browser clicks through tasks → task → session → trace →
grade of the first three and checks what is shown; then it opens every page of the hostile
session and checks that no payload ran: `window.__pwned` unset, no alert, no element or
attribute that is not the console's own, no request to another origin (the network log and
a canary server), no CSP report in the browser's console. A control page without the
console (the corpus as raw HTML on the canary's origin) shows the checks catch a payload
that runs. POLAR_CONSOLE_SCREENSHOTS=DIR saves a PNG of each page of the passing session.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.console import create_app
from app.console.safety import BIDI_CONTROLS, shown_control
from polar.contracts import SessionResult
from polar.settings import Settings
from tests.support.browser import (
    Canary,
    alert_open,
    browser_errors,
    canary_server,
    chromium_missing,
    foreign_markup,
    headless_chromium,
    requests_made,
)
from tests.support.console_sessions import CALL_MODEL_ONCE, console_spec, demo_repo, run_one
from tests.support.injection_corpus import (
    HOSTILE_COMMAND,
    HOSTILE_EVALUATOR,
    file_named,
    hostile_replies,
    payloads,
    plant,
)
from tests.support.scripted_backend import serve_app, text
from tests.support.scripted_stack import running_scripted_stack

pytestmark = pytest.mark.skipif(
    chromium_missing() is not None, reason=f"no browser: {chromium_missing()}"
)

HAIKU = [
    "Sessions fan out wide,",
    "Rollouts run, rewards come home,\ntokens learn their place.",
]
SHOTS = os.environ.get("POLAR_CONSOLE_SCREENSHOTS")


@dataclass
class Sessions:
    """The console's URL over the four tasks' sessions, and the corpus planted."""

    url: str
    web_ui: str
    prefix: str
    passed: tuple[str, SessionResult]
    failed: tuple[str, SessionResult]
    infra: tuple[str, SessionResult]
    hostile: tuple[str, SessionResult]
    corpus: list[str]
    canary: Canary


@pytest.fixture(scope="module")
async def sessions(
    devstack: object, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Sessions]:
    prefix = f"browser-{uuid.uuid4().hex[:6]}"
    repo = demo_repo(tmp_path_factory.mktemp("console-browser"))
    with canary_server() as canary:
        corpus = payloads(canary.url)
        plant(repo, corpus)
        async with running_scripted_stack(base_settings, []) as stack:
            stack.backend.push(*[text(line) for line in HAIKU])
            passed = await run_one(stack, console_spec(f"{prefix}-pass", "python agent.py", repo))
            stack.backend.push(*[text(line) for line in HAIKU])
            never = {"kind": "command", "command": "grep -q 'never written' answer.txt"}
            failed = await run_one(
                stack, console_spec(f"{prefix}-fail", "python agent.py", repo, evaluator=never)
            )
            stack.backend.push(*hostile_replies(corpus))
            hostile_eval = {"kind": "command", "command": HOSTILE_EVALUATOR}
            hostile = await run_one(
                stack,
                console_spec(f"{prefix}-hostile", HOSTILE_COMMAND, repo, evaluator=hostile_eval),
            )
            # nothing left to reply: the backend answers 500, the call is unserved
            infra = await run_one(
                stack,
                console_spec(
                    f"{prefix}-infra", CALL_MODEL_ONCE, repo, infra_errors={"group": "shrink"}
                ),
            )
            settings = stack.settings.model_copy(update={"console_tokenizer_dir": None})
            with serve_app(create_app(settings)) as url:
                yield Sessions(
                    url,
                    settings.temporal_ui_base_url,
                    prefix,
                    passed,
                    failed,
                    infra,
                    hostile,
                    corpus,
                    canary,
                )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium() as driver:
        yield driver


def test_the_sessions_ended_as_planned(sessions: Sessions) -> None:
    runs = {
        "passed": sessions.passed,
        "failed": sessions.failed,
        "infra": sessions.infra,
        "hostile": sessions.hostile,
    }
    outcomes = {
        name: (s.outcome.outcome.value if s.outcome else None, s.reward)
        for name, (_, s) in runs.items()
    }
    assert outcomes == {
        "passed": ("ok", 1.0),
        "failed": ("policy_failure", 0.0),
        "infra": ("infra_error", None),
        "hostile": ("ok", 1.0),
    }, outcomes


def shown(driver: Any, css: str) -> str:
    """The visible text of the first element `css` selects."""
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def click(driver: Any, css: str, page: str) -> None:
    """Click the link `css` selects and wait for the console's `page` (its main's id)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.find_element(By.CSS_SELECTOR, css).click()
    WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, f"main#{page}"))


def shot(driver: Any, name: str) -> None:
    """With POLAR_CONSOLE_SCREENSHOTS set: the viewport as DIR/console-{name}.png (small)."""
    if not SHOTS:
        return
    path = Path(SHOTS) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    from PIL import Image

    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=128)
    small.save(path, optimize=True)


def tasks_of(driver: Any, sessions: Sessions) -> None:
    """The tasks page, filtered to this module's tasks through its form."""
    from selenium.webdriver.common.by import By

    driver.get(sessions.url + "/")
    box = driver.find_element(By.CSS_SELECTOR, "form#filters input[name=task]")
    box.send_keys(sessions.prefix)
    click(driver, "form#filters button[type=submit]", "tasks")
    rows = driver.find_elements(By.CSS_SELECTOR, "tr.task-row")
    assert len(rows) == 4, [r.text for r in rows]


def row_of(driver: Any, workflow_id: str) -> str:
    return f'tr.task-row[data-workflow="{workflow_id}"]'


def test_a_passing_session_from_the_tasks_page_to_its_grade(
    sessions: Sessions, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    workflow_id, session = sessions.passed
    tasks_of(browser, sessions)
    row = row_of(browser, workflow_id)
    assert shown(browser, f"{row} .status") == "completed"
    assert shown(browser, f"{row} .done") == "1 / 1"
    assert shown(browser, f"{row} .outcomes") == "ok 1"
    assert shown(browser, f"{row} .reward") == "1.000"
    shot(browser, "tasks")

    click(browser, f"{row} a.task-link", "task")
    assert shown(browser, "#task-status") == "completed"
    assert shown(browser, "#task-mean-reward") == "1.000"
    srow = f'tr.session-row[data-session="{session.session_id}"]'
    assert shown(browser, f"{srow} .status") == "completed"
    assert shown(browser, f"{srow} .outcome") == "ok"
    assert shown(browser, f"{srow} .reward") == "1.000"
    assert shown(browser, f"{srow} .calls") == "2"
    assert browser.find_element(By.ID, "reward-histogram").is_displayed()
    shot(browser, "task")

    click(browser, f"{srow} a.session-link", "session")
    assert shown(browser, "#session-id") == session.session_id
    assert shown(browser, "#session-status") == "completed"
    assert shown(browser, "#session-outcome") == "ok"
    assert shown(browser, "#session-reward") == "1.000"
    calls = browser.find_elements(By.CSS_SELECTOR, "li.call")
    assert len(calls) == 2
    assert calls[0].find_element(By.CSS_SELECTOR, ".response-text").text == HAIKU[0]
    assert "trained" in calls[0].find_element(By.CSS_SELECTOR, ".training").text
    assert "run_harness" in shown(browser, "#timeline")
    shot(browser, "session")

    click(browser, "a.trace-link", "trace")
    trained = browser.find_elements(By.CSS_SELECTOR, "#response-tokens .tok.trained")
    prompt = browser.find_element(By.CSS_SELECTOR, "#prompt-tokens .tok.prompt")
    assert trained and trained[0].is_displayed()
    assert int(shown(browser, "#trained-count")) == len(trained) > 5
    shade = "return getComputedStyle(arguments[0]).backgroundColor"
    assert browser.execute_script(shade, trained[0]) != browser.execute_script(shade, prompt)
    assert "logprob" in trained[0].get_attribute("title")  # on hover
    shot(browser, "trace")

    browser.back()
    grade = browser.find_element(By.ID, "grade")
    browser.execute_script("arguments[0].scrollIntoView()", grade)
    assert grade.is_displayed()
    added = [e.text for e in grade.find_elements(By.CSS_SELECTOR, "pre.diff span.add")]
    assert "+" + HAIKU[1].splitlines()[-1] in added, grade.text  # answer.txt: a new file
    assert any("answer.txt" in e.text for e in grade.find_elements(By.CSS_SELECTOR, ".file"))
    shot(browser, "grade")


def test_a_failed_session_shows_its_zero_and_why(sessions: Sessions, browser: Any) -> None:
    workflow_id, session = sessions.failed
    tasks_of(browser, sessions)
    row = row_of(browser, workflow_id)
    assert shown(browser, f"{row} .outcomes") == "policy_failure 1"
    assert shown(browser, f"{row} .reward") == "0.000"
    click(browser, f"{row} a.task-link", "task")
    srow = f'tr.session-row[data-session="{session.session_id}"]'
    assert shown(browser, f"{srow} .outcome").startswith("policy_failure")
    assert shown(browser, f"{srow} .reward") == "0.000"
    click(browser, f"{srow} a.session-link", "session")
    assert shown(browser, "#session-status") == "completed"
    assert shown(browser, "#session-outcome").startswith("policy_failure · graded 0")
    assert shown(browser, "#session-reward") == "0.000"
    grade = shown(browser, "#grade")
    assert "grep -q 'never written' answer.txt" in grade or "exit" in grade, grade
    click(browser, "a.trace-link", "trace")
    assert shown(browser, "#trained-count") != "0"


def test_an_infra_error_session_shows_no_reward_and_the_unserved_call(
    sessions: Sessions, browser: Any
) -> None:
    workflow_id, session = sessions.infra
    tasks_of(browser, sessions)
    row = row_of(browser, workflow_id)
    assert "infra_error 1" in shown(browser, f"{row} .outcomes")
    assert "infra_error:inference_backend 1" in shown(browser, f"{row} .outcomes")
    assert shown(browser, f"{row} .reward") == "–"
    click(browser, f"{row} a.task-link", "task")
    srow = f'tr.session-row[data-session="{session.session_id}"]'
    assert "infra_error" in shown(browser, f"{srow} .outcome")
    click(browser, f"{srow} a.session-link", "session")
    outcome = shown(browser, "#session-outcome")
    assert outcome == "infra_error · infra_error:inference_backend", outcome
    assert shown(browser, "#session-reward") == "–"
    head = shown(browser, "li.call .call-head")  # the unserved call, as the gateway answered it
    assert " · 502 · " in head and "· failed" in head, head
    assert "model call failed: 502" in shown(browser, "pre.harness-log")


def as_shown(payload: str) -> str:
    """A payload as the console shows it: bidi controls as their code points."""
    return BIDI_CONTROLS.sub(shown_control, payload)


def pages_of(driver: Any, sessions: Sessions) -> list[str]:
    """Every page of the hostile session: its task in the list, its task, the session, and
    each console page it links to (calls, traces with every token, raw objects)."""
    from selenium.webdriver.common.by import By

    workflow_id, session = sessions.hostile
    driver.get(f"{sessions.url}/sessions/{session.session_id}")
    links = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "a[href]")]
    own = [u for u in links if u.startswith(sessions.url + "/") and "download=1" not in u]
    traces = [u + "&tokens=all" for u in own if "/traces/" in u and "/raw/" not in u]
    first = [f"{sessions.url}/?task={sessions.prefix}-hostile"]
    first.append(f"{sessions.url}/tasks/{workflow_id}")
    return list(dict.fromkeys(first + own + traces))


def test_the_injection_corpus_stays_text_on_every_page(sessions: Sessions, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    _, session = sessions.hostile
    started = time.monotonic()
    requests_made(browser), browser_errors(browser)  # what came before: not this test's
    pages = pages_of(browser, sessions)
    assert len(pages) > 20, pages  # calls, traces, logs, the patch, every payload artifact
    for url in pages:
        browser.get(url)
        assert alert_open(browser) is None, url
        assert browser.execute_script("return window.__pwned") is None, url
        assert foreign_markup(browser, sessions.web_ui) == [], url
        foreign = [u for u in requests_made(browser) if not u.startswith(sessions.url + "/")]
        assert foreign == [], url
        assert [e for e in browser_errors(browser) if "favicon.ico" not in e] == [], url
    assert sessions.canary.hits == []

    # the payloads are there, as text, where the policy put them
    browser.get(f"{sessions.url}/sessions/{session.session_id}")
    reply = browser.find_elements(By.CSS_SELECTOR, "pre.response-text")[-1].text
    named = [p for p in sessions.corpus if file_named(p)]
    artifacts = shown(browser, "#artifacts")
    patch = shown(browser, "pre.diff")
    stdout = shown(browser, "#grade")
    for payload in sessions.corpus:
        assert as_shown(payload) in reply, payload
        assert as_shown(payload) in stdout, payload  # the evaluator's output
    # the harness keeps no artifact whose name is not printable (the bidi one): the patch has it
    kept = [p for p in named if p.isprintable()]
    assert [p for p in kept if as_shown(p) not in artifacts] == [], artifacts
    assert [p for p in named if "+" + as_shown(p) not in patch] == [], patch
    print(
        f"\ninjection corpus: {len(sessions.corpus)} payloads ({len(named)} also as file and "
        f"artifact names), {len(pages)} pages in {time.monotonic() - started:.1f} s: 0 executed"
    )


def test_the_checks_catch_a_payload_that_runs(sessions: Sessions, browser: Any) -> None:
    """The same checks on the corpus as raw HTML without the console (the canary's own
    page, no CSP): they find what ran, so their silence on the console's pages means it."""
    # an alert stops the page, a refresh leaves it
    quiet = [p for p in sessions.corpus if "alert(" not in p and "refresh" not in p]
    sessions.canary.pages["/control"] = "<!doctype html><body>" + "\n".join(quiet)
    requests_made(browser), browser_errors(browser)
    browser.get(sessions.canary.url + "/control")
    time.sleep(1)
    assert browser.execute_script("return window.__pwned") == 1
    found = foreign_markup(browser, sessions.web_ui)
    assert {"<img>", "<svg>", "<iframe>", "<style>"} <= set(found), found
    assert any(u.startswith(sessions.canary.url + "/") for u in requests_made(browser))
    assert len(sessions.canary.hits) > 1
