"""Hostile text stays text: every console page rendered from data full of injection
payloads has only the console's own tags and attributes, links only to its own paths and
the configured Web UI, no secret, and every response carries the strict CSP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from app.console import create_app
from app.console.compare import CallSide, Compared, Divergence
from app.console.filters import TaskFilters
from app.console.safety import CSP, raw_key_allowed
from app.console.server import Console
from app.console.topology import Gateway, Poller, Pool, Queue, Replica, Topology
from app.console.training import by_version
from app.task_audit import ProbeResult, TaskAudit
from polar.settings import Settings
from polar.storage import Storage
from tests.support.console_views import (
    hostile_views,
    markup_is_the_consoles,
    session_row,
    task_row,
)
from tests.support.ports import free_port

TEMPLATES = Path(__file__).resolve().parents[4] / "app" / "console" / "templates"
PAYLOADS = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "' onmouseover='alert(1)",
    "javascript:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "</textarea><script>alert(2)</script>",
    "</pre><style>body{background:url(//evil.example/x)}</style>",
    '<div style="width: expression(alert(1))">css</div>',
    '<a href="javascript:alert(1)">click</a>',
    "<iframe src=//evil.example></iframe>",
    "<svg onload=alert(1)>",
    "{{ 7*7 }} {% raw %}",
    "abc\u202edcba\u2066x\u2069",
]
SECRETS = {
    "s3_access_key": "AKIA-console-test-key",
    "s3_secret_key": "s3-secret-console-0123456789",
    "session_secret": "session-secret-console-0123456789",
    "admin_token": "admin-token-console-0123456789",
}
SESSION_KEY = "pk-eyJzIjoiczEiLCJ0IjoidDEifQ.c2lnbmF0dXJlLW9mLXRoZS1rZXk"


def settings() -> Settings:
    return Settings(
        temporal_address=f"127.0.0.1:{free_port()}",
        temporal_ui_port=8233,
        console_tokenizer_dir=None,
        **SECRETS,
    )


def audit(text: str) -> TaskAudit:
    probe = ProbeResult(
        probe=text, expect="bottom", status=text, reward=1.0, ok=False, seconds=2.0, error=text
    )
    return TaskAudit(
        task_id=text,
        origin=text,
        fingerprint="f" * 64,
        verdict="flagged",
        hacks=[text],
        reasons=[text],
        probes=[probe],
        seconds=1.0,
    )


def compared(text: str, divergence: Divergence | None) -> Compared:
    patch = {f"sessions/s-1/artifacts/{text}.patch": f"+++ b/{text}\n+{text}\n-{text}"}
    return Compared(session_row(text), 2, 10, 4, patch, 1, 1, 1, divergence)


def topology(text: str) -> Topology:
    """Every field a gateway's /health, a worker's identity or an error could fill."""
    replica = Replica(text, True, 1, 1, 1, 0, 1.0)
    gateway = Gateway(text, None, text, text, text, 10, [replica], [Pool(text, [text], text, [])])
    gateway.gauges = {"in_flight": 1.0, "held": 1.0, "paused": 1.0}
    queue = Queue(text, text, text, "activity", [Poller(text, None, 1.0)], text)
    return Topology([gateway, Gateway(text, text)], [queue], [text], [(text, text)])


def all_views(text: str) -> dict[str, dict[str, Any]]:
    """tests/support's views of every page, and the pages' parts it leaves out: the task
    page's audit verdict, the compare page."""
    views = hostile_views(text)
    task = views["task.html"]["view"]
    task.audit = audit(text)
    task.sessions.append(session_row(f"{text}-2"))  # two: the compare form and its ticks
    side = CallSide(text, text)
    items = [
        compared(text, None),
        compared(text, Divergence(1, "response", side, side)),
        compared(text, Divergence(2, "length", side, None)),
        compared(text, Divergence(None, "")),
    ]
    views["compare.html"] = {"view": task, "items": items}
    views["topology.html"] = {"view": topology(text)}
    tagged = task_row(text)
    tagged.policy_version, tagged.outcome_counts = 3, {text: 1, "ok": 1}
    versions = by_version([tagged])
    views["training.html"] = {"filters": TaskFilters(), "versions": versions, "read": 1, "limit": 1}
    return views


def render_all(text: str) -> dict[str, str]:
    console = Console(settings(), None, Storage(settings()))
    return {
        name: bytes(console.page(name, **context).body).decode()
        for name, context in all_views(text).items()
    }


def check_markup(page: str, html: str) -> None:
    markup_is_the_consoles(page, html, "http://127.0.0.1:8233/")


@pytest.mark.parametrize("payload", PAYLOADS)
def test_payloads_render_as_text_on_every_page(payload: str) -> None:
    pages = render_all(payload)
    assert set(pages) == {p.name for p in TEMPLATES.glob("*.html")} - {"base.html", "macros.html"}
    for page, html in pages.items():
        check_markup(page, html)
        if any(c in payload for c in "<>\"'&"):
            assert payload not in html, f"{page} shows the payload unescaped"
        assert "\u202e" not in html and "\u2066" not in html
    # the data is there, as text: the session page shows the payload escaped
    escaped = payload.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    escaped = escaped.replace('"', "&#34;").replace("'", "&#39;")
    if "\u202e" in payload:
        escaped = "abc&lt;U+202E&gt;dcba"
    assert escaped in pages["session.html"]
    assert escaped in pages["task.html"].split('id="task-audit"')[1]  # the audit's text too
    assert escaped in pages["compare.html"].split('id="diverged-1"')[1]  # a divergent call
    assert 'id="compare-form"' in pages["task.html"]
    assert pages["topology.html"].count(escaped) >= 10  # gateway, replica, pool, queue, host


def test_a_session_past_temporals_retention_renders_from_s3_alone() -> None:
    from tests.support.console_views import session_view

    view = session_view(PAYLOADS[1])
    view.execution, view.result, view.steps = None, None, []
    console = Console(settings(), None, Storage(settings()))
    html = bytes(console.page("session.html", view=view).body).decode()
    check_markup("session.html", html)
    assert 'id="no-workflow"' in html and "web-ui" not in html and PAYLOADS[1] not in html


def test_the_patch_is_a_diff_its_lines_escaped_redacted_and_bidi_shown() -> None:
    """The diff macro's own markup stays markup (the browser test found it escaped, the
    diff shown as `<pre class="diff">` text); the patch's lines in it are still data."""
    line = f"<script>alert(1)</script> {SECRETS['session_secret']} abc\u202edcba"
    html = render_all(line)["session.html"]
    assert '<pre class="diff"><span class="file">+++ b/&lt;script&gt;' in html
    assert '<span class="add">+&lt;script&gt;alert(1)&lt;/script&gt; [redacted] abc' in html
    assert "&lt;pre class=" not in html and "&lt;span class=" not in html
    assert SECRETS["session_secret"] not in html and "\u202e" not in html


def test_the_corpus_is_what_the_check_catches() -> None:
    """The markup check fails on the payloads themselves (it is not vacuous)."""
    caught = 0
    for payload in PAYLOADS:
        try:
            check_markup("raw", f"<pre>{payload}</pre>")
        except AssertionError:
            caught += 1
    assert caught >= 8


def test_no_page_shows_a_secret_or_a_session_key() -> None:
    leak = " ".join([*SECRETS.values(), SESSION_KEY])
    for page, html in render_all(f"printed by the harness: {leak}").items():
        for name, secret in SECRETS.items():
            assert secret not in html, f"{page} shows {name}"
        assert SESSION_KEY not in html and "pk-eyJ" not in html
        # the training page shows figures and outcome classes only (a label with `:` is not one)
        if page not in ("problem.html", "training.html") or "[redacted]" in html:
            assert "[redacted]" in html


def test_every_template_escapes_and_none_turns_it_off() -> None:
    console = Console(settings(), None, Storage(settings()))
    assert console.env.autoescape is True
    assert console.env.from_string("{{ x }}").render(x="<b>") == "&lt;b&gt;"
    for template in TEMPLATES.glob("*.html"):
        source = template.read_text().lower().replace(" ", "")
        for banned in (
            "autoescapefalse",
            "autoescape=false",
            "|safe",
            "markup(",
            "style=",
            "<script>",
        ):
            assert banned not in source, f"{template.name} has {banned}"


def test_every_response_has_the_strict_headers() -> None:
    client = TestClient(create_app(settings()))
    for url in ("/health", "/static/console.css", "/static/console.js", "/static/x.html"):
        response = client.get(url)
        assert response.headers["content-security-policy"] == CSP
        assert response.headers["x-content-type-options"] == "nosniff"
    assert client.get("/static/console.css").headers["content-type"].startswith("text/css")
    refused = client.get("/tasks/x'OR'1'='1")  # checked before any query is made
    assert refused.status_code == 400 and refused.headers["content-security-policy"] == CSP
    assert client.get("/raw/etc/passwd").status_code == 404
    down = client.get("/")  # no Temporal at the settings' address: said plainly
    assert down.status_code == 503 and "cannot reach Temporal" in down.text
    assert client.get("/sessions/..%2F..%2Fetc").status_code == 404


def test_raw_keys_are_polars_own_only() -> None:
    assert raw_key_allowed("sessions/s1/artifacts/x.stdout")
    assert raw_key_allowed("tasks/t1/result.json")
    for key in ("other/x", "sessions/../x", "sessions//x", "sessions/s1/./x", "/sessions/x"):
        assert not raw_key_allowed(key), key


def test_a_group_too_large_to_compare_whole_offers_its_ticks_only() -> None:
    console = Console(settings(), None, Storage(settings()))
    view = all_views("s")["task.html"]["view"]
    html = bytes(console.page("task.html", view=view).body).decode()
    assert 'id="compare-group"' in html and "(2 to 8)" in html
    view.sessions = [session_row(f"s{i}") for i in range(9)]
    html = bytes(console.page("task.html", view=view).body).decode()
    assert 'id="compare-group"' not in html and html.count('type="checkbox"') == 9
