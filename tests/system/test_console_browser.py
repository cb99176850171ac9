"""The console in a real browser (issue 34, items 6 and 7): headless Chromium (Debian's, through
Selenium and chromedriver) on the console served over real sessions of the scripted stack.

Six tasks run first: one that passes, one its evaluator fails (reward 0), one whose model
calls the gateway cannot serve (`infra_error`), a group of two sessions, and two whose
harnesses plant the injection corpus (tests/support/injection_corpus.py): one session in
its model requests and replies, tool output, patch (file names and content), artifact
names, stdout, stderr and evaluator output, and a group of two whose replies and patches
carry it (for the compare page). The first three and the group are tagged with policy
versions 1 and 2, as a trainer bridge tags its tasks. The browser clicks through tasks →
task → session → trace → grade of the first three, task → compare of the group, and the
training and topology pages, and checks what is shown; then it opens every page of the
hostile sessions and checks that no payload ran: `window.__pwned` unset, no alert, no element or
attribute that is not the console's own, no request to another origin (the network log and
a canary server), no CSP report in the browser's console. A control page without the
console (the corpus as raw HTML on the canary's origin) shows the checks catch a payload
that runs. POLAR_CONSOLE_SCREENSHOTS=DIR saves a PNG of each page of the passing session,
the group's compare page, and the training and topology pages.
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
from proxy.app import create_app as gateway_app
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
from tests.support.byte_tokenizer import END_TEXT, write_byte_tokenizer
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
GROUP_AGENT = '''"""One model call, then a file named by each payload that can name one."""
import json, pathlib, subprocess, sys
if subprocess.run([sys.executable, "-c", sys.argv[1]]).returncode:
    sys.exit("the model call failed")
for payload in json.loads(pathlib.Path("payloads.json").read_text()):
    if "/" not in payload and len(payload.encode()) < 200:
        pathlib.Path(payload).write_text(payload + "\\n")
'''
GROUP_COMMAND = "python group_agent.py " + CALL_MODEL_ONCE.removeprefix("python3 -c ")
"""The hostile group's harness: one model call (its reply a payload text), the payloads as
files (its patch)."""


async def run_group(stack: Any, spec: Any) -> str:
    """Submit a task of two sessions and wait for it: its workflow id."""
    run = await stack.polar.submit(spec.model_copy(update={"num_sessions": 2}))
    await stack.polar.wait(run, timeout_s=180)
    return str(run.workflow_id)


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
    group: str
    hostile_group: str
    backend: str
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
            (repo / "group_agent.py").write_text(GROUP_AGENT)
            stack.backend.push(*[text(line) for line in HAIKU])
            passed = await run_one(
                stack, console_spec(f"{prefix}-pass", "python agent.py", repo, policy_version=1)
            )
            stack.backend.push(*[text(line) for line in HAIKU])
            never = {"kind": "command", "command": "grep -q 'never written' answer.txt"}
            failed = await run_one(
                stack,
                console_spec(
                    f"{prefix}-fail", "python agent.py", repo, evaluator=never, policy_version=1
                ),
            )
            stack.backend.push(*[text(line) for line in HAIKU + HAIKU[::-1]])
            group = await run_group(
                stack, console_spec(f"{prefix}-group", "python agent.py", repo, policy_version=2)
            )
            hostile_text = "\n".join(corpus)
            stack.backend.push(text(f"A {hostile_text}"), text(f"B {hostile_text}"))
            hostile_group = await run_group(
                stack, console_spec(f"{prefix}-hostile-group", GROUP_COMMAND, repo)
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
            # a gateway's admin listener for the topology page (the stack's serves none)
            gateway = gateway_app(
                stack.settings.model_copy(update={"upstream_urls": stack.backend.url})
            )
            with serve_app(gateway.state.admin_app) as admin:
                # the scripted model's own tokenizer (a byte per token): traces decode as text
                tokenizer = write_byte_tokenizer(tmp_path_factory.mktemp("byte-tokenizer"))
                update = {"console_tokenizer_dir": tokenizer, "console_gateways": admin}
                settings = stack.settings.model_copy(update=update)
                with serve_app(create_app(settings)) as url:
                    yield Sessions(
                        url,
                        settings.temporal_ui_base_url,
                        prefix,
                        passed,
                        failed,
                        infra,
                        hostile,
                        group,
                        hostile_group,
                        stack.backend.url,
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
    """Click the link `css` selects and wait for the console's `page` (its main's id) to be
    the new document's: the old one gone first, since a page can link to its own kind (a
    filter form on the training page), whose old main would otherwise be read."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    before = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.CSS_SELECTOR, css).click()
    WebDriverWait(driver, 30).until(expected_conditions.staleness_of(before))
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
    assert len(rows) == 6, [r.text for r in rows]


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
    assert shown(browser, f"{row} .pass-1") == "1.000"
    assert shown(browser, f"{row} .pass-k") == "1.000 k=1"
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
    assert shown(browser, "#task-pass-1").startswith("1.000")
    assert shown(browser, "#no-audit").startswith("not audited")
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
    # decoded with the model's tokenizer: the trained tokens spell the reply, then its end
    spelled = "".join(t.get_attribute("textContent") for t in trained)
    assert spelled == HAIKU[0] + END_TEXT, spelled
    assert "byte-tokenizer" in shown(browser, "#decoded-by")
    assert "<|im_start|>user" in shown(browser, "#prompt-tokens")
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


def test_a_group_side_by_side(sessions: Sessions, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    tasks_of(browser, sessions)
    click(browser, f"{row_of(browser, sessions.group)} a.task-link", "task")
    picks = browser.find_elements(By.CSS_SELECTOR, "#compare-form input[name=session]")
    assert len(picks) == 2
    for pick in picks:  # tick both: the form sends them, the page compares them
        pick.click()
    click(browser, "#compare-selected", "compare")
    assert shown(browser, "#compare-table").count("1.000") >= 2  # both graded 1
    heads = browser.find_elements(By.CSS_SELECTOR, "#compare-table thead a.session-link")
    assert len(heads) == 2
    calls = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#compare-table td.calls")]
    assert calls == ["2", "2"]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#patches pre.diff")) == 2
    assert "answer.txt" in shown(browser, "#patches")
    divergence = shown(browser, "#compare-table td.divergence:last-child")
    assert divergence.startswith(("at call", "never")), divergence
    shot(browser, "compare")
    browser.back()
    click(browser, "#compare-group", "compare")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#compare-table thead a.session-link")) == 2


def test_the_training_and_topology_pages(sessions: Sessions, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(sessions.url + "/")
    click(browser, 'nav#pages a[href="/training"]', "training")
    browser.find_element(By.CSS_SELECTOR, "form#filters input[name=task]").send_keys(
        sessions.prefix
    )
    click(browser, "form#filters button[type=submit]", "training")
    v1, v2 = "#version-1", "#version-2"
    assert shown(browser, f"{v1} .tasks") == "2" and shown(browser, f"{v1} .reward") == "0.500"
    assert shown(browser, f"{v1} .outcomes") == "ok 1 policy_failure 1"
    assert shown(browser, f"{v2} .tasks") == "1" and shown(browser, f"{v2} .sessions") == "2"
    assert shown(browser, f"{v2} .reward") == "1.000"
    assert int(shown(browser, f"{v1} .trained")) > 0 and int(shown(browser, f"{v2} .trained")) > 0
    bars = browser.find_elements(By.CSS_SELECTOR, "#reward-chart .bar")
    heights = [b.size["height"] for b in bars]
    assert len(bars) == 2 and 0 < heights[0] < heights[1], heights  # 0.5 and 1.0
    shot(browser, "training")

    click(browser, 'nav#pages a[href="/topology"]', "topology")
    queues = shown(browser, "#queues")
    assert "-init" in queues and "-postrun" in queues
    assert browser.find_element(By.ID, "services").is_displayed()
    replica = shown(browser, "#gateways table.replicas tr.replica")  # the stack's backend
    assert replica.startswith(sessions.backend) and " up " in f" {replica} ", replica
    shot(browser, "topology")


def as_shown(payload: str) -> str:
    """A payload as the console shows it: bidi controls as their code points."""
    return BIDI_CONTROLS.sub(shown_control, payload)


def pages_of(driver: Any, sessions: Sessions) -> list[str]:
    """Every page of the hostile sessions: their tasks in the list, their tasks, the compare
    page of the hostile group, each session, and each console page they link to (calls,
    traces with every token, raw objects); and the training and topology pages."""
    from selenium.webdriver.common.by import By

    workflow_id, session = sessions.hostile
    compare = f"{sessions.url}/tasks/{sessions.hostile_group}/compare"
    own: list[str] = []
    for start in (f"{sessions.url}/sessions/{session.session_id}", compare):
        driver.get(start)
        links = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "a[href]")]
        own += [u for u in links if u.startswith(sessions.url + "/") and "download=1" not in u]
    group_sessions = [u for u in own if "/sessions/" in u and u.count("/") == 4]
    for start in group_sessions:  # the hostile group's sessions and what they link to
        driver.get(start)
        links = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "a[href]")]
        own += [u for u in links if u.startswith(sessions.url + "/") and "download=1" not in u]
    traces = [u + "&tokens=all" for u in own if "/traces/" in u and "/raw/" not in u]
    first = [f"{sessions.url}/?task={sessions.prefix}-hostile"]
    first += [
        f"{sessions.url}/tasks/{workflow_id}",
        f"{sessions.url}/tasks/{sessions.hostile_group}",
    ]
    first += [
        compare,
        f"{sessions.url}/training?task={sessions.prefix}",
        f"{sessions.url}/topology",
    ]
    return list(dict.fromkeys(first + own + traces))


def test_the_injection_corpus_stays_text_on_every_page(sessions: Sessions, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    _, session = sessions.hostile
    started = time.monotonic()
    requests_made(browser), browser_errors(browser)  # what came before: not this test's
    pages = pages_of(browser, sessions)
    assert len(pages) > 30, pages  # calls, traces, logs, the patch, every payload artifact
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

    # and side by side: both replies, where the group's conversations part, and both patches
    browser.get(f"{sessions.url}/tasks/{sessions.hostile_group}/compare")
    parted = shown(browser, "#diverged-1")
    sides = " ".join(e.text for e in browser.find_elements(By.CSS_SELECTOR, ".side pre"))
    patches = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#patches pre.diff")]
    assert "Call 0" in parted and len(patches) == 2
    for payload in sessions.corpus:
        assert as_shown(payload) in sides, payload
    for patch in patches:
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
